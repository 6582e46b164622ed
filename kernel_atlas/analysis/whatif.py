"""What a fix would save end to end: the critical-path graph re-solved under changed durations.

A change selects GPU activities (`op=`, `category=`, `kernel=` a regular expression on the name,
`module=` a substring of the `nn.Module` path, `launcher=`) and a new duration: `2x` (divided
by 2) or `roofline` (its attainable time from `roofline.parquet`; activities without a cost keep
theirs, counted and said: their saving is unknown, not 0). `--no-launch-gaps` removes launch
and kernel-to-kernel overheads. The graph is the critical path's plus the zero-weight edges that
keep every activity after its launch and its stream's previous activity, so work moves earlier
only as far as its dependencies allow; the host side keeps its recorded times (the CPU does not
speed up), the time between its top-level ops included (`Graph.whatif_weight`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import DEPEND, GAP, GPU, LAUNCH, Graph, build_graph, parse_window
from kernel_atlas.analysis.critical_ranks import COLLECTIVE, MAX_JOINT_NODES, MAX_JOINT_RANKS, join_ranks
from kernel_atlas.analysis.critical_segments import point_words
from kernel_atlas.analysis.longest_path import Reweighing, longest_path, solves_exactly
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.groups import distinct_codes, lexical_codes
from kernel_atlas.core.safe_files import LOCK_NAME
from kernel_atlas.core.texts import name_mask, time_bound, user_pattern
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.store.outputs import (
    Output,
    check_derived,
    load_checked,
    load_kernels,
    lock,
    open_output,
    ranks_named,
    read_parquet,
    write_json,
)

_FIELDS = {"op": "op_mapping", "category": "category", "kernel": "name", "module": "module", "launcher": "launcher"}
_SPEC = re.compile(r"^(?P<field>\w+)=(?P<value>.+):(?P<how>roofline|[^:]*x)$")
_FACTOR = re.compile(r"^\d+(\.\d+)?x$")
MAX_FACTOR = 1e6  # past this a kernel takes less than a clock tick: a factor of 1e30 is a typo


@dataclass(frozen=True)
class Speedup:
    field: str
    value: str
    factor: float | None  # None: to the roofline

    def describe(self) -> str:
        return f"{self.field}={self.value}:" + ("roofline" if self.factor is None else f"{self.factor:g}x")


def parse_speedup(spec: str) -> Speedup:
    """`op=fused_moe:2x`, `category=attention:roofline`, `kernel=gemm.*:1.5x`."""
    match = _SPEC.match(spec.strip())
    if not match or match["field"] not in _FIELDS:
        raise AtlasError(
            None,
            f"--speedup {spec!r}: expected FIELD=VALUE:Nx or FIELD=VALUE:roofline, FIELD one of {', '.join(_FIELDS)}",
        )
    how = match["how"]
    if how != "roofline" and not _FACTOR.match(how):
        raise AtlasError(None, f"--speedup {spec!r}: the factor {how[:-1]!r} is no plain number (1.5x, 2x)")
    factor = None if how == "roofline" else float(how[:-1])
    if factor is not None and not factor >= 1:  # min(recorded, recorded / factor): a slowdown changed nothing
        raise AtlasError(None, f"--speedup {spec!r}: the factor must be at least 1 (a speedup)")
    if factor is not None and factor > MAX_FACTOR:
        raise AtlasError(None, f"--speedup {spec!r}: the factor must be at most {MAX_FACTOR:,.0f}")
    if match["field"] == "kernel":
        user_pattern(match["value"], f"--speedup {spec!r}")
    return Speedup(match["field"], match["value"], factor)


def _selected(gpu: pd.DataFrame, change: Speedup) -> np.ndarray:
    column = _FIELDS[change.field]
    if column not in gpu:
        return np.zeros(len(gpu), bool)
    values = gpu[column]
    if change.field == "kernel":
        pattern = user_pattern(change.value, f"--speedup {change.describe()!r}")
        with time_bound(f"--speedup {change.describe()!r}"):
            return name_mask(values, pattern.search)
    if change.field == "module":
        return name_mask(values, lambda s: change.value in s)
    return name_mask(values, lambda s: s == change.value)


def matching_rows(left: pd.DataFrame, right: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Per row of `left`, the first row of `right` (its position) whose values equal the row's in
    every key column — a missing value equals a missing one, as in a merge, and an empty text is
    a missing one (roofline.parquet writes a missing shape as "", kernels.parquet as null: an
    NCCL kernel recorded without shapes matched no roofline row, and `--speedup …:roofline`
    changed nothing) —, -1 where none does. A left merge on the keys, on each column's codes
    rather than on object columns."""
    n = len(left)
    if not len(right) or not n:
        return np.full(n, -1, np.int64)
    joint = np.zeros(n + len(right), np.int64)  # left's rows then right's: one code per distinct key
    for key in keys:
        values = left[key].array if isinstance(left[key].dtype, pd.CategoricalDtype) else pd.Categorical(left[key])
        theirs = right[key]
        found = values.categories.get_indexer(theirs.to_numpy(dtype=object))
        their_missing = (theirs.isna() | (theirs.astype(object) == "")).to_numpy()
        mine = values.codes.astype(np.int64)
        empty = values.categories.get_indexer([""])[0]
        if empty >= 0:
            mine = np.where(mine == empty, -1, mine)
        # codes shifted by 2: 0 for a right value left never has, 1 for missing, then the categories
        code = np.concatenate([mine + 2, np.where(their_missing, 1, np.where(found >= 0, found + 2, 0))])
        joint = pd.factorize(joint * (len(values.categories) + 2) + code)[0]  # hashed: no sort
    first = np.full(int(joint.max()) + 1, -1, np.int64)
    mine = joint[n:]
    first[mine[::-1]] = np.arange(len(right) - 1, -1, -1)  # the earliest row written last: it stays
    return first[joint[:n]]


