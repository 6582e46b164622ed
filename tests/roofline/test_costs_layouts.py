"""Costs where the recorded call says more than its shapes: transposed and `same`-padded
convolutions, causal masks of non-square attention and their alignment, expanded (stride-0)
inputs. Every value is derived by hand below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.report.build import build_report
from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from tests.support.hand_built import launch_and_kernel

BF16, FLOAT = "c10::BFloat16", "float"


def _cost(launcher: str, op: str, dims: list, types: list[str], concrete: list[str] | None = None, strides=None):
    args = parse_call(
        json.dumps(dims), json.dumps(types), json.dumps(strides) if strides else None, json.dumps(concrete or [])
    )
    return cost_of(Call(launcher, op, args))


CONV_TYPES = [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]


def test_transposed_convolution() -> None:
    # ConvTranspose2d(128 → 64, 4×4, stride 2, padding 1) of [8,128,28,28]: output per axis
    # (28 − 1)·2 − 2·1 + 1·(4 − 1) + 0 + 1 = 56 → [8,64,56,56]; every input element meets the
    # 64·4·4 weights of its channel: 2·(8·128·28·28)·(64·16) FLOPs
    dims = [[8, 128, 28, 28], [128, 64, 4, 4], [], [], [], [], [], [], []]
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1"]
    cost = _cost("aten::convolution", "conv", dims, CONV_TYPES, concrete)
    assert cost.flops == 2 * 802_816 * 1_024 == 1_644_167_168
    # input 8·128·28·28·2 + weight 128·64·16·2 + output 8·64·56·56·2
    assert cost.bytes == 1_605_632 + 262_144 + 3_211_264
    # two groups (weight [128, 32, 4, 4]): output channels 32·2 = 64, each input element meets 32·16
    dims[1] = [128, 32, 4, 4]
    concrete[8] = "2"
    cost = _cost("aten::convolution", "conv", dims, CONV_TYPES, concrete)
    assert cost.flops == 2 * 802_816 * 512 == 822_083_584
    assert cost.bytes == 1_605_632 + 131_072 + 3_211_264
    # output_padding 1: 57 per axis → output 8·64·57·57·2 bytes
    concrete[7], concrete[8], dims[1] = "[1, 1]", "1", [128, 64, 4, 4]
    assert _cost("aten::convolution", "conv", dims, CONV_TYPES, concrete).bytes == 1_605_632 + 262_144 + 3_326_976


def test_forward_convolution_flag_false_is_unchanged() -> None:
    # the same call, transposed False: output (28 + 2 − 3 − 1)//2 + 1 = 14 → 2·8·128·14·14·(128·16)... with
    # weight [128,64,4,4] read as K=128 filters of 64 channels: 2·8·128·14·14·1024
    dims = [[8, 64, 28, 28], [128, 64, 4, 4], [], [], [], [], [], [], []]
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    cost = _cost("aten::convolution", "conv", dims, CONV_TYPES, concrete)
    assert cost.flops == 2 * 8 * 128 * 14 * 14 * 1_024 == 411_041_792


def test_convolution_with_padding_named_same_or_valid() -> None:
    # conv2d(input [8,64,56,56], weight [64,64,3,3], bias, stride [1,1], padding "same", dilation [1,1], 1)
    dims = [[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []]
    types = [BF16, BF16, "", "ScalarList", "str", "ScalarList", "Scalar"]
    cost = _cost("aten::conv2d", "conv", dims, types, ["", "", "", "[1, 1]", "same", "[1, 1]", "1"])
    assert cost.flops == 2 * (8 * 64 * 56 * 56) * (64 * 9) == 1_849_688_064
    assert cost.bytes == 3_211_264 + 73_728 + 3_211_264
    # "valid": no padding, 54 per axis
    cost = _cost("aten::conv2d", "conv", dims, types, ["", "", "", "[1, 1]", "valid", "[1, 1]", "1"])
    assert cost.flops == 2 * (8 * 64 * 54 * 54) * (64 * 9) == 1_719_926_784
    with pytest.raises(NoCost, match="stride 2"):
        _cost("aten::conv2d", "conv", dims, types, ["", "", "", "[2, 2]", "same", "[1, 1]", "1"])


SDPA_TYPES = [BF16, BF16, BF16, "", "Scalar", "Scalar", "Scalar"]


def test_causal_attention_of_a_short_query_aligned_top_left() -> None:
    # SDPA, q [2,8,64,64], k/v [2,8,256,64], is_causal: PyTorch's mask is aligned top-left, query i
    # sees keys 0…i: the area under the diagonal is 64²/2 = 2,048 of 64·256 pairs;
    # 2·B·H·pairs·(d + dv) = 2·2·8·2048·128
    dims = [[2, 8, 64, 64], [2, 8, 256, 64], [2, 8, 256, 64], [], [], [], []]
    cost = _cost(
        "aten::scaled_dot_product_attention", "attention", dims, SDPA_TYPES, ["", "", "", "", "0.", "True", ""]
    )
    assert cost.flops == 8_388_608
    assert "top-left" in cost.formula
    # not causal: every one of the 64·256 pairs
    cost = _cost(
        "aten::scaled_dot_product_attention", "attention", dims, SDPA_TYPES, ["", "", "", "", "0.", "False", ""]
    )
    assert cost.flops == 2 * 2 * 8 * 16_384 * 128 == 67_108_864
    # square: half, as before
    square = [[2, 8, 256, 64]] * 3 + [[], [], [], []]
    cost = _cost(
        "aten::scaled_dot_product_attention", "attention", square, SDPA_TYPES, ["", "", "", "", "0.", "True", ""]
    )
    assert cost.flops == 2 * 2 * 8 * (256 * 256 / 2) * 128 == 134_217_728


def test_causal_flash_attention_aligned_bottom_right() -> None:
    # _flash_attention_forward(q [2,64,8,64], k/v [2,256,8,64], …, is_causal at 8): FlashAttention
    # aligns the mask bottom-right, query i sees keys 0…i + 192: 64·256 − 64²/2 = 14,336 pairs
    dims = [[2, 64, 8, 64], [2, 256, 8, 64], [2, 256, 8, 64], [], [], [], [], [], []]
    types = [BF16, BF16, BF16, "", "", "Scalar", "Scalar", "Scalar", "Scalar"]
    cost = _cost(
        "aten::_flash_attention_forward", "attention", dims, types, ["", "", "", "", "", "64", "256", "0.", "True"]
    )
    assert cost.flops == 2 * 2 * 8 * 14_336 * 128 == 58_720_256
    # a longer query than keys (Sq 256, Skv 64): the first 192 queries see none, the rest 1…64: 64²/2
    dims = [[2, 256, 8, 64], [2, 64, 8, 64], [2, 64, 8, 64], [], [], [], [], [], []]
    cost = _cost(
        "aten::_flash_attention_forward", "attention", dims, types, ["", "", "", "", "", "256", "64", "0.", "True"]
    )
    assert cost.flops == 2 * 2 * 8 * 2_048 * 128


def test_memory_efficient_attention_reads_its_mask_type() -> None:
    # _efficient_attention_forward(q/k/v [2,128,8,64] BSHD, bias, cu_q, cu_k, max_q, max_k, dropout,
    # custom_mask_type, …): 1 = causal from the top left, 128²/2 of 128·128 pairs
    dims = [[2, 128, 8, 64]] * 3 + [[], [], [], [], [], [], []]
    types = [BF16] * 3 + ["", "", "", "Scalar", "Scalar", "Scalar", "Scalar"]
    concrete = ["", "", "", "", "", "", "128", "128", "0.", "1"]
    cost = _cost("aten::_efficient_attention_forward", "attention", dims, types, concrete)
    assert cost.flops == 2 * 2 * 8 * 8_192 * 128 == 33_554_432
    concrete[9] = "0"  # no mask: all 16,384 pairs
    assert _cost("aten::_efficient_attention_forward", "attention", dims, types, concrete).flops == 67_108_864
    # 2 = causal from the bottom right, q 64 against k/v 128: 64·128 − 64²/2 = 6,144 pairs
    short = [[2, 64, 8, 64], [2, 128, 8, 64], [2, 128, 8, 64], [], [], [], [], [], [], []]
    concrete[9] = "2"
    assert (
        _cost("aten::_efficient_attention_forward", "attention", short, types, concrete).flops
        == 2 * 2 * 8 * 6_144 * 128
    )
    # not recorded: no mask assumed, and the formula says so
    cost = _cost("aten::_efficient_attention_forward", "attention", dims, types)
    assert cost.flops == 67_108_864 and "custom_mask_type not recorded" in cost.formula
    concrete[9] = "7"
    with pytest.raises(NoCost, match="none of 0, 1, 2"):
        _cost("aten::_efficient_attention_forward", "attention", dims, types, concrete)
    # packed sequences: q/k/v [1, 4096, 8, 64] with cu_seqlens_q/k [3] (two sequences whose lengths are values)
    # had been costed as one sequence of 4096: 4096² pairs (2·2048² at most); not costed, as its backward
    packed = [[1, 4096, 8, 64]] * 3 + [[], [3], [3], [], [], [], []]
    packed_types = [BF16] * 3 + ["", "int", "int", "Scalar", "Scalar", "Scalar", "Scalar"]
    concrete[9] = "1"
    with pytest.raises(NoCost, match="cumulative sequence lengths"):
        _cost("aten::_efficient_attention_forward", "attention", packed, packed_types, concrete)


def test_an_expanded_input_is_read_once() -> None:
    # mul([1024,1024] contiguous, [1024,1024] expanded from one row: strides [0,1]) float:
    # 1024·1024·4 + 1024·4 read, 1024·1024·4 written
    dims = [[1024, 1024], [1024, 1024]]
    cost = _cost("aten::mul", "mul", dims, [FLOAT, FLOAT], strides=[[1024, 1], [0, 1]])
    assert cost.bytes == 4_194_304 + 4_096 + 4_194_304 == 8_392_704
    assert cost.flops == 1_048_576
    # a slice of a wider tensor (strides [2048, 1]) still holds 1024·1024 distinct elements
    cost = _cost("aten::mul", "mul", dims, [FLOAT, FLOAT], strides=[[1024, 1], [2048, 1]])
    assert cost.bytes == 3 * 4_194_304
    # overlapping windows (unfold: [1021, 4] with strides [1, 1]) hold their span, 1,024 elements
    cost = _cost("aten::mul", "mul", [[1021, 4], [1021, 4]], [FLOAT, FLOAT], strides=[[4, 1], [1, 1]])
    assert cost.bytes == 1021 * 4 * 4 + 1_024 * 4 + 1021 * 4 * 4


def test_recorded_strides_reach_the_roofline(tmp_path: Path) -> None:
    # one aten::mul whose second input is expanded from a row, through ingest and report
    op = {
        "ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 0, "dur": 20,
        "args": {
            "External id": 1,
            "Input Dims": [[1024, 1024], [1024, 1024]],
            "Input type": [FLOAT, FLOAT],
            "Input Strides": [[1024, 1], [0, 1]],
        },
    }  # fmt: skip
    events = [op, *launch_and_kernel(5, 1, 1, "elementwise_kernel", 30, 10)]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    roofline = build_report(out).analysis.roofline
    assert roofline["bytes"].tolist() == [4_194_304 + 4_096 + 4_194_304]


def test_an_input_without_a_dtype_says_so() -> None:
    """PyTorch 1.8 recorded `Input Dims` without `Input type` (stop 57's schema campaign): the
    note said "no recorded shape" of an input whose shape is recorded."""
    with pytest.raises(NoCost) as untyped:
        cost_of(Call("aten::mm", "mm", parse_call("[[64,128],[128,256]]", None)))
    assert str(untyped.value) == (
        "aten::mm: input 0 (self) has a recorded shape but no dtype (`Input type`, recorded since PyTorch 1.9)"
    )
    with pytest.raises(NoCost) as unknown:
        _cost("aten::mm", "mm", [[64, 128], [128, 256]], ["c10::Float8_e3m4", FLOAT])
    assert str(unknown.value) == "aten::mm: input 0 (self) has a dtype not in catalogs/dtypes.toml (c10::Float8_e3m4)"
    with pytest.raises(NoCost) as missing:
        _cost("aten::mm", "mm", [[], [128, 256]], ["", FLOAT])
    assert str(missing.value) == "aten::mm: input 0 (self) has no recorded shape or a dtype not in catalogs/dtypes.toml"
