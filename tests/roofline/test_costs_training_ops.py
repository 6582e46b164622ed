"""Training ops read or written by index, each number derived by hand from the call written here
(stop 58's campaign): the loss gathers one log-probability per target, an embedding's backward
writes its dense gradient, accumulating scatters read their destination, a fused Adam writes
three lists, dropout writes a mask, max pooling writes int64 indices."""

from __future__ import annotations

import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

FP32, BF16, I64, SCALAR, NONE, LIST = '"float"', '"c10::BFloat16"', '"long int"', '"Scalar"', '""', '"TensorList"'


def _call(launcher: str, op: str, dims: str, types: list[str], concrete: str | None = None) -> Call:
    return Call(launcher, op, parse_call(dims, "[" + ",".join(types) + "]", None, concrete), "", "float")


def test_nll_loss_gathers_one_log_probability_per_target() -> None:
    # nll_loss_forward(logp [8192, 32000] fp32, target [8192] int64, weight None, reduction 1 (mean), ignore -100)
    dims = "[[8192,32000],[8192],[],[],[]]"
    concrete = '["","","","1","-100"]'
    cost = cost_of(_call("aten::nll_loss_forward", "sum", dims, [FP32, I64, NONE, SCALAR, SCALAR], concrete))
    # 8,192 log-probabilities (4 B) and targets (8 B) read; loss and total_weight written: 2 × 4 B
    assert (cost.flops, cost.bytes) == (8192.0, 8192 * 4 + 8192 * 8 + 8)
    # backward(grad_output [], self [8192, 32000], target [8192], weight, reduction, ignore, total_weight [])
    dims = "[[],[8192,32000],[8192],[],[],[],[]]"
    back = cost_of(
        _call("aten::nll_loss_backward", "sum", dims, [FP32, FP32, I64, NONE, SCALAR, SCALAR, FP32], concrete)
    )
    # grad 4 + target 65,536 + total_weight 4 read; one gradient element per target written: 32,768
    assert (back.flops, back.bytes) == (8192.0, 4 + 65_536 + 4 + 32_768)


def test_embedding_backward_writes_its_dense_gradient() -> None:
    # embedding_dense_backward(grad [8,512,1024] bf16, indices [8,512] int64, num_weights 50000, padding -1, False)
    dims = "[[8,512,1024],[8,512],[],[],[]]"
    concrete = '["","","50000","-1","False"]'
    cost = cost_of(_call("aten::embedding_dense_backward", "index_put_", dims, [BF16, I64] + [SCALAR] * 3, concrete))
    assert cost.bytes == 8_388_608 + 32_768 + 50_000 * 1024 * 2 == 110_821_376
    assert cost.flops == 8 * 512 * 1024
    with pytest.raises(NoCost, match="num_weights"):
        cost_of(_call("aten::embedding_dense_backward", "index_put_", dims, [BF16, I64] + [SCALAR] * 3))


def test_accumulating_scatters_read_and_write_their_destination() -> None:
    # index_add_(self [50000,1024] fp32, dim 0, index [4096], source [4096,1024], alpha 1): 4,096 rows touched
    dims = "[[50000,1024],[],[4096],[4096,1024],[]]"
    cost = cost_of(
        _call("aten::index_add_", "index_put_", dims, [FP32, SCALAR, I64, FP32, SCALAR], '["","0","","","1"]')
    )
    assert cost.bytes == 32_768 + 16_777_216 + 2 * 16_777_216 == 50_364_416
    assert cost.flops == 4096 * 1024
    # scatter_add_(self [50], dim 0, index [61072] int64, src [61072]) as a100_diff_control records it: the
    # destination is self (200 B, read and written), not the larger index
    dims = "[[50],[],[61072],[61072]]"
    scatter = cost_of(_call("aten::scatter_add_", "scatter", dims, [FP32, SCALAR, I64, FP32], '["","0","",""]'))
    assert scatter.bytes == 488_576 + 244_288 + 2 * 200 == 733_264
    assert scatter.precision == "fp32"


def test_fused_adamw_reads_four_lists_and_writes_three() -> None:
    # _fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs [], state_steps, lr, …) over
    # [1024,1024] and [1024] fp32 (1,049,600 parameters), two step counts
    lists = "[[1024,1024],[1024]]"
    dims = f"[{lists},{lists},{lists},{lists},[],[[],[]],[],[],[],[],[],[]]"
    types = [LIST] * 6 + [SCALAR] * 6
    cost = cost_of(
        Call("aten::_fused_adamw_", "fused_elementwise", parse_call(dims, "[" + ",".join(types) + "]"), "", "float")
    )
    params = 1_049_600
    assert cost.bytes == 7 * params * 4 + 2 * 4 == 29_388_808
    assert cost.flops == 13 * params


def test_list_dtype_is_not_taken_from_a_scalar_tensor() -> None:
    # _foreach_mul_(grads [[1024,1024],[1024]], clip_coef [] fp32) in a bf16 run: elements assumed bf16, not fp32
    dims = "[[[1024,1024],[1024]],[]]"
    call = Call("aten::_foreach_mul_", "mul", parse_call(dims, f"[{LIST},{FP32}]"), "", "c10::BFloat16")
    cost = cost_of(call)
    # list read 1,049,600·2 + coefficient 4 + list written 1,049,600·2
    assert cost.bytes == 2 * 1_049_600 * 2 + 4
    assert "assumed c10::BFloat16" in cost.formula


def test_dropout_writes_a_mask_and_pooling_its_indices() -> None:
    dropout = cost_of(_call("aten::native_dropout", "fused_elementwise", "[[1024,4096],[],[]]", [FP32, SCALAR, SCALAR]))
    assert dropout.bytes == 1024 * 4096 * 4 * 2 + 1024 * 4096  # input, output, bool mask
    # max_pool2d_with_indices(x [32,64,112,112], kernel 3, stride 2, padding 1): output [32,64,56,56]
    dims = "[[32,64,112,112],[],[],[],[],[]]"
    concrete = '["","[3, 3]","[2, 2]","[1, 1]","[1, 1]","False"]'
    pool = cost_of(_call("aten::max_pool2d_with_indices", "max", dims, [FP32] + [SCALAR] * 5, concrete))
    out = 32 * 64 * 56 * 56
    assert pool.bytes == 102_760_448 + out * 4 + out * 8 == 179_830_784
    # backward(grad_output [32,64,56,56], self [32,64,112,112], …, indices [32,64,56,56] int64)
    dims = "[[32,64,56,56],[32,64,112,112],[],[],[],[],[],[32,64,56,56]]"
    back = cost_of(
        _call("aten::max_pool2d_with_indices_backward", "max", dims, [FP32, FP32] + [SCALAR] * 5 + [I64], None)
    )
    assert back.bytes == out * 4 + out * 8 + 102_760_448 == 179_830_784


def test_foreach_norm_writes_one_norm_per_tensor() -> None:
    dims = "[[[1024,1024],[1024]],[]]"
    cost = cost_of(
        Call("aten::_foreach_norm", "fused_elementwise", parse_call(dims, f"[{LIST},{SCALAR}]"), "", "float")
    )
    assert cost.bytes == 1_049_600 * 4 + 2 * 4
