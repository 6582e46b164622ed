"""CUDA/HIP-graph replays get launcher, shapes and stack from a profiled graph capture.

A graph replay shows each replayed kernel under one `cudaGraphLaunch`/`hipGraphLaunch`; the
ops that launched them ran once, at capture time. A profile of the capture records each
captured launch (`cudaLaunchKernel`, `cuLaunchKernel`, `hipExtModuleLaunchKernel`,
`cudaMemcpyAsync`…) between `*StreamBeginCapture` and `*StreamEndCapture` on the capturing
thread, nested in its CPU op (shapes), Python frames and `nn.Module`s — but no GPU activity:
captured work does not run.

Matching, per replayed graph launch (its kernels in GPU order) against every captured graph:

* a captured launch is known by its kind (kernel / memcpy / memset) and, where the capture
  says, by its kernel name: ROCm launches carry `args.kernel`; an Inductor launch sits in a CPU
  op named like its Triton kernel; a launch whose op call (same op, shapes and position in the
  call) also ran eagerly in the capture trace (warm-up runs) gets that kernel's name, grid
  and block;
* the two sequences are aligned with the fewest insertions and deletions (Myers' diff) under
  "same kind, and the same name/grid/block where both sides know it"; a few extra or missing
  memsets, memcpys or profiler-dropped kernels cost one edit each;
* the captured graph with the fewest edits wins; when several fit equally and would give
  different shapes, the launch stays unmatched (ambiguous); when they would give the same
  shapes (identical pieces of a piecewise graph) the next one in capture order is taken;
* a pairing rests on a kernel name where the capture has one; a launch without a name is
  paired only where position decides it: between two name-verified pairs (or the ends) both
  sides hold the same number of items of its kind, all paired. A kernel is never given the
  launch of another kernel that the capture can tell apart.

Graphs whose kernels run on several streams are aligned stream by stream (each stream keeps
capture order) and need kernel names in the capture.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernel_atlas.classify.rules import inductor_kernel_prefix
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.columns import (
    ANNOTATION,
    RUNTIME,
    GpuTable,
    HostTable,
    TraceColumns,
    as_list,
    build_columns,
    set_rows,
)
from kernel_atlas.ingest.link import (
    UNLINKED_CAPTURED_NO_OP,
    HostNesting,
    LaunchContext,
    LinkedColumns,
    call_positions,
    describe_launches,
)
from kernel_atlas.ingest.nsys import WHOLE_GRAPH_NAME

LINK_GRAPH_CAPTURE = "graph capture"
LINK_GRAPH_NODE = "graph node id"  # matched exactly by its Nsight graph node id (`graph_nodes.py`)

KERNEL, MEMCPY, MEMSET = 0, 1, 2
_GPU_KIND = {"kernel": KERNEL, "memcpy": MEMCPY, "memset": MEMSET}
_KERNEL_LAUNCH = re.compile(r"Launch(?:Cooperative)?Kernel")
# ROCm may replay a graph's memset/memcpy nodes as runtime blit kernels
_ROCCLR_FILL, _ROCCLR_COPY = "__amd_rocclr_fillBuffer", "__amd_rocclr_copyBuffer"
# Inductor names the CPU op around a Triton launch after the kernel
_INDUCTOR_KERNEL = inductor_kernel_prefix()  # rules.toml [sets] inductor_kernels
# Triton 2.0 appended the argument signature to kernel names (`…_0d1d2de`)
_TRITON_SIGNATURE = re.compile(r"_\d+d[0-9de]*$")

# what a replayed kernel takes from its captured launch's context
ATTACHED = (
    "launcher",
    "cpu_op",
    "call_stack",
    "module",
    "input_dims",
    "input_types",
    "input_strides",
    "concrete_inputs",
    "enclosed_shapes",
    "autograd_partner",
)
# the most captured graphs read (all capture traces together, and a trace's own): a capture
# process records one graph per batch size and shape, tens to hundreds; 50,000 of two launches
# each took 1.2 GB (~21 KB a graph, its launches' context kept while replays are matched)
MAX_CAPTURED_GRAPHS = 4096
MIN_EDITS, EDIT_SHARE = 4, 0.05  # edits tolerated: max(4, 5% of the longer sequence)
# and at most this many: an alignment's memory grows with the square of its edits (64 MB here)
MAX_ALIGN_EDITS = 4096
LOOKAHEAD = 2  # replayed kernels a stream may skip (profiler drops) in a multi-stream merge
# streams tried for one launch in a multi-stream merge, in the order they were met: real graphs
# run on a few; one spread over thousands (only ever built to break things) tries the first ones
MERGE_CANDIDATES = 64

WHY_NO_CAPTURE = "no captured graph given (pass --capture)"
# a whole-graph replay is one row for every kernel the graph ran: no captured launch is its
WHY_WHOLE = "replayed as a whole graph, whose kernels are not in the export (nsys --cuda-graph-trace=node records them)"
WHY_NO_FIT = "no captured graph has the same kernels"
WHY_AMBIGUOUS = "several captured graphs fit equally well with different shapes"
WHY_UNPLACED = "kernel count differs and the capture records no kernel names to place the difference"
WHY_STREAMS = "graph runs on several streams and the capture records no kernel names to order them"
WHY_GRIDS = "the grids its Inductor launches imply are not the replayed ones (another batch size?)"
# A graph whose pairing contradicts itself: most of its paired launches' ops name another kind of
# work than the kernels they are paired with (a GEMM kernel ← aten::mul, an add kernel ←
# aten::mm) — a CUDA capture records no kernel names, so a capture of other ops with as many
# launches aligns by order and count alone. A helper kernel of an op (a fill, a reduction) is a
# minority of its pairs.
WHY_CONTRADICTED = "the captured launches' ops name other work than most replayed kernels they pair with"
# A graph whose pairs by order show the order is off: a kernel paired with one op's launch is named
# after the op of another launch there, whose own kernel is named after other work (a Mul kernel
# ← aten::add while the Add kernel ← aten::mul). Such a crossing says the capture ran these ops in
# another order than the replay; the other pairs placed by the same order (between the same two
# name-verified pairs) rest on that order alone, and go with it. A single disagreement is not
# enough: the classifier also reports one for a kernel that is its op's own (an add kernel under
# aten::sub, a Mul kernel under aten::div by a scalar, a GEMM under aten::bmm or aten::convolution,
# clamp under aten::relu).
WHY_MISORDERED = (
    "the captured launches ran in another order than the replayed kernels (a kernel paired by order is "
    "named after another launch's op) and no kernel names pair them"
)
# Why a graph-replayed activity got no captured launch, where a capture was given (the roofline's
# note, report's uncosted reasons; `UNLINKED_GRAPH` stays for replays with no capture to match)
LINK_UNMATCHED_PREFIX = "replayed from a CUDA/HIP graph that matched no captured graph"
LINK_UNMATCHED = LINK_UNMATCHED_PREFIX + ": {why}"
LINK_NOT_PAIRED = (
    "replayed from a CUDA/HIP graph: no launch of its matched captured graph pairs with it (not in that "
    "graph, or not placed there without a kernel name)"
)
LINK_MISORDERED = (
    "replayed from a CUDA/HIP graph: left unpaired in its matched captured graph, whose launches ran in "
    "another order here (a kernel paired by order is named after another launch's op)"
)


def canonical_kernel_name(name: str) -> str:
    if name.startswith("triton") and _TRITON_SIGNATURE.search(name):
        return _TRITON_SIGNATURE.sub("", name)
    return name


@dataclass
class CapturedGraph:
    """The launches of one stream capture, in capture order, with what they ran under."""

    source: str  # capture file name
    number: int  # 1-based, in capture order within its file
    label: str | None  # innermost annotation around the capture (`capture_32_DECODE`)
    kind: np.ndarray  # int8 KERNEL / MEMCPY / MEMSET
    name: list[str | None]  # kernel name where the capture tells it
    grid: list[str | None]
    block: list[str | None]
    grid_hint: list[str | None]  # grid an Inductor launch's recorded tile and sizes imply (tie-breaks)
    correlation: np.ndarray  # int64 correlation of each launch in the capture trace
    op_call: np.ndarray  # int64 launching op call (host index in the capture trace), -1 none
    context: LaunchContext
    given: bool = False  # from a capture trace given (`--capture`), not from the replay trace itself

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def title(self) -> str:
        return f"{self.source} graph {self.number}" + (f" ({self.label})" if self.label else "")


def inductor_grid(op: str, args: Any) -> str | None:
    """The 1-D grid of an Inductor Triton launch, from what its CPU op records: ceil(xnumel /
    XBLOCK), xnumel being the last integer argument of a pointwise kernel and the one before the
    reduction size of a reduction. None unless the op records `kernel_kwargs` with XBLOCK only
    (no Y/Z tiles) and integer sizes in `Concrete Inputs`."""
    if not isinstance(args, dict) or not isinstance(args.get("kernel_kwargs"), str):
        return None
    tiles = dict(part.split("=", 1) for part in args["kernel_kwargs"].split(",") if "=" in part)
    block = _count(tiles.get("XBLOCK"))
    if not block or any(k in tiles for k in ("YBLOCK", "ZBLOCK", "R1_BLOCK")):  # XBLOCK=0 is no tile
        return None
    sizes = [n for n in map(_count, args.get("Concrete Inputs") or []) if n is not None]
    reduction = op.startswith(("triton_red_", "triton_per_"))
    if (not op.startswith("triton_poi_") and not reduction) or len(sizes) < 1 + reduction:
        return None
    xnumel = sizes[-2] if reduction else sizes[-1]
    return f"[{-(-xnumel // block)}, 1, 1]"


def _count(text: object) -> int | None:
    """A size written in plain ASCII digits, within int64 (`str.isdigit` also takes '²', which
    `int` refuses); None otherwise."""
    if not isinstance(text, str) or not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


def _launch_kind(name: str) -> int:
    if _KERNEL_LAUNCH.search(name):
        return KERNEL
    if "Memcpy" in name:
        return MEMCPY
    if "Memset" in name:
        return MEMSET
    return -1


def _capture_ranges(host: Any) -> list[tuple[int, int]]:
    """(begin, end) host rows of every stream capture: on each thread, every
    `*StreamBeginCapture` is closed by the next `*StreamEndCapture` (the latest open one first)."""
    runtime = host.family == RUNTIME
    is_begin = np.array(["StreamBeginCapture" in s for s in host.names], dtype=bool)[host.name_code] & runtime
    is_end = np.array(["StreamEndCapture" in s for s in host.names], dtype=bool)[host.name_code] & runtime
    rows = np.flatnonzero(is_begin | is_end)
    rows = rows[np.lexsort((host.ts[rows], host.thread[rows]))]
    ranges: list[tuple[int, int]] = []
    open_begins: dict[int, list[int]] = {}
    for row in rows.tolist():
        stack = open_begins.setdefault(int(host.thread[row]), [])
        if is_begin[row]:
            stack.append(row)
        elif stack:
            ranges.append((stack.pop(), row))
    return sorted(ranges, key=lambda r: float(host.ts[r[0]]))


class CapturedGraphs(list[CapturedGraph]):
    """Captured graphs, and how many past a limit were not read (`left_out`)."""

    left_out: int = 0
    events: int = 0  # the trace's host and GPU events (`read_capture`): 0 where the file is no trace


def left_out_line(count: int) -> str:
    """The warning for `count` captured graphs past MAX_CAPTURED_GRAPHS."""
    return (
        f"{count:,} captured graphs past the first {MAX_CAPTURED_GRAPHS:,} were not read (each holds its "
        "launches' shapes and stacks while replays are matched)"
    )


def graphs_in_trace(
    cols: TraceColumns, source: str, limit: int = MAX_CAPTURED_GRAPHS, given: bool = False
) -> CapturedGraphs:
    """Every stream capture of a trace (the first `limit`, by start), with what each captured
    launch ran under; `given`: the trace is a capture trace given with `--capture`."""
    host, gpu = cols.host, cols.gpu
    ranges = _capture_ranges(host) if len(host) else []
    graphs = CapturedGraphs()
    graphs.left_out = max(len(ranges) - max(limit, 0), 0)
    ranges = ranges[: max(limit, 0)]
    if not ranges:
        return graphs
    kind_of_name = np.array([_launch_kind(s) for s in host.names], dtype=np.int8)
    launches = np.flatnonzero((host.family == RUNTIME) & (kind_of_name[host.name_code] >= 0))
    launches = launches[np.lexsort((host.ts[launches], host.thread[launches]))]
    nest = HostNesting.of(host)
    context = describe_launches(host, launches, nest)
    pos, size = call_positions(context.cpu_op_idx, host.ts[launches])

    def op_signature(i: int) -> tuple[Any, ...] | None:
        if context.cpu_op[i] is None:
            return None
        dims, types = context.input_dims[i], context.input_types[i]
        return (context.cpu_op[i], dims, types, context.input_strides[i], context.concrete_inputs[i], pos[i], size[i])

    # launches that ran (eager work in the capture trace, e.g. warm-up runs) name their kernel;
    # an op call seen both eagerly and captured (same op, shapes, position) names its twin
    kernels = np.flatnonzero(gpu.kind == "kernel")
    ran_by_corr = dict(zip(gpu.correlation[kernels].tolist(), kernels.tolist(), strict=True))
    ran = np.array([ran_by_corr.get(c, -1) if c >= 0 else -1 for c in host.correlation[launches].tolist()])
    ran_rows = ran[ran >= 0]
    ran_kernel = dict(
        zip(
            ran_rows.tolist(),
            zip(as_list(gpu.name, ran_rows), as_list(gpu.grid, ran_rows), as_list(gpu.block, ran_rows), strict=True),
            strict=True,
        )
    )
    seen = {}
    twins: dict[tuple[Any, ...], tuple[str | None, str | None, str | None] | None] = {}
    for i in np.flatnonzero(ran >= 0).tolist():
        key = op_signature(i)
        if key is not None:
            name, grid, block = ran_kernel[int(ran[i])]
            value = (canonical_kernel_name(str(name)), grid, block)
            twins[key] = value if seen.setdefault(key, value) == value else None

    def evidence(i: int) -> tuple[str | None, str | None, str | None]:
        row = int(launches[i])
        if host.launch_kernel[row] >= 0:
            return canonical_kernel_name(host.launch_kernels[host.launch_kernel[row]]), None, None
        if ran[i] >= 0:
            name, grid, block = ran_kernel[int(ran[i])]
            return canonical_kernel_name(str(name)), grid, block
        key = op_signature(i)
        twin = twins.get(key) if key is not None else None
        if twin is not None:
            return twin
        op = context.cpu_op[i]
        if op is not None and size[i] == 1 and _INDUCTOR_KERNEL.match(op):
            return canonical_kernel_name(op), None, None
        return None, None, None

    def grid_hint(i: int) -> str | None:
        op = context.cpu_op[i]
        if op is None or size[i] != 1 or not _INDUCTOR_KERNEL.match(op):
            return None
        return inductor_grid(op, _recorded_args(host, int(context.cpu_op_idx[i])))

    thread, ts = host.thread[launches], host.ts[launches]  # launches sorted by (thread, ts)
    labels = _enclosing_annotations(host, nest, [begin for begin, _ in ranges])
    for (begin, end), label in zip(ranges, labels, strict=True):
        lo, hi = (
            np.searchsorted(thread, host.thread[begin], side="left"),
            np.searchsorted(thread, host.thread[begin], side="right"),
        )
        # the thread's launches from the capture's begin call's end to its end call's start
        first = lo + np.searchsorted(ts[lo:hi], host.end[begin], side="left")
        inside = np.arange(first, lo + np.searchsorted(ts[lo:hi], host.ts[end], side="right"))
        if len(inside) == 0:
            continue
        name, grid, block = (list(column) for column in zip(*(evidence(i) for i in inside.tolist()), strict=True))
        sub = LaunchContext(
            **{
                key: value[inside] if isinstance(value, np.ndarray) else [value[i] for i in inside.tolist()]
                for key, value in vars(context).items()
            }
        )
        rows = launches[inside]
        graphs.append(
            CapturedGraph(
                source=source,
                number=len(graphs) + 1,
                label=label,
                kind=kind_of_name[host.name_code[rows]],
                name=name,
                grid=grid,
                block=block,
                grid_hint=[grid_hint(i) for i in inside.tolist()],
                correlation=host.correlation[rows].copy(),
                op_call=sub.cpu_op_idx.copy(),
                context=sub,
                given=given,
            )
        )
    return graphs


def _recorded_args(host: HostTable, op: int) -> dict[str, Any]:
    """The `args` of a CPU op that `inductor_grid` reads: `kernel_kwargs`, `Concrete Inputs`."""
    params, shape = int(host.params[op]), int(host.shape[op])
    concrete = host.shapes[shape][3] if shape >= 0 else None
    return {
        "kernel_kwargs": host.param_sets[params].kernel_kwargs if params >= 0 else None,
        "Concrete Inputs": json.loads(concrete) if concrete is not None else None,
    }


def _enclosing_annotations(host: Any, nest: HostNesting, rows: list[int]) -> list[str | None]:
    """Per host event of `rows`, the innermost `record_function` range (not a profiler step)
    around it, by time on its thread (annotations need not nest properly with Python frames):
    of those starting by its start and ending by its end, the latest to start, the first
    recorded among equals. The annotations are sorted once and each event looks back from the
    last to start by its start (a pass over every host event per capture: 50,000 captures took 70 s)."""
    found: list[str | None] = [None] * len(rows)
    marks = np.flatnonzero((host.family == ANNOTATION) & ~nest.is_profiler_step[host.name_code])
    if not len(marks) or not rows:
        return found
    # by thread, start, then rows descending: looking back, the first fit has the latest start
    # and, among equal starts, the lowest row
    marks = marks[np.lexsort((-marks, host.ts[marks], host.thread[marks]))]
    thread, start, end = host.thread[marks], host.ts[marks], host.end[marks]
    for k, row in enumerate(rows):
        lo, hi = (np.searchsorted(thread, host.thread[row], side=side) for side in ("left", "right"))
        at = lo + np.searchsorted(start[lo:hi], host.ts[row], side="right")
        for m in range(at - 1, lo - 1, -1):
            if end[m] >= host.end[row]:
                found[k] = host.names[host.name_code[marks[m]]]
                break
    return found


def read_capture(path: str | Path, limit: int = MAX_CAPTURED_GRAPHS) -> CapturedGraphs:
    """The captured graphs of a capture trace (an `AtlasError` names the file if it is unusable)."""
    path = Path(path)
    cols = build_columns(path)[1]
    found = graphs_in_trace(cols, path.name, limit, given=True)
    found.events = len(cols.host) + len(cols.gpu)
    return found


def capture_files(paths: Sequence[str | Path]) -> list[tuple[Path, bool]]:
    """Capture traces, each with whether it was found in a directory: files as given, directories
    (vLLM's and SGLang's `capture_traces/`) as every `*.json`, `*.json.gz` and `*.json.zst` in them."""
    files: list[tuple[Path, bool]] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz", ".json.zst")))
            if not found:
                raise AtlasError(path, "no capture traces (*.json, *.json.gz, *.json.zst) in this directory")
            files.extend((p, True) for p in found)
        else:
            files.append((path, False))
    return files


def read_captures(paths: Sequence[str | Path]) -> tuple[list[CapturedGraph], list[str]]:
    """Captured graphs of several capture traces (or directories of them), and a warning for each
    trace without one. A file of a directory that holds no host or GPU event is no trace (TraceLens
    writes its `execution_details.json` beside the capture traces): left out, named in one line."""
    graphs: list[CapturedGraph] = []
    warnings: list[str] = []
    left_out = 0
    no_trace: list[str] = []
    for path, in_folder in capture_files(paths):
        found = read_capture(path, MAX_CAPTURED_GRAPHS - len(graphs))
        left_out += found.left_out
        if in_folder and not found.events:
            no_trace.append(path.name)
            continue
        if not found and not found.left_out:
            warnings.append(
                f"{path}: no stream capture in this trace (no *StreamBeginCapture/*StreamEndCapture pair "
                "with launches between them); it gives no graph any shapes"
            )
        graphs.extend(found)
    if left_out:
        warnings.append(left_out_line(left_out))
    if no_trace:
        shown = ", ".join(no_trace[:5]) + (f" and {len(no_trace) - 5:,} more" if len(no_trace) > 5 else "")
        warnings.append(f"capture folders: {shown} left out: no profiler events in them (not a trace)")
    return graphs, warnings


# --- alignment ------------------------------------------------------------------------------


class _Codes(dict):
    """String → small int; None → -1."""

    def of(self, text: str | None) -> int:
        return -1 if text is None else self.setdefault(text, len(self))


@dataclass
class _Items:
    """A sequence to align: per item kind, name, grid, block codes (-1 = unknown)."""

    kind: list[int]
    name: list[int]
    grid: list[int]
    block: list[int]

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class _Captured:
    items: _Items
    key: bytes  # identical sequences (repeated pieces) are aligned once
    kind_counts: Counter
    named_counts: Counter  # kernel names the capture records
    unnamed: int
    all_kernels_named: bool
    content: list[int]  # per launch: code of (launcher, op, shapes), for comparing fits
    grid_hint: list[int]  # per launch: code of the grid an Inductor launch implies, -1 none

    def fewest_edits(self, kinds: Counter, names: Counter) -> int:
        """A lower bound of the edits to align a replayed sequence with these counts: every
        kind-count difference costs one; a captured name the replay lacks must be deleted, and
        a replayed name the capture lacks must be inserted unless an unnamed launch takes it."""
        kind_gap = sum(abs(kinds[k] - self.kind_counts[k]) for k in kinds.keys() | self.kind_counts.keys())
        surplus = sum(max(0, count - names[name]) for name, count in self.named_counts.items())
        missing = sum(max(0, count - self.named_counts[name]) for name, count in names.items())
        return max(kind_gap, surplus + max(0, missing - self.unnamed))


@dataclass
class _Fit:
    graph: int
    edits: int
    pairs: list[tuple[int, int]]  # (replayed item, captured launch), trusted pairs only
    content: tuple[int, ...]  # per replayed item: content code of its launch, -1 unpaired


def _same(r: _Items, c: _Items, i: int, j: int) -> bool:
    if r.kind[i] != c.kind[j]:
        return False
    if c.name[j] >= 0 and c.name[j] != r.name[i]:
        return False
    if c.grid[j] >= 0 and r.grid[i] >= 0 and c.grid[j] != r.grid[i]:
        return False
    return not (c.block[j] >= 0 and r.block[i] >= 0 and c.block[j] != r.block[i])


def _diff(r: _Items, c: _Items, max_edits: int) -> tuple[int, list[tuple[int, int]]] | None:
    """Myers' O((n+m)·D) shortest edit script between replayed items `r` and captured launches
    `c`: (edits, matched pairs in order), or None when more than `max_edits` (at most
    MAX_ALIGN_EDITS) are needed. Each step keeps only the diagonals it can reach (2d + 3 of
    them, as 32-bit numbers) for the way back: a copy of the whole working array per step held
    1.9 GB for 100k kernels aligned in the other order (10,000 edits)."""
    max_edits = min(max_edits, MAX_ALIGN_EDITS)
    n, m = len(r), len(c)
    offset = max_edits + 1
    v = [0] * (2 * max_edits + 3)
    history: list[array] = []
    for d in range(max_edits + 1):
        history.append(array("i", v[offset - d - 1 : offset + d + 2]))  # diagonals -d-1 … d+1
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[k - 1 + offset] < v[k + 1 + offset]):
                x = v[k + 1 + offset]
            else:
                x = v[k - 1 + offset] + 1
            y = x - k
            while x < n and y < m and _same(r, c, x, y):
                x, y = x + 1, y + 1
            v[k + offset] = x
            if x >= n and y >= m:
                return d, _backtrack(history, n, m, d)
    return None


def _backtrack(history: list[array], x: int, y: int, edits: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    for d in range(edits, 0, -1):
        v, base = history[d], d + 1  # diagonal k at v[k + base]
        k = x - y
        prev_k = k + 1 if k == -d or (k != d and v[k - 1 + base] < v[k + 1 + base]) else k - 1
        prev_x = v[prev_k + base]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    while x > 0 and y > 0:
        x, y = x - 1, y - 1
        pairs.append((x, y))
    pairs.reverse()
    return pairs


def _trusted(pairs: list[tuple[int, int]], r: _Items, c: _Items) -> list[tuple[int, int]]:
    """Name-verified pairs, plus unnamed pairs that position alone decides: between two verified
    pairs (or the ends) both sides hold equally many items of that kind, all of them paired."""
    kept: list[tuple[int, int]] = []
    start, inner = (-1, -1), []

    def keep_decided(end: tuple[int, int]) -> None:
        if not inner:
            return
        replayed = Counter(r.kind[i] for i in range(start[0] + 1, end[0]))
        captured = Counter(c.kind[j] for j in range(start[1] + 1, end[1]))
        paired = Counter(c.kind[j] for _, j in inner)
        kept.extend(p for p in inner if replayed[c.kind[p[1]]] == captured[c.kind[p[1]]] == paired[c.kind[p[1]]])

    for pair in pairs:
        if c.name[pair[1]] < 0:
            inner.append(pair)
            continue
        keep_decided(pair)
        kept.append(pair)
        start, inner = pair, []
    keep_decided((len(r), len(c)))
    return sorted(kept)


def _merge_streams(r: _Items, stream: list[int], c: _Items, max_edits: int) -> tuple[int, list[tuple[int, int]]] | None:
    """Align captured launches (program order) with replayed kernels on several streams (GPU
    order per stream): each launch goes to the stream whose next kernel it names; ties go to
    the stream that agrees longest ahead, then to the stream met first. Only name-verified pairs
    are returned — and none of a name once two streams agreed equally long with one of its
    launches: which of them took it is a guess, and so is where that name's later launches go.

    The streams that may take a launch are looked up by its (kind, name), among the streams'
    next kernels (and, to skip a dropped kernel, among the streams holding such a kernel at all),
    in the order the streams were met, at most MERGE_CANDIDATES of them: one graph of 10,000
    kernels of one name on 10,000 streams took 71 s when every launch looked at every stream."""
    queues: dict[int, list[int]] = {}
    for i, s in enumerate(stream):
        queues.setdefault(s, []).append(i)
    streams = list(queues)  # by ordinal: the order streams were met in
    head = [0] * len(streams)
    pairs: list[tuple[int, int]] = []
    edits = 0
    guessed: set[int] = set()  # names whose launches could go to either of two streams

    def keys(i: int) -> tuple[tuple[int, int], ...]:
        """A kernel's (kind, name), and (kind, -1): a launch of no name may take any of its kind."""
        return ((r.kind[i], r.name[i]), (r.kind[i], -1)) if r.name[i] >= 0 else ((r.kind[i], -1),)

    # per key, the ordinals (ascending) of the streams whose next kernel has it / holding one
    at_head: dict[tuple[int, int], list[int]] = {}
    holding: dict[tuple[int, int], list[int]] = {}
    for o, s in enumerate(streams):
        for k in keys(queues[s][0]):
            at_head.setdefault(k, []).append(o)
        for k in {k for i in queues[s] for k in keys(i)}:
            holding.setdefault(k, []).append(o)

    def advance(o: int, steps: int) -> None:
        q = queues[streams[o]]
        for k in keys(q[head[o]]):
            ordinals = at_head[k]
            del ordinals[bisect.bisect_left(ordinals, o)]
        head[o] += steps
        if head[o] < len(q):
            for k in keys(q[head[o]]):
                bisect.insort(at_head.setdefault(k, []), o)

    def matching(ordinals: list[int], j: int, ahead: range) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for o in ordinals[:MERGE_CANDIDATES]:
            q = queues[streams[o]]
            found += [(o, a) for a in ahead if head[o] + a < len(q) and _same(r, c, q[head[o] + a], j)]
        return found

    def run(o: int, start: int, j: int) -> int:
        q, length = queues[streams[o]], 0
        while start + length < len(q) and j + length < len(c) and _same(r, c, q[start + length], j + length):
            length += 1
        return length

    for j in range(len(c)):
        wanted = (c.kind[j], c.name[j])
        options = matching(at_head.get(wanted, []), j, range(1))
        if not options:
            options = matching(holding.get(wanted, []), j, range(1, LOOKAHEAD + 1))[:1]
        if not options:
            edits += 1
        else:
            # the longest agreement ahead, the fewest kernels skipped, the stream met first
            o, ahead = options[0]
            if len(options) > 1:
                scores = [(run(x[0], head[x[0]] + x[1], j), -x[1]) for x in options]
                best = max(scores)
                o, ahead = options[scores.index(best)]
                if scores.count(best) > 1:
                    guessed.add(c.name[j])
            edits += ahead
            if c.name[j] >= 0 and c.name[j] not in guessed:
                pairs.append((queues[streams[o]][head[o] + ahead], j))
            advance(o, ahead + 1)
        if edits > max_edits:
            return None
    edits += sum(len(queues[s]) - head[o] for o, s in enumerate(streams))
    return (edits, sorted(pairs)) if edits <= max_edits else None


