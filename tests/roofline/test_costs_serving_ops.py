"""Serving ops' costs worked out by hand from their libraries' argument orders (vLLM csrc/
torch_bindings.cpp, sgl-kernel common_extension.cc) on the shapes a tester recorded: KV-cache
writes, quantization, partial RoPE, MoE routing and sums, library GEMMs, int4 fused MoE, arange,
and the labels of Mamba's scan kernels."""

from __future__ import annotations

import json

import pytest

from kernel_atlas.classify.classifier import default_classifier
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

BF16, FP16, FP32, FP8 = "c10::BFloat16", "c10::Half", "float", "c10::Float8_e4m3fn"
I64, I32, U8, I8 = "long int", "int", "unsigned char", "signed char"
SCALAR, STR, NONE = "Scalar", "str", ""


def _call(launcher: str, op: str, args: list[tuple[list[int], str, str]], rule: str = "") -> Call:
    """A call from (dims, type, concrete value) per argument, as Kineto records them."""
    dims, types, values = (json.dumps([a[i] for a in args]) for i in range(3))
    return Call(launcher, op, parse_call(dims, types, None, values), rule)


def T(dims: list[int], dtype: str) -> tuple[list[int], str, str]:  # a tensor
    return (dims, dtype, "")


def C(value: object) -> tuple[list[int], str, str]:  # a scalar's Concrete Input
    return ([], SCALAR, str(value))


N = ([], NONE, "")  # None


# ---- 1. KV-cache writes -------------------------------------------------------------------------


def test_reshape_and_cache_writes_into_both_caches_of_two_shapes() -> None:
    # vLLM reshape_and_cache(key [32,8,128], value [32,8,128], key_cache [20000,8,16,16,8],
    # value_cache [20000,8,128,16], slot_mapping [32] int64, "auto", k_scale, v_scale): the caches
    # differ in shape, not in size; the V cache had been taken for values (1,310,982,416 B)
    args = [T([32, 8, 128], BF16), T([32, 8, 128], BF16), T([20000, 8, 16, 16, 8], BF16)]
    args += [T([20000, 8, 128, 16], BF16), T([32], I64), ([], STR, "auto"), T([], FP32), T([], FP32)]
    cost = cost_of(_call("_C::reshape_and_cache", "kv_cache_write", args, "rule:kv-cache-write"))
    # key + value read (2·65,536) + written into the caches (131,072) + slot_mapping 256 + 2 scales 8
    assert cost.bytes == 131_072 + 131_072 + 256 + 8 == 262_408
    assert cost.flops == 0 and cost.precision == "bf16"


def test_reshape_and_cache_flash_into_an_fp8_cache_writes_one_byte_per_value() -> None:
    # reshape_and_cache_flash(key, value [32,8,128] bf16, caches [20000,16,8,128] uint8, slots, "fp8", scales)
    args = [T([32, 8, 128], BF16), T([32, 8, 128], BF16), T([20000, 16, 8, 128], U8)]
    args += [T([20000, 16, 8, 128], U8), T([32], I64), ([], STR, "fp8"), T([], FP32), T([], FP32)]
    cost = cost_of(_call("_C::reshape_and_cache_flash", "kv_cache_write", args, "rule:kv-cache-write"))
    # 131,072 B of bf16 read; 2·32·8·128 = 65,536 one-byte values written; 256 + 8 read
    assert cost.bytes == 131_072 + 65_536 + 256 + 8 == 196_872
    assert cost.precision == "fp8"  # the byte cache's format, from kv_cache_dtype (was "int")


# ---- 2. Quantization writes its output; it does not read it ------------------------------------


