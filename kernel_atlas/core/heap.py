"""How the process's memory is kept: handed back to the operating system between the stages of
ingest, or kept for reuse by `atlas report`; and how often Python looks for garbage cycles.

Ingest: memory a stage freed is handed back before the next one.

glibc's malloc keeps freed memory for later allocations: a block inside its heap is returned to
the system only when it sits at the top, and once a large array has been freed, arrays up to
that size are carved out of the heap instead of being mapped on their own. Linking a trace
allocates and frees many arrays of its host ranges' length (12 MB each for 1.5M ranges); without a
trim the process keeps ~100 MB it no longer uses through the stages that follow, and each
later stage's peak stacks on top of it. `malloc_trim` gives the free pages back (ms); elsewhere
(another C library, another system) this is a no-op. Arrow's allocator likewise keeps what writing
a Parquet file used (~50 MB) unless asked to release it.

The report: its analyses allocate and free arrays of the same few lengths (its kernels, its host
events, the critical path's nodes and edges) over and over. Arrays above glibc's mmap threshold
are mapped fresh each time and every page faults in on first touch, which on a VM costs ~0.6 s
of a 1.6 s critical-path graph build (the same build takes 0.7 s a second time in the same
process). `keep_freed_memory` has malloc keep them: arrays up to 32 MB (glibc's largest mmap
threshold) come from its heap and a free top is not handed back, so a freed array's pages serve
the next one.

Cycles: Python's collector runs after every 700 container allocations beyond deallocations and
scans its older generations every 10th and 100th run. A command builds millions of short-lived
lists, tuples and dicts (decoded events, numbered keys, rows of tables), almost none of them in
cycles, and holds millions more that live to its end: the collector's runs found next to nothing
and took ~4 % of `atlas report`'s CPU on a 510 MB trace's output (`gc_collect_main`, `visit_decref`
and `visit_reachable` in `perf`). `collect_cycles_rarely` has the report's run 140× less often; a
cycle is still freed, later.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from collections.abc import Callable
from typing import Any


def _glibc(name: str, *argtypes: Any) -> Callable[..., int] | None:
    """A function of glibc's malloc, None elsewhere (another system, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


# container allocations between the youngest generation's collections, then collections of each
# generation between those of the next (Python's defaults: 700, 10, 10)
CYCLE_THRESHOLDS = (100_000, 50, 100)


def collect_cycles_rarely() -> None:
    """Python's cycle collector run at CYCLE_THRESHOLDS (see the module docstring): in `atlas
    report` of an ingested run and the processes it forks. Not in an ingest: with its decode
    workers' pool, SIGTERM while a worker was half-way through sending its result then hung the
    command in ~1 run of 4 on a loaded machine (the pool's objects in cycles freed later, its
    result thread not woken) — as fast as the report's gain was there (ingest 0.95×), a hang is
    worse. Nor in the decode workers: a slice's events are structs the collector does not track."""
    gc.set_threshold(*CYCLE_THRESHOLDS)


_TRIM = _glibc("malloc_trim", ctypes.c_size_t)
# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: mallopt refuses more
_KEEP_FREE_TOP = 1 << 30


def keep_freed_memory() -> bool:
    """Have malloc keep freed memory for reuse (see the module docstring); whether it could
    (glibc on Linux). For a short-lived process: what it frees stays in it until it exits."""
    mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int) if _TRIM is not None else None
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE_TOP))


def release_free_memory() -> None:
    """Return the pages malloc holds free to the system (see the module docstring), and those
    Arrow's own allocator (mimalloc) keeps once pyarrow is in use."""
    if _TRIM is not None:
        _TRIM(0)
    release_arrow_memory()


def release_arrow_memory() -> None:
    """Return the pages Arrow's allocator (mimalloc) keeps free once pyarrow is in use: what
    reading a Parquet file used beside the table it made. Where malloc keeps its own freed memory
    for reuse (`keep_freed_memory`), Arrow's is of no use to it: the arrays that follow come
    from malloc, and 1M kernel rows read and checked left ~750 MB free in Arrow's pool."""
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
