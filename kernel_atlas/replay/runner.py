"""`atlas replay`: choose what to replay, replay it, measure it, check it, tabulate it."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.classify.classifier import default_classifier, rule_id, unlabelled
from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import read_toml
from kernel_atlas.core.texts import time_bound, user_pattern
from kernel_atlas.ingest.recorded import Arg, from_params, parse_call
from kernel_atlas.replay.inputs import NotReplayable, counting_allocations, nbytes, size_text
from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from kernel_atlas.store.outputs import lock, write_table
from kernel_atlas.store.run import REPLAY, Run

try:
    import resource
except ImportError:  # not on Windows: CPU replays are not bounded there
    resource = None  # type: ignore[assignment]

# Kernels one process on one GPU cannot replay, by their label (a rules.toml rule, else the
# label's category), and why.
NOT_REPLAYABLE = {
    ("rule", "expert-parallel-a2a"): "DeepEP dispatch/combine needs the expert-parallel ranks and their buffers",
    ("rule", "deepep-layout"): "DeepEP's dispatch layout needs the expert-parallel ranks and their buffers",
    ("rule", "deepgemm-grouped"): "grouped DeepGEMM (masked/contiguous layout) needs the per-expert token layout",
    ("category", COMMUNICATION): "a collective across ranks: not replayable on one GPU",
}


def not_replayable(target: Target) -> str | None:
    """Why the target's kernel cannot be replayed on one GPU, or None."""
    keys = (("rule", rule_id(target.label_rule) or ""), ("category", target.category))
    return next((NOT_REPLAYABLE[key] for key in keys if key in NOT_REPLAYABLE), None)


@dataclass
class Target:
    kernel: str
    launcher: str
    op_mapping: str
    category: str
    input_dims: str | None
    input_types: str | None
    input_strides: str | None
    concrete_inputs: str | None
    traced_us: float | None
    count: int
    source: str  # "trace" or "catalog"
    label_rule: str = ""  # the kernel's label rule (kernels.parquet label_rule); classified when empty
    args: tuple[Arg, ...] = field(default=())  # the recorded call; parsed from the text columns when empty
    grid: str | None = None  # the traced launch's grid and block, "[x, y, z]" (trace targets)
    block: str | None = None
    launch_index: int = 0  # which launch of this kernel within its op call (0: the first)
    seq_len: int | None = None  # KV length per request, where the recording has only workspaces
    batch: int | None = None  # requests per call, likewise
    # kernels.parquet's `launcher` of the calls replayed: the innermost CPU op or Python frame
    # (`rmsnorm (pybind11)` inside `aiter::rmsnorm`), as roofline.parquet's; None: `launcher`
    # (None too for a trace's kernel launched with no CPU op and no launcher: kernels.parquet's null)
    trace_launcher: str | None = None
    kernels: str | None = None  # the kernels those calls launched, as a JSON list (trace targets)
    # why the trace holds no replayable call for these kernels (no CPU op, no shapes): counted
    # and listed with the reason, never replayed; None: a replayable call
    unreplayable: str | None = None

    def __post_init__(self) -> None:
        # the seed catalog's unfilled labels (`TBD`): none (its silu_and_mul had "no replay implementation")
        self.op_mapping = "" if unlabelled(self.op_mapping) else self.op_mapping
        self.category = "" if unlabelled(self.category) else self.category
        if not self.label_rule or not self.op_mapping or not self.category:
            label = default_classifier().classify(self.kernel, self.launcher or None)
            self.label_rule = self.label_rule or label.rule
            self.op_mapping = self.op_mapping or label.op_mapping
            self.category = self.category or label.category
        if not self.args:
            self.args = parse_call(self.input_dims, self.input_types, self.input_strides, self.concrete_inputs)


