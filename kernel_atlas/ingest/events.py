"""One slice of the `traceEvents` array → compact columns. Runs in decode worker processes.

A slice is the JSON text of consecutive events, framed as a list. msgspec decodes it into
small typed structs, `args` included (only the keys ingest uses; everything else is
skipped by the decoder); events that are not complete ("X") events are recognised by
their `ph` tag and skipped without building any field. The events that matter (host
ranges, GPU activities, GPU step annotations) then become numpy columns through C-level
passes (`map`/`attrgetter`), strings becoming codes into small per-slice tables. Only
these columns leave the worker; `columns.ColumnBuilder` merges them in trace order.

Damage costs only what it touches. A number beyond int64 or beyond float range, a value of the
wrong type, a lone UTF-16 surrogate: the slice is decoded again forgivingly (`_forgiving_args`,
then `_sanitized` through the standard library's parser), and only the field concerned is
dropped — counted in `SlicePart.ignored`, never all of an event's args. A GPU activity without
a usable `ts` or `dur` is left out (counted); JSON nested beyond the decoder's limit is a
`SliceError` of kind "deep" (the reader skips the event, `reader._Reader._deep_slice`).

This module imports msgspec and numpy only, so that worker processes start fast.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import attrgetter
from typing import Annotated, Any, ClassVar, NamedTuple, Union

import msgspec
import numpy as np

from kernel_atlas.core.text_limits import CUT_MARK, MAX_TEXT, cut_long, cut_to  # noqa: F401 (read from here too)
from kernel_atlas.store.limits import MAX_TIME_US, within_time_bound

GPU_KINDS: dict[str, str] = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
KIND_NAMES = list(GPU_KINDS.values())  # GPU kind codes 0, 1, 2

# Host event families, in the order used by `HostTable.family`.
CPU_OP, ANNOTATION, PYTHON, RUNTIME = 0, 1, 2, 3
_HOST_FAMILY: dict[str, int] = {
    "cpu_op": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
}
# the collectives whose ranges and kernels the TensorBoard plugin's step split counts as communication
# (its NcclOpNameSet / GlooOpNameSet; ingest/step_split.py)
COMM_OPS = frozenset(
    f"{lib}:{op}"
    for lib in ("nccl", "gloo")
    for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
)
_GPU_FAMILY = {name: 10 + i for i, name in enumerate(GPU_KINDS)}
_GPU_STEP = 20
GPU_COMM_RANGE = -1  # the "step" of a GPU-side `nccl:*` / `gloo:*` annotation's row in `SlicePart.steps`
_INSTANT = 30  # instant ("i") events; `[memory]` ones become `SlicePart.memory`
MEMORY_EVENT = "[memory]"
_GPU_SYNC = 21  # `cuda_sync` events (newer Kineto): what a stream or the host waited for
SYNC_KINDS = ("Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event")  # codes 0…3 of `SlicePart.syncs`
_FAMILY = {
    **_HOST_FAMILY,
    **_GPU_FAMILY,
    "gpu_user_annotation": _GPU_STEP,
    "cuda_sync": _GPU_SYNC,
    "cpu_instant_event": _INSTANT,
}
# Older Kineto (PyTorch 1.8-1.12) wrote other names for the same families (docs/kineto-schemas.md):
# `Operator` covers CPU ops and `record_function` ranges alike (a `ProfilerStep#N` among them
# becomes the step annotation it is today, the others CPU ops). Any other category is also
# looked up by its lower-case form, as the TensorBoard plugin does.
_LEGACY_OP = 31  # (30 is _INSTANT)
_LEGACY_FAMILY = {
    "operator": _LEGACY_OP,
    "runtime": RUNTIME,
    "kernel": _GPU_FAMILY["kernel"],
    "memcpy": _GPU_FAMILY["gpu_memcpy"],
    "memset": _GPU_FAMILY["gpu_memset"],
    "python": PYTHON,
    **{name.lower(): family for name, family in _FAMILY.items()},
}
# `ignored` key prefix: X events of an unknown category that look like GPU activities ("" after it:
# of no category)
UNKNOWN_GPU = "unknown GPU category "
# `ignored` key: the GPU ranges of the legacy autograd profiler's `export_chrome_trace` (PyTorch ≤ 1.8
# without Kineto: no `cat`, pid "CUDA functions", tid the device). Each is one op's time between two
# CUDA events, named after the op (`FunctionEvent.append_kernel(start.name(), …)`), not a kernel: an
# op and the ops it calls each have one, overlapping. Counted and said, never read as kernels.
LEGACY_GPU_RANGES = "legacy autograd GPU ranges"
LEGACY_GPU_PID = "CUDA functions"

_EMPTY = msgspec.Raw(b"")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# An integer the columns (int64) can hold: anything wider fails the typed decode, and the
# forgiving one drops that field alone.
Int = Annotated[int, msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)]
NAN = float("nan")  # `ts` / `dur` not given
# An id (correlation, External id, device, stream, autograd's sequence number and thread) not
# given. Not -1, which a trace may write (`_ids` counts a negative id written, which would have
# passed for "none" unsaid: a launch and its kernel unlinked); -2^63 itself is refused by the typed
# decode (`Id`), so that the forgiving one counts it.
ABSENT_ID = _INT64_MIN
Id = Annotated[int, msgspec.Meta(ge=_INT64_MIN + 1, le=_INT64_MAX)]


class Args(msgspec.Struct, frozen=True, gc=False):
    """The `args` keys ingest uses; -1 / None / empty when absent (ids: ABSENT_ID, until `_ids`
    makes them -1). Other keys are skipped."""

    correlation: Id = ABSENT_ID
    external_id: Id = msgspec.field(default=ABSENT_ID, name="External id")
    external_id_lower: Id = msgspec.field(default=ABSENT_ID, name="external id")  # PyTorch <= 1.10: runtime, GPU
    device: Id = ABSENT_ID
    stream: Id = ABSENT_ID
    grid: tuple[Int, ...] | None = None
    block: tuple[Int, ...] | None = None
    bytes: Int = -1
    # NCCL kernels carry their collective's parameters
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: Int = msgspec.field(default=-1, name="In msg nelems")
    out_nelems: Int = msgspec.field(default=-1, name="Out msg nelems")
    group_size: Int = msgspec.field(default=-1, name="Group size")
    msg_dtype: str | None = msgspec.field(default=None, name="dtype")
    # ... and their process group; newer PyTorch/Kineto also the collective's sequence number.
    # `record_param_comms` CPU ops carry the same keys.
    process_group: str | None = msgspec.field(default=None, name="Process Group Name")
    process_group_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    process_group_ranks: str | tuple[Int, ...] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: Int = msgspec.field(default=-1, name="Seq")
    # autograd: a forward op's sequence number, and its backward node's (with the forward thread's id,
    # which forward ops record as 0); one sequence number links the two (ingest/autograd.py)
    seq_nr: Id = msgspec.field(default=ABSENT_ID, name="Sequence number")
    fwd_tid: Id = msgspec.field(default=ABSENT_ID, name="Fwd thread id")
    # `cuda_sync` events: the stream and the cudaEventRecord call an event wait or sync waits on
    wait_stream: Int = msgspec.field(default=-1, name="wait_on_stream")
    wait_correlation: Int = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    # ROCm launches name the kernel they launch; Inductor's Triton ops record their tiles
    kernel: str | None = None
    # ROCm's `hipMemcpy*` calls record their byte count as text ("4194304"); read on runtime calls
    # only (`_launch_args`), any scalar accepted, so that no other event's `size` costs a slice the
    # typed decode
    size: str | Int | float | None = None
    kernel_kwargs: str | None = None
    # what a CPU op recorded about its inputs, kept as JSON text
    dims: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input Dims")
    # early Kineto (PyTorch 1.8) spelled it `Input dims`, as the TensorBoard plugin still reads it;
    # `Input type` was never spelled otherwise, `Input Strides` came later (2023)
    dims_lower: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input dims")
    types: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input type")
    strides: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input Strides")
    concrete: msgspec.Raw = msgspec.field(default=_EMPTY, name="Concrete Inputs")
    # what CUPTI recorded of a kernel's launch (Kineto computes the last two from them)
    registers: Int = msgspec.field(default=-1, name="registers per thread")
    shared_memory: Int = msgspec.field(default=-1, name="shared memory")
    blocks_per_sm: float = msgspec.field(default=NAN, name="blocks per SM")
    occupancy: float = msgspec.field(default=NAN, name="est. achieved occupancy %")
    # the CUDA graph and graph node that ran a kernel, memcpy or memset (libkineto writes both on
    # every such activity with CUDA >= 12; CUPTI's 0: not launched from a graph)
    graph_id: Int = msgspec.field(default=-1, name="graph id")
    graph_node_id: Int = msgspec.field(default=-1, name="graph node id")
    # PyTorch <= 1.10: an op's Python stack, innermost frame first, `;`-joined
    call_stack: str | None = msgspec.field(default=None, name="Call stack")


_NO_ARGS = Args()


class _Fields(msgspec.Struct, gc=False):
    """The event keys ingest reads besides `ph` and `args`."""

    cat: str = ""
    name: str = ""
    pid: Int | str = 0
    tid: Int | str = 0
    ts: float = NAN  # NaN: not given (a GPU activity without it is left out, counted)
    dur: float = NAN


class Complete(_Fields, gc=False, tag_field="ph", tag="X"):
    """A complete ("X") event, `args` decoded in the same pass (the fast path)."""

    args: Args = _NO_ARGS


# No allocation and no allocator's total comes near 2^48 bytes (256 TiB; a GPU holds ≤ 192 GB):
# a memory event's `Bytes` or totals beyond it are damage (2^63 − 1 wrapped the report's sums), and
# that field alone is ignored, counted. A total is never negative (-1: not recorded).
MAX_MEMORY_BYTES = 1 << 48
# A `Bytes` that cannot be read (absent, NaN, a text, a fraction, beyond the bound): the event's size is
# unknown, never 0 (the analysis works it out from the totals or the address, else leaves the event out
# of pairing and sums, counted: docs/memory.md). Far outside ±MAX_MEMORY_BYTES, so no size is taken for it.
UNKNOWN_BYTES = -(1 << 62)
_SIZE, _TOTAL = (-MAX_MEMORY_BYTES, MAX_MEMORY_BYTES), (-1, MAX_MEMORY_BYTES)
_MEMORY_BOUNDS = {"bytes": _SIZE, "total_allocated": _TOTAL, "total_reserved": _TOTAL}  # by field
MemoryBytes = Annotated[int, msgspec.Meta(ge=_SIZE[0], le=_SIZE[1])]
MemoryTotal = Annotated[int, msgspec.Meta(ge=_TOTAL[0], le=_TOTAL[1])]


class MemoryArgs(msgspec.Struct, frozen=True, gc=False):
    """The `args` of a `[memory]` instant event (profile_memory=True); -1 when absent."""

    addr: Int = msgspec.field(default=-1, name="Addr")
    bytes: MemoryBytes = msgspec.field(default=UNKNOWN_BYTES, name="Bytes")  # signed: a free is negative
    total_allocated: MemoryTotal = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: MemoryTotal = msgspec.field(default=-1, name="Total Reserved")
    device_type: Int = msgspec.field(default=-1, name="Device Type")
    device_id: Int = msgspec.field(default=-1, name="Device Id")


_NO_MEMORY_ARGS = MemoryArgs()
MEMORY_FIELDS = ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id")
_memory_fields = attrgetter(*MEMORY_FIELDS)


# Instants other than `[memory]` are not read: any JSON scalar in their fields (and any `args`) is taken
# as it is, so that an odd one never costs its slice the fast path.
_Scalar = str | int | float | bool | None
_INSTANT_CATEGORY = "\x00i"  # every instant's `cat` (the category pass): family _INSTANT


class Instant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    """An instant ("i") event. Its category is read into `category`; `cat`, what the category
    pass reads, is one of its own for every instant: whatever category an instant claims
    (`kernel`, `cpu_op`), it is no range (it has no duration) — only its name makes it a memory
    event (`_memory_columns`). A `kernel` instant was an internal error."""

    cat: ClassVar[str] = _INSTANT_CATEGORY
    category: _Scalar = msgspec.field(default="cpu_instant_event", name="cat")
    name: _Scalar = ""
    pid: _Scalar = 0
    tid: _Scalar = 0
    ts: _Scalar = NAN
    args: msgspec.Raw = _EMPTY


class LegacyInstant(Instant, tag="I"):
    """An instant written with the Trace Event Format's older spelling ("I"): read as an "i" one
    (a `[memory]` event so written is a memory event; a range's category in it is counted as for "i")."""


INSTANT_PHASES = ("i", "I")


# Every other phase of the Trace Event Format: `cat` is a class attribute so that one pass over
# `e.cat` covers all events. Flows and metadata ("s", "t", "f", "M": one flow per kernel) have
# no fields, so the decoder only skips them. Begin/end pairs ("B", "E") carry a category of their
# own, so that counting them rides on the category pass: ingest reads complete events only, and
# says how many pairs it left unread. The other phases, rare, have their category read (into
# `category`): one a complete event would have (`kernel` written as a counter "C", an async
# "b") is counted and said (`NOT_COMPLETE`), never dropped unsaid. "I" is an instant (`LegacyInstant`).
_OTHER_PHASES = ("B", "E", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "N", "O", "D", "M")
_OTHER_PHASES += ("V", "v", "R", "c", "(", ")", "=")
_FIELDLESS_PHASES = frozenset("stfM")
DURATION_PAIRS = "duration events"  # the `ignored` key counting "B"/"E" events
NOT_COMPLETE = "not complete "  # `ignored` key prefix: events of a range's category in another phase, by category
_PAIR_CATEGORY = "\x00B/E"
_OTHER_CATEGORY = "\x00other"  # the other phases whose category is read
_FIELDLESS_CATEGORY = "\x00fieldless"  # flows and metadata: no category read, never a GPU activity
_OTHERS = tuple(
    msgspec.defstruct(
        f"Phase{i}",
        [] if ph in _FIELDLESS_PHASES or ph in "BE" else [("category", _Scalar, msgspec.field(default="", name="cat"))],
        tag_field="ph",
        tag=ph,
        gc=False,
        namespace={
            "cat": _PAIR_CATEGORY if ph in "BE" else _FIELDLESS_CATEGORY if ph in _FIELDLESS_PHASES else _OTHER_CATEGORY
        },
    )
    for i, ph in enumerate(_OTHER_PHASES)
)


class Event(_Fields, gc=False):
    """Any Chrome-trace event, `args` left undecoded (the forgiving path)."""

    ph: str = ""
    args: msgspec.Raw = _EMPTY


_TAGGED_LIST = msgspec.json.Decoder(list[Union[(Complete, Instant, LegacyInstant, *_OTHERS)]])  # type: ignore[misc]
_EVENT_LIST = msgspec.json.Decoder(list[Event])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_ARGS = msgspec.json.Decoder(Args)
_MEMORY_ARGS = msgspec.json.Decoder(MemoryArgs)
_MEMORY_ARGS_LIST = msgspec.json.Decoder(list[MemoryArgs])
_ANY = msgspec.json.Decoder()
_AT = re.compile(r"`\$\[(\d+)\]")

Shape = tuple[str | None, str | None, str | None, str | None]  # dims, types, strides, concrete inputs
GPU_STRING_COLUMNS = (
    "name",
    "grid",
    "block",
    "collective",
    "msg_dtype",
    "process_group",
    "process_group_desc",
    "process_group_ranks",
)


class OpParams(NamedTuple):
    """What a CPU op records besides its inputs (None / -1 when absent): a collective's
    parameters on `record_param_comms`, the tiles of an Inductor Triton launch."""

    collective: str | None
    in_nelems: int
    out_nelems: int
    group_size: int
    msg_dtype: str | None
    process_group: str | None
    process_group_desc: str | None
    process_group_ranks: str | None  # "[0, 1, 2, 3]"
    seq: int
    kernel_kwargs: str | None
    call_stack: str | None  # `Call stack` of older PyTorch, `;`-joined, innermost frame first


class LaunchArgs(NamedTuple):
    """What a runtime launch call records of the activity it launches (None / -1 when absent):
    Kineto's roctracer writer puts a kernel's `grid`, `block` and `shared memory` (LDS) on the
    `hip*Launch*` call and a copy's byte count on the `hipMemcpy*` call (`size`, ROCm 7 `bytes`),
    not on the GPU activity. `columns.ColumnBuilder` hands them to the activities the launch's
    correlation names, where these lack them."""

    grid: str | None  # "[x, y, z]", as a GPU activity's
    block: str | None
    shared_memory: int  # bytes per block
    bytes: int  # a copy's or a set's byte count


class SliceError(Exception):
    """A slice that does not decode: `kind` is "json" (malformed or cut short), "schema"
    (valid JSON, not events) or "read" (the file could not be read)."""

    def __init__(self, kind: str, message: str):
        super().__init__(kind, message)
        self.kind = kind
        self.message = message


@dataclass
class SlicePart:
    """Columns of one slice. Codes index the slice's own tables (`names`, `threads`,
    `shapes`, `gpu_strings`); `ColumnBuilder` maps them onto the trace's."""

    events: int
    # host ranges
    family: np.ndarray  # int8: CPU_OP / ANNOTATION / PYTHON / RUNTIME
    name_code: np.ndarray  # int32 → names
    thread: np.ndarray  # int32 → threads
    ts: np.ndarray  # float64 µs
    end: np.ndarray  # float64 µs
    correlation: np.ndarray  # int64, -1 none (runtime events and CPU ops)
    external_id: np.ndarray  # int64, -1 none (runtime events and CPU ops)
    shape: np.ndarray  # int32 → shapes, -1 none (CPU ops and annotations)
    params: np.ndarray  # int32 → param_sets, -1 none (CPU ops)
    launch_kernel: np.ndarray  # int32 → launch_kernels, -1 none (runtime events)
    seq_nr: np.ndarray  # int64 autograd `Sequence number`, -1 none (CPU ops)
    fwd_tid: np.ndarray  # int64 autograd `Fwd thread id`, -1 none (CPU ops)
    names: list[str]
    threads: list[tuple[int | str, int | str]]
    shapes: list[Shape]
    param_sets: list[OpParams]
    launch_kernels: list[str]
    # runtime calls with a correlation that record a `LaunchArgs`: rows of (host row, code into
    # `launch_arg_sets`), host rows ascending
    launches: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))
    launch_arg_sets: list[LaunchArgs] = field(default_factory=list)
    # GPU activities: numbers, and GPU_STRING_COLUMNS as int32 codes → gpu_strings (-1 none)
    gpu: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_strings: list[str] = field(default_factory=list)
    # GPU-side `ProfilerStep#N` annotations: rows of (step, device, ts, end); `nccl:*` / `gloo:*`
    # ones with step GPU_COMM_RANGE (`columns.ColumnBuilder.build` parts them)
    steps: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))
    # `[memory]` events: MEMORY_FIELDS and "ts" as columns, "thread" codes → memory_threads
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    memory_threads: list[tuple[int | str, int | str]] = field(default_factory=list)
    # Kineto's launch flows ("f", cat `ac2g`) of a slice whose GPU activities lack a correlation
    # (`_flow_links`): rows of (device, stream, flow id) — the pid, tid and id of the flow's end —
    # and its ts
    flow_keys: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int64))
    flow_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    # `cuda_sync` events: rows of (kind code in SYNC_KINDS, device, stream, ts, end, correlation,
    # wait_on_stream, wait_on_cuda_event_record_corr_id); -1 where absent
    syncs: np.ndarray = field(default_factory=lambda: np.empty((0, 8)))
    # what was dropped: field name → values out of range or of the wrong type; also
    # "untimed GPU activities" (left out) and "lone surrogates" (replaced)
    ignored: dict[str, int] = field(default_factory=dict)


