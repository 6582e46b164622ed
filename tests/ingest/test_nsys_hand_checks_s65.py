"""Nsight Systems exports built by hand, values derived by hand from the rows written: whole
CUDA-graph replays (`--cuda-graph-trace=graph`) in busy time, runtime calls and NVTX ranges with
unusable times, and GPU activities without a process id beside another process's calls."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest.pipeline import ingest_trace

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, globalPid, demangledName,
    shortName, gridX, gridY, gridZ, blockX, blockY, blockZ, graphId, graphNodeId);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, globalPid, bytes, copyKind,
    srcKind, dstKind);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId);
CREATE TABLE NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId);
CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start, end, deviceId, streamId, correlationId, globalPid, graphId);
"""
STRINGS = [
    (1, "ampere_sgemm_128x64_tn"),
    (2, "add_kernel"),
    (3, "cudaLaunchKernel_v7000"),
    (4, "cudaGraphLaunch_v10000"),
]


def _process(pid: int) -> int:
    return (1 << 24 | pid) << 24  # globalPid: (hardware id << 48) | (pid << 24), as nsys writes it


A, B = _process(100), _process(200)
TA, TB = A + 101, B + 201  # globalTid of each process's thread
KERNEL = "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 7, ?, ?, ?, ?, 4, 1, 1, 128, 1, 1, ?, ?)"
CALL = "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)"
RANGE = "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL, 0)"


def _export(path: Path, *edits: tuple[str, tuple]) -> Path:
    """Process 100 (thread 101), device 0, times in ns:

    NVTX     aten::linear [2500, 19000] ⊃ aten::addmm [3000, 18000]; aten::add [25000, 30000]
    RUNTIME  cudaLaunchKernel corr 10 [4000, 5000]; cudaLaunchKernel corr 11 [26000, 27000]
    KERNEL   corr 10 [6000, 16000] sgemm; corr 11 [28000, 29000] add_kernel (stream 7)
    MEMCPY   corr 12 [43000, 53000] 1 MB, no launch recorded
    """
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS)
    linear = "aten::linear, seq = 5, op_id = 20, sizes = [[4, 8], [16, 8], [16]]"
    addmm = "aten::addmm, seq = 6, op_id = 21, sizes = [[16], [4, 8], [8, 16]]"
    ranges = [(2500, 19000, linear, TA), (3000, 18000, addmm, TA), (25000, 30000, "aten::add, seq = 7, op_id = 22", TA)]
    db.executemany(RANGE, ranges)
    db.executemany(CALL, [(4000, 5000, TA, 10, 3), (26000, 27000, TA, 11, 3)])
    db.executemany(KERNEL, [(6000, 16000, 0, 10, A, 1, 1, None, None), (28000, 29000, 0, 11, A, 2, 2, None, None)])
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (43000, 53000, 0, 7, 12, ?, 1000000, 1, 1, 2)", (A,))
    for sql, args in edits:
        db.execute(sql, args)
    db.commit()
    db.close()
    return path


# --- 1: whole graph replays count as busy time ----------------------------------------------------


