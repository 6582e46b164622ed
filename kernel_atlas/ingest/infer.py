"""Shapes for kernels launched before the profiling window, borrowed where unambiguous.

A kernel whose launch is not in the trace (issued before the window opened, or its record lost
inside it; `link.NO_LAUNCH_REASONS`) has no launcher and no shapes. When the same kernel — same
name, grid and block — is linked elsewhere in the trace and every linked occurrence has exactly
one signature (launcher, CPU op, `Input Dims`, types, strides, concrete inputs, and its
position among the kernels of its op call), that signature is borrowed (`link = "inferred: same
kernel, grid and block"`, `shapes_inferred = true`). The call stack and module are borrowed too
when they are also unique. Never when ambiguous: several signatures, no recorded shapes, or an
op call whose other kernels are not all there to form it again (a GEMM and its split-K reduce
are one call, costed once). A kernel linked with several signatures takes the one of the linked
occurrences that ran between the same kernels on their stream, when they have exactly one
(`link = "inferred: same kernel, grid, block and neighbouring kernels"`). A kernel without a
grid/block (ROCm records them on the launch, which is missing) is matched on its name when
every linked kernel of that name has one grid and block, and takes them (`_take_geometry`).
Left ambiguous by these, a kernel takes its place in the repeating sequence of its stream: when
the linked kernels of its name on its device and stream repeat one period of signatures (grid,
block and the signature above) at least twice through the whole window, and the kernels before
the window precede them all, the j-th before the first linked one takes the signature j places
before it in that period — only when every kernel of that name before the window agrees with
its place (grid and block where recorded, the kernels before and after it on the stream) (`link
= "inferred: same kernel, its stream's repeating sequence"`: a training loop's step issued its
kernels in the same order before the window opened).

Every text column is handled as its categorical's codes (-1: missing) — a categorical's categories
are distinct, so equal codes are equal texts — and turned back into text only for the kernels that
borrow: a trace's ~200k linked kernels as Python or Arrow strings cost hundreds of MB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.columns import GpuTable, set_rows
from kernel_atlas.ingest.link import NO_LAUNCH_REASONS, UNLINKED_NO_LAUNCH, LinkedColumns, call_positions

LINK_INFERRED = "inferred: same kernel, grid and block"
LINK_BY_NEIGHBOURS = "inferred: same kernel, grid, block and neighbouring kernels"
LINK_BY_PERIOD = "inferred: same kernel, its stream's repeating sequence"
WHY_NO_SOURCE = "no linked kernel with the same name, grid and block"
WHY_SEVERAL = "the same kernel is linked with several shape signatures"
WHY_NO_SHAPES = "the same kernel is linked but without recorded shapes"
WHY_NO_GEOMETRY = "no grid/block recorded, and its name is linked with several or none"
WHY_PARTIAL_CALL = "its op call launches several kernels and the others are not all there"
# in the order summary.json's `not_inferred` lists them
_WHY = (WHY_NO_GEOMETRY, WHY_NO_SOURCE, WHY_NO_SHAPES, WHY_SEVERAL, WHY_PARTIAL_CALL)

_SIGNATURE = ["launcher", "cpu_op", "input_dims", "input_types", "input_strides", "concrete_inputs", "pos", "size"]
_KEY = ["name", "grid", "block"]
_STACK = ["call_stack", "module"]


@dataclass
class InferredFacts:
    kernels: int = 0  # that borrowed, whatever kept their launch out of the trace
    time_us: float = 0.0
    # why the kernels launched before the window that did not borrow did not (a kernel whose launch
    # was lost inside the window, or of a trace that records no launches, is no such kernel)
    not_inferred: dict[str, int] = field(default_factory=dict)

    def as_dict(self, kernel_time_us: float) -> dict[str, Any]:
        return {
            "kernels": self.kernels,
            "time_us": self.time_us,
            "pct_of_kernel_time": 100.0 * self.time_us / kernel_time_us if kernel_time_us else 0.0,
            "not_inferred": self.not_inferred,
        }


def infer_shapes(gpu: GpuTable, linked: LinkedColumns) -> InferredFacts:
    """Borrow launcher and shapes for kernels without a launch (in place on `linked`)."""
    facts = InferredFacts()
    kernel = np.asarray(gpu.kind == "kernel")
    geometry = (np.asarray(gpu.grid.codes) >= 0) & (np.asarray(gpu.block.codes) >= 0)
    launched = np.asarray(linked.launcher.codes) >= 0
    missing = np.flatnonzero(kernel & np.asarray(linked.link.isin(NO_LAUNCH_REASONS)))
    if len(missing) == 0:
        return facts
    # each row's reason to be left without (an index in _WHY), the last one given standing: a
    # reason counts only for kernels launched before the window (`not_inferred`), while those
    # whose launch was lost inside it, or whose trace records no launches, borrow alike
    why = np.full(len(kernel), -1, np.int8)
    targets = missing[geometry[missing]]
    unknown = missing[~geometry[missing]]  # ROCm records grid/block on the launch, absent here
    sources = np.flatnonzero(kernel & launched & geometry)

    def table(rows: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"row": rows, **{key: _codes(getattr(gpu, key), rows) for key in _KEY}})

    found = table(sources)
    pos, size = call_positions(linked.cpu_op_id[sources], gpu.ts[sources])
    for column in [*_SIGNATURE[:6], *_STACK]:
        found[column] = _codes(getattr(linked, column), sources)
    found["pos"], found["size"] = pos, size
    found["has_dims"] = found["input_dims"].to_numpy() >= 0
    grouped = found.groupby(_KEY, sort=False)
    signatures = grouped[_SIGNATURE].nunique().max(axis=1)
    stacks = grouped[_STACK].nunique().max(axis=1)
    first = grouped.first().reindex(signatures.index)
    first = first.assign(
        signatures=signatures,
        unique_stack=stacks == 1,
        has_shapes=grouped["has_dims"].all(),
    ).drop(columns="has_dims")
    prev, nxt = _neighbours(gpu)
    found["prev"], found["next"] = prev[sources], nxt[sources]
    guessed = _geometry_of_name(table(unknown).assign(prev=prev[unknown], next=nxt[unknown]), found)
    why[np.setdiff1d(unknown, guessed["row"].to_numpy(np.int64))] = _WHY.index(WHY_NO_GEOMETRY)
    wanted = pd.concat([table(targets), guessed], ignore_index=True)
    wanted = wanted.merge(first.reset_index(), on=_KEY, how="left", suffixes=("", "_source"))
    no_source = wanted["signatures"].isna()
    several = ~no_source & (wanted["signatures"] > 1)
    no_shapes = ~no_source & ~several & ~wanted["has_shapes"].astype(bool)
    wanted_rows = wanted["row"].to_numpy(np.int64)
    for reason, mask in ((WHY_NO_SOURCE, no_source), (WHY_NO_SHAPES, no_shapes), (WHY_SEVERAL, several)):
        why[wanted_rows[np.asarray(mask, dtype=bool)]] = _WHY.index(reason)
    resolved = _by_neighbours(wanted[several], found, prev, nxt)
    usable = pd.concat([wanted[~(no_source | several | no_shapes)], resolved], ignore_index=True)
    by_neighbours = set(resolved["row"].astype(int).tolist())
    left = np.setdiff1d(missing, usable["row"].to_numpy(np.int64))
    periodic = _by_period(gpu, left, found, usable.columns, prev, nxt)
    if len(periodic):
        usable = pd.concat([usable, periodic], ignore_index=True)
    by_period = set(periodic["row"].astype(int).tolist())
    periodic_source = dict(zip(periodic["row"].astype(int), periodic.get("source", pd.Series()), strict=False))
    usable = usable.drop(columns="source", errors="ignore")
    calls = _form_calls(gpu, usable)
    partial = usable["row"].map(lambda r: r not in calls).to_numpy(bool)
    why[usable["row"].to_numpy(np.int64)[partial]] = _WHY.index(WHY_PARTIAL_CALL)

    next_id = int(linked.cpu_op_id.max(initial=-1)) + 1
    call_ids: dict[int, int] = {}
    borrowed: dict[str, tuple[list[int], list[str | None]]] = {c: ([], []) for c in [*_SIGNATURE[:6], *_STACK]}
    for record in usable.itertuples(index=False):
        row = int(record.row)
        if row not in calls:
            continue
        leader = calls[row]
        if leader not in call_ids:
            call_ids[leader], next_id = next_id, next_id + 1
        for column in [*_SIGNATURE[:6], *(_STACK if record.unique_stack else ())]:
            rows, values = borrowed[column]
            rows.append(row)
            values.append(_text(getattr(linked, column), getattr(record, column)))
        linked.shapes_inferred[row] = True
        linked.cpu_op_id[row] = call_ids[leader]
        facts.kernels += 1
        facts.time_us += float(gpu.dur[row])
    for column, (rows, values) in borrowed.items():
        if rows:
            setattr(linked, column, set_rows(getattr(linked, column), rows, values))
    inferred_rows = borrowed["launcher"][0]
    why[inferred_rows] = -1
    before = missing[np.asarray(linked.link[missing] == UNLINKED_NO_LAUNCH)]  # the link as it was
    counts = np.bincount(why[before][why[before] >= 0], minlength=len(_WHY))
    facts.not_inferred = {reason: int(n) for reason, n in zip(_WHY, counts.tolist(), strict=True) if n}
    placed = [r for r in inferred_rows if r in by_period]
    # the grid and block a kernel without them was matched on are written onto it (docs/costs.md):
    # its name's (`_geometry_of_name`), or, placed by its stream's sequence, its place's (which the
    # signature it borrowed holds) — its occupancy, waves and SM efficiency had counted none. As
    # recorded, in work-items where the name's kernels were launched by a work-item launch: its
    # launch is not in the trace, and `efficiency._grid_blocks` reads it as those kernels'
    usable_rows = usable["row"].to_numpy(np.int64)
    in_sequence = usable[np.isin(usable_rows, placed) & ~geometry[usable_rows]]
    taken = pd.concat([guessed[~guessed["row"].isin(in_sequence["row"])], in_sequence], ignore_index=True)
    _take_geometry(*(taken[c].to_numpy(np.int64) for c in ("row", "grid", "block")), gpu=gpu)
    if placed:
        _borrow_messages(gpu, np.array(placed, np.int64), np.array([periodic_source[r] for r in placed], np.int64))
    if inferred_rows:
        how = [
            LINK_BY_PERIOD if r in by_period else LINK_BY_NEIGHBOURS if r in by_neighbours else LINK_INFERRED
            for r in inferred_rows
        ]
        linked.link = set_rows(linked.link, inferred_rows, how)
    return facts


def _neighbours(gpu: GpuTable) -> tuple[np.ndarray, np.ndarray]:
    """Name codes of the activity before and after each one on its device and stream (-1 none)."""
    codes = np.asarray(gpu.name.codes, dtype=np.int64)
    order = np.lexsort((gpu.ts, gpu.stream, gpu.device))
    same = (gpu.device[order][1:] == gpu.device[order][:-1]) & (gpu.stream[order][1:] == gpu.stream[order][:-1])
    prev, nxt = np.full(len(codes), -1, np.int64), np.full(len(codes), -1, np.int64)
    prev[order[1:][same]] = codes[order[:-1][same]]
    nxt[order[:-1][same]] = codes[order[1:][same]]
    return prev, nxt


def _by_neighbours(several: pd.DataFrame, found: pd.DataFrame, prev: np.ndarray, nxt: np.ndarray) -> pd.DataFrame:
    """Kernels whose name, grid and block are linked with several signatures, resolved where the
    linked occurrences with the same kernel before and after on the stream have exactly one."""
    if several.empty:
        return several
    targets = several[["row", *_KEY]].assign(prev=prev[several["row"]], next=nxt[several["row"]])
    keys = [*_KEY, "prev", "next"]
    # Every target with the same name, grid, block and neighbours meets the same occurrences:
    # they are summarised once per such group, then joined to the targets (joining each target
    # to every occurrence first grew with the square of a trace's graph replays).
    occurrences = found[
        found[keys].merge(targets[keys].drop_duplicates(), on=keys, how="left", indicator=True)["_merge"].to_numpy()
        == "both"
    ]
    if occurrences.empty:
        return several.iloc[:0]
    grouped = occurrences.drop(columns="row").groupby(keys, sort=False)
    unique = grouped[_SIGNATURE].nunique().max(axis=1) == 1
    first = grouped.first()[unique].drop(columns="has_dims")
    first = first.assign(
        signatures=1,
        unique_stack=(grouped[_STACK].nunique().max(axis=1) == 1)[unique],
        has_shapes=grouped["has_dims"].all()[unique],
    )
    first = first[first["has_shapes"]].reset_index()
    resolved = targets[["row", *keys]].merge(first, on=keys, how="inner")
    return resolved.reindex(columns=several.columns)


def smallest_period(sequence: Sequence[object]) -> int | None:
    """The smallest p with sequence[p:] == sequence[:-p] when the sequence holds that period at
    least twice (p ≤ n/2), else None — n minus its longest proper border (the prefix function of
    Knuth–Morris–Pratt), linear in the length: a name with 50,000 kernels on a stream costs
    milliseconds, where trying every p compared lists quadratically."""
    n = len(sequence)
    if n < 2:
        return None
    border = [0] * n
    for i in range(1, n):
        k = border[i - 1]
        while k and sequence[i] != sequence[k]:
            k = border[k - 1]
        border[i] = k + 1 if sequence[i] == sequence[k] else 0
    period = n - border[-1]
    return period if 2 * period <= n else None


def _agrees(gpu: GpuTable, row: int, source: pd.Series, prev: np.ndarray, nxt: np.ndarray) -> bool:
    """Whether what the kernel before the window recorded agrees with the place it is given: its
    grid and block (where recorded) and the kernels before and after it on the stream (where
    there are) equal those of the linked kernel whose place it takes."""
    for column in ("grid", "block"):
        code = int(np.asarray(getattr(gpu, column).codes)[row])
        if code >= 0 and code != int(source[column]):
            return False
    return all(mine < 0 or mine == int(source[side]) for mine, side in ((prev[row], "prev"), (nxt[row], "next")))


def _by_period(
    gpu: GpuTable, rows: np.ndarray, found: pd.DataFrame, columns: pd.Index, prev: np.ndarray, nxt: np.ndarray
) -> pd.DataFrame:
    """Kernels before the window (rows) given the signature of their place in the repeating
    sequence of their name's linked kernels on the same device and stream (see the module)."""
    if len(rows) == 0 or found.empty:
        return pd.DataFrame(columns=columns)
    signature = ["grid", "block", *_SIGNATURE, *_STACK]
    wanted = pd.DataFrame(
        {"row": rows, "name": _codes(gpu.name, rows), "device": gpu.device[rows], "stream": gpu.stream[rows]}
    ).assign(ts=gpu.ts[rows])
    linked = found[found["name"].isin(set(wanted["name"]))]  # only the names wanted
    linked = linked.assign(
        device=gpu.device[linked["row"]], stream=gpu.stream[linked["row"]], ts=gpu.ts[linked["row"]]
    ).sort_values("ts", kind="stable")
    keys = pd.Series(list(zip(*(linked[c].tolist() for c in signature), strict=True)), index=linked.index)
    linked = linked.assign(key=keys)
    streams = dict(list(linked.groupby(["name", "device", "stream"], sort=False)))
    chosen: list[pd.Series] = []
    for group, mine in wanted.groupby(["name", "device", "stream"], sort=False):
        seen = streams.get(group)
        if seen is None or (mine["ts"] >= seen["ts"].iloc[0]).any():
            continue
        period = smallest_period(seen["key"].tolist())
        if period is None:
            continue
        placed = []
        for j, row in enumerate(mine.sort_values("ts", ascending=False)["row"].tolist(), start=1):
            source = seen.iloc[(-j) % period].copy()
            if not _agrees(gpu, row, source, prev, nxt):
                placed = []  # the window's period does not continue before it: place none
                break
            source["source"], source["row"] = source["row"], row
            placed.append(source)
        chosen += [p for p in placed if p["input_dims"] >= 0]
    if not chosen:
        return pd.DataFrame(columns=columns)
    picked = pd.DataFrame(chosen).drop(columns="has_dims").assign(signatures=1, unique_stack=True, has_shapes=True)
    return picked.reindex(columns=[*columns, "source"]).reset_index(drop=True)


