"""The critical path as a table: one row per path edge that carries time — what it is, when, how
long, what it is attributed to (kernel, op, category, module, host frame) and its HTA bound
bucket — with the share per bucket and the largest contributors per level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import BUCKETS, DATA_LOADING, GAP, KIND_NAMES, LAUNCH, Graph
from kernel_atlas.analysis.longest_path import Path
from kernel_atlas.classify.names import display_name
from kernel_atlas.core.texts import name_mask

SEGMENT_COLUMNS = ("seq", "kind", "bound", "start_us", "dur_us", "name", "op", "kernel", "category", "module")
SEGMENT_COLUMNS += ("frame", "rank", "stream", "thread", "event_ts_us")


def _pick(values: pd.Series | None, rows: np.ndarray, mask: np.ndarray) -> pd.Categorical:
    """`values[rows]` where `mask`, missing elsewhere, as a categorical (codes only are moved)."""
    if values is None or len(values) == 0:
        return pd.Categorical.from_codes(np.full(len(rows), -1), categories=pd.Index([], dtype=object))
    cat = values.array if isinstance(values.dtype, pd.CategoricalDtype) else pd.Categorical(values.iloc[rows[mask]])
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = np.where(mask, cat.codes[rows], -1)
    else:
        codes = np.full(len(rows), -1, np.int64)
        codes[mask] = cat.codes
    return pd.Categorical.from_codes(codes, categories=cat.categories.astype(object))


def _either(mask: np.ndarray, a: pd.Categorical, b: pd.Categorical) -> pd.Categorical:
    """`a` where `mask`, else `b`."""
    cats = pd.Index(a.categories.append(b.categories).unique(), dtype=object)
    ca, cb = cats.get_indexer(a.categories), cats.get_indexer(b.categories)
    codes = np.where(mask, np.where(a.codes >= 0, ca[np.maximum(a.codes, 0)] if len(ca) else -1, -1), -1)
    codes = np.where(mask, codes, np.where(b.codes >= 0, cb[np.maximum(b.codes, 0)] if len(cb) else -1, -1))
    return pd.Categorical.from_codes(codes, categories=cats)


def _const(mask: np.ndarray, text: str) -> pd.Categorical:
    return pd.Categorical.from_codes(np.where(mask, 0, -1), categories=pd.Index([text], dtype=object))


def segments(graph: Graph, path: Path, rank: int = 0, weight: np.ndarray | None = None) -> pd.DataFrame:
    """One row per path edge that carries time: what it is, when, how long, and what it is
    attributed to (kernel, op, category, module, host frame)."""
    w = graph.weight if weight is None else weight
    edges = path.edges[w[path.edges] > 0] if len(path.edges) else path.edges
    kind = graph.kind[edges]
    ev = graph.event[edges]
    n_host = graph.n_host
    is_gpu = ev >= n_host
    is_host = (ev >= 0) & ~is_gpu
    gi = np.where(is_gpu, ev - n_host, 0)
    hi = np.where(is_host, ev, 0)
    gpu, host = graph.gpu, graph.host

    def gcol(name: str) -> pd.Categorical:
        return _pick(gpu.get(name), gi, is_gpu)

    host_name = _pick(host["name"] if len(host) else None, hi, is_host)
    loading = is_host & name_mask(host["name"], DATA_LOADING.search)[hi] if len(host) else np.zeros(len(ev), bool)
    category = gcol("category")
    communication = is_gpu & (np.asarray(category.astype(object)) == "communication")
    bound = np.select(
        [kind == LAUNCH, kind == GAP, communication, is_gpu, loading],
        [4, 3, 2, 1, 5],
        0,
    )
    ranks = np.full(len(edges), rank, np.int64)
    if "rank" in host and len(gpu):  # a joint graph of several ranks (critical_ranks.join_ranks)
        host_rank = host["rank"].to_numpy()[hi] if len(host) else rank
        ranks = np.where(is_gpu, gpu["rank"].to_numpy()[gi], host_rank)
    thread = host["thread"].to_numpy()[hi] if len(host) else np.zeros(len(edges), np.int64)
    stream = gpu["stream"].to_numpy()[gi] if len(gpu) else np.zeros(len(edges), np.int64)
    kernel = gcol("name")
    host_ts = host["ts_us"].to_numpy()[hi] if len(host) else np.zeros(len(edges))
    gpu_ts = gpu["ts_us"].to_numpy()[gi] if len(gpu) else np.zeros(len(edges))
    event_ts = np.where(is_gpu, gpu_ts, np.where(is_host, host_ts, np.nan))
    return pd.DataFrame(
        {
            "seq": np.arange(len(edges)),
            "kind": pd.Categorical.from_codes(kind, categories=list(KIND_NAMES)),
            "bound": pd.Categorical.from_codes(bound, categories=list(BUCKETS)),
            "start_us": graph.node_ts[graph.src[edges]],
            "dur_us": w[edges],
            "name": _either(is_gpu, kernel, host_name),
            "op": _either(is_gpu, gcol("op_mapping"), host_name),
            "kernel": kernel,
            "category": _either(
                is_gpu, category, _either(loading, _const(loading, "data loading"), _const(~is_gpu, "host"))
            ),
            "module": gcol("module"),
            "frame": _either(is_gpu, gcol("launcher"), host_name),
            "rank": ranks,
            "stream": pd.Series(np.where(is_gpu, stream, 0), dtype="Int64").where(is_gpu),
            "thread": pd.Series(np.where(is_host, thread, 0), dtype="Int64").where(is_host),
            "event_ts_us": event_ts,
        }
    )


def breakdown_pct(segs: pd.DataFrame) -> dict[str, float]:
    """Share of the path's length per HTA bound bucket (every bucket present, summing to 100)."""
    total = float(segs["dur_us"].sum())
    by = segs.groupby("bound", observed=True)["dur_us"].sum()
    return {b: (round(100.0 * float(by.get(b, 0.0)) / total, 2) if total > 0 else 0.0) for b in BUCKETS}