@dataclass
class Result:
    kernel: str
    launcher: str | None  # as kernels.parquet's and roofline.parquet's: the innermost CPU op or Python frame
    cpu_op: str  # the op whose recorded call was replayed (its schema, its cost)
    kernels: str | None  # the kernels the replayed calls launched in the trace, a JSON list
    op_mapping: str
    category: str
    input_dims: str | None
    input_types: str | None
    input_strides: str | None
    concrete_inputs: str | None
    implementation: str
    timed: str  # "kernel", "pipeline" or "stand-in" (see replay.aten), "" when not replayed
    config: str  # the launch configuration used (Triton kernels), and where it came from
    scale: float  # dimensions ≥ 64 shrunk by this factor (1: the recorded shapes)
    device: str
    device_name: str
    method: str
    median_us: float | None
    p10_us: float | None
    p90_us: float | None
    reps: int
    traced_us: float | None
    ratio: float | None
    flops: float | None
    bytes: float | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    check: str
    reason: str
    count: int = 1  # traced calls (non-ATen launchers, unreplayable kernels: launches) this row stands for


def replayed(results: pd.DataFrame) -> pd.Series:
    """Which results were replayed: timed (`median_us` set), whether or not their values could be
    checked (dropout, an op returning nothing: check `skipped`, timed all the same). What
    `N/M replayed` counts, and the rows a scaled-down-replay note is about."""
    return results["median_us"].notna() if len(results) else pd.Series([], dtype=bool)


_TARGET_COLUMNS = ("trace", "name", "kind", "dur_us", "cpu_op", "cpu_op_id", "op_mapping", "category")


