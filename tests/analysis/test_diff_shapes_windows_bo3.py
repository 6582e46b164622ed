"""Campaign BO 4 and 5: what `atlas diff`'s comparability and gate say of two runs that did other
work, or were timed over other windows.

4. Two runs of aten::mm at batch 32 and 64 share every op and every kernel: the comparability line
   read "100 % in ops both runs have, 100 % in kernels both runs have" at +100 % everywhere. It now
   also gives the share of the GPU time at recorded shapes that lies in op calls at shapes both
   runs record (`cpu op · input shapes`, the diff's call signatures), says the work differs when
   that is under half, and "not known" where a run records no shapes.
5. The gate judges totals; over windows that differ (1 rank and 3 steps against 2 ranks and 4) its
   FAIL line now says so and names `--per-step`.

Every expected number is summed by hand from the traces built here (or, for the A100/V100 pair,
by a linker of plain `json` written for this campaign, described where it is used)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.diff import diff_runs, side_of_kernels
from kernel_atlas.analysis.gate import comparability, judge
from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.report.diff_markdown import comparability_line
from kernel_atlas.store.run import Run
from tests.support.traces import ingested, trace_path

runner = CliRunner()
GPU = "NVIDIA A100-SXM4-80GB"
SMALL, BIG = [[32, 64], [64, 64]], [[64, 64], [64, 64]]


def _trace(calls: list[tuple[str, list | None, str, float, int | None]], rank: int | None = None, world: int = 2):
    """One CPU op per call (name, Input Dims or None, kernel, µs, profiler step or None) launching
    one GPU activity; ProfilerStep#n around the calls of step n."""
    events, steps = [], {}
    for i, (op, dims, kernel, us, step) in enumerate(calls):
        ts, corr = 1000.0 + 100 * i, i + 1
        args = {"External id": corr} | ({"Input Dims": dims} if dims is not None else {})
        if op:
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": ts, "dur": 50, "args": args}
            )
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 10,
             "dur": 5, "args": {"correlation": corr}},
            {"ph": "X", "cat": "gpu_memcpy" if kernel.startswith("Memcpy") else "kernel", "name": kernel, "pid": 0,
             "tid": 7, "ts": 500000.0 + 100 * i, "dur": us, "args": {"correlation": corr, "device": 0, "stream": 7}},
        ]  # fmt: skip
        if step is not None:
            lo, hi = steps.get(step, (ts, ts + 50))
            steps[step] = (min(lo, ts), max(hi, ts + 50))
    events += [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": lo - 1,
         "dur": hi - lo + 2}
        for s, (lo, hi) in steps.items()
    ]  # fmt: skip
    doc = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 0, "name": GPU}]}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def _write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _mm(dims: list | None, us: float, steps: range) -> list:
    return [("aten::mm", dims, "ampere_sgemm_64x64_nn", us, s) for s in steps]


def _said(text: str) -> str:
    return " ".join(text.split())


def test_another_batch_size_is_said_though_every_op_and_kernel_is_shared(tmp_path: Path) -> None:
    # c01: A = 3 steps of aten::mm at [[32,64],[64,64]] → 10 µs; B = the same at [[64,64],[64,64]] → 20 µs.
    # Hand: A's only call signature `aten::mm · [[32,64],[64,64]]`, B's `aten::mm · [[64,64],[64,64]]`:
    # none shared, 0 of 30 + 60 µs at shapes both runs record — 0.0 %.
    a = _write(tmp_path / "a.json", _trace(_mm(SMALL, 10, range(1, 4))))
    b = _write(tmp_path / "b.json", _trace(_mm(BIG, 20, range(1, 4))))
    md = tmp_path / "d.md"
    result = runner.invoke(app, ["diff", str(a), str(b), "--fail-above", "10", "--markdown", str(md)])
    assert result.exit_code == 3, result.output
    said = _said(result.output)
    assert (
        "same GPU; 100.0 % of GPU time in ops both runs have, 100.0 % in kernels both runs have; 0.0 % of GPU "
        "time at recorded shapes in op calls at shapes both runs record: the work differs (batch size, sequence "
        "length?)" in said
    )
    assert "0.0 % of GPU time at recorded shapes in op calls at shapes both runs record: the work differs" in (
        md.read_text()
    )
    # 3 steps each, nothing outside them: the windows are the same, the FAIL carries no window caveat
    assert "diff gate: FAIL: regressed by more than 10 %: GPU time (+100.0 %)" in said


