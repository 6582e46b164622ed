"""`atlas report --overlay FILE`: the trace written back with its critical path, for Perfetto.

Every event of the trace is kept; the ones the path runs through get `args.critical_path` = the
bound bucket of their longest path segment (matched by name and start time); a process named
`Critical path` holds one track per bucket with one slice per segment (name, kind and bound in
its args), and flow arrows join consecutive segments across threads and streams. Values shaped
like credentials are written `<redacted>` (as in every output); of the trace's top-level fields
only the events, `displayTimeUnit`, `schemaVersion`, `deviceProperties` and `distributedInfo`
are copied. `.gz` in FILE's name compresses it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.analysis.critical_path import BUCKETS
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import redact_value
from kernel_atlas.core.safe_files import atomic_file

_PID = "Critical path"
_KEPT = ("displayTimeUnit", "schemaVersion", "deviceProperties", "distributedInfo")


def _read_trace(path: Path, size: int | None = None) -> Any:
    """The trace's JSON document; with `size` (its text's, as ingest recorded it), refused where
    its text is of another size: a trace profiled again under the name is not the one the path
    was found in."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                text = handle.read()
        elif path.name.endswith(".zst"):
            import zstandard

            with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as handle:
                text = handle.read()
        else:
            text = path.read_bytes()
        if size is not None and len(text) != size:
            raise AtlasError(
                path, f"not the trace this run was ingested from ({len(text):,} bytes of text, {size:,} then)"
            )
        return json.loads(text)
    except (OSError, ValueError, EOFError) as exc:
        raise AtlasError(path, f"cannot read the trace for the overlay ({type(exc).__name__})") from None


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
    the trace's text as ingested (see `_read_trace`)."""
    doc = _read_trace(trace, size)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise AtlasError(trace, "not a trace (no traceEvents list): cannot write the overlay")
    flagged = segs.dropna(subset=["event_ts_us"]).sort_values("dur_us")
    bound_of = {(str(r.name), round(float(r.event_ts_us), 3)): str(r.bound) for r in flagged.itertuples(index=False)}
    out = []
    for event in events:  # the trace's events, once each (this output is the whole trace)
        if not isinstance(event, dict):
            continue
        event = redact_value(event)
        key = (
            (str(event.get("name")), round(float(event["ts"]), 3))
            if isinstance(event.get("ts"), (int, float))
            else None
        )
        if key in bound_of and event.get("ph") == "X":
            event["args"] = {**(event.get("args") or {}), "critical_path": bound_of[key]}
        out.append(event)
    kept = {k: redact_value(doc[k]) for k in _KEPT if isinstance(doc, dict) and k in doc}
    document = {**kept, "traceEvents": out + _path_events(segs)}
    opener = gzip.open if target.name.endswith(".gz") else open
    with atomic_file(target) as handle:
        if opener is gzip.open:
            with gzip.GzipFile(fileobj=handle, mode="wb") as zipped:
                zipped.write(json.dumps(document).encode())
        else:
            handle.write(json.dumps(document).encode())
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