ATTAINABLE_KEYS = ["name", "launcher", "input_dims", "input_types"]
# what makes one op call of the roofline (`roofline/analysis._call_costs`): a CPU op's kernels
_CALL_KEYS = ["trace", "rank", "cpu_op_id"]


def op_calls(gpu: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per activity, the position of its op call's main activity and its share of the call's
    time. A call is the kernels one CPU op launched (same `cpu_op_id`); its main activity is the
    roofline's: the longest, among equals the first to start, then by name
    (`roofline/analysis._call_costs`), and the call's cost — its roofline row's attainable time —
    is the whole call's. An activity outside any call (a copy, a kernel without a launching op)
    is its own main with share 1."""
    n = len(gpu)
    main_of = np.arange(n)
    share = np.ones(n)
    if not n or "cpu_op_id" not in gpu or "kind" not in gpu:
        return main_of, share
    rows = np.flatnonzero(gpu["cpu_op_id"].notna().to_numpy() & (gpu["kind"] == "kernel").to_numpy())
    if not len(rows):
        return main_of, share
    part = gpu.iloc[rows]
    call = distinct_codes([part[k].to_numpy() for k in _CALL_KEYS if k in part], len(rows))
    dur = part["dur_us"].to_numpy(np.float64)
    total = pd.Series(dur).groupby(call).transform("sum").to_numpy()
    names = part["name"].astype("category")
    by_name = lexical_codes(names.cat.codes.to_numpy(np.int64), names.cat.categories)
    longest_first = np.lexsort((by_name, part["ts_us"].to_numpy(np.float64), -dur, call))
    first = np.flatnonzero(np.diff(call[longest_first], prepend=-1) != 0)
    main_of_call = np.empty(int(call.max()) + 1, np.int64)
    main_of_call[call[longest_first[first]]] = rows[longest_first[first]]
    main_of[rows] = main_of_call[call]
    evenly = 1.0 / np.bincount(call)[call]  # a call whose kernels all took 0 µs: shared evenly
    share[rows] = np.divide(dur, total, out=evenly, where=total > 0)
    return main_of, share


def call_rows(gpu: pd.DataFrame, rows: pd.DataFrame, main_of: np.ndarray | None = None) -> np.ndarray:
    """Per activity, the row of `rows` (roofline `main` rows, by `ATTAINABLE_KEYS`) its op call's
    main activity matches, -1 where none does: the helpers of a call go with their call, and a
    kernel that is a helper in another op's call (a GEMM beside a longer split-K reduce) never
    matches a row of its own name — it had taken that row's whole attainable time in calls whose
    cost another kernel carries, 105.8 µs saved of 27.8 µs headroom. `main_of`: `op_calls`'s,
    when already worked out."""
    if not len(gpu) or not all(k in gpu for k in ATTAINABLE_KEYS):
        return np.full(len(gpu), -1, np.int64)
    main_of = op_calls(gpu)[0] if main_of is None else main_of
    return matching_rows(gpu, rows, ATTAINABLE_KEYS)[main_of]


def attainable_per_activity(
    gpu: pd.DataFrame, roofline: pd.DataFrame | None, calls: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Each activity's roofline-attainable time (NaN where it has no cost): its share of the
    attainable time of its op call — the call's `main` roofline row (by name, launcher, input
    shapes and types of the call's main activity) — in proportion to its own time in the call.
    A call's activities at their attainable times take the call's attainable time together,
    never more: each kernel of a GEMM and its split-K reduce had been given the whole call's, so
    a call "at its roofline" took twice it, and a kernel that is a helper in another op's call
    took a row of its own name's time (`call_rows`).

    A row whose calls were costed with different formulas (`formulas` > 1: copies recorded
    without shapes, attention over several steps) has the mean call's attainable time, which is
    no call's own: each of its activities is sped up by the row's factor (its calls' attainable
    time over their measured time), so that they save the row's `headroom_us` together — the
    mean call's time as each call's saved 52.7 ms of copies whose headroom was 47.9 ms. `calls`:
    `op_calls(gpu)`, when already worked out."""
    out = np.full(len(gpu), np.nan)
    if roofline is None or roofline.empty or len(gpu) == 0:
        return out
    if not all(k in gpu for k in ATTAINABLE_KEYS):
        return out
    main = roofline[(roofline["role"] == "main") & roofline["attainable_us"].notna()]
    main_of, share = op_calls(gpu) if calls is None else calls
    row = call_rows(gpu, main, main_of)
    matched = row >= 0
    out[matched] = main["attainable_us"].to_numpy(np.float64)[row[matched]] * share[matched]
    reached = main["attainable_us"].to_numpy(np.float64) * main["count"].to_numpy(np.float64)
    measured = reached + main["headroom_us"].to_numpy(np.float64)
    factor = np.divide(reached, measured, out=np.ones_like(reached), where=measured > 0).clip(max=1.0)
    mixed = matched.copy()
    mixed[matched] = main["formulas"].to_numpy(np.int64)[row[matched]] > 1
    out[mixed] = gpu["dur_us"].to_numpy(np.float64)[mixed] * factor[row[mixed]]
    return out


def whatif_weights(
    graph: Graph,
    changes: list[Speedup],
    no_launch_gaps: bool,
    roofline: pd.DataFrame | None,
    base: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """New edge weights and, per change, the activities it touched and their time before/after
    (a change to the roofline: also how many of them have no roofline cost, `no_cost`: they keep
    their time, and what speeding them would save is unknown, never a known 0). `base`: the
    graph's `whatif_weight()`, where the caller has it already."""
    base = graph.whatif_weight() if base is None else base
    weight = base.copy()
    gpu = graph.gpu
    n_host = graph.n_host
    dur = gpu["dur_us"].to_numpy(np.float64)
    new = dur.copy()
    attainable = None
    touched = []
    uncosted, sped = np.zeros(len(gpu), bool), np.zeros(len(gpu), bool)
    for change in changes:
        hit = _selected(gpu, change)
        entry = {"change": change.describe(), "activities": int(hit.sum()), "gpu_us": float(dur[hit].sum())}
        if change.factor is None:
            if roofline is None:
                raise AtlasError(
                    None, f"--speedup {change.describe()}: needs roofline.parquet: run `atlas report` first"
                )
            attainable = attainable_per_activity(gpu, roofline) if attainable is None else attainable
            costed = hit & np.isfinite(attainable)
            new[costed] = np.minimum(new[costed], attainable[costed])
            # recorded without shapes (`record_shapes=False`), or an op the roofline has no formula
            # for: counted and said, so that 18 uncosted convolutions read "saving unknown", not 0.0
            entry["no_cost"] = int((hit & ~costed).sum())
            entry["no_cost_gpu_us"] = float(dur[hit & ~costed].sum())
            uncosted |= hit & ~costed
        else:
            new[hit] = np.minimum(new[hit], dur[hit] / change.factor)
            sped |= hit
        touched.append(entry)
    # an activity's edges scale with it: its own edge and, across ranks, the collective transfer
    # ending it (which its own edge then weighs too, see critical_ranks)
    scale = np.divide(new, dur, out=np.ones_like(dur), where=dur > 0)
    timed = np.flatnonzero((graph.kind == GPU) | (graph.kind == COLLECTIVE))
    weight[timed] = base[timed] * scale[graph.event[timed] - n_host]
    if no_launch_gaps:
        weight[(graph.kind == LAUNCH) | (graph.kind == GAP)] = 0.0
    # the selected activities no change could speed (no cost, and no factor of another change)
    unknown = int((uncosted & ~sped).sum())
    detail = {"changes": touched, "gpu_us_saved_locally": float((dur - new).sum()), "no_cost": unknown}
    return weight, detail


def solve(graph: Graph, changes: list[Speedup], no_launch_gaps: bool, roofline: pd.DataFrame | None) -> dict[str, Any]:
    """Baseline and new end-to-end (critical path) time of a what-if graph, and the saving. The
    baseline weighs the host's time between top-level ops (`Graph.whatif_weight`), which the
    critical path leaves unweighted: where its path runs through that time it is the longer, said
    in a note. Where the selected activities have no roofline cost (`no_cost`) and nothing else
    changes, the new time and the saving are unknown (None), else the saving counts the rest."""
    reference = graph.whatif_weight()
    origin = graph.origin_us()  # every chain starts at its own time: the baseline is when the run ends
    baseline = longest_path(graph, reference, origin=origin)
    weight, detail = whatif_weights(graph, changes, no_launch_gaps, roofline, reference)
    after = longest_path(graph, weight, origin=origin)
    notes = list(graph.notes)
    if baseline.lead_us > 0 and len(baseline.edges):
        first = int(graph.src[baseline.edges[0]])
        notes.append(
            f"the baseline is measured from the window's start: its path starts {baseline.lead_us:,.1f} µs in, at "
            f"{point_words(graph, first)} (chains that start late — another host thread, an activity of no launch — "
            "count from where they start, so a saving is a change of when the run ends)"
        )
    on_path = baseline.edges[graph.kind[baseline.edges] == DEPEND]
    host_gap = float(reference[on_path].sum())
    if host_gap > 0:
        notes.append(
            f"the baseline counts {host_gap:,.1f} µs of the host's time between top-level ops on its path, which the "
            "critical path leaves unweighted (HTA's rule): the host keeps its recorded times, so work sped up "
            "moves no earlier than the host launched it"
        )
    unknown = detail["no_cost"] > 0 and not no_launch_gaps and detail["gpu_us_saved_locally"] == 0
    notes.extend(_cost_notes(detail["changes"], unknown))
    pct = round(100.0 * (1 - after.end_us / baseline.end_us), 2) if baseline.end_us else 0.0
    return {
        "window": graph.window["name"],
        "baseline_us": round(baseline.end_us, 3),
        "new_us": None if unknown else round(after.end_us, 3),
        "saving_us": None if unknown else round(baseline.end_us - after.end_us, 3),
        "saving_pct": None if unknown else pct,
        "no_launch_gaps": no_launch_gaps,
        **detail,
        "gpu_us_saved_locally": None if unknown else detail["gpu_us_saved_locally"],
        "notes": notes,
    }


def _cost_notes(changes: list[dict[str, Any]], unknown: bool) -> list[str]:
    """Per change to the roofline, how many of its activities have no cost: their saving is unknown
    (`unknown`: the whole what-if's), else left out of the saving."""
    notes = []
    for change in changes:
        missing, selected = change.get("no_cost", 0), change["activities"]
        if not missing:
            continue
        which = (
            f"none of its {selected:,} selected activities has a"
            if missing == selected
            else f"{missing:,} of its {selected:,} selected activities have no"
        )
        notes.append(
            f"{change['change']}: {which} roofline cost ({change['no_cost_gpu_us']:,.1f} µs of GPU time: "
            "recorded without shapes, or an op the roofline has no formula for): they keep their recorded time, and "
            "what speeding them up would save is unknown" + ("" if unknown else " (not in the saving)")
        )
    return notes


def what_if(
    kernels: pd.DataFrame,
    host_events: pd.DataFrame | None,
    changes: list[Speedup],
    no_launch_gaps: bool = False,
    roofline: pd.DataFrame | None = None,
    window: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """One rank re-solved (see the module docstring)."""
    graph = build_graph(kernels, host_events, window, zero_weight_launches=True)
    return solve(graph, changes, no_launch_gaps, roofline)


# at most this many candidates of where optimisation pays are re-solved (one longest-path pass
# each): candidates are tried in the order of what they could save at most, so the cap binds only
# where more than this many could each save more than the `top` found
MAX_SOLVES = 32
# how a roofline row's calls were linked, where it is not their own launch (a row's `note`): its
# activities have no launch in the window (kernels.parquet `launch_ts_us` empty)
_NO_LAUNCH_NOTES = ("inferred:", "launch not in the trace", "no correlation id")


def _own_launch(gpu: pd.DataFrame, candidates: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per activity, whether it has a launch of its own in the window, and per candidate row
    whether its calls had (its `note` says how they were linked): what tells apart two rows of one
    name, launcher and shapes — a kernel launched in the window and the same kernel, grid and block
    whose shapes were borrowed (`infer`), which `ATTAINABLE_KEYS` alone match to the first row."""
    launched = gpu["launch_ts_us"].notna().to_numpy() if "launch_ts_us" in gpu else np.zeros(len(gpu), bool)
    note = candidates["note"] if "note" in candidates else pd.Series("", index=candidates.index)
    borrowed = note.astype(object).fillna("").astype(str).str.startswith(_NO_LAUNCH_NOTES).to_numpy()
    return launched, ~borrowed


def _candidate_rows(gpu: pd.DataFrame, candidates: pd.DataFrame, main_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per activity, the candidate row its op call belongs to (-1: none), and per candidate row the
    first row its activities cannot be told from (its twin group). Rows of the same
    `ATTAINABLE_KEYS` are told apart by whether their calls had their own launch (`_own_launch`);
    an activity whose kind of launch no row of its keys has goes with the first row of its keys."""
    coarse = call_rows(gpu, candidates, main_of)
    launched, own = _own_launch(gpu, candidates)
    keys = [*ATTAINABLE_KEYS, "_launched"]
    right = pd.DataFrame({k: candidates[k] for k in ATTAINABLE_KEYS} | {"_launched": own})
    if not len(gpu) or not all(k in gpu for k in [*ATTAINABLE_KEYS, "launch_ts_us"]):
        return coarse, matching_rows(right, right, ATTAINABLE_KEYS)  # launches not known: twins share
    left = pd.DataFrame({k: gpu[k] for k in ATTAINABLE_KEYS} | {"_launched": launched})
    fine = matching_rows(left, right, keys)[main_of]
    return np.where(fine >= 0, fine, coarse), matching_rows(right, right, keys)


def where_optimisation_pays(graph: Graph, roofline: pd.DataFrame | None, top: int = 8) -> list[dict[str, Any]]:
    """The roofline rows whose speed-up would save the most end to end, each brought to its
    attainable time alone (beside its kernel headroom); `kernel_end_to_end_saving_us` is that of
    all the rows of its kernel (and op) together, listed or not. `graph` is built with
    `zero_weight_launches`.

    A row cannot save more end to end than its activities on the longest path lose (the old path,
    shortened by that, is still a path): the rows are tried in the order of that bound, and a row
    none of whose activities is on the path saves nothing (lowering weights off a longest path leaves
    it longest) without a solve. Trying them by headroom had let eight rows beside the path — 382.6
    µs of headroom each, all hidden — take every place, and the GEMM on it (97.8 µs, all of it saved)
    was never weighed. Re-solving stops once no row left could enter the `top` (at most
    `MAX_SOLVES` solves). Rows one activity cannot be told from (`_candidate_rows`: same name,
    launcher and shapes and the same kind of launch) share their joint saving in proportion to their
    headroom: each of a kernel's recorded and inferred rows had claimed both rows' 1.22 ms."""
    if roofline is None or roofline.empty or len(graph.gpu) == 0:
        return []
    gpu = graph.gpu
    calls = op_calls(gpu)  # read by the attainable times and by the candidates' calls
    attainable = attainable_per_activity(gpu, roofline, calls)
    candidates = roofline[(roofline["role"] == "main") & (roofline["headroom_us"] > 0)]
    candidates = candidates.sort_values("headroom_us", ascending=False, kind="stable").reset_index(drop=True)
    if candidates.empty:
        return []
    own = np.flatnonzero(graph.kind == GPU)
    index = graph.event[own] - graph.n_host
    dur = gpu["dur_us"].to_numpy(np.float64)
    # the baseline: every activity at its recorded duration; each candidate shortens only its own
    reference = graph.whatif_weight()  # the host's time between its top-level ops held (`solve`)
    reference = reference.copy() if reference is graph.weight else reference
    reference[own] = dur[index]
    # each candidate re-weighs the few runs it changes; from the window's start, as `solve`
    reweighing = Reweighing(graph, reference, graph.origin_us())
    if solves_exactly(graph):
        path = reweighing.path()
        base = path.end_us
        on_path = np.zeros(len(gpu), bool)
        path_own = path.edges[graph.kind[path.edges] == GPU]
        on_path[graph.event[path_own] - graph.n_host] = True
    else:
        base, on_path = reweighing.length(np.empty(0, np.int64), np.empty(0)), np.ones(len(gpu), bool)
    which, twin = _candidate_rows(gpu, candidates, calls[0])
    costed = np.isfinite(attainable)
    group = np.where((which >= 0) & costed, twin[np.maximum(which, 0)], -1)  # each activity's twin group
    cut = np.where(costed, np.maximum(dur - np.where(costed, attainable, dur), 0.0), 0.0)
    counted = on_path & (group >= 0)
    bound = np.bincount(group[counted], weights=cut[counted], minlength=len(candidates))

    def saving_of(hit: np.ndarray) -> float:
        new = np.where(hit, np.minimum(dur, attainable), dur)
        if not (on_path & (new < dur)).any():
            return 0.0
        lowered = np.flatnonzero(new[index] != dur[index])
        return float(base - reweighing.length(own[lowered], new[index[lowered]]))

    headroom = candidates["headroom_us"].to_numpy(np.float64)
    groups = np.flatnonzero(twin == np.arange(len(candidates)))
    order = groups[np.lexsort((-headroom[groups], -bound[groups]))]
    saved: dict[int, float] = {}
    for g in order.tolist():
        if bound[g] <= 0:  # off the path, as every group after it
            saved[g] = 0.0
            continue
        best = sorted(saved.values(), reverse=True)[:top]
        if len(saved) >= MAX_SOLVES or (len(best) >= top and bound[g] <= best[-1]):
            continue  # could not enter the top: not weighed, not listed
        saved[g] = saving_of(group == g)
    # a twin group's saving shared by its rows in proportion to their headroom
    of_group = pd.Series(headroom).groupby(twin).transform("sum").to_numpy()
    rows = []
    for c in np.flatnonzero(np.isin(twin, list(saved))).tolist():
        cand = candidates.iloc[c]
        share = saved[int(twin[c])] * headroom[c] / of_group[c] if of_group[c] > 0 else 0.0
        rows.append(
            {
                "kernel": str(cand["name"]),
                "launcher": None if pd.isna(cand["launcher"]) else str(cand["launcher"]),
                "op": None if pd.isna(cand["op_mapping"]) else str(cand["op_mapping"]),
                "headroom_us": round(float(headroom[c]), 3),
                "end_to_end_saving_us": round(min(share, float(headroom[c])), 3),
            }
        )
    rows.sort(key=lambda r: (-r["end_to_end_saving_us"], -r["headroom_us"]))
    rows = rows[:top]
    # a kernel's rows (its shapes) together, listed or not: each alone can save nothing where the
    # others run beside it (one GEMM's two shapes on two streams, each hidden by the other), together
    # they do; and its headroom in a finding is that of all its rows
    name = candidates["name"].astype(object).fillna("").astype(str).to_numpy()
    op = candidates["op_mapping"].astype(object).fillna("").astype(str).to_numpy()
    joint: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (row["kernel"], row["op"] or "")
        if key not in joint:
            members = np.unique(twin[(name == key[0]) & (op == key[1])])
            alone = len(members) == 1 and int(members[0]) in saved
            hit = np.isin(group, members)
            joint[key] = saved[int(members[0])] if alone else (saving_of(hit) if bound[members].sum() > 0 else 0.0)
        row["kernel_end_to_end_saving_us"] = round(joint[key], 3)
    return rows


# what the what-if reads of roofline.parquet, by kind (`outputs.load_checked`)
ROOFLINE_COLUMNS = {
    **{name: "string" for name in ("name", "launcher", "input_dims", "input_types", "role", "op_mapping")},
    **{"attainable_us": "float", "headroom_us": "float", "count": "integer", "formulas": "integer"},
}


def _roofline(path: Path, output: Output) -> pd.DataFrame:
    """roofline.parquet as `atlas report` wrote it for this ingest run, checked where it is read:
    a doctored one ended in a KeyError, or saved 26,000 s of 197 µs with a negative attainable time."""
    check_derived(path, output)
    roofline = load_checked(path, ROOFLINE_COLUMNS, "a roofline table", by="atlas report").to_pandas()
    negative = int((roofline["attainable_us"] < 0).sum())
    if negative:
        raise AtlasError(path, f"{negative} rows with a negative attainable_us, which `atlas report` never writes")
    return roofline


def run_whatif(
    out_dir: Any, specs: list[str], no_launch_gaps: bool, window: str | None, rank: int | None
) -> dict[str, Any]:
    """`atlas whatif`: the ranks of an ingest output joined at their collectives (after `atlas report`
    has matched them, at most MAX_JOINT_RANKS) or one rank (`rank`, default the first) re-solved;
    the result also in OUT/whatif.json."""
    changes = [parse_speedup(s) for s in specs]
    if not changes and not no_launch_gaps:
        raise AtlasError(None, "nothing to change: give --speedup FIELD=VALUE:Nx (or :roofline) or --no-launch-gaps")
    window_spec = parse_window(window)
    out = Path(out_dir)
    if not (out / LOCK_NAME).exists():  # a folder no atlas command wrote is refused before a lock is made in it;
        open_output(out)  # one being written is told so by the lock, not "not an ingest output" (campaign AW 6)
    with lock(out, shared=True):
        output = open_output(out)
        ranks = sorted(output.files) or [0]
        chosen = ranks[0] if rank is None else rank
        if chosen not in ranks:
            raise AtlasError(out, f"no rank {chosen} here ({ranks_named(ranks)})")
        roof_path, matched_path = out / "roofline.parquet", out / "collectives.parquet"
        roofline = _roofline(roof_path, output) if roof_path.is_file() else None
        matched = read_parquet(matched_path) if matched_path.is_file() and len(ranks) > 1 else None
        if rank is None and matched is not None and len(matched) and len(ranks) <= MAX_JOINT_RANKS:
            graphs = {
                r: build_graph(load_kernels(out, ranks=[r]), load_host_events(out, r), window_spec, True) for r in ranks
            }
            if sum(g.n_nodes for g in graphs.values()) > MAX_JOINT_NODES:
                raise AtlasError(out, f"the ranks' graphs exceed {MAX_JOINT_NODES:,} nodes together: give --rank R")
            result = solve(join_ranks(graphs, matched), changes, no_launch_gaps, roofline)
            result["rank"], result["joint_ranks"] = None, len(ranks)
        else:
            kernels = load_kernels(out, ranks=[chosen]) if output.files else load_kernels(out)
            result = what_if(kernels, load_host_events(out, chosen), changes, no_launch_gaps, roofline, window_spec)
            result["rank"], result["joint_ranks"] = chosen, 1
        # written while the folder is held, and naming its run: written after the lock was let go, an
        # ingest of another trace in between had kept the old run's what-if in the new run (campaign AW 3)
        result["run_id"] = output.run_id
        write_json(out, "whatif.json", result)
    return result