def targets_from_output(out_dir: str | Path) -> list[Target]:
    """Replay targets of an ingest output: one per distinct ATen call (launching op, its
    launcher and its recorded inputs), timed as the mean of one op call (all of its kernels);
    other launchers (Triton, custom ops) one per distinct (kernel, launch within the call,
    recorded inputs), timed as the mean of that kernel launch, with its grid and block. Each
    names the kernels its calls launched (`kernels`), which `atlas report` joins it to; an ATen
    call is named and labelled by its main kernel — the longest, as the roofline's `role` main
    (a cuDNN convolution's `fprop` kernel, not the layout transform it launches first).

    Kernels the trace records no replayable call for are targets too, never replayed and counted
    with their reason (`unreplayable`): launched with no CPU op (a CUDA/HIP graph replay with no
    matched capture, a launch outside every op), one per (kernel, grid, block); calls whose op
    recorded no input shapes. A run whose ops recorded no shapes at all (a profiler run without
    `record_shapes=True`) is refused in one line: nothing in it can be replayed."""
    with lock(out_dir, shared=True):  # not while an ingest or a report writes it
        frame = Run.open(out_dir, required=_TARGET_COLUMNS).kernels()
    frame = frame[frame["kind"] == "kernel"].copy()
    if frame.empty:  # it had said "no kernel matches the filters", with no filter given
        raise AtlasError(out_dir, "no GPU kernels in this run (a CPU-only profile?): nothing to replay")
    recorded = ("input_dims", "input_types", "input_strides", "concrete_inputs")
    has_launcher = "launcher" in frame
    # kernels.parquet's launcher as it is, null kept, for the kernels launched with no CPU op
    launchers = frame["launcher"].astype(object).to_numpy() if has_launcher else [None] * len(frame)
    for column in ("name", "cpu_op", "label_rule", *recorded, "grid", "block", "launcher", "link"):
        frame[column] = frame[column].astype(object).fillna("") if column in frame else ""
    if not has_launcher:  # an output written before launchers: the op itself
        frame["launcher"] = frame["cpu_op"]
    frame = frame.reset_index(drop=True)
    with_op = frame["cpu_op"] != ""
    shaped = with_op & (frame["input_dims"] != "")
    if with_op.any() and not shaped.any():
        raise AtlasError(
            out_dir,
            "no input shapes recorded (the profiler ran without record_shapes=True): nothing to replay; "
            "profile with record_shapes=True",
        )
    without = _unreplayable_kernels(frame[~with_op].assign(launcher=pd.Series(launchers)[~with_op].to_numpy()))
    frame = frame[with_op].reset_index(drop=True)
    if frame.empty:
        return without
    aten = frame["cpu_op"].str.startswith("aten::").to_numpy()
    # a non-ATen kernel is its own unit; an ATen op call is one unit with all of its kernels
    frame["launch_index"] = frame.groupby(["trace", "rank", "cpu_op_id", "name"], observed=True).cumcount()
    frame.loc[aten, "launch_index"] = 0
    frame["unit"] = frame["cpu_op_id"].astype("int64").where(aten, -1 - frame.index.to_series())
    frame["row"] = frame.index
    # each call's main kernel first: the longest, among equals the first to start, then by name (as
    # roofline/analysis.py picks the row that carries a call's cost); the calls keep trace order
    starts = frame["ts_us"] if "ts_us" in frame else frame["row"]
    order = frame.assign(_start=starts, _dur=-frame["dur_us"]).sort_values(["_dur", "_start", "name"], kind="stable")
    calls = (
        order.groupby(["trace", "rank", "unit"], observed=True, sort=False)
        .agg(
            call_us=("dur_us", "sum"),
            first_row=("row", "min"),
            name=("name", "first"),
            cpu_op=("cpu_op", "first"),
            op_mapping=("op_mapping", "first"),
            category=("category", "first"),
            label_rule=("label_rule", "first"),
            input_dims=("input_dims", "first"),
            input_types=("input_types", "first"),
            input_strides=("input_strides", "first"),
            concrete_inputs=("concrete_inputs", "first"),
            grid=("grid", "first"),
            block=("block", "first"),
            launch_index=("launch_index", "first"),
            launcher=("launcher", "first"),
        )
        .sort_values("first_row", kind="stable")
    )
    calls["kernel_key"] = calls["name"].where(~calls["cpu_op"].str.startswith("aten::"), "")
    signature = ["cpu_op", "kernel_key", "launch_index", *recorded, "launcher"]
    # the kernels each signature's calls launched (an ATen call's several; the others' own one)
    calls["signature"] = calls.groupby(signature, sort=False).ngroup()
    of_rows = calls["signature"].reindex(pd.MultiIndex.from_frame(frame[["trace", "rank", "unit"]])).to_numpy()
    launched = pd.DataFrame({"signature": of_rows, "name": frame["name"].to_numpy()}).drop_duplicates()
    kernels = launched.groupby("signature", sort=True)["name"].agg(lambda names: json.dumps(sorted(names)))
    grouped = (
        calls.groupby(signature, sort=False)
        .agg(
            name=("name", "first"),
            op_mapping=("op_mapping", "first"),
            category=("category", "first"),
            label_rule=("label_rule", "first"),
            traced_us=("call_us", "mean"),
            total_us=("call_us", "sum"),
            count=("call_us", "size"),
            grid=("grid", "first"),
            block=("block", "first"),
            signature=("signature", "first"),
        )
        .reset_index()
    )
    grouped["kernels"] = grouped["signature"].map(kernels)
    targets = []
    for r in grouped.itertuples(index=False):
        # an op that recorded no shapes: its calls cannot be told apart, nor their mean be any call's time
        bare = not r.input_dims
        why = (
            f"shapes not recorded for this op (no Input Dims: the profiler ran without record_shapes=True); "
            f"{int(r.count)} call(s), {r.total_us:,.1f} µs in all"
            if bare
            else None
        )
        targets.append(
            Target(
                str(r.name),
                str(r.cpu_op),
                str(r.op_mapping),
                str(r.category),
                r.input_dims or None,
                r.input_types or None,
                r.input_strides or None,
                r.concrete_inputs or None,
                None if bare else float(r.traced_us),
                int(r.count),
                "trace",
                str(r.label_rule or ""),
                grid=r.grid or None,
                block=r.block or None,
                launch_index=int(r.launch_index),
                trace_launcher=str(r.launcher),
                kernels=r.kernels,
                unreplayable=why,
            )
        )
    return targets + without


