"""Campaign BT 1: summary.json's per-step `gpu_us_by_category` (the report's "GPU time per step by
category" chart) is checked where the run folder is opened — a negative, oversized or non-number
time is refused in one line, exit 2 — and a value that holds more than the kernels do, or a
category the kernels do not have, is not drawn: the chart is by step number and its subtitle says
why. It had drawn a −1000 ms step beside a +1000 ms "outside the steps" on a run of 0.107 ms, and a
text had dropped its step from the chart without a word.

The trace is written here: two `ProfilerStep#N` ranges, one op, one launch and one kernel each —
step 1 a 40 µs sgemm (gemm) and a 10 µs add (elementwise), step 2 a 50 µs sgemm and a 7 µs relu
(activation): 107 µs of GPU time, all of it launched inside the steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.views import KernelViews, ViewsFold, step_row_times
from kernel_atlas.cli import app
from tests.analysis.test_step_rows_chart_bq1 import steps_plot

runner = CliRunner()
# (step index, op, kernel, µs)
KERNELS = [
    (0, "aten::mm", "ampere_sgemm_128x64_nn", 40),
    (0, "aten::add", "vectorized_elementwise_kernel_add", 10),
    (1, "aten::mm", "ampere_sgemm_128x64_nn", 50),
    (1, "aten::relu", "vectorized_elementwise_kernel_relu", 7),
]


def _trace() -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    corr, ext = 1000, 1
    for s in range(2):
        t0 = 1000 + s * 1000
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1, "ts": t0,
             "dur": 900, "args": {"External id": ext}}
        )  # fmt: skip
        ext += 1
        t = t0 + 10
        for step, op, kernel, dur in KERNELS:
            if step != s:
                continue
            events += [
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 20,
                 "args": {"External id": ext}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 5,
                 "dur": 5, "args": {"correlation": corr, "External id": ext}},
                {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 30, "dur": dur,
                 "args": {"correlation": corr, "External id": ext, "device": 0, "stream": 7, "grid": [1, 1, 1],
                          "block": [128, 1, 1]}},
            ]  # fmt: skip
            corr, ext, t = corr + 1, ext + 1, t + 100
    return {"traceEvents": events}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(_trace()))
    out = tmp_path / "base.atlas"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def _doctor(out: Path, value: Any, *, absent: bool = False) -> None:
    """Step 1's `gpu_us_by_category` set to `value` (removed where `absent`)."""
    path = out / "summary.json"
    summary = json.loads(path.read_text())
    row = summary["traces"][0]["efficiency"]["steps"][0]
    if absent:
        del row["gpu_us_by_category"]
    else:
        row["gpu_us_by_category"] = value
    path.write_text(json.dumps(summary))


def _step_chart(out: Path) -> tuple[dict[tuple[str, str], float], str]:
    """report.html's per-step chart: µs per (bar, category), and the title."""
    data, layout = steps_plot(out)
    bars = {(x, trace["name"]): 1e3 * y for trace in data for x, y in zip(trace["x"], trace["y"], strict=True) if y}
    return bars, layout["title"]["text"]


# the trace's bars, by hand: no GPU time outside the two steps
BARS = {
    ("step 1", "gemm"): 40.0,
    ("step 1", "elementwise"): 10.0,
    ("step 2", "gemm"): 50.0,
    ("step 2", "activation"): 7.0,
}


def test_undoctored_rows_are_the_kernels_of_each_step(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    steps = summary["traces"][0]["efficiency"]["steps"]
    assert [s["gpu_us_by_category"] for s in steps] == [
        {"gemm": 40.0, "elementwise": 10.0},
        {"gemm": 50.0, "activation": 7.0},
    ]
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    bars, title = _step_chart(run)
    assert bars == pytest.approx(BARS)
    assert "the step rows of steps.parquet" in title


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ({"gemm": -1e6, "elementwise": 10.0}, "is negative"),
        ({"gemm": 1e308, "elementwise": 1e308}, "is out of range"),
        ({"gemm": "40"}, "is not a number"),
        ({"gemm": True}, "is not a number"),
        ([1, 2], "is not an object"),
    ],
)
def test_a_time_that_is_no_duration_is_refused_in_one_line(run: Path, value: Any, what: str) -> None:
    _doctor(run, value)
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "traces[0].efficiency.steps[0].gpu_us_by_category" in lines[0]
    assert what in lines[0]


@pytest.mark.parametrize("absent", [False, True])
def test_a_summary_without_the_rows_times_is_charted_by_number(run: Path, absent: bool) -> None:
    # a run ingested before the field existed: null or absent, the chart by step number as before
    _doctor(run, None, absent=absent)
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    bars, title = _step_chart(run)
    assert bars == pytest.approx(BARS)
    assert "by step number: a repeated number's rows" in title


def test_rows_holding_more_than_the_kernels_are_not_drawn(run: Path) -> None:
    # step 1's gemm 5000 µs: the rows hold 5000 + 50 = 5050 µs of gemm, the kernels 40 + 50 = 90 µs
    _doctor(run, {"gemm": 5000.0, "elementwise": 10.0})
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    bars, title = _step_chart(run)
    assert bars == pytest.approx(BARS)  # by number: the kernels' own steps
    assert "by step number: summary.json's step rows hold 5.050 ms of gemm" in title
    assert "more than kernels.parquet's 0.090 ms" in title


def test_a_category_the_kernels_do_not_have_is_not_drawn(run: Path) -> None:
    _doctor(run, {"made_up": 777.0})
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    bars, title = _step_chart(run)
    assert bars == pytest.approx(BARS)
    assert not any(category == "made_up" for _, category in bars)
    assert "by step number: summary.json's step rows list made_up, a category kernels.parquet does not have" in title


def test_a_row_time_that_is_no_number_is_not_dropped_without_a_word(run: Path) -> None:
    # a summary not opened through the schema (the views read it as given): a text had lost step 1
    summary = json.loads((run / "summary.json").read_text())
    summary["traces"][0]["efficiency"]["steps"][0]["gpu_us_by_category"] = {"gemm": "40", "elementwise": 10.0}
    kernels = pd.read_parquet(run / "kernels.parquet")
    rows = step_row_times(kernels, summary)
    assert rows is not None
    assert rows.by_number_why == "summary.json's step 1 has a gemm time that is not a number ≥ 0"
    assert rows.table.empty

    # one rank's rows by number: the fleet's chart by number, with its reason
    good = step_row_times(kernels, json.loads((run / "summary.json").read_text()))
    assert good is not None and good.by_number_why is None
    fold = ViewsFold()
    empty = pd.DataFrame({"module": [], "dur_us": []})
    steps = pd.DataFrame({"step": [], "category": [], "dur_us": []})
    fold.add(0, KernelViews(empty, steps, None, step_rows=good))
    fold.add(1, KernelViews(empty, steps, None, step_rows=rows))
    result = fold.result()
    assert result is not None and result.step_rows is not None
    assert result.step_rows.by_number_why == rows.by_number_why
