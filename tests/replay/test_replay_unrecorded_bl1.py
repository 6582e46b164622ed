"""What a replay fills in for arguments recorded without their values (campaign BL, classes 1, 5
and 8.5, checked by hand): an unrecorded reduction `dim` is what the call's recorded out= shape
fixes, else the last dimension, said — never None, which reduced every element to one and
passed its check; a loss's `reduction` fits its 0-d grad_output; a CPU stand-in's unrecorded
scalars are filled as the schema path fills them; a float64 reference that runs out of memory
is the replay's memory reason, not "no float64 reference"."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from kernel_atlas.ingest.recorded import from_params, parse_call  # noqa: E402
from kernel_atlas.replay import aten  # noqa: E402
from kernel_atlas.replay.aten import build_case  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_one  # noqa: E402


@pytest.fixture
def hand_inputs(monkeypatch: pytest.MonkeyPatch):
    """Tensors the replay would draw at random, given by hand in the order it makes them."""

    def give(*values: torch.Tensor) -> None:
        queue = list(values)

        def make_tensor(dims, dtype_name, device, strides=None, high=None, generator=None, domain="any"):
            tensor = queue.pop(0)
            assert tuple(tensor.shape) == tuple(dims)
            return tensor

        monkeypatch.setattr(aten, "make_tensor", make_tensor)

    return give


def _call(dims: list, types: list[str]):
    return parse_call(json.dumps(dims), json.dumps(types))


def test_an_unrecorded_reduction_dim_is_the_last_and_said(hand_inputs) -> None:
    # a100_diff_control's aten::sum, PyTorch 1.x: [[64, 32], [], [], []], dim typed "", no
    # Concrete Inputs. Replayed as sum(x, None): 1 + 2 + 3 + 4 = 10, a 0-d result, check "pass"
    hand_inputs(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    case = build_case("aten::sum", _call([[2, 2], [], [], []], ["float", "", "Scalar", ""]), "cpu")
    assert case.run().tolist() == [3.0, 7.0]  # 1 + 2, 3 + 4: the last dimension
    assert "assumed dim=[-1], keepdim=False" in case.implementation
    # v100_resnet50's global-average-pool mean, dim typed GenericList: the last dimension too
    hand_inputs(torch.tensor([[[[1.0, 3.0]], [[5.0, 7.0]]]]))
    case = build_case("aten::mean", _call([[1, 2, 1, 2], [], [], []], ["float", "GenericList", "Bool", ""]), "cpu")
    assert case.run().tolist() == [[[2.0], [6.0]]]  # (1 + 3) / 2, (5 + 7) / 2
    assert "assumed dim=[-1]" in case.implementation
    # PyTorch 2 writes None as "" among its Concrete Inputs: sum(x, dim=None) is a full reduction, as recorded
    hand_inputs(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    recorded = parse_call("[[2,2],[],[],[]]", '["float","","Scalar",""]', None, '["","","False",""]')
    case = build_case("aten::sum", recorded, "cpu")
    assert case.run().tolist() == 10.0 and "dim=" not in case.implementation


def test_a_recorded_out_fixes_the_reduced_dim(hand_inputs) -> None:
    # seed entry 149 (smaller): sum [1024, 8, 4096] with out [1024, 4096], dim and keepdim without
    # values — replayed as a sum of all 33.5 M elements into the out; the out lacks dimension 1
    params = [
        {"role": "input", "example_dim": [2, 3, 2], "example_dtype": "float", "description": "self"},
        {"role": "input", "example_dim": [], "example_dtype": "ScalarList", "description": "dim"},
        {"role": "input", "example_dim": [], "example_dtype": "Scalar", "description": "keepdim"},
        {"role": "input", "example_dim": [], "example_dtype": "", "description": "dtype"},
        {"role": "output", "example_dim": [2, 2], "example_dtype": "float", "description": "out"},
    ]
    x = torch.arange(12, dtype=torch.float32).reshape(2, 3, 2)
    hand_inputs(x, torch.zeros(2, 2))
    case = build_case("aten::sum", from_params(params), "cpu")
    # [0+2+4, 1+3+5], [6+8+10, 7+9+11]
    assert case.run().tolist() == [[6.0, 9.0], [24.0, 27.0]]
    assert "dim=[1] (from its out's shape [2, 2]), keepdim=False (from its out's shape [2, 2])" in case.implementation
    # an out of the input's rank: keepdim, along its 1s
    params[0]["example_dim"], params[4]["example_dim"] = [2, 3, 2], [2, 1, 2]
    hand_inputs(x, torch.zeros(2, 1, 2))
    case = build_case("aten::sum", from_params(params), "cpu")
    assert case.run().tolist() == [[[6.0, 9.0]], [[24.0, 27.0]]]
    assert "dim=[1] (from its out's shape [2, 1, 2]), keepdim=True" in case.implementation


def test_a_zero_dim_grad_output_makes_the_assumed_reduction_mean(hand_inputs) -> None:
    # v100_resnet50's nll_loss_backward [[], [32, 1000], [32], ...], reduction typed Int without a
    # value: assumed 0 ("none"), which takes a [32] grad_output — IndexError on the 0-d one.
    # Mean: grad_input[i, target_i] = −grad_output / total_weight = −1 / 2, zeros elsewhere
    hand_inputs(
        torch.tensor(1.0),
        torch.zeros(2, 3),
        torch.tensor([1, 2]),  # ignore_index is assumed 0: no target is 0
        torch.tensor(2.0),
    )
    recorded = _call([[], [2, 3], [2], [], [], [], []], ["float", "float", "long int", "", "Int", "Int", "float"])
    case = build_case("aten::nll_loss_backward", recorded, "cpu")
    assert case.run().tolist() == [[0.0, -0.5, 0.0], [0.0, 0.0, -0.5]]
    assert "reduction=1 (mean: its grad_output is 0-d)" in case.implementation


def test_a_stand_in_fills_unrecorded_scalars_as_the_schema_path_does(hand_inputs) -> None:
    # PyTorch 1.9's cudnn_batch_norm: training, momentum and eps typed Bool, Double, Double without
    # values. The stand-in got None for each: "failed to match any schema", all 12 ResNet-50 rows.
    # Training (batch statistics) on x = [1, 3]: mean 2, biased variance 1 →
    # (x − 2) / √(1 + 1e-5) = ±0.999995 (eval with running mean 0, var 1 would give 1 and 3)
    hand_inputs(
        torch.tensor([[[[1.0]]], [[[3.0]]]]),
        torch.tensor([1.0]),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        torch.tensor([1.0]),
    )
    recorded = _call([[2, 1, 1, 1], [1], [1], [1], [1], [], [], []], ["float"] * 5 + ["Bool", "Double", "Double"])
    case = build_case("aten::cudnn_batch_norm", recorded, "cpu")
    assert case.run()[0].reshape(-1).tolist() == pytest.approx([-0.999995, 0.999995], abs=1e-7)
    assert "assumed training=True, exponential_average_factor=0.1, epsilon=1e-05 (not recorded)" in (
        case.implementation
    )
    assert case.check()[0] == "pass"


class _Float64OutOfMemory(TorchDispatchMode):
    """The CPU allocator refusing the float64 copies, with torch's own message."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.add.Tensor and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args
        ):
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                "you tried to allocate 268435456 bytes. Error code 12 (Cannot allocate memory)"
            )
        return func(*args, **kwargs)


def test_a_float64_reference_out_of_memory_is_the_memory_reason() -> None:
    # v100_resnet50's add [32, 64, 56, 56] ×2: "no float64 reference ([enforce fail at
    # alloc_cpu.cpp:127] … can't allocat)", as if the op had no float64 kernel
    target = Target(
        "k",
        "aten::add",
        "",
        "",
        "[[4,8],[4,8],[]]",
        '["float","float","Scalar"]',
        None,
        '["","","1"]',
        None,
        1,
        "trace",
    )
    with _Float64OutOfMemory():
        result = replay_one(target, "cpu")
    assert result.check == "skipped"
    assert result.reason.startswith("needs more memory than a CPU replay may take"), result.reason