def _max_edits(n: int, m: int) -> int:
    return max(MIN_EDITS, math.ceil(EDIT_SHARE * max(n, m)))


class _Sequences:
    """The captured graphs by the sequence they launch (`key`), each group in graph order: a
    replayed sequence is aligned with each sequence once, whatever the graphs that share it.

    A sequence whose launches all name their kernels pairs only with replayed items of those
    names (`_same`), so a replayed sequence on one stream is aligned only with the sequences that
    share a kernel name with it or have an unnamed launch (`may_pair`); the others would cost
    all their edits and place nothing (`_fits`: WHY_NO_FIT). 1,000 replayed one-kernel graphs were
    each aligned with all 35,000 distinct sequences of 50,000 named one-launch graphs."""

    def __init__(self, captured: list[_Captured]):
        self.groups: dict[bytes, list[int]] = {}
        for g, cap in enumerate(captured):
            self.groups.setdefault(cap.key, []).append(g)
        self.position = {key: p for p, key in enumerate(self.groups)}
        self.unnamed: list[bytes] = []  # a launch names no kernel (or none at all): any replay may pair
        self.by_name: dict[int, list[bytes]] = {}
        for key, members in self.groups.items():
            names = captured[members[0]].items.name
            if not names or min(names) < 0:
                self.unnamed.append(key)
                continue
            for name in set(names):
                self.by_name.setdefault(name, []).append(key)

    def may_pair(self, names: Iterable[int]) -> list[bytes]:
        """The sequences a replayed sequence of these kernel names may pair items with, in order."""
        keys = set(self.unnamed)
        for name in names:
            keys.update(self.by_name.get(name, ()))
        return sorted(keys, key=self.position.__getitem__)


