"""Campaign AW (classes 2 and 4): the MCP server reads a run folder as the command line's
readers do — under the folder's shared lock, and only the tables of the run its kernels are of.
The moment an ingest holds the folder is set up by holding its lock here (as `atlas ingest`
does), so that what the tester met once in 150–300 calls happens every time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import folder_lock
from kernel_atlas.store.outputs import table_run
from tests.support.hostile import cli
from tests.support.traces import EXAMPLE

pytest.importorskip("mcp")


def _run(root: Path, name: str = "run.atlas", report: bool = False) -> Path:
    out = root / name
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    if report:
        assert cli("report", out).code == 0
    return out


def _tools(root: Path):
    from kernel_atlas.mcp_server import Tools

    return Tools(root)


def test_a_tool_during_an_ingest_says_the_run_is_being_written(tmp_path: Path) -> None:
    out = _run(tmp_path)
    tools = _tools(tmp_path)
    assert tools.query("run.atlas", "SELECT count(*) AS n FROM kernels")["rows"] == [{"n": 61}]  # 60 kernels, 1 memcpy
    with folder_lock(out):  # an ingest holds it: everything may change between two reads
        for call in (
            lambda: tools.query("run.atlas", "SELECT count(*) FROM kernels"),
            lambda: tools.top_kernels("run.atlas"),
            lambda: tools.summary("run.atlas"),
            lambda: tools.tables("run.atlas"),
            lambda: tools.findings("run.atlas"),
            lambda: tools.critical_path("run.atlas"),
        ):
            with pytest.raises(AtlasError) as refused:
                call()
            assert tools.refusal(refused.value).startswith("run.atlas: being written by another atlas command")
        (entry,) = tools.runs()["runs"]
        assert entry["error"].startswith("run.atlas: being written by another atlas command")
        # and once it has cleared the previous run (no summary.json, no kernels yet): the same, not
        # "not a run folder"
        for name in ("summary.json", "kernels.parquet"):
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        with pytest.raises(AtlasError) as refused:
            tools.summary("run.atlas")
        assert tools.refusal(refused.value).startswith("run.atlas: being written by another atlas command")


def test_a_file_gone_under_a_tool_is_one_line_not_a_traceback(tmp_path: Path, monkeypatch) -> None:
    """What an ingest removing kernels.parquet between two reads did: pyarrow's FileNotFoundError
    crossed `_guarded`, the agent read `Error executing tool query` and stderr a traceback."""
    from mcp.server.mcpserver.exceptions import ToolError

    from kernel_atlas import mcp_server

    _run(tmp_path)
    tools = _tools(tmp_path)
    gone = tmp_path / "run.atlas" / "kernels.parquet"

    def removed_meanwhile(folder: Path) -> None:
        raise FileNotFoundError(2, "No such file or directory", str(gone))

    monkeypatch.setattr(mcp_server, "_connect", removed_meanwhile)
    with pytest.raises(ToolError) as refused:
        mcp_server._guarded(tools.query)(run="run.atlas", sql="SELECT 1")
    assert str(refused.value) == "run.atlas/kernels.parquet: cannot read: No such file or directory"


def test_a_table_of_another_run_is_not_served_as_this_runs(tmp_path: Path) -> None:
    """A report killed after it removed report.json left steps.parquet; `query` served it as
    the next ingest's `steps` (another trace's total_us). It is left out, and said so."""
    out = _run(tmp_path, report=True)
    stale = tmp_path / "steps-of-the-first-run.parquet"
    shutil.copy(out / "steps.parquet", stale)
    first_run = table_run(stale)
    _run(tmp_path)  # a new run: its kernels carry another id
    shutil.copy(stale, out / "steps.parquet")  # as the killed report's survived the re-ingest
    assert table_run(out / "steps.parquet") == first_run
    tools = _tools(tmp_path)
    listed = tools.tables("run.atlas")
    # the run's own partitioned tables are served beside its kernels; the stale steps table is not
    assert sorted(listed["tables"]) == ["host_events", "kernels", "memory_events"]
    assert listed["unreadable"] == {
        "steps": "steps.parquet: made from another ingest run's kernels than this folder's: run `atlas report` again"
    }
    with pytest.raises(AtlasError, match=r"steps\.parquet: made from another ingest run"):
        tools.query("run.atlas", "SELECT * FROM steps")
