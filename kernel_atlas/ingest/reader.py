"""Trace file → metadata and, in trace order, the columns of its events: the only place that
reads the trace file.

The file is streamed, never held whole: plain JSON is read in slices with `pread` (decode
workers read their own slices), `.gz` and `.zst` are decompressed in one pass by this
process while workers decode what was already decompressed (handed over in shared memory).
Nothing is sized from a gzip trailer, and only regular files are opened. The top level of the document
is walked member by member; the `traceEvents` array is cut into slices of about
`SLICE_BYTES` at event boundaries, each decoded on its own (`events.decode_slice`).

Hostile text is bounded: no stretch of more than `MAX_EVENT_BYTES` without an event boundary
is read (a decompression bomb or a giant token fails in one line instead of filling the
memory); an event nested beyond the decoder's limit is skipped and counted (`_shallow`), a
metadata member likewise; a UTF-8 byte order mark is accepted.

A cut is a guess: `}, {"` may also occur inside nested `args`. Slices are therefore checked
in order: a slice that starts at a real event boundary and decodes ends at a real boundary
too (a cut inside nested args leaves unbalanced JSON), so the next slice's start is proven.
A slice that fails is redone from its proven start with an exact structural scan
(`_Walker`), which also finds the end of the array and tells truncated JSON from malformed
JSON.

`read_trace_with` streams the same text, slice by slice, to a decode of the caller's instead of
ingest's columns (`atlas report --overlay` copies the events with it): one reader, one set of
bounds, whatever reads the trace.
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import os
import re
import stat
import weakref
import zlib
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import redact_text
from kernel_atlas.core.text_limits import META_TEXT
from kernel_atlas.ingest.events import (
    SliceError,
    SlicePart,
    bad_number,
    cut_to,
    decode_task,
    file_identity,
    python_loads,
    schema_problem,
    task_text,
    without_surrogates,
)

try:  # ISA-L reads the same gzip format about four times faster than zlib
    from isal import igzip as _gzip
    from isal.isal_zlib import error as _IsalError

    _GZIP_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile, _IsalError)
except ImportError:  # pragma: no cover - isal is a dependency; the standard library still works
    _gzip = gzip  # type: ignore[assignment]
    _GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)

SLICE_BYTES = 4 << 20  # ~15k events a slice: keeps each worker's memory low, the work evenly shared
MAX_EVENT_BYTES = 256 << 20  # no profiler writes an event (or a top-level member) this large
_BOM = b"\xef\xbb\xbf"
_READ_BYTES = 4 << 20  # decompression step
_TRUNCATED = "invalid JSON: JSON is truncated (the file ends in the middle of the trace)"
# A possible end of one event: followed by the next event, or by the end of the array.
_CUT = re.compile(rb'\}\s*(?:,\s*(\{)\s*["}]|(\]))')  # `}, {"` or `}, {}` (an empty event): the next event
_ARRAY_END = re.compile(rb"\}\s*\]")
_SCALAR = re.compile(rb"[^\s,\]}]*")
_WHITESPACE = b" \t\r\n"
_WANTED = (
    *("deviceProperties", "computeProperties", "distributedInfo"),
    *("cuda_runtime_version", "hip_runtime_version", "roctracer_version"),
)
# the device table under its older key, `computeProperties` (kineto's tb_plugin test input
# gpu_metrics_input.json), in CUDA's own cudaDeviceProp names: those Kineto renamed in
# deviceProperties; the others (`name`, `totalGlobalMem`, `warpSize`, …) are the same
COMPUTE_PROPERTIES = {
    "multiProcessorCount": "numSms",
    "major": "computeMajor",
    "minor": "computeMinor",
    "maxThreadsPerMultiProcessor": "maxThreadsPerMultiprocessor",
}
_ANY = msgspec.json.Decoder()
_ANY_RAW = msgspec.json.Decoder(msgspec.Raw)


# the first bytes of the containers and compressions people meet traces in but this reader does not
# open (one layer of gzip or zstd is read; plain JSON inside it), with what to do instead
_PACKED = (
    (b"\x1f\x8b", "gzip inside gzip: decompress the outer layer first (gunzip -c FILE > trace.json.gz)"),
    (b"\x28\xb5\x2f\xfd", "zstd inside a compressed file: decompress the outer layer first"),
    (b"BZh", "bzip2-compressed (gzip and zstd are read): decompress it first (bunzip2 -k FILE)"),
    (b"\xfd7zXZ", "xz-compressed (gzip and zstd are read): decompress it first (unxz -k FILE)"),
    (b"PK\x03\x04", "a zip archive: extract the trace first (unzip FILE)"),
    (b"7z\xbc\xaf", "a 7z archive: extract the trace first"),
)


def _packed_as(head: bytes) -> str | None:
    """What a file that is no JSON is packed as, and what to do, from its first bytes."""
    return next((problem for magic, problem in _PACKED if bytes(head).startswith(magic)), None)


CATALOG_HEAD_BYTES = 1 << 16  # the text a kernel catalog is told from a trace by (`is_catalog_head`)
NOT_A_TRACE_BUT_CATALOG = (
    "a kernel catalog (a JSON list of entries naming a `kernel_name`), not a trace: "
    "give it to `atlas classify` or `atlas report`"
)


def is_catalog_head(head: bytes) -> bool:
    """Whether a JSON document starting with `head` (its first `CATALOG_HEAD_BYTES`, as text) is a
    kernel catalog in the seed's format — a list of entries naming a `kernel_name` — not a trace:
    every trace event has a `ph`, no catalog entry does. A catalog read as a trace was ingested as
    an empty one ("167 events, 0 kernels", exit 0, files written); `atlas report` routes a
    catalog to its costs by the same test."""
    text = bytes(head).removeprefix(_BOM).lstrip()
    return text.startswith(b"[") and b'"kernel_name"' in text and b'"ph"' not in text


def is_catalog_file(path: Path) -> bool:
    """Whether a local `.json` file is a kernel catalog (a list of entries naming a `kernel_name`,
    or of no events: its refusal says why it is no catalog), not a trace written as a bare list of
    events (it was costed as a catalog of 2,551 empty entries). `atlas report` routes such a file
    to its costs, `atlas ingest DIR` leaves it out of a folder's traces, and every command that
    reads a trace refuses it (`is_catalog_head`)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(CATALOG_HEAD_BYTES)
    except OSError:
        return False
    return is_catalog_head(head) or (head.removeprefix(_BOM).lstrip().startswith(b"[") and b'"ph"' not in head)


