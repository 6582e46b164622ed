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
from typing import Annotated, Any, NamedTuple, Union

import msgspec
import numpy as np

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
_GPU_FAMILY = {name: 10 + i for i, name in enumerate(GPU_KINDS)}
_GPU_STEP = 20
_FAMILY = {**_HOST_FAMILY, **_GPU_FAMILY, "gpu_user_annotation": _GPU_STEP}

_EMPTY = msgspec.Raw(b"")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# An integer the columns (int64) can hold: anything wider fails the typed decode, and the
# forgiving one drops that field alone.
Int = Annotated[int, msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)]
NAN = float("nan")  # `ts` / `dur` not given


class Args(msgspec.Struct, frozen=True, gc=False):
    """The `args` keys ingest uses; -1 / None / empty when absent. Other keys are skipped."""

    correlation: Int = -1
    external_id: Int = msgspec.field(default=-1, name="External id")
    device: Int = -1
    stream: Int = -1
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
    # ROCm launches name the kernel they launch; Inductor's Triton ops record their tiles
    kernel: str | None = None
    kernel_kwargs: str | None = None
    # what a CPU op recorded about its inputs, kept as JSON text
    dims: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input type")
    strides: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input Strides")
    concrete: msgspec.Raw = msgspec.field(default=_EMPTY, name="Concrete Inputs")


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


# Every other phase of the Trace Event Format: no fields, so the decoder only skips them;
# `cat` is a class attribute so that one pass over `e.cat` covers all events.
_OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "N", "O", "D", "M")
_OTHER_PHASES += ("V", "v", "R", "c", "(", ")", "=")
_OTHERS = tuple(
    msgspec.defstruct(f"Phase{i}", [], tag_field="ph", tag=ph, gc=False, namespace={"cat": ""})
    for i, ph in enumerate(_OTHER_PHASES)
)


class Event(_Fields, gc=False):
    """Any Chrome-trace event, `args` left undecoded (the forgiving path)."""

    ph: str = ""
    args: msgspec.Raw = _EMPTY


_TAGGED_LIST = msgspec.json.Decoder(list[Union[(Complete, *_OTHERS)]])  # type: ignore[misc]
_EVENT_LIST = msgspec.json.Decoder(list[Event])
_ARGS = msgspec.json.Decoder(Args)
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
    names: list[str]
    threads: list[tuple[int | str, int | str]]
    shapes: list[Shape]
    param_sets: list[OpParams]
    launch_kernels: list[str]
    # GPU activities: numbers, and GPU_STRING_COLUMNS as int32 codes → gpu_strings (-1 none)
    gpu: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_strings: list[str] = field(default_factory=list)
    # GPU-side `ProfilerStep#N` annotations: rows of (step, device, ts, end)
    steps: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))
    # what was dropped: field name → values out of range or of the wrong type; also
    # "untimed GPU activities" (left out) and "lone surrogates" (replaced)
    ignored: dict[str, int] = field(default_factory=dict)


def ready() -> int:
    """A worker's first task: importing this module is the start-up work."""
    return os.getpid()


def decode_task(task: tuple) -> SlicePart | SliceError:
    """Run one decode task, in a worker process or inline: ("file", path, start, end) reads
    the text from the file itself, ("framed", "[" + text + "]") brings it. Errors are returned,
    not raised."""
    if task[0] == "file":
        _, path, start, end = task
        framed = bytearray(end - start + 2)
        try:
            _read_into(path, start, memoryview(framed)[1:-1])
        except OSError as exc:
            return SliceError("read", exc.strerror or str(exc))
        framed[0], framed[-1] = 0x5B, 0x5D  # "[" and "]"
    elif task[0] == "shared":  # ("shared", shared memory name, length): the framed text
        return _decode_shared(task[1], task[2])
    else:  # ("framed", text already framed as a list by the reader)
        framed = task[1]
    try:
        return decode_slice(framed)
    except SliceError as exc:
        return exc


def _decode_shared(name: str, length: int) -> SlicePart | SliceError:
    from multiprocessing.shared_memory import SharedMemory

    shared = SharedMemory(name=name)
    try:
        with shared.buf[:length] as framed:
            return decode_slice(framed)  # no decoded object outlives this call
    except SliceError as exc:
        return exc
    finally:
        shared.close()


