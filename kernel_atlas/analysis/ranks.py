"""The report's analysis of a run, a rank or a batch of small ranks at a time (a single trace is a
run of one rank).

Each rank's kernels are read once (its partitions of the dataset) and analysed with the same
`analyse` as a single trace — costs need the per-call Python cost formulas, so they are not
re-written in SQL — and the same `analyse_waits` (idle breakdown, causes, launch statistics,
graph candidates). A large rank is read and analysed alone; small ranks together, in batches of
at most BATCH_RANKS ranks and BATCH_ACTIVITIES GPU activities (`rank_batches`), as one frame:
every analysis keys its rows by rank (calls, gaps, devices, streams), so a batch gives each rank
what it would alone, and the fixed cost of an analysis — a few hundred pandas operations — is
paid once per batch, not per rank. Only small results are kept: the roofline groups (one row per
distinct kernel, launcher, shapes and role), the time shares, the facts, the time per
(category, op, kernel), the waits (`analysis/waits_fold.py` says how they combine) and the
module, step and timeline views (`analysis/views.py`). They are folded as they arrive, so the
driver holds one large rank's kernels, or one batch of small ones, at a time (one per worker
with `jobs`), never the fleet's; cross-rank questions (collectives) are DuckDB queries
(`collectives.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.collectives import peer_waits
from kernel_atlas.analysis.idle import KERNEL_WAIT_US, with_event_waits
from kernel_atlas.analysis.launches import SHORT_KERNEL_US
from kernel_atlas.analysis.views import KernelViews, ViewsFold, kernel_views
from kernel_atlas.analysis.waits import Waits, analyse_waits, facts_by_rank
from kernel_atlas.analysis.waits_fold import WaitsFold
from kernel_atlas.core.beside import can_fork, process_pool, submit_held, usable_cpus
from kernel_atlas.core.devices import Device
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.groups import BatchFold
from kernel_atlas.ingest.efficiency import EFFICIENCY_SUMS
from kernel_atlas.ingest.host_events import host_events_with_stream_waits, with_stream_waits
from kernel_atlas.roofline.analysis import GROUP_KEYS, Analysis, analyse, roofline_groups, roofline_metrics
from kernel_atlas.store.outputs import load_kernels
from kernel_atlas.store.run import process_group_sizes

# summed over ranks (`estimate`: how many ranks estimated the group, any of them making it one)
_SUMMED = ["count", "total_us", "op_time_us", "peer_wait_us", "estimate", *EFFICIENCY_SUMS]
_TREEMAP_KEYS = ["category", "op_mapping", "name"]


@dataclass
class WaitOptions:
    """The settings of `analyse_waits` (`atlas report --kernel-wait-us --short-kernel-us --like-hta`)."""

    kernel_wait_us: float = KERNEL_WAIT_US
    short_kernel_us: float = SHORT_KERNEL_US
    like_hta: bool = False


@dataclass
class RankPart:
    """What is kept of the analysis of one rank, or of a batch of small ranks analysed together."""

    ranks: list[int]  # the ranks with GPU activity, in order
    groups: pd.DataFrame  # `roofline_groups`
    timeshare: pd.DataFrame
    facts: dict[str, Any]
    kernel_time: pd.DataFrame | None  # category, op_mapping, name, dur_us (summed), count; None with the rows
    waits: Waits  # tables of every rank of the part (each row has its rank)
    wait_facts: list[tuple[int, dict[str, Any]]]  # each rank's own facts of `waits`
    views: KernelViews  # module and step times of every rank; the timeline of one
    kernels: pd.DataFrame | None = None  # the analysed kernel rows, kept only for a one-rank report


@dataclass
class RanksAnalysis:
    """The report's analysis of every rank together."""

    analysis: Analysis
    waits: Waits
    views: KernelViews


# ranks of at most this many GPU activities are analysed in parallel when no --jobs is given
PARALLEL_RANK_ACTIVITIES = 100_000
# small ranks analysed together: at most this many ranks and GPU activities in a batch. An
# analysis has a fixed cost (~0.15 s of CPU): the report of 200 ranks of two kernels each took
# 14.1 s on two CPUs with each rank analysed alone, 5.4 s in batches; 1,000 ranks 66 s, 21.5 s
BATCH_RANKS = 32
BATCH_ACTIVITIES = 50_000