@dataclass
class TraceInfo:
    """What the reader learnt about a trace besides its events."""

    path: Path
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    runtime: str = "unknown"  # "cuda", "rocm" or "unknown"
    size_bytes: int = 0  # uncompressed
    events: int = 0
    warnings: list[str] = field(default_factory=list)  # what was skipped, said once each


def regular_file(path: Path, shown: Path | None = None) -> os.stat_result:
    """`path`'s status where it is a regular file, else one line naming `shown` (the file the user
    gave; `path` itself by default): missing, unreadable, a directory, or a pipe, socket or device
    (a FIFO or a link to /dev/zero named like a trace)."""
    shown = path if shown is None else shown
    try:
        info = path.stat()
    except FileNotFoundError:
        raise AtlasError(shown, "no such file") from None
    except OSError as exc:
        raise AtlasError(shown, f"cannot read file ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise AtlasError(shown, "is a directory, not a trace file")
    if not stat.S_ISREG(info.st_mode):
        raise AtlasError(shown, "is not a regular file (a pipe, socket or device); save the trace to a file first")
    return info


class _Source:
    """The uncompressed text of a trace, read forward in windows.

    Plain files are read with `pread` and hand workers (path, start, end) tasks; compressed
    files are decompressed into a buffer that keeps only what is not yet decoded."""

    def __init__(self, path: Path):
        self.path = path
        self.file_size = regular_file(path).st_size
        try:
            self.raw = path.open("rb")
        except OSError as exc:
            raise AtlasError(path, f"cannot read file ({exc.strerror or exc})") from None
        try:
            self.identity = file_identity(self.raw.fileno())  # the workers read this file, or none
            magic = self.raw.read(4)
            self.raw.seek(0)
        except OSError as exc:  # /proc/self/mem opens, then says EIO
            self.raw.close()
            raise AtlasError(path, f"cannot read file ({exc.strerror or exc})") from None
        self.stream: Any = None
        self.zstd = is_zstd(magic)
        if magic[:2] == b"\x1f\x8b":
            self.stream = _gzip.GzipFile(fileobj=self.raw)
        elif self.zstd:
            import zstandard

            self.stream = zstandard.ZstdDecompressor().stream_reader(self.raw)
        self.compressed = self.stream is not None
        # compressed files: the text not yet released, as decompressed chunks and their offsets
        self.chunks: list[bytes] = []
        self.offsets: list[int] = []
        self.filled = 0  # offset just past the last chunk
        self.eof = not self.compressed
        self.length = None if self.compressed else self.file_size  # known once at EOF
        self.limit = 2 * MAX_EVENT_BYTES  # most decompressed text held at once (the reader sets it)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.raw.close()

    def window(self, start: int, size: int) -> bytes:
        """Up to `size` bytes from offset `start` (fewer only at the end of the text)."""
        if not self.compressed:
            try:
                if hasattr(os, "pread"):
                    return os.pread(self.raw.fileno(), size, start)
                self.raw.seek(start)  # no positional reads here (Windows)
                return self.raw.read(size)
            except OSError as exc:
                raise AtlasError(self.path, f"cannot read file ({exc.strerror or exc})") from None
        self._fill(start + size)
        return self._copy(start, min(start + size, self.filled))

    def release(self, before: int) -> None:
        """Text before `before` will not be asked for again."""
        while len(self.chunks) > 1 and self.offsets[1] <= before:
            del self.chunks[0], self.offsets[0]

    def task(self, start: int, end: int) -> tuple:
        """A decode task for the text [start, end), for a worker process or this one."""
        if not self.compressed:
            return ("file", str(self.path), start, end, self.identity)
        self._fill(end)
        return ("framed", self._framed(start, end))

    def _pieces(self, start: int, end: int) -> list[memoryview]:
        first = bisect.bisect_right(self.offsets, start) - 1
        pieces = []
        for chunk, offset in zip(self.chunks[first:], self.offsets[first:], strict=True):
            if offset >= end:
                break
            pieces.append(memoryview(chunk)[max(start - offset, 0) : end - offset])  # bytes: never resized
        return pieces

    def _copy(self, start: int, end: int) -> bytes:
        pieces = self._pieces(start, end)
        return pieces[0].tobytes() if len(pieces) == 1 else b"".join(pieces)

    def _framed(self, start: int, end: int, into: memoryview | None = None) -> bytearray | memoryview:
        """The text [start, end) framed as a JSON list, in a new buffer or written `into` one."""
        framed = bytearray(end - start + 2) if into is None else into[: end - start + 2]
        framed[0], framed[-1] = 0x5B, 0x5D  # "[" and "]"
        at = 1
        for piece in self._pieces(start, end):
            framed[at : at + len(piece)] = piece
            at += len(piece)
        return framed

    def shared_task(self, start: int, end: int, slots: _SharedSlots) -> tuple[tuple, SharedMemory]:
        """A decode task whose text travels in shared memory (a pipe would copy it four times)."""
        self._fill(end)
        slot = slots.take(end - start + 2)
        with memoryview(slot.buf) as view:
            self._framed(start, end, view).release()
        return ("shared", slot.name, end - start + 2), slot

    def progress(self, position: int) -> float:
        if self.length:
            return min(position / self.length, 1.0)
        return min(self.raw.tell() / self.file_size, 1.0) if self.file_size else 1.0

    def _fill(self, end: int) -> None:
        while not self.eof and self.filled < end:
            try:
                chunk = self.stream.read(_READ_BYTES)
            except _GZIP_ERRORS as exc:
                raise AtlasError(self.path, f"compressed stream is damaged or truncated ({exc})") from None
            except OSError as exc:
                raise AtlasError(self.path, f"cannot read file ({exc.strerror or exc})") from None
            except Exception as exc:  # zstandard raises its own ZstdError
                if type(exc).__name__ == "ZstdError":
                    raise AtlasError(self.path, f"zstd stream is damaged or truncated ({exc})") from None
                raise
            if not chunk:
                if self.zstd and self.filled == 0:
                    self._check_zstd_end()
                self.eof = True
                self.length = self.filled
                break
            self.chunks.append(chunk)
            self.offsets.append(self.filled)
            self.filled += len(chunk)
            if self.filled - self.offsets[0] > self.limit:  # a bomb, or one giant token: never held whole
                raise AtlasError(self.path, too_large(self.offsets[0]))

    def _check_zstd_end(self) -> None:
        """A zstd stream that gave no text at all: a frame cut short says nothing either
        (zstandard's reader returns no bytes), which read as an empty file. Its frames are run
        through once more to their end (no block was complete, so nothing is held): damaged
        or truncated unless the last frame ended."""
        import zstandard

        decompressor = zstandard.ZstdDecompressor().decompressobj()
        try:
            self.raw.seek(0)
            while data := self.raw.read(_READ_BYTES):
                decompressor.decompress(data)
                while decompressor.eof and decompressor.unused_data:  # the next frame
                    rest, decompressor = decompressor.unused_data, zstandard.ZstdDecompressor().decompressobj()
                    decompressor.decompress(rest)
        except zstandard.ZstdError as exc:
            raise AtlasError(self.path, f"zstd stream is damaged or truncated ({exc})") from None
        except OSError as exc:
            raise AtlasError(self.path, f"cannot read file ({exc.strerror or exc})") from None
        if not decompressor.eof:
            raise AtlasError(self.path, "zstd stream is damaged or truncated (it ends inside a frame)")


# a zstd frame (RFC 8878), or a skippable frame (magic 0x184D2A50–5F, little-endian), which may come first
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def is_zstd(magic: bytes) -> bool:
    """Whether a file's first 4 bytes open a zstd stream (a frame, or a skippable frame first)."""
    return magic == _ZSTD_MAGIC or (len(magic) == 4 and magic[1:] == b"\x2a\x4d\x18" and magic[0] & 0xF0 == 0x50)


def too_large(at: int) -> str:
    return (
        f"not a profiler trace: more than {MAX_EVENT_BYTES >> 20} MB of text without an event boundary (from byte {at})"
    )


class _SharedSlots:
    """Shared-memory buffers for the slices of a compressed trace in flight, reused."""

    def __init__(self, slice_bytes: int):
        self.size = slice_bytes + slice_bytes // 4 + 4096
        self.free: list[SharedMemory] = []
        self.made: list[SharedMemory] = []
        _live_slots.add(self)

    def take(self, size: int) -> SharedMemory:
        for i, slot in enumerate(self.free):
            if slot.size >= size:
                return self.free.pop(i)
        slot = SharedMemory(create=True, size=max(size, self.size))
        self.made.append(slot)
        return slot

    def give_back(self, slot: SharedMemory) -> None:
        self.free.append(slot)

    def close(self) -> None:
        made, self.made, self.free = self.made, [], []
        _live_slots.discard(self)
        for slot in made:
            with contextlib.suppress(OSError, BufferError):
                slot.close()
            with contextlib.suppress(OSError):
                slot.unlink()


_live_slots: weakref.WeakSet[_SharedSlots] = weakref.WeakSet()


def release_shared_memory() -> None:
    """Remove every shared-memory buffer this process still holds for slices in flight: for a
    process ending without its readers' `finally` blocks (`workers.end_for_exit`)."""
    for slots in list(_live_slots):
        slots.close()


class _Slice:
    """Events [start, end) of the array; `after` is where the next event starts, or, for
    the last slice (`final`), the offset of the array's closing bracket."""

    def __init__(self, start: int, end: int, after: int, final: bool, pending: tuple):
        self.start, self.end, self.after, self.final = start, end, after, final
        self.pending, self.slot = pending  # a future or a result; the shared memory it reads, if any

    def result(self) -> list[SlicePart] | SliceError:
        if isinstance(self.pending, Future):
            return self.pending.result()
        return self.pending

    def cancel(self) -> None:
        """Drop the slice; its shared memory is free again only once no worker reads it."""
        if isinstance(self.pending, Future) and not self.pending.cancel():
            wait([self.pending])


_QUOTE, _BACKSLASH = 0x22, 0x5C
_DELTA = np.zeros(256, np.int8)  # structural characters: +1 opens, -1 closes, 2 is a comma
_DELTA[list(b"{[")] = 1
_DELTA[list(b"]}")] = -1
_DELTA[ord(",")] = 2


class _Walker:
    """Exact JSON structure from a position known to be outside strings (vectorised)."""

    def __init__(self, source: _Source):
        self.source = source

    def byte(self, pos: int) -> int | None:
        w = self.source.window(pos, 1)
        return w[0] if len(w) else None

    def skip_ws(self, pos: int) -> int:
        while True:
            w = bytes(self.source.window(pos, 4096))
            stripped = w.lstrip(_WHITESPACE)
            pos += len(w) - len(stripped)
            if stripped or not w:
                return pos

    def string_end(self, pos: int) -> int:
        """Offset just past the string token starting at `pos` (a vectorised search for its
        closing quote, window by window: a 25 MB string costs its bytes, not a regex's
        backtracking state, nor a window re-read for every growth)."""
        at, carry, size = pos + 1, 0, 4096
        while True:
            if at - pos > MAX_EVENT_BYTES:
                raise AtlasError(self.source.path, too_large(pos))
            w = self.source.window(at, size)
            if not len(w):
                raise AtlasError(self.source.path, _TRUNCATED)
            b = np.frombuffer(w, np.uint8)
            slash = b == _BACKSLASH
            # for every byte, the index of the last byte at or before it that is no backslash
            last = np.maximum.accumulate(np.where(slash, -1, np.arange(len(b))))
            quotes = np.flatnonzero(b == _QUOTE)
            before = np.where(quotes > 0, last[np.maximum(quotes - 1, 0)], -1)
            run = quotes - 1 - before + np.where(before < 0, carry, 0)  # backslashes just before
            closing = quotes[run % 2 == 0]
            if len(closing):
                return at + int(closing[0]) + 1
            carry = carry + len(b) if last[-1] < 0 else len(b) - 1 - int(last[-1])
            at += len(b)
            size = min(size * 4, 4 << 20)

    def value_end(self, pos: int) -> int:
        """Offset just past the JSON value starting at `pos`."""
        first = self.byte(pos)
        if first is None:
            raise AtlasError(self.source.path, _TRUNCATED)
        if first == _QUOTE:
            return self.string_end(pos)
        if first in b"{[":
            return self.scan(pos + 1, None)[1] + 1
        match = _SCALAR.match(self.source.window(pos, 4096))
        return pos + (match.end() if match else 0)

    def scan(self, pos: int, commas_from: int | None) -> tuple[str, int]:
        """From `pos` (outside strings, nesting level 0) to the first comma at level 0 at
        or after `commas_from` ("comma", offset) or to the bracket that closes level 0
        ("close", offset), whichever comes first."""
        level, in_string, backslashes = 0, False, 0
        size = 1 << 16
        origin = pos
        while True:
            if pos - max(origin, commas_from or origin) > MAX_EVENT_BYTES:
                raise AtlasError(self.source.path, too_large(origin))
            w = self.source.window(pos, size)
            if not len(w):
                raise AtlasError(self.source.path, _TRUNCATED)
            b = np.frombuffer(w, np.uint8)
            quotes = np.flatnonzero(b == _QUOTE)
            slash = b == _BACKSLASH
            if len(quotes) and (backslashes or slash.any()):
                # a quote is escaped when an odd run of backslashes precedes it
                run = np.zeros(len(quotes), np.int64)
                at = quotes - 1
                open_run = at >= 0
                open_run[open_run] = slash[at[open_run]]
                while open_run.any():
                    run[open_run] += 1
                    at[open_run] -= 1
                    reached_start = open_run & (at < 0)
                    run[reached_start] += backslashes
                    open_run &= at >= 0
                    open_run[open_run] = slash[at[open_run]]
                quotes = quotes[run % 2 == 0]
            marks = np.flatnonzero(_DELTA[b])
            outside = (np.searchsorted(quotes, marks) + in_string) % 2 == 0
            marks = marks[outside]
            delta = _DELTA[b[marks]]
            levels = level + np.cumsum(np.where(delta == 2, 0, delta))
            closes = np.flatnonzero((delta == -1) & (levels == -1))
            hits = [(int(marks[closes[0]]), "close")] if len(closes) else []
            if commas_from is not None:
                commas = np.flatnonzero((delta == 2) & (levels == 0) & (marks + pos >= commas_from))
                if len(commas):
                    hits.append((int(marks[commas[0]]), "comma"))
            if hits:
                offset, kind = min(hits)
                return kind, pos + offset
            if len(levels):
                level = int(levels[-1])
            in_string = bool((len(quotes) + in_string) % 2)
            trailing = len(b) - len(bytes(w).rstrip(b"\\"))
            backslashes = trailing + backslashes if trailing == len(b) else trailing
            pos += len(b)
            size = min(size * 2, 16 << 20)


Submit = Callable[[tuple], Future]
# a slice's text framed as a JSON list → its parts (each with an `events` count); raises
# `SliceError` ("deep" where it nests beyond the decoder's reach): a decode other than ingest's
Decode = Callable[[bytes | bytearray | memoryview], list[Any]]


class _Reader:
    def __init__(
        self,
        path: Path,
        on_part: Callable[[SlicePart], None],
        submit: Submit | None,
        workers: int,
        slice_bytes: int,
        on_progress: Callable[[float], None] | None,
        decode: Decode | None = None,
        members: tuple[str, ...] = (),
    ):
        self.source = _Source(path)
        self.walk = _Walker(self.source)
        self.path = path
        self.info = TraceInfo(path)
        self.on_part = on_part
        self.submit = submit
        # slices in flight: two per worker keep every worker busy while this process reads
        # ahead (a compressed trace's slices sit in shared memory until decoded)
        self.depth = 1 if submit is None else max(workers, 1) * 2 + (0 if self.source.compressed else 1)
        self.slice_bytes = max(slice_bytes, 1)
        self.on_progress = on_progress
        self.seen_events = False
        self.bare_array = False  # the JSON Array Format: the document is the events array
        self.slots = _SharedSlots(self.slice_bytes) if submit is not None and self.source.compressed else None
        # the text in flight (slices being decoded, read ahead) plus one event at its largest
        self.source.limit = (self.depth + 2) * self.slice_bytes + MAX_EVENT_BYTES
        self.deep = 0  # events skipped for their nesting
        self.deep_values = 0  # values of events set to null for their nesting
        self.decode = decode  # None: ingest's columns (`decode_task`)
        self.extra = members  # top-level members read besides _WANTED (when no object or list)
        self.members: dict[str, Any] = {}  # those of _WANTED and `extra` the document has, as read

    def fail(self, problem: str) -> AtlasError:
        return AtlasError(self.path, problem)

    def read(self) -> TraceInfo:
        try:
            self._document()
        finally:
            self.source.close()
            if self.slots is not None:
                self.slots.close()
        if self.deep_values:
            self.info.warnings.append(f"{self.deep_values} values nested too deeply to read were ignored (set to null)")
        if self.deep:
            self.info.warnings.append(f"{self.deep} events nested too deeply to read were skipped")
        return self.info

    # --- the document --------------------------------------------------------------------
    def _document(self) -> None:
        walk = self.walk
        pos = walk.skip_ws(len(_BOM) if self.source.window(0, len(_BOM)) == _BOM else 0)
        first = walk.byte(pos)
        if first is None:
            raise self.fail("file is empty")
        if first == ord("["):
            if is_catalog_head(self.source.window(pos, CATALOG_HEAD_BYTES)):  # before any output is written
                # classify and report read a catalog as plain JSON only
                unpack = " (decompressed: they read plain `.json`)" if self.source.compressed else ""
                raise self.fail(NOT_A_TRACE_BUT_CATALOG + unpack)
            self.bare_array = True
            pos = self._events(pos)
        elif first != ord("{"):
            packed = _packed_as(self.source.window(pos, 6))
            scalar = None if packed else self._scalar(pos)
            if scalar:  # `"hello"`, `123`: JSON, and no trace — "not JSON" was false
                raise self.fail(f"not a Chrome/Kineto trace: the file is JSON, but {scalar}, not an object or a list")
            raise self.fail(packed or "not JSON: a Chrome/Kineto trace starts with '{' or '['")
        else:
            pos = self._members(pos + 1)
            if not self.seen_events:
                raise self.fail("not a Chrome/Kineto trace: the JSON object has no 'traceEvents' list")
        pos = walk.skip_ws(pos)
        if walk.byte(pos) is not None:
            raise self.fail(f"invalid JSON: unexpected text after the trace (byte {pos})")
        self.info.size_bytes = pos
        if self.on_progress:
            self.on_progress(1.0)

    def _scalar(self, pos: int) -> str | None:
        """What the document is where it is one JSON value other than an object or a list (`a
        string`, `a number`, `true`, `false`, `null`), from `pos` to the end of the file; None
        where the text is no JSON."""
        walk = self.walk
        try:
            end = walk.value_end(pos)  # bounded: a string of more than MAX_EVENT_BYTES is refused
        except AtlasError:  # a string never closed
            return None
        if end == pos or walk.byte(walk.skip_ws(end)) is not None:
            return None
        text = bytes(self.source.window(pos, end - pos))
        try:
            _ANY_RAW.decode(text)  # checked, not built
        except (msgspec.DecodeError, msgspec.ValidationError):
            if text[:1] != b'"':  # NaN, `-`, `123abc`: no JSON
                return None
            try:  # a lone surrogate, which Python's parser reads (as the events' strings are read)
                python_loads(text)
            except (ValueError, UnicodeDecodeError):
                return None
        return {b'"': "a string", b"t": "`true`", b"f": "`false`", b"n": "`null`"}.get(text[:1], "a number")

    def _members(self, pos: int) -> int:
        """The members of the top-level object from `pos`; the offset after its '}'."""
        walk = self.walk
        pos = walk.skip_ws(pos)
        if walk.byte(pos) == ord("}"):
            return pos + 1
        wanted: dict[str, Any] = {}
        while True:
            if walk.byte(pos) != _QUOTE:
                raise self._unexpected(pos, "a member name")
            key_end = walk.string_end(pos)
            key = self._value(pos, key_end, decode=True, what="a member name")
            pos = walk.skip_ws(key_end)
            if walk.byte(pos) != ord(":"):
                raise self._unexpected(pos, "':'")
            pos = walk.skip_ws(pos + 1)
            if key == "traceEvents":
                if walk.byte(pos) != ord("["):
                    walk.value_end(pos)  # a truncated file says so first
                    raise self.fail("not a Chrome/Kineto trace: 'traceEvents' is not a list")
                if self.seen_events:
                    raise self.fail("not a Chrome/Kineto trace: 'traceEvents' appears twice")
                pos = self._events(pos)
            else:
                end = walk.value_end(pos)
                # an extra member is a text or a number (`displayTimeUnit`): a list or object
                # there would be held whole as Python objects, which ingest never does
                extra = key in self.extra and self.source.window(pos, 1) not in (b"{", b"[")
                value = self._value(pos, end, decode=key in _WANTED or extra, what=f"'{key}'")
                if key in _WANTED or extra:
                    wanted[key] = value
                pos = end
                self.source.release(pos)  # a member before the events is not held
            pos = walk.skip_ws(pos)
            separator = walk.byte(pos)
            if separator == ord("}"):
                break
            if separator != ord(","):
                raise self._unexpected(pos, "',' or '}'")
            pos = walk.skip_ws(pos + 1)
        # as read, before `_metadata` cuts distributedInfo's long texts in place
        self.members = {key: dict(value) if isinstance(value, dict) else value for key, value in wanted.items()}
        self._metadata(wanted)
        return pos + 1

    def _unexpected(self, pos: int, expected: str) -> AtlasError:
        if self.walk.byte(pos) is None:
            return self.fail(_TRUNCATED)
        return self.fail(f"invalid JSON: expected {expected} at byte {pos}")

    def _value(self, start: int, end: int, decode: bool, what: str) -> Any:
        """A top-level member's value (or name): decoded when wanted, else only checked (when
        small). Numbers beyond range and lone surrogates are read as Python reads them; a value
        nested too deeply is skipped (None) and said."""
        if not decode and end - start > (16 << 20):
            return None
        text = self.source.window(start, end - start)
        try:
            try:
                return _ANY.decode(text) if decode else _ANY_RAW.decode(text)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                try:  # Python's parser takes 1e999, integers beyond 64 bits, lone surrogates
                    return without_surrogates(python_loads(text), Counter()) if decode else None
                except (ValueError, UnicodeDecodeError):
                    raise self.fail(f"invalid JSON: {_at_offset(str(exc), start)}") from None
        except RecursionError:
            self.info.warnings.append(f"top-level member {what} is nested too deeply: ignored")
            return None

    def _metadata(self, wanted: dict[str, Any]) -> None:
        info = self.info
        devices = wanted.get("deviceProperties")
        if devices is None:  # the older key: read as deviceProperties, its names mapped
            devices = _compute_properties(wanted.get("computeProperties"))
        if isinstance(devices, dict):
            devices = [devices]
        if isinstance(devices, list):
            info.device_properties = device_entries([d for d in devices if isinstance(d, dict)], info.warnings)
        if isinstance(wanted.get("distributedInfo"), dict):
            info.distributed_info = wanted["distributedInfo"]
            cut_texts([info.distributed_info], "distributedInfo", info.warnings)
        if "hip_runtime_version" in wanted or "roctracer_version" in wanted:
            info.runtime = "rocm"
        elif "cuda_runtime_version" in wanted:
            info.runtime = "cuda"

    # --- the events ----------------------------------------------------------------------
    def _events(self, bracket: int) -> int:
        """Decode the array whose '[' is at `bracket`; the offset after its ']'."""
        self.seen_events = True
        walk = self.walk
        good = walk.skip_ws(bracket + 1)  # a proven event start
        if walk.byte(good) == ord("]"):
            return good + 1
        inflight: deque[_Slice] = deque()
        next_start, exhausted = good, False
        try:
            while True:
                while not exhausted and len(inflight) < self.depth:
                    cut = self._cut(next_start)
                    if cut is None:  # no boundary left: the rest needs the exact scan
                        exhausted = True
                        break
                    end, after, final = cut
                    inflight.append(_Slice(next_start, end, after, final, self._decode(next_start, end)))
                    exhausted = final
                    next_start = after
                must_reach = good + self.slice_bytes
                if inflight:
                    piece = inflight.popleft()
                    result = piece.result()
                    self._done_with(piece)
                    if not isinstance(result, SliceError):
                        self._deliver(result, piece.after)
                        if piece.final:
                            return piece.after + 1
                        good = piece.after
                        continue
                    if result.kind == "schema":
                        raise self._schema_error(result.message)
                    if result.kind == "read":
                        raise self.fail(f"cannot read file ({result.message})")
                    must_reach = piece.end  # cut inside nested args, or JSON that is not valid
                while inflight:
                    self._drop(inflight.popleft())
                good, done = self._exact_slice(good, must_reach)
                if done:
                    return good
                next_start, exhausted = good, False
        finally:
            while inflight:
                self._drop(inflight.popleft())

    def _drop(self, piece: _Slice) -> None:
        piece.cancel()
        self._done_with(piece)

    def _cut(self, start: int) -> tuple[int, int, bool] | None:
        """(end, after, final) of the first possible event end at or after `start` plus the
        slice size, else the last possible end of the array near the end of the text; None
        when there is neither, or no possible end within twice the slice size: the exact scan
        cuts such text, so that no slice holds much more than `slice_bytes` of it."""
        pos = start + self.slice_bytes
        step = 1 << 16
        while True:
            if pos - start >= 2 * self.slice_bytes:  # a slice's length past it without a boundary (a
                return None  # run of entries that are no objects, or one event that long): scanned exactly
            w = self.source.window(pos, step + 256)
            if not len(w):
                break
            match = _CUT.search(w, 0, step)
            if match:
                if match.start(2) >= 0:
                    return pos + match.start() + 1, pos + match.start(2), True
                return pos + match.start() + 1, pos + match.start(1), False
            if len(w) < step:
                break
            pos += step
        if pos - start > self.slice_bytes:  # a stretch without a boundary to the end of the text: as above
            return None
        # The rest is shorter than a slice: end it where the array most likely ends (the
        # document usually closes right after it); a wrong guess fails and is redone exactly.
        text_end = self.source.length or pos
        tail_start = max(start, text_end - step)
        ends = list(_ARRAY_END.finditer(self.source.window(tail_start, text_end - tail_start)))
        if not ends:
            return None
        last = ends[-1]
        return tail_start + last.start() + 1, tail_start + last.end() - 1, True

    def _decode(self, start: int, end: int) -> tuple:
        """(future or result, shared memory holding the text or None)."""
        if self.submit is None:
            return self._decode_here(start, end), None
        if self.slots is None:
            return self.submit(self.source.task(start, end)), None
        task, slot = self.source.shared_task(start, end, self.slots)
        return self.submit(task), slot

    def _decode_here(self, start: int, end: int) -> list[Any] | SliceError:
        """The parts of the text [start, end), decoded by this process."""
        task = self.source.task(start, end)
        if self.decode is None:
            return decode_task(task)
        try:
            framed = task_text(task)  # one copy of the text, as a worker reads it
        except OSError as exc:
            raise self.fail(f"cannot read file ({exc.strerror or exc})") from None
        return self._decode_framed(framed)

    def _decode_framed(self, framed: bytes | bytearray | memoryview) -> list[Any] | SliceError:
        if self.decode is None:
            return decode_task(("framed", framed))
        try:
            return self.decode(framed)
        except SliceError as exc:
            return exc

    def _done_with(self, piece: _Slice) -> None:
        if piece.slot is not None and self.slots is not None:
            self.slots.give_back(piece.slot)

    def _deliver(self, parts: list[SlicePart], upto: int) -> None:
        for part in parts:
            self.on_part(part)
            self.info.events += part.events
        self.source.release(upto)
        if self.on_progress:
            self.on_progress(self.source.progress(upto))

    def _exact_slice(self, good: int, must_reach: int) -> tuple[int, bool]:
        """Decode events from `good` up to the first real event boundary at or after
        `must_reach`, or to the end of the array: (next event start or offset after ']', done)."""
        try:
            kind, at = self.walk.scan(good, must_reach)
        except AtlasError as exc:
            end = self._unclosed_end(good) if exc.problem == _TRUNCATED else None
            if end is None:
                raise
            try:
                self._shallow(good, end)
            except AtlasError:
                raise exc from None  # an event cut short: the file is truncated, not only unclosed
            self.info.warnings.append(
                "the events array has no closing ']' (the JSON Array Format allows it): read to the end of the file"
            )
            return self.source.length or end, True
        self._shallow(good, at)
        if kind == "close":
            return at + 1, True
        return self.walk.skip_ws(at + 1), False

    def _unclosed_end(self, good: int) -> int | None:
        """Where the events of a bare array without its closing `]` end: the end of the text less
        trailing whitespace and one comma (the Trace Event Format lets a writer that stops mid-run
        leave the `]` out); None in a `traceEvents` member, or with no event after `good`."""
        if not self.bare_array or self.source.length is None:
            return None
        tail_start = max(good, self.source.length - 4096)
        tail = bytes(self.source.window(tail_start, self.source.length - tail_start)).rstrip(_WHITESPACE)
        if tail.endswith(b","):
            tail = tail[:-1].rstrip(_WHITESPACE)
        end = tail_start + len(tail)
        return end if end > good else None

    def _shallow(self, start: int, end: int) -> None:
        """Decode the events in [start, end) (both at event boundaries) and deliver them. Where
        the JSON is nested beyond the decoder's limit, the range is halved at event boundaries
        down to single events; an event still too deep is skipped and counted."""
        todo = [(start, end)]
        while todo:
            first, last = todo.pop()
            result = self._decode_here(first, last)
            if not isinstance(result, SliceError):
                self._deliver(result, last)
                continue
            if result.kind == "schema":
                raise self._schema_error(result.message)
            if result.kind != "deep":
                raise self.fail(f"invalid JSON inside traceEvents (after event {self.info.events}): {result.message}")
            split = None
            for commas_from in (first + (last - first) // 2, first):  # the middle, else after the first event
                found, at = self.walk.scan(first, commas_from)
                if found == "comma" and at < last:
                    split = at
                    break
            if split is None:  # one event: its values nested too deeply become null, else it is skipped
                salvaged = self._without_deep_values(first, last)
                parts = self._decode_framed(salvaged) if salvaged is not None else None
                if parts is not None and not isinstance(parts, SliceError):
                    self._deliver(parts, last)
                else:
                    self.deep += 1
                    self.info.events += 1
                continue
            todo += [(self.walk.skip_ws(split + 1), last), (first, split)]  # the first half next

    def _without_deep_values(self, start: int, end: int) -> bytes | None:
        """The event at [start, end), framed as a list, with each value nested too deeply (a
        member of the event, or of its `args`) replaced by null; None when it has none."""
        cuts = self._deep_members(start, args=False)
        if not cuts:
            return None
        self.deep_values += len(cuts)
        pieces, at = [b"["], start
        for cut_start, cut_end in cuts:
            pieces += [self.source.window(at, cut_start - at), b"null"]
            at = cut_end
        pieces += [self.source.window(at, end - at), b"]"]
        return b"".join(pieces)

    def _deep_members(self, start: int, args: bool) -> list[tuple[int, int]]:
        """Spans of the values of the object at `start` (and of its "args" object) that the
        decoder cannot read for their nesting."""
        walk, cuts = self.walk, []
        if walk.byte(start) != ord("{"):
            return cuts
        pos = walk.skip_ws(start + 1)
        while walk.byte(pos) == _QUOTE:
            key_end = walk.string_end(pos)
            key = self.source.window(pos, key_end - pos)
            pos = walk.skip_ws(key_end)
            if walk.byte(pos) != ord(":"):
                break
            pos = walk.skip_ws(pos + 1)
            end = walk.value_end(pos)
            if not args and key == b'"args"':
                cuts += self._deep_members(pos, args=True)
            elif walk.byte(pos) in b"{[":
                try:
                    _ANY_RAW.decode(self.source.window(pos, end - pos))
                except RecursionError:
                    cuts.append((pos, end))
                except msgspec.DecodeError:
                    pass
            pos = walk.skip_ws(end)
            if walk.byte(pos) != ord(","):
                break
            pos = walk.skip_ws(pos + 1)
        return cuts

    def _schema_error(self, message: str) -> AtlasError:
        return self.fail(f"not a Chrome/Kineto trace: {schema_problem(message, self.info.events)}")


def _at_offset(message: str, start: int) -> str:
    """msgspec's "(byte N)" counted from the start of the file."""
    return re.sub(r"\(byte (\d+)\)", lambda m: f"(byte {start + int(m.group(1))})", message)


def read_trace(
    path: str | Path,
    on_part: Callable[[SlicePart], None],
    executor: Executor | None = None,
    workers: int = 1,
    slice_bytes: int | None = None,
    on_progress: Callable[[float], None] | None = None,
) -> TraceInfo:
    """Stream one trace file: `on_part` gets the columns of each slice of events, in trace
    order; returns the metadata. With an `executor`, slices are decoded by its `workers`
    processes while this one reads ahead. Every failure is an `AtlasError` naming the file."""
    submit = None if executor is None else (lambda task: executor.submit(decode_task, task))
    reader = _Reader(Path(path), on_part, submit, workers, slice_bytes or SLICE_BYTES, on_progress)
    return reader.read()


def read_trace_with(
    path: str | Path, decode: Decode, on_part: Callable[[Any], None], slice_bytes: int, members: tuple[str, ...] = ()
) -> tuple[TraceInfo, dict[str, Any]]:
    """Stream one trace as ingest reads it — content sniffed (plain, gzip, zstd), bounded, cut
    into slices at event boundaries, an event nested too deeply salvaged or skipped as ingest
    does — but with each slice's text decoded by `decode` (`Decode`), in this process, its parts
    given to `on_part` in trace order. Returns the metadata and the top-level members of
    `_WANTED` and `members` (texts or numbers) the document has, decoded (None where nested too
    deeply). Every failure is an `AtlasError` naming the file. `atlas report --overlay` copies
    the trace with it."""
    reader = _Reader(Path(path), on_part, None, 1, max(slice_bytes, 1), None, decode=decode, members=members)
    return reader.read(), reader.members


def _compute_properties(devices: Any) -> Any:
    """A `computeProperties` table (an entry or a list) with each entry's CUDA names as
    deviceProperties' (`COMPUTE_PROPERTIES`); where an entry has a value under both names, Kineto's
    wins. Anything but entries is left as it is, for `_metadata` to ignore."""
    entries = [devices] if isinstance(devices, dict) else devices
    if not isinstance(entries, list):
        return devices

    def renamed(entry: dict[str, Any]) -> dict[str, Any]:
        out = {COMPUTE_PROPERTIES.get(key, key): value for key, value in entry.items()}
        return out | {key: entry[key] for key in COMPUTE_PROPERTIES.values() if key in entry}

    return [renamed(entry) if isinstance(entry, dict) else entry for entry in entries]


def device_entries(entries: list[dict[str, Any]], warnings: list[str]) -> list[dict[str, Any]]:
    """deviceProperties entries with only the values a device property can be — a text, an
    integer within 64 bits or a finite number; any other value costs its field alone, the
    fields named (once) in one warning. Texts are cut (`cut_texts`)."""
    kept = [{key: value for key, value in entry.items() if _device_value(value)} for entry in entries]
    dropped = [key for entry, ok in zip(entries, kept, strict=True) for key in entry.keys() - ok.keys()]
    if dropped:
        names = ", ".join(sorted({redact_text(str(key)[:40]) for key in dropped})[:5])
        warnings.append(f"deviceProperties: {len(dropped)} value(s) neither a text nor a number ignored ({names})")
    cut_texts(kept, "deviceProperties", warnings)
    return kept


def cut_texts(entries: list[dict[str, Any]], what: str, warnings: list[str]) -> None:
    """Metadata texts past META_TEXT characters cut to it, in place, counted in one warning
    (a 30 MB GPU name took the terminal report minutes to wrap)."""
    cut = 0
    for entry in entries:
        for key, value in entry.items():
            if isinstance(value, str) and len(value) > META_TEXT:
                entry[key] = cut_to(value, META_TEXT)
                cut += 1
    if cut:
        warnings.append(f"{what}: {cut} text(s) longer than {META_TEXT} characters cut to it")


def _device_value(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, str) or (isinstance(value, (int, float)) and not bad_number(value))
