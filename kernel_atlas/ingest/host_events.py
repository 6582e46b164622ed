"""The host side of a trace as a columnar table (ingest only): what the critical path needs.

One row per CPU op, user annotation and runtime/driver call with a positive duration (Python
frames are left out: they order nothing the ops do not), plus one row per `cuda_sync` event
(newer Kineto: `Stream Sync`, `Context Sync`, `Event Sync`, `Stream Wait Event`):

* `kind` (`cpu_op`, `annotation`, `runtime`, `sync`), `name`, `thread` (index of the (pid, tid)
  as in the kernels table's `launch_thread`; -1 for sync rows), `ts_us`, `end_us`,
  `correlation` (runtime calls and sync rows; -1 none);
* `parent`: the row of the innermost enclosing op, annotation or call on the same thread (-1);
* `device`, `stream`, `wait_stream`, `wait_correlation`: a sync row's device and stream, and the
  stream and `cudaEventRecord` correlation an event sync or wait waits on (-1 none).

Written per trace as `host_events.parquet/rank=R/<stem>.parquet`, tied to the ingest run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import redact_frame
from kernel_atlas.ingest.columns import ANNOTATION, CPU_OP, RUNTIME, HostTable, TraceColumns
from kernel_atlas.ingest.events import SYNC_KINDS
from kernel_atlas.ingest.link import LinkedColumns
from kernel_atlas.ingest.nesting import first_matching
from kernel_atlas.store.outputs import (
    HOST_EVENTS,
    KERNELS,
    PARTITION,
    dataset_file,
    folder_files,
    is_url,
    load_checked,
    refuse_other_run,
    table_run,
    write_dataset_file,
)

KINDS = ("cpu_op", "annotation", "runtime", "sync")
_KIND_OF_FAMILY = {CPU_OP: 0, ANNOTATION: 1, RUNTIME: 2}


def _kept_parents(family: np.ndarray, parent: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """For each kept host row, its nearest kept ancestor (host index, -1 none), skipping the rest."""
    keep = np.zeros(len(family), dtype=bool)
    keep[kept] = True
    start = parent[kept] if len(parent) == len(family) else np.full(len(kept), -1, np.int64)
    return first_matching(start, parent, keep)


def host_events_table(cols: TraceColumns, linked: LinkedColumns, release: bool = False) -> pd.DataFrame:
    """The table described in the module docstring, host rows in trace order, then sync rows.

    With `release`, the caller is done with `cols.host`: each of its columns is dropped once
    copied (or at once when not needed here), so that the host table and this one, both of a
    trace's size, are never held whole together."""
    host = cols.host
    family = host.family
    if release:
        _release(host, "external_id", "shape", "params", "launch_kernel", "seq_nr", "fwd_tid")
    # ranges of some length; a runtime call of none too: a launch recorded in integer µs, or a
    # 0.05 µs one at an epoch-scale start (a double holds multiples of 0.25 µs there), is still
    # the launch its kernels wait for (left out, its kernels lost their launch on the critical path)
    timed = (host.end > host.ts) | ((family == RUNTIME) & (host.end == host.ts))
    kept = np.flatnonzero(np.isin(family, list(_KIND_OF_FAMILY)) & timed)
    parents = _kept_parents(family, linked.host_parent, kept)
    row_of = np.full(len(family) + 1, -1, np.int64)
    row_of[kept] = np.arange(len(kept))
    parent_rows = row_of[parents]  # -1 → the extra slot, -1
    del parents, row_of
    kind_of = np.full(max(_KIND_OF_FAMILY) + 1, -1, np.int64)
    kind_of[list(_KIND_OF_FAMILY)] = list(_KIND_OF_FAMILY.values())
    host_kind = kind_of[family[kept]]
    del family
    syncs = cols.gpu_syncs
    n_sync = len(syncs)

    def column(name: str, sync_column: int, dtype: type = np.int64) -> np.ndarray:
        out = _rows(getattr(host, name), kept, syncs[:, sync_column].astype(dtype))
        if release:
            _release(host, name)
        return out

    def sync_only(sync_column: int) -> np.ndarray:
        out = np.full(len(kept) + n_sync, -1, np.int64)
        out[len(kept) :] = syncs[:, sync_column]
        return out

    columns = {
        "kind": pd.Categorical.from_codes(np.concatenate([host_kind, np.full(n_sync, 3)]), categories=list(KINDS)),
        "name": _names(host.names, host.name_code[kept], syncs[:, 0].astype(np.int64)),
        "thread": _rows(host.thread, kept, np.full(n_sync, -1, np.int64)),
        "ts_us": column("ts", 3, np.float64),
        "end_us": column("end", 4, np.float64),
        "correlation": column("correlation", 5),
        "parent": np.concatenate([parent_rows, np.full(n_sync, -1, np.int64)]),
        "device": sync_only(1),
        "stream": sync_only(2),
        "wait_stream": sync_only(6),
        "wait_correlation": sync_only(7),
    }
    if release:
        _release(host, "family", "name_code", "thread")
    # a column each, not one block that copies them all (a trace's ~1.5M host rows: ~120 MB)
    frame = pd.DataFrame(columns, copy=False)
    redact_frame(frame)
    return frame