def _read_into(path: str, start: int, target: memoryview) -> None:
    with open(path, "rb", buffering=0) as handle:
        while len(target):
            if hasattr(os, "preadv"):
                got = os.preadv(handle.fileno(), [target], start)
            else:  # no positional reads here (Windows): this process has its own handle anyway
                handle.seek(start)
                got = handle.readinto(target)
            if not got:
                raise OSError(0, "the file became shorter while it was read")
            target, start = target[got:], start + got


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
    family = _families(events)
    if forgiving:
        family[np.fromiter([e.ph != "X" for e in events], bool, len(events))] = -1

    def pick(mask: np.ndarray, unread: frozenset[str] = frozenset()) -> tuple[list[Any], list[Args], np.ndarray]:
        chosen = list(compress(events, mask.tolist()))
        args = [_forgiving_args(e.args, ignored, unread) for e in chosen] if forgiving else [e.args for e in chosen]
        return chosen, args, family[mask]

    try:
        part = _host_columns(*pick((family >= 0) & (family < 10), _UNREAD_ON_HOST), ignored)
        part.events = len(events)
        part.gpu, part.gpu_strings = _gpu_columns(*pick((family >= 10) & (family < _GPU_STEP)), ignored)
        part.steps = _gpu_steps(*pick(family == _GPU_STEP)[:2])
    except RecursionError:  # inside an args value decoded on its own
        raise SliceError("deep", "JSON nested too deeply") from None
    part.ignored = dict(ignored)
    return part


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
        # strings, say): decode strictly with raw args, then each needed `args` forgivingly.
        try:
            return _EVENT_LIST.decode(framed), True
        except msgspec.ValidationError as exc:
            raise damaged("schema", exc) from None
        except msgspec.DecodeError as exc:
            raise damaged("json", exc) from None
    except msgspec.DecodeError as exc:
        raise damaged("json", exc) from None


def _sanitized(framed: bytes | bytearray | memoryview, error: SliceError, ignored: Counter[str]) -> bytes:
    """The slice re-encoded after Python's parser read it (it accepts numbers beyond float or
    int64 range, NaN and lone surrogates): such top-level fields of an event or of its args are
    dropped and counted in `ignored`, lone surrogates replaced by U+FFFD. Raises `error` when
    even Python cannot read the text."""
    try:
        events = json.loads(bytes(framed))
    except (ValueError, UnicodeDecodeError):
        raise error from None
    if not isinstance(events, list):
        raise error
    for event in events:
        if not isinstance(event, dict):
            continue
        _drop_bad_numbers(event, ("ts", "dur", "pid", "tid"), ignored, nulls=True)
        if isinstance(event.get("args"), dict):
            _drop_bad_numbers(event["args"], tuple(event["args"]), ignored)
    events = without_surrogates(events, ignored)
    try:
        return msgspec.json.encode(events)
    except (msgspec.EncodeError, OverflowError, UnicodeEncodeError):
        raise error from None


