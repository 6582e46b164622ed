"""The ingest output folder: its layout, its writers and its readers.

    OUT/
      kernels.parquet/                 the kernels table, a Hive-partitioned Parquet dataset
        rank=0/<trace-stem>.parquet    one file per trace; `rank` lives in the folder name
        rank=1/<trace-stem>.parquet
      catalog.json                     distinct kernels over all ranks
      summary.json                     per-trace facts and failures; written last
      .atlas.lock                      held by the command writing the folder

One layout for one rank and for thousands: pandas (`pd.read_parquet(OUT/kernels.parquet)`),
pyarrow.dataset, DuckDB (`kernels_sql`) and Spark read the dataset directly. `OUT` may be an
fsspec URL (`s3://…`, `gs://…`, `file://…`) for the writers. A `kernels.parquet` that is a
single file (the layout before partitioning) is still read.

One run's files belong together. An ingest takes the folder's lock (`safe_files.folder_lock`: a
second ingest or report into it fails at once), removes the previous run's summary.json first,
then its dataset, catalog and every file derived from it (`DERIVED`, and whatever the previous
report.json lists), and gives the new run an id. Every file is written whole under a dotted
temporary name and renamed (never through a link planted at its name); each rank's Parquet file
carries the run id in its metadata (`RUN_KEY`), and summary.json — written last — holds the run
id and lists the rank files. A run killed half-way therefore leaves no summary.json, and
`open_output` — what `atlas report`, `dashboard`, `diff` and `replay --from` read through —
refuses a folder without one, a summary that is not JSON, and a dataset file that is not the
summary's run's, is not listed, is not a kernels table, or is not a regular file. The files a
report or a replay writes carry the same run id, so they are tied to the kernels they came from.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kernel_atlas.core import safe_files
from kernel_atlas.core.beside import side_by_side, usable_cpus
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.heap import release_arrow_memory
from kernel_atlas.core.redact import REDACTED, credential_count, json_holds_credential, redact_document, redact_text
from kernel_atlas.core.text_limits import MAX_TEXT
from kernel_atlas.core.texts import strings_in
from kernel_atlas.store.limits import FLOAT_EXACT, MAX_DEPTH, MAX_TIME_US, RECORDED_CALL, too_deep
from kernel_atlas.store.report_schemas import typed
from kernel_atlas.store.schema import KERNEL_COLUMNS, KERNEL_SCHEMA, to_arrow
from kernel_atlas.store.summary_schema import check_summary

if TYPE_CHECKING:
    import fsspec

KERNELS = "kernels.parquet"
HOST_EVENTS = "host_events.parquet"  # written by ingest beside the kernels (ingest/host_events.py)
CATALOG = "catalog.json"
SUMMARY = "summary.json"
REPORT = "report.json"  # the report's facts; written last by `atlas report`, lists its files
PARTITION = "rank"
LAYOUT = {"kernels": KERNELS, "partitioning": "hive", "partition_by": [PARTITION]}  # recorded in summary.json
RUN_KEY = b"kernel_atlas.run"  # Parquet metadata: the id of the ingest run a file belongs to
# Files made from an ingest's kernels by `atlas report` and `atlas replay --from --all`: stale
# once the kernels change, so a new ingest removes them (and whatever the last report.json lists).
DERIVED = (
    REPORT,
    "report.html",
    "roofline.parquet",
    "timeshare.csv",
    "replay.parquet",
    "idle.parquet",
    "idle_hta.parquet",
    "idle_exact.parquet",
    "idle_causes.parquet",
    "launch_stats.parquet",
    "graph_candidates.parquet",
    "collectives.parquet",
    "memory_events.parquet",  # written by ingest itself, after the previous run's is removed
    "memory.parquet",
    HOST_EVENTS,
    "critical_path.parquet",
    "steps.parquet",  # a report killed after it removed report.json left it, served as the next run's steps
    "whatif.json",
)
# The rank-partitioned tables an ingest writes: their `rank=N` folders are made before a file is in them
DATASETS = (KERNELS, HOST_EVENTS, "memory_events.parquet")
# Columns a kernels table must have for `atlas report`; the others are filled with nulls when absent
# (outputs of earlier versions lack the newer ones).
REQUIRED_COLUMNS = ("name", "kind", "ts_us", "dur_us", "op_mapping", "category")
_RANK_DIR = re.compile(r"^rank=(-?\d+)$")


def is_url(target: str | Path) -> bool:
    return "://" in str(target)


def filesystem(target: str | Path) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of a path or URL, and the path within it. A protocol fsspec does not
    know, or whose package is not installed, is an AtlasError naming it (fsspec's message
    names the package: "Install s3fs to access S3"). fsspec is imported here, for a URL or a
    local folder given as one: every reader opens local outputs without it (~40 ms)."""
    import fsspec.core

    try:
        return fsspec.core.url_to_fs(str(target))
    except ImportError as exc:
        protocol = str(target).split("://", 1)[0]
        raise AtlasError(target, f"{protocol}:// URLs need a package that is not installed ({exc})") from None
    except ValueError as exc:
        if "protocol not known" not in str(exc).lower():
            raise
        protocol = str(target).split("://", 1)[0]
        raise AtlasError(target, f"unknown URL protocol {protocol}:// (fsspec knows no such filesystem)") from None