Aligned = tuple[bytes, int, tuple[tuple[int, int], ...]]  # a captured sequence, its edits, its trusted pairs


def _fits(
    r: _Items,
    stream: list[int],
    captured: list[_Captured],
    sequences: _Sequences,
    decided: dict[Any, _Best] | None = None,
) -> _Choice:
    """The best-fitting captured graphs for one replayed sequence (several only when they would
    give identical shapes), or no fit and why. `sequences`: the captured sequences — a replayed
    sequence is bounded and aligned once per captured sequence it may pair with, whatever the
    graphs that share it. `decided`: the graphs ranked best, kept by the alignments they come from
    (`_Best`), so that replayed sequences aligned alike share one ranking — 1,000 replayed
    sequences of distinct grids met the same 50,000 one-launch graphs, a ranking of all 50,000
    each time."""
    n = len(r)
    kinds = Counter(r.kind)
    names = Counter(r.name)
    several_streams = len(set(stream)) > 1
    decided = {} if decided is None else decided
    aligned: list[Aligned] = []
    unplaced = streams_unnamed = False
    tried = list(sequences.groups) if several_streams else sequences.may_pair(names)
    for key in tried:
        cap = captured[sequences.groups[key][0]]
        limit = _max_edits(n, len(cap.items))
        if cap.fewest_edits(kinds, names) > limit:
            continue
        if several_streams and not cap.all_kernels_named:
            streams_unnamed = True
            continue
        if several_streams:
            found = _merge_streams(r, stream, cap.items, limit)
            pairs = found[1] if found else []
        else:
            found = _diff(r, cap.items, limit)
            pairs = _trusted(found[1], r, cap.items) if found else []
        if found is None:
            continue
        if not pairs:
            # within the bound and nothing placed: for lack of names where the capture records
            # none; where it names every launch, because none is a replayed kernel (WHY_NO_FIT, as
            # for the named sequences sharing no name, never aligned) — a ROCm capture of other
            # kernels, as many as replayed, had read "kernel count differs … no kernel names"
            unplaced |= not cap.all_kernels_named
            continue
        aligned.append((key, found[0], tuple(pairs)))
    if not aligned:
        # graph by graph, a sequence none of whose launches could be placed said so last; graphs
        # on several streams that name no kernels said so only if nothing had been said before
        return _Choice([], WHY_UNPLACED if unplaced else (WHY_STREAMS if streams_unnamed else WHY_NO_FIT))
    alignments = (n, tuple(aligned))
    if alignments not in decided:
        decided[alignments] = _Best(n, aligned, captured, sequences)
    return decided[alignments].choice(r)