_MESSAGE_TEXTS = ("collective", "msg_dtype", "process_group", "process_group_desc", "process_group_ranks")
_MESSAGE_INTS = ("in_nelems", "out_nelems", "group_size")


def _borrow_messages(gpu: GpuTable, rows: np.ndarray, sources: np.ndarray) -> None:
    """A collective kernel placed by its stream's repeating sequence takes the message fields
    (collective, sizes, dtype, group) of the linked kernel whose place it takes (in place)."""
    for name in _MESSAGE_TEXTS:
        column = getattr(gpu, name)
        values = [None if c < 0 else str(column.categories[c]) for c in np.asarray(column.codes)[sources].tolist()]
        setattr(gpu, name, set_rows(column, rows, values))
    for name in _MESSAGE_INTS:
        getattr(gpu, name)[rows] = getattr(gpu, name)[sources]


def _geometry_of_name(unknown: pd.DataFrame, found: pd.DataFrame) -> pd.DataFrame:
    """Kernels without a grid/block take those of their name's linked kernels when all of them
    have one grid and block, else those of the linked occurrences between the same neighbouring
    kernels when they have one (the name then says as much as name, grid and block would)."""
    columns = ["row", *_KEY]
    if unknown.empty or found.empty:
        return unknown[columns].iloc[:0]
    per_name = found.groupby("name", sort=False)[["grid", "block"]]
    single = per_name.nunique().max(axis=1) == 1
    geometry = per_name.first()[single].reset_index()
    known = unknown.drop(columns=["grid", "block"]).merge(geometry, on="name", how="inner")
    rest = unknown[~unknown["row"].isin(known["row"])].drop(columns=["grid", "block"])
    around = rest.merge(found[["name", "prev", "next", "grid", "block"]], on=["name", "prev", "next"], how="inner")
    by_row = around.groupby("row", sort=False)
    one = by_row[["grid", "block"]].nunique().max(axis=1) == 1
    chosen = by_row[["name", "grid", "block"]].first()[one].reset_index()
    return pd.concat([known[columns], chosen[columns]], ignore_index=True)


