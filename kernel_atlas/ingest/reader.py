"""Bytes → typed events: the only place that touches the trace file.

The trace is decoded once with msgspec into small typed structs whose `args` stay
undecoded (`msgspec.Raw`); later stages decode `args` only for the events they need.
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

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

    traceEvents: list[Event] | None = None
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


@dataclass
class RawTrace:
    """A decoded trace: events plus the few metadata fields Kernel Atlas uses."""

    path: Path
    events: list[Event]
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    runtime: str = "unknown"  # "cuda", "rocm" or "unknown"
    time_unit_ns: bool = False
    size_bytes: int = 0


def read_bytes(path: Path) -> bytes:
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
                with gzip.GzipFile(fileobj=raw) as stream:
                    return _read_all(stream)
            if magic == b"\x28\xb5\x2f\xfd":
                import zstandard

                with zstandard.ZstdDecompressor().stream_reader(raw) as stream:
                    return _read_all(stream)
            return raw.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise AtlasError(path, f"compressed stream is damaged or truncated ({exc})") from None
    except OSError as exc:
        raise AtlasError(path, f"cannot read file ({exc.strerror or exc})") from None
    except Exception as exc:  # zstandard raises its own ZstdError
        if type(exc).__name__ == "ZstdError":
            raise AtlasError(path, f"zstd stream is damaged or truncated ({exc})") from None
        raise


def _read_all(stream: io.BufferedIOBase | Any, chunk: int = 16 << 20) -> bytes:
    parts = bytearray()
    while True:
        block = stream.read(chunk)
        if not block:
            return bytes(parts)
        parts += block


def decode(path: Path, data: bytes) -> RawTrace:
    """Typed decode of a trace document (object with `traceEvents`, or a bare event list)."""
    start = data[:64].lstrip()
    if not start:
        raise AtlasError(path, "file is empty")
    try:
        if start[:1] == b"[":
            return RawTrace(path=path, events=_EVENT_LIST.decode(data), size_bytes=len(data))
        if start[:1] != b"{":
            raise AtlasError(path, "not JSON: a Chrome/Kineto trace starts with '{' or '['")
        doc = _DOCUMENT.decode(data)
    except msgspec.ValidationError as exc:
        raise AtlasError(path, f"not a Chrome/Kineto trace: {exc}") from None
    except msgspec.DecodeError as exc:
        problem = str(exc)
        if "truncated" in problem:
            problem = "JSON is truncated (the file ends in the middle of the trace)"
        raise AtlasError(path, f"invalid JSON: {problem}") from None
    if doc.traceEvents is None:
        raise AtlasError(path, "not a Chrome/Kineto trace: the JSON object has no 'traceEvents' list")
    runtime = "unknown"
    if doc.hip_runtime_version or doc.roctracer_version:
        runtime = "rocm"
    elif doc.cuda_runtime_version:
        runtime = "cuda"
    return RawTrace(
        path=path,
        events=doc.traceEvents,
        device_properties=_as_list_of_dicts(doc.deviceProperties),
        distributed_info=_as_dict(doc.distributedInfo),
        runtime=runtime,
        time_unit_ns=(doc.displayTimeUnit or "").lower() == "ns",
        size_bytes=len(data),
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