class _Choice:
    """What a replayed sequence matches: equally good fits that give identical shapes, in graph
    order (repeated pieces of a piecewise graph), or none and `why`."""

    def __init__(self, fits: list[_Fit], why: str = ""):
        self.fits = fits
        self.why = why
        self._numbers: dict[str, list[tuple[int, int]]] | None = None  # source → (number, position), sorted

    def next_in_order(self, graphs: Sequence[CapturedGraph], last_matched: dict[str, int]) -> _Fit:
        """The first fit after the last graph matched from the same capture, wrapping around (of
        equal numbers, the first fit): the fits' numbers are sorted once per capture file, and
        each replay looks its capture's next one up (50,000 equal fits were looked at one by one
        for every replayed graph)."""
        if len(self.fits) == 1:
            return self.fits[0]
        if self._numbers is None:
            numbers: dict[str, list[tuple[int, int]]] = {}
            for position, fit in enumerate(self.fits):
                graph = graphs[fit.graph]
                numbers.setdefault(graph.source, []).append((graph.number, position))
            self._numbers = {source: sorted(entries) for source, entries in numbers.items()}
        candidates = []
        for source, entries in self._numbers.items():
            after = bisect.bisect_right(entries, (last_matched.get(source, 0), math.inf))  # first number past it
            wrapped = after == len(entries)
            number, position = entries[0 if wrapped else after]
            candidates.append((wrapped, number, position))
        return self.fits[min(candidates)[2]]


