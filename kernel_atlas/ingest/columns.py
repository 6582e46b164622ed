"""Decoded slices → column tables (numpy), one per event family.

`events.decode_slice` turns each slice of the trace into columns whose strings are codes
into the slice's own small tables; `ColumnBuilder` maps those codes onto the trace's tables
and concatenates the slices in order. Only these columns are kept, never the events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel_atlas.ingest.events import (
    ANNOTATION,
    CPU_OP,
    CUT_MARK,
    GPU_COMM_RANGE,
    GPU_KINDS,
    GPU_STRING_COLUMNS,
    KIND_NAMES,
    MEMORY_FIELDS,
    PYTHON,
    RUNTIME,
    LaunchArgs,
    OpParams,
    Shape,
    SlicePart,
    step_number,
    step_numbers,
)
from kernel_atlas.ingest.reader import TraceInfo, read_trace

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ANNOTATION",
    "CPU_OP",
    "GPU_KINDS",
    "PYTHON",
    "RUNTIME",
    "GpuAnnotations",
    "GpuTable",
    "HostTable",
    "OpParams",
    "TraceColumns",
    "as_list",
    "build_columns",
    "categorical",
    "set_rows",
    "step_number",
    "step_numbers",
]


@dataclass
class GpuTable:
    """GPU activities (kernels, memcpys, memsets), as read; in time order once read
    (`time_order`)."""

    name: pd.Categorical
    kind: pd.Categorical  # "kernel" / "memcpy" / "memset"
    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    device: np.ndarray  # int64 (-1 unknown)
    stream: np.ndarray  # int64 (-1 unknown)
    correlation: np.ndarray  # int64 (-1 missing)
    external_id: np.ndarray  # int64 (-1 missing)
    grid: pd.Categorical  # "[x, y, z]"
    block: pd.Categorical
    bytes: np.ndarray  # int64 (-1 unknown)
    collective: pd.Categorical
    in_nelems: np.ndarray  # int64 (-1 unknown)
    out_nelems: np.ndarray
    group_size: np.ndarray
    msg_dtype: pd.Categorical
    # ... and their process group; newer PyTorch/Kineto also the collective's sequence number
    process_group: pd.Categorical
    process_group_desc: pd.Categorical
    process_group_ranks: pd.Categorical  # "[0, 1, 2, 3]"
    seq: np.ndarray  # int64 (-1 not recorded)
    # kernels: what the profiler recorded of the launch (-1 / NaN not recorded; None: a reader
    # that records none of it) — CUPTI through Kineto, or Nsight Systems (`nsys.py`)
    registers: np.ndarray | None = None  # int64 registers per thread
    shared_memory: np.ndarray | None = None  # int64 bytes per block, static + dynamic
    blocks_per_sm: np.ndarray | None = None  # float64, Kineto's grid blocks / SMs
    occupancy: np.ndarray | None = None  # float64, Kineto's est. achieved occupancy %
    # int64 (-1: not graph-launched or unknown): Nsight Systems' graphId / graphNodeId, Kineto's
    # `graph id` / `graph node id` (CUDA >= 12)
    graph_id: np.ndarray | None = None
    graph_node_id: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, rows: np.ndarray) -> GpuTable:
        """These rows (positions or a mask), in their order; a categorical keeps only the values
        still used, in their order."""
        taken: dict[str, Any] = {}
        for column in fields(self):
            values = getattr(self, column.name)
            if values is None:
                taken[column.name] = None
            elif isinstance(values, np.ndarray):
                taken[column.name] = values[rows]
            else:
                taken[column.name] = values[rows].remove_unused_categories()
        return GpuTable(**taken)

    def time_order(self) -> np.ndarray | None:
        """The rows by start, then device, stream, correlation, duration and name (in lexical
        order): an order of the activities themselves, never of the file — a trace may write its
        events in any order, and the first rows of a group pick its roofline row's call stack,
        dtypes and formula. None where the rows are in that order already."""
        n = len(self)
        if n < 2:
            return None
        from kernel_atlas.core.groups import lexical_codes  # with pandas: not where the read-ahead starts

        names = lexical_codes(np.asarray(self.name.codes, np.int64), self.name.categories)  # a missing name last
        order = np.lexsort((names, self.dur, self.correlation, self.stream, self.device, self.ts))
        return None if (order == np.arange(n)).all() else order


@dataclass
class HostTable:
    """Host-side ranges (CPU ops, annotations, Python frames, runtime calls)."""

    family: np.ndarray  # int8, see CPU_OP/ANNOTATION/PYTHON/RUNTIME
    name_code: np.ndarray  # int32 index into `names` (the codes are int32 from the decoder, int64 from nsys.py)
    names: list[str]
    thread: np.ndarray  # int32 code of (pid, tid)
    ts: np.ndarray
    end: np.ndarray
    correlation: np.ndarray  # int64 (-1 when none; runtime events only)
    external_id: np.ndarray  # int64 (-1 when none)
    shape: np.ndarray  # int32 index into `shapes` (-1 none): what a CPU op recorded of its inputs
    shapes: list[Shape]  # distinct (input dims, types, strides, concrete inputs) as canonical JSON
    params: np.ndarray  # int32 index into `param_sets` (-1 none): a CPU op's other recorded parameters
    param_sets: list[OpParams]  # distinct collective parameters / Inductor tiles of CPU ops
    launch_kernel: np.ndarray  # int32 index into `launch_kernels` (-1 none)
    launch_kernels: list[str]  # kernel names (ROCm) launches record in `args.kernel`
    seq_nr: np.ndarray  # int64 autograd `Sequence number` of CPU ops (-1 none; ingest/autograd.py)
    fwd_tid: np.ndarray  # int64 autograd `Fwd thread id` of CPU ops (-1 none; 0 on forward ops)

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
class MemoryEvents:
    """`[memory]` instant events in trace order: int64 `addr`, `bytes` (signed), `total_allocated`,
    `total_reserved`, `device_type`, `device_id` (-1 absent), `thread` (code of (pid, tid), as
    `HostTable.thread`) and float64 `ts` (µs)."""

    columns: dict[str, np.ndarray] = field(
        default_factory=lambda: {k: np.empty(0, v) for k, v in _MEMORY_DTYPES.items()}
    )

    def __len__(self) -> int:
        return len(self.columns["ts"])


@dataclass
class TraceColumns:
    gpu: GpuTable
    host: HostTable
    gpu_steps: GpuAnnotations
    event_count: int
    ignored: dict[str, int] = field(default_factory=dict)  # what the decoder dropped (`SlicePart.ignored`)
    memory: MemoryEvents = field(default_factory=lambda: MemoryEvents())
    gpu_syncs: np.ndarray = field(default_factory=lambda: np.empty((0, 8)))  # `cuda_sync` rows (`SlicePart.syncs`)
    # (start, end) rows of the GPU-side `nccl:*` / `gloo:*` annotations: communication in the step split
    gpu_comm_ranges: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))


def categorical(codes: np.ndarray, values: list[str]) -> pd.Categorical:
    """Codes into `values` (-1: missing) as a categorical of the distinct values used, in order
    of first appearance (as `pd.factorize` orders them). `values` may repeat a text."""
    import pandas as pd  # here, not at the top: reading ahead (workers.start_early) runs before pandas loads

    present = codes >= 0
    local, used = pd.factorize(codes[present])
    position: dict[str, int] = {}
    remap = np.array([position.setdefault(values[i], len(position)) for i in used.tolist()], dtype=np.int64)
    new_codes = np.full(len(codes), -1, dtype=np.int64)
    new_codes[present] = remap[local] if len(remap) else -1
    return pd.Categorical.from_codes(new_codes, categories=pd.Index(list(position), dtype=object))


def as_list(values: pd.Categorical, rows: Sequence[int] | np.ndarray | None = None) -> list[str | None]:
    """A categorical's values (at `rows`, else all) as Python objects, None where missing."""
    categories = np.asarray(values.categories, dtype=object)
    codes = np.asarray(values.codes) if rows is None else np.asarray(values.codes)[np.asarray(rows, dtype=np.int64)]
    out = np.full(len(codes), None, dtype=object)
    present = codes >= 0
    out[present] = categories[codes[present]]
    return out.tolist()


