"""Inductor's Triton kernels and AMD fp32 GEMMs (campaigns AJ and AI, stop 64). Every value below
was worked out by hand from the recorded `Input Dims`/`Input type`, never with the cost formulas.

Inductor's record of a Triton launch (the CPU op named after the kernel) records every kernel
argument in Inductor's order: in_out_ptr* (read and written), in_ptr* (read), out_ptr* (written),
then the size scalars (xnumel, r0_numel). Its outputs are among the recorded tensors: each is
counted once and no output is added on top (one was: +50 % bytes); the trace does not say which
argument is written, so the cost is an estimate (an in_out_ptr's write is not counted).

* relu(in_ptr0 [2^20], out_ptr0 [2^20]) bf16: 2,097,152 read + 2,097,152 written = 4,194,304 B
  (was 6,291,456). relu(in_out_ptr0 [2^20]): the one tensor read and written = 4,194,304 B.
* RMSNorm x [1024,1024], w [1024], out [1024,1024] bf16: 2,097,152 + 2,048 + 2,097,152 = 4,196,352 B.
* softmax x [4096,1024], out [4096,1024] bf16: 8,388,608 · 2 = 16,777,216 B.
* a100_triton_compile_tiny `triton_poi_fused_add_cos_sin_0`: 3 × [10,10] fp32 = 3 · 400 = 1,200 B.
* mi300x_torch_compile_llama_block `triton_red_fused_add_mean_mul_pow_rsqrt_0`: x [8,4096,2048],
  w [2048], out [8,4096,2048] bf16: 134,217,728 + 4,096 + 134,217,728 = 268,439,552 B; in its
  77.074 µs at 5.3 TB/s: 268,439,552 / 5.3e12 = 50.649 µs → SOL 65.71 % (was 98.6 %).
* Reductions (xnumel was read as the reduced axis): sum x [4096,1024] → out [4096]: 8,388,608 +
  8,192 = 8,396,800 B; add+sum a, b [4096,1024] → [4096]: 2 · 8,388,608 + 8,192 = 16,785,408 B;
  mean x [8,512,1024] → [8,512,1] = 8,388,608 + 8,192 = 8,396,800 B.
* Template GEMMs: mm [4096,4096] × [4096,4096] → [4096,4096] bf16: 2·4096³ = 137,438,953,472 FLOP,
  3 · 33,554,432 = 100,663,296 B; addmm with bias [4096]: + 8,192 = 100,671,488 B; bmm
  [8,512,256] × [8,256,512] → [8,512,512]: 2·8·512·512·256 = 1,073,741,824 FLOP, 2,097,152 +
  2,097,152 + 4,194,304 = 8,388,608 B.
* fp32 mm 4096³ on MI210 in 6000 µs: 137,438,953,472 / 6e-3 s = 22.906 TFLOP/s; against the fp32
  matrix (MFMA) peak 45.3: SOL 50.57 % (was 101.4 % against the fp32 vector 22.6).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.core.devices import load_devices
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.analysis import ESTIMATE_WORDS
from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from tests.support.traces import trace_path

BF16, FP32, DOUBLE = "c10::BFloat16", "float", "double"
N = 1 << 20


def _call(launcher: str, op: str, rule: str, tensors: list[tuple[list[int], str]], sizes: tuple[int, ...] = ()):
    """An Inductor-style call: the tensors, then the size scalars (xnumel, r0_numel)."""
    dims = [d for d, _ in tensors] + [[] for _ in sizes]
    types = [t for _, t in tensors] + ["Scalar"] * len(sizes)
    concrete = [""] * len(tensors) + [str(s) for s in sizes]
    return Call(launcher, op, parse_call(json.dumps(dims), json.dumps(types), None, json.dumps(concrete)), rule)


def _estimate(formula: str) -> bool:
    return re.search(ESTIMATE_WORDS, formula) is not None


# --- A: Inductor pointwise, norm and softmax kernels ----------------------------------------------


def test_inductor_out_ptr_is_written_once_not_read_and_written_again() -> None:
    cost = cost_of(_call("triton_poi_fused_relu_0", "relu", "rule:inductor-activation", [([N], BF16)] * 2, (N,)))
    assert cost.bytes == 2_097_152 + 2_097_152 == 4_194_304
    assert cost.flops == N
    assert _estimate(cost.formula)  # which argument is written is not recorded


def test_inductor_single_in_out_ptr_is_read_and_written() -> None:
    cost = cost_of(_call("triton_poi_fused_relu_1", "relu", "rule:inductor-activation", [([N], BF16)], (N,)))
    assert cost.bytes == 4_194_304
    assert not _estimate(cost.formula)


def test_inductor_norm_and_softmax_count_each_argument_once() -> None:
    rms = [([1024, 1024], BF16), ([1024], BF16), ([1024, 1024], BF16)]
    cost = cost_of(_call("triton_red_fused_add_mean_mul_pow_rsqrt_2", "rms_norm", "rule:inductor-rms-norm", rms))
    assert cost.bytes == 2_097_152 + 2_048 + 2_097_152 == 4_196_352
    softmax = [([4096, 1024], BF16)] * 2
    cost = cost_of(_call("triton_per_fused__softmax_3", "softmax", "rule:inductor-softmax", softmax, (4096, 1024)))
    assert cost.bytes == 16_777_216
    assert _estimate(cost.formula)


def test_aten_pointwise_still_writes_its_output() -> None:
    # aten::relu(self) records its input only: read 2,097,152 + output written 2,097,152
    cost = cost_of(_call("aten::relu", "relu", "rule:aten-clamp", [([N], BF16)]))
    assert cost.bytes == 4_194_304
    assert not _estimate(cost.formula)


# --- B: Inductor reductions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "op", "tensors", "expected"),
    [
        ("triton_per_fused_sum_0", "sum", [[4096, 1024], [4096]], 8_388_608 + 8_192),
        ("triton_red_fused_add_sum_1", "sum", [[4096, 1024], [4096, 1024], [4096]], 2 * 8_388_608 + 8_192),
        ("triton_red_fused_mean_2", "mean", [[8, 512, 1024], [8, 512, 1]], 8_388_608 + 8_192),
    ],
)
def test_inductor_reduction_reads_every_tensor_once_and_no_xnumel_axis(name, op, tensors, expected) -> None:
    call = _call(name, op, "rule:inductor-reduction", [(d, BF16) for d in tensors], (4096, 1024))
    cost = cost_of(call)
    assert cost.bytes == expected
    assert cost.flops == 4_194_304  # one per element of the reduced input
    assert _estimate(cost.formula)


# --- C: Inductor template GEMMs --------------------------------------------------------------------

SQUARE = [4096, 4096]


def test_template_mm_addmm_and_bmm_are_costed_as_gemms() -> None:
    mm = cost_of(_call("triton_tem_fused_mm_0", "matmul", "rule:inductor-template", [(SQUARE, BF16)] * 3))
    assert mm.flops == 137_438_953_472
    assert mm.bytes == 3 * 33_554_432 == 100_663_296
    assert (mm.precision, mm.unit) == ("bf16", "tensor")
    addmm = [([4096], BF16)] + [(SQUARE, BF16)] * 3
    cost = cost_of(_call("triton_tem_fused_addmm_relu_1", "matmul", "rule:inductor-template", addmm))
    assert cost.flops == 137_438_953_472
    assert cost.bytes == 100_671_488
    bmm = [([8, 512, 256], BF16), ([8, 256, 512], BF16), ([8, 512, 512], BF16)]
    cost = cost_of(_call("triton_tem_fused_bmm_2", "bmm", "rule:inductor-template", bmm))
    assert cost.flops == 1_073_741_824
    assert cost.bytes == 8_388_608


def test_triton_mm_non_square() -> None:
    # A [128, 64], B [64, 256], out [128, 256] fp16: 2·128·256·64 = 4,194,304 FLOP; 16,384 + 32,768 + 65,536 B
    shapes = [([128, 64], "c10::Half"), ([64, 256], "c10::Half"), ([128, 256], "c10::Half")]
    cost = cost_of(_call("triton_mm", "matmul", "rule:inductor-template", shapes))
    assert cost.flops == 4_194_304
    assert cost.bytes == 114_688


def test_template_with_ambiguous_or_no_gemm_shapes_is_not_costed() -> None:
    # [2,3]·[3,2] → [2,2] and [3,2]·[2,2] → [3,2] both fit: M, N, K ambiguous
    shapes = [([2, 3], BF16), ([3, 2], BF16), ([2, 2], BF16), ([3, 2], BF16)]
    with pytest.raises(NoCost, match="ambiguous"):
        cost_of(_call("triton_tem_fused_mm_0", "matmul", "rule:inductor-template", shapes))
    with pytest.raises(NoCost, match="no A"):
        cost_of(_call("triton_tem_fused_mm_0", "matmul", "rule:inductor-template", [([4096], BF16)] * 2))
    # a template kernel under an enclosing region op: the op's shapes are not the kernel's
    with pytest.raises(NoCost, match="no cost model for CompiledFunction"):
        cost_of(_call("CompiledFunction", "matmul", "rule:inductor-template", [(SQUARE, BF16)] * 2))


# --- D: fp32 GEMMs on AMD matrix cores -------------------------------------------------------------


def test_fp32_gemm_takes_the_fp32_matrix_peak_where_the_device_has_one() -> None:
    cost = cost_of(_call("aten::mm", "matmul", "rule:gemm", [(SQUARE, FP32)] * 2))
    peak = load_devices()["mi210"].peak(cost.precision, cost.unit)
    assert (peak.tflops, peak.label) == (45.3, "fp32 tensor")
    achieved = 137_438_953_472 / 6000e-6 / 1e12  # 22.906 TFLOP/s
    assert achieved / peak.tflops * 100 == pytest.approx(50.566, abs=1e-3)
    # NVIDIA has no fp32 tensor-core math: the vector peak, as before
    peak = load_devices()["h100-sxm"].peak(cost.precision, cost.unit)
    assert (peak.tflops, peak.label) == (66.9, "fp32 vector")
    # TF32 kernel families keep the tf32 peak
    tf32 = cost_of(_call("aten::mm", "matmul", "rule:gemm-tf32", [(SQUARE, FP32)] * 2))
    assert tf32.precision == "tf32"


# --- end to end: the roofline of hand-built and shared traces --------------------------------------

_H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9}
_H100.update(computeMinor=0, maxThreadsPerBlock=1024, maxThreadsPerMultiprocessor=2048, warpSize=32, numSms=132)
_MI210 = {"id": 0, "name": "AMD Instinct MI210", "totalGlobalMem": 68702699520, "computeMajor": 9}
_MI210.update(computeMinor=0, maxThreadsPerBlock=1024, maxThreadsPerMultiprocessor=2048, warpSize=64, numSms=104)


def _roofline(tmp_path: Path, events: list[dict[str, Any]], device: dict[str, Any]):
    from kernel_atlas.report.build import build_report

    doc = {"schemaVersion": 1, "deviceProperties": [device], "record_shapes": 1, "traceEvents": events}
    trace = tmp_path / "case.json"
    trace.write_text(json.dumps(doc))
    write_outputs(ingest_paths([trace]), tmp_path / "out")
    return build_report(tmp_path / "out", None, tmp_path / "r.html").analysis.roofline


def _op(name: str, ts: float, dur: float, ext: int, dims: list, types: list[str]) -> dict[str, Any]:
    args = {"External id": ext, "Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(runtime: str, ts: float, ext: int, corr: int, kernel: str, kts: float, kdur: float) -> list[dict]:
    ids = {"External id": ext, "correlation": corr}
    return [
        {"ph": "X", "cat": "cuda_driver", "name": runtime, "pid": 1, "tid": 1, "ts": ts, "dur": 5, "args": ids},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": kts, "dur": kdur}
        | {"args": {**ids, "device": 0, "stream": 7, "grid": [1024, 1, 1], "block": [128, 1, 1]}},
    ]


def _frame(name: str, ts: float, dur: float, pid: int, parent: int | None) -> dict[str, Any]:
    args = {"Python id": pid, "Python parent id": parent, "Python thread": 0}
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def test_inductor_launches_under_python_frames_end_to_end(tmp_path: Path) -> None:
    # with_stack=True: `<built-in function launch>` between Inductor's op and cuLaunchKernel
    relu, tem = "triton_poi_fused_relu_0", "triton_tem_fused_addmm_relu_1"
    events = [_frame("model.py(10): forward", 900, 1000, 1, None)]
    events += [_op(relu, 935, 90, 11, [[N], [N], []], [BF16, BF16, "Scalar"])]
    events += [_frame("<built-in function launch>", 950, 60, 2, 1)]
    events += _launch("cuLaunchKernel", 960, 11, 101, relu, 1100, 10.0)
    events += [_op(tem, 1045, 90, 12, [[4096], SQUARE, SQUARE, SQUARE], [BF16] * 4)]
    events += [_frame("<built-in function launch>", 1060, 60, 3, 1)]
    events += _launch("cuLaunchKernel", 1070, 12, 102, tem, 1200, 200.0)
    roofline = _roofline(tmp_path, events, _H100).set_index("name")
    assert roofline.loc[relu, "launcher"] == "<built-in function launch>"
    assert roofline.loc[relu, "bytes"] == 4_194_304
    assert bool(roofline.loc[relu, "estimate"])
    assert roofline.loc[tem, "flops"] == 137_438_953_472
    assert roofline.loc[tem, "bytes"] == 100_671_488


def test_fp32_gemm_on_mi210_end_to_end(tmp_path: Path) -> None:
    events = []
    for i, (kernel, dtype) in enumerate(
        (
            ("Cijk_Ailk_Bljk_SB_MT128x128x16_MI32x32x2_SN_ISA90a", FP32),
            ("Cijk_Ailk_Bljk_DB_MT64x64x16_MI16x16x4", DOUBLE),
        )
    ):
        events.append(_op("aten::mm", 7000 * i, 50, i + 1, [SQUARE, SQUARE], [dtype, dtype]))
        events += _launch("hipExtModuleLaunchKernel", 7000 * i + 10, i + 1, 100 + i, kernel, 7000 * i + 20, 6000.0)
    roofline = _roofline(tmp_path, events, _MI210).set_index("precision")
    for precision in ("fp32", "fp64"):
        row = roofline.loc[precision]
        assert row["peak_label"] == f"{precision} tensor"
        assert row["peak_tflops"] == 45.3
        assert row["sol_pct"] == pytest.approx(50.566, abs=1e-3)


def _shared_roofline(tmp_path: Path, stem: str):
    from kernel_atlas.report.build import build_report

    write_outputs(ingest_paths([trace_path(stem)]), tmp_path / stem)
    return build_report(tmp_path / stem, None, tmp_path / f"{stem}.html").analysis.roofline.set_index("name")


def test_shared_inductor_traces(tmp_path: Path) -> None:
    tiny = _shared_roofline(tmp_path, "a100_triton_compile_tiny")
    assert tiny.loc["triton_poi_fused_add_cos_sin_0", "bytes"] == 1_200
    llama = _shared_roofline(tmp_path, "mi300x_torch_compile_llama_block")
    rms = llama.loc["triton_red_fused_add_mean_mul_pow_rsqrt_0"]
    assert rms["bytes"] == 268_439_552
    assert rms["sol_pct"] == pytest.approx(65.71, abs=0.01)