def ready() -> int:
    """A worker's first task: importing this module is the start-up work."""
    return os.getpid()


def decode_task(task: tuple) -> list[SlicePart] | SliceError:
    """Run one decode task, in a worker process or inline: ("file", path, start, end, identity)
    reads the text from the file itself — the file the reader opened (`identity`: its device,
    inode, size and modification time), ("framed", "[" + text + "]") brings it. Its parts in
    order (`decode_parts`); errors are returned, not raised."""
    if task[0] == "shared":  # ("shared", shared memory name, length): the framed text
        return _decode_shared(task[1], task[2])
    try:
        framed = task_text(task)
    except OSError as exc:
        return SliceError("read", exc.strerror or str(exc))
    try:
        return decode_parts(framed)
    except SliceError as exc:
        return exc


def task_text(task: tuple) -> bytes | bytearray | memoryview:
    """The text of a ("file", …) or ("framed", …) decode task, framed as a JSON list: read from
    the file (OSError where it cannot be, or is no longer the file the reader opened), or as the
    reader framed it."""
    if task[0] != "file":  # ("framed", text already framed as a list by the reader)
        return task[1]
    _, path, start, end, identity = task
    framed = bytearray(end - start + 2)
    _read_into(path, start, memoryview(framed)[1:-1], identity)
    framed[0], framed[-1] = 0x5B, 0x5D  # "[" and "]"
    return framed