def test_the_share_is_of_the_time_at_recorded_shapes(tmp_path: Path) -> None:
    # A: 3 × mm SMALL 10 µs. B: 2 × mm SMALL 10 µs, 1 × mm BIG 20 µs, and a 5 µs memcpy no op launched
    # (no shapes: in neither part). Hand: at recorded shapes A 30 + B 40 = 70 µs; at shapes both record
    # (SMALL) A 30 + B 20 = 50 µs: 50/70 = 71.4 %, over half — no words about other work.
    a = _write(tmp_path / "a.json", _trace(_mm(SMALL, 10, range(1, 4))))
    calls = [*_mm(SMALL, 10, range(1, 3)), *_mm(BIG, 20, range(3, 4)), ("", None, "Memcpy DtoD", 5.0, 3)]
    b = _write(tmp_path / "b.json", _trace(calls))
    diff = diff_runs(a, b)
    verdict = judge(diff.table, 30.0, 45.0, [GPU], [GPU], 10.0, activities=(diff.a.activities, diff.b.activities))
    shapes = verdict.comparability.shapes
    assert (shapes.recorded_us, shapes.matched_us) == (70.0, 50.0)
    assert verdict.to_json()["comparability"]["shapes_matched_share"] == pytest.approx(50 / 70)
    line = comparability_line(verdict.comparability)
    assert "; 71.4 % of GPU time at recorded shapes in op calls at shapes both runs record" in line
    assert "the work differs" not in line
    # without the activities the share is not measured, and not said (the line as before)
    plain = comparability(diff.table, [GPU], [GPU], diff.a.window, diff.b.window)
    assert plain.shapes is None and "recorded shapes" not in comparability_line(plain)


def test_shapes_a_run_does_not_record_are_not_known_not_zero(tmp_path: Path) -> None:
    # A traced without record_shapes (no Input Dims), B with: its calls are at no shape, not at others.
    a = _write(tmp_path / "a.json", _trace(_mm(None, 10, range(1, 4))))
    b = _write(tmp_path / "b.json", _trace(_mm(SMALL, 10, range(1, 4))))
    result = runner.invoke(app, ["diff", str(a), str(b)])
    assert result.exit_code == 0, result.output
    said = _said(result.output)
    assert "op-call shapes not known: A records none" in said
    assert "% of GPU time at recorded shapes" not in said
    diff = diff_runs(a, b)
    comp = comparability(diff.table, [GPU], [GPU], activities=(diff.a.activities, diff.b.activities))
    assert comp.to_json()["shapes_matched_share"] is None
    both = comparability(diff.table, [GPU], [GPU], activities=(diff.a.activities, diff.a.activities))
    assert "op-call shapes not known: neither run records them" in comparability_line(both)


