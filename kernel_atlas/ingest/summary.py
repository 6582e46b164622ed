"""Trace facts for summary.json: GPU, ranks, steps, spans, busy/idle time, link coverage."""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.core.groups import group_numbers
from kernel_atlas.core.redact import redact_text
from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.efficiency import describing
from kernel_atlas.ingest.intervals import union_lengths
from kernel_atlas.ingest.reader import META_TEXT, TraceInfo

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
# `distributedInfo.pg_config` (PyTorch's `_get_all_pg_configs`): per process group of the rank its
# `pg_name` (what NCCL kernels record as `Process Group Name`), `pg_desc`, `backend_config`,
# `pg_size` and `ranks`. Kept as name → size (`process_groups`): the kernels of some releases record
# the group's name and no `Group size` nor `Process Group Ranks`. A rank is in a few groups; past
# this many entries the rest are ignored (counted), as a doctored table of millions would fill
# summary.json
MAX_PROCESS_GROUPS = 4096


def declared_world_size(entry: dict[str, Any]) -> int | None:
    """The world size a trace declares (`distributedInfo.world_size`, as summary.json's entry of
    it keeps it), None where it declares none or one no rank fits (0, negative, not an integer)."""
    size = entry.get("distributed", {}).get("world_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


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


def gpu_time_facts(frame: pd.DataFrame) -> dict[str, Any]:
    """Span, busy (union over streams) and idle time per device, and time per kind; once the
    rows are labelled, also communication time and how much of it overlaps compute. Computed
    for all (rank, device) groups at once: a trace may claim 100k devices."""
    by_kind = {
        str(kind): {"count": len(g), "total_us": float(g["dur_us"].sum())}
        for kind, g in frame[["kind", "dur_us"]].groupby("kind", observed=True)
    }
    if frame.empty:
        return {"devices": [], "by_kind": by_kind}
    number, firsts = group_numbers(frame, ["rank", "device"])
    count = len(firsts)
    starts = frame["ts_us"].to_numpy(np.float64)
    ends = starts + frame["dur_us"].to_numpy(np.float64)
    order = np.argsort(number, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(number, minlength=count))[:-1]]
    span = np.maximum.reduceat(ends[order], bounds) - np.minimum.reduceat(starts[order], bounds)
    busy = union_lengths(number, starts, ends, count)
    kernels = (frame["kind"] == "kernel").to_numpy()
    kernel_busy = union_lengths(number[kernels], starts[kernels], ends[kernels], count)
    ranks = frame["rank"].to_numpy()[firsts].tolist()
    device_ids = [None if pd.isna(d) else int(d) for d in frame["device"].to_numpy(dtype=object)[firsts]]
    streams = _streams(frame, number, count)
    comm = None
    if "category" in frame:
        is_comm = (frame["category"] == COMMUNICATION).to_numpy()
        # compute: kernels that are no communication — a copy or a memset beside a collective
        # hides none of it (as HTA's communication/computation overlap counts them)
        is_compute = kernels & ~is_comm
        either = is_comm | is_compute
        comm = union_lengths(number[is_comm], starts[is_comm], ends[is_comm], count)
        compute = union_lengths(number[is_compute], starts[is_compute], ends[is_compute], count)
        comm_or_compute = union_lengths(number[either], starts[either], ends[either], count)
    devices = []
    for k in range(count):
        span_k, busy_k = float(span[k]), float(busy[k])
        facts = {
            "rank": int(ranks[k]),
            "device": device_ids[k],
            "span_us": span_k,
            "busy_us": busy_k,
            "kernel_busy_us": float(kernel_busy[k]),
            "idle_us": span_k - busy_k,
            "busy_pct": 100.0 * busy_k / span_k if span_k > 0 else 0.0,
            "streams": streams[k],
        }
        if comm is not None:
            comm_k, compute_k = float(comm[k]), float(compute[k])
            overlap = max(comm_k + compute_k - float(comm_or_compute[k]), 0.0)
            facts.update(
                communication_us=comm_k,
                compute_us=compute_k,
                overlap_us=overlap,
                # null without communication: 0 of 0 µs overlapped is no share
                overlap_pct_of_communication=100.0 * overlap / comm_k if comm_k else None,
            )
        devices.append(facts)
    return {"devices": devices, "by_kind": by_kind}


