"""Vectorised interval nesting: the parent of every host range on its thread.

Ranges on one thread nest (an op inside a Python frame inside a step). For ranges sorted
by (start, longer first), the depth of range i is the number of earlier ranges still open
when i starts; its parent is the last earlier range one level up, climbing further while
that range ends before i does (ranges that overlap without nesting). Everything is sorts
and binary searches, looping only over depth levels (tens), never over events.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import numpy as np

from kernel_atlas.core.beside import side_by_side

# Kineto rounds timestamps to ns; a child may overhang its parent (or a sibling its
# predecessor) by a few ns. Ranges closer than this are treated as not overlapping.
NEST_TOLERANCE_US = 0.005
_PARALLEL_MIN = 50_000  # ranges on a thread worth a thread of their own


def nesting_parents(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, tie: Callable[[np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    """Index of the innermost enclosing range on the same thread, -1 for top-level ranges.
    `tie(rows)`: for ranges of equal start and length, which encloses which (lower outside), so
    that the file's order never decides (`aten::item` and its `aten::_local_scalar_dense`, both
    31 µs from one instant, swapped launcher and stack when the trace was written in another
    order); among equal ties, the file's order. Asked only of the rows that tie (few)."""
    return nesting_parents_crossed(thread, start, end, tie)[0]


