"""What the host did around each GPU activity's launch, from the host ranges (ingest only).

Per GPU activity:
* `launch_dur_us`, `launch_thread`: CPU duration of the launch call and the launching thread;
* `wait_frame`, `wait_module`: when the activity ends a *host wait* of its device — the device
  (all streams) was idle before it and its launch began after the device went idle — the
  innermost CPU op, Python frame or annotation on the launching thread that encloses the whole
  wait [device idle since, launch start]; where none does, the one of that thread that covers the
  most of it (its overlap with the wait, whatever its start), at least half ("between ops" when
  none does either), and the `nn.Module` path enclosing that frame. Everything else gets null.

Also the trace fact `last_step_start_us` that HTA uses to cut its analysis window.
Everything is vectorised: sorts, and walks up the nesting one depth level at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.ingest.columns import ANNOTATION, RUNTIME, TraceColumns, step_numbers
from kernel_atlas.ingest.events import MAX_TEXT
from kernel_atlas.ingest.frames import MODULE_PREFIX, innermost_modules, short_frame
from kernel_atlas.ingest.link import MAX_STACK_RANGES, SHORT_STACK_TEXT, STACKS_TEXT, LinkedColumns, take
from kernel_atlas.ingest.nesting import NEST_TOLERANCE_US

BETWEEN_OPS = "between ops"
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)


def device_idle_since(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each activity, the latest end of the activities that started before it on its device
    (ties broken by trace order); NaN for the first activity of a device."""
    n = len(start)
    since = np.full(n, np.nan)
    order = np.lexsort((np.arange(n), start, device))
    cuts = np.flatnonzero(np.diff(device[order])) + 1
    for rows in np.split(order, cuts):
        if len(rows) > 1:
            since[rows[1:]] = np.maximum.accumulate(end[rows])[:-1]
    return since


def _enclosing_frames(
    cols: TraceColumns, parent: np.ndarray, launch: np.ndarray, since: np.ndarray, is_step: np.ndarray
) -> np.ndarray:
    """Innermost range enclosing [since, launch start] on the launch's thread: an ancestor of the
    launch (a range containing the wait contains the launch's start) that started by `since`."""
    host = cols.host
    wanted = (host.family != RUNTIME) & ~((host.family == ANNOTATION) & is_step[host.name_code])
    found = np.full(len(launch), -1, dtype=np.int64)
    cur = take(parent, launch, -1)
    active = np.flatnonzero(cur >= 0)
    while len(active):
        node = cur[active]
        hit = wanted[node] & (host.ts[node] <= since[active] + NEST_TOLERANCE_US)
        found[active[hit]] = node[hit]
        active = active[~hit]
        cur[active] = parent[cur[active]]
        active = active[cur[active] >= 0]
    return found


