"""The what-if keeps the host's recorded times, the time between its top-level ops included, and
says when a roofline speed-up has no cost to use (campaign BJ, classes 1 and 2). Every expected
value is derived by hand in the comments, from the events as written here or read from the raw
trace."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.critical_segments import path_span
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, what_if
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels
from tests.support.hostile import cli
from tests.support.traces import trace_path

T, G = {"pid": 100, "tid": 1}, {"pid": 0}
SYNC_NOTE = "no cuda_sync events in the trace: host syncs released by"
GEMM = "ampere_sgemm_128x64_tn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
CLAMP = "void at::native::vectorized_elementwise_kernel<4, launch_clamp_scalar>"


def op(name: str, ts: float, dur: float, eid: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, **T, "ts": ts, "dur": dur, "args": {"External id": eid}}


def call(name: str, ts: float, dur: float, corr: int, eid: int) -> dict[str, Any]:
    args = {"correlation": corr, "External id": eid, "cbid": 211}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, **T, "ts": ts, "dur": dur, "args": args}


def kernel(name: str, ts: float, dur: float, corr: int, stream: int) -> dict[str, Any]:
    args = {"correlation": corr, "External id": corr, "device": 0, "stream": stream, "grid": [1, 1, 1]}
    args["block"] = [128, 1, 1]
    return {"ph": "X", "cat": "kernel", "name": name, **G, "tid": stream, "ts": ts, "dur": dur, "args": args}


def ingested(tmp_path: Path, events: list[dict[str, Any]], name: str) -> Path:
    trace = tmp_path / f"{name}.json"
    device = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85000000000, "numSms": 132}
    trace.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [device], "traceEvents": events}))
    out = tmp_path / f"{name}.atlas"
    write_outputs(ingest_paths([trace]), out)
    return out


# --- class 1: the host's time between top-level ops holds in the what-if ---------------------------
# W2 (the tester's w2.json), one thread, one stream:
#   aten::mm [0,10] ⊃ cudaLaunchKernel [5,8] → the GEMM on stream 7 [15,115]
#   90 µs of Python no event records
#   aten::add [100,110] ⊃ cudaLaunchKernel [105,108] → the add on stream 7 [116,126] (queued behind the GEMM)
# Critical path (HTA's convention, unchanged): 5 (CPU) + 10 (launch) + 100 (GEMM) + 1 (gap) + 10 = 126 µs,
# spanning 0–126: nothing unweighted. No synchronize call anywhere: no note about host syncs.
# What-if: the host launches the add at 105 whatever the GPU does, so the add runs no earlier than
# 105–115. GEMM 2× (15–65) or 1000× (15–15.1): the add starts at 105 (not at 66 or 16.1), ends at
# 115: 126 → 115, saving 11 µs both. (The bug: 76 and 26.1 µs — the 90 µs of Python counted free.)
W2 = [
    op("aten::mm", 0, 10, 1),
    call("cudaLaunchKernel", 5, 3, 1, 1),
    kernel(GEMM, 15, 100, 1, 7),
    op("aten::add", 100, 10, 2),
    call("cudaLaunchKernel", 105, 3, 2, 2),
    kernel(ADD, 116, 10, 2, 7),
]


def test_a_faster_gemm_cannot_move_work_before_the_host_launched_it(tmp_path: Path) -> None:
    out = ingested(tmp_path, W2, "w2")
    kernels, host = load_kernels(out), load_host_events(out, 0)
    graph = build_graph(kernels, host, zero_weight_launches=True)
    path = longest_path(graph, graph.path_weight())
    assert path.length_us == pytest.approx(126.0)
    span, _ = path_span(graph, path)
    assert span is not None and span["unweighted_us"] == 0.0
    result = what_if(kernels, host, [parse_speedup(f"kernel={GEMM}:2x")])
    assert (result["baseline_us"], result["new_us"], result["saving_us"]) == (126.0, 115.0, 11.0)
    assert what_if(kernels, host, [parse_speedup(f"kernel={GEMM}:1000x")])["new_us"] == 115.0
    # the trace has no synchronize call: the note about host syncs is not said
    assert not any(SYNC_NOTE in note for note in graph.notes + result["notes"])


# W1 (the tester's w1.json), one thread, streams 7 and 8, no cuda_sync events:
#   aten::mm [0,50] ⊃ launch [10,20] → GEMM s7 [25,125]
#   aten::relu [60,100] ⊃ launch [70,80] → clamp s8 [85,135]
#   aten::add [110,130] ⊃ launch [115,120] → add s7 [126,166] (queued behind the GEMM)
#   cudaDeviceSynchronize [140,170] (released by the add, the device's last to end: 166)
#   aten::copy_ [175,185]
# Critical path (unchanged): 10 + 15 (launch) + 100 + 1 (gap) + 40 → the sync's end (0) → the
# copy_ entered (0, HTA's rule) → 10 = 176 µs of the 185 spanned: 9 unweighted (the sync's 4 µs
# after the add ended, and the 5 µs between the sync's return at 170 and copy_ at 175).
# What-if baseline: the same path with the host's 5 µs before copy_ held: 166 + 5 + 10 = 181.
# The host reaches the add's launch at 115 and the sync at 140 whatever the GPU does:
#   GEMM 2× (25–75): the add starts at max(75 + 1, 115) = 115, ends 155 → sync → 160 → 170 (saving 11)
#   GEMM 100× or op=matmul 1.5× (25–91.7): the same 115 bound → 170
#   add 2× (126–146): 146 + 5 + 10 = 161 (saving 20, as before)
#   the clamp 2× (stream 8, ending at 110 instead of 135, off the path): 181 (saving 0)
#   no launch gaps: the GEMM starts at 10 and ends at 110, the add at max(110, 115) = 115: 170
# (Under the old rule the host's 30 µs of gaps before the sync counted free: 145, 156, 176, 160.)
W1 = [
    op("aten::mm", 0, 50, 1),
    call("cudaLaunchKernel", 10, 10, 1, 1),
    kernel(GEMM, 25, 100, 1, 7),
    op("aten::relu", 60, 40, 2),
    call("cudaLaunchKernel", 70, 10, 2, 2),
    kernel(CLAMP, 85, 50, 2, 8),
    op("aten::add", 110, 20, 3),
    call("cudaLaunchKernel", 115, 5, 3, 3),
    kernel(ADD, 126, 40, 3, 7),
    call("cudaDeviceSynchronize", 140, 30, 4, 0),
    op("aten::copy_", 175, 10, 5),
]


def test_the_whatif_holds_the_host_before_the_launch_and_after_the_sync(tmp_path: Path) -> None:
    out = ingested(tmp_path, W1, "w1")
    kernels, host = load_kernels(out), load_host_events(out, 0)
    graph = build_graph(kernels, host, zero_weight_launches=True)
    path = longest_path(graph, graph.path_weight())
    assert path.length_us == pytest.approx(176.0)
    span, _ = path_span(graph, path)
    assert span is not None and span["unweighted_us"] == pytest.approx(9.0)
    # the trace has a cudaDeviceSynchronize and no cuda_sync events: the note is said
    assert any(SYNC_NOTE in note for note in graph.notes)

    def new(*specs: str, gaps: bool = False) -> tuple[float, float]:
        result = what_if(kernels, host, [parse_speedup(s) for s in specs], no_launch_gaps=gaps)
        return result["baseline_us"], result["new_us"]

    assert new("kernel=sgemm:2x") == (181.0, 170.0)
    assert new("kernel=sgemm:100x") == (181.0, 170.0)
    assert new("op=matmul:1.5x") == (181.0, 170.0)
    assert new("kernel=CUDAFunctor_add:2x") == (181.0, 161.0)
    assert new("kernel=clamp:2x") == (181.0, 181.0)
    assert new(gaps=True) == (181.0, 170.0)
    notes = what_if(kernels, host, [parse_speedup("kernel=sgemm:2x")])["notes"]
    assert any("counts 5.0 µs of the host's time between top-level ops" in note for note in notes)


def test_bert_gemms_1000x_end_no_earlier_than_the_host_launches(tmp_path: Path) -> None:
    """h100_bert_small_infer, from the raw trace: one host thread; its first host event starts at
    t0, its last kernel launch (cuLaunchKernel) 4,218.36 µs later; before it the thread spent
    21.37 µs in blocking calls (cudaDeviceSynchronize 5.97, cudaMemcpyAsync 7.76,
    cudaStreamSynchronize 7.64), the only host time a faster GPU can take off. So any speed-up
    ends no earlier than 4,218.36 − 21.37 = 4,196.99 µs into the run (the bug: 2,104.5 µs with
    the GEMMs 1000× faster)."""
    with gzip.open(trace_path("h100_bert_small_infer"), "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    host = [e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")]
    first = min(e["ts"] for e in host)
    last_launch = max(e["ts"] for e in host if "LaunchKernel" in e["name"])
    blocking = re.compile(r"^cuda(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyAsync)$")
    waited = sum(e["dur"] for e in host if blocking.match(e["name"]) and e["ts"] < last_launch)
    assert (round(last_launch - first, 2), round(waited, 2)) == (4218.36, 21.37)
    out = tmp_path / "bert.atlas"
    write_outputs(ingest_paths([trace_path("h100_bert_small_infer")]), out)
    kernels, host_events = load_kernels(out), load_host_events(out, 0)
    result = what_if(kernels, host_events, [parse_speedup("category=gemm:1000x")])
    assert result["new_us"] >= 4218.36 - 21.37
    assert result["new_us"] <= result["baseline_us"]


# --- class 2: a roofline speed-up on activities without a cost ------------------------------------


def _roofline(name: str, launcher: str, attainable: float, headroom: float) -> pd.DataFrame:
    """One main roofline row, its call recorded without shapes."""
    columns: dict[str, list[Any]] = {"name": [name], "launcher": [launcher], "input_dims": [None]}
    columns |= {"input_types": [None], "op_mapping": ["op"], "role": ["main"], "attainable_us": [attainable]}
    columns |= {"headroom_us": [headroom], "count": [1], "formulas": [1]}
    return pd.DataFrame(columns)


def test_a_roofline_speedup_without_a_cost_says_the_saving_is_unknown(tmp_path: Path) -> None:
    """W1 ingested and reported: it records no shapes, so no kernel of it has a roofline cost. The
    GEMM to the roofline: 1 activity, 0 with a cost — no new time and no saving (unknown, never a
    known 0.0), on the terminal and in --json."""
    out = ingested(tmp_path, W1, "w1")
    assert cli("report", out).code == 0
    done = cli("whatif", out, "--speedup", "kernel=sgemm:roofline", "--json")
    assert done.code == 0, done.output
    result = json.loads(done.stdout)
    assert (result["new_us"], result["saving_us"], result["saving_pct"], result["gpu_us_saved_locally"]) == (
        None,
        None,
        None,
        None,
    )
    assert result["changes"] == [
        {"change": "kernel=sgemm:roofline", "activities": 1, "gpu_us": 100.0, "no_cost": 1, "no_cost_gpu_us": 100.0}
    ]
    assert result["no_cost"] == 1
    assert any("none of its 1 selected activities has a roofline cost" in note for note in result["notes"])
    text = cli("whatif", out, "--speedup", "kernel=sgemm:roofline")
    assert text.code == 0, text.output
    assert "saving unknown" in text.stdout and "0 with a roofline cost" in text.stdout
    assert "saving 0.0" not in text.stdout and "end to end: 0.0" not in text.stdout


def test_a_roofline_speedup_counts_only_the_activities_with_a_cost(tmp_path: Path) -> None:
    """W1 with a hand-set roofline: the add (aten::add) attainable in 20 µs (headroom 20), the GEMM
    without a row. GEMM and add to the roofline: 2 activities, 1 without a cost (the GEMM, 100
    µs); the add 40 → 20 µs saves 20 end to end (181 → 161, as add 2× above), the GEMM's part
    unknown and said so."""
    out = ingested(tmp_path, W1, "w1")
    kernels, host = load_kernels(out), load_host_events(out, 0)
    roofline = _roofline(ADD, "aten::add", 20.0, 20.0)
    result = what_if(kernels, host, [parse_speedup("kernel=sgemm|CUDAFunctor_add:roofline")], roofline=roofline)
    assert (result["baseline_us"], result["new_us"], result["saving_us"]) == (181.0, 161.0, 20.0)
    assert (result["no_cost"], result["changes"][0]["no_cost"], result["changes"][0]["no_cost_gpu_us"]) == (1, 1, 100.0)
    assert any("1 of its 2 selected activities have no roofline cost" in note for note in result["notes"])
    # the GEMM sped up by a factor besides: every selected activity changed, nothing unknown
    both = [parse_speedup("kernel=sgemm|CUDAFunctor_add:roofline"), parse_speedup("kernel=sgemm:2x")]
    assert what_if(kernels, host, both, roofline=roofline)["no_cost"] == 0


def test_alexnet_convolutions_recorded_without_shapes_have_no_roofline_saving(tmp_path: Path) -> None:
    """a100_alexnet_train, from the raw trace: no event has `Input Dims` (recorded without shapes);
    its 10 aten::cudnn_convolution calls launch 30 kernels, 12 of them cudnn's nchwToNhwc layout
    copies — 18 convolution kernels, none of which a roofline can cost: `op=conv:roofline` selects
    18 activities, 0 with a cost, and its saving is unknown (it had said "saving 0.0 µs")."""
    with gzip.open(trace_path("a100_alexnet_train"), "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    assert not any("Input Dims" in (e.get("args") or {}) for e in events)
    convs = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::cudnn_convolution"]
    inside = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime"
        and any(c["tid"] == e["tid"] and c["ts"] <= e["ts"] <= c["ts"] + c["dur"] for c in convs)
    }
    launched = [e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in inside]
    layout = [e for e in launched if "nchwToNhwcKernel" in e["name"]]
    assert (len(convs), len(launched), len(layout)) == (10, 30, 12)
    out = tmp_path / "alexnet.atlas"
    write_outputs(ingest_paths([trace_path("a100_alexnet_train")]), out)
    assert cli("report", out).code == 0
    done = cli("whatif", out, "--speedup", "op=conv:roofline", "--json")
    assert done.code == 0, done.output
    result = json.loads(done.stdout)
    change = result["changes"][0]
    assert (change["activities"], change["no_cost"]) == (18, 18)
    assert (result["new_us"], result["saving_us"]) == (None, None)
    assert any("none of its 18 selected activities has a roofline cost" in note for note in result["notes"])
    text = cli("whatif", out, "--speedup", "op=conv:roofline").stdout
    assert "saving unknown" in text and "saving 0.0" not in text
