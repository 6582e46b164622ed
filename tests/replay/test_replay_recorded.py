"""Replay replays what was recorded (stop 60's campaign, checked by hand against the raw events):
what the recording holds is used, what it does not is said, and a call whose problem cannot be
known is refused rather than replayed as another."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from kernel_atlas.ingest.recorded import parse_call  # noqa: E402
from kernel_atlas.replay.aten import build_case, find_overload  # noqa: E402
from kernel_atlas.replay.inputs import NotReplayable  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_one  # noqa: E402


def _target(launcher: str, dims: list, types: list[str], concrete: list[str] | None = None, **extra) -> Target:
    return Target(
        extra.pop("kernel", "k"),
        launcher,
        extra.pop("op_mapping", ""),
        extra.pop("category", ""),
        json.dumps(dims),
        json.dumps(types),
        json.dumps(extra.pop("strides")) if "strides" in extra else None,
        json.dumps(concrete) if concrete is not None else None,
        None,
        1,
        "trace",
    )


def test_a_convolution_without_its_padding_stride_and_dilation_is_refused() -> None:
    # PyTorch 1.9 (v100_resnet50_train_pt19): the lists' types, no Concrete Inputs. A 3×3 conv of
    # padding 1 replayed with padding 0 gave [32,128,26,26] where the next op reads 28×28
    types = ["float", "float", "GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"]
    dims = [[2, 8, 6, 6], [8, 4, 3, 3], [], [], [], [], [], [], []]
    recorded = parse_call(json.dumps(dims), json.dumps(types))
    with pytest.raises(NotReplayable, match="padding, stride and dilation are not recorded"):
        build_case("aten::cudnn_convolution", recorded, "cpu")
    # recorded: padding [1, 1], stride [2, 2], dilation [1, 1], groups 2 → (6 + 2 − 3) // 2 + 1 = 3
    types = ["float", "float", "IntList", "IntList", "IntList", "Int", "Bool", "Bool", "Bool"]
    concrete = ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "2", "False", "False", "True"]
    recorded = parse_call(json.dumps(dims), json.dumps(types), None, json.dumps(concrete))
    case = build_case("aten::cudnn_convolution", recorded, "cpu")
    out = case.run()
    assert tuple(out.shape) == (2, 8, 3, 3)
    # groups not recorded: what the shapes imply, C_in 8 = groups · the weight's 4
    recorded = parse_call(json.dumps(dims[:5]), json.dumps(types[:5]), None, json.dumps(concrete[:5]))
    assert tuple(build_case("aten::cudnn_convolution", recorded, "cpu").run().shape) == (2, 8, 3, 3)


def test_a_python_written_bool_list_is_a_list() -> None:
    # Kineto writes `output_mask` as Python prints it: "[True, False, False]" is no JSON
    (mask,) = parse_call("[[]]", '["GenericList"]', None, '["[True, False, False]"]')
    assert mask.value == [True, False, False]
    (mixed,) = parse_call("[[]]", '["GenericList"]', None, '["[None, 2, True]"]')
    assert mixed.value == [None, 2, True]
    (text,) = parse_call("[[]]", '["str"]', None, '["Trueish"]')
    assert text.value == "Trueish"


def test_a_norm_backward_replays_with_its_recorded_output_mask() -> None:
    target = _target(
        "aten::native_layer_norm_backward",
        [[4, 16], [4, 16], [], [4, 1], [4, 1], [16], [16], []],
        ["float", "float", "GenericList", "float", "float", "float", "float", "GenericList"],
        ["", "", "[16]", "", "", "", "", "[True, False, False]"],
    )
    result = replay_one(target, "cpu")
    assert result.check == "pass", (result.implementation, result.reason)


def test_an_out_variant_is_found_when_only_it_takes_the_recorded_kinds() -> None:
    # aten::sum(self, dim, keepdim, dtype, out): only sum.IntList_out takes a tensor fifth
    recorded = parse_call(
        "[[8,4,16],[],[],[],[8,16]]",
        '["c10::BFloat16","ScalarList","Scalar","","c10::BFloat16"]',
        None,
        '["","[1]","False","",""]',
    )
    assert find_overload("aten::sum", recorded)._schema.overload_name == "IntList_out"
    case = build_case("aten::sum", recorded, "cpu")
    assert tuple(case.run().shape) == (8, 16)


@pytest.mark.parametrize("op", ["aten::div", "aten::remainder", "aten::floor_divide"])
def test_integer_divisors_are_never_zero(op: str) -> None:
    # integers were drawn from [0, 8): a long/long div checked "NaN at 38 places", remainder raised
    recorded = parse_call("[[64,64],[64,64]]", '["long int","long int"]')
    case = build_case(op, recorded, "cpu")
    verdict, reason = case.check()
    assert verdict == "pass", reason


def test_tensor_list_elements_keep_their_recorded_strides_and_the_assumed_dtype_is_said() -> None:
    # h100_vit's aten::cat of an expanded CLS token [4,1,768] (stride 0) and a transposed view
    recorded = parse_call("[[[4,1,8],[4,6,8]],[]]", '["TensorList","Scalar"]', "[[[0,8,1],[48,1,6]],[]]", '["","1"]')
    case = build_case("aten::cat", recorded, "cpu")
    assert tuple(case.run().shape) == (4, 7, 8)
    assert "assumed tensors elements float32 (not recorded)" in case.implementation


def test_an_unrecorded_cat_dim_is_the_one_its_inputs_differ_in() -> None:
    # PyTorch 1.9 records no Concrete Inputs: cat([4,3,8], [4,5,8]) replayed along dim 0 failed
    # ("Sizes of tensors must match except in dimension 0"); they differ only in dimension 1
    recorded = parse_call("[[[4,3,8],[4,5,8]],[]]", '["TensorList","Int"]')
    case = build_case("aten::cat", recorded, "cpu")
    assert tuple(case.run().shape) == (4, 8, 8)
    assert "dim=1 (the one its inputs differ in)" in case.implementation
    same = build_case("aten::cat", parse_call("[[[4,3],[4,3]],[]]", '["TensorList","Int"]'), "cpu")
    assert tuple(same.run().shape) == (8, 3) and "dim=0" in same.implementation  # alike: the default, said


def test_a_number_passed_without_its_value_is_one_and_said() -> None:
    # PyTorch 1.9's clamp(x, min, max): both `Scalar`, no values — replayed as clamp(x, None, None),
    # which torch refuses ("At least one of 'min' or 'max' must not be None")
    case = build_case("aten::clamp", parse_call("[[4,8],[],[]]", '["float","Scalar","Scalar"]'), "cpu")
    assert case.check()[0] == "pass" and "assumed min=1, max=1 (not recorded)" in case.implementation
    # a min recorded with its value is used; a max of type "" (None, or a string without its value) stays None
    case = build_case("aten::clamp", parse_call("[[4,8],[],[]]", '["float","Scalar",""]', None, '["","0",""]'), "cpu")
    assert case.check()[0] == "pass" and "min=" not in case.implementation and "max=1" not in case.implementation


def test_a_string_argument_passed_without_its_value_is_said_to_be_assumed() -> None:
    # gelu's `approximate`, recorded as type "" with no value: replayed as 'none', and said so
    recorded = parse_call("[[4,8],[]]", '["float",""]', None, '["",""]')
    case = build_case("aten::gelu", recorded, "cpu")
    assert "assumed approximate='none' (not recorded)" in case.implementation


def test_an_unrecorded_dim_of_an_indexing_op_is_the_one_its_indices_are_drawn_for() -> None:
    # the seed's embedding lookup: index_select(weight [6288, 12288], dim ?, index [1]) → [1, 12288]
    recorded = parse_call("[[64,96],[],[1]]", '["c10::BFloat16","Scalar","long int"]')
    case = build_case("aten::index_select", recorded, "cpu")
    assert tuple(case.run().shape) == (1, 96)
    assert "assumed dim=0" in case.implementation
    assert case.check()[0] == "pass"


def test_moe_align_takes_experts_and_block_size_from_its_buffers() -> None:
    # the seed's sgl-kernel call: [1024, 2] int64 ids, sorted ids [3064] = 2048 + 8 · (128 − 1),
    # expert ids [24], post-pad [1], token counts [72] = 9 · 8, cumsum [9] = 8 + 1
    dims = [[1024, 2], [], [], [3064], [24], [1], [72], [9]]
    types = ["long int", "Scalar", "Scalar", "int", "int", "int", "int", "int"]
    target = _target(
        "sgl_kernel::moe_align_block_size",
        dims,
        types,
        kernel="void moe_align_block_size_kernel<long>(long const*, int*, int*, int*, int, int)",
    )
    result = replay_one(target, "cpu")
    assert result.check == "pass", result.reason
    assert "8 experts, block size 128 (from its buffers' sizes; int32 ids for the recorded int64)" in (
        result.implementation
    )


def test_a_seed_entry_whose_op_is_tbd_is_classified_for_its_replay() -> None:
    # the seed catalog's unfilled `op_mapping: "TBD"`: its silu_and_mul had "no replay implementation"
    target = Target(
        "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &(silu(float const&))>(int)",
        "<built-in function launch>",
        "TBD",
        "TBD",
        json.dumps([[8, 64], [8, 128], []]),
        json.dumps(["c10::BFloat16", "c10::BFloat16", ""]),
        None,
        None,
        None,
        1,
        "catalog",
    )
    assert (target.op_mapping, target.category) == ("silu_and_mul", "activation")
    result = replay_one(target, "cpu")
    assert result.check == "pass", (result.implementation, result.reason)


def test_the_quantisation_group_is_read_from_the_recorded_scales() -> None:
    # sgl-kernel records its scales: [8, 256] over y_s [8, 4] → groups of 64, 8 · 4 = 32 programs
    target = _target(
        "<built-in function launch>",
        [[8, 256], [8, 256], [8, 4]],
        ["c10::BFloat16", "c10::Float8_e4m3fn", "float"],
        kernel="_per_token_group_quant_fp8",
    )
    result = replay_one(target, "cpu")
    assert result.check == "pass", result.reason
    assert "(32 programs, group 64, recorded)" in result.implementation
    # the Triton launch records the input alone: 128, SGLang's, said to be assumed
    alone = replay_one(
        _target("<built-in function launch>", [[8, 256]], ["c10::BFloat16"], kernel="_per_token_group_quant_fp8"), "cpu"
    )
    assert "(16 programs, group 128, assumed)" in alone.implementation


def test_a_pooling_window_that_is_not_recorded_is_refused() -> None:
    # PyTorch 1.9's max_pool2d: "assumed kernel_size=[112]" (the input's last dimension)
    recorded = parse_call(
        "[[32,64,112,112],[],[],[],[],[]]", '["float","GenericList","GenericList","GenericList","GenericList","Bool"]'
    )
    with pytest.raises(NotReplayable, match="kernel_size is not recorded"):
        build_case("aten::max_pool2d", recorded, "cpu")
