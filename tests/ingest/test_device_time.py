"""Busy time per device: the union of each group's intervals, for all groups at once
(`ingest/intervals.union_lengths`), and the device facts built on it (`gpu_time_facts`), by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.ingest.intervals import union_lengths
from kernel_atlas.ingest.summary import gpu_time_facts


def test_union_lengths_count_overlaps_once_per_group() -> None:
    # group 0: [0, 2] ∪ [1, 3] ∪ [5, 6] = 4; group 1: none; group 2: [0, 5] holds [1, 2], and a
    # zero-length interval at 10 adds nothing; group 3: [4, 6] then [0, 1] (rows not in order) = 3
    group = np.array([0, 2, 0, 3, 2, 0, 3, 2])
    start = np.array([0.0, 0.0, 1.0, 4.0, 1.0, 5.0, 0.0, 10.0])
    end = np.array([2.0, 5.0, 3.0, 6.0, 2.0, 6.0, 1.0, 10.0])
    assert union_lengths(group, start, end, 4).tolist() == [4.0, 0.0, 5.0, 3.0]
    assert union_lengths(group[:0], start[:0], end[:0], 2).tolist() == [0.0, 0.0]


def test_gpu_time_facts_per_device_by_hand() -> None:
    frame = pd.DataFrame(
        {
            "rank": [0, 0, 0, 0, 1],
            "device": [1.0, 0.0, 0.0, 0.0, np.nan],
            "stream": pd.array([9, 7, 8, 7, None], dtype="Int64"),
            "kind": ["kernel", "kernel", "memcpy", "kernel", "kernel"],
            "ts_us": [100.0, 0.0, 5.0, 20.0, 3.0],
            "dur_us": [1.0, 10.0, 10.0, 10.0, 2.0],
            "category": ["gemm", "communication", "gemm", "gemm", "gemm"],
        }
    )
    facts = gpu_time_facts(frame)
    device0, device1, unknown = facts["devices"]
    # rank 0 device 0: [0, 10] ∪ [5, 15] ∪ [20, 30] = 25 of a 30 µs span; kernels alone [0, 10]
    # ∪ [20, 30] = 20; communication [0, 10] = 10, compute — kernels only: the copy [5, 15]
    # beside the collective hides none of it — [20, 30] = 10, none overlapped
    assert device0 == {
        "rank": 0,
        "device": 0,
        "span_us": 30.0,
        "busy_us": 25.0,
        "kernel_busy_us": 20.0,
        "idle_us": 5.0,
        "busy_pct": 100.0 * 25 / 30,
        "streams": [7, 8],
        "communication_us": 10.0,
        "compute_us": 10.0,
        "overlap_us": 0.0,
        "overlap_pct_of_communication": 0.0,
    }
    # the copy a kernel instead: compute [5, 15] ∪ [20, 30] = 20, 5 µs of the collective overlapped
    as_kernel = gpu_time_facts(frame.assign(kind=["kernel"] * 5))["devices"][0]
    assert (as_kernel["compute_us"], as_kernel["overlap_us"]) == (20.0, 5.0)
    assert (device1["device"], device1["busy_us"], device1["streams"]) == (1, 1.0, [9])
    assert (unknown["rank"], unknown["device"], unknown["span_us"], unknown["streams"]) == (1, None, 2.0, [])
    assert facts["by_kind"] == {"kernel": {"count": 4, "total_us": 23.0}, "memcpy": {"count": 1, "total_us": 10.0}}
    assert gpu_time_facts(frame.iloc[:0])["devices"] == []