def file_stem(name: str) -> str:
    """A trace's file name without `.json`, `.gz`, `.zst` (an Nsight Systems export's without
    `.sqlite`, `.nsys-rep`): the name of its rows in the dataset (and of its output folder). A
    credential in the name becomes `redacted` (a file name keeps no `<>`), so the rank file is
    named as summary.json lists it and keeps no token."""
    for suffix in (".sqlite", ".nsys-rep", ".gz", ".zst", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return redact_text(name).replace(REDACTED, "redacted")


def dataset_file(dataset: str, rank: int, stem: str) -> str:
    """Where one trace's rows of `dataset` (its kernels, host events, memory events) go, relative
    to the output folder. A file name beginning with `.` or `_` is one readers pass over (hidden,
    `_metadata`: this module's listing, Arrow's and DuckDB's datasets alike) — a trace named
    `_run.json` was ingested, then reported as having no GPU activity —, so such a name is
    written after `trace-`; the rows keep their trace's name."""
    name = f"trace-{stem}" if stem.startswith((".", "_")) else stem
    return f"{dataset}/{PARTITION}={rank}/{short_name(name, '.parquet')}"


def short_name(stem: str, suffix: str) -> str:
    """`stem + suffix` as a file or folder name, within the file system's NAME_BYTES: a longer
    one is the stem cut (at a character) followed by `-` and 16 hex digits of its SHA-256 — the
    same name for the same stem, another for another. A legal 255-byte trace name made a
    258-byte rank file and a 256-byte `.atlas` folder, which no file system takes."""
    if len(os.fsencode(stem + suffix)) <= safe_files.NAME_BYTES:
        return stem + suffix
    digest = hashlib.sha256(os.fsencode(stem)).hexdigest()[:16]
    room = safe_files.NAME_BYTES - len(os.fsencode(suffix)) - len(digest) - 1
    return f"{safe_files.cut_to_bytes(stem, room)}-{digest}{suffix}"


def rank_file(rank: int, stem: str) -> str:
    """Where one trace's rows go, relative to the output folder."""
    return dataset_file(KERNELS, rank, stem)


# --- writing a run ---------------------------------------------------------------------------------


def check_output_path(out: str | Path) -> None:
    """`-o` names a folder that is (or can be made) ours: not empty, not a file, not one (or
    under one) whose permission bits forbid writing — for root too, as for `--html` and `-o`
    files (`check_named_output`): root rewrote a mode-555 run folder and made folders in a
    mode-555 one."""
    if not str(out).strip():
        raise AtlasError(None, "-o: the output folder is an empty path")
    if str(out) == "-":  # a folder named `-` was made, where stdout was meant
        raise AtlasError(None, "-o: `-` is no folder (the outputs are a folder of tables; name one)")
    if is_url(out):
        return
    path = Path(out)
    try:
        if path.exists() and not path.is_dir():
            raise AtlasError(out, "output exists and is not a folder")
        if path.is_dir() and not safe_files.is_writable_folder(path):
            raise AtlasError(out, safe_files.READ_ONLY)
        if not path.is_dir():
            above = next((p for p in path.absolute().parents if p.exists()), None)
            if above is not None and above.is_dir() and not safe_files.is_writable_folder(above):
                raise AtlasError(out, f"cannot create the output folder: {above} is read-only")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AtlasError(out, f"cannot create the output folder: {safe_files.os_problem(exc)}") from None


# A run folder's own files: ingest's tables and the report's files, and the folder's lock.
RUN_FILE_NAMES = frozenset({SUMMARY, CATALOG, KERNELS, *DERIVED, safe_files.LOCK_NAME})
_RUN_SEARCH_LEVELS = 4  # a dataset file lies at RUN/kernels.parquet/rank=N/FILE: three folders below


def check_named_output(target: str | Path, option: str, reads: Sequence[Path] = (), own: Path | None = None) -> None:
    """A file the user named for a command to write (`option`: --html, --overlay, -o …), refused
    in one line before it is written where it would replace what a command reads: one of
    `reads` (an input trace or catalog, by any path or link to it), or a run folder's own file
    (a name in RUN_FILE_NAMES in a folder holding summary.json, or anything inside its datasets) —
    but `own`, where the command writes this output by default. (`--html OUT/catalog.json`
    replaced the catalog with a page, and `--overlay TRACE` the trace with its redacted copy.)"""
    if is_url(target):
        return
    resolved = Path(os.path.realpath(target))
    if own is not None and resolved == Path(os.path.realpath(own)):
        return
    # a folder that is not there or not writable is said before the work, not after it: the
    # report had rewritten its run folder's tables, then failed on `--html nodir/r.html`
    parent = resolved.parent
    if not parent.is_dir():
        raise AtlasError(option, f"{target}: cannot write: its folder {Path(target).parent} does not exist")
    if resolved.is_dir():
        raise AtlasError(option, f"{target} is a folder: name a file to write")
    if not safe_files.is_writable_folder(parent) or (resolved.exists() and not os.access(resolved, os.W_OK)):
        raise AtlasError(option, f"{target}: cannot write: permission denied")
    for path in reads:
        if not is_url(path) and resolved == Path(os.path.realpath(path)):
            raise AtlasError(option, f"{target} is a file this command reads: name another file to write")
    own_file = run_file_of(resolved)
    if own_file is not None:
        run, name = own_file
        raise AtlasError(
            option, f"{target} is {name} of the run folder {run}: writing there replaces it; name another file"
        )


def run_file_of(path: Path, levels: int = _RUN_SEARCH_LEVELS) -> tuple[Path, str] | None:
    """(run folder, name) where `path` is a run folder's own file (a name in RUN_FILE_NAMES in the
    nearest folder up to `levels` above it that holds summary.json, or inside its datasets), else None."""
    for run in list(path.parents)[:levels]:
        if (run / SUMMARY).is_file():
            name = path.relative_to(run).parts[0]
            return (run, name) if name in RUN_FILE_NAMES else None
    return None


def _previous_report_files(root: Path, run_id: str | None) -> list[Path]:
    """Files the previous report listed in report.json, inside the folder — only a report of the
    run `run_id` (its summary.json's): another tool's report.json names files of its own."""
    try:
        report = safe_files.read_json(root / REPORT, limit=256 << 20)
        listed = report.get("files", {}) if run_id is not None and report.get("run_id") == run_id else {}
    except (AtlasError, AttributeError):
        return []
    names = listed.values() if isinstance(listed, dict) else []
    # report.json names its files inside the folder by name alone, others by their full path
    inside = [root / name for name in names if isinstance(name, str) and name == Path(name).name]
    return [p for p in inside if p.name not in (KERNELS, CATALOG, SUMMARY, safe_files.LOCK_NAME, ".", "..")]


def clear_previous_run(out: str | Path) -> None:
    """Remove an earlier run's files from `out`: summary.json first (a folder without one is an
    unfinished run), then everything made from its kernels, its catalog and its dataset. A
    folder holding no run id but the dataset folders an ingest made before its first rank file
    was in place (`_unfinished_dataset`) has those removed; any other file of an output's name
    in a folder without a run is refused, and nothing removed."""
    if is_url(out):
        fs, root_url = filesystem(out)
        for name in (SUMMARY, *DERIVED, CATALOG, KERNELS):
            path = f"{root_url}/{name}"
            if fs.exists(path):
                fs.rm(path, recursive=True)
        return
    root = Path(out)
    run_id = _run_of_folder(root)
    if run_id is None:
        unfinished = [name for name in DATASETS if _unfinished_dataset(root / name)]
        clashing = [
            name for name in (SUMMARY, CATALOG, KERNELS, *DERIVED) if (root / name).exists() and name not in unfinished
        ]
        if clashing:  # never remove what no Kernel Atlas run wrote
            shown = ", ".join(clashing[:4]) + (f" and {len(clashing) - 4} more" if len(clashing) > 4 else "")
            raise AtlasError(root, f"holds {shown}, which no Kernel Atlas run wrote: name an empty or new folder")
        for name in unfinished:  # an ingest's own folders, left before a file was in them
            safe_files.remove(root / name)
        return
    safe_files.remove(root / SUMMARY)
    for path in [*_previous_report_files(root, run_id), *(root / name for name in DERIVED)]:
        safe_files.remove(path)
    safe_files.remove(root / CATALOG)
    safe_files.remove(root / KERNELS)


def _run_of_folder(root: Path) -> str | None:
    """The id of the Kernel Atlas run in `root` — its summary.json's, or, where an ingest ended
    before writing one, the one a table it wrote carries (the first file of its kernels, host
    events or memory events, or a report's table) — else None: the folder holds no Kernel Atlas
    run."""
    try:
        summary = safe_files.read_json(root / SUMMARY)
    except AtlasError:
        summary = None
    if isinstance(summary, dict) and isinstance(summary.get("run_id"), str):
        return summary["run_id"]
    written = [root / name for name in DERIVED if name.endswith(".parquet") and (root / name).is_file()]
    for dataset in DATASETS:  # a rank's, written first
        if (root / dataset).is_dir():
            written += sorted((root / dataset).glob("rank=*/*.parquet"))[:1]
    for path in written:  # every table an ingest or report writes carries its run's id
        try:
            found = table_run(path)
        except (OSError, pa.ArrowException, AtlasError):
            continue
        if found is not None:
            return found
    return None


def _unfinished_dataset(path: Path) -> bool:
    """Whether `path` is a dataset folder an ingest made and ended before a file was in it:
    `rank=N` folders alone, holding nothing but a writer's temporary files. Killed (SIGKILL,
    SIGTERM, Ctrl-C), or failed writing (disk full, a file-size limit), before its first rank
    file was renamed into place, an ingest left `kernels.parquet/rank=0/` empty, and every later
    ingest refused the folder as one "no Kernel Atlas run wrote"."""
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        for folder in path.iterdir():
            if not _RANK_DIR.match(folder.name) or folder.is_symlink() or not folder.is_dir():
                return False
            for entry in folder.iterdir():
                if not safe_files.TEMPORARY_NAME.match(entry.name) or not _regular(entry):
                    return False
    except OSError:
        return False
    return True


@contextmanager
def lock(out: str | Path, shared: bool = False) -> Iterator[None]:
    """The folder's lock (`safe_files.folder_lock`); object stores are not locked."""
    if is_url(out):
        yield
        return
    with safe_files.folder_lock(out, shared=shared):
        yield


@contextmanager
def new_run(out: str | Path) -> Iterator[str]:
    """Hold `out` for a new ingest run: the folder is made and locked and the previous run's
    files removed; yields the new run's id. A folder this run made and left with nothing but
    its lock (every trace failed) is removed, while the lock is held: a failed `atlas ingest
    bad.json` left `bad.atlas/` holding `.atlas.lock` alone. A run refused the lock removes
    nothing but a folder left empty — it had removed the lock and folder of the ingest holding
    them, which then could not write its kernels ("No such file or directory")."""
    made = not is_url(out) and not Path(out).exists()
    check_output_path(out)
    with ExitStack() as held:
        try:
            held.enter_context(lock(out))
        except AtlasError:
            if made:  # never the lock another command holds: only a folder left empty
                with suppress(OSError):
                    Path(out).rmdir()
            raise
        try:
            clear_previous_run(out)
            yield uuid.uuid4().hex
        finally:
            if made:  # while the lock is still held: no other command is using the folder
                _remove_if_only_the_lock(Path(out))


def _remove_if_only_the_lock(folder: Path) -> None:
    """`folder` removed where it holds nothing but its lock and the dataset folders the run made
    before a file was in them (a rank that failed writing its file: disk full, a name too long)."""
    with suppress(OSError, AtlasError):
        names = {p.name for p in folder.iterdir()}
        left = names - {safe_files.LOCK_NAME}
        if safe_files.LOCK_NAME in names and all(
            name in DATASETS and _unfinished_dataset(folder / name) for name in left
        ):
            for name in left:
                safe_files.remove(folder / name)
            (folder / safe_files.LOCK_NAME).unlink()
            folder.rmdir()


# Rows per Parquet row group: the writer encodes a row group whole before it moves on, so a trace's
# 1.5M host events in one group held ~80 MB of encoding buffers; 128Ki rows hold a tenth of that.
ROW_GROUP_ROWS = 1 << 17


def _texts(table: pa.Table) -> list[str]:
    """The columns Parquet dictionary-encodes: texts and dictionaries (categoricals). Numbers are
    written plain — their dictionaries, mostly distinct values, only grew until the writer gave
    them up: a 466k-row kernels table took 0.36 s and 6.0 MB with them, 0.22 s and 3.0 MB without,
    and reads as fast (docs/performance.md)."""
    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_dictionary)
    return [field.name for field in table.schema if any(kind(field.type) for kind in kinds)]


