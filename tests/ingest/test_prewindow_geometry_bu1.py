"""A ROCm kernel launched before the window takes the grid and block of its name's linked kernels
(docs/costs.md "Kernels launched before the profiling window"; campaign BU 3): it had borrowed the
shapes but kept no grid/block, so no occupancy, waves or SM-efficiency blocks. Where those kernels
were launched by hipExtModuleLaunchKernel their grid counts work-items, and so does the borrowed
one (256 blocks, not 65,536). Values by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest.pipeline import ingest_trace

MI300X = {
    "id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992, "computeMajor": 9, "computeMinor": 4,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 64,
    "sharedMemPerBlock": 65536, "numSms": 304, "maxSharedMemoryPerMultiProcessor": 65536,
}  # fmt: skip
GEMM = "Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16_SN_WG32_8_1"


def _trace(tmp_path: Path, api: str, grid: list[int]) -> Path:
    """ROCm 6.2: grid and block only on the launch. Two aten::mm → `api` → GEMM in the window, and
    one GEMM before it (correlation 5: no runtime call)."""
    events: list[dict] = [
        {"ph": "X", "cat": "kernel", "name": GEMM, "pid": 2, "tid": 0, "ts": 1000.0, "dur": 10.0,
         "args": {"External id": 3, "device": 2, "stream": 0, "correlation": 5, "kind": "Dispatch Kernel"}}
    ]  # fmt: skip
    for i, t0 in enumerate([1100.0, 1300.0]):
        ext, corr = 10 + i, 20 + i
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": t0, "dur": 50.0,
             "args": {"External id": ext, "Input Dims": [[4096, 4096], [4096, 4096]],
                      "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 100, "tid": 100, "ts": t0 + 10, "dur": 5.0,
             "args": {"External id": ext, "correlation": corr, "kernel": GEMM, "grid": grid, "block": [256, 1, 1],
                      "shared memory": 0}},
            {"ph": "X", "cat": "kernel", "name": GEMM, "pid": 2, "tid": 0, "ts": t0 + 20, "dur": 10.0,
             "args": {"External id": ext, "device": 2, "stream": 0, "correlation": corr, "kind": "Dispatch Kernel"}},
        ]  # fmt: skip
    path = tmp_path / "rocm.json"
    doc = {"schemaVersion": 1, "deviceProperties": [MI300X], "record_shapes": 1, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("api", "grid"),
    [
        ("hipExtModuleLaunchKernel", [65536, 1, 1]),  # work-items: ⌈65536 / 256⌉ = 256 blocks
        ("hipLaunchKernel", [256, 1, 1]),  # blocks: 256
    ],
)
def test_pre_window_kernel_takes_its_names_grid_and_block(tmp_path: Path, api: str, grid: list[int]) -> None:
    frame = ingest_trace(_trace(tmp_path, api, grid)).frame
    row = frame[frame["correlation"] == 5].iloc[0]
    assert row["link"] == "inferred: same kernel, grid and block" and bool(row["shapes_inferred"])
    assert pd.isna(row["launch"])  # its launch is still not in the trace
    assert json.loads(row["grid"]) == grid and json.loads(row["block"]) == [256, 1, 1]
    # 256 blocks on 304 CUs; 256 threads = 4 waves of 64, 32 a CU → 8 fit; 0.842 · 256 / 2048
    assert row["blocks_per_sm"] == pytest.approx(256 / 304)
    assert row["waves"] == pytest.approx(256 / 304 / 8)
    assert row["est_occupancy_pct"] == pytest.approx(100 * (256 / 304) * 256 / 2048)
    launched = frame[frame["correlation"] == 20].iloc[0]  # as the linked kernels of its name
    assert row["blocks_per_sm"] == launched["blocks_per_sm"]
