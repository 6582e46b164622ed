"""The report's judgement layer weighs what it claims (campaign AU): findings, where optimisation
pays, graph candidates and the trust lines, on hand-built traces whose answers are worked out here.

Times are µs from the trace's start. The device is an H100 SXM: bf16 dense 989.4 TFLOP/s (its
data sheet), so a 4096³ GEMM (2·4096³ = 137,438,953,472 FLOP) attains 138.911 µs, a 2048³ one
17.364 µs and a 1024³ one 2.1706 µs; their 4096² × 3 and smaller operands move well under the
time 3.35 TB/s gives them, so every GEMM here is compute-bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.findings import Finding, communication_findings, launch_findings, rank
from kernel_atlas.analysis.trust import trust_facts
from kernel_atlas.analysis.waits import graph_savings
from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.report.terminal import brief_waits_lines
from kernel_atlas.report.trust_view import trust_lines
from tests.support.traces import ingested

runner = CliRunner()
BF = ["c10::BFloat16", "c10::BFloat16"]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
BASE = 1_000_000  # the traces' clock: µs


def _op(name: str, ts: float, dur: float, ext: int, dims: list | None = None, types: list | None = None) -> dict:
    args: dict[str, Any] = {"External id": ext}
    if dims is not None:
        args |= {"Input Dims": dims, "Input type": types}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": BASE + ts, "dur": dur, "args": args}


def _launch(ts: float, dur: float, corr: int, ext: int, name: str = "cudaLaunchKernel") -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": BASE + ts, "dur": dur,
            "args": {"correlation": corr, "External id": ext}}  # fmt: skip


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int, ext: int | None = None) -> dict:
    args: dict[str, Any] = {"correlation": corr, "device": 0, "stream": stream, "grid": [1024, 1, 1],
                            "block": [256, 1, 1]}  # fmt: skip
    if ext is not None:
        args["External id"] = ext
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": BASE + ts,
        "dur": dur,
        "args": args,
    }


def _sync(ts: float, corr: int) -> dict:
    return {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": -1, "ts": BASE + ts, "dur": 1,
            "args": {"cuda_sync_kind": "Context Sync", "stream": -1, "correlation": corr, "device": 0}}  # fmt: skip


def _report(tmp_path: Path, events: list[dict], gpu: str = "NVIDIA H100 80GB HBM3") -> tuple[Path, dict]:
    doc = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": gpu, "numSms": 132, "computeMajor": 9}]}
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    return out, json.loads((out / "report.json").read_text())


def _sidecomm() -> list[dict]:
    """A 4096³ GEMM on stream 7 at [30, 1030], four 5 µs clamps on stream 8 at 306, 346, 386, 426
    (35 µs waits between them, all under the GEMM), a sync to 1040; then an all-reduce on stream 20
    at [1112, 1612] while the host runs `aten::cat` over [1120, 3120] and syncs at [3120, 3130].
    The path is the host's: 22 µs of CPU, 8 of launches, the GEMM's 1000 and the cat's 2000 —
    the all-reduce ends at 1612, 1.5 ms before the host does: it is off the path."""
    dims = [[4096, 4096], [4096, 4096]]
    events = [_op("aten::mm", 20, 10, 1, dims, BF), _launch(22, 2, 202, 1), _kernel(GEMM, 30, 1000, 202, 7, 1)]
    for i in range(4):
        t = 300 + 40 * i
        events += [
            _op("aten::clamp_min", t, 10, 10 + i, [[1024, 1024], []], ["c10::BFloat16", "Scalar"]),
            _launch(t + 2, 2, 210 + i, 10 + i),
            _kernel(RELU, t + 6, 5, 210 + i, 8, 10 + i),
        ]
    events += [_launch(460, 580, 220, 0, "cudaDeviceSynchronize"), _sync(1039, 220)]
    events += [
        _op("nccl:all_reduce", 1100, 10, 30),
        _launch(1102, 2, 230, 30),
        _kernel(NCCL, 1112, 500, 230, 20, 30),
        _op("aten::cat", 1120, 2000, 31),
        _launch(3120, 10, 240, 0, "cudaDeviceSynchronize"),
        _sync(3129, 240),
    ]
    return events


@pytest.fixture(scope="module")
def sidecomm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    return _report(tmp_path_factory.mktemp("sidecomm"), _sidecomm())


# --- 1. exposed communication, weighed end to end ----------------------------------------------


def test_communication_off_the_path_is_no_finding(sidecomm: tuple[Path, dict]) -> None:
    """Nothing runs beside the all-reduce: 500 µs exposed. But it ends 1.5 ms before the host
    does: hiding it (or removing it) saves 0 end to end, and it had ranked second at 500 µs."""
    _, report = sidecomm
    [device] = report["devices"]
    assert device["communication_us"] == pytest.approx(500.0) and device["overlap_us"] == pytest.approx(0.0)
    assert report["critical_path"]["breakdown_pct"]["gpu_communication_bound"] == 0.0
    assert [f for f in report["findings"] if f["kind"] == "exposed_communication"] == []


def test_exposed_communication_is_capped_by_the_communication_on_the_path() -> None:
    """A device with 100 µs of communication, 20 µs overlapped: 80 µs exposed. A path of 1000 µs
    with 5 % of it communication kernels: removing them saves at most 50 µs, so hiding them
    does too. A path with 12 % (120 µs) leaves the 80 µs. A path of rank 1 alone leaves rank 0's
    communication off it (0: no finding); a path of ranks joined at their collectives caps each."""
    devices = [{"rank": 0, "device": 0, "communication_us": 100.0, "overlap_us": 20.0}]

    def path(pct: float, rank: int | None = 0, joint: int = 1) -> dict:
        return {
            "total_us": 1000.0,
            "breakdown_pct": {"gpu_communication_bound": pct},
            "rank": rank,
            "joint_ranks": joint,
        }

    [capped] = communication_findings(devices, None, path(5.0))
    assert capped.saving_us == pytest.approx(50.0)
    assert "at most 50.0 µs, its communication on the path" in capped.evidence
    assert "80.0 µs of the 100.0 µs the device had communication running (overlaps counted once)" in capped.evidence
    [free] = communication_findings(devices, None, path(12.0))
    assert free.saving_us == pytest.approx(80.0) and "at most" not in free.evidence
    assert communication_findings(devices, None, path(12.0, rank=1)) == []
    [joint] = communication_findings(devices, None, path(5.0, rank=None, joint=2))
    assert joint.saving_us == pytest.approx(50.0)
    [unweighed] = communication_findings(devices)  # no critical path: the exposed time, as before
    assert unweighed.saving_us == pytest.approx(80.0)


# --- 2. where optimisation pays: a kernel on the path past eight off it ------------------------


def test_a_gemm_on_the_path_is_weighed_past_eight_hidden_ones(tmp_path: Path) -> None:
    """An uncosted kernel on stream 7 at [20, 5020]; eight distinct 2048³ GEMMs of 400 µs each on
    stream 8, all under it (382.6 µs headroom each, none saved: they end by 3230); then a 1024³
    GEMM on stream 7 at [5020, 5120], on the path: 100 − 2.1706 = 97.83 µs headroom, all of it
    saved end to end (nothing after it). Candidates tried by headroom had been the eight hidden
    ones only, and the report said "nothing found that would save time"."""
    events = [
        _op("myext::custom_op", 0, 10, 1),
        _launch(2, 2, 301, 1),
        _kernel("my_custom_fused_kernel", 20, 5000, 301, 7, 1),
    ]
    for i in range(8):
        name = GEMM.replace("128x128x64", f"{64 + 16 * i}x128x64")
        h = 12 + 2 * i
        events += [
            _op("aten::mm", h, 1, 10 + i, [[2048, 2048], [2048, 2048]], BF),
            _launch(h, 1, 310 + i, 10 + i),
            _kernel(name, 30 + 400 * i, 400, 310 + i, 8, 10 + i),
        ]
    last = GEMM.replace("128x128x64", "256x128x64")
    events += [
        _op("aten::mm", 40, 5, 30, [[1024, 1024], [1024, 1024]], BF),
        _launch(41, 2, 330, 30),
        _kernel(last, 5020, 100, 330, 7, 30),
        _launch(50, 5080, 340, 0, "cudaDeviceSynchronize"),
        _sync(5129, 340),
    ]
    _, report = _report(tmp_path, events)
    pays = {row["kernel"]: row for row in report["critical_path"]["where_optimisation_pays"]}
    assert pays[last]["end_to_end_saving_us"] == pytest.approx(97.83, abs=0.01)
    assert pays[last]["kernel_end_to_end_saving_us"] == pytest.approx(97.83, abs=0.01)
    [finding] = [f for f in report["findings"] if f["kind"] == "kernel_headroom"]
    assert finding["kernel"] == last and finding["saving_us"] == pytest.approx(97.83, abs=0.01)
    hidden = [row for name, row in pays.items() if name != last]
    assert all(row["end_to_end_saving_us"] == 0.0 for row in hidden)
    assert all(row["headroom_us"] == pytest.approx(400 - 17.364, abs=0.01) for row in hidden)


# --- 3. twin rows: each claims its own saving --------------------------------------------------


def test_a_recorded_and_an_inferred_row_each_claim_their_own_saving(tmp_path: Path) -> None:
    """`aten::mm` 4096³ launches the GEMM at [20, 1020]; the same kernel, grid and block runs again
    at [1020, 1520] without a launch in the trace, its shapes borrowed: two roofline rows of the
    same name, launcher and shapes (one `inferred`). Both on the path, one after the other:
    row 1 alone saves 1000 − 138.911 = 861.089 µs, row 2 alone 500 − 138.911 = 361.089 µs, the
    two together 1222.18 µs. Each row had been credited both rows' 1222.18 µs."""
    events = [
        _op("aten::mm", 0, 10, 1, [[4096, 4096], [4096, 4096]], BF),
        _launch(2, 2, 401, 1),
        _kernel(GEMM, 20, 1000, 401, 7, 1),
        _kernel(GEMM, 1020, 500, 999, 7),  # launched before the profiling window opened
        _launch(30, 1500, 402, 0, "cudaDeviceSynchronize"),
        _sync(1529, 402),
    ]
    _, report = _report(tmp_path, events)
    pays = sorted(report["critical_path"]["where_optimisation_pays"], key=lambda r: -r["headroom_us"])
    assert [r["headroom_us"] for r in pays] == pytest.approx([861.089, 361.089], abs=0.01)
    assert [r["end_to_end_saving_us"] for r in pays] == pytest.approx([861.089, 361.089], abs=0.01)
    assert [r["kernel_end_to_end_saving_us"] for r in pays] == pytest.approx([1222.18, 1222.18], abs=0.01)
    [finding] = [f for f in report["findings"] if f["kind"] == "kernel_headroom"]
    assert finding["saving_us"] == pytest.approx(1222.18, abs=0.01)