def _decode_shared(name: str, length: int) -> list[SlicePart] | SliceError:
    from multiprocessing.shared_memory import SharedMemory

    shared = SharedMemory(name=name)
    try:
        with shared.buf[:length] as framed:
            return decode_parts(framed)  # no decoded object outlives this call
    except SliceError as exc:
        return exc
    finally:
        shared.close()


CHANGED = "it changed while it was read: replaced or rewritten"


def file_identity(fd: int) -> tuple[int, int, int, int]:
    """What tells one file's state from another's: device, inode, size, modification time."""
    info = os.fstat(fd)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _read_into(path: str, start: int, target: memoryview, identity: tuple[int, ...] | None = None) -> None:
    with open(path, "rb", buffering=0) as handle:
        if identity is not None and file_identity(handle.fileno()) != tuple(identity):
            # a worker opens the trace by name: one renamed over it meanwhile would give it
            # another file's slices (two traces' numbers mixed, exit 0)
            raise OSError(0, CHANGED)
        while len(target):
            if hasattr(os, "preadv"):
                got = os.preadv(handle.fileno(), [target], start)
            else:  # no positional reads here (Windows): this process has its own handle anyway
                handle.seek(start)
                got = handle.readinto(target)
            if not got:
                raise OSError(0, "the file became shorter while it was read")
            target, start = target[got:], start + got


# Events decoded at once where the typed decode fails and each event becomes a struct of its
# own: `{}` is 3 bytes of text and ~100 bytes of struct, so a 4 MB slice of them took 420 MB.
MAX_FORGIVING_EVENTS = 100_000


def decode_parts(framed: bytes | bytearray | memoryview) -> list[SlicePart]:
    """The columns of the events in `framed` (the JSON text of a list of events): one part, or —
    where the forgiving path would hold more than MAX_FORGIVING_EVENTS events at once — one part
    per that many events, in order (what a slice holds is then bounded by its count of events,
    not only by its bytes). Raises `SliceError`."""
    try:
        return [decode_slice(framed)]
    except _Dense as dense:
        raws, step = dense.raws, MAX_FORGIVING_EVENTS
        return [decode_slice(b"[" + b",".join(raws[i : i + step]) + b"]") for i in range(0, len(raws), step)]


def decode_slice(framed: bytes | bytearray | memoryview) -> SlicePart:
    """Columns of the events in `framed` (the JSON text of a list of events).
    Raises `SliceError`."""
    ignored: Counter[str] = Counter()
    try:
        try:
            events, forgiving = _decode_events(framed)
        except _Damaged as damaged:  # numbers out of range, lone surrogates, NaN: cleaned, then decoded
            events, forgiving = _decode_events(_sanitized(framed, damaged.error, ignored), again=True)
    except RecursionError:
        raise SliceError("deep", "JSON nested too deeply") from None
    family = _families(events, ignored)
    if forgiving:
        not_range = np.fromiter([e.ph != "X" for e in events], bool, len(events))
        odd = np.flatnonzero(not_range & (family >= 0))
        _count_not_complete([events[i].cat for i in odd.tolist() if events[i].ph not in ("B", "E")], ignored)
        family[not_range] = -1
        pairs = sum(e.ph in ("B", "E") for e in events)
        if pairs:
            ignored[DURATION_PAIRS] += pairs
        memory = [e.ph in INSTANT_PHASES and e.name == MEMORY_EVENT for e in events]
        family[np.fromiter(memory, bool, len(events))] = _INSTANT
    _count_unknown_gpu(events, family, forgiving, ignored)

    def pick(mask: np.ndarray, unread: frozenset[str] = frozenset()) -> tuple[list[Any], list[Args], np.ndarray]:
        chosen = list(compress(events, mask.tolist()))
        args = [_forgiving_args(e.args, ignored, unread) for e in chosen] if forgiving else [e.args for e in chosen]
        return chosen, args, family[mask]

    try:
        part = _host_columns(*pick((family >= 0) & (family < 10), _UNREAD_ON_HOST), ignored)
        part.events = len(events)
        part.gpu, part.gpu_strings = _gpu_columns(*pick((family >= 10) & (family < _GPU_STEP)), ignored)
        if part.gpu.pop("_writer_without_ids", False):  # never in modern traces
            part.flow_keys, part.flow_ts = _flow_links(framed)
        part.steps = _gpu_steps(*pick(family == _GPU_STEP)[:2])
        if (family == _INSTANT).any():
            part.memory, part.memory_threads = _memory_columns(events, family == _INSTANT, forgiving, ignored)
        part.syncs = _gpu_syncs(*pick(family == _GPU_SYNC)[:2], ignored)
    except RecursionError:  # inside an args value decoded on its own
        raise SliceError("deep", "JSON nested too deeply") from None
    _cut_long_strings(part, ignored)
    part.ignored = dict(ignored)
    return part


NOT_OBJECTS = "entries not objects"  # the `ignored` key counting traceEvents entries that are no JSON object
LONG_STRINGS = "long strings"  # the `ignored` key counting them