def _write_parquet(table: pa.Table, handle: Any, **options: Any) -> None:
    """Dictionaries for texts (`_texts`); min/max statistics for the other columns only — a
    range of numbers lets DuckDB or a pyarrow filter skip row groups, a range of kernel names
    does not, and working it out was a third of the write (466k kernel rows: 0.23 → 0.16 s)."""
    texts = _texts(table)
    numbers = [name for name in table.column_names if name not in set(texts)]
    pq.write_table(table, handle, use_dictionary=texts, write_statistics=numbers, **options)


def _with_run(table: pa.Table, run_id: str | None) -> pa.Table:
    if run_id is None:
        return table
    return table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_KEY: run_id.encode()})


def _safe_folder(root: Path, relative: str) -> Path:
    """`root/relative`'s folder, made; a link planted on the way is refused (never followed)."""
    folder = root
    for part in Path(relative).parent.parts:
        folder = folder / part
        if folder.is_symlink():
            raise AtlasError(folder, "is a symbolic link: refusing to write through it")
        try:
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise AtlasError(folder, f"cannot create: {safe_files.os_problem(exc)}") from None
    return folder


def write_dataset_file(table: pa.Table, out: str | Path, relative: str, run_id: str | None = None) -> str:
    """One Parquet file of a rank-partitioned table of the output folder (`relative`, such as
    `kernels.parquet/rank=0/t.parquet`), tied to the run, whole or not at all: locally written
    atomically through no symbolic link, at a URL under a temporary name moved into place."""
    table = _with_run(_wide_dictionaries(table), run_id)
    if not is_url(out):
        _safe_folder(Path(out), relative)
        with safe_files.atomic_file(Path(out) / relative) as handle:
            _write_parquet(table, handle, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        return relative
    fs, root = filesystem(out)
    folder, name = f"{root}/{relative}".rsplit("/", 1)
    fs.makedirs(folder, exist_ok=True)
    partial = f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open(partial, "wb") as handle:
        _write_parquet(table, handle, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    fs.mv(partial, f"{folder}/{name}")
    return relative


def remove_dataset_file(out: str | Path, relative: str) -> None:
    """A file `write_dataset_file` wrote taken back (the rank it belongs to failed after it was
    written). Best effort, whatever an object store's client raises: where it cannot be,
    `open_output` refuses the folder, naming the file."""
    with suppress(Exception):
        if not is_url(out):
            safe_files.remove(Path(out) / relative)
            return
        fs, root = filesystem(out)
        fs.rm(f"{root}/{relative}")


def _wide_dictionaries(table: pa.Table) -> pa.Table:
    """`table` with every dictionary column's indices int32: the files of one dataset must agree
    on the index type, or a reader of the whole dataset (pandas, pyarrow.dataset) casts every
    file to the first one's and fails on a later file with more distinct values ("Integer value
    128 not in range": the memory events of a rank with 177 module paths after one with 75).
    Parquet stores the indices the same way whatever their type; pandas narrows them again."""
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), f.type.value_type), f.nullable, f.metadata)
        if pa.types.is_dictionary(f.type) and f.type.index_type != pa.int32()
        else f
        for f in table.schema
    ]
    schema = pa.schema(fields, table.schema.metadata)
    return table if schema == table.schema else table.cast(schema)


