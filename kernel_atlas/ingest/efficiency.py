"""How well each kernel fills the GPU, read from the trace alone (no hardware counters).

Per kernel (docs/efficiency.md): blocks and warps per SM, the theoretical number of blocks an SM
can hold at once (block size, registers per thread, shared memory against the SM limits of
catalogs/devices.toml, the trace's deviceProperties winning), the estimated achieved occupancy
(Kineto's `est. achieved occupancy %` where recorded, else the same estimate computed here),
waves and the fill of the last one, and whether the kernel runs on tensor / matrix cores
(catalogs/efficiency.toml). Per device, over a time window: the TensorBoard plugin's GPU
utilization, est. SM efficiency, est. achieved occupancy, and the tensor-core share of kernel time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from kernel_atlas.core.devices import TRANSFER_BOUNDS, Device, Properties, match_properties
from kernel_atlas.core.groups import value_groups
from kernel_atlas.core.paths import read_toml
from kernel_atlas.core.texts import name_mask, trie_pattern
from kernel_atlas.ingest.intervals import clipped_length, merge, reaching
from kernel_atlas.ingest.link import GRAPH_LAUNCH_PREFIXES
from kernel_atlas.ingest.nsys import WHOLE_GRAPH_NAME
from kernel_atlas.ingest.recorded import dtypes, type_names
from kernel_atlas.store.summary_schema import DEVICE_METRICS

RECORDED, ESTIMATED, UPPER_BOUND = "recorded", "estimated", "upper bound"
# `occupancy_source`'s codes while it is worked out, in sorted order (as a categorical of the texts orders them)
SOURCES = (ESTIMATED, RECORDED, UPPER_BOUND)
COLUMNS = (
    "blocks_per_sm",
    "warps_per_sm",
    "max_blocks_per_sm",
    "theoretical_occupancy_pct",
    "est_occupancy_pct",
    "occupancy_source",
    "waves",
    "wave_efficiency_pct",
    "tensor_core",
)


@dataclass(frozen=True)
class SmLimits:
    """What one SM (CU) of a device can hold; `registers_known` False: only the thread bound."""

    sms: int
    warp_size: int
    max_threads: int
    max_warps: int
    max_blocks: int
    registers: int
    register_unit: int
    sub_partitions: int
    shared: int
    shared_unit: int
    reserved_shared: int
    registers_known: bool


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict[str, Any]]:
    return read_toml("devices.toml").get("sm_limits", {})


@lru_cache(maxsize=1)
def tensor_core_rules() -> dict[str, Any]:
    return read_toml("efficiency.toml")["tensor_core"]


def _is_amd(props: dict[str, Any]) -> bool:
    name = str(props.get("name", ""))
    return props.get("warpSize") == 64 or "AMD" in name or "Instinct" in name


def describing(device_properties: list[dict[str, Any]], devices: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The entry of a trace's device table (Kineto's `deviceProperties`, nsys's TARGET_INFO_GPU)
    that describes each of `devices`: the entry of its id (the last of several). A device no entry
    has is an unknown GPU, left out: the table's other GPU is another device, whose name, SMs and
    peaks are not this one's. The table's only entry describes every device of its trace where
    nothing says it is another: without an id (none recorded, or one that was no number), or an
    AMD GPU — ROCm numbers a kernel's device by its HSA agent (the first GPU behind two CPU agents
    is 2; the MI300X traces' kernels run on 2 and 9), not by the HIP index of deviceProperties, and
    the one GPU listed is the process's one visible GPU."""
    by_id = {p.get("id"): p for p in device_properties}
    single = device_properties[0] if len(device_properties) == 1 else {}
    only = single if single and ("id" not in single or _is_amd(single)) else None
    found = {device: by_id.get(device) or only for device in devices}
    return {device: props for device, props in found.items() if props is not None}


def _architecture(props: dict[str, Any]) -> dict[str, Any] | None:
    name = str(props.get("name", ""))
    compute = f"{props.get('computeMajor')}.{props.get('computeMinor')}"
    amd = _is_amd(props)
    entries = [e for e in _catalog().values() if (e["vendor"] == "amd") == amd]
    by_name = [e for e in entries if any(re.search(p, name, re.IGNORECASE) for p in e.get("match", ()))]
    by_compute = [e for e in entries if compute in e.get("compute", ())]
    return (by_name or by_compute or [None])[0]


