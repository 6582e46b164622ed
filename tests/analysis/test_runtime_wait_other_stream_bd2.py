"""Event waits recorded as runtime calls whose thread launched onto the waiting stream last before
the record (campaign BD 2). Without `cuda_sync` events (ROCm's Kineto, older CUDA Kineto) the
activity a `cudaStreamWaitEvent` / `hipStreamWaitEvent` waits for is the one its thread launched
last before the event's record; where that went to the waiting stream itself, the record was on
another stream (a wait for an event of the waiting stream is a no-op): the thread's latest launch
before it onto another stream of the device is taken, where the GPU shows the wait. Every
expected value is worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernel_atlas.analysis.critical_path import SYNC, build_graph
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, what_if
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels
from tests.analysis.test_critical_path import call, kernel, op, solved
from tests.support.traces import trace_path

HIP = {
    "cudaLaunchKernel": "hipLaunchKernel",
    "cudaEventRecord": "hipEventRecord",
    "cudaStreamWaitEvent": "hipStreamWaitEvent",
    "cudaDeviceSynchronize": "hipDeviceSynchronize",
}


def _c8c(gemm: tuple[float, float] = (25, 300), add: tuple[float, float] = (330, 50)) -> list[dict[str, Any]]:
    """Campaign BD's c8c (µs from 1,000,000; no cuda_sync events):
    aten::mm [10,30] ⊃ cudaLaunchKernel [12,18] → the GEMM K1 on stream 7 [25,325];
    aten::mul [32,45] ⊃ cudaLaunchKernel [34,38] → K0 on stream 20 [40,60];
    record_event [50,55] ⊃ cudaEventRecord [51,53] (on stream 7: the thread launched onto 20 last);
    aten::add [70,100] ⊃ cudaStreamWaitEvent [72,75] (stream 20 waits), cudaLaunchKernel [80,90]
    → K2 on stream 20 [330,380], held by K1; cudaDeviceSynchronize [110,385]."""
    return [
        op("aten::mm", 10, 20),
        call("cudaLaunchKernel", 12, 6, 1),
        kernel("ampere_sgemm_128x64_nn", gemm[0], gemm[1], 1, 7),
        op("aten::mul", 32, 13),
        call("cudaLaunchKernel", 34, 4, 2),
        kernel("vectorized_elementwise_kernel_mul", 40, 20, 2, 20),
        op("record_event", 50, 5),
        call("cudaEventRecord", 51, 2, 3),
        op("aten::add", 70, 30),
        call("cudaStreamWaitEvent", 72, 3, 4),
        call("cudaLaunchKernel", 80, 10, 5),
        kernel("vectorized_elementwise_kernel_add", add[0], add[1], 5, 20),
        call("cudaDeviceSynchronize", 110, 275, 6),
    ]


def _renamed(events: list[dict[str, Any]], rename: dict[str, str] | None) -> list[dict[str, Any]]:
    return [dict(e, name=(rename or {}).get(e["name"], e["name"])) for e in events]


@pytest.mark.parametrize("rename", [None, HIP], ids=["cuda", "hip"])
def test_the_wait_is_for_the_last_launch_onto_another_stream(tmp_path: Path, rename: Any) -> None:
    """c8c: the thread's last launch before the record is K0, on stream 20 — the waiting stream —
    so the wait is for K1 on stream 7, its latest launch onto another stream; the GPU agrees (K2
    launched at 80 onto stream 20, free since 60, starts at 330, 5 µs after K1 ends at 325). Path:
    mm's CPU to its launch 2 + launch overhead 25 − 12 = 13 + K1 300 + (wait, 0) + K2 50 = 365 µs
    (the device sync ends at K2's end): 2/365 = 0.55 % CPU, 13/365 = 3.56 % launch overhead,
    350/365 = 95.89 % compute. (It was 348 µs, K1 off the path, K2's 250 µs after its launch
    counted as launch overhead.) Halving K1 (300 → 150) moves K2 to [180,230]: saving 150 µs."""
    kernels, host = solved(tmp_path, _renamed(_c8c(), rename))
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(365.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["cpu", "launch", "gpu", "gpu"]
    assert segs["dur_us"].tolist() == pytest.approx([2.0, 13.0, 300.0, 50.0])
    assert segs["name"].tolist() == [
        "aten::mm",
        "ampere_sgemm_128x64_nn",
        "ampere_sgemm_128x64_nn",
        "vectorized_elementwise_kernel_add",
    ]
    pct = breakdown_pct(segs)
    assert (pct["cpu_bound"], pct["gpu_kernel_launch_overhead"], pct["gpu_compute_bound"]) == (0.55, 3.56, 95.89)
    assert any("1 event wait recorded as runtime calls" in n and "for 1 of them" in n for n in graph.notes)
    result = what_if(kernels, host, [parse_speedup("kernel=sgemm:2x")])
    assert result["saving_us"] == pytest.approx(150.0)


def _wait_edges(graph: Any) -> set[tuple[str, str]]:
    """The SYNC edges between two GPU activities (a device sync's edges end at a host call)."""
    names = graph.gpu["name"].astype(str).to_numpy()
    n_host = graph.n_host
    m = (graph.kind == SYNC) & (graph.src >= 2 * n_host) & (graph.dst >= 2 * n_host)
    src, dst = (graph.src[m] - 2 * n_host) // 2, (graph.dst[m] - 2 * n_host) // 2
    return set(zip(names[src].tolist(), names[dst].tolist(), strict=True))


def test_the_other_stream_is_taken_only_where_the_gpu_shows_the_wait(tmp_path: Path) -> None:
    """The pick skips launches (K0), so it stands only where the timeline agrees:
    * c8c: K2 starts at 330 ≥ K1's end 325, and K1 ended after K2's launch (80) and K0 (60) → the
      edge K1 → K2;
    * K2 at [100,150], while K1 [25,325] still ran: the GPU shows no wait for K1 → no edge;
    * K1 [25,75] ended before K2's launch at 80 (K2 [85,135]): nothing held K2 → no edge;
    * K1 on device 1 (the waiting stream is device 0's): no other stream of device 0 → no edge."""
    gemm, add = "ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel_add"
    kernels, host = solved(tmp_path, _c8c(), "held")
    assert _wait_edges(build_graph(kernels, host)) == {(gemm, add)}
    for name, events in (
        ("overlap", _c8c(add=(100, 50))),
        ("before_launch", _c8c(gemm=(25, 50), add=(85, 50))),
    ):
        kernels, host = solved(tmp_path, events, name)
        graph = build_graph(kernels, host)
        assert _wait_edges(graph) == set(), name
        assert not any("event wait" in note for note in graph.notes), name
    other_device = _c8c()
    other_device[2] = dict(other_device[2], pid=1, args=dict(other_device[2]["args"], device=1))
    kernels, host = solved(tmp_path, other_device, "device")
    assert sorted(kernels["device"].tolist()) == [0, 0, 1]
    graph = build_graph(kernels, host)
    assert _wait_edges(graph) == set()
    assert not any("event wait" in note for note in graph.notes)


def test_a100_diff_control_nccl_waits_after_a_launch_onto_the_waiting_stream(tmp_path: Path) -> None:
    """a100_diff_control (rank 3, no cuda_sync events, no cudaEventRecord calls: the wait's own
    time stands for the record). Read from the trace: the SendRecv (correlation 1785300, launched
    at …678143) runs on stream 21 [681499, 686247]; the thread then launches splitKreduce
    (1786796) onto stream 7 at …683939 ([684746, 684762]), calls cudaStreamWaitEvent at …684076
    and launches CatArrayBatchedCopy (1786812) onto stream 7 at …684172, which starts at …686249:
    2 µs after the SendRecv ended, 1,487 µs after stream 7's previous kernel ended. Its last launch
    before the wait went to stream 7 itself, so the wait is for the SendRecv → an edge; the first
    step's like pair (SendRecv 1767604 [605974, 609062] → CatArrayBatchedCopy 1769132 at 609063)
    too. Six such waits join the 104 read before: 110 (the path moved 360,573 → 361,642 µs)."""
    out = tmp_path / "a100.atlas"
    write_outputs(ingest_paths([trace_path("a100_diff_control")]), out)
    graph = build_graph(load_kernels(out), load_host_events(out, 3))
    corr = graph.gpu["correlation"].to_numpy(np.int64)
    n_host = graph.n_host
    event = {c: 2 * n_host + 2 * int(np.flatnonzero(corr == c)[0]) for c in (1785300, 1786812, 1767604, 1769132)}
    pairs = set(zip(graph.src[graph.kind == SYNC].tolist(), graph.dst[graph.kind == SYNC].tolist(), strict=True))
    assert (event[1785300] + 1, event[1786812]) in pairs
    assert (event[1767604] + 1, event[1769132]) in pairs
    assert any(n.startswith("no cuda_sync events: 110 event waits") and "for 6 of them" in n for n in graph.notes)
