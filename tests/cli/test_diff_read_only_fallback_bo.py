"""A trace in a read-only folder, given to `atlas diff` (campaign BO, class 3): its run goes to
the caller's folder as `atlas report TRACE` puts it, said in the same note — and never over the
run of another trace there. `atlas diff ../ro/a.json b.json` had written `./a.atlas` without a
word, replacing the run of `./a.json` with its report files; the next `atlas diff a.json b.json`
took it back, again without a word."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.ingest.fleet import output_for
from tests.support.hostile import cli

H100 = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9, "numSms": 132}
GEMM = "ampere_sgemm_128x64_nn"
CHOOSE = "(`atlas ingest TRACE -o OUT` chooses the output folder)"


def _trace(path: Path, dur: float, kernel: str = GEMM) -> Path:
    """One aten::mm on an H100: its launch and one kernel of `dur` µs on stream 7."""
    ids = {"correlation": 100, "External id": 1000}
    op_args = {"External id": 1000, "Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]}
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 8, "dur": 8, "args": op_args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2}
        | {"args": ids},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": 20, "dur": dur}
        | {"args": {**ids, "device": 0, "stream": 7}},
    ]
    doc = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 0, **H100}]}
    path.write_text(json.dumps(doc))
    return path


def _kernel_time(run: Path) -> float:
    traces = json.loads((run / "summary.json").read_text())["traces"]
    assert len(traces) == 1
    return traces[0]["kernel_time_us"]


def _state(run: Path) -> dict[str, int]:
    """Each file of a run folder and when it was last written: a folder written again shows."""
    return {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.is_file()}


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """shared/a.json (a 30 µs kernel) in a read-only folder; work/a.json (45 µs) and work/b.json
    (40 µs) in the current folder."""
    yield from read_only_shared(tmp_path, monkeypatch, {"a.json": 30.0}, {"a.json": 45.0, "b.json": 40.0})


def read_only_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_traces: dict[str, float], work_traces: dict[str, float]
) -> Iterator[tuple[Path, Path]]:
    """shared/ (read-only) and work/ (the current folder), each holding a trace of one kernel of the
    given µs per file name; shared/ made writable again afterwards."""
    shared, work = tmp_path / "shared", tmp_path / "work"
    shared.mkdir()
    work.mkdir()
    for folder, traces in ((shared, shared_traces), (work, work_traces)):
        for name, dur in traces.items():
            _trace(folder / name, dur)
    shared.chmod(0o555)  # read-only, for root too (the mode says: not here)
    monkeypatch.chdir(work)
    try:
        yield shared, work
    finally:
        shared.chmod(0o755)


def test_diff_of_a_read_only_trace_says_its_folder_and_keeps_another_traces_run(folders) -> None:
    shared, work = folders
    first = cli("diff", "a.json", "b.json")
    assert first.code == 0, first.output
    assert "read-only" not in first.stderr
    assert cli("report", "a.atlas").code == 0
    mine = _state(work / "a.atlas")
    assert {"summary.json", "report.json", "report.html"} <= set(mine)
    assert _kernel_time(work / "a.atlas") == 45.0

    result = cli("diff", shared / "a.json", "b.json", "--json")
    assert result.code == 0, result.output
    note = (
        f"warning: {shared} is read-only: writing to ./a-2.atlas instead, as ./a.atlas holds the run of another "
        f"trace {CHOOSE}"
    )
    assert note in " ".join(result.stderr.split())
    # the caller's own run: not a file of it written again, its report kept
    assert _state(work / "a.atlas") == mine and _kernel_time(work / "a.atlas") == 45.0
    assert _kernel_time(work / "a-2.atlas") == 30.0
    # A is the read-only trace: its one kernel of 30 µs against B's 40 µs
    kernel_rows = [row for row in json.loads(result.stdout) if row["level"] == "kernel"]
    assert kernel_rows == [{"level": "kernel", "key": GEMM, "a_us": 30.0, "b_us": 40.0, "delta_us": 10.0}]

    # again, both ways: each trace's run is found in its folder, neither ingested over the other
    theirs = _state(work / "a-2.atlas")
    again = cli("diff", shared / "a.json", "b.json")
    assert again.code == 0, again.output
    assert "read-only" not in again.stderr  # nothing written: its run was read as it was
    back = cli("diff", "a.json", "b.json")
    assert back.code == 0, back.output
    assert _state(work / "a.atlas") == mine and _state(work / "a-2.atlas") == theirs
    assert sorted(p.name for p in work.iterdir()) == ["a-2.atlas", "a.atlas", "a.json", "b.atlas", "b.json"]


def test_report_and_ingest_take_the_same_free_folder(folders) -> None:
    shared, work = folders
    assert cli("ingest", "a.json", "-q").code == 0  # ./a.atlas: the run of ./a.json (45 µs)
    mine = _state(work / "a.atlas")
    report = cli("report", shared / "a.json")
    assert report.code == 0, report.output
    said = " ".join(report.stderr.split())
    assert (
        f"warning: {shared} is read-only: writing to ./a-2.atlas instead, as ./a.atlas holds the run of another "
        f"trace {CHOOSE}"
    ) in said
    ingest = cli("ingest", shared / "a.json", "-q")
    assert ingest.code == 0, ingest.output
    assert ingest.lines() == [
        f"note: {shared} is read-only: writing to ./a-2.atlas instead, as ./a.atlas holds the run of another "
        "trace (-o sets the output folder)"
    ]
    assert _state(work / "a.atlas") == mine and _kernel_time(work / "a-2.atlas") == 30.0
    # ./a-2.atlas taken by another trace's run too (a copy of ./b.json's, 40 µs): ./a-3.atlas
    assert cli("ingest", "b.json", "-o", "a-2.atlas", "-q").code == 0
    out, note = output_for(str(shared / "a.json"))
    assert out == "a-3.atlas"
    assert note == (
        f"{shared} is read-only: writing to ./a-3.atlas instead, as ./a.atlas holds the run of another trace "
        "(-o sets the output folder)"
    )


def test_diff_says_a_trace_s_ingest_warning_once_beside_the_fallback_note(folders) -> None:
    # a kernel name holding a GitHub token's shape: the ingest's one warning, said by side as before
    shared, _ = folders
    shared.chmod(0o755)
    _trace(shared / "t.json", 30.0, kernel="kern_ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    shared.chmod(0o555)
    result = cli("diff", shared / "t.json", "b.json")
    assert result.code == 0, result.output
    said = "".join(result.stderr.split())  # without the line breaks: a long folder may break inside a word
    assert "".join(f"warning: {shared} is read-only: writing to ./t.atlas instead {CHOOSE}".split()) in said
    assert said.count("1valuesshapedlikecredentials") == 1, said
    warning = f"warning: A (t): {shared}/t.json: 1 values shaped like credentials (tokens, keys) written as <redacted>"
    assert "".join(warning.split()) in said
