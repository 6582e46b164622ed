"""Bytes → typed events: the only place that touches the trace file.

The file is read once into one buffer. The top level is decoded with msgspec, keeping the
`traceEvents` array undecoded; the array is then decoded in chunks of about 16 MB into
small typed structs whose `args` stay undecoded (`msgspec.Raw`), so only one chunk of event
objects exists at a time and later stages decode `args` only for the events they need.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from kernel_atlas.errors import AtlasError

_EMPTY = msgspec.Raw(b"")


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event; `args` is decoded on demand."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: msgspec.Raw = _EMPTY


class _TraceDocument(msgspec.Struct, gc=False):
    """Top-level object of a Kineto trace. Unknown keys (user metadata, env dumps) are skipped."""

    traceEvents: msgspec.Raw = _EMPTY
    deviceProperties: msgspec.Raw = _EMPTY
    distributedInfo: msgspec.Raw = _EMPTY
    displayTimeUnit: str | None = None
    schemaVersion: msgspec.Raw = _EMPTY
    baseTimeNanoseconds: msgspec.Raw = _EMPTY
    cuda_runtime_version: msgspec.Raw = _EMPTY
    hip_runtime_version: msgspec.Raw = _EMPTY
    roctracer_version: msgspec.Raw = _EMPTY


_DOCUMENT = msgspec.json.Decoder(_TraceDocument)
_EVENT_LIST = msgspec.json.Decoder(list[Event])
_ANY = msgspec.json.Decoder()
_ANY_RAW = msgspec.json.Decoder(msgspec.Raw)
# Where one event object ends and the next begins. `{"` cannot occur inside a JSON string
# (the quote would be escaped); a split inside nested args leaves unbalanced JSON, which the
# chunk decode rejects, and the next candidate boundary is tried.
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{\s*\"")
CHUNK_BYTES = 16 << 20


@dataclass
class RawTrace:
    """A trace whose metadata is decoded and whose events are decoded chunk by chunk."""

    path: Path
    buffer: bytearray  # the whole uncompressed file
    events_start: int  # offset of the `traceEvents` array's "[" in `buffer`
    events_end: int  # offset just past its "]"
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    runtime: str = "unknown"  # "cuda", "rocm" or "unknown"
    time_unit_ns: bool = False
    size_bytes: int = 0
    decoded_to: int = 0  # how far `event_chunks` has got, in bytes of `buffer`

    @property
    def decoded_fraction(self) -> float:
        span = self.events_end - self.events_start
        return 1.0 if span <= 0 else (self.decoded_to - self.events_start) / span

    def event_chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[list[Event]]:
        """The events, in order, as lists decoded from consecutive slices of the array.

        Each slice is decoded in place: the byte before its first event and the one after its
        last are set to "[" and "]" for the decode and restored afterwards, so the `args`
        (msgspec.Raw) of kept events point into the one file buffer, never into copies."""
        buffer = self.buffer
        view = memoryview(buffer)
        end = self.events_end - 1  # the closing "]"
        pos = self.events_start + 1  # just after the opening "["
        first_event = 0
        while True:
            search_from = pos + chunk_bytes
            while True:
                match = _EVENT_BOUNDARY.search(view, search_from, end) if search_from < end else None
                stop = match.start() + 1 if match else end
                before, after = buffer[pos - 1], buffer[stop]
                buffer[pos - 1], buffer[stop] = 0x5B, 0x5D  # "[" and "]"
                try:
                    events = _EVENT_LIST.decode(view[pos - 1 : stop + 1])
                    break
                except msgspec.ValidationError as exc:
                    where = str(exc).replace("$[", "traceEvents[+", 1)
                    problem = f"not a Chrome/Kineto trace: {where} (after event {first_event})"
                    raise AtlasError(self.path, problem) from None
                except msgspec.DecodeError:
                    if match is None:
                        raise AtlasError(self.path, "invalid JSON inside traceEvents") from None
                    search_from = match.end()  # the boundary was inside nested args: take the next
                finally:
                    buffer[pos - 1], buffer[stop] = before, after
            first_event += len(events)
            self.decoded_to = stop
            if events:
                yield events
            del events  # hold no chunk while the next one is decoded
            if match is None:
                self.decoded_to = self.events_end
                return
            pos = match.start() + match.group().index(b"{")


def read_bytes(path: Path) -> bytes | bytearray:
    """The uncompressed trace text; `.gz` and `.zst` are decompressed in a streaming fashion."""
    if path.is_dir():
        raise AtlasError(path, "is a directory, not a trace file")
    if not path.exists():
        raise AtlasError(path, "no such file")
    try:
        with path.open("rb") as raw:
            magic = raw.read(4)
            raw.seek(0)
            if magic[:2] == b"\x1f\x8b":
                size_hint = _gzip_size(raw)
                with gzip.GzipFile(fileobj=raw) as stream:
                    return _read_all(stream, size_hint)
            if magic == b"\x28\xb5\x2f\xfd":
                import zstandard

                with zstandard.ZstdDecompressor().stream_reader(raw) as stream:
                    return _read_all(stream)
            return _read_all(raw, os.fstat(raw.fileno()).st_size)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise AtlasError(path, f"compressed stream is damaged or truncated ({exc})") from None
    except OSError as exc:
        raise AtlasError(path, f"cannot read file ({exc.strerror or exc})") from None
    except Exception as exc:  # zstandard raises its own ZstdError
        if type(exc).__name__ == "ZstdError":
            raise AtlasError(path, f"zstd stream is damaged or truncated ({exc})") from None
        raise


def _gzip_size(raw: io.BufferedReader) -> int:
    """The uncompressed size from the gzip trailer (mod 2**32), 0 when unknown or impossible
    (deflate expands at most 1032×: a truncated file's last bytes are no trailer)."""
    try:
        compressed = raw.seek(0, os.SEEK_END)
        raw.seek(-4, os.SEEK_END)
        size = struct.unpack("<I", raw.read(4))[0]
    except OSError:
        compressed, size = 0, 0
    raw.seek(0)
    return size if size <= 1032 * compressed else 0


def _read_all(stream: io.BufferedIOBase | Any, size_hint: int = 0, chunk: int = 16 << 20) -> bytearray:
    """Read a stream into one buffer, preallocated when the size is known (no second copy)."""
    buffer = bytearray(max(size_hint, 0))
    filled = 0
    while True:
        if filled == len(buffer):
            buffer.extend(bytes(chunk))  # unknown or wrong size hint: grow
        with memoryview(buffer) as view:
            got = stream.readinto(view[filled:])
        if not got:
            del buffer[filled:]
            return buffer
        filled += got


def _offset_in(buffer: bytearray, raw: msgspec.Raw) -> int:
    """Where a zero-copy `msgspec.Raw` slice starts inside `buffer`."""
    inner = np.frombuffer(raw, dtype=np.uint8).__array_interface__["data"][0]
    outer = np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0]
    return inner - outer


