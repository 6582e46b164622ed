"""Kernels table + device → per-kernel costs, the roofline table and time shares.

Costs are per CPU-op call: the kernels launched by one call (same `cpu_op_id`: a cuDNN
convolution and its layout transforms, a GEMM and its split-K reduce) share one cost, counted
on the call's longest kernel ("main"); the others are "helper" rows. A call's achieved FLOP/s
and bytes/s use the summed time of all its kernels. Collectives are costed from the message
sizes NCCL records, memcpy/memset from their byte counts. Kernels without recorded shapes
(graph replays, launches outside the profiling window) keep their time and get the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.ingest.recorded import dtypes, parse_call, type_names
from kernel_atlas.ingest.summary import gpu_time_facts
from kernel_atlas.paths import read_toml
from kernel_atlas.roofline.costs import Call, Cost, NoCost, cost_of
from kernel_atlas.roofline.devices import VECTOR, Device

# A call whose attainable time is this small is dominated by launch and latency, not by a roof.
LATENCY_US = 4.0

ROOFLINE_COLUMNS = [
    "name",
    "launcher",
    "op_mapping",
    "category",
    "input_dims",
    "input_types",
    "role",
    "count",
    "total_us",
    "op_time_us",
    "mean_us",
    "flops",
    "bytes",
    "intensity",
    "precision",
    "peak_label",
    "achieved_tflops",
    "achieved_gbps",
    "peak_tflops",
    "peak_gbps",
    "attainable_us",
    "sol_pct",
    "bound",
    "headroom_us",
    "note",
    "formula",
    "call_stack",
]
_COMM_DTYPES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Char": 1, "Byte": 1}


@dataclass
class Analysis:
    kernels: pd.DataFrame  # the kernels table plus role, flops, bytes, op_time_us, note
    roofline: pd.DataFrame
    timeshare: pd.DataFrame
    facts: dict[str, Any]


@lru_cache(maxsize=1)
def _bus_factors() -> dict[str, str]:
    return read_toml("costs.toml")["bus_factor"]


def bus_factor(op: str, ranks: int) -> float:
    expression = _bus_factors().get(op, "1")
    return float(eval(expression, {"__builtins__": {}}, {"n": ranks}))


def comm_itemsize(dtype: object) -> int | None:
    """Element size of a collective's `dtype` as NCCL kernels record it (`Float`, `BFloat16`…)."""
    size = _COMM_DTYPES.get(str(dtype), dtypes().get(str(dtype), None))
    return size if isinstance(size, int) else getattr(size, "bytes", None)


def _comm_cost(row: Any, world_size: int | None) -> tuple[Cost | None, str]:
    nelems = (
        max(v for v in (row.msg_in_nelems, row.msg_out_nelems) if not pd.isna(v))
        if not (pd.isna(row.msg_in_nelems) and pd.isna(row.msg_out_nelems))
        else None
    )
    if nelems is None:
        return None, "collective message size not recorded on the kernel"
    itemsize = comm_itemsize(row.msg_dtype)
    if itemsize is None:
        return None, f"unknown collective dtype {row.msg_dtype!r}"
    ranks = int(row.group_size) if not pd.isna(row.group_size) else (world_size or 0)
    if ranks < 1:
        return None, "group size unknown"
    message = float(nelems) * itemsize
    factor = bus_factor(str(row.op_mapping), ranks)
    formula = f"bus bytes = {int(nelems)}·{itemsize} B · {factor:.3f} ({row.op_mapping}, n={ranks})"
    return Cost(0.0, message * factor, "int", "link", formula), ""


def _dominant_float_dtype(types: pd.Series) -> str | None:
    """The floating dtype most tensors of a trace have: assumed for tensor-list elements, whose
    dtype the profiler does not record."""
    column = types.astype("category")
    codes = column.cat.codes.to_numpy()
    uses = np.bincount(codes[codes >= 0], minlength=len(column.cat.categories))
    counts: dict[str, int] = {}
    for text, n in zip(column.cat.categories, uses.tolist(), strict=True):
        for name in type_names(text):
            if name in dtypes() and dtypes()[name].precision not in ("int", "int8"):
                counts[name] = counts.get(name, 0) + n
    return max(counts, key=counts.__getitem__) if counts else None


