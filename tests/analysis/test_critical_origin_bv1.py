"""Campaign BV, classes 1 and 2: chains that start late, and non-blocking `cudaMemcpyAsync`.

Class 1: the graph had no common origin — each host thread's chain and each GPU activity of no
launch started at distance 0 wherever it started in time, so the what-if compared chains by weight
alone and credited savings to work that does not hold the run's end. The what-if (and where
optimisation pays, and so the kernel findings) now measure from the window's start; the reported
path stays the heaviest chain (HTA's comparison) and says in a note where another chain ends later.

Class 2: a `cudaMemcpyAsync` whose copy started after the call returned (pinned memory) was counted
as a blocking wait, its CPU time off the path.

Every expected value is derived by hand in the comments from the events written here (the tester's
cases c4, c5, c6, c7 and c10 of /tmp/campBV/cases, the same events)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.critical_segments import breakdown_us, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, what_if
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.store.outputs import load_kernels

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85000000000, "numSms": 108}
A100 |= {"computeMajor": 8, "computeMinor": 0}
GEMM = "ampere_sgemm_128x64_tn"
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >"
)
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
SHAPES = {"Input Dims": [[256, 256], [256, 256]], "Input type": ["float", "float"]}


def op(name: str, ts: float, dur: float, eid: int, tid: int = 1) -> dict[str, Any]:
    args = {"External id": eid, **SHAPES}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def call(name: str, ts: float, dur: float, corr: int, tid: int = 1) -> dict[str, Any]:
    args = {"correlation": corr, "External id": corr, "cbid": 211}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu(name: str, ts: float, dur: float, corr: int, stream: int, cat: str = "kernel") -> dict[str, Any]:
    args = {"correlation": corr, "External id": corr, "device": 0, "stream": stream}
    if cat == "kernel":
        args |= {"grid": [1, 1, 1], "block": [128, 1, 1]}
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}


def ingested(tmp_path: Path, events: list[dict[str, Any]], name: str) -> Path:
    trace = tmp_path / f"{name}.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [A100], "traceEvents": events}))
    out = tmp_path / f"{name}.atlas"
    write_outputs(ingest_paths([trace]), out)
    return out


def saving(out: Path, spec: str) -> float:
    kernels, host = load_kernels(out), load_host_events(out, 0)
    return what_if(kernels, host, [parse_speedup(spec)])["saving_us"]


def path_breakdown(out: Path) -> tuple[float, dict[str, float]]:
    """The exact critical path's length and its µs by category (`breakdown_us`)."""
    graph = build_graph(load_kernels(out), load_host_events(out, 0))
    path = longest_path(graph)
    return path.length_us, breakdown_us(segments(graph, path))


def reported(out: Path) -> dict[str, Any]:
    build_report(out)
    return json.loads((out / "report.json").read_text())


def pays(facts: dict[str, Any], kernel: str) -> float:
    (row,) = [r for r in facts["critical_path"]["where_optimisation_pays"] if r["kernel"] == kernel]
    return row["end_to_end_saving_us"]


def kernel_findings(facts: dict[str, Any]) -> list[str]:
    return [f["what"] for f in facts["findings"] if f["kind"] == "kernel_headroom"]


# --- class 1a (c6): a kernel off what holds the end claims no saving -------------------------------
#   thread 2: aten::mul [0,10] ⊃ cudaLaunchKernel [2,5] → mul, stream 20 [10,150]
#   thread 1: aten::mm [100,110] ⊃ cudaLaunchKernel [102,105] → sgemm, stream 7 [110,200]
#   thread 1: cudaDeviceSynchronize [120,210] (no cuda_sync events: released by the last activity
#   to end while it ran, the sgemm at 200, and by each stream's last: the mul at 150)
# The sync returns because the sgemm ended: measured from the window's start (0) the run's work
# ends at 200 (thread 1 starts at 100: 2 CPU + 8 launch + 90 sgemm). The mul chain (2 + 8 + 140 =
# 150 µs of weight) ends at 150.
#   mul 2× → [10,80]: the sync still waits for the sgemm at 200 — saving 0 (the bug: 50).
#   sgemm 2× → [110,155]: released at max(150, 155) = 155 — saving 200 − 155 = 45 (the bug: 0).
#   sgemm at its roofline (about 2 µs: ends near 112): released at the mul's 150 — saving 50.
#   mul at its roofline: saving 0 — no kernel finding for it.
# The reported path stays the heaviest chain (the mul's, 150 µs: cpu 2, launch 8, gpu 140) and a
# note says that the chain from aten::mm, 100 µs in, with 100 µs of work, ends 200 − 150 = 50 µs later.
C6 = [
    op("aten::mul", 0, 10, 1, tid=2),
    call("cudaLaunchKernel", 2, 3, 1, tid=2),
    gpu(MUL, 10, 140, 1, 20),
    op("aten::mm", 100, 10, 2),
    call("cudaLaunchKernel", 102, 3, 2),
    gpu(GEMM, 110, 90, 2, 7),
    call("cudaDeviceSynchronize", 120, 90, 3),
]


