"""Where the memory goes: allocations paired with their frees, the peak per device and what holds it.

Input: the allocator events of one trace in time order (`ingest.memory.memory_events`, one row per
`[memory]` event). Conventions (docs/memory.md):

* an allocation (`bytes` > 0) ends at the next event at the same (device, addr) when that is a free;
  a block freed and allocated again at the same address is two allocations;
* a free with no allocation before it at its address freed a block allocated before the window: a
  row with `alloc_ts_us` null, counted apart (`pre_window_frees`);
* baseline = what was allocated before the device's first event: the first `total_allocated` − the
  `bytes` of every event up to it (none where that is below zero or a size in it is unknown);
* the level after each event is its `total_allocated`, worked out from the sizes where it records
  none (`_levels`); the peak is the first event with the device's largest level (`total_reserved`
  apart), or the baseline, held from the window's start, where that is higher; live at the peak:
  allocations made at or before that event and freed after it (or never). Then
  peak = baseline − pre-window frees up to the peak + live at the peak, whenever the trace's totals
  are the running sum of its events (`unexplained_bytes` says by how much they are not; each event
  whose total moved by other than its `bytes` is counted, `inconsistent_events`);
* before any of it (`prepare_events`): an exact repeat of the event before it is read once, and an event whose
  `Bytes` could not be read (`events.UNKNOWN_BYTES`) takes its size from the totals or from its
  address's other events, else stays out of pairing and sums — each counted.

All of it is sorts, cumulative sums and group-bys: linear in the events after one sort.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.events import MAX_MEMORY_BYTES, UNKNOWN_BYTES
from kernel_atlas.ingest.memory import EVENT_KINDS, MEMORY_EVENTS
from kernel_atlas.store.outputs import SUMMARY, load_checked, table_run

ALLOCATION_COLUMNS = (
    "device",
    "addr",
    "bytes",
    "alloc_ts_us",
    "free_ts_us",
    "op",
    "module",
    "call_stack",
    "step",
    "alloc_event",
    "free_event",
)
BEFORE_WINDOW = "(allocated before the window)"
NO_MODULE = "(no nn.Module on the stack)"
NO_OP = "(no enclosing CPU op)"
TOP = 10


def pair_allocations(events: pd.DataFrame) -> pd.DataFrame:
    """One row per allocation (see the module docstring); `alloc_event` / `free_event` are the row
    numbers of its events in `events` (-1: before the window / not freed). An allocation is closed
    by the next event at its (device, address) of its size when that is a free: a free of another
    size there (damage, or events of one time written out of order) closes no block of another
    size. Events without an address (PyTorch 1.9) cannot be paired and give no rows; nor do events
    of 0 bytes or of a size unknown (`UNKNOWN_BYTES`), which neither hold nor release (between a
    block's allocation and its free they had split the pair: the allocation never freed, the free a
    block from before the window), nor a free that closes no allocation (a second free, a size no
    block there had: `device_summary` counts them); a free counts as before the window only as its
    address's first event, or the first of its size there with only events of its time before it
    (an allocation at the address written before the free that made it available)."""
    nbytes = events["bytes"].to_numpy()
    address = events["addr"].to_numpy()
    seq = np.flatnonzero((address >= 0) & (nbytes != 0) & (nbytes != UNKNOWN_BYTES))
    nbytes = nbytes[seq]
    device = events["device"].cat.codes.to_numpy()[seq] if len(seq) else np.empty(0, np.int64)
    pos = np.lexsort((seq, np.abs(nbytes), address[seq], device))  # positions in the seq-indexed arrays
    order = seq[pos]
    dev, addr, b = device[pos], address[order], nbytes[pos]
    same_addr = (dev[1:] == dev[:-1]) & (addr[1:] == addr[:-1])
    same_next = np.r_[same_addr & (b[1:] == -b[:-1]), False]  # the next at its address is of its size, a free
    is_alloc, is_free = b > 0, b < 0
    freed_next = is_alloc & same_next
    matched_free = np.r_[False, freed_next[:-1]]
    allocs = np.flatnonzero(is_alloc)
    free_event = np.where(freed_next[allocs], np.r_[order[1:], -1][allocs], -1)
    # its address's first event on its device (of any size): the least row number of the address
    starts = np.flatnonzero(np.r_[True, ~same_addr]) if len(order) else np.empty(0, np.int64)
    first_row = np.minimum.reduceat(order, starts) if len(order) else order
    first_row = np.repeat(first_row, np.diff(np.r_[starts, len(order)]))
    ts = events["ts_us"].to_numpy()
    # or the first of its size there, with only events of its own time before it: the reuse of the
    # block it freed, written first (its totals put it first; the allocator cannot have)
    first_of_size = np.r_[True, ~(same_addr & (np.abs(b[1:]) == np.abs(b[:-1])))]
    first = (order == first_row) | (first_of_size & (ts[order] == ts[first_row]))
    early = np.flatnonzero(is_free & ~matched_free & first)  # frees of blocks allocated before the window
    alloc_event = np.r_[order[allocs], np.full(len(early), -1)]
    free_event = np.r_[free_event, order[early]]
    rows = np.r_[order[allocs], order[early]]
    frame = pd.DataFrame(
        {
            "addr": addr[np.r_[allocs, early]],
            "bytes": np.abs(b[np.r_[allocs, early]]),
            "alloc_ts_us": np.where(alloc_event >= 0, ts[np.maximum(alloc_event, 0)], np.nan),
            "free_ts_us": np.where(free_event >= 0, ts[np.maximum(free_event, 0)], np.nan),
        }
    )
    for column in ("device", "op", "module", "call_stack"):  # of the allocating event; none before the window
        values = events[column].array
        codes = np.asarray(values.codes)[rows]
        if column != "device":
            codes = np.where(alloc_event >= 0, codes, -1)
        frame[column] = pd.Categorical.from_codes(codes, dtype=values.dtype)
    frame["step"] = np.where(alloc_event >= 0, events["step"].to_numpy()[rows], -1)
    frame["alloc_event"], frame["free_event"] = alloc_event, free_event
    return frame[list(ALLOCATION_COLUMNS)].sort_values(["alloc_event", "free_event"], kind="stable", ignore_index=True)


# columns `prepare_events` adds: an exact repeat of an earlier event; a size that could not be read,
# worked out; one that could not be read and stays unknown
REPEAT, SIZE_WORKED_OUT, SIZE_UNKNOWN = "repeat", "size_worked_out", "size_unknown"
# what makes two events one event written twice (the attribution follows from the thread and time)
_REPEAT_KEY = (
    *("device", "ts_us", "addr", "bytes", "total_allocated", "total_reserved"),
    *("op", "module", "call_stack", "step"),
)


def _repeats(events: pd.DataFrame) -> np.ndarray:
    """Whether each event repeats the event just before it on its device exactly (`_REPEAT_KEY`):
    a copy written twice follows its original. One equal to an earlier event with others between
    is another event — a block freed and allocated again within one µs is written alike twice,
    with the free between (ingest puts events of one time in the order their totals require).
    Only events with an address or a total can be told apart from another of their time (two
    allocations of one size in one microsecond, written without either — PyTorch 1.9 — are two)."""
    codes = events["device"].cat.codes.to_numpy()
    seq = np.argsort(codes, kind="stable")  # each device's events in row (time) order
    repeat = np.zeros(len(seq), dtype=bool)
    if len(seq) < 2:
        return repeat
    ts = events["ts_us"].to_numpy()[seq]
    alike = (codes[seq][1:] == codes[seq][:-1]) & (ts[1:] == ts[:-1])  # few events share a time: the rest is cheap
    for column in _REPEAT_KEY:
        if column in events and alike.any():
            values = events[column]
            values = (values.cat.codes if isinstance(values.dtype, pd.CategoricalDtype) else values).to_numpy()[seq]
            alike &= values[1:] == values[:-1]
    told = (events["addr"].to_numpy() >= 0) | (events["total_allocated"].to_numpy() >= 0)
    repeat[seq[1:]] = alike & told[seq[1:]]
    return repeat


def _work_out_sizes(events: pd.DataFrame, nbytes: np.ndarray, repeat: np.ndarray) -> np.ndarray:
    """Sizes for the events whose `Bytes` could not be read (`nbytes` is changed in place); which
    were worked out. First from the totals: where the event and the device's event before it both
    record `Total Allocated`, its size is their difference. Then from its address: the free of the
    allocation just before it there (that allocation's size, negated), else the allocation of the
    free just after it there. Damage only: none of it runs on a trace without."""
    unknown = (nbytes == UNKNOWN_BYTES) & ~repeat
    worked_out = np.zeros(len(nbytes), dtype=bool)
    if not unknown.any():
        return worked_out
    codes = events["device"].cat.codes.to_numpy()
    total = events["total_allocated"].to_numpy()
    kept = np.flatnonzero(~repeat)
    order = kept[np.argsort(codes[kept], kind="stable")]  # each device's events in time order
    at = np.flatnonzero(unknown[order])
    at = at[at > 0]
    row, before = order[at], order[at - 1]
    known = (codes[row] == codes[before]) & (total[row] >= 0) & (total[before] >= 0)
    row, before = row[known], before[known]
    nbytes[row] = total[row] - total[before]
    worked_out[row] = True
    address = events["addr"].to_numpy()
    if not (unknown & ~worked_out & (address >= 0)).any():
        return worked_out
    seq = np.flatnonzero(~repeat & (address >= 0) & (nbytes != 0))
    order = seq[np.lexsort((seq, address[seq], codes[seq]))]
    b = nbytes[order]
    same = np.r_[False, (codes[order][1:] == codes[order][:-1]) & (address[order][1:] == address[order][:-1])]
    still = b == UNKNOWN_BYTES
    after_alloc = still & same & (np.r_[0, b[:-1]] > 0)  # UNKNOWN_BYTES is negative: never an allocation
    next_b = np.r_[b[1:], 0]
    before_free = still & ~after_alloc & np.r_[same[1:], False] & (next_b < 0) & (next_b != UNKNOWN_BYTES)
    nbytes[order[after_alloc]] = -np.r_[0, b[:-1]][after_alloc]
    nbytes[order[before_free]] = -next_b[before_free]
    worked_out[order[after_alloc | before_free]] = True
    return worked_out


def prepare_events(events: pd.DataFrame) -> pd.DataFrame:
    """The events as the analysis reads them (a copy; rows and their numbers unchanged): `repeat`
    marks an exact repeat of an earlier event, read once (its `bytes` 0: no pairing, no sum; left
    out of the device's events); `size_worked_out` an unreadable `Bytes` given a size
    (`_work_out_sizes`); `size_unknown` one left unknown, its `bytes` 0: out of pairing and sums,
    and no baseline where it lies before the first total."""
    events = events.copy(deep=False)  # columns shared until one is replaced (copy on write)
    repeat = _repeats(events)
    nbytes = events["bytes"].to_numpy(np.int64).copy()
    worked_out = _work_out_sizes(events, nbytes, repeat)
    unknown = nbytes == UNKNOWN_BYTES
    nbytes[unknown | repeat] = 0
    events["bytes"] = nbytes
    events[REPEAT], events[SIZE_WORKED_OUT], events[SIZE_UNKNOWN] = repeat, worked_out, unknown & ~repeat
    return events


def size_classes() -> list[tuple[str, float]]:
    """(name, largest size in bytes) of catalogs/memory.toml's size classes, in order."""
    return [(c["name"], float(c.get("max_bytes", np.inf))) for c in read_toml("memory.toml")["size_classes"]]


def size_class(nbytes: np.ndarray) -> np.ndarray:
    classes = size_classes()
    bounds = np.array([limit for _, limit in classes[:-1]])
    return np.array([name for name, _ in classes], dtype=object)[np.searchsorted(bounds, nbytes, side="left")]


def _holders(
    live: pd.DataFrame, key: pd.Series, baseline_held: int, peak: int, top: int | None = TOP
) -> list[dict[str, Any]]:
    """Bytes live at the peak per value of `key`, largest first, with what was allocated before the
    window as a holder of its own; past `top` (None: every holder), the rest in one row (so the rows
    sum to the peak).
    `pct` is of the peak — of what the rows hold where that is more (totals that are not the
    running sum of the events, e.g. frees lost: a share past 100 % would say nothing); a
    pre-window holding the totals make negative is no holder."""
    grouped = live.groupby(key.to_numpy(), sort=False)["bytes"].agg(["sum", "size"])
    rows = [{"name": str(k), "bytes": int(r["sum"]), "blocks": int(r["size"])} for k, r in grouped.iterrows()]
    if baseline_held > 0:
        rows.append({"name": BEFORE_WINDOW, "bytes": int(baseline_held), "blocks": None})
    rows.sort(key=lambda r: -r["bytes"])
    if top is not None and len(rows) > top:
        rest = rows[top - 1 :]
        blocks = sum(r["blocks"] or 0 for r in rest)
        rows = [
            *rows[: top - 1],
            {"name": f"({len(rest)} others)", "bytes": sum(r["bytes"] for r in rest), "blocks": blocks},
        ]
    whole = max(peak, sum(row["bytes"] for row in rows))
    for row in rows:
        row["pct"] = 100.0 * row["bytes"] / whole if whole > 0 else None
    return rows


def _allocation_records(rows: pd.DataFrame, top: int = TOP) -> list[dict[str, Any]]:
    largest = rows.sort_values("bytes", ascending=False, kind="stable").head(top)
    return [
        {
            "bytes": int(r.bytes),
            "addr": int(r.addr),
            "alloc_ts_us": float(r.alloc_ts_us),
            "free_ts_us": None if np.isnan(r.free_ts_us) else float(r.free_ts_us),
            "op": None if pd.isna(r.op) else str(r.op),
            "module": None if pd.isna(r.module) else str(r.module),
            "step": int(r.step) if r.step >= 0 else None,
        }
        for r in largest.itertuples(index=False)
    ]


def _slack(ts: np.ndarray, reserved: np.ndarray, allocated: np.ndarray, peak: int) -> dict[str, Any]:
    """Reserved − allocated after each event, held until the next one (`peak` -1: the peak is the
    level before the first event, with no slack known)."""
    ok = (reserved >= 0) & (allocated >= 0)
    if not ok.any():
        return {}
    t, slack = ts[ok], (reserved - allocated)[ok]
    span = t[-1] - t[0]
    at = int(np.argmax(slack))
    return {
        "at_peak_bytes": int(reserved[peak] - allocated[peak]) if peak >= 0 and ok[peak] else None,
        "max_bytes": int(slack[at]),
        "max_ts_us": float(t[at]),
        "mean_bytes": float((slack[:-1] * np.diff(t)).sum() / span) if span > 0 else float(slack[0]),
    }


def _levels(allocated: np.ndarray, nbytes: np.ndarray, unknown: np.ndarray) -> np.ndarray:
    """What the device held after each event (-1: not known): its `Total Allocated`; where it
    records none, the last total before it plus the sizes since — before the first total, that
    total less the sizes after the event up to it — unless a size between cannot be read. A
    device whose events all record a total: its totals. (A total left out of some events had hidden
    a peak between two recorded ones: 1300 said for 1600.)"""
    has = allocated >= 0
    if has.all() or not has.any():
        return allocated.astype(np.int64)
    ran, unread = np.cumsum(nbytes), np.cumsum(unknown)
    n = np.arange(len(has))
    last = np.maximum.accumulate(np.where(has, n, -1))  # the last event with a total, at or before
    at = np.maximum(last, 0)
    first = int(np.flatnonzero(has)[0])
    level = np.where(last >= 0, allocated[at] + ran - ran[at], allocated[first] - (ran[first] - ran))
    known = np.where(last >= 0, unread == unread[at], unread[first] == unread)
    return np.where(has, allocated, np.where(known & (level >= 0), level, -1)).astype(np.int64)


def _level_before(level: np.ndarray, nbytes: np.ndarray, unknown: np.ndarray, baseline: int | None) -> np.ndarray:
    """What the device held just before each event (-1: not known): the level after the event
    before it (`_levels`); at the first event the baseline; where that is not known, the event's
    own level less its size."""
    before = np.r_[-1 if baseline is None else baseline, level[:-1]].astype(np.int64)
    own = (before < 0) & (level >= 0) & ~unknown
    before[own] = level[own] - nbytes[own]
    return np.where(before >= 0, before, -1)


def _step_peaks(steps: np.ndarray, ts: np.ndarray, allocated: np.ndarray, before: np.ndarray) -> list[dict[str, Any]]:
    """Per step, the largest of the levels after its events (`allocated`: `_levels`) and of the
    level carried into it (held from the step's start until its first event: then the peak's time
    is that event's)."""
    ok = steps >= 0
    if not ok.any():
        return []
    frame = pd.DataFrame({"step": steps[ok], "at": np.flatnonzero(ok), "allocated": allocated[ok]})
    per_step = frame.groupby("step", sort=True)
    firsts = per_step["at"].min()
    first = firsts.to_numpy()
    best = per_step["allocated"].idxmax().to_numpy()  # labels of `frame`: its positions
    top = frame["allocated"].to_numpy()[best]
    best_at = frame["at"].to_numpy()[best]
    carried = before[first]
    use_carried = carried > top
    peak = np.where(use_carried, carried, top)
    at = np.where(use_carried, first, best_at)
    return [
        {"step": int(step), "peak_allocated_bytes": int(p), "peak_ts_us": float(ts[a])}
        for step, p, a in zip(firsts.index.to_numpy(), peak.tolist(), at.tolist(), strict=True)
        if p >= 0
    ]


def _baseline(allocated: np.ndarray, nbytes: np.ndarray, unknown: np.ndarray) -> tuple[int | None, str | None]:
    """What the device held before its first event — the first total less every size up to it
    (events before it that record no total changed it too: 12 MiB had been said for 10) — or None
    and why: a size up to it that could not be read, or totals that put it below zero."""
    first = int(np.flatnonzero(allocated >= 0)[0])
    if unknown[: first + 1].any():
        return None, "a size before the first Total Allocated cannot be read"
    baseline = int(allocated[first] - nbytes[: first + 1].sum())
    if baseline < 0:
        return None, (
            f"the first Total Allocated less the sizes up to it is {baseline:,} bytes, below zero: "
            "the totals and the sizes disagree"
        )
    return baseline, None


def device_summary(
    events: pd.DataFrame, allocations: pd.DataFrame, device: str, top: int | None = TOP
) -> dict[str, Any]:
    """report.json's entry of one device (see docs/memory.md); `events` as `prepare_events`
    makes them (repeats left out, unreadable sizes worked out or 0 and flagged)."""
    rows = np.flatnonzero((events["device"] == device).to_numpy())
    repeat = events[REPEAT].to_numpy(bool)[rows]
    rows = rows[~repeat]
    worked_out, unknown = events[SIZE_WORKED_OUT].to_numpy(bool)[rows], events[SIZE_UNKNOWN].to_numpy(bool)[rows]
    ev = events.iloc[rows]
    allocated, reserved = ev["total_allocated"].to_numpy(), ev["total_reserved"].to_numpy()
    ts, nbytes = ev["ts_us"].to_numpy(), ev["bytes"].to_numpy()  # an unknown size is 0 (`prepare_events`)
    has_addr = ev["addr"].to_numpy() >= 0
    mine = allocations[(allocations["device"] == device).to_numpy()]
    entry: dict[str, Any] = {
        "device": device,
        "host": device.split(":")[0] == "cpu",
        "events": len(ev),
        "allocations": int((mine["alloc_event"] >= 0).sum()),
        "unpaired_events": int((~has_addr).sum()),
        "duplicate_events": int(repeat.sum()),
        "unreadable_size_events": int(worked_out.sum() + unknown.sum()),
        "worked_out_size_events": int(worked_out.sum()),
    }
    early = mine[mine["alloc_event"] < 0]
    never = mine[(mine["alloc_event"] >= 0) & (mine["free_event"] < 0)]
    if has_addr.any():
        entry["pre_window_frees"] = {"blocks": len(early), "bytes": int(early["bytes"].sum())}
        # frees written without an address among events with one: any of them may have freed a
        # block counted here (never_freed is then an upper bound)
        blind = (nbytes < 0) & ~has_addr
        entry["never_freed"] = {
            "blocks": len(never),
            "bytes": int(never["bytes"].sum()),
            "largest": _allocation_records(never),
            "frees_without_address": {"events": int(blind.sum()), "bytes": int(-nbytes[blind].sum())},
        }
        # frees that closed nothing: every free with an address less those that closed a block
        entry["unmatched_frees"] = int(((nbytes < 0) & has_addr).sum() - (mine["free_event"] >= 0).sum())
    else:  # no address at all: nothing can be paired, so whether blocks outlived the window is unknown
        entry.update(pre_window_frees=None, never_freed=None, unmatched_frees=None)
    with_total = np.flatnonzero(allocated >= 0)
    if len(with_total) == 0:  # PyTorch 1.9: no totals, so no absolute peak
        change = np.cumsum(nbytes)  # sizes that cannot be read are left out of it (counted)
        at = int(np.argmax(change)) if len(change) else 0
        entry.update(peak_allocated_bytes=None, peak_reserved_bytes=None, peak_ts_us=None, baseline_bytes=None)
        # the largest rise over the window's start: none (0, at its start) where every running sum is below it
        risen = len(change) > 0 and change[at] > 0
        entry["peak_change_bytes"] = int(change[at]) if risen else 0
        entry["peak_change_ts_us"] = float(ts[at]) if risen else None
        entry["note"] = "no Total Allocated in these events: only the change from the window's start is known"
        return entry
    baseline, baseline_note = _baseline(allocated, nbytes, unknown)
    level = _levels(allocated, nbytes, unknown)  # the totals, worked out where not recorded
    # each event whose total moved by other than its size, where it records one and the level
    # before it is known (recorded, or the last total plus the sizes since: events lost in a gap)
    both = (allocated[1:] >= 0) & (level[:-1] >= 0) & ~unknown[1:]
    inconsistent = int(np.count_nonzero(both & (allocated[1:] - level[:-1] != nbytes[1:])))
    with_level = np.flatnonzero(level >= 0)
    peak = int(with_level[np.argmax(level[with_level])])
    at_start = bool(baseline is not None and baseline > level[peak])  # held from the window's start
    peak_bytes = int(baseline) if at_start and baseline is not None else int(level[peak])
    shown = 0 if at_start else peak  # the event whose time and step the peak takes
    event_at_peak = -1 if at_start else rows[peak]  # -1: before every event, nothing of the window live
    live = mine[(mine["alloc_event"] >= 0) & (mine["alloc_event"] <= event_at_peak)]
    live = live[(live["free_event"] < 0) | (live["free_event"] > event_at_peak)]
    freed_before = int(early.loc[early["free_event"] <= event_at_peak, "bytes"].sum())
    baseline_held = None if baseline is None else baseline - freed_before
    live_bytes = int(live["bytes"].sum())
    running = None
    if baseline is not None:  # what the sizes alone say: the baseline plus their running sum
        levels = baseline + np.cumsum(nbytes)
        running = max(baseline, int(levels.max()))
    # the host allocator reserves nothing (writes 0): no reserved memory known there
    has_reserved = reserved > 0
    reserved_at = int(np.flatnonzero(has_reserved)[np.argmax(reserved[has_reserved])]) if has_reserved.any() else -1
    held = 0 if baseline_held is None else baseline_held
    entry.update(
        peak_allocated_bytes=peak_bytes,
        peak_reserved_bytes=int(reserved[reserved_at]) if reserved_at >= 0 else None,
        peak_ts_us=float(ts[shown]),
        peak_step=int(ev["step"].iloc[shown]) if ev["step"].iloc[shown] >= 0 else None,
        peak_at_start=at_start,
        peak_reserved_ts_us=float(ts[reserved_at]) if reserved_at >= 0 else None,
        baseline_bytes=baseline,
        baseline_note=baseline_note,
        baseline_freed_before_peak_bytes=freed_before,
        live_at_peak_bytes=live_bytes,
        live_at_peak_blocks=len(live),
        unexplained_bytes=None if baseline_held is None else peak_bytes - baseline_held - live_bytes,
        inconsistent_events=inconsistent,
        running_peak_bytes=running,
        holders={
            "module": _holders(live, live["module"].astype(object).fillna(NO_MODULE), held, peak_bytes, top),
            "op": _holders(live, live["op"].astype(object).fillna(NO_OP), held, peak_bytes, top),
            "size_class": _holders(live, pd.Series(size_class(live["bytes"].to_numpy())), held, peak_bytes, top),
        },
        largest_at_peak=_allocation_records(live),
        slack=_slack(ts, np.where(has_reserved, reserved, -1), allocated, -1 if at_start else peak),
        steps=_step_peaks(ev["step"].to_numpy(), ts, level, _level_before(level, nbytes, unknown, baseline)),
        # the peak at an event that records no total (worked out: `_levels`); events with no total
        # whose level cannot be worked out (an unreadable size between, or below zero), where it may lie
        peak_worked_out=bool(not at_start and allocated[peak] < 0),
        events_without_level=int(np.count_nonzero(level < 0)),
    )
    return entry


def _device_order(device: str) -> tuple[bool, str, int, str]:
    """GPUs first, host memory last; by kind, then by number (not as text: hip:10 after hip:2)."""
    kind, _, number = device.partition(":")
    return kind == "cpu", kind, int(number) if number.isascii() and number.isdigit() else -1, number


MAX_MEMORY_DEVICES = 64  # devices of one trace analysed in full (a real rank has a host and ≤16 GPUs)


def memory_summary(
    events: pd.DataFrame, allocations: pd.DataFrame, top: int | None = TOP, limit: int = MAX_MEMORY_DEVICES
) -> tuple[list[dict[str, Any]], int]:
    """report.json `memory` of one trace: one entry per device, GPUs first, host memory last —
    at most `limit` devices, those with the highest allocated peak (then the most events); and
    how many devices were left out (a trace may claim thousands: ~10 ms each). Devices in their
    numbers' order: hip:2 before hip:10."""
    devices = [str(d) for d in events["device"].unique()]
    left_out = max(len(devices) - limit, 0)
    if left_out:
        per_device = events.groupby(events["device"].astype(str), observed=True)
        ranked = pd.DataFrame({"peak": per_device["total_allocated"].max(), "events": per_device.size()})
        ranked = ranked.sort_values(["peak", "events"], ascending=False, kind="stable")
        devices = [str(d) for d in ranked.index[:limit]]
    devices.sort(key=_device_order)
    return [device_summary(events, allocations, d, top) for d in devices], left_out


@dataclass
class MemoryReport:
    """The memory analysis of an ingest output: report.json `memory`, memory.parquet's rows, and
    per device the events and allocations the plots draw from."""

    entries: list[dict[str, Any]]
    allocations: pd.DataFrame
    events: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)  # by (trace, rank)
    by_trace: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)  # allocations, by (trace, rank)
    left_out: int = 0  # devices with events but no entry (beyond MAX_MEMORY_DEVICES of a trace)
    oversized: int = 0  # devices left out because their sizes sum past SIZE_SUM_LIMIT


