"""`atlas report --overlay FILE`: the trace written back with its critical path, for Perfetto.

Every event of the trace is kept (what ingest skips aside: below); the ones the path runs
through get `args.critical_path` = the bound bucket of their longest path segment (matched by
name and start time); a process named `Critical path` holds one track per bucket with one slice
per segment (name, kind and bound in its args), and flow arrows join consecutive segments across
threads and streams. Values shaped
like credentials are written `<redacted>` (as in every output); of the trace's top-level fields
only the events, `displayTimeUnit`, `schemaVersion`, `deviceProperties` and `distributedInfo`
are copied. `.gz` in FILE's name compresses it.

The trace is read as ingest read it (`reader.read_trace_with`: content sniffed, never its name;
streamed in slices within ingest's bounds; what ingest skips for its nesting skipped here too),
each slice's events copied to a spool file as they come (a 24 KB gzip of 8 million entries took
1.4 GB as one document), then the document assembled around them. What is not an event — an
entry that is no object or has no `ph` — is left out; a value that is no finite number (NaN,
`1e400`) is written null: the overlay is strict JSON.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import BUCKETS
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import redact_document
from kernel_atlas.core.safe_files import atomic_file, os_problem
from kernel_atlas.ingest.events import SliceError, bad_number, python_loads, without_surrogates
from kernel_atlas.ingest.reader import read_trace_with

_PID = "Critical path"
_KEPT = ("displayTimeUnit", "schemaVersion", "deviceProperties", "distributedInfo")
_SLICE_BYTES = 1 << 20  # text decoded at once: ~3k real events; Python objects ~10x their text
# JSON values decoded at once (a value costs up to ~70 bytes as Python objects): a slice of more —
# one event holding a long list, or a run of `[]` — is decoded event by event; an event of more
# than this many values is left out (ingest reads only its fields; this would copy all of it)
_MAX_VALUES = 1 << 20
_VALUE_MARKS = np.zeros(256, bool)  # each value but the first of a container follows one of these
_VALUE_MARKS[list(b",:[{")] = True
_ANY = msgspec.json.Decoder()
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _values_in(text: bytes | bytearray | memoryview) -> int:
    """An upper bound on the JSON values in `text`, counted in steps (no copy of its size)."""
    view = np.frombuffer(text, np.uint8)
    step = 16 << 20
    return sum(int(np.count_nonzero(_VALUE_MARKS[view[i : i + step]])) for i in range(0, len(view), step)) + 1


def _loads(text: bytes | bytearray | memoryview) -> Any:
    """JSON as ingest reads it: msgspec, else Python's parser (NaN, 1e400, integers beyond 64 bits,
    lone surrogates, which are replaced). Raises `SliceError` where neither reads it (a cut the
    reader redoes) and `RecursionError` for nesting."""
    try:
        return _ANY.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        try:
            return without_surrogates(python_loads(bytes(text)), Counter())
        except (ValueError, UnicodeDecodeError):
            raise SliceError("json", str(exc)) from None


@dataclass
class _Copied:
    """One slice's events copied: `events` entries read, `text` their JSON (no brackets)."""

    events: int
    text: bytes


class _Copier:
    """The overlay's decode for the reader (`reader.Decode`) and the spool it writes to."""

    def __init__(self, bound_of: dict[tuple[str, float], str], spool: IO[bytes]):
        self.bound_of = bound_of
        self.names = {name for name, _ in bound_of}
        self.spool = spool
        self.written = False

    def decode(self, framed: bytes | bytearray | memoryview) -> list[_Copied]:
        try:
            if len(framed) <= _MAX_VALUES or _values_in(framed) <= _MAX_VALUES:
                entries = _loads(framed)
                return [_Copied(len(entries), self._copied(entries))]
            return [self._dense(_RAWS.decode(framed))]
        except RecursionError:  # the reader narrows it down to the event, then salvages or skips it
            raise SliceError("deep", "JSON nested too deeply") from None
        except msgspec.DecodeError as exc:
            raise SliceError("json", str(exc)) from None

    def _dense(self, raws: list[msgspec.Raw]) -> _Copied:
        """The events of a slice of too many values, decoded in runs of at most _MAX_VALUES."""
        texts, run, held = [], [], 0
        for raw in raws:  # once per entry, only in such a slice
            size = len(raw)
            values = size if size <= _MAX_VALUES else _values_in(raw)
            if values > _MAX_VALUES:
                continue  # no profiler writes an event this large: left out
            if held + values > _MAX_VALUES:
                texts.append(self._copied(_loads(b"[" + b",".join(run) + b"]")))
                run, held = [], 0
            run.append(bytes(raw))
            held += values
        if run:
            texts.append(self._copied(_loads(b"[" + b",".join(run) + b"]")))
        return _Copied(len(raws), b",".join(text for text in texts if text))

    def _copied(self, entries: list[Any]) -> bytes:
        """The events among `entries`, redacted and flagged, as JSON without its brackets."""
        events = redact_document([e for e in entries if isinstance(e, dict) and "ph" in e])
        for event in events:  # the trace's events, once each (this output is the whole trace)
            if event.get("ph") != "X" or str(event.get("name")) not in self.names:
                continue
            ts = event.get("ts")
            if isinstance(ts, (int, float)) and not bad_number(ts):
                bound = self.bound_of.get((str(event.get("name")), round(float(ts), 3)))
                if bound is not None:
                    args = event.get("args")
                    event["args"] = {**(args if isinstance(args, dict) else {}), "critical_path": bound}
        return msgspec.json.encode(events)[1:-1]  # NaN and infinities become null

    def write(self, part: _Copied) -> None:
        if part.text:
            self.spool.write(b"," + part.text if self.written else part.text)
            self.written = True


