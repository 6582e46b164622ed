"""What ATen ops write, and attention's backward: every FLOP and byte below was worked out by hand
from the recorded `Input Dims`, `Input type` and `Concrete Inputs` and the op's ATen schema
(torch._C._jit_get_schemas_for_operator), never with the cost formulas themselves."""

from __future__ import annotations

import json

import pytest

from kernel_atlas.core.devices import MATRIX
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

BF16, FP16, FP32, I64 = "c10::BFloat16", "c10::Half", "float", "long int"


def _cost(launcher: str, op: str, args: list[tuple[list[int], str, str]]):
    """A call from (dims, type, concrete value) per recorded argument, as the profiler writes them."""
    dims, types, concrete = (json.dumps([a[i] for a in args]) for i in range(3))
    return cost_of(Call(launcher, op, parse_call(dims, types, None, concrete)))


def _scalar(value: str) -> tuple[list[int], str, str]:
    return [], "Scalar", value


NONE: tuple[list[int], str, str] = ([], "", "")


# --- attention backward ----------------------------------------------------------------------


def _flash_backward_args(q, kv, lse, dtype, causal: str, cum_seq: bool = False):
    # _flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
    # max_q, max_k, dropout_p, is_causal, rng_state, unused, scale, window_size_left, window_size_right)
    cum = ([3], "int", "") if cum_seq else NONE
    return [
        (q, dtype, ""),
        (q, dtype, ""),
        (kv, dtype, ""),
        (kv, dtype, ""),
        (q, dtype, ""),
        (lse, FP32, ""),
        cum,
        cum,
        _scalar(str(q[1])),
        _scalar(str(kv[1])),
        _scalar("0."),
        _scalar(causal),
        ([], I64, ""),
        ([], I64, ""),
        _scalar("0.088388"),
        NONE,
        NONE,
    ]


# _flash_attention_forward's dropout_p, is_causal, return_debug_mask, scale
FORWARD_TAIL = [_scalar("0."), _scalar("True"), _scalar("False"), _scalar("0.088388")]


def test_flash_attention_backward_gqa_causal_is_two_and_a_half_forwards() -> None:
    # B=2, S=4096, H_q=32, H_kv=8, d=128, bf16, causal, [B, S, H, D]:
    # forward 2·B·H_q·(S²/2)·(d+dv) = 2·2·32·8,388,608·256 = 274,877,906,944 FLOP;
    # backward 2·B·H_q·(S²/2)·(3d+2dv) = 2·2·32·8,388,608·640 = 687,194,767,360 = 2.5 × the forward
    # bytes: q, out, grad_out 2·4096·32·128·2 B = 67,108,864 each; k, v 2·4096·8·128·2 = 16,777,216 each;
    # logsumexp [2, 32, 4096] fp32 262,144·4 = 1,048,576 → read 3·67,108,864 + 2·16,777,216 + 1,048,576
    # = 235,929,600; written grad_q 67,108,864 + grad_k, grad_v 2·16,777,216 = 100,663,296 → 336,592,896
    q, kv = [2, 4096, 32, 128], [2, 4096, 8, 128]
    cost = _cost(
        "aten::_flash_attention_backward", "attention", _flash_backward_args(q, kv, [2, 32, 4096], BF16, "True")
    )
    assert cost.flops == 687_194_767_360
    assert cost.bytes == 336_592_896
    assert (cost.precision, cost.unit) == ("bf16", MATRIX)
    assert "not recorded" not in cost.formula
    # the forward of the same shapes, for the 2.5 ratio: _flash_attention_forward(q, k, v, cum_seq_q,
    # cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, scale)
    forward = _cost(
        "aten::_flash_attention_forward",
        "attention",
        [(q, BF16, ""), (kv, BF16, ""), (kv, BF16, ""), NONE, NONE, _scalar("4096"), _scalar("4096"), *FORWARD_TAIL],
    )
    assert forward.flops == 274_877_906_944


