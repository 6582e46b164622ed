"""Link every GPU activity to its launch, launching op, call stack and step — vectorised.

Rules (see shared/kineto-format.md, checked on the shared traces):
* activity → runtime launch: same `correlation`; a graph launch owns every kernel it replays;
* launch → enclosing ranges: time nesting on the launch's (pid, tid) (`nesting.py`);
* launcher = innermost enclosing CPU op or Python frame; shapes come from the innermost
  enclosing CPU op; when the launch has no enclosing op the kernel's `External id` may
  still name one (linked "by external id");
* graph-replayed kernels keep the graph launch's stack but get no launcher and no shapes:
  the op around `cudaGraphLaunch` did not launch them (a profiled capture gives them theirs,
  `capture.py`);
* a compiled region (`CompiledFunction`, `Torch-Compiled Region: 0/0`: catalogs/launchers.toml
  `[regions]`) is no kernel's CPU op: it records the compiled graph's inputs, not the arguments of
  a kernel launched inside it without an op of its own. Such a kernel keeps the region (or the
  annotation around its launch) as launcher, but takes no CPU op, shapes or op call from it, and
  its `link` says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from kernel_atlas.core.groups import value_groups
from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.autograd import autograd_links
from kernel_atlas.ingest.columns import (
    ANNOTATION,
    CPU_OP,
    PYTHON,
    RUNTIME,
    HostTable,
    TraceColumns,
    categorical,
    step_numbers,
)
from kernel_atlas.ingest.composite import enclosed_shapes
from kernel_atlas.ingest.events import CUT_MARK, MAX_TEXT, cut_long
from kernel_atlas.ingest.frames import STACK_SEPARATOR, innermost_modules, module_path, short_frame
from kernel_atlas.ingest.legacy_stacks import StackWeaver, recorded_stacks, stack_key
from kernel_atlas.ingest.nesting import (
    NEST_TOLERANCE_US,
    containers_above,
    first_matching,
    nesting_parents_crossed,
)
from kernel_atlas.ingest.steps import is_native_step, is_step

GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")

# Why a GPU activity has no launcher, as reported in summary.json.
UNLINKED_NO_CORRELATION = "no correlation id on the GPU event"
UNLINKED_NO_LAUNCH = "launch not in the trace (issued before the profiling window opened)"
# a correlation id after the first recorded launch's (CUPTI and roctracer number launches in
# order): launched inside the window, its record lost (a dropped buffer, an untraced thread)
UNLINKED_LAUNCH_LOST = "launch not in the trace (issued inside the profiling window, not recorded)"
UNLINKED_NO_LAUNCHES = "launch not in the trace (it records no launches)"
UNLINKED_NO_CPU_OP = "launch has no enclosing CPU op or Python frame"
UNLINKED_GRAPH = "replayed from a CUDA/HIP graph (no per-kernel launcher)"
UNLINKED_CAPTURED_NO_OP = "replayed from a CUDA/HIP graph whose captured launch has no enclosing CPU op"
UNLINKED_REASONS = (UNLINKED_NO_CORRELATION, UNLINKED_NO_LAUNCH, UNLINKED_NO_CPU_OP, UNLINKED_GRAPH)
UNLINKED_REASONS += (UNLINKED_CAPTURED_NO_OP, UNLINKED_LAUNCH_LOST, UNLINKED_NO_LAUNCHES)
# the activities whose launch is missing, whatever the reason (`infer` borrows their shapes)
NO_LAUNCH_REASONS = (UNLINKED_NO_LAUNCH, UNLINKED_LAUNCH_LOST, UNLINKED_NO_LAUNCHES)
# linked by correlation, its innermost CPU op a compiled region (`[regions]`): why it has no shapes
LINK_REGION = (
    "no shapes: launched inside a compiled region (CompiledFunction, Torch-Compiled Region …) without an op "
    "of its own; the region records the compiled graph's inputs, not this kernel's arguments"
)

_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)


@dataclass
class LinkedColumns:
    """Per-GPU-activity link results, aligned with `TraceColumns.gpu` (text columns are
    categoricals: one string per distinct value; change rows with `columns.set_rows`)."""

    launch: pd.Categorical
    launch_ts: np.ndarray
    graph_launch: np.ndarray
    launcher: pd.Categorical
    cpu_op: pd.Categorical
    call_stack: pd.Categorical
    module: pd.Categorical
    step: np.ndarray  # int64, -1 none
    input_dims: pd.Categorical
    input_types: pd.Categorical
    input_strides: pd.Categorical
    concrete_inputs: pd.Categorical
    link: pd.Categorical
    # int64: the launching op's event index in the trace (one per op call), -1 none; op calls
    # replayed from a capture or re-formed by inference get ids past the trace's own
    cpu_op_id: np.ndarray
    capture_correlation: np.ndarray  # int64: correlation of the matched launch in a capture trace, -1 none
    shapes_inferred: np.ndarray  # bool: launcher and shapes borrowed from the same kernel elsewhere
    external_id_mismatch: int = 0
    # For later ingest stages that look at host ranges (`host_activity.py`): the launch's row in
    # `TraceColumns.host` (-1 none) and every host range's enclosing range (`nesting_parents`).
    launch_idx: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    host_parent: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    host_crossed: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # `HostNesting.crossed`
    step_annotation: pd.Categorical | None = None  # the enclosing per-step attention annotation (ingest/steps.py)
    enclosed_shapes: pd.Categorical | None = None  # what a composite MoE op encloses (ingest/composite.py)
    # autograd: the launch's sequence number and its forward op's / backward node's shapes (ingest/autograd.py)
    sequence_number: np.ndarray | None = None  # int64, -1 none
    stacks_shortened: int = 0  # distinct call stacks kept short, past the trace's STACKS_TEXT
    autograd_partner: pd.Categorical | None = None


@dataclass
class LaunchContext:
    """What encloses a set of host launches: launcher, CPU op and its shapes, stack, module."""

    launcher: list[str | None]
    cpu_op: list[str | None]
    call_stack: list[str | None]
    module: list[str | None]
    input_dims: list[str | None]
    input_types: list[str | None]
    input_strides: list[str | None]
    concrete_inputs: list[str | None]
    cpu_op_idx: np.ndarray  # int64 host index of the enclosing CPU op (one per op call), -1 none
    enclosed_shapes: list[str | None] = field(default_factory=list)  # of composite MoE ops (ingest/composite.py)
    autograd_partner: list[str | None] = field(default_factory=list)  # its forward op / backward node (autograd.py)


# ranges of one start and length on one thread: which kind encloses which (lower outside) — an
# annotation (a step, a record_function) the Python frames, a frame the ops it calls, an op its
# runtime calls
_ENCLOSING_RANK = np.zeros(4, np.int64)
_ENCLOSING_RANK[[ANNOTATION, PYTHON, CPU_OP, RUNTIME]] = [0, 1, 2, 3]


def _enclosing_first(host: HostTable) -> Callable[[np.ndarray], np.ndarray]:
    """`nesting_parents`' tie order of rows: by kind (`_ENCLOSING_RANK`), then External id — a
    call's id is taken as it starts, so an op's is below those of the ops it calls —, ranges
    without one last."""

    def tie(rows: np.ndarray) -> np.ndarray:
        rank = _ENCLOSING_RANK[np.clip(host.family[rows].astype(np.int64), 0, 3)]
        ids, last = host.external_id[rows], (1 << 60) - 1
        return (rank << 60) + np.where(ids >= 0, np.minimum(ids, last), last)

    return tie


@dataclass
class HostNesting:
    """Per-trace lookups shared by every launch: range parents, step ranges, short names."""

    parent: np.ndarray
    is_profiler_step: np.ndarray  # per name code
    short: list[str]  # per name code
    # per range whose ancestors skip a range open where it starts, the nearest such range, -1 for
    # the others (`nesting_parents_crossed`): where a call stack climbs past them (`containers_above`)
    crossed: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @classmethod
    def of(cls, host: HostTable, known: tuple[np.ndarray, np.ndarray] | None = None) -> HostNesting:
        """`known`: the ranges' `nesting_parents_crossed`, when already found (`LinkedColumns`'
        `host_parent` and `host_crossed`: the tree alone does not tell the crossings)."""
        parent, crossed = known or nesting_parents_crossed(host.thread, host.ts, host.end, _enclosing_first(host))
        return cls(
            parent=parent,
            crossed=crossed,
            is_profiler_step=step_numbers(host.names) >= 0,
            short=[short_frame(s) for s in host.names],
        )


def call_positions(op_idx: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position of each item (a launch, a kernel) within its op call (`op_idx`, -1 none), by
    time, and the number of items of the call (1 without a call)."""
    n = len(op_idx)
    pos, size = np.zeros(n, np.int64), np.ones(n, np.int64)
    has = np.flatnonzero(op_idx >= 0)
    if len(has) == 0:
        return pos, size
    order = has[np.lexsort((ts[has], op_idx[has]))]
    calls = op_idx[order]
    starts = np.flatnonzero(np.r_[True, calls[1:] != calls[:-1]])
    lengths = np.diff(np.r_[starts, len(order)])
    pos[order] = np.arange(len(order)) - np.repeat(starts, lengths)
    size[order] = np.repeat(lengths, lengths)
    return pos, size


