"""GPU activities recorded twice.

A stream runs one activity at a time, so two activities of one stream with the same start and
duration are one activity written twice — by a profiler whose windows overlapped, or by a tool
that merged traces and kept both copies. Read twice, its time would count twice in every sum
(the time by category, by op, by kernel) while the GPU's busy time, a union, would not: the
report would contradict itself. Such a repeat is read once, and counted in a warning.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.ingest.columns import GpuTable

# what makes two rows one activity: everything the profiler records of its place and time
KEY = ("kind", "name", "ts", "dur", "device", "stream", "correlation")


def repeated_activities(gpu: GpuTable) -> np.ndarray:
    """A mask of the rows that repeat an earlier row's activity exactly (`KEY`); the first of
    each is kept. Only rows sharing a start with another are compared (sorting by start alone
    costs little; in a real trace few activities share one)."""
    n = len(gpu)
    repeated = np.zeros(n, dtype=bool)
    if n < 2:
        return repeated
    order = np.argsort(gpu.ts, kind="stable")
    starts = gpu.ts[order]
    same = starts[1:] == starts[:-1]
    if not same.any():
        return repeated
    shared = np.zeros(n, dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    rows = np.sort(order[shared])  # in trace order: the first written is the one kept
    columns = {key: (getattr(gpu, key).codes if key in ("kind", "name") else getattr(gpu, key))[rows] for key in KEY}
    repeated[rows[pd.DataFrame(columns).duplicated(keep="first").to_numpy()]] = True
    return repeated