class _Best:
    """The graphs of the best alignments — the fewest edits, then the most pairs — each as a fit,
    in graph order: what `_fits` chooses among. When they would give different shapes, the grids
    Inductor launches imply settle it (`choice`): only the replayed grids that some fit has a
    hint for matter, and fits with the same hinted pairs score alike, so the outcome is kept per
    those grids and scored per distinct hints, not per graph."""

    def __init__(self, n: int, aligned: list[Aligned], captured: list[_Captured], sequences: _Sequences):
        ranked = min((edits, -len(pairs)) for _, edits, pairs in aligned)
        fits = []
        for key, edits, pairs in aligned:
            if (edits, -len(pairs)) != ranked:
                continue
            shared = list(pairs)  # one list for every graph of the sequence: never changed
            for g in sequences.groups[key]:
                content = [-1] * n
                for i, j in pairs:
                    content[i] = captured[g].content[j]
                fits.append(_Fit(g, edits, shared, tuple(content)))
        fits.sort(key=lambda fit: fit.graph)
        self.fits = fits
        self.settled = _Choice(fits) if len({fit.content for fit in fits}) == 1 else None
        # hinted pairs (replayed item, implied grid) → how many fits have them, and the first
        self.hints: dict[tuple[tuple[int, int], ...], tuple[int, _Fit]] = {}
        for fit in fits if self.settled is None else ():
            grid_hint = captured[fit.graph].grid_hint
            hints = tuple((i, grid_hint[j]) for i, j in fit.pairs if grid_hint[j] >= 0)
            count, first = self.hints.get(hints, (0, fit))
            self.hints[hints] = (count + 1, first)
        if self.settled is not None:  # one content: its hints still have to hold (below)
            grid_hint = captured[fits[0].graph].grid_hint
            self.hints[tuple((i, grid_hint[j]) for i, j in fits[0].pairs if grid_hint[j] >= 0)] = (1, fits[0])
        self.hinted = sorted({i for hints in self.hints for i, _ in hints})
        self.by_grids: dict[tuple[int, ...], _Choice] = {}

    def choice(self, r: _Items) -> _Choice:
        grids = tuple(r.grid[i] for i in self.hinted)
        if grids not in self.by_grids:
            self.by_grids[grids] = self._by_grid_hints(r) if self.settled is None else self._unless_grids_differ(r)
        return self.by_grids[grids]

    def _unless_grids_differ(self, r: _Items) -> _Choice:
        """The settled fit, unless its Inductor launches imply other grids than the replayed ones:
        fewer than 90% of its hinted pairs agree (a capture of another batch size, where it is
        the only capture offered)."""
        ((hints, _),) = self.hints.items()
        known = [(i, grid) for i, grid in hints if r.grid[i] >= 0]
        if known and sum(grid == r.grid[i] for i, grid in known) < 0.9 * len(known):
            return _Choice([], WHY_GRIDS)
        assert self.settled is not None
        return self.settled

    def _by_grid_hints(self, r: _Items) -> _Choice:
        """Equally good fits that would give different shapes (two batch sizes, no kernel names):
        the one whose Inductor launches imply the replayed grids — at least 90% of its hinted
        pairs agree and no other fit has as many agreeing — else none (ambiguous)."""
        scores = []  # (agreeing, hinted, fits alike, first of them), per distinct hints
        for hints, (count, first) in self.hints.items():
            known = [(i, grid) for i, grid in hints if r.grid[i] >= 0]
            scores.append((sum(grid == r.grid[i] for i, grid in known), len(known), count, first))
        agree = max(score[0] for score in scores)
        alike = [score for score in scores if score[0] == agree]
        _, hinted, count, fit = alike[0]
        if hinted and agree >= 0.9 * hinted and len(alike) == 1 and count == 1:
            return _Choice([fit])
        return _Choice([], WHY_AMBIGUOUS)