# --- 4. graph candidates: capped by the device's idle time, HIP on ROCm ------------------------


def test_graph_savings_are_at_most_the_device_idle_during_the_waits() -> None:
    """Two places: 100 µs of waits while the device was idle 30 µs, and 50 µs idle 80 µs (idle
    reaches past the waits where one stretch's first wait began on an idle device): 30 + 50 = 80
    µs saved, of 150 µs of waits."""
    candidates = pd.DataFrame({"saving_us": [100.0, 50.0], "device_idle_us": [30.0, 80.0]})
    assert graph_savings(candidates) == {"saving_us": pytest.approx(80.0), "waits_us": pytest.approx(150.0)}


def test_waits_under_another_streams_kernel_save_nothing(sidecomm: tuple[Path, dict]) -> None:
    """The clamps' three 35 µs waits (105 µs) run under the GEMM: the device is never idle during
    them, so a graph saves 0 — the brief line had said "CUDA graphs would save up to 105.0 µs"."""
    _, report = sidecomm
    graphs = report["graph_candidates"]
    assert graphs["waits_us"] == pytest.approx(105.0) and graphs["saving_us"] == pytest.approx(0.0)
    assert graphs["graph"] == "CUDA"
    assert not [f for f in report["findings"] if f["kind"] == "launch_bound"]
    [line] = [line for line in brief_waits_lines(report) if line.startswith("launches:")]
    assert "CUDA graphs would save up to 0.0 µs" in line and "of 105.0 µs of waits" in line