def _unreplayable_kernels(frame: pd.DataFrame) -> list[Target]:
    """One target per (kernel, grid, block, how it was linked) of kernels launched with no CPU op:
    no recorded call to replay them from, so they are listed and counted, with why (`link`) and
    their traced time (the mean launch; the reason gives the total). Their `launcher` is
    kernels.parquet's (a Triton launch's `<built-in function launch>`, null for a graph replay's)."""
    if frame.empty:
        return []
    graph = frame["graph_launch"].fillna(False).astype(bool) if "graph_launch" in frame else False
    frame = frame.assign(graph=graph)
    grouped = (
        frame.groupby(["name", "grid", "block", "graph", "link", "launcher"], sort=False, dropna=False)
        .agg(
            traced_us=("dur_us", "mean"),
            total_us=("dur_us", "sum"),
            count=("dur_us", "size"),
            op_mapping=("op_mapping", "first"),
            category=("category", "first"),
            label_rule=("label_rule", "first"),
        )
        .reset_index()
    )
    targets = []
    for r in grouped.itertuples(index=False):
        launcher = None if pd.isna(r.launcher) else str(r.launcher)
        if r.graph:
            why = (
                "launched by a CUDA/HIP graph replay: no CPU op or shapes recorded for it "
                "(ingest with --capture and the graph's capture trace to replay it)"
            )
        elif launcher:  # a Python frame launched it: frames record no input shapes
            why = f"launched from {r.launcher}, with no CPU op: no input shapes recorded for it"
        else:
            why = f"no CPU op recorded for its launch ({r.link or 'not linked'})"
        targets.append(
            Target(
                str(r.name),
                "",
                str(r.op_mapping or ""),
                str(r.category or ""),
                None,
                None,
                None,
                None,
                float(r.traced_us),
                int(r.count),
                "trace",
                str(r.label_rule or ""),
                grid=r.grid or None,
                block=r.block or None,
                trace_launcher=launcher,
                kernels=json.dumps([str(r.name)]),
                unreplayable=f"{why}; {int(r.count)} launch(es), {r.total_us:,.1f} µs in all",
            )
        )
    return targets


def save_replay(results: pd.DataFrame, out_dir: str | Path, run_id: str | None) -> Path:
    """`replay.parquet` in the ingest output the targets came from (`run_id`: its run when they
    were read); refused when the folder was re-ingested meanwhile (the rows would not match)."""
    with lock(out_dir):
        if Run.open(out_dir).run_id != run_id:
            raise AtlasError(out_dir, "was ingested again while replaying: replay.parquet not written")
        return write_table(results, Path(out_dir) / REPLAY, run_id)


def targets_from_catalog(path: str | Path) -> list[Target]:
    """One target per named catalog entry, with the entry's example shapes; the catalog checked
    as `atlas classify` checks it (a lone surrogate or a list where an object belongs was an
    internal error)."""
    from kernel_atlas.classify.classifier import load_catalog

    targets = []
    for entry in load_catalog(path):
        if not entry.get("kernel_name"):
            continue  # nothing to replay it as
        params = entry.get("params", [])
        dims = [p["example_dim"] if isinstance(p.get("example_dim"), list) else [] for p in params]
        types = [p.get("example_dtype") or "" for p in params]
        targets.append(
            Target(
                entry["kernel_name"],
                entry.get("kernel_implementation", ""),
                entry.get("op_mapping", ""),
                entry.get("category", ""),
                json.dumps(dims),  # shown in the results
                json.dumps(types),
                None,
                None,
                None,
                1,
                "catalog",
                args=from_params(params),
            )
        )
    return targets


def select(targets: list[Target], kernel: str | None, op: str | None, category: str | None) -> list[Target]:
    """The targets `--kernel` (a pattern found in any kernel the calls launched: a convolution by
    its `fprop` kernel as by its layout transform), `--op` and `--category` (the call's main
    kernel's label) select."""
    pattern = user_pattern(kernel, f"--kernel {kernel!r}") if kernel else None
    with time_bound(f"--kernel {kernel!r}"):
        return [
            t
            for t in targets
            if (pattern is None or any(pattern.search(name) for name in _launched(t)))
            and (op is None or t.op_mapping == op)
            and (category is None or t.category == category)
        ]


def _launched(target: Target) -> list[str]:
    """The kernel a target is named by and every kernel its calls launched."""
    try:
        names = json.loads(target.kernels) if target.kernels else []
    except ValueError:
        names = []
    names = names if isinstance(names, list) else []
    return [target.kernel, *(n for n in names if isinstance(n, str))]


# the most work one ATen call may take in a CPU replay (it checks against a float64 reference too):
# an mm of 32768×2048×8192 (1.1 TFLOP) ran for minutes and took 6.6 GB
CPU_MAX_FLOPS = 2e10