def decode(path: Path, data: bytes | bytearray) -> RawTrace:
    """Typed decode of a trace document (object with `traceEvents`, or a bare event list)."""
    buffer = data if isinstance(data, bytearray) else bytearray(data)
    start = bytes(buffer[:64]).lstrip()
    if not start:
        raise AtlasError(path, "file is empty")
    try:
        if start[:1] == b"[":
            events = _ANY_RAW.decode(buffer)  # validates the JSON; events decode in chunks
            offset = _offset_in(buffer, events)
            return RawTrace(path, buffer, offset, offset + len(events), size_bytes=len(buffer))
        if start[:1] != b"{":
            raise AtlasError(path, "not JSON: a Chrome/Kineto trace starts with '{' or '['")
        doc = _DOCUMENT.decode(buffer)
    except msgspec.ValidationError as exc:
        raise AtlasError(path, f"not a Chrome/Kineto trace: {exc}") from None
    except msgspec.DecodeError as exc:
        problem = str(exc)
        if "truncated" in problem:
            problem = "JSON is truncated (the file ends in the middle of the trace)"
        raise AtlasError(path, f"invalid JSON: {problem}") from None
    if not doc.traceEvents:
        raise AtlasError(path, "not a Chrome/Kineto trace: the JSON object has no 'traceEvents' list")
    if bytes(memoryview(doc.traceEvents)[:1]) != b"[":
        raise AtlasError(path, "not a Chrome/Kineto trace: 'traceEvents' is not a list")
    offset = _offset_in(buffer, doc.traceEvents)
    runtime = "unknown"
    if doc.hip_runtime_version or doc.roctracer_version:
        runtime = "rocm"
    elif doc.cuda_runtime_version:
        runtime = "cuda"
    return RawTrace(
        path=path,
        buffer=buffer,
        events_start=offset,
        events_end=offset + len(memoryview(doc.traceEvents)),
        device_properties=_as_list_of_dicts(doc.deviceProperties),
        distributed_info=_as_dict(doc.distributedInfo),
        runtime=runtime,
        time_unit_ns=(doc.displayTimeUnit or "").lower() == "ns",
        size_bytes=len(buffer),
    )


def read_trace(path: str | Path) -> RawTrace:
    """Read and decode one trace file; every failure is an `AtlasError` naming the file."""
    path = Path(path)
    return decode(path, read_bytes(path))


def decode_raw(raw: msgspec.Raw | None) -> Any:
    """Decode an undecoded JSON fragment; None when absent or malformed."""
    if raw is None or not raw:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def _as_list_of_dicts(raw: msgspec.Raw | None) -> list[dict[str, Any]]:
    value = decode_raw(raw)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _as_dict(raw: msgspec.Raw | None) -> dict[str, Any]:
    value = decode_raw(raw)
    return value if isinstance(value, dict) else {}
