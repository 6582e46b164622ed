"""`atlas ingest`: trace files → kernels.parquet, catalog.json, summary.json."""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.classifier import default_classifier, label_frame
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.heap import release_free_memory
from kernel_atlas.core.redact import redact_frame, redact_text
from kernel_atlas.core.texts import WAS, counted
from kernel_atlas.ingest.capture import (
    CapturedGraph,
    CapturedGraphs,
    attach_captures,
    graphs_in_trace,
    left_out_line,
    read_captures,
)
from kernel_atlas.ingest.columns import NAMES_TEXT, RUNTIME, SHORT_NAME, SHORTENED_NAMES, HostTable, build_columns
from kernel_atlas.ingest.comms import complete_collectives
from kernel_atlas.ingest.efficiency import with_kernel_efficiency
from kernel_atlas.ingest.events import (
    DURATION_PAIRS,
    LEGACY_GPU_PID,
    LEGACY_GPU_RANGES,
    LONG_STRINGS,
    MAX_TEXT,
    NOT_COMPLETE,
    NOT_OBJECTS,
    UNKNOWN_GPU,
)
from kernel_atlas.ingest.graph_nodes import attach_graph_nodes
from kernel_atlas.ingest.host_activity import last_step_start, with_host_activity
from kernel_atlas.ingest.host_events import host_events_table
from kernel_atlas.ingest.infer import infer_shapes
from kernel_atlas.ingest.link import SHORT_STACK_TEXT, STACKS_TEXT, HostNesting, link, unlinked_counts
from kernel_atlas.ingest.memory import concat_memory, memory_events
from kernel_atlas.ingest.nsys import is_nsys, read_nsys
from kernel_atlas.ingest.reader import TraceInfo
from kernel_atlas.ingest.repeats import repeated_activities
from kernel_atlas.ingest.sanity import usable_rows
from kernel_atlas.ingest.step_split import MAX_STEP_ROWS, host_roles, overview
from kernel_atlas.ingest.summary import gpu_time_facts, kernel_time_table, trace_facts
from kernel_atlas.ingest.table import as_categoricals, assemble
from kernel_atlas.ingest.workers import decode_pool, reading_ahead, stop_workers, take_read_ahead, workers_for
from kernel_atlas.store.outputs import file_stem, load_kernels

__all__ = ["IngestResult", "default_out_dir", "ingest_paths", "ingest_trace", "load_kernels"]

# `rank<N>`, `rank_N`, `rank-N` where `rank` starts a part of the name: at its start, after a
# non-letter (`trace_rank_3`, `node1_rank7`, `worker.rank-12`) or as a camel-case word (`workerRank0`)
# — not inside a word: `frank2_trace.json` declares no rank 2
_RANK_IN_NAME = re.compile(r"(?:(?<![a-z])|(?<=(?-i:[a-z]))(?=(?-i:R)))rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class IngestResult:
    frame: pd.DataFrame
    facts: dict[str, Any]
    warnings: list[str]
    memory: pd.DataFrame | None = None  # `[memory]` events (`ingest.memory`), None when the trace has none
    host_events: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)  # (stem, rank) → host events
    # False where the trace declares no rank (no distributedInfo.rank, no `rank<N>` in its name): its
    # rank is the one it was given, settled against the ranks the other inputs declare (`free_ranks`)
    rank_declared: bool = True

    @property
    def kernel_time(self) -> pd.DataFrame:
        """GPU time per kernel (see `kernel_time_table`)."""
        return kernel_time_table(self.frame)


def trace_stem(path: Path) -> str:
    return file_stem(path.name)


_MAX_RANK = (1 << 31) - 1  # ranks are int32 in the kernels table (and name its partitions)


def _rank_of(path: Path, distributed: dict[str, Any], warnings: list[str] | None = None) -> int | None:
    rank = distributed.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        if 0 <= rank <= _MAX_RANK:
            return rank
        if warnings is not None:
            warnings.append(f"{path}: distributedInfo.rank {rank} is out of range (0…{_MAX_RANK}): ignored")
    elif rank is not None and warnings is not None:  # 1.5, "3", an integer of 5,000 digits (read as inf)
        warnings.append(f"{path}: distributedInfo.rank {str(rank)[:40]!r} is not an integer: ignored")
    return rank_in_name(path.name)