def breakdown_us(segs: pd.DataFrame) -> dict[str, float]:
    """Time on the path per HTA bound bucket, µs (every bucket present, summing to its length): the
    segments' sums, which a finding capped by the path's communication reads — its share
    `breakdown_pct` is rounded, and 3,140 µs × 9.55 % had capped at 299.87 µs the 300.0 µs of
    communication segments."""
    by = segs.groupby("bound", observed=True)["dur_us"].sum()
    return {b: round(float(by.get(b, 0.0)), 3) for b in BUCKETS}


def top_entries(segs: pd.DataFrame, by: str, n: int = 10) -> list[dict[str, Any]]:
    """The largest contributors to the path at one level (`op`, `kernel`, `category`, …): a name
    as text, a rank as the integer every other rank field of report.json is."""
    total = float(segs["dur_us"].sum())
    # missing keys are no group (groupby drops them): no copy of the path's rows per level
    grouped = segs.groupby(by, observed=True)["dur_us"].agg(["sum", "count"]).sort_values("sum", ascending=False)
    key: Callable[[Any], Any] = int if by == "rank" else str
    return [
        {
            by: key(k),
            "path_us": round(float(r["sum"]), 3),
            "segments": int(r["count"]),
            "pct": round(100.0 * float(r["sum"]) / total, 2) if total else 0.0,
        }
        for k, r in grouped.head(n).iterrows()
    ]


# a path that leaves more than this share of its window's events' time outside it is said in a note;
# so is a path on which more than this share of the time it spans is weighed by none of its edges
UNCOVERED_NOTE_PCT = 5.0