def _path_events(segs: pd.DataFrame) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PID, "tid": 0, "args": {"name": _PID}},
    ]
    for i, bucket in enumerate(BUCKETS):
        events.append({"ph": "M", "name": "thread_name", "pid": _PID, "tid": i, "args": {"name": bucket}})
    tid = {b: i for i, b in enumerate(BUCKETS)}
    for row in segs.itertuples(index=False):  # once per path segment (output only)
        args = {"kind": str(row.kind), "bound": str(row.bound), "rank": int(row.rank)}
        name = str(row.name) if isinstance(row.name, str) else str(row.kind)
        slice_ = {"ph": "X", "cat": "critical_path", "name": name, "pid": _PID, "tid": tid[str(row.bound)]}
        events.append({**slice_, "ts": float(row.start_us), "dur": float(row.dur_us), "args": args})
    for i, (a, b) in enumerate(zip(segs.itertuples(index=False), segs.iloc[1:].itertuples(index=False), strict=False)):
        if a.bound != b.bound:
            flow = {"cat": "critical_path", "name": "critical path", "pid": _PID, "id": i, "bp": "e"}
            events.append({**flow, "ph": "s", "tid": tid[str(a.bound)], "ts": float(a.start_us + a.dur_us)})
            events.append({**flow, "ph": "f", "tid": tid[str(b.bound)], "ts": float(b.start_us)})
    return events


def write_overlay(trace: Path, segs: pd.DataFrame, target: Path, size: int | None = None) -> Path:
    """Write the overlay of `segs` (the critical path's segments) on `trace` to `target`; `size`:
    the trace's text as ingested (its uncompressed bytes), refused where its text is now of
    another size: a trace profiled again under the name is not the one the path was found in."""
    flagged = segs.dropna(subset=["event_ts_us"]).sort_values("dur_us")
    bound_of = {(str(r.name), round(float(r.event_ts_us), 3)): str(r.bound) for r in flagged.itertuples(index=False)}
    try:
        with tempfile.TemporaryFile() as spool:
            copier = _Copier(bound_of, spool)
            info, members = read_trace_with(trace, copier.decode, copier.write, _SLICE_BYTES, _KEPT)
            if size is not None and info.size_bytes != size:
                raise AtlasError(
                    trace,
                    f"not the trace this run was ingested from ({info.size_bytes:,} bytes of text, {size:,} then)",
                )
            kept = redact_document({k: members[k] for k in _KEPT if members.get(k) is not None})
            head = msgspec.json.encode(kept)[:-1] + (b"," if kept else b"") + b'"traceEvents":['
            path = msgspec.json.encode(_path_events(segs))[1:-1]
            with atomic_file(target) as handle:
                sink = gzip.GzipFile(fileobj=handle, mode="wb") if target.name.endswith(".gz") else handle
                sink.write(head)
                spool.seek(0)
                shutil.copyfileobj(spool, sink, 1 << 20)
                sink.write((b"," if copier.written and path else b"") + path + b"]}")
                if sink is not handle:
                    sink.close()
    except OSError as exc:  # the spool (the target's own errors are atomic_file's)
        raise AtlasError(target, f"cannot write: {os_problem(exc)}") from None
    return target


def overlay_for_report(report: Any, target: Path, trace: Path | None) -> Path:
    """`atlas report --overlay FILE`: the overlay of the report's critical path on its trace (the
    given one, else the trace named in summary.json found next to the output folder). For a
    joint path of several ranks, the segments of the path's first rank."""
    from kernel_atlas.store.outputs import check_named_output, open_output, read_parquet

    segs = read_parquet(report.out_dir / "critical_path.parquet")
    facts = report.analysis.facts.get("critical_path", {})
    rank = facts.get("rank")
    if rank is None and len(segs):
        rank = int(segs["rank"].min())
    traces = [t for t in open_output(report.out_dir).summary.get("traces", []) if isinstance(t, dict)]
    if trace is None:
        names = [t["file"] for t in traces if t.get("rank") == rank]
        found = [report.out_dir.parent / n for n in names if (report.out_dir.parent / n).is_file()]
        if not found:
            raise AtlasError(report.out_dir, "--overlay needs the trace: give the trace file to `atlas report`")
        trace = found[0]
    # the path's times are the ingested trace's: a file re-profiled under its name got the old path
    recorded = [t.get("size_bytes") for t in traces if t.get("file") == trace.name and t.get("rank") == rank]
    size = recorded[0] if recorded and isinstance(recorded[0], int) and recorded[0] > 0 else None
    check_named_output(target, "--overlay", reads=[trace])  # the trace found here: never replaced by its copy
    return write_overlay(trace, segs[segs["rank"] == rank] if rank is not None else segs, target, size)
