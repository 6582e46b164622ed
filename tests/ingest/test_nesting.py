"""The sort that nesting and memory attribution share, and the parents it leads to, worked by hand."""

from __future__ import annotations

import numpy as np

from kernel_atlas.ingest.nesting import by_thread_start_longest_first, nesting_parents


def test_ranges_sort_by_thread_then_start_then_longest_first() -> None:
    # rows:             0    1    2    3    4
    thread = np.array([1, 0, 1, 0, 1])
    start = np.array([5.0, 3.0, 5.0, 3.0, 2.0])
    length = np.array([1.0, 2.0, 3.0, 2.0, 0.0])
    # thread 0: rows 1 and 3 tie on every key and keep their order; thread 1: row 4 starts
    # first, then rows 2 (3 µs) and 0 (1 µs) start together, the longer first
    assert by_thread_start_longest_first(thread, start, length).tolist() == [1, 3, 4, 2, 0]


def test_parents_are_the_innermost_enclosing_range_on_the_thread() -> None:
    # thread 0: a step [0, 10) holding an op [1, 5) holding a kernel launch [2, 3), and an op [6, 9)
    # that starts with a same-start shorter range [6, 7); thread 1: one range [1, 4)
    thread = np.array([0, 0, 0, 0, 0, 1])
    start = np.array([0.0, 1.0, 2.0, 6.0, 6.0, 1.0])
    end = np.array([10.0, 5.0, 3.0, 7.0, 9.0, 4.0])
    assert nesting_parents(thread, start, end).tolist() == [-1, 0, 1, 4, 0, -1]