def read_memory_events(
    out_dir: Path, summary: dict[str, Any], run_id: str | None
) -> dict[tuple[str, int], pd.DataFrame]:
    """Each trace's memory events as ingest wrote them (summary.json `memory_file`), by (trace, rank);
    a file of another run, or not a regular file, is refused in one line."""
    found = {}
    for trace in summary.get("traces", []):
        name = trace.get("memory_file")
        if not isinstance(name, str):
            continue
        path = out_dir / name
        if not name.startswith(f"{MEMORY_EVENTS}/") or ".." in Path(name).parts:
            raise AtlasError(
                out_dir / SUMMARY, f"memory_file {name!r} is not in {MEMORY_EVENTS}: run `atlas ingest` again"
            )
        if not path.is_file() or path.is_symlink():
            raise AtlasError(path, f"listed in {SUMMARY} but missing or not a regular file: run `atlas ingest` again")
        if run_id is not None and table_run(path) != run_id:
            raise AtlasError(path, f"not from the ingest run that wrote {SUMMARY}: run `atlas ingest` again")
        table = load_checked(path, EVENT_KINDS, "a memory events table")
        sizes = table.column("bytes")
        events = table.to_pandas()
        if sizes.null_count:  # a size ingest could not read: UNKNOWN_BYTES from here on
            events["bytes"] = sizes.fill_null(UNKNOWN_BYTES).to_numpy()
        _check_sizes(path, events)
        stem = str(events["trace"].iloc[0]) if "trace" in events and len(events) else Path(name).stem
        found[(stem, int(trace.get("rank", 0)))] = events
    return found


