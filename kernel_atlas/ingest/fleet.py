"""`atlas ingest` over many traces: one task per trace on a local process pool or on Ray.

Every task reads one trace (a path or an fsspec URL), writes its rows straight into the
output's kernels dataset (`outputs.write_rank`) and hands back only small things: the
trace's facts, its catalog entries and its time per kernel. The driver folds those as they
arrive and writes `catalog.json` and `summary.json` at the end, so its memory does not grow
with the number of ranks. A task that fails — bad input, a crash, a worker killed for memory —
is listed with its reason; the other ranks complete.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from kernel_atlas.core.beside import on_a_thread, process_pool, submit_held
from kernel_atlas.core.errors import AtlasError, subject_and_problem, system_refusal
from kernel_atlas.core.redact import redact_text
from kernel_atlas.core.safe_files import LOCK_NAME, check_utf8, is_writable_folder, os_problem, why_missing
from kernel_atlas.core.signals import reraise_if_signalled
from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.capture import CapturedGraph, read_captures
from kernel_atlas.ingest.catalog import (
    CATALOG_ENTRIES,
    Catalog,
    LeftOut,
    Merged,
    build_catalog,
    merge_catalog,
    merged_entries,
)
from kernel_atlas.ingest.host_events import HOST_EVENTS, write_host_events
from kernel_atlas.ingest.nsys import NSYS_SUFFIXES, gpu_processes
from kernel_atlas.ingest.reader import NOT_A_TRACE_BUT_CATALOG, is_catalog_file
from kernel_atlas.ingest.summary import add_kernel_times, declared_world_size, kernel_time_table, trace_fingerprint
from kernel_atlas.store.outputs import (
    CATALOG,
    DATASETS,
    KERNELS,
    LAYOUT,
    PARTITION,
    RUN_FILE_NAMES,
    SUMMARY,
    file_stem,
    filesystem,
    is_url,
    new_run,
    remove_dataset_file,
    run_file_of,
    short_name,
    write_json,
    write_rank,
)

if TYPE_CHECKING:
    from kernel_atlas.ingest.pipeline import IngestResult

T = TypeVar("T")

# host and memory events below which a rank's are written before its kernels, in turn: a thread
# and its turns at the GIL cost more than writing them (300 tiny ranks ingested 4 % slower so)
WRITE_BESIDE_MIN_ROWS = 50_000

TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst", *NSYS_SUFFIXES)
ENGINES = ("local", "ray")


@dataclass
class Task:
    source: str  # path or URL of one trace
    out: str  # output folder (path or URL)
    index: int  # position in the input list (input order, also of the traces that declare no rank)
    stem: str  # file name of its rows in the dataset
    captures: tuple[CapturedGraph, ...] = ()  # profiled graph captures for its graph replays
    workers: int | None = None  # decode processes for the trace (None: as many as suit it)
    run_id: str | None = None  # the ingest run its file belongs to (`outputs.RUN_KEY`)
    process: int | None = None  # the process of a multi-process Nsight Systems export (its rank)
    # the rank its files are written under where the trace declares none (None: `index`), until the
    # run settles it (`RunFold.settle_ranks`): `plan` guesses from the file names
    fallback: int | None = None


@dataclass
class RankDone:
    source: str
    rank: int
    file: str  # its rows, relative to the output folder
    facts: dict[str, Any]
    warnings: list[str]
    catalog: Catalog
    kernel_time: pd.DataFrame
    position: int | None = None  # its place among the inputs where the trace declares no rank (`rank` is a guess)


@dataclass
class RankFailed:
    source: str
    reason: str  # one line, naming the file


Outcome = RankDone | RankFailed


@dataclass
class FleetResult:
    out: str
    facts: dict[str, Any]  # the summary.json document
    warnings: list[str]
    failed: list[RankFailed]
    kernel_time: pd.DataFrame  # GPU time per kernel over all ranks (see `kernel_time_table`)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def done(self) -> int:
        return len(self.facts.get("traces", []))


# the JSON files Kernel Atlas writes into an output folder (never traces)
OUTPUT_JSON = frozenset({"summary.json", "catalog.json", "report.json", "whatif.json"})


def _is_trace_name(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES) and not name.startswith(".")


def outside_outputs(files: Sequence[str], sep: str = "/") -> list[str]:
    """`files` (every file found under a folder, recursively) less those inside a Kernel Atlas
    output folder — one holding `summary.json` and a `kernels.parquet` — so that `atlas ingest
    DIR` run twice never reads its own `catalog.json` / `summary.json` as traces."""
    summaries = [f.rsplit(sep, 1)[0] + sep for f in files if f.rsplit(sep, 1)[-1] == SUMMARY]
    if not summaries:
        return list(files)
    parents = _parents(files, sep)
    outputs = {folder for folder in summaries if folder + KERNELS in parents}
    if not outputs:
        return list(files)
    inside = tuple(outputs)
    return [f for f in files if not f.startswith(inside)]


def _parents(files: Sequence[str], sep: str) -> set[str]:
    """Every folder above a file in `files` (a `kernels.parquet` is a folder of rank files, or
    one file)."""
    found: set[str] = set()
    for f in files:
        parts = f.split(sep)
        found.update(sep.join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


def expand_sources(sources: Sequence[str | Path], catalogs: list[str] | None = None) -> list[str]:
    """Trace files from paths, folders (their trace files, recursively), shell globs and fsspec
    URLs or URL globs (`s3://bucket/run/*.json.gz`), in order, each once. A local folder's kernel
    catalogs (`.json` lists of entries naming a `kernel_name`) are not its traces: they are left
    out and, where `catalogs` is given, listed there (a catalog kept beside the traces had been
    reported as a failed trace and the run's exit code made 2)."""
    found: list[str] = []
    for source in map(str, sources):
        if is_url(source) and not source.startswith("file://"):
            fs, path = filesystem(source)
            protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            if glob.has_magic(path):
                matches = sorted(fs.glob(path))
            elif fs.isdir(path):
                matches = sorted(p for p in outside_outputs(fs.find(path)) if _is_trace_name(p.rsplit("/", 1)[-1]))
            elif fs.exists(path):
                matches = [path]
            else:
                raise AtlasError(source, "no such file")
            if not matches:
                raise AtlasError(source, "matches no trace file")
            found += [f"{protocol}://{m}" for m in matches]
            continue
        local = Path(source.removeprefix("file://"))
        if glob.has_magic(str(local)) and not local.exists():
            matches = sorted(glob.glob(str(local), recursive=True))
            if not matches:
                raise AtlasError(source, "matches no file")
            found += matches
        elif local.is_dir():
            every = [str(p) for p in local.rglob("*") if p.is_file()]
            named = sorted(f for f in outside_outputs(every, os.sep) if _is_trace_name(os.path.basename(f)))
            matches = [f for f in named if not (f.lower().endswith(".json") and is_catalog_file(Path(f)))]
            if catalogs is not None:
                catalogs += sorted(set(named) - set(matches))
            if named and not matches:
                raise AtlasError(source, f"holds kernel catalogs, no trace: {NOT_A_TRACE_BUT_CATALOG}")
            if not matches:
                names = (os.path.basename(f) for f in every)
                if any(_is_trace_name(name) and name not in OUTPUT_JSON for name in names):
                    # e.g. a trace kept in the folder an earlier ingest wrote into
                    raise AtlasError(
                        source,
                        "its trace files lie inside a Kernel Atlas output folder, never read as input:"
                        " name the trace files themselves",
                    )
                raise AtlasError(source, f"directory holds no trace files ({', '.join(TRACE_SUFFIXES)})")
            found += matches
        elif not local.exists():
            raise AtlasError(source, why_missing(local))
        else:
            not_a_run_file(local)
            found.append(str(local))
    # each file once, however it was spelled (`t.json`, `./t.json`, `../dir/t.json`, a folder and a file in it)
    once: dict[str, str] = {}
    for source in found:
        check_utf8(source)  # a file found in a folder: its name becomes a file name and a column value
        once.setdefault(source if is_url(source) else os.path.realpath(source), source)
    return list(once.values())


def default_output(first_source: str) -> str:
    """`<stem>.atlas` next to the first trace (also for URLs), cut as a file name is where the
    trace's name is too long for it (`outputs.short_name`)."""
    head, _, name = first_source.rstrip("/").rpartition("/")
    stem = short_name(_stem(name), ".atlas")
    return f"{head}/{stem}" if head else stem


def _stem(name: str) -> str:
    """`file_stem(name)`, or `redacted` where redaction would change that stem again: `passwd: x`
    becomes `passwd: redacted`, which still reads as a key and its value — summary.json (written
    redacted) listed the rank file as `passwd: <redacted>` and the run's readers refused it, and
    the output folder was named otherwise than `runs` and the dashboards say."""
    stem = file_stem(name)
    return stem if redact_text(stem) == stem else "redacted"


def output_for(
    first_source: str, choose: str = "-o sets the output folder", sources: Sequence[str] = ()
) -> tuple[str, str | None]:
    """The output folder when `-o` is not given, and a note when it is not the default: next to
    the first trace, unless that folder is read-only (a shared traces folder) — then
    `<stem>.atlas` in the caller's folder (`callers_folder`), named as the caller can read it, or
    `<stem>-2.atlas`, `-3`… where that one is not this ingest's to write (`_taken`: the run of
    other traces, outputs whose summary cannot be read, not a folder), said in the note.
    `sources`: every trace being ingested (none: the first alone). `choose` tells how to choose
    another folder."""
    out = default_output(first_source)
    if is_url(out) and not out.startswith("file://"):
        return out, None
    local = Path(out.removeprefix("file://"))
    # an existing folder is written again only where its permission bits allow it, root's too
    # (`outputs.check_output_path`): root rewrote a mode-555 `<stem>.atlas`; else the fallback
    usable = is_writable_folder(local) if local.is_dir() else local.exists() or is_writable_folder(local.parent)
    if usable:
        return out, None
    caller = callers_folder()
    read_only = local if local.is_dir() else local.parent
    if not is_writable_folder(caller or Path.cwd()):
        mine = "its folder" if read_only == local.parent else "its output folder"
        raise AtlasError(first_source, f"{mine} {read_only} and the current folder are read-only: {choose}")
    these = list(sources or [first_source])
    # in a notebook an absolute path: a relative one is read from the kernel's folder, notebooks/
    named = (Path(name) if caller is None else caller / name for name in _fallback_names(local.name))
    first = fallback = next(named)
    why = why_first = _taken(fallback, these)
    while why is not None:
        fallback = next(named)
        why = _taken(fallback, these)
    taken = "" if fallback == first else f", as {_shown(first)} {why_first}"
    return str(fallback), f"{read_only} is read-only: writing to {_shown(fallback)} instead{taken} ({choose})"


def _fallback_names(default: str) -> Iterator[str]:
    """`default` (`<stem>.atlas`), then `<stem>-2.atlas`, `<stem>-3.atlas`…: the names a trace in
    a read-only folder may take in the caller's folder (`output_for`), each within NAME_BYTES
    (`short_name`; a cut stem ends in its digest, then the number)."""
    yield default
    stem = default.removesuffix(".atlas")
    for n in itertools.count(2):
        yield short_name(stem, f"-{n}.atlas")


# A trace as a run's summary.json names it: its file name as ingest wrote it there (redacted:
# `run_ghp_….json` is `run_<redacted>.json`, `outputs.write_json`) and its fingerprint
# (`summary.trace_fingerprint`; None for a URL or an unreadable file, which matches no run)
Identity = tuple[str, str | None]


def _identity(source: str, fingerprint: bool = True) -> Identity:
    """`source` as its run's summary.json names it; its file name alone unless `fingerprint`."""
    if is_url(source) and not source.startswith("file://"):
        return redact_text(source.rstrip("/").rsplit("/", 1)[-1]), None
    local = Path(source.removeprefix("file://"))
    return redact_text(local.name), trace_fingerprint(local) if fingerprint else None


def _listed(folder: Path) -> tuple[set[Identity], set[str]] | None:
    """The traces a run folder's summary.json lists (`Identity`) and the file names of those that
    failed; None where it cannot be read as a run's summary (missing, truncated, a folder)."""
    try:
        summary = json.loads((folder / SUMMARY).read_bytes())
    except (OSError, ValueError):
        return None
    traces = summary.get("traces") if isinstance(summary, dict) else None
    failed = summary.get("failed", []) if isinstance(summary, dict) else None
    if not isinstance(traces, list) or not isinstance(failed, list):
        return None
    if not all(isinstance(t, dict) for t in traces) or not all(isinstance(f, dict) for f in failed):
        return None
    # a value not a string (a doctored summary) names no trace: it matches none
    listed = {(_text(t.get("file")), _text(t.get("fingerprint"))) for t in traces}
    failed_names = {_text(f.get("source")).rstrip("/").rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1] for f in failed}
    return listed, failed_names


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_run_of(listed: tuple[set[Identity], set[str]], sources: Sequence[str | Path]) -> bool:
    """Whether a run's traces (`_listed`) are exactly `sources` — each listed, or listed as
    failed by file name — and no other: a run of several traces is not the run of one of them, which
    would replace it alone (b's rank gone without a word), and the run of `a.json` and `b.json`
    is theirs to write again. A trace of no fingerprint (a URL, unreadable) is no run's. The
    names compared first: a trace's fingerprint costs two reads of 1 MiB."""
    traces, failed = listed
    names = {_identity(source, fingerprint=False)[0] for source in map(str, sources)}
    if {name for name, _ in traces} | failed != names:
        return False
    these = {_identity(source) for source in map(str, sources)}
    if any(fingerprint is None for _, fingerprint in these) or not traces <= these:
        return False
    return all(identity in traces or identity[0] in failed for identity in these)