def rank_sizes(summary: dict[str, Any]) -> dict[int, float]:
    """Each rank's GPU activities, from its traces' counts per kind in summary.json (none: a trace
    without GPU activity); infinite where a count is missing or is not a number."""
    traces = summary.get("traces")
    sizes: dict[int, float] = {}
    for trace in traces if isinstance(traces, list) else []:
        if not isinstance(trace, dict):
            continue
        kinds = trace.get("by_kind")
        counts = (
            [k.get("count") if isinstance(k, dict) else None for k in kinds.values()]
            if isinstance(kinds, dict)
            else [None]
        )
        known = [c for c in counts if isinstance(c, int | float) and not isinstance(c, bool) and c >= 0]
        size = float(sum(known)) if len(known) == len(counts) else float("inf")
        rank = trace.get("rank")
        sizes[rank] = sizes.get(rank, 0.0) + size
    return sizes


def rank_batches(summary: dict[str, Any], ranks: list[int]) -> list[list[int]]:
    """`ranks` in order, in the batches they are analysed in: consecutive ranks together while
    the batch holds at most BATCH_RANKS ranks and BATCH_ACTIVITIES GPU activities (summary.json's
    counts); a larger rank, or one of unknown size, alone. Decided by the run alone, not by the
    machine: the report is the same on every machine."""
    sizes = rank_sizes(summary)
    batches: list[list[int]] = []
    held = 0.0
    for rank in ranks:
        size = sizes.get(rank, float("inf"))
        if batches and len(batches[-1]) < BATCH_RANKS and held + size <= BATCH_ACTIVITIES:
            batches[-1].append(rank)
            held += size
        else:
            batches.append([rank])
            held = size
    return batches


def default_jobs(summary: dict[str, Any], ranks: list[int]) -> int:
    """Ranks analysed at a time when the caller gives no number: every CPU for several ranks
    that are each small — the fixed cost of an analysis (a few hundred pandas operations,
    ~0.15 s) is then most of its time — and one at a time otherwise, so that the report holds
    one large rank in memory at a time, whatever the fleet's size. A rank's size is its traces'
    GPU activities in summary.json (unknown: large)."""
    if len(ranks) < 2 or not can_fork():
        return 1
    sizes = rank_sizes(summary)
    if any(sizes.get(rank, float("inf")) > PARALLEL_RANK_ACTIVITIES for rank in ranks):
        return 1
    return min(usable_cpus(), len(ranks))


def rank_summary(summary: dict[str, Any], ranks: list[int]) -> dict[str, Any]:
    """The part of summary.json about `ranks` (what `analyse_waits` reads: HTA's window)."""
    traces = [t for t in summary.get("traces", []) if t.get("rank") in ranks]
    return {"traces": traces} if traces else {}


