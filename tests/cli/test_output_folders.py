"""Output folders a failed or misdirected command leaves (stop 58's campaign): a folder holding
only `.atlas.lock` after a failed ingest, outputs mixed into the input folder (`ingest DIR -o
DIR`, refused only the second time), a run's own file taken for a trace (`report RUN/summary.json`
made RUN/summary.atlas/)."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.support.traces import EXAMPLE


def test_a_failed_ingest_leaves_no_folder_it_made(tmp_path: Path) -> None:
    trace = tmp_path / "trunc.json"
    trace.write_text('{"traceEvents": [')
    assert CliRunner().invoke(app, ["ingest", str(trace)]).exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trunc.json"]
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(tmp_path / "new" / "out")]).exit_code == 2
    assert not (tmp_path / "new" / "out").exists()
    # a folder the user had keeps being there
    kept = tmp_path / "kept"
    kept.mkdir()
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(kept)]).exit_code == 2
    assert kept.is_dir()


def test_the_output_folder_is_never_inside_an_input_folder(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder)
    for out in (folder, folder / "out"):
        result = CliRunner().invoke(app, ["ingest", str(folder), "-o", str(out)])
        assert result.exit_code == 2 and "inside the input folder" in result.output
    assert sorted(p.name for p in folder.iterdir()) == [EXAMPLE.name]
    # the trace itself, with its folder as -o, as before
    assert (
        CliRunner().invoke(app, ["ingest", str(folder / EXAMPLE.name), "-o", str(folder / "out"), "-q"]).exit_code == 0
    )


def test_a_run_file_is_no_trace(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["ingest", str(EXAMPLE), "-o", str(run), "-q"]).exit_code == 0
    for name in ("summary.json",):  # catalog.json is a kernel catalog: `report` costs it
        result = CliRunner().invoke(app, ["report", str(run / name)])
        assert result.exit_code == 2 and f"is {name} of the run folder" in result.output
    assert not [p for p in run.iterdir() if p.name.endswith(".atlas")]