def set_rows(values: pd.Categorical, rows: Sequence[int] | np.ndarray, new: Sequence[str | None]) -> pd.Categorical:
    """`values` with `rows` set to `new` (None: missing), as `categorical` builds it."""
    texts = list(values.categories)
    index = {text: i for i, text in enumerate(texts)}
    codes = np.asarray(values.codes, dtype=np.int64).copy()
    for text in new:
        if text is not None and text not in index:
            index[text] = len(texts)
            texts.append(text)
    codes[np.asarray(rows, dtype=np.int64)] = [-1 if text is None else index[text] for text in new]
    return categorical(codes, texts)


# Distinct names of one table (host event names; kernel and other GPU texts) past this many
# characters in all: each new one longer than SHORT_NAME is shortened to that many, with a digest
# of the whole keeping it distinct. Real traces' distinct names total well under 0.1 MB (the
# 510 MB benchmark trace: 54 KB of kernel names, 7 KB of host names), each within ~5,000
# characters; 9,000 distinct op names of 10 KB had made a 100 MB trace ingest in 36 s and
# report in 3.8 GB (every later stage — classifying, redacting, the page — pays per character).
# Every distinct name counts toward the budget, and past it SHORT_NAME is short enough that
# names just under it cannot fill the budget again many times over: 80,000 distinct names of
# 820 characters (under the 1,024 the shortening once kept) had taken `report` to 1.57 GB.
NAMES_TEXT = 4 << 20
SHORT_NAME = 256
SHORTENED_NAMES = "shortened names"  # the `ignored` key counting them