def test_flash_backward_aligns_a_non_square_causal_mask_bottom_right_as_its_forward() -> None:
    # Sq=1024, Skv=4096, H=8, d=64, [B, S, H, D]: FlashAttention's diagonal from the bottom right keeps
    # Sq·Skv − Sq²/2 = 4,194,304 − 524,288 = 3,670,016 pairs; 2·1·8·3,670,016·(3·64+2·64) = 18,790,481,920
    # bytes: q, out, grad_out 1024·8·64·2 = 1,048,576 each; k, v 4096·8·64·2 = 4,194,304 each; lse [1, 8, 1024]
    # fp32 32,768 → read 3,145,728 + 8,388,608 + 32,768 = 11,567,104; written 1,048,576 + 8,388,608 = 9,437,184
    q, kv = [1, 1024, 8, 64], [1, 4096, 8, 64]
    cost = _cost(
        "aten::_flash_attention_backward", "attention", _flash_backward_args(q, kv, [1, 8, 1024], BF16, "True")
    )
    assert cost.flops == 18_790_481_920
    assert cost.bytes == 21_004_288


def test_sdpa_flash_backward_aligns_a_non_square_causal_mask_bottom_right() -> None:
    # _scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp,
    # cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale),
    # [B, H, S, D]: q [1, 8, 1024, 64], k/v [1, 8, 4096, 64]. The op runs FlashAttention's kernel,
    # whose diagonal starts at the bottom right (torch/nn/attention/bias.py: "for this particular op
    # it means lower right"; SDPA sends it no non-square causal call of its own, which would be top
    # left): Sq·Skv − Sq²/2 = 3,670,016 pairs, as the flash case above: 18,790,481,920 FLOP (it had
    # been costed top left: Sq²/2 = 524,288 pairs, 2,684,354,560 FLOP); bytes as above: 21,004,288
    q, kv = [1, 8, 1024, 64], [1, 8, 4096, 64]
    args = [(q, BF16, ""), (q, BF16, ""), (kv, BF16, ""), (kv, BF16, ""), (q, BF16, ""), ([1, 8, 1024], FP32, "")]
    args += [NONE, NONE, _scalar("1024"), _scalar("4096"), _scalar("0."), _scalar("True"), ([], I64, "")]
    args += [([], I64, ""), _scalar("0.125")]
    cost = _cost("aten::_scaled_dot_product_flash_attention_backward", "attention", args)
    assert cost.flops == 18_790_481_920
    assert cost.bytes == 21_004_288


def test_sdpa_flash_forward_aligns_a_non_square_causal_mask_bottom_right() -> None:
    # _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask,
    # scale), [B, H, S, D]: q [1, 8, 1024, 64], k/v [1, 8, 4096, 64], causal: FlashAttention's
    # bottom-right diagonal keeps 3,670,016 pairs → 2·2·1·8·3,670,016·64 = 7,516,192,768 FLOP (top
    # left, the dispatcher's own `aten::scaled_dot_product_attention`, keeps 524,288: 1,073,741,824)
    q, kv = [1, 8, 1024, 64], [1, 8, 4096, 64]
    args = [(q, BF16, ""), (kv, BF16, ""), (kv, BF16, ""), _scalar("0."), _scalar("True"), _scalar("False")]
    flash = _cost("aten::_scaled_dot_product_flash_attention", "attention", args)
    assert flash.flops == 7_516_192_768
    sdpa = [(q, BF16, ""), (kv, BF16, ""), (kv, BF16, ""), NONE, _scalar("0."), _scalar("True")]
    assert _cost("aten::scaled_dot_product_attention", "attention", sdpa).flops == 1_073_741_824


def test_efficient_attention_backward_with_a_bias_gradient() -> None:
    # _efficient_attention_backward(grad_out_, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k,
    # max_seqlen_q, max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type,
    # bias_requires_grad): [1, 256, 8, 64] fp16, mask type 0 (none): 256·256 = 65,536 pairs;
    # 2·1·8·65,536·(3·64+2·64) = 335,544,320 FLOP
    # bytes: grad_out, q, k, v, out 256·8·64·2 = 262,144 each (1,310,720); lse [1, 8, 256] fp32 8,192;
    # bias [1, 8, 256, 256] fp16 524,288·2 = 1,048,576 → read 2,367,488; written grad_q/k/v 3·262,144
    # + grad_bias 1,048,576 = 1,835,008 → 4,202,496
    x, bias = [1, 256, 8, 64], [1, 8, 256, 256]
    args = [(x, FP16, ""), (x, FP16, ""), (x, FP16, ""), (x, FP16, ""), (bias, FP16, ""), (x, FP16, "")]
    args += [NONE, NONE, _scalar("256"), _scalar("256"), ([1, 8, 256], FP32, ""), _scalar("0.")]
    args += [([], I64, ""), ([], I64, ""), _scalar("0"), _scalar("True")]
    cost = _cost("aten::_efficient_attention_backward", "attention", args)
    assert cost.flops == 335_544_320
    assert cost.bytes == 4_202_496
    assert cost.precision == "fp16"


