"""Distinct kernels of a kernels table, in the seed catalog's schema (catalog.json)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.ingest.frames import STACK_SEPARATOR
from kernel_atlas.ingest.recorded import example_dim, parse_call

# The most kernels catalog.json lists, heaviest first (real traces have tens to hundreds; a trace
# of 300k distinct kernel names wrote a 650 MB catalog in 33 s). The rest are tallied.
CATALOG_ENTRIES = 10_000

_FILE_FRAME = re.compile(r"\(\d+\): ")
# Frames of the profiler/compiler/runtime machinery, skipped when naming the source of a launch.
_MACHINERY = ("torch/", "triton/", "<built-in", "<string>", "nn.Module: ", "cuda/bindings/", "threading.py")


def params_from(dims: object, types: object, concrete: object) -> list[dict[str, Any]]:
    """Seed-style params from a launching op's `Input Dims`/`Input type`/`Concrete Inputs`."""
    if not (isinstance(dims, str) and dims) and not (isinstance(types, str) and types):
        return []  # nothing recorded (most kernels of a trace without shapes): no argument to describe
    args = parse_call(*(text if isinstance(text, str) else None for text in (dims, types, None, concrete)))
    params = []
    for i, arg in enumerate(args):
        param: dict[str, Any] = {
            "id": i,
            "role": "input",
            "example_dim": example_dim(arg),
            "example_dtype": arg.dtype,
            "description": "",
        }
        if arg.text:
            param["example_value"] = arg.text
        params.append(param)
    return params


def source_frame(call_stack: object) -> str:
    """The innermost user-code Python frame of a stack (where the launch comes from)."""
    if not isinstance(call_stack, str):
        return ""
    for frame in call_stack.split(STACK_SEPARATOR)[1:]:
        if _FILE_FRAME.search(frame) and not frame.startswith(_MACHINERY):
            return frame
    return ""


def _known_params(known: list[dict[str, Any]] | None) -> dict[tuple[str, str], list[dict[str, Any]]]:
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in known or []:
        table.setdefault(
            (entry.get("kernel_name", ""), entry.get("kernel_implementation", "")), entry.get("params", [])
        )
    return table


def name_params(params: list[dict[str, Any]], known: list[dict[str, Any]] | None) -> bool:
    """Take argument names and roles from a known catalog entry with as many params (a trace
    records shapes and dtypes, not names). Returns whether anything was taken."""
    if not known or len(known) != len(params):
        return False
    for param, ref in zip(params, known, strict=True):
        param["role"] = ref.get("role", param["role"])
        param["description"] = ref.get("description", "")
    return True


def _codes(column: pd.Series) -> np.ndarray:
    """Category codes, -1 for missing and for the empty string (they group together)."""
    values = column.astype("category")
    codes = values.cat.codes.to_numpy(np.int64)
    empty = np.flatnonzero(values.cat.categories == "")
    return np.where(codes == (empty[0] if len(empty) else -2), -1, codes)


@dataclass
class LeftOut:
    """The kernels (distinct name and launcher) a catalog does not list: how many, their calls
    and their GPU time."""

    kernels: int = 0
    calls: int = 0
    total_us: float = 0.0

    def add(self, other: LeftOut) -> None:
        self.kernels += other.kernels
        self.calls += other.calls
        self.total_us += other.total_us

    @classmethod
    def of(cls, entries: list[dict[str, Any]]) -> LeftOut:
        return cls(len(entries), sum(e["count"] for e in entries), sum(e["total_us"] for e in entries))


@dataclass
class Catalog:
    """A trace's catalog: the entries of its heaviest kernels and a tally of the rest."""

    entries: list[dict[str, Any]]
    left_out: LeftOut = field(default_factory=LeftOut)


