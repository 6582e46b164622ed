"""A kernel started by hipExtModuleLaunchKernel records its global work size (work-items) as its
grid, not its blocks (campaigns AI 1, AJ 10): its blocks are ⌈grid / block⌉ per axis. Values by
hand: 4 workgroups of 256 on a 304-CU MI300X are 4/304 blocks per CU, however they were launched."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.support.hostile import cli
from tests.support.traces import trace_path

MI300X = {
    "id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4, "numSms": 304,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 131072,
    "warpSize": 64, "sharedMemPerBlock": 65536, "maxSharedMemoryPerMultiProcessor": 65536,
}  # fmt: skip


def _launch(api: str, kernel: str, ts: int, corr: int, ext: int, op: str, dims: list, grid: list) -> list[dict]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": ts, "dur": 50,
         "args": {"External id": ext, "Input Dims": dims, "Input type": ["float"] * len(dims)}},
        {"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": 1, "ts": ts + 10, "dur": 5,
         "args": {"correlation": corr, "External id": ext}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 0, "ts": ts + 20, "dur": 100,
         "args": {"device": 0, "stream": 0, "correlation": corr, "External id": ext, "grid": grid, "block": [256, 1, 1]}},
    ]  # fmt: skip


def test_work_item_grids_are_read_as_blocks_of_their_block(tmp_path: Path) -> None:
    events = [
        # 1024 work-items in workgroups of 256: 4 blocks
        *_launch("hipExtModuleLaunchKernel", "Cijk_Alik_Bljk_SB_MT32x32x64_MI16x16x1", 0, 100, 1, "aten::mm",
                 [[64, 4096], [4096, 128]], [1024, 1, 1]),
        # a grid in blocks: 4 blocks
        *_launch("hipLaunchKernel", "vectorized_elementwise_kernel", 200, 101, 2, "aten::add", [[1024], [1024]], [4, 1, 1]),
        # 1000 work-items of 256: ⌈1000 / 256⌉ = 4 blocks (the last one partial)
        *_launch("hipExtModuleLaunchKernel", "Cijk_Alik_Bljk_SB_MT32x32x64_MI16x16x1", 400, 102, 3, "aten::mm",
                 [[64, 4096], [4096, 128]], [1000, 1, 1]),
    ]  # fmt: skip
    # a launch of the same call that recorded no grid: no blocks (mi250_minitoy_train has such kernels)
    gridless = _launch("hipExtModuleLaunchKernel", "Cijk_Alik_Bljk_SB_MT32x32x64_MI16x16x1", 600, 103, 4, "aten::mm",
                       [[64, 4096], [4096, 128]], [1024, 1, 1])  # fmt: skip
    del gridless[2]["args"]["grid"]
    events += gridless
    trace = tmp_path / "rocm.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [MI300X]}))
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    kernels = pd.read_parquet(tmp_path / "run" / "kernels.parquet").sort_values("ts_us")
    assert list(kernels["launch"]) == ["hipExtModuleLaunchKernel", "hipLaunchKernel"] + ["hipExtModuleLaunchKernel"] * 2
    assert kernels["blocks_per_sm"].tolist()[:3] == pytest.approx([4 / 304] * 3)
    # 256 threads = 4 waves of 64 a block, 32 waves a CU: at most 8 blocks a CU — 4 / (304 · 8) waves
    assert kernels["waves"].tolist()[:3] == pytest.approx([4 / (304 * 8)] * 3)
    assert pd.isna(kernels["blocks_per_sm"].iloc[3]) and pd.isna(kernels["waves"].iloc[3])


def test_the_llama_block_gemms_fill_their_tiles(tmp_path: Path) -> None:
    trace = trace_path("mi300x_torch_compile_llama_block")
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    kernels = pd.read_parquet(tmp_path / "run" / "kernels.parquet")
    # mm [32768, 2048] × [2048, 2048] in 256 × 192 tiles: ⌈2048/256⌉ · ⌈32768/192⌉ = 8 · 171 = 1,368
    # workgroups, recorded as grid [350208, 1, 1] (1,368 · 256 work-items): 4.5 a CU of 304
    gemm = kernels[kernels["grid"].astype(str).str.contains("350208")]
    assert len(gemm) and (gemm["launch"] == "hipExtModuleLaunchKernel").all()
    assert gemm["blocks_per_sm"].tolist() == pytest.approx([1368 / 304] * len(gemm))