def _mostly_in(
    cols: TraceColumns, launch: np.ndarray, since: np.ndarray, until: np.ndarray, is_step: np.ndarray
) -> np.ndarray:
    """Per wait [since, until] no range encloses whole, the range of the launch's thread that
    covers the most of it — its overlap with the wait, whatever its start —, where that is at least
    half; else -1. Among equals, one begun before the wait (the innermost: the last begun), else
    the first to begin. A GPU idle while rank 3's DataLoader ran for 99 % of the gap was put
    "between ops" because the gap began inside a synchronisation, before the DataLoader's range;
    and a CPU-heavy op begun while queued kernels still ran (the commonest host wait) was missed
    while only ranges beginning in the wait were looked at (campaign BK, class 2).
    Vectorised: of the ranges begun before a wait, the one ending last covers the most of it, read
    from a running maximum of the ends; of those beginning in it, all waits' together, each
    wait's best by a segment maximum."""
    host = cols.host
    found = np.full(len(launch), -1, dtype=np.int64)
    wanted = np.flatnonzero((host.family != RUNTIME) & ~((host.family == ANNOTATION) & is_step[host.name_code]))
    if not len(wanted) or not len(launch):
        return found
    order = wanted[np.lexsort((host.ts[wanted], host.thread[wanted]))]
    thread_of, start_of, end_of = host.thread[order], host.ts[order], host.end[order]
    threads = host.thread[launch]
    lo, hi = np.zeros(len(launch), np.int64), np.zeros(len(launch), np.int64)
    before = np.full(len(launch), -1, np.int64)  # per wait, the range begun before it ending last
    for thread in np.unique(threads).tolist():  # a thread's ranges lie together, sorted by start
        first = int(np.searchsorted(thread_of, thread, side="left"))
        last = int(np.searchsorted(thread_of, thread, side="right"))
        mine = np.flatnonzero(threads == thread)
        lo[mine] = first + np.searchsorted(start_of[first:last], since[mine], side="left")
        hi[mine] = first + np.searchsorted(start_of[first:last], until[mine], side="left")
        # of the ranges begun before `since`, the one ending last overlaps the wait the most
        # ([since, min(end, until)]): the running maximum of the ends by start, and the last
        # range reaching it (the innermost of nested ranges ending together). `records`: where
        # the running maximum rises or is reached again; fmax: a range without an end is skipped
        ends = end_of[first:last]
        records = np.flatnonzero(ends == np.fmax.accumulate(ends))
        prior = mine[lo[mine] > first]
        latest = np.searchsorted(records, lo[prior] - first - 1, side="right") - 1
        reached = latest >= 0  # not when the ranges before it have no end (NaN)
        before[prior[reached]] = first + records[latest[reached]]
    best = np.full(len(launch), -np.inf)  # the most any range covers of each wait
    had = np.flatnonzero(before >= 0)
    best[had] = np.minimum(end_of[before[had]], until[had]) - since[had]
    found[had] = order[before[had]]
    counts = np.maximum(hi - lo, 0)
    if counts.any():
        starts = np.cumsum(counts) - counts  # each wait's first pair
        wait = np.repeat(np.arange(len(launch)), counts)  # each (wait, range beginning in it) pair
        offsets = np.arange(len(wait)) - np.repeat(starts, counts)
        rows = order[np.repeat(lo, counts) + offsets]
        cover = np.minimum(host.end[rows], until[wait]) - host.ts[rows]
        # per wait (its pairs lie together), its largest cover, and the first range reaching it
        largest = np.full(len(launch), -np.inf)
        some = np.flatnonzero(counts)
        largest[some] = np.maximum.reduceat(cover, starts[some])
        reach = np.flatnonzero(cover == largest[wait])
        firsts = reach[np.r_[True, wait[reach][1:] != wait[reach][:-1]]]
        inside = wait[firsts]
        more = cover[firsts] > best[inside]  # a tie goes to the range begun before the wait
        best[inside[more]] = cover[firsts][more]
        found[inside[more]] = rows[firsts][more]
    found[~(best >= 0.5 * (until - since))] = -1
    return found