def _cut(texts: list[Any], ignored: Counter[str]) -> list[Any]:
    """Names and labels past MAX_TEXT characters cut to it, marked with CUT_MARK (what follows —
    classifying, demangling, printing — then costs what a real name costs)."""
    long = [i for i, text in enumerate(texts) if isinstance(text, str) and len(text) > MAX_TEXT]
    for i in long:
        texts[i] = cut_long(texts[i])
    if long:
        ignored[LONG_STRINGS] += len(long)
    return texts


def _drop_long(texts: Sequence[Any], ignored: Counter[str]) -> tuple[Any, ...]:
    """Recorded JSON (input dims, types…) past MAX_TEXT characters: not recorded (a cut would
    not be JSON), counted."""
    long = [isinstance(text, str) and len(text) > MAX_TEXT for text in texts]
    ignored[LONG_STRINGS] += sum(long)  # called only when one is long
    return tuple(None if cut else text for text, cut in zip(texts, long, strict=True))


def _cut_long_strings(part: SlicePart, ignored: Counter[str]) -> None:
    """Every string a slice hands on is at most MAX_TEXT characters (counted in `ignored`)."""
    _cut(part.names, ignored)
    _cut(part.gpu_strings, ignored)
    _cut(part.launch_kernels, ignored)
    for i, shape in enumerate(part.shapes):
        if any(isinstance(text, str) and len(text) > MAX_TEXT for text in shape):
            part.shapes[i] = _drop_long(shape, ignored)  # type: ignore[assignment]
    for i, params in enumerate(part.param_sets):
        if any(isinstance(text, str) and len(text) > MAX_TEXT for text in params):
            part.param_sets[i] = OpParams(*_cut(list(params), ignored))


class _Dense(Exception):
    """A slice of more events than the forgiving path decodes at once: its events' texts."""

    def __init__(self, raws: list[msgspec.Raw]):
        self.raws = raws


class _Damaged(Exception):
    """A slice msgspec rejects that may still be JSON (Python's parser is more lenient)."""

    def __init__(self, error: SliceError):
        self.error = error


def _decode_events(framed: bytes | bytearray | memoryview, again: bool = False) -> tuple[Sequence[Any], bool]:
    """The events and whether they are the forgiving `Event`s (raw args). Raises `SliceError`,
    or `_Damaged` when the text may be cleaned and decoded `again`."""

    def damaged(kind: str, exc: Exception) -> Exception:
        error = SliceError(kind, str(exc))
        return error if again else _Damaged(error)

    try:
        return _TAGGED_LIST.decode(framed), False
    except msgspec.ValidationError:
        # An event without a known `ph`, or an arg of an unexpected type (ids written as
        # strings, say): decode strictly with raw args, then each needed `args` forgivingly —
        # at most MAX_FORGIVING_EVENTS at a time (`decode_parts`).
        _check_density(framed)
        try:
            return _EVENT_LIST.decode(framed), True
        except msgspec.ValidationError as exc:
            raise damaged("schema", exc) from None
        except msgspec.DecodeError as exc:
            raise damaged("json", exc) from None
    except msgspec.DecodeError as exc:
        raise damaged("json", exc) from None


def _check_density(framed: bytes | bytearray | memoryview) -> None:
    """Raise `_Dense` where `framed` holds more than MAX_FORGIVING_EVENTS events. Each `{` may
    start one, so most slices are passed by a count of bytes; the events are counted (as raw
    texts) only where there are more braces than that."""
    if np.count_nonzero(np.frombuffer(framed, np.uint8) == 0x7B) <= MAX_FORGIVING_EVENTS:
        return
    try:
        raws = _RAW_LIST.decode(framed)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return  # not a list of JSON values: the forgiving decode says what is wrong
    if len(raws) > MAX_FORGIVING_EVENTS:
        raise _Dense(raws)


_INT_DIGITS = 4000  # Python refuses to read an integer of more than 4,300 digits (sys.int_info)


def _bounded_int(literal: str) -> int | float:
    return int(literal) if len(literal) <= _INT_DIGITS else math.inf


def python_loads(text: bytes | str) -> Any:
    """JSON as Python's parser reads it (numbers beyond float or int64 range, NaN, lone
    surrogates), an integer of thousands of digits read as infinity: out of every column's range
    like 2^70, where Python's own limit on digits refused the whole text (a trace lost to one
    number)."""
    return json.loads(text, parse_int=_bounded_int)


def _sanitized(framed: bytes | bytearray | memoryview, error: SliceError, ignored: Counter[str]) -> bytes:
    """The slice re-encoded after Python's parser read it (it accepts numbers beyond float or
    int64 range, NaN and lone surrogates): such top-level fields of an event or of its args are
    dropped and counted in `ignored`, lone surrogates replaced by U+FFFD. Raises `error` when
    even Python cannot read the text."""
    try:
        events = python_loads(bytes(framed))
    except (ValueError, UnicodeDecodeError):
        raise error from None
    if not isinstance(events, list):
        raise error
    objects = [event for event in events if isinstance(event, dict)]
    if len(objects) < len(events):  # `null`, a number, a text or a list among the events: skipped, counted
        ignored[NOT_OBJECTS] += len(events) - len(objects)
        events = objects
    for event in events:
        _drop_bad_numbers(event, ("ts", "dur", "pid", "tid"), ignored, nulls=True)
        _whole_ids(event)
        _drop_wrong_types(event, ignored)
        if isinstance(event.get("args"), dict):
            _drop_bad_numbers(event["args"], tuple(event["args"]), ignored)
    events = without_surrogates(events, ignored)
    try:
        return msgspec.json.encode(events)
    except (msgspec.EncodeError, OverflowError, UnicodeEncodeError):
        raise error from None


def bad_number(value: object) -> bool:
    """A number JSON may hold but a column may not: not finite, or an integer beyond int64."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX


def _drop_bad_numbers(
    mapping: dict[str, Any], keys: tuple[str, ...], ignored: Counter[str], nulls: bool = False
) -> None:
    for key in keys:
        value = mapping.get(key)
        if (
            (nulls and key in mapping and value is None)
            or bad_number(value)
            or (isinstance(value, list) and any(bad_number(v) for v in value))
        ):
            del mapping[key]
            ignored[key] += 1


# The event keys the typed decode reads, with the JSON types it accepts for them (bool is no number).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "ph": (str,),
    "cat": (str,),
    "name": (str,),
    "pid": (int, str),
    "tid": (int, str),
    "ts": (int, float),
    "dur": (int, float),
}


def _whole(value: object) -> object:
    """A whole float within int64 (`100.0`) as that integer; any other value as it is."""
    if isinstance(value, float) and value.is_integer() and _INT64_MIN <= value <= _INT64_MAX:
        return int(value)
    return value


def _whole_ids(event: dict[str, Any]) -> None:
    """A `pid` or `tid` written as a whole float (`"tid": 100.0`) read as that integer, as an id in
    `args` is (`_loose_int`); a fraction stays a float, dropped and counted (`_drop_wrong_types`)."""
    for key in ("pid", "tid"):
        if key in event:
            event[key] = _whole(event[key])


def _drop_wrong_types(event: dict[str, Any], ignored: Counter[str]) -> None:
    """An event key of a type the trace format does not give it (`"ts": "10"`, `"name": 3`,
    `"cat": null`) costs that key alone: dropped and counted, as a number out of range is. A GPU
    activity left without `ts` or `dur` is then left out (counted)."""
    for key, types in _FIELD_TYPES.items():
        value = event.get(key)
        if key in event and (isinstance(value, bool) or not isinstance(value, types)):
            del event[key]
            ignored[key] += 1


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(value: Any, ignored: Counter[str]) -> Any:
    """`value` with lone surrogates in its strings (keys too) replaced, walked without recursion."""

    def clean(text: str) -> str:
        if _LONE_SURROGATE.search(text):
            ignored["lone surrogates"] += 1
            return _LONE_SURROGATE.sub("\ufffd", text)
        return text

    root = [value]
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in list(items):
            if isinstance(item, str):
                node[key] = clean(item)
            elif isinstance(item, (dict, list)):
                stack.append(item)
            if isinstance(node, dict) and isinstance(key, str) and _LONE_SURROGATE.search(key):
                node[clean(key)] = node.pop(key)
    return root[0]


def _keep(
    keep: np.ndarray, events: list[Any], args: list[Args], family: np.ndarray
) -> tuple[list[Any], list[Args], np.ndarray]:
    chosen = keep.tolist()
    return list(compress(events, chosen)), list(compress(args, chosen)), family[keep]


def schema_problem(message: str, first_event: int) -> str:
    """msgspec's "... - at `$[12].ts`" with the index counted from the trace's first event."""
    return _AT.sub(lambda m: f"`traceEvents[{first_event + int(m.group(1))}]", message)


# `dims_lower` (`Input dims`, PyTorch 1.8) stands in for `dims` where that is not given (`_shape_codes`)
_shape_fields = attrgetter("dims", "dims_lower", "types", "strides", "concrete")


def _families(events: Sequence[Any], ignored: Counter[str]) -> np.ndarray:
    """Each event's family code (-1: none), worked out once per distinct category — older or
    differently cased names included — and, for PyTorch 1.x `Operator` ranges, once per distinct
    name (a `ProfilerStep#N` is an annotation): per event only a dict lookup (a legacy trace's
    events were looked at one by one, 10 % of its decode)."""
    cats = [e.cat for e in events]
    codes = {cat: _family_of(cat) for cat in set(cats)}
    if codes.get(_PAIR_CATEGORY, 0) < 0:
        ignored[DURATION_PAIRS] += cats.count(_PAIR_CATEGORY)
    family = np.fromiter(map(codes.__getitem__, cats), np.int8, len(cats))
    if _OTHER_CATEGORY in codes:  # events of the rare phases (typed decode): their own category counted
        other = np.flatnonzero(family == _OTHER)
        _count_not_complete([events[i].category for i in other.tolist()], ignored)
        family[other] = -1
    if _INSTANT_CATEGORY in codes:  # instants (typed decode) claiming a range's category, too
        instants = np.flatnonzero(family == _INSTANT).tolist()
        _count_not_complete([getattr(events[i], "category", None) for i in instants], ignored)
    legacy = np.flatnonzero(family == _LEGACY_OP)
    if len(legacy):
        names = [events[i].name for i in legacy.tolist()]
        step = {name: step_number(name) is not None if isinstance(name, str) else False for name in set(names)}
        family[legacy] = np.where(np.fromiter(map(step.__getitem__, names), bool, len(names)), ANNOTATION, CPU_OP)
    return family


_OTHER = -2  # the family of `_OTHER_CATEGORY` until its events are counted


def _family_of(cat: Any) -> int:
    """A category's family code (-1: none; older or differently cased names included)."""
    if cat == _INSTANT_CATEGORY:
        return _INSTANT
    if cat == _OTHER_CATEGORY:
        return _OTHER
    code = _FAMILY.get(cat, -1) if isinstance(cat, str) else -1
    return code if code >= 0 else (_LEGACY_FAMILY.get(cat.lower(), -1) if isinstance(cat, str) else -1)


