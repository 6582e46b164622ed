"""Rows split by key without a DataFrame per group (core/groups.py), checked on hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.core.groups import distinct_codes, group_numbers, group_sums, value_groups


def test_value_groups_are_sorted_with_rows_ascending_and_nan_last() -> None:
    groups = [(value, rows.tolist()) for value, rows in value_groups(np.array([2.0, np.nan, 1.0, np.nan, 2.0]))]
    assert groups[:2] == [(1.0, [2]), (2.0, [0, 4])]
    assert np.isnan(groups[2][0]) and groups[2][1] == [1, 3]
    assert [(v, r.tolist()) for v, r in value_groups(np.array([3, 1, 3], np.int32))] == [(1, [1]), (3, [0, 2])]
    assert list(value_groups(np.array([], np.int64))) == []


def test_group_numbers_follow_groupby_order_with_missing_keys_last_and_each_groups_first_row() -> None:
    frame = pd.DataFrame(
        {
            "rank": np.array([1, 0, 1, 0, 0], np.int32),
            "device": pd.array([None, 3, 2, 3, None], dtype="Int32"),
        }
    )
    number, firsts = group_numbers(frame, ["rank", "device"])
    assert number.tolist() == [3, 0, 2, 0, 1]  # (0, 3), (0, <NA>), (1, 2), (1, <NA>)
    assert firsts.tolist() == [1, 4, 2, 0]
    empty_number, empty_firsts = group_numbers(frame.iloc[:0], ["rank"])
    assert len(empty_number) == len(empty_firsts) == 0


def test_group_sums_add_each_groups_values_as_sum_does() -> None:
    sums = group_sums(np.array([2, 0, 2, 2]), np.array([1.5, 4.0, 0.25, 2.0]), 4)
    assert sums.tolist() == [4.0, 0.0, 3.75, 0.0]
    # ten tenths in one group: numpy's `sum` adds them pairwise and gives 1.0, where adding them
    # in turn gives 0.9999999999999999 — the group has `sum`'s bits
    tenths = np.full(10, 0.1)
    assert sum(tenths.tolist()) == 0.9999999999999999
    assert group_sums(np.zeros(10, np.int64), tenths, 1).tolist() == [1.0]
    assert group_sums(np.zeros(7, np.int64), tenths[:7], 1).tolist() == [sum([0.1] * 7)]  # in turn below 8


def test_distinct_codes_number_each_distinct_row_in_order_of_first_appearance() -> None:
    rank = np.array([1.0, np.nan, 1.0, 0.0, -0.0, np.nan, 1.0])
    stream = np.array([7, 3, 7, 5, 5, 3, 8])
    # rows 0 and 2 share (1, 7); 1 and 5 (NaN, 3); 3 and 4 (0, 5), -0.0 equal to 0.0; 6 alone
    assert distinct_codes([rank, stream], 7).tolist() == [0, 1, 0, 2, 2, 1, 3]
    assert distinct_codes([rank], 7).tolist() == [0, 1, 0, 2, 2, 1, 0]
    assert distinct_codes([], 3).tolist() == [0, 0, 0]  # no key: one group
    assert distinct_codes([np.array([])], 0).tolist() == []