def test_a_kernel_that_ended_before_the_sync_returned_saves_nothing(tmp_path: Path) -> None:
    out = ingested(tmp_path, C6, "c6")
    assert saving(out, "kernel=Mul:2x") == 0.0
    assert saving(out, "kernel=sgemm:2x") == 45.0
    kernels, host = load_kernels(out), load_host_events(out, 0)
    result = what_if(kernels, host, [parse_speedup("kernel=sgemm:2x")])
    assert (result["baseline_us"], result["new_us"]) == (200.0, 155.0)


def test_the_findings_rank_the_kernel_that_holds_the_end(tmp_path: Path) -> None:
    facts = reported(ingested(tmp_path, C6, "c6"))
    assert pays(facts, MUL) == 0.0
    assert pays(facts, GEMM) == 50.0
    assert kernel_findings(facts) == [GEMM]
    path = facts["critical_path"]
    assert path["total_us"] == 150.0
    assert (path["breakdown_us"]["cpu_bound"], path["breakdown_us"]["gpu_kernel_launch_overhead"]) == (2.0, 8.0)
    assert path["breakdown_us"]["gpu_compute_bound"] == 140.0
    (note,) = [n for n in path["notes"] if n.startswith("measured from the window's start")]
    assert "reaches the end 50.0 µs later" in note
    assert "100.0 µs of work from the start of aten::mm (host thread 1), 100.0 µs in" in note


# --- class 1b (c5): a late thread's saving is not understated --------------------------------------
#   thread 1: aten::mm [0,10] ⊃ launch [2,5] → sgemm s7 [10,110]; cudaDeviceSynchronize [20,200]
#   thread 2: aten::mul [50,60] ⊃ launch [52,55] → mul s20 [60,190]
# The path is thread 2's chain: 2 + 8 + 130 = 140 µs (50 → 190), the sync returning at 200.
#   mul 2× → [60,125]: released at max(110, 125) = 125 instead of 190 — saving 65 (the bug: 30).
#   mul at its roofline (under 1 µs: ends by 61): released at the sgemm's 110 — saving 80.
C5 = [
    op("aten::mm", 0, 10, 1),
    call("cudaLaunchKernel", 2, 3, 1),
    gpu(GEMM, 10, 100, 1, 7),
    call("cudaDeviceSynchronize", 20, 180, 2),
    op("aten::mul", 50, 10, 3, tid=2),
    call("cudaLaunchKernel", 52, 3, 3, tid=2),
    gpu(MUL, 60, 130, 3, 20),
]


def test_a_late_threads_kernel_saves_from_where_its_thread_starts(tmp_path: Path) -> None:
    out = ingested(tmp_path, C5, "c5")
    assert saving(out, "kernel=Mul:2x") == 65.0
    facts = reported(out)
    assert facts["critical_path"]["total_us"] == 140.0
    assert pays(facts, MUL) == 80.0
    assert pays(facts, GEMM) == 0.0
    (found,) = kernel_findings(facts)  # the mul alone (its display name)
    assert "BinaryFunctor" in found
    assert not [n for n in facts["critical_path"]["notes"] if n.startswith("measured from the window's start")]


# --- class 1c (c7): an activity of no launch (launched before the profiler started) ----------------
#   mul on stream 20 [0,140], its launch not in the trace
#   aten::mm [100,110] ⊃ launch [102,105] → sgemm s7 [110,200]; cudaDeviceSynchronize [120,210]
# As in 1a, the sgemm ends last and releases the sync: from the window's start the work ends at
# 100 + 2 + 8 + 90 = 200. sgemm 2×: released at max(140, 155) = 155 — saving 45 (the bug: 0);
# mul 2×: saving 0 (the bug: 40). The path stays the mul (140 µs of weight, gpu) with the note:
# the chain from aten::mm ends 200 − 140 = 60 µs later.
C7 = [
    gpu(MUL, 0, 140, 9999, 20),
    op("aten::mm", 100, 10, 1),
    call("cudaLaunchKernel", 102, 3, 1),
    gpu(GEMM, 110, 90, 1, 7),
    call("cudaDeviceSynchronize", 120, 90, 2),
]


def test_an_activity_without_a_launch_starts_where_it_starts(tmp_path: Path) -> None:
    out = ingested(tmp_path, C7, "c7")
    assert saving(out, "kernel=Mul:2x") == 0.0
    assert saving(out, "kernel=sgemm:2x") == 45.0
    facts = reported(out)
    assert pays(facts, GEMM) == 60.0  # at its roofline: released at the mul's 140
    assert facts["critical_path"]["total_us"] == 140.0
    (note,) = [n for n in facts["critical_path"]["notes"] if n.startswith("measured from the window's start")]
    assert "reaches the end 60.0 µs later" in note


