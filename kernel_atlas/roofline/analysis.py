"""Kernels table + device → per-kernel costs, the roofline table and time shares.

Costs are per CPU-op call: the kernels launched by one call (same `cpu_op_id`: a cuDNN
convolution and its layout transforms, a GEMM and its split-K reduce) share one cost, counted
on the call's longest kernel ("main"; among equals the first to start, then by name — not the
order of the file); the others are "helper" rows. A call's achieved FLOP/s
and bytes/s use the summed time of all its kernels. Collectives are costed from the message
sizes NCCL records, memcpy/memset from their byte counts. Kernels without recorded shapes
(graph replays, launches outside the profiling window) keep their time and get the reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.core.devices import TRANSFER_BOUNDS, Device, load_devices
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.groups import group_numbers, key_codes, lexical_codes
from kernel_atlas.core.paths import catalog_pattern, catalogs_dir, read_toml
from kernel_atlas.core.texts import filled, name_mask
from kernel_atlas.ingest.efficiency import EFFICIENCY_SUMS, ROOFLINE_EFFICIENCY, efficiency_sums, roofline_efficiency
from kernel_atlas.ingest.recorded import (
    SCALAR,
    TENSOR,
    TENSOR_LIST,
    Arg,
    dtypes,
    parse_call,
    scalar_type_name,
    type_names,
)
from kernel_atlas.ingest.summary import gpu_time_facts
from kernel_atlas.roofline.costs import PARTNER_LAUNCHERS, Call, Cost, NoCost, cost_of
from kernel_atlas.roofline.costs.pointwise import BATCH_NORM_FORWARD, with_kernel_mode
from kernel_atlas.store.limits import CLOCK_RESOLUTION_US

# A call whose attainable time is this small is dominated by launch and latency, not by a roof —
# where its measured time is short too: at most this long a call (a few times LATENCY_US). A call
# of milliseconds with a cost of nanoseconds is held up by no launch: its cost misses work, or the
# trace does not show what it waited for (a 2,546 µs embedding lookup costed at 0.0006 µs had been
# "latency-bound at 0.0 %" and led what to fix first, campaign BH 4)
LATENCY_US = 4.0
LATENCY_CALL_US = 4 * LATENCY_US

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
    "formulas",
    "estimate",
    "call_stack",
    *ROOFLINE_EFFICIENCY,  # ingest/efficiency.py
    "peer_wait_us",
]
# a collective's recorded message past this many elements (a petabyte of bytes) is no size: a
# doctored `In msg nelems` of 2^62 made 92 million TB/s and a SOL of 3·10^13 %
MAX_MESSAGE_ELEMENTS = 2**48


@dataclass
class Analysis:
    kernels: pd.DataFrame  # the kernels table plus role, flops, bytes, op_time_us, note
    roofline: pd.DataFrame
    timeshare: pd.DataFrame
    facts: dict[str, Any]
    groups: pd.DataFrame | None = None  # `roofline_groups` of `kernels`, before the metrics (one run)


# recorded collective names (letters only, lower case, as catalogs/launchers.toml `[collectives]`
# reads them) whose nccl-tests bus factor is not their label's: a reduce is labelled reduce_scatter
# (the taxonomy has no reduce) but crosses the bus once, as nccl-tests' Reduce (busBw = algBw); a
# gather or scatter runs as NCCL sends and receives (labelled send_recv, factor 1) but is nccl-tests'
# Gather / Scatter, (n-1)/n of the gathered message (campaign AV 9)
COST_OPS = {"reduce": "reduce", "reduceoop": "reduce", "gather": "gather", "scatter": "scatter"}

# `Process Group Ranks` as PyTorch records it: the group's members as a list of rank numbers
# ("[0, 1, 2, 3]"), their count the group's size. A list cut short ("[0, 1, ...]") or empty ("[]", on
# a `wait`) names no size. Shared with the cross-rank view (analysis/collectives.py, in DuckDB's RE2)
GROUP_RANKS_LIST = r"\s*\[\s*\d+(?:\s*,\s*\d+)*\s*\]\s*"
# `Process Group Description` of the group every rank of the job is in: its size is the world size
DEFAULT_GROUP = "default_pg"
# per rank, its process groups' sizes by `Process Group Name` (`store.run.process_group_sizes`)
ProcessGroups = Mapping[int, Mapping[str, int]]


def listed_group_sizes(ranks: pd.Series) -> np.ndarray:
    """Per row, the size of the group its `Process Group Ranks` lists (`GROUP_RANKS_LIST`: the
    members counted); NaN where it lists none. Worked out once per distinct text."""
    column = ranks.astype("category")
    texts = pd.Series(column.cat.categories.astype(str))
    members = np.where(texts.str.fullmatch(GROUP_RANKS_LIST), texts.str.count(",") + 1, np.nan)
    return np.append(members.astype(np.float64), np.nan)[column.cat.codes.to_numpy()]  # code -1: NaN


@lru_cache(maxsize=1)
def _bus_factors() -> dict[str, str]:
    return read_toml("costs.toml")["bus_factor"]


@cache
def bus_factor(op: str, ranks: int) -> float:
    """How many times a collective's message crosses the bus among `ranks` (costs.toml); NaN
    for no ranks (a group size of 0 recorded: `(n-1)/n` divided by it)."""
    if ranks < 1:
        return math.nan
    expression = _bus_factors().get(op, "1")
    return float(eval(expression, {"__builtins__": {}}, {"n": ranks}))


def comm_itemsize(dtype: object) -> int | None:
    """Element size of a collective's `dtype` as NCCL kernels record it (`Float`, `BFloat16`,
    `Float8_e4m3fn`: c10::ScalarType names, catalogs/dtypes.toml `scalar_type_names`)."""
    spelling = scalar_type_name(dtype)
    return None if spelling is None else dtypes()[spelling].bytes


def comm_precision(dtype: object) -> str | None:
    """The precision of a collective's `dtype` (as `comm_itemsize` reads it): a bf16 all_reduce's
    is `bf16` — every collective's had been `int`, whatever it sent (campaign BH 6)."""
    spelling = scalar_type_name(dtype)
    return None if spelling is None else dtypes()[spelling].precision


