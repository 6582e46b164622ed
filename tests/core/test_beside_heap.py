"""A child forked by `Beside` hands back the free heap pages it shares with its parent before it
works (`beside._run`): its arrays then fault in pages of their own rather than copy, or split
when huge, pages the parent freed but keeps (`heap.keep_freed_memory`, as `atlas report` does).
On a 510 MB trace the report's critical-path process spent 0.4–1.6 s of system time in such
faults, 0.15–0.75 s after (six runs each); the report: 0.978× wall over eight pairs
(benchmarks/results/report-ab-child-trim-only-s54.json)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, /proc")

# The parent keeps 240 MB it freed (ten 24 MB arrays: under the 32 MB mmap threshold that
# keep_freed_memory sets, so they come from the heap and stay in it); the child reports its
# resident memory as its work starts, and the parent its own.
_DRIVER = """
import os
import numpy as np
from kernel_atlas.core.beside import Beside, resident_bytes
from kernel_atlas.core.heap import keep_freed_memory

assert keep_freed_memory()
held = [np.ones(3_000_000) for _ in range(10)]
del held
parent = resident_bytes(os.getpid())
child = Beside(lambda _: resident_bytes(os.getpid())).result()
print(parent >> 20, child >> 20)
"""


def test_a_forked_child_starts_without_the_free_pages_its_parent_keeps() -> None:
    done = subprocess.run([sys.executable, "-c", _DRIVER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    parent_mb, child_mb = map(int, done.stdout.split())
    assert parent_mb >= 240, (parent_mb, child_mb)  # the freed arrays are still resident in the parent
    assert child_mb < parent_mb - 200, (parent_mb, child_mb)