def test_rocm_graph_candidates_say_hip() -> None:
    facts = {"launches": {"eager_activities": 16, "graph_replayed": 0}}
    facts["graph_candidates"] = {"count": 1, "stretches": 3, "saving_us": 1497.4, "waits_us": 1497.4, "graph": "HIP"}
    [line] = brief_waits_lines(facts)
    assert line == "launches: 16 eager, 0 graph-replayed; HIP graphs would save up to 1.50 ms (3 stretches in 1 place)"


def test_a_rocm_trace_says_hip_graphs(tmp_path: Path) -> None:
    """mi250_minitoy_train is a ROCm trace: its finding says HIP-graph, and so does the brief line."""
    out = tmp_path / "mi250.atlas"
    write_outputs(ingested("mi250_minitoy_train"), out)
    build_report(out)
    report = json.loads((out / "report.json").read_text())
    assert report["graph_candidates"]["graph"] == "HIP"
    assert any(line.startswith("launches:") and "HIP graphs" in line for line in brief_waits_lines(report))


# --- 5. the trust lines account for all of the GPU time ----------------------------------------


def test_the_trust_lines_account_for_all_of_the_gpu_time(tmp_path: Path) -> None:
    """Five custom ops without a cost model (400, 300, 200, 100 and 100 µs) and a costed 1024³
    GEMM (100 µs): 1200 µs of GPU time. Costed 100 µs (8.3 %); uncosted 400 (33.3 %), 300
    (25.0 %), 200 (16.7 %), and two more groups of 200 µs (16.7 %) that no line had named."""
    events = []
    for i, dur in enumerate([400, 300, 200, 100, 100]):
        t = 1000 * i
        events += [_op(f"myext::op{i}", t, 10, 1 + i), _launch(t + 2, 2, 700 + i, 1 + i),
                   _kernel(f"my_kernel_{i}", t + 20, dur, 700 + i, 7, 1 + i)]  # fmt: skip
    events += [
        _op("aten::mm", 5000, 10, 9, [[1024, 1024], [1024, 1024]], BF),
        _launch(5002, 2, 709, 9),
        _kernel(GEMM, 5020, 100, 709, 7, 9),
        _launch(5030, 100, 710, 0, "cudaDeviceSynchronize"),
        _sync(5129, 710),
    ]
    out, report = _report(tmp_path, events)
    trust = report["trust"]
    assert [r["time_us"] for r in trust["top_uncosted"]] == pytest.approx([400.0, 300.0, 200.0])
    assert trust["more_uncosted"]["groups"] == 2
    assert trust["more_uncosted"]["time_us"] == pytest.approx(200.0)
    assert trust["more_uncosted"]["pct"] == pytest.approx(100 * 200 / 1200)
    shares = [trust["costed_pct"], *(r["pct"] for r in trust["top_uncosted"]), trust["more_uncosted"]["pct"]]
    assert sum(shares) == pytest.approx(100.0)
    lines = trust_lines(trust)
    assert "  uncosted 200.0 µs (16.7 %): 2 more groups (roofline.parquet `note`)" in lines
    page = (out / "report.html").read_text()
    assert "uncosted 200.0 µs (16.7 %): 2 more groups" in page
    shown = runner.invoke(app, ["report", str(out), "--section", "trust"], env={"COLUMNS": "120"})
    assert "uncosted 200.0 µs (16.7 %): 2 more groups" in shown.output


