"""Training-side costs: convolution_backward from its recorded shapes and output mask, derived by
hand from TraceLens's MI300X ResNet trace (resnet_act_checkpoint) as written below."""

from __future__ import annotations

import json

import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

TYPES = ["c10::BFloat16"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
DIMS = [[10, 512, 7, 7], [10, 512, 7, 7], [512, 512, 3, 3], [], [], [], [], [], [], [], []]


def _backward(mask: str | None) -> Call:
    concrete = ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", mask or ""]
    args = parse_call(json.dumps(DIMS), json.dumps(TYPES), None, json.dumps(concrete))
    return Call("aten::convolution_backward", "convolution", args)


def test_data_and_weight_gradients_of_a_3x3_convolution() -> None:
    # grad_output [10,512,7,7], input [10,512,7,7], weight [512,512,3,3], output_mask [True, True, False]
    cost = cost_of(_backward("[True, True, False]"))
    macs = 10 * 512 * 7 * 7 * (512 * 3 * 3)  # N·K·P·Q·(C·R·S) = 1,156,055,040
    assert cost.flops == 2 * macs * 2 == 4_624_220_160  # data and weight gradient
    # read grad_output 250,880·2 B, weight 2,359,296·2 B, input 250,880·2 B; write grad_input and grad_weight
    assert cost.bytes == (501_760 + 4_718_592 + 501_760) + (501_760 + 4_718_592) == 10_942_464
    # the weight gradient alone (a frozen input): half the FLOPs, no weight read, no grad_input written
    cost = cost_of(_backward("[False, True, False]"))
    assert cost.flops == 2 * macs
    assert cost.bytes == 501_760 + 501_760 + 4_718_592


def test_without_the_output_mask_it_says_so() -> None:
    with pytest.raises(NoCost, match="output_mask"):
        cost_of(_backward(None))