def test_a_whole_graph_replay_is_a_gpu_activity_that_busy_time_counts(tmp_path: Path) -> None:
    """nsys's default `--cuda-graph-trace=graph` records a replay as one GRAPH_TRACE range and none
    of its kernels. Graph 1's replay (cudaGraphLaunch corr 15 [21000, 22000]) ran [30000, 40000]
    on device 0, stream 8. Graph 2's replay (corr 16) is recorded both ways, as a range
    [60000, 62000] and as its kernel [60500, 61500] (a node-level record): its kernel is kept, the
    range not, so that its time is not counted twice.

    Device 0 by hand: [6, 16] [28, 29] [30, 40] [43, 53] [60.5, 61.5] µs: span 61.5 − 6 = 55.5,
    busy 10 + 1 + 10 + 10 + 1 = 32, idle 23.5 (it had been busy 22, idle 33.5: the 10 µs the GPU
    ran graph 1 were idle time blamed on the host)."""
    path = _export(
        tmp_path / "graphs.sqlite",
        (CALL, (21000, 22000, TA, 15, 4)),
        (CALL, (59000, 59500, TA, 16, 4)),
        ("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (30000, 40000, 0, 8, 15, ?, 1)", (A,)),
        ("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (60000, 62000, 0, 8, 16, ?, 2)", (A,)),
        (KERNEL, (60500, 61500, 0, 16, A, 2, 2, 2, 7)),
    )
    result = ingest_trace(path)
    frame = result.frame.set_index("correlation")
    assert len(frame) == 5  # 2 kernels, the memcpy, graph 1's replay and graph 2's kernel
    graph = frame.loc[15]
    assert graph["name"] == "<CUDA graph 1 replay>" and graph["kind"] == "kernel"
    assert (graph["ts_us"], graph["dur_us"], graph["device"], graph["stream"]) == (30.0, 10.0, 0, 8)
    assert graph["graph_id"] == 1 and pd.isna(graph["graph_node_id"])  # the range is no node
    assert graph["launch"] == "cudaGraphLaunch" and graph["launch_ts_us"] == 21.0
    assert frame.loc[16, "name"] == "add_kernel" and frame.loc[16, "ts_us"] == 60.5  # the range left out
    device = next(d for d in result.facts["devices"] if d["device"] == 0)
    assert device["span_us"] == pytest.approx(55.5)
    assert device["busy_us"] == pytest.approx(32.0)
    assert device["idle_us"] == pytest.approx(23.5)
    assert result.facts["by_kind"]["kernel"]["total_us"] == pytest.approx(22.0)  # 10 + 1 + 10 + 1
    said = [w for w in result.warnings if "whole graphs" in w]
    assert len(said) == 1 and ": 1 CUDA-graph replay was recorded at the level of whole graphs" in said[0]
    assert "<CUDA graph N replay>" in said[0] and "busy and idle time count" in said[0]


# --- 4: runtime calls and NVTX ranges whose times cannot be used as recorded ------------------------


@pytest.mark.parametrize(
    ("edit", "launch_ts", "launch_dur", "said"),
    [
        # no start: the call is kept as an instant at its end, 27000 ns; its kernel keeps its launch
        (
            "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = NULL WHERE correlationId = 11",
            27.0,
            0.0,
            "1 runtime call without a usable start: given no duration, at the end (a launch's launch_ts_us is "
            "its call's end)",
        ),
        # no end: an instant at its start, 26000 ns
        (
            'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = NULL WHERE correlationId = 11',
            26.0,
            0.0,
            "1 runtime call without a usable end: given no duration, at the start",
        ),
        # a REAL start with a fraction: rounded to the nearest ns, 26001 (half away from zero);
        # the end, 27000, leaves 999 ns
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 26000.5 WHERE correlationId = 11", 26.001, 0.999, None),
    ],
    ids=["no start", "no end", "fractional start"],
)
def test_a_runtime_call_with_one_unusable_time_still_links_its_kernel(
    tmp_path: Path, edit: str, launch_ts: float, launch_dur: float, said: str | None
) -> None:
    """The call of corr 11 had been dropped unsaid, and its kernel [28000, 29000] said "launch not
    in the trace (issued inside the profiling window, not recorded)" though the call was there."""
    result = ingest_trace(_export(tmp_path / "calls.sqlite", (edit, ())))
    kernel = result.frame.set_index("correlation").loc[11]
    assert kernel["launch"] == "cudaLaunchKernel" and kernel["link"] == "correlation"
    assert kernel["launcher"] == "aten::add"  # [25000, 30000] holds both of the call's times
    assert kernel["launch_ts_us"] == pytest.approx(launch_ts, abs=1e-9)
    assert kernel["launch_dur_us"] == pytest.approx(launch_dur, abs=1e-9)
    assert [w.split(": ", 1)[1] for w in result.warnings if "runtime call" in w] == ([said] if said else [])


