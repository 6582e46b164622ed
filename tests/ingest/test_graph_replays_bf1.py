"""CUDA-graph replays, values derived by hand from the events written: an Nsight whole-graph
replay is never given a captured launch, Kineto's `graph id` / `graph node id` are read, the
summary's graph-launched kernels are kernels, and a launch matched in part by graph node id is
said to be so."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from kernel_atlas.ingest.capture import graph_summary_line, read_capture
from kernel_atlas.ingest.pipeline import ingest_trace

US = 1000  # ns per µs in the Nsight exports
PROC = (0x1000000 + 100) << 24  # globalPid of pid 100
THREAD = PROC + 101
SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, globalPid, demangledName,
    shortName, gridX, gridY, gridZ, blockX, blockY, blockZ, graphId, graphNodeId);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId);
CREATE TABLE NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId);
CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start, end, globalTid, graphNodeId, originalGraphNodeId);
CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start, end, deviceId, streamId, correlationId, globalPid, graphId);
"""
STRINGS = [
    (1, "cudaLaunchKernel_v7000"),
    (2, "cudaGraphLaunch_v10000"),
    (3, "cudaStreamBeginCapture_v10000"),
    (4, "cudaStreamEndCapture_v10000"),
    (10, "ampere_sgemm_128x64_tn"),
    (11, "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"),
    (12, "void at::native::vectorized_elementwise_kernel<4, at::native::clamp_min_kernel<float>>(int)"),
]
MM = "aten::mm, seq = 1, op_id = 1, sizes = [[64, 128], [128, 256]]"
ADD = "aten::add, seq = 2, op_id = 2, sizes = [[64, 256], [64, 256], []]"
RELU = "aten::clamp_min, seq = 3, op_id = 3, sizes = [[64, 256], []]"
NO_LAUNCHER = "replayed from a CUDA/HIP graph (no per-kernel launcher)"


