"""`[memory]` instant events → one table of allocator events, each attributed to what encloses it.

torch.profiler(profile_memory=True) records every allocation and free of the caching allocator as
an instant event on the allocating thread: `Addr`, `Bytes` (negative for a free), `Total
Allocated` and `Total Reserved` after the event, `Device Type` (c10's enum: 0 CPU, 1 CUDA, 6 HIP)
and `Device Id`. PyTorch 1.9 wrote only `Bytes` and the device; such events keep -1 elsewhere. A
`Bytes` that cannot be read is `events.UNKNOWN_BYTES` (never 0: the analysis works the size out or
leaves the event out of its sums, counted), null in memory_events.parquet; an event without a
usable time is not here (counted at decode).

Attribution is a point-in-interval lookup on the event's thread, vectorised: the host range that
started last at or before the event, then up the nesting (`HostNesting.parent`, as for kernel
launches) to the innermost one that still contains it; runtime calls are skipped. From there the
CPU op, the call stack and `nn.Module` path come from `link`'s helpers, the step from the
`ProfilerStep#N` range containing the event on its thread.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from kernel_atlas.core.groups import value_groups
from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.columns import ANNOTATION, CPU_OP, RUNTIME, HostTable, MemoryEvents, categorical, step_numbers
from kernel_atlas.ingest.events import UNKNOWN_BYTES
from kernel_atlas.ingest.link import HostNesting, _call_stacks, take
from kernel_atlas.ingest.nesting import NEST_TOLERANCE_US, by_thread_start_longest_first, first_matching
from kernel_atlas.store.outputs import dataset_file, write_dataset_file

MEMORY_EVENTS = "memory_events.parquet"  # in the ingest output folder: rank=N/<trace-stem>.parquet
_TEXT_COLUMNS = ("trace", "device", "op", "module", "call_stack")
# columns of the events table, in order
EVENT_COLUMNS = (
    "device",
    "ts_us",
    "addr",
    "bytes",
    "total_allocated",
    "total_reserved",
    "op",
    "module",
    "call_stack",
    "step",
)
# their kinds, as the report's reader checks them (`outputs.load_checked`)
EVENT_KINDS = {
    **{"device": "string", "ts_us": "time", "op": "string", "module": "string", "call_stack": "string"},
    **{name: "integer" for name in ("addr", "total_allocated", "total_reserved", "step")},
    "bytes": "integer or null",  # null: a `Bytes` that could not be read (UNKNOWN_BYTES in memory)
}


def _device_keys(device_type: np.ndarray, device_id: np.ndarray) -> np.ndarray:
    """One int64 key per (type, id) — the type above 32 bits, the id + 1 below (-1: none) —;
    values no device has (hostile input) become unknown (-1)."""
    device_type = np.where((device_type >= 0) & (device_type < 1 << 20), device_type, -1)
    device_id = np.where((device_id >= -1) & (device_id < 1 << 31), device_id, -1)
    return device_type * (1 << 32) + (device_id + 1)


def device_names(device_type: np.ndarray, device_id: np.ndarray) -> pd.Categorical:
    """`cuda:0`, `hip:1`, `cpu` … per event (c10 device types named in catalogs/memory.toml)."""
    kinds = {int(k): v for k, v in read_toml("memory.toml")["device_types"].items()}
    codes, unique = pd.factorize(_device_keys(device_type, device_id))
    labels = []
    for key in unique.tolist():
        kind, index = key >> 32, (key & 0xFFFFFFFF) - 1
        name = kinds.get(kind, f"device_type{kind}" if kind >= 0 else "unknown")
        labels.append(name if index < 0 else f"{name}:{index}")
    return categorical(codes.astype(np.int64), labels)


def _last_started(
    host: HostTable, rows: np.ndarray, thread: np.ndarray, ts: np.ndarray, same_thread: bool = True
) -> np.ndarray:
    """Per query (thread, ts): the host range among `rows` on that thread (on any, unless
    `same_thread`) that started last at or before ts (ties: the shortest, i.e. the innermost); -1
    none. Loops over threads, not events."""
    found = np.full(len(ts), -1, dtype=np.int64)
    if len(rows) == 0 or len(ts) == 0:
        return found
    range_thread = host.thread[rows] if same_thread else np.zeros(len(rows), np.int64)
    thread = thread if same_thread else np.zeros(len(ts), np.int64)
    # the keys made one at a time and dropped once sorted: `rows` may be most of a trace's ranges
    start = host.ts[rows]
    length = host.end[rows]
    length -= start
    by = by_thread_start_longest_first(range_thread, start, length)
    del start, length
    order, sorted_thread = rows[by], range_thread[by]
    del by, range_thread
    for t, mine in value_groups(thread):
        lo, hi = np.searchsorted(sorted_thread, [t, t + 1])
        if lo == hi:
            continue
        pos = np.searchsorted(host.ts[order[lo:hi]], ts[mine] + NEST_TOLERANCE_US, side="right") - 1
        ok = pos >= 0
        found[mine[ok]] = order[lo:hi][pos[ok]]
    return found


def enclosing_ranges(host: HostTable, nest: HostNesting, thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The innermost host range (not a runtime call) containing each point on its thread; -1 none."""
    cur = _last_started(host, np.flatnonzero(host.family != RUNTIME), thread, ts)
    # climb while the candidate ended before the point (it was a finished sibling's subtree)
    active = np.flatnonzero(cur >= 0)
    while len(active):
        ended = host.end[cur[active]] + NEST_TOLERANCE_US < ts[active]
        active = active[ended]
        cur[active] = nest.parent[cur[active]]
        active = active[cur[active] >= 0]
    return cur