def _taken(folder: Path, these: Sequence[str]) -> str | None:
    """Why the fallback folder `folder` is not this ingest's of `these` traces to write (said in
    the note), or None: free, or the run of exactly these traces (`_is_run_of`). A folder holding
    Kernel Atlas outputs is not known to be theirs unless its summary.json says so: one whose
    summary was truncated or is a folder had been written over without a word, its report and
    another trace's kernels gone; the caller's own `./a.atlas`, the run of `./a.json` with its
    report, had been ingested over by `atlas diff ../ro/a.json`. A folder holding none of a run's
    files is ingest's to write, or to refuse, as the default folder is. A file (or a dangling
    link) of the name is passed over too: ingest would refuse it, not try the next name."""
    if not folder.is_dir():
        return "is not a folder" if folder.is_symlink() or folder.exists() else None
    listed = _listed(folder)
    if listed is not None:
        runs = len(listed[0]) + len(listed[1])
        if _is_run_of(listed, these):
            return None
        return "holds the run of another trace" if runs <= 1 else f"holds the run of {runs:,} traces"
    try:
        outputs = {p.name for p in folder.iterdir()} & (RUN_FILE_NAMES - {LOCK_NAME} | set(DATASETS))
    except OSError as exc:
        return f"cannot be read ({os_problem(exc)})"
    if not outputs:
        return None
    if SUMMARY in outputs:  # truncated, not JSON, a folder
        return f"holds a run whose {SUMMARY} cannot be read"
    return f"holds Kernel Atlas outputs but no {SUMMARY}"  # an ingest that ended early, or its files moved


