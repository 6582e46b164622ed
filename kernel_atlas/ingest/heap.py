"""Memory a stage of ingest freed, handed back to the operating system before the next one.

glibc's malloc keeps freed memory for later allocations: a block inside its heap is returned to
the system only when it sits at the top, and once a large array has been freed, arrays up to
that size are carved out of the heap instead of being mapped on their own. Linking a trace
allocates and frees many arrays of its host ranges' length (12 MB each for 1.5M ranges); without a
trim the process keeps ~100 MB it no longer uses through the stages that follow, and each
later stage's peak stacks on top of it. `malloc_trim` gives the free pages back (ms); elsewhere
(another C library, another system) this is a no-op. Arrow's allocator likewise keeps what writing
a Parquet file used (~50 MB) unless asked to release it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Return the pages malloc holds free to the system (see the module docstring), and those
    Arrow's own allocator (mimalloc) keeps once pyarrow is in use."""
    if _TRIM is not None:
        _TRIM(0)
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