@pytest.mark.parametrize(
    ("launcher", "args", "expected"),
    [
        # vLLM static_scaled_fp8_quant(result [256,4096] fp8, input bf16, scale [1]):
        # input 2,097,152 read + scale 4 read + result 1,048,576 written
        ("_C::static_scaled_fp8_quant", [T([256, 4096], FP8), T([256, 4096], BF16), T([1], FP32)], 3_145_732),
        # dynamic_scaled_fp8_quant(result, input, scale! [1]): the scale written, 4 B
        ("_C::dynamic_scaled_fp8_quant", [T([256, 4096], FP8), T([256, 4096], BF16), T([1], FP32)], 3_145_732),
        # dynamic_per_token_scaled_fp8_quant(result, input, scale! [256,1], scale_ub None):
        # 2,097,152 + 1,048,576 + 256·4 = 1,024
        ("_C::dynamic_per_token_scaled_fp8_quant", [T([256, 4096], FP8), T([256, 4096], BF16), T([256, 1], FP32), N],
         3_146_752),
        # sgl-kernel sgl_per_token_group_quant_fp8(input, output_q, output_s [256,32], group 128, …):
        # 2,097,152 + 1,048,576 + 256·32·4 = 32,768
        ("sgl_kernel::sgl_per_token_group_quant_fp8",
         [T([256, 4096], BF16), T([256, 4096], FP8), T([256, 32], FP32), C(128), C(1e-10), C(-448.0), C(448.0),
          C(False)], 3_178_496),
    ],
)  # fmt: skip
def test_quantization_reads_its_input_and_writes_its_output(launcher: str, args: list, expected: int) -> None:
    cost = cost_of(_call(launcher, "quantize", args, "rule:quantize"))
    assert cost.bytes == expected  # the output had been read too: +1,048,576 (+33 %)
    assert cost.flops == 2 * 256 * 4096 and cost.precision == "bf16"  # the input's


# ---- 3. Partial rotary ---------------------------------------------------------------------------


def test_partial_rotary_rotates_only_the_caches_width_of_each_head() -> None:
    # vLLM rotary_embedding(positions [256] int64, query [256,4096], key [256,1024], head_size 128,
    # cos_sin_cache [131072,64] fp32, is_neox): rotary_dim 64 of 128, 32 + 8 = 40 heads
    args = [T([256], I64), T([256, 4096], BF16), T([256, 1024], BF16), C(128), T([131072, 64], FP32), C(True)]
    cost = cost_of(_call("_C::rotary_embedding", "rotary_embedding", args, "rule:rope-neox"))
    assert cost.flops == 3 * 256 * 40 * 64 == 1_966_080  # was 3,932,160 (whole heads)
    # the rotated halves read and written + a 64·4-byte cache row per token; the positions (2,048 B)
    # are not counted, as for whole-head RoPE
    assert cost.bytes == 2 * 256 * 40 * 64 * 2 + 256 * 64 * 4 == 2_686_976
    # the cache as wide as a head: every element rotated, as before
    args[4] = T([131072, 128], BF16)
    full = cost_of(_call("_C::rotary_embedding", "rotary_embedding", args, "rule:rope-neox"))
    assert full.flops == 3 * 256 * 5120 == 3_932_160
    assert full.bytes == 2 * 256 * 5120 * 2 + 256 * 128 * 2 == 5_308_416


def test_rotary_without_a_key_rotates_the_query_alone() -> None:
    # vLLM rotary_embedding(positions [256] int64, query [256,4096], key None, head_size 128,
    # cos_sin_cache [131072,128] bf16, is_neox): 32 heads of the query, every element rotated;
    # was "no query and key recorded apart"
    args = [T([256], I64), T([256, 4096], BF16), N, C(128), T([131072, 128], BF16), C(True)]
    cost = cost_of(_call("_C::rotary_embedding", "rotary_embedding", args, "rule:rope-neox"))
    assert cost.flops == 3 * 256 * 4096 == 3_145_728
    # the query read and written + a 128·2-byte cache row per token
    assert cost.bytes == 2 * 256 * 4096 * 2 + 256 * 128 * 2 == 4_259_840


# ---- 4. MoE routing ------------------------------------------------------------------------------


