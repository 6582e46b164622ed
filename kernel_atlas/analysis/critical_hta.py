"""The critical path as HTA 0.5.0 reads a trace (`convention="hta"`, `atlas report --like-hta`), so
that a user can hold Kernel Atlas's numbers against HTA's: what HTA's loader and its
`critical_path_analysis` keep, drop and round. `critical_path.build_graph` applies it; the exact
convention (the default) keeps to the trace. docs/critical_path.md gives each rule and why the exact
convention differs.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from kernel_atlas.core.texts import name_mask
from kernel_atlas.ingest.nesting import nesting_parents

# HTA 0.5.0's BLOCKING_SYNC_CALLS: CUDA names only (a HIP sync counts as CPU work there)
BLOCKING_HTA = re.compile(r"^cuda(DeviceSynchronize|StreamSynchronize|EventSynchronize|EventQuery|Memcpy|MemcpyAsync)$")
# HTA 0.5.0's runtime launch calls (TraceSymbolTable.get_runtime_launch_events_query): an activity
# launched by another call (hipModuleLaunchKernel, cudaGraphLaunch) has no launch edge there
LAUNCH_HTA = re.compile(
    r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cudaMemcpyAsync|cudaMemsetAsync|hipLaunchKernel"
    r"|hipExtModuleLaunchKernel|hipMemcpyAsync|hipMemsetAsync|hipMemcpyWithStream)$"
)


def like_hta(
    kernels: pd.DataFrame,
    host_events: pd.DataFrame,
    notes: list[str] | None = None,
    last_step_start_us: float | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The trace as HTA 0.5.0 reads it: every start rounded up and every end rounded down to the
    µs (its parser's `round_down_time_stamps`, which `HTA_DISABLE_NS_ROUNDING=1` turns off); host
    events left with no length dropped, and the GPU activities whose launch call was dropped or
    is not in the trace (its `critical_path_analysis` keeps only `dur > 0`: an op or call that
    straddles less than a whole µs is gone, with its kernels); the host nesting found again from
    the rounded times (HTA builds its call stacks from what is left); and, as its loader does by
    default, the last `ProfilerStep` cut off where the trace names two or more (host events from
    its start on, and the activities and sync rows of their calls); of the activities of one
    launch call (a CUDA graph replay), only the last. HTA's other differences are
    in `build_graph`: only CUDA-named calls block, no sync edge without cuda_sync events."""
    ts, end = np.ceil(host_events["ts_us"].to_numpy()), np.floor(host_events["end_us"].to_numpy())
    is_sync = (host_events["kind"] == "sync").to_numpy()
    keep = is_sync | (end > ts)
    host_events = host_events.assign(ts_us=ts, end_us=end)[keep]
    nested = np.flatnonzero(~is_sync[keep] & (host_events["thread"].to_numpy() >= 0))
    parent = np.full(len(host_events), -1, np.int64)
    h_ts, h_end = host_events["ts_us"].to_numpy(), host_events["end_us"].to_numpy()
    found = nesting_parents(host_events["thread"].to_numpy(np.int64)[nested], h_ts[nested], h_end[nested])
    parent[nested] = np.where(found >= 0, nested[np.maximum(found, 0)], -1)
    host_events = host_events.assign(parent=parent).reset_index(drop=True)
    launch = kernels["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
    launch_dur = kernels["launch_dur_us"].to_numpy(np.float64, na_value=np.nan)
    launch_kept = np.floor(launch + launch_dur) > np.ceil(launch)  # False where either is missing
    cut = _hta_last_step_start(host_events) if last_step_start_us is None else float(np.ceil(last_step_start_us))
    if cut is not None:  # HTA's loader drops the last ProfilerStep: host events from its start on,
        # the activities they launched and the sync rows of their calls
        before = host_events["ts_us"].to_numpy() < cut
        is_sync = (host_events["kind"] == "sync").to_numpy()
        calls = host_events["correlation"].to_numpy()[before & ~is_sync]
        kept_sync = np.isin(host_events["correlation"].to_numpy(), calls[calls >= 0])
        host_events = _renumbered(host_events, np.where(is_sync, kept_sync, before))
        launch_kept &= np.ceil(launch) < cut
        if notes is not None:
            notes.append("HTA's convention: the last ProfilerStep is left out, as HTA's loader does by default")
    launch_kept &= _hta_linked(kernels)
    k_end = np.floor(kernels["ts_us"] + kernels["dur_us"])
    kernels = kernels.assign(ts_us=np.ceil(kernels["ts_us"]), launch_ts_us=np.ceil(launch))
    return kernels.assign(dur_us=k_end - kernels["ts_us"])[launch_kept], host_events


def _hta_linked(kernels: pd.DataFrame) -> np.ndarray:
    """The activities HTA 0.5.0 links to their launch call: its `index_correlation` points a call
    at one GPU event, the last of those with its correlation (the later assignment wins), and its
    critical path keeps only GPU events a call points at — of a CUDA graph replay (one
    `cudaGraphLaunch`, many kernels) only the last kernel is left (HTA's issue #290)."""
    n = len(kernels)
    corr = kernels["correlation"].to_numpy(np.float64, na_value=np.nan)
    rank = kernels["rank"].to_numpy(np.int64) if "rank" in kernels else np.zeros(n, np.int64)
    order = np.lexsort((np.arange(n), kernels["ts_us"].to_numpy(np.float64), corr, rank))
    last = np.ones(n, bool)
    same = (corr[order[1:]] == corr[order[:-1]]) & (rank[order[1:]] == rank[order[:-1]])
    last[order[:-1][same]] = False
    return last


def _hta_last_step_start(host_events: pd.DataFrame) -> float | None:
    """Where HTA 0.5.0's loader cuts the trace (`TraceAnalysis(include_last_profiler_step=False)`,
    its default: `Trace._filter_irrelevant_gpu_kernels`): the start of the last range named like
    `ProfilerStep`, when the trace names two or more of them (one name: nothing is cut) — here
    from the host ranges only; HTA counts the GPU-side step annotations too (ingest's
    `last_step_start_us` does, which `build_graph` takes when given)."""
    named = (host_events["kind"] != "sync").to_numpy() & name_mask(host_events["name"], lambda s: "ProfilerStep" in s)
    if host_events["name"][named].nunique() < 2:
        return None
    return float(host_events["ts_us"].to_numpy()[named].max())


def _renumbered(host_events: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The kept rows, their `parent` pointing at the kept rows' new numbers (-1 where the parent
    was dropped)."""
    new = np.full(len(host_events) + 1, -1, np.int64)
    new[np.flatnonzero(keep)] = np.arange(int(keep.sum()))
    parent = new[host_events["parent"].to_numpy(np.int64)[keep]]  # -1 indexes the trailing -1
    return host_events[keep].assign(parent=parent).reset_index(drop=True)
