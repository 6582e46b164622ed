"""Critical path and what-if on hand-built traces (answers derived by hand in the comments) and
on the shared a100_alexnet_train trace against HTA 0.5.0's numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kernel_atlas.analysis import whatif
from kernel_atlas.analysis.critical_path import build_graph, parse_window
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, what_if, where_optimisation_pays
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels
from tests.support.traces import has_trace, trace_path

T, G = {"pid": 1, "tid": 1}, {"pid": 0}


def op(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, **T, "ts": ts, "dur": dur, "args": args}


def call(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return op(name, ts, dur, "cuda_runtime", correlation=corr)


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> dict[str, Any]:
    args = {"correlation": corr, "device": 0, "stream": stream, "grid": [1, 1, 1], "block": [128, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": name, **G, "tid": stream, "ts": ts, "dur": dur, "args": args}


def sync(kind: str, ts: float, corr: int, stream: int, **args: Any) -> dict[str, Any]:
    body = {"cuda_sync_kind": kind, "stream": stream, "correlation": corr, "device": 0, **args}
    return {"ph": "X", "cat": "cuda_sync", "name": kind, **G, "tid": stream, "ts": ts, "dur": 1, "args": body}


def solved(tmp_path: Path, events: list[dict[str, Any]], name: str = "t") -> tuple[pd.DataFrame, pd.DataFrame]:
    trace = tmp_path / f"{name}.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    out = tmp_path / f"{name}.atlas"
    write_outputs(ingest_paths([trace]), out)
    return load_kernels(out), load_host_events(out, 0)


# Two streams and an event wait, then a device sync (times in µs):
#   host: aten::mm [0,10] ⊃ launch [2,4] → k_one on stream 7 [5,105]
#         cudaEventRecord [11,12] (on stream 7), cudaStreamWaitEvent [13,14] (stream 8 waits)
#         aten::add [15,25] ⊃ launch [16,18] → k_two on stream 8, held by the event until 105: [106,126]
#         cudaDeviceSynchronize [30,130]
# Path: mm's CPU 2 (to its launch) + launch overhead 3 + k_one 100 + (event wait, 0) + 1 µs on
# stream 8 (k_two's start is explained by the event: no launch or gap edge) … k_two 20 → sync end.
# k_two starts at 106 but the wait edge weighs 0, so: 2 + 3 + 100 + 20 = 125 µs; the host alone
# reaches the sync's end with 2+2+6+1+1+1+2+7 = 22 µs.
TWO_STREAMS = [
    op("aten::mm", 0, 10),
    call("cudaLaunchKernel", 2, 2, 1),
    kernel("k_one_gemm", 5, 100, 1, 7),
    call("cudaEventRecord", 11, 1, 2),
    call("cudaStreamWaitEvent", 13, 1, 3),
    sync("Stream Wait Event", 14, 3, 8, wait_on_stream=7, wait_on_cuda_event_record_corr_id=2),
    op("aten::add", 15, 10),
    call("cudaLaunchKernel", 16, 2, 4),
    kernel("k_two_add", 106, 20, 4, 8),
    call("cudaDeviceSynchronize", 30, 100, 5),
    sync("Context Sync", 129, 5, -1),
]


def test_two_streams_and_an_event_wait(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, TWO_STREAMS)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(125.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["cpu", "launch", "gpu", "gpu"]
    assert segs["dur_us"].tolist() == pytest.approx([2.0, 3.0, 100.0, 20.0])
    assert segs["name"].tolist() == ["aten::mm", "k_one_gemm", "k_one_gemm", "k_two_add"]
    assert segs["stream"].tolist()[2:] == [7, 8]
    # 2/125 = 1.6 %, 3/125 = 2.4 %, 120/125 = 96 %
    assert breakdown_pct(segs) == {
        "cpu_bound": 1.6,
        "gpu_compute_bound": 96.0,
        "gpu_communication_bound": 0.0,
        "gpu_kernel_kernel_overhead": 0.0,
        "gpu_kernel_launch_overhead": 2.4,
        "data_loading": 0.0,
    }


def test_event_waits_with_no_activity_tied_to_its_launch(tmp_path: Path) -> None:
    """TWO_STREAMS with kernels that carry no correlation (their `args` lost it): no activity is
    known to have been launched, so the event wait explains nothing (it was an IndexError that
    ended `atlas report` and `whatif` in an internal error). The device sync still waits for
    both streams: the path is k_one alone, 100 µs, longer than the host's 22 µs."""
    events = [
        dict(e, args={k: v for k, v in e["args"].items() if k != "correlation"}) if e["cat"] == "kernel" else e
        for e in TWO_STREAMS
    ]
    kernels, host = solved(tmp_path, events)
    assert kernels["launcher"].isna().all()
    path = longest_path(build_graph(kernels, host))
    assert path.length_us == pytest.approx(100.0)
    assert segments(build_graph(kernels, host), path)["name"].tolist() == ["k_one_gemm"]