def _module_paths(cols: TraceColumns, parent: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """`nn.Module` path (outermost first) of the ranges enclosing each node, the node included;
    strings built once per distinct path. Bounded as call stacks are (`link`): the innermost
    MAX_STACK_RANGES ranges and MAX_TEXT characters, SHORT_STACK_TEXT once the trace's distinct
    paths passed STACKS_TEXT (20,000 waits under 5,000 nested modules each made a path of 60k
    characters: 1.2 GB, and 10^8 steps up)."""
    names = cols.host.names
    is_module = np.array([s.startswith(MODULE_PREFIX) for s in names], dtype=bool)
    name_code = cols.host.name_code
    key = np.zeros(len(nodes), dtype=np.uint64)
    cur = nodes.copy()
    active = np.flatnonzero(cur >= 0)
    with np.errstate(over="ignore"):
        for _ in range(MAX_STACK_RANGES):
            if not len(active):
                break
            code = name_code[cur[active]]
            mod = is_module[code]
            key[active[mod]] = key[active[mod]] * _HASH_MULT + (code[mod] + 1).astype(np.uint64)
            cur[active] = parent[cur[active]]
            active = active[cur[active] >= 0]
    has = nodes >= 0
    out = np.full(len(nodes), None, dtype=object)
    distinct, first, inverse = np.unique(key[has], return_index=True, return_inverse=True)
    texts = np.empty(len(distinct), dtype=object)
    spent = 0
    for j, start in enumerate(nodes[has][first].tolist()):  # once per distinct module path
        most = MAX_TEXT if spent <= STACKS_TEXT else SHORT_STACK_TEXT
        modules: list[str] = []
        node, climbed, length = start, 0, 0
        while node >= 0 and climbed < MAX_STACK_RANGES and length <= most:
            name = names[int(name_code[node])]
            if name.startswith(MODULE_PREFIX):
                modules.append(name[len(MODULE_PREFIX) :])
                length += len(name) - len(MODULE_PREFIX) + 1
            node, climbed = int(parent[node]), climbed + 1
        text = innermost_modules(".".join(reversed(modules)), most) if modules else None
        spent += len(text or "")
        texts[j] = text
    out[has] = texts[inverse]
    return out


def host_activity(cols: TraceColumns, linked: LinkedColumns) -> dict[str, Any]:
    """The kernels-table columns described in the module docstring, aligned with `cols.gpu`."""
    gpu, host = cols.gpu, cols.host
    n = len(gpu)
    launch = linked.launch_idx if len(linked.launch_idx) == n else np.full(n, -1, np.int64)
    parent = linked.host_parent
    has = launch >= 0
    launch_ts = take(host.ts, launch, np.nan)
    # ends are stored as start + duration: round the difference back to the trace's ns resolution
    launch_dur = np.round(take(host.end, launch, np.nan) - launch_ts, 3)
    since = device_idle_since(gpu.device, gpu.ts, gpu.ts + gpu.dur)
    host_wait = has & (gpu.ts > since) & (launch_ts > since)
    waits = np.flatnonzero(host_wait)
    frames = modules = np.empty(0, dtype=object)  # the waits' (none: every row's is None)
    if len(waits) and len(parent) == len(host):
        is_step = step_numbers(host.names) >= 0
        found = _enclosing_frames(cols, parent, launch[waits], since[waits], is_step)
        loose = np.flatnonzero(found < 0)  # no range encloses the whole wait
        if len(loose):
            found[loose] = _mostly_in(cols, launch[waits][loose], since[waits][loose], launch_ts[waits][loose], is_step)
        codes = take(host.name_code, found, -1)
        used, inverse = np.unique(codes, return_inverse=True)
        short = np.array([BETWEEN_OPS if c < 0 else short_frame(host.names[c]) for c in used.tolist()], dtype=object)
        frames, modules = short[inverse], _module_paths(cols, parent, found)
    else:
        waits = waits[:0]
    return {
        "launch_dur_us": launch_dur,
        "launch_thread": pd.arrays.IntegerArray(take(host.thread, launch, -1), mask=~has).astype("Int32"),
        "wait_frame": _at_rows(n, waits, frames),
        "wait_module": _at_rows(n, waits, modules),
    }


def _at_rows(n: int, rows: np.ndarray, values: np.ndarray) -> pd.Categorical:
    """A categorical of `n` rows, `values` at `rows` and missing elsewhere — what
    `pd.Categorical` of the whole column makes, from the few rows that hold a value."""
    part = pd.Categorical(values)
    codes = np.full(n, -1, part.codes.dtype)
    codes[rows] = part.codes
    return pd.Categorical.from_codes(codes, dtype=part.dtype)


def last_step_start(cols: TraceColumns) -> float | None:
    """Start of the last `ProfilerStep` range (CPU- or GPU-side) when the trace has at least two
    distinct steps — where HTA ends its analysis window (it drops the last, possibly incomplete,
    step); None otherwise."""
    host = cols.host
    named = np.array(["ProfilerStep" in s for s in host.names], dtype=bool)
    rows = np.flatnonzero(named[host.name_code]) if len(host) else np.empty(0, np.int64)
    steps = {host.names[int(c)] for c in np.unique(host.name_code[rows])}
    steps |= {f"ProfilerStep#{int(s)}" for s in np.unique(cols.gpu_steps.step)}
    starts = np.concatenate([host.ts[rows], cols.gpu_steps.ts])
    if len(steps) < 2 or len(starts) == 0:
        return None
    return float(starts.max())


def with_host_activity(frame: pd.DataFrame, cols: TraceColumns, linked: LinkedColumns) -> pd.DataFrame:
    """The kernels table with the host-activity columns appended (categoricals for the names)."""
    for name, values in host_activity(cols, linked).items():
        frame[name] = values
    return frame