def sm_limits(props: dict[str, Any]) -> SmLimits | None:
    """The limits of the device a deviceProperties entry describes; None when its architecture is
    not in the catalog or its SM count is unknown (no estimate is then possible)."""
    arch = _architecture(props)
    device = _catalog_device(props)
    sms = props.get("numSms") or (device.sms if device else None)
    if arch is None or not isinstance(sms, int) or sms <= 0:
        return None
    known = arch.get("registers_recorded", True)

    def value(trace_key: str, catalog_key: str, default: int = 0) -> int:
        given = props.get(trace_key)
        return int(given) if isinstance(given, int) and given > 0 else int(arch.get(catalog_key, default))

    warp = value("warpSize", "warp_size")
    threads = value("maxThreadsPerMultiprocessor", "max_threads_per_sm")
    shared = props.get("sharedMemPerMultiprocessor") or props.get("maxSharedMemoryPerMultiProcessor")
    return SmLimits(
        sms=sms,
        warp_size=warp,
        max_threads=threads,
        max_warps=threads // warp,
        max_blocks=int(arch["max_blocks_per_sm"]),
        registers=value("regsPerMultiprocessor", "registers_per_sm"),
        register_unit=int(arch.get("register_unit", 1)),
        sub_partitions=int(arch.get("sub_partitions", 1)),
        shared=int(shared) if isinstance(shared, int) and shared > 0 else int(arch["shared_per_sm"]),
        shared_unit=int(arch.get("shared_unit", 1)),
        reserved_shared=int(arch.get("reserved_shared", 0)),
        registers_known=bool(known),
    )


def _catalog_device(props: dict[str, Any]) -> Device | None:
    return match_properties(str(props.get("name", "")), Properties.of(props))


def tensor_precisions(props: dict[str, Any] | None) -> frozenset[str] | None:
    """The precisions the device of a device-table entry has a tensor-core peak for
    (catalogs/devices.toml `tensor`; empty for a GPU without tensor cores); None where the entry
    or its GPU is not known (not described, or not in the catalog): whether it runs a bf16 GEMM on
    tensor cores is then not known either."""
    device = _catalog_device(props) if props else None
    return frozenset(device.tensor) if device else None


def _volumes(column: pd.Series) -> np.ndarray:
    """x·y·z of "[x, y, z]" texts, computed once per distinct text: NaN when absent or when a
    dimension is not positive (no launch has one: `[0, 1, 1]`, `[-32, 1, 1]` say nothing of its
    threads), in exact integers (x·y·z past int64 wrapped in numpy, to 0 for 2^32·2^32)."""
    values = column.astype("category")
    per_text = []
    for text in values.cat.categories:
        dims = [int(d) for d in re.findall(r"-?\d+", str(text))]
        per_text.append(float(math.prod(dims)) if dims and min(dims) > 0 else np.nan)
    table = np.append(np.array(per_text, dtype=np.float64), np.nan)
    return table[values.cat.codes.to_numpy()]


@lru_cache(maxsize=1)
def _work_item_launches() -> frozenset[str]:
    """Launch calls whose recorded grid counts work-items (catalogs/efficiency.toml `[grid]`)."""
    return frozenset(read_toml("efficiency.toml").get("grid", {}).get("work_item_launches", []))


