"""Launch statistics and "graph this" candidates.

* Launch statistics, per kernel and per launching op, over eagerly launched activities (those
  with a launch call of their own; graph replays share one `cudaGraphLaunch` and are left out):
  CPU time of the launch call, launch-to-start delay (queueing on the stream; for an activity a
  recorded event wait held past its launch, from the end of what it waited for: the time held is
  the event's, `other` idle time, no queueing) and the share of activities shorter on the GPU
  than their launch call on the CPU (launch-bound).
* Graph candidates: on each stream, stretches of consecutive short eager kernels where every gap
  between neighbours is a host wait or a kernel wait (or none), and none is split at its kernel's
  launch (`idle.gaps`: an event wait, or one the trace does not show, held the kernel past its
  launch — a wait for something else than the host, that a graph keeps). Captured in a CUDA
  graph, the stretch would be replayed by one launch and those waits would (at most) vanish: the
  saving is the waits inside the stretch. Stretches are grouped by the call stack all their
  launches share (the code to capture), ranked by the total saving.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.idle import CATEGORIES, EVENT_WAIT_END, KERNEL_WAIT_US, gaps, start_order
from kernel_atlas.ingest.frames import MODULE_PREFIX, STACK_SEPARATOR

SHORT_KERNEL_US = 20.0
MIN_STRETCH_KERNELS = 3
NO_LAUNCHER = "(no launcher)"
LAUNCH_COLUMNS = [
    "level",
    "key",
    "count",
    "launch_us",
    "launch_mean_us",
    "delay_mean_us",
    "delay_p50_us",
    "delay_max_us",
    "delays",
    "gpu_us",
    "gpu_mean_us",
    "launch_bound_pct",
]
CANDIDATE_COLUMNS = [
    "rank",
    "device",
    "stream",
    "frame",
    "module",
    "saving_us",
    "host_wait_us",
    "kernel_wait_us",
    "stretches",
    "kernels",
    "kernels_per_stretch",
    "gpu_us",
    "first_ts_us",
    "first_kernel",
    "call_stack",
    "device_idle_us",
]


def eager(frame: pd.DataFrame) -> pd.Series:
    """Activities with a launch call of their own (not replayed from a graph)."""
    launched = frame["launch_ts_us"].notna() & ~frame["graph_launch"].fillna(False).astype(bool)
    if "launch_dur_us" in frame:
        launched &= frame["launch_dur_us"].notna()
    return launched


# When the host's and the GPU's clocks disagree, a launch-to-start delay — a GPU time less a host
# time — measures the disagreement, not a queue. Such delays are not shown. The one sign a trace
# gives is an activity that starts before its launch call: more than CLOCK_SHARE of the eager
# activities start more than CLOCK_LEAD_US before their call (the profiler rounds each clock
# apart), and so do at least CLOCK_MAJORITY of those launched onto an idle stream (the ones whose
# delay is a launch's latency alone: a GPU clock behind by more than that makes most of them
# early; an outlier or two does not). A start long after its call is no such sign: an event wait
# or work the trace does not record delays it as much (vLLM's profiler, started while the
# previous step still ran on the GPU, had one start 7.8 ms late and its delays were all hidden).
CLOCK_LEAD_US = 1.0
CLOCK_SHARE = 0.01
CLOCK_MAJORITY = 0.5
# A GPU clock ahead makes every launch onto an idle stream start late: claimed where at least
# CLOCK_AHEAD_MIN of them all start CLOCK_AHEAD_US or more after their call — one such start is
# what one unrecorded wait gives (vLLM: one start 7.8 ms late), several all late are a clock
CLOCK_AHEAD_US = 1000.0
CLOCK_AHEAD_MIN = 3


def clock_checks(frame: pd.DataFrame) -> dict[int, dict[str, float | int | str]]:
    """Per rank of `frame` whose host and GPU clocks disagree (see CLOCK_LEAD_US): which way,
    how many eager activities say so, and by how much at least."""
    if "launch_dur_us" not in frame or frame.empty:
        return {}
    launched = eager(frame).to_numpy()
    rank = frame["rank"].to_numpy() if "rank" in frame else np.zeros(len(frame), np.int64)
    ts = frame["ts_us"].to_numpy(np.float64)
    delay = ts - frame["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
    # on an idle stream: the previous activity of the stream ended before the launch call
    order, group = start_order(frame, ["rank", "device", "stream"] if "rank" in frame else ["device", "stream"])
    end = ts + frame["dur_us"].to_numpy(np.float64)
    prev_end = np.full(len(frame), -np.inf)
    same = group[1:] == group[:-1]
    prev_end[order[1:][same]] = end[order[:-1]][same]
    early = delay < -CLOCK_LEAD_US
    idle = launched & (prev_end < ts - delay)
    table = pd.DataFrame({"rank": rank[launched], "early": early[launched], "delay": delay[launched]}).groupby(
        "rank", sort=True
    )
    idle_early = pd.Series(early[idle]).groupby(rank[idle]).mean()
    idle_delay = pd.Series(delay[idle]).groupby(rank[idle]).agg(["min", "size"])
    counts = pd.DataFrame({"early": table["early"].sum(), "count": table.size(), "lowest": table["delay"].min()})
    checks: dict[int, dict[str, float | int | str]] = {}
    for r, early_count, count, lowest in counts.itertuples():
        robust = r in idle_early.index and idle_early.loc[r] >= CLOCK_MAJORITY
        if early_count and early_count > CLOCK_SHARE * count and robust:
            checks[int(r)] = {
                "gpu_clock": "behind",
                "activities": int(early_count),
                "of": int(count),
                "by_us": round(float(-lowest), 3),
            }
        elif r in idle_delay.index and idle_delay.loc[r, "size"] >= CLOCK_AHEAD_MIN:
            least = float(idle_delay.loc[r, "min"])
            if least >= CLOCK_AHEAD_US:
                size = int(idle_delay.loc[r, "size"])
                checks[int(r)] = {"gpu_clock": "ahead", "activities": size, "of": int(count), "by_us": round(least, 3)}
    return checks


def clock_line(check: dict[str, float | int | str]) -> str:
    """What a clock check found, in words."""
    if check["gpu_clock"] == "behind":
        found = (
            f"{check['activities']:,} of {check['of']:,} launched GPU activities start before their launch "
            f"call (by up to {check['by_us']:,.1f} µs)"
        )
    else:
        found = (
            f"every one of {check['activities']:,} GPU activities launched onto an idle stream starts "
            f"{check['by_us']:,.1f} µs or more after its launch call"
        )
    return f"the host and GPU clocks disagree: {found}; launch-to-start delays are not shown"


def clocks_found(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The clock checks report.json's `launches` holds (`launch_facts`'s `clocks`, or each rank's
    under `per_rank`), rank by rank."""
    return facts.get("clocks") or [c for rank in facts.get("per_rank", []) for c in rank.get("clocks", [])]


