"""Why the GPU waits: idle gaps per stream and per device, split as HTA splits them, and what
the host was doing during the host waits.

Definitions (those of HTA's `get_idle_time_breakdown`, docs/waits.md): on one stream,
activities in start order; the gap before an activity runs from the end of the previous one to
its start. A gap is
1. `host_wait` when the activity's launch call began after the previous activity ended (the CPU
   had not enqueued it yet); else
2. `kernel_wait` when it is shorter than `kernel_wait_us`; else
3. `other` (waiting on an event, another stream, a synchronisation...).
Per device the same rules apply to the gaps of the union of its streams.

A host wait lasts until the launch, not until the start: an activity that a recorded event wait
held past its launch (a `Stream Wait Event` cuda_sync event of the host events, or where the
trace has none a `hipStreamWaitEvent` / `cudaStreamWaitEvent` call, as the critical path pairs
it: `EVENT_WAIT_END`),
or that starts LATE_START_US or more after its launch call (no launch's latency: the critical
path's limit too), had been enqueued while the stream sat idle, and waited for something else —
the event, or work the trace does not record. Exact mode splits such a gap at the launch: the
host wait before it, and the rest judged as the gap of an activity already enqueued (`other`;
`kernel_wait` if shorter than `kernel_wait_us`). A launch 0.04 ms into a run whose kernel started
463 ms later, while the host sat in a copy waiting on the GPU, had been a 463 ms host wait; a
kernel launched 20 µs after its stream went idle and held 250 µs by a recorded wait on another
stream's GEMM, a 270 µs one. The threshold is for waits the trace does not record: a recorded
one splits the gap at any length. HTA's convention keeps the gap whole.

Exact mode (the default) uses the trace's timestamps and every activity; overlapping activities
on one stream leave no gap. `hta=True` reproduces HTA's own numbers: timestamps rounded as HTA's
parser rounds them (start up, end down to the µs), the previous activity is the one that started
last (gaps may be negative when they overlap), and in traces with several `ProfilerStep`s only
the activities launched before the last step starts. Both are always computed: the report's
breakdown in the chosen convention (`basis`) and the other one's beside it (`alternate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import KERNEL_GAP_LIMIT_US, first_after, last_before, runtime_event_waits
from kernel_atlas.core.groups import distinct_codes, group_numbers, group_sums
from kernel_atlas.ingest.host_activity import BETWEEN_OPS

CATEGORIES = ("host_wait", "kernel_wait", "other")
KERNEL_WAIT_US = 30.0
# a launch-to-start this long or longer is no launch's latency but a wait the trace does not show:
# the critical path's limit (HTA's KERNEL_KERNEL_DELAY_THRESHOLD_US), so that the two read one gap alike
LATE_START_US = KERNEL_GAP_LIMIT_US
NO_CAUSE = "(not recorded: re-run `atlas ingest`)"
# A frame column (not in kernels.parquet: `with_event_waits` adds it from the host events): per
# activity, the end of the activity a recorded event wait made it wait for, NaN where none is
# recorded. An activity it held past its launch waited for the event from the launch on, not for
# the host (`gaps`), and not in its stream's queue (`launches`).
EVENT_WAIT_END = "event_wait_end_us"
BREAKDOWN_COLUMNS = ["rank", "device", "stream", "category", "idle_us", "count", "pct"]
CAUSE_COLUMNS = ["rank", "device", "frame", "module", "gaps", "idle_us", "pct"]
# What each convention means, in report.json beside the breakdown of the other one.
CONVENTIONS = {
    "exact": "exact timestamps, every activity, gaps from the latest end so far on the stream (never negative)",
    "hta": "HTA 0.5.0's get_idle_time_breakdown: timestamps rounded to the µs (start up, end down), with two or "
    "more ProfilerSteps only activities launched before the last one, gaps from the end of the activity that "
    "started last (negative when they overlap; count includes every consecutive pair); per (rank, device, "
    "stream), where HTA groups a trace's activities by stream alone (the two differ only where one trace runs "
    "one stream id on several devices)",
}
# named in the `hta` convention's text, of the streams HTA would merge across devices (`hta_convention`)
SHARED_STREAMS_SHOWN = 3


def hta_convention(breakdown: pd.DataFrame) -> str:
    """CONVENTIONS["hta"], and where one rank's streams of `breakdown` (HTA's: `idle_breakdown`
    with hta=True, one row per stream and category) have one id on several devices, which: HTA,
    grouping a trace by stream alone, would take them as one stream (a single-process multi-GPU
    ROCm trace numbers each device's streams from 0), while idle_hta.parquet keeps them apart —
    its numbers of those streams are then not HTA's."""
    keys = breakdown.loc[breakdown["stream"].notna(), ["rank", "stream", "device"]].astype("float64")
    keys = keys.drop_duplicates()  # a few rows per stream: the breakdown, not the activities
    shared = keys.groupby(["rank", "stream"], sort=True)["device"].agg(list)
    shared = shared[shared.map(len) > 1]
    if shared.empty:
        return CONVENTIONS["hta"]

    def device(value: float) -> str:
        return "unknown" if np.isnan(value) else str(int(value))

    named = [
        f"rank {int(rank)} stream {int(stream)} on devices {', '.join(device(d) for d in np.sort(devices))}"
        for (rank, stream), devices in shared.head(SHARED_STREAMS_SHOWN).items()
    ]
    more = len(shared) - len(named)
    return (
        f"{CONVENTIONS['hta']}. Here one stream id runs on several devices ({'; '.join(named)}"
        f"{f'; and {more:,} more' if more > 0 else ''}): HTA would merge each into one stream, these numbers "
        "keep them apart"
    )


def other_basis(basis: str) -> str:
    """The convention computed beside `basis` (`exact` ↔ `hta`)."""
    return "exact" if basis == "hta" else "hta"


@dataclass
class IdleAnalysis:
    breakdown: pd.DataFrame  # idle.parquet
    causes: pd.DataFrame  # idle_causes.parquet
    facts: dict[str, Any] = field(default_factory=dict)
    # the other convention's breakdown: idle_hta.parquet (idle_exact.parquet with hta=True)
    alternate: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BREAKDOWN_COLUMNS))


