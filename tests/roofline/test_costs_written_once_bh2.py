"""Campaign BH 1, 7 (conv) and 8: an `out=` tensor written once and not read, a convolution's
formula naming the bias its bytes hold, and outputs that had been left uncounted — a norm's
weight/bias gradients and saved statistics, RMS norm's rstd, an attention forward's logsumexp.
Every expected number is worked out by hand in the comments beside it (bf16 2 bytes, fp32 4)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, cost_of
from tests.support.traces import ingested, trace_path

BF16, FP32 = "c10::BFloat16", "float"
NONE = ([], "", "")
MEGA = [1_048_576]  # 2^20 elements: 2,097,152 B in bf16


def _t(dims: list[int], dtype: str = BF16) -> tuple[list[int], str, str]:
    return (dims, dtype, "")


def _s(text: str, dtype: str = "Scalar") -> tuple[list[int], str, str]:
    return ([], dtype, text)


def _call(launcher: str, op: str, args: list[tuple[list[int], str, str]]) -> Call:
    dims, types, concrete = (json.dumps([a[i] for a in args]) for i in range(3))
    return Call(launcher, op, parse_call(dims, types, None, concrete))


# --- 1. out= overloads: the output written once, never read -------------------------------------------


def test_out_overloads_write_their_out_tensor_once() -> None:
    # add.out(a [2^20], b [2^20], alpha 1, out [2^20]) bf16: a and b read 2·2,097,152, out written
    # 2,097,152 = 6,291,456 (had been 8,388,608: out read as an input, then written again)
    add = cost_of(_call("aten::add", "add", [_t(MEGA), _t(MEGA), _s("1"), _t(MEGA)]))
    assert add.bytes == 2 * 2_097_152 + 2_097_152 == 6_291_456
    assert add.flops == 1_048_576
    # mul.out(a, b, out): no Scalar between the inputs and out, the same 6,291,456
    mul = cost_of(_call("aten::mul", "mul", [_t(MEGA), _t(MEGA), _t(MEGA)]))
    assert mul.bytes == 6_291_456
    # gelu.out(x, "none", out): x read 2,097,152 + out written 2,097,152 = 4,194,304 (had been 6,291,456)
    gelu = cost_of(_call("aten::gelu", "gelu", [_t(MEGA), _s('"none"', ""), _t(MEGA)]))
    assert gelu.bytes == 4_194_304
    # mse_loss_backward.grad_input(grad [] fp32, self [8,16,32,32], target [8,16,32,32], reduction 1,
    # grad_input [8,16,32,32]) as mi300x_normalization_layers records it: 4 + 524,288 + 524,288 read
    # + 524,288 written = 1,572,868 (had been 2,097,156)
    x = [8, 16, 32, 32]
    mse = cost_of(
        _call(
            "aten::mse_loss_backward",
            "fused_elementwise",
            [_t([], FP32), _t(x, FP32), _t(x, FP32), _s("1"), _t(x, FP32)],
        )
    )
    assert mse.bytes == 4 + 524_288 + 524_288 + 524_288 == 1_572_868
    assert "written, not read" in mse.formula


def test_functional_overloads_are_unchanged() -> None:
    # mul(a, b): both read, a 2^20-element bf16 output written: 3 · 2,097,152 = 6,291,456
    assert cost_of(_call("aten::mul", "mul", [_t(MEGA), _t(MEGA)])).bytes == 6_291_456
    # div.Tensor_mode(self, other, "floor") has three arguments too, its third no tensor: 6,291,456
    div = cost_of(_call("aten::div", "div", [_t(MEGA), _t(MEGA), _s('"floor"', "")]))
    assert div.bytes == 6_291_456
    # where(cond bool [2^20], self, other): its third tensor is an input: 1,048,576 + 2·2,097,152 read
    # + 2,097,152 written = 7,340,032
    where = cost_of(_call("aten::where", "where", [_t(MEGA, "bool"), _t(MEGA), _t(MEGA)]))
    assert where.bytes == 1_048_576 + 3 * 2_097_152 == 7_340_032


# --- 7. a convolution's formula adds up to its bytes ----------------------------------------------------


def _formula_bytes(formula: str) -> int:
    """The sum of the integers after `bytes =` (each term `name N`, or `output [shape] N`)."""
    terms = formula.split("bytes = ", 1)[1].split(" + ")
    return sum(int(re.findall(r"\d+", term.split("]")[-1])[-1]) for term in terms)


def test_convolution_formula_names_its_bias() -> None:
    # conv2d(x [8,64,56,56] bf16, w [64,2,3,3], bias [64], stride 1, padding 1, dilation 1, groups 32):
    # input 3,211,264 + weight 1,152·2 = 2,304 + bias 64·2 = 128 + output 3,211,264 = 6,424,960 (the
    # formula had said input + weight + output = 6,424,832)
    conv = cost_of(
        _call(
            "aten::conv2d",
            "conv",
            [
                _t([8, 64, 56, 56]),
                _t([64, 2, 3, 3]),
                _t([64]),
                _s("[1, 1]", "ScalarList"),
                _s("[1, 1]", "ScalarList"),
                _s("[1, 1]", "ScalarList"),
                _s("32"),
            ],
        )
    )
    assert conv.bytes == 3_211_264 + 2_304 + 128 + 3_211_264 == 6_424_960
    assert "bias 128" in conv.formula
    assert _formula_bytes(conv.formula) == 6_424_960


# --- 8. outputs that had been left out -----------------------------------------------------------------


def _layer_norm_backward(mask: str, affine: bool) -> Call:
    x, stat, w = [8, 16, 32, 32], [8, 1, 1, 1], [16, 32, 32]
    weight = _t(w, FP32) if affine else NONE
    return _call(
        "aten::native_layer_norm_backward",
        "layer_norm",
        [
            _t(x, FP32),
            _t(x, FP32),
            _s("[16, 32, 32]", "ScalarList"),
            _t(stat, FP32),
            _t(stat, FP32),
            weight,
            weight,
            _s(mask, "ScalarList"),
        ],
    )


def test_layer_norm_backward_writes_the_gradients_its_mask_asks_for() -> None:
    # read: grad_out 524,288 + input 524,288 + mean 32 + rstd 32 + weight 65,536 = 1,114,176 (the bias
    # only sizes grad_bias, campaign BU 5); written: grad_input 524,288 + grad_weight 65,536 + grad_bias
    # 65,536 = 655,360 → 1,769,536 (had been 1,704,000, estimate False)
    assert cost_of(_layer_norm_backward("[True, True, True]", True)).bytes == 1_769_536
    # no weight or bias, mask [True, False, False]: 1,048,640 read + 524,288 written = 1,572,928
    assert cost_of(_layer_norm_backward("[True, False, False]", False)).bytes == 1_572_928
    # output_mask not recorded: every gradient with a recorded shape assumed, and said so
    assumed = cost_of(_layer_norm_backward("", True))
    assert assumed.bytes == 1_769_536 and "not recorded" in assumed.formula


def test_batch_norm_backward_without_a_mask_writes_three_gradients() -> None:
    # miopen_batch_norm_backward(input [1,128,32,32], grad_out, weight [128], None, None, save_mean
    # [128], save_var [128], eps) fp32: read 524,288·2 + 512·3 = 1,050,112; written grad_input
    # 524,288 + grad_weight 512 + grad_bias 512 → 1,575,424
    x = [1, 128, 32, 32]
    args = [_t(x, FP32), _t(x, FP32), _t([128], FP32), NONE, NONE, _t([128], FP32), _t([128], FP32), _s("1e-05")]
    assert cost_of(_call("aten::miopen_batch_norm_backward", "batch_norm", args)).bytes == 1_575_424


def test_batch_norm_training_writes_its_saved_and_running_statistics() -> None:
    # native_batch_norm(x [8,16,32,32] fp32, None, None, running_mean [16], running_var [16], training,
    # 0.1, 1e-5): read 524,288 + 64 + 64 = 524,416, output 524,288; training: save_mean + save_invstd
    # 2·16·4 = 128 and the running statistics written back 128 → 1,048,960; inference 1,048,704
    x = [8, 16, 32, 32]

    def call(training: str) -> Call:
        args = [_t(x, FP32), NONE, NONE, _t([16], FP32), _t([16], FP32), _s(training), _s("0.1"), _s("1e-05")]
        return _call("aten::native_batch_norm", "batch_norm", args)

    assert cost_of(call("True")).bytes == 1_048_960
    assert cost_of(call("False")).bytes == 1_048_704


def test_fused_rms_norm_writes_its_rstd() -> None:
    # _fused_rms_norm(x [1024,4096] bf16, [4096], weight [4096], None): x 8,388,608 + weight 8,192 read,
    # output 8,388,608 + rstd 1024 rows · 4 (fp32) = 4,096 written → 16,789,504 (rstd had been left out)
    args = [_t([1024, 4096]), _s("[4096]", "ScalarList"), _t([4096]), NONE]
    cost = cost_of(_call("aten::_fused_rms_norm", "rms_norm", args))
    assert cost.bytes == 8_388_608 + 8_192 + 8_388_608 + 4_096 == 16_789_504


def _flash_forward() -> Call:
    # _flash_attention_forward(q [2,1024,32,128], k, v [2,1024,8,128] bf16, None, None, 1024, 1024, 0.,
    # is_causal True, return_debug_mask False, scale 0.125, …)
    q, kv = _t([2, 1024, 32, 128]), _t([2, 1024, 8, 128])
    args = [q, kv, kv, NONE, NONE, _s("1024"), _s("1024"), _s("0."), _s("True"), _s("False"), _s("0.125")]
    return _call("aten::_flash_attention_forward", "attention", [*args, NONE, NONE, NONE, NONE])


def test_attention_forwards_write_their_logsumexp() -> None:
    # q 16,777,216 + k, v 4,194,304 each read, out 16,777,216 written, logsumexp fp32 [B, H_q, Sq]
    # 2·32·1024·4 = 262,144 written → 42,205,184 (had been 41,943,040)
    assert cost_of(_flash_forward()).bytes == 16_777_216 + 2 * 4_194_304 + 16_777_216 + 262_144 == 42_205_184

    # _scaled_dot_product_efficient_attention(q [1,8,128,64], k, v [1,8,1024,64] bf16, None,
    # compute_log_sumexp, 0., is_causal True, None): q 131,072 + k, v 1,048,576 each + out 131,072
    # = 2,359,296; compute_log_sumexp True adds 1·8·128·4 = 4,096
    def efficient(flag: str) -> Call:
        q, kv = _t([1, 8, 128, 64]), _t([1, 8, 1024, 64])
        args = [q, kv, kv, NONE, _s(flag), _s("0."), _s("True"), NONE]
        return _call("aten::_scaled_dot_product_efficient_attention", "attention", args)

    assert cost_of(efficient("True")).bytes == 2_359_296 + 4_096
    assert cost_of(efficient("False")).bytes == 2_359_296
    unknown = cost_of(efficient(""))
    assert unknown.bytes == 2_359_296 and "not recorded" in unknown.formula  # an estimate, said


# --- the real trace: rows costed in full, estimate False -----------------------------------------------


@pytest.fixture(scope="module")
def normalization_rows():
    trace_path("mi300x_normalization_layers")
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.report.build import build_report

    folder = Path(tempfile.mkdtemp())
    write_outputs(ingested("mi300x_normalization_layers"), folder)
    kernels = build_report(folder).analysis.kernels
    return kernels[(kernels["role"] == "main") & (kernels["kind"] == "kernel")]


def test_normalization_trace_rows(normalization_rows) -> None:
    rows = normalization_rows

    def row(op: str, dims: str):
        found = rows[(rows["cpu_op"] == op) & (rows["input_dims"] == dims)]
        assert len(found) >= 1, (op, dims)
        return found.iloc[0]

    # mse_loss_backward.grad_input([], [8,16,32,32] ×3 fp32): 1,572,868 as in the first test
    mse = row("aten::mse_loss_backward", "[[],[8,16,32,32],[8,16,32,32],[],[8,16,32,32]]")
    assert mse["bytes"] == 1_572_868 and not mse["estimate"]
    # native_layer_norm_backward, weight and bias [16,32,32] fp32, output_mask [True, True, True]: 1,769,536
    ln = row(
        "aten::native_layer_norm_backward",
        "[[8,16,32,32],[8,16,32,32],[],[8,1,1,1],[8,1,1,1],[16,32,32],[16,32,32],[]]",
    )
    assert ln["bytes"] == 1_769_536 and not ln["estimate"]
    # _fused_rms_norm(x [8,16,32,32] fp32, [32,32], weight [32,32]): x 524,288 + weight 4,096 read,
    # output 524,288 + rstd 8·16 rows · 4 = 512 → 1,053,184
    rms = row("aten::_fused_rms_norm", "[[8,16,32,32],[],[32,32],[]]")
    assert rms["bytes"] == 1_053_184 and not rms["estimate"]