def _check_sizes(path: Path, events: pd.DataFrame) -> None:
    """Refuse, in one line, sizes ingest never writes (`events.MAX_MEMORY_BYTES`; UNKNOWN_BYTES
    marks a size it could not read): with them in bounds, no difference of two of them leaves int64."""
    sizes = events["bytes"].to_numpy(np.float64)
    totals = np.concatenate([events[c].to_numpy(np.float64) for c in ("total_allocated", "total_reserved")])
    beyond = (np.abs(sizes) > MAX_MEMORY_BYTES) & (sizes != UNKNOWN_BYTES)  # ingest's mark of an unreadable size
    bad = int(np.count_nonzero(beyond) + np.count_nonzero(totals > MAX_MEMORY_BYTES))
    bad += int(np.count_nonzero(totals < -1))
    if bad:
        raise AtlasError(path, f"{bad} sizes beyond ±2^48 bytes or totals below -1, which `atlas ingest` never writes")


# Sizes of one device's events summed in int64 (the holders, never-freed, the running change) stay
# exact below this; a device whose sizes sum past it (tens of thousands of 2^48-byte events: damage)
# is left out of the analysis, counted.
SIZE_SUM_LIMIT = float(1 << 62)


def _within_sum_limit(events: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """`events` without the devices whose sizes sum past SIZE_SUM_LIMIT, and how many those were."""
    sizes = np.abs(events["bytes"].to_numpy(np.float64))
    codes = events["device"].cat.codes.to_numpy()
    sums = np.bincount(codes + 1, weights=sizes)  # code -1 (no device) counted apart
    over = np.flatnonzero(sums >= SIZE_SUM_LIMIT) - 1
    if not len(over):
        return events, 0
    return events[~np.isin(codes, over)].reset_index(drop=True), len(over)


def analyse_memory(events_by_trace: dict[tuple[str, int], pd.DataFrame], top: int | None = TOP) -> MemoryReport:
    """Allocations and per-device summaries of every trace (`trace` and `rank` in both); `top`
    holders of each kind, the rest in one row (None: every holder, as `atlas diff` compares them)."""
    entries, parts, by_trace, left_out, oversized = [], [], {}, 0, 0
    for (stem, rank), events in events_by_trace.items():
        events = events.reset_index(drop=True)
        for column in ("device", "op", "module", "call_stack"):
            if not isinstance(events[column].dtype, pd.CategoricalDtype):
                events[column] = events[column].astype("category")
        events, over = _within_sum_limit(prepare_events(events))
        oversized += over
        events_by_trace[(stem, rank)] = events
        allocations = pair_allocations(events)
        by_trace[(stem, rank)] = allocations
        summaries, left = memory_summary(events, allocations, top)
        entries += [{"trace": stem, "rank": rank, **entry} for entry in summaries]
        left_out += left
        allocations = allocations.copy()
        allocations.insert(0, "rank", rank)
        allocations.insert(0, "trace", stem)
        parts.append(allocations)
    frame = (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["trace", "rank", *ALLOCATION_COLUMNS])
    )
    for column in ("trace", "device", "op", "module", "call_stack"):
        frame[column] = _sorted_categories(frame[column])
    return MemoryReport(entries, frame, events_by_trace, by_trace, left_out, oversized)


