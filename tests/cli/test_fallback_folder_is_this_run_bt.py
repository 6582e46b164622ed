"""Whether a folder is the run of the traces being ingested (campaign BT, classes 2 and 3).

Class 2: summary.json lists a trace's file name as ingest wrote it, redacted (`run_ghp_….json` is
`run_<redacted>.json`); the run was compared with the raw name, so a trace whose name holds a
credential never found its own run: every `atlas ingest` of it from a read-only folder made a new
`./run_redacted-N.atlas` said to hold "another trace's" run, and every `atlas diff` ingested it
again (twice), its report files wiped.

Class 3: a fallback folder whose summary.json cannot be read (truncated, a folder) was written
over without a word, its report and another trace's kernels gone; and the run of several traces
(`atlas ingest ../ro/a.json ../ro/b.json`) was replaced by `atlas diff ../ro/a.json …` with a's run
alone, b's rank gone. A folder is this ingest's only where its summary.json lists exactly the
traces being ingested."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.ingest.fleet import ingested_from
from tests.cli.test_diff_read_only_fallback_bo import _state, _trace, read_only_shared
from tests.support.hostile import cli

TOKEN_NAME = "run_ghp_abcdefghijklmnopqrstuvwxyz0123456789.json"  # a GitHub token's shape in the file name
CHOOSE = "(-o sets the output folder)"


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def _kernel_times(run: Path) -> dict[str, float]:
    return {t["file"]: t["kernel_time_us"] for t in _summary(run)["traces"]}


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """shared/ (read-only): a.json (a 30 µs kernel), b.json (40 µs) and run_ghp_….json (25 µs);
    work/ (the current folder): a.json (45 µs)."""
    yield from read_only_shared(
        tmp_path, monkeypatch, {"a.json": 30.0, "b.json": 40.0, TOKEN_NAME: 25.0}, {"a.json": 45.0}
    )


def test_a_trace_named_with_a_credential_finds_its_own_run(folders) -> None:
    shared, work = folders
    for _ in range(3):
        done = cli("ingest", shared / TOKEN_NAME, "-q")
        assert done.code == 0, done.output
        # the same folder each time, never "another trace's"
        assert "-2.atlas" not in done.stderr and "another trace" not in done.stderr, done.stderr
    run = work / "run_redacted.atlas"
    assert _kernel_times(run) == {"run_<redacted>.json": 25.0}
    assert ingested_from(run, shared / TOKEN_NAME)
    run_id = _summary(run)["run_id"]

    for _ in range(2):  # found as it is: not ingested again, no new folder
        diff = cli("diff", shared / TOKEN_NAME, shared / "a.json")
        assert diff.code == 0, diff.output
    assert _summary(run)["run_id"] == run_id
    assert sorted(p.name for p in work.iterdir()) == ["a.atlas", "a.json", "run_redacted.atlas"]


def test_a_credential_named_trace_in_a_writable_folder_is_not_ingested_again(tmp_path: Path) -> None:
    trace = _trace(tmp_path / TOKEN_NAME, 25.0)
    other = _trace(tmp_path / "b.json", 40.0)
    assert cli("diff", trace, other).code == 0
    run = tmp_path / "run_redacted.atlas"
    assert cli("report", run).code == 0
    before = _state(run)
    assert "steps.parquet" in before and "report.json" in before
    again = cli("diff", trace, other)
    assert again.code == 0, again.output
    assert _state(run) == before  # its run and report read as they were, not a file written again


@pytest.mark.parametrize("damage", ["truncated", "a folder"])
def test_a_run_whose_summary_cannot_be_read_is_not_written_over(folders, damage: str) -> None:
    shared, work = folders
    assert cli("ingest", "a.json", "-q").code == 0  # ./a.atlas: the run of ./a.json (45 µs), with its report
    assert cli("report", "a.atlas").code == 0
    summary = work / "a.atlas" / "summary.json"
    if damage == "truncated":
        summary.write_bytes(summary.read_bytes()[:100])
    else:
        summary.unlink()
        summary.mkdir()
    mine = _state(work / "a.atlas")
    assert {"report.json", "report.html", "catalog.json"} <= set(mine)

    ingest = cli("ingest", shared / "a.json", "-q")
    assert ingest.code == 0, ingest.output
    assert ingest.lines() == [
        f"note: {shared} is read-only: writing to ./a-2.atlas instead, as ./a.atlas holds a run whose summary.json "
        f"cannot be read {CHOOSE}"
    ]
    assert _state(work / "a.atlas") == mine and summary.exists()  # nothing of it written again or removed
    assert _kernel_times(work / "a-2.atlas") == {"a.json": 30.0}


def test_a_run_of_several_traces_is_not_replaced_by_one_of_them(folders) -> None:
    shared, work = folders
    pair = cli("ingest", shared / "a.json", shared / "b.json", "-q")
    assert pair.code == 0, pair.output
    assert _kernel_times(work / "a.atlas") == {"a.json": 30.0, "b.json": 40.0}
    # the same two traces again: their own folder, written again
    again = cli("ingest", shared / "a.json", shared / "b.json", "-q")
    assert again.code == 0, again.output
    assert f"writing to ./a.atlas instead {CHOOSE}" in " ".join(again.stderr.split())
    assert sorted(p.name for p in work.iterdir()) == ["a.atlas", "a.json"]
    pair_state = _state(work / "a.atlas")

    # a.json alone (diff ingests each side alone): the pair's run is kept, a's goes to ./a-2.atlas
    diff = cli("diff", shared / "a.json", shared / "b.json")
    assert diff.code == 0, diff.output
    assert "as ./a.atlas holds the run of 2 traces" in " ".join(diff.stderr.split()), diff.stderr
    assert _state(work / "a.atlas") == pair_state
    assert _kernel_times(work / "a.atlas") == {"a.json": 30.0, "b.json": 40.0}
    assert _kernel_times(work / "a-2.atlas") == {"a.json": 30.0}
    assert _kernel_times(work / "b.atlas") == {"b.json": 40.0}


def test_a_file_of_the_fallback_name_is_passed_over(folders) -> None:
    shared, work = folders
    (work / "a.atlas").write_text("not a run")
    ingest = cli("ingest", shared / "a.json", "-q")
    assert ingest.code == 0, ingest.output
    assert ingest.lines() == [
        f"note: {shared} is read-only: writing to ./a-2.atlas instead, as ./a.atlas is not a folder {CHOOSE}"
    ]
    assert (work / "a.atlas").read_text() == "not a run"
    assert _kernel_times(work / "a-2.atlas") == {"a.json": 30.0}
