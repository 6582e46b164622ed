"""`atlas report OUT --overlay FILE` reads the trace as ingest read it and writes strict JSON, within
ingest's bounds (hand-built traces; what each overlay must hold is written out below).

The trace: aten::mm [0,10] ⊃ cudaLaunchKernel [2,4] → k_one_gemm [5,105] on stream 7, then an
op whose name holds a Hugging Face token at [200,205]. The 100 µs kernel is the path's longest
segment: it is flagged `gpu_compute_bound`; the token is `<redacted>` wherever it is copied."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import assert_one_line_error, cli

TOKEN = "hf_abcdefghijklmnopqrstuvwxyz012345"
REPO = Path(__file__).resolve().parents[2]


def _op(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    args = {"correlation": corr, "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}},
    _op("aten::mm", 0, 10),
    _op("cudaLaunchKernel", 2, 2, "cuda_runtime", correlation=1),
    _kernel("k_one_gemm", 5, 100, 1),
    _op(f"tokenize {TOKEN}", 200, 5),
]
# what the overlay copies of them: the same, the token redacted
COPIED = [*EVENTS[:-1], _op("tokenize <redacted>", 200, 5)]
DEVICES = [{"id": 0, "name": f"NVIDIA H100 {TOKEN}"}]
DEVICES_COPIED = [{"id": 0, "name": "NVIDIA H100 <redacted>"}]


def _document(**extra: str) -> str:
    """The trace's text; `extra`: top-level members as raw JSON text, after the events (where
    Kineto writes `displayTimeUnit`)."""
    head = json.dumps({"schemaVersion": 1, "deviceProperties": DEVICES, "traceEvents": EVENTS})[:-1]
    return head + "".join(f', "{key}": {value}' for key, value in {"displayTimeUnit": '"ms"', **extra}.items()) + "}"


def _overlay(tmp_path: Path, name: str, data: bytes) -> dict[str, Any]:
    """Ingest `data` saved as `name`, then `report --overlay` (exit 0): the overlay, read strictly."""
    trace = tmp_path / name
    trace.write_bytes(data)
    out = tmp_path / "t.atlas"
    assert cli("ingest", trace, "-o", out, "-q").code == 0
    target = tmp_path / "overlay.json"
    outcome = cli("report", out, "--overlay", target)
    assert outcome.code == 0, outcome.output
    assert "internal error" not in outcome.output
    return _strict(target.read_bytes())


def _strict(text: bytes) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _copied(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The trace's events in the overlay (its own `Critical path` process apart), their
    `critical_path` args taken out, and those args by event name."""
    events, flags = [], {}
    for event in doc["traceEvents"]:
        if event.get("pid") == "Critical path":
            continue
        args = dict(event.get("args") or {})
        if "critical_path" in args:
            flags[event["name"]] = args.pop("critical_path")
        events.append({**event, "args": args} if "args" in event else event)
    return events, flags


