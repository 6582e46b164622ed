"""Each profiler step's time split the way the PyTorch Profiler TensorBoard plugin's overview does
(docs/efficiency.md), and the efficiency metrics of each step and of all steps.

Steps are the rows of `link.step_rows` — the `ProfilerStep#N` ranges, one row per step however
many threads recorded it —, an activity's step the one its `step` column names (`link`: the row
holding its launch), stretched to the device (the plugin's `_update_steps_duration`): a step ends
when the last GPU activity launched inside it ends, and starts no earlier than the previous step
ends; trailing steps that launched (almost) nothing are
dropped (and said: `steps_left_out`). Every µs of a step goes to the first of kernel, memcpy,
memset, communication, runtime, data loading, CPU execution that covers it, else to "other".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.ingest.columns import ANNOTATION, CPU_OP, RUNTIME, HostTable, step_numbers
from kernel_atlas.ingest.efficiency import DeviceKernels
from kernel_atlas.ingest.events import COMM_OPS
from kernel_atlas.ingest.intervals import clipped_length, merge
from kernel_atlas.ingest.link import step_row_of, step_rows
from kernel_atlas.ingest.nesting import NEST_TOLERANCE_US
from kernel_atlas.store.summary_schema import STEP_ROLES

ROLES = STEP_ROLES  # the order is the precedence: earlier roles win an overlap
Ranges = tuple[np.ndarray, np.ndarray]
# the most steps whose split and metrics summary.json lists (the first, by start); the metrics
# over all steps cover every one. Profiles hold tens to thousands of steps; 400,000 steps of one
# kernel each made a summary.json of 241 MB (173 MB of it per-step rows) and a report of 1.8 GB.
MAX_STEP_ROWS = 10_000


@dataclass
class HostRoles:
    """What the host ranges contribute, taken before the host table is released."""

    runtime: Ranges
    dataloader: Ranges
    communication: Ranges
    cpu_exec: Ranges
    steps: np.ndarray  # (k, 3): step number, start, end; sorted by start, not overlapping (`link.step_rows`)
    # External ids of the nccl:* / gloo:* ops and annotations: their kernels are communication
    comm_external_ids: np.ndarray
    cpu_span: tuple[float, float] | None


def host_roles(host: HostTable, gpu_communication: np.ndarray | None = None) -> HostRoles:
    """The host ranges' roles; `gpu_communication`, (start, end) rows of the GPU-side `nccl:*` /
    `gloo:*` annotations (`TraceColumns.gpu_comm_ranges`), joins the communication ranges: the
    plugin reads a `gpu_user_annotation` as a user annotation, so counts those as communication
    (a100_nccl_8rank_rank0: 3 µs a step, that were CPU execution)."""
    names = host.names
    step_of = step_numbers(names)
    loader = np.array(
        [
            (s.startswith("enumerate(DataLoader)#") and s.endswith(".__next__")) or s.startswith("enumerate(DataPipe)#")
            for s in names
        ],
        dtype=bool,
    )
    comm = np.array([s in COMM_OPS for s in names], dtype=bool)
    code = host.name_code
    ops = (host.family == CPU_OP) | (host.family == ANNOTATION)
    is_step = ops & (step_of[code] >= 0)
    is_loader, is_comm = ops & loader[code] & ~is_step, ops & comm[code] & ~is_step

    def ranges(mask: np.ndarray) -> Ranges:
        return merge(host.ts[mask], host.end[mask])

    gpu_comm = np.empty((0, 2)) if gpu_communication is None else gpu_communication
    return HostRoles(
        runtime=ranges(host.family == RUNTIME),
        dataloader=ranges(is_loader),
        communication=merge(
            np.concatenate([host.ts[is_comm], gpu_comm[:, 0]]), np.concatenate([host.end[is_comm], gpu_comm[:, 1]])
        ),
        cpu_exec=ranges(ops & ~is_step & ~is_loader & ~is_comm),
        steps=step_rows(host),
        comm_external_ids=np.unique(host.external_id[is_comm & (host.external_id > 0)]),
        cpu_span=_cpu_span(host),
    )


def _cpu_span(host: HostTable) -> tuple[float, float] | None:
    """The host span a trace without steps is measured over: the plugin's (`cpu_min_ts` ..
    `cpu_max_ts`), that of the CPU ops — not of the annotations, which may reach past them (a
    `forward` range around the ops; a100_alexnet_train: 76,727 µs) —; the annotations' only in a
    trace without CPU ops, where the plugin has no span at all. None without either: `_stretched`
    then measures over the launches (a GPU-only trace, mi210_gpu_only, had had no efficiency)."""
    for mask in (host.family == CPU_OP, host.family == ANNOTATION):
        if mask.any():
            return float(host.ts[mask].min()), float(host.end[mask].max())
    return None


def device_steps(frame: pd.DataFrame, roles: HostRoles) -> tuple[np.ndarray, str | None]:
    """(k, 3) step number, start, end of the steps stretched to the device (module docstring) —
    one row numbered -1 spanning the host activity when the trace has no steps —, and why the
    trailing steps it leaves out were left out (None: none)."""
    out, why, _ = _stretched(frame, roles)
    return out, why


def _stretched(frame: pd.DataFrame, roles: HostRoles) -> tuple[np.ndarray, str | None, np.ndarray]:
    """`device_steps`, and each activity's row of it (-1 none; a row left out: none)."""
    steps = roles.steps
    start = frame["ts_us"].to_numpy(np.float64)
    end = start + frame["dur_us"].to_numpy(np.float64)
    if len(steps):
        i = activity_rows(frame, steps)
    elif roles.cpu_span is None and frame.empty:
        return np.empty((0, 3)), None, np.full(len(frame), -1, np.int64)
    else:  # no steps: the activities launched in the host span (the plugin's), by their launch's start —
        # a span that reaches every launch: the plugin's CPU-op span left out a graph replay launched
        # after the last CPU op (a `hipGraphLaunch` in an annotation) from "the whole trace"
        launch = frame["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)
        launched = launch[np.isfinite(launch)]
        if roles.cpu_span is not None:
            lo, hi = roles.cpu_span
        elif len(launched):  # no CPU op or annotation (a GPU-only trace, mi210_gpu_only): the launches' span
            lo, hi = float(launched.min()), float(launched.max())
        else:  # nothing on the host at all: the GPU activities' own span (they are in no row: none was launched)
            lo, hi = float(start.min()), float(end.max())
        if len(launched):
            lo, hi = min(lo, float(launched.min())), max(hi, float(launched.max()))
        steps = np.array([[-1.0, lo, hi]])
        i = step_row_of(steps, launch)
    matched = i >= 0
    count = np.bincount(i[matched], minlength=len(steps))
    first = np.full(len(steps), np.inf)
    last = np.full(len(steps), -np.inf)
    np.minimum.at(first, i[matched], start[matched])
    np.maximum.at(last, i[matched], end[matched])
    out, why = steps.copy(), None
    if matched.any():
        prev = steps[0, 1]
        if count[0]:  # activities launched before the first step that end before its first one starts
            before = ~matched & (end < first[0])
            prev = max(prev, float(end[before].max())) if before.any() else prev
        for k in range(len(steps)):
            lo = max(prev, steps[k, 1])
            hi = max(steps[k, 2], last[k]) if count[k] else max(steps[k, 2], lo)
            out[k, 1:] = lo, max(hi, lo)
            prev = out[k, 2]
        if len(steps) > 1:
            kept = _kept(count)
            out, why = out[:kept], _left_out_why(steps[:, 0].astype(np.int64), count, kept)
    return out, why, np.where(i < len(out), i, -1)


def activity_rows(frame: pd.DataFrame, steps: np.ndarray) -> np.ndarray:
    """Per activity, its row of `steps` (`HostRoles.steps`), -1 none: the row of the number its
    `step` column names (`link`: the row holding its launch) that holds its launch — of that
    number the last to start by then: a number may repeat (a profiler restarted in one trace) —,
    else (linked by External id, its launch not recorded: the op's start decided; the activity's
    own start stands for it) the last of that number started before it runs, else the first."""
    if "step" not in frame:  # a table not linked (`link` gives the column): the row holding the launch
        return step_row_of(steps, frame["launch_ts_us"].to_numpy(np.float64, na_value=np.nan))
    number = frame["step"].to_numpy(np.float64, na_value=np.nan)
    rows = np.full(len(number), -1, np.int64)
    has = np.flatnonzero(~np.isnan(number))
    if not len(steps) or not len(has):
        return rows
    launch = frame["launch_ts_us"].to_numpy(np.float64, na_value=np.nan)[has]
    t = np.where(np.isnan(launch), frame["ts_us"].to_numpy(np.float64)[has], launch) + NEST_TOLERANCE_US
    # the rows by (number, start), the activities among them: each takes the row before it
    by_number = np.lexsort((steps[:, 1], steps[:, 0]))
    keys = np.concatenate([steps[by_number, 0], number[has]])
    times = np.concatenate([steps[by_number, 1], t])
    order = np.lexsort((np.r_[np.zeros(len(steps)), np.ones(len(has))], times, keys))
    is_row = order < len(steps)
    before = np.maximum.accumulate(np.where(is_row, order, -1))[~is_row]
    asked = order[~is_row] - len(steps)
    found = np.full(len(has), -1, np.int64)
    same = (before >= 0) & (steps[by_number[np.maximum(before, 0)], 0] == number[has][asked])
    found[asked[same]] = by_number[before[same]]
    # none of its number started by then: the first of it (where it is a step at all)
    lost = np.flatnonzero(found < 0)
    if len(lost):
        sorted_numbers = steps[by_number, 0]
        p = np.searchsorted(sorted_numbers, number[has][lost])
        exists = (p < len(steps)) & (sorted_numbers[np.minimum(p, len(steps) - 1)] == number[has][lost])
        found[lost[exists]] = by_number[p[exists]]
    rows[has] = found
    return rows


def _kept(count: np.ndarray) -> int:
    """Steps kept: trailing steps without GPU activity dropped, and the last one too when it
    launched under 80 % of what the one before it did (cut short by the end of profiling)."""
    nonzero = np.flatnonzero(count > 0)
    if not len(nonzero):
        return len(count)
    last = int(nonzero[-1])
    return last if last > 0 and count[last - 1] * 0.8 > count[last] else last + 1


def _left_out_why(numbers: np.ndarray, count: np.ndarray, kept: int) -> str | None:
    """Why the steps after the first `kept` were left out, in words (None: none were): the plugin
    drops them silently ("Remove the last N steps from overview" in its log)."""
    if kept >= len(count):
        return None
    parts = []
    if count[kept]:  # the last step with GPU activity, cut short by the end of profiling
        activities = "1 GPU activity" if count[kept] == 1 else f"{count[kept]:,} GPU activities"
        parts.append(
            f"step {numbers[kept]} launched {activities}, under 80 % of step {numbers[kept - 1]}'s {count[kept - 1]:,}"
        )
    idle = numbers[kept + (1 if count[kept] else 0) :]
    if len(idle):
        steps = f"step {idle[0]}" if len(idle) == 1 else f"steps {idle[0]}–{idle[-1]}"
        parts.append(f"{steps} launched none")
    return "; ".join(parts)


def _role_ranges(frame: pd.DataFrame, roles: HostRoles) -> list[Ranges]:
    start = frame["ts_us"].to_numpy(np.float64)
    end = start + frame["dur_us"].to_numpy(np.float64)
    kind = frame["kind"].astype(str).to_numpy()
    # as the plugin: a kernel is communication when the op its External id names is nccl:* / gloo:*
    external = frame["external_id"].to_numpy(np.float64, na_value=np.nan)
    comm = np.isin(external, roles.comm_external_ids)

    def of(mask: np.ndarray) -> Ranges:
        return merge(start[mask], end[mask])

    comm_start, comm_end = merge(
        *(np.concatenate(pair) for pair in zip(of((kind == "kernel") & comm), roles.communication, strict=True))
    )
    return [
        of((kind == "kernel") & ~comm),
        of(kind == "memcpy"),
        of(kind == "memset"),
        (comm_start, comm_end),
        roles.runtime,
        roles.dataloader,
        roles.cpu_exec,
    ]


def _covering(bounds: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per piece [bounds[j], bounds[j+1]), whether one of the merged ranges [start, end) holds it:
    every range's ends are among `bounds`, so a range holds the pieces from its start's position
    to its end's. Its ends are looked up (two searches per range), not every piece among the
    ranges (a search per piece and role: 7 passes over ~10^6 pieces)."""
    size = len(bounds) + 1
    opened = np.bincount(np.searchsorted(bounds, start), minlength=size)
    closed = np.bincount(np.searchsorted(bounds, np.maximum(end, start)), minlength=size)  # empty: holds nothing
    return np.cumsum(opened - closed)[: max(len(bounds) - 1, 0)] > 0


def step_split(frame: pd.DataFrame, roles: HostRoles, steps: np.ndarray) -> np.ndarray:
    """(k, len(ROLES)) µs of each step per role, the earlier roles winning."""
    role_ranges = _role_ranges(frame, roles)
    bounds = np.unique(np.concatenate([steps[:, 1], steps[:, 2], *(np.concatenate(r) for r in role_ranges)]))
    # pieces judged by their start, not their midpoint: at epoch timestamps neighbouring bounds are
    # one float apart and a midpoint rounds onto the next bound (steps' ends are bounds too)
    first, length = bounds[:-1], np.diff(bounds)
    role = np.full(len(first), len(ROLES) - 1)
    for r in range(len(role_ranges) - 1, -1, -1):  # the highest priority last, so it wins
        role[_covering(bounds, *role_ranges[r])] = r
    k = np.searchsorted(steps[:, 1], first, side="right") - 1
    inside = (k >= 0) & (first < steps[np.maximum(k, 0), 2])
    sums = np.bincount(k[inside] * len(ROLES) + role[inside], weights=length[inside], minlength=len(steps) * len(ROLES))
    return sums.reshape(len(steps), len(ROLES))


def overview(frame: pd.DataFrame, roles: HostRoles) -> dict[str, Any]:
    """summary.json's `efficiency` of one trace: per step its split and per-device metrics, and
    per device the metrics over all steps (the plugin's numbers)."""
    steps, left_out_why, rows = _stretched(frame, roles)
    if not len(steps) or frame.empty:
        return {"steps": [], "devices": [], "window_us": None}
    split = step_split(frame, roles, steps)
    # the kernels' rows of the columns read below only (all ~60 columns of 1M kernels were ~400 MB)
    is_kernel = (frame["kind"] == "kernel").to_numpy()
    kernels = frame.loc[is_kernel, ["device", *DeviceKernels.COLUMNS]]
    # per step row, not per number: a number may repeat (`activity_rows`)
    in_row = rows[is_kernel]
    launched = np.bincount(
        in_row[in_row >= 0], weights=kernels["dur_us"].to_numpy(np.float64)[in_row >= 0], minlength=len(steps)
    )
    by_category = _launched_by_category(frame, rows, min(len(steps), MAX_STEP_ROWS))
    devices = [(int(device), DeviceKernels.of(group)) for device, group in kernels.groupby("device", observed=True)]

    def per_device(lo: float, hi: float) -> list[dict[str, Any]]:
        return [{"device": device, **prepared.metrics(lo, hi)} for device, prepared in devices]

    rows = []
    for k, (number, lo, hi) in enumerate(steps[:MAX_STEP_ROWS].tolist()):
        row: dict[str, Any] = {
            "step": None if number < 0 else int(number),
            "start_us": lo,
            "end_us": hi,
            "total_us": hi - lo,
        }
        row.update({f"{role}_us": float(split[k, j]) for j, role in enumerate(ROLES)})
        # the row's rule whether or not it has a number: a trace without steps launched its kernels in its one row
        row["kernel_us_launched"] = float(launched[k])
        if by_category is not None:
            row["gpu_us_by_category"] = by_category[k]
        row["devices"] = per_device(lo, hi)
        rows.append(row)
    lo, hi = float(steps[0, 1]), float(steps[-1, 2])
    facts: dict[str, Any] = {"steps": rows, "devices": per_device(lo, hi), "window_us": [lo, hi]}
    if len(steps) > MAX_STEP_ROWS:
        facts["steps_total"] = len(steps)
    if left_out_why is not None:
        facts["steps_left_out"] = len(roles.steps) - len(steps)
        facts["steps_left_out_why"] = left_out_why
    facts.update(_communication_rules(frame, roles, float(split[:, ROLES.index("communication")].sum()), lo, hi))
    return facts


def _launched_by_category(frame: pd.DataFrame, rows: np.ndarray, listed: int) -> list[dict[str, float]] | None:
    """Per step row of the first `listed`, Σ duration of the GPU activities of every kind launched
    in it (`rows`: each activity's row, `_stretched`), by category: the report's per-step chart, so
    that its bars are steps.parquet's rows — a number repeated (a profiler restarted: #1 #2 #1 #2)
    is two bars, not one of both (`views.step_row_times`). None where the rows are not labelled."""
    if "category" not in frame:
        return None
    codes, names = pd.factorize(frame["category"], use_na_sentinel=True)  # a null category: in no bar, as the chart
    ok = (rows >= 0) & (rows < listed) & (codes >= 0)
    sums = np.bincount(
        rows[ok] * len(names) + codes[ok],
        weights=frame["dur_us"].to_numpy(np.float64)[ok],
        minlength=listed * len(names),
    ).reshape(listed, len(names))
    present = np.bincount(rows[ok] * len(names) + codes[ok], minlength=listed * len(names)).reshape(listed, len(names))
    texts = [str(name) for name in names]
    return [{texts[c]: float(sums[k, c]) for c in np.flatnonzero(present[k])} for k in range(listed)]


def _communication_rules(
    frame: pd.DataFrame, roles: HostRoles, split_us: float, lo: float, hi: float
) -> dict[str, float]:
    """The split's communication (the plugin's rule: kernels whose External id names an
    `nccl:*`/`gloo:*` op, and those ops' ranges) beside the kernels of category communication over
    the window (report.json `devices[].communication_us`'s rule), and of those the ones the
    plugin's rule misses — PyTorch 2.x launches NCCL kernels under `record_param_comms`, a CPU op,
    so that on a100_nccl_8rank_rank0 the split finds 1,040 µs where the kernels take 46,876 µs.
    Unions over all devices, clipped to the window (as the split)."""
    if "category" not in frame:  # not labelled: no category to compare with
        return {"communication_us": split_us}
    start = frame["ts_us"].to_numpy(np.float64)
    end = start + frame["dur_us"].to_numpy(np.float64)
    by_category = ((frame["kind"] == "kernel") & (frame["category"] == COMMUNICATION)).to_numpy()
    by_id = np.isin(frame["external_id"].to_numpy(np.float64, na_value=np.nan), roles.comm_external_ids)

    def within(mask: np.ndarray) -> float:
        merged_start, merged_end = merge(start[mask], end[mask])
        return float(clipped_length(merged_start, merged_end, lo, hi).sum())

    return {
        "communication_us": split_us,
        "communication_kernel_us": within(by_category),
        "communication_kernel_other_op_us": within(by_category & ~by_id),
    }