def _shown(folder: Path) -> str:
    """A fallback folder as a note names it: `./NAME` where it is relative to the current folder."""
    return str(folder) if folder.is_absolute() else f"./{folder}"


def callers_folder() -> Path | None:
    """The folder of the shell that started a notebook's kernel where this runs in one, else None
    (the current folder is the caller's). A kernel runs in the notebook's folder (notebooks/) and
    keeps that shell's directory in $PWD, which it inherits and never changes: a trace in a
    read-only folder had been ingested into notebooks/<stem>.atlas, printed as a bare relative
    path the user's shell could not find. A running kernel, not ipykernel imported: executing a
    notebook imports it too (jupyter_client's kernel spec), in a process whose $PWD may be stale."""
    kernel = sys.modules.get("ipykernel.kernelapp")
    caller = os.environ.get("PWD")
    if kernel is None or not kernel.IPKernelApp.initialized() or not caller or not os.path.isabs(caller):
        return None
    return Path(caller)


def not_a_run_file(path: Path) -> None:
    """Refuse a run folder's own file given as a trace: `atlas report RUN/summary.json` made
    RUN/summary.atlas/ inside the run, and failed."""
    own_file = run_file_of(path, levels=1)
    if own_file is not None:
        raise AtlasError(path, f"is {own_file[1]} of the run folder {own_file[0]}, not a trace")


