"""Nsight Systems SQLite exports: hand-built exports with values checked by hand, the committed
real slice, and bad input."""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.store.outputs import load_kernels
from tests.support.traces import EXAMPLE, REPO

runner = CliRunner()
SLICE = REPO / "examples" / "h100_2gpu_slice.sqlite"

KERNEL_COLUMNS = (
    "start, end, deviceId, streamId, correlationId, globalPid, demangledName, shortName, "
    "gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, dynamicSharedMemory, "
    "graphId, graphNodeId"
)
SCHEMA = f"""
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS});
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, globalPid, bytes,
    copyKind, srcKind, dstKind, graphNodeId);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, streamId, correlationId, globalPid, bytes, memKind,
    graphNodeId);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, streamId, globalPid, syncType);
CREATE TABLE NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId);
CREATE TABLE TARGET_INFO_GPU (id, name, smCount, totalMemory, computeMajor, computeMinor, threadsPerWarp);
"""
PID = 0x1000000 + 300  # the process's pid (300) as nsys's globalTid/globalPid keep it, shifted by 24 bits
PROC = PID << 24
THREAD = PROC + 301
ADDMM = "aten::addmm, seq = 2, op_id = 11, sizes = [[16], [4, 8], [8, 16]], input_op_ids = [(1, 0)]"
STRINGS = [
    (1, "ampere_sgemm_128x64_tn"),
    (2, "sgemm"),
    (3, "cudaLaunchKernel_v7000"),
    (4, "cudaMemcpyAsync_v3020"),
    (5, "ncclGroupEnd"),
]


def _export(path: Path, pid_shift: int = 0, device: int = 0, create: bool = True) -> Path:
    """One process (pid 300 + pid_shift), its thread 301, on `device`; times in ns:

    NVTX  nn.Module: Linear_0                                     [  500, 9500]
          aten::linear, seq = 1, op_id = 10, sizes = [[4, 8], [16, 8], [16]]      [ 1000, 9000]
          aten::addmm, seq = 2, op_id = 11, sizes = [[16], [4, 8], [8, 16]], …    [ 2000, 8000]
          ncclGroupEnd (textId 5, domain 1)                       [ 2800, 4200]
    RUNTIME cudaLaunchKernel corr 5 [3000, 4000]; cudaMemcpyAsync corr 6 [10000, 11000]
    KERNEL  corr 5 [5000, 7500] grid (4,1,1) block (128,1,1), 64 registers, 1024 + 2048 B shared;
            corr 7 [20000, 20250] (no launch), the same, graph 3 node 17
    MEMCPY  corr 6 [12000, 12800] 4096 B HtoD pageable → device
    MEMSET  corr 8 [13000, 13100] 64 B device (no launch)
    SYNC    stream sync [100, 600]
    """
    proc, thread = PROC + (pid_shift << 24), THREAD + (pid_shift << 24)
    db = sqlite3.connect(path)
    if create:
        db.executescript(SCHEMA)
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS)
        db.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0, 32)")
        db.execute("INSERT INTO TARGET_INFO_GPU VALUES (1, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0, 32)")
    nvtx = [
        (500, 9500, 59, "nn.Module: Linear_0", thread, None, 0),
        (1000, 9000, 59, "aten::linear, seq = 1, op_id = 10, sizes = [[4, 8], [16, 8], [16]]", thread, None, 0),
        (2000, 8000, 59, ADDMM, thread, None, 0),
        (2500, None, 34, "a mark", thread, None, 0),
        (2800, 4200, 59, None, thread, 5, 1),  # NCCL's own domain: left out
    ]
    db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)", nvtx)
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
        [(3000, 4000, thread, 5, 3), (10000, 11000, thread, 6, 4)],
    )
    db.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES ({', '.join('?' * 19)})",
        [
            (5000, 7500, device, 7, 5, proc, 1, 2, 4, 1, 1, 128, 1, 1, 64, 1024, 2048, None, None),
            (20000, 20250, device, 7, 7, proc, 1, 2, 4, 1, 1, 128, 1, 1, 64, 1024, 2048, 3, 17),
        ],
    )
    db.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (12000, 12800, ?, 7, 6, ?, 4096, 1, 0, 2, NULL)", (device, proc)
    )
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (13000, 13100, ?, 7, 8, ?, 64, 2, NULL)", (device, proc))
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (100, 600, ?, 7, ?, 3)", (device, proc))
    db.commit()
    db.close()
    return path


def _one_line_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert needle in lines[0], lines[0]


