"""`atlas diff` on tiny hand-written Kineto traces (campaign AM): every expected number below is
the sum of `dur` values written in the trace, worked out by hand in the comments.

- an `aten::cat` recorded as `[[],[]]` (a TensorList) has no shapes to match on;
- one op call that runs a copy kernel on one GPU and a DtoD memcpy on the other is one group, at
  the kernel, op and category levels, and the gate judges it as one;
- a kernel name's row is what lies outside op+shapes groups, and "appeared" means A never ran it;
- the comparability line says time outside the whole steps, a run without steps, and ranks
  with --per-step; matched shares leave `unknown` out of "both" and give none for 0/0;
- a row of exactly --min-share is judged; Markdown says "new"/"gone" by presence;
- `-o` writes what its suffix says; --min-share without --fail-above and --fail-above nan are
  refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.diff import diff_runs
from kernel_atlas.analysis.gate import Window, comparability, judge
from kernel_atlas.cli import app
from kernel_atlas.report.diff_markdown import comparability_line, markdown, verdict_line
from tests.support.hostile import assert_one_line_error, cli

runner = CliRunner()
A100, V100 = "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB"


def _trace(calls: list[dict[str, Any]], gpu: str = A100, rank: int | None = None) -> dict[str, Any]:
    """Kineto JSON: per call a cpu_op (`op`, `dims` as Input Dims) launching `kernels` [(name, µs)]
    — `Memcpy …` as gpu_memcpy, `Memset …` as gpu_memset — in one ProfilerStep#`step` if given;
    `launch=False`: the kernels without a launch (no op)."""
    events: list[dict[str, Any]] = []
    t, gpu_t, corr, steps = 1000.0, 500_000.0, 1, {}
    for ext, call in enumerate(calls, start=1):
        dur = 40 + 10 * len(call["kernels"])
        if call.get("launch", True):
            events.append({"ph": "X", "cat": "cpu_op", "name": call["op"], "pid": 1, "tid": 1, "ts": t, "dur": dur,
                           "args": {"External id": ext, "Input Dims": call["dims"]}})  # fmt: skip
        for i, (name, us) in enumerate(call["kernels"]):
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "gpu_memset" if name.startswith("Memset") else "kernel"
            runtime = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync"}.get(cat, "cudaMemsetAsync")
            if call.get("launch", True):
                events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": 1, "tid": 1,
                               "ts": t + 1 + 8 * i, "dur": 5, "args": {"correlation": corr, "External id": ext}})  # fmt: skip
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": gpu_t, "dur": us,
                           "args": {"correlation": corr, "External id": ext, "device": 0, "stream": 7}})  # fmt: skip
            gpu_t, corr = gpu_t + us + 2, corr + 1
        if call.get("step") is not None:
            lo, hi = steps.get(call["step"], (t, t + dur))
            steps[call["step"]] = (min(lo, t), max(hi, t + dur))
        t += dur + 10
    for step, (lo, hi) in steps.items():
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": lo - 0.2, "dur": hi - lo + 0.4})  # fmt: skip
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events,
                           "deviceProperties": [{"id": 0, "name": gpu, "totalGlobalMem": 85e9, "numSms": 108}]}  # fmt: skip
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    return doc


def _write(folder: Path, name: str, doc: dict[str, Any]) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _kernels(diff: Any) -> dict[str, tuple[float, float, str, str]]:
    rows = diff.level("kernel")
    return {r.key: (r.a_us, r.b_us, r.status, r.matched_by) for r in rows.itertuples()}


MM = {"op": "aten::mm", "dims": [[64, 64], [64, 64]], "kernels": [("ampere_sgemm_64x64_nn", 10)]}


def test_cat_calls_recorded_without_shapes_are_not_one_call(tmp_path: Path) -> None:
    # every cat records its TensorList as `[]`: A's 5 µs cat and B's 50 µs cat share no shape
    cat = {"op": "aten::cat", "dims": [[], []]}
    a = _write(tmp_path, "a.json", _trace([MM, {**cat, "kernels": [("CatArrayBatchedCopy<float, 2>", 5)]}]))
    b = _write(tmp_path, "b.json", _trace([MM, {**cat, "kernels": [("CatArrayBatchedCopy<float, 4>", 50)]}]))
    diff = diff_runs(a, b)
    assert _kernels(diff) == {
        "ampere_sgemm_64x64_nn": (10.0, 10.0, "both", "name"),
        "CatArrayBatchedCopy<float, 2>": (5.0, 0.0, "vanished", ""),
        "CatArrayBatchedCopy<float, 4>": (0.0, 50.0, "appeared", ""),
    }
    comp = comparability(diff.table, diff.a.gpus, diff.b.gpus)
    assert comp.kernels_matched_share == pytest.approx((10 + 10) / (15 + 60))  # the mm only: 26.7 %


def test_one_call_running_a_copy_kernel_or_a_memcpy_is_one_group_at_every_level(tmp_path: Path) -> None:
    # A: aten::copy_ → a copy kernel 20 µs; B (a V100): the same call → Memcpy DtoD 22 µs; mm 80 µs each.
    copy = {"op": "aten::copy_", "dims": [[1024, 1440], [1024, 1440], []]}
    mm = {**MM, "kernels": [("ampere_sgemm_64x64_nn", 80)]}
    kernel = "void at::native::elementwise_kernel<128, 2, direct_copy_kernel_cuda>(int)"
    a = _write(tmp_path, "a.json", _trace([mm, {**copy, "kernels": [(kernel, 20)]}]))
    b = _write(tmp_path, "b.json", _trace([mm, {**copy, "kernels": [("Memcpy DtoD (Device -> Device)", 22)]}], V100))
    diff = diff_runs(a, b)
    for level in ("category", "op_mapping"):  # one row of the copy, 20 → 22 µs, in both runs
        rows = diff.level(level)
        assert sorted(zip(rows["a_us"], rows["b_us"], rows["status"], strict=True)) == [
            (20.0, 22.0, "both"),
            (80.0, 80.0, "both"),
        ]
    group = diff.level("kernel").query("matched_by == 'op+shapes'")
    assert (group["a_us"].tolist(), group["b_us"].tolist()) == ([20.0], [22.0])
    assert group["key"].iloc[0].endswith(" · aten::copy_ · [[1024,1440],[1024,1440],[]]")
    # +10 % on the copy, +2 % in all (102 / 100): nothing above 50 %
    result = runner.invoke(app, ["diff", str(a), str(b), "--fail-above", "50"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output

    # A: aten::addmm → sgemm 50 µs; B: the same call → Memset 2 µs + another sgemm 60 µs: 50 → 62 (+24 %)
    addmm = {"op": "aten::addmm", "dims": [[64], [64, 64], [64, 64], [], []]}
    a2 = _write(tmp_path, "a2.json", _trace([{**addmm, "kernels": [("ampere_sgemm_64x64_tn", 50)]}]))
    b2 = _write(
        tmp_path,
        "b2.json",
        _trace([{**addmm, "kernels": [("Memset (Device)", 2), ("volta_sgemm_64x64_tn", 60)]}], V100),
    )
    diff = diff_runs(a2, b2)
    for level in ("category", "op_mapping", "kernel"):
        rows = diff.level(level)
        assert list(zip(rows["a_us"], rows["b_us"], rows["status"], strict=True)) == [(50.0, 62.0, "both")], level
    verdict = judge(diff.table, 50.0, 62.0, diff.a.gpus, diff.b.gpus, pct=50)
    assert not verdict.failed, verdict_line(verdict)


def test_a_kernel_a_ran_inside_a_group_is_not_appeared(tmp_path: Path) -> None:
    # A: mm 64² → sgemm_K 10 µs. B: mm 64² → sgemm_K2 12 µs, mm 128² → sgemm_K 40 µs.
    mm64, mm128 = {"op": "aten::mm", "dims": [[64, 64], [64, 64]]}, {"op": "aten::mm", "dims": [[128, 128], [128, 128]]}
    a = _write(tmp_path, "a.json", _trace([{**mm64, "kernels": [("sgemm_K", 10)]}]))
    b = _write(
        tmp_path, "b.json", _trace([{**mm64, "kernels": [("sgemm_K2", 12)]}, {**mm128, "kernels": [("sgemm_K", 40)]}])
    )
    rows = {k: v for k, v in _kernels(diff_runs(a, b)).items() if "·" not in k}
    # sgemm_K ran in both runs (A's 10 µs in the mm 64² group): its row, the rest, 0 → 40 µs, says so
    assert rows == {"sgemm_K": (0.0, 40.0, "both", "name (rest)")}
    result = runner.invoke(app, ["diff", str(a), str(b)], env={"COLUMNS": "200"})
    # appeared: sgemm_K2 only, B's 12 µs in the group (sgemm_K ran in both runs)
    assert result.exit_code == 0, result.output
    assert "Appeared in B: 1 kernels, 12.0 µs (all their time)" in result.output, result.output
    assert "Vanished from A" not in result.output, result.output


def _steps(n: int, extra: list[dict[str, Any]] | None = None, stepped: bool = True) -> dict[str, Any]:
    """n profiler steps of mm 10 µs + add 2 µs (without `stepped`: n iterations, no ProfilerStep)."""
    add = {"op": "aten::add", "dims": [[64, 64], [64, 64], []], "kernels": [("add_kernel", 2)]}
    calls = [{**c, "step": i if stepped else None} for i in range(1, n + 1) for c in (MM, add)]
    return _trace(calls + (extra or []))


def _line(a: Path, b: Path, *options: str) -> str:
    result = runner.invoke(app, ["diff", str(a), str(b), *options], env={"COLUMNS": "400"})
    return " ".join(result.output.split())


def test_time_outside_the_whole_steps_and_runs_without_steps_are_said(tmp_path: Path) -> None:
    a = _write(tmp_path, "a3.json", _steps(3))  # 3 · 12 = 36 µs
    # the same and a 4th step holding one mm only (cut short: 1 activity under 80 % of 2): 46 µs
    cut = _write(tmp_path, "b3cut.json", _steps(3, [{**MM, "step": 4}]))
    line = _line(a, cut, "--fail-above", "20")
    assert "B 10.0 µs outside its 3 whole steps: times are totals over each run's window" in line, line
    assert "(--per-step compares one step of each)" in line
    # the same and an mm outside every step
    out = _write(tmp_path, "b3out.json", _steps(3, [MM]))
    assert "B 10.0 µs outside its 3 whole steps" in _line(a, out)
    nosteps = _write(tmp_path, "nosteps6.json", _steps(6, stepped=False))
    line = _line(a, nosteps, "--fail-above", "10")
    assert "B records no profiler steps: windows unknown, times are totals" in line, line
    same = comparability(pd.DataFrame(columns=["level", "key", "a_us", "b_us", "status"]), [], [],
                         Window(steps=3), Window(steps=None))  # fmt: skip
    assert same.same_window is None
    apart = comparability(same_table := pd.DataFrame(columns=["level", "key", "a_us", "b_us", "status"]), [], [],
                          Window(steps=3), Window(steps=3, outside_steps_us=10.0))  # fmt: skip
    assert apart.same_window is False and apart.to_json()["b_outside_steps_us"] == 10.0
    assert comparability(same_table, [], [], Window(steps=3), Window(steps=3)).same_window is True


def test_per_step_still_says_other_rank_counts(tmp_path: Path) -> None:
    # A: 2 ranks of 2 steps; B: 1 rank: one step is 12 + 12 = 24 µs in A, 12 µs in B
    for rank in (0, 1):
        _write(tmp_path / "A", f"r{rank}.json", {**_steps(2), "distributedInfo": {"rank": rank, "world_size": 2}})
    b = _write(tmp_path / "B", "r0.json", _steps(2))
    assert cli("ingest", tmp_path / "A", "-o", tmp_path / "A.atlas", "-q").code == 0
    assert cli("ingest", b, "-o", tmp_path / "B.atlas", "-q").code == 0
    md = tmp_path / "p.md"
    result = runner.invoke(app, ["diff", str(tmp_path / "A.atlas"), str(tmp_path / "B.atlas"), "--per-step", "--json",
                                 "--markdown", str(md)])  # fmt: skip
    assert result.exit_code == 0, result.output
    total = [r for r in json.loads(result.stdout) if r["level"] == "category"]
    assert (sum(r["a_us"] for r in total), sum(r["b_us"] for r in total)) == (24.0, 12.0)
    said = md.read_text()
    assert "times per profiler step (A 2 steps, B 2 steps; outside steps, left out: A 0.0 µs, B 0.0 µs)" in said
    assert "A 2 ranks, B 1 rank" in said


def _table(rows: list[tuple[str, str, float, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["level", "key", "a_us", "b_us", "status"])


def test_a_row_of_exactly_min_share_is_judged() -> None:
    # A: mm 96.5 + neg 3.5 = 100 µs; B: neg 7.0 µs = 7 % of A's 100 µs, +100 %
    table = _table([("category", "elementwise", 3.5, 7.0, "both"), ("op_mapping", "neg", 3.5, 7.0, "both"),
                    ("category", "gemm", 96.5, 96.5, "both"), ("op_mapping", "matmul", 96.5, 96.5, "both")])  # fmt: skip
    verdict = judge(table, 100.0, 103.5, [], [], pct=50, min_share=0.07)
    assert [(r.level, r.key) for r in verdict.regressions] == [("category", "elementwise"), ("op_mapping", "neg")]
    assert not judge(table, 100.0, 103.5, [], [], pct=50, min_share=0.0701).failed


def test_matched_shares_leave_unknown_out_and_say_none_for_no_time() -> None:
    # mm 10 µs in both; 90 µs unattributed (`unknown`) in each, two unrelated kernels
    table = _table([("op_mapping", "matmul", 10.0, 10.0, "both"), ("op_mapping", "unknown", 90.0, 90.0, "both"),
                    ("kernel", "sgemm", 10.0, 10.0, "both"), ("kernel", "my_thing", 90.0, 0.0, "vanished"),
                    ("kernel", "other_thing", 0.0, 90.0, "appeared")])  # fmt: skip
    comp = comparability(table, [], [])
    assert (comp.ops_matched_share, comp.kernels_matched_share) == (pytest.approx(0.1), pytest.approx(0.1))
    empty = comparability(
        _table([("op_mapping", "matmul", 0.0, 0.0, "both"), ("kernel", "k", 0.0, 0.0, "both")]), [], []
    )
    assert (empty.ops_matched_share, empty.kernels_matched_share) == (None, None)
    assert comparability_line(empty) == "GPU not recorded in either run; no GPU time in either run"
    assert empty.to_json()["ops_matched_share"] is None


def test_markdown_says_new_and_gone_by_presence(tmp_path: Path) -> None:
    # relu: 1 call of 0 µs in A, 1 µs in B (not "new"); sigmoid only in B (new); neg 1 → 2 µs; mm 97 both
    def run(relu_us: float, sigmoid: bool, neg_us: float) -> dict[str, Any]:
        calls = [{**MM, "kernels": [("ampere_sgemm_64x64_nn", 97)]},
                 {"op": "aten::relu", "dims": [[64, 64]], "kernels": [("relu_kernel", relu_us)]},
                 {"op": "aten::neg", "dims": [[64, 64]], "kernels": [("neg_kernel", neg_us)]}]  # fmt: skip
        if sigmoid:
            calls.append({"op": "aten::sigmoid", "dims": [[64, 64]], "kernels": [("sigmoid_kernel", 1)]})
        return _trace(calls)

    a, b = _write(tmp_path, "a.json", run(0, False, 1)), _write(tmp_path, "b.json", run(1, True, 2))
    diff = diff_runs(a, b)
    verdict = judge(diff.table, diff.a.gpu_time_us, diff.b.gpu_time_us, [], [], pct=50)
    text = markdown(diff, verdict, comparability(diff.table, [], []))
    assert "op relu (0.0 µs → 1.0 µs)" in text and "op sigmoid (new)" in text
    assert "| relu | 0.0 µs | 1.0 µs | +1.0 µs | – |" in text
    assert "| sigmoid | – | 1.0 µs | +1.0 µs | new |" in text
    # categories in the table's order (largest regression first), as the terminal
    categories = text.split("### By category")[1].split("###")[0]
    keys = [line.split(" | ")[0].strip("| ") for line in categories.splitlines() if line.startswith("| ")][1:]
    assert keys == diff.level("category")["key"].tolist()
    page = tmp_path / "d.html"
    assert runner.invoke(app, ["diff", str(a), str(b), "--html", str(page)]).exit_code == 0
    assert "activities A→B" in page.read_text() and "calls A→B" not in page.read_text()


def test_out_is_written_as_its_suffix_says_and_odd_options_are_refused(tmp_path: Path) -> None:
    a = _write(tmp_path, "a.json", _trace([MM]))
    b = _write(tmp_path, "b.json", _trace([{**MM, "kernels": [("ampere_sgemm_64x64_nn", 15)]}]))
    for suffix in ("csv", "parquet", "json"):
        assert cli("diff", a, b, "-o", tmp_path / f"d.{suffix}").code == 0
    parquet = pd.read_parquet(tmp_path / "d.parquet")
    rows = json.loads((tmp_path / "d.json").read_text())
    csv = pd.read_csv(tmp_path / "d.csv")
    for frame in (parquet, pd.DataFrame(rows), csv):  # 10 → 15 µs on every level
        assert frame["a_us"].tolist() == [10.0] * 4 and frame["b_us"].tolist() == [15.0] * 4
    assert rows[0]["ratio"] == 1.5
    assert_one_line_error(cli("diff", a, b, "-o", tmp_path / "d.txt"), "-o", "d.txt", ".parquet")
    assert not (tmp_path / "d.txt").exists()
    assert_one_line_error(cli("diff", a, b, "--min-share", "0.05"), "--min-share", "--fail-above")
    assert_one_line_error(cli("diff", a, b, "--fail-above", "nan"), "--fail-above", "not a finite number")
    assert_one_line_error(cli("diff", a, b, "--fail-above", "-1"), "--fail-above", "0 or more")
    assert cli("diff", a, b, "--fail-above", "60", "--min-share", "0.05").code == 0  # +50 %
    helped = " ".join(runner.invoke(app, ["diff", "--help"], env={"COLUMNS": "300"}).output.split())
    assert "in A or in B is at least this share" in helped and "holding at least this share of A's" not in helped