def _cost(target: Target) -> tuple[float | None, float | None]:
    try:
        cost = cost_of(Call(target.launcher, target.op_mapping, target.args, target.label_rule))
    except (NoCost, ValueError, IndexError, TypeError, ZeroDivisionError):
        return None, None
    return cost.flops, cost.bytes


def replay_one(target: Target, device: str, max_gib: float = 16.0, scale: float | None = None) -> Result:
    """Replay one target: check the timed launch's output, then time it. `scale` None: the
    recorded shapes on a GPU; on the CPU, the largest power-of-two reduction the Triton
    interpreter can run (stated in the implementation label and the `scale` column)."""
    from kernel_atlas.replay.kernels.common import TooLargeForCPU

    auto = scale is None
    scale = 1.0 if scale is None else scale
    if target.unreplayable:
        return _skipped(target, device, scale, target.unreplayable)
    for _ in range(6):
        try:
            with _bounded_memory(device):
                return _replay_at(target, device, max_gib, scale, auto)
        except TooLargeForCPU as exc:
            if not auto:
                return _skipped(target, device, scale, str(exc))
            scale *= exc.scale
    return _skipped(target, device, scale, f"too large for the CPU even at scale {scale:g}")


# what a replay on the CPU may allocate beyond what the process holds when it starts: recorded
# shapes name any size, and an op's output and temporaries are not its inputs (`--max-gib`):
# `aten::zeros` of 1 GiB from its Concrete Inputs, a `repeat` to 5.5 GB, a tall matmul to 7 GB
# were allocated. The same for every replay, whatever ran before it: the allowance had been what
# kept the process within 960 MiB of resident memory, and as the Triton interpreter, torch's caches
# and earlier replays grew it later targets got less (128 MiB), so that `--all` skipped "for
# memory" rows that passed alone (17 of a ResNet-50 run's, 64 of the seed catalog's 167); what
# earlier replays freed is given back before each one instead (`_release_memory`), and the room a
# replay gets is measured once, at the process's first CPU replay (`cpu_room`)
CPU_REPLAY_BYTES = 600 << 20
# ... and a command's process stays within CPU_REPLAY_PROCESS_BYTES of resident memory: a large
# run's tables and torch took 330–450 MB, so 600 MiB more passed 1 GB. Near it a replay still gets
# CPU_REPLAY_MIN_BYTES (a limit at what the process holds fails every allocation, its own
# bookkeeping's too); a process already past it is no command (a notebook, a test session: the
# bound is not its own) and gets CPU_REPLAY_BYTES
CPU_REPLAY_PROCESS_BYTES = 960 << 20
CPU_REPLAY_MIN_BYTES = 128 << 20


@lru_cache(maxsize=1)
def cpu_room() -> int:
    """What every CPU replay of this process may add to its data segment: CPU_REPLAY_BYTES, or
    less where that would take the process past CPU_REPLAY_PROCESS_BYTES — measured once, at the
    first replay, with every builder's module (the Triton interpreter) imported and what earlier
    work freed given back, so that a row's verdict is the same whatever ran before it in the
    command (a Triton replay first had left an ATen one after it less room)."""
    from kernel_atlas.replay.kernels import load

    load()
    _release_memory()
    held = _status_bytes("VmRSS") or 0
    if held >= CPU_REPLAY_PROCESS_BYTES:
        return CPU_REPLAY_BYTES
    return min(CPU_REPLAY_BYTES, max(CPU_REPLAY_PROCESS_BYTES - held, CPU_REPLAY_MIN_BYTES))


def _status_bytes(field: str) -> int | None:
    """A size in /proc/self/status (`VmData`, `VmRSS`), in bytes; None where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _data_bytes() -> int | None:
    """The process's data segment (VmData, what RLIMIT_DATA bounds), None where unknown."""
    return _status_bytes("VmData")