def analyse_batch(
    out_dir: str | Path,
    ranks: list[int],
    device: Device | None,
    world_size: int | None,
    options: WaitOptions | None = None,
    summary: dict[str, Any] | None = None,
    keep_rows: bool = False,
    frame: pd.DataFrame | None = None,
    timeline_rank: int | None = None,
    waits: pd.DataFrame | None = None,
    host: dict[int, pd.DataFrame | None] | None = None,
) -> RankPart | None:
    """The part of one rank, or of a batch of ranks analysed together (`rank_batches`); None
    when none has GPU activity. `summary`: their part of summary.json (`rank_summary`);
    `keep_rows` keeps the analysed kernel rows; `frame`: their kernel rows when already read
    (else read here); `timeline_rank`: the rank whose timeline the views carry when it is one of
    them; `waits`: their collectives.parquet rows (`peer_waits`: the roofline's collectives are
    held against their time after the last rank arrived); `host`: host events already read, by
    rank (`load_host_events`; None: none recorded), the others read here where they record an
    event wait."""
    frame = load_kernels(out_dir, ranks=ranks) if frame is None else frame
    if frame.empty:
        return None
    if waits is not None and len(waits):
        frame = frame.assign(peer_wait_us=peer_waits(frame, waits))
    # a kernel a recorded event wait held past its launch waited for that event, not for the host
    # nor its stream's queue (`idle.EVENT_WAIT_END`)
    in_frame = np.unique(frame["rank"].to_numpy()).tolist()
    host = host or {}
    frame = with_event_waits(
        frame,
        {r: with_stream_waits(host[r]) if r in host else host_events_with_stream_waits(out_dir, r) for r in in_frame},
    )
    options = options or WaitOptions()
    # on the groups of every rank (`analyse_ranks`); a collective's group size from its rank's process-group table
    analysis = analyse(frame, device, world_size, metrics=False, process_groups=process_group_sizes(summary or {}))
    waits = analyse_waits(frame, options.kernel_wait_us, options.short_kernel_us, options.like_hta, summary)
    views = kernel_views(frame, timeline_rank, summary)  # bands: steps.parquet's windows
    kernels = analysis.kernels
    present = np.unique(kernels["rank"].to_numpy()).tolist()
    # one rank: the facts as they are (several: each rank's split out, `WaitsFold` combines them)
    wait_facts = [(present[0], waits.facts)] if len(present) == 1 else facts_by_rank(kernels, waits, summary)
    kernel_time = None  # what the figures need of the rows, when the rows are not kept
    if not keep_rows:
        kernel_time = kernels.groupby(_TREEMAP_KEYS, observed=True)["dur_us"].agg(["sum", "count"]).reset_index()
        kernel_time = kernel_time.rename(columns={"sum": "dur_us"})
    groups = analysis.groups if analysis.groups is not None else roofline_groups(kernels)
    part = RankPart(present, groups, analysis.timeshare, analysis.facts, kernel_time, waits, wait_facts, views)
    if keep_rows:
        part.kernels = kernels
    return part


def _sum_by(frames: list[pd.DataFrame], keys: list[str], summed: list[str]) -> pd.DataFrame:
    """Rows with equal keys added up: `summed` columns summed, the others' first value kept."""
    both = pd.concat([f for f in frames if f is not None and len(f)], ignore_index=True)
    rest = [c for c in both.columns if c not in keys and c not in summed]
    spec = {c: "sum" for c in summed} | {c: "first" for c in rest}
    for key in keys:
        both[key] = both[key].astype(object)
    return both.groupby(keys, sort=False, dropna=False, observed=True).agg(spec).reset_index()


def sum_fold(keys: list[str], summed: list[str]) -> BatchFold:
    """Per-rank tables whose rows with equal keys add up (`_sum_by`), folded in batches as ranks
    arrive, so that at most a batch is pending."""
    return BatchFold(lambda frames: _sum_by(frames, keys, summed))