def path_span(graph: Graph, path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The part of the window the path covers — its first and last point against the first and
    last point of the window's events (`covered_pct`) — and the time between those points that
    none of its edges weighs (`unweighted_us`: a host thread between top-level ops — Python outside
    any op, or idle — or blocked in a sync, an activity that started long after its launch on an
    idle stream — waiting for what the trace does not record —, a stream idle between
    activities); with a note where either leaves out more than
    UNCOVERED_NOTE_PCT, saying where the path starts and ends and why the rest is not on it, or
    which wait on it is the longest. None and no note for an empty path or graph."""
    if graph.n_nodes == 0 or len(path.edges) == 0:
        return None, []
    ts = graph.node_ts
    lo, hi = float(np.min(ts)), float(np.max(ts))
    first, last = int(graph.src[path.edges[0]]), int(graph.dst[path.edges[-1]])
    start, end = float(ts[first]), float(ts[last])
    extent = hi - lo
    pct = 100.0 * (end - start) / extent if extent > 0 else 100.0
    # each edge's time less its weight: what the path spans that no edge on it accounts for (the
    # time reached: where ops overlap, the time their overlap shares is accounted for once)
    reached = graph.reached_ts()
    apart = reached[graph.dst[path.edges]] - reached[graph.src[path.edges]]
    unweighted = np.maximum(apart - graph.weight[path.edges], 0.0)
    span = {
        "start_us": round(start, 3),
        "end_us": round(end, 3),
        "events_start_us": round(lo, 3),
        "events_end_us": round(hi, 3),
        "covered_pct": round(min(pct, 100.0), 2),
        "unweighted_us": round(float(unweighted.sum()), 3),
    }
    notes = []
    if 100.0 - pct > UNCOVERED_NOTE_PCT:
        notes.append(
            f"the path covers {start - lo:.1f}–{end - lo:.1f} µs of the window's {extent:.1f} µs of events "
            f"({pct:.1f} %). It starts at {point_words(graph, first)}{_first_of_thread(graph, first, lo)}; it ends at "
            f"{point_words(graph, last)}. The time outside it is work that no recorded dependency ties to it (another "
            "host thread or stream: a launch, a sync or stream order would), work lighter than it, or idle time"
        )
    if end > start and 100.0 * float(unweighted.sum()) / (end - start) > UNCOVERED_NOTE_PCT:
        worst = int(np.argmax(unweighted))
        edge = int(path.edges[worst])
        notes.append(
            f"{float(unweighted.sum()):.1f} µs of the {end - start:.1f} µs the path spans "
            f"({100.0 * float(unweighted.sum()) / (end - start):.1f} %) is time no edge on it weighs — a host "
            "thread between top-level ops (running Python outside any op, or idle: the trace does not say) or "
            "blocked in a sync, a stream waiting for what the trace does not record — and `total_us` and the "
            "breakdown leave it out; the longest: "
            f"{float(unweighted[worst]):.1f} µs from {point_words(graph, int(graph.src[edge]))} to "
            f"{point_words(graph, int(graph.dst[edge]))}"
        )
    return span, notes


def point_words(graph: Graph, node: int) -> str:
    """A node as words: the start or end of which event, where (host thread or GPU stream)."""
    event, edge = node // 2, "end" if node % 2 else "start"
    if event < graph.n_host:
        row = graph.host.iloc[event]
        return f"the {edge} of {str(row['name'])[:60]} (host thread {_thread_ordinal(graph, event)})"
    row = graph.gpu.iloc[event - graph.n_host]
    return f"the {edge} of {display_name(str(row['name']))[:60]} (stream {int(row['stream'])})"


def _thread_ordinal(graph: Graph, event: int) -> int:
    """The host thread of host event `event`, numbered from 0 by when each thread's first event
    starts (of its rank, in a joint graph of several ranks): the host table's `thread` is a code in
    the order ingest met the threads in the file, so a note had named the same thread 1 of the
    trace as written and 0 of its events shuffled."""
    thread = graph.host["thread"].to_numpy()
    mine = np.ones(len(thread), bool)
    if "rank" in graph.host:  # a joint graph of several ranks: their threads are numbered alike
        rank = graph.host["rank"].to_numpy()
        mine = rank == rank[event]
    firsts = pd.Series(graph.host["ts_us"].to_numpy(np.float64)[mine]).groupby(thread[mine]).min()
    own = firsts.loc[thread[event]]
    return int(np.count_nonzero(firsts.to_numpy() < own))


def _first_of_thread(graph: Graph, node: int, lo: float) -> str:
    """Why the path starts late where its first point is its host thread's first recorded event."""
    event = node // 2
    if event >= graph.n_host or graph.node_ts[node] <= lo:
        return ""
    thread = graph.host["thread"].to_numpy()
    mine = thread == thread[event]
    if "rank" in graph.host:  # a joint graph of several ranks: their threads are numbered alike
        rank = graph.host["rank"].to_numpy()
        mine &= rank == rank[event]
    if graph.host["ts_us"].to_numpy()[mine].min() < graph.host["ts_us"].to_numpy()[event]:
        return ""
    return (
        ", its thread's first recorded event: nothing in the trace ties that thread to the work before it "
        "(what it waited for is not recorded, e.g. an autograd thread in a trace without its ops)"
    )
