"""A run folder's host events files are those its summary.json lists, and a summary lists each
file once (campaign BZ): a listed host events file deleted had been read as a trace without host
events (a critical path of the GPU timeline alone, with a note that none were recorded), a copy
beside it was read too, a path outside the folder was accepted, and a trace listed twice had its
devices and efficiency counted twice. Each is refused in one line where the folder is opened."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.report.test_nothing_found_s65 import EVENTS  # one launched add kernel, with shapes


@pytest.fixture
def run(tmp_path: Path) -> Path:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    result = CliRunner().invoke(app, ["ingest", str(trace), "-q"])
    assert result.exit_code == 0, result.output
    return tmp_path / "t.atlas"


def _report(out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["report", str(out)], env={"COLUMNS": "400"})
    return result.exit_code, result.output


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_the_run_as_ingested_reports(run: Path) -> None:
    assert _summary(run)["traces"][0]["host_events_file"] == "host_events.parquet/rank=0/t.parquet"
    code, said = _report(run)
    assert code == 0, said


def test_a_listed_host_events_file_deleted_is_refused(run: Path) -> None:
    (run / "host_events.parquet" / "rank=0" / "t.parquet").unlink()
    code, said = _report(run)
    assert code == 2 and "Traceback" not in said
    assert "t.parquet: listed in summary.json as a host events file but not among the files of host_events.parquet" in (
        said.replace("\n", "")
    ), said


def test_an_unlisted_copy_beside_them_is_refused(run: Path) -> None:
    folder = run / "host_events.parquet" / "rank=0"
    shutil.copy(folder / "t.parquet", folder / "u.parquet")
    code, said = _report(run)
    assert code == 2 and "u.parquet: not listed in summary.json" in said.replace("\n", ""), said


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "kernels.parquet/rank=0/t.parquet", 7])
def test_a_listed_name_outside_the_host_events_is_refused(run: Path, name: object) -> None:
    summary = _summary(run)
    summary["traces"][0]["host_events_file"] = name
    (run / "summary.json").write_text(json.dumps(summary))
    code, said = _report(run)
    assert code == 2 and "Traceback" not in said, said
    assert len([line for line in said.splitlines() if line.strip()]) <= 3, said  # one line, wrapped at most


def test_a_trace_listed_twice_is_refused(run: Path) -> None:
    summary = _summary(run)
    summary["traces"].append(dict(summary["traces"][0]))
    (run / "summary.json").write_text(json.dumps(summary))
    code, said = _report(run)
    assert code == 2
    assert "kernels.parquet/rank=0/t.parquet is listed twice" in said.replace("\n", ""), said


def test_the_unlinked_warning_counts_with_separators(tmp_path: Path) -> None:
    # 1,200 kernels and no launch: every one unlinked, "1,200 of 1,200", as its parts count
    kernels = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5}
        | {"args": {"correlation": 10 + i, "device": 0, "stream": 7}}
        for i in range(1200)
    ]
    trace = tmp_path / "k.json"
    trace.write_text(json.dumps({"traceEvents": kernels}))
    result = CliRunner().invoke(app, ["ingest", str(trace)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "1,200 of 1,200 GPU activities have no launcher (1,200 " in result.output.replace("\n", ""), result.output