def _rows(values: np.ndarray, kept: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """`np.concatenate([values[kept], tail])` without the intermediate copy of `values[kept]`."""
    out = np.empty(len(kept) + len(tail), np.result_type(values, tail))
    if values.dtype == out.dtype:
        np.take(values, kept, out=out[: len(kept)])
    else:  # codes narrower than the column (int32 thread codes): `take` writes only its own type
        out[: len(kept)] = values[kept]
    out[len(kept) :] = tail
    return out


def _release(host: HostTable, *names: str) -> None:
    """Drop these columns of a host table nothing reads any more (empty arrays in their place)."""
    for name in names:
        setattr(host, name, np.empty(0, getattr(host, name).dtype))


def _names(names: list[str], host_codes: np.ndarray, sync_codes: np.ndarray) -> pd.Categorical:
    """The `name` column: host rows' names (codes into `names`), then sync rows' kinds, as a
    categorical of the distinct texts used, sorted (as `pd.Categorical` of the texts orders them),
    built from the codes rather than from a Python string per row."""
    texts = [*names, *SYNC_KINDS]
    codes = np.concatenate([host_codes, len(names) + sync_codes])
    if not len(codes):
        return pd.Categorical(np.empty(0, dtype=object))
    used = np.unique(codes)
    distinct = sorted({texts[i] for i in used.tolist()})
    position = {text: i for i, text in enumerate(distinct)}
    remap = np.full(len(texts), -1, np.int64)
    remap[used] = [position[texts[i]] for i in used.tolist()]
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index(distinct))


def host_events_file(rank: int, stem: str) -> str:
    return dataset_file(HOST_EVENTS, rank, stem)


def write_host_events(frame: pd.DataFrame, out: str | Path, rank: int, stem: str, run_id: str | None) -> str | None:
    """One trace's host events next to its kernels (local folders only); the relative path."""
    if is_url(out):
        return None
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return write_dataset_file(table, out, host_events_file(rank, stem), run_id)


def load_host_events(out: str | Path, rank: int, columns: tuple[str, ...] | None = None) -> pd.DataFrame | None:
    """A rank's host events (its traces' tables concatenated), None when not recorded; `columns`:
    those alone (no `parent`: the nesting's checks are then the critical path's read's)."""
    files = _rank_files(out, rank)
    if not files:
        return None
    frames = [_checked(f) if columns is None else _columns(f, columns) for f in files]
    if len(frames) == 1:
        return frames[0]
    if columns is not None and "parent" not in columns:
        return pd.concat(frames, ignore_index=True)
    offsets = np.cumsum([0] + [len(f) for f in frames[:-1]])
    for frame, offset in zip(frames, offsets, strict=True):
        frame["parent"] = np.where(frame["parent"] >= 0, frame["parent"] + offset, -1)
    return pd.concat(frames, ignore_index=True)


def host_names(out: str | Path, rank: int) -> pd.DataFrame | None:
    """The `kind` and `name` of a rank's host events alone (what a `--window` is checked
    against before a report replaces anything), None when not recorded."""
    import pyarrow.parquet as pq

    files = _rank_files(out, rank)
    if not files:
        return None
    for path in files:  # a file without them refused as its whole read refuses it, in one line
        if not {"kind", "name"} <= set(pq.read_schema(path).names):
            load_checked(path, COLUMNS, "a host events table")
    return pd.concat([pq.read_table(f, columns=["kind", "name"]).to_pandas() for f in files], ignore_index=True)


STREAM_WAIT = SYNC_KINDS[3]  # a `cuda_sync` event holding a stream until another's activity ends


