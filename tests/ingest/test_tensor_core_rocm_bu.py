"""Campaign BU class 2: MIOpen's assembly implicit-GEMM convolutions on xdlops (`igemm_*_gtcx*`)
and Composable Kernel's `xdl` kernels run on matrix cores (MFMA); their names say so, as
Tensile's `_MI16x16x` do. On mi210_gpu_only 59 gtcx2 kernels (1,620.6 µs, 30.3 % of its kernel
time) had read "unknown". MIOpen's non-xdlops `igemm_*_gtc_` kernels say nothing of it."""

from __future__ import annotations

from pathlib import Path

from tests.ingest.test_tensor_core_told import _device, _trace

GTCX2 = "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt128x128x32_wt64x16x4_ws1x1_wr2x2_ta1x8x4x1_1x4x1x64_tb1x8x2x1_1x4x1x64"
GTCX3 = "igemm_wrw_gtcx3_nhwc_fp16_bx0_ex1_bt256x256x32_wt32x32x8_ws2x2_wr2x2_ta1x4x4x1_1x8x1x32_gkgs"
CK = "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<float, float>, true, 1>(float*)"
GTC = "igemm_fwd_gtc_nchw_fp32_bx0_ex1_bt128x128x8_tb4x2x1x1_16x1x16x1_gkgs"  # no xdlops


def test_xdlops_names_say_matrix_cores(tmp_path: Path) -> None:
    """No dtypes recorded: the three xdlops kernels (10 µs each) are tensor-core work by name; the
    non-xdlops gtc convolution (10 µs) says nothing and its op recorded no dtype: unknown. By hand
    30 of the 30 known µs on matrix cores, 10 of 40 µs unknown (25 %)."""
    kernels = [
        ("aten::miopen_convolution", GTCX2, 10.0),
        ("aten::convolution_backward", GTCX3, 10.0),
        ("aten::mm", CK, 10.0),
        ("aten::miopen_convolution", GTC, 10.0),
    ]
    frame, device = _device(_trace(tmp_path / "xdl.json", kernels, types=False))
    assert frame["tensor_core"].tolist()[:3] == [True, True, True]
    assert frame["tensor_core"].isna().tolist() == [False, False, False, True]
    assert device["tensor_core_time_pct"] == 100.0
    assert device["tensor_core_unknown_pct"] == 25.0