def test_topk_softmax_writes_its_three_outputs_and_reads_the_gating() -> None:
    # vLLM topk_softmax(topk_weights! [256,8] fp32, topk_ids! [256,8] int32, token_expert_indices! [256,8],
    # gating_output [256,128] bf16)
    args = [T([256, 8], FP32), T([256, 8], I32), T([256, 8], I32), T([256, 128], BF16)]
    cost = cost_of(_call("_moe_C::topk_softmax", "moe_gate", args, "rule:moe-gate"))
    assert cost.bytes == 256 * 128 * 2 + 3 * 256 * 8 * 4 == 90_112  # was 180,224


def test_moe_align_writes_its_buffers_and_reads_the_ids() -> None:
    # vLLM moe_align_block_size(topk_ids [256,8] int32, 128 experts, block 64, sorted_token_ids! [10240],
    # experts_ids! [160], num_tokens_post_pad! [1])
    args = [T([256, 8], I32), C(128), C(64), T([10240], I32), T([160], I32), T([1], I32)]
    cost = cost_of(_call("_moe_C::moe_align_block_size", "moe_align", args))
    assert cost.bytes == 2048 * 4 + (10240 + 160 + 1) * 4 == 49_796  # was 99,592


def test_moe_sum_reduces_over_top_k() -> None:
    # vLLM moe_sum(input [256,8,4096] bf16, output! [256,4096])
    cost = cost_of(_call("_moe_C::moe_sum", "moe_reduce", [T([256, 8, 4096], BF16), T([256, 4096], BF16)]))
    assert cost.flops == 256 * 8 * 4096 == 8_388_608  # one per element read
    assert cost.bytes == 256 * 8 * 4096 * 2 + 256 * 4096 * 2 == 18_874_368
    with pytest.raises(NoCost, match="not input"):
        cost_of(_call("_moe_C::moe_sum", "moe_reduce", [T([256, 4096], BF16), T([256, 8, 4096], BF16)]))


# ---- 5. Library GEMMs ----------------------------------------------------------------------------

MNK = 2 * 256 * 4096 * 4096  # 8,589,934,592


def test_cutlass_scaled_mm() -> None:
    # vLLM cutlass_scaled_mm(out! [256,4096] bf16, a [256,4096] fp8, b [4096,4096] fp8, a_scales [256,1],
    # b_scales [1,4096], bias None)
    args = [T([256, 4096], BF16), T([256, 4096], FP8), T([4096, 4096], FP8), T([256, 1], FP32), T([1, 4096], FP32), N]
    cost = cost_of(_call("_C::cutlass_scaled_mm", "matmul", args, "rule:gemm"))
    assert cost.flops == MNK == 8_589_934_592
    # a 1,048,576 + b 16,777,216 + scales 1,024 + 16,384 read; out 2,097,152 written
    assert cost.bytes == 1_048_576 + 16_777_216 + 1_024 + 16_384 + 2_097_152 == 19_940_352
    assert cost.precision == "fp8"


def test_sgl_kernel_scaled_mms_write_out_dtype() -> None:
    # fp8_blockwise_scaled_mm(mat_a [256,4096] fp8, mat_b [4096,4096] fp8, scales_a [256,32], scales_b [32,32],
    # out_dtype 15 = bf16): the output is returned, not recorded
    args = [T([256, 4096], FP8), T([4096, 4096], FP8), T([256, 32], FP32), T([32, 32], FP32), C(15)]
    cost = cost_of(_call("sgl_kernel::fp8_blockwise_scaled_mm", "matmul", args, "rule:gemm"))
    assert cost.flops == MNK
    assert cost.bytes == 1_048_576 + 16_777_216 + 32_768 + 4_096 + 2_097_152 == 19_959_808
    # int8_scaled_mm(mat_a int8, mat_b int8, scales_a [256], scales_b [4096], out_dtype 15, bias None)
    args = [T([256, 4096], I8), T([4096, 4096], I8), T([256], FP32), T([4096], FP32), C(15), N]
    cost = cost_of(_call("sgl_kernel::int8_scaled_mm", "matmul", args, "rule:gemm"))
    assert cost.flops == MNK and cost.precision == "int8"
    assert cost.bytes == 1_048_576 + 16_777_216 + 1_024 + 16_384 + 2_097_152 == 19_940_352
    # the out_dtype not recorded: no output size, not costed
    args[4] = N
    with pytest.raises(NoCost, match="out_dtype"):
        cost_of(_call("sgl_kernel::int8_scaled_mm", "matmul", args, "rule:gemm"))