def rank_in_name(name: str) -> int | None:
    """The rank a trace's file name declares (`rank<N>`, `rank_N`, `rank-N` starting a part of the
    name: `_RANK_IN_NAME`), None where none."""
    match = _RANK_IN_NAME.search(name)
    return int(match.group(1)) if match and int(match.group(1)) <= _MAX_RANK else None


def free_ranks(declared: set[int], count: int) -> list[int]:
    """The `count` lowest ranks not in `declared`, ascending: the ranks of the traces that declare
    none, given in input order. A trace's position among the inputs was its rank, and could be a
    rank another trace declares — two traces then shared one timeline and the cross-rank view
    was refused."""
    ranks: list[int] = []
    rank = 0
    while len(ranks) < count:
        if rank not in declared:
            ranks.append(rank)
        rank += 1
    return ranks


# traces named in the line saying which ranks were given; the rest are counted
NAMED_FALLBACKS = 8


def given_ranks_text(given: Sequence[tuple[str, int]]) -> str:
    """One line naming the traces that declare no rank and the rank each was given."""
    shown = [f"{source} rank {rank}" for source, rank in given[:NAMED_FALLBACKS]]
    more = f" and {len(given) - NAMED_FALLBACKS:,} more" if len(given) > NAMED_FALLBACKS else ""
    return (
        f"{counted(len(given), 'trace declares', 'traces declare')} no rank (no distributedInfo.rank, no rank<N> "
        f"in the file name): given the lowest ranks no trace declares, in input order: {', '.join(shown)}{more}"
    )


def with_rank(facts: dict[str, Any], rank: int) -> None:
    """A trace's facts (`summary.trace_facts`) made those of `rank` (in place): its devices' too."""
    facts["rank"] = rank
    for device in facts.get("devices", []):
        device["rank"] = rank


# the host API calls of each runtime (`cuda_runtime` / `cuda_driver` events; ROCm traces keep those
# categories): `cudaLaunchKernel`, `cuLaunchKernelEx`; `hipLaunchKernel`, `hsa_signal_wait…`
_RUNTIME_CALLS = {"cuda": re.compile(r"cuda|cu[A-Z]"), "rocm": re.compile(r"hip|hsa_")}


def runtime_of_calls(host: HostTable) -> str:
    """ "cuda" or "rocm" where the runtime calls the trace recorded are of that runtime's API alone
    (for a trace that names no runtime itself); "unknown" where it recorded none of either's, or
    calls of both (which runtime ran the GPU work is then not said)."""
    codes = np.unique(host.name_code[host.family == RUNTIME])
    names = [host.names[code] for code in codes.tolist()]
    found = {runtime for name in names for runtime, calls in _RUNTIME_CALLS.items() if calls.match(name)}
    return found.pop() if len(found) == 1 else "unknown"


def unknown_gpu_categories(ignored: dict[str, int]) -> dict[str, int]:
    """Complete events that look like GPU activities (a device or stream, a duration) under
    categories ingest does not know, per category; removed from `ignored`."""
    keys = [key for key in ignored if key.startswith(UNKNOWN_GPU)]
    return {key[len(UNKNOWN_GPU) :]: ignored.pop(key) for key in sorted(keys, key=lambda k: -ignored[k])}


def unknown_gpu_text(unknown: dict[str, int]) -> str:
    """`12 GPU-looking events under unknown categories ('Foo' 10, 'bar' 2)`, and `… without a
    category` for those of none (key "")."""
    named = {cat: n for cat, n in unknown.items() if cat}
    parts = [f"{sum(named.values()):,} GPU-looking events under unknown categories ({_by_category(named)})"]
    parts = parts if named else []
    if unknown.get(""):
        parts.append(f"{unknown['']:,} GPU-looking events without a category")
    return " and ".join(parts)