def _bad_number(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX


def _drop_bad_numbers(
    mapping: dict[str, Any], keys: tuple[str, ...], ignored: Counter[str], nulls: bool = False
) -> None:
    for key in keys:
        value = mapping.get(key)
        if (nulls and key in mapping and value is None) or _bad_number(value) or (
            isinstance(value, list) and any(_bad_number(v) for v in value)
        ):
            del mapping[key]
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


_shape_fields = attrgetter("dims", "types", "strides", "concrete")


def _families(events: Sequence[Any]) -> np.ndarray:
    family_of = _FAMILY.get
    return np.fromiter([family_of(e.cat, -1) for e in events], np.int8, len(events))


def _numbering() -> defaultdict:
    """A dict that numbers new keys 0, 1, 2… as it meets them (in insertion order)."""
    return defaultdict(itertools.count().__next__)


# The passes below are list comprehensions on purpose: on Python 3.11+ they read struct
# fields faster than `map(attrgetter(...))`.


def _host_columns(events: list[Any], args: list[Args], family: np.ndarray, ignored: Counter[str]) -> SlicePart:
    n = len(events)
    ts = np.fromiter([e.ts for e in events], np.float64, n)
    if not np.isfinite(ts).all():  # a range without a usable start is left out (no `dur`: an instant)
        ignored["host ranges without a ts"] += int((~np.isfinite(ts)).sum())
        return _host_columns(*_keep(np.isfinite(ts), events, args, family), ignored)
    dur = np.fromiter([e.dur for e in events], np.float64, n)
    names, threads = _numbering(), _numbering()
    name_code = np.fromiter([names[e.name] for e in events], np.int32, n)
    thread = np.fromiter([threads[e.pid, e.tid] for e in events], np.int32, n)
    with_ids = (family == RUNTIME) | (family == CPU_OP)
    correlation = np.where(with_ids, np.fromiter([a.correlation for a in args], np.int64, n), -1)
    external_id = np.where(with_ids, np.fromiter([a.external_id for a in args], np.int64, n), -1)
    is_op = family == CPU_OP
    shape = np.full(n, -1, np.int32)
    params = np.full(n, -1, np.int32)
    shapes: list[Shape] = []
    param_sets: list[OpParams] = []
    if is_op.any():
        op_args = list(compress(args, is_op.tolist()))
        params[is_op], param_sets = _param_codes(op_args)
    # annotations too: older PyTorch records a collective's tensors on its `nccl:*` range
    shaped = is_op | (family == ANNOTATION)
    if shaped.any():
        shape[shaped], shapes = _shape_codes(list(compress(args, shaped.tolist())))
    is_runtime = family == RUNTIME
    launch_kernel = np.full(n, -1, np.int32)
    kernels = _numbering()
    if is_runtime.any():
        kernels[None] = -1
        launch_kernel[is_runtime] = [kernels[a.kernel] for a in compress(args, is_runtime.tolist())]
        del kernels[None]
    return SlicePart(
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
        names=list(names),
        threads=list(threads),
        shapes=shapes,
        param_sets=param_sets,
        launch_kernels=list(kernels),
    )


def _shape_codes(args: list[Args]) -> tuple[np.ndarray, list[Shape]]:
    """One code per distinct recorded (dims, types, strides, concrete inputs), and their
    canonical JSON texts (decoded and re-encoded, so spacing never splits a shape)."""
    keys = _numbering()  # the four raw texts joined by NUL (never inside JSON text), numbered as met
    codes = np.fromiter([keys[b"\0".join(_shape_fields(a))] for a in args], np.int32, len(args))
    if len(_SHAPES) > _CACHE_LIMIT:
        _SHAPES.clear()
    if len(_CANONICAL) > _CACHE_LIMIT:
        _CANONICAL.clear()
    shapes = []
    for key in keys:  # in code order
        shape = _SHAPES.get(key)
        if shape is None:
            shape = _SHAPES[key] = tuple(_canonical_json(raw, _CANONICAL) for raw in key.split(b"\0"))  # type: ignore[assignment]
        shapes.append(shape)
    return codes, shapes


# Shapes and canonical texts of recorded inputs, kept across the slices a process decodes (the
# same shapes recur in every step); emptied when they grow past the limit.
_SHAPES: dict[bytes, Shape] = {}
_CANONICAL: dict[bytes, str | None] = {}
_CACHE_LIMIT = 1 << 16


_op_params = attrgetter(*OpParams._fields)


def _param_codes(args: list[Args]) -> tuple[np.ndarray, list[OpParams]]:
    """One code per distinct `OpParams` (-1: the op records none of them)."""
    # which ops record any of them (every `OpParams` field; far cheaper than building the key)
    recorded = [
        a.collective is not None
        or a.in_nelems >= 0
        or a.out_nelems >= 0
        or a.group_size >= 0
        or a.msg_dtype is not None
        or a.process_group is not None
        or a.process_group_desc is not None
        or a.process_group_ranks is not None
        or a.seq >= 0
        or a.kernel_kwargs is not None
        for a in args
    ]
    codes = np.full(len(args), -1, np.int32)
    keys = _numbering()
    if any(recorded):
        codes[np.array(recorded)] = [keys[_op_params(a)] for a in compress(args, recorded)]
    return codes, [OpParams(*key[:7], _ranks_text(key[7]), *key[8:]) for key in keys]


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
    # device and stream fall back to pid and tid where those are numbers (older exporters)
    device, stream = columns["device"], columns["stream"]
    if (device < 0).any() or (stream < 0).any():
        numbers = np.array(
            [(e.pid if isinstance(e.pid, int) else -1, e.tid if isinstance(e.tid, int) else -1) for e in events],
            dtype=np.int64,
        ).reshape(n, 2)
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
    """(step, device, ts, end) of `gpu_user_annotation` ranges named `ProfilerStep#N`."""
    rows = []
    for event, arg in zip(events, args, strict=True):
        step = step_number(event.name)
        if step is None:
            continue
        device = arg.device if arg.device >= 0 else (event.pid if isinstance(event.pid, int) else -1)
        if math.isfinite(event.ts) and math.isfinite(event.dur):
            rows.append((step, device, event.ts, event.ts + event.dur))
    return np.array(rows, dtype=np.float64).reshape(-1, 4)


def step_number(name: str) -> int | None:
    """`ProfilerStep#12` → 12."""
    if name.startswith("ProfilerStep#"):
        tail = name[len("ProfilerStep#") :]
        if tail.isdigit():
            return int(tail)
    return None


def _loose_int(value: object) -> int:
    """An id or count written loosely ("7", 7.0) as an int64; -1 when it is none."""
    if isinstance(value, bool):
        return -1
    try:
        number = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if _INT64_MIN <= number <= _INT64_MAX else -1


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
            loose = json.loads(bytes(raw))
        except (ValueError, UnicodeDecodeError):
            return None
    return loose if isinstance(loose, dict) else None


# Keys of `Args` that host events may carry but ingest reads only on GPU activities: ROCm runtime
# calls write `stream` as "0x0", Inductor's Triton CPU ops `grid` as "grid(100,)" — not damage.
_UNREAD_ON_HOST = frozenset({"device", "stream", "grid", "block", "bytes"})


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
        correlation=_loose_int(loose.get("correlation")),
        external_id=_loose_int(loose.get("External id")),
        device=_loose_int(loose.get("device")),
        stream=_loose_int(loose.get("stream")),
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
        kernel=text("kernel"),
        kernel_kwargs=text("kernel_kwargs"),
        dims=recorded("Input Dims"),
        types=recorded("Input type"),
        strides=recorded("Input Strides"),
        concrete=recorded("Concrete Inputs"),
    )
    if ignored is not None:  # given but not usable: counted under the key the trace uses
        for field_info in msgspec.structs.fields(Args):
            given = loose.get(field_info.encode_name)
            value = getattr(args, field_info.name)
            unusable = given is not None and given != -1 and (value is None or value == -1 or value == _EMPTY)
            if unusable and field_info.encode_name not in unread:
                ignored[field_info.encode_name] += 1
    return args