@dataclass
class GraphFacts:
    """What `attach_captures` did, for summary.json and the terminal."""

    captured_graphs: int = 0  # captured graphs offered (`--capture`)
    in_trace_graphs: int = 0  # captured graphs of the replay trace itself
    launches: int = 0  # graph launches in the replay trace
    matched: int = 0
    partly_matched: int = 0  # launches of which some activities, not all, were matched by node id
    unmatched: dict[str, int] = field(default_factory=dict)  # why → launches (partly matched ones too)
    matched_to: dict[str, int] = field(default_factory=dict)  # captured graph title → launches
    # replayed activities of the launches aligned that got no captured launch, as often as
    # replayed (each with why as its link: `LINK_UNMATCHED`, `LINK_NOT_PAIRED`, `LINK_MISORDERED`),
    # and of them those of matched launches paired by an order another pair shows is off
    unpaired: int = 0
    misordered: int = 0
    kernel_time_us: float = 0.0  # of graph-replayed kernels
    with_launcher_us: float = 0.0
    with_shapes_us: float = 0.0

    def measure(self, gpu: GpuTable, linked: LinkedColumns) -> None:
        replayed = linked.graph_launch & (gpu.kind == "kernel")
        launcher = np.asarray(linked.launcher.codes) >= 0
        shapes = np.asarray(linked.input_dims.codes) >= 0
        self.kernel_time_us = float(gpu.dur[replayed].sum())
        self.with_launcher_us = float(gpu.dur[replayed & launcher].sum())
        self.with_shapes_us = float(gpu.dur[replayed & launcher & shapes].sum())

    def include_node_matched(self, gpu: GpuTable, linked: LinkedColumns, exact: np.ndarray) -> None:
        """Count in the graph launches whose kernels an Nsight export matched to their captured
        node by its id (`exact`, rows of `gpu`; kept from the capture alignment): they were left
        out of `launches`, `matched` and the graph-replayed kernel time (0 of 1 graphs matched,
        0 % with launcher, where 4 of 5 kernels had theirs by node id). A launch matched so in
        part (`attach_captures` leaves its other activities unaligned) is `partly_matched`, and
        unmatched for the nodes not traced to a creation — not for what aligning its remnant
        with a whole captured graph said ("kernel count differs")."""
        if not len(exact):
            return
        rows = np.flatnonzero(linked.graph_launch)
        by_node = np.zeros(len(gpu.ts), dtype=bool)
        by_node[exact] = True
        corr = gpu.correlation[rows]
        node_matched, rest = np.unique(corr[by_node[rows]]), np.unique(corr[~by_node[rows]])
        whole = np.setdiff1d(node_matched, rest)
        self.launches = len(np.unique(corr))
        self.matched += len(whole)
        if len(whole):
            self.matched_to["by graph node id"] = self.matched_to.get("by graph node id", 0) + len(whole)
        left = rows[~by_node[rows] & np.isin(corr, node_matched)]  # the rest of partly matched launches
        if len(left):
            left = left[np.argsort(gpu.correlation[left], kind="stable")]
            nodes = gpu.graph_node_id[left] if gpu.graph_node_id is not None else np.full(len(left), -1)
            starts = np.flatnonzero(np.r_[True, np.diff(gpu.correlation[left]) != 0])
            for launch_nodes in np.split(nodes, starts[1:]):  # one per partly matched launch
                why = _why_partly(launch_nodes)
                self.unmatched[why] = self.unmatched.get(why, 0) + 1
            self.partly_matched += len(starts)
        self.measure(gpu, linked)

    def as_dict(self) -> dict[str, Any]:
        def pct(us: float) -> float:
            return 100.0 * us / self.kernel_time_us if self.kernel_time_us else 0.0

        return {
            "launches": self.launches,
            "matched": self.matched,
            "partly_matched": self.partly_matched,
            "unmatched": self.unmatched,
            "matched_to": self.matched_to,
            "unpaired": self.unpaired,
            "misordered": self.misordered,
            "captured_graphs_offered": self.captured_graphs,
            "captured_graphs_in_trace": self.in_trace_graphs,
            "kernel_time_us": self.kernel_time_us,
            "with_launcher_pct": pct(self.with_launcher_us),
            "with_shapes_pct": pct(self.with_shapes_us),
        }

    def warning(self) -> str | None:
        """The line to warn with when captures were given (or found in the trace) and some graph
        stays unmatched."""
        if not self.captured_graphs + self.in_trace_graphs:
            return None
        matched, misordered = (
            _matched_text(self.matched, self.launches, self.partly_matched),
            _misordered_text(self.misordered),
        )
        if self.matched == self.launches:
            return f"{matched}, but {misordered}" if misordered else None
        why = "; ".join(f"{count} {reason}" for reason, count in self.unmatched.items())
        return f"{matched}: {why}" + (f"; {misordered}" if misordered else "")


