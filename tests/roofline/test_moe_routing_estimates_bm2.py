"""Campaign BM, classes 2 and 4: the experts an MoE call reads are not recorded, so its weight
bytes are an estimate its formula says (the roofline's `estimate` column); the routing ops write
their [T, k] top-k, not as many bytes as they read, and SGLang's Triton router is a GEMM. Every
expected number is derived by hand from the recorded shapes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.analysis import analyse
from kernel_atlas.roofline.costs import Call, cost_of
from tests.support.hand_built import launch_and_kernel

BF16, F32, FP8, I32 = "c10::BFloat16", "float", "c10::Float8_e4m3fn", "int"
TRITON = "<built-in function launch>"


def _call(launcher: str, op: str, args: list[tuple[list[int], str, str]], rule: str = "") -> Call:
    """A call from (dims, type, concrete value) per argument, as Kineto records them."""
    dims, types, values = (json.dumps([a[i] for a in args]) for i in range(3))
    return Call(launcher, op, parse_call(dims, types, None, values), rule)


def T(dims: list[int], dtype: str) -> tuple[list[int], str, str]:  # a tensor
    return (dims, dtype, "")


def S(value: str) -> tuple[list[int], str, str]:  # a scalar with its Concrete Input
    return ([], "Scalar", value)


# ---- class 2: the experts read are an estimate --------------------------------------------------


def _fused_experts_trace(path: Path) -> Path:
    # campaign BM c01: sglang::inplace_fused_experts(hidden [4,2048], w1 [64,2816,2048], w2
    # [64,2048,1408], topk_weights [4,8], topk_ids [4,8]) in bf16, one 80 µs fused_moe_kernel
    op = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "sglang::inplace_fused_experts",
        "pid": 1,
        "tid": 1,
        "ts": 100,
        "dur": 100,
        "args": {
            "External id": 1,
            "Input Dims": [[4, 2048], [64, 2816, 2048], [64, 2048, 1408], [4, 8], [4, 8]],
            "Input type": [BF16, BF16, BF16, F32, I32],
        },
    }
    events = [op, *launch_and_kernel(110, 11, 1, "fused_moe_kernel", 1000, 80.0)]
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return path


def test_fused_experts_row_is_an_estimate_with_its_range(tmp_path: Path) -> None:
    frame = ingest_trace(_fused_experts_trace(tmp_path / "moe.json.gz")).frame
    kernels = analyse(frame, None).kernels
    main = kernels[kernels["role"] == "main"]
    assert len(main) == 1
    # FLOPs 2·4·8·2816·2048 + 2·4·8·2048·1408
    assert main["flops"].iloc[0] == 369_098_752 + 184_549_376 == 553_648_128
    # weights W = 64·2816·2048·2 + 64·2048·1408·2 = 738,197,504 + 369,098,752; uniform routing reads
    # 1 − (56/64)^4 = 1695/4096 of them: 270,336·1695 = 458,219,520; x and out 16,384 each;
    # intermediates 4·8·(2816 + 1408 + 2·2048)·2 = 532,480
    assert main["bytes"].iloc[0] == 458_219_520 + 2 * 16_384 + 532_480 == 458_784_768
    # which experts the 4 tokens picked is not recorded: between k = 8 and min(64, 4·8) = 32 of 64
    formula = main["formula"].iloc[0]
    assert "an estimate" in formula and "between 8 and 32 of 64" in formula
    assert bool(main["estimate"].iloc[0])  # it had been False: no trust line counted it


def test_fused_experts_exact_where_the_shapes_fix_the_experts() -> None:
    bf = [T([1, 64], BF16), T([8, 256, 64], BF16), T([8, 64, 128], BF16), T([1, 2], BF16)]
    one = cost_of(_call("sglang::inplace_fused_experts", "fused_moe", bf))
    # one token reads exactly its k = 2 experts: 2/8 of w1 262,144 B + w2 131,072 B = 98,304; x, out
    # 128 B each; intermediates 1·2·(256 + 128 + 128)·2 = 2,048
    assert one.bytes == 98_304 + 256 + 2_048
    assert "experts read: 2 of 8, one token" in one.formula and "estimate" not in one.formula
    every = [T([4, 64], BF16), T([2, 256, 64], BF16), T([2, 64, 128], BF16), T([4, 2], BF16)]
    cost = cost_of(_call("sglang::inplace_fused_experts", "fused_moe", every))
    # k = E = 2: both experts read whatever the routing
    assert "experts read: 2 of 2, k ≥ E" in cost.formula and "estimate" not in cost.formula
    # T·k = 8·2 ≥ E = 8 is not enough: all 8 tokens may pick the same 2 experts
    many = [T([8, 64], BF16), T([8, 256, 64], BF16), T([8, 64, 128], BF16), T([8, 2], BF16)]
    cost = cost_of(_call("sglang::inplace_fused_experts", "fused_moe", many))
    assert "an estimate" in cost.formula and "between 2 and 8 of 8" in cost.formula


def test_moe_forward_says_its_experts_are_an_estimate() -> None:
    # vllm::moe_forward(hidden [32,3072], logits [32,32]) enclosing TopK k = 4 and bf16 weights
    # w1 [32,256,3072], w2 [32,3072,128]: between 4 and min(32, 32·4) = 32 of the 32 experts
    enclosed = json.dumps({"topk": 4, "tensors": [[[32, 256, 3072], BF16], [[32, 3072, 128], BF16]]})
    args = parse_call("[[32,3072],[32,32],[],[]]", f'["{BF16}","{BF16}","",""]')
    cost = cost_of(Call("vllm::moe_forward", "fused_moe", args, "rule:moe-gemm", None, "", enclosed))
    assert "not recorded, an estimate" in cost.formula and "between 4 and 32 of 32" in cost.formula


def test_grouped_deepgemm_upper_bound_is_said_an_estimate() -> None:
    # lhs [1024,7168] fp8 + scales [1024,56] fp32, rhs [16,4096,7168] fp8 + scales [16,32,56]: at
    # most min(16, 1024/128) = 8 experts, which of them m_indices' values would say (not recorded)
    args = [T([1024, 7168], FP8), T([1024, 56], F32), T([16, 4096, 7168], FP8), T([16, 32, 56], F32)]
    cost = cost_of(_call("cuLaunchKernelEx", "fused_moe", args, "rule:deepgemm-grouped"))
    assert cost.bytes == 7_340_032 + 229_376 + 8 * 29_360_128 + 8 * 7_168 + 8_388_608 == 250_896_384
    assert cost.formula.startswith("an upper bound, an estimate") and "not recorded" in cost.formula


# ---- class 4: what routing ops write ------------------------------------------------------------


def test_moe_fused_gate_writes_its_topk_weights_and_ids() -> None:
    # campaign BM c05: sgl_kernel::moe_fused_gate(input [512,256] bf16, bias [256] bf16, 8, 4, 8, 0, 2.5):
    # topk = 8 (its 3rd integer); returns weights [512,8] fp32 and ids [512,8] int32
    args = [T([512, 256], BF16), T([256], BF16), S("8"), S("4"), S("8"), S("0"), S("2.5")]
    cost = cost_of(_call("sgl_kernel::moe_fused_gate", "moe_gate", args, "rule:moe-gate"))
    # read 262,144 + 512; written 512·8·4 + 512·8·4 = 32,768 (it had been 262,656 again: 525,312)
    assert cost.bytes == 262_656 + 32_768 == 295_424
    assert "k = 8" in cost.formula
    # a catalog entry records no values: k unknown, counted at the least, 1: 512·(4 + 4)
    args = [T([512, 256], BF16), T([256], BF16), S(""), S(""), S(""), S(""), S("")]
    cost = cost_of(_call("sgl_kernel::moe_fused_gate", "moe_gate", args, "rule:moe-gate"))
    assert cost.bytes == 262_656 + 4_096 == 266_752
    assert "k not recorded" in cost.formula


def test_triton_router_is_a_gemm_writing_only_its_topk() -> None:
    # the seed's fused_moe_router_kernel(input [1024,6144] bf16, moe_router_weight [8,6144] fp32)
    args = [T([1024, 6144], BF16), T([8, 6144], F32)]
    cost = cost_of(_call(TRITON, "moe_gate", args, "rule:moe-gate"))
    assert cost.flops == 2 * 1024 * 8 * 6144 == 100_663_296  # it had been one per element: 6,340,608
    # x 12,582,912 + weight 196,608 read; top-k not recorded: the least, k = 1, 1024·(4 + 4) written
    assert cost.bytes == 12_582_912 + 196_608 + 8_192 == 12_787_712  # it had been 25,559,040
    assert cost.precision == "fp32" and "k not recorded" in cost.formula
    # its outputs recorded among a Triton kernel's arguments: weights [1024,2] fp32 and ids [1024,2] int32
    args = [T([1024, 6144], BF16), T([8, 6144], F32), T([1024, 2], F32), T([1024, 2], I32)]
    cost = cost_of(_call(TRITON, "moe_gate", args, "rule:moe-gate"))
    assert cost.bytes == 12_582_912 + 196_608 + 8_192 + 8_192 == 12_795_904
    assert "k = 2" in cost.formula and "not recorded" not in cost.formula