def _collective_costs(
    kernels: pd.DataFrame, world_size: int | None, process_groups: ProcessGroups | None = None
) -> None:
    """Collectives (communication kernels with NCCL's message parameters) are costed by their
    bus bytes: message size · dtype size · the collective's bus factor for its group size (the
    first the trace records: `_group_sizes`; `process_groups`: the traces' process-group table,
    by rank), else the trace's world size — an assumption the formula names."""
    communication = (kernels["category"] == COMMUNICATION).to_numpy()
    shapes = _messages_from_shapes(kernels, communication)
    recorded = kernels["collective"].notna().to_numpy() | ~np.isnan(shapes.nelems)
    _say_why_silent(kernels, communication & ~recorded)
    rows = np.flatnonzero(communication & recorded)
    if len(rows) == 0:
        return

    def values(column: str) -> np.ndarray:
        return kernels[column].to_numpy(dtype=np.float64, na_value=np.nan)[rows]

    nelems = np.fmax(values("msg_in_nelems"), values("msg_out_nelems"))  # the larger one recorded
    dtype = kernels["msg_dtype"].astype(object).to_numpy()[rows]
    op = kernels["op_mapping"].astype(object).to_numpy()[rows]
    # the factor of the recorded collective where it is not its label's (`COST_OPS`: a reduce, a gather)
    recorded_name = kernels["collective"].astype(object).to_numpy()[rows]
    letters = ["".join(filter(str.isalpha, str(c))).lower() if c is not None else "" for c in recorded_name]
    cost_op = np.array([COST_OPS.get(name, o) for name, o in zip(letters, op, strict=True)], dtype=object)
    ranks, group_source = _group_sizes(kernels, rows, cost_op, shapes, world_size, process_groups)
    # no message fields on the kernel: the tensor recorded on its launch, the input of the collective —
    # unless those tensors are not what it sends (`[message_not_recorded]`: DeepEP's routed tokens)
    not_recorded = _message_not_recorded()
    names = _kernel_names(kernels, rows)
    unrelated = name_mask(names, not_recorded.search) if not_recorded else np.zeros(len(rows), bool)
    borrowed = np.isnan(nelems) & ~np.isnan(shapes.nelems[rows]) & ~unrelated
    # one tensor recorded: the input (all_gather's is one rank's part); several: the largest is the output
    alone = shapes.count[rows][borrowed] == 1
    scale = np.array(
        [
            _input_scale(str(o), int(r)) if a else 1.0
            for o, r, a in zip(op[borrowed], ranks[borrowed], alone, strict=True)
        ]
    )
    nelems[borrowed] = shapes.nelems[rows][borrowed] * scale
    message = np.full(len(rows), "", dtype=object)  # where the message size came from, for the formula
    message[np.flatnonzero(borrowed)] = np.where(alone, _BORROWED_INPUT, _BORROWED_LARGEST)
    listed = np.flatnonzero(borrowed & shapes.from_lists[rows])
    message[listed] = [f"{m} (a tensor list: its dtype assumed, not recorded)" for m in message[listed]]
    dtype[borrowed] = shapes.dtype[rows][borrowed]
    itemsize = np.array([_itemsize(str(d)) for d in dtype], dtype=np.float64)
    why = np.full(len(rows), "", dtype=object)
    why[ranks < 1] = "group size unknown: not recorded on the collective, and the trace names no world size"
    why[ranks == 1] = "a collective over a group of one rank: no data crosses a link (a local copy at most)"
    unknown_dtype = np.isnan(itemsize)
    why[unknown_dtype] = [f"unknown collective dtype {d!r}" for d in dtype[unknown_dtype]]
    why[np.isnan(nelems)] = "collective message size not recorded on the kernel"
    why[np.isnan(nelems) & unrelated] = _UNRELATED
    why[nelems > MAX_MESSAGE_ELEMENTS] = "collective message of more than 2^48 elements recorded: not a size"
    role = kernels["role"].to_numpy(dtype=object, copy=True)
    note = kernels["note"].to_numpy(dtype=object, copy=True)
    failed = why != ""
    role[rows[failed]], note[rows[failed]] = "no model", why[failed]
    ok = np.flatnonzero(~failed)
    op = cost_op
    factors = {key: bus_factor(*key) for key in {(str(op[i]), int(ranks[i])) for i in ok.tolist()}}
    factor = np.array([factors[str(op[i]), int(ranks[i])] for i in ok.tolist()], dtype=np.float64)
    done = rows[ok]
    precisions = {d: comm_precision(d) for d in set(dtype[ok].tolist())}  # of the message's dtype
    # how they were linked, as other costed calls say
    role[done] = "main"
    note[done] = _link_notes(kernels["link"])[done] if "link" in kernels else ""
    kernels["role"], kernels["note"] = _texts(role, kernels.index), _texts(note, kernels.index)
    columns = {
        "flops": 0.0,
        "bytes": nelems[ok] * itemsize[ok] * factor,
        "precision": np.array([precisions[d] for d in dtype[ok].tolist()], dtype=object),
        "unit": "link",
        "formula": [
            _bus_formula(*values)
            for values in zip(
                nelems[ok], itemsize[ok], factor, op[ok], ranks[ok], group_source[ok], message[ok], strict=True
            )
        ],
        "op_time_us": kernels["dur_us"].to_numpy()[done],
    }
    for column, value in columns.items():
        target = kernels[column].to_numpy(copy=True)
        if target.dtype.kind == "f" and isinstance(value, str):
            target = target.astype(object)
        target[done] = value
        kernels[column] = _texts(target, kernels.index) if target.dtype == object else target


# a collective's formula says so where its bus bytes rest on the world size taken for its group's
WORLD_SIZE_ASSUMED = "the trace's world size assumed"
# where a collective's group size n came from (formula text by source), in `_group_sizes`' order
_RECORDED, _LISTED, _TABLE, _ARGUMENT, _TEMPLATE, _FROM_MESSAGES, _FROM_TENSORS, _DEFAULT, _WORLD = range(9)
_GROUP_SOURCES = {
    _RECORDED: "",
    _LISTED: " from the process group's ranks",
    _TABLE: " from the trace's process-group table",  # distributedInfo.pg_config
    _ARGUMENT: " from its op's group-size argument",
    _TEMPLATE: " from its kernel's template arguments",
    _FROM_MESSAGES: " from the recorded message sizes",
    _FROM_TENSORS: " from the recorded tensors",
    _DEFAULT: ": the default process group's, the trace's world size",
    _WORLD: f": {WORLD_SIZE_ASSUMED}, the process group's size not being recorded",
}
_UNRELATED = (
    "collective message size not recorded: the tensors on its launch are not what it sends (the tokens "
    "routed to each rank, or their counts)"
)


def _bus_formula(
    nelems: float, itemsize: float, factor: float, op: object, ranks: float, source: int, message: str
) -> str:
    """A collective's formula: its bus bytes, its group size and where each came from."""
    group = f"n={int(ranks)}{_GROUP_SOURCES[source]}"
    return f"bus bytes = {int(nelems)}·{int(itemsize)} B · {factor:.3f} ({op}, {group}){message}"


# (the trust line says what to re-profile with: Kineto's record_shapes, or nothing an Nsight export holds)
_SILENT = "collective message size not recorded: neither NCCL message fields on the kernel nor shapes on its launch"


