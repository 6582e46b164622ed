"""Campaign BJ (class 5): the MCP server says when a rank is not in the run, reads the partitioned
tables (`host_events.parquet/`, `memory_events.parquet/`) by their stem like every other table,
and shows no folder of the server's own in DuckDB's settings. Values are read off the hand-built
trace below: rank 3 only; one `aten::mm` (0–10 µs) whose `cudaLaunchKernel` (2–4 µs) launched a
20 µs `gemm`; one `[memory]` event of 512 bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernel_atlas.core.errors import AtlasError
from tests.support.hand_built import launch_and_kernel
from tests.support.hostile import cli

pytest.importorskip("mcp")
BASE = 1_700_000_000_000.0  # µs


def _trace(path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": BASE, "dur": 10,
         "args": {"External id": 1}},
        *launch_and_kernel(BASE + 2, 5, 1, "gemm", BASE + 12, 20),
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": BASE + 1,
         "args": {"Addr": 4096, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048, "Device Type": 1,
                  "Device Id": 0}},
    ]  # fmt: skip
    doc = {"distributedInfo": {"rank": 3, "world_size": 4}, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory):
    from kernel_atlas.mcp_server import Tools

    root = tmp_path_factory.mktemp("bj_root")
    assert cli("ingest", _trace(root / "r3.json"), "-o", root / "run.atlas", "-q").code == 0
    return Tools(root)


def test_top_kernels_refuses_a_rank_not_in_the_run(tools) -> None:
    rows = tools.top_kernels("run.atlas", rank=3)["rows"]
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [("gemm", 1, 20.0)]
    for rank in (0, 99, -1):  # each had answered `rows: []`, read as "no GPU time"
        with pytest.raises(AtlasError) as refused:
            tools.top_kernels("run.atlas", rank=rank)
        assert tools.refusal(refused.value) == f"rank: no rank {rank} in this run (ranks: 3)"


def test_partitioned_tables_are_queried_by_their_stem(tools) -> None:
    listed = tools.tables("run.atlas")
    assert {"host_events", "memory_events", "kernels"} <= set(listed["tables"])
    assert "rank" in listed["tables"]["host_events"] and "unreadable" not in listed
    host = tools.query("run.atlas", "SELECT rank, kind, name, end_us - ts_us AS us FROM host_events ORDER BY ts_us")
    assert host["rows"] == [
        {"rank": 3, "kind": "cpu_op", "name": "aten::mm", "us": 10.0},
        {"rank": 3, "kind": "runtime", "name": "cudaLaunchKernel", "us": 2.0},
    ]
    memory = tools.query("run.atlas", "SELECT rank, bytes, total_allocated FROM memory_events")
    assert memory["rows"] == [{"rank": 3, "bytes": 512, "total_allocated": 512}]


def test_a_partitioned_table_that_cannot_be_read_is_listed_and_nothing_is_read_through_a_link(tmp_path: Path) -> None:
    from kernel_atlas.mcp_server import Tools

    out = tmp_path / "run.atlas"
    assert cli("ingest", _trace(tmp_path / "r3.json"), "-o", out, "-q").code == 0
    outside = tmp_path / "outside.parquet"
    (out / "memory_events.parquet" / "rank=3" / "r3.parquet").rename(outside)
    os.symlink(outside, out / "memory_events.parquet" / "rank=3" / "r3.parquet")  # a link out of the run
    os.symlink(out / "host_events.parquet", out / "linked.parquet")
    listed = Tools(tmp_path).tables("run.atlas")
    assert "memory_events" not in listed["tables"] and "linked" not in listed["tables"]
    assert set(listed["unreadable"]) == {"memory_events", "linked"}
    assert listed["unreadable"]["memory_events"].startswith("memory_events.parquet: not part of an `atlas ingest`")
    assert listed["unreadable"]["linked"].startswith("linked.parquet: a symbolic link")
    with pytest.raises(AtlasError, match=r"left out, not readable: .*memory_events\.parquet"):
        Tools(tmp_path).query("run.atlas", "SELECT * FROM memory_events")


def test_duckdb_settings_show_no_folder_of_the_server(tools) -> None:
    home = str(Path.home()) if len(str(Path.home())) > 1 else "/.duckdb"  # a home of `/` is in every path
    rows = tools.query("run.atlas", "SELECT name, value FROM duckdb_settings()", limit=500)["rows"]
    settings = {r["name"]: r["value"] for r in rows}
    assert settings["secret_directory"] == "(not used)" and settings["allow_persistent_secrets"] == "false"
    assert not [name for name, value in settings.items() if home in str(value) or os.getcwd() in str(value)]
    assert tools.query("run.atlas", "SELECT name FROM duckdb_secrets()")["rows"] == []  # none looked for
    with pytest.raises(AtlasError) as refused:  # it names the extensions folder it may not read
        tools.query("run.atlas", "SELECT * FROM duckdb_extensions()")
    assert home not in str(refused.value)