def _export(path: Path, ops: list[str], nodes: list[tuple], kernels: list[tuple], whole: list[tuple]) -> Path:
    """A stream capture on thread 101: cudaStreamBeginCapture corr 1 [900, 905] µs, then per op
    i an NVTX range [1000 + 200i, 1100 + 200i] holding its cudaLaunchKernel (corr 2 + i,
    [1010 + 200i, 1020 + 200i]); cudaStreamEndCapture corr 9 [1700, 1705]. One replay:
    cudaGraphLaunch corr 50 [5000, 5010] µs. `nodes`: CUDA_GRAPH_NODE_EVENTS rows, `kernels`:
    (start, end, name id, graphNodeId) of corr 50 on stream 7, graph 1; `whole`: GRAPH_TRACE
    (start, end) rows of corr 50, graph 1."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS)
    calls = [(900 * US, 905 * US, THREAD, 1, 3), (1700 * US, 1705 * US, THREAD, 9, 4)]
    calls.append((5000 * US, 5010 * US, THREAD, 50, 2))
    for i, text in enumerate(ops):
        t = (1000 + 200 * i) * US
        db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL, 0)", (t, t + 100 * US, text, THREAD))
        calls.append((t + 10 * US, t + 20 * US, THREAD, 2 + i, 1))
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)", calls)
    db.executemany("INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?, ?, ?, ?, ?)", nodes)
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, 50, ?, ?, ?, 1, 1, 1, 128, 1, 1, 1, ?)",
        [(start, end, PROC, name, name, node) for start, end, name, node in kernels],
    )
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 7, 50, ?, 1)",
        [(start, end, PROC) for start, end in whole],
    )
    db.commit()
    db.close()
    return path


# --- 1: a whole-graph replay is no captured launch's kernel ---------------------------------------


def test_a_whole_graph_replay_is_not_given_a_one_launch_capture(tmp_path: Path) -> None:
    """The export captures one launch (aten::mm's) and holds one whole-graph replay of graph 1:
    GRAPH_TRACE [5020, 5520] µs, corr 50, none of its kernels. The replay is one row for all the
    graph ran: it keeps no launcher, no shapes, category `other`, and the summary says it was
    replayed as a whole graph. It had been given aten::mm's launch ("1 of 1 graphs matched",
    100 % shapes, category gemm): 500 µs charged to one 64×128×256 GEMM."""
    path = _export(tmp_path / "whole.sqlite", [MM], [], [], [(5020 * US, 5520 * US)])
    # a capture trace given too: one aten::mm launch (Kineto), as a vLLM piecewise capture holds
    capture = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "pid": 1, "tid": 1, "ts": 100, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110, "dur": 20,
         "args": {"External id": 5, "Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 115, "dur": 5,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "pid": 1, "tid": 1, "ts": 200, "dur": 5,
         "args": {"correlation": 3}},
    ]  # fmt: skip
    (tmp_path / "capture.json").write_text(json.dumps({"traceEvents": capture}))
    why = "replayed as a whole graph, whose kernels are not in the export (nsys --cuda-graph-trace=node records them)"
    for captures, offered in (([], 0), (read_capture(tmp_path / "capture.json"), 1)):
        result = ingest_trace(path, captures=captures)
        (row,) = result.frame.to_dict("records")
        assert row["name"] == "<CUDA graph 1 replay>" and (row["ts_us"], row["dur_us"]) == (5020.0, 500.0)
        assert pd.isna(row["launcher"]) and pd.isna(row["cpu_op"]) and pd.isna(row["input_dims"])
        assert row["link"] == NO_LAUNCHER and row["category"] == "other"
        graphs = result.facts["graphs"]
        assert (graphs["launches"], graphs["matched"], graphs["unmatched"]) == (1, 0, {why: 1})
        assert (graphs["captured_graphs_offered"], graphs["captured_graphs_in_trace"]) == (offered, 1)
        assert (graphs["kernel_time_us"], graphs["with_launcher_pct"], graphs["with_shapes_pct"]) == (500.0, 0.0, 0.0)
        assert f"0 of 1 graphs matched a captured graph: 1 {why}" in "\n".join(result.warnings)
    # nothing offered: the line does not advise --capture, which cannot help
    line = graph_summary_line({**graphs, "captured_graphs_offered": 0, "captured_graphs_in_trace": 0})
    assert line == (
        "graphs: 1 launches replay 0.50 ms as whole graphs, whose kernels, launchers and shapes are not in "
        "the export (profile with nsys --cuda-graph-trace=node)"
    )


# --- 6: a launch matched in part by graph node id -------------------------------------------------


def test_a_launch_partly_matched_by_graph_node_id_is_said_so(tmp_path: Path) -> None:
    """Captured: aten::mm, aten::add, aten::clamp_min, creating nodes 101 and 102 inside their
    launches (the creation of 103 missing); instantiation clones 101, 102, 103 as 201, 202, 203.
    The replay (corr 50) runs 201 [5015, 5035], 202 [5036, 5040], 203 [5041, 5044] µs. 201 and 202
    take aten::mm's and aten::add's launch by node id; 203 none: 24 of 27 µs (88.9 %) with
    launcher and shapes. It had been said "0 of 1 graphs matched a captured graph: 1 kernel count
    differs …" (node 203's kernel aligned alone with the three-launch capture), and "1 captured
    graph offered" with no --capture."""
    nodes = [((1015 + 200 * i) * US, (1015 + 200 * i) * US, THREAD, 101 + i, None) for i in range(2)]
    nodes += [(2000 * US, 2000 * US, THREAD, 201 + i, 101 + i) for i in range(3)]
    kernels = [(5015 * US, 5035 * US, 10, 201), (5036 * US, 5040 * US, 11, 202), (5041 * US, 5044 * US, 12, 203)]
    result = ingest_trace(_export(tmp_path / "partly.sqlite", [MM, ADD, RELU], nodes, kernels, []))
    frame = result.frame.sort_values("ts_us")
    assert frame["launcher"].tolist()[:2] == ["aten::mm", "aten::add"] and pd.isna(frame["launcher"].iloc[2])
    assert frame["link"].tolist() == ["graph node id", "graph node id", NO_LAUNCHER]
    graphs = result.facts["graphs"]
    why = "matched by graph node id but for graph node 203, not traced to a creation in the export"
    assert graphs["unmatched"] == {why: 1} and graphs["matched_to"] == {}
    assert (graphs["launches"], graphs["matched"], graphs["partly_matched"]) == (1, 0, 1)
    assert (graphs["captured_graphs_offered"], graphs["captured_graphs_in_trace"]) == (0, 1)
    assert abs(graphs["with_launcher_pct"] - 100 * 24 / 27) < 1e-9
    said = [w for w in result.warnings if "graphs matched" in w]
    assert len(said) == 1 and said[0].endswith(
        f"0 of 1 graphs matched a captured graph (1 partly, by graph node id): 1 {why}"
    )
    assert graph_summary_line(graphs) == (
        "graphs: 0 of 1 graphs matched a captured graph (1 partly, by graph node id); 88.9% of graph-replayed "
        f"kernel time has launcher and shapes (unmatched: 1 {why})"
    )