def _count_not_complete(categories: list[Any], ignored: Counter[str]) -> None:
    """Count, per category, events recorded in a phase that is no range (an instant, an async
    or counter event, no `ph` at all) under a category ingest reads as complete ranges (a
    `kernel`, a `cpu_op`): `ignored[NOT_COMPLETE + cat]`. Begin/end pairs are counted apart."""
    for cat, count in Counter(categories).items():
        family = _family_of(cat)
        if family >= 0 and family != _INSTANT:
            ignored[NOT_COMPLETE + str(cat)[:60]] += count


def _count_unknown_gpu(events: Sequence[Any], family: np.ndarray, forgiving: bool, ignored: Counter[str]) -> None:
    """Count, per category, the complete events of an unknown category — or of none — that look
    like GPU activities (a `device` or `stream` arg and a duration): `ignored[UNKNOWN_GPU + cat]`;
    and the legacy autograd export's GPU ranges: `ignored[LEGACY_GPU_RANGES]`."""
    rows = np.flatnonzero(family < 0).tolist()
    if not rows:
        return
    for i in rows:
        event = events[i]
        if event.cat in _NOT_GPU or (event.ph != "X" if forgiving else not isinstance(event, Complete)):
            continue
        if not math.isfinite(event.dur):
            continue
        if event.pid == LEGACY_GPU_PID and not event.cat:
            ignored[LEGACY_GPU_RANGES] += 1
            continue
        args = _forgiving_args(event.args) if forgiving else event.args
        if args.device >= 0 or args.stream >= 0:
            ignored[UNKNOWN_GPU + event.cat[:60]] += 1


# Categories that are never GPU activities: flows, the profiler's span, and Kineto's other
# activity types (markers, counters, host-side runtimes; libkineto/include/ActivityType.h). No
# category ("") is not among them: a complete event without one that carries a device or stream is
# counted. Flows and metadata (typed decode) carry `_FIELDLESS_CATEGORY`: skipped here at one set
# lookup, as "" had skipped them (Kineto writes two flows a kernel).
_NOT_GPU = frozenset(
    {_FIELDLESS_CATEGORY}
    | {"ac2g", "async", "async_gpu", "async_cpu_to_gpu", "fwdbwd", "forward_backward", "fwd_bwd", "Trace"}
    | {"external_correlation", "cpu_instant_event", "overhead", "cuda_sync", "cuda_event", "cuda_profiler_range"}
    | {"glow_runtime", "mtia_runtime", "mtia_ccp_events", "mtia_insight", "mtia_counters", "hardware_counters"}
    | {"xpu_runtime", "xpu_driver", "xpu_sync", "privateuse1_runtime", "privateuse1_driver"}
)


def _numbering() -> defaultdict:
    """A dict that numbers new keys 0, 1, 2… as it meets them (in insertion order)."""
    return defaultdict(itertools.count().__next__)


# The passes below are list comprehensions on purpose: on Python 3.11+ they read struct
# fields faster than `map(attrgetter(...))`.


def _host_columns(events: list[Any], args: list[Args], family: np.ndarray, ignored: Counter[str]) -> SlicePart:
    n = len(events)
    ts = np.fromiter([e.ts for e in events], np.float64, n)
    timed = np.abs(ts) < MAX_TIME_US  # NaN (not given) and inf too
    if not timed.all():  # a range without a usable start is left out (no `dur`: an instant)
        ignored["host ranges without a ts"] += int((~timed).sum())
        return _host_columns(*_keep(timed, events, args, family), ignored)
    dur = np.fromiter([e.dur for e in events], np.float64, n)
    # a duration no process lives, or one ending past the bound though each is within it: as if not given
    huge = (np.abs(dur) >= MAX_TIME_US) | (np.abs(ts + dur) >= MAX_TIME_US)
    if huge.any():
        ignored["dur"] += int(huge.sum())
        dur[huge] = NAN
    names, threads = _numbering(), _numbering()
    name_code = np.fromiter([names[e.name] for e in events], np.int32, n)
    thread = np.fromiter([threads[e.pid, e.tid] for e in events], np.int32, n)
    with_ids = (family == RUNTIME) | (family == CPU_OP)
    # and the `nccl:*` / `gloo:*` annotations: the step split counts the kernels their External id
    # names as communication (as the plugin does). Linking reads the ids of CPU ops only, so none
    # of them becomes a kernel's op; the other annotations' ids are not read (most of some traces)
    comm_name = np.fromiter([name in COMM_OPS for name in names], bool, len(names))
    with_ids |= (family == ANNOTATION) & comm_name[name_code]
    correlation = np.full(n, -1, np.int64)
    external_id = np.full(n, -1, np.int64)
    if with_ids.any():  # only these rows: Python frames and other annotations (most of some traces) carry none
        id_args = list(compress(args, with_ids.tolist()))
        m = len(id_args)
        correlation[with_ids] = _ids(np.fromiter([a.correlation for a in id_args], np.int64, m), "correlation", ignored)
        ids = _ids(np.fromiter([a.external_id for a in id_args], np.int64, m), "External id", ignored)
        if (ids < 0).any():  # older runtime events: `external id`
            lower = _ids(np.fromiter([a.external_id_lower for a in id_args], np.int64, m), "external id", ignored)
            ids = np.fmax(ids, lower)
        external_id[with_ids] = ids
    is_op = family == CPU_OP
    seq_nr = np.full(n, -1, np.int64)
    fwd_tid = np.full(n, -1, np.int64)
    shape = np.full(n, -1, np.int32)
    params = np.full(n, -1, np.int32)
    shapes: list[Shape] = []
    param_sets: list[OpParams] = []
    if is_op.any():  # read from the CPU ops' args only, as the ids above
        op_args = list(compress(args, is_op.tolist()))
        m = len(op_args)
        seq_nr[is_op] = _ids(np.fromiter([a.seq_nr for a in op_args], np.int64, m), "Sequence number", ignored)
        fwd_tid[is_op] = _ids(np.fromiter([a.fwd_tid for a in op_args], np.int64, m), "Fwd thread id", ignored)
        params[is_op], param_sets = _param_codes(op_args)
    # annotations too: older PyTorch records a collective's tensors on its `nccl:*` range
    shaped = is_op | (family == ANNOTATION)
    if shaped.any():
        shape[shaped], shapes = _shape_codes(list(compress(args, shaped.tolist())))
    launch_kernel = np.full(n, -1, np.int32)
    kernels = _numbering()
    launches, launch_arg_sets = _launch_columns(args, family == RUNTIME, correlation, launch_kernel, kernels)
    part = SlicePart(
        events=0,
        family=family.astype(np.int8),
        name_code=name_code,
        thread=thread,
        ts=ts,
        end=ts + np.fmax(dur, 0.0),  # no `dur` (NaN): an instant
        correlation=correlation,
        external_id=external_id,
        shape=shape,
        params=params,
        launch_kernel=launch_kernel,
        seq_nr=seq_nr,
        fwd_tid=fwd_tid,
        names=list(names),
        threads=list(threads),
        shapes=shapes,
        param_sets=param_sets,
        launch_kernels=list(kernels),
    )
    part.launches, part.launch_arg_sets = launches, launch_arg_sets
    return part