def _misordered_text(count: int) -> str:
    if not count:
        return ""
    activities = counted(count, "replayed activity", "replayed activities")
    return f"{activities} of matched graphs left without a captured launch: {WHY_MISORDERED}"


def _matched_text(matched: int, launches: int, partly: int) -> str:
    partly_text = f" ({partly:,} partly, by graph node id)" if partly else ""
    return f"{matched:,} of {launches:,} graphs matched a captured graph{partly_text}"


def _why_partly(nodes: np.ndarray) -> str:
    """Why the rest of a launch partly matched by graph node id has no captured launch: its
    activities' graph nodes (as replayed: instantiated copies) not traced to a creation in the
    export, the first three named."""
    known = np.unique(nodes[nodes >= 0]).tolist()
    parts = []
    if known:
        shown = ", ".join(map(str, known[:3])) + (f" and {len(known) - 3:,} more" if len(known) > 3 else "")
        parts.append(f"graph node{'s' if len(known) > 1 else ''} {shown}, not traced to a creation in the export")
    if (nodes < 0).any():
        parts.append(counted(int((nodes < 0).sum()), "activity", "activities") + " without a graph node id")
    return "matched by graph node id but for " + " and ".join(parts)


def _replayed_kind(kind: str, name: str) -> int:
    if kind == "kernel" and name.startswith(_ROCCLR_FILL):
        return MEMSET
    if kind == "kernel" and name.startswith(_ROCCLR_COPY):
        return MEMCPY
    return _GPU_KIND.get(kind, KERNEL)


@dataclass(frozen=True)
class _Disagreement:
    """A kernel's name and its paired launcher name different ops (the classifier's conflict)."""

    name_op: str
    launcher_op: str
    other_category: bool


class _PairOps(dict):
    """(kernel name, launcher) → their `_Disagreement`, None where they agree or either says
    nothing of the op (a generic elementwise wrapper, a launcher that runs a whole layer): each
    distinct pair is classified once per ingest, and explained (every rule tried, ~6x slower)
    only where its label says the two disagreed."""

    def of(self, name: str, launcher: str) -> _Disagreement | None:
        key = (name, launcher)
        if key not in self:
            from kernel_atlas.classify.classifier import default_classifier  # loaded by the ingest already

            classifier = default_classifier()
            evidence = classifier.classify(name, launcher).evidence
            said = classifier.explain(name, launcher) if ">launcher" in evidence or ">name" in evidence else None
            if said is None or said.conflict not in ("same-category", "other-category"):
                self[key] = None
            else:
                assert said.name is not None and said.launcher is not None  # a conflict has both
                self[key] = _Disagreement(said.name.op, said.launcher.op, said.conflict == "other-category")
        return self[key]


def _left_out(
    pairs: Sequence[tuple[int, int]], kernels: Sequence[str], graph: CapturedGraph, ops: _PairOps
) -> tuple[frozenset[int], str | None]:
    """Of a fit's pairs (positions in `pairs`; `kernels`: each pair's replayed name), those placed
    by order alone (their launch names no kernel) that are left out, and why the whole fit is
    refused (None where it is not). A name-verified pair is the kernel's own launch, whatever the
    labels say; only pairs by order are judged:

    * most of them disagree across categories (a GEMM kernel ← aten::mul): a capture of other
      ops with as many launches — refused (`WHY_CONTRADICTED`);
    * two of them cross (a kernel named after the op of another launch, whose own kernel is named
      after other work): the order they were placed by is not the replayed one, so every pair
      placed by it — between the same two name-verified pairs — is left out; a fit with no other
      pair is refused (`WHY_MISORDERED`)."""
    by_order = [p for p, (_, j) in enumerate(pairs) if graph.name[j] is None]
    if not by_order:
        return frozenset(), None
    # the name-verified pairs up to each pair: the stretch of order it was placed by
    stretch = np.cumsum([graph.name[j] is not None for _, j in pairs])
    launcher = graph.context.launcher
    said = {
        p: ops.of(kernels[p], str(launcher[pairs[p][1]]))
        for p in by_order
        if graph.kind[pairs[p][1]] == KERNEL and launcher[pairs[p][1]]
    }
    if said and 2 * sum(d is not None and d.other_category for d in said.values()) > len(said):
        return frozenset(by_order), WHY_CONTRADICTED
    disagreeing = [(int(stretch[p]), d) for p, d in said.items() if d is not None]
    launcher_ops = {(s, d.launcher_op) for s, d in disagreeing}
    crossed = {s for s, d in disagreeing if (s, d.name_op) in launcher_ops}
    left_out = frozenset(p for p in by_order if stretch[p] in crossed)
    return left_out, WHY_MISORDERED if len(left_out) == len(pairs) else None


def attach_captures(gpu: GpuTable, linked: LinkedColumns, graphs: Sequence[CapturedGraph]) -> GraphFacts:
    """Give graph-replayed kernels the launcher, shapes and stack of their captured launch
    (in place on `linked`); each replayed op call gets a new `cpu_op_id`.

    Two kinds of launch are not aligned: an Nsight whole-graph replay (one row `<CUDA graph G
    replay>` for all the graph ran: no captured launch is its — one of a one-launch graph had
    been given that launch's op, shapes and category), counted unmatched as such; and the rest of
    a launch partly matched by graph node id (`GraphFacts.include_node_matched` counts it: a
    remnant aligned with the whole captured graph fails, or fits a smaller graph by chance)."""
    given = sum(graph.given for graph in graphs)
    facts = GraphFacts(captured_graphs=given, in_trace_graphs=len(graphs) - given)
    rows = np.flatnonzero(linked.graph_launch)
    if len(rows) == 0:
        return facts
    whole = _whole_replays(gpu, rows)
    node = np.flatnonzero(np.asarray(linked.link.categories) == LINK_GRAPH_NODE)
    by_node = np.isin(np.asarray(linked.link.codes), node)
    node_launches = np.unique(gpu.correlation[by_node])
    partly = np.isin(gpu.correlation[rows], node_launches[node_launches >= 0])
    aligned = rows[~whole & ~partly]
    if len(aligned):
        _attach(gpu, linked, graphs, aligned, facts)
    whole_launches = len(np.unique(gpu.correlation[rows[whole]]))
    if whole_launches:
        facts.launches += whole_launches
        facts.unmatched[WHY_WHOLE] = whole_launches
    facts.measure(gpu, linked)
    return facts


def _whole_replays(gpu: GpuTable, rows: np.ndarray) -> np.ndarray:
    """Per row of `rows`, whether it is an Nsight whole-graph replay: a kernel named
    `<CUDA graph G replay>` of no graph node."""
    named = np.array([bool(WHOLE_GRAPH_NAME.match(str(c))) for c in gpu.name.categories] + [False], dtype=bool)
    whole = named[np.asarray(gpu.name.codes)[rows]] & np.asarray(gpu.kind[rows] == "kernel")  # code -1: the False
    if gpu.graph_node_id is not None:
        whole &= gpu.graph_node_id[rows] < 0
    return whole


