"""A file named for a command to write (--html, --overlay, -o, --markdown) whose folder is missing
or not writable, or that is a folder, is refused before any work: `atlas report RUN --overlay
nodir/o.json` had rewritten the run's report.json and tables, then failed (stop 58's campaign)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.support.traces import EXAMPLE


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("named") / "run"
    assert CliRunner().invoke(app, ["ingest", str(EXAMPLE), "-o", str(out), "-q"]).exit_code == 0
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    return out


@pytest.mark.parametrize(
    ("option", "target", "says"),
    [
        ("--overlay", "nodir/o.json", "nodir does not exist"),
        ("--html", "nodir/r.html", "nodir does not exist"),
        ("--html", ".", "is a folder"),
    ],
)
def test_report_refuses_an_unwritable_output_before_touching_the_run(
    run: Path, tmp_path: Path, option: str, target: str, says: str
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = {p.name: p.stat().st_mtime_ns for p in copy.iterdir() if p.is_file()}
    result = CliRunner().invoke(app, ["report", str(copy), "-d", "h200", option, str(tmp_path / target)])
    assert result.exit_code == 2 and says in result.output
    assert {p.name: p.stat().st_mtime_ns for p in copy.iterdir() if p.is_file()} == before  # nothing rewritten


def test_diff_refuses_an_unwritable_output_before_writing_the_others(run: Path, tmp_path: Path) -> None:
    ok = tmp_path / "ok.csv"
    result = CliRunner().invoke(
        app, ["diff", str(run), str(run), "-o", str(ok), "--html", str(tmp_path / "nodir" / "x.html")]
    )
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not ok.exists()  # was written, then the command failed


def test_a_read_only_folder_is_refused(run: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = CliRunner().invoke(app, ["diff", str(run), str(run), "--markdown", str(locked / "d.md")])
        assert result.exit_code == 2 and "permission denied" in result.output
    finally:
        locked.chmod(0o755)