def _released(frame: pd.DataFrame) -> np.ndarray:
    """Per activity, when the recorded event wait that held it let it go — the end of the activity
    it waited for (`idle.EVENT_WAIT_END`), at most its start —; NaN where none is recorded."""
    if EVENT_WAIT_END not in frame:
        return np.full(len(frame), np.nan)
    ends = frame[EVENT_WAIT_END].to_numpy(np.float64, na_value=np.nan)
    return np.minimum(ends, frame["ts_us"].to_numpy(np.float64))  # NaN stays NaN (np.fmin would drop it)


def _measured_delay(rows: pd.DataFrame, checks: dict[int, dict[str, float | int | str]]) -> pd.Series:
    """Launch-to-start delays of eager `rows`, NaN on ranks whose clocks disagree (`clock_checks`).
    An activity a recorded event wait held past its launch is measured from its release
    (`_released`): the time held was the event's, not a queue's (a kernel launched at 80 µs and
    held by a wait on another stream's GEMM until 325 µs, started at 330 µs, queued 5 µs, not 250)."""
    launch = rows["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
    delay = rows["ts_us"] - np.fmax(launch, _released(rows))  # fmax: NaN release → the launch
    if checks:
        rank = rows["rank"] if "rank" in rows else pd.Series(0, index=rows.index)
        delay = delay.where(~rank.isin(list(checks)))
    return delay


def launch_stats(frame: pd.DataFrame, checks: dict[int, dict[str, float | int | str]] | None = None) -> pd.DataFrame:
    """launch_stats.parquet: one row per kernel name (`level` = kernel) and per launching op
    (`level` = op), largest launch CPU time first; delays null on ranks whose clocks disagree
    (`checks`, `clock_checks`)."""
    if "launch_dur_us" not in frame:
        return pd.DataFrame(columns=LAUNCH_COLUMNS)
    rows = frame[eager(frame)]
    launcher = rows["launcher"]
    # grouped on the categorical codes: no string per row
    if isinstance(launcher.dtype, pd.CategoricalDtype) and NO_LAUNCHER not in launcher.cat.categories:
        launcher = launcher.cat.add_categories([NO_LAUNCHER])
    data = pd.DataFrame(
        {
            "kernel": rows["name"],
            "op": launcher.fillna(NO_LAUNCHER),
            "launch": rows["launch_dur_us"],
            "delay": _measured_delay(rows, checks or {}),
            "gpu": rows["dur_us"],
            "bound": rows["dur_us"] < rows["launch_dur_us"],
        }
    )
    tables = []
    for level in ("kernel", "op"):
        grouped = data.groupby(level, sort=False, observed=True)
        table = pd.DataFrame(
            {
                "count": grouped.size(),
                "launch_us": grouped["launch"].sum(),
                "launch_mean_us": grouped["launch"].mean(),
                "delay_mean_us": grouped["delay"].mean(),
                "delay_p50_us": grouped["delay"].median(),
                "delay_max_us": grouped["delay"].max(),
                "delays": grouped["delay"].count(),  # measured: a rank whose clocks disagree has none
                "gpu_us": grouped["gpu"].sum(),
                "gpu_mean_us": grouped["gpu"].mean(),
                "launch_bound_pct": 100.0 * grouped["bound"].mean(),
            }
        )
        table = table.rename_axis("key").reset_index().sort_values("launch_us", ascending=False, kind="stable")
        table["key"] = table["key"].astype(str)
        table.insert(0, "level", level)
        tables.append(table)
    return pd.concat(tables, ignore_index=True)[LAUNCH_COLUMNS]


def _us(value: float) -> float:
    """A time in µs for report.json, to the nanosecond as its other times: a median of two
    timestamp differences is 21.55, not 21.550000000000068."""
    return round(float(value), 3)


def launch_facts(frame: pd.DataFrame, checks: dict[int, dict[str, float | int | str]] | None = None) -> dict[str, Any]:
    """Totals for report.json; the delay left out (null) where clocks disagree, and `clocks` says
    where and why (`clock_checks`)."""
    rows = frame[eager(frame)] if "launch_dur_us" in frame else frame.iloc[0:0]
    graph = int(frame["graph_launch"].fillna(False).astype(bool).sum())
    if rows.empty:
        return {"eager_activities": 0, "graph_replayed": graph}
    delay = _measured_delay(rows, checks or {})
    facts: dict[str, Any] = {
        "eager_activities": len(rows),
        "graph_replayed": graph,
        "launch_cpu_us": _us(rows["launch_dur_us"].sum()),
        "launch_p50_us": _us(rows["launch_dur_us"].median()),
        "delay_p50_us": _us(delay.median()) if delay.notna().any() else None,
        "launch_bound_pct": float(100.0 * (rows["dur_us"] < rows["launch_dur_us"]).mean()),
    }
    if checks:
        facts["clocks"] = [{"rank": r, **check, "line": clock_line(check)} for r, check in sorted(checks.items())]
    return facts


def launch_facts_by_rank(
    frame: pd.DataFrame, checks: dict[int, dict[str, float | int | str]] | None = None
) -> dict[int, dict[str, Any]]:
    """`launch_facts` of each rank of `frame` alone (rows of several ranks analysed together),
    worked out for all ranks at once."""
    rank = frame["rank"].to_numpy()
    present = np.unique(rank).tolist()
    graph = pd.Series(frame["graph_launch"].fillna(False).astype(bool).to_numpy()).groupby(rank).sum()
    facts: dict[int, dict[str, Any]] = {
        r: {"eager_activities": 0, "graph_replayed": int(graph.loc[r])} for r in present
    }
    if "launch_dur_us" not in frame:
        return facts
    mine = eager(frame).to_numpy()
    rows = frame[mine]
    per = pd.DataFrame(
        {
            "rank": rank[mine],
            "launch": rows["launch_dur_us"].to_numpy(np.float64),
            "delay": _measured_delay(rows, checks or {}).to_numpy(np.float64),
            "bound": (rows["dur_us"] < rows["launch_dur_us"]).to_numpy(),
        }
    ).groupby("rank", sort=True)
    table = pd.DataFrame(
        {
            "count": per.size(),
            "launch_sum": per["launch"].sum(),
            "launch_p50": per["launch"].median(),
            "delay_p50": per["delay"].median(),
            "bound": per["bound"].mean(),
        }
    )
    for r, count, launch_sum, launch_p50, delay_p50, bound in table.itertuples():
        facts[int(r)].update(
            {
                "eager_activities": int(count),
                "launch_cpu_us": _us(launch_sum),
                "launch_p50_us": _us(launch_p50),
                "delay_p50_us": None if np.isnan(delay_p50) else _us(delay_p50),
                "launch_bound_pct": float(100.0 * bound),
            }
        )
    for r, check in (checks or {}).items():
        if r in facts:
            facts[r]["clocks"] = [{"rank": r, **check, "line": clock_line(check)}]
    return facts


def _stack_frames(call_stack: object) -> tuple[str, ...]:
    """Enclosing frames of a launch, outermost first (the launch call itself dropped)."""
    if not isinstance(call_stack, str) or not call_stack:
        return ()
    return tuple(reversed(call_stack.split(STACK_SEPARATOR)[1:]))


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def _describe(frames: tuple[str, ...]) -> tuple[str | None, str | None, str | None]:
    """A shared stack (outermost first) as (call stack, innermost frame, module path)."""
    module = ".".join(x[len(MODULE_PREFIX) :] for x in frames if x.startswith(MODULE_PREFIX))
    return STACK_SEPARATOR.join(reversed(frames)) or None, frames[-1] if frames else None, module or None


class _DeviceIdle:
    """When each device of a frame sat idle (no activity on any of its streams): per (rank,
    device), its idle gaps in time order and the idle time before each — to measure how much of a
    time range the device was idle. `between`: the frame's exact per-device `gaps`, when already
    computed (indexed like the frame, whose index is then a RangeIndex)."""

    def __init__(self, frame: pd.DataFrame, between: pd.DataFrame | None = None):
        if between is None or not frame.index.equals(pd.RangeIndex(len(frame))):
            frame = frame.reset_index(drop=True)
            between = gaps(frame, per_stream=False)
        self.devices = set(zip(frame["rank"].tolist(), _device_key(frame["device"]).tolist(), strict=True))
        self.gaps: dict[tuple[Any, Any], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if between.empty:
            return
        until = frame["ts_us"].to_numpy(np.float64)[between.index.to_numpy()]
        since = until - between["gap_us"].to_numpy(np.float64)
        keys = pd.DataFrame({"rank": between["rank"].to_numpy(), "device": _device_key(between["device"])})
        for key, rows in keys.groupby(["rank", "device"], sort=False).indices.items():
            take = rows[np.argsort(since[rows], kind="stable")]
            before = np.concatenate([[0.0], np.cumsum(until[take] - since[take])])
            self.gaps[key] = (since[take], until[take], before)

    def _before(self, key: tuple[Any, Any], t: np.ndarray) -> np.ndarray:
        """The device's idle time before each time of `t`."""
        since, until, before = self.gaps[key]
        k = np.searchsorted(since, t, side="right") - 1  # the last gap starting at or before t
        at = np.maximum(k, 0)
        inside = np.clip(t - since[at], 0.0, until[at] - since[at])
        return np.where(k >= 0, before[at] + inside, 0.0)

    def within(self, rank: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per range [start, end] of a device, the time the device was idle in it (0 for a device
        never idle; the whole range for one the frame does not hold)."""
        idle = np.zeros(len(start))
        query = pd.DataFrame({"rank": rank, "device": _device_key(pd.Series(device))})
        for key, rows in query.groupby(["rank", "device"], sort=False).indices.items():
            if key in self.gaps:
                idle[rows] = self._before(key, end[rows]) - self._before(key, start[rows])
            elif key not in self.devices:
                idle[rows] = end[rows] - start[rows]
        return idle


def _device_key(device: pd.Series) -> np.ndarray:
    """A device column as int64 keys (-1: not known)."""
    return pd.to_numeric(device, errors="coerce").fillna(-1).to_numpy(np.int64)


def graph_candidates(
    frame: pd.DataFrame,
    kernel_wait_us: float = KERNEL_WAIT_US,
    short_kernel_us: float = SHORT_KERNEL_US,
    min_kernels: int = MIN_STRETCH_KERNELS,
    stream_gaps: pd.DataFrame | None = None,
    device_gaps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """graph_candidates.parquet: stretches of short eager kernels separated by host or kernel
    waits (a gap split at its kernel's launch ends a stretch, `idle.gaps`), grouped by (rank,
    device, stream, shared call stack), largest saving first; activities on no known stream are
    left out. `stream_gaps`: the frame's exact per-stream `gaps` with this
    `kernel_wait_us`, and `device_gaps` its exact per-device ones, when already computed."""
    device_idle = _DeviceIdle(frame, device_gaps)  # every activity keeps its device busy, on a known stream or not
    if frame["stream"].isna().any():  # activities on no known stream are no stream's stretch
        frame, stream_gaps = frame[frame["stream"].notna()], None
    if frame.empty:
        return pd.DataFrame(columns=CANDIDATE_COLUMNS)
    if stream_gaps is None or not frame.index.equals(pd.RangeIndex(len(frame))):
        frame = frame.reset_index(drop=True)
        stream_gaps = gaps(frame, per_stream=True, kernel_wait_us=kernel_wait_us)
    gap_of = np.zeros(len(frame))
    gap_of[stream_gaps.index] = stream_gaps["gap_us"].to_numpy()
    split_of = np.zeros(len(frame), bool)  # a gap split at its launch (`gaps`: its host part > 0)
    split_of[stream_gaps.index] = stream_gaps["host_us"].to_numpy(np.float64) > 0
    category_of = np.full(len(frame), -1, np.int64)  # codes of the gap's category (-1: no gap before)
    named = pd.Categorical(stream_gaps["category"], categories=CATEGORIES)
    category_of[stream_gaps.index] = named.codes
    order, group = start_order(frame, ["rank", "device", "stream"])
    stack_code, stack_text = pd.factorize(frame["call_stack"])  # -1: no call stack
    start = frame["ts_us"].to_numpy(np.float64)[order]
    end = start + frame["dur_us"].to_numpy(np.float64)[order]
    gap = gap_of[order]
    # A split gap ends a stretch whatever its category: the kernel waited past its launch for an
    # event (or what the trace does not show), which a graph replay waits for too — its kernel_wait
    # category names only the queue after the launch. Every other gap's host wait is the whole gap
    # where it is a host_wait one (`gaps`: only a split gap has a host part of its own).
    split = split_of[order]
    host_wait = category_of[order] == CATEGORIES.index("host_wait")
    other = category_of[order] == CATEGORIES.index("other")
    short = (
        (frame["kind"] == "kernel").to_numpy()[order]
        & eager(frame).to_numpy()[order]
        & (frame["dur_us"].to_numpy()[order] < short_kernel_us)
    )
    same_stream = np.zeros(len(order), dtype=bool)
    same_stream[1:] = group[1:] == group[:-1]
    joined = np.zeros(len(order), dtype=bool)  # row i continues the stretch of row i-1
    joined[1:] = short[1:] & short[:-1]
    joined &= same_stream & ~other & ~split
    if "step" in frame:  # a graph is captured within one step: the host's wait between steps
        # (a data loader's 5 ms) is no launch overhead a graph removes
        step = frame["step"].to_numpy(np.float64, na_value=np.nan)[order]
        joined[1:] &= (step[1:] == step[:-1]) | (np.isnan(step[1:]) & np.isnan(step[:-1]))
    stretch = np.cumsum(~joined)
    stretch[~short] = -1
    member = np.flatnonzero(stretch >= 0)
    wait = np.where(joined[member], gap[member], 0.0)
    rows = pd.DataFrame(
        {
            "stretch": stretch[member],
            "wait": wait,
            "host": np.where(joined[member] & host_wait[member], gap[member], 0.0),
            "gpu": end[member] - start[member],
            "stack": stack_code[order][member],
            "row": order[member],
            "idle": device_idle.within(
                frame["rank"].to_numpy()[order[member]],
                frame["device"].to_numpy()[order[member]],
                start[member] - wait,
                start[member],
            ),
        }
    )
    per = rows.groupby("stretch", sort=False).agg(
        kernels=("row", "size"),
        saving_us=("wait", "sum"),
        host_wait_us=("host", "sum"),
        gpu_us=("gpu", "sum"),
        first=("row", "first"),
        device_idle_us=("idle", "sum"),
    )
    per = per[(per["kernels"] >= min_kernels) & (per["saving_us"] > 0)]
    if per.empty:
        return pd.DataFrame(columns=CANDIDATE_COLUMNS)
    # The call stack every launch of a stretch shares: the common prefix of the lexicographically
    # smallest and largest stacks of the stretch (outermost first) — one comparison per stretch.
    rows = rows[rows["stretch"].isin(per.index)]
    used = np.unique(rows["stack"].to_numpy())
    frames = [_stack_frames(stack_text[c]) if c >= 0 else () for c in used.tolist()]
    ordered = sorted(range(len(used)), key=frames.__getitem__)
    by_rank = [frames[i] for i in ordered]
    rank_of = np.empty(len(used), dtype=np.int64)
    rank_of[ordered] = np.arange(len(used))
    code = rank_of[np.searchsorted(used, rows["stack"].to_numpy())]
    bounds = pd.Series(code, index=rows.index).groupby(rows["stretch"]).agg(["min", "max"]).loc[per.index]
    # (call stack, frame, module) of each distinct shared stack, described once
    pair_code, pairs = pd.factorize(pd.MultiIndex.from_arrays([bounds["min"].to_numpy(), bounds["max"].to_numpy()]))
    described = [_describe(_common_prefix(by_rank[low], by_rank[high])) for low, high in pairs]
    first = per["first"].to_numpy()
    per["rank"] = frame["rank"].to_numpy()[first]
    per["device"] = frame["device"].to_numpy()[first]
    per["stream"] = frame["stream"].to_numpy()[first]
    per["first_ts_us"] = frame["ts_us"].to_numpy()[first]
    per["first_kernel"] = frame["name"].iloc[first].astype(str).to_numpy()
    for i, column in enumerate(("call_stack", "frame", "module")):
        per[column] = np.array([d[i] for d in described], dtype=object)[pair_code]
    per["kernel_wait_us"] = per["saving_us"] - per["host_wait_us"]
    keys = ["rank", "device", "stream", "call_stack"]
    per = per.sort_values("first_ts_us", kind="stable")
    candidates = per.groupby(keys, sort=False, dropna=False).agg(
        frame=("frame", "first"),
        module=("module", "first"),
        saving_us=("saving_us", "sum"),
        host_wait_us=("host_wait_us", "sum"),
        kernel_wait_us=("kernel_wait_us", "sum"),
        stretches=("kernels", "size"),
        kernels=("kernels", "sum"),
        gpu_us=("gpu_us", "sum"),
        first_ts_us=("first_ts_us", "first"),
        first_kernel=("first_kernel", "first"),
        device_idle_us=("device_idle_us", "sum"),
    )
    candidates = candidates.reset_index()
    candidates["kernels_per_stretch"] = candidates["kernels"] / candidates["stretches"]
    candidates = candidates.sort_values("saving_us", ascending=False, kind="stable")
    return candidates[CANDIDATE_COLUMNS].reset_index(drop=True)