def enclosing_steps(host: HostTable, nest: HostNesting, thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """`N` of the `ProfilerStep#N` range containing each point on its thread, else on any thread
    (the autograd thread has no step ranges of its own); -1 none."""
    is_step = np.flatnonzero((host.family == ANNOTATION) & nest.is_profiler_step[host.name_code])
    steps = step_numbers(host.names)
    found = np.full(len(ts), -1, dtype=np.int64)
    for same_thread in (True, False):
        missing = np.flatnonzero(found < 0)
        cand = _last_started(host, is_step, thread[missing], ts[missing], same_thread)
        inside = (cand >= 0) & (ts[missing] <= take(host.end, cand, -np.inf) + NEST_TOLERANCE_US)
        found[missing] = np.where(inside, take(steps, take(host.name_code, cand, -1), -1), -1)
    return found


# steps of the search for the order of one device's events of one time (`_chain`): real ties are a
# free and a reallocation in one µs; a search past this keeps the trace's order
CHAIN_BUDGET = 10_000
CHAIN_MAX_EVENTS = 64  # a longer tie keeps the trace's order (no search)


def _chain(
    need: list[int], give: list[int], key: list[tuple], start: int | None, end: set[int] | None
) -> list[int] | None:
    """An order of one device's events of one time in which each moves `Total Allocated` from the
    level before it (`need`: its total less its size) to its own total (`give`): from `start` (the
    total before them; None: unknown) and, where it can, to one of `end` (what the next events can
    start from: the next event's total less its size, any of the next tie's; None: unknown). A
    copy of the event just placed (same `key`: one event written twice) may follow it, moving
    nothing. Tried in trace order first, so a consistent trace order is kept; None where no order
    uses every event (the totals say nothing: damage, lost events) or the search runs past
    CHAIN_BUDGET steps."""
    n, used, path, found, steps = len(need), [False] * len(need), [], [], 0

    def extend(level: int | None) -> bool:
        nonlocal steps
        if len(path) == n:
            if not found:
                found.append(path.copy())  # every event placed, though not to `end`: kept if no other does
            return end is None or level in end
        for i in range(n):
            steps += 1
            if used[i] or steps > CHAIN_BUDGET:
                continue
            if level is not None and need[i] != level and not (path and key[i] == key[path[-1]]):
                continue
            used[i] = True
            path.append(i)
            if extend(give[i]):
                return True
            path.pop()
            used[i] = False
        return False

    if extend(start):
        return path
    return found[0] if found else None


def tie_order(m: dict[str, np.ndarray]) -> np.ndarray:
    """Row order of the events (`MemoryEvents.columns`): by time, and each device's events of one
    time in the order their totals require — each `Total Allocated` its size away from the one
    before (`_chain`). Profilers of PyTorch <= 1.13 wrote whole µs, so a free and the reuse of its
    block share a time, and the trace may write them in either order; where the totals do not fix
    an order (missing, unreadable sizes, none consistent) the trace's order is kept. Vectorised
    down to the ties whose trace order the totals contradict: none in most traces."""
    order = np.argsort(m["ts"], kind="stable")
    if len(order) < 2 or not (m["ts"][order][1:] == m["ts"][order][:-1]).any():
        return order
    device = _device_keys(m["device_type"], m["device_id"])  # one key per device, as `device_names` makes them
    seq = order[np.argsort(device[order], kind="stable")]  # each device's events in time order
    same = device[seq][1:] == device[seq][:-1]
    tie = same & (m["ts"][seq][1:] == m["ts"][seq][:-1])
    if not tie.any():
        return order
    total, size = m["total_allocated"][seq], m["bytes"][seq]
    readable = (total >= 0) & (size != UNKNOWN_BYTES)
    keys = [m[c][seq] for c in ("addr", "bytes", "total_allocated", "total_reserved", "thread")]
    copy = np.r_[False, tie & np.logical_and.reduce([k[1:] == k[:-1] for k in keys])]
    # a link that the totals check (both recorded, the same device) and contradict
    checked = np.r_[False, same & (total[:-1] >= 0) & readable[1:]]
    bad = checked & ~copy & (np.r_[0, total[1:] - size[1:] - total[:-1]] != 0)
    in_tie = np.r_[tie, False] | np.r_[False, tie]
    starts = np.flatnonzero(in_tie & ~np.r_[False, tie])
    label = np.full(len(seq), -1, dtype=np.int64)
    label[in_tie] = np.cumsum(in_tie & ~np.r_[False, tie])[in_tie] - 1
    at = np.flatnonzero(bad)
    suspect = np.unique(np.r_[label[at], label[at - 1]])  # a tie's link from before, inside, or to after
    groups = suspect[suspect >= 0]
    if not len(groups):
        return order
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    # plain lists for the search: a damaged trace may have a tie in every µs
    last = np.flatnonzero(~np.r_[tie, False])  # the last event of each run of one device and time
    starts_l, ends_l = starts.tolist(), (last[np.searchsorted(last, starts)] + 1).tolist()
    total_l, size_l, readable_l, same_l = total.tolist(), size.tolist(), readable.tolist(), same.tolist()
    key_l = list(zip(*(k.tolist() for k in keys), strict=True))
    moved = []
    queue = deque(groups.tolist())  # in time order; a tie right after one reordered joins it
    while queue:
        group = queue.popleft()
        lo, hi = starts_l[group], ends_l[group]
        if hi - lo > CHAIN_MAX_EVENTS or not all(readable_l[lo:hi]):
            continue
        # from the total before the tie (the last of a tie reordered here: the lists follow) to one
        # that the next event, or any event of the next tie, starts from
        start = total_l[lo - 1] if lo > 0 and same_l[lo - 1] and total_l[lo - 1] >= 0 else None
        tied_next = group + 1 < len(starts_l) and starts_l[group + 1] == hi and same_l[hi - 1]
        after = ends_l[group + 1] if tied_next else hi + 1 if hi < len(seq) and same_l[hi - 1] else hi
        ahead = {t - b for t, b in zip(total_l[hi:after], size_l[hi:after], strict=True)}
        end = ahead if after > hi and all(readable_l[hi:after]) else None
        need = [t - b for t, b in zip(total_l[lo:hi], size_l[lo:hi], strict=True)]
        chain = _chain(need, total_l[lo:hi], key_l[lo:hi], start, end)
        if chain is None or chain == list(range(hi - lo)):
            continue
        moved += [(lo + k, lo + i) for k, i in enumerate(chain)]  # (place in `seq`, the event it now holds)
        for column in (total_l, size_l, key_l):
            column[lo:hi] = [column[lo + i] for i in chain]
        if tied_next and (not queue or queue[0] != group + 1):
            queue.appendleft(group + 1)  # its start moved with this tie's end
    if moved:
        # a device's events of one time hold increasing places in `order` (both sorts are stable)
        place, held = np.array(moved, dtype=np.int64).T
        order[position[seq[place]]] = seq[held]
    return order


def memory_events(memory: MemoryEvents, host: HostTable, nest: HostNesting) -> pd.DataFrame:
    """The allocator events in time order, those of one device and time in the order their totals
    require (`tie_order`; else in trace order), attributed (see the module docstring); empty when
    the trace has none."""
    m = memory.columns
    order = tie_order(m)
    thread, ts = m["thread"][order], m["ts"][order]
    enclosing = enclosing_ranges(host, nest, thread, ts)
    op = first_matching(enclosing, nest.parent, host.family == CPU_OP)
    stacks = _call_stacks(host, nest, enclosing)
    return pd.DataFrame(
        {
            "device": device_names(m["device_type"][order], m["device_id"][order]),
            "ts_us": ts,
            "addr": m["addr"][order],
            "bytes": m["bytes"][order],
            "total_allocated": m["total_allocated"][order],
            "total_reserved": m["total_reserved"][order],
            "op": categorical(take(host.name_code, op, -1), host.names),
            "module": stacks.module(),
            "call_stack": stacks.call_stack(),
            "step": enclosing_steps(host, nest, thread, ts),
        },
        columns=list(EVENT_COLUMNS),
    )


def concat_memory(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The events of several traces as one table (text columns stay categoricals)."""
    memory = pd.concat(frames, ignore_index=True)
    for column in _TEXT_COLUMNS:
        if not isinstance(memory[column].dtype, pd.CategoricalDtype):
            memory[column] = memory[column].astype("category")
    return memory


def memory_file(rank: int, stem: str) -> str:
    """Where one trace's memory events go, relative to the output folder (laid out as the kernels)."""
    return dataset_file(MEMORY_EVENTS, rank, stem)


def write_memory_events(
    memory: pd.DataFrame | None, out: str | Path, rank: int, stem: str, run_id: str | None
) -> str | None:
    """One trace's memory events into the output folder, tied to the run; the relative path
    written, None when the trace has none."""
    if memory is None or memory.empty:
        return None
    table = pa.Table.from_pandas(memory.drop(columns=["rank"], errors="ignore"), preserve_index=False)
    sizes = table.column("bytes").to_numpy()
    unknown = sizes == UNKNOWN_BYTES
    if unknown.any():  # a size that could not be read is null in the file (a sum over it stays a size)
        at = table.schema.get_field_index("bytes")
        table = table.set_column(at, "bytes", pa.array(sizes, type=pa.int64(), mask=unknown))
    return write_dataset_file(table, out, memory_file(rank, stem), run_id)
