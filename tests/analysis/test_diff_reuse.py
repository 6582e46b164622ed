"""A trace's run is reused only where it is that trace's (its summary.json holds the trace's
fingerprint): the campaign of stop 58 made `atlas diff` compare another trace's run, or a run
with itself, and pass its gate at +0.0 %."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import ingested_from, run_folder
from tests.support.traces import EXAMPLE


def _smaller_trace(path: Path) -> Path:
    """The bundled example with its kernels' durations halved: another trace of the same kind."""
    trace = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    for event in trace["traceEvents"]:
        if event.get("cat") == "kernel":
            event["dur"] = event["dur"] / 2
    path.write_text(json.dumps(trace))
    return path


def test_a_run_is_reused_only_for_its_own_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(EXAMPLE.read_bytes())
    out = run_folder(trace)
    assert out == tmp_path / "t.atlas" and ingested_from(out, trace)
    summary = (out / "summary.json").stat().st_mtime_ns
    assert run_folder(trace) == out and (out / "summary.json").stat().st_mtime_ns == summary  # reused
    assert json.loads((out / "summary.json").read_text())["traces"][0]["kernel_time_us"] == 307.197
    # another trace copied over it, keeping an older modification time than the run (`cp -p`)
    other = _smaller_trace(tmp_path / "other.json")
    trace.write_bytes(gzip.compress(other.read_bytes()))
    os.utime(trace, (1, 1))
    assert not ingested_from(out, trace)
    run_folder(trace)
    # the example's 60 kernels take 307.197 µs; the other trace's half that
    assert json.loads((out / "summary.json").read_text())["traces"][0]["kernel_time_us"] == 307.197 / 2


def test_diff_refuses_two_traces_whose_runs_would_be_one_folder(tmp_path: Path) -> None:
    (tmp_path / "m.json.gz").write_bytes(EXAMPLE.read_bytes())
    _smaller_trace(tmp_path / "m.json")
    result = CliRunner().invoke(
        app, ["diff", str(tmp_path / "m.json.gz"), str(tmp_path / "m.json"), "--fail-above", "1"]
    )
    assert result.exit_code == 2
    assert "its run would be" in result.output and "m.atlas" in result.output
    # a trace and its own run folder: one run, compared with itself
    run_folder(tmp_path / "m.json")
    same = CliRunner().invoke(app, ["diff", str(tmp_path / "m.json"), str(tmp_path / "m.atlas")])
    assert same.exit_code == 0, same.output
    # a trace and the run of another trace of its stem: refused
    other = CliRunner().invoke(app, ["diff", str(tmp_path / "m.json.gz"), str(tmp_path / "m.atlas")])
    assert other.exit_code == 2 and "its run would be" in other.output