def _sorted_categories(column: pd.Series) -> pd.Categorical:
    """The column as `astype(object).astype("category")` makes it — the values used, sorted, as
    categories; missing values missing — without turning every row into a Python object first
    (a categorical is recoded through its few categories: 0.11 → 0.01 s of a report's 19k
    allocations)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        used = column.cat.remove_unused_categories()
        try:
            return used.cat.set_categories(sorted(used.cat.categories)).array
        except TypeError:  # categories of mixed types: pandas' own sort below
            pass
    codes, uniques = pd.factorize(column, sort=True)
    return pd.Categorical.from_codes(codes, categories=uniques)


def _on(entries: list[dict[str, Any]], shown: int = 4) -> str:
    """`cuda:0, cuda:1` — the devices of `entries` (the first `shown`, then how many more)."""
    names = [str(e["device"]) for e in entries]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _count(entries: list[dict[str, Any]], key: str) -> int:
    return sum(e.get(key) or 0 for e in entries)


def memory_warnings(entries: list[dict[str, Any]], left_out: int = 0, oversized: int = 0) -> list[str]:
    """What the numbers cannot say, each kind in one line; `left_out`: devices without an entry,
    `oversized`: devices whose event sizes sum past SIZE_SUM_LIMIT."""
    lines = []
    if oversized:
        lines.append(f"{oversized:,} devices' memory events sum past 2^62 bytes (damaged sizes): not analysed")
    if left_out:
        lines.append(
            f"{left_out:,} more devices have memory events: only the {MAX_MEMORY_DEVICES} of each trace with the "
            "highest allocated peak are analysed (memory.parquet holds every allocation)"
        )
    # no address on a device: PyTorch 1.9; some only: events damaged or written by another writer
    unaddressed = [e for e in entries if e["unpaired_events"] and e.get("never_freed") is None]
    if unaddressed:
        lines.append(
            f"{_count(unaddressed, 'unpaired_events'):,} memory events carry no address (PyTorch < 1.10?): "
            "not paired into allocations"
        )
    partly = [e for e in entries if e["unpaired_events"] and e.get("never_freed") is not None]
    if partly:
        blind = [e for e in partly if e["never_freed"]["frees_without_address"]["events"]]
        said = (
            f"; {_count([e['never_freed']['frees_without_address'] for e in blind], 'events'):,} of them are frees "
            f"that may have freed blocks counted as never freed on {_on(blind)}"
            if blind
            else ""
        )
        lines.append(
            f"{_count(partly, 'unpaired_events'):,} memory events on {_on(partly)} carry no address where the "
            f"device's other events do (damaged events?): not paired into allocations{said}"
        )
    no_total = [e["device"] for e in entries if e.get("peak_allocated_bytes") is None]
    if no_total:
        lines.append(f"no Total Allocated on {', '.join(no_total)}: only the change from the window's start is known")
    worked = [e for e in entries if e.get("peak_worked_out")]
    if worked:
        lines.append(
            f"the peak of {_on(worked)} lies at an event that records no Total Allocated: worked out as the "
            "last total plus the sizes since"
        )
    blind = [e for e in entries if e.get("events_without_level")]
    if blind:
        lines.append(
            f"{_count(blind, 'events_without_level'):,} memory events on {_on(blind)} record no Total Allocated "
            "whose level cannot be worked out (a size that cannot be read, or totals below the sizes): the peak "
            "may lie at one of them"
        )
    repeats = _count(entries, "duplicate_events")
    if repeats:
        lines.append(
            f"{repeats:,} memory events repeat an earlier one exactly (time, device, address, size, totals): "
            "each read once"
        )
    unreadable = _count(entries, "unreadable_size_events")
    if unreadable:
        worked_out = _count(entries, "worked_out_size_events")
        lines.append(
            f"{unreadable:,} memory events have a Bytes that cannot be read: {worked_out:,} sized from the totals "
            f"or their address's other events, {unreadable - worked_out:,} left out of pairing and sums"
        )
    early = sum((e.get("pre_window_frees") or {}).get("blocks", 0) for e in entries)  # null: no addresses
    if early:
        lines.append(f"{early:,} frees of blocks allocated before the profiling window (counted apart)")
    unmatched = [e for e in entries if e.get("unmatched_frees")]
    if unmatched:
        lines.append(
            f"{_count(unmatched, 'unmatched_frees'):,} frees on {_on(unmatched)} close no allocation at their "
            "address (a second free, or a size no block there had): not paired"
        )
    no_baseline = [e for e in entries if e.get("baseline_note")]
    for entry in no_baseline[:4]:
        lines.append(f"no baseline on {entry['device']}: {entry['baseline_note']}")
    inconsistent = [e for e in entries if e.get("inconsistent_events")]
    if inconsistent:
        worst = max(inconsistent, key=lambda e: e["inconsistent_events"])
        running = worst.get("running_peak_bytes")
        said = (
            f"; on {worst['device']} the sizes' running sum peaks at {running:,} bytes, the totals at "
            f"{worst['peak_allocated_bytes']:,}"
            if running is not None and running != worst["peak_allocated_bytes"]
            else ""
        )
        lines.append(
            f"{_count(inconsistent, 'inconsistent_events'):,} memory events on {_on(inconsistent)} moved Total "
            f"Allocated by other than their Bytes (the totals and the sizes disagree: events lost?){said}"
        )
    off = [e for e in entries if e.get("unexplained_bytes")]
    if off:
        worst = max(off, key=lambda e: abs(e["unexplained_bytes"]))
        lines.append(
            f"{len(off)} devices' totals are not the running sum of their events (events lost?): at the peak of "
            f"{worst['device']}, {worst['unexplained_bytes']:+,} bytes are not explained by the allocations"
        )
    return lines


OTHER = "(other modules)"


def live_by_module(
    events: pd.DataFrame, allocations: pd.DataFrame, device: str, top: int = 8, half_window: int = 5000
) -> pd.DataFrame:
    """Bytes live after each event of `device` per holder — the `top` modules at the peak, the
    others together, what was allocated before the window — for the events within `half_window`
    of the peak (all of them when fewer). Where the peak is the level held before the first event
    (`peak_at_start`), a first row at the first event's time holds it: the baseline, nothing of the
    window live. Rows sum to `total_allocated` where the totals are the running sum of the events.
    Columns: `ts_us`, `total_allocated`, `total_reserved` (-1: not recorded), the holders.
    `events` as `prepare_events` makes them; the peak is `device_summary`'s."""
    rows = np.flatnonzero((events["device"] == device).to_numpy() & ~events[REPEAT].to_numpy(bool))
    allocated = events["total_allocated"].to_numpy()[rows]
    if len(rows) == 0 or (allocated < 0).all():
        return pd.DataFrame()
    unknown = events[SIZE_UNKNOWN].to_numpy(bool)[rows]
    sizes = events["bytes"].to_numpy()[rows]  # an unknown size is 0 (`prepare_events`)
    baseline = _baseline(allocated, sizes, unknown)[0]  # as device_summary's (none where unknown)
    level = _levels(allocated, sizes, unknown)
    peak = int(np.argmax(level))
    at_start = baseline is not None and baseline > level[peak]
    lo, hi = max(peak - half_window, 0), min(peak + half_window + 1, len(rows))
    mine = allocations[(allocations["device"] == device).to_numpy()]
    modules = mine["module"].astype(object).fillna(NO_MODULE).to_numpy()
    event_at_peak = -1 if at_start else rows[peak]  # -1: before every event, nothing of the window live
    live_at_peak = (mine["alloc_event"] >= 0) & (mine["alloc_event"] <= event_at_peak)
    live_at_peak &= (mine["free_event"] < 0) | (mine["free_event"] > event_at_peak)
    ranked = pd.Series(mine["bytes"].to_numpy()[live_at_peak.to_numpy()]).groupby(modules[live_at_peak.to_numpy()])
    holders = ranked.sum().sort_values(ascending=False).index.tolist()[:top]
    names = [BEFORE_WINDOW, *holders, OTHER]
    column = {name: k for k, name in enumerate(names)}
    layer = np.array([column.get(m, len(names) - 1) for m in modules], dtype=np.int64)
    layer[(mine["alloc_event"] < 0).to_numpy()] = 0  # frees of pre-window blocks lower the baseline
    nbytes = mine["bytes"].to_numpy()
    # changes per holder after each event of the window; those before it folded into the first row
    delta = np.zeros((hi - lo + 1, len(names)), dtype=np.int64)
    for event, sign in ((mine["alloc_event"].to_numpy(), 1), (mine["free_event"].to_numpy(), -1)):
        pos = np.searchsorted(rows, event)
        keep = (event >= 0) & (pos < hi)
        np.add.at(delta, (np.maximum(pos[keep] - lo + 1, 0), layer[keep]), sign * nbytes[keep])
    delta[0, 0] += baseline or 0
    live = np.cumsum(delta, axis=0)[1:]
    frame = pd.DataFrame(live, columns=names)
    frame.insert(0, "ts_us", events["ts_us"].to_numpy()[rows[lo:hi]])
    frame.insert(1, "total_allocated", allocated[lo:hi])
    frame.insert(2, "total_reserved", events["total_reserved"].to_numpy()[rows[lo:hi]])
    if at_start:  # the level before the first event (lo is 0): the plot starts at the peak it reports
        start = pd.DataFrame([[frame["ts_us"].iloc[0], baseline, -1, baseline, *[0] * (len(names) - 1)]])
        start.columns = frame.columns
        frame = pd.concat([start, frame], ignore_index=True)
        frame.attrs["peak_at_start"] = True  # its first row is that level (`timeline_figure` draws it apart)
    return frame


