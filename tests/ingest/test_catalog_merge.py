"""Catalogs of several traces folded into one (ingest/catalog.merge_catalog): counts and times
add up, the example is the one of the trace where the kernel ran most, and no trace's entries
are changed. A catalog lists at most CATALOG_ENTRIES kernels, the heaviest; the rest are tallied
(a trace of 300k distinct kernel names wrote a 650 MB catalog.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.catalog import LeftOut, merge_catalog, merged_entries

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "h100_bert_small_infer.json.gz"


def _entry(name: str, count: int, total: float, dims: str) -> dict:
    return {"kernel_name": name, "kernel_implementation": "aten::mm", "count": count, "total_us": total, "params": dims}


def test_merged_counts_add_up_and_keep_the_example_of_the_busiest_trace() -> None:
    first = [_entry("gemm", 3, 30.0, "[[2, 2]]"), _entry("relu", 5, 1.25, "[[8]]")]
    second = [_entry("gemm", 4, 10.5, "[[4, 4]]"), _entry("copy", 1, 2.0, "[[1]]")]
    third = [_entry("gemm", 2, 0.1, "[[9, 9]]")]
    traces = [first, second, third]
    before = copy.deepcopy(traces)
    merged: dict = {}
    for entries in traces:
        merge_catalog(merged, entries)
    assert traces == before  # no trace's entries changed
    assert merged_entries(merged) == (
        [
            # 3 + 4 + 2 runs, 30 + 10.5 + 0.1 µs; the second trace ran it most (4): its shapes
            {
                "kernel_name": "gemm",
                "kernel_implementation": "aten::mm",
                "count": 9,
                "total_us": 40.6,
                "params": "[[4, 4]]",
            },
            {
                "kernel_name": "copy",
                "kernel_implementation": "aten::mm",
                "count": 1,
                "total_us": 2.0,
                "params": "[[1]]",
            },
            {
                "kernel_name": "relu",
                "kernel_implementation": "aten::mm",
                "count": 5,
                "total_us": 1.25,
                "params": "[[8]]",
            },
        ],
        LeftOut(),
    )
    assert merged_entries(merged)[0][2] is first[1]  # a kernel of one trace only: its entry, not a copy


def test_merged_entries_past_the_limit_are_tallied() -> None:
    merged: dict = {}
    merge_catalog(merged, [_entry("gemm", 3, 30.0, ""), _entry("relu", 5, 1.25, ""), _entry("copy", 1, 2.0, "")])
    listed, left_out = merged_entries(merged, limit=1)
    assert [e["kernel_name"] for e in listed] == ["gemm"]
    assert left_out == LeftOut(kernels=2, calls=6, total_us=3.25)  # relu 5 calls 1.25 µs, copy 1 call 2 µs


def test_ingest_lists_the_heaviest_kernels_and_tallies_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled example has 13 kernels (name and launcher); its three heaviest (read off its
    JSON): the wmma GEMM under addmm, 17 calls 98.718 µs; the 256x128 GEMM, 1 call 41.28 µs;
    flash attention, 4 calls 37.408 µs. The other 10 ran 61 − 22 = 39 times for
    309.437 − 177.406 = 132.031 µs, 43 % of the GPU time."""
    import kernel_atlas.ingest.fleet as fleet

    monkeypatch.setattr(fleet, "CATALOG_ENTRIES", 3)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["ingest", str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    catalog = json.loads((out / "catalog.json").read_text())
    assert [(e["count"], e["total_us"]) for e in catalog] == [(17, 98.718), (1, 41.28), (4, 37.408)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["distinct_kernels"] == 13
    assert summary["catalog_left_out"] == {"kernels": 10, "calls": 39, "total_us": 132.031}
    assert (
        "catalog.json lists the 3 kernels of most GPU time; 10 more (39 calls, 43 % of GPU time) "
        "are in kernels.parquet only" in summary["warnings"]
    )
