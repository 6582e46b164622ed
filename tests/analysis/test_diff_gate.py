"""`atlas diff --fail-above PCT` gates a CI job: exit 0 on identical runs, exit 3 naming what
regressed when GEMMs are planted 25 % slower; `--markdown` writes a postable summary; a bare
diff writes no file. The planted trace is the bundled example with every kernel whose name says
`gemm` made 25 % longer, so the expected numbers are read off the example's JSON by hand."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.gate import comparability, judge
from kernel_atlas.cli import app
from tests.support.traces import EXAMPLE

runner = CliRunner()
# Σ dur of the example's four `…gemm…` kernels (98.718 + 41.28 + 33.089 + 24.511 µs) and of all
# its GPU activities, summed from the JSON by hand (kernels, memcpy and memset).
GEMM_US = 197.598
TOTAL_US = 309.4


def _planted(tmp_path: Path, factor: float, match: str) -> Path:
    with gzip.open(EXAMPLE, "rt") as handle:
        doc = json.load(handle)
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel" and match in event.get("name", ""):
            event["dur"] = event["dur"] * factor
    path = tmp_path / f"planted_{match}_{factor}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("gate")
    a = folder / "a.json.gz"
    a.write_bytes(EXAMPLE.read_bytes())
    return a, _planted(folder, 1.25, "gemm")


def test_identical_runs_pass_and_write_nothing(runs, tmp_path: Path) -> None:
    a, _ = runs
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = runner.invoke(app, ["diff", str(a), str(a), "--fail-above", "5"], env={"COLUMNS": "100"})
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert "same GPU; 100.0 % of GPU time in ops both runs have, 100.0 % in kernels" in result.output
    assert list(tmp_path.iterdir()) == []  # no diff.csv left behind


def test_gemms_planted_25_percent_slower_fail_naming_gemm(runs, tmp_path: Path) -> None:
    a, b = runs
    md = tmp_path / "summary.md"
    result = runner.invoke(app, ["diff", str(a), str(b), "--fail-above", "20", "--markdown", str(md)])
    assert result.exit_code == 3, result.output
    output = " ".join(result.output.split())  # the terminal wraps the line
    line = output[output.index("diff gate:") :]
    # gemm (category) and matmul (the op) rose 25 %; the total rose 0.25 · 197.598 / 309.4 = 16.0 %,
    # under the 20 % threshold, so it is not named. Each is named with its level (an op and a
    # category of one name, `attention`, had read as one name said twice).
    assert "category gemm (+25.0 %)" in line and "op matmul (+25.0 %)" in line and "GPU time" not in line
    text = md.read_text()
    assert text.startswith("## Kernel Atlas diff")
    assert "**FAIL: regressed by more than 20 %: category gemm (+25.0 %), op matmul (+25.0 %)**" in text
    assert "| gemm | 197.6 µs | 247.0 µs | +49.4 µs | +25.0 % |" in text


def test_the_total_is_gated_too(runs) -> None:
    a, b = runs
    result = runner.invoke(app, ["diff", str(a), str(b), "--fail-above", "15"])
    assert result.exit_code == 3
    assert "GPU time (+16.0 %)" in result.output  # 49.3995 / 309.4 µs


def test_json_output_keeps_its_rows_and_gates(runs) -> None:
    a, b = runs
    result = runner.invoke(app, ["diff", str(a), str(b), "--json", "--fail-above", "30"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    gemm = next(r for r in rows if r["level"] == "category" and r["key"] == "gemm")
    assert gemm["a_us"] == pytest.approx(GEMM_US, abs=1e-6)
    assert gemm["b_us"] == pytest.approx(GEMM_US * 1.25, abs=1e-6)


def _table(rows: list[tuple[str, str, float, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["level", "key", "a_us", "b_us", "status"])


def test_small_rows_are_not_judged_and_appearing_ops_are() -> None:
    # A: 1000 µs. `tiny` doubles but holds at most 0.8 % of A; `new` appears with 20 µs (2 % of A).
    table = _table(
        [
            ("category", "gemm", 900.0, 900.0, "both"),
            ("category", "tiny", 4.0, 8.0, "both"),
            ("op_mapping", "new", 0.0, 20.0, "appeared"),
            ("op_mapping", "mm", 995.0, 990.0, "both"),
            ("kernel", "k1", 995.0, 990.0, "both"),
            ("kernel", "k2", 5.0, 0.0, "vanished"),
            ("kernel", "k3", 0.0, 40.0, "appeared"),
        ]
    )
    verdict = judge(table, 1000.0, 1030.0, ["H100"], ["H100"], pct=10.0)
    assert [(r.level, r.key, r.pct) for r in verdict.regressions] == [("op_mapping", "new", None)]
    assert verdict.failed
    loose = judge(table, 1000.0, 1030.0, ["H100"], ["H100"], pct=10.0, min_share=0.03)
    assert not loose.failed
    strict = judge(table, 1000.0, 1030.0, ["H100"], ["H100"], pct=10.0, min_share=0.004)
    assert [r.key for r in strict.regressions] == ["new", "tiny"]  # larger rise (20 µs, then 4 µs) first


def test_comparability_shares_by_hand() -> None:
    table = _table(
        [
            ("op_mapping", "mm", 60.0, 50.0, "both"),
            ("op_mapping", "gone", 30.0, 0.0, "vanished"),
            ("op_mapping", "(none)", 10.0, 10.0, "both"),
            ("kernel", "k1", 60.0, 50.0, "both"),
            ("kernel", "k2", 40.0, 0.0, "vanished"),
            ("kernel", "k3", 0.0, 10.0, "appeared"),
        ]
    )
    comp = comparability(table, ["A100"], ["V100"])
    assert not comp.same_device
    # (60+50) / (60+50+30+10+10): unlabelled time is in the whole, never shared (it had been left
    # out of the whole, which read 100 % matched where a tenth was, campaign AM 7)
    assert comp.ops_matched_share == pytest.approx(110.0 / 160.0)
    assert comp.kernels_matched_share == pytest.approx(110.0 / 160.0)


def test_a_rise_of_exactly_the_threshold_passes() -> None:
    # 100 → 115 µs is +15 % exactly; in floating point 100 · 1.15 = 114.99999999999999, which had
    # failed `--fail-above 15` with the verdict "regressed by more than 15 %: gemm (+15.0 %)".
    # 300 → 339 µs is +13 % exactly (300 · 1.13 = 338.99999999999994).
    for a_us, b_us, pct in ((100.0, 115.0, 15.0), (300.0, 339.0, 13.0), (100.0, 116.0, 16.0), (100.0, 136.0, 36.0)):
        table = _table([("category", "gemm", a_us, b_us, "both"), ("op_mapping", "matmul", a_us, b_us, "both")])
        assert not judge(table, a_us, b_us, ["H100"], ["H100"], pct=pct).failed, (a_us, b_us, pct)
        above = _table([("category", "gemm", a_us, b_us + 0.01, "both")])
        assert judge(above, a_us, b_us + 0.01, ["H100"], ["H100"], pct=pct).failed  # a hundredth of a µs more fails
    assert judge(_table([]), 10.0, 10.0, [], [], pct=-0.0).fail_above_pct == 0.0  # "more than 0 %", not "-0 %"


def test_a_gpu_no_run_records_is_unknown_not_different() -> None:
    from kernel_atlas.analysis.gate import Window
    from kernel_atlas.report.diff_markdown import comparability_line

    table = _table([("kernel", "k1", 60.0, 60.0, "both")])
    assert comparability(table, [], []).same_device is None
    assert comparability_line(comparability(table, [], [])).startswith("GPU not recorded in either run;")
    assert comparability_line(comparability(table, ["A100"], [])).startswith("GPU not recorded in B (A: A100);")
    assert comparability_line(comparability(table, ["A100"], ["V100"])).startswith("different GPUs (A100 → V100);")
    # 3 steps against 6, 2 ranks against 1: totals over different windows, said
    comp = comparability(table, ["H100"], ["H100"], Window(ranks=2, steps=3), Window(ranks=1, steps=6))
    assert comp.same_window is False
    assert comparability_line(comp).endswith(
        "; A 2 ranks, B 1 rank, A 3 steps, B 6 steps: times are totals over each run's window"
        " (--per-step compares one step of each)"
    )
    same = comparability(table, ["H100"], ["H100"], Window(ranks=1, steps=None), Window(ranks=1, steps=6))
    # a run without steps: its window is unknown, not the same (campaign AM 4)
    assert same.same_window is None
    assert comparability_line(same).endswith("; A records no profiler steps: windows unknown, times are totals")
    assert same.to_json()["b_steps"] == 6 and same.to_json()["a_steps"] is None


def _stepped_trace(steps: int, warmup_us: float = 0.0) -> dict:
    """One GEMM of 40 µs per ProfilerStep; with `warmup_us`, one more kernel before the first step."""
    events = []
    for i in range(steps):
        base = 1000 * (i + 1)
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": base,
             "dur": 900},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": base + 10, "dur": 50},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": base + 20,
             "dur": 5, "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": base + 100,
             "dur": 40, "args": {"correlation": i + 1, "device": 0, "stream": 7}},
        ]  # fmt: skip
    if warmup_us:
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 50},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 5,
             "args": {"correlation": 999}},
            {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": 200,
             "dur": warmup_us, "args": {"correlation": 999, "device": 0, "stream": 7}},
        ]  # fmt: skip
    return {"traceEvents": events}


def test_the_step_counts_of_two_runs_are_said(tmp_path: Path) -> None:
    # A records 3 steps, B 6 of the same program — every row +100 %.
    paths = []
    for name, steps in (("three", 3), ("six", 6)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(_stepped_trace(steps)))
    result = runner.invoke(app, ["diff", *map(str, paths), "--fail-above", "5"])
    assert result.exit_code == 3, result.output
    output = " ".join(result.output.split())
    assert "A 3 steps, B 6 steps: times are totals over each run's window" in output
    assert "B − A +120.0 µs (+100.0%)" in output  # 6·40 − 3·40 = 120


def test_per_step_compares_one_step_of_each(tmp_path: Path) -> None:
    # A: 3 steps of one 40 µs GEMM; B: 6 such steps and a 100 µs warm-up GEMM before its first step.
    # One step of each is 40 µs (120/3, 240/6): nothing regressed; B's warm-up is left out and said.
    a, b, bare = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bare.json"
    a.write_text(json.dumps(_stepped_trace(3)))
    b.write_text(json.dumps(_stepped_trace(6, warmup_us=100.0)))
    result = runner.invoke(app, ["diff", str(a), str(b), "--per-step", "--fail-above", "5", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    kernel = next(r for r in rows if r["level"] == "kernel")
    assert (kernel["a_us"], kernel["b_us"], kernel["delta_us"]) == (40.0, 40.0, 0.0)
    said = " ".join(result.stderr.split())
    assert "times per profiler step (A 3 steps, B 6 steps; outside steps, left out: A 0.0 µs, B 100.0 µs)" in said
    assert "PASS" in said
    # without --per-step the warm-up and the three more steps are B's: 340 − 120 = +220 µs
    totals = json.loads(runner.invoke(app, ["diff", str(a), str(b), "--json"]).stdout)
    kernel = next(r for r in totals if r["level"] == "kernel")
    assert (kernel["a_us"], kernel["b_us"]) == (120.0, 340.0)
    # a run without profiler steps cannot be compared per step: one line, exit 2
    doc = _stepped_trace(2)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    bare.write_text(json.dumps(doc))
    result = runner.invoke(app, ["diff", str(a), str(bare), "--per-step"])
    assert result.exit_code == 2
    assert "records no profiler steps: --per-step needs ProfilerStep ranges" in " ".join(result.output.split())


def _steps_of(kernels: list[int]) -> dict:
    """ProfilerStep#i launching kernels[i] GEMMs of 40 µs each."""
    events, correlation = [], 0
    for i, count in enumerate(kernels):
        base = 1000 * (i + 1)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": base, "dur": 900})  # fmt: skip
        for j in range(count):
            correlation += 1
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": base + 10 + 100 * j,
                 "dur": 50},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": base + 20 + 100 * j, "dur": 5, "args": {"correlation": correlation}},
                {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7,
                 "ts": base + 100 + 100 * j, "dur": 40, "args": {"correlation": correlation, "device": 0, "stream": 7}},
            ]  # fmt: skip
    return {"traceEvents": events}