def write_rank(frame: pd.DataFrame, out: str | Path, rank: int, stem: str, run_id: str | None = None) -> str:
    """Write one trace's rows (all of one rank) into the dataset; returns the relative path."""
    table = to_arrow(frame)
    table = table.drop_columns([PARTITION]) if PARTITION in table.column_names else table
    return write_dataset_file(table, out, rank_file(rank, stem), run_id)


def write_json(out: str | Path, name: str, document: Any) -> str:
    """A JSON file of the output folder, whole or not at all; strings shaped like credentials
    are redacted (documents quote trace content: warnings, names)."""
    if not is_url(out):
        with safe_files.atomic_file(Path(out) / name) as handle:
            _write_json_to(handle, document)
        return str(Path(out) / name)
    fs, root = filesystem(out)
    path = f"{root}/{name}"
    with fs.open(path, "wb") as handle:
        _write_json_to(handle, document)
    return path


_LIST_CHUNK = 4096  # items of a long top-level list encoded at a time (catalog.json: 200k entries)


def _write_json_to(handle: Any, document: Any) -> None:
    """`json_bytes(document)` and a newline, written; a long list a chunk of items at a time,
    so that its text is never whole in memory: each chunk is a list indented alone, whose items
    sit at the depth and indent they have in the whole list (the same bytes)."""
    if not isinstance(document, list) or len(document) <= _LIST_CHUNK:
        handle.write(json_bytes(document))
        handle.write(b"\n")
        return
    handle.write(b"[\n")
    for start in range(0, len(document), _LIST_CHUNK):
        chunk = json_bytes(document[start : start + _LIST_CHUNK])  # `[\n item,\n item\n]`
        handle.write((b",\n" if start else b"") + chunk[2:-2])
    handle.write(b"\n]\n")


def json_text(document: Any) -> str:
    """`document` as JSON text (`json_bytes`), with a final newline."""
    return json_bytes(document).decode() + "\n"


def json_bytes(document: Any) -> bytes:
    """`document` as UTF-8 JSON: credential-shaped strings redacted, NaN and ±inf as null.

    Encoded by json's C encoder, then indented by msgspec: the same text `json.dumps(indent=1)`
    gives, which the pure-Python encoder writes ~10× slower. The compact text is screened for
    credentials first (`json_holds_credential`, which decodes only the strings a needle or an
    escape lands in); only a document holding one is walked string by string
    (`redact_document`), and only one holding NaN or ±inf (rare) is rebuilt without them. Each
    intermediate text is dropped as soon as the next exists: a document of 100k devices is
    ~80 MB of text."""
    compact = _compact_json(document)
    if json_holds_credential(compact):
        compact = _compact_json(redact_document(document))
    data = compact.encode()  # ASCII (ensure_ascii): the same bytes
    del compact
    return msgspec.json.format(data, indent=1)


def json_list_parts(items: list[Any], per_part: int = 10_000) -> Iterator[bytes]:
    """`json_bytes(items) + b"\\n"` written a part at a time (a list of many entries, a classified
    catalog): the same text, at most `per_part` items encoded at once — the whole of a 155 MB
    catalog encoded, formatted and decoded at once held three copies of it."""
    if not items:
        yield json_bytes(items) + b"\n"
        return
    yield b"[\n"
    for start in range(0, len(items), per_part):
        part = json_bytes(items[start : start + per_part])
        yield (b",\n" if start else b"") + part[2:-2]  # its items, without the "[\n" and "\n]" of its own list
    yield b"\n]\n"


def _compact_json(document: Any) -> str:
    try:
        return json.dumps(document, allow_nan=False)
    except ValueError:  # NaN or ±inf somewhere
        return json.dumps(_finite(document), allow_nan=False)


def _finite(value: Any) -> Any:
    """NaN and ±inf as null: JSON has no such numbers (DuckDB, jq and browsers reject them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def write_table(frame: pd.DataFrame, path: str | Path, run_id: str | None) -> Path:
    """A derived Parquet file (report, replay) tied to the ingest run its rows came from, its
    columns of the types declared for that file whatever the data (`report_schemas.typed`)."""
    table = typed(pa.Table.from_pandas(frame, preserve_index=False), Path(path).name)
    table = _with_run(table, run_id)
    with safe_files.atomic_file(path) as handle:
        _write_parquet(table, handle)
    return Path(path)


# What a spreadsheet takes a cell beginning with for a formula (OWASP's list): a text cell from
# the trace beginning with one is written after an apostrophe, which shows it as text. A cell
# beginning with an apostrophe gets one more, so that the escape can be undone — strip one
# leading apostrophe from every text cell that has one — and `=SUM(1)` and `'=SUM(1)` stay two keys
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def _as_text(value: object) -> object:
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """`frame` as RFC 4180 CSV: lines end in CRLF, so that a field holding any line break —
    a lone CR too, which every reader takes for a line's end — is quoted; text cells that a
    spreadsheet would run as a formula are written as text (`FORMULA_STARTS`). Numbers are left
    as they are."""
    text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]  # booleans are numeric
    if text:
        frame = frame.assign(**{c: frame[c].astype(object).map(_as_text) for c in text})
    with safe_files.atomic_file(path, "w") as handle:
        frame.to_csv(handle, index=False, lineterminator="\r\n")
    return Path(path)


# Parquet schemas read, by file and what `stat` says of it: a report of a fleet asked each rank
# file's schema four times (checking it, its values, reading its kernels), each a footer read
_SCHEMAS: dict[tuple[str, int, int, int, int], pa.Schema] = {}
_SCHEMAS_KEPT = 4096


def _schema(path: str | Path) -> pa.Schema:
    """A Parquet file's schema; a file not replaced or changed since it was last read (the same
    inode, device, size and modification time) is not read again."""
    try:
        info = os.stat(path)
        key = (os.fspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    except (OSError, TypeError):  # not a local file (a URL): read
        key = None
    if key is not None and key in _SCHEMAS:
        return _SCHEMAS[key]
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise AtlasError(path, f"not a Parquet file ({_first_line(exc)})") from None
    if key is not None:
        if len(_SCHEMAS) >= _SCHEMAS_KEPT:
            _SCHEMAS.clear()
        _SCHEMAS[key] = schema
    return schema


def table_run(path: str | Path) -> str | None:
    """The ingest run id in a Parquet file's metadata, or None."""
    run = (_schema(path).metadata or {}).get(RUN_KEY)
    return run.decode("ascii", "replace") if run else None


# --- reading a run ---------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def kernels_path(out_dir: str | Path) -> Path:
    path = Path(out_dir) / KERNELS
    if not path.exists():
        raise AtlasError(out_dir, f"no {KERNELS} here: run `atlas ingest` first")
    return path