def test_htas_convention_keeps_htas_path_and_says_another_chain_ends_later(tmp_path: Path) -> None:
    # --like-hta: HTA adds no sync edge without cuda_sync events; its path is the mul chain, 150 µs.
    # From the window's start the sgemm's chain ends at 100 + 100 = 200: 50 µs later.
    out = ingested(tmp_path, C6, "c6")
    build_report(out, like_hta=True)
    path = json.loads((out / "report.json").read_text())["critical_path"]
    assert (path["convention"], path["total_us"]) == ("hta", 150.0)
    (note,) = [n for n in path["notes"] if n.startswith("measured from the window's start")]
    assert "reaches the end 50.0 µs later" in note


# --- class 2 (c10): a cudaMemcpyAsync to pinned memory is CPU work ---------------------------------
#   3×, i = 0..2: aten::copy_ [40i, 40i+30] ⊃ cudaMemcpyAsync [40i+2, 40i+27] →
#                 Memcpy HtoD (Pinned -> Device) s7 [40i+29, 40i+31] (starts after the call returned)
#   aten::add [120,130] ⊃ cudaLaunchKernel [122,125] → add s7 [130,140]; cudaDeviceSynchronize [135,145]
# The host works 0–30, 40–70, 80–110, 120–122; each copy ends 9 µs before the next op starts.
# Path: 30 + 30 + 30 + 2 (CPU: 92) + 8 (launch) + 10 (add) = 110 µs — 83.6 % CPU (the bug: 51 µs,
# the calls' 25 µs each a "wait", 27 µs of "launch overhead").
C10 = [
    e
    for i in range(3)
    for e in (
        op("aten::copy_", 40 * i, 30, 10 + i),
        call("cudaMemcpyAsync", 40 * i + 2, 25, 1 + i),
        gpu("Memcpy HtoD (Pinned -> Device)", 40 * i + 29, 2, 1 + i, 7, "gpu_memcpy"),
    )
] + [
    op("aten::add", 120, 10, 20),
    call("cudaLaunchKernel", 122, 3, 4),
    gpu(ADD, 130, 10, 4, 7),
    call("cudaDeviceSynchronize", 135, 10, 5),
]


def test_a_pinned_async_copy_call_is_cpu_work(tmp_path: Path) -> None:
    length, by = path_breakdown(ingested(tmp_path, C10, "c10"))
    assert length == pytest.approx(110.0)
    assert (by["cpu_bound"], by["gpu_kernel_launch_overhead"], by["gpu_compute_bound"]) == (92.0, 8.0, 10.0)


# --- class 2, what stays (c4): a copy to pageable memory, which the call outlives, is a wait -------
#   aten::mm [0,10] ⊃ launch [2,5] → sgemm s7 [10,110]
#   aten::copy_ [15,125] ⊃ cudaMemcpyAsync [20,123] → Memcpy DtoH (Device -> Pageable) s7 [111,121]
#   aten::add [130,140] ⊃ launch [132,135] → add s7 [142,152]; cudaDeviceSynchronize [145,155]
# The call returns 2 µs after its copy ends: it waited (weight 0, released by the copy). Path: mm 2
# + launch 8 + sgemm 100 + gap 1 + copy 10 → the call's end (123) → copy_'s last 2 → add 2 + launch
# 10 + add 10 = 145 µs: cpu 6, launch 18, gap 1, gpu 120.
C4 = [
    op("aten::mm", 0, 10, 1),
    call("cudaLaunchKernel", 2, 3, 1),
    gpu(GEMM, 10, 100, 1, 7),
    op("aten::copy_", 15, 110, 2),
    call("cudaMemcpyAsync", 20, 103, 2),
    gpu("Memcpy DtoH (Device -> Pageable)", 111, 10, 2, 7, "gpu_memcpy"),
    op("aten::add", 130, 10, 3),
    call("cudaLaunchKernel", 132, 3, 3),
    gpu(ADD, 142, 10, 3, 7),
    call("cudaDeviceSynchronize", 145, 10, 4),
]


def test_a_pageable_copy_call_still_waits_for_its_copy(tmp_path: Path) -> None:
    length, by = path_breakdown(ingested(tmp_path, C4, "c4"))
    assert length == pytest.approx(145.0)
    assert (by["cpu_bound"], by["gpu_kernel_launch_overhead"]) == (6.0, 18.0)
    assert (by["gpu_kernel_kernel_overhead"], by["gpu_compute_bound"]) == (1.0, 120.0)