def test_per_step_counts_the_steps_the_report_counts(tmp_path: Path) -> None:
    """--per-step divided by the steps that launched GPU work: a last step the profiler cut after
    its first of two kernels counted as a whole step (+33 %, exit 3 under --fail-above 10), a step
    without GPU work not at all. It counts the steps the report's efficiency counts."""
    full, cut, idle = tmp_path / "full.json", tmp_path / "cut.json", tmp_path / "idle.json"
    full.write_text(json.dumps(_steps_of([2, 2, 2])))
    cut.write_text(json.dumps(_steps_of([2, 2, 2, 1])))  # the 4th step: 1 of 2 kernels, then the end
    idle.write_text(json.dumps(_steps_of([1, 1, 0, 1])))  # step 2 launched nothing
    result = runner.invoke(app, ["diff", str(full), str(cut), "--per-step", "--fail-above", "10", "--json"])
    assert result.exit_code == 0, result.output
    kernel = next(r for r in json.loads(result.stdout) if r["level"] == "kernel")
    # 3 steps of 2·40 µs each: 80 µs a step in both (B's cut step, 40 µs, outside the steps counted)
    assert (kernel["a_us"], kernel["b_us"]) == (80.0, 80.0)
    said = " ".join(result.stderr.split())
    assert "A 3 steps, B 3 steps; outside steps, left out: A 0.0 µs, B 40.0 µs" in said
    # 3 kernels of 40 µs over 4 steps: 30 µs a step (was 120/3 = 40)
    result = runner.invoke(app, ["diff", str(full), str(idle), "--per-step", "--json"])
    kernel = next(r for r in json.loads(result.stdout) if r["level"] == "kernel")
    assert (kernel["a_us"], kernel["b_us"]) == (80.0, 30.0)
