"""`atlas whatif` and the folder's lock (campaign AW 3, 6): whatif.json is written while the run is
held and names the run it was solved on; a folder being written is told so, not called "not an
ingest output"."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from kernel_atlas.analysis import whatif
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import LOCK_NAME, folder_lock
from tests.support.hostile import cli
from tests.support.traces import EXAMPLE


def test_whatif_json_is_written_while_the_run_is_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run.atlas"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    real_write = whatif.write_json
    held_while_written = []

    def write_json(folder: Path, name: str, value: object) -> None:
        try:  # an ingest's exclusive lock, taken at this moment, must be refused
            with folder_lock(folder):
                held_while_written.append(False)
        except AtlasError as error:
            held_while_written.append("in use by another atlas command" in error.problem)
        real_write(folder, name, value)

    monkeypatch.setattr(whatif, "write_json", write_json)
    result = whatif.run_whatif(out, [], True, None, None)
    assert held_while_written == [True]
    written = json.loads((out / "whatif.json").read_text())
    run_id = json.loads((out / "summary.json").read_text())["run_id"]
    assert written["run_id"] == result["run_id"] == run_id


def test_whatif_on_a_folder_being_written_says_so(tmp_path: Path) -> None:
    # an ingest has cleared the old run and holds the folder: nothing but its lock is there yet
    out = tmp_path / "run.atlas"
    out.mkdir()
    (out / LOCK_NAME).touch()
    with folder_lock(out), pytest.raises(AtlasError, match="being written by another atlas command"):
        whatif.run_whatif(out, [], True, None, None)
    # a folder no atlas command has written is refused without a lock made in it
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(AtlasError, match="not an ingest output"):
        whatif.run_whatif(plain, [], True, None, None)
    assert list(plain.iterdir()) == []


def test_a_trace_removed_as_the_ingest_starts_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress bar's sizes: a trace gone between its `is_file()` and its `stat()` had ended the
    whole `atlas ingest DIR` before any trace was read (campaign AW 10); now it is that trace's
    failure alone, told with the others (here: its size 0, the bar's choice unchanged)."""
    from kernel_atlas.report import terminal

    gone = tmp_path / "gone.json"
    gone.write_text("{}")
    real_is_file = Path.is_file

    def is_file_then_removed(path: Path) -> bool:
        answer = real_is_file(path)
        if path == gone:
            path.unlink(missing_ok=True)  # removed right after the check
        return answer

    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    monkeypatch.setattr(Path, "is_file", is_file_then_removed)
    with terminal.progress(Console(file=io.StringIO()), [gone, kept]) as (on_done, _):
        on_done(kept)  # the bar for two traces is made: no FileNotFoundError escaped
    assert not gone.exists()