def take(values: np.ndarray, idx: np.ndarray, fill: object) -> np.ndarray:
    """values[idx] where idx >= 0, `fill` elsewhere (also when `values` is empty)."""
    out = np.full(len(idx), fill, dtype=np.result_type(values.dtype, np.min_scalar_type(fill)))
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


def _enclosing_step(host: HostTable, is_profiler_step: np.ndarray, launch_idx: np.ndarray) -> np.ndarray:
    """The `ProfilerStep#N` range on the launch's thread that contains the launch (-1 none);
    `launch_idx` may name another host range placing the activity (`link`'s anchor: its op).

    Looked up by time, not through the nesting: the step range opens inside the Python frame
    of `profiler.step()` and outlives it, so it is not properly nested with the frames."""
    found = np.full(len(launch_idx), -1, dtype=np.int64)
    steps = np.flatnonzero((host.family == ANNOTATION) & is_profiler_step[host.name_code])
    has = launch_idx >= 0
    if len(steps) == 0 or not has.any():
        return found
    order = steps[np.lexsort((-host.end[steps], host.ts[steps], host.thread[steps]))]
    step_thread = host.thread[order]
    launches = launch_idx[has]
    result = np.full(len(launches), -1, dtype=np.int64)
    for thread, mine in value_groups(host.thread[launches]):
        lo, hi = np.searchsorted(step_thread, [thread, thread + 1])
        on_thread = order[lo:hi]
        if len(on_thread) == 0:
            continue
        result[mine] = _innermost(host, on_thread, host.ts[launches[mine]])
    found[has] = result
    return found