def shortened(text: str) -> str:
    """`text` cut to SHORT_NAME characters: its start (credentials redacted, as `cut_to`), `#`,
    12 hex digits of a digest of the whole text, CUT_MARK."""
    import hashlib

    from kernel_atlas.core.redact import redact_cut

    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{redact_cut(text, SHORT_NAME - 14)}#{digest}{CUT_MARK}"


class _Table:
    """A trace-wide table of distinct values, growing as slices arrive; `names`: its texts are
    names, each new one longer than SHORT_NAME shortened once the distinct names kept pass
    NAMES_TEXT characters in all (`shortened`, counted)."""

    def __init__(self, names: bool = False) -> None:
        self.index: dict = {}
        self.values: list = []
        self.names = names
        self.chars = 0  # of the distinct names kept whole
        self.shortened = 0

    def remap(self, local: list) -> np.ndarray:
        """Trace-wide codes of a slice's values (-1 maps to -1 through the last entry)."""
        index, values = self.index, self.values
        codes = np.empty(len(local) + 1, dtype=np.int64)
        for i, value in enumerate(local):
            code = index.get(value)
            if code is None and self.names and isinstance(value, str):
                if self.chars <= NAMES_TEXT:  # every distinct name counts, short ones too
                    self.chars += len(value)
                elif len(value) > SHORT_NAME:  # kept by its short form: a later slice's copy maps to it
                    value = shortened(value)
                    code = index.get(value)
                    self.shortened += code is None
            if code is None:
                code = index[value] = len(values)
                values.append(value)
            codes[i] = code
        codes[-1] = -1
        return codes


def _number_key(value: object) -> object:
    """A pid or tid as one key whether written as a number or as its digits: PyTorch 1.9 writes
    a range's `tid` as `"25738"` and a `[memory]` event's as `25738` — two threads, and every
    allocation of resnet50_pt19 lost its op, module and call stack."""
    if isinstance(value, str) and 0 < len(value) <= 18 and value.isascii() and value.isdigit():
        return int(value)
    return value


def _thread_keys(threads: list) -> list:
    return [(_number_key(pid), _number_key(tid)) for pid, tid in threads]


