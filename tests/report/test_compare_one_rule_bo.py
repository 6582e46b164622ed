"""notebooks/compare.ipynb and the `atlas diff --html` page read the comparison as `atlas diff`
does (campaign BO classes 1 and 2): the kernels only one run ran counted with all their time,
in op+shapes groups too (`Diff.one_run_kernels`), and each run's window with the GPU time
outside its profiler steps (`diff.side_of`). Every expected number is a sum of the `dur` values
written in the traces below, worked out in comments.

Two GPUs (`_two_gpus`), all in profiler step 1:
  A (A100): aten::mm 64²·64² ×2 → ampere_sgemm_64x64_nn 10 + 10
            aten::addmm [128],[32,64],[64,128] → ampere_sgemm_128x64_tn 20
            aten::add [8],[8] → ADD 5                                            A: 45 µs
  B (V100): aten::mm 64²·64² ×3 → volta_sgemm_64x64_nn 15 + 15 + 15
            aten::addmm (same shapes) → volta_sgemm_128x64_tn 25 + splitKreduce_kernel 5
            aten::add [8],[8] → ADD 6
            aten::mm 16²·16² → volta_sgemm_64x64_nn 7 (a shape A never ran)       B: 88 µs
  Only B ran volta_sgemm_64x64_nn (45 + 7 = 52 µs, 4 activities), volta_sgemm_128x64_tn (25)
  and splitKreduce_kernel (5): appeared in B, 3 kernels, 82 µs. Only A ran
  ampere_sgemm_64x64_nn (20 µs, 2) and ampere_sgemm_128x64_tn (20 µs, 1): vanished from A,
  2 kernels, 40 µs. The mm 64² and addmm calls are op+shapes groups; of the kernels only one run
  ran, only volta_sgemm_64x64_nn has a name row of its own (its 7 µs at 16²): the kernel rows
  with status appeared/vanished count 1 and 0.

A warm-up (`_warm_up`, one A100): A = 3 profiler steps, one aten::mm → sgemm 10 µs each (30 µs,
  nothing outside); B = a warm-up aten::mm → sgemm 40 µs before step 1, then the same 3 steps
  (70 µs, 40 µs of it outside its 3 steps)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

from kernel_atlas.analysis.diff import diff_runs
from kernel_atlas.report import dashboard as dash
from kernel_atlas.report.html import write_diff_html
from kernel_atlas.report.notebooks import execute
from tests.analysis.test_diff_hand_s65 import _trace as hand_trace
from tests.analysis.test_diff_hand_s65 import _write

A100 = "NVIDIA A100-SXM4-80GB"
V100 = "Tesla V100-SXM2-16GB"
MM = [[64, 64], [64, 64]]
MM_16 = [[16, 16], [16, 16]]
ADDMM = [[128], [32, 64], [64, 128], [], []]
ADD_DIMS = [[8], [8], []]
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()"
SGEMM = "ampere_sgemm_64x64_nn"


def _trace(path: Path, calls: list[dict[str, Any]], gpu: str = A100) -> Path:
    """Kineto JSON at `path` (`test_diff_hand_s65._trace`): per call a cpu_op (its Input Dims)
    launching its kernels (name, µs) one after another on stream 7, inside ProfilerStep#`step`
    where it has one; `launch` False: the kernels without a cpu_op or a launch."""
    return _write(path.parent, path.name, hand_trace(calls, gpu))


def _call(op: str, dims: list[list[int]], *kernels: tuple[str, float], step: int | None = 1) -> dict[str, Any]:
    return {"op": op, "dims": dims, "kernels": list(kernels), "step": step}


def _two_gpus(tmp_path: Path) -> tuple[Path, Path]:
    a = [
        _call("aten::mm", MM, (SGEMM, 10)),
        _call("aten::mm", MM, (SGEMM, 10)),
        _call("aten::addmm", ADDMM, ("ampere_sgemm_128x64_tn", 20)),
        _call("aten::add", ADD_DIMS, (ADD, 5)),
    ]
    b = [
        _call("aten::mm", MM, ("volta_sgemm_64x64_nn", 15)),
        _call("aten::mm", MM, ("volta_sgemm_64x64_nn", 15)),
        _call("aten::mm", MM, ("volta_sgemm_64x64_nn", 15)),
        _call("aten::addmm", ADDMM, ("volta_sgemm_128x64_tn", 25), ("splitKreduce_kernel", 5)),
        _call("aten::add", ADD_DIMS, (ADD, 6)),
        _call("aten::mm", MM_16, ("volta_sgemm_64x64_nn", 7)),
    ]
    return _trace(tmp_path / "a.json", a), _trace(tmp_path / "b.json", b, V100)


def _warm_up(tmp_path: Path) -> tuple[Path, Path]:
    steps = [_call("aten::mm", MM, (SGEMM, 10), step=s) for s in (1, 2, 3)]
    a = _trace(tmp_path / "a.json", steps)
    return a, _trace(tmp_path / "b.json", [_call("aten::mm", MM, (SGEMM, 40), step=None), *steps])


def _text(snippet: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", snippet))).strip()


def _shown(notebook: Any, cell: int) -> str:
    """What a cell printed and displayed, as text."""
    parts = []
    for output in notebook.cells[cell].get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/html", ""))
    return _text(" ".join(parts))


# --- class 1: appeared and vanished kernels -------------------------------------------------------

APPEARED = {  # key: (a_us, b_us, a_count, b_count)
    "volta_sgemm_64x64_nn": (0.0, 52.0, 0, 4),  # 15 + 15 + 15 in the mm group, 7 at 16²
    "volta_sgemm_128x64_tn": (0.0, 25.0, 0, 1),
    "splitKreduce_kernel": (0.0, 5.0, 0, 1),
}
VANISHED = {"ampere_sgemm_64x64_nn": (20.0, 0.0, 2, 0), "ampere_sgemm_128x64_tn": (20.0, 0.0, 1, 0)}


def test_the_compare_notebook_counts_appeared_and_vanished_kernels_as_atlas_diff(tmp_path: Path) -> None:
    a, b = _two_gpus(tmp_path)
    runs = dash.load_run(a), dash.load_run(b)
    (appeared, rows_b), (vanished, rows_a) = dash.one_run_kernels(dash.compare_runs(*runs))
    assert appeared == "appeared in B: 3 kernels, 82.0 µs (all their time)"
    assert vanished == "vanished from A: 2 kernels, 40.0 µs (all their time)"
    table = rows_b[["key", "a_us", "b_us", "a_count", "b_count"]].itertuples(index=False)
    assert {k: tuple(v) for k, *v in table} == APPEARED
    assert rows_b["key"].tolist()[0] == "volta_sgemm_64x64_nn"  # largest first
    table = rows_a[["key", "a_us", "b_us", "a_count", "b_count"]].itertuples(index=False)
    assert {k: tuple(v) for k, *v in table} == VANISHED
    notebook = execute("compare", {"ATLAS_OUT": str(runs[0].out_dir), "ATLAS_OUT_B": str(runs[1].out_dir)})
    shown = _shown(notebook, len(notebook.cells) - 1)
    assert "appeared in B: 3 kernels, 82.0 µs (all their time)" in shown, shown
    assert "vanished from A: 2 kernels, 40.0 µs (all their time)" in shown, shown
    assert all(name in shown for name in [*APPEARED, *VANISHED]), shown


def test_the_diff_page_lists_the_kernels_only_one_run_ran(tmp_path: Path) -> None:
    a, b = _two_gpus(tmp_path)
    page = write_diff_html(diff_runs(a, b), tmp_path / "d.html").read_text()
    said = _text(page)
    assert "Appeared in B: 3 kernels, 82.0 µs (all their time)" in said
    assert "Vanished from A: 2 kernels, 40.0 µs (all their time)" in said
    # the table's rows: status, kernel, A, B, Δ, activities — the data of table `diff-one-run`
    payload = re.search(r"id='diff-one-run'.*?<script type='application/json'>(.*?)</script>", page, re.S)
    assert payload is not None
    rows = [row["t"] for row in json.loads(payload.group(1))["rows"]]
    # largest change first (a tie in the order `atlas diff` prints them: by name)
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in rows] == [
        ("appeared", "volta_sgemm_64x64_nn", "0.0 µs", "52.0 µs", "0→4"),
        ("appeared", "volta_sgemm_128x64_tn", "0.0 µs", "25.0 µs", "0→1"),
        ("vanished", "ampere_sgemm_128x64_tn", "20.0 µs", "0.0 µs", "1→0"),
        ("vanished", "ampere_sgemm_64x64_nn", "20.0 µs", "0.0 µs", "2→0"),
        ("appeared", "splitKreduce_kernel", "0.0 µs", "5.0 µs", "0→1"),
    ]


# --- class 2: the window, and what ingest warned -------------------------------------------------


def test_the_compare_notebook_says_the_time_outside_the_profiler_steps(tmp_path: Path) -> None:
    a, b = _warm_up(tmp_path)
    runs = dash.load_run(a), dash.load_run(b)
    said = _text(dash.comparability_html(dash.compare_runs(*runs)))
    assert "A: a on NVIDIA A100-SXM4-80GB, GPU time 30.0 µs" in said
    assert "B: b on NVIDIA A100-SXM4-80GB, GPU time 70.0 µs" in said
    assert "B 40.0 µs outside its 3 whole steps: times are totals over each run's window" in said
    notebook = execute("compare", {"ATLAS_OUT": str(runs[0].out_dir), "ATLAS_OUT_B": str(runs[1].out_dir)})
    assert "B 40.0 µs outside its 3 whole steps" in _shown(notebook, 2)


def test_the_compare_notebook_says_what_ingest_warned(tmp_path: Path) -> None:
    # B: the mm of A (10 µs) and a kernel of 5 µs nobody launched — 1 of its 2 GPU activities
    a = _trace(tmp_path / "a.json", [_call("aten::mm", MM, (SGEMM, 10))])
    b = _trace(tmp_path / "b.json", [_call("aten::mm", MM, (SGEMM, 10)), _call("", [], (ADD, 5)) | {"launch": False}])
    said = _text(dash.comparability_html(dash.compare_runs(dash.load_run(a), dash.load_run(b))))
    assert f"warning: B (b): {b}: 1 of 2 GPU activities have no launcher" in said, said
    assert "warning: A" not in said


def test_the_diff_markdown_lists_the_kernels_only_one_run_ran(tmp_path: Path) -> None:
    """`atlas diff --markdown` (a CI job's PR comment) had no such section: appeared in B, 3 kernels,
    82 µs (volta_sgemm_64x64_nn 52 first), vanished from A, 2 kernels, 40 µs — as the terminal."""
    from kernel_atlas.analysis.gate import comparability
    from kernel_atlas.report.diff_markdown import markdown

    a, b = _two_gpus(tmp_path)
    diff = diff_runs(a, b)
    text = markdown(diff, None, comparability(diff.table, diff.a.gpus, diff.b.gpus))
    appeared = text.split("### Appeared in B: 3 kernels, 82.0 µs (all their time)")[1].split("###")[0]
    # Markdown escapes the name's underscores; A ran none of it ("–")
    assert appeared.strip().splitlines()[2] == "| volta\\_sgemm\\_64x64\\_nn | – | 52.0 µs | +52.0 µs |"
    assert "### Vanished from A: 2 kernels, 40.0 µs (all their time)" in text