def _launch_columns(
    args: list[Args], is_runtime: np.ndarray, correlation: np.ndarray, launch_kernel: np.ndarray, kernels: defaultdict
) -> tuple[np.ndarray, list[LaunchArgs]]:
    """Of the runtime calls: the kernel each names (`launch_kernel`, codes into `kernels`, in place),
    and the rows of those with a correlation that record launch arguments (`SlicePart.launches`)
    with their distinct `LaunchArgs`, read once per distinct combination. A CUDA trace's calls
    record none: one scan says so (numbering every call's fields cost a CUDA slice 4 % of its
    decode, the scan 1–2 %), and only then are they numbered."""
    empty = np.empty((0, 2), np.int64), []
    rows = np.flatnonzero(is_runtime)
    if not len(rows):
        return empty
    calls = list(compress(args, is_runtime.tolist()))
    kernels[None] = -1
    launch_kernel[rows] = [kernels[a.kernel] for a in calls]
    del kernels[None]
    recorded = [
        a.grid is not None or a.size is not None or a.shared_memory >= 0 or a.bytes >= 0 or a.block is not None
        for a in calls
    ]  # a list: faster than a generator over a CUDA slice's calls, all False
    if not any(recorded):
        return empty
    keys = _numbering()
    codes = np.fromiter([keys[a.grid, a.block, a.shared_memory, a.size, a.bytes] for a in calls], np.int64, len(rows))
    if len(_LAUNCH_ARGS) > _CACHE_LIMIT:
        _LAUNCH_ARGS.clear()
    sets = [_cached_launch_args(key) for key in keys]
    kept = np.array([a is not None for a in sets], bool)
    renumbered = np.where(kept, np.cumsum(kept) - 1, -1)[codes]
    with_args = (renumbered >= 0) & (correlation[rows] >= 0)
    launches = np.column_stack((rows[with_args], renumbered[with_args])).astype(np.int64, copy=False)
    return launches, [a for a in sets if a is not None]


# `LaunchArgs` by what a call records, kept across the slices a process decodes (the same launch
# configurations recur in every step); emptied past _CACHE_LIMIT
_LAUNCH_ARGS: dict[tuple[Any, ...], LaunchArgs | None] = {}


def _cached_launch_args(fields: tuple[Any, ...]) -> LaunchArgs | None:
    found = _LAUNCH_ARGS.get(fields, _NO_LAUNCH_ARGS)
    if found is _NO_LAUNCH_ARGS:
        found = _LAUNCH_ARGS[fields] = _launch_args(*fields)
    return found


def _launch_args(
    grid: tuple[int, ...] | None, block: tuple[int, ...] | None, shared: int, size: object, count: int
) -> LaunchArgs | None:
    """A runtime call's `LaunchArgs` (None: it records none). A byte count is `size` (ROCm's
    `hipMemcpy*`, as text), else `bytes` (ROCm 7); a negative one is none."""
    written = _loose_int(size) if size is not None else -1
    nbytes = written if written >= 0 else max(count, -1)
    launch = LaunchArgs(_dims_text(grid), _dims_text(block), max(shared, -1), nbytes)
    return None if launch == _NO_LAUNCH_ARGS else launch


_NO_LAUNCH_ARGS = LaunchArgs(None, None, -1, -1)


def _dims_text(dims: tuple[int, ...] | None) -> str | None:
    """Launch dimensions as a GPU activity's `grid` / `block` text: "[x, y, z]"."""
    return None if dims is None else cut_long("[" + ", ".join(map(str, dims)) + "]")


def _ids(values: np.ndarray, key: str, ignored: Counter[str]) -> np.ndarray:
    """An id column as read: -1 where none was given, and where a negative one was — no id is
    negative (Kineto's and PyTorch's are unsigned counters and device and stream numbers), and
    one so written read as none would unlink a launch from its kernels unsaid: counted under the
    trace's `key`, as a value beyond int64 is. (A `cuda_sync`'s -1 stream or wait is Kineto's
    "none": `_gpu_syncs` reads those as written.)"""
    written = (values < 0) & (values != ABSENT_ID)
    if written.any():
        ignored[key] += int(np.count_nonzero(written))
    return np.maximum(values, -1)


def _shape_codes(args: list[Args]) -> tuple[np.ndarray, list[Shape]]:
    """One code per distinct recorded (dims, types, strides, concrete inputs), and their
    canonical JSON texts (decoded and re-encoded, so spacing never splits a shape)."""
    keys = _numbering()  # the five raw texts (`Input dims` too) joined by NUL (never inside JSON text), numbered as met
    codes = np.fromiter([keys[b"\0".join(_shape_fields(a))] for a in args], np.int32, len(args))
    if len(_SHAPES) > _CACHE_LIMIT:
        _SHAPES.clear()
    if len(_CANONICAL) > _CACHE_LIMIT:
        _CANONICAL.clear()
    shapes = []
    for key in keys:  # in code order
        shape = _SHAPES.get(key)
        if shape is None:
            dims, dims_lower, *rest = key.split(b"\0")
            raws = (dims or dims_lower, *rest)  # `Input Dims`, else the older `Input dims`
            shape = _SHAPES[key] = tuple(_canonical_json(raw, _CANONICAL) for raw in raws)  # type: ignore[assignment]
        shapes.append(shape)
    return codes, shapes


# Shapes and canonical texts of recorded inputs, kept across the slices a process decodes (the
# same shapes recur in every step); emptied when they grow past the limit.
_SHAPES: dict[bytes, Shape] = {}
_CANONICAL: dict[bytes, str | None] = {}
_CACHE_LIMIT = 1 << 16


_op_params = attrgetter(*OpParams._fields)


def _param_codes(args: list[Args]) -> tuple[np.ndarray, list[OpParams]]:
    """One code per distinct `OpParams` (-1: the op records none of them). Every op's fields are
    numbered in one C-level pass; whether a set records anything is asked once per distinct set
    (an op-by-op test of eleven fields took as long as the numbering)."""
    keys = _numbering()
    codes = np.fromiter(map(keys.__getitem__, map(_op_params, args)), np.int64, len(args))
    distinct = list(keys)
    kept = np.array([_records_any(key) for key in distinct], dtype=bool)
    renumbered = np.where(kept, np.cumsum(kept) - 1, -1).astype(np.int32)
    sets = [OpParams(*key[:7], _ranks_text(key[7]), *key[8:]) for key, keep in zip(distinct, kept, strict=True) if keep]
    return renumbered[codes] if len(codes) else np.empty(0, np.int32), sets


def _records_any(key: tuple[Any, ...]) -> bool:
    """Whether an op's `OpParams` fields record anything: a text, or a count or sequence ≥ 0."""
    collective, in_nelems, out_nelems, group_size, msg_dtype, pg, pg_desc, pg_ranks, seq, kwargs, stack = key
    texts = (collective, msg_dtype, pg, pg_desc, pg_ranks, kwargs, stack)
    return any(t is not None for t in texts) or max(in_nelems, out_nelems, group_size, seq) >= 0


def _ranks_text(ranks: str | tuple[int, ...] | None) -> str | None:
    return ranks if ranks is None or isinstance(ranks, str) else "[" + ", ".join(map(str, ranks)) + "]"


def _canonical_json(raw: bytes, cache: dict[bytes, str | None]) -> str | None:
    if not raw:
        return None
    key = bytes(raw)
    if key not in cache:
        try:
            value = _ANY.decode(key)
            cache[key] = None if value is None else msgspec.json.encode(value).decode()  # null: not recorded
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            cache[key] = None
    return cache[key]


_GPU_INTS = ("device", "stream", "correlation", "external_id", "bytes", "in_nelems", "out_nelems", "group_size", "seq")
_GPU_INTS += ("external_id_lower", "registers", "shared_memory")  # the first folded into external_id
_GPU_INTS += ("graph_id", "graph_node_id")  # 0 (CUPTI: not graph-launched) read as -1
_GPU_IDS = {"device": "device", "stream": "stream", "correlation": "correlation"}  # field: the trace's key
_GPU_IDS |= {"external_id": "External id", "external_id_lower": "external id"}
_GPU_FLOATS = ("blocks_per_sm", "occupancy")  # NaN: not recorded
_gpu_floats = attrgetter(*_GPU_FLOATS)
_gpu_ints = attrgetter(*_GPU_INTS)
_GPU_ARG_STRINGS = GPU_STRING_COLUMNS[1:]
_gpu_strings = attrgetter(*_GPU_ARG_STRINGS)


