"""Campaign BQ 1, 2: the report's "GPU time per step by category" chart has steps.parquet's step
rows — a profiler restarted in one trace (#1 #2 #1 #2) is four bars, not two of two steps each; a
step the tail rule leaves out of steps.parquet has no bar of its own, its time is in "outside the
steps" and the chart says so — and a trace without steps gives its one row the kernels launched in
it (`kernel_us_launched`, had been null). Traces written here; the expected values read off them
by hand (docs/efficiency.md, "Which step")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.analysis.test_steps_views_s66 import _ingest

runner = CliRunner()
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"


def _trace(steps: list[tuple[int, float, float]], kernels: list[tuple[float | None, float, float]]) -> dict[str, Any]:
    """`ProfilerStep#N` ranges (N, start, duration) on thread 1, and kernels on device 0 stream 7
    (launch, start, duration), each launched by a 2 µs call inside a 4 µs `aten::mul`; launch None:
    a kernel whose launch the trace did not record."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for n, ts, dur in steps
    ]
    for c, (launch, ts, dur) in enumerate(kernels, 1):
        ids = {"correlation": c, "External id": c}
        if launch is not None:
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": launch - 1, "dur": 4,
                 "args": {"External id": c}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch,
                 "dur": 2, "args": ids},
            ]  # fmt: skip
        else:  # no launch and no op of its External id
            ids = {"correlation": 1000 + c, "External id": 1000 + c}
        events.append(
            {"ph": "X", "cat": "kernel", "name": MUL, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {**ids, "device": 0, "stream": 7}}
        )  # fmt: skip
    return {"traceEvents": events}