def ingest_one(source: str | Path) -> tuple[Path, list[str]]:
    """A trace ingested as `atlas ingest TRACE` would (its default output folder); returns the
    folder and the warnings. A trace that is missing or fails is an `AtlasError`."""
    if not is_url(str(source)) and not Path(source).exists():  # said before a fallback folder is chosen for it
        raise AtlasError(source, why_missing(Path(source)))
    if not is_url(str(source)):
        not_a_run_file(Path(source))
    # the commands that ingest on first use (report, diff, dashboard) have no -o
    out, note = output_for(str(source), "`atlas ingest TRACE -o OUT` chooses the output folder")
    result = ingest_fleet([str(source)], out)
    if result.failed:
        # the trace and the problem apart (`redact.redacted_error`): `/etc/passwd: not JSON` redacted
        # as one text read `/etc/passwd: <redacted> JSON`
        raise AtlasError(*subject_and_problem(source, result.failed[0].reason))
    return Path(out), ([note] if note else []) + result.warnings


def run_folder(source: str | Path, reuse: bool = True, notes: list[str] | None = None) -> Path:
    """The ingest output for `source`: a folder as it is; a trace's default output folder,
    ingested now unless `reuse` and that folder is this trace's run (`ingested_from`). `notes`,
    where given, receives what that ingest says (`ingest_one`: a read-only folder's fallback, the
    credentials redacted, the unlinked kernels), for the caller to print as `atlas report TRACE`
    prints them — dropped, `atlas dashboard TRACE` and the notebooks had said none of them."""
    path = Path(source)
    if path.is_dir():
        return path
    if reuse:
        if not path.exists():
            raise AtlasError(path, why_missing(path))
        out_dir = Path(output_for(str(path))[0])
        if ingested_from(out_dir, path):
            return out_dir
    out_dir, said = ingest_one(path if reuse else source)  # a URL as given
    if notes is not None:
        notes.extend(said)
    return out_dir


def ingested_from(out_dir: Path, trace: Path) -> bool:
    """Whether `out_dir` holds the run of `trace` alone, as ingested: its summary.json lists this
    trace — its file name as ingest wrote it there (redacted) and its fingerprint
    (`summary.trace_fingerprint`) — and no other, and no failure. A summary newer than the trace
    was taken for its run, and the run of another trace of the same stem (`m.json.gz` and
    `m.json` share `m.atlas`), or of a file copied over the trace keeping its older time, was
    compared as if it were this one; a trace whose file name holds a credential, compared by its
    raw name, was ingested again by every `diff`, `report TRACE` and `dashboard TRACE`."""
    listed = _listed(out_dir)
    return listed is not None and not listed[1] and _is_run_of(listed, [str(trace)])


def plan(
    sources: Sequence[str], out: str, captures: Sequence[CapturedGraph] = (), run_id: str | None = None
) -> list[Task]:
    """One task per trace; traces with the same file name get distinct file names. A trace whose
    name declares no rank is written under one no name declares (`fallback`): the rank it is given
    when its content declares none either, unless another trace's content declares that rank."""
    from kernel_atlas.ingest.pipeline import free_ranks, rank_in_name

    stems = [_stem(s.rstrip("/").rsplit("/", 1)[-1]) for s in sources]
    clash = {s for s in stems if stems.count(s) > 1}
    tasks = [
        Task(source, out, i, f"{stem}.{i}" if stem in clash else stem, tuple(captures), run_id=run_id, process=process)
        for i, (source, stem, process) in enumerate(_with_processes(sources, stems))
    ]
    named = [rank_in_name(task.source.rstrip("/").rsplit("/", 1)[-1]) for task in tasks]
    unnamed = [task for task, rank in zip(tasks, named, strict=True) if rank is None]
    guesses = free_ranks({rank for rank in named if rank is not None}, len(unnamed))
    for task, guess in zip(unnamed, guesses, strict=True):
        task.fallback = guess
    return tasks


def _with_processes(sources: Sequence[str], stems: list[str]) -> Iterator[tuple[str, str, int | None]]:
    """Each source once, but a local Nsight Systems SQLite export once per process with GPU work."""
    for source, stem in zip(sources, stems, strict=True):
        processes: list[int] = []
        if source.lower().endswith(".sqlite") and not is_url(source):
            with suppress(AtlasError):  # ingesting it says what is wrong
                processes = gpu_processes(Path(source.removeprefix("file://")))
        for process in processes if len(processes) > 1 else [None]:
            yield source, stem, process