def _grid_blocks(frame: pd.DataFrame) -> np.ndarray:
    """Each row's grid in blocks (`_volumes` of its grid), but for launches that record their grid
    in work-items (`_work_item_launches`): there ⌈grid / block⌉ per axis, computed once per
    distinct (grid, block) pair — NaN where an axis of either is missing or not positive. A kernel
    whose launch is not in the trace counts its grid as the launched kernels of its name, grid and
    block all do (`_work_items_unlaunched`)."""
    blocks = _volumes(frame["grid"])
    if "launch" not in frame:
        return blocks
    work = frame["launch"].astype(object).isin(_work_item_launches()).to_numpy()
    if not work.any():
        return blocks
    rows = np.flatnonzero(work | _work_items_unlaunched(frame, work))
    # as texts, a missing one "" (a categorical's `astype(str)` keeps its NaN, which no pattern reads)
    pairs = pd.DataFrame({k: frame[k].iloc[rows].astype(object).fillna("").astype(str) for k in ("grid", "block")})
    codes, uniques = pd.MultiIndex.from_frame(pairs).factorize()
    per_pair = []
    for grid_text, block_text in uniques:
        grid = [int(d) for d in re.findall(r"-?\d+", grid_text)]
        block = [int(d) for d in re.findall(r"-?\d+", block_text)]
        usable = grid and len(grid) == len(block) and min(grid) > 0 and min(block) > 0
        per_pair.append(float(math.prod(-(-g // b) for g, b in zip(grid, block, strict=True))) if usable else np.nan)
    blocks[rows] = np.asarray(per_pair, dtype=np.float64)[codes]
    return blocks


def _work_items_unlaunched(frame: pd.DataFrame, work: np.ndarray) -> np.ndarray:
    """Per row, whether its launch is not in the trace and the launched kernels of its name, grid
    and block (one at least) were all launched by a work-item launch (`work`): ROCm writes grid and
    block from the launch, so a kernel launched before the window has them only as borrowed from
    those kernels (`infer.py`) — in work-items, which read as blocks had made a Tensile GEMM's 256
    blocks 65,536 — or, where it records them itself, as the same launch records them."""
    out = np.zeros(len(frame), bool)
    if "name" not in frame:
        return out
    launched = frame["launch"].notna().to_numpy()
    orphans = np.flatnonzero(~launched & frame["grid"].notna().to_numpy() & (frame["kind"] == "kernel").to_numpy())
    if not len(orphans):
        return out
    keys = ["name", "grid", "block"]
    names = frame["name"].iloc[orphans].unique()
    peers = np.flatnonzero(launched & frame["name"].isin(names).to_numpy())  # only the names wanted
    by_key = frame[keys].iloc[peers].astype(object).assign(work=work[peers]).groupby(keys, dropna=False)["work"].all()
    wanted = frame[keys].iloc[orphans].astype(object)
    found = wanted.merge(by_key.reset_index(), on=keys, how="left")["work"]
    out[orphans] = found.eq(True).to_numpy(bool)  # NaN: no launched kernel of that key
    return out


def _max_blocks(limits: SmLimits, threads: np.ndarray, regs: np.ndarray, shared: np.ndarray) -> np.ndarray:
    """Blocks one SM holds at once (cuda_occupancy.h's limits: warps, blocks, registers per
    sub-partition, shared memory); NaN where registers or shared memory are not recorded. Where a
    device records no registers (AMD's traces), the work-item bound and, where a launch records
    it, the shared memory's (LDS: a 16 KiB block fits 4 to a 64 KiB CU)."""
    warps = np.ceil(threads / limits.warp_size)
    bound = np.minimum(np.floor(limits.max_warps / warps), limits.max_blocks)
    need = np.ceil((shared + limits.reserved_shared) / limits.shared_unit) * limits.shared_unit
    with np.errstate(divide="ignore", invalid="ignore"):
        by_shared = np.where(need > 0, np.floor(limits.shared / need), np.inf)  # NaN: not recorded, no bound
    if not limits.registers_known:
        return np.minimum(bound, by_shared)
    per_warp = np.ceil(regs * limits.warp_size / limits.register_unit) * limits.register_unit
    with np.errstate(divide="ignore", invalid="ignore"):
        warps_per_part = np.floor(limits.registers / limits.sub_partitions / per_warp)
        by_regs = np.where(regs > 0, np.floor(warps_per_part * limits.sub_partitions / warps), np.inf)
    out = np.minimum(bound, np.minimum(by_regs, by_shared))
    return np.where(np.isnan(regs) | np.isnan(shared), np.nan, out)


def _precisions(types: pd.Series) -> tuple[np.ndarray, list[str | None]]:
    """The precision of the first floating dtype each row's op recorded, as codes into the list
    returned with them (its last entry None: none recorded), one per distinct `input_types`."""
    values = types.astype("category")
    known = dtypes()
    per_text: list[str | None] = []
    for text in values.cat.categories:
        names = [n for n in type_names(str(text)) if n in known and known[n].precision not in ("int", "int8")]
        per_text.append(known[names[0]].precision if names else None)
    codes = values.cat.codes.to_numpy().astype(np.int64)
    codes[codes < 0] = len(per_text)
    return codes, [*per_text, None]


@lru_cache(maxsize=2)
def _tensor_core_names(key: str = "name_patterns") -> Callable[[str], bool]:
    """`[tensor_core]`'s list `key` as one test of a name, case-insensitive: CUTLASS 3 writes
    `Gmma`/`GMMA` (`MainloopSm90TmaGmmaWarpSpecialized`), cuBLAS `gmma`, hipBLASLt `MFMA` and
    `mfma`. The words, lower-cased, as a trie searched in the lower-cased name: an alternation
    searched case-insensitively had cost 40 µs a 256-character name (80,000 distinct kernel names:
    6.5 s of an ingest)."""
    words = sorted({p.lower() for p in tensor_core_rules().get(key, [])})
    if not words:
        return lambda name: False
    search = re.compile(trie_pattern(words)).search
    return lambda name: search(name.lower()) is not None


def _whole_graph_rows(frame: pd.DataFrame) -> np.ndarray:
    """Per row, whether it is an Nsight whole-graph replay (`nsys.py` GRAPH_TRACE rows): named
    `<CUDA graph 3 replay>`, of no graph node, and launched as a graph — a graph id, or a
    `cudaGraphLaunch`. By the name alone a Kineto kernel so named (an ordinary `cudaLaunchKernel`
    under an `aten::mm` that records bf16) had been made unknown too."""
    whole = name_mask(frame["name"], WHOLE_GRAPH_NAME.match)
    if not whole.any():
        return whole
    n = len(frame)
    nodeless = frame["graph_node_id"].isna().to_numpy() if "graph_node_id" in frame else np.ones(n, bool)
    graph = frame["graph_id"].notna().to_numpy() if "graph_id" in frame else np.zeros(n, bool)
    if "launch" in frame:
        graph = graph | name_mask(frame["launch"], lambda launch: launch.startswith(GRAPH_LAUNCH_PREFIXES))
    return whole & nodeless & graph


def _tensor_core(
    frame: pd.DataFrame, device_tensor: list[tuple[np.ndarray, frozenset[str] | None]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, whether it runs on tensor cores and whether that is known: by name (catalogs/
    efficiency.toml patterns; `no_mma_name_patterns` a known no), or by category and recorded
    precision, where the row's device has tensor cores of that precision (`device_tensor`: rows
    of each numbered device and its `tensor_precisions`). Unknown where the name says nothing and
    the category is one that runs on tensor cores in some precision, but the rule's other inputs
    are not in the trace: the op recorded no floating dtype (record_shapes off, or no op launched
    it), or a dtype with tensor cores on some GPU for a device whose precisions are not known.
    Evaluated per distinct name, category, precision and device."""
    rules = tensor_core_rules()
    # a name known to run no MMA (`no_mma_name_patterns`) is a known False, whatever else it holds
    no_mma = name_mask(frame["name"], _tensor_core_names("no_mma_name_patterns"))
    hit = name_mask(frame["name"], _tensor_core_names()) & ~no_mma
    # an Nsight whole-graph replay's row (`<CUDA graph 3 replay>`): the kernels it ran are not in
    # the export, so neither is whether they used tensor cores (it had counted as a known no)
    whole_graph = _whole_graph_rows(frame)
    hit &= ~whole_graph
    known = ~whole_graph
    if "category" not in frame:
        return hit, known
    types = frame["input_types"] if "input_types" in frame else pd.Series(None, index=frame.index, dtype=object)
    precision, texts = _precisions(types)

    def among(allowed: Iterable[str]) -> np.ndarray:  # per row: its precision is one of `allowed`
        wanted = set(allowed)
        return np.array([text in wanted for text in texts], bool)[precision]

    eligible = name_mask(frame["category"], lambda category: category in rules["categories"]) & ~hit & ~no_mma
    eligible &= ~whole_graph
    on_device, device_known = np.zeros(len(frame), bool), np.zeros(len(frame), bool)
    for rows, precisions in device_tensor:
        if precisions is not None:
            on_device[rows] = among(precisions)[rows]
            device_known[rows] = True
    tensor_precision = among(rules["precisions"])
    unrecorded = np.array([text is None for text in texts], bool)[precision]
    hit |= eligible & tensor_precision & on_device
    known &= ~(eligible & (unrecorded | (tensor_precision & ~device_known)))
    return hit, known


def kernel_columns(frame: pd.DataFrame, device_properties: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-kernel columns of the module docstring (`COLUMNS`), aligned with `frame`; NaN /
    None for memcpys, memsets and kernels whose device limits are unknown — a device the trace
    does not number or describe among them — (but the occupancy Kineto recorded for them);
    `tensor_core` null for memcpys, memsets and kernels whose answer is not known (`_tensor_core`)."""
    n = len(frame)
    out: dict[str, Any] = {c: np.full(n, np.nan) for c in COLUMNS}
    out["occupancy_source"] = np.full(n, -1, np.int8)  # codes into SOURCES (-1: none)
    out["tensor_core"] = pd.arrays.BooleanArray(np.zeros(n, bool), np.ones(n, bool))  # all unknown
    if not n:
        return out
    kernel = (frame["kind"] == "kernel").to_numpy()
    devices = frame["device"].to_numpy(dtype=np.float64, na_value=np.nan)
    grid, threads = _grid_blocks(frame), _volumes(frame["block"])
    regs = frame["registers_per_thread"].to_numpy(dtype=np.float64, na_value=np.nan)
    shared = frame["shared_mem_bytes"].to_numpy(dtype=np.float64, na_value=np.nan)
    recorded = frame["recorded_occupancy_pct"].to_numpy(dtype=np.float64, na_value=np.nan)
    recorded = np.where((recorded >= 0) & (recorded <= 100), recorded, np.nan)  # a share beyond 0–100 % is none
    device_tensor: list[tuple[np.ndarray, frozenset[str] | None]] = []  # rows of each device, its tensor precisions
    # a kernel on a device the trace does not number, or does not describe (`describing`), has no
    # limits: the one GPU the table lists may be another device
    known = np.flatnonzero(kernel & ~np.isnan(devices))
    # a device number past int64 (Nsight's deviceId 2^63 − 1 is 9.223372036854776e18 as a float)
    # describes no device and is nulled later with other out-of-range ids: cast, it had numpy warn
    ids = np.unique(devices[known])
    described = describing(device_properties, ids[np.abs(ids) < 2.0**63].astype(np.int64).tolist())
    for device, at in value_groups(devices[known]):
        props = described.get(int(device))
        limits = sm_limits(props) if props else None
        rows = known[at]
        device_tensor.append((rows, tensor_precisions(props)))
        if limits is None:  # no limits to estimate from: Kineto's own estimate, where it wrote one, still holds
            _recorded_only(out, rows, recorded[rows])
            continue
        _fill(out, rows, limits, grid[rows], threads[rows], regs[rows], shared[rows], recorded[rows])
    tensor, told = _tensor_core(frame, device_tensor)
    # unknown off kernels, and where the trace cannot tell: a stored False would read as a measured 0 %
    out["tensor_core"] = pd.arrays.BooleanArray(np.where(kernel & told, tensor, False), ~(kernel & told))
    return out


def _recorded_only(out: dict[str, Any], rows: np.ndarray, recorded: np.ndarray) -> None:
    """The occupancy Kineto recorded (`est. achieved occupancy %`, NaN where none within 0–100 %) of
    kernels on a device whose limits are unknown (no `deviceProperties`): the other columns need
    the limits."""
    out["est_occupancy_pct"][rows] = recorded
    out["occupancy_source"][rows] = np.where(np.isnan(recorded), -1, SOURCES.index(RECORDED))


def _fill(
    out: dict[str, Any],
    rows: np.ndarray,
    limits: SmLimits,
    grid: np.ndarray,
    threads: np.ndarray,
    regs: np.ndarray,
    shared: np.ndarray,
    recorded: np.ndarray,
) -> None:
    blocks_per_sm = grid / limits.sms
    max_blocks = _max_blocks(limits, threads, regs, shared)
    warps = np.ceil(threads / limits.warp_size)
    # Kineto's estimate: the blocks an SM holds (at most the grid's share), their threads over the SM's
    estimate = np.minimum(max_blocks, blocks_per_sm) * threads / limits.max_threads * 100.0
    # Kineto's 0 % where ours is at least 1 %: its calculator is called without the opt-in shared
    # memory limit, so a kernel using more than 48 KiB holds "no block" there (h100_vit: 68 % of
    # the kernel time); a kernel that ran held one. Below 1 % its 0 is its rounding, kept.
    recorded = np.where((recorded == 0) & (estimate >= 1.0), np.nan, recorded)
    has_recorded = ~np.isnan(recorded)  # within 0–100 % (`kernel_columns`)
    estimated = SOURCES.index(ESTIMATED if limits.registers_known else UPPER_BOUND)
    source = np.where(has_recorded, SOURCES.index(RECORDED), np.where(np.isnan(estimate), -1, estimated))
    with np.errstate(divide="ignore", invalid="ignore"):
        waves = np.where(max_blocks > 0, grid / (limits.sms * max_blocks), np.nan)  # a block no SM holds: no waves
        used = np.where(waves > 0, waves / np.ceil(waves) * 100.0, np.nan)  # of the slots of its waves
    out["blocks_per_sm"][rows] = blocks_per_sm
    out["warps_per_sm"][rows] = blocks_per_sm * threads / limits.warp_size
    out["max_blocks_per_sm"][rows] = max_blocks
    if limits.registers_known:
        out["theoretical_occupancy_pct"][rows] = max_blocks * warps / limits.max_warps * 100.0
    out["est_occupancy_pct"][rows] = np.where(has_recorded, recorded, estimate)
    out["occupancy_source"][rows] = source
    out["waves"][rows] = waves
    out["wave_efficiency_pct"][rows] = used


def with_kernel_efficiency(frame: pd.DataFrame, device_properties: list[dict[str, Any]]) -> pd.DataFrame:
    """`frame` with the per-kernel efficiency columns appended."""
    for name, values in kernel_columns(frame, device_properties).items():
        frame[name] = _sources(values) if name == "occupancy_source" else values
    return frame


def _sources(codes: np.ndarray) -> pd.Categorical:
    """`occupancy_source` from its codes into SOURCES: a categorical of the sources present, in
    sorted order (as `pd.Categorical` of the texts would make it)."""
    return pd.Categorical.from_codes(codes, categories=list(SOURCES)).remove_unused_categories()


def device_metrics(kernels: pd.DataFrame, lo: float, hi: float) -> dict[str, float | None]:
    """The TensorBoard plugin's GPU metrics of one device's kernels over [lo, hi] (µs), in %:
    utilization (merged kernel time / window), est. SM efficiency (Σ min(Σ running kernels'
    blocks per SM, 1) × time / window), est. achieved occupancy (mean of the kernels'
    occupancy weighted by their time in the window), tensor-core share of the kernel time whose
    answer is known — with, where some is not (`tensor_core` null), `TENSOR_CORE_UNKNOWN`: that
    time's share of the kernel time, and the share null where it is all of it. Where no kernel ran
    in the window the first three are 0 (no SM held a block) and the share null; a window of no
    length gives null for all."""
    if hi - lo <= 0:
        return dict.fromkeys(METRICS)
    return DeviceKernels.of(kernels).metrics(lo, hi)


MIN_KNOWN = 0.5  # share of kernel time with a known grid below which no SM efficiency is estimated
METRICS = DEVICE_METRICS
# beside the metrics, only where it is not 0: the share (%) of the window's kernel time whose
# kernels' tensor-core answer is unknown (`_tensor_core`), left out of `tensor_core_time_pct`
TENSOR_CORE_UNKNOWN = "tensor_core_unknown_pct"


@dataclass
class DeviceKernels:
    """One device's kernels as `device_metrics` reads them, with what does not depend on the
    window worked out once — the kernels in start order with the running latest end, the merged
    busy ranges, the blocks-per-SM level over time —, so that each window (a trace's steps each
    ask for theirs) reads only the kernels and ranges that can reach into it: its cost follows the
    window's kernels, not the trace's."""

    start: np.ndarray  # in start order
    end: np.ndarray
    reach: np.ndarray  # the latest end up to each kernel (infinite where a time is unknown)
    bps: np.ndarray  # blocks per SM: recorded where positive, else estimated
    occupancy: np.ndarray
    tensor: np.ndarray
    tensor_known: np.ndarray  # whether `tensor` is known (`tensor_core` not null)
    busy: tuple[np.ndarray, np.ndarray]  # merged (start, end)
    level_times: np.ndarray  # the times the blocks-per-SM level changes, sorted
    level: np.ndarray  # min(level, 1) between consecutive `level_times`

    # the columns of the kernels `of` reads
    COLUMNS: ClassVar[tuple[str, ...]] = (
        "ts_us",
        "dur_us",
        "recorded_blocks_per_sm",
        "blocks_per_sm",
        "est_occupancy_pct",
        "tensor_core",
    )

    @classmethod
    def of(cls, kernels: pd.DataFrame) -> DeviceKernels:
        start = kernels["ts_us"].to_numpy(np.float64)
        end = start + kernels["dur_us"].to_numpy(np.float64)
        recorded_bps = kernels["recorded_blocks_per_sm"].to_numpy(np.float64, na_value=np.nan)
        bps = np.where(recorded_bps > 0, recorded_bps, kernels["blocks_per_sm"].to_numpy(np.float64, na_value=np.nan))
        occupancy = kernels["est_occupancy_pct"].to_numpy(np.float64, na_value=np.nan)
        tensor = kernels["tensor_core"].to_numpy(dtype=bool, na_value=False)
        tensor_known = kernels["tensor_core"].notna().to_numpy()
        # ∫ min(Σ blocks per SM of the kernels running at t, 1) dt: kernels without a positive value
        # left out, as the plugin does
        ok = bps > 0
        times = np.concatenate([start[ok], end[ok]])
        steps = np.concatenate([bps[ok], -bps[ok]])
        ends = np.r_[np.zeros(ok.sum()), np.ones(ok.sum())]  # a start before an end at the same time
        order = np.lexsort((ends, times))
        times, level = times[order], np.cumsum(steps[order])
        by_start = np.argsort(start, kind="stable")
        start, end = start[by_start], end[by_start]
        timed = not (np.isnan(start).any() or np.isnan(end).any())
        return cls(
            start=start,
            end=end,
            reach=np.maximum.accumulate(end) if timed and len(end) else np.full(len(end), np.inf),
            bps=bps[by_start],
            occupancy=occupancy[by_start],
            tensor=tensor[by_start],
            tensor_known=tensor_known[by_start],
            busy=merge(start, end),
            level_times=times,
            level=np.minimum(np.where(level > 1e-9, level, 0.0), 1.0)[:-1],
        )

    def metrics(self, lo: float, hi: float) -> dict[str, float | None]:
        """`device_metrics` over [lo, hi]."""
        window = hi - lo
        if window <= 0:  # 0/0
            return dict.fromkeys(METRICS)
        if not len(self.start):
            return {**dict.fromkeys(METRICS, 0.0), "tensor_core_time_pct": None}
        # only the kernels, busy ranges and level intervals that can reach into the window
        part = reaching(self.start, self.reach, lo, hi) if np.isfinite(self.reach[-1]) else slice(None)  # else: all
        inside = clipped_length(self.start[part], self.end[part], lo, hi)
        busy_start, busy_end = self.busy
        merged = reaching(busy_start, busy_end, lo, hi)
        busy = float(clipped_length(busy_start[merged], busy_end[merged], lo, hi).sum())
        occupancy = self.occupancy[part]
        weighted = ~np.isnan(occupancy) & (occupancy >= 0) & (inside > 0)
        kernel_time = float(inside.sum())
        if kernel_time <= 0:  # no kernel ran in the window: nothing held an SM, both are 0 as the utilization
            return {
                **dict.fromkeys(METRICS, 0.0),
                "gpu_utilization_pct": 100.0 * busy / window,
                "tensor_core_time_pct": None,
            }
        # kernels without a grid (graph replays on ROCm, say) would count as 0 blocks: the estimate is
        # shown only where the grids of most of the kernel time are known
        known = float(inside[self.bps[part] > 0].sum()) / kernel_time
        return {
            "gpu_utilization_pct": 100.0 * busy / window,
            "sm_efficiency_pct": 100.0 * self._sm_busy(lo, hi) / window if known >= MIN_KNOWN else None,
            "achieved_occupancy_pct": float(np.average(occupancy[weighted], weights=inside[weighted]))
            if weighted.any()
            else None,
            **self._tensor_share(inside, part, kernel_time),
        }

    def _tensor_share(
        self, inside: np.ndarray, part: slice | np.ndarray, kernel_time: float
    ) -> dict[str, float | None]:
        """The tensor-core share of the kernel time whose answer is known (null where none is), and
        where some is not, `TENSOR_CORE_UNKNOWN`: a share of the known time alone, not a 0 % for what
        the trace cannot tell (an op recorded without its dtypes)."""
        told = self.tensor_known[part]
        known_time, unknown_time = float(inside[told].sum()), float(inside[~told].sum())
        tensor_time = float(inside[self.tensor[part] & told].sum())
        share = {"tensor_core_time_pct": min(100.0, 100.0 * tensor_time / known_time) if known_time > 0 else None}
        if unknown_time > 0:
            share[TENSOR_CORE_UNKNOWN] = min(100.0, 100.0 * unknown_time / kernel_time)
        return share

    def _sm_busy(self, lo: float, hi: float) -> float:
        """∫ level over [lo, hi]: the level's intervals [times[k], times[k+1]) that reach into it."""
        times = self.level_times
        if len(times) < 2:
            return 0.0
        k = reaching(times[:-1], times[1:], lo, hi)
        return float((self.level[k] * clipped_length(times[:-1][k], times[1:][k], lo, hi)).sum())


# --- the roofline table's efficiency columns ----------------------------------------------------

# per-row products summed per roofline group (and across ranks), then divided: time-weighted means
EFFICIENCY_SUMS = (
    *("occupancy_us", "occupancy_weight_us", "wave_used_us"),
    *("waves_us", "wave_weight_us", "tensor_core_us", "tensor_core_known_us"),
)
ROOFLINE_EFFICIENCY = ("est_occupancy_pct", "waves", "wave_efficiency_pct", "tensor_core_pct", "likely_cause")


def efficiency_sums(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel row, the products `roofline_efficiency` divides after the roofline grouping."""
    dur = kernels["dur_us"].to_numpy(np.float64)

    def column(name: str) -> np.ndarray:
        return kernels[name].to_numpy(np.float64, na_value=np.nan) if name in kernels else np.full(len(dur), np.nan)

    occupancy, waves, used = column("est_occupancy_pct"), column("waves"), column("wave_efficiency_pct")
    tensor = column("tensor_core")
    has_waves = ~np.isnan(waves) & ~np.isnan(used)
    return pd.DataFrame(
        {
            "occupancy_us": np.where(np.isnan(occupancy), 0.0, occupancy * dur),
            "occupancy_weight_us": np.where(np.isnan(occupancy), 0.0, dur),
            "wave_used_us": np.where(has_waves, used * dur, 0.0),
            "waves_us": np.where(has_waves, waves * dur, 0.0),
            "wave_weight_us": np.where(has_waves, dur, 0.0),
            "tensor_core_us": np.where(tensor == 1, dur, 0.0),
            "tensor_core_known_us": np.where(np.isnan(tensor), 0.0, dur),  # a null `tensor_core`: unknown
        },
        index=kernels.index,
    )


def roofline_efficiency(table: pd.DataFrame, read: Sequence[str | None] | None = None) -> pd.DataFrame:
    """`ROOFLINE_EFFICIENCY` columns of roofline groups from their `EFFICIENCY_SUMS` (time-weighted
    means over the group's kernels), and where SOL is low the likely cause they point to, after
    `read`: per group, what the roofline itself says of its SOL (`roofline.analysis`), if anything.
    A group bound by a link (`unit` a transfer's: collectives, copies) is named no occupancy or
    wave cause: an NCCL kernel runs on a few blocks by design and its link sets its speed — "low
    occupancy (est. 7%); grid fills 22% of one wave" had been a SendRecv's advice (campaign BH 6)."""
    given = [None] * len(table) if read is None else list(read)
    if not all(name in table for name in EFFICIENCY_SUMS):
        return table.assign(**{name: np.nan for name in ROOFLINE_EFFICIENCY[:-1]}, likely_cause=given)
    rules = read_toml("efficiency.toml")["likely_cause"]
    occ_w, wave_w = table["occupancy_weight_us"], table["wave_weight_us"]
    known = table["tensor_core_known_us"]
    # time-weighted means of shares within 0–100 % stay there (summing in floats made 100.00000000000001)
    table = table.assign(
        est_occupancy_pct=(table["occupancy_us"] / occ_w.where(occ_w > 0)).clip(0.0, 100.0),
        waves=table["waves_us"] / wave_w.where(wave_w > 0),
        wave_efficiency_pct=(table["wave_used_us"] / wave_w.where(wave_w > 0)).clip(0.0, 100.0),
        # of the group's time whose answer is known (null where none is: recorded without dtypes)
        tensor_core_pct=(100.0 * table["tensor_core_us"] / known.where(known > 0)).clip(0.0, 100.0),
    )
    low = (table["sol_pct"] < rules["low_sol_pct"]).to_numpy() if "sol_pct" in table else np.zeros(len(table), bool)
    if "unit" in table:  # not the grid's doing where a link bounds the group
        low = low & ~table["unit"].isin(list(TRANSFER_BOUNDS)).to_numpy()
    causes = []
    columns = (table["est_occupancy_pct"], table["waves"], table["wave_efficiency_pct"])
    for said, slow, occ, waves, used in zip(given, low, *columns, strict=True):
        found = [said] if said else []
        if slow and occ < rules["low_occupancy_pct"]:
            found.append(f"low occupancy (est. {occ:.0f}%)")
        if slow and used < rules["partial_wave_pct"]:  # the slots of its waves the grid leaves empty
            partial = f"{waves:.2f} waves: {used:.0f}% of their slots used"
            found.append(f"grid fills {used:.0f}% of one wave" if waves < 1 else partial)
        causes.append("; ".join(found) or None)
    return table.assign(likely_cause=causes)