def _take_geometry(rows: np.ndarray, grid: np.ndarray, block: np.ndarray, gpu: GpuTable) -> None:
    """`rows` given the grid and block codes (into `gpu.grid`'s and `gpu.block`'s own categories), in place."""
    if not len(rows):
        return
    for column, codes in (("grid", grid), ("block", block)):
        values = getattr(gpu, column)
        new = np.asarray(values.codes, dtype=np.int64).copy()
        new[rows] = codes
        setattr(gpu, column, pd.Categorical.from_codes(new, categories=values.categories))


def _codes(values: pd.Categorical, rows: np.ndarray) -> np.ndarray:
    """A categorical's codes at `rows` as int64 (-1: missing)."""
    return np.asarray(values.codes, dtype=np.int64)[rows]


def _text(values: pd.Categorical, code: Any) -> str | None:
    """The text of a code of `values` (-1, or NaN where a join found no source: missing)."""
    return None if pd.isna(code) or code < 0 else str(values.categories[int(code)])


def _form_calls(gpu: GpuTable, usable: pd.DataFrame) -> dict[int, int]:
    """row → first row of its op call. A one-kernel call is its own; the kernels of a larger
    call must follow each other on one stream, in call order, with one signature."""
    calls: dict[int, int] = {}
    single = usable["size"] == 1
    calls.update((int(r), int(r)) for r in usable.loc[single, "row"])
    several = usable[~single]
    if several.empty:
        return calls
    columns = [several[c].map(lambda v: None if pd.isna(v) else v) for c in [*_SIGNATURE[:6], "size"]]
    signature = list(zip(*columns, strict=True))
    info = {int(row): (int(pos), sig) for row, pos, sig in zip(several["row"], several["pos"], signature, strict=True)}
    sizes = dict(zip(several["row"].astype(int), several["size"].astype(int), strict=True))
    rows = np.array(sorted(info), dtype=np.int64)
    order = rows[np.lexsort((gpu.ts[rows], gpu.stream[rows], gpu.device[rows]))]
    for k, row in enumerate(order.tolist()):
        pos, sig = info[row]
        size = sizes[row]
        if pos != 0 or k + size > len(order):
            continue
        members = order[k : k + size].tolist()
        same_stream = len({(int(gpu.device[m]), int(gpu.stream[m])) for m in members}) == 1
        if same_stream and [info[m] for m in members] == [(p, sig) for p in range(size)]:
            calls.update((m, row) for m in members)
    return calls


def inferred_summary_line(inferred: dict[str, Any] | None) -> str | None:
    """One terminal line about borrowed shapes (from summary.json's `shapes_inferred`)."""
    if not inferred or not (inferred.get("kernels") or inferred.get("not_inferred")):
        return None
    left = sum(inferred["not_inferred"].values())
    # `kernels` counts every kernel that borrowed, whatever kept its launch out of the trace (before
    # the window, or lost inside it); `not_inferred` those launched before the window alone
    return (
        f"launch not in the trace: shapes inferred for {counted(inferred['kernels'], 'kernel', 'kernels')} "
        f"({inferred['pct_of_kernel_time']:.1f}% of kernel time, same kernel, grid and block linked with one "
        f"signature); {left:,} launched before the window left without (ambiguous or never linked)"
    )