@contextmanager
def _local_copy(source: str) -> Iterator[Path]:
    """A local path for the trace: itself, or a temporary copy of a remote object."""
    if not is_url(source) or source.startswith("file://"):
        yield Path(source.removeprefix("file://"))
        return
    fs, path = filesystem(source)
    folder = tempfile.mkdtemp(prefix="atlas-")
    try:
        local = Path(folder) / path.rsplit("/", 1)[-1]
        fs.get_file(path, str(local))
        yield local
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _names_the_trace(source: str, local: Path | None) -> bool:
    """Whether an error's file is the trace being ingested (its local copy, for a remote one)."""
    if local is None:
        return True  # the copy itself failed
    if source == str(local):
        return True
    try:
        return Path(source).resolve() == local.resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def ingest_task(task: Task, on_progress: Callable[[str, float], None] | None = None) -> Outcome:
    """Ingest one trace into the dataset. Never raises: a failure comes back as `RankFailed`."""
    from kernel_atlas.classify.classifier import default_classifier
    from kernel_atlas.ingest.pipeline import ingest_trace

    local: Path | None = None
    try:
        with _local_copy(task.source) as path:
            local = path
            result = ingest_trace(
                path,
                task.index if task.fallback is None else task.fallback,
                on_progress,
                captures=task.captures,
                workers=task.workers,
                process=task.process,
                name=task.stem,  # two traces of one file name get distinct ones (`t.0`, `t.1`)
            )
        rank = int(result.facts["rank"])
        host = next(iter(result.host_events.values()), None)
        # the host and memory events are written on a thread while the kernels' catalog and file are
        # made here (Arrow's encoding and writing run without the GIL: 0.2 s of a 500 MB trace's
        # ingest hidden), first and here when they are few; the kernels' file stays only when both
        # succeed (`_written_together`)
        rows = sum(len(table) for table in (host, result.memory) if table is not None)
        beside = on_a_thread(
            write_beside,
            result.memory,
            host,
            task.out,
            result.facts,
            task.stem,
            task.run_id,
            name="atlas-write",
            here=rows < WRITE_BESIDE_MIN_ROWS,
        )
        result.host_events, result.memory, host = {}, None, None  # written, or the thread's until it ends
        catalog = build_catalog(result.frame, known=default_classifier().catalog, limit=CATALOG_ENTRIES)
        kernel_time = kernel_time_table(result.frame)
        written, result.facts = _written_together(
            lambda: write_rank(result.frame, task.out, rank, task.stem, task.run_id), beside, task.out
        )
        position = None if result.rank_declared else task.index
        return RankDone(task.source, rank, written, result.facts, result.warnings, catalog, kernel_time, position)
    except AtlasError as exc:
        problem = exc.problem if exc.source else str(exc)
        if exc.source and not _names_the_trace(exc.source, local):  # an output (disk full), a catalog, a capture
            return RankFailed(task.source, f"{exc.source}: {problem}")
        return RankFailed(task.source, f"{task.source}: {problem}")
    except OSError as exc:  # the system said no (too many open files…): said as it said it
        return RankFailed(task.source, f"{exc.filename or task.source}: {os_problem(exc)}")
    except Exception as exc:  # one rank's bug must not stop the others: reported with its type
        reraise_if_signalled(exc)  # a library's own exception for Ctrl-C or SIGTERM: the command ends
        refusal = system_refusal(exc)  # or the system refusing memory, or a module a file descriptor
        if refusal:
            return RankFailed(task.source, f"{task.source}: {refusal}")
        return RankFailed(task.source, f"{task.source}: internal error: {type(exc).__name__}: {exc}")


def _written_together(write_kernels: Callable[[], str], beside: Future[T], out: str) -> tuple[str, T]:
    """The kernels' file written here while `beside` writes the rank's other tables: the file's
    relative path and `beside`'s value. When either fails, no kernels file is left (a rank file
    the run's summary does not list is refused by every reader) and the first failure in that
    order — this one, else `beside`'s — is raised, once `beside` has ended."""
    try:
        written = write_kernels()
    except BaseException:
        wait([beside])
        raise
    try:
        return written, beside.result()
    except BaseException:
        remove_dataset_file(out, written)
        raise


def _run_local(
    tasks: list[Task],
    jobs: int,
    on_outcome: Callable[[Outcome], None],
    on_progress: Any = None,
    work: Callable[..., Outcome] = ingest_task,
) -> None:
    """In this process when one job (stage progress for a single trace), else a process pool
    with at most `jobs` traces in flight. When a worker dies (killed for memory, crashed), the
    traces it may have held are retried each in a pool of their own, so only the culprit fails."""
    if jobs <= 1 or len(tasks) == 1:
        for task in tasks:
            on_outcome(work(task, on_progress if len(tasks) == 1 else None))
        return
    suspects: list[Task] = []
    queue = list(reversed(tasks))
    while queue:  # a pool per round: a worker's death ends its round, the rest go on in a new one
        # `process_pool`: its workers ignore Ctrl-C and end with this process (killed, or by the
        # out-of-memory killer) — plain pool workers lived on, holding the folder's lock for ever
        with process_pool(min(jobs, len(tasks))) as pool:
            running: dict[Future[Outcome], Task] = {}
            broken = False
            while (queue or running) and not broken:
                while queue and len(running) < jobs:
                    task = queue.pop()
                    running[submit_held(pool, work, task)] = task
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = running.pop(future)
                    try:
                        on_outcome(future.result())
                    except BrokenProcessPool:
                        suspects.append(task)
                        broken = True
            for future, task in running.items():  # what the broken pool held
                if future.done() and future.exception() is None:
                    on_outcome(future.result())
                else:
                    suspects.append(task)
    for task in suspects:
        with process_pool(1) as alone:
            try:
                on_outcome(submit_held(alone, work, task).result())
            except BrokenProcessPool:
                on_outcome(RankFailed(task.source, f"{task.source}: the worker process died (out of memory?)"))