def test_bmm_fp8_in_its_schemas_order() -> None:
    # sgl-kernel bmm_fp8(A [16,32,512] fp8, B [16,512,128] fp8, D! [16,32,128] bf16, A_scale, B_scale,
    # workspace [33554432] uint8, cublas_handle, cuda_stream)
    args = [T([16, 32, 512], FP8), T([16, 512, 128], FP8), T([16, 32, 128], BF16), T([], FP32), T([], FP32)]
    args += [T([33554432], U8), C(0), C(0)]
    cost = cost_of(_call("sgl_kernel::bmm_fp8", "bmm", args, "rule:gemm"))
    assert cost.flops == 2 * 16 * 32 * 128 * 512 == 67_108_864
    # A 262,144 + B 1,048,576 + two 4-byte scales read, D 131,072 written; the workspace is not traffic
    assert cost.bytes == 262_144 + 1_048_576 + 8 + 131_072 == 1_441_800
    assert cost.precision == "fp8"


@pytest.mark.parametrize(
    "args",
    [
        # vLLM 0.6: (a, b_q_weight, b_scales, b_zeros, g_idx, perm, workspace, b_q_type, size_m, size_n,
        # size_k, is_k_full, has_zp, use_fp32_reduce, is_zp_float)
        [T([16, 4096], FP16), T([256, 28672], I32), T([32, 14336], FP16), T([0], I32), T([0], I32), T([0], I32),
         T([132], I32), C(4), C(16), C(14336), C(4096), C(True), C(False), C(True), C(False)],
        # later: (a, c_or_none, b_q_weight, b_scales, global_scale, b_zeros, g_idx, perm, workspace,
        # b_q_type, size_m, size_n, size_k, is_k_full, use_atomic_add, use_fp32_reduce, is_zp_float)
        [T([16, 4096], FP16), N, T([256, 28672], I32), T([32, 14336], FP16), N, T([0], I32), T([0], I32),
         T([0], I32), T([132], I32), C(4), C(16), C(14336), C(4096), C(True), C(False), C(True), C(False)],
    ],
)  # fmt: skip
def test_gptq_marlin_gemm_takes_n_from_its_sizes_and_computes_at_the_activations_precision(args: list) -> None:
    cost = cost_of(_call("_C::gptq_marlin_gemm", "matmul", args, "rule:gemm"))
    assert cost.flops == 2 * 16 * 14336 * 4096 == 1_879_048_192
    # a 16·4096·2 + int4 weights packed in int32 256·28672·4 + scales 32·14336·2 + workspace 132·4 read,
    # the [16, 14336] fp16 output written
    assert cost.bytes == 131_072 + 29_360_128 + 917_504 + 528 + 458_752 == 30_867_984
    assert cost.precision == "fp16"  # w4a16: not "int"


def test_marlin_gemm_is_a_matmul_by_its_launcher() -> None:
    label = default_classifier().classify("some_unnamed_kernel", "_C::gptq_marlin_gemm", None)
    assert label.op_mapping == "matmul"


# ---- 6. int4 fused MoE ---------------------------------------------------------------------------