def _streams(frame: pd.DataFrame, number: np.ndarray, count: int) -> list[list[int]]:
    """Each group's distinct known streams, ascending."""
    known = frame["stream"].notna().to_numpy()
    stream = frame["stream"].where(known, 0).to_numpy(np.int64)[known]
    streams, stream_code = np.unique(stream, return_inverse=True)
    # (group, stream) pairs as one number each, ascending as the pairs are (no sort of rows as bytes)
    pairs = np.unique(number[known] * max(len(streams), 1) + stream_code.ravel())
    at = np.searchsorted(pairs // max(len(streams), 1), np.arange(count + 1)).tolist()
    values = streams[pairs % max(len(streams), 1)].tolist()
    return [values[at[k] : at[k + 1]] for k in range(count)]


FINGERPRINT_BYTES = 1 << 20  # read from each end of a trace for its fingerprint


def trace_fingerprint(path: Path) -> str | None:
    """What tells one trace file from another without reading it whole: SHA-256 of its size and
    its first and last MiB (a trace of gigabytes costs two reads of 1 MiB). None where the file
    cannot be read. The commands that ingest a trace on first use reuse its run only where the
    run's summary.json holds this trace's fingerprint (`fleet.run_folder`)."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest = hashlib.sha256(str(size).encode())
            digest.update(handle.read(FINGERPRINT_BYTES))
            if size > FINGERPRINT_BYTES:
                handle.seek(max(size - FINGERPRINT_BYTES, FINGERPRINT_BYTES))
                digest.update(handle.read(FINGERPRINT_BYTES))
    except OSError:
        return None
    return digest.hexdigest()


def trace_facts(
    trace: TraceInfo, frame: pd.DataFrame, rank: int, link_facts: dict[str, Any], warnings: list[str] | None = None
) -> dict[str, Any]:
    """Per-trace facts: everything a reader checks before trusting the tables. `warnings`: the
    ingest's, where what the metadata holds that cannot be used is counted."""
    gpus, undescribed = _trace_gpus(trace.device_properties, frame)
    steps = sorted(int(s) for s in frame["step"].dropna().unique()) if len(frame) else []
    kernels = frame[frame["kind"] == "kernel"] if len(frame) else frame
    return {
        "file": trace.path.name,
        "size_bytes": trace.size_bytes,
        "fingerprint": trace_fingerprint(trace.path),
        "events": link_facts.pop("events"),
        "runtime": trace.runtime,
        "rank": rank,
        "distributed": _distributed(trace, warnings),
        "gpus": gpus,
        **({"undescribed_devices": undescribed} if undescribed else {}),
        "steps": steps,
        "gpu_activities": len(frame),
        "kernels": len(kernels),
        "kernel_time_us": float(kernels["dur_us"].sum()) if len(kernels) else 0.0,
        # kernels only, as named: a replay's memsets and memcpys are graph-launched too (a100_cudagraph:
        # 135 kernels of 345 activities)
        "graph_launched_kernels": int(kernels["graph_launch"].sum()) if len(kernels) else 0,
        "with_launcher": int(frame["launcher"].notna().sum()) if len(frame) else 0,
        "with_shapes": int(frame["input_dims"].notna().sum()) if len(frame) else 0,
        **link_facts,
        **(gpu_time_facts(frame) if len(frame) else {"devices": [], "by_kind": {}}),
    }


def _distributed(trace: TraceInfo, warnings: list[str] | None) -> dict[str, Any]:
    """`distributedInfo`'s safe fields, with `process_groups` (`process_group_table`) where it lists any."""
    distributed = safe_fields(trace.distributed_info, _DISTRIBUTED_FIELDS)
    ignored: list[str] = []
    groups = process_group_table(trace.distributed_info, ignored)
    if warnings is not None:
        warnings.extend(f"{trace.path}: {line}" for line in ignored)
    return {**distributed, "process_groups": groups} if groups else distributed


def process_group_table(distributed: dict[str, Any], warnings: list[str]) -> dict[str, int]:
    """`distributedInfo.pg_config` as process-group name → size: `pg_size`, else the count of its
    `ranks` list. An entry is ignored (counted in one warning, by reason) where it is no object,
    its name no text (or longer than a metadata text), its size no whole number from 1 to the
    world size, its `ranks` list not of `pg_size` members, or its name another entry's with
    another size (both then). Names shaped like credentials are redacted as the kernels'
    `process_group` column is, so that they still match."""
    table = distributed.get("pg_config")
    if table is None:
        return {}
    if not isinstance(table, list):
        warnings.append("distributedInfo.pg_config is not a list: ignored")
        return {}
    world = distributed.get("world_size")
    world = world if _fits(world, int) and world >= 1 else None
    why: Counter[str] = Counter()
    sizes: dict[str, int] = {}
    entries: Counter[str] = Counter()  # usable entries per name: all of them ignored where they disagree
    conflicting: set[str] = set()
    for entry in table[:MAX_PROCESS_GROUPS]:
        if not isinstance(entry, dict):
            why["not an object"] += 1
            continue
        name = entry.get("pg_name")
        if not isinstance(name, str) or not name or len(name) > META_TEXT:
            why[f"no name (pg_name) of 1 to {META_TEXT} characters"] += 1
            continue
        size, ranks = entry.get("pg_size"), entry.get("ranks")
        members = len(ranks) if isinstance(ranks, list) and all(_fits(r, int) and r >= 0 for r in ranks) else None
        if size is None:
            size = members
        if not _fits(size, int) or size < 1 or (world is not None and size > world):
            why["a size (pg_size) that is no whole number from 1 to the world size"] += 1
            continue
        if members is not None and members != size:
            why["a ranks list of another size than pg_size"] += 1
            continue
        name = redact_text(name)
        if sizes.get(name, size) != size:
            conflicting.add(name)
        sizes[name] = size
        entries[name] += 1
    for name in conflicting:
        why["a name listed again with another size"] += entries[name]
        del sizes[name]
    if len(table) > MAX_PROCESS_GROUPS:
        why[f"past the first {MAX_PROCESS_GROUPS:,}"] += len(table) - MAX_PROCESS_GROUPS
    if why:
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in why.items())
        groups = counted(sum(why.values()), "process group", "process groups")
        warnings.append(f"distributedInfo.pg_config: {groups} of {len(table):,} ignored ({reasons})")
    return sizes


def _trace_gpus(
    device_properties: list[dict[str, Any]], frame: pd.DataFrame
) -> tuple[list[dict[str, Any]], list[int | None]]:
    """The device-table entries (safe fields) that describe the devices of the trace's GPU
    activities (`efficiency.describing`), and those devices no entry describes, ascending, null
    last for activities whose device the trace does not number. An unknown device borrows no
    entry: the table's other GPU is another device (its name, SMs and peaks are not this one's).
    Every entry for a trace without GPU activities (the GPUs of its machine)."""
    props = [safe_fields(p, _DEVICE_FIELDS) for p in device_properties]
    if not len(frame):
        return props, []
    device = frame["device"]
    used = sorted(int(d) for d in device.dropna().unique())
    described = describing(device_properties, used)
    entries = {id(p) for p in described.values()}
    gpus = [
        safe
        for raw, safe in zip(device_properties, props, strict=True)
        if id(raw) in entries or safe.get("id") in described
    ]
    unknown: list[int | None] = [d for d in used if d not in described]
    return gpus, unknown + ([None] if device.isna().any() else [])


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