class ColumnBuilder:
    """Merges slices, in trace order, into `TraceColumns`."""

    def __init__(self) -> None:
        self.names, self.threads, self.shapes, self.gpu_strings = _Table(True), _Table(), _Table(), _Table(True)
        self.param_sets, self.launch_kernels = _Table(), _Table(True)
        self.launch_arg_sets = _Table()  # distinct `LaunchArgs` of runtime calls
        self.launches: list[np.ndarray] = []  # rows of (host row, code into launch_arg_sets)
        self.host = _Columns(_HOST_DTYPES)
        self.gpu = _Columns(_GPU_DTYPES)
        self.memory = _Columns(_MEMORY_DTYPES)
        self.steps: list[np.ndarray] = []
        self.syncs: list[np.ndarray] = []
        self.flows: list[tuple[np.ndarray, np.ndarray]] = []  # `SlicePart.flow_keys`, `flow_ts`
        self.events = 0
        self.ignored: Counter[str] = Counter()

    def add(self, part: SlicePart) -> None:
        self.events += part.events
        self.ignored.update(part.ignored)
        if len(part.launches):
            codes = self.launch_arg_sets.remap(part.launch_arg_sets)
            self.launches.append(np.column_stack((part.launches[:, 0] + self.host.size, codes[part.launches[:, 1]])))
        self.host.extend(
            {
                "family": part.family,
                "name_code": self.names.remap(part.names)[part.name_code],
                "thread": self.threads.remap(_thread_keys(part.threads))[part.thread],
                "ts": part.ts,
                "end": part.end,
                "correlation": part.correlation,
                "external_id": part.external_id,
                "shape": self.shapes.remap(part.shapes)[part.shape],
                "params": self.param_sets.remap(part.param_sets)[part.params],
                "launch_kernel": self.launch_kernels.remap(part.launch_kernels)[part.launch_kernel],
                "seq_nr": part.seq_nr,
                "fwd_tid": part.fwd_tid,
            }
        )
        if len(part.gpu.get("ts", ())):
            strings = self.gpu_strings.remap(part.gpu_strings)
            self.gpu.extend({k: strings[v] if k in GPU_STRING_COLUMNS else v for k, v in part.gpu.items()})
        if len(part.steps):
            self.steps.append(part.steps)
        if len(part.memory.get("ts", ())):
            threads = self.threads.remap(_thread_keys(part.memory_threads))
            self.memory.extend({k: threads[v] if k == "thread" else v for k, v in part.memory.items()})
        if len(part.syncs):
            self.syncs.append(part.syncs)
        if len(part.flow_ts):
            self.flows.append((part.flow_keys, part.flow_ts))

    def _shortened(self) -> Counter[str]:
        count = sum(t.shortened for t in (self.names, self.gpu_strings, self.launch_kernels))
        return Counter({SHORTENED_NAMES: count}) if count else Counter()

    def build(self) -> TraceColumns:
        host = self.host.arrays()
        gpu = self.gpu.arrays()
        if self.flows:  # only traces whose GPU activities carry no correlation (ROCm before 2024)
            _from_flows(gpu, np.concatenate([k for k, _ in self.flows]), np.concatenate([t for _, t in self.flows]))
        if self.launches and len(gpu["ts"]):  # only where launch calls record arguments (ROCm)
            _from_launches(gpu, host, np.concatenate(self.launches), self.launch_arg_sets.values, self.gpu_strings)
        steps = np.concatenate(self.steps) if self.steps else np.empty((0, 4))
        comm = steps[:, 0] == GPU_COMM_RANGE
        comm_ranges, steps = steps[comm][:, 2:], steps[~comm]
        strings = self.gpu_strings.values
        return TraceColumns(
            gpu=GpuTable(
                kind=categorical(gpu.pop("kind"), KIND_NAMES),
                **{k: categorical(gpu.pop(k), strings) for k in GPU_STRING_COLUMNS},
                **gpu,
            ),
            host=HostTable(
                names=self.names.values,
                shapes=self.shapes.values,
                param_sets=self.param_sets.values,
                launch_kernels=self.launch_kernels.values,
                **host,
            ),
            gpu_steps=GpuAnnotations(
                step=steps[:, 0].astype(np.int64), device=steps[:, 1].astype(np.int64), ts=steps[:, 2], end=steps[:, 3]
            ),
            event_count=self.events,
            ignored=dict(self.ignored + self._shortened()),
            memory=MemoryEvents(self.memory.arrays()),
            gpu_syncs=np.concatenate(self.syncs) if self.syncs else np.empty((0, 8)),
            gpu_comm_ranges=comm_ranges,
        )


def _from_flows(gpu: dict[str, np.ndarray], keys: np.ndarray, ts: np.ndarray) -> None:
    """A correlation for each activity that records none, in place: the id of the launch flow
    (`ac2g`) ending at it — the flow's pid and tid its device and stream, its ts its start
    (`events._flow_links`); the first such flow where several do."""
    import pandas as pd

    rows = np.flatnonzero(gpu["correlation"] < 0)
    flows = pd.DataFrame({"device": keys[:, 0], "stream": keys[:, 1], "ts": ts, "id": keys[:, 2]})
    flows = flows.drop_duplicates(["device", "stream", "ts"], keep="first")
    wanted = pd.DataFrame({"device": gpu["device"][rows], "stream": gpu["stream"][rows], "ts": gpu["ts"][rows]})
    found = wanted.merge(flows, how="left", on=["device", "stream", "ts"])["id"]  # in `wanted`'s order
    hit = found.notna().to_numpy()
    gpu["correlation"][rows[hit]] = found.to_numpy()[hit].astype(np.int64)