def test_three_groups_or_fewer_need_no_remainder() -> None:
    roofline = pd.DataFrame(
        {"role": ["no model", "main"], "launcher": ["myext::a", "aten::mm"], "note": ["no cost model", ""],
         "op_time_us": [30.0, 70.0]}
    )  # fmt: skip
    trust = trust_facts(roofline, {"gpu_time_us": 100.0, "costed_time_us": 70.0}, {})
    assert trust["more_uncosted"] is None
    assert not any("more group" in line for line in trust_lines(trust))


# --- 6. the terminal says the savings overlap; the communication times are named apart ---------


def test_the_terminal_says_savings_overlap(sidecomm: tuple[Path, dict]) -> None:
    out, _ = sidecomm
    shown = runner.invoke(app, ["report", str(out), "--section", "findings", "--section", "categories"],
                          env={"COLUMNS": "80"})  # fmt: skip
    assert shown.exit_code == 0, shown.output
    head = shown.output.splitlines()[0]
    assert "can overlap and do not add up" in head and len(head) <= 80
    # the category table sums activities (overlaps in full); the device line's communication counts
    # the time any ran once
    assert "GPU time by category (summed: overlaps count in full)" in shown.output


# --- 7. no float-noise findings; no empty headroom table ---------------------------------------


def test_a_float_remainder_is_no_finding() -> None:
    """Four short kernels whose waits the device was idle 0.00195 µs of: a float's remainder, shown
    as 0.0 µs, had been finding #9."""
    candidates = pd.DataFrame(
        {"saving_us": [24.3], "device_idle_us": [0.00195], "kernels": [4], "stretches": [1], "module": [None],
         "call_stack": [None], "frame": ["aiter_backend.py(1654)"], "stream": [0], "gpu_us": [24.3],
         "host_wait_us": [24.3], "kernel_wait_us": [0.0]}
    )  # fmt: skip
    assert launch_findings(candidates, "HIP") == []
    noise = Finding("x", "y", 0.002, "host_wait", "e")
    kept = Finding("x", "z", 0.05, "host_wait", "e")  # shown as 0.1 µs
    assert rank([noise, kept]) == [kept]


def test_no_peaks_prints_no_empty_headroom_table(tmp_path: Path) -> None:
    """A GPU not in the catalog has no peaks: no attainable time, so no headroom to rank; one line
    says so where a heading over an empty table had been printed."""
    events = [
        _op("aten::mm", 0, 10, 1, [[1024, 1024], [1024, 1024]], BF),
        _launch(2, 2, 801, 1),
        _kernel(GEMM, 20, 100, 801, 7, 1),
        _launch(30, 100, 802, 0, "cudaDeviceSynchronize"),
        _sync(129, 802),
    ]
    out, _ = _report(tmp_path, events, gpu="Made-up Accelerator 9000")
    shown = runner.invoke(app, ["report", str(out), "--section", "headroom"], env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    assert "headroom: time above" not in shown.output
    assert "Where optimisation pays most: no headroom to rank: no peaks for this GPU (--device)" in shown.output
