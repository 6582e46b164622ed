"""Inductor GEMVs, template outputs and gated Triton kernels (campaign BR 2, 3, 4). Every value
below was worked out by hand from the recorded `Input Dims`/`Input type`/`Input Strides`, never
with the cost formulas.

Inductor's record of a Triton launch records every kernel argument in Inductor's order
(in_out_ptr*, in_ptr*, out_ptr*, then the size scalars xnumel, r0_numel): each tensor is counted
once at its stored bytes.

* GEMV `triton_red_fused_mm_14(x [1,4096], W [4096,4096], out [1,4096], 4096, 4096)` bf16:
  2·M·N·K = 2·1·4096·4096 = 33,554,432 FLOP; 2·(4096 + 16,777,216 + 4096) = 33,570,816 B (had no
  cost model). A linear's weight as stored, W [11008,4096] (N, K), x [1,4096], out [1,11008]:
  2·11008·4096 = 90,177,536 FLOP; 2·(4096 + 45,088,768 + 11008) = 90,207,744 B.
* bmm GEMV `triton_per_fused_bmm_0(A [4,1,64], B [4,64,32], out [4,1,32], 128, 64)` bf16:
  2·4·1·32·64 = 16,384 FLOP; 2·(256 + 8192 + 128) = 17,152 B.
* Template addmm with an expanded bias first: `bias [128,512] strides [0,1], A [128,256], B
  [256,512], out [128,512]` bf16: bias stores 512 elements = 1,024 B, A 65,536, B 262,144, out
  131,072: 459,776 B (was 589,824: the bias taken as the output, written at 128·512·2, and the
  real output read); 2·128·512·256 = 33,554,432 FLOP.
* Gated `triton_poi_fused_mul_silu_3(gate, up, silu, out)`, four [1024,2048] bf16: 4·4,194,304 =
  16,777,216 B (was 12,582,912), an estimate. Kept: the llama block's `(in_out [8,4096,8192], in
  [32768,8192])` 3·536,870,912 = 1,610,612,736 B, not an estimate; `(in, in, out)` [1024,2048]
  3·4,194,304 = 12,582,912 B.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.analysis import ESTIMATE_WORDS
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

BF16 = "c10::BFloat16"


def _call(
    launcher: str,
    op: str,
    rule: str,
    tensors: list[list[int]],
    sizes: tuple[int, ...] = (),
    strides: list[list[int] | None] | None = None,
) -> Call:
    """An Inductor-style call: bf16 tensors, then the size scalars (xnumel, r0_numel)."""
    dims = tensors + [[] for _ in sizes]
    types = [BF16] * len(tensors) + ["Scalar"] * len(sizes)
    concrete = [""] * len(tensors) + [str(s) for s in sizes]
    stride_text = json.dumps(strides + [[] for _ in sizes]) if strides is not None else None
    args = parse_call(json.dumps(dims), json.dumps(types), stride_text, json.dumps(concrete))
    return Call(launcher, op, args, rule)


def _estimate(formula: str) -> bool:
    return re.search(ESTIMATE_WORDS, formula) is not None


# --- class 2: Inductor GEMVs -----------------------------------------------------------------------


def test_inductor_gemv_is_costed_as_a_gemm_with_each_argument_once() -> None:
    call = _call("triton_red_fused_mm_14", "matmul", "rule:inductor-gemv", [[1, 4096], [4096, 4096], [1, 4096]])
    cost = cost_of(call)
    assert cost.flops == 33_554_432
    assert cost.bytes == 2 * (4096 + 16_777_216 + 4096) == 33_570_816
    # a multiply and a sum over K (no tl.dot), upcast to fp32: the vector unit
    assert (cost.precision, cost.unit) == ("fp32", "vector")
    assert not _estimate(cost.formula)
    # with its recorded xnumel (N) and r0_numel (K), as Inductor records them
    sized = cost_of(
        _call(call.launcher, call.op_mapping, call.rule, [[1, 4096], [4096, 4096], [1, 4096]], (4096, 4096))
    )
    assert (sized.flops, sized.bytes) == (33_554_432, 33_570_816)


def test_inductor_gemv_reads_a_weight_as_stored_n_by_k() -> None:
    shapes = [[1, 4096], [11008, 4096], [1, 11008]]
    cost = cost_of(_call("triton_red_fused_mm_0", "matmul", "rule:inductor-gemv", shapes, (11008, 4096)))
    assert cost.flops == 2 * 11008 * 4096 == 90_177_536
    assert cost.bytes == 2 * (4096 + 45_088_768 + 11008) == 90_207_744


def test_inductor_bmm_gemv() -> None:
    shapes = [[4, 1, 64], [4, 64, 32], [4, 1, 32]]
    cost = cost_of(_call("triton_per_fused_bmm_0", "bmm", "rule:inductor-gemv", shapes, (128, 64)))
    assert cost.flops == 16_384
    assert cost.bytes == 2 * (256 + 8192 + 128) == 17_152


def test_inductor_gemv_whose_shapes_do_not_fix_m_n_k_is_refused_with_a_reason() -> None:
    # a split reduction's first kernel: r0_numel 512 of K = 4096, xnumel 8 partial sums per output
    gemv = [[1, 4096], [4096, 4096], [1, 4096]]
    with pytest.raises(NoCost, match="contradict"):
        cost_of(_call("triton_red_fused_mm_0", "matmul", "rule:inductor-gemv", gemv, (32768, 512)))
    with pytest.raises(NoCost, match="no A"):
        cost_of(_call("triton_red_fused_mm_1", "matmul", "rule:inductor-gemv", [[4096, 8], [4096]], (4096, 8)))
    # launched under another op: that op's shapes are not the kernel's
    with pytest.raises(NoCost, match="no cost model for CompiledFunction"):
        cost_of(_call("CompiledFunction", "matmul", "rule:inductor-gemv", gemv))


# --- class 3: the template's output is the last tensor of the product's shape, at its stored bytes ----


def test_template_output_is_the_last_product_shaped_tensor_not_an_expanded_bias_before_it() -> None:
    shapes = [[128, 512], [128, 256], [256, 512], [128, 512]]
    strides: list[list[int] | None] = [[0, 1], [256, 1], [512, 1], [512, 1]]
    cost = cost_of(_call("triton_tem_fused_addmm_13", "matmul", "rule:inductor-template", shapes, (), strides))
    assert cost.flops == 33_554_432
    assert cost.bytes == 1_024 + 65_536 + 262_144 + 131_072 == 459_776


# --- class 4: gated Triton kernels count each recorded argument once -------------------------------


def test_inductor_gated_kernel_counts_every_recorded_argument_once() -> None:
    four = [[1024, 2048]] * 4  # gate, up, silu(gate) kept for the backward, out
    cost = cost_of(_call("triton_poi_fused_mul_silu_3", "silu_and_mul", "rule:inductor-gated-activation", four))
    assert cost.bytes == 4 * 4_194_304 == 16_777_216
    assert cost.flops == 5 * 2_097_152  # catalogs/costs.toml silu_and_mul = 5 per output
    assert _estimate(cost.formula)  # which arguments are written is not recorded
    three = [[1024, 2048]] * 3  # (in, in, out)
    cost = cost_of(_call("triton_poi_fused_mul_silu_9", "silu_and_mul", "rule:inductor-gated-activation", three))
    assert cost.bytes == 3 * 4_194_304 == 12_582_912
    assert _estimate(cost.formula)
    # the llama block's (in_out, in): two pointers for a binary op, the first written back
    llama = [[8, 4096, 8192], [32768, 8192]]
    call = _call("triton_poi_fused__unsafe_view_mul_silu_2", "silu_and_mul", "rule:inductor-gated-activation", llama)
    cost = cost_of(call)
    assert cost.bytes == 3 * 536_870_912 == 1_610_612_736
    assert not _estimate(cost.formula)


# --- end to end: the label routes the GEMV to its formula; strides reach the template -----------------

_H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9}
_H100.update(computeMinor=0, maxThreadsPerBlock=1024, maxThreadsPerMultiprocessor=2048, warpSize=32, numSms=132)


def _events(name: str, ts: float, ext: int, dims: list, strides: list, concrete: list[str]) -> list[dict[str, Any]]:
    types = [BF16 if d else "Scalar" for d in dims]
    args = {"External id": ext, "Input Dims": dims, "Input type": types, "Input Strides": strides}
    ids = {"External id": ext, "correlation": 100 + ext}
    return [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 50}
        | {"args": args | {"Concrete Inputs": concrete}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 10, "dur": 5}
        | {"args": ids},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 100, "dur": 20.0}
        | {"args": {**ids, "device": 0, "stream": 7, "grid": [128, 1, 1], "block": [128, 1, 1]}},
    ]


def test_gemv_and_expanded_bias_template_end_to_end(tmp_path: Path) -> None:
    from kernel_atlas.report.build import build_report

    gemv, tem = "triton_red_fused_mm_14", "triton_tem_fused_addmm_13"
    events = _events(
        gemv,
        1000,
        1,
        [[1, 4096], [4096, 4096], [1, 4096], [], []],
        [[4096, 1], [4096, 1], [4096, 1], [], []],
        ["", "", "", "4096", "4096"],
    )
    events += _events(
        tem,
        2000,
        2,
        [[128, 512], [128, 256], [256, 512], [128, 512]],
        [[0, 1], [256, 1], [512, 1], [512, 1]],
        ["", "", "", ""],
    )
    doc = {"schemaVersion": 1, "deviceProperties": [_H100], "record_shapes": 1, "traceEvents": events}
    trace = tmp_path / "case.json"
    trace.write_text(json.dumps(doc))
    write_outputs(ingest_paths([trace]), tmp_path / "out")
    roofline = build_report(tmp_path / "out", None, tmp_path / "r.html").analysis.roofline.set_index("name")
    assert roofline.loc[gemv, "flops"] == 33_554_432
    assert roofline.loc[gemv, "bytes"] == 33_570_816
    assert roofline.loc[tem, "flops"] == 33_554_432
    assert roofline.loc[tem, "bytes"] == 459_776