def test_a_runtime_call_ending_before_it_starts_has_no_duration_and_is_said(tmp_path: Path) -> None:
    """cudaLaunchKernel corr 10 [4000, 3900]: launch_dur_us had been −0.1 µs, unsaid; it is an
    instant at its start, 4000 ns, as the JSON reader reads a negative `dur`."""
    edit = 'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = 3900 WHERE correlationId = 10'
    result = ingest_trace(_export(tmp_path / "backwards.sqlite", (edit, ())))
    kernel = result.frame.set_index("correlation").loc[10]
    assert (kernel["launch"], kernel["launch_ts_us"], kernel["launch_dur_us"]) == ("cudaLaunchKernel", 4.0, 0.0)
    assert kernel["launcher"] == "aten::addmm"
    assert [w.split(": ", 1)[1] for w in result.warnings if "runtime call" in w] == [
        "1 runtime call with an end before the start: given no duration, at the start"
    ]


def test_nvtx_ranges_with_unusable_times_are_counted(tmp_path: Path) -> None:
    """aten::addmm [3000, 2900] ends before it starts: an instant at 3000 ns, which encloses no
    launch, so corr 10's launch at [4000, 5000] takes aten::linear [2500, 19000] (as before) —
    now said. aten::add without an end had been left out unsaid: left out, said."""
    result = ingest_trace(
        _export(
            tmp_path / "ranges.sqlite",
            ('UPDATE NVTX_EVENTS SET "end" = 2900 WHERE text LIKE ?', ("aten::addmm%",)),
            ('UPDATE NVTX_EVENTS SET "end" = NULL WHERE text LIKE ?', ("aten::add,%",)),
        )
    )
    frame = result.frame.set_index("correlation")
    assert frame.loc[10, "launcher"] == "aten::linear"
    assert frame.loc[11, "link"] == "launch has no enclosing CPU op or Python frame"  # aten::add is gone
    said = sorted(w.split(": ", 1)[1] for w in result.warnings if "NVTX range" in w)
    assert said == [
        "1 NVTX range with an end before the start: given no duration, at the start",
        "1 NVTX range without a usable start or end: left out",
    ]


# --- 5: GPU activities without a process id beside another process's calls ---------------------------


def test_a_kernel_without_a_process_id_beside_another_process_s_launch_is_said(tmp_path: Path) -> None:
    """Process 200 launched corr 10 too (cudaLaunchKernel [5000, 6000] on its thread 201), and
    its kernel [7000, 9000] on device 2 has globalPid NULL: only process 100 has GPU activities
    with a process id. The kernel is read as process 100's and linked to its corr 10 call
    (launch_ts_us 4.0, aten::addmm) — which may not be its own launch: that is now said."""
    path = _export(
        tmp_path / "no_pid.sqlite",
        (CALL, (5000, 6000, TB, 10, 3)),
        (KERNEL, (7000, 9000, 2, 10, None, 1, 1, None, None)),
    )
    result = ingest_trace(path)
    assert result.facts["nsys"]["processes"] == 1
    said = [w.split(": ", 1)[1] for w in result.warnings if "without a usable process id" in w]
    assert len(said) == 1, result.warnings
    assert said[0].startswith(
        "1 GPU activity without a usable process id (globalPid missing, null or text) is read as the first "
        "process's (rank 0) and linked to its calls by correlation id, though the export holds other "
        "processes' calls"
    )
    # process 100 alone: its own kernel without a process id is surely its own, nothing to say
    alone = _export(tmp_path / "alone.sqlite", (KERNEL, (7000, 9000, 2, 10, None, 1, 1, None, None)))
    assert not [w for w in ingest_trace(alone).warnings if "process id" in w]


def test_kernels_without_any_process_id_beside_two_processes_calls_are_said(tmp_path: Path) -> None:
    """No GPU activity has a process id (no process has attributable GPU work): the export is read
    as one process with every process's calls — and the runtime table holds calls of processes
    100 and 200, both with a corr 10. The 3 activities (2 kernels and the memcpy) are said."""
    path = _export(
        tmp_path / "none.sqlite",
        (CALL, (5000, 6000, TB, 10, 3)),
        ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "globalPid" = NULL', ()),
        ('UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET "globalPid" = NULL', ()),
    )
    said = [w.split(": ", 1)[1] for w in ingest_trace(path).warnings if "without a usable process id" in w]
    assert len(said) == 1 and said[0].startswith(
        "3 GPU activities without a usable process id (globalPid missing, null or text) are read as one "
        "process's and linked to the calls of every process by correlation id"
    )