def _legacy_ranges_text(count: int) -> str:
    return (
        f"{counted(count, 'GPU range', 'GPU ranges')} of the legacy autograd profiler's export (pid "
        f"{LEGACY_GPU_PID!r}, no `cat`) {WAS[count != 1]} not read: that format records each op's time between "
        "two CUDA events, named after the op, not kernels (an op and the ops it calls overlap); profile with "
        "torch.profiler (Kineto) for the kernels"
    )


def empty_trace_text(ignored: dict[str, int]) -> str:
    """Why a trace's tables are empty: it held no GPU events, or those it held were not read —
    counted by why (each reason's warning says more)."""
    ignored = dict(ignored)
    unknown = unknown_gpu_categories(ignored)
    left_out = {
        "of unknown categories": sum(n for cat, n in unknown.items() if cat),
        "without a category": unknown.get("", 0),
        "of the legacy autograd profiler's export": ignored.get(LEGACY_GPU_RANGES, 0),
        "without a usable ts or dur": ignored.get("untimed GPU activities", 0),
    }
    if not any(left_out.values()):
        return "no GPU events (kernels, memcpys, memsets) in this trace; tables are empty"
    if not any(n for why, n in left_out.items() if why != "of unknown categories"):
        return "no GPU events of a known category (kernels, memcpys, memsets); tables are empty"
    held = "; ".join(f"{n:,} {why}" for why, n in left_out.items() if n)
    return f"no GPU events read, though the trace holds GPU events that were not ({held}); tables are empty"


def _by_category(counts: dict[str, int], shown: int = 8) -> str:
    """`'Foo' 10, 'bar' 2`: the first `shown` categories (redacted) with their counts, then how many more."""
    listed = ", ".join(f"{redact_text(cat)!r} {n:,}" for cat, n in list(counts.items())[:shown])
    return listed + (f", {len(counts) - shown} more" if len(counts) > shown else "")


def _decoder_warnings(path: Path, trace: TraceInfo, ignored: dict[str, int]) -> list[str]:
    """What the reader and decoder skipped or dropped, one line each."""
    warnings = [f"{path}: {warning}" for warning in trace.warnings]
    ignored = dict(ignored)
    untimed = ignored.pop("untimed GPU activities", 0)
    if untimed:
        activities = counted(untimed, "GPU activity", "GPU activities")
        warnings.append(f"{path}: {activities} without a usable ts or dur {WAS[untimed != 1]} left out")
    surrogates = ignored.pop("lone surrogates", 0)
    if surrogates:
        strings = counted(surrogates, "string", "strings")
        warnings.append(f"{path}: {strings} held lone UTF-16 surrogates (not Unicode): replaced by U+FFFD")
    untimed_memory = ignored.pop("memory events without a ts", 0)
    if untimed_memory:
        events = counted(untimed_memory, "[memory] event", "[memory] events")
        warnings.append(f"{path}: {events} without a usable ts {WAS[untimed_memory != 1]} left out")
    unknown = unknown_gpu_categories(ignored)
    if unknown:
        why = "categories unknown to kernel_atlas" + (", or none" if "" in unknown else "")
        warnings.append(f"{path}: {unknown_gpu_text(unknown)} were not read ({why})")
    legacy = ignored.pop(LEGACY_GPU_RANGES, 0)
    if legacy:
        warnings.append(f"{path}: {_legacy_ranges_text(legacy)}")
    not_objects = ignored.pop(NOT_OBJECTS, 0)
    if not_objects:
        one, many = "traceEvents entry that is not a JSON object", "traceEvents entries that are not JSON objects"
        warnings.append(f"{path}: {counted(not_objects, one, many, WAS)} skipped")
    keys = sorted((key for key in ignored if key.startswith(NOT_COMPLETE)), key=lambda key: -ignored[key])
    not_complete = {key.removeprefix(NOT_COMPLETE): ignored.pop(key) for key in keys}
    if not_complete:  # a kernel written as an instant or an async event: no duration, so not read
        total = sum(not_complete.values())
        warnings.append(
            f"{path}: {total:,} events of categories read as ranges ({_by_category(not_complete)}) "
            f"{WAS[total != 1]} not complete (X) "
            "events but instants, async or counter events, or of no phase: not read (they carry no duration)"
        )
    pairs = ignored.pop(DURATION_PAIRS, 0)
    if pairs:  # torch.profiler writes complete ("X") events; a begin/end pair is another tool's
        warnings.append(f"{path}: {pairs:,} begin/end (B/E) events were not read: only complete (X) ones are")
    cut = ignored.pop(LONG_STRINGS, 0)
    if cut:
        strings = counted(cut, "string", "strings")
        warnings.append(f"{path}: {strings} longer than {MAX_TEXT:,} characters {WAS[cut != 1]} cut (names) or ignored")
    short = ignored.pop(SHORTENED_NAMES, 0)
    if short:
        names = counted(short, "distinct name", "distinct names")
        warnings.append(
            f"{path}: {names} longer than {SHORT_NAME:,} characters {WAS[short != 1]} shortened to "
            f"{SHORT_NAME:,} (a digest of the whole keeps each distinct) once the trace's distinct names "
            f"passed {NAMES_TEXT // (1 << 20)} MiB"
        )
    untimed_host = ignored.pop("host ranges without a ts", 0)
    if untimed_host:
        ranges = counted(untimed_host, "host range", "host ranges")
        warnings.append(f"{path}: {ranges} without a usable ts {WAS[untimed_host != 1]} left out")
    if ignored:
        fields = ", ".join(f"{key} {count}" for key, count in sorted(ignored.items()))
        values = sum(ignored.values())
        what = counted(values, "value", "values")
        warnings.append(f"{path}: {what} out of range or of an unexpected type {WAS[values != 1]} ignored ({fields})")
    return warnings


