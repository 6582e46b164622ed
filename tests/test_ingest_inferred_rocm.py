"""ROCm writes grid/block on a kernel only when its launch is in the trace: a kernel launched
before the window has none, and borrows the one signature of its name when every linked kernel
of that name has one grid and block (hand-built traces)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from kernel_atlas.ingest.infer import WHY_NO_GEOMETRY
from kernel_atlas.ingest.pipeline import ingest_trace


def _trace(tmp_path: Path, second_grid: list[int]) -> Path:
    events: list[dict] = []
    for i, grid in enumerate(([64, 1, 1], second_grid)):
        ts = 100.0 + 50 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 20,
                "args": {
                    "External id": 10 + i,
                    "Input Dims": [[64, 32], [32, 16]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 3,
                "args": {"External id": 10 + i, "correlation": 500 + i},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "Cijk_gemm",
                "pid": 2,
                "tid": 0,
                "ts": 1000.0 + 50 * i,
                "dur": 10,
                "args": {"device": 0, "stream": 0, "correlation": 500 + i, "grid": grid, "block": [256, 1, 1]},
            },
        ]
    # launched before the window: its runtime event is absent, and ROCm wrote no grid/block
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "Cijk_gemm",
            "pid": 2,
            "tid": 0,
            "ts": 900.0,
            "dur": 10,
            "args": {"device": 0, "stream": 0, "correlation": 400},
        }
    )
    path = tmp_path / "rocm.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}]}, handle)
    return path


def test_pre_window_kernel_without_geometry_borrows_by_name(tmp_path: Path) -> None:
    result = ingest_trace(_trace(tmp_path, [64, 1, 1]))
    row = result.frame[result.frame["correlation"] == 400].iloc[0]
    assert bool(row["shapes_inferred"]) and row["launcher"] == "aten::mm"
    assert json.loads(row["input_dims"]) == [[64, 32], [32, 16]]


def test_not_when_the_name_runs_with_several_grids(tmp_path: Path) -> None:
    result = ingest_trace(_trace(tmp_path, [128, 1, 1]))
    row = result.frame[result.frame["correlation"] == 400].iloc[0]
    assert not bool(row["shapes_inferred"]) and pd.isna(row["input_dims"])
    assert result.facts["shapes_inferred"]["not_inferred"] == {WHY_NO_GEOMETRY: 1}