def _group_sizes(
    kernels: pd.DataFrame,
    rows: np.ndarray,
    op: np.ndarray,
    shapes: _Messages,
    world_size: int | None,
    process_groups: ProcessGroups | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each collective's group size (0 where nothing gives one) and where it came from: the first
    of, in this order, (1) the `Group size` NCCL records; (2) the members `Process Group Ranks`
    lists; (3) the size its rank's `distributedInfo.pg_config` gives its `Process Group Name`
    (`process_groups`; some releases record the name on the kernel and neither of the above);
    (4) the size its launching op takes as an argument (`[group_size_argument]`:
    FlashInfer's TRT-LLM all-reduces have no process group); (5) the size its kernel takes as a
    template argument (`[group_size_template]`: vLLM's and SGLang's custom all-reduces, DeepEP's
    intranode kernels — no process group either); for the collectives whose input and output
    differ by the group size (`[group_from_tensors]`: all_gather's output holds n inputs,
    reduce_scatter's input n outputs), the ratio of (6) the kernel's own `In msg nelems` and `Out
    msg nelems`, else (7) the largest and smallest tensor recorded on its launch; (8) the world
    size for the default process group (every rank is in it); else (9) the world size, assumed.
    A size below 1 is none (the next source speaks)."""

    def column(name: str) -> np.ndarray:
        if name not in kernels:  # an output ingested before the column existed
            return np.full(len(rows), np.nan)
        return kernels[name].to_numpy(dtype=np.float64, na_value=np.nan)[rows]

    def ratio(larger: np.ndarray, smaller: np.ndarray, where: np.ndarray) -> np.ndarray:
        return np.where(where, sizes_from_messages(op, larger, smaller), np.nan)

    sent, received = column("msg_in_nelems"), column("msg_out_nelems")
    default = np.zeros(len(rows), dtype=bool)
    if "process_group_desc" in kernels:
        default = (kernels["process_group_desc"].astype(object).to_numpy()[rows] == DEFAULT_GROUP) & bool(world_size)
    listed = listed_group_sizes(kernels["process_group_ranks"])[rows] if "process_group_ranks" in kernels else None
    candidates = {
        _RECORDED: column("group_size"),
        _LISTED: np.full(len(rows), np.nan) if listed is None else listed,
        _TABLE: _table_group_sizes(kernels, rows, process_groups, world_size),
        _ARGUMENT: _argument_group_sizes(kernels, rows, world_size),
        _TEMPLATE: _template_group_sizes(_kernel_names(kernels, rows), world_size),
        _FROM_MESSAGES: ratio(np.fmax(sent, received), np.fmin(sent, received), np.ones(len(rows), dtype=bool)),
        _FROM_TENSORS: ratio(shapes.nelems[rows], shapes.smallest[rows], shapes.count[rows] >= 2),
        _DEFAULT: np.where(default, float(world_size or 0), np.nan),
    }
    ranks = np.full(len(rows), np.nan)
    source = np.full(len(rows), _WORLD, dtype=np.int8)
    for where, sizes in candidates.items():
        take = np.isnan(ranks) & (sizes >= 1)  # NaN compares false: not given by this source
        ranks[take], source[take] = sizes[take], where
    assumed = np.isnan(ranks)
    ranks[assumed] = world_size or 0
    return ranks, source


def sizes_from_messages(op: np.ndarray, larger: np.ndarray, smaller: np.ndarray) -> np.ndarray:
    """Per collective, the group size its message sizes say (`[group_from_tensors]`): `larger` /
    `smaller` (element counts) where that is a whole number ≥ 2 and its op's input and output
    differ by the group size (all_gather's output holds n inputs, reduce_scatter's input n
    outputs); NaN otherwise. One rule for the roofline (`_group_sizes`) and the cross-rank view
    (analysis/collectives.py), so the two give one busbw for one kernel (campaign BN 2)."""
    larger, smaller = np.asarray(larger, dtype=np.float64), np.asarray(smaller, dtype=np.float64)
    implied = np.divide(larger, smaller, out=np.full(len(larger), np.nan), where=smaller > 0)
    ok = np.isin(np.asarray(op).astype(str), _group_from_tensors()) & (implied >= 2) & (implied == np.floor(implied))
    return np.where(ok, implied, np.nan)


def _table_group_sizes(
    kernels: pd.DataFrame, rows: np.ndarray, process_groups: ProcessGroups | None, world_size: int | None
) -> np.ndarray:
    """Per collective row: the size its rank's process-group table (`process_groups`: rank → group
    name → size, from `distributedInfo.pg_config`) gives the `Process Group Name` it records; NaN
    where the table or the name is not there, or the size is above the world size (a summary
    edited by hand: ingest keeps none such). Looked up per distinct (rank, name) pair."""
    sizes = np.full(len(rows), np.nan)
    entries = process_group_entries(process_groups, world_size)
    if not len(entries) or "process_group" not in kernels or not len(rows):
        return sizes
    index = pd.MultiIndex.from_frame(entries[["rank", "process_group"]])
    rank = kernels["rank"].to_numpy(dtype=np.int64)[rows] if "rank" in kernels else np.zeros(len(rows), np.int64)
    name = kernels["process_group"].astype(object).to_numpy()[rows]
    at = index.get_indexer(pd.MultiIndex.from_arrays([rank, name]))
    found = at >= 0
    sizes[found] = entries["size"].to_numpy(np.float64)[at[found]]
    return sizes


def process_group_entries(process_groups: ProcessGroups | None, world_size: int | None) -> pd.DataFrame:
    """The process-group tables as rows (`rank`, `process_group`, `size`), a size above the world
    size left out (a summary edited by hand: ingest keeps none such) — what the roofline and the
    cross-rank view look a collective's group up in."""
    entries = [
        (int(rank), str(name), int(size))
        for rank, groups in (process_groups or {}).items()
        for name, size in groups.items()
        if not world_size or size <= world_size
    ]
    table = pd.DataFrame(entries, columns=["rank", "process_group", "size"])
    return table.astype({"rank": "int64", "process_group": object, "size": "int64"})


def _costs_problem(problem: str) -> AtlasError:
    """A costs.toml that cannot be used, said in one line naming the file (a user's own catalog)."""
    return AtlasError(catalogs_dir() / "costs.toml", problem)


def _position(table: str, key: str, k: object) -> int:
    """A `[table]` entry's argument position: a whole number ≥ 1 (2.5 had been read as 2, 0 had
    silently turned the entry off)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise _costs_problem(f"[{table}] {key!r} = {k!r}: a position is a whole number from 1")
    return k


def _costs_pattern(table: str, pattern: object) -> re.Pattern[str]:
    """A regular expression of costs.toml's `[table]`, compiled (a broken one is said, not an
    internal error)."""
    return catalog_pattern(pattern, catalogs_dir() / "costs.toml", f"[{table}] {str(pattern)[:80]!r}")


@lru_cache(maxsize=1)
def _group_size_arguments() -> dict[str, int]:
    table = read_toml("costs.toml").get("group_size_argument", {})
    return {str(op): _position("group_size_argument", str(op), k) for op, k in table.items()}


def _argument_group_sizes(kernels: pd.DataFrame, rows: np.ndarray, world_size: int | None) -> np.ndarray:
    """Per collective row: the group size its launching op takes as an argument — its k-th integer
    argument (`[group_size_argument]`; bools are not integers) as `Concrete Inputs` records it —,
    NaN where its op takes none, the value is not recorded, or it exceeds the trace's world size
    (no group is larger than the job: another argument). Parsed once per distinct call."""
    sizes = np.full(len(rows), np.nan)
    ordinals = _group_size_arguments()
    if "concrete_inputs" not in kernels or not ordinals:
        return sizes
    wanted = np.flatnonzero(kernels["cpu_op"].iloc[rows].isin(list(ordinals)).to_numpy())
    if not len(wanted):
        return sizes
    columns = [kernels[c].iloc[rows[wanted]] for c in ("cpu_op", "input_dims", "input_types", "concrete_inputs")]
    group, first = _first_seen_groups(columns, empty_is_missing=False)
    found = []
    for i in first.tolist():
        launcher, dims, types, concrete = (c.iat[i] if isinstance(c.iat[i], str) else None for c in columns)
        args = parse_call(dims, types, None, concrete)
        integers = [a.value for a in args if a.kind == SCALAR and type(a.value) is int]
        k = ordinals[str(launcher)]
        found.append(float(integers[k - 1]) if 1 <= k <= len(integers) else np.nan)
    sizes[wanted] = np.array(found, dtype=np.float64)[group]
    if world_size:
        sizes[sizes > world_size] = np.nan
    return sizes


@lru_cache(maxsize=1)
def _message_not_recorded() -> re.Pattern[str] | None:
    """`[message_not_recorded] kernels`; None where the table is absent."""
    pattern = read_toml("costs.toml").get("message_not_recorded", {}).get("kernels")
    return None if pattern is None else _costs_pattern("message_not_recorded", pattern)


@lru_cache(maxsize=1)
def _group_size_templates() -> tuple[tuple[re.Pattern[str], int], ...]:
    """`[group_size_template]`: (pattern ending at the `<` of the kernel's template arguments, k)."""
    table = read_toml("costs.toml").get("group_size_template", {})
    return tuple(
        (_costs_pattern("group_size_template", pattern), _position("group_size_template", pattern, k))
        for pattern, k in table.items()
    )


# a template argument that is a group size: a whole number, with the suffix a demangler writes
# for an unsigned or long one (`8u`, `8ul`)
_WHOLE_NUMBER = re.compile(r"(\d+)[uUlL]*")


@lru_cache(maxsize=4096)
def template_group_size(name: str) -> int | None:
    """The group size a kernel's demangled `name` carries as its k-th template argument
    (`[group_size_template]`: `cross_device_reduce_1stage<__nv_bfloat16, 8>` → 8); None where no
    pattern finds the name or that argument is not a whole number ≥ 1."""
    for pattern, k in _group_size_templates():
        found = pattern.search(name)
        if found is None:
            continue
        arguments = _template_arguments(name, found.end())
        number = _WHOLE_NUMBER.fullmatch(arguments[k - 1]) if 1 <= k <= len(arguments) else None
        return int(number.group(1)) if number and int(number.group(1)) >= 1 else None
    return None


def _template_arguments(name: str, start: int) -> list[str]:
    """The top-level template arguments of `name` from `start` (just past their `<`) to the `>`
    that closes them: nested ones (`Params<__nv_bfloat16>`, `(Pattern)1`) stay whole."""
    arguments, depth, begin = [], 0, start
    for i in range(start, len(name)):
        c = name[i]
        if c in "<([":
            depth += 1
        elif c in ")]" or (c == ">" and depth > 0):
            depth -= 1
        elif c == ">" or (c == "," and depth == 0):
            arguments.append(name[begin:i].strip())
            begin = i + 1
            if c == ">":
                return arguments
    return []  # not closed: a name cut short names no argument


def template_collective_cost(kernel: str, call: Call) -> Cost:
    """The bus bytes of one collective call outside a trace (a catalog entry: its kernel's name and
    example tensors, no world size), as `_collective_costs` counts a trace's: its largest recorded
    tensor (the only one: its input, · `[input_to_message]`) · dtype size · the bus factor for the
    group size its kernel's template arguments give (`template_group_size`). NoCost where either is
    missing: a collective's size is not assumed without a world to assume it from."""
    tensors = [a for a in _without_buffer([a for a in call.args if a.is_tensor], call.launcher) if a.numel]
    not_recorded = _message_not_recorded()
    if not_recorded is not None and not_recorded.search(kernel):
        raise NoCost(f"{call.what}: {_UNRELATED}")
    if not tensors:
        raise NoCost(f"{call.what}: collective message size not recorded")
    ranks = template_group_size(kernel)
    if ranks is None:
        raise NoCost(f"{call.what}: group size unknown: not in its kernel's template arguments, and no world size")
    largest = max(tensors, key=lambda a: a.numel)
    itemsize = _itemsize(str(largest.dtype))
    if np.isnan(itemsize):
        raise NoCost(f"unknown collective dtype {largest.dtype!r}")
    op = call.op_mapping
    alone = len(tensors) == 1
    nelems = largest.numel * (_input_scale(op, ranks) if alone else 1.0)
    factor = bus_factor(op, ranks)
    message = _BORROWED_INPUT if alone else _BORROWED_LARGEST
    return Cost(
        flops=0.0,
        bytes=nelems * itemsize * factor,
        precision=comm_precision(str(largest.dtype)) or "int",
        unit="link",
        formula=_bus_formula(nelems, itemsize, factor, op, ranks, _TEMPLATE, message),
    )


def _kernel_names(kernels: pd.DataFrame, rows: np.ndarray) -> pd.Series:
    """The kernel names of `rows`; none where the table has no names (a hand-built one)."""
    if "name" not in kernels:
        return pd.Series([None] * len(rows), dtype=object)
    return kernels["name"].iloc[rows]


def _template_group_sizes(names: pd.Series, world_size: int | None) -> np.ndarray:
    """Per collective row: `template_group_size` of its kernel's name (worked out once per distinct
    name), NaN where none, or where it exceeds the trace's world size (no group is larger than
    the job: another template argument)."""
    kinds = names.astype("category")
    found = [template_group_size(str(name)) for name in kinds.cat.categories]
    per_name = np.array([np.nan if n is None else float(n) for n in found] + [np.nan])  # code -1: NaN
    sizes = per_name[kinds.cat.codes.to_numpy()]
    if world_size:
        sizes[sizes > world_size] = np.nan
    return sizes


@lru_cache(maxsize=1)
def _group_from_tensors() -> list[str]:
    return list(read_toml("costs.toml")["group_from_tensors"]["ops"])


def _say_why_silent(kernels: pd.DataFrame, silent: np.ndarray) -> None:
    """Collectives with neither NCCL's message fields nor a recorded tensor: the reason is that,
    not the launching op's lack of a cost model."""
    if not silent.any():  # most traces: no role to read (a text column of every kernel row)
        return
    role = kernels["role"].to_numpy(dtype=object)
    # refused by their launching op (a kernel without one keeps why: its link's reason)
    launched = kernels["cpu_op_id"].notna().to_numpy() if "cpu_op_id" in kernels else np.zeros(len(role), bool)
    rows = np.flatnonzero(silent & ((role == "no model") | ((role == "no shapes") & launched)))
    if len(rows):
        note = kernels["note"].to_numpy(dtype=object, copy=True)
        note[rows] = _SILENT
        kernels["note"] = _texts(note, kernels.index)


_BORROWED_INPUT = " (message: the recorded input)"
_BORROWED_LARGEST = " (message: the largest tensor recorded on its launch)"


@cache
def _input_scale(op: str, ranks: int) -> float:
    """nccl-tests' message size over the recorded input's size (all_gather: n parts of one input)."""
    expression = _input_to_message().get(op, "1")
    return float(eval(expression, {"__builtins__": {}}, {"n": ranks}))


@lru_cache(maxsize=1)
def _input_to_message() -> dict[str, str]:
    return read_toml("costs.toml")["input_to_message"]


@dataclass
class _Messages:
    """Per kernel row: the largest and smallest tensor recorded on its launch (elements; NaN
    where none is), the largest one's dtype, and how many tensors it recorded."""

    nelems: np.ndarray
    smallest: np.ndarray
    dtype: np.ndarray
    count: np.ndarray
    from_lists: np.ndarray  # bool: tensor lists, their dtype the trace's most common float one (assumed)


def _messages_from_shapes(kernels: pd.DataFrame, wanted: np.ndarray) -> _Messages:
    """The tensors recorded on the launches of the `wanted` rows."""
    found = _Messages(
        nelems=np.full(len(kernels), np.nan),
        smallest=np.full(len(kernels), np.nan),
        dtype=np.full(len(kernels), None, dtype=object),
        count=np.zeros(len(kernels), dtype=np.int64),
        from_lists=np.zeros(len(kernels), dtype=bool),
    )
    rows = np.flatnonzero(wanted & kernels["input_dims"].notna().to_numpy())
    if len(rows) == 0:
        return found
    keys = [kernels[k].iloc[rows] for k in ("input_dims", "input_types", "cpu_op") if k in kernels]
    group, first = _first_seen_groups(keys)
    seen: list[tuple[float, float, object, int]] = []
    listed: list[bool] = []
    list_dtype: str | None = None
    has_op = "cpu_op" in kernels
    for row in rows[first].tolist():
        recorded = parse_call(kernels["input_dims"].iat[row], kernels["input_types"].iat[row])
        args = _without_buffer([a for a in recorded if a.is_tensor], kernels["cpu_op"].iat[row] if has_op else None)
        lists = [a for a in recorded if a.kind == TENSOR_LIST and a.numel]
        from_lists = False
        if not args and lists:  # older c10d ops record their buckets as tensor lists, whose dtype is not recorded
            list_dtype = list_dtype or _dominant_float_dtype(kernels["input_types"]) or ""
            if list_dtype in dtypes():
                args, from_lists = [Arg(TENSOR, (a.numel,), list_dtype) for a in lists], True
        listed.append(from_lists)
        sizes = [a.numel for a in args if a.numel]
        largest = max(args, key=lambda a: a.numel, default=None)
        ok = largest is not None and largest.numel
        seen.append(
            (float(largest.numel), float(min(sizes)), largest.dtype, len(args)) if ok else (np.nan, np.nan, None, 0)
        )
    found.nelems[rows] = np.array([n for n, _, _, _ in seen])[group]
    found.smallest[rows] = np.array([m for _, m, _, _ in seen])[group]
    found.dtype[rows] = np.array([d for _, _, d, _ in seen], dtype=object)[group]
    found.count[rows] = np.array([c for _, _, _, c in seen], dtype=np.int64)[group]
    found.from_lists[rows] = np.array(listed, dtype=bool)[group]
    return found


@lru_cache(maxsize=1)
def _launch_buffers() -> dict[str, int]:
    """`[launch_buffers]`: op → the position, among the tensors recorded on its launch, of one
    that is a staging buffer, not the message."""
    table = read_toml("costs.toml").get("launch_buffers", {})
    return {str(op): _position("launch_buffers", str(op), k) for op, k in table.items()}


def _without_buffer(tensors: list[Arg], op: object) -> list[Arg]:
    """The tensors recorded on a collective's launch that may be its message: all but the staging
    buffer its op records beside it (`[launch_buffers]`: vLLM's `all_reduce_unreg(fa, inp,
    reg_buffer, out)` records its whole 8 MiB registered buffer, 512 times a [2, 4096] bf16
    message, which had been taken for the message as the largest tensor)."""
    k = _launch_buffers().get(str(op)) if isinstance(op, str) else None
    if k is None or k > len(tensors):
        return tensors
    return tensors[: k - 1] + tensors[k:]


def _itemsize(dtype: str) -> float:
    itemsize = comm_itemsize(dtype)
    return np.nan if itemsize is None else float(itemsize)


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
    role = filled(n, "no shapes")
    note = _link_notes(frame["link"])
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    precision = np.full(n, None, dtype=object)
    unit = np.full(n, None, dtype=object)
    formula = np.full(n, "", dtype=object)
    op_time = frame["dur_us"].to_numpy(copy=True)

    # one group per op call; the longest kernel of the call carries its cost
    has_call = frame["cpu_op_id"].notna().to_numpy() & (frame["kind"] == "kernel").to_numpy()
    call_rows = np.flatnonzero(has_call)
    keys = [frame["trace"].astype("category").cat.codes.to_numpy(np.int64)[call_rows] + 1]
    keys += [pd.factorize(frame[k].to_numpy()[call_rows])[0] for k in ("rank", "cpu_op_id")]
    call, _ = _groups(np.stack(keys, axis=1))
    dur = frame["dur_us"].to_numpy()[call_rows]
    # summed as pandas sums groups (compensated, each call's kernels in row order), so call
    # times do not depend on how the calls were numbered
    op_time[call_rows] = pd.Series(dur).groupby(call).transform("sum").to_numpy()
    # the longest kernel of each call; among equals the first to start, then by name — never the
    # order the trace wrote them in (it changed the call's cost: the main kernel's rule picks the
    # formula, and a batch norm's statistics kernel tied with its fill kernel)
    starts = frame["ts_us"].to_numpy(dtype=np.float64)[call_rows]
    longest_first = np.lexsort((call_rows, _lexical_ranks(frame["name"])[call_rows], starts, -dur, call))
    firsts = np.flatnonzero(np.diff(call[longest_first], prepend=-1) != 0)
    main_of_call = call_rows[longest_first[firsts]]  # indexed by call id: ids are numbered 0, 1, … in order
    is_main = np.zeros(n, dtype=bool)
    is_main[main_of_call] = True
    main_rows = np.flatnonzero(is_main)
    helper_rows = np.flatnonzero(has_call & ~is_main)
    role[helper_rows] = "helper"
    # a helper stands for no call (its call's time is counted on the call's main row): its own time,
    # else a call's two layout transforms made a helper row of twice the call's time (campaign AH)
    op_time[helper_rows] = frame["dur_us"].to_numpy()[helper_rows]
    call_of_row = np.full(n, -1, dtype=np.int64)
    call_of_row[call_rows] = call

    # one cost per distinct (op, recorded inputs, label); the label's rule picks kernel-family
    # formulas and says which GEMMs run on TF32 tensor cores
    keys = ["cpu_op", "op_mapping", "input_dims", "input_types", "concrete_inputs", "label_rule"]
    signature = frame[keys].iloc[main_rows]
    columns = [signature[c].astype("category") for c in signature.columns]
    columns.append(_attention_steps(frame).iloc[main_rows])  # the sequence lengths of attention calls
    columns.append(_optional(frame, "enclosed_shapes").iloc[main_rows])  # what a composite MoE op encloses
    partner = _optional(frame, "autograd_partner").iloc[main_rows]  # its forward op / backward node
    columns.append(partner.where(frame["cpu_op"].iloc[main_rows].isin(PARTNER_LAUNCHERS)))
    columns.append(_optional(frame, "input_strides").iloc[main_rows])  # an expanded input is read once
    # a batch norm forward's kernel names its mode where the call records no `training` flag
    # (`with_kernel_mode`); no other call's kernel name splits its signature
    batch_norm = frame["cpu_op"].iloc[main_rows].isin(BATCH_NORM_FORWARD)
    columns.append(frame["name"].iloc[main_rows].astype("category").where(batch_norm))
    stacked = [c.cat.codes.to_numpy(np.int64) for c in columns]
    codes = np.stack(stacked, axis=1) if len(main_rows) else np.empty((0, len(columns)))
    inverse, first = _groups(codes + 1)
    unique = codes[first].astype(np.int64)
    list_dtype = _dominant_float_dtype(frame["input_types"])
    # each column's values, None last (for code -1)
    texts = [np.append(np.asarray(c.cat.categories, dtype=object), None) for c in columns]
    results: list[tuple[Cost | None, str]] = []
    shapeless: list[bool] = []  # a refused call whose op recorded no input shapes: "no shapes", not "no model"
    for row in unique.tolist():
        launcher, op, dims, types, concrete, rule, step, enclosed, partner, strides, kernel = (
            text[k] for text, k in zip(texts, row, strict=True)
        )
        # no shapes, or shapes without their dtypes (PyTorch 1.8): the trace lacks what a cost needs
        shapeless.append(any(_unrecorded(v) for v in (dims, types)))
        # a call that recorded no `Input Dims` at all is told apart once, here: each formula's
        # refusal names one argument ("input 0 (self) has no recorded shape or a dtype not in
        # catalogs/dtypes.toml") and sent the reader to the dtype table (campaign BQ 3)
        no_dims = _unrecorded(dims)
        what = str(launcher or rule or op)  # as `Call.what` names it
        try:
            args = with_kernel_mode(str(launcher or ""), parse_call(dims, types, strides, concrete), str(kernel or ""))
            call = Call(
                str(launcher or ""),
                str(op),
                args,
                str(rule or ""),
                list_dtype,
                str(step or ""),
                str(enclosed or ""),
                str(partner or ""),
            )
            results.append((cost_of(call), ""))
        except NoCost as exc:
            results.append((None, _no_dims_reason(what, str(exc)) if no_dims else str(exc)))
        except (ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
            results.append((None, f"unexpected recorded shapes for {launcher} ({type(exc).__name__})"))
    if results:  # each call row takes its signature's result
        costed = [cost is not None for cost, _ in results]
        per_signature = {
            # refused: for want of the shapes the trace did not record, or of a model for them
            "role": [
                "main" if ok else ("no shapes" if bare else "no model")
                for ok, bare in zip(costed, shapeless, strict=True)
            ],
            "note": [why for _, why in results],
            "flops": [cost.flops if cost else np.nan for cost, _ in results],
            "bytes": [cost.bytes if cost else np.nan for cost, _ in results],
            "precision": [cost.precision if cost else None for cost, _ in results],
            "unit": [cost.unit if cost else None for cost, _ in results],
            "formula": [cost.formula if cost else "" for cost, _ in results],
        }
        targets = {"role": role, "note": note, "flops": flops, "bytes": nbytes}
        targets.update(precision=precision, unit=unit, formula=formula)
        kept = np.array(costed)[inverse]
        for key, target in targets.items():
            values = np.array(per_signature[key], dtype=target.dtype)[inverse]
            # every call gets its role; a refusal its reason (a costed call keeps its link note);
            # a cost its numbers
            chosen = slice(None) if key == "role" else (~kept if key == "note" else kept)
            target[main_rows[chosen]] = values[chosen]

    # memcpy / memset: their own byte counts. Host<->device copies are bounded by the host
    # link and a peer copy by the GPU-to-GPU link, each moving its bytes once over it; a
    # device-to-device copy reads and writes device memory (a peer copy had been costed so:
    # twice its bytes against HBM bandwidth, campaign AR)
    recorded = frame["bytes"].to_numpy(dtype=np.float64, na_value=np.nan)
    estimated, data_precision = _copied_data(frame, np.isnan(recorded))
    copies = np.flatnonzero((frame["kind"] != "kernel").to_numpy() & ~np.isnan(np.fmax(recorded, estimated)))
    if len(copies):
        moved = np.where(np.isnan(recorded), estimated, recorded)[copies]
        guessed = np.isnan(recorded[copies])
        host = _over_host_link(frame["name"])[copies]
        peer = _between_gpus(frame["name"], frame.get("launch"))[copies]
        memset = (frame["kind"] == "memset").to_numpy()[copies]
        path = np.select([host, peer, memset], [_OVER_HOST, _OVER_PEER, _WRITTEN], _READ_WRITTEN)
        traffic = np.where(path == _READ_WRITTEN, 2 * moved, moved)
        # no math: the precision is the data's where its launching op records it, else none (it had
        # been "int", which named an integer-math FLOP peak, campaign BU 6)
        role[copies], flops[copies], nbytes[copies], precision[copies] = "main", 0.0, traffic, data_precision[copies]
        unit[copies] = _COPY_UNITS[path]  # references, not a text a row
        formula[copies] = _copy_formulas(moved, path, guessed)
        note[copies] = ""
        op_time[copies] = frame["dur_us"].to_numpy()[copies]
    _say_what_is_missing(frame, role, note, has_call)
    # once the calls' costs are known: a helper of a call without one does not point at a cost
    mains = main_of_call[call_of_row[helper_rows]]
    note[helper_rows] = _helper_notes(frame, mains, helper_rows, role[mains] == "main")
    texts = {"role": role, "precision": precision, "unit": unit, "note": note, "formula": formula}
    columns = {key: _texts(values, frame.index) for key, values in texts.items()}
    return pd.DataFrame(
        {**columns, "flops": flops, "bytes": nbytes, "op_time_us": op_time},
        index=frame.index,
    )[["role", "flops", "bytes", "precision", "unit", "note", "formula", "op_time_us"]]


def _unrecorded(value: object) -> bool:
    """Whether a call's recorded `Input Dims` / `Input type` text is absent or empty."""
    return not value or str(value).strip() in ("[]", "null")


def _no_dims_reason(what: str, refusal: str) -> str:
    """Why a call that recorded no `Input Dims` has no cost: that, not its formula's refusal of one
    argument; a launcher with no cost model says that too (shapes alone would not cost it). The
    formulas still run first: a call costed without shapes (its sequence lengths, its enclosed
    ops' shapes) keeps its cost."""
    said = f"{what}: the call recorded no shapes (Input Dims)"
    return f"{said}, and {refusal}" if refusal.startswith("no cost model for ") else said


def _say_what_is_missing(frame: pd.DataFrame, role: np.ndarray, note: np.ndarray, has_call: np.ndarray) -> None:
    """In place: why rows left without a cost and without a note have none — a copy or memset
    without a byte count (its launching op records no size for it: a workspace), a kernel whose
    launcher is a Python frame or an annotation, which records no shapes. Their role stays "no
    shapes" (what the trace did not record); the note says what that is."""
    copies = (frame["kind"] != "kernel").to_numpy()
    # copies and kernels no op launched (few: the others are costed or refused with a reason)
    rows = np.flatnonzero((role == "no shapes") & (copies | ~has_call))
    rows = rows[np.array([not isinstance(n, str) or n == "" for n in note[rows].tolist()], dtype=bool)]
    if not len(rows):
        return
    kind = frame["kind"].astype(object).to_numpy()[rows]
    launcher = frame["launcher"].astype(object).to_numpy()[rows]
    has_launcher = np.array([isinstance(x, str) and x != "" for x in launcher.tolist()], dtype=bool)
    copy = kind != "kernel"
    note[rows[copy]] = [
        f"{k}: no byte count recorded, and {x if has else 'no launching op'} records no size for it"
        for k, x, has in zip(kind[copy], launcher[copy], has_launcher[copy], strict=True)
    ]
    framed = rows[~copy & has_launcher & ~has_call[rows]]
    note[framed] = "its launcher is a Python frame or an annotation, not an op: no shapes recorded"


# how a copy's bytes move (`_COPY_PATHS`, the formula's words) and the unit whose peak bounds it:
# a copy or fill on the device is held against memory bandwidth alone (`MEMORY`; `_peaks`)
_OVER_HOST, _WRITTEN, _READ_WRITTEN, _OVER_PEER = 0, 1, 2, 3
_COPY_PATHS = ("over the host link", "written", "read + written", "over the GPU-to-GPU link")
MEMORY = "memory"
_COPY_UNITS = np.array(["host", MEMORY, MEMORY, "peer"], dtype=object)


def _copy_formulas(moved: np.ndarray, path: np.ndarray, guessed: np.ndarray) -> np.ndarray:
    """Each copy's formula (objects): its bytes, how they move (`_COPY_PATHS[path]`), whether
    estimated; one text per distinct copy, not per row (500k copies of one size made 500k texts)."""
    distinct, which = np.unique(np.column_stack([moved, path, guessed]), axis=0, return_inverse=True)
    texts = [f"{int(m)} bytes {_COPY_PATHS[int(p)]}{_COPY_ESTIMATE if g else ''}" for m, p, g in distinct.tolist()]
    return np.array(texts, dtype=object)[which.reshape(-1)]


def _texts(values: np.ndarray, index: pd.Index) -> pd.Series:
    """A per-row text column kept as the objects it is made of: pandas would otherwise infer its
    Arrow string type, one conversion per row (~0.1 s for the five of 170k kernel rows)."""
    return pd.Series(values, index=index, dtype=object)


def _optional(frame: pd.DataFrame, column: str) -> pd.Series:
    """A text column as categorical; all missing in an output ingested before it existed."""
    if column not in frame:
        return pd.Series(pd.Categorical([None] * len(frame)), index=frame.index)
    return frame[column].astype("category")


def _attention_steps(frame: pd.DataFrame) -> pd.Series:
    """The step annotation of attention calls (categorical), missing for every other call: only
    attention reads it, and other calls keep one cost per signature whatever the step."""
    attention = (frame["category"] == "attention").to_numpy()
    return _optional(frame, "step_annotation").where(attention)


_COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous")
_FILL_OPS = ("aten::zero_", "aten::fill_")  # a memset they launch writes all of `self`
_COPY_ESTIMATE = " (estimate: no byte count recorded; the launching op's largest tensor)"


def _copied_data(frame: pd.DataFrame, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of memcpy and memset rows, the largest tensor recorded on their launching copy or fill op:
    its bytes where `wanted` (rows without a recorded byte count: ROCm writes none), and its
    dtype's precision (objects) on every such row; NaN and None elsewhere (a memset inside another
    op — a batch norm's workspace — has no size or dtype the op records)."""
    kind, launcher = frame["kind"], frame["launcher"]
    copy = ((kind == "memcpy") & launcher.isin(_COPY_OPS)) | ((kind == "memset") & launcher.isin(_FILL_OPS))
    tensors = _messages_from_shapes(frame, copy.to_numpy())
    itemsize = np.full(len(frame), np.nan)
    precision = np.full(len(frame), None, dtype=object)
    rows = np.flatnonzero(~np.isnan(tensors.nelems))
    distinct, which = np.unique(tensors.dtype[rows].astype(str), return_inverse=True)  # a few dtypes
    known = dtypes()
    itemsize[rows] = np.array([_itemsize(d) for d in distinct], dtype=np.float64)[which]
    precision[rows] = np.array([known[d].precision if d in known else None for d in distinct], dtype=object)[which]
    return np.where(wanted, tensors.nelems * itemsize, np.nan), precision


def _lexical_ranks(texts: pd.Series) -> np.ndarray:
    """Each row's text as its rank in lexical order (missing: after all), worked out on the
    distinct texts (`groups.lexical_codes`)."""
    if isinstance(texts.dtype, pd.CategoricalDtype):  # the kernels' names: codes already
        return lexical_codes(texts.cat.codes.to_numpy(np.int64), texts.cat.categories)
    codes, uniques = pd.factorize(texts.astype(object), use_na_sentinel=True)
    return lexical_codes(codes, uniques)


def _link_notes(link: pd.Series) -> np.ndarray:
    """How each row was linked, as a note (objects): empty for the usual link by correlation,
    missing where the link is; one text per distinct value, not per row."""
    column = link.astype("category")
    texts = np.array(["" if v == "correlation" else v for v in column.cat.categories] + [np.nan], dtype=object)
    return texts[column.cat.codes.to_numpy()]  # code -1 (missing): the last


def _groups(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group ids of the rows of a 2-D array of non-negative codes, numbered in order of first
    appearance (as `groupby(sort=False)` orders groups), and each group's first row. Hashing
    one combined integer per row, column by column, is far faster than grouping on strings."""
    n = len(codes)
    group = np.zeros(n, dtype=np.int64)
    for column in codes.T:
        group = pd.factorize(group * (int(column.max(initial=0)) + 1) + column)[0]
    first = np.flatnonzero(np.r_[True, group[1:] > np.maximum.accumulate(group)[:-1]]) if n else group
    return group, first


def _first_seen_groups(columns: list[pd.Series], empty_is_missing: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """`_groups` of category codes: missing values form one group, together with "" when
    `empty_is_missing`."""
    codes = [key_codes(column, empty_is_missing) + 1 for column in columns]
    return _groups(np.stack(codes, axis=1))


def _helper_notes(
    frame: pd.DataFrame, main_of_helper: np.ndarray, helpers: np.ndarray, costed: np.ndarray
) -> list[str]:
    """ "cost counted on <main kernel> (same <op> call)" for the helper rows of each call whose
    main kernel has a cost (`costed`, per helper), else "same <op> call as <main kernel>, which
    has no cost"; one text per distinct (main kernel, op, costed), not per row."""
    names = frame["name"].astype("category")
    ops = frame["cpu_op"].astype("category")
    main_name = names.cat.codes.to_numpy(np.int64)[main_of_helper]
    op = ops.cat.codes.to_numpy(np.int64)[helpers]
    width = len(ops.cat.categories) + 1
    keys = (main_name * width + op + 1) * 2 + costed.astype(np.int64)
    triples, which = np.unique(keys, return_inverse=True)
    texts = []
    for triple in triples.tolist():
        pair, has_cost = divmod(triple, 2)
        n, o = divmod(pair, width)
        op_name = ops.cat.categories[o - 1] if o > 0 else np.nan
        main = str(names.cat.categories[n])[:60]
        if has_cost:
            texts.append(f"cost counted on {main} (same {op_name} call)")
        else:
            texts.append(f"same {op_name} call as {main}, which has no cost")
    return [texts[k] for k in which.reshape(-1).tolist()]


def _over_host_link(names: pd.Series) -> np.ndarray:
    """Copies whose name says they cross the host link (HtoD, DtoH, pinned/pageable memory)."""
    return _names_saying(names, "HtoD|DtoH|HtoH|Pinned|Pageable")


def _between_gpus(names: pd.Series, launches: pd.Series | None) -> np.ndarray:
    """Copies that go from one GPU to another: whose name says so — CUPTI's peer-to-peer kind
    (Kineto and nsys `Memcpy PtoP (Device -> Device)`), nsys's unified-memory migration between
    two devices (`Memcpy Unified DtoD …`) — or whose launch call does: a peer copy of the CUDA
    runtime or driver or of HIP (`_PEER_COPY_CALLS`). ROCm names every device copy `Memcpy DtoD`,
    a peer copy too (rocprofiler has no peer kind): only its launch tells them apart (campaign AZ
    2). Another DtoD copy is on one device."""
    peer = _names_saying(names, r"\bPtoP\b|\bUnified DtoD\b")
    return peer if launches is None else peer | _names_saying(launches, _PEER_COPY_CALLS)


# the launch calls of a copy between two GPUs: cudaMemcpyPeer(Async), cudaMemcpy3DPeer(Async),
# cuMemcpyPeer(Async), cuMemcpy3DPeer(Async), hipMemcpyPeer(Async) — with the version or
# per-thread-stream suffix nsys may write (`_v…`, `_ptsz`)
_PEER_COPY_CALLS = r"^(?:cuda|cu|hip)Memcpy(?:3D)?Peer(?:Async)?(?:_v\d+|_pt(?:sz|ds))*$"


def _names_saying(names: pd.Series, pattern: str) -> np.ndarray:
    """Per row (bool): its name contains `pattern`, tested once per distinct name."""
    return name_mask(names, re.compile(pattern).search)


def analyse(
    frame: pd.DataFrame,
    device: Device | None,
    world_size: int | None = None,
    metrics: bool = True,
    process_groups: ProcessGroups | None = None,
) -> Analysis:
    """Costs, roofline, time shares and facts of kernel rows. `metrics=False` leaves the
    roofline table empty (its `groups` are there): a report of several parts (`analysis.ranks`)
    works out the metrics once, on the groups of every part added up. `process_groups`: per rank,
    its process groups' sizes by name (`store.run.process_group_sizes`), for collectives whose
    kernels record a group's name and not its size."""
    kernels = frame.copy(deep=False)  # columns are added or replaced, never written in place
    costs = _call_costs(kernels)
    for column in costs.columns:
        kernels[column] = costs[column]
    _collective_costs(kernels, world_size, process_groups)
    _drop_impossible_costs(kernels)
    kernels["estimate"] = _estimates(kernels)
    groups = roofline_groups(kernels)
    roofline = roofline_metrics(groups, device) if metrics else pd.DataFrame(columns=ROOFLINE_COLUMNS)
    timeshare = _timeshare(kernels)
    facts = _facts(kernels, device)
    return Analysis(kernels=kernels, roofline=roofline, timeshare=timeshare, facts=facts, groups=groups)


# a cost that stands on what the trace did not record says so: its formula names what it assumed,
# estimated or could not count (the formulas' convention: docs/costs.md), or its row's shapes were
# borrowed (link "inferred: …")
ESTIMATE_WORDS = r"\bassumed\b|\bestimate\b|\bnot recorded\b"


def _estimates(kernels: pd.DataFrame) -> np.ndarray:
    """Per row (bool): a costed call whose cost is an estimate (`ESTIMATE_WORDS`), worked out on
    the distinct formulas and links, not per row."""
    costed = (kernels["role"] == "main").to_numpy()
    if not costed.any():
        return np.zeros(len(kernels), dtype=bool)
    formula = kernels["formula"].astype("category")
    said = np.asarray(formula.cat.categories.astype(str).str.contains(ESTIMATE_WORDS, regex=True), dtype=bool)
    link = kernels.get("link", pd.Series(None, index=kernels.index, dtype=object)).astype("category")
    borrowed = np.asarray(link.cat.categories.astype(str).str.startswith("inferred"), dtype=bool)
    codes_f, codes_l = formula.cat.codes.to_numpy(), link.cat.codes.to_numpy()
    estimate = np.append(said, False)[codes_f] | np.append(borrowed, False)[codes_l]  # code -1: the last
    return costed & estimate


# a call whose recorded sizes would take more than this many times the time it took on the
# fastest GPU of the catalog moved or computed what no GPU can: its sizes are not costed (the
# roofline's own SOL above 100 % stays: data in L2 beats DRAM bandwidth, a peak's precision may
# be the wrong one — a few times, never ten)
IMPOSSIBLE_FACTOR = 10.0


_IMPOSSIBLE = (
    f"recorded sizes impossible in the time recorded (the fastest GPU known would need over "
    f"{IMPOSSIBLE_FACTOR:g}× as long): not costed"
)


@cache
def _fastest() -> tuple[float, float, float, float]:
    """The catalog's highest peak TFLOP/s (any precision and unit) and GB/s of memory, GPU link
    and host link: what no GPU known beats."""
    devices = load_devices().values()
    tflops = max(max([*d.tensor.values(), *d.vector.values()], default=0.0) for d in devices)
    return (
        tflops,
        max(d.memory_gbps for d in devices),
        max(d.link_gbps for d in devices),
        max(d.host_link_gbps for d in devices),
    )


def _drop_impossible_costs(kernels: pd.DataFrame) -> None:
    """Costed calls whose recorded sizes the fastest GPU known could not have handled in ten times
    the time recorded (`IMPOSSIBLE_FACTOR`): a copy of 2^62 bytes, an index_select over two
    dimensions of 2^31 (SOL of 10^14 % and 313,211 % were reported), in place — counted as no
    model, the note saying why. Device-independent, so that a report's costed share does not
    change with the peaks it is held against (`--device`)."""
    main = np.flatnonzero((kernels["role"] == "main").to_numpy())
    if len(main) == 0:
        return
    tflops, memory, link, host = _fastest()
    flops = np.nan_to_num(kernels["flops"].to_numpy(np.float64, na_value=np.nan)[main])
    nbytes = np.nan_to_num(kernels["bytes"].to_numpy(np.float64, na_value=np.nan)[main])
    unit = kernels["unit"].to_numpy(dtype=object)[main]
    bandwidth = np.where(np.isin(unit, ["link", "peer"]), link, np.where(unit == "host", host, memory))
    least_us = np.maximum(flops / (tflops * 1e6), nbytes / (bandwidth * 1e3))
    took = kernels["op_time_us"].to_numpy(np.float64, na_value=np.nan)[main]
    impossible = (took >= CLOCK_RESOLUTION_US) & (least_us > IMPOSSIBLE_FACTOR * took)
    if not impossible.any():
        return
    rows = main[impossible]
    role = kernels["role"].to_numpy(dtype=object, copy=True)
    note = kernels["note"].to_numpy(dtype=object, copy=True)
    role[rows] = "no model"
    note[rows] = _IMPOSSIBLE  # one reason for all (the trust table groups calls by reason)
    kernels["role"], kernels["note"] = _texts(role, kernels.index), _texts(note, kernels.index)
    for column in ("flops", "bytes"):
        values = kernels[column].to_numpy(np.float64, na_value=np.nan, copy=True)
        values[rows] = np.nan
        kernels[column] = values
    for column in ("precision", "unit", "formula"):
        values = kernels[column].to_numpy(dtype=object, copy=True)
        values[rows] = "" if column == "formula" else None
        kernels[column] = _texts(values, kernels.index)


ROOFLINE_KEYS = ["name", "launcher", "input_dims", "role"]
# a roofline row's calls also share their input dtypes (calls of one kernel and shapes on bf16
# and on fp8 data were one row, at the first one's precision and peak) and their note: how they
# were linked, or why they have no cost (kernels of one name without a launcher, some
# graph-replayed and some launched before the window, were one row with the reason of whichever
# came first in the trace)
GROUP_KEYS = [*ROOFLINE_KEYS, "op_mapping", "input_types", "note"]


def roofline_groups(kernels: pd.DataFrame) -> pd.DataFrame:
    """Costed kernel rows grouped by (name, launcher, input shapes, role, input dtypes, note): counts and summed
    times, the per-call cost of the group. Groups of several runs (ranks) add up: sum `count`,
    `total_us` and `op_time_us`, keep the first of the rest (see `roofline_metrics`)."""
    keys = ROOFLINE_KEYS
    columns = ["dur_us", "op_time_us", "flops", "bytes", "precision", "unit", "note", "formula", "call_stack"]
    work = kernels[columns].assign(estimate=kernels.get("estimate", False))
    work = pd.concat([work, efficiency_sums(kernels)], axis=1)
    # groups in order of first appearance; a missing name, launcher, shape or note counts as ""
    group, first = _first_seen_groups([kernels[k] for k in GROUP_KEYS])
    grouped = work.groupby(group, sort=True)
    table = grouped.agg(
        count=("dur_us", "size"),
        total_us=("dur_us", "sum"),
        op_time_us=("op_time_us", "sum"),
        # the mean call: one per signature, except attention calls of different steps
        flops=("flops", "mean"),
        bytes=("bytes", "mean"),
        precision=("precision", "first"),
        unit=("unit", "first"),
        note=("note", "first"),
        formula=("formula", "first"),
        estimate=("estimate", "max"),  # any of its calls
        call_stack=("call_stack", "first"),
        **{name: (name, "sum") for name in EFFICIENCY_SUMS},
    ).reset_index(drop=True)
    table["formula"], table["formulas"] = _group_formulas(table["formula"], work["formula"], group)
    # collectives of a run of several ranks: their calls' time waiting for the last rank (NaN: not known)
    waited = kernels["peer_wait_us"] if "peer_wait_us" in kernels else pd.Series(np.nan, index=kernels.index)
    table["peer_wait_us"] = waited.groupby(group, sort=True).sum(min_count=1).to_numpy()
    # missing texts count as "": each group's first value is its first row's
    for position, key in enumerate([*keys, *_FIRST_TEXTS]):
        texts = kernels[key].iloc[first].astype(object).fillna("").to_numpy()
        # the keys as texts; the others objects, as `first` of objects leaves them
        table.insert(position, key, texts if key in keys else pd.Series(texts, dtype=object))
    return table


_FIRST_TEXTS = ("op_mapping", "category", "input_types")


def _group_formulas(first: pd.Series, formulas: pd.Series, group: np.ndarray) -> tuple[pd.Series, np.ndarray]:
    """Each group's formula and how many distinct formulas its calls had: its calls' one, or —
    where they were costed with different ones (collectives recorded without shapes grouped by
    name, attention calls of several steps) — how many there were and the first, as the group's
    FLOPs and bytes are their mean."""
    texts = formulas.astype(object)
    codes = pd.factorize(texts.where(texts != ""), use_na_sentinel=True)[0]  # -1: no formula
    costed, base = codes >= 0, int(codes.max(initial=0)) + 1
    pairs = np.unique(group[costed] * base + codes[costed])  # each (group, formula) once
    distinct = np.bincount(pairs // base, minlength=len(first))
    result = first.astype(object).copy()
    for row in np.flatnonzero(distinct > 1).tolist():
        result.iat[row] = f"the mean of {distinct[row]:,} formulas; the first: {first.iat[row]}"
    return result, distinct.astype(np.int64)


def roofline_metrics(table: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    """The roofline table from `roofline_groups`: throughput, attainable time, SOL, bound and
    headroom per group against the device's peaks, ranked by headroom."""
    table = table.copy()
    table["estimate"] = table["estimate"].astype(bool)  # summed over ranks: any of them
    table["mean_us"] = table["op_time_us"] / table["count"]
    table["intensity"] = table["flops"] / table["bytes"].where(table["bytes"] > 0)
    table["peak_tflops"], table["peak_gbps"], table["peak_label"] = _peaks(table, device)
    calls = table["count"]
    # a collective's time waiting for the last rank to arrive is the late rank's doing, not the
    # transfer's: rates, SOL and headroom are of the time after it (runs of several ranks)
    waited = table["peer_wait_us"].fillna(0.0)  # `roofline_groups` gives every group its sum
    table["peer_wait_us"] = table["peer_wait_us"].where(waited > 0)
    working = (table["op_time_us"] - waited).clip(lower=0.0)
    # no time (every call 0 µs), or calls shorter on average than the clock records: no rate, no SOL
    timed = working.where((table["mean_us"] >= CLOCK_RESOLUTION_US) & (working / calls >= CLOCK_RESOLUTION_US))
    table["achieved_tflops"] = table["flops"] * calls / (timed * 1e6)
    table["achieved_gbps"] = table["bytes"] * calls / (timed * 1e3)
    compute_us = (table["flops"] / (table["peak_tflops"] * 1e6)).fillna(0.0)
    memory_us = table["bytes"] / (table["peak_gbps"] * 1e3)
    table["attainable_us"] = np.maximum(compute_us, memory_us)
    table["sol_pct"] = 100.0 * table["attainable_us"] * calls / timed
    bound = np.where(compute_us > memory_us, "compute", "memory").astype(object)
    for unit, limit in TRANSFER_BOUNDS.items():
        bound[(table["unit"] == unit).to_numpy()] = limit
    tiny = (table["attainable_us"] < LATENCY_US).to_numpy() & (table["sol_pct"] < 50).to_numpy()
    # latency where the measured call is short too (`LATENCY_CALL_US`); a long one keeps its roof
    per_call = working / calls
    short = (per_call <= LATENCY_CALL_US).to_numpy()
    bound[tiny & short] = "latency"
    bound[table["attainable_us"].isna().to_numpy()] = None
    table["bound"] = bound
    table["headroom_us"] = (working - table["attainable_us"] * calls).clip(lower=0.0)
    table = roofline_efficiency(table, _roofline_causes(table, per_call, tiny & ~short))
    table = table.sort_values(["headroom_us", "total_us"], ascending=False, na_position="last", kind="stable")
    return table[ROOFLINE_COLUMNS].reset_index(drop=True)


# a collective's bus bytes (and so its SOL) resting on the world size taken for its group's
ASSUMED_GROUP = "its bus bytes assume a group of the trace's world size (its group's size not recorded)"


def _roofline_causes(table: pd.DataFrame, per_call: pd.Series, unexplained: np.ndarray) -> list[str | None]:
    """Per group, what the roofline itself says of its SOL, before the efficiency columns' causes
    (`roofline_efficiency`): a tiny cost in long calls (`unexplained`: attainable under
    `LATENCY_US`, calls longer than `LATENCY_CALL_US`) explains neither a roof nor a launch's
    latency, and a collective's bus bytes may rest on the world size taken for its group's (at any
    SOL: the SOL is that estimate's — its finding had not said so, campaign BH 6). Worked out on
    those rows only."""
    formulas = table["formula"].astype(object).fillna("").astype(str)
    collective = (table["unit"] == "link").to_numpy()
    assumed = collective & formulas.str.contains(WORLD_SIZE_ASSUMED, regex=False).to_numpy()
    causes: list[str | None] = [None] * len(table)
    attainable, measured = table["attainable_us"].to_numpy(), per_call.to_numpy()
    for row in np.flatnonzero(assumed | unexplained).tolist():
        found = []
        if unexplained[row]:
            found.append(
                f"{measured[row]:,.0f} µs a call for {attainable[row]:.2g} µs attainable: "
                "work its cost misses, or time the trace does not explain"
            )
        if assumed[row]:
            found.append(ASSUMED_GROUP)
        causes[row] = "; ".join(found)
    return causes


def _peaks(table: pd.DataFrame, device: Device | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the device's peak TFLOP/s and GB/s for its precision and unit, and the peak's
    label: worked out once per distinct (role, precision, unit), not per group (a trace of 300k
    distinct kernels has as many groups)."""
    n = len(table)
    peak_t, peak_g, labels = np.full(n, np.nan), np.full(n, np.nan), np.full(n, None, object)
    if device is None or n == 0:
        return peak_t, peak_g, labels
    keys = ["role", "precision", "unit"]
    number, firsts = group_numbers(table[keys], keys)
    for group, first in enumerate(firsts.tolist()):
        role, precision, unit = (table[key].iat[first] for key in keys)
        if role != "main":
            continue
        rows = number == group
        # bandwidth alone, whatever the precision (a copy's data may have none recorded)
        transfer = device.transfer_peak(str(unit))
        if transfer is not None:
            peak_g[rows], labels[rows] = transfer
            continue
        if unit == MEMORY:  # a copy or fill on the device: no math, held against memory bandwidth
            peak_g[rows], labels[rows] = device.memory_gbps, "memory bandwidth"
            continue
        if pd.isna(precision):
            continue
        peak = device.peak(str(precision), "None" if pd.isna(unit) else str(unit))
        peak_t[rows], peak_g[rows], labels[rows] = peak.tflops, device.memory_gbps, peak.label
    return peak_t, peak_g, labels


def _stream_keys(device: pd.Series, stream: pd.Series) -> list[str]:
    """`device D stream S` (`stream S` where the device is not known, `(unknown)` without either)."""
    keys = []
    for d, s in zip(device.tolist(), stream.tolist(), strict=True):
        known_d, known_s = d is not None and d == d, s is not None and s == s  # NaN != NaN
        if not known_s:
            keys.append("(unknown)")
        else:
            keys.append(f"device {int(d)} stream {int(s)}" if known_d else f"stream {int(s)}")
    return keys


def _timeshare(kernels: pd.DataFrame) -> pd.DataFrame:
    """Time per category, op, kernel, module and stream; each level sums to the GPU time.

    GPU time = sum of durations of all GPU activities: activities that overlap on different
    streams are each counted in full (busy time, which counts overlap once, is in the facts)."""
    total = float(kernels["dur_us"].sum())
    parts = []

    def texts(column: pd.Series, missing: str | None = None) -> Callable[[np.ndarray], Sequence[str]]:
        return lambda first: column.iloc[first].astype(object).fillna(missing).to_numpy()

    device, stream = kernels["device"], kernels["stream"]
    # per level: the columns grouped on and the keys of the groups (by each group's first row)
    levels = {
        "category": ([kernels["category"]], texts(kernels["category"])),
        "op_mapping": ([kernels["op_mapping"]], texts(kernels["op_mapping"])),
        "kernel": ([kernels["name"]], texts(kernels["name"])),
        "module": ([kernels["module"]], texts(kernels["module"], "(no module)")),
        # stream 7 of two devices: two streams
        "stream": ([device, stream], lambda first: _stream_keys(device.iloc[first], stream.iloc[first])),
        "kind": ([kernels["kind"]], texts(kernels["kind"])),
    }
    for level, (columns, keys) in levels.items():
        group, first = _first_seen_groups(columns, empty_is_missing=False)
        g = kernels["dur_us"].groupby(group, sort=True).agg(["sum", "size"])
        g.index = pd.Index(keys(first))
        g = g.sort_values("sum", ascending=False)
        parts.append(
            pd.DataFrame(
                {
                    "level": level,
                    "key": g.index.astype(str),
                    "total_us": g["sum"].to_numpy(),
                    "count": g["size"].to_numpy(),
                    "pct": 100.0 * g["sum"].to_numpy() / total if total else np.nan,  # 0 µs in all: no share
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
    # each call's time (all its kernels: `op_time_us`) counted once, on the row that carries its
    # cost or says why it has none, so that the three add up to the GPU time; a call's helper
    # kernels went uncounted where its cost was missing (a two-rank NCCL trace: 55 of 330 ms)
    for fact, role in (("costed_time_us", "main"), ("no_shape_time_us", "no shapes"), ("no_model_time_us", "no model")):
        facts[fact] = float(kernels.loc[kernels["role"] == role, "op_time_us"].sum())
    # of the costed time, that of calls whose cost is an estimate (`_estimates`, set by `analyse`)
    facts["estimated_time_us"] = float(kernels.loc[kernels["estimate"].to_numpy(bool), "op_time_us"].sum())
    return facts