# an event wait recorded only as a runtime call (ROCm's Kineto writes no cuda_sync events, older CUDA Kineto neither)
RUNTIME_STREAM_WAITS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")


# what `idle.event_wait_ends` reads of the host events (a Stream Wait Event's, or a runtime call's)
EVENT_WAIT_COLUMNS = (
    "kind",
    "name",
    "ts_us",
    "thread",
    "correlation",
    "device",
    "stream",
    "wait_stream",
    "wait_correlation",
)


def host_events_with_stream_waits(out: str | Path, rank: int) -> pd.DataFrame | None:
    """A rank's host events where they record a stream held by an event wait (`STREAM_WAIT`, or
    a `RUNTIME_STREAM_WAITS` call: `idle.event_wait_ends`), else None — asked of the `kind` and
    `name` columns alone, so that a trace without such waits costs the report no second read of
    its host events (the critical path reads them beside it)."""
    names = host_names(out, rank)
    if names is None or not records_stream_waits(names):
        return None
    return load_host_events(out, rank, EVENT_WAIT_COLUMNS)


def with_stream_waits(host: pd.DataFrame | None) -> pd.DataFrame | None:
    """`host` (a rank's host events, already read: `load_host_events`) where it records a stream
    held by an event wait, else None — what `host_events_with_stream_waits` reads, without a read."""
    return host if host is not None and records_stream_waits(host) else None


def records_stream_waits(host: pd.DataFrame) -> bool:
    """Whether host events (their `kind` and `name` at least) record an event wait: a
    `STREAM_WAIT`, or a `RUNTIME_STREAM_WAITS` call."""
    kind, name = host["kind"], host["name"]
    waits = ((kind == "sync") & (name == STREAM_WAIT)) | ((kind == "runtime") & name.isin(RUNTIME_STREAM_WAITS))
    return bool(waits.any())


def _rank_files(out: str | Path, rank: int) -> list[Path]:
    """A rank's host events files, in order (hidden ones, a writer's temporaries, aside), each of
    the ingest run that wrote the rank's kernels — refused in one line otherwise (a file of
    another run put beside them gave a critical path 93 times the trace)."""
    files = folder_files(Path(out) / HOST_EVENTS / f"{PARTITION}={rank}") or []
    kernels = folder_files(Path(out) / KERNELS / f"{PARTITION}={rank}") if files else None
    run = table_run(kernels[0]) if kernels else None
    for path in files if run is not None else ():
        if table_run(path) != run:
            refuse_other_run(path)
    return files


# the columns the critical path reads, by kind (`outputs.load_checked`)
COLUMNS = {
    **{"kind": "string", "name": "string", "ts_us": "time", "end_us": "time"},
    **{name: "integer" for name in ("thread", "correlation", "parent", "device", "stream")},
    **{name: "integer" for name in ("wait_stream", "wait_correlation")},
}


def _columns(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """`columns` of one host events file, their kinds checked as `_checked` checks them."""
    checked = load_checked(path, {name: COLUMNS[name] for name in columns}, "a host events table")
    return checked.select(list(columns)).to_pandas()


def _checked(path: Path) -> pd.DataFrame:
    """One host events file, refused in one line where it is not as ingest writes it: its
    columns' kinds and times (`load_checked`), no row ending before it starts, and each `parent`
    a row of the file (or -1) with no row its own ancestor — a cycle of parents kept the critical
    path's walks up the call stack going forever."""
    frame = load_checked(path, COLUMNS, "a host events table").to_pandas()
    backwards = int(np.count_nonzero(frame["end_us"].to_numpy() < frame["ts_us"].to_numpy()))
    if backwards:  # a range of negative length is dropped at ingest: the critical path took it as gigantic
        raise AtlasError(path, f"{backwards} rows that end before they start, which `atlas ingest` never writes")
    parent = frame["parent"].to_numpy(np.int64)
    outside = int(np.count_nonzero((parent < -1) | (parent >= len(parent))))
    if outside:
        raise AtlasError(path, f"{outside} rows whose parent is no row of the table: run `atlas ingest` again")
    # the 2^k-th ancestor, k doubling: a chain of parents longer than the table is a cycle
    ancestor = parent
    for _ in range(max(1, len(parent)).bit_length()):
        ancestor = np.where(ancestor >= 0, ancestor[np.maximum(ancestor, 0)], -1)
        if not (ancestor >= 0).any():
            return frame
    raise AtlasError(path, "rows that are their own ancestor (a cycle of parents): run `atlas ingest` again")
