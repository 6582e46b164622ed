"""Serving MoE and GEMM variants outside the seed catalog (campaign AV 4–7): the experts' top-k of
a grouped or fused routing inside `vllm::moe_forward`, a kernel-name rule under a launcher with a
formula of its own, the quantisation mode and expert parallelism fused_experts records, and a
recorded GEMM output never read. Every expected number is derived by hand from the recorded
shapes in the test."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.analysis import analyse
from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from tests.support.hand_built import launch_and_kernel

BF16, FP8, F32, I8, I32 = "c10::BFloat16", "c10::Float8_e4m3fn", "float", "signed char", "int"

# moe_forward(hidden [64, 2048], router logits [64, 128]): 128 experts, H = 2048, gated I = 768
# (w13 [128, 1536, 2048], w2 [128, 2048, 768]), k = 8:
# up 2·T·k·H·2I = 2·64·8·2048·1536 = 3,221,225,472; down 2·T·k·I·H = 2·64·8·768·2048 = 1,610,612,736
MOE_FLOPS_K8 = 4_831_838_208


def _op(name: str, ts: float, ext: int, dims: list, types: list, concrete: list, dur: float = 3) -> dict:
    args = {"External id": ext, "Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _moe_forward_trace(tmp_path: Path, routing: list[dict], kernel: str) -> Path:
    """One vllm::moe_forward call enclosing `routing` (ops from ts 102 on), views of its experts'
    weights and two launches of `kernel`."""
    events = [
        _op("vllm::moe_forward", 100, 1, [[64, 2048], [64, 128], []], [BF16, BF16, "str"], ["", "", "layer0"], 200),
        *routing,
        _op("aten::view", 140, 20, [[128, 1536, 2048], []], [BF16, "ScalarList"], ["", "[128, 1536, 2048]"]),
        _op("aten::view", 144, 21, [[128, 2048, 768], []], [BF16, "ScalarList"], ["", "[128, 2048, 768]"]),
        *launch_and_kernel(160, 11, 1, kernel, 1000, 60.0, geometry={"grid": [132, 1, 1], "block": [128, 1, 1]}),
        *launch_and_kernel(180, 12, 1, kernel, 1070, 30.0, geometry={"grid": [132, 1, 1], "block": [128, 1, 1]}),
    ]
    path = tmp_path / "moe.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return path


def _topk(ts: float, ext: int, dims: list, k: int) -> dict:
    # aten::topk(self, k, dim=-1, largest, sorted)
    return _op(
        "aten::topk",
        ts,
        ext,
        [dims, [], [], [], []],
        [F32, "Scalar", "Scalar", "Scalar", "Scalar"],
        ["", str(k), "-1", "True", "False"],
    )


def _main_row(path: Path) -> dict:
    kernels = analyse(ingest_trace(path).frame, None).kernels
    main = kernels[kernels["role"] == "main"]
    assert len(main) == 1
    return main.iloc[0].to_dict()


# ---- class 4: k of the experts' top-k inside moe_forward


def test_grouped_topk_takes_k_from_the_selection_over_all_experts(tmp_path: Path) -> None:
    # vLLM's torch grouped_topk: top-2 within each of 8 groups of 16 [64, 8, 16], top-4 groups [64, 8],
    # then the top-8 experts over [64, 128]: k = 8 (the first TopK's 2 had been taken)
    routing = [_topk(102, 10, [64, 8, 16], 2), _topk(106, 11, [64, 8], 4), _topk(110, 12, [64, 128], 8)]
    row = _main_row(_moe_forward_trace(tmp_path, routing, "fused_moe_up_kernel_variant"))
    assert row["flops"] == 2 * 64 * 8 * 2048 * 1536 + 2 * 64 * 8 * 768 * 2048 == MOE_FLOPS_K8


def test_topk_softmax_gives_k_by_the_width_of_its_recorded_outputs(tmp_path: Path) -> None:
    # _moe_C::topk_softmax(topk_weights! [64, 8], topk_ids! [64, 8], token_expert_indices! [64, 8],
    # gating_output [64, 128], renormalize): no integer argument, k = 8 is the outputs' width
    routing = [
        _op(
            "_moe_C::topk_softmax",
            102,
            10,
            [[64, 8], [64, 8], [64, 8], [64, 128], []],
            [F32, I32, I32, BF16, "Scalar"],
            ["", "", "", "", "True"],
        )
    ]
    row = _main_row(_moe_forward_trace(tmp_path, routing, "fused_moe_up_kernel_variant"))
    assert row["flops"] == MOE_FLOPS_K8
    # bytes: 128·(1 − (120/128)^64) expected distinct experts of the bf16 weights
    # (128·1536·2048 + 128·2048·768)·2 = 1,207,959,552 B, + x read and out written 2·64·2048·2 + logits 64·128·2
    touched = 1 - (1 - 8 / 128) ** 64
    assert row["bytes"] == pytest.approx(touched * 1_207_959_552 + 524_288 + 16_384, rel=1e-12)


def test_fused_grouped_topk_gives_k_by_its_catalogued_integer(tmp_path: Path) -> None:
    # vLLM's _moe_C::grouped_topk(scores [64, 128], n_group 1, topk_group 1, topk 8, renormalize,
    # routed_scaling_factor, bias [128], scoring_func 1) (Kimi K2: one group): k is the third integer,
    # 8 (the first, n_group 1, had been taken)
    routing = [
        _op(
            "_moe_C::grouped_topk",
            102,
            10,
            [[64, 128], [], [], [], [], [], [128], []],
            [F32, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", F32, "Scalar"],
            ["", "1", "1", "8", "True", "2.827", "", "1"],
        )
    ]
    row = _main_row(_moe_forward_trace(tmp_path, routing, "fused_moe_up_kernel_variant"))
    assert row["flops"] == MOE_FLOPS_K8


def test_topk_ops_over_all_experts_that_disagree_leave_k_unknown(tmp_path: Path) -> None:
    routing = [_topk(102, 10, [64, 128], 8), _topk(110, 11, [64, 128], 6)]
    kernels = analyse(ingest_trace(_moe_forward_trace(tmp_path, routing, "fused_moe_up_kernel_variant")).frame, None)
    rows = kernels.kernels
    assert rows["flops"].isna().all()
    assert rows["note"].str.contains(r"top-k ambiguous.*\[6, 8\]").any()


# ---- class 5: the launcher's formula before a kernel-name rule's


def test_fused_moe_kernel_under_moe_forward_is_costed_by_the_launcher(tmp_path: Path) -> None:
    # vLLM's modular Triton experts launch `fused_moe_kernel` (rule triton-fused-moe, whose formula
    # reads fused_experts' (hidden, w1, w2, topk_weights)) directly under moe_forward(hidden, logits,
    # layer_name): moe_forward's own formula reads it, k = 8 from its TopK
    row = _main_row(_moe_forward_trace(tmp_path, [_topk(110, 12, [64, 128], 8)], "fused_moe_kernel"))
    assert row["label_rule"] == "rule:triton-fused-moe"
    assert row["flops"] == MOE_FLOPS_K8
    enclosed = json.dumps({"topk": 8, "tensors": [[[128, 1536, 2048], BF16], [[128, 2048, 768], BF16]]})
    args = parse_call("[[64,2048],[64,128],[]]", f'["{BF16}","{BF16}","str"]', None, '["","","layer0"]')
    call = Call("vllm::moe_forward", "fused_moe", args, "rule:triton-fused-moe", None, "", enclosed)
    assert cost_of(call).flops == MOE_FLOPS_K8
    # the rule still serves a launcher without a formula: fused_experts' argument order
    args = parse_call("[[4,64],[8,256,64],[8,64,128],[4,2]]", f'["{BF16}","{BF16}","{BF16}","{F32}"]')
    assert cost_of(Call("cuLaunchKernel", "fused_moe", args, "rule:triton-fused-moe")).flops == (
        2 * 4 * 2 * 256 * 64 + 2 * 4 * 2 * 64 * 128
    )


# ---- class 6: fused_experts' quantisation mode and expert parallelism


def _experts_call(launcher: str, tensors: list[tuple[list, str]], rest: list[tuple[str, str]]) -> Call:
    """A fused_experts call: (dims, dtype) tensors, then (Input type, Concrete Input) scalars or
    ("tensor", dims-and-dtype JSON) further tensors."""
    dims = [d for d, _ in tensors]
    types = [t for _, t in tensors]
    concrete = [""] * len(tensors)
    for kind, value in rest:
        if kind == "tensor":
            d, t = json.loads(value)
            dims.append(d), types.append(t), concrete.append("")
        else:
            dims.append([]), types.append(kind), concrete.append(value)
    return Call(launcher, "fused_moe", parse_call(json.dumps(dims), json.dumps(types), None, json.dumps(concrete)))


def _flags(activation: str, *values: bool) -> list[tuple[str, str]]:
    return [("str", activation)] + [("Scalar", str(v)) for v in values]


# Mixtral TP2 prefill: hidden [4096, 4096] bf16, w1 [8, 14336, 4096] and w2 [8, 4096, 7168] int8, k = 2
MIXTRAL = [([4096, 4096], BF16), ([8, 14336, 4096], I8), ([8, 4096, 7168], I8), ([4096, 2], F32), ([4096, 2], I32)]
# 2·T·k·N1·D + 2·T·k·D·N2 = 2·4096·2·14336·4096 + 2·4096·2·4096·7168
MIXTRAL_FLOPS = 962_072_674_304 + 481_036_337_152


def test_int8_weight_only_experts_run_at_the_activations_precision() -> None:
    # vLLM 0.10 outplace_fused_experts(…, activation, apply_router_weight_on_input, use_fp8_w8a8,
    # use_int8_w8a8, use_int8_w8a16 = True, use_int4_w4a16, use_mxfp4_w4a4, per_channel_quant,
    # global_num_experts -1, expert_map None, w1_scale [8, 14336], w2_scale [8, 4096])
    rest = [*_flags("silu", False, False, False, True, False, False, False), ("Scalar", "-1"), ("", "")]
    scales = [("tensor", json.dumps([[8, 14336], F32])), ("tensor", json.dumps([[8, 4096], F32]))]
    cost = cost_of(_experts_call("vllm::outplace_fused_experts", MIXTRAL, rest + scales))
    assert cost.flops == MIXTRAL_FLOPS == 1_443_109_011_456
    assert cost.precision == "bf16"  # the int8 weights are dequantised into bf16: the bf16 peak bounds it
    # SGLang with is_gated: (…, b1 None, b2 None, activation, is_gated, apply_router_weight_on_input,
    # use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16 = True, use_int4_w4a16, per_channel_quant, w1_scale)
    sglang = [("", ""), ("", ""), *_flags("silu", True, False, False, False, True, False, False), ("", "")]
    assert cost_of(_experts_call("sglang::outplace_fused_experts", MIXTRAL, sglang)).precision == "bf16"
    # int8 w8a8 (use_int8_w8a8 = True) runs at int8's peak
    w8a8 = [*_flags("silu", False, False, True, False, False, False, True), ("Scalar", "-1"), ("", "")]
    assert cost_of(_experts_call("vllm::outplace_fused_experts", MIXTRAL, w8a8)).precision == "int8"
    # no flags recorded (a catalog entry's params): int8 w8a8 assumed, and said to be an estimate
    unknown = cost_of(_experts_call("vllm::outplace_fused_experts", MIXTRAL, []))
    assert unknown.precision == "int8" and "assumed, an estimate" in unknown.formula


def test_expert_parallel_fused_experts_compute_only_the_local_experts_share() -> None:
    # vLLM EP8 (DeepSeek-V3 shapes): hidden [512, 7168] bf16, w1 [32, 512, 7168] and w2 [32, 7168, 256] fp8
    # (32 local of 256 experts), k = 8, global_num_experts 256 and expert_map [256] int32
    tensors = [([512, 7168], BF16), ([32, 512, 7168], FP8), ([32, 7168, 256], FP8), ([512, 8], F32), ([512, 8], I32)]
    rest = [
        *_flags("silu", False, True, False, False, False, False, False),
        ("Scalar", "256"),
        ("tensor", json.dumps([[256], I32])),
    ]
    cost = cost_of(_experts_call("vllm::inplace_fused_experts", tensors, rest))
    # uniform routing: 32/256 of the 512·8 = 4096 picks are local, 512 rows through each GEMM:
    # 2·512·512·7168 + 2·512·7168·256 = 3,758,096,384 + 1,879,048,192 (it was all 4096 rows: 8×)
    assert cost.flops == 5_637_144_576
    assert cost.precision == "fp8" and "estimate" in cost.formula
    # bytes: x read and out written 2·512·7168·2 = 14,680,064; the local experts' weights
    # (32·512·7168 + 32·7168·256 = 176,160,768 fp8 bytes) times the chance a local expert is picked,
    # 1 − (1 − 8/256)^512; the intermediates at bf16: the up-projection writes all 4096 rows of 512
    # (zeros for other ranks' picks), the down-projection reads the 512 local rows of 256 and writes
    # all 4096 rows of 7168, which the sum reads back: (4096·512 + 512·256 + 2·4096·7168)·2 = 121,896,960
    weights = (1 - (1 - 8 / 256) ** 512) * 176_160_768
    assert cost.bytes == pytest.approx(14_680_064 + weights + 121_896_960, rel=1e-12)


# ---- class 7: a recorded GEMM output is written, never read


def test_deepgemm_output_smaller_than_a_is_written_not_read() -> None:
    # deep_gemm::fp8_gemm_nt(a [4096, 7168] fp8, sfa [4096, 56] f32, b [2112, 7168] fp8, sfb [17, 56] f32,
    # d [4096, 2112] bf16, c None): d (8.65M elements) is smaller than a (29.4M)
    args = parse_call(
        "[[4096,7168],[4096,56],[2112,7168],[17,56],[4096,2112],[]]",
        json.dumps([FP8, F32, FP8, F32, BF16, ""]),
    )
    cost = cost_of(Call("deep_gemm::fp8_gemm_nt", "matmul", args, "rule:deepgemm"))
    assert cost.flops == 2 * 4096 * 2112 * 7168 == 124_017_180_672
    # a 29,360,128 + sfa 4096·56·4 = 917,504 + b 15,138,816 + sfb 17·56·4 = 3,808 read; d 4096·2112·2 written
    assert cost.bytes == 29_360_128 + 917_504 + 15_138_816 + 3_808 + 17_301_504 == 62_721_760
    assert cost.precision == "fp8"


def test_small_m_gemm_writes_its_recorded_output_at_its_dtype() -> None:
    # sgl-kernel dsv3_router_gemm(output [1, 256] fp32, mat_a [1, 7168] bf16, mat_b [256, 7168] bf16)
    args = parse_call("[[1,256],[1,7168],[256,7168]]", json.dumps([F32, BF16, BF16]))
    cost = cost_of(Call("sgl_kernel::dsv3_router_gemm", "matmul", args, "rule:dsv3-small-gemm"))
    assert cost.flops == 2 * 1 * 256 * 7168
    # a 7168·2 = 14,336 + b 256·7168·2 = 3,670,016 read; the fp32 output 256·4 = 1,024 written
    assert cost.bytes == 14_336 + 3_670_016 + 1_024 == 3_685_376


def test_no_launch_of_these_variants_is_left_uncosted_for_a_false_reason() -> None:
    # moe_forward without a TopK over its experts says so, not that a w2 argument is missing
    args = parse_call("[[64,2048],[64,128],[]]", f'["{BF16}","{BF16}","str"]', None, '["","","layer0"]')
    enclosed = json.dumps({"topk": None, "tensors": [[[128, 1536, 2048], BF16], [[128, 2048, 768], BF16]]})
    with pytest.raises(NoCost, match="top-k not recorded"):
        cost_of(Call("vllm::moe_forward", "fused_moe", args, "rule:triton-fused-moe", None, "", enclosed))