# what the decode workers' start or pipes fail with where the system lends no more: processes
# (fork's EAGAIN; multiprocessing's resource tracker, which could not start, gone from its pipe),
# file descriptors for their pipes, memory for a process
_NO_MORE = (errno.EAGAIN, errno.EPIPE, errno.EMFILE, errno.ENFILE, errno.ENOMEM)


def coarse_starts(ts: np.ndarray, dur: np.ndarray) -> str | None:
    """What a trace's clock cannot hold, said: starts written as epoch microseconds with a
    fraction (1733000000000000.125) are doubles spaced 0.25 µs apart there, while durations
    (small numbers) keep their nanoseconds — so starts, gaps and waits are uncertain by half that
    spacing. None where the starts are fine enough (Kineto's times relative to its
    baseTimeNanoseconds; older integer microseconds, whose durations are whole too)."""
    if len(ts) == 0:
        return None
    largest = float(np.nanmax(np.abs(ts))) if np.isfinite(ts).any() else 0.0
    spacing = float(np.spacing(largest))
    if spacing <= 1e-3:  # a nanosecond or finer
        return None
    steps = dur[np.isfinite(dur)] / spacing
    if not np.any(np.abs(steps - np.round(steps)) > 1e-6):
        return None
    return (
        f"start times near {largest:.3g} µs hold only multiples of {spacing:g} µs (a double at that size), "
        f"while durations are recorded finer: starts, gaps and waits are uncertain by up to {spacing / 2:g} µs "
        "(times relative to the trace's baseTimeNanoseconds, as newer Kineto writes them, are exact)"
    )


def _workers_failed(exc: OSError | RuntimeError) -> bool:
    """Whether `exc` is the system refusing the decode workers (or the pool's own thread: a limit
    on processes counts threads), not a file (which names itself)."""
    if isinstance(exc, RuntimeError):
        return "can't start new thread" in str(exc)
    return exc.filename is None and exc.errno in _NO_MORE


Progress = Callable[[str, float], None]  # (stage, fraction of the trace done)