def rank_files(out_dir: str | Path, ranks: Sequence[int] | None = None) -> dict[int, list[Path]]:
    """The dataset's files by rank (an empty dict for the single-file layout); `ranks`: only
    those, each looked up in its own `rank=N` folder (as ingest names them) without listing the
    dataset — a report reads 1,000 ranks one at a time."""
    path = kernels_path(out_dir)
    if path.is_file():
        return {}
    if ranks is not None:
        found = {rank: folder_files(path / f"{PARTITION}={rank}") for rank in ranks}
        if all(files is not None for files in found.values()):  # else a folder named otherwise: listed
            return {rank: files for rank, files in found.items() if files}
    files: dict[int, list[Path]] = {}
    for folder in sorted(path.iterdir()):
        match = _RANK_DIR.match(folder.name)
        listed = folder_files(folder) if match else None
        if listed and (ranks is None or int(match.group(1)) in ranks):
            files[int(match.group(1))] = listed
    return files


def folder_files(folder: Path) -> list[Path] | None:
    """A rank folder's Parquet files (temporary and hidden files aside), None when not a folder."""
    if not folder.is_dir():
        return None
    return sorted(f for f in folder.glob("*.parquet") if not f.name.startswith((".", "_")))


MAX_RANKS_NAMED = 20  # the most ranks a refusal of a missing rank lists (a fleet has thousands)


def ranks_named(ranks: list[int]) -> str:
    """The ranks a run has, as a refusal of a rank it has not names them: the first
    MAX_RANKS_NAMED, then how many in all."""
    named = ", ".join(map(str, ranks[:MAX_RANKS_NAMED]))
    more = f", … ({len(ranks):,} in all)" if len(ranks) > MAX_RANKS_NAMED else ""
    return f"ranks: {named or 'none'}{more}"


def output_ranks(out_dir: str | Path) -> list[int]:
    """Ranks present in an ingest output, without reading the tables."""
    path = kernels_path(out_dir)
    if path.is_file():
        if PARTITION not in _schema(path).names:
            return [0]  # a single table made by other means: one rank
        try:
            column = pq.read_table(path, columns=[PARTITION]).column(PARTITION)
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise AtlasError(path, f"cannot read the ranks: {_first_line(exc)}") from None
        return sorted(int(r) for r in pc.unique(column).drop_null().to_pylist())
    return sorted(rank_files(out_dir))


_KERNEL_COLUMN_SET = frozenset(KERNEL_COLUMNS)


def _ordered(table: pa.Table) -> pa.Table:
    """Columns in the declared order (`rank` second, as in the table's schema), extras last;
    without the pandas metadata the writer recorded, which `to_pandas` would trust (a doctored
    one was a TypeError) and which changes nothing in a kernels table's frame."""
    names = table.column_names  # a new list at each access
    present = set(names)
    known = [name for name in KERNEL_COLUMNS if name in present]
    table = table.select(known + [name for name in names if name not in _KERNEL_COLUMN_SET])
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"pandas"}
    return table.replace_schema_metadata(metadata or None)


def load_table(path: Path, **options: Any) -> pa.Table:
    """A Parquet file as an Arrow table; a damaged one is a one-line error naming it."""
    try:
        return pq.read_table(path, **options)
    except (pa.ArrowException, OSError) as exc:
        raise AtlasError(path, f"cannot read: {_first_line(exc)}") from None


def read_parquet(path: str | Path) -> pd.DataFrame:
    """A Parquet file as a DataFrame; a damaged one is a one-line error."""
    return load_table(Path(path)).to_pandas()