def _gpu_columns(
    events: list[Any], args: list[Args], family: np.ndarray, ignored: Counter[str]
) -> tuple[dict[str, np.ndarray], list[str]]:
    n = len(events)
    ts = np.fromiter([e.ts for e in events], np.float64, n)
    dur = np.fromiter([e.dur for e in events], np.float64, n)
    timed = np.isfinite(ts) & np.isfinite(dur)
    if not timed.all():  # an activity without a usable start or duration is left out
        ignored["untimed GPU activities"] += int((~timed).sum())
        return _gpu_columns(*_keep(timed, events, args, family), ignored)
    ints = np.fromiter(chain.from_iterable([_gpu_ints(a) for a in args]), np.int64, n * len(_GPU_INTS))
    columns = dict(zip(_GPU_INTS, ints.reshape(n, len(_GPU_INTS)).T, strict=True))
    for name, key in _GPU_IDS.items():
        columns[name] = _ids(columns[name], key, ignored)
    columns["external_id"] = np.fmax(columns["external_id"], columns.pop("external_id_lower"))
    for key in ("graph_id", "graph_node_id"):  # CUPTI numbers graphs and nodes from 1; 0 is "none"
        columns[key] = np.where(columns[key] > 0, columns[key], -1)
    floats = np.fromiter(chain.from_iterable([_gpu_floats(a) for a in args]), np.float64, n * len(_GPU_FLOATS))
    columns.update(zip(_GPU_FLOATS, floats.reshape(n, len(_GPU_FLOATS)).T, strict=True))
    # device and stream fall back to pid and tid where those are numbers (older exporters)
    device, stream = columns["device"], columns["stream"]
    # the roctracer writer before pytorch/kineto#922 recorded neither a correlation nor a device: its
    # launch flows link such activities (`_flow_links`). Only activities missing both: one whose
    # correlation alone is unusable stays unlinked, whatever slice its flow fell in (the flow of an
    # activity ending a slice is in the next: a link that depended on where slices were cut)
    columns["_writer_without_ids"] = bool(((columns["correlation"] < 0) & (device < 0)).any())
    if (device < 0).any() or (stream < 0).any():
        numbers = np.array([(_number(e.pid), _number(e.tid)) for e in events], dtype=np.int64).reshape(n, 2)
        columns["device"] = np.where(device >= 0, device, numbers[:, 0])
        columns["stream"] = np.where(stream >= 0, stream, numbers[:, 1])
    columns["kind"] = (family - 10).astype(np.int8)
    columns["ts"], columns["dur"] = ts, dur
    strings = _numbering()
    columns["name"] = np.fromiter([strings[e.name] for e in events], np.int32, n)
    # launch dims, collective and dtype: one code per distinct combination, then split
    combos = _numbering()
    combo = np.fromiter([combos[_gpu_strings(a)] for a in args], np.int32, n)
    strings[None] = -1  # an absent grid, block, collective or dtype
    width = len(_GPU_ARG_STRINGS)
    table = np.array([[strings[value] for value in key] for key in combos], dtype=np.int32).reshape(-1, width)
    del strings[None]
    for k, key in enumerate(_GPU_ARG_STRINGS):
        columns[key] = table[combo, k]
    texts = [key if isinstance(key, str) else "[" + ", ".join(map(str, key)) + "]" for key in strings]
    return columns, texts


def _gpu_steps(events: list[Any], args: list[Args]) -> np.ndarray:
    """(step, device, ts, end) of `gpu_user_annotation` ranges named `ProfilerStep#N`, and of those
    named `nccl:*` / `gloo:*` (COMM_OPS) with step GPU_COMM_RANGE: the plugin's step split counts
    them as communication, as the host-side ones (ingest/step_split.py)."""
    rows = []
    for event, arg in zip(events, args, strict=True):
        step = step_number(event.name)
        if step is None:
            if event.name not in COMM_OPS:
                continue
            step = GPU_COMM_RANGE
        device = arg.device if arg.device >= 0 else (event.pid if isinstance(event.pid, int) else -1)
        if within_time_bound(event.ts, event.dur):
            rows.append((step, device, event.ts, event.ts + event.dur))
    return np.array(rows, dtype=np.float64).reshape(-1, 4)


def _memory_columns(
    events: Sequence[Any], instant: np.ndarray, forgiving: bool, ignored: Counter[str]
) -> tuple[dict[str, np.ndarray], list[tuple[int | str, int | str]]]:
    """Columns of the `[memory]` instant events ("i", or "I" as older writers spell it); one
    without a usable ts — none, or beyond 2^53 µs, which no reader takes as a time — is left out,
    counted, as ranges are (`within_time_bound`). Their `args` are decoded here, typed, else key by key."""
    chosen = [e for e in compress(events, instant.tolist()) if e.name == MEMORY_EVENT]
    # only instants are memory events (a complete event may share the category)
    if forgiving:
        chosen = [e for e in chosen if e.ph in INSTANT_PHASES]
    else:
        chosen = [e for e in chosen if isinstance(e, Instant)]
    ts = np.fromiter([e.ts if type(e.ts) in (int, float) else NAN for e in chosen], np.float64, len(chosen))
    timed = within_time_bound(ts, 0.0)
    if not timed.all():
        ignored["memory events without a ts"] += int((~timed).sum())
        chosen = list(compress(chosen, timed.tolist()))
        ts = ts[timed]
    n = len(chosen)
    args = _memory_args([e.args for e in chosen], ignored)
    values = np.fromiter(chain.from_iterable([_memory_fields(a) for a in args]), np.int64, n * len(MEMORY_FIELDS))
    columns = dict(zip(MEMORY_FIELDS, values.reshape(n, len(MEMORY_FIELDS)).T, strict=True))
    raw_threads = _numbering()  # (pid, tid) as written, then as the host ranges' (a few distinct ones)
    codes = np.fromiter([raw_threads[e.pid, e.tid] for e in chosen], np.int64, n)
    threads = _numbering()
    remap = np.array([threads[_thread_id(pid), _thread_id(tid)] for pid, tid in raw_threads], np.int64)
    columns["thread"] = remap[codes] if n else codes
    columns["ts"] = ts
    return columns, list(threads)


def _memory_args(raws: list[msgspec.Raw], ignored: Counter[str]) -> list[MemoryArgs]:
    """The args of memory events: all in one typed decode, else each on its own, forgivingly."""
    try:
        return _MEMORY_ARGS_LIST.decode(b"[" + b",".join(raw or b"{}" for raw in raws) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError):
        return [_forgiving_memory_args(raw, ignored) for raw in raws]


def _thread_id(value: object) -> int | str:
    """A pid or tid as the host ranges' (an int or a string, a whole float as that int — as
    `_whole_ids` reads a range's; anything else: -1)."""
    value = _whole(value)
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else -1


def _memory_int(value: object) -> int | None:
    """A `[memory]` arg as an int64: an int, a float or text holding a whole number ("100",
    100.0); None for anything else — a fraction (100.5 is no size: not cut to 100), NaN, inf, a
    bool, null, a list."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2.0**63 else None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        number = int(value)
    except (ValueError, OverflowError):
        return None
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _forgiving_memory_args(raw: msgspec.Raw, ignored: Counter[str]) -> MemoryArgs:
    """`[memory]` args key by key when the typed decode fails; an unusable key is counted and
    keeps its default (a size: UNKNOWN_BYTES, never 0; a total: -1, not recorded)."""
    if not raw:
        return _NO_MEMORY_ARGS
    try:
        return _MEMORY_ARGS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    loose = _loose_args(raw)
    if loose is None:
        ignored["args"] += 1
        return _NO_MEMORY_ARGS
    values = {}
    for info in msgspec.structs.fields(MemoryArgs):
        if info.encode_name not in loose:
            values[info.name] = info.default
            continue
        value = _memory_int(loose[info.encode_name])
        low, high = _MEMORY_BOUNDS.get(info.name, (_INT64_MIN, _INT64_MAX))
        if value is None or not low <= value <= high:
            ignored[info.encode_name] += 1
            value = info.default
        values[info.name] = value
    return MemoryArgs(**values)


_STREAM_TID = re.compile(r"(?:stream )?(\d+)")


def _number(value: int | str) -> int:
    """A pid or tid as a device or stream number: 7, "7" or "stream 7" (older Kineto); -1 else."""
    if isinstance(value, int):
        return value
    match = _STREAM_TID.fullmatch(value)
    return int(match.group(1)) if match and len(match.group(1)) < 18 else -1


def _gpu_syncs(events: list[Any], args: list[Args], ignored: Counter[str]) -> np.ndarray:
    """`SlicePart.syncs` rows of the timed `cuda_sync` events of a known kind (a start, duration
    or end beyond 2^53 µs is no time: the event is left out, counted)."""
    rows = []
    for event, arg in zip(events, args, strict=True):
        if event.name not in SYNC_KINDS:
            continue
        if not within_time_bound(event.ts, event.dur):
            if math.isfinite(event.ts + event.dur):  # given, but beyond the bound (NaN: not given, as before)
                ignored["cuda_sync time"] += 1
            continue
        device = arg.device if arg.device >= 0 else (event.pid if isinstance(event.pid, int) else -1)
        stream, correlation = (-1 if i == ABSENT_ID else i for i in (arg.stream, arg.correlation))
        rows.append((SYNC_KINDS.index(event.name), device, stream, event.ts, event.ts + event.dur))
        rows[-1] += (correlation, arg.wait_stream, arg.wait_correlation)
    return np.array(rows, dtype=np.float64).reshape(-1, 8)


class _Flow(msgspec.Struct, gc=False):
    """What a launch flow's end tells (any other event decodes to its defaults)."""

    ph: _Scalar = ""
    cat: _Scalar = ""
    id: _Scalar = None
    pid: _Scalar = 0
    tid: _Scalar = 0
    ts: _Scalar = NAN


