"""Catalogs of several traces folded into one (ingest/catalog.merge_catalog): counts and times
add up, the example is the one of the trace where the kernel ran most, and no trace's entries
are changed."""

from __future__ import annotations

import copy

from kernel_atlas.ingest.catalog import merge_catalog, merged_entries


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
    assert merged_entries(merged) == [
        # 3 + 4 + 2 runs, 30 + 10.5 + 0.1 µs; the second trace ran it most (4): its shapes
        {
            "kernel_name": "gemm",
            "kernel_implementation": "aten::mm",
            "count": 9,
            "total_us": 40.6,
            "params": "[[4, 4]]",
        },
        {"kernel_name": "copy", "kernel_implementation": "aten::mm", "count": 1, "total_us": 2.0, "params": "[[1]]"},
        {"kernel_name": "relu", "kernel_implementation": "aten::mm", "count": 5, "total_us": 1.25, "params": "[[8]]"},
    ]
    assert merged_entries(merged)[2] is first[1]  # a kernel of one trace only: its entry, not a copy