def _paired(
    a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None, str]]:
    """The entries of two runs in pairs (an absent side None) with how they were paired, per rank
    and kind (GPU or host memory): by device name where the two runs share a name there (cuda:1
    meets cuda:1, a device only one run has meets nothing), else in order (`cuda:0` of an A100
    run meets `hip:0` of an MI300X run: "position")."""

    def by_group(entries: list[dict[str, Any]]) -> dict[tuple[int, bool], list[dict[str, Any]]]:
        groups: dict[tuple[int, bool], list[dict[str, Any]]] = {}
        for entry in entries:
            groups.setdefault((entry["rank"], entry["host"]), []).append(entry)
        return groups

    groups_a, groups_b = by_group(a), by_group(b)
    pairs: list[tuple[dict[str, Any] | None, dict[str, Any] | None, str]] = []
    for group in sorted(set(groups_a) | set(groups_b)):
        side_a, side_b = groups_a.get(group, []), groups_b.get(group, [])
        names_a = [str(e["device"]) for e in side_a]
        names_b = [str(e["device"]) for e in side_b]
        # one device name twice on a rank (traces of one rank) cannot be told apart by name
        unique = len(set(names_a)) == len(names_a) and len(set(names_b)) == len(names_b)
        if unique and set(names_a) & set(names_b):
            named_b = dict(zip(names_b, side_b, strict=True))
            pairs += [(e, named_b.get(n), "name") for e, n in zip(side_a, names_a, strict=True)]
            pairs += [(None, e, "name") for e, n in zip(side_b, names_b, strict=True) if n not in names_a]
        else:
            for n in range(max(len(side_a), len(side_b))):
                pairs.append(
                    (side_a[n] if n < len(side_a) else None, side_b[n] if n < len(side_b) else None, "position")
                )
    return pairs


