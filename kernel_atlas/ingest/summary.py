"""Trace facts for summary.json: GPU, ranks, steps, spans, busy/idle time, link coverage."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.core.groups import row_groups
from kernel_atlas.core.redact import redact_text
from kernel_atlas.ingest.reader import TraceInfo

# Metadata keys that may hold credentials are never copied into any output.
_SECRET_KEY = re.compile(r"token|secret|password|passwd|key|credential|auth|cookie", re.IGNORECASE)
# The metadata fields copied into summary.json, with the type each must have (others are left out).
_DEVICE_FIELDS = {
    "id": int,
    "name": str,
    "numSms": int,
    "totalGlobalMem": int,
    "computeMajor": int,
    "computeMinor": int,
    "warpSize": int,
}
_DISTRIBUTED_FIELDS = {"backend": str, "rank": int, "world_size": int}
_INT64 = 1 << 63


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def _fits(value: Any, kind: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    return -_INT64 <= value < _INT64 if kind is int else True


def safe_fields(source: dict[str, Any], allowed: dict[str, type]) -> dict[str, Any]:
    """Only whitelisted, non-secret fields of a metadata dict, of their field's type (an int
    within int64); strings shaped like credentials are redacted."""
    return {
        k: redact_text(source[k]) if isinstance(source[k], str) else source[k]
        for k, kind in allowed.items()
        if k in source and not is_secret_key(k) and _fits(source[k], kind)
    }


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length covered by a set of intervals (overlaps counted once)."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new_segment = np.empty(len(s), dtype=bool)
    new_segment[0] = True
    new_segment[1:] = s[1:] > reach[:-1]
    seg_start = s[new_segment]
    seg_end = np.maximum.reduceat(e, np.flatnonzero(new_segment))
    return float((seg_end - seg_start).sum())


def gpu_time_facts(frame: pd.DataFrame) -> dict[str, Any]:
    """Span, busy (union over streams) and idle time per device, and time per kind; once the
    rows are labelled, also communication time and how much of it overlaps compute."""
    devices = []
    # each (rank, device) as row positions into whole columns (a DataFrame per group cost ~1 ms)
    starts = frame["ts_us"].to_numpy(np.float64)
    ends = starts + frame["dur_us"].to_numpy(np.float64)
    is_kernel = (frame["kind"] == "kernel").to_numpy()
    stream_known = frame["stream"].notna().to_numpy()
    streams = frame["stream"].where(stream_known, 0).to_numpy(np.int64)
    is_comm = (frame["category"] == COMMUNICATION).to_numpy() if "category" in frame else None
    for (rank, device), rows in row_groups(frame[["rank", "device"]], ["rank", "device"]):
        start, end = starts[rows], ends[rows]
        span = float(end.max() - start.min()) if len(start) else 0.0
        busy = union_length(start, end)
        kernels = is_kernel[rows]
        on = streams[rows][stream_known[rows]]
        facts = {
            "rank": int(rank),
            "device": None if pd.isna(device) else int(device),
            "span_us": span,
            "busy_us": busy,
            "kernel_busy_us": union_length(start[kernels], end[kernels]),
            "idle_us": span - busy,
            "busy_pct": 100.0 * busy / span if span > 0 else 0.0,
            "streams": [int(s) for s in np.unique(on)],
        }
        if is_comm is not None:
            comm = is_comm[rows]
            comm_busy = union_length(start[comm], end[comm])
            compute_busy = union_length(start[~comm], end[~comm])
            overlap = comm_busy + compute_busy - busy
            facts.update(
                communication_us=comm_busy,
                compute_us=compute_busy,
                overlap_us=overlap,
                overlap_pct_of_communication=100.0 * overlap / comm_busy if comm_busy else 0.0,
            )
        devices.append(facts)
    by_kind = {
        str(kind): {"count": len(g), "total_us": float(g["dur_us"].sum())}
        for kind, g in frame[["kind", "dur_us"]].groupby("kind", observed=True)
    }
    return {"devices": devices, "by_kind": by_kind}


def trace_facts(trace: TraceInfo, frame: pd.DataFrame, rank: int, link_facts: dict[str, Any]) -> dict[str, Any]:
    """Per-trace facts: everything a reader checks before trusting the tables."""
    used_devices = {int(d) for d in frame["device"].dropna().unique()} if len(frame) else set()
    props = [safe_fields(p, _DEVICE_FIELDS) for p in trace.device_properties]
    gpus = [p for p in props if not used_devices or p.get("id") in used_devices] or props
    steps = sorted(int(s) for s in frame["step"].dropna().unique()) if len(frame) else []
    kernels = frame[frame["kind"] == "kernel"] if len(frame) else frame
    return {
        "file": trace.path.name,
        "size_bytes": trace.size_bytes,
        "events": link_facts.pop("events"),
        "runtime": trace.runtime,
        "rank": rank,
        "distributed": safe_fields(trace.distributed_info, _DISTRIBUTED_FIELDS),
        "gpus": gpus,
        "steps": steps,
        "gpu_activities": len(frame),
        "kernels": len(kernels),
        "kernel_time_us": float(kernels["dur_us"].sum()) if len(kernels) else 0.0,
        "graph_launched_kernels": int(frame["graph_launch"].sum()) if len(frame) else 0,
        "with_launcher": int(frame["launcher"].notna().sum()) if len(frame) else 0,
        "with_shapes": int(frame["input_dims"].notna().sum()) if len(frame) else 0,
        **link_facts,
        **(gpu_time_facts(frame) if len(frame) else {"devices": [], "by_kind": {}}),
    }


def kernel_time_table(frame: pd.DataFrame) -> pd.DataFrame:
    """GPU time per (kernel name, category, op_mapping): `count` and `sum` (µs), heaviest first."""
    if frame.empty:
        return pd.DataFrame(columns=["name", "category", "op_mapping", "count", "sum"])
    keys = ["name", "category", "op_mapping"]
    table = frame.groupby(keys, observed=True)["dur_us"].agg(["count", "sum"]).reset_index()
    for key in keys:
        table[key] = table[key].astype(object)
    return table.sort_values("sum", ascending=False, kind="stable").reset_index(drop=True)


def add_kernel_times(total: pd.DataFrame | None, part: pd.DataFrame) -> pd.DataFrame:
    """Two `kernel_time_table`s summed."""
    if total is None or total.empty:
        return part
    if part.empty:
        return total
    both = pd.concat([total, part], ignore_index=True)
    summed = both.groupby(["name", "category", "op_mapping"], sort=False)[["count", "sum"]].sum().reset_index()
    return summed.sort_values("sum", ascending=False, kind="stable").reset_index(drop=True)