def test_sdpa_efficient_and_cudnn_backward() -> None:
    # _scaled_dot_product_efficient_attention_backward(grad_out_, query, key, value, attn_bias, out,
    # logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, scale):
    # [2, 4, 128, 64] fp16, causal square: 128²/2 = 8,192 pairs; 2·2·4·8,192·(3·64+2·64) = 41,943,040
    # bytes: five [2, 4, 128, 64] fp16 tensors 65,536·2 = 131,072 each (655,360) + lse [2, 4, 128] fp32
    # 4,096 read; grad_q/k/v 3·131,072 = 393,216 written (no bias) → 1,052,672
    x = [2, 4, 128, 64]
    args = [(x, FP16, ""), (x, FP16, ""), (x, FP16, ""), (x, FP16, ""), NONE, (x, FP16, "")]
    args += [([2, 4, 128], FP32, ""), ([], I64, ""), ([], I64, ""), _scalar("0.")]
    args += [([], "GenericList", "[True, True, True, False]"), _scalar("True"), _scalar("0.125")]
    cost = _cost("aten::_scaled_dot_product_efficient_attention_backward", "attention", args)
    assert cost.flops == 41_943_040
    assert cost.bytes == 1_052_672
    # _scaled_dot_product_cudnn_attention_backward(grad_out, query, key, value, out, logsumexp,
    # philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    # scale): [1, 2, 512, 128] bf16, not causal: 512·512 = 262,144 pairs; 2·1·2·262,144·(3·128+2·128)
    # = 671,088,640; bytes: five tensors 131,072·2 = 262,144 each (1,310,720) + lse [1, 2, 512, 1] fp32
    # 4,096 read, 3·262,144 = 786,432 written → 2,101,248
    x = [1, 2, 512, 128]
    args = [(x, BF16, ""), (x, BF16, ""), (x, BF16, ""), (x, BF16, ""), (x, BF16, ""), ([1, 2, 512, 1], FP32, "")]
    args += [([], I64, ""), ([], I64, ""), NONE, NONE, NONE, _scalar("512"), _scalar("512"), _scalar("0.")]
    args += [_scalar("False"), _scalar("0.088")]
    cost = _cost("aten::_scaled_dot_product_cudnn_attention_backward", "attention", args)
    assert cost.flops == 671_088_640
    assert cost.bytes == 2_101_248


def test_varlen_flash_backward_says_its_lengths_are_missing() -> None:
    args = _flash_backward_args([1, 4096, 8, 64], [1, 4096, 8, 64], [1, 8, 4096], BF16, "True", cum_seq=True)
    with pytest.raises(NoCost, match="varlen"):
        _cost("aten::_flash_attention_backward", "attention", args)


# --- index_select ----------------------------------------------------------------------------


def test_index_select_reads_its_dim() -> None:
    # index_select([4, 1000, 512] fp32, dim=1, index [10] int64): output [4, 10, 512] = 20,480 elements:
    # 81,920 B read from self + 81,920 written + index 10·8 = 80 → 163,920
    for dim in ("1", "-2"):
        cost = _cost("aten::index_select", "index_select", [([4, 1000, 512], FP32, ""), _scalar(dim), ([10], I64, "")])
        assert cost.bytes == 163_920
    # dim 0 of [1000, 512] with 100 indices: 100·512·4 = 204,800 read and written + 800 → 410,400
    cost = _cost("aten::index_select", "index_select", [([1000, 512], FP32, ""), _scalar("0"), ([100], I64, "")])
    assert cost.bytes == 410_400
    # dim not recorded: 0 assumed, and said: output [10, 1000, 512] = 5,120,000 elements · 4 B twice + 80
    cost = _cost("aten::index_select", "index_select", [([4, 1000, 512], FP32, ""), _scalar(""), ([10], I64, "")])
    assert cost.bytes == 40_960_080
    assert "dim not recorded" in cost.formula