@contextmanager
def _bounded_memory(device: str) -> Iterator[None]:
    """On the CPU, the process's data segment may grow by CPU_REPLAY_BYTES while a replay runs:
    past it an allocation fails (torch raises, and the replay is skipped, saying so) instead of
    taking the machine's memory. What earlier replays freed is given back first, so that the
    process holds what it keeps (its tables, torch, the Triton interpreter), not what the replay
    before used. The CPU's thread pools are started first: a worker thread's stack counts against
    the limit, and OpenMP ends the process when it cannot start one (`libgomp: Thread creation
    failed`, exit 1). Elsewhere, or where the limit cannot be set, nothing changes."""
    cpu = device.startswith("cpu") and hasattr(resource, "RLIMIT_DATA")
    if cpu:
        _start_thread_pools()
        _release_memory()
    used = _data_bytes() if cpu else None
    assert resource is not None or used is None
    if used is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = min(x for x in (used + cpu_room(), soft, hard) if x != resource.RLIM_INFINITY)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _release_memory() -> None:
    """Give back what earlier replays freed: the reference cycles that hold their buffers, and
    the free pages glibc's malloc keeps (malloc_trim; not on other C libraries)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS), or no C library to load
        return None


def _start_thread_pools() -> None:
    """Run one small parallel matrix product and reduction, so that torch's intra-op pools
    (OpenMP's team, oneDNN's) have their threads before the data limit is lowered."""
    import torch

    with torch.no_grad():
        a = torch.ones(256, 256)
        (a @ a).sum()


def _fields(target: Target, device: str) -> dict[str, Any]:
    launcher = target.launcher if target.trace_launcher is None else target.trace_launcher
    if target.source == "trace" and not target.launcher and target.trace_launcher is None:
        launcher = None  # launched with no CPU op, and kernels.parquet has no launcher for it (it had read "")
    return {
        "kernel": target.kernel,
        "launcher": launcher,
        "cpu_op": target.launcher,
        "kernels": target.kernels,
        "op_mapping": target.op_mapping,
        "category": target.category,
        "input_dims": target.input_dims,
        "input_types": target.input_types,
        "input_strides": target.input_strides,
        "concrete_inputs": target.concrete_inputs,
        "device": device,
        "count": target.count,
    }


def _skipped(target: Target, device: str, scale: float, reason: str) -> Result:
    flops, nbytes_ = _cost(target)
    return Result(
        **_fields(target, device),
        implementation="none",
        timed="",
        config="",
        scale=scale,
        device_name="",
        method="",
        median_us=None,
        p10_us=None,
        p90_us=None,
        reps=0,
        traced_us=target.traced_us,
        ratio=None,
        flops=flops,
        bytes=nbytes_,
        achieved_tflops=None,
        achieved_gbps=None,
        check="skipped",
        reason=reason,
    )


def _case(target: Target, device: str, max_gib: float, scale: float):  # -> aten.Case
    """The replay case of a target (raises NotReplayable with the reason). `--max-gib` bounds what
    every builder allocates before the replay runs (its inputs, outputs and what its check keeps),
    counted as it allocates it (it had bounded ATen ops' recorded inputs only: a Triton RMSNorm of
    24 MiB ran under --max-gib 0.001)."""
    limit = max_gib * (1 << 30)
    if target.launcher.startswith("aten::"):
        # an ATen op's inputs are made at its recorded shape: refused before any is allocated,
        # first past --max-gib, then (on the CPU) past a check's work and past the process's room —
        # the verdicts that do not depend on what the process holds before the one that does
        size = nbytes(target.args)
        if size > limit:
            raise NotReplayable(_over_max_gib("inputs need", size, max_gib))
        if not device.startswith("cuda"):
            flops = _cost(target)[0]
            if flops is not None and flops > CPU_MAX_FLOPS:
                raise NotReplayable(
                    f"{flops / 1e9:,.0f} GFLOP at the recorded shape: more than a CPU check runs "
                    f"({CPU_MAX_FLOPS / 1e9:,.0f} GFLOP); replay it on a GPU"
                )
            if size > cpu_room():  # would fail at the CPU's bound
                raise NotReplayable(no_memory())
    else:
        from kernel_atlas.replay.kernels import load

        load()  # the builders' modules (triton) imported before their allocations are counted
    allocations = counting_allocations(limit, lambda peak: _over_max_gib("its buffers reach", peak, max_gib))
    with allocations:
        case = _build(target, device, scale)
    if allocations.peak > limit:  # a builder that caught the refusal (a library fallback) is refused all the same
        raise NotReplayable(_over_max_gib("its buffers reach", allocations.peak, max_gib))
    return case


def _over_max_gib(what: str, size: float, max_gib: float) -> str:
    """`inputs need 24.0 MiB, more than --max-gib 0.001 (1.00 MiB)` (it had been "0.0 GiB, more than
    --max-gib 1e-06")."""
    return f"{what} {size_text(size)}, more than --max-gib {max_gib:g} ({size_text(max_gib * (1 << 30))})"


def _build(target: Target, device: str, scale: float):  # -> aten.Case
    from kernel_atlas.replay.kernels import find_implementation

    # ATen ops replay through their schema; other launchers by kernel family (these
    # implementations allocate only what they replay, not the recorded pools)
    if target.launcher.startswith("aten::"):  # its work on the CPU checked by `_case`
        from kernel_atlas.replay.aten import build_case

        return build_case(target.launcher, target.args, device, label_rule=target.label_rule)
    computation = launcher_computation(target.launcher)
    if computation is not None:
        return _as_its_schema_says(target, device, scale, computation)
    special = find_implementation(target, device, scale)
    if special is not None:
        return special
    reason = not_replayable(target)
    raise NotReplayable(reason or f"no replay implementation for {target.launcher or 'this kernel'}")


@lru_cache(maxsize=1)
def _launcher_computations() -> dict[str, dict[str, Any]]:
    table = read_toml("replay.toml").get("launchers", {})
    for launcher, entry in table.items():
        if not isinstance(entry.get("replay"), str) or not isinstance(entry.get("tensors"), int):
            raise ValueError(f"replay.toml: [launchers] {launcher!r} needs `replay` (a rule id) and `tensors`")
    return table


def launcher_computation(launcher: str) -> dict[str, Any] | None:
    """What a library op computes by its schema (catalogs/replay.toml [launchers]), or None."""
    return _launcher_computations().get(launcher)


def _as_its_schema_says(target: Target, device: str, scale: float, computation: dict[str, Any]):  # -> aten.Case
    """The computation the launching op's schema names, replayed by the builder of the label rule
    `computation["replay"]`, whatever rule the kernel's name matched (aiter's `rmsnorm` launches a
    kernel whose name says add-RMSNorm); a stand-in for the library's own kernel."""
    from kernel_atlas.replay.aten import STAND_IN
    from kernel_atlas.replay.kernels import find_implementation

    tensors = sum(1 for a in target.args if a.kind == "tensor")
    if tensors != computation["tensors"]:
        raise NotReplayable(
            f"{target.launcher} records {tensors} tensors where its schema ({computation.get('schema', '?')}) "
            f"takes {computation['tensors']}"
        )
    rule = f"rule:{computation['replay']}"
    case = find_implementation(replace(target, label_rule=rule), device, scale)
    if case is None:
        raise NotReplayable(f"no replay implementation for {target.launcher} (rule {computation['replay']})")
    said = f"{target.launcher}'s schema: {computation.get('schema', computation['replay'])}"
    if rule_id(target.label_rule) not in (None, computation["replay"]):
        said += f", not the kernel's label ({rule_id(target.label_rule)})"
    return replace(case, implementation=f"{case.implementation}; {said}", timed=STAND_IN)


def no_memory() -> str:
    """Why a CPU replay past its room (`cpu_room`) is skipped."""
    room = cpu_room() >> 20
    return f"needs more memory than a CPU replay may take ({room} MiB more than the process holds): replay it on a GPU"


def _replay_at(target: Target, device: str, max_gib: float, scale: float, auto: bool) -> Result:
    from kernel_atlas.replay.aten import KERNEL
    from kernel_atlas.replay.kernels.common import TooLargeForCPU
    from kernel_atlas.replay.timing import measure

    if not device.startswith("cuda"):
        # Triton kernels run in the interpreter on the CPU; it must be on before they are defined
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        case = _case(target, device, max_gib, scale)
        # the check runs the timed callable on the inputs the timing uses (and compiles it)
        check, why = case.check()
        light = not device.startswith("cuda") and "interpreter" in case.implementation
        options = {"warmup_ms": 0.0, "min_reps": 3, "budget_s": 0.0} if light else {}
        timing = measure(case.run, device, reset=case.reset, **options)
    except TooLargeForCPU:
        raise
    except NotReplayable as exc:
        return _skipped(target, device, scale, str(exc))
    except MemoryError:
        return _skipped(target, device, scale, no_memory())
    except AtlasError:
        raise
    except Exception as exc:  # torch's, the Triton interpreter's (OverflowError, InterpreterError): one target's
        if "allocate memory" in str(exc) or "out of memory" in str(exc).lower():
            return _skipped(target, device, scale, no_memory())
        if isinstance(exc, NotImplementedError) and "Could not run" in str(exc):
            # a GPU-only op (cuDNN, MIOpen, CUTLASS attention) with no stand-in: one line, not torch's
            where = "the CPU" if not device.startswith("cuda") else device
            return _skipped(
                target, device, scale, f"{target.launcher} has no kernel on {where} and no stand-in: replay it on a GPU"
            )
        first = (str(exc).splitlines() or [""])[0][:160]
        return _skipped(target, device, scale, f"replay failed: {type(exc).__name__}: {first}")
    flops, nbytes_ = _cost(target)
    implementation = case.implementation
    if target.launcher.startswith("aten::"):
        scale = 1.0  # ATen ops always run their recorded shapes
    if scale < 1.0:
        # the replay ran smaller shapes than recorded: costs and traced time do not apply
        flops = nbytes_ = None
        if auto:
            implementation += " (scale chosen automatically for the CPU; --scale sets it)"
    recorded_shapes = scale >= 1.0
    # a ratio only where the timed region is the traced kernel at its recorded shapes on a GPU
    comparable = case.timed == KERNEL and recorded_shapes and device.startswith("cuda")
    traced = target.traced_us
    ratio = timing.median_us / traced if traced and comparable else None
    tflops = flops / (timing.median_us * 1e6) if flops else None
    gbps = nbytes_ / (timing.median_us * 1e3) if nbytes_ else None
    return Result(
        **_fields(target, device),
        implementation=implementation,
        timed=case.timed,
        config=case.config,
        scale=scale,
        device_name=timing.device_name,
        method=timing.method,
        median_us=timing.median_us,
        p10_us=timing.p10_us,
        p90_us=timing.p90_us,
        reps=timing.reps,
        traced_us=traced,
        ratio=ratio,
        flops=flops,
        bytes=nbytes_,
        achieved_tflops=tflops,
        achieved_gbps=gbps,
        check=check,
        reason=why,
    )


def replay_all(
    targets: list[Target],
    device: str,
    on_done: Callable[[Result], None] | None = None,
    *,
    seq_len: int | None = None,
    batch: int | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Replay every target (`seq_len`/`batch`: lengths to assume where a recording has none)."""
    max_gib = options.get("max_gib")
    if max_gib is not None and not max_gib > 0:  # -1 skipped every ATen target, "more than --max-gib -1"
        raise AtlasError(None, f"--max-gib {max_gib:g}: give a size in GiB above 0")
    rows = []
    for target in targets:
        if seq_len is not None or batch is not None:
            target = replace(target, seq_len=seq_len or target.seq_len, batch=batch or target.batch)
        result = replay_one(target, device, **options)
        rows.append(asdict(result))
        if on_done:
            on_done(result)
    return pd.DataFrame(rows, columns=list(Result.__dataclass_fields__))


def default_device() -> str:
    try:
        import torch
    except ImportError:
        raise AtlasError(
            None, "replay needs PyTorch: `pip install torch==2.13.0` (or a CUDA build), then retry"
        ) from None
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    """`device` if this machine has it, else a one-line error."""
    if device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", device):
        raise AtlasError(None, f"--device {device}: use cuda, cuda:N or cpu")
    available = default_device()
    if device.startswith("cuda"):
        import torch

        if available != "cuda":
            raise AtlasError(
                None,
                f"--device {device}: no CUDA/HIP GPU is visible to PyTorch {torch.__version__} here; use --device cpu",
            )
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise AtlasError(None, f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s)")
    return device
