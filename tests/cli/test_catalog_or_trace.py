"""A `.json` list is a kernel catalog only where its entries name a `kernel_name`: a trace written
as a bare list of events was costed as a catalog of empty entries by `atlas report`, labelled
`unknown` by `atlas classify`, and the costs file went to the current folder (stop 58's campaign)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.support.traces import EXAMPLE


def _bare_array(path: Path) -> Path:
    path.write_text(json.dumps(json.loads(gzip.decompress(EXAMPLE.read_bytes()))["traceEvents"]))
    return path


def test_report_of_a_bare_array_trace_reports_the_trace(tmp_path: Path) -> None:
    trace = _bare_array(tmp_path / "bert_array.json")
    result = CliRunner().invoke(app, ["report", str(trace)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "bert_array.atlas" / "report.json").is_file()
    assert not list(tmp_path.glob("*.costs.csv")) and not Path("bert_array.costs.csv").exists()


def test_classify_refuses_a_trace_and_entries_without_a_kernel_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["classify", str(_bare_array(tmp_path / "t.json"))])
    assert result.exit_code == 2 and "is a trace event" in result.output
    empty = tmp_path / "c4.json"
    empty.write_text("[{}]")
    result = CliRunner().invoke(app, ["classify", str(empty)])
    assert result.exit_code == 2 and "has no `kernel_name`" in result.output


def test_catalog_costs_are_written_beside_the_catalog(tmp_path: Path, monkeypatch) -> None:
    catalog = tmp_path / "cat" / "mine.json"
    catalog.parent.mkdir()
    entry = {"kernel_name": "gemm", "kernel_implementation": "aten::mm", "op_mapping": "matmul", "params": []}
    catalog.write_text(json.dumps([entry]))
    here = tmp_path / "here"
    here.mkdir()
    (here / "mine.costs.csv").write_text("important")
    monkeypatch.chdir(here)
    result = CliRunner().invoke(app, ["report", str(catalog)])
    assert result.exit_code == 0, result.output
    assert (catalog.parent / "mine.costs.csv").is_file()
    assert (here / "mine.costs.csv").read_text() == "important"  # the user's file in the current folder