def test_hand_built_export_rows_and_links(tmp_path: Path) -> None:
    result = ingest_trace(_export(tmp_path / "one.sqlite"))
    frame = result.frame.set_index("correlation")
    assert list(frame["kind"].astype(str)) == [
        "kernel",
        "memcpy",
        "memset",
        "kernel",
    ]  # by start: 5000, 12000, 13000, 20000
    kernel = frame.loc[5]
    assert kernel["name"] == "ampere_sgemm_128x64_tn"  # demangledName id 1
    assert kernel["ts_us"] == 5.0 and kernel["dur_us"] == 2.5  # 5000 ns, 7500 - 5000 ns
    assert kernel["device"] == 0 and kernel["stream"] == 7
    assert kernel["grid"] == "[4, 1, 1]" and kernel["block"] == "[128, 1, 1]"
    assert kernel["registers_per_thread"] == 64 and kernel["shared_mem_bytes"] == 3072  # 1024 + 2048
    assert pd.isna(kernel["graph_id"]) and pd.isna(kernel["graph_node_id"])
    assert frame.loc[7, "graph_id"] == 3 and frame.loc[7, "graph_node_id"] == 17
    assert kernel["launch"] == "cudaLaunchKernel"  # `_v7000` dropped as Kineto names it
    assert kernel["launch_ts_us"] == 3.0
    assert kernel["launcher"] == "aten::addmm"  # the innermost op range around [3000, 4000]
    assert kernel["cpu_op"] == "aten::addmm"
    assert kernel["input_dims"] == "[[16],[4,8],[8,16]]"  # addmm's sizes, not linear's
    assert kernel["module"] == "Linear_0"
    copy = frame.loc[6]
    assert copy["name"] == "Memcpy HtoD (Pageable -> Device)"  # copyKind 1, srcKind 0, dstKind 2
    assert copy["bytes"] == 4096 and copy["dur_us"] == 0.8
    assert copy["launch"] == "cudaMemcpyAsync" and pd.isna(copy["launcher"])  # [10000, 11000] is outside every op
    assert copy["link"] == "launch has no enclosing CPU op or Python frame"
    memset = frame.loc[8]
    assert memset["name"] == "Memset (Device)" and memset["bytes"] == 64  # memKind 2
    # correlation 8 follows the recorded launches 5 and 6: issued inside the window, its record lost
    assert memset["link"] == "launch not in the trace (issued inside the profiling window, not recorded)"
    unlaunched = frame.loc[7]  # no runtime row: borrows launcher and shapes from the same kernel, grid, block
    assert pd.isna(unlaunched["launch"]) and unlaunched["link"] == "inferred: same kernel, grid and block"
    assert kernel["call_stack"] == "cudaLaunchKernel <- aten::addmm <- aten::linear <- nn.Module: Linear_0"
    facts = result.facts
    assert facts["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and facts["gpus"][0]["numSms"] == 132
    assert facts["kernels"] == 2 and facts["kernel_time_us"] == 2.75  # 2.5 + 0.25
    assert facts["nsys"] == {
        "processes": 1,
        "host_syncs": {"stream": {"count": 1, "total_us": 0.5}},  # syncType 3, 600 - 100 ns
        "graph_node_matched": 0,
    }
    assert not any("schema" in w for w in result.warnings)


def test_two_processes_are_two_ranks_with_their_own_correlations(tmp_path: Path) -> None:
    path = _export(tmp_path / "two.sqlite", pid_shift=0, device=1)
    _export(path, pid_shift=1, device=0, create=False)  # the same correlation ids, in another process
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    frame = load_kernels(out)
    assert sorted(frame.groupby("rank")["device"].unique().map(list).tolist()) == [[0], [1]]
    assert frame.groupby("rank")["device"].first().to_dict() == {0: 0, 1: 1}  # ranked by lowest device
    linked = frame[frame["correlation"] == 5]
    assert len(linked) == 2 and set(linked["launcher"]) == {"aten::addmm"}
    assert len(frame) == 8


def test_processes_beyond_the_limit_are_left_out_in_one_warning(tmp_path: Path, monkeypatch) -> None:
    from kernel_atlas.ingest import nsys

    monkeypatch.setattr(nsys, "MAX_PROCESSES", 2)
    path = _export(tmp_path / "three.sqlite", pid_shift=0, device=1)
    _export(path, pid_shift=1, device=0, create=False)
    _export(path, pid_shift=2, device=2, create=False)
    db = sqlite3.connect(path)  # pid 301 (shift 1) gets a third kernel, pid 300 a memcpy less: the fewest
    db.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES ({', '.join('?' * 19)})",
        (30000, 30100, 0, 7, 9, PROC + (1 << 24), 1, 2, 4, 1, 1, 128, 1, 1, 64, 0, 0, None, None),
    )
    db.execute('DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE "globalPid" = ?', (PROC,))
    db.commit()
    db.close()
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    frame = load_kernels(out)
    # 4 and 5 GPU activities (kernels, memcpy, memset) for pids 302 and 301 are kept; pid 300 (3) is not
    assert frame.groupby("rank")["device"].first().to_dict() == {0: 0, 1: 2}  # ranked by lowest device
    assert len(frame) == 9
    said = [line for line in result.output.splitlines() if "processes with GPU work" in line]
    assert len(said) == 1 and said[0].endswith(
        "three.sqlite: holds 3 processes with GPU work: the 2 with the most GPU activities are read as "
        "ranks, the other 1 (3 activities) are left out"
    )


