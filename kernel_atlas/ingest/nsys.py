"""Nsight Systems SQLite exports (`nsys export --type sqlite`) → the trace columns of `columns.py`.

The same (TraceInfo, TraceColumns) pair the Kineto JSON reader makes, so linking, captures,
classification and everything after run unchanged. Whole-table SELECTs into numpy arrays,
string ids resolved through `StringIds` by vectorised take:

* GPU activities: CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET (ns → µs, `deviceId` → device);
* launches: CUPTI_ACTIVITY_KIND_RUNTIME (correlation ids are per process: one process is read at
  a time, and each process with GPU work is a rank, see `gpu_processes`);
* CPU ops: NVTX push/pop ranges as PyTorch's `emit_nvtx` names them
  (`aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]]`), nesting on the launching thread
  as Kineto's CPU ops do; `nn.Module: X` ranges are module frames; other ranges annotations;
* GPU: TARGET_INFO_GPU as Kineto's `deviceProperties`; host syncs:
  CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, summarised per sync type (`sync_facts`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
import numpy as np
import pandas as pd

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import CUT_TAIL
from kernel_atlas.core.texts import WAS, counted, filled
from kernel_atlas.ingest.columns import (
    ANNOTATION,
    CPU_OP,
    PYTHON,
    RUNTIME,
    GpuAnnotations,
    GpuTable,
    HostTable,
    TraceColumns,
    categorical,
)
from kernel_atlas.ingest.events import CUT_MARK, LONG_STRINGS, MAX_TEXT, cut_long
from kernel_atlas.ingest.frames import MODULE_PREFIX
from kernel_atlas.ingest.reader import TraceInfo, device_entries, regular_file
from kernel_atlas.store.limits import MAX_TIME_US

T = TypeVar("T")

NSYS_SUFFIXES = (".sqlite", ".nsys-rep")
UNNAMED_KERNEL = "<unnamed kernel>"  # a kernel whose name id is not in StringIds
UNNAMED_CALL = "<unnamed runtime call>"  # likewise a runtime call
KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_NODES = "CUDA_GRAPH_NODE_EVENTS"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NODE_CREATION = "graph node creation"  # the host range a graph node's creation becomes
RUNTIME_TABLE, NVTX, SYNC = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
# a whole graph replay (nsys's default `--cuda-graph-trace=graph`) is one GRAPH_TRACE range, and its
# kernels are not in the export: the range is a GPU activity of its own, so that busy and idle time see it
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE)
WHOLE_GRAPH = "<CUDA graph {} replay>"  # a whole graph replay's name (`<CUDA graph replay>` without a graphId)
# any name WHOLE_GRAPH gives (with its graphId or without): a whole-graph replay's row
WHOLE_GRAPH_NAME = re.compile(re.escape(WHOLE_GRAPH).replace(re.escape("{} "), r"(?:-?\d+ )?") + r"\Z")
_PID_SHIFT = 24  # globalTid / globalPid = (… << 48) | (pid << 24) | tid (nsys's documented layout)
# a pid whose filter bounds leave int64 comes of damage (a REAL 1e300 globalPid reads as 2^63 − 1): no process
_PID_LIMIT = (1 << (63 - _PID_SHIFT)) - 1
# starts from 2^52 ns (52 days) on are absolute (epoch) ns, not nsys's session-relative ones: rebased (`time_base`)
_ABSOLUTE_NS = 1 << 52
_NVTX_RANGES = (59, 60)  # push/pop and start/end ranges (33 categories, 34 marks)
# `aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]], input_op_ids = …` (torch.autograd.profiler.emit_nvtx)
_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*(?:::[\w.]+)*$")  # `aten::mm`, `record_param_comms`, `detach_`
_API_VERSION = re.compile(r"_v\d{4,}$")  # cudaLaunchKernel_v7000 → cudaLaunchKernel
_COPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    # nsys's own (ENUM_CUDA_MEMCPY_OPER, beyond CUPTI's): unified-memory migrations, `--cuda-um-*`
    11: "Unified HtoD",
    12: "Unified DtoH",
    13: "Unified DtoD",
}
_MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
}
_SYNC_TYPES = {1: "event", 2: "stream wait event", 3: "stream", 4: "context"}
_ACTIVITY = ("deviceId", "streamId", "correlationId", "globalPid")
_RESOURCES = ("registersPerThread", "staticSharedMemory", "dynamicSharedMemory")
_GRID_BLOCK = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
# Columns each table feeds (missing ones leave what they feed empty, counted in one warning).
_WANTED: dict[str, tuple[str, ...]] = {
    KERNEL: (*_ACTIVITY, "demangledName", "shortName", *_GRID_BLOCK, *_RESOURCES, "graphId", "graphNodeId"),
    MEMCPY: (*_ACTIVITY, "bytes", "copyKind", "srcKind", "dstKind", "graphNodeId"),
    MEMSET: (*_ACTIVITY, "bytes", "memKind", "graphNodeId"),
    GRAPH_TRACE: (*_ACTIVITY, "graphId"),
    RUNTIME_TABLE: ("globalTid", "correlationId", "nameId"),
    SYNC: ("globalPid", "syncType"),
}


@dataclass
class NsysRead:
    """What one read of an export gives besides the columns: its processes and host syncs."""

    processes: int = 0
    syncs: dict[str, dict[str, float]] = field(default_factory=dict)
    # per GPU activity: the host row of its graph node's creation (-1 none), `graph_nodes.py`
    node_creation: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


def is_nsys(path: str | Path) -> bool:
    return str(path).lower().endswith(NSYS_SUFFIXES)


# `nsys export`'s time bound: 10 minutes, and 1 s more per MB of report — generous, meant for a stuck
# `nsys` (a damaged report), which had held ingest forever: there was no bound at all
EXPORT_SECONDS = 600.0
EXPORT_SECONDS_PER_MB = 1.0


@contextmanager
def exported(path: Path) -> Iterator[Path]:
    """The SQLite export of `path`: itself, or for a `.nsys-rep` a temporary export by `nsys`."""
    if not str(path).lower().endswith(".nsys-rep"):
        yield path
        return
    nsys = shutil.which("nsys")
    if nsys is None:
        raise AtlasError(
            path, "an Nsight Systems report: export it first with `nsys export --type sqlite REPORT.nsys-rep`"
        )
    folder = tempfile.mkdtemp(prefix="atlas-nsys-")
    out = Path(folder) / (path.stem + ".sqlite")
    try:
        code, said = _run_export([nsys, "export", "--type", "sqlite", "--output", str(out), str(path)], path)
        if code != 0 or not out.is_file():
            last = said.strip().splitlines()
            raise AtlasError(path, f"`nsys export` failed: {last[-1] if last else f'exit {code}'}")
        yield out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_export(command: list[str], path: Path) -> tuple[int, str]:
    """`nsys export`'s exit code and what it said (stderr, else stdout), within its time bound.
    It runs in a session of its own, so that a stop (the bound, Ctrl-C) ends it and whatever it
    started; one line past the bound."""
    try:
        size_mb = path.stat().st_size / 2**20
    except OSError:  # no such report: `nsys` says so
        size_mb = 0.0
    limit = EXPORT_SECONDS + EXPORT_SECONDS_PER_MB * size_mb
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True
    )
    try:
        out, err = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _stop(child)
        raise AtlasError(
            path, f"`nsys export` was still running after {limit:,.0f} s: stopped (try `nsys export --type sqlite`)"
        ) from None
    except BaseException:
        _stop(child)
        raise
    return child.returncode, err or out


def _stop(child: subprocess.Popen) -> None:
    """`child` and its session's processes killed, `child` reaped."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):  # gone already; no process groups (Windows)
        child.kill()
    child.wait()
    for pipe in (child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()


def _connect(path: Path, shown: Path) -> sqlite3.Connection:
    """`path` opened read-only; errors name `shown`: the file the user gave (a `.nsys-rep` for its
    temporary export), worded as the JSON reader's (`reader._Source`)."""
    exported_by_nsys = path != shown
    regular_file(path, shown)  # a FIFO, or a link to /dev/zero: it had been "no such file"
    try:
        db = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        if exported_by_nsys:  # the temporary export's name said nothing: it is deleted
            raise AtlasError(shown, f"`nsys export` wrote no readable SQLite file ({exc})") from None
        raise AtlasError(shown, f"not a readable SQLite file ({exc})") from None
    return db


class _Export:
    """An open export: its tables' columns, and SELECTs into numpy arrays."""

    def __init__(self, path: Path, db: sqlite3.Connection):
        self.path, self.db = path, db
        self.missing: list[str] = []
        self.rows = 0
        self.not_utf8 = 0  # texts whose bytes are not UTF-8 (`_lenient`)
        self.cut = 0  # texts longer than MAX_TEXT, cut (`_cut_sql`)
        self.unnamed = 0  # kernels whose name id StringIds does not hold
        # values of a wrong type (text) or beyond int64 in the integer columns read, per column: dropped, counted
        self.bad: dict[str, int] = {}
        self.suspect = False  # activities or calls without usable times: `refuse_if_damaged` looks
        # runtime calls and NVTX ranges whose times could not be read as recorded, per what was
        # done with them (`_host_times`): each said in one warning
        self.host_times: dict[tuple[str, str], int] = {}
        self.base = 0  # ns subtracted before µs (`time_base`): 0 for session-relative exports
        # the process read as rank 0: GPU activities with no usable globalPid (the column missing,
        # null or text) are read as its own, counted in `unattributed` (`_gpu_part`) — said where
        # another process may own them (`read_nsys`)
        self.first: int | None = None
        self.several = False
        self.unattributed = 0
        # views too: a table re-created as a view by a tool that post-processes exports
        listed = self._query("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')")
        names = [r[0] for r in listed]
        self.tables = {r[0] for r in listed if r[1] == "table"}
        self.columns = {n: {r[1] for r in self._query(f"PRAGMA table_info({_q(n)})")} for n in names}
        if "StringIds" not in self.columns or not any(t in self.columns for t in GPU_TABLES):
            raise AtlasError(path, "not an Nsight Systems export (no StringIds or CUPTI_ACTIVITY_KIND_KERNEL table)")

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self._read(lambda: self.db.execute(sql, args).fetchall())

    def _read(self, work: Callable[[], T]) -> T:
        """`work`'s reading of the export, done again from the start where a text turns out not
        to be UTF-8; a file SQLite cannot read is one line."""
        try:
            return work()
        except sqlite3.OperationalError as exc:
            if self.db.text_factory is str and "decode to UTF-8" in str(exc):  # one bad string: not the whole file
                self.db.text_factory = self._lenient  # from here on (slower: a Python call per string)
                return self._read(work)
            raise AtlasError(self.path, f"cannot read the export ({exc})") from None
        except sqlite3.Error as exc:  # a truncated or damaged file, a lock held by a writer
            raise AtlasError(self.path, f"cannot read the export ({exc})") from None

    def _lenient(self, raw: bytes) -> str:
        """Text that is not UTF-8, its undecodable bytes replaced by U+FFFD (counted)."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.not_utf8 += 1
            return raw.decode("utf-8", "replace")

    def text(self, value: object) -> str | None:
        """A text column's value as text (SQLite does not type its columns): a blob decoded, its
        bytes that are not UTF-8 replaced by U+FFFD and counted as `_lenient` counts a text's."""
        if isinstance(value, bytes):
            return self._lenient(_whole_chars(value))
        return _as_text(value)

    def refuse_if_damaged(self) -> None:
        """One line where SQLite finds the tables read damaged: a file whose record pages are
        overwritten reads its rows as NULLs (every activity without a time, the trace "empty")
        rather than failing. Asked only where activities or calls came without usable times
        (`suspect`): the check walks every page of the tables (0.2 s for a 76 MB export, a tenth
        of reading one rank) and healthy exports show no such rows."""
        read = (*GPU_TABLES, RUNTIME_TABLE, NVTX, SYNC, GRAPH_NODES, "StringIds", "TARGET_INFO_GPU")
        tables = [t for t in read if t in self.tables]
        if sqlite3.sqlite_version_info < (3, 33, 0):  # no table argument before 3.33: the whole file
            checks = ["PRAGMA quick_check"]
        else:
            checks = [f"PRAGMA quick_check({_q(t)})" for t in tables]
        for check in checks:
            found = [line for row in self._query(check) for line in str(row[0]).splitlines()]
            problems = [line.strip() for line in found if line.strip() and not line.startswith("***")]
            if problems and problems != ["ok"]:
                more = f"; {len(problems) - 1:,} more" if len(problems) > 1 else ""
                raise AtlasError(self.path, f"cannot read the export (damaged: {problems[0]}{more})")

    def calls_elsewhere(self, pid: int | None) -> bool:
        """Whether the runtime table holds calls of a process other than `pid` (None: of two
        processes or more): a GPU activity without a process id then may be theirs, and its
        correlation id may name their launch (correlation ids are per process). Stops at the first
        such row; asked only where activities without a process id were read."""
        if "globalTid" not in self.columns.get(RUNTIME_TABLE, ()):
            return False
        known = "typeof(\"globalTid\") IN ('integer', 'real')"
        if pid is None:
            distinct = f'SELECT DISTINCT "globalTid" >> {_PID_SHIFT} FROM "{RUNTIME_TABLE}" WHERE {known} LIMIT 2'
            return self._query(f"SELECT count(*) FROM ({distinct})")[0][0] > 1
        other = 'NOT ("globalTid" >= ? AND "globalTid" < ?)'
        bounds = (pid << _PID_SHIFT, (pid + 1) << _PID_SHIFT)
        return bool(self._query(f'SELECT 1 FROM "{RUNTIME_TABLE}" WHERE {known} AND {other} LIMIT 1', bounds))

    def time_base(self) -> int:
        """The ns subtracted from every time before it becomes µs: 0 for nsys's session-relative
        times; for absolute (epoch) ns, ≥ 2^52, the export's earliest such start to the whole
        second — 1.7e18 ns / 1000 is a double spaced 0.25 µs apart, while the ns relative to it
        stay exact. The same for every rank of the export. The first 64 rows of each table say
        whether times are absolute (all of them, in every table: one absolute row among
        session-relative ones is damage, and leaves the others' times as they were); the
        minimum is read only then."""
        timed = (*GPU_TABLES, RUNTIME_TABLE, NVTX, SYNC, GRAPH_NODES)
        tables = [t for t in timed if "start" in self.columns.get(t, ())]
        integer = "typeof(start) = 'integer'"
        first_rows = "SELECT min(CASE WHEN {integer} THEN start END) FROM (SELECT start FROM {table} LIMIT 64)"
        probes = [self._query(first_rows.format(integer=integer, table=_q(t)))[0][0] for t in tables]
        probed = [int(v) for v in probes if v is not None]
        if not probed or min(probed) < _ABSOLUTE_NS:
            return 0
        lowest = [
            self._query(f"SELECT min(start) FROM {_q(t)} WHERE {integer} AND start >= {_ABSOLUTE_NS}")[0][0]
            for t in tables
        ]
        first = min(int(v) for v in lowest if v is not None)
        return first - first % 1_000_000_000

    def usable(self, table: str) -> bool:
        cols = self.columns.get(table)
        if cols is None:
            return False
        if not {"start", "end"} <= cols:
            self.missing.append(f"{table}.start/end")
            return False
        return True

    def select(self, table: str, where: str = "", args: tuple = ()) -> dict[str, Any]:
        """start, end and the wanted columns present (others noted missing), each as nullable
        integers (`_int_array`: what every reader of them takes), read SELECT_ROWS rows at a
        time: the rows as Python tuples of Python ints took ~450 MB for 1M kernels, and the
        allocator kept that memory through every later stage."""
        have = self.columns[table]
        wanted = [c for c in _WANTED.get(table, ()) if c in have]
        names = ["start", "end", *wanted]
        columns = [_ns_sql(_q(c)) if c in {"start", "end"} else _q(c) for c in names]
        sql = f'SELECT {", ".join(columns)} FROM "{table}" {where}'
        parts, bad = self._column_parts(sql, args, len(names))
        count = sum(len(part[0]) for part in parts)
        self.rows += count
        for c, k in zip(names, bad, strict=True):  # times are counted as untimed rows, process ids said apart
            if k and c not in {"start", "end", "globalPid"}:
                self.bad[c] = self.bad.get(c, 0) + k
        if not count:  # an empty table feeds nothing: its columns are not missed
            return {c: np.empty(0, dtype=object) for c in names}
        self.missing += [f"{table}.{c}" for c in _WANTED.get(table, ()) if c not in have and not _optional(table, c)]
        return {c: _joined([part[i] for part in parts]) for i, c in enumerate(names)}

    def _column_parts(self, sql: str, args: tuple, width: int) -> tuple[list[list[pd.arrays.IntegerArray]], list[int]]:
        """The query's columns as nullable integers, one list of them per SELECT_ROWS rows, and
        per column the values that were not integers of int64 (text, beyond int64), now null."""

        def pieces() -> tuple[list[list[pd.arrays.IntegerArray]], list[int]]:
            cursor = self.db.execute(sql, args)
            parts, bad = [], [0] * width
            while rows := cursor.fetchmany(SELECT_ROWS):
                data = np.array(rows, dtype=object).reshape(len(rows), width)
                columns = [_counted_int_array(data[:, i]) for i in range(width)]
                parts.append([column for column, _ in columns])
                bad = [b + k for b, (_, k) in zip(bad, columns, strict=True)]
            return parts, bad

        return self._read(pieces)

    def strings(self) -> _Strings:
        rows = self._query(f"SELECT id, {_cut_sql('value')} FROM StringIds")
        texts = [self.text(r[1]) for r in rows]
        # counted here, not in SQLite: its length() counts no character past a NUL
        self.cut += sum(isinstance(t, str) and len(t) > MAX_TEXT for t in texts)
        ids = _ints(np.array([r[0] for r in rows], dtype=object), len(rows))
        order = np.argsort(ids, kind="stable")
        return _Strings(ids[order], np.array([cut_long(t) for t in texts], dtype=object)[order])


def _ns_sql(column: str) -> str:
    """A time column in whole ns: a REAL one (`26000.5`) rounded to the nearest ns in SQLite.
    nsys writes integers; a fraction had made the time unusable, which dropped a runtime call
    unsaid and left its kernel "launch not in the trace" though the call was there."""
    return f"CASE WHEN typeof({column}) = 'real' THEN round({column}) ELSE {column} END"


# What `events.cut_long` reads of a text — MAX_TEXT characters and the CUT_TAIL beyond, where a
# credential the cut would end shows whole (`redact_cut`), and one more, which tells that the text
# went on —, in UTF-8 bytes (at most 4 a character): texts are measured and cut in SQLite by their
# bytes, as blobs. SQLite's length() and substr() on a text stop at its first NUL: "aten::mm\0" and
# 200 MB more measured 8 characters and reached Python whole (2.5 GB, no long-strings warning).
_CUT_BYTES = 4 * (MAX_TEXT - len(CUT_MARK) + CUT_TAIL + 1)


def _cut_sql(column: str) -> str:
    """`column` (a text or a blob) as a blob of at most _CUT_BYTES + 1 bytes — one more than a kept
    text can have: `_whole_chars` knows a cut one by its length —, so that a 200 MB string never
    reaches Python; a number as it is. Every byte counts, a NUL's too: a NUL stays in the text, as
    the JSON reader keeps a `\\u0000`. The value is read once (measured, then cut, a 200 MB text
    was held twice at once: 0.4 GB); typeof() of a column reads no value."""
    return f"CASE WHEN typeof({column}) IN ('integer', 'real') THEN {column} ELSE {_cut_blob_sql(column)} END"


def _cut_blob_sql(column: str) -> str:
    """`column` cut as `_cut_sql` cuts it, a number too (as its text): for an expression, whose
    typeof() would read the value once more."""
    return f"substr(CAST({column} AS BLOB), 1, {_CUT_BYTES + 1})"


def _whole_chars(raw: bytes) -> bytes:
    """A value `_cut_sql` cut without the UTF-8 sequence its last byte split (a character of the
    cut is no undecodable byte of the text); any other value as it is. What is dropped lies past
    the MAX_TEXT characters kept: _CUT_BYTES bytes hold more characters than that."""
    if len(raw) <= _CUT_BYTES:
        return raw
    start = len(raw) - 1  # the last sequence's lead byte: back over its continuation bytes (10xxxxxx)
    while start > len(raw) - 4 and raw[start] & 0xC0 == 0x80:
        start -= 1
    lead = raw[start]
    size = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return raw[:start] if start + size > len(raw) else raw


def _chars(raw: bytes) -> int:
    """Characters of a (cut) blob as `_Export.text` decodes it."""
    return len(_whole_chars(raw).decode("utf-8", "replace"))


@dataclass
class _Strings:
    """StringIds, sorted by id (ids need not be dense)."""

    ids: np.ndarray
    values: np.ndarray


def _as_text(value: object) -> str | None:
    """A text column's value as text (SQLite does not type its columns): a blob decoded, lossily."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _optional(table: str, column: str) -> bool:
    """Columns whose absence leaves nothing empty: a kernel has a demangled or a short name, and
    rows without a process id are read as the first process's (`_process_filter`, said apart)."""
    return (table, column) in {(KERNEL, "shortName"), (KERNEL, "demangledName")} or column == "globalPid"


def _q(name: str) -> str:
    """A table or column name quoted for SQLite (a quote in it doubled)."""
    return '"' + name.replace('"', '""') + '"'


def _ints(values: np.ndarray | None, n: int, fill: int = -1) -> np.ndarray:
    """Integer column values as int64, `fill` where NULL or not an integer (SQLite does not type its columns)."""
    if values is None:
        return np.full(n, fill, dtype=np.int64)
    known = _int_array(values)
    return known.to_numpy(dtype=np.int64, na_value=fill)


SELECT_ROWS = 1 << 16  # rows an activity table is read at a time (`_Export.select`)


def _joined(parts: list[pd.arrays.IntegerArray]) -> pd.arrays.IntegerArray:
    """Nullable integer columns, one after the other."""
    if len(parts) == 1:
        return parts[0]
    data = np.concatenate([part.to_numpy(np.int64, na_value=0) for part in parts])
    return pd.arrays.IntegerArray(data, np.concatenate([part.isna() for part in parts]))


def _int_array(values: np.ndarray) -> pd.arrays.IntegerArray:
    return _counted_int_array(values)[0]


def _counted_int_array(values: np.ndarray) -> tuple[pd.arrays.IntegerArray, int]:
    """Integer column values as nullable int64, and how many were given but are no int64 (text,
    a fraction, beyond int64): null."""
    try:  # exact for any int64 (no float round trip): timestamps may be absolute ns
        return pd.array(values, dtype="Int64"), 0
    except (TypeError, ValueError, OverflowError):
        given = pd.Series(values, dtype=object)
        numbers = pd.to_numeric(given, errors="coerce")
        whole = numbers.where(np.isfinite(numbers) & (numbers == np.round(numbers)) & (numbers.abs() < 2.0**63))
        known = pd.array(whole.to_numpy(dtype=np.float64, na_value=np.nan), dtype="Int64")
        return known, int((given.notna().to_numpy() & known.isna()).sum())


def _times(start: np.ndarray, end: np.ndarray, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Start (µs, from `base` ns: `_Export.time_base`) and duration (µs) from ns columns, NaN
    where either is missing."""
    a, b = _int_array(start), _int_array(end)
    ok = ~(a.isna() | b.isna())
    ts = np.full(len(a), np.nan)
    dur = np.full(len(a), np.nan)
    first, last = a[ok].to_numpy(dtype=np.int64), b[ok].to_numpy(dtype=np.int64)
    ts[ok] = _micro(first, base)
    dur[ok] = np.where(np.isnan(ts[ok]), np.nan, (last - first) / 1000.0)  # in integers first: exact to the ns
    return ts, dur


def _bounds(start: np.ndarray, end: np.ndarray, base: int = 0, summed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (µs from `base` ns), each NaN where missing alone. `summed`: where both are
    known the end is the start plus the duration taken in integers (`_times`), as runtime calls'
    ends have been (an NVTX range's is its own end's µs)."""
    known = [_int_array(x) for x in (start, end)]
    ts, last = (np.where(a.isna(), np.nan, _micro(a.to_numpy(np.int64, na_value=base), base)) for a in known)
    if summed:
        first, dur = _times(start, end, base)
        last = np.where(np.isnan(dur), last, first + dur)
    return ts, last


def _host_times(export: _Export, what: str, ts: np.ndarray, end: np.ndarray, call: bool) -> tuple[np.ndarray, ...]:
    """Host ranges' start and end (µs, NaN where unusable) as read, the rows kept, and each case of
    times that cannot be used as recorded counted in `export.host_times`, said in one warning each:

    * an end before the start: an instant at the start, as the JSON reader makes a negative
      `dur` (`events._host_columns`) — an NVTX range had been dropped unsaid (its kernels took
      the op around it as launcher), a runtime call had given launch_dur_us −0.1 µs;
    * a runtime call (`call`) with one time: an instant at it — its correlation id still links
      the kernels it launched, which had been said "launch not in the trace" though it was there;
    * otherwise, no usable start or end: left out (an NVTX range with one time encloses nothing)."""
    no_start, no_end = np.isnan(ts), np.isnan(end)
    backwards = end < ts  # NaN compares False
    late = no_start & ~no_end & call  # placed at its end
    early = ~no_start & no_end & call  # at its start
    kept = ~(no_start | no_end) | late | early
    cases = ((LEFT_OUT, ~kept), (AT_END, late), (NO_END, early), (BACKWARDS, backwards))
    for why, rows in cases:
        if count := int(rows.sum()):
            export.host_times[what, why] = export.host_times.get((what, why), 0) + count
    ts = np.where(late, end, ts)
    end = np.where(early | backwards, ts, end)
    return ts[kept], end[kept], kept


# what `_host_times` did with host ranges whose times it could not use as recorded
LEFT_OUT = "without a usable start or end: left out"
AT_END = "without a usable start: given no duration, at the end (a launch's launch_ts_us is its call's end)"
NO_END = "without a usable end: given no duration, at the start"
BACKWARDS = "with an end before the start: given no duration, at the start"
CROSSED = (
    "started on one thread and ended on another (nvtxRangeStart/End): read as the starting thread's, as "
    "nsys draws it; launches on the ending thread do not see it"
)


def _micro(ns: np.ndarray, base: int) -> np.ndarray:
    """int64 ns as µs from `base` ns, rebased in integers (exact); NaN where ns − base leaves int64."""
    if not base:
        return ns / 1000.0
    low = ns < np.iinfo(np.int64).min + base
    return np.where(low, np.nan, (np.where(low, base, ns) - base) / 1000.0)


def _text_of(ids: np.ndarray, strings: _Strings) -> np.ndarray:
    """StringIds values of integer ids (unknown ids: None), by binary search and take."""
    pos = np.searchsorted(strings.ids, ids)
    inside = pos < len(strings.ids)
    hit = inside.copy()
    hit[inside] = strings.ids[pos[inside]] == ids[inside]
    out = np.full(len(ids), None, dtype=object)
    out[hit] = strings.values[pos[hit]]
    return out


def _as_categorical(values: np.ndarray) -> pd.Categorical:
    return pd.Categorical(pd.Series(values, dtype=object))


def _triples(x: np.ndarray, y: np.ndarray, z: np.ndarray, present: np.ndarray) -> pd.Categorical:
    """`[x, y, z]` texts (Kineto's grid/block form), formatted once per distinct triple."""
    n = len(x)
    if not present.any():
        return _as_categorical(np.full(n, None, dtype=object))
    stacked = np.stack([x, y, z], axis=1)
    distinct, codes = np.unique(stacked[present], axis=0, return_inverse=True)
    texts = [f"[{a}, {b}, {c}]" for a, b, c in distinct.tolist()]
    full = np.full(n, -1, dtype=np.int64)
    full[present] = codes.reshape(-1)
    return categorical(full, texts)


def _pid(global_id: np.ndarray) -> np.ndarray:
    return global_id >> _PID_SHIFT


def gpu_processes(path: Path) -> list[int]:
    """Processes (globalPid >> 24) with GPU activities, ranked by their lowest device id, then pid."""
    with exported(path) as sqlite_path, closing(_connect(sqlite_path, path)) as db:
        export = _Export(path, db)
        return export_processes(export)


MAX_PROCESSES = 128  # processes of one export read as ranks (a node runs a few; each rank costs ~0.15 s)


def export_processes(export: _Export) -> list[int]:
    """The processes read as ranks, in rank order (lowest device id, then pid): at most
    MAX_PROCESSES, those with the most GPU activities (a 100 KB export can claim thousands)."""
    return _processes(export)[0]


def _processes(export: _Export) -> tuple[list[int], int, int]:
    """`export_processes`, and how many processes with GPU work and GPU activities are left out."""
    lowest: dict[int, int] = {}
    activities: dict[int, int] = {}
    for table in GPU_TABLES:
        cols = export.columns.get(table, set())
        if "globalPid" not in cols or "deviceId" not in cols:
            continue
        for pid, device, count in export._query(  # untyped columns: a device id that is not an integer is none
            f'SELECT "globalPid" >> {_PID_SHIFT}, min(CASE WHEN typeof("deviceId") = \'integer\' THEN "deviceId" END), '
            f"count(*) FROM \"{table}\" WHERE typeof(\"globalPid\") IN ('integer', 'real') GROUP BY 1"
        ):
            if pid is not None and -_PID_LIMIT <= pid < _PID_LIMIT:  # a filter's bounds, (pid + 1) << 24, fit int64
                lowest[int(pid)] = min(lowest.get(int(pid), 1 << 62), int(device if device is not None else 1 << 62))
                activities[int(pid)] = activities.get(int(pid), 0) + int(count)
    by_activities = sorted(activities, key=lambda p: (-activities[p], p))
    kept, left = by_activities[:MAX_PROCESSES], by_activities[MAX_PROCESSES:]
    return sorted(kept, key=lambda p: (lowest[p], p)), len(left), sum(activities[p] for p in left)


def _process_filter(export: _Export, table: str, column: str, pid: int | None) -> tuple[str, tuple]:
    """The WHERE clause of one process's rows. Rows whose process is not known (no `column`, or
    a null or text value) are the first process's (rank 0), and no other's: every rank read them
    all (a kernels table without globalPid counted each kernel once per rank) or none did (a
    null globalPid dropped every kernel, unsaid)."""
    if pid is None:
        return "", ()
    first = pid == export.first
    if column not in export.columns[table]:
        return ("", ()) if first else ("WHERE 0", ())
    inside = f'"{column}" >= ? AND "{column}" < ?'
    bounds = (pid << _PID_SHIFT, (pid + 1) << _PID_SHIFT)
    if not first:
        return f"WHERE {inside}", bounds
    unknown = f"typeof(\"{column}\") NOT IN ('integer', 'real')"
    return f"WHERE ({inside}) OR {unknown}", bounds


def _gpu_part(export: _Export, table: str, pid: int | None, strings: _Strings) -> dict[str, Any] | None:
    if not export.usable(table):
        return None
    where, args = _process_filter(export, table, "globalPid", pid)
    raw = export.select(table, where, args)
    n = len(raw["start"])
    if pid is None or pid == export.first:  # rows of no known process are read here (`_process_filter`)
        pids = raw.get("globalPid")
        export.unattributed += n if pids is None else int(pd.isna(pids).sum())
    ts, dur = _times(raw["start"], raw["end"], export.base)  # NULL times: dropped and counted by `sanity.usable_rows`
    export.suspect |= bool(np.isnan(dur).any())
    part: dict[str, Any] = {
        "table": table,
        "ts": ts,
        "dur": dur,
        "device": _ints(raw.get("deviceId"), n),
        "stream": _ints(raw.get("streamId"), n),
        "correlation": _ints(raw.get("correlationId"), n),
        "bytes": _ints(raw.get("bytes"), n),
        "graph_node_id": _ints(raw.get("graphNodeId"), n),
        "graph_id": _ints(raw.get("graphId"), n),
        "registers": _ints(raw.get("registersPerThread"), n),
        "shared_memory": _shared_memory(raw, n),
    }
    if table == KERNEL:
        demangled = _ints(raw.get("demangledName"), n)
        names = _text_of(demangled, strings)
        names[demangled < 0] = None  # NULL (or no column)
        # no demangled name (no id, or one StringIds does not hold): the short name, where it resolves
        unresolved = np.flatnonzero(pd.isna(names))
        names[unresolved] = _text_of(_ints(raw.get("shortName"), n)[unresolved], strings)
        nameless = np.flatnonzero(pd.isna(names))
        if len(nameless):  # a name id StringIds does not hold: the kernel kept, named as what is known
            names[nameless] = UNNAMED_KERNEL
            export.unnamed += len(nameless)
        part["name"] = names
        grid = [_ints(raw.get(f"grid{a}"), n) for a in "XYZ"]
        block = [_ints(raw.get(f"block{a}"), n) for a in "XYZ"]
        part["grid"] = (grid, (grid[0] >= 0) & (grid[1] >= 0) & (grid[2] >= 0))
        part["block"] = (block, (block[0] >= 0) & (block[1] >= 0) & (block[2] >= 0))
        part["kind"] = "kernel"
    elif table == MEMCPY:
        part["name"] = _memcpy_names(
            _ints(raw.get("copyKind"), n), _ints(raw.get("srcKind"), n), _ints(raw.get("dstKind"), n)
        )
        part["kind"] = "memcpy"
    elif table == MEMSET:
        part["name"] = _memset_names(_ints(raw.get("memKind"), n))
        part["kind"] = "memset"
    else:  # a whole graph replay: the GPU ran the graph's kernels (and copies) from start to end
        part["name"] = _graph_names(part["graph_id"])
        part["kind"] = "kernel"
    return part


def _graph_names(graph: np.ndarray) -> np.ndarray:
    """`<CUDA graph 3 replay>` per whole graph replay, formatted once per distinct graph id."""
    distinct, codes = np.unique(graph, return_inverse=True)
    texts = np.array([WHOLE_GRAPH.format(g) if g >= 0 else WHOLE_GRAPH.replace("{} ", "") for g in distinct.tolist()])
    return texts.astype(object)[codes.reshape(-1)] if len(graph) else np.empty(0, dtype=object)


def _whole_graphs_apart(parts: list[dict[str, Any]]) -> int:
    """In place: the whole graph replays (GRAPH_TRACE, the last part) left out where the export
    holds the replay's own activities too (a GPU activity of the same correlation id: the
    graph's kernels, which a node-level trace records), so that no GPU time is counted twice;
    how many replays are kept."""
    if not parts or parts[-1]["table"] != GRAPH_TRACE:
        return 0
    graphs = parts[-1]
    others = np.concatenate([p["correlation"] for p in parts[:-1]]) if len(parts) > 1 else np.empty(0, np.int64)
    keep = ~((graphs["correlation"] >= 0) & np.isin(graphs["correlation"], others))
    if not keep.all():
        parts[-1] = {k: v[keep] if isinstance(v, np.ndarray) else v for k, v in graphs.items()}
    return int(keep.sum())


def _shared_memory(raw: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Static + dynamic shared memory per block (bytes); -1 when either is not recorded."""
    static, dynamic = _ints(raw.get("staticSharedMemory"), n), _ints(raw.get("dynamicSharedMemory"), n)
    return np.where((static >= 0) & (dynamic >= 0), static + dynamic, -1)


def _memcpy_names(copy: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Kineto's names: `Memcpy HtoD (Pinned -> Device)`, formatted once per distinct triple."""
    keys = np.stack([copy, src, dst], axis=1) if len(copy) else np.empty((0, 3), np.int64)
    distinct, codes = np.unique(keys, axis=0, return_inverse=True)
    texts = np.array(
        [
            f"Memcpy {_COPY_KINDS.get(c, 'Unknown')} ({_MEM_KINDS.get(s, 'Unknown')} -> {_MEM_KINDS.get(d, 'Unknown')})"
            for c, s, d in distinct.tolist()
        ],
        dtype=object,
    )
    return texts[codes.reshape(-1)] if len(copy) else np.empty(0, dtype=object)


def _memset_names(kind: np.ndarray) -> np.ndarray:
    distinct, codes = np.unique(kind, return_inverse=True)
    texts = np.array([f"Memset ({_MEM_KINDS.get(k, 'Unknown')})" for k in distinct.tolist()], dtype=object)
    return texts[codes.reshape(-1)] if len(kind) else np.empty(0, dtype=object)


def _gpu_table(parts: list[dict[str, Any]]) -> GpuTable:
    ts = np.concatenate([p["ts"] for p in parts]) if parts else np.empty(0)
    order = np.argsort(ts, kind="stable")
    n = len(ts)

    def joined(key: str) -> np.ndarray:
        return np.concatenate([p[key] for p in parts])[order] if parts else np.empty(0, np.int64)

    def triple(key: str) -> pd.Categorical:
        dims = [
            np.concatenate([p[key][0][i] if key in p else np.full(len(p["ts"]), -1) for p in parts]) for i in range(3)
        ]
        present = np.concatenate([p[key][1] if key in p else np.zeros(len(p["ts"]), bool) for p in parts])
        return _triples(*(d[order] for d in dims), present[order])

    names = np.concatenate([p["name"] for p in parts])[order] if parts else np.empty(0, dtype=object)
    kinds = np.concatenate([filled(len(p["ts"]), p["kind"]) for p in parts])[order] if parts else names
    none = _as_categorical(np.full(n, None, dtype=object))
    minus = np.full(n, -1, dtype=np.int64)
    return GpuTable(
        name=_as_categorical(names),
        kind=_as_categorical(kinds),
        ts=joined("ts").astype(np.float64),
        dur=joined("dur").astype(np.float64),
        device=joined("device"),
        stream=joined("stream"),
        correlation=joined("correlation"),
        external_id=minus,
        grid=triple("grid") if n else none,
        block=triple("block") if n else none,
        bytes=joined("bytes"),
        collective=none,
        in_nelems=minus,
        out_nelems=minus,
        group_size=minus,
        msg_dtype=none,
        process_group=none,
        process_group_desc=none,
        process_group_ranks=none,
        seq=minus,
        registers=joined("registers"),
        shared_memory=joined("shared_memory"),
        graph_id=joined("graph_id"),
        graph_node_id=joined("graph_node_id"),
    )


@dataclass
class _HostPart:
    family: np.ndarray
    names: np.ndarray  # object: the range's name
    thread: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    correlation: np.ndarray
    dims: np.ndarray  # object: canonical input dims JSON or None
    # emit_nvtx's `op_id` of an op range (-1 none): taken as the op starts, it orders two ranges
    # of one start and length as their External ids do in a Kineto trace (`link._enclosing_first`)
    external_id: np.ndarray
    # emit_nvtx's `seq = N` of an op range: autograd's sequence number, Kineto's `Sequence number` (-1 none)
    seq_nr: np.ndarray


def _runtime_part(export: _Export, pid: int | None, strings: _Strings) -> _HostPart | None:
    if not export.usable(RUNTIME_TABLE):
        return None
    where, args = _process_filter(export, RUNTIME_TABLE, "globalTid", pid)
    raw = export.select(RUNTIME_TABLE, where, args)
    n = len(raw["start"])
    api = _text_of(_ints(raw.get("nameId"), n), strings)
    codes, distinct = pd.factorize(pd.Series(api, dtype=object), use_na_sentinel=True)
    # a name id StringIds does not hold: the call kept, named as what is known (it was "", and the
    # kernels it launched had a call stack beginning " <- aten::mm")
    clean = np.array([_API_VERSION.sub("", s) for s in distinct.tolist()] + [UNNAMED_CALL], dtype=object)
    ts, end = _bounds(raw["start"], raw["end"], export.base, summed=True)
    export.suspect |= bool(np.isnan(ts).any() or np.isnan(end).any())
    ts, end, timed = _host_times(export, "runtime call", ts, end, call=True)
    return _HostPart(
        family=np.full(int(timed.sum()), RUNTIME, dtype=np.int8),
        names=clean[codes][timed],
        thread=_ints(raw.get("globalTid"), n, 0)[timed],
        ts=ts,
        end=end,
        correlation=_ints(raw.get("correlationId"), n)[timed],
        dims=np.full(int(timed.sum()), None, dtype=object),
        external_id=np.full(int(timed.sum()), -1, dtype=np.int64),
        seq_nr=np.full(int(timed.sum()), -1, dtype=np.int64),
    )


# emit_nvtx texts split in SQLite (C, not a Python loop per range): the name before the first ", ",
# whether the text is tagged with `seq =` / `op_id =` (the number after `, seq = `, -1 for a tagged
# text without one, NULL untagged: one column, not two — 0.13 s fewer on 600k ranges), what
# follows `, sizes = ` up to `, input_op_ids = `, and the number after `, op_id = `. Texts are cut
# (`_cut_sql`) first, in a materialised CTE: each reference to `t` would otherwise re-read the whole
# text (a 50 MB one: 0.8 GB and seconds), and it is faster on ordinary exports too (1M ranges: 2.1
# against 2.5 s). SQLite before 3.35 (Python builds of older distributions) has no MATERIALIZED:
# the same query, without the hint. `t` is a blob and so are the needles, so that instr() and
# substr() count bytes alike and see past a NUL (on a text, substr() stops at it: `aten::mm\0x, seq
# = 3` gave no `seq`); each part comes to Python a blob, decoded there (`_texts`). The texts of
# more than MAX_TEXT bytes come whole (cut) too: whether they are longer than MAX_TEXT characters
# is counted in Python. A cut text's sizes not followed by `, input_op_ids = ` are cut: not recorded.
_MATERIALIZED = "MATERIALIZED" if sqlite3.sqlite_version_info >= (3, 35, 0) else ""
_NVTX_SQL = """
WITH ranges AS {materialized} (
    SELECT {start} AS start, {end} AS "end", n.globalTid, {cut} AS t, {crossed} AS crossed
    FROM NVTX_EVENTS n {join} WHERE n.eventType IN (59, 60) {domain} {where}
), split AS (
    SELECT start, "end", globalTid, t, crossed, instr(t, CAST(', seq = ' AS BLOB)) AS seq_at,
        instr(t, CAST(', op_id = ' AS BLOB)) > 0 OR instr(t, CAST(', seq = ' AS BLOB)) > 0 AS tagged,
        CASE WHEN instr(t, CAST(', sizes = ' AS BLOB)) > 0
             THEN substr(t, instr(t, CAST(', sizes = ' AS BLOB)) + 10) END AS tail
    FROM ranges WHERE t IS NOT NULL
)
SELECT start, "end", globalTid,
    CASE WHEN tagged AND instr(t, CAST(', ' AS BLOB)) > 0 THEN substr(t, 1, instr(t, CAST(', ' AS BLOB)) - 1)
         ELSE t END,
    CASE WHEN seq_at > 0 AND CAST(substr(t, seq_at + 8, 1) AS TEXT) GLOB '[0-9]'
         THEN CAST(substr(t, seq_at + 8) AS INTEGER)
         WHEN tagged THEN -1 END,
    CASE WHEN instr(tail, CAST(', input_op_ids = ' AS BLOB)) > 0
         THEN substr(tail, 1, instr(tail, CAST(', input_op_ids = ' AS BLOB)) - 1)
         WHEN length(t) <= {cut_bytes} THEN tail END,
    CASE WHEN length(t) > {longest} THEN t END,
    CASE WHEN instr(t, CAST(', op_id = ' AS BLOB)) > 0
         THEN CAST(substr(t, instr(t, CAST(', op_id = ' AS BLOB)) + 10) AS INTEGER) END,
    crossed
FROM split
"""


def _nvtx_part(export: _Export, pid: int | None) -> _HostPart | None:
    if not export.usable(NVTX):
        return None
    have = export.columns[NVTX]
    export.missing += [f"{NVTX}.{c}" for c in ("globalTid", "eventType") if c not in have]
    export.missing += [] if {"text", "textId"} & have else [f"{NVTX}.text/textId"]
    if "globalTid" not in have or "eventType" not in have or not {"text", "textId"} & have:
        return None
    text = {"text": "n.text", "textId": "s.value"}
    text_sql = (
        "COALESCE(n.text, s.value)" if {"text", "textId"} <= have else text["text" if "text" in have else "textId"]
    )
    join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in have else ""
    where, args = _process_filter(export, NVTX, "globalTid", pid)
    where = where.replace("WHERE", "AND").replace('"globalTid"', "n.globalTid")
    # the default domain only: PyTorch's and the program's ranges; libraries' own (NCCL's `ncclGroupEnd`)
    # are invisible to torch.profiler and would take the launch from the op that called them
    domain = "AND COALESCE(n.domainId, 0) = 0" if "domainId" in have else ""
    cut = _cut_blob_sql(text_sql)
    # a start/end range (eventType 60) may end on another thread (`endGlobalTid`): nsys draws it on
    # the thread that started it, and so is it read here — which launches it encloses on the other
    # thread is not known — counted, said (an end thread that is no thread id — text, a real, ≤ 0 —
    # says nothing: not counted)
    crossed = (
        "(n.eventType = 60 AND typeof(n.endGlobalTid) = 'integer' AND n.endGlobalTid > 0 "
        "AND n.endGlobalTid != n.globalTid)"
        if "endGlobalTid" in have
        else "0"
    )
    sql = _NVTX_SQL.format(
        crossed=crossed,
        materialized=_MATERIALIZED,
        start=_ns_sql("n.start"),
        end=_ns_sql('n."end"'),
        cut=cut,
        cut_bytes=_CUT_BYTES,
        longest=MAX_TEXT,
        join=join,
        domain=domain,
        where=where,
    )
    rows = export._query(sql, args)
    export.rows += len(rows)
    data = np.array(rows, dtype=object) if rows else np.empty((0, 9), dtype=object)
    # ranges without a usable start or end left out, those ending before they start instants: counted
    ts, end, kept = _host_times(export, "NVTX range", *_bounds(data[:, 0], data[:, 1], export.base), call=False)
    data = data[kept]
    n = len(data)
    if count := sum(bool(c) for c in data[:, 8]):
        export.host_times["NVTX range", CROSSED] = export.host_times.get(("NVTX range", CROSSED), 0) + count
    export.cut += sum(_chars(t) > MAX_TEXT for t in data[:, 6] if t is not None)  # texts of over MAX_TEXT bytes
    seq = _ints(data[:, 4], n, -2)  # the `seq = ` number; -1 tagged without one; -2 untagged
    family, names, dims = _nvtx_ranges(export, data[:, 3], seq >= -1, data[:, 5])
    return _HostPart(
        family=family,
        names=names,
        thread=_ints(data[:, 2], n, 0),
        ts=ts,
        end=end,
        correlation=np.full(n, -1, dtype=np.int64),
        dims=dims,
        external_id=_ints(data[:, 7], n),
        seq_nr=np.where((family == CPU_OP) & (seq >= 0), seq, -1),  # CPU ops' only, as the JSON reader's
    )


def _graph_nodes(export: _Export, pid: int | None) -> tuple[_HostPart | None, np.ndarray, np.ndarray, np.ndarray]:
    """Graph node creations (CUDA_GRAPH_NODE_EVENTS rows without `originalGraphNodeId`) as
    zero-length host ranges on their thread; every node id with the id of the node it was cloned
    from at instantiation, followed to the created one (node ids, root ids); the created ids."""
    none = np.empty(0, np.int64)
    cols = export.columns.get(GRAPH_NODES, set())
    if not {"start", "globalTid", "graphNodeId"} <= cols:
        return None, none, none, none
    original = '"originalGraphNodeId"' if "originalGraphNodeId" in cols else "NULL"
    where, args = _process_filter(export, GRAPH_NODES, "globalTid", pid)
    rows = export._query(f'SELECT start, globalTid, graphNodeId, {original} FROM "{GRAPH_NODES}" {where}', args)
    export.rows += len(rows)
    if not rows:
        return None, none, none, none
    data = np.array(rows, dtype=object)
    start, thread, node, parent = (_ints(data[:, i], len(rows)) for i in range(4))
    order = np.argsort(node, kind="stable")
    sorted_node, sorted_parent = node[order], parent[order]
    root = node.copy()
    for _ in range(8):  # clones of clones (graph updates): a few levels at most
        pos = np.minimum(np.searchsorted(sorted_node, root), len(node) - 1)
        up = sorted_parent[pos]
        moved = (sorted_node[pos] == root) & (up >= 0)
        if not moved.any():
            break
        root = np.where(moved, up, root)
    created = (parent < 0) & (node >= 0) & (start >= 0)
    k = int(created.sum())
    part = _HostPart(
        family=np.full(k, ANNOTATION, dtype=np.int8),
        names=filled(k, NODE_CREATION),
        thread=thread[created],
        ts=_micro(start[created], export.base),
        end=_micro(start[created], export.base),
        correlation=np.full(k, -1, dtype=np.int64),
        dims=np.full(k, None, dtype=object),
        external_id=np.full(k, -1, dtype=np.int64),
        seq_nr=np.full(k, -1, dtype=np.int64),
    )
    return part, node, root, node[created]


def _node_creation_rows(
    graph_node: np.ndarray, nodes: np.ndarray, roots: np.ndarray, created: np.ndarray, offset: int
) -> np.ndarray:
    """Host row (offset + position among the creations) of each activity's created node; -1 none."""
    out = np.full(len(graph_node), -1, dtype=np.int64)
    if not len(nodes) or not len(created):
        return out
    order = np.argsort(nodes, kind="stable")
    pos = np.minimum(np.searchsorted(nodes[order], graph_node), len(nodes) - 1)
    known = (graph_node >= 0) & (nodes[order][pos] == graph_node)
    root = np.where(known, roots[order][pos], -1)
    made = np.argsort(created, kind="stable")
    at = np.minimum(np.searchsorted(created[made], root), len(created) - 1)
    hit = (root >= 0) & (created[made][at] == root)
    out[hit] = offset + made[at[hit]]
    return out


def _nvtx_ranges(export: _Export, names: np.ndarray, tagged: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Family and input dims of each range: tagged ranges named like an op (`aten::mm`,
    `record_param_comms`) are CPU ops, `nn.Module: X` module frames, the rest annotations;
    each distinct name and sizes text looked at once (a blob that is not UTF-8 counted per range)."""
    codes, distinct_values = pd.factorize(pd.Series(names, dtype=object))
    distinct = _texts(export, distinct_values.tolist(), codes)
    names = np.array([*distinct, None], dtype=object)[codes]
    op_like = np.array([bool(_OP_NAME.match(x)) and not x.startswith("ProfilerStep#") for x in distinct], dtype=bool)
    module = np.array([x.startswith(MODULE_PREFIX) for x in distinct], dtype=bool)
    is_op = tagged & op_like[codes] if len(codes) else tagged
    family = np.full(len(names), ANNOTATION, dtype=np.int8)
    family[is_op] = CPU_OP
    if len(codes):
        family[module[codes]] = PYTHON
    dims = np.full(len(names), None, dtype=object)
    has = is_op & pd.notna(pd.Series(sizes, dtype=object)).to_numpy()
    if has.any():
        size_codes, size_texts = pd.factorize(pd.Series(sizes[has], dtype=object))
        texts = _texts(export, size_texts.tolist(), size_codes)
        dims[has] = np.array([_canonical(t) for t in texts], dtype=object)[size_codes]
    return family, names, dims


def _texts(export: _Export, distinct: list[Any], codes: np.ndarray) -> list[Any]:
    """Distinct values of a text column (`codes` its rows) as texts, cut as `cut_long` cuts; a
    blob that is not UTF-8 counted once per row that holds it (`_Export.not_utf8`)."""
    counted = export.not_utf8
    texts = [cut_long(export.text(x)) for x in distinct]
    if export.not_utf8 > counted:  # counted once per distinct value: per row instead
        bad = np.array([isinstance(x, bytes) and not _is_utf8(_whole_chars(x)) for x in distinct], dtype=bool)
        export.not_utf8 = counted + int(bad[codes[codes >= 0]].sum())
    return texts


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _canonical(sizes: str) -> str | None:
    """`[[2, 3], [3, 4]]` as the JSON reader writes input dims (compact JSON)."""
    try:
        return msgspec.json.encode(msgspec.json.decode(sizes)).decode()
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # not JSON, or nested beyond reason
        return None


def _host_table(parts: list[_HostPart], ignored: dict[str, int]) -> HostTable:
    """The host ranges of `parts` as one table. As the JSON reader's (`events._host_columns`), a
    range whose start is not within 2^53 µs is left out and one whose end is not gets no
    duration (an instant), each counted in `ignored` (an NVTX end at int64's largest ns made a
    run that every reader refused)."""
    ts_all = np.concatenate([p.ts for p in parts]) if parts else np.empty(0)
    timed = np.abs(ts_all) < MAX_TIME_US
    if not timed.all():
        ignored["host ranges without a ts"] = ignored.get("host ranges without a ts", 0) + int((~timed).sum())

    def cat(key: str, empty: np.dtype) -> np.ndarray:
        return np.concatenate([getattr(p, key) for p in parts])[timed] if parts else np.empty(0, dtype=empty)

    ts, end = ts_all[timed], cat("end", np.dtype(np.float64))
    beyond = ~(np.abs(end) < MAX_TIME_US)
    if beyond.any():
        ignored["dur"] = ignored.get("dur", 0) + int(beyond.sum())
        end = np.where(beyond, ts, end)
    names = cat("names", np.dtype(object))
    name_codes, distinct = pd.factorize(pd.Series(names, dtype=object).fillna(""))
    dims = cat("dims", np.dtype(object))
    dim_codes, dim_texts = pd.factorize(pd.Series(dims, dtype=object), use_na_sentinel=True)
    n = len(names)
    minus = np.full(n, -1, dtype=np.int64)
    return HostTable(
        family=cat("family", np.dtype(np.int8)),
        name_code=name_codes.astype(np.int64),
        names=[str(s) for s in distinct.tolist()],
        thread=_thread_numbers(cat("thread", np.dtype(np.int64)), ts),
        ts=ts,
        end=end,
        correlation=cat("correlation", np.dtype(np.int64)),
        external_id=cat("external_id", np.dtype(np.int64)),
        shape=dim_codes.astype(np.int64),
        shapes=[(t, None, None, None) for t in dim_texts.tolist()],
        params=minus.copy(),
        param_sets=[],
        launch_kernel=minus.copy(),
        seq_nr=cat("seq_nr", np.dtype(np.int64)),
        fwd_tid=minus.copy(),
        launch_kernels=[],
    )


def _thread_numbers(thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Each host range's thread (nsys's globalTid) as the JSON reader numbers threads
    (`events._numbering`): the index of the thread in order of first appearance — of its first
    range's start, ties by globalTid —, so that the kernels table's `launch_thread` is 0, 1, … and
    joins host_events' `thread` (the globalTid had been cut to int32 there: -1845489518)."""
    if not len(thread):
        return thread
    codes, distinct = pd.factorize(thread)  # hashed: no sort of the rows
    first = np.full(len(distinct), np.inf)
    np.minimum.at(first, codes, ts)
    number = np.empty(len(distinct), dtype=np.int64)
    number[np.lexsort((distinct, first))] = np.arange(len(distinct))
    return number[codes]


def _device_properties(export: _Export, warnings: list[str]) -> list[dict[str, Any]]:
    """TARGET_INFO_GPU rows in Kineto's `deviceProperties` keys, with the JSON reader's checks
    (`reader.device_entries`); texts cut in SQLite first, so a huge name never reaches Python."""
    cols = export.columns.get("TARGET_INFO_GPU")
    if not cols or "name" not in cols:
        return []
    keys = {"id": "id", "name": "name", "smCount": "numSms", "totalMemory": "totalGlobalMem"}
    keys |= {"computeMajor": "computeMajor", "computeMinor": "computeMinor", "threadsPerWarp": "warpSize"}
    present = [k for k in keys if k in cols]
    rows = export._query(f'SELECT {", ".join(_cut_sql(_q(k)) for k in present)} FROM "TARGET_INFO_GPU"')
    untyped = [[export.text(v) if isinstance(v, bytes) else v for v in row] for row in rows]  # a blob as text
    props = [{keys[k]: v for k, v in zip(present, row, strict=True) if v is not None} for row in untyped]
    props = [prop for prop in props if prop]  # a row of NULLs names no GPU (it was `{}` in summary.json's gpus)
    seen: dict[Any, dict[str, Any]] = {}
    for prop in props:  # one row per (vm, GPU): keep each GPU id once
        seen.setdefault(prop.get("id"), prop)
    return device_entries(list(seen.values()), warnings)


def sync_facts(export: _Export, pid: int | None) -> dict[str, dict[str, float]]:
    """Host syncs (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) per type: count and total µs."""
    if not export.usable(SYNC):
        return {}
    where, args = _process_filter(export, SYNC, "globalPid", pid)
    raw = export.select(SYNC, where, args)
    n = len(raw["start"])
    if not n:
        return {}
    dur = np.nan_to_num(_times(raw["start"], raw["end"], export.base)[1])
    kind = _ints(raw.get("syncType"), n, 0)
    frame = pd.DataFrame({"kind": [_SYNC_TYPES.get(k, "unknown") for k in kind.tolist()], "dur": dur})
    grouped = frame.groupby("kind")["dur"].agg(["count", "sum"])
    return {str(k): {"count": int(r["count"]), "total_us": float(r["sum"])} for k, r in grouped.iterrows()}


def read_nsys(path: str | Path, process: int | None = None) -> tuple[TraceInfo, TraceColumns, NsysRead]:
    """One process of an export (`process`: its pid; default: the first of `gpu_processes`) as
    the JSON reader's (TraceInfo, TraceColumns). Raises `AtlasError` on unusable input."""
    path = Path(path)
    with exported(path) as sqlite_path, closing(_connect(sqlite_path, path)) as db:
        export = _Export(path, db)
        processes, left_out, left_activities = _processes(export)
        info = TraceInfo(path=path, runtime="cuda", size_bytes=sqlite_path.stat().st_size)
        if left_out and (process is None or process == processes[0]):  # said once, by the first rank
            info.warnings.append(
                f"holds {len(processes) + left_out:,} processes with GPU work: the {len(processes)} with the most "
                f"GPU activities are read as ranks, the other {left_out:,} ({left_activities:,} activities) are "
                "left out"
            )
        if process is None and processes:
            process = processes[0]
            if len(processes) > 1:
                info.warnings.append(
                    f"holds {len(processes)} processes with GPU work; only the first "
                    f"(pid {process & 0xFFFFFF}) was read (`atlas ingest` reads each as a rank)"
                )
        if len(processes) > 1 and process in processes:
            info.distributed_info = {"rank": processes.index(process), "world_size": len(processes)}
        export.first, export.several = (processes[0] if processes else None), len(processes) > 1
        export.base = export.time_base()
        strings = export.strings()
        gpu_parts = [p for t in GPU_TABLES if (p := _gpu_part(export, t, process, strings)) is not None]
        host_parts = [p for p in (_runtime_part(export, process, strings), _nvtx_part(export, process)) if p]
        if export.suspect:
            export.refuse_if_damaged()
        nodes_part, nodes, roots, created = _graph_nodes(export, process)
        offset = sum(len(p.family) for p in host_parts)
        if nodes_part is not None:
            host_parts.append(nodes_part)
        info.device_properties = _device_properties(export, info.warnings)
        whole_graphs = _whole_graphs_apart(gpu_parts)
        if whole_graphs:
            replays = counted(whole_graphs, "CUDA-graph replay", "CUDA-graph replays", WAS)
            info.warnings.append(
                f"{replays} recorded at the level of whole graphs (CUPTI_ACTIVITY_KIND_GRAPH_TRACE): each is one "
                f"kernel row named {WHOLE_GRAPH.format('N')}, which busy and idle time count; the kernels it ran, "
                "their names, shapes and launchers are not in the export (profile with --cuda-graph-trace=node)"
            )
        read = NsysRead(processes=len(processes), syncs=sync_facts(export, process))
        if export.missing:
            info.warnings.append(
                f"older or newer nsys schema: {len(export.missing)} columns missing "
                f"({', '.join(sorted(set(export.missing)))}); what they feed is left empty"
            )
        # said where another process may own them: with several processes with GPU work, or with
        # one whose calls are not the only ones (its kernel had taken the other process's launch
        # of the same correlation id — launcher, shapes, launch time — unsaid)
        if export.unattributed and (export.several or export.calls_elsewhere(process)):
            n = export.unattributed
            whose = "the first process's (rank 0)" if process is not None else "one process's"
            calls = "its calls" if process is not None else "the calls of every process"
            info.warnings.append(
                f"{counted(n, 'GPU activity', 'GPU activities')} without a usable process id (globalPid missing, "
                f"null or text) {('is', 'are')[n != 1]} read as {whose} and linked to {calls} by correlation id, "
                "though the export holds other processes' calls: such an activity may be another process's, "
                "linked to a launch not its own"
            )
        for (what, why), count in export.host_times.items():
            info.warnings.append(f"{counted(count, what, what + 's')} {why}")
        if export.unnamed:
            info.warnings.append(
                f"{export.unnamed:,} kernels without a name in the export (no string id, or one StringIds "
                f"does not hold): named {UNNAMED_KERNEL}"
            )
        if export.not_utf8:
            info.warnings.append(
                f"{counted(export.not_utf8, 'text', 'texts')} {WAS[export.not_utf8 != 1]} not UTF-8: "
                f"{('its', 'their')[export.not_utf8 != 1]} undecodable bytes were replaced by U+FFFD"
            )
        info.events = export.rows
    gpu = _gpu_table(gpu_parts)
    read.node_creation = _node_creation_rows(gpu.graph_node_id, nodes, roots, created, offset)
    empty = np.empty(0, dtype=np.int64)
    # as the JSON reader's: `N values out of range or of an unexpected type were ignored (deviceId 1)`
    ignored = {**export.bad, **({LONG_STRINGS: export.cut} if export.cut else {})}
    cols = TraceColumns(
        gpu=gpu,
        host=_host_table(host_parts, ignored),
        gpu_steps=GpuAnnotations(step=empty, device=empty, ts=np.empty(0), end=np.empty(0)),
        event_count=info.events,
        ignored=ignored,
    )
    return info, cols, read