def test_the_fail_line_says_the_windows_differ_and_names_per_step(tmp_path: Path) -> None:
    # c06: A = 1 rank, 3 steps of mm 10 µs; B = rank 0: 3 steps of mm 10 µs, rank 1: 4 steps of mm 12 µs.
    # Hand: totals 30 → 30 + 48 = 78 µs (+160 %) from the window alone; per step 10 → 10 + 12 = 22 µs (+120 %).
    _write(tmp_path / "A" / "r0.json", _trace(_mm(BIG, 10, range(1, 4)), rank=0, world=1))
    _write(tmp_path / "B" / "r0.json", _trace(_mm(BIG, 10, range(1, 4)), rank=0))
    _write(tmp_path / "B" / "r1.json", _trace(_mm(BIG, 12, range(1, 5)), rank=1))
    for side in ("A", "B"):
        done = runner.invoke(app, ["ingest", str(tmp_path / side), "-o", str(tmp_path / f"{side}.atlas")])
        assert done.exit_code == 0, done.output
    a, b, md = tmp_path / "A.atlas", tmp_path / "B.atlas", tmp_path / "d.md"
    result = runner.invoke(app, ["diff", str(a), str(b), "--fail-above", "10", "--markdown", str(md)])
    assert result.exit_code == 3, result.output  # the gate still judges the totals (documented)
    headline = (
        "FAIL — totals over windows that differ (A 1 rank, B 2 ranks, A 3 steps, B 4 steps); --per-step "
        "compares one step of each: regressed by more than 10 %: GPU time (+160.0 %)"
    )
    assert f"diff gate: {headline}" in _said(result.output)
    assert md.read_text().splitlines()[2].startswith(f"**{headline}")
    # per step the steps no longer differ, the ranks do: said, --per-step not offered again
    result = runner.invoke(app, ["diff", str(a), str(b), "--fail-above", "10", "--per-step"])
    assert result.exit_code == 3, result.output
    assert (
        "diff gate: FAIL — over windows that differ (A 1 rank, B 2 ranks: one step is its ranks' time "
        "together): regressed by more than 10 %: GPU time (+120.0 %)" in _said(result.output)
    )


@pytest.fixture(scope="module")
def real_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    trace_path("a100_diff_control"), trace_path("v100_diff_test")  # skipped where absent
    folder = tmp_path_factory.mktemp("bo3")
    write_outputs(ingested("a100_diff_control"), folder / "a.atlas")
    write_outputs(ingested("v100_diff_test"), folder / "b.atlas")
    return folder / "a.atlas", folder / "b.atlas"


def _recorded(folder: Path) -> pd.DataFrame:
    """The run's activities whose shapes the trace records (those ingest inferred left out)."""
    run = Run.open(folder)
    kernels = pd.concat([run.kernels(rank) for rank in run.ranks or [None]], ignore_index=True)
    return side_of_kernels(run.label, kernels[~kernels["shapes_inferred"].astype(bool)], run.gpu_names).activities


def test_the_a100_v100_pair_by_hand(real_pair) -> None:
    from kernel_atlas.analysis.gate import shapes_matched

    # By hand (plain json, no kernel_atlas): each GPU activity → its launch by correlation →
    # the innermost enclosing cpu_op on the launch's thread and its Input Dims (where that op has no
    # tensor dims — record_param_comms — those of the nccl:* user_annotation inside it), `op · dims`
    # where dims hold a number. A: 475,065 µs at recorded shapes, 221,283 µs of it at signatures B has
    # too (190 shared); B: 605,300 and 330,627 µs. Share: 551,910 / 1,080,365 = 51.09 %.
    a, b = real_pair
    shapes = shapes_matched(_recorded(a), _recorded(b))
    assert shapes.recorded_us == pytest.approx(475_065 + 605_300)
    assert shapes.matched_us == pytest.approx(221_283 + 330_627)
    assert shapes.share == pytest.approx(551_910 / 1_080_365)
    # `atlas diff` counts also the B activities whose shapes ingest borrowed (launched before the window:
    # at most the 56,517 µs of B's activities whose launch the trace lacks, hand-summed): between
    # 551,910 / (1,080,365 + 56,517) = 48.5 % and (551,910 + 56,517) / (1,080,365 + 56,517) = 53.5 %
    diff = diff_runs(a, b)
    share = shapes_matched(diff.a.activities, diff.b.activities).share
    assert 551_910 / 1_136_882 <= share <= 608_427 / 1_136_882
    result = runner.invoke(app, ["diff", str(a), str(b)], env={"COLUMNS": "400"})
    assert f"; {100 * share:.1f} % of GPU time at recorded shapes in op calls at shapes both runs record;" in (
        _said(result.output)
    )