def test_missing_columns_degrade_in_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId, demangledName);
        INSERT INTO StringIds VALUES (1, 'k');
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 4000, 1, 1);
        """
    )
    db.close()
    result = ingest_trace(path)
    assert len(result.frame) == 1 and result.frame["dur_us"].iloc[0] == 3.0
    schema = [w for w in result.warnings if "schema" in w]
    assert len(schema) == 1
    # deviceId, streamId, grid ×3, block ×3, registers, shared memory ×2, graphId, graphNodeId; not
    # globalPid: without it every row is the one process's, nothing is left empty
    assert "13 columns missing" in schema[0]
    assert "CUPTI_ACTIVITY_KIND_KERNEL.deviceId" in schema[0] and "globalPid" not in schema[0]


def test_not_an_export(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    _one_line_error(
        runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")]), "not an Nsight Systems export"
    )


def test_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "text.sqlite"
    path.write_text("hello, not a database\n" * 100)
    _one_line_error(runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")]), "text.sqlite")


def test_truncated_export(tmp_path: Path) -> None:
    data = SLICE.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: len(data) // 3])
    _one_line_error(runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")]), "cut.sqlite")


def test_locked_export(tmp_path: Path) -> None:
    path = _export(tmp_path / "locked.sqlite")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        _one_line_error(runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")]), "locked")
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_nsys_rep_without_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"\0" * 64)
    monkeypatch.setenv("PATH", str(tmp_path))
    _one_line_error(runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")]), "nsys export --type sqlite")


def test_real_slice_rows_report_and_diff(tmp_path: Path) -> None:
    # The slice holds 124 + 124 kernels and 56 memcpys (sqlite3 on the file):
    #   SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1  → (0, 124), (1, 124)
    #   SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY  → 56;  … MEMSET → 0
    db = sqlite3.connect(f"file:{SLICE}?mode=ro", uri=True)
    longest = db.execute('SELECT max("end" - start), deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    db.close()
    out = tmp_path / "slice"
    assert runner.invoke(app, ["ingest", str(SLICE), "-o", str(out)]).exit_code == 0
    frame = load_kernels(out)
    kernels = frame[frame["kind"] == "kernel"]
    assert kernels.groupby("device").size().to_dict() == {0: 124, 1: 124}
    assert len(frame) == 304
    top = kernels.loc[kernels["dur_us"].idxmax()]
    assert round(top["dur_us"] * 1000) == longest[0] and top["device"] == longest[1]
    assert kernels["launcher"].notna().all()  # every launch of the slice lies inside an emit_nvtx op
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    kineto = tmp_path / EXAMPLE.name  # a copy: diff ingests it next to itself
    shutil.copyfile(EXAMPLE, kineto)
    diff = runner.invoke(app, ["diff", str(out), str(kineto), "-o", str(tmp_path / "diff.csv")])  # nsys ↔ Kineto
    assert diff.exit_code == 0, diff.output


def test_nsys_rep_exported_through_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in `nsys` that "exports" by copying a hand-built export to --output
    source = _export(tmp_path / "made.sqlite")
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nsys"
    fake.write_text(
        '#!/bin/sh\n[ "$1 $2 $3" = "export --type sqlite" ] || exit 3\n'
        f'while [ "$1" != "--output" ]; do shift; done\ncp "{source}" "$2"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\0" * 64)
    result = runner.invoke(app, ["ingest", str(report)])
    assert result.exit_code == 0, result.output
    frame = load_kernels(tmp_path / "run.atlas")  # `.nsys-rep` is not part of the output's name
    assert len(frame) == 4 and set(frame["trace"]) == {"run"}
    assert frame.loc[frame["correlation"] == 5, "launcher"].tolist() == ["aten::addmm"]


def test_untimed_and_untyped_values(tmp_path: Path) -> None:
    path = _export(tmp_path / "odd.sqlite")
    db = sqlite3.connect(path)
    db.execute(  # no end; a device id that is text: the activity is dropped, counted once
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES "
        "(30000, NULL, 'zero', 7, 9, ?, 1, 2, 4, 1, 1, 128, 1, 1, 64, 0, 0, NULL, NULL)",
        (PROC,),
    )
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (NULL, 4000, ?, 9, 3)", (THREAD,))  # left out
    db.execute(  # absolute ns past 2^53: the duration stays exact
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES "
        "(1700000000000000001, 1700000000000001234, 'zero', 7, 10, ?, 1, 2, 4, 1, 1, 128, 1, 1, 64, 0, 0, NULL, NULL)",
        (PROC,),
    )
    db.commit()
    db.close()
    result = ingest_trace(path)
    frame = result.frame
    assert len(frame) == 5  # 4 + the absolute one
    assert frame.loc[frame["correlation"] == 10, "dur_us"].tolist() == [1.233]  # 1234 - 1 ns
    assert pd.isna(frame.loc[frame["correlation"] == 10, "device"]).all()  # 'zero' is not a device id
    assert any("1 GPU activity without a usable ts or dur was left out" in w for w in result.warnings)


def test_activity_tables_read_in_pieces_give_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_Export.select` reads SELECT_ROWS rows at a time: read two at a time (nulls, a text device
    id and absolute ns past 2^53 landing in different pieces), the kernels table is the one read whole."""
    from kernel_atlas.ingest import nsys

    path = _export(tmp_path / "pieces.sqlite")
    db = sqlite3.connect(path)
    db.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES "
        "(1700000000000000001, 1700000000000001234, 'zero', 7, 10, ?, 1, 2, 4, 1, 1, 128, 1, 1, 64, 0, 0, NULL, NULL)",
        (PROC,),
    )
    db.commit()
    db.close()
    whole = ingest_trace(path).frame
    monkeypatch.setattr(nsys, "SELECT_ROWS", 2)
    pieces = ingest_trace(path).frame
    pd.testing.assert_frame_equal(pieces, whole)
    assert pieces.loc[pieces["correlation"] == 10, "dur_us"].tolist() == [1.233]


