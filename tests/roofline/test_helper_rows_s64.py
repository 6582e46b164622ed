"""A call's helper kernels stand for no call: their roofline row holds their own time, not the call's
once per helper (campaign AH 13: one 120 µs convolution call with two 10 µs layout transforms made a
helper row of 240 µs, and a table's op time summed past the run's GPU time)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.support.hostile import cli

NCHW = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>"
    "(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)"
)
CONV = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_execute_kernel_cudnn"


def test_helper_rows_hold_their_own_time(tmp_path: Path) -> None:
    conv_args = {
        "External id": 5,
        "Input Dims": [[4, 3, 224, 224], [768, 3, 16, 16], [], [], [], [], [], [], []],
        "Input type": [
            "float",
            "float",
            "ScalarList",
            "ScalarList",
            "ScalarList",
            "Scalar",
            "Scalar",
            "Scalar",
            "Scalar",
        ],
        "Concrete Inputs": ["", "", "[0, 0]", "[16, 16]", "[1, 1]", "1", "False", "False", "True"],
    }
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::cudnn_convolution",
            "pid": 1,
            "tid": 1,
            "ts": 9900,
            "dur": 50,
            "args": conv_args,
        }
    ]
    for corr, (name, ts, dur) in enumerate([(NCHW, 10000, 10.0), (NCHW, 10010, 10.0), (CONV, 10020, 100.0)], start=50):
        ids = {"correlation": corr, "External id": 5}
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 9901 + 5 * (corr - 50), "dur": 4, "args": ids},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {**ids, "device": 0, "stream": 7}},
        ]  # fmt: skip
    props = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132}
    trace = tmp_path / "conv.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [props]}))
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    assert cli("report", tmp_path / "run").code == 0
    roofline = pd.read_parquet(tmp_path / "run" / "roofline.parquet").set_index("role")
    # the call: 10 + 10 + 100 = 120 µs on its main (convolution) row
    assert roofline.loc["main", "op_time_us"] == 120.0 and roofline.loc["main", "count"] == 1
    # the two transforms: 2 kernels, 20 µs — not 2 × 120
    assert roofline.loc["helper", "count"] == 2
    assert roofline.loc["helper", "total_us"] == 20.0 and roofline.loc["helper", "op_time_us"] == 20.0
    # (the run is 120 µs of GPU time: the table adds the helpers once more, never the call twice)
    assert roofline["op_time_us"].sum() == 140.0