def combine_facts(total: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """`analyse`'s facts of two runs: numbers add up, lists are joined, anything else keeps the
    first. Right for those facts (times, per-device lists, the device); not for facts holding
    settings or medians — the waits' combine in `analysis/waits_fold.py`."""
    merged = dict(total)
    for key, value in part.items():
        if key not in merged:
            merged[key] = value
        elif isinstance(value, list) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            merged[key] = merged[key] + value
    return merged


def _timeshare(summed: pd.DataFrame) -> pd.DataFrame:
    """Per-level percentages of the summed time shares, each level heaviest first, keys of equal
    time by name (an order that does not depend on how the ranks were grouped)."""
    total = float(summed.loc[summed["level"] == "category", "total_us"].sum())
    summed["pct"] = 100.0 * summed["total_us"] / total if total else np.nan  # 0 µs in all: no share
    levels = list(dict.fromkeys(summed["level"]))
    ordered = [
        summed[summed["level"] == level].sort_values(["total_us", "key"], ascending=[False, True], kind="stable")
        for level in levels
    ]
    table = pd.concat(ordered, ignore_index=True)
    table["count"] = table["count"].astype("int64")
    return table[["level", "key", "total_us", "count", "pct"]]


def analyse_ranks(
    out_dir: str | Path,
    ranks: list[int],
    device: Device | None,
    world_size: int | None,
    jobs: int = 1,
    on_rank: Callable[[int], None] | None = None,
    options: WaitOptions | None = None,
    summary: dict[str, Any] | None = None,
    timeline_rank: int | None = None,
    loaded: dict[int, pd.DataFrame] | None = None,
    collectives: pd.DataFrame | None = None,
    host: dict[int, pd.DataFrame | None] | None = None,
) -> RanksAnalysis:
    """The analysis of every rank together, built a rank (or a batch of small ranks) at a time.

    With several ranks `Analysis.kernels` is the time per (category, op_mapping, name) with
    `dur_us` and `count` — what the time-share figures need — not the kernel rows of the whole
    fleet; with one rank it is the rank's analysed kernel rows. The timeline is
    `timeline_rank`'s when it has GPU activity, else the rank with the most GPU time's.
    `loaded`: kernel rows of ranks already read, by rank (analysed in this process);
    `collectives`: the cross-rank view's rows (collectives.parquet), whose waits for the last rank
    the roofline leaves out of its collectives' time; `host`: host events of ranks already read,
    by rank (None: none recorded)."""
    kernels = None
    groups_fold = sum_fold(GROUP_KEYS, _SUMMED)
    timeshare_fold = sum_fold(["level", "key"], ["total_us", "count"])
    kernel_time_fold = sum_fold(_TREEMAP_KEYS, ["dur_us", "count"])
    facts: dict[str, Any] = {}
    waits = WaitsFold()
    views = ViewsFold(timeline_rank)
    keep_rows = len(ranks) == 1

    def fold(part: RankPart | None, batch: list[int]) -> None:
        nonlocal facts, kernels
        if part is not None:
            groups_fold.add(part.groups)
            timeshare_fold.add(part.timeshare.drop(columns="pct"))
            kernel_time_fold.add(part.kernel_time)
            facts = combine_facts(facts, part.facts)
            waits.add(part.waits, part.wait_facts)
            timeline = part.views.timeline
            shown = timeline.rank if timeline is not None and timeline.rank is not None else part.ranks[0]
            views.add(shown, part.views, len(part.ranks))
            kernels = part.kernels
        for rank in batch if on_rank else ():
            on_rank(rank)

    def task(batch: list[int]) -> dict[str, Any]:
        frame = (loaded or {}).get(batch[0]) if len(batch) == 1 else None
        return {
            "out_dir": out_dir,
            "ranks": batch,
            "device": device,
            "world_size": world_size,
            "options": options,
            "summary": rank_summary(summary or {}, batch),
            "keep_rows": keep_rows,
            "frame": frame,
            "timeline_rank": timeline_rank,
            "waits": None if collectives is None else collectives[collectives["rank"].isin(batch)],
            "host": {r: host[r] for r in batch if r in host} if host else None,
        }

    batches = rank_batches(summary or {}, ranks)
    if jobs > 1 and len(batches) > 1:
        with process_pool(min(jobs, len(batches))) as pool:
            futures = [(batch, submit_held(pool, analyse_batch, **task(batch))) for batch in batches]
            for batch, future in futures:
                fold(future.result(), batch)
    else:
        for batch in batches:
            fold(analyse_batch(**task(batch)), batch)
    combined_waits, combined_views = waits.result(), views.result()
    groups, timeshare, kernel_time = groups_fold.result(), timeshare_fold.result(), kernel_time_fold.result()
    rows = kernels if kernels is not None else kernel_time
    if groups is None or timeshare is None or rows is None or combined_waits is None or combined_views is None:
        raise AtlasError(out_dir, "no GPU activities to report on")
    facts["ranks"] = len(ranks)
    roofline = roofline_metrics(groups, device)
    analysis = Analysis(kernels=rows, roofline=roofline, timeshare=_timeshare(timeshare), facts=facts)
    return RanksAnalysis(analysis, combined_waits, combined_views)