def test_folder_of_exports_and_traces(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    _export(folder / "nsys_run.sqlite")
    shutil.copyfile(EXAMPLE, folder / EXAMPLE.name)
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    frame = load_kernels(out)
    assert set(frame["trace"]) == {"nsys_run", "h100_bert_small_infer"}
    assert (frame["trace"] == "nsys_run").sum() == 4


def test_nsys_export_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nsys"
    fake.write_text("#!/bin/sh\necho 'Importer error: the report is damaged' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    report = tmp_path / "bad.nsys-rep"
    report.write_bytes(b"\0" * 64)
    result = runner.invoke(app, ["ingest", str(report), "-o", str(tmp_path / "o")])
    _one_line_error(result, "the report is damaged")
    assert "bad.nsys-rep" in result.output


def test_graph_kernels_matched_by_node_id(tmp_path: Path) -> None:
    """Capture: aten::mm [100000, 110000] ns holds the captured cudaLaunchKernel (corr 20), during
    which node 900 is created; instantiation clones it as node 901. Two replays (cudaGraphLaunch
    corr 30 and 31, outside any op) each run node 901's kernel."""
    path = tmp_path / "graph.sqlite"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executescript("CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start, end, globalTid, graphNodeId, originalGraphNodeId);")
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [*STRINGS, (6, "cudaGraphLaunch_v10000"), (7, "gemv_kernel")])
    db.execute(
        "INSERT INTO NVTX_EVENTS VALUES (100000, 110000, 59, 'aten::mm, seq = 5, op_id = 50, sizes = [[2, 3], [3, 4]]', "
        "?, NULL, 0)",
        (THREAD,),
    )
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
        [(101000, 102000, THREAD, 20, 3), (200000, 201000, THREAD, 30, 6), (300000, 301000, THREAD, 31, 6)],
    )
    db.executemany(
        "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?, ?, ?, ?, ?)",
        [(101500, 101600, THREAD, 900, None), (120000, 120100, THREAD, 901, 900)],
    )
    db.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES ({', '.join('?' * 19)})",
        [
            (202000, 203000, 0, 7, 30, PROC, 7, 7, 1, 1, 1, 32, 1, 1, 32, 0, 0, 4, 901),
            (302000, 303000, 0, 7, 31, PROC, 7, 7, 1, 1, 1, 32, 1, 1, 32, 0, 0, 4, 901),
        ],
    )
    db.commit()
    db.close()
    result = ingest_trace(path)
    frame = result.frame
    assert frame["graph_launch"].tolist() == [True, True]
    assert frame["launch"].tolist() == ["cudaGraphLaunch", "cudaGraphLaunch"]
    assert frame["launcher"].tolist() == ["aten::mm", "aten::mm"]  # the op around node 900's creation
    assert frame["call_stack"].tolist() == ["cudaLaunchKernel <- aten::mm"] * 2  # the captured launch
    assert frame["input_dims"].tolist() == ["[[2,3],[3,4]]"] * 2
    assert frame["link"].tolist() == ["graph node id"] * 2
    assert frame["graph_node_id"].tolist() == [901, 901] and frame["graph_id"].tolist() == [4, 4]
    assert frame["cpu_op_id"].nunique() == 2  # one op call per replay
    assert result.facts["nsys"]["graph_node_matched"] == 2
    assert result.facts["unlinked"] == {}  # nothing left "replayed from a graph (no launcher)"
    # the graphs block counts them: 2 launches of a 1 µs kernel each, all with launcher and shapes (it
    # had said 0 launches and 0 µs: the node-id matches were left out of it)
    graphs = result.facts["graphs"]
    assert (graphs["launches"], graphs["matched"], graphs["kernel_time_us"]) == (2, 2, 2.0)
    assert (graphs["with_launcher_pct"], graphs["with_shapes_pct"]) == (100.0, 100.0)


def test_whole_graph_replays_are_said(tmp_path: Path) -> None:
    path = _export(tmp_path / "graphs.sqlite")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start, end, deviceId, globalPid, graphId)")
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, ?, 4)", [(1, 2, PROC), (3, 4, PROC)])
    db.commit()
    db.close()
    warnings = [w for w in ingest_trace(path).warnings if "whole graphs" in w]
    assert len(warnings) == 1 and "2 CUDA-graph replays" in warnings[0]


def _edited(path: Path, *statements: tuple[str, tuple]) -> Path:
    db = sqlite3.connect(path)
    for sql, args in statements:
        db.execute(sql, args)
    db.commit()
    db.close()
    return path


def test_device_ids_that_are_text_everywhere(tmp_path: Path) -> None:
    """SQLite does not type its columns: a device id that is text in every table costs the
    device (none), not the export."""
    path = _export(tmp_path / "text_devices.sqlite")
    tables = ("KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION")
    _edited(path, *((f"UPDATE CUPTI_ACTIVITY_KIND_{t} SET deviceId = 'zero'", ()) for t in tables))
    frame = ingest_trace(path).frame
    assert len(frame) == 4 and frame["device"].isna().all()
    assert frame.loc[frame["correlation"] == 5, "launcher"].tolist() == ["aten::addmm"]  # still linked