def ingest_trace(
    path: str | Path,
    rank: int | None = None,
    on_progress: Progress | None = None,
    captures: Sequence[CapturedGraph] = (),
    workers: int | None = None,
    process: int | None = None,
    name: str | None = None,
) -> IngestResult:
    """Read, link and label one trace. Raises `AtlasError` on unusable input. Graph-replayed
    kernels take launcher and shapes from the matching captured graph (`captures`, plus any
    capture profiled in the trace itself).

    `workers`: decode processes (default: all CPUs for a large trace, none for a small one);
    `process`: the process of an Nsight Systems export to read (`nsys.gpu_processes`);
    `name`: the trace's name in the tables (default its file name's stem; `fleet` gives traces
    of one file name distinct ones, as it does their rank files)."""
    path = Path(path)
    stem = name or trace_stem(path)
    report = on_progress or (lambda _stage, _fraction: None)
    report("reading", 0.0)
    workers = workers_for(path) if workers is None else max(workers, 1)

    def decoding(fraction: float) -> None:
        report("decoding", 0.05 + 0.75 * fraction)

    decoded_here, nsys_read = False, None
    try:
        if reading_ahead(path):  # the classifier loads (its rules compile) while the trace decodes
            default_classifier()
        read = take_read_ahead(path, decoding)
        if read is None and is_nsys(path):
            *read, nsys_read = read_nsys(path, process)
        if read is None:
            read = build_columns(path, decode_pool(workers) if workers > 1 else None, workers, on_progress=decoding)
    except (BrokenProcessPool, OSError, RuntimeError) as exc:
        if not isinstance(exc, BrokenProcessPool) and not _workers_failed(exc):
            raise
        stop_workers()  # any that started: a pool whose thread could not start leaves them waiting
        if workers <= 1:
            raise AtlasError(path, "a decode worker process died (out of memory?)") from None
        # one process does it all, as for a small trace: slower, and the answer is the same
        read, decoded_here = build_columns(path, None, 1, on_progress=decoding), True
    trace, cols = read
    del read  # `del cols` below frees the columns (the host ranges: ~130 MB for 1.5M ranges)
    if trace.runtime == "unknown":  # Kineto before ~2023 wrote no runtime version: its calls tell
        trace.runtime = runtime_of_calls(cols.host)
    release_free_memory()  # the reader's buffers (decompressed text, the slices' columns as they arrived)
    warnings = _decoder_warnings(path, trace, cols.ignored)
    if decoded_here:
        warnings.append(
            f"{path}: the decode worker processes failed (a limit on processes or open files, or memory?): "
            "decoded in one process"
        )
    coarse = coarse_starts(cols.gpu.ts, cols.gpu.dur)
    if coarse is not None:
        warnings.append(f"{path}: {coarse}")
    repeated = repeated_activities(cols.gpu)
    if repeated.any():  # before linking: every later stage sees each activity once
        cols.gpu = cols.gpu.take(~repeated)
        if nsys_read is not None and len(nsys_read.node_creation) == len(repeated):
            nsys_read.node_creation = nsys_read.node_creation[~repeated]
        n = int(repeated.sum())
        warnings.append(
            f"{path}: {counted(n, 'GPU activity', 'GPU activities')} repeated an earlier one exactly (the same "
            f"kind, name, start, duration, device, stream and correlation): each read once"
        )
    order = cols.gpu.time_order()
    if order is not None:  # the tables in time order, whatever order the trace wrote them in
        cols.gpu = cols.gpu.take(order)
        if nsys_read is not None and len(nsys_read.node_creation) == len(order):
            nsys_read.node_creation = nsys_read.node_creation[order]
        release_free_memory()  # the table as read (~25 MB for 170k activities), before linking's peak
    cols_ignored = cols.ignored
    detected = _rank_of(path, trace.distributed_info, warnings)
    # a trace that declares none takes the rank given (`free_ranks`: fleet's guess, settled when the
    # run's results are folded), 0 alone
    rank = detected if detected is not None else (rank if rank is not None else 0)
    event_count = cols.event_count
    report("linking", 0.8)
    linked = link(cols)
    release_free_memory()  # linking's temporaries, of the host ranges' length
    complete_collectives(cols.gpu, cols.host, linked.cpu_op_id)  # before captures give graph kernels op ids
    exact = attach_graph_nodes(cols.host, linked, nsys_read.node_creation) if nsys_read else np.empty(0, np.int64)
    linked.graph_launch[exact] = False  # matched by graph node id: the capture alignment sees the rest
    own_captures = graphs_in_trace(cols, path.name) if linked.graph_launch.any() else CapturedGraphs()
    if own_captures.left_out:
        warnings.append(f"{path}: {left_out_line(own_captures.left_out)}")
    graph_facts = attach_captures(cols.gpu, linked, [*captures, *own_captures])
    linked.graph_launch[exact] = True
    graph_facts.include_node_matched(cols.gpu, linked, exact)
    inferred = infer_shapes(cols.gpu, linked)
    frame = assemble(stem, rank, cols, linked)
    frame = with_host_activity(frame, cols, linked)
    release_free_memory()  # shape inference's and the kernels table's temporaries
    last_step = last_step_start(cols)
    memory, memory_redacted = None, 0
    if len(cols.memory):
        nest = HostNesting.of(cols.host, (linked.host_parent, linked.host_crossed))
        memory = memory_events(cols.memory, cols.host, nest)
        memory.insert(0, "rank", rank)
        memory.insert(0, "trace", stem)
        memory_redacted = redact_frame(memory)
        release_free_memory()
    roles = host_roles(cols.host, cols.gpu_comm_ranges)
    host_events = {(stem, rank): host_events_table(cols, linked, release=True)}  # the last reader
    del cols
    release_free_memory()  # the host table
    report("classifying", 0.9)
    labelled: list[str] = []
    frame = label_frame(frame, notes=labelled)
    warnings.extend(f"{path}: {note}" for note in labelled)
    release_free_memory()  # labelling's temporaries, before the efficiency columns'
    frame = with_kernel_efficiency(frame, trace.device_properties)
    frame, unusable = usable_rows(frame)
    warnings.extend(f"{path}: {warning}" for warning in unusable)
    # counted on the rows kept, as every later stage left their links (rows without a usable time are not in it)
    unlinked = unlinked_counts(frame["link"]) if len(frame) else {}
    redacted = redact_frame(frame) + memory_redacted
    report("done", 1.0)
    if frame.empty:
        warnings.append(f"{path}: {empty_trace_text(cols_ignored)}")
    if unlinked:
        detail = ", ".join(_unlinked_detail(n, why) for why, n in unlinked.items())
        unlinked_n = sum(unlinked.values())
        warnings.append(f"{path}: {unlinked_n:,} of {len(frame):,} GPU activities have no launcher ({detail})")
    if redacted:
        warnings.append(f"{path}: {redacted} values shaped like credentials (tokens, keys) written as <redacted>")
    if linked.stacks_shortened:
        stacks = counted(linked.stacks_shortened, "call stack", "call stacks")
        warnings.append(
            f"{path}: {stacks} kept to their innermost {SHORT_STACK_TEXT} characters: the trace's distinct "
            f"call stacks passed {STACKS_TEXT >> 20} MiB of text"
        )
    graph_warning = graph_facts.warning()
    if graph_warning:
        warnings.append(f"{path}: {graph_warning}")
    elif captures and not graph_facts.launches:
        warnings.append(f"{path}: no CUDA/HIP graph launches in this trace; the capture traces were not used")
    kernel_time = float(frame.loc[frame["kind"] == "kernel", "dur_us"].sum()) if len(frame) else 0.0
    link_facts = {
        "events": event_count,
        "unlinked": unlinked,
        "external_id_mismatches": linked.external_id_mismatch,
        "last_step_start_us": last_step,
        "graphs": graph_facts.as_dict(),
        "shapes_inferred": inferred.as_dict(kernel_time),
        "efficiency": overview(frame, roles),
    }
    total_steps = link_facts["efficiency"].get("steps_total")
    if total_steps:
        warnings.append(
            f"{path}: {total_steps:,} steps: the split and metrics of the first {MAX_STEP_ROWS:,} are listed "
            "(summary.json, steps.parquet); the metrics over all steps cover every one"
        )
    facts = trace_facts(trace, frame, rank, link_facts, warnings)
    release_free_memory()  # the efficiency columns' and the overview's temporaries, before the tables are written
    facts["memory_events"] = 0 if memory is None else len(memory)
    if nsys_read is not None:
        nsys_facts = {"processes": nsys_read.processes, "host_syncs": nsys_read.syncs}
        facts["nsys"] = {**nsys_facts, "graph_node_matched": len(exact)}
    return IngestResult(frame, facts, warnings, memory, host_events, rank_declared=detected is not None)