def build_catalog(
    frame: pd.DataFrame, known: list[dict[str, Any]] | None = None, limit: int = CATALOG_ENTRIES
) -> Catalog:
    """One entry per distinct (kernel name, launcher), heaviest first, at most `limit` of them
    (the rest tallied in `left_out`).

    The example shapes and stack are those of the entry's most frequent shape signature.
    Argument names and roles come from `known` (a catalog such as catalogs/kernels.json)
    where it has the same kernel and launcher with as many params.
    """
    known_params = _known_params(known)
    if frame.empty:
        return Catalog([])
    # Group on integer codes (a missing launcher or shape counts as ""), strings only at the end.
    name = _codes(frame["name"])
    launcher = _codes(frame["launcher"])
    dims = _codes(frame["input_dims"])
    pair = name * (launcher.max() + 2) + launcher + 1
    pair_of_row = np.unique(pair, return_inverse=True)[1].reshape(-1)
    triple = pair_of_row * (dims.max() + 2) + dims + 1
    _, triple_first, triple_of_row = np.unique(triple, return_index=True, return_inverse=True)
    per_pair = frame["dur_us"].groupby(pair_of_row).agg(["count", "sum"])
    count, total = per_pair["count"].to_numpy(), per_pair["sum"].to_numpy()
    # each (name, launcher)'s most frequent shape, ties to the shape seen first
    triple_count = np.bincount(triple_of_row.reshape(-1))
    triple_pair = pair_of_row[triple_first]
    best = np.lexsort((triple_first, -triple_count, triple_pair))
    best = best[np.r_[True, triple_pair[best][1:] != triple_pair[best][:-1]]]  # one per pair, in pair order
    rows = triple_first[best]  # the first row with that shape
    order = np.lexsort((rows, -total))  # heaviest first, ties in order of appearance
    rest = order[limit:]
    left_out = LeftOut(len(rest), int(count[rest].sum()), float(total[rest].sum()))
    order = order[:limit]
    rows = rows[order]
    columns = ["name", "launcher", "call_stack", "input_dims", "input_types", "concrete_inputs"]
    columns += ["op_mapping", "category", "label_rule", "label_evidence", "label_confidence"]
    representative = frame[columns].iloc[rows].astype(object)
    representative["launcher"] = representative["launcher"].fillna("")
    representative["input_dims"] = representative["input_dims"].fillna("")
    representative["count"], representative["sum"] = count[order], total[order]
    entries = []
    for row in representative.itertuples(index=False):
        params = params_from(row.input_dims or None, row.input_types, row.concrete_inputs)
        named = name_params(params, known_params.get((row.name, row.launcher or "")))
        entries.append(
            {
                "kernel_name": row.name,
                "kernel_implementation": row.launcher or "",
                "op_mapping": row.op_mapping,
                "operation": "",
                "source_code": source_frame(row.call_stack),
                "call_stack": row.call_stack if isinstance(row.call_stack, str) else None,
                "params": params,
                "params_named_from": "catalog" if named else None,
                "count": int(row.count),
                "total_us": round(float(row.sum), 3),
                "category": row.category,
                "label": {
                    "rule": row.label_rule,
                    "evidence": row.label_evidence,
                    "confidence": None if row.label_confidence is None else round(float(row.label_confidence), 2),
                },
            }
        )
    return Catalog(entries, left_out)


# a merged catalog's entry: the entry, and the count, trace name and place in that trace's catalog
# of the example it keeps
Merged = dict[tuple[str, str], tuple[dict[str, Any], int, str, int]]


def merge_catalog(merged: Merged, entries: list[dict[str, Any]], source: str = "") -> None:
    """Fold one trace's catalog (named `source`) into `merged`, keyed by kernel name and
    launcher: counts and times add up; the example shapes and stack are those of the trace
    where the kernel ran most (of equal counts, the trace whose name sorts first: the same
    catalog whatever order the traces end in). Entries are never changed in place, nor copied
    until two traces share a kernel (200k kernels: ~10^6 objects)."""
    for place, entry in enumerate(entries):
        key = (entry["kernel_name"], entry["kernel_implementation"])
        kept = merged.get(key)
        if kept is None:
            merged[key] = (entry, entry["count"], source, place)
            continue
        old, example, example_source, example_place = kept
        count, total = old["count"] + entry["count"], old["total_us"] + entry["total_us"]
        base = old
        if (-entry["count"], source) < (-example, example_source):
            base, example, example_source, example_place = entry, entry["count"], source, place
        merged[key] = ({**base, "count": count, "total_us": round(total, 3)}, example, example_source, example_place)


def merged_entries(merged: Merged, limit: int | None = None) -> tuple[list[dict[str, Any]], LeftOut]:
    """The merged catalog, heaviest first, in the format of `build_catalog`: at most `limit`
    entries, and the tally of those past it. Of equal times, the one whose example's trace name
    sorts first, then in that trace's order (for one trace: the order of appearance)."""
    ordered = sorted(merged.values(), key=lambda kept: (-kept[0]["total_us"], kept[2], kept[3]))
    entries = [entry for entry, *_ in ordered]
    if limit is None or len(entries) <= limit:
        return entries, LeftOut()
    return entries[:limit], LeftOut.of(entries[limit:])
