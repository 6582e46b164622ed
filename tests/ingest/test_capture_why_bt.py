"""Campaign BT class 5: a ROCm capture names every launch's kernel (`args.kernel`), so a replayed
graph it cannot place is unmatched because no captured graph has the same kernels — not because
"kernel count differs and the capture records no kernel names", which it had said with as many
captured launches as replayed kernels. Traces written here; the reasons written out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.ingest.capture import read_captures
from kernel_atlas.ingest.pipeline import ingest_trace

NO_FIT = "no captured graph has the same kernels"
MI300X = {"id": 0, "name": "AMD Instinct MI300X", "numSms": 304}
TYPES = {"Input Dims": [[64, 256], [64, 256]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}


def _x(cat: str, name: str, ts: float, dur: float, args: dict[str, Any], pid: int = 1, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _capture(path: Path, launches: list[tuple[str, str]]) -> Path:
    """One hipStreamBeginCapture … hipStreamEndCapture: each (op, kernel) an op whose
    hipLaunchKernel names its kernel."""
    events = [_x("cuda_runtime", "hipStreamBeginCapture", 1000, 5, {"correlation": 1})]
    for i, (op, kernel) in enumerate(launches):
        ts, ext = 1020 + 20 * i, 50 + i
        events.append(_x("cpu_op", op, ts, 15, {"External id": ext, **TYPES}))
        events.append(
            _x(
                "cuda_runtime",
                "hipLaunchKernel",
                ts + 2,
                5,
                {"correlation": 2 + i, "External id": ext, "kernel": kernel},
            )
        )
    events.append(_x("cuda_runtime", "hipStreamEndCapture", 1020 + 20 * len(launches), 5, {"correlation": 90}))
    path.write_text(json.dumps({"deviceProperties": [MI300X], "record_shapes": 1, "traceEvents": events}))
    return path


def _replay(path: Path, kernels: list[str]) -> Path:
    """One hipGraphLaunch (correlation 900) of these kernels, 10 µs each, back to back on stream 7."""
    events = [_x("cuda_runtime", "hipGraphLaunch", 110, 5, {"correlation": 900})]
    for i, kernel in enumerate(kernels):
        args = {"correlation": 900, "device": 0, "stream": 7, "grid": [16, 1, 1], "block": [128, 1, 1]}
        events.append(_x("kernel", kernel, 140 + 10 * i, 10, args, pid=0, tid=7))
    path.write_text(json.dumps({"deviceProperties": [MI300X], "record_shapes": 1, "traceEvents": events}))
    return path


@pytest.mark.parametrize(
    "replayed",
    [
        ["Cijk_B", "kadd_B"],  # as many replayed kernels as captured launches (2 = 2), other names
        ["Cijk_B"],  # one fewer: 3 edits, within the 4 tolerated, and still no name in common
    ],
)
def test_a_named_capture_of_other_kernels_says_they_differ(tmp_path: Path, replayed: list[str]) -> None:
    captured = _capture(tmp_path / "capture.json", [("aten::mm", "Cijk_A"), ("aten::add", "kadd_A")])
    captures, _ = read_captures([captured])
    result = ingest_trace(_replay(tmp_path / "replay.json", replayed), captures=captures, workers=1)
    graphs = result.facts["graphs"]
    assert (graphs["launches"], graphs["matched"], graphs["unmatched"]) == (1, 0, {NO_FIT: 1})
    note = f"replayed from a CUDA/HIP graph that matched no captured graph: {NO_FIT}"
    assert result.frame["link"].astype(str).tolist() == [note] * len(replayed)
    assert not [w for w in result.warnings if "records no kernel names" in w]


def test_a_named_capture_of_the_same_kernels_matches(tmp_path: Path) -> None:
    """The same capture and a replay of its own kernels: matched, each kernel given its op."""
    captured = _capture(tmp_path / "capture.json", [("aten::mm", "Cijk_A"), ("aten::add", "kadd_A")])
    captures, _ = read_captures([captured])
    result = ingest_trace(_replay(tmp_path / "replay.json", ["Cijk_A", "kadd_A"]), captures=captures, workers=1)
    assert (result.facts["graphs"]["matched"], result.facts["graphs"]["unmatched"]) == (1, {})
    assert result.frame.sort_values("ts_us")["launcher"].astype(str).tolist() == ["aten::mm", "aten::add"]