def _holder_changes(a: dict[str, Any] | None, b: dict[str, Any] | None, top: int) -> list[dict[str, Any]]:
    """Bytes at the peak per module in A and B — every holder of each (`run_memory`: a module of
    A's top holders folded into B's "(N others)" had read as gone), largest change first."""

    def of(entry: dict[str, Any] | None) -> dict[str, int]:
        return {h["name"]: h["bytes"] for h in (entry or {}).get("holders", {}).get("module", [])}

    held_a, held_b = of(a), of(b)
    names = list(dict.fromkeys([*held_a, *held_b]))
    rows = [{"module": n, "a_bytes": held_a.get(n), "b_bytes": held_b.get(n)} for n in names]
    for row in rows:
        row["delta_bytes"] = (row["b_bytes"] or 0) - (row["a_bytes"] or 0)
    rows.sort(key=lambda r: -abs(r["delta_bytes"]))
    return rows[:top]


def compare_memory(a: list[dict[str, Any]], b: list[dict[str, Any]], top: int = TOP) -> list[dict[str, Any]]:
    """Per device of run A and run B (`_paired`; `paired_by` says how, a device of one run only has
    None for the other's): the peaks, the baselines and the change, and the modules holding the
    peaks, largest change first."""
    rows = []
    for ea, eb, paired_by in _paired(a, b):
        either = ea if ea is not None else eb
        assert either is not None
        row: dict[str, Any] = {"rank": either["rank"], "host": either["host"]}
        row["device_a"], row["device_b"] = (e["device"] if e else None for e in (ea, eb))
        row["paired_by"] = paired_by
        for field_name in ("peak_allocated_bytes", "peak_reserved_bytes", "baseline_bytes"):
            va, vb = ((e or {}).get(field_name) for e in (ea, eb))
            row[f"a_{field_name}"], row[f"b_{field_name}"] = va, vb
            row[f"delta_{field_name}"] = vb - va if va is not None and vb is not None else None
        row["holders"] = _holder_changes(ea, eb, top)
        rows.append(row)
    return rows


def run_memory(out_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """report.json `memory` of an ingest output, computed afresh (`atlas diff`)."""
    events = read_memory_events(out_dir, summary, summary.get("run_id"))
    return analyse_memory(events, top=None).entries if events else []  # every holder: none hides in "others"
