"""Event waits recorded as runtime calls (campaign AZ 4). ROCm's Kineto writes no `cuda_sync` events
(nor does older CUDA Kineto): a `hipStreamWaitEvent` / `cudaStreamWaitEvent` call, with its
`hipEventRecord` / `cudaEventRecord` where the trace has it, gives the edge a `Stream Wait Event`
gives — the activity launched last before the record → the start of the next activity launched
after the wait — so that the kernel waited for is on the critical path and the wait is no launch
overhead. Traces with `cuda_sync` events, and HTA's convention, are read as before. Every
expected value is worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.analysis.critical_path import SYNC, build_graph
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, what_if
from tests.analysis.test_critical_path import TWO_STREAMS, call, kernel, op, solved

BUCKETS0 = dict.fromkeys(
    ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_kernel_kernel_overhead"), 0.0
)


def _without_syncs(events: list[dict[str, Any]], rename: dict[str, str] | None = None) -> list[dict[str, Any]]:
    rename = rename or {}
    return [dict(e, name=rename.get(e["name"], e["name"])) for e in events if e["cat"] != "cuda_sync"]


HIP = {
    "cudaLaunchKernel": "hipLaunchKernel",
    "cudaEventRecord": "hipEventRecord",
    "cudaStreamWaitEvent": "hipStreamWaitEvent",
    "cudaDeviceSynchronize": "hipDeviceSynchronize",
}


@pytest.mark.parametrize("rename", [None, HIP], ids=["cuda", "hip"])
def test_a_runtime_event_wait_gives_the_edge_a_stream_wait_event_gives(tmp_path: Path, rename: Any) -> None:
    """TWO_STREAMS (tests/analysis/test_critical_path.py) without its cuda_sync events: the
    cudaEventRecord [11,12] follows the launch of k_one (stream 7, [5,105]), the wait [13,14] precedes
    the launch [16,18] of k_two (stream 8, [106,126]). The same path as with the events: mm's CPU 2
    + launch overhead 3 + k_one 100 + (wait, 0) + k_two 20 = 125 µs — 1.6 % CPU, 2.4 % launch
    overhead, 96 % compute. (Without the wait edge k_two's 90 µs after its launch was launch
    overhead: 13 µs of host to that launch + 90 + 20 = 123 µs, 73.2 % launch overhead.)"""
    kernels, host = solved(tmp_path, _without_syncs(TWO_STREAMS, rename))
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(125.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["cpu", "launch", "gpu", "gpu"]
    assert segs["dur_us"].tolist() == pytest.approx([2.0, 3.0, 100.0, 20.0])
    assert segs["name"].tolist() == ["aten::mm", "k_one_gemm", "k_one_gemm", "k_two_add"]
    assert breakdown_pct(segs) == {
        **BUCKETS0,
        "cpu_bound": 1.6,
        "gpu_compute_bound": 96.0,
        "gpu_kernel_launch_overhead": 2.4,
        "data_loading": 0.0,
    }
    assert any("1 event wait recorded as runtime calls" in note for note in graph.notes)


def test_the_campaign_rocm_stream_wait(tmp_path: Path) -> None:
    """Campaign AZ's `stream_wait` case (µs from 0): aten::mm [0,20] ⊃ hipExtModuleLaunchKernel
    [5,15] → the GEMM on stream 1 [20,320]; hipEventRecord [25,28], hipStreamWaitEvent [30,33];
    aten::add [40,55] ⊃ hipLaunchKernel [45,53] → the add on stream 2 [321,341], held by the
    GEMM; hipDeviceSynchronize [60,345]. Path: mm's CPU 5 + launch overhead 15 + GEMM 300 + (wait,
    0) + add 20 = 340 µs: 5/340 = 1.47 % CPU, 15/340 = 4.41 % launch overhead, 320/340 = 94.12 %
    compute. (It was 327 µs with the add's 276 µs wait counted as launch overhead, 84.4 %, and
    the GEMM off the path.) Halving the GEMM saves 150 µs end to end (the add follows it: 190 µs)."""
    events = [
        op("aten::mm", 0, 20),
        call("hipExtModuleLaunchKernel", 5, 10, 401),
        kernel("Cijk_gemm", 20, 300, 401, 1),
        call("hipEventRecord", 25, 3, 402),
        call("hipStreamWaitEvent", 30, 3, 403),
        op("aten::add", 40, 15),
        call("hipLaunchKernel", 45, 8, 404),
        kernel("add_kernel", 321, 20, 404, 2),
        call("hipDeviceSynchronize", 60, 285, 405),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(340.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["cpu", "launch", "gpu", "gpu"]
    assert segs["dur_us"].tolist() == pytest.approx([5.0, 15.0, 300.0, 20.0])
    pct = breakdown_pct(segs)
    assert pct["cpu_bound"] == 1.47 and pct["gpu_kernel_launch_overhead"] == 4.41
    assert pct["gpu_compute_bound"] == 94.12
    result = what_if(kernels, host, [parse_speedup("kernel=^Cijk_gemm$:2x")])
    assert result["saving_us"] == pytest.approx(150.0)


def test_no_edge_where_the_gpu_shows_no_wait_or_one_stream(tmp_path: Path) -> None:
    """A wait the GPU timeline contradicts gives no edge: the add on stream 2 starts at 60, while
    the GEMM [20,320] it would wait for still runs. Nor does a wait followed by a launch onto the
    recorded stream itself (stream order already holds it): k3 on stream 1 after the GEMM."""
    events = [
        op("aten::mm", 0, 20),
        call("hipLaunchKernel", 5, 10, 1),
        kernel("gemm", 20, 300, 1, 1),
        call("hipStreamWaitEvent", 30, 3, 2),
        call("hipLaunchKernel", 45, 8, 3),
        kernel("add", 60, 20, 3, 2),
        call("hipStreamWaitEvent", 400, 3, 4),
        call("hipLaunchKernel", 405, 5, 5),
        kernel("k3", 420, 10, 5, 2),
        call("hipStreamWaitEvent", 440, 3, 6),
        call("hipLaunchKernel", 445, 5, 7),
        kernel("k4", 460, 10, 7, 2),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    # the waits: 30 (gemm → add, but add starts at 60 < 320), 400 (add → k3, add and k3 both on stream 2),
    # 440 (k3 → k4, one stream): none an edge
    assert not (graph.kind == SYNC).any()
    assert not any("event wait" in note for note in graph.notes)


def test_traces_with_cuda_sync_events_and_htas_convention_are_read_as_before(tmp_path: Path) -> None:
    """TWO_STREAMS with its Context Sync but without the Stream Wait Event: the trace has
    cuda_sync events, which say no stream waited, so the cudaStreamWaitEvent call is not read. k_two
    then waited 90 µs for its launch at 16: the host to that launch is mm 2 + launch 2 + mm 6 +
    record 1 + wait 1 + add 1 = 13 µs (entering a top-level op weighs 0), + launch overhead 90 +
    k_two 20 = 123 µs (longer than 2 + 3 + k_one 100 = 105 → the sync). HTA's convention reads no
    runtime wait either (it adds no sync edge without cuda_sync events): 123 µs too, without syncs."""
    with_context_sync = [e for e in TWO_STREAMS if e["name"] != "Stream Wait Event"]
    kernels, host = solved(tmp_path, with_context_sync, "ctx")
    for convention in ("exact", "hta"):
        graph = build_graph(kernels, host, convention=convention)
        path = longest_path(graph)
        assert path.length_us == pytest.approx(123.0)
        segs = segments(graph, path)
        assert segs.loc[segs["kind"] == "launch", "dur_us"].tolist() == pytest.approx([90.0])
    kernels, host = solved(tmp_path, _without_syncs(TWO_STREAMS), "hta")
    graph = build_graph(kernels, host, convention="hta")
    assert longest_path(graph).length_us == pytest.approx(123.0)
    assert not any("event wait" in note for note in graph.notes)
