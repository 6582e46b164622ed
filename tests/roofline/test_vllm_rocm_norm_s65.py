"""vLLM on ROCm runs its fused-add RMSNorm as `aiter::rmsnorm2d_fwd_with_add_ck(out, input,
residual_in, residual_out, weight, epsilon, use_model_sensitive_rmsnorm)` — an out-variant whose
`out` and `residual_out` are written, not read (campaign AT 4: it was costed as five tensors read
plus one output, 927,360 B, and 3 FLOP an element, the add missed)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

MI300X = {"id": 2, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992, "computeMajor": 9}
MI300X |= {"computeMinor": 4, "numSms": 304, "warpSize": 64}
# the ck_tile fused-add RMSNorm kernel of TraceLens's vllm_decode_full trace (name cut: any will do)
KERNEL = "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassE"


def test_the_out_variant_writes_out_and_residual_out(tmp_path: Path) -> None:
    dims = [[32, 2880], [32, 2880], [32, 2880], [32, 2880], [2880], [], []]
    types = ["c10::BFloat16"] * 5 + ["Scalar", "Scalar"]
    op_args = {"External id": 1, "Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * 5 + ["1e-05", ""]}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aiter::rmsnorm2d_fwd_with_add_ck", "pid": 1, "tid": 1}
        | {"ts": 100, "dur": 10, "args": op_args},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipModuleLaunchKernel", "pid": 1, "tid": 1, "ts": 102, "dur": 4}
        | {"args": {"External id": 1, "correlation": 10}},
        {"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 2, "tid": 0, "ts": 110, "dur": 5}
        | {"args": {"External id": 1, "correlation": 10, "device": 2, "stream": 0, "grid": [32, 1, 1]}},
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [MI300X]}))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    row = pd.read_parquet(out / "roofline.parquet").iloc[0]
    # 32·2880 = 92,160 elements of bf16 (2 B): input, residual_in read (2 · 184,320 B), weight read
    # (2880 · 2 = 5,760 B), out and residual_out written (2 · 184,320 B): 743,040 B — what TraceLens's
    # RMSNorm table gives this call; FLOPs 4 an element (rms_norm 3 + the fused add 1): 368,640
    assert row["bytes"] == 4 * 92_160 * 2 + 2_880 * 2 == 743_040
    assert row["flops"] == 4 * 92_160 == 368_640