def _run_ray(
    tasks: list[Task],
    jobs: int | None,
    address: str | None,
    on_outcome: Callable[[Outcome], None],
    work: Callable[..., Outcome] = ingest_task,
) -> None:
    """One Ray task per trace. With no address a local Ray is started for this run (and
    stopped after); `auto` or `ray://HOST:PORT` joins an existing cluster."""
    try:
        import ray
        from ray.exceptions import RayError
    except ImportError:
        raise AtlasError(None, "--engine ray needs Ray: pip install 'kernel-atlas[fleet]'") from None
    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
        if address is None:  # an embedded Ray on this machine, sized for this run
            options.update(num_cpus=jobs or os.cpu_count() or 1, object_store_memory=256 << 20)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise AtlasError(address, f"cannot start or join Ray: {exc}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(work)
        pending = {remote.remote(task): task for task in tasks}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                task = pending.pop(ref)
                try:
                    on_outcome(ray.get(ref))
                except RayError as exc:  # the worker died or Ray could not run the task
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    on_outcome(RankFailed(task.source, f"{task.source}: Ray task failed: {type(exc).__name__} {first}"))
    finally:
        if started:
            ray.shutdown()


def ingest_fleet(
    sources: Sequence[str],
    out: str | Path,
    engine: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    captures: Sequence[str | Path] = (),
    on_done: Callable[[str], None] | None = None,
    on_progress: Callable[[str, float], None] | None = None,
) -> FleetResult:
    """Ingest traces (already expanded, see `expand_sources`) into the output folder `out`;
    `captures` are profiled CUDA/HIP-graph captures (files or folders) for their graph replays.

    Writes nothing but the failures' absence when every trace fails (the folder is left
    without a summary); otherwise catalog.json and, last, summary.json."""
    if engine not in ENGINES:
        raise AtlasError(None, f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
    if not sources:
        raise AtlasError(None, "no trace files given")
    out = str(out)
    graphs, warnings = read_captures(captures)
    with new_run(out) as run_id:
        tasks = plan(list(sources), out, graphs, run_id)
        if engine == "ray" or ((jobs or 1) > 1 and len(tasks) > 1):
            for task in tasks:  # the traces are the parallel work: each is decoded by its own process
                task.workers = 1
        return _ingest_run(tasks, out, engine, jobs, address, warnings, on_done, on_progress)


def _ingest_run(
    tasks: list[Task],
    out: str,
    engine: str,
    jobs: int | None,
    address: str | None,
    warnings: list[str],
    on_done: Callable[[str], None] | None,
    on_progress: Callable[[str, float], None] | None,
) -> FleetResult:
    if engine == "ray" and address is not None and not is_url(out):
        warnings.append(
            f"-o {out} is a local path: Ray workers on other machines write their ranks to their own disks "
            "(use shared storage or an s3:// / gs:// URL)"
        )
    run = RunFold(warnings)

    def fold(outcome: Outcome) -> None:
        run.add(outcome)
        if on_done:
            on_done(outcome.source)

    if engine == "ray":
        _run_ray(tasks, jobs, address, fold)
    else:
        _run_local(tasks, jobs or 1, fold, on_progress)
    return run.finish(out, tasks[0].run_id, engine)


@dataclass
class RunFold:
    """The ranks of one run folded as they finish — facts, catalog entries, time per kernel —
    and, at the end, the run's catalog.json and summary.json: the one writer of a run's summary,
    for one trace (`write_outputs`) and for thousands (`ingest_fleet`)."""

    warnings: list[str]
    traces: list[dict[str, Any]] = field(default_factory=list)
    failed: list[RankFailed] = field(default_factory=list)
    catalog: Merged = field(default_factory=dict)
    left_out: LeftOut = field(default_factory=LeftOut)  # kernels the ranks' catalogs did not list
    kernel_time: pd.DataFrame | None = None
    sources: list[str] = field(default_factory=list)  # the traces whose warnings `warnings` holds
    # each trace's own warnings, by (its entry of `traces`, source): given in the order of (rank,
    # source) whatever order the traces end in
    _said: list[tuple[dict[str, Any], str, list[str]]] = field(default_factory=list)
    # the traces that declare no rank: (position among the inputs, source, entry of `traces`)
    _unranked: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        if isinstance(outcome, RankFailed):
            self.failed.append(outcome)
            return
        entry = {**outcome.facts, "kernels_file": outcome.file}
        self.traces.append(entry)
        if outcome.position is not None:
            self._unranked.append((outcome.position, outcome.source, entry))
        if outcome.warnings:
            self._said.append((entry, outcome.source, outcome.warnings))
        self.sources.append(outcome.source)
        merge_catalog(self.catalog, outcome.catalog.entries, outcome.source)
        self.left_out.add(outcome.catalog.left_out)
        self.kernel_time = add_kernel_times(self.kernel_time, outcome.kernel_time)

    def settle_ranks(self, out: str) -> None:
        """The traces that declare no rank given the lowest ranks no trace declares, in input order
        (`pipeline.free_ranks`), and said in one line: a trace's files written under a guess that
        another trace's content turned out to declare are moved to the rank it is given. Their
        position among the inputs had been their rank, and a rank another trace declares made
        two traces one timeline. Before anything is named by rank in the run's summary."""
        if len(self.traces) < 2 or not self._unranked:
            return  # one trace alone: the rank it was given (0) is no other's
        from kernel_atlas.ingest.pipeline import free_ranks, given_ranks_text, with_rank

        unranked = sorted(self._unranked, key=lambda u: u[0])
        mine = {id(entry) for *_, entry in unranked}
        declared = {int(t["rank"]) for t in self.traces if id(t) not in mine}
        given = list(zip(unranked, free_ranks(declared, len(unranked)), strict=True))
        for (_, _, entry), rank in given:
            if entry["rank"] == rank:
                continue  # its guess (`plan`) stands: its files stay where they were written
            for key in ("kernels_file", "memory_file", "host_events_file"):
                if entry.get(key):
                    entry[key] = _move_to_rank(out, entry[key], rank)
            with_rank(entry, rank)
        self.warnings.append(given_ranks_text([(source, rank) for (_, source, _), rank in given]))

    def finish(self, out: str, run_id: str | None, engine: str) -> FleetResult:
        """catalog.json and, last, summary.json; nothing when every rank failed."""
        self.settle_ranks(out)
        said = [warning for *_, given in sorted(self._said, key=lambda s: (s[0]["rank"], s[1])) for warning in given]
        warnings, traces = _folded(self.warnings + said, self.sources), self.traces
        warnings += world_size_contradictions(list(zip(self.sources, traces, strict=True)))
        self.failed.sort(key=lambda f: f.source)
        kernel_time = self.kernel_time if self.kernel_time is not None else kernel_time_table(pd.DataFrame())
        if not traces:
            return FleetResult(out, {}, warnings, self.failed, kernel_time)
        traces.sort(key=lambda t: (t["rank"], t["kernels_file"]))
        ranks = [t["rank"] for t in traces]
        clash = f"several traces claim the same rank ({sorted(ranks)}); the `trace` column tells them apart"
        if len(set(ranks)) != len(ranks) and clash not in warnings:
            warnings.append(clash)
        entries, cut = merged_entries(self.catalog, CATALOG_ENTRIES)
        left_out = LeftOut()
        for part in (self.left_out, cut):
            left_out.add(part)
        by_kind = _summed_kinds(traces)
        if left_out.kernels:
            warnings.append(_left_out_warning(len(entries), left_out, by_kind, len(traces)))
        summary = {
            "run_id": run_id,
            "traces": traces,
            "devices": [device for t in traces for device in t.get("devices", [])],
            "by_kind": by_kind,
            "failed": [{"source": f.source, "reason": f.reason} for f in self.failed],
            "layout": LAYOUT,
            "engine": engine,
            "warnings": warnings,
            "distinct_kernels": len(entries) + left_out.kernels,
        }
        if left_out.kernels:
            summary["catalog_left_out"] = {
                "kernels": left_out.kernels,
                "calls": left_out.calls,
                "total_us": round(left_out.total_us, 3),
            }
        from kernel_atlas.ingest.memory import MEMORY_EVENTS

        files = {"kernels": f"{out}/{KERNELS}"}
        # the tables beside the kernels, where a trace wrote one (summary.json names each file)
        for key, dataset in (("host_events_file", HOST_EVENTS), ("memory_file", MEMORY_EVENTS)):
            if any(t.get(key) for t in traces):
                files[dataset.removesuffix(".parquet")] = f"{out}/{dataset}"
        files["catalog"] = write_json(out, CATALOG, entries)
        files["summary"] = write_json(out, SUMMARY, summary)  # last: its presence says the run completed
        return FleetResult(out, summary, warnings, self.failed, kernel_time, files)


def world_size_contradictions(traces: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """What the traces' `distributedInfo` says that cannot all be true of one job, one line per kind
    naming the traces (`source`, its summary entry; ranks as settled): traces declaring different
    world sizes (traces of different jobs, or one wrong), and a trace whose rank its world size
    does not hold — its own, else the one world size the run's traces declare (rank 5 beside a
    world of 4: a trace of another job, or a wrong rank). Either went unsaid, and the report counted
    ranks 1–3 of "the job's 4" missing beside a rank 5."""
    ordered = sorted(traces, key=lambda t: (t[1]["rank"], t[0]))  # whatever order the traces ended in
    by_size: dict[int, list[str]] = {}
    for source, entry in ordered:
        size = declared_world_size(entry)
        if size is not None:
            by_size.setdefault(size, []).append(source)
    lines = []
    if len(by_size) > 1:
        sizes = "; ".join(f"{size:,} ({named_first(sources)})" for size, sources in sorted(by_size.items()))
        lines.append(
            f"the traces declare different world sizes (distributedInfo.world_size): {sizes} — traces of "
            "different jobs, or a wrong world size"
        )
    run_size = next(iter(by_size)) if len(by_size) == 1 else None
    outside = [
        f"{source} rank {entry['rank']:,} of {size:,}"
        for source, entry in ordered
        if (size := declared_world_size(entry) or run_size) is not None and entry["rank"] >= size
    ]
    if outside:
        lines.append(
            f"{counted(len(outside), 'trace has a rank', 'traces have ranks')} beyond the world size "
            f"(distributedInfo.world_size; a job of N ranks has ranks 0 to N − 1): {named_first(outside)} — "
            "traces of another job, or a wrong rank"
        )
    return lines


def named_first(items: Sequence[str]) -> str:
    """The first NAMED_TRACES of `items`, then how many more (`a, b, c and 4 more`)."""
    more = len(items) - NAMED_TRACES
    return ", ".join(items[:NAMED_TRACES]) + (f" and {more:,} more" if more > 0 else "")


def _move_to_rank(out: str, relative: str, rank: int) -> str:
    """A file of a rank-partitioned table of the run (`outputs.dataset_file`) moved, its name
    kept, into the folder of `rank`; its new relative path. Its files hold no rank (the folder
    names it), so nothing else changes. The folder it leaves goes where it is left empty: a rank
    folder without a file reads as a rank whose file is missing."""
    dataset, _, name = relative.split("/")
    moved = f"{dataset}/{PARTITION}={rank}/{name}"
    if is_url(out):
        fs, root = filesystem(out)
        fs.mv(f"{root}/{relative}", f"{root}/{moved}")  # an object store has no folder to leave
        return moved
    source, target = Path(out) / relative, Path(out) / moved
    try:
        if target.parent.is_symlink():
            raise AtlasError(target.parent, "is a symbolic link: refusing to write through it")
        target.parent.mkdir(exist_ok=True)
        os.replace(source, target)
    except OSError as exc:
        raise AtlasError(source, f"cannot move to {moved}: {os_problem(exc)}") from None
    with suppress(OSError):
        source.parent.rmdir()  # only where empty
    return moved


def _left_out_warning(listed: int, left_out: LeftOut, by_kind: dict[str, dict[str, float]], traces: int) -> str:
    gpu_us = sum(kind.get("total_us", 0.0) for kind in by_kind.values())
    share = f", {100.0 * left_out.total_us / gpu_us:.2g} % of GPU time" if gpu_us > 0 else ""
    many = " (counted once in each trace that has them)" if traces > 1 else ""
    return (
        f"catalog.json lists the {listed:,} kernels of most GPU time; {left_out.kernels:,} more{many} "
        f"({left_out.calls:,} calls{share}) are in kernels.parquet only"
    )


# traces named in a warning said alike of several traces; the rest are counted
NAMED_TRACES = 3


def _folded(warnings: list[str], sources: Sequence[str] = ()) -> list[str]:
    """Each distinct warning once, in first-seen order, with how many times it was given when
    more than once (the ranks of one Nsight export each say the same of the same file). A warning
    said alike of several of `sources` (`<trace>: <what>`: the ranks of a fleet each missing the
    same launcher) is one line naming the first NAMED_TRACES of them and counting the others."""
    names = set(sources)
    lengths = sorted({len(n) for n in names}, reverse=True)  # the longest first: one name may prefix another
    said: dict[tuple[str, bool], dict[str, int]] = {}  # (text, of a trace) → trace (or "") → times
    for warning in warnings:
        source = next((warning[:k] for k in lengths if warning[k : k + 2] == ": " and warning[:k] in names), None)
        text = warning[len(source) + 2 :] if source is not None else warning
        times = said.setdefault((text, source is not None), {})
        times[source or ""] = times.get(source or "", 0) + 1
    folded = []
    for (text, of_trace), times in said.items():
        if len(times) == 1:
            source, n = next(iter(times.items()))
            line = f"{source}: {text}" if of_trace else text
            folded.append(line if n == 1 else f"{line} ({n:,} times)")
            continue
        named = ", ".join(list(times)[:NAMED_TRACES])
        more = len(times) - NAMED_TRACES
        folded.append(f"{len(times):,} traces: {text} ({named}{f' and {more:,} more' if more > 0 else ''})")
    return folded


def write_beside(
    memory: pd.DataFrame | None, host: pd.DataFrame | None, out: str, facts: dict[str, Any], stem: str, run_id: str
) -> dict[str, Any]:
    """The tables ingest writes beside a rank's kernels — its `[memory]` events and its host
    events (the critical path's host side) — and the trace's facts with `memory_file` and
    `host_events_file` added where each was written (summary.json names every file of the run)."""
    from kernel_atlas.ingest.memory import write_memory_events

    written = write_memory_events(memory, out, facts["rank"], stem, run_id)
    host_written = write_host_events(host, out, facts["rank"], stem, run_id) if host is not None else None
    files = {"memory_file": written, "host_events_file": host_written}
    return {**facts, **{key: path for key, path in files.items() if path}}


def write_outputs(result: IngestResult, out_dir: str | Path) -> dict[str, Path]:
    """An ingest already in memory (`pipeline.ingest_trace` / `ingest_paths`) written as
    `atlas ingest` writes it: one rank file per trace, then catalog.json and summary.json through
    `RunFold`, replacing an earlier run's."""
    from kernel_atlas.classify.classifier import default_classifier

    frame, out = result.frame, str(out_dir)
    facts = result.facts.get("traces", [result.facts])
    with new_run(out) as run_id:
        run = RunFold(list(result.warnings))
        for trace in facts:
            stem = file_stem(Path(trace["file"]).name)
            mine = (frame["trace"] == stem).to_numpy() & (frame["rank"] == trace["rank"]).to_numpy()
            rows = frame[mine] if len(facts) > 1 else frame
            memory = result.memory
            if memory is not None and len(facts) > 1:
                memory = memory[(memory["trace"] == stem).to_numpy() & (memory["rank"] == trace["rank"]).to_numpy()]
            trace = write_beside(memory, result.host_events.get((stem, trace["rank"])), out, trace, stem, run_id)
            catalog = build_catalog(rows, known=default_classifier().catalog, limit=CATALOG_ENTRIES)
            written = write_rank(rows, out, trace["rank"], stem, run_id)
            run.add(RankDone(trace["file"], trace["rank"], written, trace, [], catalog, kernel_time_table(rows)))
        files = run.finish(out, run_id, "local").files
    return {key: Path(value) for key, value in files.items()}


def _summed_kinds(traces: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    kinds: dict[str, dict[str, float]] = {}
    for trace in traces:
        for kind, value in trace.get("by_kind", {}).items():
            slot = kinds.setdefault(kind, {"count": 0, "total_us": 0.0})
            slot["count"] += value["count"]
            slot["total_us"] += value["total_us"]
    return kinds
