"""What bounds the run: the critical path through a rank's host threads and GPU streams.

The trace becomes a graph of time points — the start and the end of every CPU op, runtime call
and GPU activity — joined by edges that carry time (see docs/critical_path.md):

* host threads: consecutive points of a thread in call-stack order; an edge inside an op is CPU
  time attributed to it (HTA's rules); the edge entering a top-level op and the edge that ends
  a blocking call (synchronize, synchronous copy) weigh nothing — the thread was waiting; a
  what-if weighs the edge entering a top-level op with the host's recorded time between the ops
  (`Graph.whatif_weight`: the host keeps its recorded times);
* launch → activity: the activity waited for its launch when its stream was empty at the
  launch (launch overhead = activity start − launch start); otherwise previous activity on the
  stream → activity (kernel-kernel overhead = the gap), when under 1.5 ms; an activity without
  that edge still follows its stream's previous one (zero weight: stream order, so that no path
  is shorter than a stream's serial work; HTA's convention keeps HTA's graph, which has no such edge);
* synchronisation (zero weight): the activity an event wait, a stream/device/event sync or a
  synchronous call waited for → the waiting kernel's start or the host call's end;
* every activity's own duration, graph-replayed kernels included (each owns its launch's
  `cudaGraphLaunch`, only the first of a replay can wait for it).

The longest path (`analysis/longest_path.py`) is the critical path; its edges are segments,
named in HTA's bound buckets (`analysis/critical_segments.py`). A what-if re-solves the same
graph with new weights (`analysis/whatif.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_hta import BLOCKING_HTA, LAUNCH_HTA, like_hta
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.texts import counted, name_mask
from kernel_atlas.ingest.host_events import RUNTIME_STREAM_WAITS
from kernel_atlas.ingest.nesting import first_matching

# HTA's KERNEL_KERNEL_DELAY_THRESHOLD_US (from 0.6.0; 0.5.0, the `hta` convention, has no limit):
# longer gaps are unexplained waits
KERNEL_GAP_LIMIT_US = 1500.0
BUCKETS = (
    "cpu_bound",
    "gpu_compute_bound",
    "gpu_communication_bound",
    "gpu_kernel_kernel_overhead",
    "gpu_kernel_launch_overhead",
    "data_loading",
)
# host calls that hold the thread until GPU work ends (their time is waiting, not CPU work)
# (`hipMemcpyWithStream`: ROCm PyTorch's copy to or from the host, synchronous). Not
# `cudaEventQuery`: it polls and returns at once (cudaErrorNotReady) — CPU work, a polling loop's
# whole time; HTA's list has it (`critical_hta.BLOCKING_HTA`, the `hta` convention)
BLOCKING = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyAsync)$|^hipMemcpyWithStream$"
)
# of those, the asynchronous copies: blocking only where the call outlived the copy it launched
# (`_waited_copies`: pageable memory); to or from pinned memory one returns at once, its copy queued
ASYNC_COPY = re.compile(r"^(cuda|hip)MemcpyAsync$")
CONVENTIONS = ("exact", "hta")
# blocking calls whose release is found from the GPU timeline when the trace has no cuda_sync events
_RELEASED_BY_GPU = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy)$|^hipMemcpyWithStream$"
)
DATA_LOADING = re.compile(r"DataLoader|dataloader|data_loading", re.IGNORECASE)
_LAUNCH_CALL = re.compile(r"Launch|Memcpy|Memset|GraphLaunch", re.IGNORECASE)

# edge kinds
CPU, DEPEND, GPU, LAUNCH, GAP, SYNC, WAIT = range(7)
KIND_NAMES = ("cpu", "dependency", "gpu", "launch", "kernel_gap", "sync", "wait", "collective")  # 7: critical_ranks


@dataclass
class Graph:
    """Nodes 2e (start) and 2e+1 (end) of event e; events are host rows then GPU rows."""

    node_ts: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    kind: np.ndarray  # int8, see KIND_NAMES
    event: np.ndarray  # event each edge's time is attributed to (-1: none)
    n_host: int
    host: pd.DataFrame  # the host rows that are events
    gpu: pd.DataFrame  # the GPU rows that are events
    window: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    node_tie: np.ndarray | None = None  # order among nodes of equal time (host: call-stack order)
    causal: np.ndarray | None = None  # per edge: only a what-if needs it (`zero_weight_launches`)
    # each node's latest time over the nodes it is reached from, where some edge goes back in time
    # (`_held_to_time`; None: every edge goes forward, the node's own time is that)
    node_reached: np.ndarray | None = None
    # what longest_path works out once per graph (its contraction and relaxation order)
    solver: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def n_nodes(self) -> int:
        return len(self.node_ts)

    def path_weight(self) -> np.ndarray:
        """The weights the critical path is solved with: the causal edges a what-if adds weigh
        -inf, so no path takes them (every other weight is finite) — the graph solved as if built
        without them, by the same solver as its what-if (`longest_path` contracts a graph once)."""
        if self.causal is None or not self.causal.any():
            return self.weight
        return np.where(self.causal, -np.inf, self.weight)

    def whatif_weight(self) -> np.ndarray:
        """The weights a what-if solves with: `weight`, but each edge entering a top-level op
        (`DEPEND`, nothing on the path: HTA's rule) weighs the host's recorded time between the
        ops — the Python between two ops runs whatever the GPU does. Weighing it nothing, a
        GEMM sped up 1000× let the op after it launch its kernel 90 µs before the host did, and
        the run end before the host had launched its work (campaign BJ 1). Held, as every edge,
        to the time it moves past what its source has reached (`_held_to_time`)."""
        enter = np.flatnonzero(self.kind == DEPEND)
        if not len(enter):
            return self.weight
        src, dst = self.src[enter], self.dst[enter]
        reached = self.reached_ts()
        gap = np.minimum(self.node_ts[dst] - self.node_ts[src], reached[dst] - reached[src])
        weight = self.weight.copy()
        weight[enter] = np.maximum(gap, 0.0)
        return weight

    def without_causal_edges(self) -> Graph:
        """The graph as built without `zero_weight_launches`: the same edges, in the same order,
        less the causal ones a what-if adds (one build serves the path and its what-if)."""
        keep = slice(None) if self.causal is None else ~self.causal
        picked = (a[keep] for a in (self.src, self.dst, self.weight, self.kind, self.event))
        notes = list(self.notes)
        graph = Graph(self.node_ts, *picked, self.n_host, self.host, self.gpu, self.window, notes, self.node_tie)
        graph.node_reached = self.node_reached  # reached over the edges kept: causal ones carry no time
        return graph

    def reached_ts(self) -> np.ndarray:
        """The time each node is reached at (`node_reached`, else its own)."""
        return self.node_ts if self.node_reached is None else self.node_reached

    def origin_us(self) -> float | None:
        """The time the exact path and a what-if measure from (`longest_path`'s `origin`): the
        window's start, or its first event's where it has none (the whole trace); None for an
        empty graph. From there every chain — a host thread, an activity of no launch — starts at
        its own time: a chain that starts late holds the end where it ends last, not where it is
        the heaviest (campaign BV 1)."""
        if not self.n_nodes:
            return None
        first = float(np.min(self.node_ts))
        start = self.window.get("start_us")
        return first if start is None else min(float(start), first)


def take_text(values: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The values of `rows` as an object array (None for missing), without converting the column."""
    if len(values) == 0:
        return np.full(len(rows), None, object)
    picked = values.iloc[rows]
    return np.where(picked.isna().to_numpy(), None, picked.to_numpy(dtype=object))


# --- window ---------------------------------------------------------------------------------------


def parse_window(spec: str | None) -> tuple[str, int] | None:
    """`ProfilerStep#2` → ("ProfilerStep", 2); None: the whole trace."""
    if not spec:
        return None
    name, sep, k = spec.rpartition("#")
    # plain ASCII digits (`²` and `٣` are digits to str.isdigit, not to int); an instance beyond
    # 2^63 is none a trace has (and int() reads no more than 4,300 digits)
    if not sep or not name or not (k.isascii() and k.isdigit()) or len(k) > 18:
        raise AtlasError(
            None, f"--window {spec[:80]!r}: expected NAME#K (the K-th instance, from 0, e.g. ProfilerStep#0)"
        )
    return name, int(k)


def window_range(host: pd.DataFrame, window: tuple[str, int] | None) -> tuple[float, float, str]:
    """[start, end] of the K-th (0-based, by start) host range whose name contains NAME."""
    if window is None:
        return -np.inf, np.inf, "whole trace"
    name, k = window
    ranges = host[_named_like(host, name)].sort_values("ts_us", kind="stable")
    check_window(len(ranges), window)
    row = ranges.iloc[k]
    label = f"{row['name']} (instance {k} of {len(ranges)}"
    # K counts instances; a range that bears `NAME#K` as its own name (steps numbered from 4) is
    # another one, said beside it: `ProfilerStep#1` of steps #4–#6 is the step named ProfilerStep#5
    named = np.flatnonzero(ranges["name"].astype(str).to_numpy() == f"{name}#{k}")
    if len(named) and named[0] != k:
        label += f"; the range named {name}#{k} is instance {int(named[0])}: --window {name}#{int(named[0])}"
    return float(row["ts_us"]), float(row["end_us"]), label + ")"


def _named_like(host: pd.DataFrame, name: str) -> np.ndarray:
    """The host ranges (no sync events) whose name contains `name`: a window's candidates."""
    return (host["kind"] != "sync").to_numpy() & name_mask(host["name"], lambda s: name in s)


def window_count(host: pd.DataFrame | None, name: str) -> int:
    """How many ranges a `--window NAME#K` may pick from (`host`: at least `kind` and `name`)."""
    return 0 if host is None else int(_named_like(host, name).sum())


def check_window(count: int, window: tuple[str, int]) -> None:
    """The K of `window` is one of the `count` ranges named like its NAME; else refused."""
    name, k = window
    if k >= count:
        which = f"instances 0–{count - 1}" if count > 1 else ("instance 0" if count else "none")
        raise AtlasError(
            None,
            f"--window {name}#{k}: K is the instance, counted from 0 in start order, not the number in a "
            f"range's name; the trace has {counted(count, 'range', 'ranges')} named like {name!r} ({which})",
        )


# --- graph ----------------------------------------------------------------------------------------


class _Edges:
    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(
        self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, kind: int, event: np.ndarray, causal: bool = False
    ) -> None:
        """`causal`: an edge only a what-if needs (see `build_graph`'s `zero_weight_launches`)."""
        n = len(src)
        if n:
            # no copies here: `arrays` concatenates the parts into new arrays once
            def wide(values: object, dtype: type) -> np.ndarray:
                return np.broadcast_to(np.asarray(values, dtype), (n,))

            ends = (src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False))
            parts = (*ends, wide(weight, np.float64), wide(kind, np.int8), wide(event, np.int64), wide(causal, bool))
            self.parts.append(parts)

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.parts:
            return tuple(np.empty(0, t) for t in (np.int64, np.int64, np.float64, np.int8, np.int64, bool))
        return tuple(np.concatenate([p[i] for p in self.parts]) for i in range(6))


def _depths(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's depth (how many ancestors it has) and top-level ancestor (itself at the top), by
    pointer doubling: each pass a row's pointer jumps to its target's, so a chain of any depth
    takes log2(depth) passes (climbing one level a pass took `depth` passes over the rows still
    climbing: a 40,000-deep nesting spent 7 s there). `parent` has no cycle (`load_host_events`)."""
    n = len(parent)
    top = np.where(parent >= 0, parent, np.arange(n))  # each row's pointer: an ancestor, or itself at the top
    depth = (parent >= 0).astype(np.int64)  # how far up the pointer is
    active = np.flatnonzero(top[top] != top)  # rows whose pointer is not yet at the top
    while len(active):
        target = top[active]
        depth[active] += depth[target]  # the right side is read before any row is written
        top[active] = top[target]
        active = active[top[top[active]] != top[active]]
    return depth, top


# past this many levels of nesting, the walks level by level go row by row (a few numpy calls a
# level cost more than a Python step a row once the levels are many and hold a row or two each)
_DEEP_LEVELS = 2048


def _levels(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows by depth — `rows[bounds[d]:bounds[d + 1]]` are those at depth d — found with one
    stable sort rather than a pass over every row per depth (quadratic in a deep nesting)."""
    rows = np.argsort(depth, kind="stable")
    return rows, np.searchsorted(depth[rows], np.arange(int(depth.max(initial=0)) + 2))


def _clamp_ends(end: np.ndarray, parent: np.ndarray, rows: np.ndarray, bounds: np.ndarray) -> None:
    """A child ends by its parent's end (nesting tolerance), in place, top level first."""
    if len(bounds) > _DEEP_LEVELS:  # row by row: a deep chain costs a loop step a row, not numpy calls
        values, up = end.tolist(), parent.tolist()
        for row in rows[bounds[1] :].tolist():
            if values[up[row]] < values[row]:
                values[row] = values[up[row]]
        end[:] = values
        return
    for d in range(1, len(bounds) - 1):
        here = rows[bounds[d] : bounds[d + 1]]
        end[here] = np.minimum(end[here], end[parent[here]])


def _subtree_sizes(parent: np.ndarray, rows: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Each row's subtree size (itself and its descendants), deepest level first."""
    size = np.ones(len(parent), np.int64)
    if len(bounds) > _DEEP_LEVELS:
        sizes, up = size.tolist(), parent.tolist()
        for row in rows[bounds[1] :][::-1].tolist():
            sizes[up[row]] += sizes[row]
        return np.asarray(sizes, np.int64)
    for d in range(len(bounds) - 2, 0, -1):
        here = rows[bounds[d] : bounds[d + 1]]
        np.add.at(size, parent[here], size[here])
    return size


def _node_parents(host: pd.DataFrame, is_node: np.ndarray) -> np.ndarray:
    """Each row's nearest ancestor that is a node (row index into `host`, -1 none)."""
    parent = host["parent"].to_numpy(np.int64)
    return first_matching(parent, parent, is_node)


def _host_chains(host: pd.DataFrame, edges: _Edges) -> np.ndarray:
    """Edges along every host thread in call-stack order (HTA's rules, see the module docstring);
    returns each host node's position in that order (to order nodes of equal time)."""
    n = len(host)
    if n == 0:
        return np.empty(0, np.int64)
    parent = host["node_parent"].to_numpy(np.int64)
    ts, end = host["ts_us"].to_numpy(), host["end_us"].to_numpy().copy()
    depth, root = _depths(parent)
    rows, bounds = _levels(depth)
    _clamp_ends(end, parent, rows, bounds)
    thread = host["thread"].to_numpy(np.int64)
    # the points in call-stack order, as a depth-first walk of the nesting visits them (HTA's
    # call stacks): an op's start, its children's points, its end — times only order the ops
    # (by their top-level op's start, then their own), so an op of no or negative length (under
    # a µs, rounded) still starts before it ends
    order = np.lexsort((np.arange(n), depth, ts, ts[root], thread))  # thread, top-level op's start, start, depth
    size = _subtree_sizes(parent, rows, bounds)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    del order, root, rows
    # each point in that order: op q's start is point q, its end point n + q; its graph node is
    # 2q (start) or 2q + 1 (end). Edges join consecutive points of a thread.
    point = _tour(parent, pos, size, depth)
    del pos, size
    is_end = point >= n
    op = point
    op[is_end] -= n  # in place: the point numbers are not needed again
    node = 2 * op + is_end
    tie = np.empty(2 * n, np.int64)
    tie[node] = np.arange(2 * n)
    at = np.where(is_end, end[op], ts[op])  # each point's time
    on_thread = thread[op]
    pair = np.flatnonzero(on_thread[1:] == on_thread[:-1])  # point `pair` → point `pair + 1`
    del on_thread
    nxt = pair + 1
    a, b, a_end, b_end = op[pair], op[nxt], is_end[pair], is_end[nxt]
    w = at[nxt] - at[pair]
    src, dst = node[pair], node[nxt]
    del at, node, pair, nxt
    blocking = host["blocking"].to_numpy(bool)
    top_enter = ~b_end & (depth[b] == 0)
    zero = top_enter | (b_end & blocking[b])
    attr = np.where(a_end, np.where(b_end, b, parent[a]), a)
    np.maximum(w, 0.0, out=w)
    w[zero] = 0.0
    cpu = ~top_enter
    edges.add(src[cpu], dst[cpu], w[cpu], CPU, attr[cpu])
    edges.add(src[top_enter], dst[top_enter], w[top_enter], DEPEND, -1)
    return tie


def _tour(parent: np.ndarray, pos: np.ndarray, size: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The ops' points (starts 0..n-1, then ends n..2n-1) in call-stack order: an op's start at
    its preorder position `pos`, its end after its subtree's `size` ops; at an equal position,
    starts before ends and deeper ends first. Where the preorder keeps every subtree together
    (each op inside its parent's span: always but for overlapping siblings), each point's place
    is known — 2·pos − depth for a start (the ops before it that are not its ancestors have
    ended), 2·size − 1 further for its end — else the points are sorted by that order."""
    n = len(parent)
    child = np.flatnonzero(parent >= 0)
    up = parent[child]
    if ((pos[up] < pos[child]) & (pos[child] <= pos[up] + size[up] - 1)).all():
        start = 2 * pos - depth
        order = np.empty(2 * n, np.int64)
        order[start] = np.arange(n)
        order[start + 2 * size - 1] = np.arange(n, 2 * n)
        return order
    key = np.concatenate([pos, pos + size - 1])
    # by key, then starts before ends, then deeper ends first: one sort of one combined number
    span = int(depth.max()) + 1
    is_end = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    deeper_first = np.concatenate([np.full(n, span - 1, np.int64), span - 1 - depth])
    return np.argsort(key * (2 * span) + is_end * span + deeper_first, kind="stable")


def _search(keys_sorted: np.ndarray, times_sorted: np.ndarray, key: np.ndarray, t: np.ndarray, side: str) -> np.ndarray:
    """Per query (`key`, `t`), the position of `t` among the sorted times of its key's block, as
    `searchsorted(side)` within the block gives it; with the block's start and size. One sort of
    entries and queries together: a query's position is the number of its key's entries sorted
    before it (per distinct key, a search over its block cost a pass over every query per key:
    quadratic in the devices, minutes on a trace claiming 100k)."""
    base = np.searchsorted(keys_sorted, key, "left")
    size = np.searchsorted(keys_sorted, key, "right") - base
    n = len(keys_sorted)
    is_query = np.r_[np.zeros(n, bool), np.ones(len(key), bool)]
    # equal times: "right" counts the entries at t as before the query, "left" does not
    tie = is_query if side == "right" else ~is_query
    order = np.lexsort((tie, np.concatenate([times_sorted, t]), np.concatenate([keys_sorted, key])))
    is_entry = ~is_query[order]
    before = np.empty(len(order), np.int64)
    before[order] = np.cumsum(is_entry) - is_entry
    return before[n:] - base, base, size


def last_before(keys_sorted: np.ndarray, times_sorted: np.ndarray, key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index (into the sorted arrays) of the last entry with the same key and time <= t; -1 none."""
    pos, base, _ = _search(keys_sorted, times_sorted, key, t, "right")
    return np.where(pos > 0, base + pos - 1, -1)


def first_after(keys_sorted: np.ndarray, times_sorted: np.ndarray, key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the first entry with the same key and time >= t; -1 none."""
    pos, base, size = _search(keys_sorted, times_sorted, key, t, "left")
    return np.where(pos < size, base + pos, -1)


def build_graph(
    kernels: pd.DataFrame,
    host_events: pd.DataFrame | None,
    window: tuple[str, int] | None = None,
    zero_weight_launches: bool = False,
    convention: str = "exact",
    last_step_start_us: float | None = None,
) -> Graph:
    """The dependency graph of one rank (see the module docstring). `zero_weight_launches` adds
    the causal launch → activity edges HTA leaves out where the stream was busy (weight 0), so
    that a what-if can move work earlier only as far as its launch allows. `convention="hta"`
    builds it as HTA 0.5.0 does (see `like_hta`), to hold the numbers against HTA's; there
    `last_step_start_us` (the trace fact of summary.json, GPU-side steps included) is where HTA's
    loader cuts the trace, found from the host ranges when not given."""
    notes: list[str] = []
    if convention not in CONVENTIONS:
        raise AtlasError(None, f"critical path convention {convention!r}: expected one of {', '.join(CONVENTIONS)}")
    hta = convention == "hta"
    if host_events is None:
        host_events = _empty_host()
        notes.append("no host events recorded (ingested before they were kept): GPU timeline only; re-run atlas ingest")
    if hta:
        kernels, host_events = like_hta(kernels, host_events, notes, last_step_start_us)
    try:
        start, stop, label = window_range(host_events, window)
    except AtlasError as error:
        if hta and any("last ProfilerStep" in note for note in notes):
            why = "HTA's convention leaves the last ProfilerStep out"
            raise AtlasError(error.source, f"{error.problem} ({why})") from None
        raise
    # CPU ops and runtime calls are nodes, and annotations that load data (HTA's data_load_events)
    loading = (host_events["kind"] == "annotation").to_numpy() & name_mask(host_events["name"], DATA_LOADING.search)
    is_range = host_events["kind"].isin(["cpu_op", "runtime"]).to_numpy() | loading
    is_range &= host_events["thread"].to_numpy() >= 0
    ts = host_events["ts_us"].to_numpy()
    in_window = (ts >= start) & (ts <= stop)
    is_node = is_range & in_window
    host_events = host_events.assign(node_parent=_node_parents(host_events, is_node))
    host = host_events.take(np.flatnonzero(is_node))  # a new frame (a mask then .copy() copies twice)
    row_to_event = np.full(len(host_events) + 1, -1, np.int64)
    row_to_event[np.flatnonzero(is_node)] = np.arange(len(host))
    host["node_parent"] = row_to_event[host["node_parent"].to_numpy()]
    host["blocking"] = name_mask(host["name"], (BLOCKING_HTA if hta else BLOCKING).match)
    n_host = len(host)

    gpu = _gpu_rows(kernels, host, n_host, start, stop, notes)
    if hta:
        launch = gpu["launch_event"].to_numpy()
        known = name_mask(host["name"], LAUNCH_HTA.match) if n_host else np.zeros(0, bool)
        gpu["launch_event"] = np.where((launch >= 0) & known[np.maximum(launch, 0)], launch, -1)
    elif n_host:  # HTA counts every cudaMemcpyAsync as a wait
        host["blocking"] = _waited_copies(host, gpu)
    edges = _Edges()
    host_tie = _host_chains(host, edges)
    syncs = host_events[(host_events["kind"] == "sync").to_numpy() & (ts <= stop) & (host_events["end_us"] >= start)]
    if len(syncs):
        _sync_edges(syncs, gpu, host, edges)  # first: an event wait decides how its kernel's start is explained
    elif not hta:  # HTA adds no sync edge without cuda_sync events
        _runtime_wait_edges(gpu, host, edges, notes)  # first, as `_sync_edges`: it explains its kernels' starts
        _fallback_sync_edges(gpu, host, n_host, edges)
        if n_host and name_mask(host["name"], _RELEASED_BY_GPU.match).any():  # said where it has such a sync
            notes.append(
                "no cuda_sync events in the trace: host syncs released by the GPU activity that ended last while "
                "they ran, on the device their thread launched on last (a stream sync: on the streams it launched "
                f"onto since its previous sync, a tie within {RELEASE_TIE_US:g} µs to the one it launched onto last; "
                "a device sync: by each stream's last)"
            )
    limit = np.inf if hta else KERNEL_GAP_LIMIT_US  # HTA 0.5.0 chains a stream across any gap
    explained = _gpu_edges(
        gpu, host, n_host, edges, zero_weight_launches, notes, limit, queue_test=hta, stream_order=not hta
    )
    if not hta:
        _own_copy_edges(gpu, host, edges)
        if not len(syncs):
            _fallback_stream_waits(gpu, host, explained, edges, notes)
    src, dst, weight, kind, event, causal = edges.arrays()
    node_ts = np.empty(2 * (n_host + len(gpu)))
    node_ts[0 : 2 * n_host : 2] = host["ts_us"].to_numpy()
    node_ts[1 : 2 * n_host : 2] = np.maximum(host["end_us"].to_numpy(), host["ts_us"].to_numpy())
    node_ts[2 * n_host :: 2] = gpu["ts_us"].to_numpy()
    node_ts[2 * n_host + 1 :: 2] = gpu["end_us"].to_numpy()
    window_facts = {"name": label, "start_us": None if start == -np.inf else start}
    window_facts["end_us"] = None if stop == np.inf else stop
    tie = np.zeros(len(node_ts), np.int64)
    tie[: 2 * n_host] = host_tie
    weight, reached = _held_to_time(node_ts, src, dst, weight, causal, notes)
    host = host.reset_index(drop=True)
    graph = Graph(node_ts, src, dst, weight, kind, event, n_host, host, gpu, window_facts, notes, tie, causal)
    graph.node_reached = reached
    return graph


def _held_to_time(
    node_ts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    weight: np.ndarray,
    causal: np.ndarray,
    notes: list[str],
) -> tuple[np.ndarray, np.ndarray | None]:
    """The weights, each held to the time its edge moves past what its source has reached, where
    some edge goes back in time or weighs more than the time it spans — else as they are.

    Ops that overlap a sibling on their thread without nesting in it (a Python range crossing an
    op, a compiled region starting inside an op it outlives) put one thread in two places: its
    call-stack walk goes back in time, and the time the two share would count twice — a path
    longer than the run. Each node's reached time is the latest time of any node it can be
    reached from (its own at least), and an edge weighs no more than it advances that time, so
    the weights along any path sum to at most the run's span. Real traces have no such edge
    (none in the 17 shared ones): this costs them one comparison. Returns the weights and each
    node's reached time (None where nothing was held)."""
    step = node_ts[dst] - node_ts[src]
    if not len(src) or not ((step < 0) | (weight > step)).any():
        return weight, None
    reached = _reached(node_ts, src[~causal], dst[~causal])  # a what-if's causal edges move no time
    held = np.minimum(weight, np.maximum(reached[dst] - reached[src], 0.0))
    back = int(np.count_nonzero(step < 0))
    notes.append(
        f"{back} graph edges go back in time (ops overlapping a sibling on their thread without nesting in it): "
        "each edge weighs at most the time it moves past the latest time its path has reached, so no time counts twice"
    )
    return held, reached


def _reached(node_ts: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Each node's latest time over the nodes it can be reached from, itself included: carried
    along the edges in topological order (Kahn's), each edge once. Nodes on a cycle (clocks that
    disagree; never a call stack) are left at what their edges from outside it carried, then
    passed round it a bounded number of times."""
    n = len(node_ts)
    by_src = np.argsort(src, kind="stable")
    first = np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
    targets = dst[by_src].tolist()
    indegree = np.bincount(dst, minlength=n)
    waiting = indegree.tolist()
    reached = node_ts.tolist()
    ready = np.flatnonzero(indegree == 0).tolist()
    while ready:
        u = ready.pop()
        at = reached[u]
        for v in targets[first[u] : first[u + 1]]:
            if at > reached[v]:
                reached[v] = at
            waiting[v] -= 1
            if not waiting[v]:
                ready.append(v)
    left = np.asarray(waiting)[dst] > 0
    cyclic = list(zip(src[left].tolist(), dst[left].tolist(), strict=True))
    for _ in range(50 if cyclic else 0):
        changed = False
        for u, v in cyclic:
            if reached[u] > reached[v]:
                reached[v] = reached[u]
                changed = True
        if not changed:
            break
    return np.asarray(reached)


def _empty_host() -> pd.DataFrame:
    cols = {"kind": pd.Categorical([]), "name": pd.Categorical([]), "thread": np.empty(0, np.int64)}
    cols |= {c: np.empty(0) for c in ("ts_us", "end_us")}
    cols |= {c: np.empty(0, np.int64) for c in ("correlation", "parent", "device", "stream", "wait_stream")}
    cols["wait_correlation"] = np.empty(0, np.int64)
    return pd.DataFrame(cols)


def _gpu_rows(
    kernels: pd.DataFrame, host: pd.DataFrame, n_host: int, start: float, stop: float, notes: list[str]
) -> pd.DataFrame:
    """The GPU activities of the window (launched in it; without a launch, started in it), with
    the event index of their launch call (-1 none) and, where activities were launched before the
    window, `queued_until_us`: how long those kept each one's stream busy before it started (they
    are no nodes, yet an activity queued behind one did not wait for its launch)."""
    launch_ts = kernels["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
    ts = kernels["ts_us"].to_numpy(np.float64)
    when = np.where(np.isnan(launch_ts), ts, launch_ts)
    picked = np.flatnonzero((when >= start) & (when <= stop))
    earlier = when < start
    gpu = kernels.take(picked)
    if earlier.any() and len(picked):
        gpu["queued_until_us"] = _queued_until(kernels, ts, earlier)[picked]
    gpu["end_us"] = gpu["ts_us"] + gpu["dur_us"]
    gpu["device"] = gpu["device"].fillna(-1).astype(np.int64) if "device" in gpu else -1
    gpu["stream"] = gpu["stream"].fillna(-1).astype(np.int64)
    # the launch call: runtime event with the kernel's correlation (a graph launch owns all its kernels)
    runtime = host[(host["kind"] == "runtime").to_numpy() & (host["correlation"].to_numpy() >= 0)]
    call_of = pd.Series(np.flatnonzero((host["kind"] == "runtime").to_numpy() & (host["correlation"].to_numpy() >= 0)))
    call_of.index = runtime["correlation"].to_numpy()
    call_of = call_of[~call_of.index.duplicated()]
    corr = gpu["correlation"].fillna(-1).astype(np.int64).to_numpy()
    gpu["launch_event"] = call_of.reindex(corr).fillna(-1).astype(np.int64).to_numpy()
    _in_stream_order(gpu, host, notes)
    gpu = gpu.sort_values(["ts_us"], kind="stable").reset_index(drop=True)
    gpu["event"] = n_host + np.arange(len(gpu))
    return gpu


def _stream_keys(table: pd.DataFrame) -> np.ndarray:
    """Each activity's stream as one number (device, stream; -1 where missing)."""
    device = table["device"].fillna(-1).to_numpy(np.int64) if "device" in table else np.full(len(table), -1)
    return device * (1 << 32) + table["stream"].fillna(-1).to_numpy(np.int64)


def _queued_until(kernels: pd.DataFrame, ts: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """Per activity, the latest end of the `earlier` activities (launched before the window) that
    started on its stream before it (at the same time: first) — -inf for none."""
    key = _stream_keys(kernels)
    end = ts + kernels["dur_us"].to_numpy(np.float64)
    order = np.lexsort((~earlier, ts, key))  # by stream, start; an earlier activity first at a tie
    reach = pd.Series(np.where(earlier[order], end[order], -np.inf))
    held = reach.groupby(key[order]).cummax().to_numpy()  # by each activity, itself included
    before = np.full(len(ts), -np.inf)
    same = key[order[1:]] == key[order[:-1]]
    before[order[1:][same]] = held[:-1][same]
    return before


def _in_stream_order(gpu: pd.DataFrame, host: pd.DataFrame, notes: list[str]) -> None:
    """The activities' times as a stream runs them, in place: none starts before its launch call
    (a clock disagreement between host and GPU) nor before the activities started earlier on
    its stream have ended (a stream runs one at a time: an overlap is the trace's, duplicated
    or mistimed events). Their time before that is not on any path: a path then covers no more
    time than the trace (every activity at one start on one stream made the path of a 43 s trace
    689 s long, the sum of their durations; activities starting 1 s before their launch, 84 s).
    A kernel ending before then is an instant there."""
    if len(gpu) == 0:
        return
    ts, end = gpu["ts_us"].to_numpy(np.float64), gpu["end_us"].to_numpy(np.float64)
    launch = gpu["launch_event"].to_numpy()
    launch_ts = np.full(len(gpu), -np.inf)
    if len(host):
        launched = np.flatnonzero(launch >= 0)
        launch_ts[launched] = host["ts_us"].to_numpy(np.float64)[launch[launched]]
    early = ts < launch_ts
    start = np.maximum(ts, launch_ts)
    reach = np.maximum(end, start)  # how far each activity holds its stream
    key = gpu["device"].to_numpy() * (1 << 32) + gpu["stream"].to_numpy()
    order = np.lexsort((np.arange(len(gpu)), ts, key))
    held = pd.Series(reach[order]).groupby(key[order]).cummax().to_numpy()  # by each activity, up to it
    before = np.full(len(gpu), -np.inf)
    same = key[order[1:]] == key[order[:-1]]
    before[order[1:][same]] = held[:-1][same]  # by the activities before it on its stream
    overlapped = before > start
    start = np.maximum(start, before)
    if early.any():
        notes.append(
            f"{int(early.sum())} GPU activities start before their launch call (host and GPU clocks disagree): "
            "their time before it is not on the path"
        )
    if overlapped.any():
        notes.append(
            f"{int(overlapped.sum())} GPU activities start before the one before them on their stream ends: "
            "their time overlapping it is not on the path (a stream runs one activity at a time)"
        )
    if early.any() or overlapped.any():
        gpu["ts_us"] = start
        gpu["end_us"] = np.maximum(end, start)
        gpu["dur_us"] = gpu["end_us"] - gpu["ts_us"]


def _gpu_edges(
    gpu: pd.DataFrame,
    host: pd.DataFrame,
    n_host: int,
    edges: _Edges,
    zero_launch: bool,
    notes: list[str],
    limit: float = KERNEL_GAP_LIMIT_US,
    queue_test: bool = False,
    stream_order: bool = True,
) -> np.ndarray:
    """Duration, launch and stream-order edges of the activities; returns which activities' starts
    they explain (a launch or kernel-kernel edge, or an event wait). A launch or stream gap of
    `limit` µs or more is not overhead but a wait the trace does not show (HTA 0.5.0: no limit).
    An activity launched onto an idle stream waited for its launch; `queue_test` (HTA's
    convention) asks besides that nothing launched later was queued behind it when it started —
    which the first activity of every burst the host runs ahead of fails, leaving it no launch
    edge, or one from the stream's previous activity across the host's own wait.
    `stream_order` (the exact convention): an activity without a kernel-kernel edge still follows
    its stream's previous activity — a zero-weight `wait` edge (the stream idled: no overhead) —
    so that no path is shorter than a stream's serial work. HTA keeps only the launch edge there:
    where the launching thread has no recorded tie to earlier work (an autograd thread), a
    stream's chain fell apart and the path was one piece of it (`mi210_gpu_only`: 3.27 ms
    against 5.34 ms of kernels run one after another on one stream)."""
    n = len(gpu)
    if n == 0:
        return np.zeros(0, bool)
    ev = gpu["event"].to_numpy()
    ts, end = gpu["ts_us"].to_numpy(), gpu["end_us"].to_numpy()
    edges.add(2 * ev, 2 * ev + 1, end - ts, GPU, ev)
    key = gpu["device"].to_numpy() * (1 << 32) + gpu["stream"].to_numpy()
    order = np.lexsort((np.arange(n), ts, key))
    prev = np.full(n, -1, np.int64)
    same = key[order[1:]] == key[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    launch = gpu["launch_event"].to_numpy()
    has_launch = launch >= 0
    launch_ts = np.where(has_launch, host["ts_us"].to_numpy()[np.maximum(launch, 0)] if n_host else np.nan, np.nan)
    prev_end = np.where(prev >= 0, end[np.maximum(prev, 0)], -np.inf)
    wait_end = gpu["wait_end_us"].to_numpy() if "wait_end_us" in gpu else np.full(n, -np.inf)
    # the queue was empty at the launch — activities launched before the window count (an
    # activity queued behind one did not wait for its launch) — (and, HTA's queue-length test,
    # nothing launched later on the stream was waiting behind it when it started)
    busy = _busy_until(gpu, prev_end)
    by_launch = has_launch & (busy < launch_ts) & (wait_end < launch_ts)
    if queue_test:
        nxt = np.full(n, -1, np.int64)
        nxt[order[:-1][same]] = order[1:][same]
        other_launch = (nxt >= 0) & (launch[np.maximum(nxt, 0)] != launch)  # a graph replay's kernels share one
        by_launch &= ~(other_launch & (np.where(nxt >= 0, launch_ts[np.maximum(nxt, 0)], np.inf) < ts))
    stuck = by_launch & (ts - launch_ts >= limit)  # not a launch latency: a wait the trace does not show
    if stuck.any():
        notes.append(
            f"{int(stuck.sum())} activities started ≥ {limit:g} µs after their launch on an idle stream "
            "(an event wait the trace does not record?): not counted as launch overhead"
        )
        m = np.flatnonzero(stuck)
        edges.add(2 * launch[m], 2 * ev[m], 0.0, WAIT, -1)
        by_launch &= ~stuck
    by_gap = ~by_launch & ~stuck & (prev >= 0) & (ts - prev_end < limit) & (wait_end < prev_end)
    m = np.flatnonzero(by_launch)
    edges.add(2 * launch[m], 2 * ev[m], np.maximum(ts[m] - launch_ts[m], 0.0), LAUNCH, ev[m])
    m = np.flatnonzero(by_gap)
    edges.add(2 * ev[prev[m]] + 1, 2 * ev[m], np.maximum(ts[m] - prev_end[m], 0.0), GAP, ev[prev[m]])
    if stream_order:  # a stream runs its activities in order, whatever explains each one's start
        m = np.flatnonzero((prev >= 0) & ~by_gap)
        edges.add(2 * ev[prev[m]] + 1, 2 * ev[m], 0.0, WAIT, -1)
    if zero_launch:  # causality for what-if: every activity waits for its launch and its stream
        m = np.flatnonzero(has_launch & ~by_launch & ~stuck)
        edges.add(2 * launch[m], 2 * ev[m], 0.0, WAIT, -1, causal=True)
        if not stream_order:
            m = np.flatnonzero((prev >= 0) & ~by_gap & ~by_launch)
            edges.add(2 * ev[prev[m]] + 1, 2 * ev[m], 0.0, WAIT, -1, causal=True)
    return by_launch | by_gap | np.isfinite(wait_end)


def _busy_until(gpu: pd.DataFrame, prev_end: np.ndarray) -> np.ndarray:
    """Until when each activity's stream was busy before it: its previous activity in the window
    (`prev_end`) or one launched before the window (`_gpu_rows`' `queued_until_us`)."""
    if "queued_until_us" not in gpu:
        return prev_end
    return np.maximum(prev_end, gpu["queued_until_us"].to_numpy(np.float64))


def _waited_copies(host: pd.DataFrame, gpu: pd.DataFrame) -> np.ndarray:
    """`blocking` with an asynchronous copy call (`ASYNC_COPY`) blocking only where it outlived a
    copy it launched — that copy ended by the call's end (pageable memory: the call returns when
    its copy is done, `_own_copy_edges`). A call whose copy ended after it returned (started after,
    to or from pinned memory: queued), or that launched none, was working, not waiting: its time
    is CPU work. Counted as a wait, three 25 µs pinned copies of a CPU-bound run fell off the path
    (51 µs of 110, 53 % "launch overhead"; campaign BV 2)."""
    blocking = host["blocking"].to_numpy(bool)
    is_async = name_mask(host["name"], ASYNC_COPY.match)
    if not is_async.any():
        return blocking
    launch = gpu["launch_event"].to_numpy()
    m = np.flatnonzero(launch >= 0)
    m = m[is_async[launch[m]]]
    m = m[gpu["end_us"].to_numpy()[m] <= host["end_us"].to_numpy()[launch[m]]]
    waited = np.zeros(len(host), bool)
    waited[launch[m]] = True
    return np.where(is_async, waited, blocking)


def _own_copy_edges(gpu: pd.DataFrame, host: pd.DataFrame, edges: _Edges) -> None:
    """A blocking call that launched an activity (a copy to or from pageable memory, a
    synchronous memcpy) returns when that activity ends: its end → the call's end (weight 0)."""
    launch = gpu["launch_event"].to_numpy()
    if len(gpu) == 0 or len(host) == 0:
        return
    blocking = host["blocking"].to_numpy(bool)
    end = gpu["end_us"].to_numpy()
    m = np.flatnonzero((launch >= 0) & blocking[np.maximum(launch, 0)])
    m = m[end[m] <= host["end_us"].to_numpy()[launch[m]]]
    edges.add(2 * gpu["event"].to_numpy()[m] + 1, 2 * launch[m] + 1, 0.0, SYNC, -1)


def _fallback_stream_waits(
    gpu: pd.DataFrame, host: pd.DataFrame, explained: np.ndarray, edges: _Edges, notes: list[str]
) -> None:
    """Without cuda_sync events: an activity whose start neither its launch nor its stream explains
    (it started long after both) waited for another stream — the activity of the device that
    ended last before it started, when that was on another stream and ended after the waiting
    one's launch and its stream's previous activity (weight 0)."""
    n = len(gpu)
    todo = np.flatnonzero(~explained)
    if n == 0 or len(todo) == 0:
        return
    dev, stream = gpu["device"].to_numpy(), gpu["stream"].to_numpy()
    ts, end = gpu["ts_us"].to_numpy(), gpu["end_us"].to_numpy()
    by_end = np.lexsort((end, dev))
    hit = last_before(dev[by_end], end[by_end], dev[todo], ts[todo])
    ok = hit >= 0
    todo, src = todo[ok], by_end[hit[ok]]
    keep = (stream[src] != stream[todo]) & _held_by(gpu, _launch_times(gpu, host), todo, end[src])
    if keep.any():
        notes.append(
            f"no cuda_sync events: {int(keep.sum())} activities that started long after their launch and their "
            "stream's previous activity taken to wait for the activity of another stream that ended last"
        )
    edges.add(2 * gpu["event"].to_numpy()[src[keep]] + 1, 2 * gpu["event"].to_numpy()[todo[keep]], 0.0, SYNC, -1)


def _call_events(host: pd.DataFrame) -> pd.Series:
    """Runtime call event by correlation."""
    runtime = np.flatnonzero((host["kind"] == "runtime").to_numpy() & (host["correlation"].to_numpy() >= 0))
    calls = pd.Series(runtime, index=host["correlation"].to_numpy()[runtime])
    return calls[~calls.index.duplicated()]


def _sync_edges(syncs: pd.DataFrame, gpu: pd.DataFrame, host: pd.DataFrame, edges: _Edges) -> None:
    """Edges from Kineto's cuda_sync events (HTA's reading of them)."""
    calls = _call_events(host)
    n = len(gpu)
    if n == 0:
        return
    ev = gpu["event"].to_numpy()
    key = gpu["device"].to_numpy() * (1 << 32) + gpu["stream"].to_numpy()
    by_start = np.lexsort((gpu["ts_us"].to_numpy(), key))
    k_sorted, ts_sorted = key[by_start], gpu["ts_us"].to_numpy()[by_start]
    name = np.asarray(syncs["name"].to_numpy(dtype=object), dtype=str)
    s_dev = syncs["device"].to_numpy()
    s_end = syncs["end_us"].to_numpy()
    call = calls.reindex(syncs["correlation"].to_numpy()).fillna(-1).astype(np.int64).to_numpy()
    # Stream Sync: the last activity started on the stream by the sync's end → the call's end
    m = (name == "Stream Sync") & (call >= 0)
    hit = last_before(k_sorted, ts_sorted, s_dev[m] * (1 << 32) + syncs["stream"].to_numpy()[m], s_end[m])
    ok = hit >= 0
    edges.add(2 * ev[by_start[hit[ok]]] + 1, 2 * call[m][ok] + 1, 0.0, SYNC, -1)
    # Context Sync: the last activity of every stream of the device
    for i in np.flatnonzero((name == "Context Sync") & (call >= 0)):
        streams = np.unique(key[gpu["device"].to_numpy() == s_dev[i]])
        hit = last_before(k_sorted, ts_sorted, streams, np.full(len(streams), s_end[i]))
        hit = hit[hit >= 0]
        edges.add(2 * ev[by_start[hit]] + 1, np.full(len(hit), 2 * call[i] + 1), 0.0, SYNC, -1)
    # Event Sync / Stream Wait Event: the last activity launched on the recorded stream before the
    # cudaEventRecord call
    record = calls.reindex(syncs["wait_correlation"].to_numpy()).fillna(-1).astype(np.int64).to_numpy()
    waits = np.flatnonzero(np.isin(name, ["Event Sync", "Stream Wait Event"]) & (record >= 0))
    if len(waits) == 0:
        return
    launched = gpu["launch_event"].to_numpy() >= 0
    if not launched.any():  # no activity tied to its launch: none is known to be waited for
        return
    l_ts = np.where(launched, host["ts_us"].to_numpy()[np.maximum(gpu["launch_event"].to_numpy(), 0)], np.nan)
    rows = np.flatnonzero(launched)
    lo = np.lexsort((l_ts[rows], key[rows]))
    lk, lt, lr = key[rows][lo], l_ts[rows][lo], rows[lo]
    rec_ts = host["ts_us"].to_numpy()[record[waits]]
    src_key = s_dev[waits] * (1 << 32) + syncs["wait_stream"].to_numpy()[waits]
    hit = last_before(lk, lt, src_key, rec_ts)
    source = np.where(hit >= 0, lr[np.maximum(hit, 0)], -1)
    is_event_sync = name[waits] == "Event Sync"
    m = is_event_sync & (source >= 0) & (call[waits] >= 0)
    edges.add(2 * ev[source[m]] + 1, 2 * call[waits][m] + 1, 0.0, SYNC, -1)
    # Stream Wait Event: the next activity launched on the waiting stream from the same thread
    m = ~is_event_sync & (source >= 0) & (call[waits] >= 0)
    if not m.any():
        return
    thread = host["thread"].to_numpy()
    l_thread = np.where(launched, thread[np.maximum(gpu["launch_event"].to_numpy(), 0)], -1)
    tk = l_thread[rows] * (1 << 40) + key[rows]
    to = np.lexsort((l_ts[rows], tk))
    w_call = call[waits][m]
    w_key = thread[w_call] * (1 << 40) + s_dev[waits][m] * (1 << 32) + syncs["stream"].to_numpy()[waits][m]
    hit = first_after(tk[to], l_ts[rows][to], w_key, host["ts_us"].to_numpy()[w_call])
    ok = hit >= 0
    dest = rows[to][hit[ok]]
    src = source[m][ok]
    keep = dest != src
    edges.add(2 * ev[src[keep]] + 1, 2 * ev[dest[keep]], 0.0, SYNC, -1)
    wait_end = np.full(n, -np.inf)
    np.maximum.at(wait_end, dest[keep], gpu["end_us"].to_numpy()[src[keep]])
    gpu["wait_end_us"] = wait_end


# event waits and records as runtime calls: what a `Stream Wait Event` cuda_sync event says, where
# the trace has none (ROCm's Kineto writes none; older CUDA Kineto neither)
_EVENT_RECORD = re.compile(r"^(cuda|hip)EventRecord(WithFlags)?$")


def _runtime_wait_edges(gpu: pd.DataFrame, host: pd.DataFrame, edges: _Edges, notes: list[str]) -> None:
    """Without cuda_sync events: a `hipStreamWaitEvent` / `cudaStreamWaitEvent` call gives the edge
    a `Stream Wait Event` gives (`_sync_edges`), its activities paired by `runtime_event_waits`:
    the activity waited for → the waiting one's start (weight 0), which then is no launch overhead
    nor kernel gap (`wait_end_us`)."""
    if len(gpu) == 0 or len(host) == 0:
        return
    launch = gpu["launch_event"].to_numpy()
    launched = launch >= 0
    at = np.maximum(launch, 0)
    launch_ts = np.where(launched, host["ts_us"].to_numpy(np.float64)[at], np.nan)
    launch_thread = np.where(launched, host["thread"].to_numpy(np.int64)[at], -1)
    src, dest, found = runtime_event_waits(gpu, launch_ts, launch_thread, host)
    if not len(src):
        return
    ts, end = gpu["ts_us"].to_numpy(), gpu["end_us"].to_numpy()
    ev = gpu["event"].to_numpy()
    edges.add(2 * ev[src] + 1, 2 * ev[dest], 0.0, SYNC, -1)
    # the wait explains the start it was followed by within KERNEL_GAP_LIMIT_US; a start longer
    # after was held by something else (the wait is inferred, not recorded): the launch and stream
    # rules, and `_fallback_stream_waits`, say what
    near = ts[dest] - end[src] < KERNEL_GAP_LIMIT_US
    wait_end = np.full(len(gpu), -np.inf)
    np.maximum.at(wait_end, dest[near], end[src[near]])
    gpu["wait_end_us"] = wait_end
    skipped = (
        f" (for {int(found.sum())} of them, whose last launch went to the waiting stream: its last onto another "
        "stream of the device, the GPU showing the wait)"
        if found.any()
        else ""
    )
    notes.append(
        f"no cuda_sync events: {counted(len(src), 'event wait', 'event waits')} recorded as runtime calls "
        "(hipStreamWaitEvent, cudaStreamWaitEvent) taken as Stream Wait Event edges: the activity its thread "
        f"launched last before the event's record{skipped} → the first it launched after the wait, on another "
        "stream"
    )


def runtime_event_waits(
    gpu: pd.DataFrame, launch_ts: np.ndarray, launch_thread: np.ndarray, host: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The event waits a trace without cuda_sync events records only as runtime calls, paired with
    the activities they join, as a `Stream Wait Event` would pair them: the positions in `gpu` of
    the activity waited for and of the waiting one, one pair per wait kept, and per pair whether
    the waited-for one was found on another stream than the thread's last launch (below). The
    critical path's edges and the idle split's recorded waits (`idle.event_wait_ends`) read these
    same pairs. `gpu`: `ts_us`, `end_us`, `device`, `stream` (and `queued_until_us`, see
    `_busy_until`); `launch_ts` / `launch_thread`: each activity's launch call's time and thread
    (NaN where it has none); `host`: the host events' `name`, `ts_us`, `thread`.

    A `hipStreamWaitEvent` / `cudaStreamWaitEvent` call names neither stream in its args: they are
    found from its thread's launches. The waited-for activity is the last its thread launched
    before the event's record call (its thread's last `hipEventRecord` / `cudaEventRecord` at or
    before the wait; the wait itself where the trace records none), the waiting one the first its
    thread launched after the wait. Where that last launch went to the waiting stream itself, the
    event was recorded on another stream (a wait for an event recorded on the waiting stream itself
    is a no-op, stream order holding it already): the waited-for activity is then its thread's
    latest launch before it onto another stream of the same device — a guess that skips launches,
    kept only where the GPU shows the wait: that activity ended after the waiting one's launch and
    its stream's previous activity (`_held_by`). Kept where they are on different streams and the
    waiting activity started no earlier than the other ended (what the GPU shows of a wait)."""
    none = np.zeros(0, np.int64)
    if len(gpu) == 0 or len(host) == 0:
        return none, none, np.zeros(0, bool)
    waits = np.flatnonzero(name_mask(host["name"], RUNTIME_STREAM_WAITS.__contains__))
    launched = np.flatnonzero(~np.isnan(launch_ts))
    if len(waits) == 0 or len(launched) == 0:
        return none, none, np.zeros(0, bool)
    h_ts, thread = host["ts_us"].to_numpy(np.float64), host["thread"].to_numpy(np.int64)
    records = np.flatnonzero(name_mask(host["name"], _EVENT_RECORD.match))
    by_record = np.lexsort((h_ts[records], thread[records]))
    hit = last_before(thread[records][by_record], h_ts[records][by_record], thread[waits], h_ts[waits])
    recorded_at = np.where(hit >= 0, h_ts[records][by_record][np.maximum(hit, 0)] if len(records) else 0.0, h_ts[waits])
    # the activities by launching thread, then launch time, then start (a graph replay's kernels share one launch)
    ts, end = gpu["ts_us"].to_numpy(np.float64), gpu["end_us"].to_numpy(np.float64)
    l_thread, l_ts = launch_thread[launched].astype(np.int64), launch_ts[launched]
    order = np.lexsort((ts[launched], l_ts, l_thread))
    rows, t_sorted, ts_sorted = launched[order], l_thread[order], l_ts[order]
    before = last_before(t_sorted, ts_sorted, thread[waits], recorded_at)
    after = first_after(t_sorted, ts_sorted, thread[waits], h_ts[waits])
    ok = (before >= 0) & (after >= 0)
    src, dest = rows[before[ok]], rows[after[ok]]
    key = _stream_keys(gpu)
    # the thread's last launch before the record went to the waiting stream: its latest launch
    # before that onto another stream of the device, where the GPU shows the wait
    own = np.flatnonzero(key[src] == key[dest])
    found = np.zeros(len(src), bool)
    if len(own):
        other = _earlier_on_another_stream(gpu, launched, l_thread, l_ts, key, src[own])
        own, other = own[other >= 0], other[other >= 0]
        held = _held_by(gpu, np.where(np.isnan(launch_ts), -np.inf, launch_ts), dest[own], end[other])
        src[own[held]] = other[held]
        found[own[held]] = True
    keep = (key[src] != key[dest]) & (ts[dest] >= end[src])
    return src[keep], dest[keep], found[keep]


def _earlier_on_another_stream(
    gpu: pd.DataFrame,
    launched: np.ndarray,
    l_thread: np.ndarray,
    l_ts: np.ndarray,
    key: np.ndarray,
    picked: np.ndarray,
) -> np.ndarray:
    """Per `picked` activity: the one its thread launched last before it onto another stream of
    its device (-1: none). `launched`: the activities with a launch, `l_thread`/`l_ts` their
    launches' thread and time; `key`: every activity's stream (`_stream_keys`)."""
    device = gpu["device"].fillna(-1).to_numpy(np.int64) if "device" in gpu else np.full(len(gpu), -1)
    # by thread, device, launch, start: the run of `picked`'s stream it is in begins right after
    # the thread's last launch onto another stream of the device
    order = np.lexsort((gpu["ts_us"].to_numpy()[launched], l_ts, device[launched], l_thread))
    rows, thread = launched[order], l_thread[order]
    run = np.r_[True, (thread[1:] != thread[:-1]) | (key[rows][1:] != key[rows][:-1])]
    run_start = np.maximum.accumulate(np.where(run, np.arange(len(rows)), 0))
    at = np.full(len(gpu), -1, np.int64)
    at[rows] = np.arange(len(rows))
    pos = at[picked]
    prior = run_start[pos] - 1
    ok = prior >= 0
    ok[ok] = (thread[prior[ok]] == thread[pos[ok]]) & (device[rows[prior[ok]]] == device[picked[ok]])
    return np.where(ok, rows[np.maximum(prior, 0)], -1)


def _launch_times(gpu: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """Each activity's launch call's time; -inf where it has none (a trace of no CPU side: none)."""
    launch = gpu["launch_event"].to_numpy()
    if not len(host):
        return np.full(len(gpu), -np.inf)
    return np.where(launch >= 0, host["ts_us"].to_numpy()[np.maximum(launch, 0)], -np.inf)


def _held_by(gpu: pd.DataFrame, launch_ts: np.ndarray, waiting: np.ndarray, until: np.ndarray) -> np.ndarray:
    """Whether each `waiting` activity's start was held until `until` by something other than its
    launch and its stream: `until` is after both its launch (`launch_ts`, per activity of `gpu`:
    -inf none) and its stream's previous activity (in the window or launched before it,
    `_busy_until`)."""
    key = _stream_keys(gpu)
    ts, end = gpu["ts_us"].to_numpy(), gpu["end_us"].to_numpy()
    order = np.lexsort((np.arange(len(gpu)), ts, key))
    prev_end = np.full(len(gpu), -np.inf)
    same = key[order[1:]] == key[order[:-1]]
    prev_end[order[1:][same]] = end[order[:-1][same]]
    return until > np.maximum(_busy_until(gpu, prev_end)[waiting], launch_ts[waiting])


# ends of two activities this close are a tie for a host sync's release (see `_fallback_sync_edges`)
RELEASE_TIE_US = 1.0
_DEVICE_SYNC = re.compile(r"^(cuda|hip)DeviceSynchronize$")
_STREAM_SYNC = re.compile(r"^(cuda|hip)StreamSynchronize$")


def _fallback_sync_edges(gpu: pd.DataFrame, host: pd.DataFrame, n_host: int, edges: _Edges) -> None:
    """Without cuda_sync events: a blocking call is released by the GPU activity that ended last
    while it ran (between its start and its end) among those it can have waited for, where the
    trace shows them: the activities of the device its thread launched on last (a thread's current
    device); for a stream sync, of the streams its thread launched onto since its previous stream
    or device sync. Ends within RELEASE_TIE_US of that last one are a tie, given to the stream the
    thread launched onto last (a stream sync returns right after its stream's work, and an
    activity of another stream may end in between). A call whose thread launched nothing before
    it is released by the activity of any device and stream that ended last while it ran."""
    if len(gpu) == 0 or n_host == 0:
        return
    calls = np.flatnonzero(name_mask(host["name"], _RELEASED_BY_GPU.match))
    if len(calls) == 0:
        return
    h_ts, thread = host["ts_us"].to_numpy(), host["thread"].to_numpy(np.int64)
    c_ts, c_thread = h_ts[calls], thread[calls]
    c_stop = host["end_us"].to_numpy()[calls] + 1e-3
    dev, end = gpu["device"].to_numpy(np.int64), gpu["end_us"].to_numpy()
    key = dev * (1 << 32) + gpu["stream"].to_numpy(np.int64)
    # the launches by thread, in time order; each call's thread's last launch at or before it
    launched = np.flatnonzero(gpu["launch_event"].to_numpy() >= 0)
    l_call = gpu["launch_event"].to_numpy()[launched]
    by_thread = np.lexsort((h_ts[l_call], thread[l_call]))
    l_rows, l_thread, l_ts = launched[by_thread], thread[l_call][by_thread], h_ts[l_call][by_thread]
    last = last_before(l_thread, l_ts, c_thread, c_ts)
    known = last >= 0
    last_row = l_rows[np.maximum(last, 0)] if len(l_rows) else np.zeros(len(calls), np.int64)
    # released by: the last to end on the call's device (any device where its thread launched nothing)
    by_stream = np.lexsort((end, key))  # the activities by stream, then end (`_ended_last`)
    src = _ended_last(dev, end, np.lexsort((end, dev)), np.where(known, dev[last_row], 0), c_stop)
    order = np.argsort(end, kind="stable")
    anywhere = np.searchsorted(end[order], c_stop, side="right") - 1
    src[~known] = np.where(anywhere[~known] >= 0, order[np.maximum(anywhere[~known], 0)], -1)
    # a stream sync: the last to end on the streams its thread launched onto since its previous sync
    names = host["name"].iloc[calls]
    streamed = name_mask(names, _STREAM_SYNC.match)
    bounds = np.flatnonzero(streamed | name_mask(names, _DEVICE_SYNC.match))  # positions in `calls`
    by_bound = np.lexsort((c_ts[bounds], c_thread[bounds]))
    bound = first_after(c_thread[bounds][by_bound], c_ts[bounds][by_bound], l_thread, l_ts)
    pos = np.full(len(l_rows), -1, np.int64)  # each launch's next sync (position in `calls`)
    pos[bound >= 0] = bounds[by_bound][bound[bound >= 0]]
    mine = (pos >= 0) & streamed[np.maximum(pos, 0)]
    pairs = pd.DataFrame({"call": pos[mine], "key": key[l_rows[mine]]}).drop_duplicates()
    p_call, p_key = pairs["call"].to_numpy(), pairs["key"].to_numpy()
    p_src = _ended_last(key, end, by_stream, p_key, c_stop[p_call])
    ok = p_src >= 0
    p_call, p_src = p_call[ok], p_src[ok]
    by_end = np.lexsort((end[p_src], p_call))
    p_call, p_src = p_call[by_end], p_src[by_end]
    final = np.r_[p_call[1:] != p_call[:-1], True] if len(p_call) else np.zeros(0, bool)
    src[p_call[final]] = p_src[final]
    # a tie: the last to end on the stream the thread launched onto last
    own = np.where(known, _ended_last(key, end, by_stream, key[last_row], c_stop), -1)
    src_end = np.where(src >= 0, end[np.maximum(src, 0)], -np.inf)
    own_end = np.where(own >= 0, end[np.maximum(own, 0)], -np.inf)
    tie = (own >= 0) & (own_end >= src_end - RELEASE_TIE_US) & (own_end >= c_ts)
    src[tie] = own[tie]
    ok = src >= 0
    ok[ok] = end[src[ok]] >= c_ts[ok]
    event = gpu["event"].to_numpy()
    edges.add(2 * event[src[ok]] + 1, 2 * calls[ok] + 1, 0.0, SYNC, -1)
    device_syncs = ~streamed & name_mask(names, _DEVICE_SYNC.match)
    devices = np.where(known, dev[last_row], -1)[device_syncs]
    _device_sync_edges(gpu, host, calls[device_syncs], devices, order, edges)


def _ended_last(keys: np.ndarray, end: np.ndarray, order: np.ndarray, key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query (`key`, `t`): the activity of that key (a device, a stream) that ended last by
    `t` (-1: none). `order`: the activities by `keys`, then `end`."""
    hit = last_before(keys[order], end[order], key, t)
    return np.where(hit >= 0, order[np.maximum(hit, 0)], -1)


def _device_sync_edges(
    gpu: pd.DataFrame,
    host: pd.DataFrame,
    device_syncs: np.ndarray,
    devices: np.ndarray,
    order: np.ndarray,
    edges: _Edges,
) -> None:
    """A device synchronisation waits for every stream of its device (`devices`: the one its
    thread launched on last, -1 where it launched nothing: every device), not only the activity
    that happened to end last: it is also released by each stream's last activity ending while it
    ran, so that a what-if speeding that one up still waits for the others (it let the call
    return before a kernel on another stream ended). `order`: the activities by end."""
    if len(device_syncs) == 0:
        return
    ends = gpu["end_us"].to_numpy()[order]
    dev = gpu["device"].to_numpy(np.int64)[order]
    key = dev * (1 << 32) + gpu["stream"].to_numpy(np.int64)[order]
    event = gpu["event"].to_numpy()[order]
    starts = np.searchsorted(ends, host["ts_us"].to_numpy()[device_syncs], side="left")
    stops = np.searchsorted(ends, host["end_us"].to_numpy()[device_syncs] + 1e-3, side="right")
    sources, targets = [], []
    for call, device, lo, hi in zip(
        device_syncs.tolist(), devices.tolist(), starts.tolist(), stops.tolist(), strict=True
    ):
        if hi - lo < 2:
            continue  # none, or only the last activity (already an edge)
        here = np.arange(lo, hi) if device < 0 else lo + np.flatnonzero(dev[lo:hi] == device)
        streams = key[here]
        # each stream's last activity ending in the call: its last position in the end order
        _, last_from_end = np.unique(streams[::-1], return_index=True)
        sources.append(event[here][len(here) - 1 - last_from_end])
        targets.append(np.full(len(last_from_end), call))
    if sources:
        edges.add(2 * np.concatenate(sources) + 1, 2 * np.concatenate(targets) + 1, 0.0, SYNC, -1)