def _report(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    out = _ingest(tmp_path, name, doc)
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    return out


def steps_plot(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """report.html's per-step chart as drawn: its plotly traces and layout."""
    html = (out / "report.html").read_text()
    start = html.index('Plotly.newPlot(                        "steps",')
    decoder = json.JSONDecoder()
    text = html[html.index("[", start) :]
    data, end = decoder.raw_decode(text)
    layout, _ = decoder.raw_decode(text[end:].lstrip(", "))
    return data, layout


def _step_chart(out: Path) -> tuple[dict[str, float], list[str], str]:
    """report.html's per-step chart: µs per bar (summed over the categories), the bars in order,
    and the title."""
    data, layout = steps_plot(out)
    bars: dict[str, float] = {}
    order: list[str] = []
    for trace in data:
        for x, y in zip(trace["x"], trace["y"], strict=True):
            if x not in bars:
                order.append(x)
            bars[x] = bars.get(x, 0.0) + 1e3 * y
    return bars, order, layout["title"]["text"]


# A profiler restarted in one trace: #1 [0, 100), #2 [100, 200), #1 [200, 300), #2 [300, 400).
# Two kernels launched in each row: 10 + 10, 20 + 40, 30 + 30, 40 + 40 µs. Row 2's second kernel
# (launched at 150) runs [250, 290): row 2 stretches to 290, so row 3 (#1 again) starts at 290 —
# after its first kernel's launch at 210, which is still row 3's (its launch lies in #1 [200, 300)).
RESTARTED = _trace(
    [(1, 0, 100), (2, 100, 100), (1, 200, 100), (2, 300, 100)],
    [(10, 15, 10), (50, 55, 10), (110, 115, 20), (150, 250, 40), (210, 295, 30), (250, 330, 30), (310, 365, 40),
     (350, 410, 40)],
)  # fmt: skip


def test_the_per_step_chart_has_a_bar_per_step_row_when_numbers_repeat(tmp_path: Path) -> None:
    out = _report(tmp_path, "restarted", RESTARTED)
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps["step"].tolist() == [1, 2, 1, 2]
    assert steps["kernel_us_launched"].tolist() == [20.0, 60.0, 60.0, 80.0]
    bars, order, heading = _step_chart(out)
    # four bars, as steps.parquet's rows (by number they had been two: step 1 80 µs, step 2 140 µs)
    assert order == ["step 1", "step 2", "step 1 (2nd)", "step 2 (2nd)"]
    assert bars == {"step 1": 20.0, "step 2": 60.0, "step 1 (2nd)": 60.0, "step 2 (2nd)": 80.0}
    assert "the step rows of steps.parquet" in heading and "'step N (2nd)'" in heading


# #1 [100, 200), #2 [200, 300): five 10 µs kernels launched in #1, one 7 µs kernel in #2 (under
# 80 % of 5: the tail rule leaves #2 out of steps.parquet), one 3 µs kernel launched at 50, before
# every step.
TAIL = _trace(
    [(1, 100, 100), (2, 200, 100)],
    [(50, 60, 3), (110, 120, 10), (120, 130, 10), (130, 140, 10), (140, 150, 10), (150, 160, 10), (210, 220, 7)],
)


def test_a_step_left_out_of_steps_parquet_has_no_bar_and_the_chart_says_so(tmp_path: Path) -> None:
    out = _report(tmp_path, "tail", TAIL)
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps["step"].tolist() == [1] and steps["kernel_us_launched"].tolist() == [50.0]
    bars, order, heading = _step_chart(out)
    # step 2 (7 µs) had had a bar of its own; with the kernel before every step: 3 + 7 µs outside
    assert order == ["step 1", "outside the steps"]
    assert bars == {"step 1": 50.0, "outside the steps": 10.0}
    assert "1 trailing step left out as steps.parquet leaves it" in heading
    assert "step 2 launched 1 GPU activity" in heading


def test_a_trace_without_steps_gives_its_one_row_the_kernels_launched_in_it(tmp_path: Path) -> None:
    # no steps: the one row spans the CPU ops [99, 1504), stretched to the end of the last kernel
    # launched in it (1650); kernels of 100, 300 and 50 µs launched in it, and a 25 µs kernel whose
    # launch was not recorded: in no row (nor does it stretch the row)
    doc = _trace([], [(100, 200, 100), (900, 1100, 300), (1500, 1600, 50), (None, 1700, 25)])
    out = _report(tmp_path, "nosteps", doc)
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps["step"].isna().tolist() == [True]
    assert steps["start_us"].tolist() == [99.0] and steps["end_us"].tolist() == [1650.0]
    assert steps["kernel_us_launched"].tolist() == [450.0]  # had been null
    bars, _, heading = _step_chart(out)
    assert bars == {"outside the steps": 475.0} and "no profiler steps" in heading


def test_the_step_rows_of_several_ranks_add_up_by_label() -> None:
    from kernel_atlas.analysis.views import KernelViews, StepRowTimes, ViewsFold

    def views(rows: list[tuple[int | None, str, str, float]]) -> KernelViews:
        table = pd.DataFrame(rows, columns=["row", "label", "category", "dur_us"]).astype({"row": "Int64"})
        steps = pd.DataFrame({"step": pd.Series([], dtype="Int64"), "category": [], "dur_us": []})
        return KernelViews(pd.DataFrame({"module": [], "dur_us": []}), steps, None, step_rows=StepRowTimes(table))

    fold = ViewsFold()
    fold.add(0, views([(0, "step 1", "gemm", 1.0), (1, "step 2", "gemm", 2.0), (2, "step 1 (2nd)", "gemm", 4.0)]))
    fold.add(1, views([(0, "step 1", "gemm", 8.0), (2, "step 1 (2nd)", "comm", 16.0), (None, "outside the steps",
                                                                                        "gemm", 32.0)]))  # fmt: skip
    table = fold.result().step_rows.table
    got = [(None if pd.isna(r) else int(r), label, c, t) for r, label, c, t in table.itertuples(index=False)]
    assert got == [
        (0, "step 1", "gemm", 9.0),
        (1, "step 2", "gemm", 2.0),
        (2, "step 1 (2nd)", "comm", 16.0),
        (2, "step 1 (2nd)", "gemm", 4.0),
        (None, "outside the steps", "gemm", 32.0),
    ]
    # a part without step rows (a summary of an earlier ingest): the chart is by number
    old = views([])
    old.step_rows = None
    fold.add(2, old)
    assert fold.result().step_rows is None