# --- class 1: the trace as ingest read it, whatever its name says ----------------------------------
_PLAIN = _document().encode()
_KEPT = {"schemaVersion": 1, "deviceProperties": DEVICES_COPIED, "displayTimeUnit": "ms"}
_CASES = {
    # an unread member nested 200,000 deep (ingest: "nested too deeply: ignored"): was RecursionError
    "deep_metadata": ("t.json", _document(metadata="[" * 200_000 + "]" * 200_000).encode(), _KEPT),
    "deep_distributedInfo": (
        "t.json",
        _document(distributedInfo='{"a":' * 50_000 + "1" + "}" * 50_000).encode(),
        _KEPT,
    ),
    "deep_deviceProperties": (
        "t.json",
        _PLAIN.replace(json.dumps(DEVICES).encode(), b"[" * 50_000 + b"]" * 50_000),
        {"schemaVersion": 1, "displayTimeUnit": "ms"},  # left out, as ingest ignores it
    ),
    # gzip under a .zst name: was "internal error: ZstdError"
    "gzip_named_zst": ("t.json.zst", gzip.compress(_PLAIN), _KEPT),
    # gzip under a .json name: was "not the trace this run was ingested from"
    "gzip_named_json": ("t.json", gzip.compress(_PLAIN), _KEPT),
    # plain JSON under a .gz name: was "cannot read the trace (BadGzipFile)"
    "plain_named_gz": ("t.json.gz", _PLAIN, _KEPT),
    # the JSON Array Format without its closing ']' (ingest reads it, with a warning): was JSONDecodeError
    "bare_unclosed": ("t.json", ("[" + ",\n".join(map(json.dumps, EVENTS)) + ",\n").encode(), {}),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_the_overlay_reads_the_trace_as_ingest_did(tmp_path: Path, case: str) -> None:
    name, data, kept = _CASES[case]
    doc = _overlay(tmp_path, name, data)
    events, flags = _copied(doc)
    assert events == COPIED
    assert flags["k_one_gemm"] == "gpu_compute_bound"
    assert {key: value for key, value in doc.items() if key != "traceEvents"} == kept
    assert any(e.get("pid") == "Critical path" and e["ph"] == "X" for e in doc["traceEvents"])


def test_a_trace_changed_since_the_ingest_is_still_refused_in_one_line(tmp_path: Path) -> None:
    """The size check now counts the text as ingest counted it (a gzip's uncompressed bytes)."""
    trace = tmp_path / "t.json"
    trace.write_bytes(gzip.compress(_PLAIN))
    out = tmp_path / "t.atlas"
    assert cli("ingest", trace, "-o", out, "-q").code == 0
    trace.write_bytes(gzip.compress(_PLAIN + b"\n"))  # one byte more of text
    assert_one_line_error(
        cli("report", out, "--overlay", tmp_path / "o.json"),
        "not the trace this run was ingested from",
        f"{len(_PLAIN) + 1:,} bytes of text, {len(_PLAIN):,} then",
    )
    assert not (tmp_path / "o.json").exists()


# --- class 2: bounded memory whatever the compression ratio ----------------------------------------
_PEAK = """
import resource, sys
from pathlib import Path
import pandas as pd
from kernel_atlas.analysis.overlay import write_overlay
segs = pd.read_parquet(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
write_overlay(Path(sys.argv[2]), segs, Path(sys.argv[3]))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_small_gzip_of_millions_of_entries_is_copied_within_a_bound(tmp_path: Path) -> None:
    """2,000,000 `{}` entries (6 MB of text, ~6 KB of gzip) before the events: read as one document
    and copied event by event they took ~250 MB more (8 million: 1.43 GB); streamed, next to none.
    They are no events (no `ph`) and are left out, as is an event of 1,100,000 values (ingest reads
    only its fields; the overlay would hold them all)."""
    _overlay(tmp_path, "t.json", _PLAIN)  # the path, from the small trace
    text = _PLAIN.decode()
    at = text.index('"traceEvents": [') + len('"traceEvents": [')
    huge = json.dumps(_op("huge", 300, 1, values=[0] * 1_100_000))
    bloated = tmp_path / "bloated.json.gz"
    bloated.write_bytes(gzip.compress((text[:at] + "{}," * 2_000_000 + huge + "," + text[at:]).encode(), 9))
    assert bloated.stat().st_size < 64 << 10
    target = tmp_path / "bloated_overlay.json"
    run = [sys.executable, "-c", _PEAK, tmp_path / "t.atlas" / "critical_path.parquet", bloated, target]
    done = subprocess.run(run, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 120, f"the overlay took {done.stdout.strip()} MB more"
    events, flags = _copied(_strict(target.read_bytes()))
    assert events == COPIED
    assert flags["k_one_gemm"] == "gpu_compute_bound"


# --- class 3: strict JSON ------------------------------------------------------------------------
def test_values_that_are_no_finite_number_are_written_null(tmp_path: Path) -> None:
    """NaN, ±Infinity (not JSON) and 1e400 (JSON, beyond a float) were copied as bare `NaN` and
    `Infinity`: the overlay was no JSON. Ingest drops them; the overlay writes null. An integer
    beyond 64 bits is JSON and is copied as it is."""
    odd = [
        _op("nan_dur", 20, "@NaN@"),
        _op("inf_ts", "@Infinity@", 1),
        _op("neginf_dur", 30, "@-Infinity@"),
        _op("e400_dur", 40, "@1e400@"),
        _op("odd_args", 50, 1, **{"Input Dims": [["@NaN@", 128]], "External id": "@1180591620717411303424@"}),
    ]
    devices = [{"id": 0, "name": "NVIDIA H100", "numSms": "@Infinity@", "totalGlobalMem": "@NaN@"}]
    text = json.dumps({"deviceProperties": devices, "traceEvents": EVENTS + odd})
    for literal in ("NaN", "Infinity", "-Infinity", "1e400", "1180591620717411303424"):
        text = text.replace(f'"@{literal}@"', literal)
    doc = _overlay(tmp_path, "t.json", text.encode())
    events, _ = _copied(doc)
    by_name = {e["name"]: e for e in events}
    assert by_name["nan_dur"]["dur"] is None
    assert by_name["inf_ts"]["ts"] is None
    assert by_name["neginf_dur"]["dur"] is None
    assert by_name["e400_dur"]["dur"] is None
    assert by_name["odd_args"]["args"] == {"Input Dims": [[None, 128]], "External id": 2**70}
    assert doc["deviceProperties"] == [{"id": 0, "name": "NVIDIA H100", "numSms": None, "totalGlobalMem": None}]
    assert events[: len(COPIED)] == COPIED