def load_kernels(
    out_dir: str | Path, ranks: list[int] | None = None, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """The kernels table of an ingest output as one DataFrame — all ranks, or only `ranks`;
    all columns, or only those of `columns` the files have (and `rank`).

    For one rank or a few; multi-rank analyses go through `kernels_sql` (DuckDB) or one rank
    at a time so that memory does not grow with the number of ranks."""
    table = _kernels_table(out_dir, ranks, columns)
    if table is None:
        return KERNEL_SCHEMA.empty_table().to_pandas()
    table = _ordered(table)
    # each column's Arrow buffers freed once converted, for the next to reuse (`self_destruct`);
    # what reading and converting used beside the frame then handed back: 1M rows left ~500 MB
    # free in Arrow's pool
    frame = table.to_pandas(self_destruct=True, split_blocks=True)
    del table
    release_arrow_memory()
    return frame


def _kernels_table(out_dir: str | Path, ranks: list[int] | None, columns: Sequence[str] | None) -> pa.Table | None:
    """`load_kernels`'s rows as an Arrow table; None where no rank asked for has a file."""
    path = kernels_path(out_dir)

    def present(names: list[str]) -> list[str] | None:
        return None if columns is None else [c for c in names if c in columns or c == PARTITION]

    if path.is_file():
        names = _schema(path).names
        if PARTITION not in names:  # a single table made by other means: one rank
            table = load_table(path, columns=present(names))
            table = table if ranks is None or 0 in ranks else table.slice(0, 0)
            return table.append_column(PARTITION, pa.array([0] * table.num_rows, pa.int32()))
        filters = [(PARTITION, "in", ranks)] if ranks is not None else None
        return load_table(path, filters=filters, columns=present(names))
    files = rank_files(out_dir, ranks)
    wanted = sorted(files) if ranks is None else [r for r in ranks if r in files]
    parts = []
    for rank in wanted:
        for file in files[rank]:
            table = load_table(file, columns=present(_schema(file).names))
            parts.append(table.append_column(PARTITION, pa.array([rank] * table.num_rows, pa.int32())))
    if not parts:
        return None
    try:
        return pa.concat_tables(parts, promote_options="permissive")
    except pa.ArrowException as exc:
        raise AtlasError(path, f"the rank files do not fit together: {_first_line(exc)}") from None


def kernels_sql(out_dir: str | Path) -> str:
    """A DuckDB table expression over the kernels table of an ingest output (either layout)."""
    path = kernels_path(out_dir)
    if path.is_file():
        return f"read_parquet({_quote(path)})"
    pattern = path / f"{PARTITION}=*" / "*.parquet"
    options = "hive_partitioning = true, hive_types = {'rank': INTEGER}, union_by_name = true"
    return f"read_parquet({_quote(pattern)}, {options})"


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


# --- checking a run --------------------------------------------------------------------------------


def _family(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_null(kind):
        return "null"
    return str(kind)


_KERNEL_FAMILIES = {name: _family(kind) for name, kind in KERNEL_COLUMNS.items()}


def _check_kind(path: Path, name: str, found: str, wanted: str) -> None:
    """A column of `found` kind where `wanted` belongs (integers may stand for floats; an
    all-null column fits anything)."""
    if found != wanted and found != "null" and not (wanted == "float" and found == "integer"):
        raise AtlasError(path, f"column {name} holds {found} values where {wanted} ones belong")


def check_kernels_schema(schema: pa.Schema, path: Path, required: Sequence[str] = REQUIRED_COLUMNS) -> None:
    """A kernels table's columns: the `required` ones present, every known one of its declared
    kind (integers may stand for floats; an all-null column fits anything)."""
    names = schema.names  # a new list at each access: read once (a fleet's report checks every rank file)
    present = set(names)
    missing = [name for name in required if name not in present]
    if missing:
        raise AtlasError(
            path,
            f"not a kernels table of this `atlas ingest` (no column {', '.join(missing)}): written by another "
            "version or by other means; run `atlas ingest` again",
        )
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        raise AtlasError(path, f"column {', '.join(twice)} written more than once, which `atlas ingest` never does")
    for name, kind in zip(names, schema.types, strict=True):
        if name in _KERNEL_FAMILIES:
            _check_kind(path, name, _family(kind), _KERNEL_FAMILIES[name])


def load_checked(path: Path, columns: dict[str, str], what: str, by: str = "atlas ingest") -> pa.Table:
    """A table `atlas ingest` writes beside the kernels (host or memory events) read and checked
    as its readers rely on it, every refusal one line: each of `columns` present, of its kind
    ("string", "integer", "float"; a time "time": a float with no null, NaN or value beyond
    2^53 µs; "integer or null": an integer column whose nulls say "unknown"), integer columns
    otherwise without nulls. `by`: the command that writes it."""
    table = load_table(path)
    missing = [name for name in columns if name not in table.column_names]
    if missing:
        raise AtlasError(path, f"not {what} of `{by}` (no column {', '.join(missing)}): run `{by}` again")
    _refuse_credentials(path, table)
    for name, kind in columns.items():
        column = table.column(name)
        expected = {"time": "float", "integer or null": "integer"}.get(kind, kind)
        _check_kind(path, name, _family(column.type), expected)
        if kind in ("integer", "time") and column.null_count:
            raise AtlasError(path, f"{column.null_count} rows without a {name}, which `{by}` never writes")
        if kind == "time":
            values = column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
            bad = int(np.count_nonzero(~(np.abs(values) < MAX_TIME_US)))
            if bad:
                raise AtlasError(path, f"{bad} rows with a {name} that is NaN or beyond 2^53 µs: run `{by}` again")
    return table


@dataclass
class Output:
    """An ingest output that passed `open_output`'s checks."""

    path: Path
    summary: dict[str, Any]
    run_id: str | None  # None: written before runs had ids
    files: dict[int, list[Path]] = field(default_factory=dict)  # rank files ({} for the single-file layout)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def dataset_files(kernels: Path) -> list[Path]:
    """Every entry of a partitioned dataset (temporary files of a running writer aside); what is
    not a rank folder holding regular Parquet files is refused."""
    files = []
    for entry in sorted(kernels.iterdir()):
        if entry.name.startswith("."):
            continue
        if not _RANK_DIR.match(entry.name) or entry.is_symlink() or not entry.is_dir():
            raise AtlasError(entry, f"not part of an `atlas ingest` dataset (expected {PARTITION}=N folders)")
        for file in sorted(entry.iterdir()):
            if file.name.startswith("."):
                continue
            if not file.name.endswith(".parquet") or not _regular(file):
                raise AtlasError(file, "not part of an `atlas ingest` dataset (not a regular Parquet file)")
            files.append(file)
    return files


def _share_devices(summary: dict[str, Any]) -> None:
    """A run of one trace lists its devices twice (the trace's and the run's), equal: held
    once in memory (a trace claiming 100k devices has ~100 MB of them)."""
    traces = summary.get("traces")
    one = traces[0] if isinstance(traces, list) and len(traces) == 1 and isinstance(traces[0], dict) else None
    if one is not None and "devices" in summary and one.get("devices") == summary["devices"]:
        one["devices"] = summary["devices"]


def open_output(out_dir: str | Path, required: Sequence[str] = REQUIRED_COLUMNS) -> Output:
    """An ingest output checked as one run (see the module docstring), its kernels tables having
    the `required` columns; every refusal is one line."""
    root = Path(out_dir)
    if not root.is_dir():
        raise AtlasError(out_dir, "no such ingest output folder")
    kernels = root / KERNELS
    if not kernels.exists() and not kernels.is_symlink():
        raise AtlasError(out_dir, f"not an ingest output (no {KERNELS}); give a trace or run `atlas ingest`")
    if kernels.is_symlink() or not (kernels.is_dir() or _regular(kernels)):
        raise AtlasError(kernels, "not a regular file or folder")
    summary_path = root / SUMMARY
    if not summary_path.exists() and not summary_path.is_symlink() and kernels.is_file():
        _check_file(kernels, None, required)  # a single table made by other means (or the layout of version 0.1)
        return Output(root, {}, None)
    if not summary_path.exists() and not summary_path.is_symlink():
        raise AtlasError(
            out_dir,
            f"unfinished ingest output: no {SUMMARY} (the ingest was interrupted or is still running); "
            "run `atlas ingest` again",
        )
    if not _regular(summary_path):  # a link (out of the folder, to /proc/self/environ) is read by no one
        raise AtlasError(summary_path, "not a regular file (ingest writes one)")
    summary = safe_files.read_json(summary_path)
    check_summary(summary, summary_path)
    if redact_document(summary) is not summary:  # ingest writes it redacted; the report copies its texts
        raise AtlasError(
            summary_path,
            "holds texts shaped like credentials (tokens, keys), which `atlas ingest` never writes: run it again",
        )
    # ingest cuts every text it writes (`events.MAX_TEXT`; metadata far shorter): a longer one was
    # written by other means, and every reader (each MCP call) would read and copy it again
    longest = max(map(len, strings_in(summary)), default=0)
    if longest > MAX_TEXT:
        raise AtlasError(summary_path, _too_long("a text", longest))
    _share_devices(summary)
    run_id = summary.get("run_id")
    if run_id is not None and required is REQUIRED_COLUMNS:
        required = tuple(c for c in KERNEL_COLUMNS if c != PARTITION)  # ingest writes all: one missing is doctoring

    def check(file: Path) -> None:
        _check_file(file, run_id, required)
        _check_values(file)

    if kernels.is_file():
        check(kernels)
        release_arrow_memory()  # the batches the check read
        return Output(root, summary, run_id)
    files = dataset_files(kernels)
    # on up to CHECK_THREADS CPUs: reading a file's columns and Arrow's kernels run without the GIL
    # (a fleet's 1,000 tiny rank files took ~8 ms each); the first file in order that fails is refused
    for _ in side_by_side(check, files, min(usable_cpus(), CHECK_THREADS)):
        pass
    release_arrow_memory()  # the batches the checks read
    if run_id is not None:
        traces = summary.get("traces", [])
        _files_as_listed(root, files, {t["kernels_file"] for t in traces if "kernels_file" in t}, KERNELS, "")
        # the host events files are those summary.json lists (`host_events_file`; a run written before
        # it listed them is read by its folder as before): one listed but missing had read as a trace
        # without host events — a critical path of the GPU timeline alone, 611 times shorter — and a
        # copy beside them was read too. Their run is checked where they are read.
        listed = {t["host_events_file"] for t in traces if isinstance(t.get("host_events_file"), str)}
        if listed:
            host_files = _dataset_files_if_any(root / HOST_EVENTS)
            _files_as_listed(root, host_files, listed, HOST_EVENTS, " as a host events file")
    return Output(root, summary, run_id, rank_files(root))


def _files_as_listed(root: Path, files: list[Path], listed: set[str], dataset: str, role: str) -> None:
    """A dataset's files are exactly those summary.json lists (relative paths): one listed and
    missing, or one there and not listed (its rank's time would be counted again), is refused."""
    present = {file.relative_to(root).as_posix() for file in files}
    for name in sorted(listed - present):
        raise AtlasError(  # an absolute name stays itself (`root / name`)
            root / name, f"listed in {SUMMARY}{role} but not among the files of {dataset}: run `atlas ingest` again"
        )
    for name in sorted(present - listed):
        raise AtlasError(root / name, f"not listed in {SUMMARY} (not written by this ingest run): remove it")


def _dataset_files_if_any(folder: Path) -> list[Path]:
    """`dataset_files` of a dataset folder that may be absent (none); one that is not a folder is refused."""
    if folder.is_dir() and not folder.is_symlink():
        return dataset_files(folder)
    if folder.exists() or folder.is_symlink():
        raise AtlasError(folder, "not a regular folder (ingest writes one)")
    return []


LABELLED = ("name", "kind", "category", "op_mapping")  # never null as `atlas ingest` writes them


# efficiency columns ingest writes within bounds (`ingest/efficiency.py`): the report copies them
SHARES = (
    *("theoretical_occupancy_pct", "est_occupancy_pct", "wave_efficiency_pct"),
    *("blocks_per_sm", "warps_per_sm", "max_blocks_per_sm", "waves"),
)


# rows read at a time by `_check_values`: its memory is a batch's, not the file's
CHECK_BATCH_ROWS = 131_072
# rank files checked at once where the CPUs allow: the check holds one batch a file it reads
CHECK_THREADS = 4


def _batches(path: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """`columns` of a Parquet file, CHECK_BATCH_ROWS rows at a time; a damaged file is a one-line error."""
    try:
        yield from pq.ParquetFile(path).iter_batches(batch_size=CHECK_BATCH_ROWS, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise AtlasError(path, f"cannot read: {_first_line(exc)}") from None


def _float_values(column: pa.Array) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _check_values(path: Path) -> None:
    """The values every reader relies on, as `atlas ingest` writes them (`sanity.usable_rows`):
    each activity named and labelled, with a start and a non-negative duration below 2^53 µs, its recorded
    calls nested no deeper than MAX_DEPTH, no text shaped like a credential. Read batch by batch
    (a 1M-row table held whole kept ~300 MB through the report that opened it); every count is
    the whole file's, and the first check that fails, in the order below, is the one refused."""
    schema = _schema(path)
    # integers written as int64 where the column is narrower (device, group_size…): beyond its range
    # numpy's cast to it raises (or wraps)
    narrow = [
        name
        for name in schema.names
        if name in KERNEL_COLUMNS
        and pa.types.is_integer(KERNEL_COLUMNS[name])
        and pa.types.is_integer(schema.field(name).type)
        and KERNEL_COLUMNS[name].bit_width < schema.field(name).type.bit_width
    ]
    exact = [name for name in FLOAT_EXACT if name in schema.names and pa.types.is_integer(schema.field(name).type)]
    shares = [name for name in SHARES if name in schema.names and pa.types.is_floating(schema.field(name).type)]
    wanted = [
        name
        for name in (*LABELLED, "ts_us", "dur_us", *RECORDED_CALL, *narrow, *exact, *shares)
        if name in schema.names
    ]
    texts = _text_columns(schema)  # read in the same pass, for the credential screen (and their lengths)
    blobs = _bytes_columns(schema)  # ingest writes none; their lengths are checked as the texts
    bad: dict[str, int] = {}  # per refusal below, the rows (or distinct texts) it counts
    bounds: dict[str, list[int]] = {}  # per narrow column, its least and greatest value
    deep_texts: dict[str, set[str]] = {name: set() for name in RECORDED_CALL}
    screen = _CredentialScreen(texts, blobs)

    def count(key: str, n: int) -> None:
        if n:
            bad[key] = bad.get(key, 0) + int(n)

    for batch in _batches(path, list(dict.fromkeys([*wanted, *texts, *blobs]))):
        for name in LABELLED:  # every activity named and labelled
            if name in wanted:
                count(name, batch.column(name).null_count)
        for name in ("ts_us", "dur_us"):
            if name in wanted:
                values = _float_values(batch.column(name))
                count(
                    name,
                    np.count_nonzero(~(np.abs(values) < MAX_TIME_US) | ((values < 0) if name == "dur_us" else False)),
                )
        for name in shares:  # percentages within 0–100 %, counts of waves and blocks finite and not negative
            values = _float_values(batch.column(name))
            high = 100.0 + 1e-9 if name.endswith("_pct") else np.inf
            count(name, np.count_nonzero(~np.isnan(values) & ~(np.isfinite(values) & (values >= 0) & (values <= high))))
        for name in narrow:
            low_high = pc.min_max(batch.column(name)).as_py()
            if low_high["min"] is not None:
                seen = bounds.setdefault(name, [low_high["min"], low_high["max"]])
                seen[:] = [min(seen[0], low_high["min"]), max(seen[1], low_high["max"])]
        for name in exact:  # ids that travel through float columns (`sanity.usable_rows` nulls those beyond)
            column = batch.column(name)
            count(name, pc.sum(pc.or_(pc.greater_equal(column, 2**53), pc.less_equal(column, -(2**53)))).as_py() or 0)
        for name in RECORDED_CALL:
            if name in wanted:
                distinct = pc.unique(batch.column(name).cast(pa.string())).drop_null()
                # a text past MAX_TEXT is refused by the screen below, unparsed (json.loads of 100 MB)
                distinct = distinct.filter(pc.less_equal(pc.utf8_length(distinct), MAX_TEXT))
                # only a text with more than MAX_DEPTH brackets can nest that deep (`too_deep`'s own
                # first test, here in Arrow: 200k distinct shapes are not 200k Python strings)
                brackets = pc.add(pc.count_substring(distinct, "["), pc.count_substring(distinct, "{"))
                deep_texts[name].update(
                    t for t in distinct.filter(pc.greater(brackets, MAX_DEPTH)).to_pylist() if too_deep(t)
                )
        screen.screen(batch)

    def refuse(count: int, what: str) -> AtlasError:
        return AtlasError(path, f"{count} {what}, which `atlas ingest` never writes: run `atlas ingest` again")

    for name in LABELLED:
        if bad.get(name):
            raise refuse(bad[name], f"rows without a {name}")
    for name, what in (("ts_us", "start that is NaN or beyond 2^53 µs"), ("dur_us", "negative, NaN or huge duration")):
        if bad.get(name):
            raise refuse(bad[name], f"rows with a {what}")
    for name in shares:
        if bad.get(name):
            limit = "not within 0–100" if name.endswith("_pct") else "negative or infinite"
            raise refuse(bad[name], f"rows whose {name} is {limit}")
    for name in narrow:
        kind = KERNEL_COLUMNS[name]
        low, high = -(1 << (kind.bit_width - 1)), (1 << (kind.bit_width - 1)) - 1
        if name in bounds and (bounds[name][0] < low or bounds[name][1] > high):
            raise AtlasError(path, f"column {name} holds values beyond {kind} ({bounds[name][0]}…{bounds[name][1]})")
    for name in exact:
        if bad.get(name):
            raise refuse(bad[name], f"rows with a `{name}` beyond 2^53")
    for name in RECORDED_CALL:
        if deep_texts[name]:
            raise refuse(len(deep_texts[name]), f"`{name}` values nested deeper than {MAX_DEPTH} levels")
    screen.refuse(path)


def _value_type(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(_value_type(kind)) or pa.types.is_large_string(_value_type(kind))


def _is_bytes(kind: pa.DataType) -> bool:
    return pa.types.is_binary(_value_type(kind)) or pa.types.is_large_binary(_value_type(kind))


def _text_columns(schema: pa.Schema) -> list[str]:
    return [field.name for field in schema if _is_text(field.type)]


def _bytes_columns(schema: pa.Schema) -> list[str]:
    return [field.name for field in schema if _is_bytes(field.type)]


def _too_long(what: str, length: int) -> str:
    return (
        f"{what} of {length:,} characters, longer than any `atlas ingest` writes ({MAX_TEXT:,}): "
        "run `atlas ingest` again"
    )


def _distinct_values(column: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """A column's values, as its dictionaries where it has them (the distinct texts, not every row)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if pa.types.is_dictionary(column.type):
        return pa.chunked_array([c.dictionary for c in chunks], column.type.value_type)
    return pa.chunked_array(chunks, column.type)


class _CredentialScreen:
    """`atlas ingest` redacts every credential-shaped text it writes; a file holding one was
    written by other means, and every reader would copy it into reports, tables and answers.
    The distinct texts of `columns` are screened as the table's batches come, each text once.

    Nor does ingest write a text (or bytes) longer than `events.MAX_TEXT` characters: one
    longer is refused before anything else reads it — a kernel name of 100 MB sent the report
    to 7.5 GB, `diff` to 1.7 GB — measured in Arrow on the dictionaries (or the values), never
    turned into Python strings."""

    def __init__(self, columns: list[str], binary: Sequence[str] = ()) -> None:
        self._seen: dict[str, set[str]] = {name: set() for name in columns}
        self._binary = list(binary)
        self.found = 0
        self.long: dict[str, int] = {}  # column → its longest value, where past MAX_TEXT

    def _measure(self, name: str, values: pa.ChunkedArray) -> bool:
        """Whether `values` of column `name` hold one longer than MAX_TEXT (recorded)."""
        lengths = pc.utf8_length(values) if _is_text(values.type) else pc.binary_length(values)
        longest = pc.max(lengths).as_py() or 0
        if longest > MAX_TEXT:
            self.long[name] = max(longest, self.long.get(name, 0))
        return longest > MAX_TEXT

    def screen(self, batch: pa.Table | pa.RecordBatch) -> None:
        for name in self._binary:
            if name not in self.long:
                self._measure(name, _distinct_values(batch.column(name)))
        for name, seen in self._seen.items():
            if name in self.long:  # refused already: its texts are not read as Python strings
                continue
            texts = _distinct_values(batch.column(name))
            if self._measure(name, texts):
                continue
            new = [text for text in pc.unique(texts).drop_null().to_pylist() if text not in seen]
            seen.update(new)
            self.found += credential_count(new)

    def refuse(self, path: Path) -> None:
        for name, length in self.long.items():
            raise AtlasError(path, _too_long(f"column {name} holds a value", length))
        if self.found:
            raise AtlasError(
                path,
                f"{self.found} texts shaped like credentials (tokens, keys), which `atlas ingest` never writes "
                "(it redacts them): run `atlas ingest` again",
            )


def _refuse_credentials(path: Path, table: pa.Table) -> None:
    """A table read whole (with at least its text columns) refused if it holds a credential-shaped
    text (`_CredentialScreen`)."""
    screen = _CredentialScreen(_text_columns(table.schema), _bytes_columns(table.schema))
    screen.screen(table)
    screen.refuse(path)


def refuse_other_run(path: str | Path) -> None:
    """Refuse, in one line, a file of another ingest run than the folder's."""
    raise AtlasError(
        path,
        f"not from the ingest run that wrote {SUMMARY} (an interrupted or concurrent ingest?): "
        "run `atlas ingest` again",
    )


def _check_file(path: Path, run_id: str | None, required: Sequence[str]) -> None:
    schema = _schema(path)
    check_kernels_schema(schema, path, required)
    if run_id is None:
        return
    found = (schema.metadata or {}).get(RUN_KEY)
    if found != run_id.encode():
        refuse_other_run(path)


def read_report(out_dir: str | Path, run_id: str | None) -> dict[str, Any] | None:
    """report.json of a run folder when `atlas report` wrote it for the ingest run `run_id`;
    None when there is none (or it was written for another run, or is not a regular file)."""
    path = Path(out_dir) / REPORT
    if not path.is_file() or path.is_symlink():
        return None
    report = safe_files.read_json(path)
    if not isinstance(report, dict) or report.get("run_id") != run_id:
        return None
    _check_report(report, path)
    return report


_FINDING_FIELDS = ("kind", "what", "evidence")


def _check_report(report: dict[str, Any], path: Path) -> None:
    """The parts of report.json that the dashboard and the MCP server read have the types
    `atlas report` writes (a doctored field was a notebook's traceback or an internal error)."""

    def wrong(where: str, what: str) -> AtlasError:
        return AtlasError(path, f"not a report of `atlas report`: {where} is not {what} (run `atlas report` again)")

    for key in ("gpu_time_us", "costed_time_us", "no_shape_time_us", "no_model_time_us"):
        value = report.get(key)
        if value is not None and not (is_number(value) and math.isfinite(value)):
            raise wrong(key, "a number")
    for key in ("trust", "critical_path", "efficiency"):
        if report.get(key) is not None and not isinstance(report[key], dict):
            raise wrong(key, "an object")
    findings = report.get("findings", [])
    if not isinstance(findings, list):
        raise wrong("findings", "a list")
    for i, finding in enumerate(findings):
        if not isinstance(finding, dict):
            raise wrong(f"findings[{i}]", "an object")
        if not (is_number(finding.get("saving_us")) and math.isfinite(finding["saving_us"])):
            raise wrong(f"findings[{i}].saving_us", "a number")
        missing = [key for key in _FINDING_FIELDS if key not in finding]
        if missing:
            raise wrong(f"findings[{i}]", f"a finding (no {', '.join(missing)})")


def is_number(value: Any) -> bool:
    """A JSON number: an int or float, not a bool (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_derived(path: Path, output: Output) -> None:
    """A file made from the kernels (replay.parquet) by atlas belongs to the same ingest run (one
    without a run id was written by other means, or by an earlier version, and is taken as is)."""
    if not _regular(path):
        raise AtlasError(path, "not a regular file")
    found = table_run(path)
    if output.run_id is not None and found is not None and found != output.run_id:
        raise AtlasError(
            path,
            "made from another ingest run's kernels than the ones here: delete it, or re-run what wrote it",
        )