def nesting_parents_crossed(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, tie: Callable[[np.ndarray], np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(`nesting_parents`, crossed): per range whose ancestors skip a range still open where it
    starts (a range it outlives, or that one of the ranges it lies in outlives), the nearest such
    range before it on its thread (in start order, longest first); -1 for the ranges that nest.

    A parent tree cannot hold ranges that cross: a range's parent holds it whole, so a range it
    outlived is no ancestor of its own nor of the ranges inside it, though it may hold those
    (`train.py(10): <module>` [1, 999] and the last `ProfilerStep#2` [500, 1000], which outlives
    it: `<module>` holds a launch at 565 under the step). `containers_above` walks up past them."""
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    crossed = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent, crossed
    # Work relative to the first timestamp: absolute µs near 1.7e15 leave float64 a
    # resolution of 0.25 µs, too coarse for the ns tolerance below. Each thread shifts its own
    # ranges (`_thread_parents`): the same values, never a second copy of the whole trace's.
    origin = start.min()
    shifted = start - origin
    length = end - origin
    length -= shifted
    order = by_thread_start_longest_first(thread, shifted, length, tie)
    del shifted, length
    cuts = np.flatnonzero(np.diff(thread[order])) + 1
    bounds = np.concatenate(([0], cuts, [n]))
    groups = [order[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    # Threads are independent and numpy's sorts and searches release the GIL: the large ones
    # run side by side. Each thread's parents are filled in as they come, not held for all.
    large = [g for g in groups if len(g) >= _PARALLEL_MIN]
    for child, parent_of_child, crossing, open_range in side_by_side(
        lambda idx: _thread_parents(idx, start, end, origin), large, os.cpu_count() or 1
    ):
        parent[child] = parent_of_child
        crossed[crossing] = open_range
    for group in groups:
        if len(group) < _PARALLEL_MIN:
            child, parent_of_child, crossing, open_range = _thread_parents(group, start, end, origin)
            parent[child] = parent_of_child
            crossed[crossing] = open_range
    return parent, crossed


_CHUNK = 1 << 18  # ranges checked at a time for a parent that ends first


def _thread_parents(
    idx: np.ndarray, start: np.ndarray, end: np.ndarray, origin: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ranges, their parents, ranges whose ancestors skip a range open where they start, the
    nearest such range of each) of one thread's ranges `idx`, sorted by start, longest first;
    times relative to `origin`.

    A thread may hold most of a trace's ranges (2M in a 500 MB trace): every temporary is
    dropped, or reused in place, as soon as it is done with."""
    eps = NEST_TOLERANCE_US
    n = len(idx)
    s = start[idx]
    s -= origin
    # Zero-length ranges stay "open" for 2·eps so they never count as closed before a
    # range that starts at the same instant but sorts ahead of them.
    e = end[idx]
    e -= origin
    np.maximum(e, s + 2 * eps, out=e)
    # in start order the ends are nearly sorted already: a merge sort (stable) finds runs
    e.sort(kind="stable")
    s += eps
    closed = np.searchsorted(e, s, side="right")
    del s, e
    depth = np.arange(n)
    depth -= closed
    del closed
    np.maximum(depth, 0, out=depth)
    max_depth = int(depth.max(initial=0))
    level_starts = np.r_[0, np.cumsum(np.bincount(depth, minlength=max_depth + 1))]  # first of each depth
    if max_depth < 1 << 15:  # depths are small: as int16 the stable sort is a radix sort
        depth = depth.astype(np.int16)
    by_depth = np.argsort(depth, kind="stable")
    del depth
    local_parent = np.full(n, -1, dtype=np.int64)
    for d in range(1, max_depth + 1):
        here = by_depth[level_starts[d] : level_starts[d + 1]]
        above = by_depth[level_starts[d - 1] : level_starts[d]]
        if len(here) == 0 or len(above) == 0:
            continue
        pos = np.searchsorted(above, here) - 1
        ok = pos >= 0
        local_parent[here[ok]] = above[pos[ok]]
    del by_depth
    # Ranges that are not properly nested (e.g. `ProfilerStep#N` opens inside the Python
    # frame of `profiler.step()` and outlives it) can make the depth-level parent one that
    # ends before the child does: climb until the parent really contains the child. Only a
    # range that climbed can need to climb again.
    child_end = end[idx]
    child_end -= origin
    bad = np.concatenate(
        [_ends_first(np.arange(lo, min(lo + _CHUNK, n)), local_parent, child_end, eps) for lo in range(0, n, _CHUNK)]
    )
    climbed, crossed = bad, local_parent[bad]  # each range that climbed, and the range it outlived
    for _ in range(n):
        if len(bad) == 0:
            break
        local_parent[bad] = local_parent[local_parent[bad]]
        bad = _ends_first(bad, local_parent, child_end, eps)
    crossing = open_range = climbed
    if len(climbed):
        child_start = start[idx]
        child_start -= origin
        touched = _after_crossings(climbed, crossed, child_start, child_end)
        _nearest_containers(touched, local_parent, child_start, child_end, eps)
        crossing, open_range = _open_between(touched, local_parent, child_start, child_end, eps)
    has = local_parent >= 0
    return idx[has], idx[local_parent[has]], idx[crossing], idx[open_range]


def _open_between(
    rows: np.ndarray, parent: np.ndarray, start: np.ndarray, end: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Of the ranges a crossing may have mis-parented (`rows`, positions), those with a range
    still open where they start between their parent and them, and the nearest such range: found
    by climbing from the range just before each (the ranges a climb passes end before the one it
    climbs from) until one is open or the parent is reached. Most rows follow their parent or a
    closed sibling: a step or two."""
    at = rows - 1
    found = np.full(len(rows), -1, dtype=np.int64)
    looking = np.arange(len(rows))
    for _ in range(LOOK_UP):  # each step climbs to an earlier range
        looking = looking[at[looking] > parent[rows[looking]]]
        if not len(looking):
            break
        is_open = end[at[looking]] > start[rows[looking]] + eps
        found[looking[is_open]] = at[looking[is_open]]
        looking = looking[~is_open]
        at[looking] = parent[at[looking]]
    has = found >= 0
    return rows[has], found[has]


# The most ranges climbed past looking for a range a crossing skipped (`_open_between`,
# `containers_above`): real ones are a few frames away; 50,000 ranges of one thread, each crossing
# the one before, would climb all of them from each.
LOOK_UP = 256
_SCAN_WORK = 1 << 24  # positions looked back at, over all climbed ranges of a thread


def _after_crossings(climbed: np.ndarray, crossed: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The ranges that climbed and those starting while one of them is open after the range it
    outlived has closed: the ranges whose depth a crossing may have left short (positions)."""
    lo = np.searchsorted(start, end[crossed], side="left")
    hi = np.searchsorted(start, end[climbed], side="right")
    marks = np.zeros(len(start) + 1, np.int64)
    np.add.at(marks, lo, 1)
    np.add.at(marks, np.maximum(hi, lo), -1)
    inside = np.cumsum(marks[:-1]) > 0
    inside[climbed] = True
    return np.flatnonzero(inside)


def _nearest_containers(rows: np.ndarray, parent: np.ndarray, start: np.ndarray, end: np.ndarray, eps: float) -> None:
    """For ranges a crossing may have mis-parented (`rows`, `_after_crossings`): a shorter range
    holding them than their parent, where one lies among the ranges just before them (in start
    order) — the innermost container.

    A range crossing the end of the op it overlaps (a frame ending 10 ns after the op it calls
    starts) leaves that op at the child's depth, not one above: the op was skipped, and a launch
    in it got the frame's parent as its launcher, or none. Looked for a bounded number of places
    back (`_SCAN_WORK` over all)."""
    back = max(8, min(256, _SCAN_WORK // len(rows)))
    length = end - start
    for k in range(1, back + 1):
        rows = rows[rows >= k]
        if not len(rows):
            return
        cand = rows - k
        now = parent[rows]
        tighter = np.where(now >= 0, length[cand] < length[np.maximum(now, 0)], True)
        holds = tighter & (start[cand] <= start[rows] + eps) & (end[cand] + eps >= end[rows])
        parent[rows[holds]] = cand[holds]


def _ends_first(rows: np.ndarray, parent: np.ndarray, end: np.ndarray, eps: float) -> np.ndarray:
    """The `rows` whose parent ends before they do."""
    rows = rows[parent[rows] >= 0]
    parent_end = end[parent[rows]]
    parent_end += eps
    return rows[parent_end < end[rows]]


def containers_above(
    nodes: np.ndarray,
    first_end: np.ndarray,
    parent: np.ndarray,
    crossed: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """The next range up from each of `nodes` (host indices, all ≥ 0) on a walk that lists every
    range holding the walk's first range, which ends at `first_end`, innermost first; -1 past
    the outermost.

    The next is the nearest range before the node (in start order, longest first) that ends no
    earlier than the first range: for ranges that nest, `parent`. Above a node whose ancestors
    skip a range open where it starts (`nesting_parents_crossed`), it is looked for from that
    range, going on to the parent of one that ends too early — or, where its own ancestors skip
    one, to that — (the ranges passed end earlier still). `train.py(10): <module>` [1, 999]
    outlived by the last `ProfilerStep#2` [500, 1000]: the step's parent is the root, yet a
    launch at 565 under the step has `<module>` above the step (the walk had stopped at the
    step). Only those few ranges look; the rest take `parent`."""
    eps = NEST_TOLERANCE_US
    up = parent[nodes]
    rows = np.flatnonzero(crossed[nodes] >= 0)
    if not len(rows):
        return up
    held, wanted = crossed[nodes[rows]], first_end[rows]
    looking = np.arange(len(rows))
    for _ in range(LOOK_UP):  # each look moves to an earlier range; past LOOK_UP, the parent
        looking = looking[held[looking] >= 0]
        looking = looking[end[held[looking]] - wanted[looking] < -eps]  # ends before the first range
        if not len(looking):
            break
        at = held[looking]
        held[looking] = np.where(crossed[at] >= 0, crossed[at], parent[at])
    else:
        held[looking] = -1
    # where the tree missed a tighter container (`_nearest_containers` looks a bounded way
    # back) the climb can pass the parent: the inner of the two
    now = up[rows]
    at = np.maximum(now, 0)
    inside = (held >= 0) & (
        (now < 0) | (start[held] > start[at]) | ((start[held] == start[at]) & (end[held] < end[at]))
    )
    up[rows[inside]] = held[inside]
    return up


def by_thread_start_longest_first(
    thread: np.ndarray, start: np.ndarray, length: np.ndarray, tie: Callable[[np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    """`np.lexsort((tie(all), -length, start, thread))`, faster: sort by (thread, start), then
    reorder only the runs of equal (thread, start) longest first, then by `tie` of their rows.
    Traces are nearly sorted by start, which the two-key sort exploits; a random third key would
    not let it."""
    order = np.lexsort((start, thread))
    t, s = thread[order], start[order]
    tied = np.flatnonzero((t[1:] == t[:-1]) & (s[1:] == s[:-1]))
    if len(tied) == 0:
        return order
    is_tied = np.zeros(len(order), dtype=bool)  # position i ties with i + 1
    is_tied[tied] = True
    members = np.flatnonzero(is_tied | np.r_[False, is_tied[:-1]])
    run = np.cumsum(np.r_[True, ~is_tied[members[1:] - 1]])  # a new run unless tied to the previous
    members_order = order[members]
    keys = (-length[members_order], run) if tie is None else (tie(members_order), -length[members_order], run)
    order[members] = members_order[np.lexsort(keys)]
    return order


def first_matching(start: np.ndarray, parent: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Walk up from `start` to the first node where `wanted` holds; -1 when none.

    Level by level for the first WALK_LEVELS levels (real nestings end there); the starts still
    climbing then finish by pointer doubling over every node (`_first_wanted`), so a chain of any
    depth costs log2(depth) passes — one level a pass took `depth` passes over the starts: 50,000
    ranges of one thread with the same times nest that deep, 9 s."""
    cur = start.copy()
    found = np.full(len(cur), -1, dtype=np.int64)
    active = cur >= 0
    for _ in range(WALK_LEVELS):
        if not active.any():
            return found
        hit = active & wanted[np.where(cur >= 0, cur, 0)]
        found[hit] = cur[hit]
        active &= ~hit
        cur[active] = parent[cur[active]]
        active &= cur >= 0
    rest = np.flatnonzero(active)
    if len(rest):
        found[rest] = _first_wanted(parent, wanted)[cur[rest]]
    return found


WALK_LEVELS = 32


def _first_wanted(parent: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per node, the first node at or above it where `wanted` holds (-1 none), by pointer doubling:
    a node points at itself where `wanted` holds, else at its parent; each pass a pointer resting
    on a node not wanted takes that node's pointer."""
    n = len(parent)
    pointer = np.where(wanted[:n], np.arange(n), parent)

    def resting(rows: np.ndarray) -> np.ndarray:  # pointers of `rows` on a node not wanted
        at = pointer[rows]
        return (at >= 0) & ~wanted[np.maximum(at, 0)]

    active = np.flatnonzero(resting(np.arange(n)))
    for _ in range(64):  # 2^64 levels: more than any table holds
        if not len(active):
            break
        pointer[active] = pointer[pointer[active]]  # the right side is read before any is written
        active = active[resting(active)]
    pointer[active] = -1  # a cycle of parents (never made by `nesting_parents`): nothing found
    return pointer