def test_activities_overlapping_on_their_stream_are_counted_once(tmp_path: Path) -> None:
    """k_two [50,150] starts on stream 7 while k_one [5,105] runs: a stream runs one at a time,
    so k_two's first 55 µs are not on the path. mm's CPU 2 + launch 3 + k_one 100 + k_two's
    last 45 = 150 µs, within the trace's 160 µs (both counted whole made 205 µs)."""
    events = [
        op("aten::mm", 0, 10),
        call("cudaLaunchKernel", 2, 2, 1),
        kernel("k_one_gemm", 5, 100, 1, 7),
        op("aten::add", 15, 10),
        call("cudaLaunchKernel", 16, 2, 2),
        kernel("k_two_add", 50, 100, 2, 7),
        call("cudaDeviceSynchronize", 30, 130, 3),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(150.0)
    segs = segments(graph, path)
    assert segs["name"].tolist() == ["aten::mm", "k_one_gemm", "k_one_gemm", "k_two_add"]
    assert segs["dur_us"].tolist() == pytest.approx([2.0, 3.0, 100.0, 45.0])
    assert segs["dur_us"].sum() == pytest.approx(path.length_us)
    assert any("1 GPU activities start before the one before them on their stream ends" in n for n in graph.notes)


def test_an_activity_starting_before_its_launch_is_counted_from_it(tmp_path: Path) -> None:
    """k [3,23] is launched by a call at 5 (the GPU's clock runs 2 µs ahead of the host's): its
    time before 5 is not on the path. relu's CPU 5 + launch 0 + k 18 = 23 µs (20 whole: 25)."""
    events = [
        op("aten::relu", 0, 10),
        call("cudaLaunchKernel", 5, 2, 1),
        kernel("k_relu", 3, 20, 1, 7),
        call("cudaDeviceSynchronize", 12, 18, 2),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(23.0)
    assert segments(graph, path)["dur_us"].tolist() == pytest.approx([5.0, 18.0])
    assert any("1 GPU activities start before their launch call" in n for n in graph.notes)


def test_the_first_kernel_of_a_burst_waits_for_its_launch(tmp_path: Path) -> None:
    """Launched onto an idle stream, a kernel waited for its launch, even when the host had
    launched the next one before it started (HTA's queue-length test gave it no launch edge):
    aten::mm [0,10] ⊃ launch [2,5] → ka [20,120]; aten::mm [15,25] ⊃ launch [17,20] → kb queued
    [120,170]; cudaDeviceSynchronize [30,175]; aten::mm [180,190] ⊃ launch [182,185] → kc [200,210].
    Path: 2 (to the launch) + 18 (launch 2 → 20) + ka 100 + kb 50 + (sync's end, then the next op)
    2 + 18 + kc 10 = 200 µs; HTA's test left ka no edge in, a path of 180 from ka's start."""
    events = [
        op("aten::mm", 0, 10),
        call("cudaLaunchKernel", 2, 3, 1),
        kernel("ka", 20, 100, 1),
        op("aten::mm", 15, 10),
        call("cudaLaunchKernel", 17, 3, 2),
        kernel("kb", 120, 50, 2),
        call("cudaDeviceSynchronize", 30, 145, 3),
        op("aten::mm", 180, 10),
        call("cudaLaunchKernel", 182, 3, 4),
        kernel("kc", 200, 10, 4),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    assert longest_path(graph).length_us == pytest.approx(200.0)
    # the two launch latencies (18 each) are what no launch gaps saves
    assert what_if(kernels, host, [], no_launch_gaps=True)["saving_us"] == pytest.approx(36.0)


def test_a_host_wait_before_a_burst_is_no_kernel_gap(tmp_path: Path) -> None:
    """k0 [10,20]; the host idles; aten::mm [500,510] ⊃ launch [505,508] → kb [530,580]; aten::mm
    [520,530] ⊃ launch [525,528] → kc queued [580,600]. The 510 µs before kb are the host's wait,
    not kernel-to-kernel overhead: path k0's op 10 + kb's op 5 + launch 25 + kb 50 + kc 20 = 110
    µs (HTA's queue test: k0 → kb across the gap, 600 µs, 85 % kernel-kernel overhead), and with
    no launch gaps only kb's 25 µs launch is saved."""
    events = [
        op("aten::mm", 0, 10),
        call("cudaLaunchKernel", 2, 3, 1),
        kernel("k0", 10, 10, 1),
        op("aten::mm", 500, 10),
        call("cudaLaunchKernel", 505, 3, 2),
        kernel("kb", 530, 50, 2),
        op("aten::mm", 520, 10),
        call("cudaLaunchKernel", 525, 3, 3),
        kernel("kc", 580, 20, 3),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(110.0)
    assert breakdown_pct(segments(graph, path))["gpu_kernel_kernel_overhead"] == 0.0
    assert what_if(kernels, host, [], no_launch_gaps=True)["saving_us"] == pytest.approx(25.0)


def test_whatif_savings_are_exact(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, TWO_STREAMS)
    # k_one 100 → 50: path 2 + 3 + 50 + 20 = 75, saving 50 (the host's 22 µs stays shorter)
    result = what_if(kernels, host, [parse_speedup("kernel=k_one:2x")])
    assert (result["baseline_us"], result["new_us"], result["saving_us"]) == (125.0, 75.0, 50.0)
    # k_two 20 → 10: saving 10
    assert what_if(kernels, host, [parse_speedup("kernel=k_two:2x")])["saving_us"] == 10.0
    # no launch gaps: the 3 µs launch overhead goes
    assert what_if(kernels, host, [], no_launch_gaps=True)["saving_us"] == 3.0
    # k_one 100 → 1 µs: 2 + 3 + 1 + 20 = 26 through k_one, but k_two cannot start before its own
    # launch, which the host records at 16 µs (the time between its top-level ops included: it
    # keeps its recorded times): 16 + 20 = 36
    assert what_if(kernels, host, [parse_speedup("kernel=k_one:100x")])["new_us"] == 36.0


# TWO_STREAMS and a third kernel off the path: aten::relu [26,29] ⊃ launch [27,28] → k_side on
# stream 9 [40,50]; the device sync waits for it too, but it ends at 50, long before k_two (126).
WITH_SIDE = [
    *TWO_STREAMS[:-2],
    op("aten::relu", 26, 3),
    call("cudaLaunchKernel", 27, 1, 6),
    kernel("k_side_relu", 40, 10, 6, 9),
    *TWO_STREAMS[-2:],
]


def _roofline(rows: list[tuple[str, str, float, float]], count: int = 1, formulas: int = 1) -> pd.DataFrame:
    """Main-kernel roofline rows (name, launcher, attainable µs, headroom µs), no shapes recorded,
    each of `count` calls costed with `formulas` distinct formulas."""
    names, launchers, attainable, headroom = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "name": names,
            "launcher": launchers,
            "input_dims": [None] * len(rows),
            "input_types": [None] * len(rows),
            "op_mapping": ["op"] * len(rows),
            "role": ["main"] * len(rows),
            "attainable_us": attainable,
            "headroom_us": headroom,
            "count": [count] * len(rows),
            "formulas": [formulas] * len(rows),
        }
    )


def test_a_row_of_several_formulas_saves_its_headroom_not_more(tmp_path: Path) -> None:
    # Two copies of one row (no shapes: 80 KB and 3.8 MB, say) of 5 and 115 µs; the row's mean call
    # is attainable in 10 µs, so its two calls in 20 µs: headroom 120 − 20 = 100 µs. The mean call's
    # 10 µs held against each call had left the small copy at 5 µs and cut the large to 10 µs:
    # 105 µs saved, more than the row's headroom. Each is sped up by 20/120 instead: 100 µs.
    events = [
        op("aten::copy_", 0, 5),
        call("cudaMemcpyAsync", 1, 1, 1),
        kernel("Memcpy HtoD (Pageable -> Device)", 10, 5, 1, 7),
        op("aten::copy_", 6, 5),
        call("cudaMemcpyAsync", 7, 1, 2),
        kernel("Memcpy HtoD (Pageable -> Device)", 20, 115, 2, 7),
    ]
    kernels, host = solved(tmp_path, events)
    mixed = _roofline([("Memcpy HtoD (Pageable -> Device)", "aten::copy_", 10.0, 100.0)], count=2, formulas=2)
    result = what_if(kernels, host, [parse_speedup("kernel=^Memcpy:roofline")], roofline=mixed)
    assert result["gpu_us_saved_locally"] == pytest.approx(100.0)
    # one formula: each call's own attainable time, the small copy already under it
    same = _roofline([("Memcpy HtoD (Pageable -> Device)", "aten::copy_", 10.0, 100.0)], count=2, formulas=1)
    assert (
        what_if(kernels, host, [parse_speedup("kernel=^Memcpy:roofline")], roofline=same)["gpu_us_saved_locally"]
        == 105.0
    )


def test_where_optimisation_pays_on_and_off_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernels, host = solved(tmp_path, WITH_SIDE)
    graph = build_graph(kernels, host, zero_weight_launches=True)
    # k_one 100 → 50 µs: 2 + 3 + 50 + 20 = 75, saving 50; k_side 10 → 1 µs: off the 125 µs path,
    # saving exactly 0 (headroom 9 µs)
    roofline = _roofline([("k_one_gemm", "aten::mm", 50.0, 50.0), ("k_side_relu", "aten::relu", 1.0, 9.0)])
    pays = where_optimisation_pays(graph, roofline)
    assert [(r["kernel"], r["headroom_us"], r["end_to_end_saving_us"]) for r in pays] == [
        ("k_one_gemm", 50.0, 50.0),
        ("k_side_relu", 9.0, 0.0),
    ]
    # the same answers when every candidate is solved (no path to skip by)
    monkeypatch.setattr(whatif, "solves_exactly", lambda _graph: False)
    assert where_optimisation_pays(build_graph(kernels, host, zero_weight_launches=True), roofline) == pays


def test_activities_match_roofline_rows_as_a_merge_on_their_keys() -> None:
    """Per activity, the first roofline row equal in every key: a missing value matches a missing
    one only, a value the activities never have matches nothing, and categoricals and texts
    compare by value."""
    activities = pd.DataFrame(
        {
            "name": pd.Categorical(["gemm", "relu", None, "gemm", "softmax", "relu"]),
            "launcher": ["aten::mm", "aten::relu", "aten::add", None, "aten::mm", "aten::relu"],
        }
    )
    rows = pd.DataFrame(
        {
            "name": ["relu", "gemm", "gemm", None, "layernorm", "relu"],
            "launcher": ["aten::relu", None, "aten::mm", "aten::add", "aten::mm", "aten::relu"],
        }
    )
    keys = ["name", "launcher"]
    # gemm/mm → row 2; relu/relu → row 0 (not its duplicate, row 5); missing/add → row 3;
    # gemm/missing → row 1; softmax appears in no row
    assert whatif.matching_rows(activities, rows, keys).tolist() == [2, 0, 3, 1, -1, 0]
    assert whatif.matching_rows(activities, rows.iloc[:0], keys).tolist() == [-1] * 6
    assert whatif.matching_rows(rows, rows, keys).tolist() == [0, 1, 2, 3, 4, 0]


@pytest.mark.skipif(not has_trace("a100_alexnet_train"), reason="shared traces absent")
def test_one_build_serves_the_path_and_its_whatif(tmp_path: Path) -> None:
    out = tmp_path / "alex"
    write_outputs(ingest_paths([trace_path("a100_alexnet_train")]), out)
    kernels, host = load_kernels(out), load_host_events(out, 0)
    plain = build_graph(kernels, host)
    both = build_graph(kernels, host, zero_weight_launches=True)
    assert both.causal.sum() > 0 and len(both.src) == len(plain.src) + both.causal.sum()
    derived = both.without_causal_edges()
    for field in ("src", "dst", "weight", "kind", "event"):
        assert np.array_equal(getattr(derived, field), getattr(plain, field)), field
    assert longest_path(derived).length_us == longest_path(plain).length_us


# A host sync without cuda_sync events (the release is found on the GPU timeline):
#   launch [0,2] → k [10,60]; cudaStreamSynchronize [3,62]; then aten::relu [62,100] on the CPU.
# Path: launch overhead 10 + k 50 + (release, 0) + the top-level relu entered at 0 weight + 38 = 98.
def test_host_sync_waits_for_the_gpu(tmp_path: Path) -> None:
    events = [
        call("cudaLaunchKernel", 0, 2, 1),
        kernel("k_long", 10, 50, 1),
        call("cudaStreamSynchronize", 3, 59, 2),
        op("aten::relu", 62, 38),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(98.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["launch", "gpu", "cpu"]
    assert segs["name"].tolist() == ["k_long", "k_long", "aten::relu"]
    pct = breakdown_pct(segs)  # 10/98, 50/98, 38/98
    assert (pct["gpu_kernel_launch_overhead"], pct["gpu_compute_bound"], pct["cpu_bound"]) == (10.2, 51.02, 38.78)
    # the CPU work after the sync cannot start before the kernel ends: k 2x faster saves 25
    assert what_if(kernels, host, [parse_speedup("kernel=k_long:2x")])["saving_us"] == 25.0


@pytest.mark.parametrize("copy_call", ["cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream"])
def test_a_synchronous_copy_waits_for_the_gpu(tmp_path: Path, copy_call: str) -> None:
    """A synchronous copy call [0,40] (ROCm PyTorch's host copies are `hipMemcpyWithStream`)
    returns when its copy on the GPU [10,30] ends: the path is the launch 10, the copy 20, then
    aten::relu's 20 = 50 µs — not the call's 40 µs as CPU work and relu's 20 (60 µs)."""
    args = {"correlation": 1, "device": 0, "stream": 7, "bytes": 4096}
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", **G, "tid": 7}
    events = [call(copy_call, 0, 40, 1), {**copy, "ts": 10, "dur": 20, "args": args}, op("aten::relu", 40, 20)]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(50.0)
    assert segments(graph, path)["kind"].tolist() == ["launch", "gpu", "cpu"]


# A CUDA graph replay: one cudaGraphLaunch [0,5] replays three kernels on stream 7 at
# [20,30], [32,42], [43,53]. The first waited for the launch (20), the others for their stream
# (gaps 2 and 1): 20 + 10 + 2 + 10 + 1 + 10 = 53 µs. HTA drops replayed kernels; they stay here.
def test_graph_replay_kernels_are_on_the_path(tmp_path: Path) -> None:
    events = [
        call("cudaGraphLaunch", 0, 5, 9),
        kernel("g_a", 20, 10, 9),
        kernel("g_b", 32, 10, 9),
        kernel("g_c", 43, 10, 9),
    ]
    kernels, host = solved(tmp_path, events)
    assert kernels["graph_launch"].all()
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(53.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["launch", "gpu", "kernel_gap", "gpu", "kernel_gap", "gpu"]
    assert segs["dur_us"].tolist() == pytest.approx([20, 10, 2, 10, 1, 10])
    # g_b 2x: 53 − 5 = 48; without launch gaps: 53 − 23 = 30
    assert what_if(kernels, host, [parse_speedup("kernel=g_b:2x")])["new_us"] == 48.0
    assert what_if(kernels, host, [], no_launch_gaps=True)["new_us"] == 30.0


# Windows: two ProfilerStep ranges; #1 holds only the second kernel.
#   step 0 [0,50] ⊃ launch [1,3] → k0 [10,30];  step 1 [50,100] ⊃ launch [51,53] → k1 [60,90].
# Window #1: ops launched in [50,100]: launch [51,53] → k1: launch overhead 9 + k1 30 = 39.
def test_window_is_the_kth_instance(tmp_path: Path) -> None:
    events = [
        op("ProfilerStep#0", 0, 50, "user_annotation"),
        call("cudaLaunchKernel", 1, 2, 1),
        kernel("k0", 10, 20, 1),
        op("ProfilerStep#1", 50, 50, "user_annotation"),
        call("cudaLaunchKernel", 51, 2, 2),
        kernel("k1", 60, 30, 2),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host, parse_window("ProfilerStep#1"))
    assert graph.window["start_us"] == 50.0 and graph.window["end_us"] == 100.0
    path = longest_path(graph)
    assert path.length_us == pytest.approx(39.0)
    assert segments(graph, path)["name"].tolist() == ["k1", "k1"]
    with pytest.raises(AtlasError, match="2 ranges"):
        build_graph(kernels, host, parse_window("ProfilerStep#2"))
    with pytest.raises(AtlasError, match="NAME#K"):
        parse_window("ProfilerStep")


def test_bad_speedups_are_one_line_errors() -> None:
    for bad in ("op=mm", "op=mm:0x", "colour=red:2x", "op=mm:fast"):
        with pytest.raises(AtlasError):
            parse_speedup(bad)


ALEXNET_WINDOW = "[param|pytorch.model.alex_net|0|0|0|measure|forward]#1"


@pytest.mark.skipif(not has_trace("a100_alexnet_train"), reason="shared traces absent")
def test_alexnet_matches_hta(tmp_path: Path) -> None:
    # HTA 0.5.0 (pandas 2.2.3): critical_path_analysis(rank=0, annotation="[param|…|measure|forward]",
    # instance_id=1) → edges summing to 35834 µs; summary(): cpu_bound 89.42 %, gpu_compute_bound
    # 10.36 %, gpu_kernel_kernel_overhead 0.14 %, gpu_kernel_launch_overhead 0.08 %
    # (benchmarks/hta_critical_path_compare.py)
    out = tmp_path / "alex"
    write_outputs(ingest_paths([trace_path("a100_alexnet_train")]), out)
    graph = build_graph(load_kernels(out), load_host_events(out, 0), parse_window(ALEXNET_WINDOW))
    path = longest_path(graph)
    assert path.length_us == pytest.approx(35834.0, rel=0.02)
    pct = breakdown_pct(segments(graph, path))
    hta = {"cpu_bound": 89.42, "gpu_compute_bound": 10.36, "gpu_kernel_kernel_overhead": 0.14}
    hta["gpu_kernel_launch_overhead"] = 0.08
    for bucket, value in hta.items():
        assert abs(pct[bucket] - value) <= 5.0, bucket
    assert sum(pct.values()) == pytest.approx(100.0, abs=0.05)


@pytest.mark.skipif(not has_trace("a100_alexnet_train"), reason="shared traces absent")
def test_report_writes_the_critical_path(tmp_path: Path) -> None:
    from kernel_atlas.report.build import build_report

    out = tmp_path / "alex"
    write_outputs(ingest_paths([trace_path("a100_alexnet_train")]), out)
    report = build_report(out, window=ALEXNET_WINDOW)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert facts["total_us"] == pytest.approx(35834.0, rel=0.02)
    assert set(facts["breakdown_pct"]) >= {"cpu_bound", "gpu_compute_bound", "gpu_kernel_launch_overhead"}
    assert facts["top"]["kernel"] and facts["window"]["name"].startswith("[param|")
    segs = pd.read_parquet(out / "critical_path.parquet")
    assert segs["dur_us"].sum() == pytest.approx(facts["total_us"])
    assert {"kind", "bound", "start_us", "dur_us", "kernel", "op", "frame", "rank", "stream"} <= set(segs.columns)
    assert report.files["critical_path"].name == "critical_path.parquet"


def test_overlay_flags_the_path_and_redacts(tmp_path: Path) -> None:
    from kernel_atlas.report.build import build_report

    events = [dict(e) for e in TWO_STREAMS]
    events.append(op("tokenize hf_abcdefghijklmnopqrstuvwxyz012345", 200, 5))  # a credential-shaped name
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    target = tmp_path / "overlay.json"
    build_report(out, overlay=target, trace=trace)
    doc = json.loads(target.read_text())
    flagged = {
        e["name"]: e["args"]["critical_path"] for e in doc["traceEvents"] if "critical_path" in e.get("args", {})
    }
    # the path of test_two_streams_and_an_event_wait, then the later op: entered at zero weight after
    # the sync's end, its own 5 µs extend the path to 125 + 5 = 130
    assert flagged == {
        "aten::mm": "cpu_bound",
        "k_one_gemm": "gpu_compute_bound",
        "k_two_add": "gpu_compute_bound",
        "tokenize <redacted>": "cpu_bound",
    }
    track = [e for e in doc["traceEvents"] if e.get("pid") == "Critical path" and e["ph"] == "X"]
    assert sum(e["dur"] for e in track) == pytest.approx(130.0)
    assert json.loads((out / "report.json").read_text())["critical_path"]["total_us"] == pytest.approx(130.0)
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" not in target.read_text()


def test_an_overlay_of_a_trace_replaced_since_the_ingest_is_refused(tmp_path: Path) -> None:
    """`report OUT --overlay` found the trace by the name summary.json gives: one re-profiled
    under that name got the old run's path drawn over it (1,058 ranges outside its span), exit 0."""
    from tests.support.hostile import assert_one_line_error, cli

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": TWO_STREAMS, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    out = tmp_path / "t.atlas"
    assert cli("ingest", trace, "-o", out, "-q").code == 0
    assert cli("report", out, "--overlay", tmp_path / "overlay.json").code == 0
    trace.write_text(json.dumps({"traceEvents": TWO_STREAMS[:-2], "deviceProperties": []}))  # profiled again
    assert_one_line_error(
        cli("report", out, "--overlay", tmp_path / "again.json"), "t.json: not the trace this run was ingested from"
    )
    assert not (tmp_path / "again.json").exists()


# Data loading: a DataLoader annotation [0,50] ⊃ aten::copy_ [10,20]; then launch [51,52] → k [55,65].
# Path: annotation start → copy start 10 (the annotation's: data_loading) → copy end 10 (cpu) →
# annotation end 30 (data_loading) → (top-level entry, 0) → launch overhead 4 → k 10 = 64 µs.
def test_data_loading_annotation(tmp_path: Path) -> None:
    events = [
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 50, "user_annotation"),
        op("aten::copy_", 10, 10),
        call("cudaLaunchKernel", 51, 1, 1),
        kernel("k", 55, 10, 1),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(64.0)
    pct = breakdown_pct(segments(graph, path))  # 40/64, 10/64, 4/64, 10/64
    assert (pct["data_loading"], pct["cpu_bound"], pct["gpu_kernel_launch_overhead"]) == (62.5, 15.62, 6.25)
    assert pct["gpu_compute_bound"] == 15.62


# HTA's convention against the exact one, on a HIP trace without cuda_sync events:
#   aten::mm [0.2,10.8] ⊃ hipLaunchKernel [2.5,4.5] → k_mm [5.5,105.5] on stream 7,
#   aten::view [10.3,10.7] inside the mm; hipDeviceSynchronize [11.4,120.6].
# Exact: the sync waits (released by k_mm's end, the GPU work that ended last while it ran):
#   2.3 (mm to its launch) + 3.0 (launch overhead) + 100 (k_mm) = 105.3 µs.
# HTA: starts rounded up and ends down: mm [1,10], launch [3,4], view [11,10], k_mm [6,105],
#   sync [12,120]; the view is left with no length and HTA drops it (it keeps dur > 0 only);
#   hipDeviceSynchronize is not in HTA's blocking list: CPU work.
#   Host: mm 2 + 1 + 6 = 9, sync 108 → 117 µs, all cpu_bound (the kernel's route, 2 + 3 + 99 =
#   104, is shorter). Kept inside the mm, the view [11,10] would make it 2 + 1 + 7 = 10 (118).
HIP_SYNC = [
    op("aten::mm", 0.2, 10.6),
    call("hipLaunchKernel", 2.5, 2.0, 1),
    kernel("k_mm", 5.5, 100.0, 1),
    op("aten::view", 10.3, 0.4),
    call("hipDeviceSynchronize", 11.4, 109.2, 2),
]


def test_hta_convention_rounds_renests_and_counts_hip_syncs_as_cpu(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, HIP_SYNC)
    exact = build_graph(kernels, host)
    path = longest_path(exact)
    assert path.length_us == pytest.approx(105.3)
    pct = breakdown_pct(segments(exact, path))  # 2.3, 3, 100 of 105.3
    assert (pct["cpu_bound"], pct["gpu_kernel_launch_overhead"], pct["gpu_compute_bound"]) == (2.18, 2.85, 94.97)
    hta = build_graph(kernels, host, convention="hta")
    path = longest_path(hta)
    assert path.length_us == pytest.approx(117.0)
    segs = segments(hta, path)
    assert breakdown_pct(segs)["cpu_bound"] == 100.0
    assert segs.groupby("name", observed=True)["dur_us"].sum().to_dict() == {
        "aten::mm": 8.0,  # 2 + 6 around the launch, whose 1 µs is its own
        "hipLaunchKernel": 1.0,
        "hipDeviceSynchronize": 108.0,
    }
    with pytest.raises(AtlasError):
        build_graph(kernels, host, convention="nvidia")


# A launch call HTA does not list (hipModuleLaunchKernel [0,2] → k_triton [3,103]), then
# aten::relu [5,15]. Exact: the kernel waited for its launch: 3 + 100 = 103 µs (the host gives
# 2 + 10 = 12). HTA: no launch edge, the kernel's route starts at its start: 100 µs, all
# gpu_compute_bound.
def test_hta_convention_knows_only_its_launch_calls(tmp_path: Path) -> None:
    events = [call("hipModuleLaunchKernel", 0, 2, 1), kernel("k_triton", 3, 100, 1), op("aten::relu", 5, 10)]
    kernels, host = solved(tmp_path, events)
    assert longest_path(build_graph(kernels, host)).length_us == pytest.approx(103.0)
    hta = build_graph(kernels, host, convention="hta")
    path = longest_path(hta)
    assert path.length_us == pytest.approx(100.0)
    assert breakdown_pct(segments(hta, path))["gpu_compute_bound"] == 100.0


def copy(ts: float, dur: float, corr: int, stream: int = 7) -> dict[str, Any]:
    args = {"correlation": corr, "device": 0, "stream": stream, "bytes": 4096}
    name = "Memcpy DtoH (Device -> Pageable)"
    return {"ph": "X", "cat": "gpu_memcpy", "name": name, **G, "tid": stream, "ts": ts, "dur": dur, "args": args}


# A copy to pageable memory holds its call until the copy is done (no cuda_sync events):
#   cudaLaunchKernel [0,2] → k_long [5,45]; cudaMemcpyAsync [6,50] → its copy [45,47] on the same
#   stream; aten::relu [50,60]. (The copy is launched after k_long started: k_long's start is its
#   launch's doing, 5 µs; the copy's is k_long's end, a gap of 0.)
# The call returns when its own copy ends: 5 (launch) + 40 (k_long) + 0 (gap) + 2 (copy) + 0
# (copy end → call end) + 10 (relu) = 57 µs. Without that edge the call's 44 µs weigh nothing and
# the host reaches relu alone (2 + 10): the path would be the GPU's 47.
def test_a_blocking_copy_returns_when_its_copy_ends(tmp_path: Path) -> None:
    events = [
        call("cudaLaunchKernel", 0, 2, 1),
        kernel("k_long", 5, 40, 1),
        call("cudaMemcpyAsync", 6, 44, 2),
        copy(45, 2, 2),
        op("aten::relu", 50, 10),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(57.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["launch", "gpu", "gpu", "cpu"]
    assert segs["dur_us"].tolist() == [5.0, 40.0, 2.0, 10.0]
    assert longest_path(build_graph(kernels, host, convention="hta")).length_us == pytest.approx(47.0)  # HTA: no edge


# A wait on another stream the trace does not record (no cuda_sync events):
#   cudaLaunchKernel [0,2] → k_a [5,2005] on stream 8; cudaLaunchKernel [3,5] → k_b [2006,2026] on
#   stream 7 (idle): k_b started 2003 µs after its launch, too long for a launch latency (≥ 1500),
#   so nothing on its stream explains it; k_a, on another stream, ended last before it started.
# Path: 5 (launch) + 2000 (k_a) + 0 (k_a → k_b) + 20 (k_b) = 2025 µs (without the inferred wait:
# k_a alone, 2005). HTA 0.5.0 has no 1.5 ms limit (it came in 0.6.0): k_b's 2003 µs after its
# launch are launch overhead, after the first call's 2 µs (top-level calls are joined):
# 2 + 2003 + 20 = 2025 µs too, but 98.91 % launch overhead (2003/2025), 0.99 % GPU, 0.1 % CPU —
# HTA 0.5.0 run on this trace gives these edges.
def test_an_unexplained_start_waits_for_the_stream_that_ended_last(tmp_path: Path) -> None:
    events = [
        call("cudaLaunchKernel", 0, 2, 1),
        kernel("k_a", 5, 2000, 1, stream=8),
        call("cudaLaunchKernel", 3, 2, 2),
        kernel("k_b", 2006, 20, 2, stream=7),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(2025.0)
    assert segments(graph, path)["name"].tolist() == ["k_a", "k_a", "k_b"]
    assert any("1 activities" in note and "another stream" in note for note in graph.notes)
    hta = build_graph(kernels, host, convention="hta")
    path = longest_path(hta)
    assert path.length_us == pytest.approx(2025.0)
    pct = breakdown_pct(segments(hta, path))
    assert (pct["gpu_kernel_launch_overhead"], pct["gpu_compute_bound"], pct["cpu_bound"]) == (98.91, 0.99, 0.1)


# HTA 0.5.0 chains a stream across any gap (the 1.5 ms limit came in HTA 0.6.0):
#   aten::mm [0,10] ⊃ cudaLaunchKernel [1,3] → k1 [5,105]; cudaLaunchKernel [11,13] → k2
#   [3105,3125] on the same stream, launched while k1 ran (so not its launch's doing).
# Exact: the 3000 µs gap is no kernel-kernel overhead, nothing explains k2's start (no other
#   stream), but k2 runs after k1 on their stream (a 0 µs stream-order edge, stop 64: the path
#   had ended at k1): 1 (mm to its launch) + 4 (launch) + 100 (k1) + 0 + 20 (k2) = 125 µs.
# HTA: the gap is overhead: 1 + 4 + 100 + 3000 + 20 = 3125 µs — 96.0 % kernel-kernel (3000),
#   3.84 % GPU (120), 0.13 % launch (4), 0.03 % CPU (1); HTA 0.5.0 on this trace: 3125, these edges.
def test_hta_convention_chains_a_stream_across_any_gap(tmp_path: Path) -> None:
    events = [
        op("aten::mm", 0, 10),
        call("cudaLaunchKernel", 1, 2, 1),
        kernel("k1", 5, 100, 1),
        call("cudaLaunchKernel", 11, 2, 2),
        kernel("k2", 3105, 20, 2),
    ]
    kernels, host = solved(tmp_path, events)
    assert longest_path(build_graph(kernels, host)).length_us == pytest.approx(125.0)
    hta = build_graph(kernels, host, convention="hta")
    path = longest_path(hta)
    assert path.length_us == pytest.approx(3125.0)
    pct = breakdown_pct(segments(hta, path))
    assert (pct["gpu_kernel_kernel_overhead"], pct["gpu_compute_bound"]) == (96.0, 3.84)
    assert (pct["gpu_kernel_launch_overhead"], pct["cpu_bound"]) == (0.13, 0.03)


# HTA's loader drops the last ProfilerStep (TraceAnalysis(include_last_profiler_step=False)):
#   ProfilerStep#1 [0,50]: aten::mm [1,11] ⊃ cudaLaunchKernel [2,4] → k1 [5,25];
#   ProfilerStep#2 [50,100]: aten::add [51,61] ⊃ cudaLaunchKernel [52,54] → k2 [60,160].
# Exact (the whole trace): through the host, mm 1 (to its launch) + 2 (launch) + 7 (rest of mm) + 0
#   (entering add) + 1 (add to its launch) + 8 (launch overhead: 60 − 52) + 100 (k2) = 119 µs; through
#   the stream (k2 after k1, a 0 µs stream-order edge, stop 64), mm 1 + 3 (launch overhead: 5 − 2)
#   + 20 (k1) + 0 + 100 (k2) = 124 µs, the longer.
# HTA: everything from 50 on is gone (step #2, add, its launch and k2): 1 + 3 (launch overhead:
#   5 − 2) + 20 (k1) = 24 µs (HTA 0.5.0 on this trace: 24). One step name alone cuts nothing.
def test_hta_convention_drops_the_last_profiler_step(tmp_path: Path) -> None:
    events = [
        op("ProfilerStep#1", 0, 50, "user_annotation"),
        op("aten::mm", 1, 10),
        call("cudaLaunchKernel", 2, 2, 1),
        kernel("k1", 5, 20, 1),
        op("ProfilerStep#2", 50, 50, "user_annotation"),
        op("aten::add", 51, 10),
        call("cudaLaunchKernel", 52, 2, 2),
        kernel("k2", 60, 100, 2),
    ]
    kernels, host = solved(tmp_path, events)
    assert longest_path(build_graph(kernels, host)).length_us == pytest.approx(124.0)
    hta = build_graph(kernels, host, convention="hta")
    path = longest_path(hta)
    assert path.length_us == pytest.approx(24.0)
    assert segments(hta, path)["dur_us"].tolist() == pytest.approx([1.0, 3.0, 20.0])
    assert len(hta.gpu) == 1  # k2 is not in HTA's graph
    assert any("last ProfilerStep" in note for note in hta.notes)
    with pytest.raises(AtlasError, match="leaves the last ProfilerStep out"):  # HTA finds no step #2 either
        build_graph(kernels, host, ("ProfilerStep", 1), convention="hta")
    assert longest_path(build_graph(kernels, host, ("ProfilerStep", 1))).length_us == pytest.approx(109.0)
    events[4] = op("ProfilerStep#1", 50, 50, "user_annotation")  # one name: nothing is cut
    kernels, host = solved(tmp_path, events, "one_name")
    assert longest_path(build_graph(kernels, host, convention="hta")).length_us == pytest.approx(119.0)


# A CUDA graph replay in HTA: its `index_correlation` points the cudaGraphLaunch at one kernel,
# the last, and its critical path keeps only kernels a call points at (its issue #290):
#   cudaGraphLaunch [0,5] → g_a [20,30], g_b [32,42], g_c [43,53] on stream 7;
#   cudaLaunchKernel [6,7] → k_x [7,8] on stream 8.
# Exact: 20 (launch) + 10 + 2 + 10 + 1 + 10 = 53 µs (the host route: 5 + 0 + 1 + 1 = 7).
# HTA: only g_c, with no launch edge (cudaGraphLaunch is not one of its launch calls): 10 µs,
#   all GPU (HTA 0.5.0 on this trace: 10, the one edge g_c).
def test_hta_convention_keeps_one_kernel_of_a_graph_replay(tmp_path: Path) -> None:
    events = [
        call("cudaGraphLaunch", 0, 5, 9),
        kernel("g_a", 20, 10, 9),
        kernel("g_b", 32, 10, 9),
        kernel("g_c", 43, 10, 9),
        call("cudaLaunchKernel", 6, 1, 2),
        kernel("k_x", 7, 1, 2, stream=8),
    ]
    kernels, host = solved(tmp_path, events)
    assert longest_path(build_graph(kernels, host)).length_us == pytest.approx(53.0)
    hta = build_graph(kernels, host, convention="hta")
    path = longest_path(hta)
    assert path.length_us == pytest.approx(10.0)
    segs = segments(hta, path)
    assert (segs["name"].tolist(), segs["kind"].tolist()) == (["g_c"], ["gpu"])
    assert sorted(hta.gpu["name"].astype(str)) == ["g_c", "k_x"]


# HTA finds the last step among the GPU-side step annotations too (a `gpu_user_annotation` has no
# correlation, so its loader counts it with the host events):
#   ProfilerStep#1 [0,50] on the host; ProfilerStep#2 only on the GPU, [40,50]; aten::mm [1,11] ⊃
#   cudaLaunchKernel [2,4] → k1 [5,25]; aten::add [51,61] ⊃ cudaLaunchKernel [52,54] → k2 [60,160].
# Two step names, the last starting at 40 (the GPU one): HTA cuts from 40 — add, its launch and k2
#   are gone: 1 + 3 + 20 = 24 µs (HTA 0.5.0 on this trace: 24). The host ranges alone name one
#   step: nothing cut, 1 + 2 + 7 + 0 + 1 + 8 + 100 = 119 µs.
def test_hta_convention_counts_gpu_side_steps_for_the_cut(tmp_path: Path) -> None:
    gpu_step = {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#2", **G, "tid": 7, "ts": 40, "dur": 10}
    events = [
        op("ProfilerStep#1", 0, 50, "user_annotation"),
        op("aten::mm", 1, 10),
        call("cudaLaunchKernel", 2, 2, 1),
        kernel("k1", 5, 20, 1),
        {**gpu_step, "args": {"device": 0}},
        op("aten::add", 51, 10),
        call("cudaLaunchKernel", 52, 2, 2),
        kernel("k2", 60, 100, 2),
    ]
    kernels, host = solved(tmp_path, events)
    summary = json.loads((tmp_path / "t.atlas" / "summary.json").read_text())
    cut = summary["traces"][0]["last_step_start_us"]
    assert cut == 40.0
    assert longest_path(build_graph(kernels, host, convention="hta", last_step_start_us=cut)).length_us == 24.0
    assert longest_path(build_graph(kernels, host, convention="hta")).length_us == pytest.approx(119.0)


def test_run_heads_follow_blocks_across_the_array_and_leave_cycles_out() -> None:
    from kernel_atlas.analysis.longest_path import _run_heads

    # edge: 0 1 2 3 4 5 6 7 — each edge's predecessor in its run (-1: the run starts there)
    # run A: 0 → 1 → 2 (one block) → 4 → 5 (a second block, after the unrelated run B = 3);
    # 6 and 7 follow each other in a cycle of pass-through nodes: no head
    prev = np.array([-1, 0, 1, -1, 2, 4, 7, 6])
    root, depth = _run_heads(prev)
    assert root.tolist() == [0, 0, 0, 3, 0, 0, -1, -1]
    assert depth[:6].tolist() == [0, 1, 2, 0, 3, 4]


def test_causal_edges_weigh_nothing_on_the_path_and_no_run_passes_through_them() -> None:
    """Nodes 0–5; edges e0 0→1 (5 µs), e1 2→3 causal (a what-if's, 0 µs: node 3's only way in),
    e2 3→4 (7 µs), e3 4→5 (1 µs). Without e1, node 3 starts a path: 3→4→5 = 8 µs beats 0→1 =
    5 µs. Solved with e1 at -inf (`path_weight`) the answer must be the same 8 µs along e2, e3 —
    which needs the run 3→4→5 to start at node 3, not to run on from the causal edge into it (a
    run through e1 would weigh -inf in all, leaving 5 µs)."""
    from kernel_atlas.analysis.critical_path import CPU, Graph

    graph = Graph(
        node_ts=np.array([0.0, 5.0, 0.0, 0.0, 7.0, 8.0]),
        src=np.array([0, 2, 3, 4]),
        dst=np.array([1, 3, 4, 5]),
        weight=np.array([5.0, 0.0, 7.0, 1.0]),
        kind=np.full(4, CPU, np.int8),
        event=np.full(4, -1),
        n_host=3,
        host=pd.DataFrame(),
        gpu=pd.DataFrame(),
        window={},
        causal=np.array([False, True, False, False]),
    )
    weight = graph.path_weight()
    assert weight[1] == -np.inf and weight[[0, 2, 3]].tolist() == [5.0, 7.0, 1.0]
    path = longest_path(graph, weight)
    assert path.length_us == 8.0 and path.edges.tolist() == [2, 3]
    assert longest_path(graph.without_causal_edges()).length_us == 8.0
    assert longest_path(graph).length_us == 8.0  # the what-if's view: the causal edge weighs 0


def test_host_points_follow_the_call_stacks_even_with_overlapping_siblings() -> None:
    """The points of a thread (starts 0..n-1, ends n..2n-1) in call-stack order, placed directly
    where each op's subtree is contiguous in the preorder, sorted where siblings overlap."""
    from kernel_atlas.analysis.critical_path import _tour

    # A (root) holds A1; B is a later root: A, A1, A1 ends, A ends, B, B ends
    parent, depth = np.array([-1, 0, -1]), np.array([0, 1, 0])
    order = _tour(parent, pos=np.array([0, 1, 2]), size=np.array([2, 1, 1]), depth=depth)
    assert order.tolist() == [0, 1, 4, 3, 2, 5]
    # B starts before A's child (clocks that disagree): the preorder is A, B, A1, A's span (2 ops)
    # ends at B; ends after starts at equal keys, the first op's end first at equal depth
    order = _tour(np.array([-1, -1, 0]), pos=np.array([0, 1, 2]), size=np.array([2, 1, 1]), depth=np.array([0, 0, 1]))
    assert order.tolist() == [0, 1, 3, 4, 2, 5]


# A forest of host rows (parent row, -1 at the top):   0 ─ 1 ─ 2 ─ 6      4 ─ 5
#                                                        └ 3
# depths 0 1 2 1 0 1 3; top-level rows 0 0 0 0 4 4 0; subtree sizes 5 3 2 1 2 1 1; ends clamped
# to the parent's, top down: 1 min(12, 10) = 10, 2 min(9, 10) = 9, 3 5, 5 min(8, 7) = 7, 6 min(20, 9) = 9.
FOREST = np.array([-1, 0, 1, 0, -1, 4, 2])


@pytest.mark.parametrize("deep", [False, True])
def test_nesting_walks_level_by_level_or_row_by_row(monkeypatch: pytest.MonkeyPatch, deep: bool) -> None:
    from kernel_atlas.analysis import critical_path as cp

    monkeypatch.setattr(cp, "_DEEP_LEVELS", 1 if deep else 1 << 20)
    depth, top = cp._depths(FOREST)
    assert depth.tolist() == [0, 1, 2, 1, 0, 1, 3] and top.tolist() == [0, 0, 0, 0, 4, 4, 0]
    rows, bounds = cp._levels(depth)
    assert [sorted(rows[bounds[d] : bounds[d + 1]].tolist()) for d in range(4)] == [[0, 4], [1, 3, 5], [2], [6]]
    assert cp._subtree_sizes(FOREST, rows, bounds).tolist() == [5, 3, 2, 1, 2, 1, 1]
    end = np.array([10.0, 12.0, 9.0, 5.0, 7.0, 8.0, 20.0])
    cp._clamp_ends(end, FOREST, rows, bounds)
    assert end.tolist() == [10.0, 10.0, 9.0, 5.0, 7.0, 7.0, 9.0]


# 3,000 CPU ops each inside the one before (op i: [i, 6000 − i] µs, the deepest [2999, 3001]),
# in the deepest a launch [2999.5, 3000.5] of a kernel [3010, 13010] (corr 1). The walks up and
# down this nesting were one pass over the rows per level (a 40,000-deep one took 17 s to report).
# Path: the top op entered at 0 weight, its CPU time to the launch — 2999.5 µs down the chain of
# starts, each op starting 1 µs inside the last — launch overhead 3010 − 2999.5 = 10.5, the kernel
# 10,000: 13,010 µs (the host, done at 6000, is not on it).
def test_a_deep_nesting_is_walked_exactly(tmp_path: Path) -> None:
    depth = 3000
    events = [op(f"aten::op{i % 5}", float(i), 6000.0 - 2 * i, **{"External id": i + 1}) for i in range(depth)]
    events += [call("cudaLaunchKernel", 2999.5, 1.0, 1), kernel("k_deep_gemm", 3010.0, 10_000.0, 1)]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(13_010.0)
    segs = segments(graph, path)
    sums = segs.groupby("kind")["dur_us"].sum().to_dict()
    assert sums == pytest.approx({"cpu": 2999.5, "launch": 10.5, "gpu": 10_000.0})


def test_whatif_keeps_a_device_sync_waiting_for_every_stream_without_cuda_sync_events(tmp_path: Path) -> None:
    # Older Kineto (no cuda_sync events): step [0,120] ⊃ launch [1,2] → kA on stream 7 [5,105], launch
    # [3,4] → kB on stream 8 [6,96], cudaDeviceSynchronize [10,110]. Baseline 1 + 4 + 100 + 10 = 115.
    # kA 2× faster ([5,55]): the sync still waits for kB, reached at 3 (launch) + 1 + 2 (queue) + 90 = 96,
    # then the step's 10 µs after the sync: 106. The sync had been tied to kA alone: 96, kB's end.
    events = [
        op("step", 0, 120),
        call("cudaLaunchKernel", 1, 1, 1),
        kernel("kA", 5, 100, 1, 7),
        call("cudaLaunchKernel", 3, 1, 2),
        kernel("kB", 6, 90, 2, 8),
        call("cudaDeviceSynchronize", 10, 100, 9),
    ]
    kernels, host = solved(tmp_path, events)
    result = what_if(kernels, host, [parse_speedup("kernel=^kA$:2x")])
    assert (result["baseline_us"], result["new_us"]) == (115.0, 106.0)
    assert what_if(kernels, host, [parse_speedup("kernel=^kA$:1000x")])["new_us"] == 106.0


def test_a_kernels_shapes_are_weighed_together(tmp_path: Path) -> None:
    # one GEMM kernel at two shapes, launched at 1 and 3 µs onto streams 7 and 8, each running [10, 310]:
    # brought to a hand-set attainable 50 µs alone, either shape is hidden by the other (saving 0); both
    # together end at 60 µs, 250 µs sooner ("nothing found that would save time" had been the report)
    name = "sm90_gemm_kernel"
    dims_a, dims_b = [[1024, 2048], [2048, 1024]], [[2048, 1024], [1024, 1024]]
    types = ["c10::BFloat16", "c10::BFloat16"]
    events = [
        op("aten::mm", 0, 5, **{"Input Dims": dims_a, "Input type": types}),
        call("cudaLaunchKernel", 1, 1, 1),
        kernel(name, 10, 300, 1, 7),
        op("aten::mm", 2, 5, **{"Input Dims": dims_b, "Input type": types}),
        call("cudaLaunchKernel", 3, 1, 2),
        kernel(name, 10, 300, 2, 8),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host, zero_weight_launches=True)
    roofline = _roofline([(name, "aten::mm", 50.0, 250.0), (name, "aten::mm", 50.0, 250.0)])
    roofline["input_dims"] = [json.dumps(dims_a, separators=(",", ":")), json.dumps(dims_b, separators=(",", ":"))]
    roofline["input_types"] = [json.dumps(types, separators=(",", ":"))] * 2
    pays = where_optimisation_pays(graph, roofline)
    # alone: nothing — the other shape still runs [10, 310], the whole run. (The two aten::mm overlap
    # without nesting, [0,5] and [2,7]: before stop 69 the host walk counted their shared [2,5] twice,
    # a 313 µs path in a 310 µs run, and kA alone "saved" those 3 µs.)
    assert sorted(r["end_to_end_saving_us"] for r in pays) == [0.0, 0.0]
    assert [r["kernel_end_to_end_saving_us"] for r in pays] == [250.0, 250.0]