def test_texts_that_are_blobs_numbers_or_not_utf8(tmp_path: Path) -> None:
    path = _edited(
        _export(tmp_path / "texts.sqlite"),
        ("UPDATE StringIds SET value = ? WHERE id = 1", (b"sgemm\xff_nt",)),  # a blob, one byte not UTF-8
        ("UPDATE StringIds SET value = 42 WHERE id = 2", ()),  # a number
        ("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'nn.Module: Linear_0'", (b"nn.Module: Lin\xfeear_0",)),
        ("UPDATE TARGET_INFO_GPU SET name = CAST(X'4e564944494120ff' AS TEXT)", ()),  # 'NVIDIA \xff' typed text
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on the way
        result = ingest_trace(path)
    kernel = result.frame.set_index("correlation").loc[5]
    assert kernel["name"] == "sgemm\ufffd_nt"
    assert kernel["module"] == "Lin\ufffdear_0"
    assert result.facts["gpus"][0]["name"] == "NVIDIA \ufffd"
    # the typed text of the two GPU rows, and the two blobs (StringIds 1, the module's NVTX text):
    # blobs had been decoded unsaid (2)
    said = [w for w in result.warnings if "not UTF-8" in w]
    assert len(said) == 1 and "4 texts were not UTF-8" in said[0], result.warnings


def test_numbers_beyond_int64_cost_their_field(tmp_path: Path) -> None:
    path = _edited(
        _export(tmp_path / "huge.sqlite"),
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET registersPerThread = 1e300, gridX = -1e300", ()),
        ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = 1e300", ()),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = ingest_trace(path).frame.set_index("correlation")
    assert pd.isna(frame.loc[5, "registers_per_thread"]) and pd.isna(frame.loc[6, "bytes"])
    assert frame.loc[5, "dur_us"] == 2.5  # the rest of the row kept


def test_a_process_id_beyond_int64_is_no_process(tmp_path: Path) -> None:
    """A REAL globalPid of 1e300 reads as 2^63 − 1 in SQLite: its process's filter bounds,
    (pid + 1) << 24, left int64 (an OverflowError, "internal error"). It is no process: the
    export is read as the process of the memcpy and the memset, which the kernel is not in."""
    path = _edited(_export(tmp_path / "pid.sqlite"), ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = 1e300", ()))
    frame = ingest_trace(path).frame.set_index("correlation")
    assert sorted(frame["kind"].astype(str)) == ["memcpy", "memset"] and frame.loc[6, "dur_us"] == 0.8


def test_long_texts_are_cut_in_sqlite_and_counted(tmp_path: Path) -> None:
    path = _edited(
        _export(tmp_path / "long.sqlite"),
        ("UPDATE StringIds SET value = ? WHERE id = 1", ("k" * 100_000,)),
        ("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'nn.Module: Linear_0'", ("nn.Module: " + "m" * 50_000,)),
        ("UPDATE TARGET_INFO_GPU SET name = ?", ("NVIDIA H100 " + "g" * 10_000,)),
    )
    result = ingest_trace(path)
    kernel = result.frame.set_index("correlation").loc[5]
    assert kernel["name"] == "k" * 16_383 + "…"  # 16,384 characters, the last the mark
    assert kernel["module"].startswith("mmm") and len(kernel["module"]) < 16_384
    assert kernel["launcher"] == "aten::addmm"  # the op ranges beside it untouched
    gpu = result.facts["gpus"][0]["name"]
    assert gpu == ("NVIDIA H100 " + "g" * 243 + "…") and len(gpu) == 256
    assert any("2 strings longer than 16,384 characters were cut" in w for w in result.warnings), result.warnings
    assert any("deviceProperties: 2 text(s) longer than 256 characters cut" in w for w in result.warnings)  # 2 GPUs


def test_sqlite_without_materialized_reads_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite before 3.35 has no `AS MATERIALIZED`: the NVTX query runs without it, same rows."""
    from kernel_atlas.ingest import nsys

    path = _export(tmp_path / "old.sqlite")
    monkeypatch.setattr(nsys, "_MATERIALIZED", "")
    frame = ingest_trace(path).frame.set_index("correlation")
    assert frame.loc[5, "launcher"] == "aten::addmm" and frame.loc[5, "module"] == "Linear_0"
    assert frame.loc[5, "input_dims"] == "[[16],[4,8],[8,16]]"


def test_a_credential_the_sqlite_cut_would_end_is_redacted(tmp_path: Path) -> None:
    """SQLite hands on the CUT_TAIL characters past the cut too, so that a URL password before a
    cut `@host` is recognised (it was kept whole: `https://user:SECRETPW77…`)."""
    head = "k" * (16_383 - len(" https://user:SECRETPW77"))  # the cut falls on the `@`
    path = _edited(
        _export(tmp_path / "cut.sqlite"),
        ("UPDATE StringIds SET value = ? WHERE id = 1", (head + " https://user:SECRETPW77@host.org tail",)),
        ("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'nn.Module: Linear_0'", ("nn.Module: " + "m" * 20_000,)),
    )
    result = ingest_trace(path)
    kernel = result.frame.set_index("correlation").loc[5]
    assert kernel["name"] == head + " https://<redacted>@host…"
    assert kernel["module"] == "m" * (16_383 - len("nn.Module: ")) + "…"


def test_kernels_whose_name_is_not_in_string_ids_are_kept_unnamed(tmp_path: Path) -> None:
    """A kernel naming a string id StringIds does not hold was written without a name, and
    every reader then refused the output ("rows without a name"): it is kept as
    `<unnamed kernel>`, said in one warning. Neither its demangled name (1) nor its short name (2)
    is held: a short name that is held names it (below)."""
    path = _edited(_export(tmp_path / "unnamed.sqlite"), ("DELETE FROM StringIds WHERE id IN (1, 2)", ()))
    result = ingest_trace(path)
    kernels = result.frame.set_index("correlation")
    assert kernels.loc[[5, 7], "name"].tolist() == ["<unnamed kernel>"] * 2  # both kernels name string 1
    assert kernels.loc[5, "launcher"] == "aten::addmm"
    said = [w for w in result.warnings if "without a name in the export" in w]
    assert len(said) == 1 and ": 2 kernels without a name" in said[0], result.warnings


def test_runtime_calls_whose_name_is_not_in_string_ids_are_named_unnamed(tmp_path: Path) -> None:
    """cudaLaunchKernel's name id (3) missing: its kernels' launch was "" and their call stack
    began " <- ", an empty frame."""
    path = _edited(_export(tmp_path / "unnamed_call.sqlite"), ("DELETE FROM StringIds WHERE id = 3", ()))
    kernel = ingest_trace(path).frame.set_index("correlation").loc[5]
    assert kernel["launch"] == "<unnamed runtime call>"
    assert kernel["call_stack"].startswith("<unnamed runtime call> <- ") and kernel["launcher"] == "aten::addmm"


def test_a_table_whose_name_holds_a_quote_is_passed_over(tmp_path: Path) -> None:
    """Every table's columns are listed; a name holding `"` broke that statement, and the export
    was refused as unreadable."""
    path = _edited(_export(tmp_path / "quoted.sqlite"), ('CREATE TABLE "weird""name" (a)', ()))
    assert ingest_trace(path).frame.set_index("correlation").loc[5, "launcher"] == "aten::addmm"


def _two_processes(path: Path) -> Path:
    path = _export(path, pid_shift=0, device=1)
    return _export(path, pid_shift=1, device=0, create=False)


@pytest.mark.parametrize("damage", ["null", "no column", "view"])
def test_kernels_of_no_known_process_are_read_once(tmp_path: Path, damage: str) -> None:
    """Two processes (8 GPU activities, 4 each, as the test above). Kernels whose globalPid is
    null were dropped by every rank unsaid; a kernels table without the column was read whole by
    each rank (every kernel counted twice); a kernels table re-created as a view was not read.
    Now: every activity read once — the unattributed kernels as rank 0's, said in a warning —
    and a view read like a table."""
    path = _two_processes(tmp_path / "two.sqlite")
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
    total = sqlite3.connect(path).execute(f"SELECT count(*) FROM {kernels}").fetchone()[0]
    statements = {
        "null": [(f"UPDATE {kernels} SET globalPid = NULL", ())],
        "no column": [(f"ALTER TABLE {kernels} DROP COLUMN globalPid", ())],
        "view": [
            (f"ALTER TABLE {kernels} RENAME TO k_rows", ()),
            (f"CREATE VIEW {kernels} AS SELECT * FROM k_rows", ()),
        ],
    }[damage]
    _edited(path, *statements)
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    frame = load_kernels(out)
    assert len(frame) == 8 and int((frame["kind"] == "kernel").sum()) == total
    said = f"{total} GPU activities without a usable process id (globalPid missing, null or text) are read as"
    if damage == "view":
        assert said not in result.output
        assert frame.groupby("rank")["device"].first().to_dict() == {0: 0, 1: 1}
    else:
        assert said in result.output
        assert set(frame.loc[frame["kind"] == "kernel", "rank"]) == {0}
    assert "globalPid" not in result.output.replace(said, "")  # not also listed as a column "left empty"


def _two_ops_of_one_range(path: Path, swapped: bool) -> Path:
    """emit_nvtx's `aten::linear` (op_id 10) and the `aten::addmm` it calls (op_id 11), both
    recorded over [1000, 9000] ns, the launch [3000, 4000] inside; rows in either order."""
    process = (0x1000000 + 300) << 24
    thread = process + 301
    db = sqlite3.connect(path)
    db.executescript(
        """CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, globalPid,
            demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId);
        CREATE TABLE NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId);"""
    )
    db.executemany(
        "INSERT INTO StringIds VALUES (?, ?)", [(1, "ampere_sgemm_128x64_tn"), (3, "cudaLaunchKernel_v7000")]
    )
    ranges = [
        (1000, 9000, 59, "aten::linear, seq = 1, op_id = 10, sizes = [[4, 8], [16, 8], [16]]", thread, None, 0),
        (1000, 9000, 59, "aten::addmm, seq = 2, op_id = 11, sizes = [[16], [4, 8], [8, 16]]", thread, None, 0),
    ]
    db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)", ranges[::-1] if swapped else ranges)
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (3000, 4000, ?, 5, 3)", (thread,))
    db.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (5000, 7500, 0, 7, 5, ?, 1, 1, 4, 1, 1, 128, 1, 1)", (process,)
    )
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize("swapped", [False, True])
def test_op_ranges_of_one_start_and_length_nest_by_their_op_id(tmp_path: Path, swapped: bool) -> None:
    """An op's `op_id` is taken as it starts: the lower one encloses the other, whichever row the
    export wrote first (stop 57's Nsight campaign: swapped rows made `aten::linear` the launcher)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = ingest_trace(_two_ops_of_one_range(tmp_path / "tie.sqlite", swapped)).frame.iloc[0]
    assert row["launcher"] == "aten::addmm" and row["input_dims"] == "[[16],[4,8],[8,16]]"
    assert row["call_stack"] == "cudaLaunchKernel <- aten::addmm <- aten::linear"


def test_launch_threads_are_numbered_as_the_json_reader_numbers_them(tmp_path: Path) -> None:
    """Launching threads numbered 0, 1, … in order of first appearance (each thread's first host
    range), as the JSON reader numbers (pid, tid): `_export`'s thread 301 begins with its
    nn.Module range at 500 ns; a second thread, 299, whose globalTid is the lower, first appears
    at 15000 ns with the launch (corr 9) of a kernel at [16000, 16500]. The kernels table's
    launch_thread had been the globalTid cut to int32 (738197805 for 301: (300 << 24) + 301 −
    2^32), which no host_events row's `thread` (the whole globalTid) held."""
    second = PROC + 299
    path = _edited(
        _export(tmp_path / "threads.sqlite"),
        ("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (15000, 15500, ?, 9, 3)", (second,)),
        (
            f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS}) VALUES "
            "(16000, 16500, 0, 7, 9, ?, 1, 2, 4, 1, 1, 128, 1, 1, 64, 0, 0, NULL, NULL)",
            (PROC,),
        ),
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    kernels = load_kernels(out).set_index("correlation")
    assert kernels.loc[[5, 6, 9], "launch_thread"].tolist() == [0, 0, 1]  # thread 301, 301, 299
    assert kernels.loc[[7, 8], "launch_thread"].isna().all()  # no launch in the export
    from kernel_atlas.ingest.host_events import load_host_events

    host = load_host_events(out, 0)
    calls = host[host["kind"] == "runtime"].set_index("correlation")
    assert calls.loc[[5, 6, 9], "thread"].tolist() == [0, 0, 1]  # the same numbers: the two tables join
    assert sorted(set(host.loc[host["kind"] != "sync", "thread"])) == [0, 1]


def test_unified_memory_copies_keep_their_direction(tmp_path: Path) -> None:
    """copyKind 11, 12 and 13 are nsys's unified-memory migrations (ENUM_CUDA_MEMCPY_OPER: Unified
    Host-to-Device, Device-to-Host, Device-to-Device), between managed memory (kind 4). All three
    had been one name, `Memcpy Unknown (Managed -> Managed)`."""
    insert = "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 7, ?, ?, 4096, ?, 4, 4, NULL)"
    path = _edited(
        _export(tmp_path / "uvm.sqlite"),
        (insert, (30000, 31000, 21, PROC, 11)),
        (insert, (32000, 33000, 22, PROC, 12)),
        (insert, (34000, 35000, 23, PROC, 13)),
    )
    names = ingest_trace(path).frame.set_index("correlation")["name"]
    assert names.loc[[21, 22, 23]].tolist() == [
        "Memcpy Unified HtoD (Managed -> Managed)",
        "Memcpy Unified DtoH (Managed -> Managed)",
        "Memcpy Unified DtoD (Managed -> Managed)",
    ]
    assert names.loc[6] == "Memcpy HtoD (Pageable -> Device)"  # the others as before


def test_a_dangling_demangled_name_falls_back_to_the_short_name(tmp_path: Path) -> None:
    """Both kernels name demangled string 1, which is gone, and short string 2 (`sgemm`), which
    is held: they are `sgemm` (they had been `<unnamed kernel>`), and no kernel is said nameless."""
    path = _edited(_export(tmp_path / "short.sqlite"), ("DELETE FROM StringIds WHERE id = 1", ()))
    result = ingest_trace(path)
    assert result.frame.set_index("correlation").loc[[5, 7], "name"].tolist() == ["sgemm", "sgemm"]
    assert not any("without a name" in w for w in result.warnings), result.warnings


def test_a_text_device_id_is_dropped_and_counted(tmp_path: Path) -> None:
    """deviceId 'gpu0' on kernel 5: its device is null, and one warning counts the value, as the
    JSON reader counts a value of the wrong type (it had been dropped unsaid)."""
    path = _edited(
        _export(tmp_path / "text_device.sqlite"),
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 'gpu0' WHERE correlationId = 5", ()),
    )
    result = ingest_trace(path)
    frame = result.frame.set_index("correlation")
    assert pd.isna(frame.loc[5, "device"]) and frame.loc[7, "device"] == 0
    said = [w for w in result.warnings if "unexpected type" in w]
    assert len(said) == 1 and said[0].endswith(
        "text_device.sqlite: 1 value out of range or of an unexpected type was ignored (deviceId 1)"
    ), result.warnings


def test_blobs_that_are_not_utf8_are_counted(tmp_path: Path) -> None:
    """Kernel name string 1 as a blob with byte 0xff, and the module range's text as a blob with
    0xfe on two ranges (the one of `_export` and a copy at [30000, 31000]): 1 string and 2 ranges,
    3 texts (blobs had been decoded unsaid)."""
    path = _edited(
        _export(tmp_path / "blobs.sqlite"),
        ("UPDATE StringIds SET value = ? WHERE id = 1", (b"sgemm\xff",)),
        ("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'nn.Module: Linear_0'", (b"nn.Module: Lin\xfeear_0",)),
        ("INSERT INTO NVTX_EVENTS VALUES (30000, 31000, 59, ?, ?, NULL, 0)", (b"nn.Module: Lin\xfeear_0", THREAD)),
    )
    result = ingest_trace(path)
    assert result.frame.set_index("correlation").loc[5, "name"] == "sgemm\ufffd"
    said = [w for w in result.warnings if "not UTF-8" in w]
    assert len(said) == 1 and "3 texts were not UTF-8" in said[0], result.warnings


def _damaged(path: Path) -> Path:
    """192 bytes of 0xAB over the cell pointers of every page after the first (sqlite_master):
    SQLite reads each row of those tables as NULLs rather than failing."""
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")  # the page size, in the header
    for page in range(size, len(data), size):
        data[page + 8 : page + 200] = b"\xab" * 192
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_export_is_refused_in_one_line(tmp_path: Path) -> None:
    """Every activity read as NULLs had ingested into empty tables with exit 0 (and `{}` as the
    GPU); SQLite's quick_check, asked once rows without times show, names the damage."""
    path = _damaged(_export(tmp_path / "damaged.sqlite"))
    result = runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")])
    _one_line_error(result, "cannot read the export (damaged: ")
    assert "damaged.sqlite" in result.output


def test_an_export_with_rows_without_times_but_no_damage_is_read(tmp_path: Path) -> None:
    """The check finds nothing in a sound file whose activity lacks an end: read as before."""
    path = _edited(_export(tmp_path / "sound.sqlite"), ("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET end = NULL", ()))
    result = ingest_trace(path)
    assert sorted(result.frame["correlation"]) == [5, 6, 7]  # the memset (corr 8) left out
    assert any("1 GPU activity without a usable ts or dur was left out" in w for w in result.warnings)


def test_a_gpu_row_of_nulls_names_no_gpu(tmp_path: Path) -> None:
    """TARGET_INFO_GPU holding one row, all NULL: no GPU (summary.json's gpus had been `[{}]`)."""
    path = _edited(
        _export(tmp_path / "null_gpu.sqlite"),
        ("DELETE FROM TARGET_INFO_GPU", ()),
        ("INSERT INTO TARGET_INFO_GPU VALUES (NULL, NULL, NULL, NULL, NULL, NULL, NULL)", ()),
    )
    assert ingest_trace(path).facts["gpus"] == []


def test_absolute_nanoseconds_are_rebased_exactly(tmp_path: Path) -> None:
    """Every time of `_export` plus 1,700,000,000,123,456,789 ns (epoch ns). The earliest start,
    the sync's (100 ns), whole seconds: 1.7e18 ns, subtracted in integers. Kernel 5 then starts at
    (123,456,789 + 5,000) ns = 123,461.789 µs (it had been 1700000000123461.75, a double 0.25 µs
    apart), its launch at 123,459.789 µs, and the device is busy 2.5 + 0.8 + 0.1 + 0.25 = 3.65 µs:
    nothing lost, no warning about coarse start times."""
    shift = 1_700_000_000_123_456_789
    tables = ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION")
    path = _edited(
        _export(tmp_path / "epoch.sqlite"),
        *((f"UPDATE CUPTI_ACTIVITY_KIND_{t} SET start = start + ?, end = end + ?", (shift, shift)) for t in tables),
        ("UPDATE NVTX_EVENTS SET start = start + ?, end = end + ?", (shift, shift)),
    )
    result = ingest_trace(path)
    frame = result.frame.set_index("correlation")
    assert frame.loc[5, "ts_us"] == 123461.789 and frame.loc[5, "dur_us"] == 2.5
    assert frame.loc[5, "launch_ts_us"] == 123459.789 and frame.loc[5, "launcher"] == "aten::addmm"
    assert frame.loc[6, "ts_us"] == 123468.789 and frame.loc[6, "dur_us"] == 0.8
    assert round(result.facts["devices"][0]["busy_us"], 9) == 3.65
    assert not any("start times near" in w for w in result.warnings), result.warnings


def test_emit_nvtx_sequence_numbers_fill_sequence_number(tmp_path: Path) -> None:
    """`aten::addmm, seq = 2, …` encloses kernel 5's launch: its sequence number is 2, as a Kineto
    trace's `Sequence number` gives it (it had been empty); the memcpy's launch lies in no op."""
    frame = ingest_trace(_export(tmp_path / "seq.sqlite")).frame.set_index("correlation")
    assert frame.loc[[5], "sequence_number"].tolist() == [2]
    assert pd.isna(frame.loc[6, "sequence_number"])
