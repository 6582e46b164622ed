"""A trace that failed to ingest is said by the report of the others (summary.json `failed`
reached no line of the report: the campaign of stop 58)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.support.traces import EXAMPLE


def test_the_report_names_a_trace_that_failed_to_ingest(tmp_path: Path) -> None:
    broken = tmp_path / "rank1.json.gz"
    broken.write_bytes(EXAMPLE.read_bytes()[:30_000])  # a gzip stream cut short
    out = tmp_path / "out"
    ingest = CliRunner().invoke(app, ["ingest", str(EXAMPLE), str(broken), "-o", str(out), "-q"])
    assert ingest.exit_code == 2  # one trace failed, the other ingested
    result = CliRunner().invoke(app, ["report", str(out)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    trust = json.loads((out / "report.json").read_text())["trust"]
    [failed] = trust["traces_failed"]
    assert failed["source"].endswith("rank1.json.gz") and "truncated" in failed["reason"]
    line = next(line for line in result.output.splitlines() if "not in this report" in line)
    assert "rank1.json.gz failed to ingest" in line
    assert "rank1.json.gz failed to ingest" in (out / "report.html").read_text()