# --- what reductions, sorts and top-k write ----------------------------------------------------


def test_topk_writes_k_values_and_int64_indices_per_row() -> None:
    # topk([32, 151936] bf16, k=50, dim=-1): read 32·151,936·2 = 9,723,904; values 32·50·2 = 3,200 +
    # indices 32·50·8 = 12,800 → 9,739,904; one FLOP per element read: 4,861,952
    x = ([32, 151936], BF16, "")
    cost = _cost("aten::topk", "topk", [x, _scalar("50"), _scalar("-1"), _scalar("True"), _scalar("True")])
    assert cost.bytes == 9_739_904
    assert cost.flops == 4_861_952
    assert cost.precision == "bf16"
    # along dim 0 of [4, 10] fp32, k=2: read 160; 2·10 = 20 outputs: values 80 + indices 160 → 400
    cost = _cost("aten::topk", "topk", [([4, 10], FP32, ""), _scalar("2"), _scalar("0"), _scalar("True")])
    assert cost.bytes == 400


def test_sort_writes_values_and_int64_indices() -> None:
    # sort.stable([32, 151936] fp32, stable=False, dim=-1, descending=False): n = 4,861,952;
    # read 4n = 19,447,808 + values 4n 19,447,808 + indices 8n 38,895,616 = 77,791,232
    x = ([32, 151936], FP32, "")
    cost = _cost("aten::sort", "sort", [x, _scalar("False"), _scalar("-1"), _scalar("False")])
    assert cost.bytes == 77_791_232
    # argsort: the indices alone, 19,447,808 + 38,895,616 = 58,343,424
    cost = _cost("aten::argsort", "sort", [x, _scalar("-1"), _scalar("False")])
    assert cost.bytes == 58_343_424


def test_argmax_and_max_dim_write_int64_indices() -> None:
    x = ([32, 151936], BF16, "")  # 9,723,904 B read
    # argmax(dim=1): 32 int64 = 256 → 9,724,160
    assert _cost("aten::argmax", "argmax", [x, _scalar("1"), _scalar("False")]).bytes == 9_724_160
    # argmax(dim=None, the profiler records None with no type): one int64 → 9,723,912
    assert _cost("aten::argmax", "argmax", [x, NONE, _scalar("False")]).bytes == 9_723_912
    # max.dim(dim=1): values 32·2 = 64 + indices 32·8 = 256 → 9,724,224
    assert _cost("aten::max", "max", [x, _scalar("1"), _scalar("False")]).bytes == 9_724_224
    # max(self): one bf16 value → 9,723,906
    assert _cost("aten::max", "max", [x]).bytes == 9_723_906
    # max.other(bf16 [1000], fp32 [1000]): elementwise, fp32 by promotion: 2,000 + 4,000 + 4,000
    cost = _cost("aten::max", "max", [([1000], BF16, ""), ([1000], FP32, "")])
    assert (cost.bytes, cost.flops, cost.precision) == (10_000, 1000, "fp32")


def test_full_and_partial_reductions_write_their_output() -> None:
    # sum(self [1024, 1024] fp32, dtype): a full reduction, 4,194,304 read + one fp32 4 → 4,194,308
    assert _cost("aten::sum", "sum", [([1024, 1024], FP32, ""), NONE]).bytes == 4_194_308
    # sum.dim_IntList([32, 4096, 1024] bf16, [-1], False, None): 268,435,456 + 32·4096·2 = 262,144
    args = [([32, 4096, 1024], BF16, ""), ([], "ScalarList", "[-1]"), _scalar("False"), NONE]
    assert _cost("aten::sum", "sum", args).bytes == 268_697_600
    # mean([32, 4096, 1024] fp32, [1, 2], keepdim): 536,870,912 + 32·4 = 128 → 536,871,040
    args = [([32, 4096, 1024], FP32, ""), ([], "ScalarList", "[1, 2]"), _scalar("True"), NONE]
    assert _cost("aten::mean", "mean", args).bytes == 536_871_040
    # a dim list passed but its value not recorded (older Concrete Inputs): the 268,435,456 B read
    # alone, and said — not taken for a full reduction
    args = [([32, 4096, 1024], BF16, ""), ([], "ScalarList", ""), _scalar("False"), NONE]
    cost = _cost("aten::sum", "sum", args)
    assert cost.bytes == 268_435_456
    assert "not recorded" in cost.formula