def _attach(
    gpu: GpuTable, linked: LinkedColumns, graphs: Sequence[CapturedGraph], rows: np.ndarray, facts: GraphFacts
) -> None:
    order = rows[np.lexsort((gpu.ts[rows], gpu.correlation[rows]))]
    corr = gpu.correlation[order]
    starts = np.flatnonzero(np.r_[True, corr[1:] != corr[:-1]])
    groups = np.split(order, starts[1:])
    groups.sort(key=lambda g: float(gpu.ts[g].min()))
    facts.launches = len(groups)
    if not graphs:
        facts.unmatched = {WHY_NO_CAPTURE: len(groups)}
        return

    names, shapes, contents = _Codes(), _Codes(), _Codes()
    captured = []
    for graph in graphs:
        ctx = graph.context
        items = _Items(
            kind=graph.kind.tolist(),
            name=[names.of(x) for x in graph.name],
            grid=[shapes.of(x) for x in graph.grid],
            block=[shapes.of(x) for x in graph.block],
        )
        content = [
            contents.of(repr(key))
            for key in zip(
                ctx.launcher,
                ctx.cpu_op,
                ctx.input_dims,
                ctx.input_types,
                ctx.input_strides,
                ctx.concrete_inputs,
                strict=True,
            )
        ]
        kernels = [n for k, n in zip(items.kind, items.name, strict=True) if k == KERNEL]
        captured.append(
            _Captured(
                items=items,
                key=np.array([items.kind, items.name, items.grid, items.block], dtype=np.int64).tobytes(),
                kind_counts=Counter(items.kind),
                named_counts=Counter(n for n in items.name if n >= 0),
                unnamed=sum(n < 0 for n in items.name),
                all_kernels_named=all(n >= 0 for n in kernels),
                content=content,
                grid_hint=[shapes.of(x) for x in graph.grid_hint],
            )
        )

    replayed = {
        column: dict(zip(rows.tolist(), as_list(getattr(gpu, column), rows), strict=True))
        for column in ("kind", "name", "grid", "block")
    }
    kind_of_row = {r: _replayed_kind(str(k), str(replayed["name"][r])) for r, k in replayed["kind"].items()}
    results: dict[bytes, _Choice] = {}
    judged: dict[tuple[bytes, int], tuple[frozenset[int], str | None]] = {}
    ops = _PairOps()
    sequences, decided = _Sequences(captured), {}
    last_matched: dict[str, int] = {}
    next_op_id = int(linked.cpu_op_id.max(initial=-1)) + 1
    attached: list[int] = []  # rows given a captured launch, and what they get
    texts: dict[str, list[str | None]] = {column: [] for column in ATTACHED}
    unpaired: list[int] = []  # rows of launches aligned but given none, and why (their link)
    why_unpaired: list[str] = []
    for group in groups:
        members = group.tolist()
        r = _Items(
            kind=[kind_of_row[i] for i in members],
            name=[names.of(canonical_kernel_name(str(replayed["name"][i]))) for i in members],
            grid=[shapes.of(replayed["grid"][i]) for i in members],
            block=[shapes.of(replayed["block"][i]) for i in members],
        )
        stream = gpu.stream[group].tolist()
        key = np.array([r.kind, r.name, r.grid, r.block, stream], dtype=np.int64).tobytes()
        if key not in results:
            results[key] = _fits(r, stream, captured, sequences, decided)
        choice = results[key]
        why = choice.why
        if choice.fits:
            fit = choice.next_in_order(graphs, last_matched)
            graph = graphs[fit.graph]
            if (key, fit.graph) not in judged:
                names_of = [str(replayed["name"][members[i]]) for i, _ in fit.pairs]
                judged[key, fit.graph] = _left_out(fit.pairs, names_of, graph, ops)
            left_out, refused = judged[key, fit.graph]
            why = refused or why
        if why:
            facts.unmatched[why] = facts.unmatched.get(why, 0) + 1
            unpaired += members
            why_unpaired += [LINK_UNMATCHED.format(why=why)] * len(members)
            continue
        last_matched[graph.source] = graph.number
        facts.matched += 1
        facts.matched_to[graph.title] = facts.matched_to.get(graph.title, 0) + 1
        facts.misordered += len(left_out)
        op_ids: dict[int, int] = {}
        ctx = graph.context
        paired = np.zeros(len(members), dtype=bool)
        for p, (i, j) in enumerate(fit.pairs):
            row = members[i]
            paired[i] = True
            if p in left_out:
                unpaired.append(row)
                why_unpaired.append(LINK_MISORDERED)
                continue
            attached.append(row)
            for column in ATTACHED:
                texts[column].append(getattr(ctx, column)[j])
            linked.capture_correlation[row] = graph.correlation[j]
            op = int(graph.op_call[j])
            if op >= 0:
                if op not in op_ids:
                    op_ids[op] = next_op_id
                    next_op_id += 1
                linked.cpu_op_id[row] = op_ids[op]
        # the launch's activities no captured launch pairs with: not in the graph, or not placeable
        rest = [members[i] for i in np.flatnonzero(~paired).tolist()]
        unpaired += rest
        why_unpaired += [LINK_NOT_PAIRED] * len(rest)
    facts.unpaired = len(unpaired)
    for column, values in texts.items():
        setattr(linked, column, set_rows(getattr(linked, column), attached, values))
    # a captured launch outside every op gives its kernel no launcher: counted as such, with why
    links = [LINK_GRAPH_CAPTURE if op is not None else UNLINKED_CAPTURED_NO_OP for op in texts["launcher"]]
    linked.link = set_rows(linked.link, attached + unpaired, links + why_unpaired)


def graph_summary_line(graphs: dict[str, Any] | None) -> str | None:
    """One terminal line about a trace's graph replays (from summary.json's `graphs`)."""
    if not graphs or not graphs.get("launches"):
        return None
    launches, matched, partly = graphs["launches"], graphs["matched"], graphs.get("partly_matched", 0)
    offered = graphs.get("captured_graphs_offered", 0) + graphs.get("captured_graphs_in_trace", 0)
    if not offered and not matched and not partly:  # nothing attached anything
        ms = graphs["kernel_time_us"] / 1e3
        if graphs["unmatched"].get(WHY_WHOLE) == launches:  # a capture cannot help: say what can
            return (
                f"graphs: {launches:,} launches replay {ms:.2f} ms as whole graphs, whose kernels, launchers and "
                "shapes are not in the export (profile with nsys --cuda-graph-trace=node)"
            )
        return (
            f"graphs: {launches:,} launches replay {ms:.2f} ms of kernels without "
            "launcher or shapes; pass --capture CAPTURE_TRACE (a profile of the graph capture) to get them"
        )
    line = (
        f"graphs: {_matched_text(matched, launches, partly)}; "
        f"{graphs['with_shapes_pct']:.1f}% of graph-replayed kernel time has launcher and shapes"
    )
    if graphs["unmatched"]:
        line += " (unmatched: " + "; ".join(f"{n} {why}" for why, n in graphs["unmatched"].items()) + ")"
    misordered = _misordered_text(int(graphs.get("misordered") or 0))
    return line + (f"; {misordered}" if misordered else "")
