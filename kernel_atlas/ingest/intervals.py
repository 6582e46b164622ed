"""Time ranges as sorted, non-overlapping (start, end) arrays: merge, length, clip — vectorised."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.core.groups import group_sums


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the ranges [start, end): sorted, ranges that touch or overlap joined."""
    if not len(start):
        return np.empty(0), np.empty(0)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    first = np.flatnonzero(np.r_[True, start[1:] > reach[:-1]])
    return start[first], np.maximum.reduceat(end, first)


def clipped_length(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Length of each range inside [lo, hi]."""
    return np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)


def reaching(start: np.ndarray, reach: np.ndarray, lo: float, hi: float) -> slice:
    """The ranges that can reach into [lo, hi], as a slice: `start` sorted, `reach` each range's
    latest end so far (non-decreasing; sorted ends where ranges do not overlap). Those before it
    end by lo, those after it start at hi or later: `clipped_length` gives them 0."""
    first = int(np.searchsorted(reach, lo, side="right"))
    return slice(first, max(int(np.searchsorted(start, hi, side="left")), first))


def union_lengths(group: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """Total length covered by each group's intervals (overlaps counted once): `groups` values,
    0 for a group without intervals. One sort of all intervals by (group, start): a trace of
    100k devices took seconds as one call per device."""
    if not len(start):
        return np.zeros(groups)
    order = np.lexsort((start, group))  # stable: ties by start keep their row order
    g, s, e = group[order], start[order], end[order]
    reach = pd.Series(e).groupby(g, sort=False).cummax().to_numpy()  # within each group
    # a segment starts at a group's first interval and where an interval starts past the reach
    at = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (s[1:] > reach[:-1])])
    covered = np.maximum.reduceat(e, at) - s[at]
    return group_sums(g[at], covered, groups)  # the bits one `sum` per group gives