# --- output dtypes of pointwise ops ------------------------------------------------------------


def test_mixed_dtype_arithmetic_writes_the_promoted_dtype() -> None:
    n = 1_048_576
    # add(bf16 [n], fp32 [n], alpha) → fp32: read 2n + 4n, write 4n = 10,485,760; fp32 math
    cost = _cost("aten::add", "add", [([n], BF16, ""), ([n], FP32, ""), _scalar("1")])
    assert (cost.bytes, cost.flops, cost.precision) == (10_485_760, n, "fp32")
    # add_(bf16 [n], fp32 [n]) in place: self's bf16 written, 2n + 4n + 2n = 8,388,608
    assert _cost("aten::add_", "add", [([n], BF16, ""), ([n], FP32, ""), _scalar("1")]).bytes == 8_388_608
    # mul(bf16 [n], fp32 0-d tensor): a 0-d tensor of the same category does not promote → bf16:
    # 2n + 4 + 2n = 4,194,308
    cost = _cost("aten::mul", "mul", [([n], BF16, ""), ([], FP32, "")])
    assert (cost.bytes, cost.precision) == (4_194_308, "bf16")
    # add(bf16 [n], fp16 [n]) → fp32: 2n + 2n + 4n = 8,388,608
    cost = _cost("aten::add", "add", [([n], BF16, ""), ([n], FP16, ""), _scalar("1")])
    assert (cost.bytes, cost.precision) == (8_388_608, "fp32")


def test_softmax_half_to_float_writes_fp32() -> None:
    # _softmax([8, 512, 512] fp16, dim=-1, half_to_float=True): n = 2,097,152; read 2n + write 4n =
    # 12,582,912; 5 FLOP per element (catalogs/costs.toml softmax) = 10,485,760
    x = ([8, 512, 512], FP16, "")
    cost = _cost("aten::_softmax", "softmax", [x, _scalar("-1"), _scalar("True")])
    assert (cost.bytes, cost.flops) == (12_582_912, 10_485_760)
    assert "half_to_float" in cost.formula
    # half_to_float False: 2n + 2n = 8,388,608
    assert _cost("aten::_softmax", "softmax", [x, _scalar("-1"), _scalar("False")]).bytes == 8_388_608
    # _log_softmax too, and softmax.int(self, dim, dtype=6 float32): 2n + 4n
    assert _cost("aten::_log_softmax", "softmax", [x, _scalar("-1"), _scalar("True")]).bytes == 12_582_912
    assert _cost("aten::softmax", "softmax", [x, _scalar("-1"), _scalar("6")]).bytes == 12_582_912


def test_norms_write_their_mean_and_rstd() -> None:
    # native_layer_norm([8, 512, 1024] bf16, [1024], w [1024], b [1024], eps): x 4,194,304·2 = 8,388,608
    # read, w and b 2,048 each, y 8,388,608 written, mean and rstd 2·4,096 rows·4 B (fp32) = 32,768
    # → 16,814,080; 5 FLOP per element = 20,971,520
    args = [([8, 512, 1024], BF16, ""), ([], "ScalarList", "[1024]"), ([1024], BF16, ""), ([1024], BF16, "")]
    cost = _cost("aten::native_layer_norm", "layer_norm", [*args, _scalar("1e-05")])
    assert (cost.bytes, cost.flops) == (16_814_080, 20_971_520)
    # native_group_norm([8, 256, 32, 32] fp32, w [256], b [256], N=8, C=256, HxW=1024, group=32, eps):
    # x and y 2,097,152·4 = 8,388,608 each, w and b 1,024 each, mean and rstd 2·(8·32)·4 = 2,048
    # → 16,781,312; 5 FLOP per element = 10,485,760
    args = [([8, 256, 32, 32], FP32, ""), ([256], FP32, ""), ([256], FP32, "")]
    args += [_scalar("8"), _scalar("256"), _scalar("1024"), _scalar("32"), _scalar("1e-05")]
    cost = _cost("aten::native_group_norm", "group_norm", args)
    assert (cost.bytes, cost.flops) == (16_781_312, 10_485_760)


