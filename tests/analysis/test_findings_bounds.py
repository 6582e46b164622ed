"""Findings bounded by what a fix can save (stop 58's campaign, on traces whose answer is known by
construction): a side stream's CUDA-graph waits by the device's idle time, the exposed
communication net of waiting for a straggler, the straggler itself as a finding, kernel headroom
summed over ranks as the mean per rank, no saving beyond the run, the frame a host wait spent
most of its time in, and roofline rows without shapes matched by the what-if."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from kernel_atlas.analysis.findings import (
    Finding,
    communication_findings,
    launch_findings,
    per_rank_mean,
    straggler_findings,
    within_the_run,
)
from kernel_atlas.analysis.whatif import matching_rows
from kernel_atlas.cli import app


def _candidate(saving: float, rank: int = 0, device: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": [rank],
            "device": [device],
            "stream": [8],
            "frame": ["side.py(5): side_work"],
            "module": [None],
            "saving_us": [saving],
            "host_wait_us": [saving],
            "kernel_wait_us": [0.0],
            "stretches": [1],
            "kernels": [30],
            "kernels_per_stretch": [30.0],
            "gpu_us": [90.0],
            "first_ts_us": [0.0],
            "first_kernel": ["add"],
            "call_stack": [None],
        }
    )


def test_a_side_streams_graph_saving_is_at_most_the_devices_idle_time() -> None:
    # 30 adds on stream 8 with 783 µs of waits between them, while stream 7's GEMMs keep the device
    # busy: the device is idle 16 µs of them, so no CUDA graph of stream 8 can save more
    [finding] = launch_findings(_candidate(783.0).assign(device_idle_us=16.0))
    assert finding.saving_us == 16.0 and "16.0 µs of them while the device was idle" in finding.evidence
    # the device idle through all the waits: the waits
    [plain] = launch_findings(_candidate(783.0).assign(device_idle_us=783.0))
    assert plain.saving_us == 783.0 and "while the device was idle" not in plain.evidence
    assert launch_findings(_candidate(783.0).assign(device_idle_us=0.0)) == []  # never idle: no finding


def test_exposed_communication_leaves_out_waiting_for_the_last_rank() -> None:
    # 53 ms in all-reduces, none overlapped; 49 ms of it waiting for rank 3: 4 ms could be hidden
    devices = [{"rank": 0, "device": 0, "communication_us": 53_000.0, "overlap_us": 0.0}]
    [finding] = communication_findings(devices, {0: 49_000.0})
    assert finding.saving_us == 4_000.0 and "49,000.0 µs more waiting for the last rank" in finding.evidence
    assert communication_findings(devices, {0: 53_000.0}) == []  # all of it waiting: nothing to hide


def test_a_straggler_is_a_finding_worth_its_lead() -> None:
    straggler = {
        "rank": 3,
        "mean_late_us": 4_900.0,
        "collectives": 10,
        "of": 10,
        "expected": 2.5,
        "p_value": 1e-6,
        "wait_caused_us": 147_000.0,
        "lead_us": 49_000.0,
    }
    [finding] = straggler_findings([straggler])
    assert (finding.kind, finding.where, finding.saving_us) == ("straggler", "rank 3", 49_000.0)


def test_kernel_headroom_over_ranks_and_savings_within_the_run() -> None:
    gemm = Finding("gemm", "matmul", 2_217.7, "kernel_headroom", "compute-bound")
    comm = Finding("hide communication", "rank 0", 70_000.0, "exposed_communication", "exposed")
    averaged = per_rank_mean([gemm, comm], 4)
    assert averaged[0].saving_us == 2_217.7 / 4 and "summed over 4 ranks" in averaged[0].evidence
    assert averaged[1].saving_us == 70_000.0  # not a kernel's
    bounded = within_the_run(averaged, 61_650.0)
    assert bounded[1].saving_us == 61_650.0 and "at most the run's" in bounded[1].evidence


def test_rows_without_shapes_match_the_roofline_s_empty_texts() -> None:
    kernels = pd.DataFrame({"name": ["nccl", "gemm"], "input_dims": [None, "[[1]]"]})
    roofline = pd.DataFrame({"name": ["gemm", "nccl"], "input_dims": ["[[1]]", ""]})
    assert matching_rows(kernels, roofline, ["name", "input_dims"]).tolist() == [1, 0]


def test_a_host_wait_is_put_in_the_frame_it_spent_most_of_its_time_in(tmp_path: Path) -> None:
    # launch [10, 12] → k1 [20, 120]; cudaStreamSynchronize [15, 125]; log_metrics [130, 630]; launch [640, 642]
    # → k2 [650, 660], no range around them. The GPU idles [120, 650]: the wait began inside the sync, so no
    # range encloses it whole; log_metrics covers 500 µs of its 530 (was "between ops")
    def x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
        pid, tid = (0, 7) if cat == "kernel" else (1, 1)
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [
        x("cuda_runtime", "cudaLaunchKernel", 10, 2, correlation=1),
        x("kernel", "k1", 20, 100, correlation=1, device=0, stream=7),
        x("cuda_runtime", "cudaStreamSynchronize", 15, 110, correlation=2),
        x("user_annotation", "log_metrics", 130, 500),
        x("cuda_runtime", "cudaLaunchKernel", 640, 2, correlation=3),
        x("kernel", "k2", 650, 10, correlation=3, device=0, stream=7),
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    kernels = pd.read_parquet(out / "kernels.parquet").set_index("name")
    assert kernels.loc["k2", "wait_frame"] == "log_metrics"


def _launched(events: list[dict], op: str, at: float, corr: int, name: str, ts: float, dur: float, stream: int) -> None:
    """A CPU op at `at` launching kernel `name` on `stream` (correlation `corr`) that runs [ts, ts + dur]."""
    events += [
        {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": at, "dur": 3},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": at + 1, "dur": 1,
         "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
         "args": {"correlation": corr, "device": 0, "stream": stream}},
    ]  # fmt: skip


def _report(tmp_path: Path, events: list[dict]) -> tuple[pd.DataFrame, dict]:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    return pd.read_parquet(out / "graph_candidates.parquet"), json.loads((out / "report.json").read_text())


def test_a_side_streams_waits_under_another_streams_kernel_save_nothing(tmp_path: Path) -> None:
    # Stream 7 runs kernel L over [10, 1010] µs. Stream 20 runs 10 kernels of 5 µs at 20 + 55·i, each
    # launched 3 µs before it starts: 9 host waits of 50 µs, all under L. The device is idle only
    # later, 2,000 µs before kernel M — so graphing stream 20 saves nothing. The finding had claimed
    # 450 µs, capped only by the device's 2,000 µs of idle time elsewhere.
    events: list[dict] = []
    _launched(events, "aten::mm", 1, 1, "L", 10, 1000, 7)
    for i in range(10):
        s = 20 + 55 * i
        _launched(events, "aten::add", s - 4, 2 + i, "s", s, 5, 20)
    _launched(events, "aten::mm", 2999, 20, "M", 3010, 100, 7)
    candidates, report = _report(tmp_path, events)
    [row] = candidates.to_dict("records")
    assert (row["stream"], row["kernels"], row["saving_us"], row["device_idle_us"]) == (20, 10, 450.0, 0.0)
    assert not [f for f in report["findings"] if f["kind"] == "launch_bound"]


def test_a_graph_stretch_ends_at_a_new_step(tmp_path: Path) -> None:
    # Two profiler steps, each 5 kernels of 5 µs 10 µs apart (4 host waits of 5 µs); between them the
    # host spends 5 ms in a data loader. A graph is captured within one step: 2 stretches saving
    # 2 · 4 · 5 = 40 µs, not one of 10 kernels saving 20 + 5,055 + 20 = 5,095 µs.
    events: list[dict] = []
    for step, base in ((1, 0), (2, 5100)):
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": base,
             "dur": 90}
        )  # fmt: skip
        for i in range(5):
            t = base + 20 + 10 * i
            _launched(events, "aten::add", t - 4, 10 * step + i, "s", t, 5, 7)
    events.append({"ph": "X", "cat": "python_function", "name": "loader.py(9): next", "pid": 1, "tid": 1,
                   "ts": 95, "dur": 5000})  # fmt: skip
    candidates, report = _report(tmp_path, events)
    [row] = candidates.to_dict("records")
    assert (row["stretches"], row["kernels"], row["saving_us"], row["device_idle_us"]) == (2, 10, 40.0, 40.0)
    [finding] = [f for f in report["findings"] if f["kind"] == "launch_bound"]
    assert finding["saving_us"] == 40.0, finding["evidence"]
