"""Critical path defects found by campaign AC, mended in stop 63: every expected value is worked
out by hand from the events each test builds (the derivation is in its comment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.analysis.critical_path import build_graph, parse_window
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, what_if
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.store.outputs import load_kernels
from tests.analysis.test_critical_path import call, op, solved, sync


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, device: int = 0) -> dict[str, Any]:
    args = {"correlation": corr, "device": device, "stream": stream, "grid": [1, 1, 1], "block": [128, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": args}


def on_thread(event: dict[str, Any], tid: int) -> dict[str, Any]:
    return {**event, "tid": tid}


# --- class 1: a kernel queued behind the previous window's kernel waited for it, not for its launch --
#   ProfilerStep#0 [0,100]: opA [5,15] ⊃ cudaLaunchKernel [7,9] → k0 on stream 7 [11,150]
#   ProfilerStep#1 [100,300]: opB [105,115] ⊃ cudaLaunchKernel [107,109] → k1 on stream 7 [150,200]
#   (launched while k0 still ran: it queued behind k0); cudaDeviceSynchronize [120,201] with its
#   Context Sync; opC [210,220].
# Window #1 holds opB, its launch, the sync, opC and k1 (k0 was launched before it). Stream 7 was
# busy with k0 until 150 when k1 was launched at 107: k1 has no launch edge (nor a stream edge: k0
# is not in the window). Paths: k1 50 → the sync's end (0) → opC 10 = 60 µs; the host alone:
# opB 2 + launch 2 + opB 6 + opC 10 = 20. So 60 µs: 50 GPU (83.33 %), 10 CPU (16.67 %), no launch
# overhead (the bug: a 43 µs launch edge 107 → 150, a path of 105 µs, 40.95 % launch overhead).
# What-if: the causal launch edge (0) lets k1 follow opB's first 2 µs, and the host's 9 µs between
# the sync's return (201) and opC (210) hold: 2 + 0 + 50 + 9 + 10 = 71, measured from the window's
# start (100; campaign BV 1: every chain starts at its own time) opB's 5 µs after it besides —
# baseline 76; without launch gaps it is still 76 — nothing to save (the bug: 43 µs saved).
WINDOW_EVENTS = [
    op("ProfilerStep#0", 0, 100, "user_annotation"),
    op("ProfilerStep#1", 100, 200, "user_annotation"),
    op("opA", 5, 10),
    call("cudaLaunchKernel", 7, 2, 1),
    kernel("k0_prev_step", 11, 139, 1),
    op("opB", 105, 10),
    call("cudaLaunchKernel", 107, 2, 2),
    kernel("k1", 150, 50, 2),
    call("cudaDeviceSynchronize", 120, 81, 3),
    sync("Context Sync", 200, 3, -1),
    op("opC", 210, 10),
]


def test_a_kernel_queued_behind_the_previous_windows_kernel_has_no_launch_overhead(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, WINDOW_EVENTS)
    window = parse_window("ProfilerStep#1")
    graph = build_graph(kernels, host, window)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(60.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["gpu", "cpu"]
    assert segs["dur_us"].tolist() == pytest.approx([50.0, 10.0])
    pct = breakdown_pct(segs)
    assert (pct["gpu_compute_bound"], pct["cpu_bound"], pct["gpu_kernel_launch_overhead"]) == (83.33, 16.67, 0.0)
    result = what_if(kernels, host, [], no_launch_gaps=True, window=window)
    assert (result["baseline_us"], result["new_us"], result["saving_us"]) == (76.0, 76.0, 0.0)


def test_the_whole_trace_still_chains_the_queued_kernel_to_the_one_before(tmp_path: Path) -> None:
    # The same trace whole: opA 2 + launch overhead 4 (11 − 7) + k0 139 + kernel gap 0 + k1 50 →
    # the sync's end → opC 10 = 205 µs (k1's stream edge from k0, as before).
    kernels, host = solved(tmp_path, WINDOW_EVENTS)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(205.0)
    assert segments(graph, path)["kind"].tolist() == ["cpu", "launch", "gpu", "gpu", "cpu"]  # the gap weighs 0


# --- class 5: cudaEventQuery polls, it never blocks ------------------------------------------------
#   opA [0,10] ⊃ cudaLaunchKernel [2,4] → k [6,26]; poll_loop [12,112] ⊃ ten cudaEventQuery calls
#   [12+10i, 20+10i] (i = 0..9).
# The thread works without a break: opA 10 (2 + 2 launch + 6), entering poll_loop 0, then ten calls
# of 8 µs (80) and the 2 µs after each (20): 10 + 100 = 110 µs, all CPU. The GPU branch is shorter
# (2 + 4 + 20 = 26). Under HTA's convention cudaEventQuery is a blocking call (its list): the calls'
# 80 µs weigh 0 — 10 + 20 = 30 µs (what the exact convention gave too, wrongly).
def _polling() -> list[dict[str, Any]]:
    events = [op("opA", 0, 10), call("cudaLaunchKernel", 2, 2, 1), kernel("k", 6, 20, 1), op("poll_loop", 12, 100)]
    return events + [call("cudaEventQuery", 12 + 10 * i, 8, 100 + i) for i in range(10)]


def test_an_event_query_is_cpu_work_not_a_wait(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, _polling())
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(110.0)
    segs = segments(graph, path)
    assert breakdown_pct(segs)["cpu_bound"] == 100.0
    by_name = segs.groupby("name")["dur_us"].sum().to_dict()
    assert by_name == pytest.approx({"opA": 8.0, "cudaLaunchKernel": 2.0, "cudaEventQuery": 80.0, "poll_loop": 20.0})
    assert longest_path(build_graph(kernels, host, convention="hta")).length_us == pytest.approx(30.0)


# --- class 4: without cuda_sync events, a host sync is released on its device and its streams -----
# A cudaStreamSynchronize released by the stream its thread launched onto, not by a kernel of
# another stream ending 0.5 µs later (no cuda_sync events):
#   opA [0,10] ⊃ cudaLaunchKernel [2,4] → k_bg on stream 7 [6,1007.5]
#   opB [900,910] ⊃ cudaLaunchKernel [902,904] → k_small on stream 8 [906,1007]
#   cudaStreamSynchronize [912,1008]; opC [1010,1510].
# The thread launched onto streams 7 and 8 (no earlier sync narrows them); both kernels end in the
# call, 0.5 µs apart — a tie within 1 µs, given to the stream it launched onto last (8): the sync
# waits for k_small. Paths: k_bg 2 + 4 + 1001.5 = 1007.5; opA 10 + opB 2 + launch 4 + k_small 101
# + opC 500 = 617; so 1007.5 µs (the bug: k_bg → the sync → opC, 1507.5). The what-if holds the
# host's recorded times, the 890 µs between opA and opB and the 2 µs around the sync included: the
# host launches k_small at 902, so 902 + 4 + 101 → the sync's end (1008) → 2 → opC 500 = 1509;
# k_bg 2× (500.75) changes nothing: 1509, saving 0 (the old rule, the gaps weighing nothing: 617,
# saving 390.5; the bug claimed 500.75).
STREAM_TIE = [
    op("opA", 0, 10),
    call("cudaLaunchKernel", 2, 2, 1),
    kernel("k_bg", 6, 1001.5, 1, 7),
    op("opB", 900, 10),
    call("cudaLaunchKernel", 902, 2, 2),
    kernel("k_small", 906, 101, 2, 8),
    call("cudaStreamSynchronize", 912, 96, 3),
    op("opC", 1010, 500),
]


def test_a_stream_sync_ties_go_to_the_stream_its_thread_launched_onto_last(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, STREAM_TIE)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(1007.5)
    assert segments(graph, path)["name"].tolist() == ["opA", "k_bg", "k_bg"]
    result = what_if(kernels, host, [parse_speedup("kernel=^k_bg$:2x")])
    assert (result["baseline_us"], result["new_us"], result["saving_us"]) == (1509.0, 1509.0, 0.0)


# A cudaStreamSynchronize waits for the streams its thread launched onto since its previous sync:
#   aten::a [0,10] ⊃ cudaLaunchKernel [1,2] → kW on stream 7 [5,168], cudaLaunchKernel [3,4] → kX
#     on stream 8 [6,40]
#   cudaStreamSynchronize S1 [11,41] (kX ends in it, kW does not: kX releases it)
#   aten::b [50,60] ⊃ cudaLaunchKernel [51,52] → kY on stream 8 [55,165]
#   cudaStreamSynchronize S2 [61,170]; aten::c [171,271].
# Since S1 the thread launched onto stream 8 alone: S2 waits for kY (165), not for kW (stream 7,
# ending later in S2, at 168). Path: aten::a 1 + launch 1 + aten::a 1 + launch overhead 3 (6 − 3) +
# kX 34 → S1's end → aten::b 1 + launch overhead 4 (55 − 51) + kY 110 → S2's end → aten::c 100 =
# 255 µs (kW's branch: 1 + 4 + 163 = 168). The bug: kW released S2 — 168 + 100 = 268 µs.
# What-if: kW 2× saves 0 (its branch is 86.5); kY 2× (55): 40 + 1 + 4 + 55 + 100 = 200, saving 55.
SINCE_LAST_SYNC = [
    op("aten::a", 0, 10),
    call("cudaLaunchKernel", 1, 1, 1),
    kernel("kW", 5, 163, 1, 7),
    call("cudaLaunchKernel", 3, 1, 2),
    kernel("kX", 6, 34, 2, 8),
    call("cudaStreamSynchronize", 11, 30, 3),
    op("aten::b", 50, 10),
    call("cudaLaunchKernel", 51, 1, 4),
    kernel("kY", 55, 110, 4, 8),
    call("cudaStreamSynchronize", 61, 109, 5),
    op("aten::c", 171, 100),
]


def test_a_stream_sync_waits_for_the_streams_launched_onto_since_the_previous_sync(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, SINCE_LAST_SYNC)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(255.0)
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["cpu", "cpu", "cpu", "launch", "gpu", "cpu", "launch", "gpu", "cpu"]
    assert segs["dur_us"].tolist() == pytest.approx([1, 1, 1, 3, 34, 1, 4, 110, 100])
    assert what_if(kernels, host, [parse_speedup("kernel=^kW$:2x")])["saving_us"] == 0.0
    assert what_if(kernels, host, [parse_speedup("kernel=^kY$:2x")])["saving_us"] == 55.0


# A cudaDeviceSynchronize waits for the device its thread launched on last (one thread, two GPUs):
#   opA [0,10] ⊃ cudaLaunchKernel [2,4] → k_dev1 on device 1 [6,290]
#   opB [200,210] ⊃ cudaLaunchKernel [202,204] → k_dev0 on device 0 [206,300]
#   cudaDeviceSynchronize [212,301] (device 0 current: the thread's last launch); opC [305,310].
# The sync waits for k_dev0 alone: opA 10 + opB 2 + launch 4 + k_dev0 94 + opC 5 = 115; k_dev1's
# branch 2 + 4 + 284 = 290 ends the path: 290 µs (the bug: k_dev1 released the sync, 295). The
# what-if holds the host's recorded times (190 µs between opA and opB, 2 before the sync, 4 after
# it): k_dev0 launched at 202, 202 + 4 + 94 → the sync's end → 4 → opC 5 = 309; k_dev1 2× (142)
# changes nothing: 309 (the old rule: 148, saving 142; the bug: 153).
def test_a_device_sync_waits_for_the_device_its_thread_launched_on(tmp_path: Path) -> None:
    events = [
        op("opA", 0, 10),
        call("cudaLaunchKernel", 2, 2, 1),
        kernel("k_dev1", 6, 284, 1, 7, device=1),
        op("opB", 200, 10),
        call("cudaLaunchKernel", 202, 2, 2),
        kernel("k_dev0", 206, 94, 2, 7, device=0),
        call("cudaDeviceSynchronize", 212, 89, 3),
        op("opC", 305, 5),
    ]
    trace = tmp_path / "two_devices.json"
    devices = [{"id": i, "name": "NVIDIA H100 80GB HBM3", "numSms": 132} for i in (0, 1)]
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": devices}))
    out = tmp_path / "two_devices.atlas"
    write_outputs(ingest_paths([trace]), out)
    kernels, host = load_kernels(out), load_host_events(out, 0)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(290.0)
    assert segments(graph, path)["name"].tolist() == ["opA", "k_dev1", "k_dev1"]
    result = what_if(kernels, host, [parse_speedup("kernel=^k_dev1$:2x")])
    assert (result["baseline_us"], result["new_us"]) == (309.0, 309.0)


# A sync whose thread launched nothing keeps the documented fallback (the activity of any stream
# that ended last while it ran): thread 2 launches kA on stream 7 [5,105]; thread 1 only calls
# cudaStreamSynchronize [3,106], then aten::relu [106,146]. The sync waits for kA: thread 2's
# launch overhead 4 (5 − 1) + kA 100 + relu 40 = 144 µs.
def test_a_sync_of_a_thread_that_launched_nothing_keeps_the_fallback(tmp_path: Path) -> None:
    events = [
        on_thread(call("cudaLaunchKernel", 1, 1, 1), 2),
        kernel("kA", 5, 100, 1),
        call("cudaStreamSynchronize", 3, 103, 2),
        op("aten::relu", 106, 40),
    ]
    kernels, host = solved(tmp_path, events)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(144.0)
    assert segments(graph, path)["name"].tolist() == ["kA", "kA", "aten::relu"]


# --- class 3: ranks joined only by send/recv have their clocks aligned on the transfer's end -------
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def _p2p_rank(rank: int, shift: float) -> dict[str, Any]:
    """rank 0: aten::mm [0,10] ⊃ launch [2,4] → GEMM [6,506]; record_param_comms [12,20] ⊃ launch
    [14,16] → send [506,606] (queued behind the GEMM); cudaDeviceSynchronize [22,607].
    rank 1: record_param_comms [0,8] ⊃ launch [2,4] → recv [6,606]; cudaDeviceSynchronize [10,607];
    after [610,710]. Every timestamp of the rank + `shift` (its clock)."""
    params = {
        "Collective name": "send" if rank == 0 else "recv",
        "In msg nelems": 1 << 20,
        "Out msg nelems": 1 << 20,
        "Group size": 2,
        "dtype": "Float",
        "Process Group Name": "5",
        "Process Group Ranks": "[0, 1]",
    }
    if rank == 0:
        events = [
            op("aten::mm", 0, 10),
            call("cudaLaunchKernel", 2, 2, 1),
            kernel("gemm_k", 6, 500, 1),
            op("record_param_comms", 12, 8, **params),
            call("cudaLaunchKernel", 14, 2, 2),
            {**kernel(SEND_RECV, 506, 100, 2), "args": {**kernel(SEND_RECV, 506, 100, 2)["args"], **params}},
            call("cudaDeviceSynchronize", 22, 585, 3),
        ]
    else:
        events = [
            op("record_param_comms", 0, 8, **params),
            call("cudaLaunchKernel", 2, 2, 1),
            {**kernel(SEND_RECV, 6, 600, 1), "args": {**kernel(SEND_RECV, 6, 600, 1)["args"], **params}},
            call("cudaDeviceSynchronize", 10, 597, 2),
            op("after", 610, 100),
        ]
    for event in events:
        event["ts"] += shift
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
    }


def test_ranks_joined_by_send_and_recv_align_their_clocks_on_the_transfer(tmp_path: Path) -> None:
    # Rank 1's clock runs 1 s (1,000,000 µs) ahead. A receive ends when its send ends: rank 1's
    # recv ends at 1,000,606 on its clock, rank 0's send at 606 on its own, so rank 1's offset is
    # 1,000,000 and, on the common clock, the recv [6,606] waits for the send [506,606]. The joint
    # path is then the same-clock one: rank 0's aten::mm 2 + launch overhead 4 + GEMM 500 + kernel
    # gap 0 + the transfer after the last arrival (the send at 506 → the recv's end at 606) 100 +
    # (rank 1's sync released, 0) + rank 1's after 100 = 706 µs: 500 compute (70.82 %), 100
    # communication (14.16 %), 102 CPU (14.45 %), 4 launch (0.57 %). The bug (offset 0): the same
    # 706 µs through rank 1's 600 µs recv, 85 % communication and no compute.
    paths = []
    for rank, shift in ((0, 0.0), (1, 1_000_000.0)):
        path = tmp_path / f"p2p_rank{rank}.json"
        path.write_text(json.dumps(_p2p_rank(rank, shift)))
        paths.append(path)
    out = tmp_path / "p2p.atlas"
    write_outputs(ingest_paths(paths), out)
    build_report(out)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert (facts["joint_ranks"], facts["total_us"]) == (2, 706.0)
    pct = facts["breakdown_pct"]
    assert (pct["gpu_compute_bound"], pct["gpu_communication_bound"]) == (70.82, 14.16)
    assert (pct["cpu_bound"], pct["gpu_kernel_launch_overhead"]) == (14.45, 0.57)
    segs = pd.read_parquet(out / "critical_path.parquet")
    assert segs["rank"].tolist() == [0, 0, 0, 1, 1]  # the transfer ends rank 1's recv
    assert segs["kind"].tolist() == ["cpu", "launch", "gpu", "collective", "cpu"]
    assert segs["dur_us"].tolist() == pytest.approx([2.0, 4.0, 500.0, 100.0, 100.0])
    assert any("rank 1" in note and "send/recv" in note and "1,000,000" in note for note in facts["notes"])