def _innermost(host: HostTable, steps: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time in `t`, the innermost of `steps` (host rows, by start, the outer of equal starts
    first) that contains it, -1 none: the last to start before it, else — where that one has
    ended — the range enclosing that one, and so on (steps are consecutive; ranges nested by
    two profilers, or by hand, are climbed)."""
    starts, ends = host.ts[steps], host.end[steps]
    p = np.searchsorted(starts, t + NEST_TOLERANCE_US, side="right") - 1
    parent = _enclosing_ranges(starts, ends) if len(steps) > 1 else np.full(len(steps), -1, np.int64)
    while True:
        ok = p >= 0
        outside = ok & (t > ends[np.where(ok, p, 0)] + NEST_TOLERANCE_US)
        if not outside.any():
            break
        p[outside] = parent[p[outside]]
    return np.where(p >= 0, steps[np.maximum(p, 0)], -1)


def _enclosing_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per range (sorted by start), the nearest earlier one that still holds its start, -1 none.
    Consecutive steps — the rule — have none; one pass with a stack of the open ranges."""
    if not (starts[1:] < ends[:-1] - NEST_TOLERANCE_US).any():  # no range starts inside the one before
        return np.full(len(starts), -1, np.int64)
    parent = np.full(len(starts), -1, np.int64)
    open_: list[int] = []
    closes = ends.tolist()
    for i, start in enumerate(starts.tolist()):
        while open_ and closes[open_[-1]] + NEST_TOLERANCE_US < start:
            open_.pop()
        parent[i] = open_[-1] if open_ else -1
        open_.append(i)
    return parent


def step_rows(host: HostTable) -> np.ndarray:
    """(k, 3) number, start, end of the trace's profiler steps, sorted by start and not
    overlapping: the one list of steps that every output reads (docs/efficiency.md, "Which step").

    A step is a `ProfilerStep#N` range of any thread, recorded as an annotation or a CPU op
    (Kineto writes `user_annotation`, older PyTorch `Operator`, some writers `cpu_op`). Ranges of
    one number that overlap — the step recorded on several threads, or by two profilers — are
    one step, their union. A step range inside another's (a step marked by hand inside one, two
    profilers numbering differently) is a step of its own and cuts the one around it: that one's
    time before and after it are two rows of its number, so that every instant lies in one row
    at most and the rows add up (the innermost range holding a launch is its step)."""
    step_of = step_numbers(host.names)
    ranges = (host.family == ANNOTATION) | (host.family == CPU_OP)
    rows = np.flatnonzero(ranges & (step_of[host.name_code] >= 0)) if len(host) else np.empty(0, np.int64)
    number, start, end = step_of[host.name_code[rows]], host.ts[rows], np.maximum(host.end[rows], host.ts[rows])
    if not len(rows):
        return np.empty((0, 3))
    order = np.lexsort((start, number))
    number, start, end = number[order], start[order], end[order]
    # one number's overlapping ranges (by start) are one: a new step where the number changes or
    # the range starts after all before it of its number ended
    reach = pd.Series(end).groupby(number).cummax().to_numpy()
    new = np.r_[True, (number[1:] != number[:-1]) | (start[1:] > reach[:-1] + NEST_TOLERANCE_US)]
    first = np.flatnonzero(new)
    steps = np.column_stack([number[first], start[first], np.maximum.reduceat(end, first)]).astype(np.float64)
    steps = steps[np.lexsort((-steps[:, 2], steps[:, 1]))]
    if not (steps[1:, 1] < steps[:-1, 2] - NEST_TOLERANCE_US).any():  # consecutive: the rule
        return steps
    return _cut_at_nested(steps)


def _cut_at_nested(steps: np.ndarray) -> np.ndarray:
    """`steps` (by start, the outer of equal starts first) as rows that do not overlap: each
    instant in the range that started last among those open then; consecutive pieces of one range
    merged. A Python pass over the steps: only traces whose steps overlap come here."""
    bounds = np.unique(steps[:, 1:])
    opened = np.searchsorted(bounds, steps[:, 1])
    closed = np.searchsorted(bounds, steps[:, 2])
    pieces: list[list[float]] = []
    owner_of_last = -1
    open_: list[int] = []  # open ranges, by start (the innermost last)
    starting = 0
    for b in range(len(bounds) - 1):
        while starting < len(steps) and opened[starting] <= b:
            open_.append(starting)
            starting += 1
        open_ = [k for k in open_ if closed[k] > b]
        if not open_:
            owner_of_last = -1
            continue
        owner = open_[-1]
        if owner == owner_of_last:
            pieces[-1][2] = float(bounds[b + 1])
        else:
            pieces.append([float(steps[owner, 0]), float(bounds[b]), float(bounds[b + 1])])
        owner_of_last = owner
    return np.array(pieces, dtype=np.float64).reshape(-1, 3)


def step_row_of(steps: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time in `t` (a launch's start), the row of `steps` (`step_rows`) holding it, -1 none
    (NaN: none): the last to start at or before it, where it has not ended — a launch where one
    step ends and the next starts is the next one's (`NEST_TOLERANCE_US` either side)."""
    t = np.asarray(t, dtype=np.float64)
    if not len(steps):
        return np.full(len(t), -1, np.int64)
    p = np.searchsorted(steps[:, 1], t + NEST_TOLERANCE_US, side="right") - 1
    held = (p >= 0) & (t <= steps[np.maximum(p, 0), 2] + NEST_TOLERANCE_US)
    return np.where(held, p, -1)


@dataclass
class _Stacks:
    """Call stack and `nn.Module` path per chain start, as codes into per-chain texts."""

    code: np.ndarray  # int64 index into `texts` / `modules`, -1 none
    texts: list[str]
    modules: list[str | None]
    shortened: int = 0  # distinct stacks past STACKS_TEXT, kept to their innermost SHORT_STACK_TEXT characters

    def call_stack(self) -> pd.Categorical:
        return categorical(self.code, self.texts)

    def module(self) -> pd.Categorical:
        module_of_stack = np.array([-1 if m is None else i for i, m in enumerate(self.modules)], dtype=np.int64)
        return categorical(take(module_of_stack, self.code, -1), self.modules)  # type: ignore[arg-type]


# The most ranges a call stack climbs, and the most characters of it: real stacks are tens of
# frames; N ranges of one thread with the same start and end nest N deep (the profiler rounds to
# the µs), and a stack per level cost N² frames (5,000 such launches: 26 s and 1.2 GB).
MAX_STACK_RANGES = 256
# and of all a trace's distinct stacks and module paths together: past it, a new one keeps its
# innermost SHORT_STACK_TEXT characters (the launching frames). Real traces hold well under 1 MB
# (the shared ones at most 0.2 MB); 20,000 ops, each with its own leaf frame under 5,000 shared
# ones, made 20,000 stacks of 16k characters — a 14 MB trace ingested in 1.4 GB, reported in 2 GB.
STACKS_TEXT = 32 << 20
SHORT_STACK_TEXT = 512


def _call_stacks(host: HostTable, nest: HostNesting, chain_nodes: np.ndarray) -> _Stacks:
    """Call stack text and `nn.Module` path per chain start (host index, -1 none); one string per
    distinct frame chain, found by hashing the chains level by level. A stack holds its innermost
    MAX_STACK_RANGES ranges and MAX_TEXT characters at most, its outer end cut with CUT_MARK."""
    n = len(chain_nodes)
    parent, is_profiler_step = nest.parent, nest.is_profiler_step
    # a stack lists every range holding its first one, a range that another crosses included (the
    # frame a `ProfilerStep#N` outlives): the walk climbs past a crossing range by what it holds
    crossed = nest.crossed if len(nest.crossed) else np.full(len(parent), -1, np.int64)
    first_end = take(host.end, chain_nodes, 0.0)

    def above(nodes: np.ndarray, ends: np.ndarray) -> np.ndarray:
        return containers_above(nodes, ends, parent, crossed, host.ts, host.end)

    stack_hash = np.zeros(n, dtype=np.uint64)
    cur = chain_nodes.copy()
    active = cur >= 0
    recorded = recorded_stacks(host)  # `Call stack` strings of older PyTorch
    with np.errstate(over="ignore"):
        for _ in range(MAX_STACK_RANGES):
            if not active.any():
                break
            node = cur[active]
            skip = is_profiler_step[host.name_code[node]]  # a step range, annotation or CPU op, is no frame
            code = (host.name_code[node] + 1).astype(np.uint64)
            if recorded is not None:
                code += stack_key(host, node)
            stack_hash[active] = np.where(skip, stack_hash[active], stack_hash[active] * _HASH_MULT + code)
            cur[active] = above(node, first_end[active])
            active = cur >= 0
    # one text per distinct chain, built from the first chain start that has it
    with_chain = np.flatnonzero(chain_nodes >= 0)
    _, first, chain_code = np.unique(stack_hash[with_chain], return_index=True, return_inverse=True)
    texts: list[str] = []
    modules: list[str | None] = []
    spent = shortened = 0
    for node in chain_nodes[with_chain[first]].tolist():
        ends = host.end[[node]]
        most = MAX_TEXT if spent <= STACKS_TEXT else SHORT_STACK_TEXT
        weaver = StackWeaver(host, recorded)
        climbed = length = 0
        while node >= 0 and climbed < MAX_STACK_RANGES and length <= most:
            code = int(host.name_code[node])
            if not is_profiler_step[code]:
                weaver.add(node, nest.short[code])
                length += len(nest.short[code]) + len(STACK_SEPARATOR)
            up = parent[node] if crossed[node] < 0 else above(np.array([node]), ends)[0]
            node, climbed = int(up), climbed + 1
        frames = weaver.frames()
        text = STACK_SEPARATOR.join(frames) + (STACK_SEPARATOR + CUT_MARK if node >= 0 else "")
        text = cut_long(text, most)
        module = module_path(frames)
        if module is not None:
            module = innermost_modules(module, most)
        shortened += most != MAX_TEXT and (node >= 0 or len(text) >= most)
        spent += len(text) + len(module or "")
        texts.append(text)
        modules.append(module)
    stack_code = np.full(n, -1, dtype=np.int64)
    stack_code[with_chain] = chain_code.reshape(-1)
    return _Stacks(stack_code, texts, modules, shortened)


def _shape_part(shape: np.ndarray, texts: list[str | None]) -> pd.Categorical:
    """One recorded part (dims, types, …) per kernel, from its launching op's shape code."""
    of_shape = np.array([-1 if t is None else i for i, t in enumerate(texts)], dtype=np.int64)
    return categorical(take(of_shape, shape, -1), texts)  # type: ignore[arg-type]


def _shapes(host: HostTable, shape_source: np.ndarray) -> tuple[pd.Categorical, ...]:
    """`Input Dims`, `Input type`, `Input Strides`, `Concrete Inputs` of each source CPU op
    (host index, -1 none) as canonical JSON text."""
    shape = take(host.shape, shape_source, -1)
    return tuple(_shape_part(shape, [recorded[k] for recorded in host.shapes]) for k in range(4))


def _collective_shapes(host: HostTable, launcher_idx: np.ndarray, cpu_op_idx: np.ndarray) -> np.ndarray:
    """The host range whose shapes a launch takes: its CPU op, or its launcher when that is an
    annotation with recorded tensors and the op has none (older PyTorch records a collective's
    tensors on the `nccl:all_reduce` range inside a `record_param_comms` op without them)."""
    tensors = np.array([bool(re.search(r"\[\d", shape[0] or "")) for shape in host.shapes] + [False])
    op_has = tensors[take(host.shape, cpu_op_idx, -1)]
    launcher_has = tensors[take(host.shape, launcher_idx, -1)]
    borrow = ~op_has & launcher_has & (take(host.family, launcher_idx, -1) == ANNOTATION)
    return np.where(borrow, launcher_idx, cpu_op_idx)


@lru_cache(maxsize=1)
def _regions() -> tuple[frozenset[str], re.Pattern[str] | None]:
    """catalogs/launchers.toml `[regions]`: the exact names and one alternation of the patterns."""
    regions = read_toml("launchers.toml").get("regions", {})
    patterns = [f"(?:{p})" for p in regions.get("patterns", [])]
    return frozenset(regions.get("names", [])), re.compile("|".join(patterns)) if patterns else None


def region_names(host: HostTable) -> np.ndarray:
    """Per name code, whether the range is a compiled region (`_regions`): judged once per
    distinct name, not per launch."""
    names, pattern = _regions()
    return np.array(
        [s in names or (pattern is not None and pattern.search(s) is not None) for s in host.names], dtype=bool
    )


def _in_region(host: HostTable, is_region: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per host index (-1 none), whether that range is a compiled region (`region_names`)."""
    return take(is_region, take(host.name_code, idx, -1), False).astype(bool)


def _launcher_and_op(host: HostTable, nest: HostNesting, launch_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host index of the launcher (innermost enclosing CPU op, Python frame or annotation, not a
    step range nor a runtime call — a driver call nested in its runtime call, or a launch nested
    in another where rounding made one end where the other starts, named `cudaLaunchKernel` the
    launcher) and of the innermost enclosing CPU op of each launch; -1 none."""
    enclosing = take(nest.parent, launch_idx, -1)
    # a step range is no launcher nor op, whether recorded as an annotation or as a CPU op (as the
    # step rule reads both: `step_rows`)
    not_step = ~nest.is_profiler_step[host.name_code]
    launcher_idx = first_matching(enclosing, nest.parent, not_step & (host.family != RUNTIME))
    cpu_op_idx = first_matching(enclosing, nest.parent, not_step & (host.family == CPU_OP))
    return launcher_idx, cpu_op_idx


def describe_launches(host: HostTable, launch_idx: np.ndarray, nest: HostNesting | None = None) -> LaunchContext:
    """Launcher, CPU op with its shapes, call stack and module of host launches (by index)."""
    nest = nest or HostNesting.of(host)
    launcher_idx, cpu_op_idx = _launcher_and_op(host, nest, launch_idx)
    # a compiled region is no kernel's op (as in `link`)
    cpu_op_idx = np.where(_in_region(host, region_names(host), cpu_op_idx), -1, cpu_op_idx)
    stacks = _call_stacks(host, nest, launch_idx)
    stack_codes = stacks.code.tolist()
    shapes = [None if k < 0 else host.shapes[k] for k in take(host.shape, cpu_op_idx, -1).tolist()]
    dims, types, strides, concrete = ([None if s is None else s[p] for s in shapes] for p in range(4))
    codes = take(host.name_code, launcher_idx, -1).tolist()
    op_codes = take(host.name_code, cpu_op_idx, -1).tolist()
    return LaunchContext(
        launcher=[None if k < 0 else nest.short[k] for k in codes],
        cpu_op=[None if k < 0 else host.names[k] for k in op_codes],
        call_stack=[None if k < 0 else stacks.texts[k] for k in stack_codes],
        module=[None if k < 0 else stacks.modules[k] for k in stack_codes],
        input_dims=dims,
        input_types=types,
        input_strides=strides,
        concrete_inputs=concrete,
        cpu_op_idx=cpu_op_idx,
        enclosed_shapes=[v if isinstance(v, str) else None for v in enclosed_shapes(host, cpu_op_idx)],
        autograd_partner=[v if isinstance(v, str) else None for v in autograd_links(host, nest.parent, cpu_op_idx)[1]],
    )


def link(cols: TraceColumns) -> LinkedColumns:
    gpu, host = cols.gpu, cols.host
    n = len(gpu)
    names = host.names
    nest = HostNesting.of(host)

    # --- activity → launch by correlation -------------------------------------------------
    runtime_idx = np.flatnonzero((host.family == RUNTIME) & (host.correlation >= 0))
    corr = host.correlation[runtime_idx]
    order = np.argsort(corr, kind="stable")
    corr_sorted, runtime_sorted = corr[order], runtime_idx[order]
    pos = np.searchsorted(corr_sorted, gpu.correlation)
    pos_ok = pos < len(corr_sorted)
    launch_idx = np.full(n, -1, dtype=np.int64)
    hit = pos_ok.copy()
    hit[pos_ok] = corr_sorted[pos[pos_ok]] == gpu.correlation[pos_ok]
    hit &= gpu.correlation >= 0
    launch_idx[hit] = runtime_sorted[pos[hit]]
    has_launch = launch_idx >= 0

    launch_name_code = take(host.name_code, launch_idx, -1)
    graph_code = np.array([s.startswith(GRAPH_LAUNCH_PREFIXES) for s in names], dtype=bool)
    graph = take(graph_code, launch_name_code, False).astype(bool)

    # --- launch → enclosing ranges --------------------------------------------------------
    launcher_idx, cpu_op_idx = _launcher_and_op(host, nest, launch_idx)

    # External id fallback / cross-check (0 and -1 mean "not recorded").
    ext = host.external_id
    op_rows = np.flatnonzero((host.family == CPU_OP) & (ext > 0))
    ext_order = op_rows[np.argsort(ext[op_rows], kind="stable")]
    ext_sorted = ext[ext_order]
    kpos = np.searchsorted(ext_sorted, gpu.external_id)
    kpos_ok = (kpos < len(ext_sorted)) & (gpu.external_id > 0)
    ext_match = np.full(n, -1, dtype=np.int64)
    ok = kpos_ok.copy()
    ok[kpos_ok] = ext_sorted[kpos[kpos_ok]] == gpu.external_id[kpos_ok]
    ext_match[ok] = ext_order[kpos[ok]]
    # The kernel's External id names the op that was current at launch. Older Kineto wrote
    # the correlation id there instead; those traces have nothing to cross-check.
    checked = (cpu_op_idx >= 0) & (gpu.external_id > 0) & (gpu.external_id != gpu.correlation) & ~graph
    mismatch = checked & (take(ext, cpu_op_idx, -1) != gpu.external_id)
    # (an External id naming a compiled region names no op of the kernel's: no fallback to it)
    is_region = region_names(host)
    fallback = (cpu_op_idx < 0) & (ext_match >= 0) & ~graph & ~_in_region(host, is_region, ext_match)
    cpu_op_idx = np.where(fallback, ext_match, cpu_op_idx)
    launcher_idx = np.where((launcher_idx < 0) & fallback, ext_match, launcher_idx)
    # A compiled region (CompiledFunction …) records the compiled graph's inputs: a kernel launched
    # inside it without an op of its own takes no CPU op, shapes nor op call from it (campaign AJ:
    # such kernels had been costed on the graph's inputs, all of one region call's kernels as one
    # call — one row's cost over their summed time)
    in_region = _in_region(host, is_region, cpu_op_idx) & ~graph
    cpu_op_idx = np.where(in_region, -1, cpu_op_idx)

    # --- the host range that places an activity in time and on a thread: its launch, else (linked
    # by External id, the launch missing) its op, which lies in the same step ranges as its launch
    anchor = np.where(has_launch, launch_idx, np.where(fallback, ext_match, -1))
    # a serving engine's per-step annotation with the batch's sequence lengths (ingest/steps.py)
    attention_step_idx = _enclosing_step(host, np.array([is_step(s) for s in names], dtype=bool), anchor)
    # else its native annotation (tokens only), so that the attention call can say what it lacks
    native_idx = _enclosing_step(host, np.array([is_native_step(s) for s in names], dtype=bool), anchor)
    attention_step_idx = np.where(attention_step_idx >= 0, attention_step_idx, native_idx)

    # --- call stacks (graph replays keep the graph launch's), shapes of the launching op --
    stacks = _call_stacks(host, nest, np.where(fallback, ext_match, launch_idx))
    shape_source = np.where(graph, -1, _collective_shapes(host, launcher_idx, cpu_op_idx))
    input_dims, input_types, input_strides, concrete = _shapes(host, shape_source)
    sequence_number, autograd_partner = autograd_links(host, nest.parent, np.where(graph, -1, cpu_op_idx))

    # --- steps: the step row holding the launch (its op's start where linked by External id),
    # whatever thread recorded it; GPU-side step annotations are no steps (docs/efficiency.md)
    steps = step_rows(host)
    row = step_row_of(steps, take(host.ts, anchor, np.nan))
    step = np.where(row >= 0, steps[np.maximum(row, 0), 0] if len(steps) else -1, -1).astype(np.int64)

    # --- names and reasons ----------------------------------------------------------------
    def name_or_none(idx: np.ndarray) -> pd.Categorical:
        return categorical(take(host.name_code, idx, -1), names)

    launcher_final = np.where(graph, -1, launcher_idx)
    reasons = ["correlation", "external id", *UNLINKED_REASONS, LINK_REGION]
    reason = np.zeros(n, dtype=np.int8)  # codes into `reasons`, the later rules winning
    # linked by External id where the launch is missing: so said (not "no launch"), and never
    # inferred over (`infer` borrows only for the launchless reasons)
    reason[fallback] = 1
    reason[(gpu.correlation < 0) & ~fallback] = 2
    unlaunched = (gpu.correlation >= 0) & ~has_launch & ~fallback
    if not len(corr_sorted):
        reason[unlaunched] = reasons.index(UNLINKED_NO_LAUNCHES)
    else:  # before the first recorded launch: the window was not open yet
        reason[unlaunched] = reasons.index(UNLINKED_NO_LAUNCH)
        reason[unlaunched & (gpu.correlation > corr_sorted[0])] = reasons.index(UNLINKED_LAUNCH_LOST)
    reason[has_launch & (launcher_idx < 0) & ~graph] = reasons.index(UNLINKED_NO_CPU_OP)
    reason[in_region & (shape_source < 0)] = reasons.index(LINK_REGION)  # no annotation's tensors borrowed either
    reason[graph] = reasons.index(UNLINKED_GRAPH)
    link_reason = _reason_categorical(reason, reasons)

    return LinkedColumns(
        launch=name_or_none(launch_idx),
        launch_ts=take(host.ts, launch_idx, np.nan),
        graph_launch=graph,
        launcher=categorical(take(host.name_code, launcher_final, -1), nest.short),
        cpu_op=name_or_none(np.where(graph, -1, cpu_op_idx)),
        call_stack=stacks.call_stack(),
        module=stacks.module(),
        step=step,
        input_dims=input_dims,
        input_types=input_types,
        input_strides=input_strides,
        concrete_inputs=concrete,
        link=link_reason,
        cpu_op_id=shape_source,
        capture_correlation=np.full(n, -1, dtype=np.int64),
        shapes_inferred=np.zeros(n, dtype=bool),
        external_id_mismatch=int(mismatch.sum()),
        launch_idx=launch_idx,
        host_parent=nest.parent,
        host_crossed=nest.crossed,
        step_annotation=name_or_none(attention_step_idx),
        enclosed_shapes=enclosed_shapes(host, np.where(graph, -1, cpu_op_idx), gpu.name),
        sequence_number=sequence_number,
        autograd_partner=autograd_partner,
        stacks_shortened=stacks.shortened,
    )


def _reason_categorical(codes: np.ndarray, texts: list[str]) -> pd.Categorical:
    """`pd.Categorical` of the texts at `codes` (categories: the texts used, sorted), without a
    string per row."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(texts)))
    ordered = sorted(used.tolist(), key=texts.__getitem__)
    position = np.zeros(len(texts), dtype=np.int8)
    position[ordered] = np.arange(len(ordered))
    return pd.Categorical.from_codes(position[codes], categories=[texts[i] for i in ordered])


def unlinked_counts(link_reason: Sequence[str] | np.ndarray | pd.Categorical) -> dict[str, int]:
    """How many activities have no launcher, by reason (for summary.json): the reasons above, then
    why a graph-replayed activity got no captured launch where a capture was given (ingest/capture.py
    `LINK_UNMATCHED`, `LINK_NOT_PAIRED`, `LINK_MISORDERED`: each begins like `UNLINKED_GRAPH`)."""
    counts = pd.Categorical(link_reason).value_counts()
    found = {reason: int(counts[reason]) for reason in UNLINKED_REASONS if counts.get(reason, 0)}
    replayed = UNLINKED_GRAPH.split(" (")[0]  # "replayed from a CUDA/HIP graph"
    found.update(
        {str(why): int(n) for why, n in counts.items() if n and str(why).startswith(replayed) and why not in found}
    )
    return found