def test_launches_wholly_matched_by_node_id_are_not_told_to_pass_a_capture() -> None:
    """Two launches matched by graph node id, nothing offered: the line had said "2 launches replay
    0.00 ms of kernels without launcher or shapes; pass --capture …" beside 100 % with shapes."""
    graphs = {"launches": 2, "matched": 2, "partly_matched": 0, "unmatched": {}}
    graphs |= {"matched_to": {"by graph node id": 2}, "captured_graphs_offered": 0, "captured_graphs_in_trace": 0}
    graphs |= {"kernel_time_us": 2.0, "with_launcher_pct": 100.0, "with_shapes_pct": 100.0}
    assert graph_summary_line(graphs) == (
        "graphs: 2 of 2 graphs matched a captured graph; 100.0% of graph-replayed kernel time has launcher and shapes"
    )


# --- 4, 5: Kineto's graph ids; graph-launched kernels are kernels --------------------------------


def _kineto(name: str, cat: str, ts: float, dur: float, corr: int, **args: object) -> dict:
    body = {"device": 0, "stream": 7, "correlation": corr, **args}
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": body}


def _replay_of_graph_7(tmp_path: Path) -> Path:
    """libkineto (CUDA >= 12) writes `graph id` and `graph node id` on every kernel, memcpy and
    memset, 0 where not graph-launched. cudaGraphLaunch corr 50 replays graph 7: a GEMM (node 1,
    [140, 160] µs), a memset (node 2, [161, 162]) and an add (node 3, [163, 167]); an eager add
    (corr 10, [100, 104], graph 0 node 0) and an eager GEMM that records neither key (corr 11,
    [110, 130])."""
    runtime = {"cat": "cuda_runtime", "pid": 1, "tid": 1, "dur": 5}
    events = [
        {**runtime, "ph": "X", "name": "cudaLaunchKernel", "ts": 10, "args": {"correlation": 10}},
        {**runtime, "ph": "X", "name": "cudaLaunchKernel", "ts": 20, "args": {"correlation": 11}},
        {**runtime, "ph": "X", "name": "cudaGraphLaunch", "ts": 30, "args": {"correlation": 50}},
        _kineto("add_kernel", "kernel", 100, 4, 10, **{"graph id": 0, "graph node id": 0}),
        _kineto("ampere_sgemm_128x64_tn", "kernel", 110, 20, 11),
        _kineto("ampere_sgemm_128x64_tn", "kernel", 140, 20, 50, **{"graph id": 7, "graph node id": 1}),
        _kineto("Memset (Device)", "gpu_memset", 161, 1, 50, bytes=64, **{"graph id": 7, "graph node id": 2}),
        _kineto("add_kernel", "kernel", 163, 4, 50, **{"graph id": 7, "graph node id": 3}),
    ]
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_kineto_graph_ids_are_read(tmp_path: Path) -> None:
    """By hand: graph_id 7 and graph_node_id 1, 2, 3 on the replayed GEMM, memset and add; empty
    on the eager rows (CUPTI's 0, and no key). Both columns had stayed empty for every JSON trace."""
    frame = ingest_trace(_replay_of_graph_7(tmp_path)).frame.sort_values("ts_us").set_index("ts_us")
    assert frame["graph_launch"].tolist() == [False, False, True, True, True]
    assert frame.loc[[140.0, 161.0, 163.0], "graph_id"].tolist() == [7, 7, 7]
    assert frame.loc[[140.0, 161.0, 163.0], "graph_node_id"].tolist() == [1, 2, 3]
    assert frame.loc[[100.0, 110.0], ["graph_id", "graph_node_id"]].isna().all().all()


def test_graph_launched_kernels_are_kernels(tmp_path: Path) -> None:
    """4 kernels, of which 2 graph-launched: the replay's memset is a graph-launched activity, not
    a kernel (it had been counted: 3, beside `graphs.kernel_time_us` of the kernels alone)."""
    facts = ingest_trace(_replay_of_graph_7(tmp_path)).facts
    assert (facts["kernels"], facts["graph_launched_kernels"]) == (4, 2)
    assert facts["graphs"]["kernel_time_us"] == 24.0  # the two replayed kernels, 20 + 4 µs