def _call_costs(frame: pd.DataFrame) -> pd.DataFrame:
    """role, flops, bytes, precision, unit, note, formula, op_time_us per kernel row."""
    n = len(frame)
    role = np.full(n, "no shapes", dtype=object)
    note = frame["link"].astype(object).where(frame["link"].astype(object) != "correlation", "").to_numpy(copy=True)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    precision = np.full(n, None, dtype=object)
    unit = np.full(n, None, dtype=object)
    formula = np.full(n, "", dtype=object)
    op_time = frame["dur_us"].to_numpy(copy=True)

    # one group per op call; the longest kernel of the call carries its cost
    has_call = frame["cpu_op_id"].notna().to_numpy() & (frame["kind"] == "kernel").to_numpy()
    calls = frame.loc[has_call, ["trace", "rank", "cpu_op_id", "dur_us"]].copy()
    calls["_row"] = np.flatnonzero(has_call)
    calls["_call_time"] = calls.groupby(["trace", "rank", "cpu_op_id"], observed=True)["dur_us"].transform("sum")
    calls = calls.sort_values("dur_us", ascending=False, kind="stable")
    main_rows = calls.drop_duplicates(["trace", "rank", "cpu_op_id"])["_row"].to_numpy()
    helper_rows = np.setdiff1d(calls["_row"].to_numpy(), main_rows)
    op_time[calls["_row"].to_numpy()] = calls["_call_time"].to_numpy()
    role[helper_rows] = "helper"
    firsts = calls.drop_duplicates(["trace", "rank", "cpu_op_id"])
    call_keys = firsts[["trace", "rank", "cpu_op_id"]].itertuples(index=False, name=None)
    main_name = dict(zip(call_keys, frame["name"].to_numpy()[main_rows], strict=True))
    for r in helper_rows.tolist():
        key = (frame["trace"].iat[r], frame["rank"].iat[r], frame["cpu_op_id"].iat[r])
        note[r] = f"cost counted on {str(main_name[key])[:60]} (same {frame['cpu_op'].iat[r]} call)"

    # one cost per distinct (op, recorded inputs, label); the label's rule picks kernel-family
    # formulas and says which GEMMs run on TF32 tensor cores
    keys = ["cpu_op", "op_mapping", "input_dims", "input_types", "concrete_inputs", "label_rule"]
    signature = frame.iloc[main_rows][keys]
    columns = [signature[c].astype("category") for c in signature.columns]
    codes = np.stack([c.cat.codes.to_numpy(np.int64) for c in columns], axis=1) if len(main_rows) else np.empty((0, 6))
    unique, inverse = np.unique(codes, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    list_dtype = _dominant_float_dtype(frame["input_types"])
    results: list[tuple[Cost | None, str]] = []
    for row in unique:
        launcher, op, dims, types, concrete, rule = (
            None if k < 0 else column.cat.categories[k] for column, k in zip(columns, row, strict=True)
        )
        try:
            args = parse_call(dims, types, None, concrete)
            call = Call(str(launcher or ""), str(op), args, str(rule or ""), list_dtype)
            results.append((cost_of(call), ""))
        except NoCost as exc:
            results.append((None, str(exc)))
        except (ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
            results.append((None, f"unexpected recorded shapes for {launcher} ({type(exc).__name__})"))
    for r, which in zip(main_rows.tolist(), inverse.tolist(), strict=True):
        cost, why = results[which]
        if cost is None:
            role[r], note[r] = "no model", why
            continue
        role[r], flops[r], nbytes[r] = "main", cost.flops, cost.bytes
        precision[r], unit[r], formula[r] = cost.precision, cost.unit, cost.formula

    # memcpy / memset: their own byte counts. Host<->device copies are bounded by the host
    # link; a device-to-device copy reads and writes device memory.
    copies = (frame["kind"] != "kernel").to_numpy() & frame["bytes"].notna().to_numpy()
    for r in np.flatnonzero(copies).tolist():
        moved = float(frame["bytes"].iat[r])
        name = str(frame["name"].iat[r])
        host = any(tag in name for tag in ("HtoD", "DtoH", "HtoH", "Pinned", "Pageable"))
        traffic = moved if host or frame["kind"].iat[r] == "memset" else 2 * moved
        role[r], flops[r], nbytes[r], precision[r] = "main", 0.0, traffic, "int"
        unit[r] = "host" if host else VECTOR
        what = "over the host link" if host else ("written" if traffic == moved else "read + written")
        formula[r], note[r], op_time[r] = f"{int(moved)} bytes {what}", "", frame["dur_us"].iat[r]
    return pd.DataFrame(
        {
            "role": role,
            "flops": flops,
            "bytes": nbytes,
            "precision": precision,
            "unit": unit,
            "note": note,
            "formula": formula,
            "op_time_us": op_time,
        },
        index=frame.index,
    )


def analyse(frame: pd.DataFrame, device: Device | None, world_size: int | None = None) -> Analysis:
    kernels = frame.copy()
    costs = _call_costs(kernels)
    for column in costs.columns:
        kernels[column] = costs[column]
    comm = (kernels["category"] == "communication").to_numpy() & kernels["collective"].notna().to_numpy()
    for r in np.flatnonzero(comm).tolist():
        cost, why = _comm_cost(kernels.iloc[r], world_size)
        idx = kernels.index[r]
        if cost is None:
            kernels.loc[idx, ["role", "note"]] = ["no model", why]
            continue
        kernels.loc[idx, ["role", "flops", "bytes", "precision", "unit", "formula", "note", "op_time_us"]] = [
            "main",
            0.0,
            cost.bytes,
            "int",
            "link",
            cost.formula,
            "",
            kernels["dur_us"].iat[r],
        ]
    roofline = _roofline_table(kernels, device)
    timeshare = _timeshare(kernels)
    facts = _facts(kernels, device)
    return Analysis(kernels=kernels, roofline=roofline, timeshare=timeshare, facts=facts)


def _roofline_table(kernels: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    return roofline_metrics(roofline_groups(kernels), device)


ROOFLINE_KEYS = ["name", "launcher", "input_dims", "role"]


def roofline_groups(kernels: pd.DataFrame) -> pd.DataFrame:
    """Costed kernel rows grouped by (name, launcher, input shapes, role): counts and summed
    times, the per-call cost of the group. Groups of several runs (ranks) add up: sum `count`,
    `total_us` and `op_time_us`, keep the first of the rest (see `roofline_metrics`)."""
    keys = ROOFLINE_KEYS
    values = ["op_mapping", "category", "input_types", "dur_us", "op_time_us", "flops", "bytes", "precision", "unit"]
    work = kernels[[*keys, *values, "note", "formula", "call_stack"]].copy()
    for column in ("name", "launcher", "input_dims", "op_mapping", "category", "input_types"):
        work[column] = work[column].astype(object).fillna("")
    grouped = work.groupby(keys, sort=False, dropna=False)
    table = grouped.agg(
        op_mapping=("op_mapping", "first"),
        category=("category", "first"),
        input_types=("input_types", "first"),
        count=("dur_us", "size"),
        total_us=("dur_us", "sum"),
        op_time_us=("op_time_us", "sum"),
        flops=("flops", "first"),
        bytes=("bytes", "first"),
        precision=("precision", "first"),
        unit=("unit", "first"),
        note=("note", "first"),
        formula=("formula", "first"),
        call_stack=("call_stack", "first"),
    ).reset_index()
    return table


def roofline_metrics(table: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    """The roofline table from `roofline_groups`: throughput, attainable time, SOL, bound and
    headroom per group against the device's peaks, ranked by headroom."""
    table = table.copy()
    table["mean_us"] = table["op_time_us"] / table["count"]
    table["intensity"] = table["flops"] / table["bytes"].where(table["bytes"] > 0)
    peaks_t, peaks_g, labels = [], [], []
    for row in table.itertuples(index=False):
        if device is None or row.role != "main" or row.precision is None:
            peaks_t.append(np.nan), peaks_g.append(np.nan), labels.append(None)
            continue
        if row.unit in ("link", "host"):
            bandwidth = device.link_gbps if row.unit == "link" else device.host_link_gbps
            peaks_t.append(np.nan), peaks_g.append(bandwidth), labels.append(f"{row.unit} bandwidth")
            continue
        peak = device.peak(str(row.precision), str(row.unit))
        peaks_t.append(peak.tflops), peaks_g.append(device.memory_gbps), labels.append(peak.label)
    table["peak_tflops"], table["peak_gbps"], table["peak_label"] = peaks_t, peaks_g, labels
    calls = table["count"]
    table["achieved_tflops"] = table["flops"] * calls / (table["op_time_us"] * 1e6)
    table["achieved_gbps"] = table["bytes"] * calls / (table["op_time_us"] * 1e3)
    compute_us = (table["flops"] / (table["peak_tflops"] * 1e6)).fillna(0.0)
    memory_us = table["bytes"] / (table["peak_gbps"] * 1e3)
    table["attainable_us"] = np.maximum(compute_us, memory_us)
    table["sol_pct"] = 100.0 * table["attainable_us"] * calls / table["op_time_us"]
    bound = np.where(compute_us > memory_us, "compute", "memory").astype(object)
    bound[(table["unit"] == "link").to_numpy()] = "communication"
    bound[(table["unit"] == "host").to_numpy()] = "host link"
    bound[(table["attainable_us"] < LATENCY_US).to_numpy() & (table["sol_pct"] < 50).to_numpy()] = "latency"
    bound[table["attainable_us"].isna().to_numpy()] = None
    table["bound"] = bound
    table["headroom_us"] = (table["op_time_us"] - table["attainable_us"] * calls).clip(lower=0.0)
    table = table.sort_values(["headroom_us", "total_us"], ascending=False, na_position="last", kind="stable")
    return table[ROOFLINE_COLUMNS].reset_index(drop=True)


def _timeshare(kernels: pd.DataFrame) -> pd.DataFrame:
    """Time per category, op, kernel, module and stream; each level sums to the GPU time.

    GPU time = sum of durations of all GPU activities: activities that overlap on different
    streams are each counted in full (busy time, which counts overlap once, is in the facts)."""
    total = float(kernels["dur_us"].sum())
    parts = []
    levels = {
        "category": kernels["category"].astype(object),
        "op_mapping": kernels["op_mapping"].astype(object),
        "kernel": kernels["name"].astype(object),
        "module": kernels["module"].astype(object).fillna("(no module)"),
        "stream": kernels["stream"].astype("Int64").astype(str).replace("<NA>", "(unknown)"),
        "kind": kernels["kind"].astype(object),
    }
    for level, key in levels.items():
        g = kernels.groupby(key.to_numpy(), sort=False)["dur_us"].agg(["sum", "size"])
        g = g.sort_values("sum", ascending=False)
        parts.append(
            pd.DataFrame(
                {
                    "level": level,
                    "key": g.index.astype(str),
                    "total_us": g["sum"].to_numpy(),
                    "count": g["size"].to_numpy(),
                    "pct": 100.0 * g["sum"].to_numpy() / total if total else 0.0,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def _facts(kernels: pd.DataFrame, device: Device | None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "device": None if device is None else {"key": device.key, "name": device.name, "source": device.source},
        "gpu_time_us": float(kernels["dur_us"].sum()),
        "kernel_time_us": float(kernels.loc[kernels["kind"] == "kernel", "dur_us"].sum()),
        "devices": gpu_time_facts(kernels)["devices"],
    }
    costed = kernels["role"] == "main"
    facts["costed_time_us"] = float(kernels.loc[costed, "op_time_us"].sum())
    facts["no_shape_time_us"] = float(kernels.loc[kernels["role"] == "no shapes", "dur_us"].sum())
    facts["no_model_time_us"] = float(kernels.loc[kernels["role"] == "no model", "dur_us"].sum())
    return facts
