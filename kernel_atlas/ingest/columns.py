"""Typed events → column tables (numpy), one per event family.

One pass sorts events into families; `args` are decoded only for GPU activities, host
launches and CPU ops (their `External id`). Everything downstream is vectorised.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TypeVar

import msgspec
import numpy as np

from kernel_atlas.ingest.reader import Event, RawTrace

GPU_KINDS: dict[str, str] = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

# Host event families, in the order used by `HostTable.family`.
CPU_OP, ANNOTATION, PYTHON, RUNTIME = 0, 1, 2, 3
_HOST_FAMILY: dict[str, int] = {
    "cpu_op": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
}
_GPU_FAMILY = {name: 10 + i for i, name in enumerate(GPU_KINDS)}
_FAMILY = {**_HOST_FAMILY, **_GPU_FAMILY, "gpu_user_annotation": 20}


class _GpuArgs(msgspec.Struct, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    device: int | None = None
    stream: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    bytes: int | None = None
    # NCCL kernels carry their collective's parameters
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    msg_dtype: str | None = msgspec.field(default=None, name="dtype")
    # ... and their process group; newer PyTorch/Kineto also the collective's sequence number in it
    process_group: str | None = msgspec.field(default=None, name="Process Group Name")
    process_group_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    process_group_ranks: str | list[int] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: int | None = msgspec.field(default=None, name="Seq")


class _IdArgs(msgspec.Struct, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    kernel: str | None = None  # ROCm launches name the kernel they launch


class ShapeArgs(msgspec.Struct, gc=False):
    """What a launching CPU op recorded about its inputs (kept as raw JSON text)."""

    dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")
    strides: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Strides")
    concrete: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Concrete Inputs")


_GPU_ARGS = msgspec.json.Decoder(_GpuArgs)
_ID_ARGS = msgspec.json.Decoder(_IdArgs)
_SHAPE_ARGS = msgspec.json.Decoder(ShapeArgs)
_LOOSE = msgspec.json.Decoder()


def _loose_int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _loose_text(value: object) -> str | None:
    return None if value is None or isinstance(value, (dict, bool)) else str(value)


def _decode_gpu_args(raw: msgspec.Raw | None) -> _GpuArgs:
    if not raw:
        return _GpuArgs()
    try:
        return _GPU_ARGS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        # Some exporters write ids as strings or floats: fall back to a forgiving decode.
        try:
            loose = _LOOSE.decode(raw)
        except msgspec.DecodeError:
            return _GpuArgs()
        if not isinstance(loose, dict):
            return _GpuArgs()

        def dims(key: str) -> list[int] | None:
            value = loose.get(key)
            return [int(v) for v in value] if isinstance(value, list) else None

        return _GpuArgs(
            correlation=_loose_int(loose.get("correlation")),
            external_id=_loose_int(loose.get("External id")),
            device=_loose_int(loose.get("device")),
            stream=_loose_int(loose.get("stream")),
            grid=dims("grid"),
            block=dims("block"),
            bytes=_loose_int(loose.get("bytes")),
            collective=loose.get("Collective name") if isinstance(loose.get("Collective name"), str) else None,
            in_nelems=_loose_int(loose.get("In msg nelems")),
            out_nelems=_loose_int(loose.get("Out msg nelems")),
            group_size=_loose_int(loose.get("Group size")),
            msg_dtype=loose.get("dtype") if isinstance(loose.get("dtype"), str) else None,
            process_group=_loose_text(loose.get("Process Group Name")),
            process_group_desc=_loose_text(loose.get("Process Group Description")),
            process_group_ranks=_loose_text(loose.get("Process Group Ranks")),
            seq=_loose_int(loose.get("Seq")),
        )


def _decode_id_args(raw: msgspec.Raw | None) -> _IdArgs:
    if not raw:
        return _IdArgs()
    try:
        return _ID_ARGS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        try:
            loose = _LOOSE.decode(raw)
        except msgspec.DecodeError:
            return _IdArgs()
        if not isinstance(loose, dict):
            return _IdArgs()
        kernel = loose.get("kernel")
        return _IdArgs(
            _loose_int(loose.get("correlation")),
            _loose_int(loose.get("External id")),
            kernel if isinstance(kernel, str) else None,
        )


def decode_shape_args(raw: msgspec.Raw | None) -> ShapeArgs:
    if not raw:
        return ShapeArgs()
    try:
        return _SHAPE_ARGS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return ShapeArgs()


@dataclass
class GpuTable:
    """GPU activities (kernels, memcpys, memsets) in trace order."""

    name: list[str]
    kind: np.ndarray  # object: "kernel" / "memcpy" / "memset"
    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    device: np.ndarray  # int64 (-1 unknown)
    stream: np.ndarray  # int64 (-1 unknown)
    correlation: np.ndarray  # int64 (-1 missing)
    external_id: np.ndarray  # int64 (-1 missing)
    grid: list[str | None]  # "[x, y, z]", shared strings
    block: list[str | None]
    bytes: np.ndarray  # int64 (-1 unknown)
    collective: list[str | None]
    in_nelems: np.ndarray  # int64 (-1 unknown)
    out_nelems: np.ndarray
    group_size: np.ndarray
    msg_dtype: list[str | None]
    process_group: list[str | None]
    process_group_desc: list[str | None]
    process_group_ranks: list[str | None]  # "[0, 1, 2, 3]"
    seq: np.ndarray  # int64 (-1 not recorded)

    def __len__(self) -> int:
        return len(self.name)


@dataclass
class HostTable:
    """Host-side ranges (CPU ops, annotations, Python frames, runtime calls)."""

    family: np.ndarray  # int8, see CPU_OP/ANNOTATION/PYTHON/RUNTIME
    name_code: np.ndarray  # int64 index into `names`
    names: list[str]
    thread: np.ndarray  # int64 code of (pid, tid)
    ts: np.ndarray
    end: np.ndarray
    correlation: np.ndarray  # int64 (-1 when none; runtime events only)
    external_id: np.ndarray  # int64 (-1 when none)
    args: list[msgspec.Raw | None]  # raw args of CPU ops, for shapes; None otherwise
    launch_kernel: list[str | None]  # kernel name a (ROCm) launch records in `args.kernel`; None otherwise

    def __len__(self) -> int:
        return len(self.family)


@dataclass
class GpuAnnotations:
    """`gpu_user_annotation` ranges named `ProfilerStep#N`: steps as seen on the GPU."""

    step: np.ndarray
    device: np.ndarray
    ts: np.ndarray
    end: np.ndarray


@dataclass
class TraceColumns:
    gpu: GpuTable
    host: HostTable
    gpu_steps: GpuAnnotations
    event_count: int


def _int_column(values: list[int | None]) -> np.ndarray:
    return np.fromiter((-1 if v is None else v for v in values), dtype=np.int64, count=len(values))


def step_number(name: str) -> int | None:
    """`ProfilerStep#12` → 12."""
    if name.startswith("ProfilerStep#"):
        tail = name[len("ProfilerStep#") :]
        if tail.isdigit():
            return int(tail)
    return None


def build_columns(trace: RawTrace, on_progress: Callable[[float], None] | None = None) -> TraceColumns:
    """Column tables of a trace, built chunk by chunk so that only one chunk of event
    objects is alive at a time. `on_progress` gets the decoded fraction after each chunk."""
    # `ts`/`dur` are µs in every Kineto trace; `displayTimeUnit` is only a viewer's display hint.
    scale = 1.0
    names: dict[str, int] = {}
    threads: dict[tuple[int | str, int | str], int] = {}
    strings: dict[str, str] = {}
    gpu_parts, host_parts, step_parts = [], [], []
    event_count = 0
    for events in trace.event_chunks():
        family_of = _FAMILY.get
        codes = np.fromiter(
            (family_of(e.cat, -1) if e.ph == "X" else -1 for e in events), dtype=np.int16, count=len(events)
        )
        gpu_parts.append(_gpu_table(events, np.flatnonzero((codes >= 10) & (codes < 20)), scale, strings))
        host_idx = np.flatnonzero((codes >= 0) & (codes < 10))
        host_parts.append(_host_table(events, host_idx, codes[host_idx], scale, names, threads))
        step_parts.append(_gpu_steps(events, np.flatnonzero(codes == 20), scale))
        event_count += len(events)
        del events, codes  # free this chunk's event objects before the next is decoded
        if on_progress is not None:
            on_progress(trace.decoded_fraction)
    if not gpu_parts:
        empty = np.empty(0, np.int64)
        gpu_parts.append(_gpu_table([], empty, scale, strings))
        host_parts.append(_host_table([], empty, np.empty(0, np.int16), scale, names, threads))
        step_parts.append(_gpu_steps([], empty, scale))
    host = _concat(host_parts)
    host.names = list(names)
    return TraceColumns(gpu=_concat(gpu_parts), host=host, gpu_steps=_concat(step_parts), event_count=event_count)


T = TypeVar("T", GpuTable, HostTable, GpuAnnotations)


def _concat(parts: list[T]) -> T:
    if len(parts) == 1:
        return parts[0]
    values = {}
    for spec in fields(parts[0]):
        first = getattr(parts[0], spec.name)
        if isinstance(first, np.ndarray):
            values[spec.name] = np.concatenate([getattr(p, spec.name) for p in parts])
        else:
            values[spec.name] = [item for p in parts for item in getattr(p, spec.name)]
    return type(parts[0])(**values)


def _dims_text(dims: list[int] | None, strings: dict[str, str]) -> str | None:
    if dims is None:
        return None
    text = "[" + ", ".join(map(str, dims)) + "]"
    return strings.setdefault(text, text)


def _gpu_table(events: list[Event], idx: np.ndarray, scale: float, strings: dict[str, str]) -> GpuTable:
    """`strings` makes repeated names and launch shapes one shared object each."""
    sub = [events[i] for i in idx]
    args = [_decode_gpu_args(e.args) for e in sub]
    n = len(sub)
    pid_fallback = [e.pid if isinstance(e.pid, int) else None for e in sub]
    tid_fallback = [e.tid if isinstance(e.tid, int) else None for e in sub]
    return GpuTable(
        name=[strings.setdefault(e.name, e.name) for e in sub],
        kind=np.array([GPU_KINDS[e.cat] for e in sub], dtype=object),
        ts=np.fromiter((e.ts for e in sub), np.float64, n) * scale,
        dur=np.fromiter((e.dur for e in sub), np.float64, n) * scale,
        device=_int_column([a.device if a.device is not None else p for a, p in zip(args, pid_fallback, strict=True)]),
        stream=_int_column([a.stream if a.stream is not None else t for a, t in zip(args, tid_fallback, strict=True)]),
        correlation=_int_column([a.correlation for a in args]),
        external_id=_int_column([a.external_id for a in args]),
        grid=[_dims_text(a.grid, strings) for a in args],
        block=[_dims_text(a.block, strings) for a in args],
        bytes=_int_column([a.bytes for a in args]),
        collective=[None if a.collective is None else strings.setdefault(a.collective, a.collective) for a in args],
        in_nelems=_int_column([a.in_nelems for a in args]),
        out_nelems=_int_column([a.out_nelems for a in args]),
        group_size=_int_column([a.group_size for a in args]),
        msg_dtype=[None if a.msg_dtype is None else strings.setdefault(a.msg_dtype, a.msg_dtype) for a in args],
        process_group=[_shared_text(a.process_group, strings) for a in args],
        process_group_desc=[_shared_text(a.process_group_desc, strings) for a in args],
        process_group_ranks=[_shared_text(a.process_group_ranks, strings) for a in args],
        seq=_int_column([a.seq for a in args]),
    )


def _shared_text(value: str | list[int] | None, strings: dict[str, str]) -> str | None:
    """One shared object per distinct string; a list of ranks is written as "[0, 1]"."""
    if value is None:
        return None
    text = value if isinstance(value, str) else "[" + ", ".join(map(str, value)) + "]"
    return strings.setdefault(text, text)


def _host_table(
    events: list[Event],
    idx: np.ndarray,
    family: np.ndarray,
    scale: float,
    lookup: dict[str, int],
    threads: dict[tuple[int | str, int | str], int],
) -> HostTable:
    sub = [events[i] for i in idx]
    n = len(sub)
    name_code = np.fromiter((lookup.setdefault(e.name, len(lookup)) for e in sub), np.int64, n)
    thread = np.fromiter((threads.setdefault((e.pid, e.tid), len(threads)) for e in sub), np.int64, n)
    ts = np.fromiter((e.ts for e in sub), np.float64, n) * scale
    dur = np.fromiter((e.dur for e in sub), np.float64, n) * scale
    family = family.astype(np.int8)
    correlation = np.full(n, -1, np.int64)
    external_id = np.full(n, -1, np.int64)
    args: list[msgspec.Raw | None] = [None] * n
    launch_kernel: list[str | None] = [None] * n
    for pos in np.flatnonzero((family == RUNTIME) | (family == CPU_OP)).tolist():
        event = sub[pos]
        ids = _decode_id_args(event.args)
        if ids.correlation is not None:
            correlation[pos] = ids.correlation
        if ids.external_id is not None:
            external_id[pos] = ids.external_id
        if family[pos] == CPU_OP:
            args[pos] = event.args
        elif ids.kernel is not None:
            launch_kernel[pos] = sys.intern(ids.kernel)
    return HostTable(
        family=family,
        name_code=name_code,
        names=[],  # filled once all chunks are read
        thread=thread,
        ts=ts,
        end=ts + np.maximum(dur, 0.0),
        correlation=correlation,
        external_id=external_id,
        args=args,
        launch_kernel=launch_kernel,
    )


def _gpu_steps(events: list[Event], idx: np.ndarray, scale: float) -> GpuAnnotations:
    rows = []
    for i in idx.tolist():
        event = events[i]
        step = step_number(event.name)
        if step is None:
            continue
        device = _decode_gpu_args(event.args).device
        if device is None and isinstance(event.pid, int):
            device = event.pid
        rows.append((step, -1 if device is None else device, event.ts * scale, (event.ts + event.dur) * scale))
    arr = np.array(rows, dtype=np.float64).reshape(-1, 4)
    return GpuAnnotations(
        step=arr[:, 0].astype(np.int64), device=arr[:, 1].astype(np.int64), ts=arr[:, 2], end=arr[:, 3]
    )