def _from_launches(
    gpu: dict[str, np.ndarray],
    host: dict[str, np.ndarray],
    launches: np.ndarray,
    sets: list[LaunchArgs],
    strings: _Table,
) -> None:
    """Each activity's launch arguments where the activity lacks them, in place: what its launch
    call (`launches`: host rows ascending, codes into `sets`) records — a kernel's grid, block
    and shared memory (LDS), a copy's or a set's byte count. The launch is the one linking gives
    it (`link.link`: the first runtime call, in trace order, with its correlation); a value the
    activity records itself is kept. ROCm 6.2 traces record grid and block on the launch alone,
    ROCm 7 traces the LDS (every kernel of `mi250_minitoy_train` had no grid, no block, no
    occupancy; `attn_fwd`'s 16 KiB of LDS was left out of its occupancy)."""
    runtime = np.flatnonzero((host["family"] == RUNTIME) & (host["correlation"] >= 0))
    if not len(runtime):
        return
    corr = host["correlation"][runtime]
    order = np.argsort(corr, kind="stable")
    corr_sorted, runtime_sorted = corr[order], runtime[order]
    wanted = gpu["correlation"]
    pos = np.minimum(np.searchsorted(corr_sorted, wanted), len(corr_sorted) - 1)
    launch = np.where((wanted >= 0) & (corr_sorted[pos] == wanted), runtime_sorted[pos], -1)
    at = np.minimum(np.searchsorted(launches[:, 0], launch), len(launches) - 1)
    code = np.where((launch >= 0) & (launches[at, 0] == launch), launches[at, 1], -1)  # -1: the table's last entry

    def table(values: list[object]) -> np.ndarray:  # per set, then -1 for "no launch arguments"
        return np.array([*values, -1], np.int64)

    def text_codes(texts: list[str | None]) -> np.ndarray:  # texts as codes into the GPU string table
        present = [t for t in texts if t is not None]
        mapped = iter(strings.remap(present)[:-1].tolist())
        return table([-1 if t is None else next(mapped) for t in texts])

    kernel = gpu["kind"] == KIND_NAMES.index("kernel")
    for column, values in (
        ("grid", text_codes([s.grid for s in sets])),
        ("block", text_codes([s.block for s in sets])),
        ("shared_memory", table([s.shared_memory for s in sets])),
    ):
        rows = np.flatnonzero(kernel & (gpu[column] < 0) & (code >= 0))
        gpu[column][rows] = values[code[rows]]
    rows = np.flatnonzero(~kernel & (gpu["bytes"] < 0) & (code >= 0))  # copies and sets
    gpu["bytes"][rows] = table([s.bytes for s in sets])[code[rows]]


_HOST_DTYPES = {
    "family": np.int8,
    "name_code": np.int32,
    "thread": np.int32,
    "ts": np.float64,
    "end": np.float64,
    "correlation": np.int64,
    "external_id": np.int64,
    "shape": np.int32,
    "params": np.int32,
    "launch_kernel": np.int32,
    "seq_nr": np.int64,
    "fwd_tid": np.int64,
}
_GPU_DTYPES = {
    "kind": np.int8,
    "ts": np.float64,
    "dur": np.float64,
    **dict.fromkeys(("device", "stream", "correlation", "external_id", "bytes"), np.int64),
    **dict.fromkeys(("in_nelems", "out_nelems", "group_size", "seq"), np.int64),
    **dict.fromkeys(("registers", "shared_memory", "graph_id", "graph_node_id"), np.int64),
    **dict.fromkeys(("blocks_per_sm", "occupancy"), np.float64),
    **dict.fromkeys(GPU_STRING_COLUMNS, np.int64),
}

_MEMORY_DTYPES = {**dict.fromkeys((*MEMORY_FIELDS, "thread"), np.int64), "ts": np.float64}


class _Columns:
    """Columns that grow as slices arrive: appended while the workers decode the next slices,
    so nothing is left to concatenate at the end. Capacity doubles; the unused tail of a
    buffer is never written, so it takes address space, not memory."""

    def __init__(self, dtypes: dict[str, type]):
        self.data = {key: np.empty(0, dtype) for key, dtype in dtypes.items()}
        self.size = 0

    def extend(self, part: dict[str, np.ndarray]) -> None:
        need = self.size + len(next(iter(part.values())))
        for key, values in part.items():
            data = self.data[key]
            if need > len(data):
                grown = np.empty(max(need, 2 * len(data), 1 << 16), data.dtype)
                grown[: self.size] = data[: self.size]
                self.data[key] = data = grown
            data[self.size : need] = values
        self.size = need

    def arrays(self) -> dict[str, np.ndarray]:
        return {key: data[: self.size] for key, data in self.data.items()}


def build_columns(
    path: str | Path,
    executor: Executor | None = None,
    workers: int = 1,
    slice_bytes: int | None = None,
    on_progress: Callable[[float], None] | None = None,
) -> tuple[TraceInfo, TraceColumns]:
    """Stream a trace into column tables (slices decoded by `executor`'s processes when given)."""
    builder = ColumnBuilder()
    info = read_trace(path, builder.add, executor, workers, slice_bytes, on_progress)
    return info, builder.build()
