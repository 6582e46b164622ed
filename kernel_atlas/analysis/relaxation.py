"""The relaxation passes of a longest-path solve (`longest_path`): every run of the contracted
graph, in relaxation order, raises the distance of the node it ends at to its start node's
distance plus its weight; passes repeat until one changes nothing or the passes run out.

This loop is the critical path's one loop over every run in Python: 0.26 s a pass over the
0.5 M runs of a 500 MB trace, and a report solves the path, its end from the window's start and
each what-if candidate (17 passes there). Where numba is installed (the `[fast]` extra; `[dev]`
has it) and a graph has at least COMPILED_MIN_RUNS runs, the same loop runs compiled, on arrays:
the same additions and comparisons in the same order, so every distance and predecessor is the
one the Python loop gives, to the last bit (tests/analysis/test_relaxation.py). Compiling costs
about a second once per process (numba's import and the loop's compile), which a small graph's
few passes would not repay; a process forked after it (the what-if's) inherits it, and a fork
waits for a compile in progress on another thread (`warm_up`), so that no child starts with
numba half imported or the compile's lock held by a thread it does not have.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

# the runs a graph needs for the compiled loop: at ~0.5 µs a run a Python pass over 150,000 runs
# takes ~75 ms, and a report's ~17 passes about the second the compile costs
COMPILED_MIN_RUNS = 150_000

# (src, dst, weights, dist, pred, with_pred, passes) -> whether the last pass changed a distance
Passes = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, int], bool]

_compiled: Passes | None = None
_tried = False
_compiling = threading.RLock()  # held while numba is imported and the loop compiled, and across a fork


def python_passes(
    src: list[int], dst: list[int], ws: list[float], dist: list[float], pred: list[int], with_pred: bool, passes: int
) -> bool:
    """The passes over Python lists (`dist`, and `pred` with `with_pred`, raised in place);
    whether the last pass changed a distance (then the passes ran out before the distances settled)."""
    changed = True
    for _ in range(passes):
        changed = False
        if with_pred:
            for i, (u, v, wi) in enumerate(zip(src, dst, ws, strict=True)):
                d = dist[u] + wi
                if d > dist[v]:
                    dist[v] = d
                    pred[v] = i
                    changed = True
        else:
            for u, v, wi in zip(src, dst, ws, strict=True):
                d = dist[u] + wi
                if d > dist[v]:
                    dist[v] = d
                    changed = True
        if not changed:
            break
    return changed


def _array_passes(
    src: np.ndarray,
    dst: np.ndarray,
    ws: np.ndarray,
    dist: np.ndarray,
    pred: np.ndarray,
    with_pred: bool,
    passes: int,
) -> bool:
    """`python_passes` over arrays, written for numba to compile (`compiled_passes`; int64 run
    ends, float64 weights and distances, int64 predecessors: one element where `with_pred` is
    False). Run by Python only in the tests that hold it to `python_passes`."""
    changed = True
    for _ in range(passes):
        changed = False
        for i in range(src.shape[0]):
            v = dst[i]
            d = dist[src[i]] + ws[i]
            if d > dist[v]:
                dist[v] = d
                if with_pred:
                    pred[v] = i
                changed = True
        if not changed:
            break
    return changed


def compiled_passes() -> Passes | None:
    """`_array_passes` compiled by numba, on the first call in a process (from numba's cache of an
    earlier compile where it can keep one: 0.3 s instead of 0.6); None where numba is not
    installed or cannot compile it (the Python loop then serves)."""
    global _compiled, _tried
    with _compiling:
        if not _tried:
            _tried = True
            _compiled = _compile()
    return _compiled


def _compile() -> Passes | None:
    try:
        import numba
    except Exception:  # not installed (or broken): the Python loop
        return None
    signature = "b1(i8[::1], i8[::1], f8[::1], f8[::1], i8[::1], b1, i8)"
    for cache in (True, False):  # no folder to cache in (a read-only install, no home): compiled each time
        try:
            return numba.njit(signature, nogil=True, cache=cache)(_array_passes)
        except Exception:  # no cache locator, or no compiler for this platform
            continue
    return None


def warm_up() -> None:
    """numba imported and the loop compiled on a thread of its own, from where a large trace's
    graph is about to be built (the process beside the report): much of the build runs in numpy
    and Arrow without the GIL, so the compile's second mostly overlaps it. A fork meanwhile
    waits for it to end (`_hold_for_fork`)."""
    threading.Thread(target=compiled_passes, name="atlas-compile-relaxation", daemon=True).start()


def use_compiled(runs: int) -> Passes | None:
    """The compiled loop where a graph of `runs` contracted runs is to be relaxed by it: large
    enough to repay compiling it, and numba able to (compiled now, where it was not yet in this
    process); else None, and the Python loop serves."""
    return compiled_passes() if runs >= COMPILED_MIN_RUNS else None


def _hold_for_fork() -> None:
    """Before any fork of this process: a compile in progress (`warm_up`'s thread) ends first,
    and the lock is held across the fork, so that parent and child each release a lock no
    missing thread holds (a pool forked for many ranks, the what-if's process)."""
    _compiling.acquire()


def _release_after_fork() -> None:
    _compiling.release()


if hasattr(os, "register_at_fork"):  # not on Windows, which never forks
    os.register_at_fork(before=_hold_for_fork, after_in_parent=_release_after_fork, after_in_child=_release_after_fork)