_FLOW_LIST = msgspec.json.Decoder(list[_Flow])
_FLOW_CATEGORY = b'"ac2g"'


def _flow_links(framed: bytes | bytearray | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """`SlicePart.flow_keys` and `flow_ts`: the ends ("f") of Kineto's `ac2g` launch flows, whose id
    is the launch's correlation. Before pytorch/kineto#922 (May 2024: PyTorch ≤ 2.3 on ROCm) the
    roctracer writer gave a GPU activity no `correlation`, `device` nor `stream` (pid the device,
    tid the stream, `External id` alone): the flow ending at it (its pid, tid and ts) is what ties
    it to its launch. Read only for slices holding an activity without a correlation (the typed
    decode skips flows: Kineto writes two a kernel), by a second decode of the slice."""
    text = framed if isinstance(framed, (bytes, bytearray)) else bytes(framed)
    if _FLOW_CATEGORY not in text:
        return np.empty((0, 3), np.int64), np.empty(0)
    try:
        events = _FLOW_LIST.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return np.empty((0, 3), np.int64), np.empty(0)
    ends = [e for e in events if e.ph == "f" and e.cat == "ac2g"]
    keys = [
        (_loose_int(_number(_thread_id(e.pid))), _loose_int(_number(_thread_id(e.tid))), _loose_int(e.id)) for e in ends
    ]
    ts = np.fromiter([_loose_float(e.ts) for e in ends], np.float64, len(ends))
    rows = np.array(keys, np.int64).reshape(-1, 3)
    usable = (rows >= 0).all(axis=1) & np.isfinite(ts)
    return rows[usable], ts[usable]


_STEP_LIMIT = 2**53  # step numbers travel as float64 (GPU-side steps) and int64: exact below this


def step_number(name: str) -> int | None:
    """`ProfilerStep#12` → 12; None for another name, or a number that is not plain ASCII
    digits (`ProfilerStep#²`) or too large to hold exactly (the range stays an annotation)."""
    if name.startswith("ProfilerStep#"):
        tail = name[len("ProfilerStep#") :]
        if tail.isascii() and tail.isdigit() and len(tail) <= 16 and int(tail) < _STEP_LIMIT:
            return int(tail)
    return None


def step_numbers(names: Sequence[str]) -> np.ndarray:
    """`step_number` of each name (a host table's, by name code), -1 where it names no step."""
    return np.array([-1 if (n := step_number(s)) is None else n for s in names], dtype=np.int64)


def _loose_int(value: object, none: int = -1) -> int:
    """An id or count written loosely ("7", 7.0) as an int64; `none` when it is none — a fraction
    too (`"correlation": 1000.5` is no id: never cut to 1000, which would link it to launch 1000)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return none
    try:
        number = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return none
    return number if _INT64_MIN <= number <= _INT64_MAX else none


def _loose_id(loose: dict[str, Any], key: str) -> int:
    """An id of the forgiving path: ABSENT_ID when not given or not usable (a usable negative one
    is kept, for `_ids` to count as the typed path's)."""
    return _loose_int(loose.get(key), ABSENT_ID)  # -2^63 written: ABSENT_ID, counted as not usable


def _loose_float(value: object) -> float:
    """A finite number written loosely (7, "7.5") as a float; NaN when it is none."""
    if isinstance(value, bool):
        return NAN
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return NAN
    return number if math.isfinite(number) else NAN


def _loose_dims(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    dims = tuple(_loose_int(v) for v in value)
    return None if -1 in dims else dims


def _loose_args(raw: msgspec.Raw) -> dict[str, Any] | None:
    """`args` as plain values: msgspec, else Python's parser (numbers beyond range, NaN)."""
    try:
        loose = _ANY.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        try:
            loose = python_loads(bytes(raw))
        except (ValueError, UnicodeDecodeError):
            return None
    return loose if isinstance(loose, dict) else None


# Keys of `Args` whose unusable values on host events are not counted as damage: read there on
# runtime calls only (`_launch_args`: a launch's grid, block, byte count) or not at all (device,
# stream) — ROCm runtime calls write `stream` as "0x0", Inductor's Triton CPU ops `grid` as
# "grid(100,)", neither is damage.
_UNREAD_ON_HOST = frozenset({"device", "stream", "grid", "block", "bytes", "size"})


def _scalar(value: object) -> str | int | float | None:
    """A JSON scalar as the typed decode takes it (`Args.size`); None for anything else."""
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def _forgiving_args(
    raw: msgspec.Raw, ignored: Counter[str] | None = None, unread: frozenset[str] = frozenset()
) -> Args:
    """`args` of the forgiving path: typed where possible, else key by key; a key present but
    not usable is counted in `ignored` (under its name) and left at its default, unless it is
    one of the `unread` keys."""
    if not raw:
        return _NO_ARGS
    try:
        return _ARGS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    loose = _loose_args(raw)
    if loose is None:
        if ignored is not None:
            ignored["args"] += 1
        return _NO_ARGS

    def text(key: str) -> str | None:
        value = loose.get(key)
        return value if isinstance(value, str) else None

    def any_text(key: str) -> str | None:  # a number or a list written as text
        value = loose.get(key)
        return None if value is None or isinstance(value, (dict, bool)) else str(value)

    def recorded(key: str) -> msgspec.Raw:
        if key not in loose:
            return _EMPTY
        try:
            return msgspec.Raw(msgspec.json.encode(loose[key]))
        except (msgspec.EncodeError, OverflowError, UnicodeEncodeError):
            return _EMPTY

    args = Args(
        correlation=_loose_id(loose, "correlation"),
        external_id=_loose_id(loose, "External id"),
        external_id_lower=_loose_id(loose, "external id"),
        device=_loose_id(loose, "device"),
        stream=_loose_id(loose, "stream"),
        grid=_loose_dims(loose.get("grid")),
        block=_loose_dims(loose.get("block")),
        bytes=_loose_int(loose.get("bytes")),
        collective=text("Collective name"),
        in_nelems=_loose_int(loose.get("In msg nelems")),
        out_nelems=_loose_int(loose.get("Out msg nelems")),
        group_size=_loose_int(loose.get("Group size")),
        msg_dtype=text("dtype"),
        process_group=any_text("Process Group Name"),
        process_group_desc=any_text("Process Group Description"),
        process_group_ranks=any_text("Process Group Ranks"),
        seq=_loose_int(loose.get("Seq")),
        seq_nr=_loose_id(loose, "Sequence number"),
        fwd_tid=_loose_id(loose, "Fwd thread id"),
        kernel=text("kernel"),
        size=_scalar(loose.get("size")),
        kernel_kwargs=text("kernel_kwargs"),
        dims=recorded("Input Dims"),
        dims_lower=recorded("Input dims"),
        types=recorded("Input type"),
        strides=recorded("Input Strides"),
        concrete=recorded("Concrete Inputs"),
        call_stack=text("Call stack"),
        registers=_loose_int(loose.get("registers per thread")),
        shared_memory=_loose_int(loose.get("shared memory")),
        blocks_per_sm=_loose_float(loose.get("blocks per SM")),
        occupancy=_loose_float(loose.get("est. achieved occupancy %")),
        graph_id=_loose_int(loose.get("graph id")),
        graph_node_id=_loose_int(loose.get("graph node id")),
    )
    if ignored is not None:  # given but not usable: counted under the key the trace uses
        for field_info in msgspec.structs.fields(Args):
            given = loose.get(field_info.encode_name)
            value = getattr(args, field_info.name)
            if field_info.default == ABSENT_ID:  # an id: a negative one is counted where it is read (`_ids`)
                unusable = given is not None and value == ABSENT_ID
            else:
                unusable = given is not None and given != -1 and (value is None or value == -1 or value == _EMPTY)
            if unusable and field_info.encode_name not in unread:
                ignored[field_info.encode_name] += 1
    return args