def start_order(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row positions sorted by group (`keys`, missing values as one group), start time and trace
    order, and the group id of each sorted row."""
    key_frame = pd.DataFrame({k: frame[k].astype("float64").fillna(-1).to_numpy() for k in keys})
    group = key_frame.groupby(keys, sort=False).ngroup().to_numpy()
    order = np.lexsort((np.arange(len(frame)), frame["ts_us"].to_numpy(np.float64), group))
    return order, group[order]


def gaps(
    frame: pd.DataFrame, per_stream: bool, kernel_wait_us: float = KERNEL_WAIT_US, hta: bool = False
) -> pd.DataFrame:
    """One row per activity that follows another on its stream (or device): `gap_us` (start
    minus the previous end), `category` and `host_us`, indexed like `frame`. Exact mode keeps
    only real gaps (> 0) and measures from the latest end so far; HTA mode (per stream) measures
    from the previous activity's end and keeps every pair, negative gaps included.

    A gap split at its activity's launch (exact mode: a recorded event wait held the activity
    past its launch — `EVENT_WAIT_END` after it —, or the launch came LATE_START_US or more
    before the start, see the module docstring) has the category of the part after the launch,
    and `host_us` is the host wait before it; every other gap has `host_us` 0 (a `host_wait` gap
    is host wait whole). A split gap is the activity's wait for something else than the host (an
    event, or what the trace does not show): no launch-bound stretch runs through it
    (`launches.graph_candidates`)."""
    keys = ["rank", "device", "stream"] if per_stream else ["rank", "device"]
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "gap_us", "category", "host_us"])
    start = frame["ts_us"].to_numpy(np.float64)
    end = start + frame["dur_us"].to_numpy(np.float64)
    if "end_us" in frame:  # HTA's rounded ends
        end = frame["end_us"].to_numpy(np.float64)
    order, group = start_order(frame, keys)
    g = pd.Series(group)
    ends = pd.Series(end[order])
    like_hta = hta and per_stream  # HTA has no device-level breakdown: the union is always exact
    prev = (ends.groupby(g).shift() if like_hta else ends.groupby(g).cummax().groupby(g).shift()).to_numpy()
    gap = start[order] - prev
    launch = frame["launch_ts_us"].to_numpy(np.float64)[order]
    host_wait = launch > prev  # NaN (no launch, first activity) compares False
    category = np.where(host_wait, 0, np.where(gap < kernel_wait_us, 1, 2))
    host_us = np.zeros(len(gap))
    if not hta:
        queued = start[order] - launch  # launch call to start: the stream held the activity
        late = queued >= LATE_START_US  # a wait the trace does not record, by its length alone
        if EVENT_WAIT_END in frame:  # a recorded one: the activity was held past its launch, at any length
            late |= frame[EVENT_WAIT_END].to_numpy(np.float64, na_value=np.nan)[order] > launch
        split = host_wait & late
        category = np.where(split, np.where(queued < kernel_wait_us, 1, 2), category)
        host_us = np.where(split, launch - prev, 0.0)
    keep = ~np.isnan(gap) if like_hta else gap > 0
    rows = order[keep]
    out = frame[keys].iloc[rows].copy()  # the keys first: taking every column's rows costs far more
    out["gap_us"] = gap[keep]
    out["category"] = pd.Categorical.from_codes(category[keep], CATEGORIES)
    out["host_us"] = host_us[keep]
    return out


def hta_view(frame: pd.DataFrame, last_step_start: dict[int, float | None] | None = None) -> pd.DataFrame:
    """The activities and timestamps HTA analyses: its parser rounds fractional timestamps
    (start up, end down); with several `ProfilerStep`s it keeps only activities whose launch
    began before the last step started; activities without a stream are not GPU kernels to it."""
    keep = frame["stream"].notna().to_numpy().copy()
    launch = np.ceil(frame["launch_ts_us"].to_numpy(np.float64))
    for rank, limit in (last_step_start or {}).items():
        if limit is not None:
            mine = (frame["rank"] == rank).to_numpy()
            keep &= ~mine | (launch < np.ceil(limit))  # NaN launches are dropped here too
    view = frame.loc[keep, ["rank", "device", "stream", "ts_us", "dur_us"]].copy()
    view["end_us"] = np.floor(view["ts_us"] + view["dur_us"])
    view["ts_us"] = np.ceil(view["ts_us"])
    view["launch_ts_us"] = launch[keep]
    return view


def event_wait_ends(frame: pd.DataFrame, host: pd.DataFrame | None) -> np.ndarray:
    """Per activity of `frame` (one rank's rows; `host` its host events, `load_host_events`), the
    end of the activity a recorded event wait made it wait for, NaN where none is recorded. The
    waits the critical path reads, as it reads them: a trace with cuda_sync events records each
    one as a `Stream Wait Event` (`_sync_waits`); one without (ROCm's Kineto writes none, older
    CUDA Kineto neither) records it only as a `hipStreamWaitEvent` / `cudaStreamWaitEvent` call,
    paired with its activities by `critical_path.runtime_event_waits` (`_runtime_waits`)."""
    ends = np.full(len(frame), np.nan)
    if host is None or not len(host) or not len(frame) or "launch_thread" not in frame:
        return ends
    if (host["kind"] == "sync").to_numpy().any():
        return _sync_waits(frame, host, ends)
    return _runtime_waits(frame, host, ends)


def _runtime_waits(frame: pd.DataFrame, host: pd.DataFrame, ends: np.ndarray) -> np.ndarray:
    """`event_wait_ends` of a trace without cuda_sync events, in `ends`: the end of the activity
    each `runtime_event_waits` pair's waiting one waited for, where it started within
    KERNEL_GAP_LIMIT_US of that end (a start longer after was held by something else: the wait is
    inferred, not recorded — the critical path's rule; the gap is then split by its length alone)."""
    launch_ts = frame["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
    thread = frame["launch_thread"].to_numpy(np.float64, na_value=np.nan)
    launch_ts = np.where(np.isnan(thread), np.nan, launch_ts)  # a launch is known by its time and thread
    start = frame["ts_us"].to_numpy(np.float64)
    gpu = pd.DataFrame(
        {
            "ts_us": start,
            "end_us": start + frame["dur_us"].to_numpy(np.float64),
            "device": frame["device"].to_numpy(np.float64, na_value=np.nan),
            "stream": frame["stream"].to_numpy(np.float64, na_value=np.nan),
        }
    )
    src, dest, _ = runtime_event_waits(gpu, launch_ts, np.nan_to_num(thread, nan=-1).astype(np.int64), host)
    end = gpu["end_us"].to_numpy()
    near = start[dest] - end[src] < KERNEL_GAP_LIMIT_US
    np.fmax.at(ends, dest[near], end[src[near]])  # waits for several events: the last to end
    return ends


def _sync_waits(frame: pd.DataFrame, host: pd.DataFrame, ends: np.ndarray) -> np.ndarray:
    """`event_wait_ends` of a trace with cuda_sync events, in `ends`: a `Stream Wait Event` read as
    `critical_path._sync_edges` reads it: the activity waited for is the last launched onto the
    recorded stream (`wait_stream`, same device) at or before the `cudaEventRecord` call
    (`wait_correlation`), the waiting one the first that the wait call's thread launched onto the
    waiting stream at or after the call. (`Event Sync` holds the host, not a stream: the launches
    after it are the host's waits.)"""
    corr = host["correlation"].to_numpy(np.int64)
    is_call = (host["kind"] == "runtime").to_numpy() & (corr >= 0)
    calls = pd.DataFrame(
        {"ts": host["ts_us"].to_numpy(np.float64)[is_call], "thread": host["thread"].to_numpy(np.float64)[is_call]},
        index=corr[is_call],
    )
    calls = calls[~calls.index.duplicated()]
    waits = host[(host["kind"] == "sync").to_numpy() & (host["name"] == "Stream Wait Event").to_numpy()]
    record = calls["ts"].reindex(waits["wait_correlation"].to_numpy()).to_numpy()
    call = calls.reindex(waits["correlation"].to_numpy())
    ok = ~np.isnan(record) & call["ts"].notna().to_numpy()
    launch = frame["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
    thread = frame["launch_thread"].to_numpy(np.float64, na_value=np.nan)
    rows = np.flatnonzero(~np.isnan(launch) & ~np.isnan(thread))
    if not ok.any() or not len(rows):
        return ends
    w_device = waits["device"].to_numpy(np.float64)[ok]
    device = frame["device"].to_numpy(np.float64, na_value=np.nan)[rows]
    stream = frame["stream"].to_numpy(np.float64, na_value=np.nan)[rows]
    start = frame["ts_us"].to_numpy(np.float64)[rows]
    end = start + frame["dur_us"].to_numpy(np.float64)[rows]
    launch, thread = launch[rows], thread[rows]

    def last_or_first(keys: list[np.ndarray], wait_keys: list[np.ndarray], at: np.ndarray, last: bool) -> np.ndarray:
        """Per wait, the position in `rows` of the activity of its key launched last at or before
        `at` (`last`) or first at or after it; -1 none (ties by start)."""
        columns = [np.concatenate([k, w]) for k, w in zip(keys, wait_keys, strict=True)]
        both = distinct_codes(columns, len(rows) + len(at))
        code, wait_code = both[: len(rows)], both[len(rows) :]
        by = np.lexsort((start, launch, code))
        hit = (last_before if last else first_after)(code[by], launch[by], wait_code, at)
        return np.where(hit >= 0, by[np.maximum(hit, 0)], -1)

    w_from = waits["wait_stream"].to_numpy(np.float64)[ok]
    source = last_or_first([device, stream], [w_device, w_from], record[ok], True)
    waiting = last_or_first(
        [thread, device, stream],
        [call["thread"].to_numpy()[ok], w_device, waits["stream"].to_numpy(np.float64)[ok]],
        call["ts"].to_numpy()[ok],
        False,
    )
    keep = (source >= 0) & (waiting >= 0) & (source != waiting)
    found = np.full(len(rows), np.nan)
    np.fmax.at(found, waiting[keep], end[source[keep]])  # waits for several events: the last to end
    ends[rows] = found
    return ends


def with_event_waits(frame: pd.DataFrame, host_events: dict[int, pd.DataFrame | None]) -> pd.DataFrame:
    """`frame` (rows of one rank or several) with `EVENT_WAIT_END` from each rank's host events
    (`host_events`, by rank: `load_host_events`; a rank missing or None has none recorded)."""
    ends = np.full(len(frame), np.nan)
    rank = frame["rank"].to_numpy() if "rank" in frame else np.zeros(len(frame), np.int64)
    for r, rows in pd.Series(rank).groupby(rank, sort=False).indices.items():
        host = host_events.get(int(r))
        if host is not None:
            ends[rows] = event_wait_ends(frame.iloc[rows], host)
    return frame.assign(**{EVENT_WAIT_END: ends})


def _sum_by_category(table: pd.DataFrame, source: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """idle_us and count per key and category; every key of `source` (even one without gaps)
    has its three category rows, keys in order of first appearance in `source`. Keys are
    compared as float64 (nullable ints → NaN keys equal to each other); sums are pandas' grouped
    sums (compensated, in table order). Worked on arrays: a report of 1,000 small ranks calls
    this 4,000 times."""
    table = _pieces(table)
    source_keys, gap_keys = _float_keys(source, keys), _float_keys(table, keys)
    both = np.concatenate([source_keys, gap_keys])
    code = distinct_codes([both[:, i] for i in range(len(keys))], len(both))
    source_code, gap_code = code[: len(source_keys)], code[len(source_keys) :]
    _, first = np.unique(source_code, return_index=True)
    first = np.sort(first)  # each distinct key's first row in `source`, in that order
    position = np.full(int(code.max(initial=-1)) + 1, -1)
    position[source_code[first]] = np.arange(len(first))
    categories = len(CATEGORIES)
    cells = len(first) * categories
    at = position[gap_code] * categories + _category_codes(table["category"])
    kept = position[gap_code] >= 0
    idle = np.zeros(cells)
    if kept.any():
        summed = pd.Series(table["gap_us"].to_numpy(np.float64)[kept]).groupby(at[kept]).sum()
        idle[summed.index.to_numpy()] = summed.to_numpy()
    count = np.bincount(at[kept], minlength=cells).astype(np.int64)
    total = pd.Series(idle).groupby(np.arange(cells) // categories).transform("sum").to_numpy()
    rows = pd.DataFrame({key: np.repeat(source_keys[first, i], categories) for i, key in enumerate(keys)})
    rows["category"] = np.tile(np.asarray(CATEGORIES, dtype=object), len(first))
    rows["idle_us"], rows["count"] = idle, count
    # null where the group has no idle time (0 of 0 µs is no share); HTA's negative totals 0 as before
    rows["pct"] = np.where(total > 0, 100.0 * idle / np.where(total > 0, total, 1.0), np.where(total == 0, np.nan, 0.0))
    return rows


def _pieces(table: pd.DataFrame) -> pd.DataFrame:
    """A gap table with each gap split at its launch (`host_us` > 0, see `gaps`) as two gaps: the
    part after the launch in its category, and the host wait before it — each counted once in
    its category."""
    if "host_us" not in table:
        return table
    host = table["host_us"].to_numpy(np.float64)
    split = host > 0
    if not split.any():
        return table
    after = table.assign(gap_us=table["gap_us"].to_numpy(np.float64) - host)
    before = table[split].assign(
        gap_us=host[split], category=pd.Categorical.from_codes(np.zeros(int(split.sum()), np.int8), CATEGORIES)
    )
    return pd.concat([after, before])


def _float_keys(frame: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """The `keys` columns of `frame` as one float64 array (rows × keys), missing values NaN."""
    columns = [frame[key].astype("float64").to_numpy(np.float64, na_value=np.nan) for key in keys]
    return np.ascontiguousarray(np.column_stack(columns)) if columns else np.zeros((len(frame), 0))


def _category_codes(category: pd.Series) -> np.ndarray:
    """Positions in CATEGORIES of a gap table's `category` (a categorical of CATEGORIES, or texts)."""
    if isinstance(category.dtype, pd.CategoricalDtype) and tuple(category.cat.categories) == CATEGORIES:
        return category.cat.codes.to_numpy().astype(np.int8)
    return pd.Categorical(category.astype(object), categories=list(CATEGORIES)).codes.astype(np.int8)


@dataclass
class ExactGaps:
    """The exact `gaps` of one frame per stream and per device, computed once for all that read
    them: the exact breakdown, the causes and the graph candidates."""

    stream: pd.DataFrame
    device: pd.DataFrame


def exact_gaps(frame: pd.DataFrame, kernel_wait_us: float = KERNEL_WAIT_US) -> ExactGaps:
    return ExactGaps(gaps(frame, True, kernel_wait_us), gaps(frame, False, kernel_wait_us))


def idle_breakdown(
    frame: pd.DataFrame,
    kernel_wait_us: float = KERNEL_WAIT_US,
    hta: bool = False,
    last_step_start: dict[int, float | None] | None = None,
    exact: ExactGaps | None = None,
) -> pd.DataFrame:
    """idle.parquet: per (rank, device, stream) and per (rank, device) over all its streams
    (`stream` null), the idle time and number of gaps of each category. `exact`: the frame's
    exact gaps with this `kernel_wait_us`, when already computed."""
    source = hta_view(frame, last_step_start) if hta else frame
    if hta or exact is None:
        exact = ExactGaps(gaps(source, True, kernel_wait_us, hta), gaps(source, False, kernel_wait_us, hta))
    # activities on no known stream (a stream id beyond 2^53 nulled at ingest) count in their
    # device's union only: a per-stream row of them would read as the device's own (stream null)
    streamed, stream_gaps = source, exact.stream
    if source["stream"].isna().any():
        streamed, stream_gaps = source[source["stream"].notna()], stream_gaps[stream_gaps["stream"].notna()]
    per_stream = _sum_by_category(stream_gaps, streamed, ["rank", "device", "stream"])
    per_device = _sum_by_category(exact.device, source, ["rank", "device"])
    per_device["stream"] = pd.NA
    table = pd.concat([per_device, per_stream], ignore_index=True)[BREAKDOWN_COLUMNS]
    table["rank"] = table["rank"].astype("int32")
    table["device"] = table["device"].astype("Int32")
    table["stream"] = table["stream"].astype("Int64")
    table["category"] = table["category"].astype(str)
    table["count"] = table["count"].astype("int64")
    return table.sort_values(["rank", "device", "stream"], na_position="first", kind="stable").reset_index(drop=True)


def idle_causes(frame: pd.DataFrame, device_gaps: pd.DataFrame | None = None) -> pd.DataFrame:
    """idle_causes.parquet: the host waits of each device (exact gaps of the union of its streams)
    grouped by what the launching thread was executing during the wait (`wait_frame`,
    `wait_module`, recorded at ingest), largest first; `pct` is the share of the device's
    host-wait time. `device_gaps`: the frame's exact per-device `gaps`, when already computed. A
    gap split at its launch (`gaps`) counts its host wait, the part before the launch."""
    waits = gaps(frame, per_stream=False) if device_gaps is None else device_gaps
    waits = _pieces(waits)
    waits = waits[waits["category"] == "host_wait"]
    if "wait_frame" in frame:
        waits["frame"] = frame.loc[waits.index, "wait_frame"].astype(object).fillna(NO_CAUSE)
        waits["module"] = frame.loc[waits.index, "wait_module"].astype(object)
    else:
        waits["frame"], waits["module"] = NO_CAUSE, None
    causes = (
        waits.assign(module=waits["module"].fillna(""))
        .groupby(["rank", "device", "frame", "module"], dropna=False, sort=False)["gap_us"]
        .agg(gaps="count", idle_us="sum")
        .reset_index()
    )
    causes["module"] = causes["module"].replace("", None)
    device_total = causes.groupby(["rank", "device"], dropna=False)["idle_us"].transform("sum")
    causes["pct"] = 100.0 * causes["idle_us"] / device_total.where(device_total > 0, 1.0)
    causes = causes.sort_values(["rank", "device", "idle_us"], ascending=[True, True, False], kind="stable")
    causes["rank"] = causes["rank"].astype("int32")
    causes["device"] = causes["device"].astype("Int32")
    return causes[CAUSE_COLUMNS].reset_index(drop=True)


def _by_category(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Idle µs and gaps of each row of a breakdown as arrays (row, category of CATEGORIES): the
    row's own category holds them, the others 0."""
    position = rows["category"].map({c: i for i, c in enumerate(CATEGORIES)}).to_numpy()
    known = ~pd.isna(position)
    at = position[known].astype(np.int64)
    idle = np.zeros((len(rows), len(CATEGORIES)))
    count = np.zeros((len(rows), len(CATEGORIES)), np.int64)
    idle[np.flatnonzero(known), at] = rows["idle_us"].to_numpy(np.float64)[known]
    count[np.flatnonzero(known), at] = rows["count"].to_numpy(np.int64)[known]
    return idle, count


def _per_category(number: np.ndarray, groups: int, idle: np.ndarray, count: np.ndarray) -> list[dict[str, Any]]:
    """Each group's idle µs and gaps of each category (rows added in turn: the bits of summing
    the group's rows)."""
    columns = range(len(CATEGORIES))
    us = [np.bincount(number, weights=idle[:, i], minlength=groups).tolist() for i in columns]
    gaps = [np.bincount(number, weights=count[:, i], minlength=groups).astype(np.int64).tolist() for i in columns]
    return [
        {
            **{f"{c}_us": us[i][k] for i, c in enumerate(CATEGORIES)},
            **{f"{c}_gaps": gaps[i][k] for i, c in enumerate(CATEGORIES)},
        }
        for k in range(groups)
    ]


def _keys(rows: pd.DataFrame, firsts: np.ndarray) -> tuple[list[int], list[int | None]]:
    """The rank and device of each group (its first row)."""
    devices = rows["device"].to_numpy(dtype=object)[firsts]
    return rows["rank"].to_numpy()[firsts].tolist(), [None if pd.isna(d) else int(d) for d in devices]


def late_starts(device_gaps: pd.DataFrame) -> dict[tuple[int, int | None], tuple[float, int]]:
    """Per (rank, device): the idle time between the launch and the start of activities enqueued
    onto the idle device and held there — by a recorded event wait, or LATE_START_US or more —
    (the part after the launch of the gaps `gaps` splits), and how many. The stream held the work
    and waited for an event or what the trace does not show; this time is in `other` (or
    `kernel_wait`), not the host's."""
    split = (
        device_gaps[device_gaps["host_us"].to_numpy(np.float64) > 0] if "host_us" in device_gaps else device_gaps[:0]
    )
    if split.empty:
        return {}
    after = split["gap_us"].to_numpy(np.float64) - split["host_us"].to_numpy(np.float64)
    table = pd.DataFrame({"rank": split["rank"].to_numpy(), "device": split["device"].astype(object), "us": after})
    summed = table.groupby(["rank", "device"], dropna=False, sort=False)["us"].agg(["sum", "size"])
    return {
        (int(r), None if pd.isna(d) else int(d)): (float(us), int(n))
        for (r, d), us, n in zip(summed.index, summed["sum"], summed["size"], strict=True)
    }


def _device_facts(
    breakdown: pd.DataFrame, causes: pd.DataFrame, late: dict[tuple[int, int | None], tuple[float, int]] | None = None
) -> list[dict[str, Any]]:
    """Per (rank, device) of `breakdown`: idle time, time and gaps per category, the share of
    host-wait time a frame is named for, the top cause, and (`late`, exact basis only; None
    under HTA's, which keeps a gap whole) the late starts (`late_starts`)."""
    rows = breakdown[breakdown["stream"].isna()].reset_index(drop=True)
    number, firsts = group_numbers(rows, ["rank", "device"])
    groups = len(firsts)
    totals = group_sums(number, rows["idle_us"].to_numpy(np.float64), groups).tolist()
    ranks, devices = _keys(rows, firsts)
    # per (rank, device) of the causes: idle µs they explain, of it named (a frame, not
    # "between ops"), and the top cause (the causes are sorted by idle µs)
    cause_number, cause_firsts = group_numbers(causes, ["rank", "device"])
    cause_groups = len(cause_firsts)
    idle_us = causes["idle_us"].to_numpy(np.float64)
    is_named = ~causes["frame"].isin([BETWEEN_OPS, NO_CAUSE]).to_numpy()
    explained = group_sums(cause_number, idle_us, cause_groups).tolist()
    named = group_sums(cause_number[is_named], idle_us[is_named], cause_groups).tolist()
    top = causes["frame"].to_numpy(dtype=object)[cause_firsts].tolist()
    cause_ranks, cause_devices = _keys(causes, cause_firsts)
    of_device = {key: k for k, key in enumerate(zip(cause_ranks, cause_devices, strict=True))}
    facts = []
    for k, per_category in enumerate(_per_category(number, groups, *_by_category(rows))):
        cause = of_device.get((ranks[k], devices[k]))  # None: no causes
        done, of_it = (explained[cause], named[cause]) if cause is not None else (0.0, 0.0)
        facts.append(
            {
                "rank": int(ranks[k]),
                "device": devices[k],
                "idle_us": totals[k],
                **per_category,
                "host_wait_named_pct": 100.0 * of_it / done if done > 0 else None,
                "top_cause": str(top[cause]) if cause is not None else None,
                **_late_facts(late, ranks[k], devices[k]),
            }
        )
    return facts


def _late_facts(
    late: dict[tuple[int, int | None], tuple[float, int]] | None, rank: int, device: int | None
) -> dict[str, Any]:
    if late is None:
        return {"late_start_us": None, "late_start_gaps": None}
    us, count = late.get((int(rank), device), (0.0, 0))
    return {"late_start_us": us, "late_start_gaps": count}


def stream_facts(breakdown: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (rank, device, stream) of `breakdown`: idle time and gaps of each category."""
    rows = breakdown[breakdown["stream"].notna()].reset_index(drop=True)
    number, firsts = group_numbers(rows, ["rank", "device", "stream"])
    groups = len(firsts)
    totals = group_sums(number, rows["idle_us"].to_numpy(np.float64), groups).tolist()
    ranks, devices = _keys(rows, firsts)
    streams = rows["stream"].to_numpy(dtype=object)[firsts].tolist()
    return [
        {"rank": int(ranks[k]), "device": devices[k], "stream": int(streams[k]), "idle_us": totals[k], **per_category}
        for k, per_category in enumerate(_per_category(number, groups, *_by_category(rows)))
    ]


def analyse_idle(
    frame: pd.DataFrame,
    kernel_wait_us: float = KERNEL_WAIT_US,
    hta: bool = False,
    last_step_start: dict[int, float | None] | None = None,
    exact: ExactGaps | None = None,
) -> IdleAnalysis:
    """The breakdown in the chosen convention (`hta`), the other convention's beside it, and the
    causes (always exact). `exact`: the frame's `exact_gaps`, when already computed."""
    exact = exact or exact_gaps(frame, kernel_wait_us)
    breakdown = idle_breakdown(frame, kernel_wait_us, hta, last_step_start, exact)
    alternate = idle_breakdown(frame, kernel_wait_us, not hta, last_step_start, exact)
    causes = idle_causes(frame, exact.device)
    basis = "hta" if hta else "exact"
    other = other_basis(basis)
    convention = hta_convention(alternate) if other == "hta" else CONVENTIONS[other]
    facts = {
        "kernel_wait_us": kernel_wait_us,
        "basis": basis,
        "devices": _device_facts(breakdown, causes, None if hta else late_starts(exact.device)),
        other: {"convention": convention, "streams": stream_facts(alternate)},
    }
    facts["hta_window_end_us"] = {str(r): v for r, v in (last_step_start or {}).items() if v is not None}
    return IdleAnalysis(breakdown, causes, facts, alternate)