def _unlinked_detail(n: int, why: str) -> str:
    """`n` activities with no launcher for `why`, in words: the reasons (`link.UNLINKED_*`, also
    summary.json's `unlinked` keys and kernels.parquet's `link` values, left as they are) name one
    launch ("launch has no enclosing CPU op…"), the count's noun and verb agree with it here
    ("1 launch has", "23 launches have", "2 launches not in the trace", "3 with no correlation id")."""
    for one, many in (("launch has", "launches have"), ("launch", "launches")):
        if why.startswith(one + " "):
            return counted(n, one, many) + why[len(one) :]
    if why.startswith("no "):  # "no correlation id on the GPU event"
        return f"{n:,} with {why}"
    return f"{n:,} {why}"  # "replayed from a CUDA/HIP graph…": no noun to agree


def _ingest_for_pool(args: tuple[str, int, Sequence[CapturedGraph]]) -> IngestResult:
    return ingest_trace(args[0], args[1], captures=args[2], workers=1)  # the traces are the parallel work here


def ingest_paths(
    paths: Sequence[str | Path],
    jobs: int = 1,
    on_done: Callable[[Path], None] | None = None,
    on_progress: Progress | None = None,
    captures: Sequence[str | Path] = (),
) -> IngestResult:
    """Ingest several traces (e.g. one per rank) into one table with a `rank` column;
    `captures` are profiled graph captures for their CUDA/HIP-graph replays."""
    if not paths:
        raise AtlasError(None, "no trace files given")
    graphs, capture_warnings = read_captures(captures)
    work = [(str(p), i, graphs) for i, p in enumerate(paths)]
    results: list[IngestResult] = []
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
            for item, result in zip(work, pool.map(_ingest_for_pool, work), strict=True):
                results.append(result)
                if on_done:
                    on_done(Path(item[0]))
    else:
        for item in work:
            results.append(ingest_trace(item[0], item[1], on_progress, captures=graphs))
            if on_done:
                on_done(Path(item[0]))
    warnings = capture_warnings + [w for r in results for w in r.warnings]
    unranked = [k for k, r in enumerate(results) if not r.rank_declared]
    if len(results) > 1 and unranked:
        declared = {int(r.facts["rank"]) for r in results if r.rank_declared}
        given = list(zip(unranked, free_ranks(declared, len(unranked)), strict=True))
        for k, rank in given:
            _given_rank(results[k], rank)
        warnings.append(given_ranks_text([(str(paths[k]), rank) for k, rank in given]))
    ranks = [r.facts["rank"] for r in results]
    if len(set(ranks)) != len(ranks):
        warnings.append(f"several traces claim the same rank ({sorted(ranks)}); the `trace` column tells them apart")
    host_events = {key: table for r in results for key, table in r.host_events.items()}
    if len(results) == 1:
        return IngestResult(results[0].frame, {"traces": [results[0].facts]}, warnings, results[0].memory, host_events)
    frame = as_categoricals(pd.concat([r.frame for r in results], ignore_index=True))
    facts = {"traces": [r.facts for r in results], **gpu_time_facts(frame)}
    memories = [r.memory for r in results if r.memory is not None]
    memory = concat_memory(memories) if memories else None
    return IngestResult(frame, facts, warnings, memory, host_events)


def _given_rank(result: IngestResult, rank: int) -> None:
    """The result of a trace that declares no rank made that of `rank` (in place)."""
    if result.facts["rank"] == rank:
        return
    result.frame["rank"] = np.full(len(result.frame), rank, dtype=result.frame["rank"].dtype)
    if result.memory is not None:
        result.memory["rank"] = np.full(len(result.memory), rank, dtype=result.memory["rank"].dtype)
    result.host_events = {(stem, rank): table for (stem, _), table in result.host_events.items()}
    with_rank(result.facts, rank)


def default_out_dir(first_trace: Path) -> Path:
    return first_trace.with_name(trace_stem(first_trace) + ".atlas")
