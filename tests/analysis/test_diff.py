"""`atlas diff` on the same workload traced on an A100 and a V100, checked against sums and name
sets read from the trace JSON with plain `json`."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from kernel_atlas.analysis.diff import LEVELS, compare, diff_runs, side_of
from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from tests.support.browser import Chromium
from tests.support.traces import ingested, raw_events, trace_path

A, B = "a100_diff_control", "v100_diff_test"
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
runner = CliRunner()


def _gpu_time_by_name(stem: str) -> dict[str, float]:
    """µs per GPU activity name: every complete event of a GPU category, summed by hand."""
    times: dict[str, float] = defaultdict(float)
    for event in raw_events(stem):
        if event.get("ph") == "X" and event.get("cat") in GPU_CATEGORIES:
            times[event["name"]] += float(event["dur"])
    return times


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("diff")
    write_outputs(ingested(A), folder / "a100.atlas")
    write_outputs(ingested(B), folder / "v100.atlas")
    return folder / "a100.atlas", folder / "v100.atlas"


@pytest.fixture(scope="module")
def diff(outputs):
    return diff_runs(*outputs)


def test_every_level_sums_to_each_runs_gpu_time(diff) -> None:
    total_a, total_b = sum(_gpu_time_by_name(A).values()), sum(_gpu_time_by_name(B).values())
    assert total_a == pytest.approx(501_567.0) and total_b == pytest.approx(963_762.0)  # read off the JSON
    for level in LEVELS:
        rows = diff.level(level)
        assert len(rows), level
        assert rows["a_us"].sum() == pytest.approx(total_a, rel=1e-9), level
        assert rows["b_us"].sum() == pytest.approx(total_b, rel=1e-9), level
        assert (rows["delta_us"] == rows["b_us"] - rows["a_us"]).all()
        assert rows["delta_us"].is_monotonic_decreasing  # ranked: largest regression first


def test_kernels_matched_by_name_carry_the_hand_summed_times(diff) -> None:
    by_name_a, by_name_b = _gpu_time_by_name(A), _gpu_time_by_name(B)
    kernels = diff.level("kernel").set_index("key")
    # NCCL all-reduce: the same kernel name on both GPUs and never regrouped (no recorded shapes)
    nccl = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    row = kernels.loc[nccl]
    assert row["matched_by"] == "name" and row["status"] == "both"
    assert row["a_us"] == pytest.approx(by_name_a[nccl]) and row["b_us"] == pytest.approx(by_name_b[nccl])
    assert row["a_us"] == pytest.approx(32_880.0) and row["b_us"] == pytest.approx(92_082.0)


def test_same_op_at_the_same_shapes_is_matched_across_kernel_names(diff) -> None:
    kernels = diff.level("kernel")
    regrouped = kernels[kernels["matched_by"] == "op+shapes"]
    assert len(regrouped) >= 10
    # aten::mm at [1024,1024]×[1024,1705]: CUTLASS on the A100, volta_sgemm on the V100
    row = regrouped.set_index("key").loc["matmul · aten::mm · [[1024,1024],[1024,1705]]"]
    assert "cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1" in row["a_kernels"]
    assert set(row["b_kernels"].split(" | ")) == {"volta_sgemm_128x64_nt", "volta_sgemm_128x64_nn"}
    assert row["status"] == "both" and row["a_count"] > 0 and row["b_count"] > 0
    # a regrouped call has kernels of other names in the two runs
    for r in regrouped.itertuples():
        assert set(r.a_kernels.split(" | ")) != set(r.b_kernels.split(" | "))


def test_appeared_and_vanished_are_the_names_of_one_run_only(diff) -> None:
    names_a, names_b = set(_gpu_time_by_name(A)), set(_gpu_time_by_name(B))
    kernels = diff.level("kernel")
    regrouped = kernels[kernels["matched_by"] == "op+shapes"]
    in_groups_a = {n for k in regrouped["a_kernels"] for n in k.split(" | ")}
    in_groups_b = {n for k in regrouped["b_kernels"] for n in k.split(" | ")}
    vanished = set(kernels.loc[kernels["status"] == "vanished", "key"])
    appeared = set(kernels.loc[kernels["status"] == "appeared", "key"])
    assert vanished and appeared
    # a name of both runs is vanished when its calls in B were all matched by op and shapes
    assert vanished <= (names_a - names_b) | (names_a & in_groups_b)
    assert appeared <= (names_b - names_a) | (names_b & in_groups_a)
    # every name of one run only is vanished/appeared, or part of an op call matched by shapes
    assert names_a - names_b <= vanished | in_groups_a
    assert names_b - names_a <= appeared | in_groups_b
    assert (kernels.loc[kernels["status"] == "vanished", "b_us"] == 0).all()
    assert (kernels.loc[kernels["status"] == "appeared", "a_us"] == 0).all()


def test_diff_command_json_csv_and_terminal(outputs, tmp_path: Path) -> None:
    a, b = outputs
    csv = tmp_path / "diff.csv"
    result = runner.invoke(app, ["diff", str(a), str(b), "-o", str(csv), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and all(set(r) == {"level", "key", "a_us", "b_us", "delta_us"} for r in rows)
    totals_a, totals_b = sum(_gpu_time_by_name(A).values()), sum(_gpu_time_by_name(B).values())
    for level in LEVELS:
        assert sum(r["a_us"] for r in rows if r["level"] == level) == pytest.approx(totals_a)
        assert sum(r["b_us"] for r in rows if r["level"] == level) == pytest.approx(totals_b)
    table = pd.read_csv(csv, keep_default_na=False)
    assert {"level", "key", "a_us", "b_us", "delta_us", "status", "matched_by", "a_kernels", "b_kernels"} <= set(
        table.columns
    )
    assert len(table) == len(rows)

    shown = runner.invoke(app, ["diff", str(a), str(b), "-o", str(csv)], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    assert "Biggest kernel regressions" in shown.output and "Appeared in B" in shown.output
    assert "NVIDIA A100-PG509-200" in shown.output and "Tesla V100-SXM2-16GB" in shown.output
    assert "GPU time 501.57 ms" in shown.output and "GPU time 963.76 ms" in shown.output
    start = next(i for i, line in enumerate(lines) if line.startswith("Biggest kernel regressions")) + 2
    body = []
    for line in lines[start:]:
        if line.startswith("("):
            break
        body.append(line)
    starts = [line for line in body if line.startswith(("+", " +"))]
    assert len(starts) == 10 and len(body) <= 20  # at most two lines per row


def test_diff_of_a_trace_file_and_bad_input(outputs, tmp_path: Path) -> None:
    trace = tmp_path / f"{A}.json.gz"
    trace.symlink_to(trace_path(A))  # ingested next to the link, not in the shared folder
    result = runner.invoke(app, ["diff", str(trace), str(outputs[1]), "-o", str(tmp_path / "d.csv"), "--json"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / f"{A}.atlas" / "kernels.parquet").exists()
    missing = runner.invoke(app, ["diff", str(tmp_path / "nope.json.gz"), str(outputs[1])])
    assert missing.exit_code == 2 and "nope.json.gz" in missing.output and "Traceback" not in missing.output


def test_same_label_runs_are_told_apart(outputs) -> None:
    from kernel_atlas.store.run import Run

    run = side_of(Run.open(outputs[0]))
    same = compare(run, run)
    assert (same.a.label, same.b.label) == ("A:a100", "B:a100")
    assert (same.table["delta_us"] == 0).all() and set(same.table["status"]) == {"both"}


def test_diff_html_sorts_in_headless_chromium(diff, tmp_path: Path) -> None:
    from kernel_atlas.report.html import write_diff_html

    page = write_diff_html(diff, tmp_path / "diff.html")
    with Chromium.start(tmp_path / "profile") as browser:
        browser.open(page.as_uri())
        assert not browser.errors, browser.errors
        assert browser.evaluate("document.querySelectorAll('.main-svg').length") >= 2
        order = browser.evaluate(
            "Array.from(document.querySelectorAll('#diff-table tbody tr')).map(r => +r.dataset.row)"
        )
        deltas = diff.table["delta_us"].to_numpy()[order]
        assert len(order) == min(len(diff.table), 500) and (deltas[:-1] >= deltas[1:]).all()
        browser.evaluate("document.querySelectorAll('#diff-table th')[2].click()")  # A, largest first
        order = browser.evaluate(
            "Array.from(document.querySelectorAll('#diff-table tbody tr')).map(r => +r.dataset.row)"
        )
        a_us = diff.table["a_us"].to_numpy()[order]
        assert (a_us[:-1] >= a_us[1:]).all()
        assert not browser.errors, browser.errors


def test_no_time_on_either_side_is_no_change_in_percent() -> None:
    """0 µs in A and in B read "new" (terminal and Markdown): there is nothing new and no percent.
    Both say new and gone by presence (activities in the row), not time (campaign AM 9)."""
    from kernel_atlas.report.terminal import _change
    from kernel_atlas.report.units import change_pct

    assert (_change(0.0, 0.0, 0, 0), change_pct(0.0, 0.0, False, False)) == ("–", "–")
    assert (_change(0.0, 40.0, 0, 2), change_pct(0.0, 40.0, False, True)) == ("new", "new")
    assert (_change(10.0, 0.0, 1, 0), change_pct(10.0, 0.0, True, False)) == ("gone", "gone")
    # ran in both, B in 0 µs: −100 % (the minus sign of `fmt_signed_us`), not gone
    assert (_change(10.0, 0.0, 1, 1), change_pct(10.0, 0.0, True, True)) == ("−100.0%", "−100.0 %")
    assert (_change(10.0, 12.5, 1, 1), change_pct(10.0, 12.5, True, True)) == ("+25.0%", "+25.0 %")
    assert _change(0.0, 5.0, 3, 3) == "–"  # A ran it in 0 µs: no percent, and it is not new


def test_diff_says_what_ingest_could_not_read(tmp_path: Path) -> None:
    """A trace whose 60 kernels carry no `ph` reads as 0 µs of kernels: `diff` printed every row as
    new with nothing on stderr. Now each side's ingest warnings are said (the first, and how many
    more summary.json lists)."""
    import gzip

    from tests.support.hostile import cli
    from tests.support.traces import EXAMPLE

    doc = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event.pop("ph")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    result = cli("diff", broken, EXAMPLE)
    assert result.code == 0, result.output
    said = " ".join(result.stderr.split())  # folded to the terminal's width, as the tables beside it
    assert said.count("warning: A (broken): ") == 1 and "warning: B" not in said
    assert "60 events of categories read as ranges ('kernel' 60)" in said