# --- accumulating reductions: their values' dtype --------------------------------------------


def test_an_integer_sum_writes_int64_values():
    # sum.dim_IntList(int32 [1000, 64], [1], False, dtype=None): ATen sums integers into int64.
    # read 1000·64·4 = 256,000 B; written 1000 int64 values = 8,000 B
    cost = _cost("aten::sum", "sum", [([1000, 64], "int", ""), ([], "ScalarList", "[1]"), _scalar("False"), NONE])
    assert cost.bytes == 264_000
    assert "int64 values" in cost.formula


def test_a_recorded_dtype_argument_sets_the_values_dtype():
    # sum.dim_IntList(bf16 [4096, 64], [1], False, dtype=6 (float)): 4096 fp32 values written.
    # read 4096·64·2 = 524,288 B; written 4096·4 = 16,384 B
    cost = _cost(
        "aten::sum", "sum", [([4096, 64], BF16, ""), ([], "ScalarList", "[1]"), _scalar("False"), _scalar("6")]
    )
    assert cost.bytes == 540_672
    # sum(bf16 [4096, 64], dtype=6), its `out=` tensor recorded after: one fp32 value
    full = _cost("aten::sum", "sum", [([4096, 64], BF16, ""), _scalar("6"), ([], FP32, "")])
    assert full.bytes == 524_288 + 4


def test_a_bool_cumsum_writes_int64_and_a_float_one_its_own_dtype():
    # cumsum(bool [32, 128], 1, dtype=None): 4,096 bools read, 4,096 int64 written = 4,096 + 32,768
    assert _cost("aten::cumsum", "cumsum", [([32, 128], "bool", ""), _scalar("1"), NONE]).bytes == 36_864
    # cumsum(fp16 [32, 128], 1): 4,096·2 read and written
    assert _cost("aten::cumsum", "cumsum", [([32, 128], FP16, ""), _scalar("1"), NONE]).bytes == 16_384


def test_a_float_mean_keeps_its_dtype():
    # mean.dim(fp32 [8, 16], [1], False, None): read 512 B, written 8·4 = 32 B
    assert (
        _cost("aten::mean", "mean", [([8, 16], FP32, ""), ([], "ScalarList", "[1]"), _scalar("False"), NONE]).bytes
        == 544
    )


def test_scalar_type_codes_read_through_the_dtypes_catalog():
    # c10/core/ScalarType.h's order: 0 Byte, 3 Int, 4 Long, 5 Half, 6 Float, 11 Bool,
    # 15 BFloat16, 24 Float8_e4m3fn, 8 ComplexHalf (4 B), 27 UInt16, 29 UInt64 (stop 63); 16 (QUInt4x2) and
    # 44 (Float8_e8m0fnu) are not catalogued
    from kernel_atlas.ingest.recorded import dtypes, scalar_type

    expected = {0: 1, 3: 4, 4: 8, 5: 2, 6: 4, 8: 4, 11: 1, 15: 2, 24: 1, 27: 2, 29: 8}
    assert {code: dtypes()[scalar_type(code)].bytes for code in expected} == expected
    assert scalar_type(16) is None and scalar_type(44) is None and scalar_type(None) is None
    # _scaled_mm(fp8 [256, 512], fp8 [512, 1024], scales, …, out_dtype=15): a 2-byte output.
    # read 131,072 + 524,288 + two fp32 scalars 8; written 256·1024·2 = 524,288
    e4m3 = "c10::Float8_e4m3fn"
    args = [
        ([256, 512], e4m3, ""),
        ([512, 1024], e4m3, ""),
        ([], FP32, ""),
        ([], FP32, ""),
        NONE,
        NONE,
        _scalar("15"),
        _scalar("False"),
    ]
    assert _cost("aten::_scaled_mm", "gemm", args).bytes == 131_072 + 524_288 + 8 + 524_288