def test_int4_fused_experts_unpack_the_down_projections_reduced_axis() -> None:
    # vllm::outplace_fused_experts(x [256,4096] bf16, w1 [128,2816,2048] uint8, w2 [128,4096,704] uint8,
    # topk_weights [256,8], topk_ids, "silu", …, use_int4_w4a16 True, …): two int4 values per byte
    # along the reduced axes, so I = 2·704 = 1408
    args = [T([256, 4096], BF16), T([128, 2816, 2048], U8), T([128, 4096, 704], U8), T([256, 8], FP32)]
    args += [T([256, 8], I32), ([], STR, "silu")] + [C(False)] * 4 + [C(True), C(-1), N]
    args += [T([128, 2816, 32], BF16), T([128, 4096, 11], BF16)]
    cost = cost_of(_call("vllm::outplace_fused_experts", "fused_moe", args, "rule:triton-fused-moe"))
    # 2·T·k·D·(N1 + N2), T·k = 2048
    assert cost.flops == 2 * 2048 * 4096 * (2816 + 1408) == 70_866_960_384  # was 59,055,800,320
    assert cost.precision == "bf16"  # w4a16 (was "int")
    touched = 1 - (1 - 8 / 128) ** 256  # of the 128 experts
    weights = 128 * 2816 * 2048 + 128 * 4096 * 704  # bytes as stored
    intermediates = 2048 * (2816 + 1408 + 2 * 4096) * 2
    assert cost.bytes == pytest.approx(2 * 256 * 4096 * 2 + touched * weights + intermediates)


# ---- 7. arange -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # arange.start_out(238, 270, 1, out=[0] int64): the out tensor recorded before it is resized
        ([C(238), C(270), C(1), T([0], I64)], 32 * 8),
        # arange.start(238, 270, dtype 4 = int64, layout, device, pin_memory) (the shared SGLang decode)
        ([C(238), C(270), C(4), N, N, C(False)], 32 * 8),
        # arange(end 1, dtype 4, …) (mi300x_normalization_layers)
        ([C(1), C(4), N, N, N], 1 * 8),
        # arange.start_step(0, 10, 3, dtype None, …): integer bounds → int64, ⌈10 / 3⌉ = 4 values
        ([C(0), C(10), C(3), N, N, N, N], 4 * 8),
        # float bounds, dtype None: torch's default fp32, ⌈(1.0 − 0.0) / 0.25⌉ = 4
        ([C(0.0), C(1.0), C(0.25), N, N, N, N], 4 * 4),
    ],
)  # fmt: skip
def test_arange_writes_what_its_bounds_say(args: list, expected: int) -> None:
    cost = cost_of(_call("aten::arange", "arange", args))
    assert cost.bytes == expected and cost.flops == 0


def test_arange_without_bounds_or_a_sized_out_is_not_costed() -> None:
    with pytest.raises(NoCost, match="start, end and step not recorded"):
        cost_of(_call("aten::arange", "arange", [([], SCALAR, ""), ([], SCALAR, ""), ([], SCALAR, ""), T([0], I64)]))


# ---- 8. Mamba's scans are no prefix sums by their names ------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "_chunk_scan_fwd_kernel",
        "_chunk_cumsum_fwd_kernel",
        "void selective_scan_fwd_kernel<Selective_Scan_fwd_kernel_traits<32, 4, true, true, true, true, true, "
        "c10::BFloat16, float, c10::BFloat16> >(SSMParamsBase)",
        "_selective_scan_update_kernel",
    ],
)
def test_mamba_scan_kernels_are_not_cumsum_by_name(name: str) -> None:
    classifier = default_classifier()
    assert classifier.classify(name, None, None).op_mapping == "unknown"
    # the launcher still says so where it does
    assert classifier.classify(name, "aten::cumsum", None).op_mapping == "cumsum"


def test_prefix_sum_kernels_stay_cumsum() -> None:
    classifier = default_classifier()
    for name in (
        "void at_cuda_detail::cub::DeviceScanKernel<int>(int)",
        "void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >(float*, float const*)",
    ):
        assert (classifier.classify(name, None, None).op_mapping, classifier.classify(name, None, None).rule) == (
            "cumsum",
            "rule:scan",
        )
