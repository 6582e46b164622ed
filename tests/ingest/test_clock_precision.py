"""Launches of no length after rounding, and starts a double cannot hold (stop 58's campaign):
at an epoch-scale start (1.733e15 µs) doubles are 0.25 µs apart, so a 0.05 µs launch ends where it
starts. It was dropped from host_events (its kernels lost their launch on the critical path: the
path 189.5 µs for 198.972) and, nested in the launch before it, named `cudaLaunchKernel` its
kernels' launcher."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import coarse_starts

BASE = 1_733_000_000_000_000


def _trace(base: float) -> dict:
    """step [0, 40] ⊃ four launches of 0.05 µs at 1, 1.25, 1.5, 1.75 µs (ends 1.05 … 1.8: at the epoch
    base each rounds onto the next one's start) → kernels of 1.3 µs from 10 µs, 2 µs apart."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "step", "pid": 1, "tid": 1, "ts": base, "dur": 40}]
    for i in range(4):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": base + 1 + 0.25 * i,
                "dur": 0.05,
                "args": {"correlation": i + 1},
            }
        )
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": base + 10 + 2 * i,
                       "dur": 1.3, "args": {"correlation": i + 1, "device": 0, "stream": 7}})  # fmt: skip
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}


def _ingest(tmp_path: Path, base: float) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    trace = tmp_path / f"t{int(base > 0)}.json"
    trace.write_text(json.dumps(_trace(base)))
    out = tmp_path / f"out{int(base > 0)}"
    result = CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return pd.read_parquet(out / "kernels.parquet"), load_host_events(out, 0), result.output


def test_launches_rounded_to_no_length_keep_their_kernels(tmp_path: Path) -> None:
    for base in (0.0, float(BASE)):
        kernels, host, _ = _ingest(tmp_path, base)
        assert kernels["launcher"].tolist() == ["step"] * 4  # never the runtime call before it
        assert (host["kind"] == "runtime").sum() == 4  # each launch kept, whatever its length
        assert kernels["link"].eq("correlation").all()


def test_epoch_starts_finer_than_a_double_holds_are_said(tmp_path: Path) -> None:
    *_, said = _ingest(tmp_path, float(BASE))
    assert "hold only multiples of 0.25 µs" in said
    *_, quiet = _ingest(tmp_path, 0.0)
    assert "hold only multiples" not in quiet
    # integer microseconds at the epoch (older Kineto): whole durations, nothing lost, nothing said
    ts = pd.Series([BASE + 0.0, BASE + 7.0]).to_numpy()
    assert coarse_starts(ts, pd.Series([3.0, 12.0]).to_numpy()) is None
    assert coarse_starts(ts, pd.Series([3.0, 1.3]).to_numpy()) is not None
