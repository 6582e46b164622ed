"""Replay replays the recorded call, and `atlas report` joins each replay to the rows of the call
it replayed (an independent tester's findings, stop 63). Expected values are worked out by hand
in the comments; inputs a replay would draw at random are given by hand where a value is checked.
CPU only: torch CPU ops, Triton kernels in the interpreter (TRITON_INTERPRET=1)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")  # before the Triton kernels are defined

from kernel_atlas.ingest.recorded import parse_call  # noqa: E402
from kernel_atlas.replay import aten  # noqa: E402
from kernel_atlas.replay.aten import build_case  # noqa: E402
from kernel_atlas.replay.inputs import NotReplayable  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_all, targets_from_output  # noqa: E402
from kernel_atlas.report.build import merge_replay  # noqa: E402

E = math.e


def _call(dims: list, types: list[str], concrete: list[str], strides: list | None = None):
    return parse_call(
        json.dumps(dims), json.dumps(types), json.dumps(strides) if strides else None, json.dumps(concrete)
    )


@pytest.fixture
def hand_inputs(monkeypatch: pytest.MonkeyPatch):
    """Tensors the replay would draw at random, given by hand in the order it makes them."""

    def give(*values: list) -> None:
        queue = [torch.tensor(v, dtype=torch.float32) for v in values]

        def make_tensor(dims, dtype_name, device, strides=None, high=None, generator=None, domain="any"):
            tensor = queue.pop(0)
            assert tuple(tensor.shape) == tuple(dims)
            return tensor

        monkeypatch.setattr(aten, "make_tensor", make_tensor)

    return give


# --- 1. attention stand-ins compute the recorded call ---------------------------------------------
# q = 1 (one query, d = 1), keys k = [0, 2], values v = [2, 4].


def test_efficient_attention_stand_in_adds_the_recorded_bias_and_uses_the_recorded_scale(hand_inputs) -> None:
    # scale 0.5, bias [1, 0]: logits 0.5·[0, 2] + [1, 0] = [1, 1] → weights ½, ½ → out = 3.
    # The stand-in had dropped both: logits [0, 2] (scale 1/√1) → out = (2 + 4e²)/(1 + e²) = 3.7616.
    hand_inputs([[[[1.0]]]], [[[[0.0], [2.0]]]], [[[[2.0], [4.0]]]], [[[[1.0, 0.0]]]])
    recorded = _call(
        [[1, 1, 1, 1], [1, 1, 2, 1], [1, 1, 2, 1], [1, 1, 1, 2], [], [], [], []],
        ["float"] * 4 + ["Scalar"] * 4,
        ["", "", "", "", "False", "0.", "False", "0.5"],
    )
    case = build_case("aten::_scaled_dot_product_efficient_attention", recorded, "cpu")
    assert float(case.run().reshape(-1)[0]) == pytest.approx(3.0, abs=1e-6)
    assert math.isclose((2 + 4 * E**2) / (1 + E**2), 3.7616, abs_tol=1e-4)  # what had been replayed
    assert case.timed == "stand-in" and "attn_bias" in case.implementation and "scale=0.5" in case.implementation
    assert case.check()[0] == "pass"


def test_flash_attention_stand_in_masks_causal_calls_at_the_bottom_right(hand_inputs) -> None:
    # FlashAttention's causal mask with 1 query and 2 keys: query 0 sees keys j ≤ 0 + 2 − 1 = 1,
    # both; scale 0.5: logits [0, 1] → out = (2 + 4e)/(1 + e) = 3.46212. SDPA's top-left mask
    # (what was replayed, with scale 1/√1) sees key 0 only: out = 2.
    hand_inputs([[[[1.0]]]], [[[[0.0], [2.0]]]], [[[[2.0], [4.0]]]])
    recorded = _call(
        [[1, 1, 1, 1], [1, 1, 2, 1], [1, 1, 2, 1], [], [], [], []],
        ["float"] * 3 + ["Scalar"] * 4,
        ["", "", "", "0.", "True", "False", "0.5"],
    )
    case = build_case("aten::_scaled_dot_product_flash_attention", recorded, "cpu")
    assert float(case.run().reshape(-1)[0]) == pytest.approx((2 + 4 * E) / (1 + E), abs=1e-6)
    assert math.isclose((2 + 4 * E) / (1 + E), 3.46212, abs_tol=1e-5)


def test_flash_attention_forward_stand_in_masks_at_the_bottom_right_in_its_layout(hand_inputs) -> None:
    # _flash_attention_forward takes [B, S, H, D]: the same call as above, 3.46212 (top-left: 2).
    hand_inputs([[[[1.0]]]], [[[[0.0]], [[2.0]]]], [[[[2.0]], [[4.0]]]])
    recorded = _call(
        [[1, 1, 1, 1], [1, 2, 1, 1], [1, 2, 1, 1], [], [], [], [], [], [], [], []],
        ["float"] * 3 + ["", ""] + ["Scalar"] * 6,
        ["", "", "", "", "", "1", "2", "0.", "True", "False", "0.5"],
    )
    case = build_case("aten::_flash_attention_forward", recorded, "cpu")
    assert float(case.run().reshape(-1)[0]) == pytest.approx(3.46212, abs=1e-5)


def test_attention_with_dropout_is_not_checked_against_values() -> None:
    # dropout_p 0.5: the output is random; the check had compared a dropout-free stand-in with
    # itself ("pass"). Now the stand-in drops out as recorded and only its shape is compared.
    recorded = _call(
        [[1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8], [], [], [], [], []],
        ["float"] * 3 + ["", "Scalar", "Scalar", "Scalar", ""],
        ["", "", "", "", "False", "0.5", "False", ""],
    )
    case = build_case("aten::_scaled_dot_product_efficient_attention", recorded, "cpu")
    verdict, why = case.check()
    assert verdict == "skipped" and "values cannot be compared" in why
    assert "dropout_p=0.5" in case.implementation


def test_flash_attention_forward_with_a_window_is_refused() -> None:
    # window_size_left 4 (argument 11): SDPA would time the whole causal square instead.
    recorded = _call(
        [[1, 8, 2, 8], [1, 8, 2, 8], [1, 8, 2, 8], [], [], [], [], [], [], [], [], [], []],
        ["float"] * 3 + ["", ""] + ["Scalar"] * 8,
        ["", "", "", "", "", "8", "8", "0.", "True", "False", "0.125", "4", "0"],
    )
    with pytest.raises(NotReplayable, match="window_size_left"):
        build_case("aten::_flash_attention_forward", recorded, "cpu")


# --- 2. the report joins each replay to the rows of the call it replayed ---------------------------


def _replay_rows(rows: list[dict]) -> pd.DataFrame:
    # replays on a GPU: a CPU replay's wall clock is no point on the roofline (stop 65, campaign AS 6)
    base = {"device_name": "NVIDIA H100 80GB HBM3", "device": "cuda", "check": "pass", "implementation": "x"}
    base |= {"timed": "kernel", "ratio": None}
    return pd.DataFrame([{**base, **row} for row in rows])


def test_report_joins_a_replay_to_its_own_kernels_and_leaves_ambiguous_and_scaled_rows_unjoined() -> None:
    mm, mm_types = "[[64,48],[48,80]]", '["float","float"]'
    total, total_types = "[[6,9,5],[],[],[]]", '["float","","",""]'
    norm = "[[8192,4096],[8192,4096],[4096],[],[]]"
    roofline = pd.DataFrame(
        {
            "name": ["gemm_tn", "gemm_nn", "reduce", "RMSNormKernel"],
            "launcher": ["aten::mm", "aten::mm", "aten::sum", "sgl_kernel::rmsnorm"],
            "input_dims": [mm, mm, total, norm],
            "input_types": [mm_types, mm_types, total_types, '["c10::BFloat16"]'],
            "role": ["main"] * 4,
            "flops": [491520.0, 491520.0, 270.0, 100663296.0],
            "bytes": [34816.0, 34816.0, 1200.0, 134225920.0],
        }
    )
    replay = _replay_rows(
        [  # mm of two layouts (other strides, other kernels); sum over dims [0, 2] and [1] (one kernel name)
            {"launcher": "aten::mm", "input_dims": mm, "input_types": mm_types, "kernels": '["gemm_tn"]',
             "input_strides": "[[48,1],[1,48]]", "median_us": 10.0, "scale": 1.0},
            {"launcher": "aten::mm", "input_dims": mm, "input_types": mm_types, "kernels": '["gemm_nn"]',
             "input_strides": "[[48,1],[80,1]]", "median_us": 20.0, "scale": 1.0},
            {"launcher": "aten::sum", "input_dims": total, "input_types": total_types, "kernels": '["reduce"]',
             "concrete_inputs": '["","[0, 2]","False",""]', "median_us": 4.83, "scale": 1.0},
            {"launcher": "aten::sum", "input_dims": total, "input_types": total_types, "kernels": '["reduce"]',
             "concrete_inputs": '["","[1]","False",""]', "median_us": 4.38, "scale": 1.0},
            {"launcher": "sgl_kernel::rmsnorm", "input_dims": norm, "input_types": '["c10::BFloat16"]',
             "kernels": '["RMSNormKernel"]', "median_us": 464873.0, "scale": 0.03125},
        ]
    )  # fmt: skip
    merged = merge_replay(roofline, replay).set_index("name")
    assert len(merged) == 4
    # each mm row its own replay (both had shown the first one's 10 µs): 491520 / (20·10⁶) = 0.024576 TFLOP/s
    assert merged.loc["gemm_tn", "replay_us"] == 10.0 and merged.loc["gemm_nn", "replay_us"] == 20.0
    assert merged.loc["gemm_nn", "replay_tflops"] == pytest.approx(0.024576)
    # one roofline row for both sums (its keys do not tell dims [0, 2] from [1]): no one call's time
    assert pd.isna(merged.loc["reduce", "replay_us"]) and pd.isna(merged.loc["reduce", "replay_tflops"])
    # a replay at scale 1/32 (1/1024 of the work) is not the row's call: had given 2.2e-4 TFLOP/s
    assert pd.isna(merged.loc["RMSNormKernel", "replay_us"]) and pd.isna(merged.loc["RMSNormKernel", "replay_gbps"])


def _aiter_output(tmp_path: Path) -> Path:
    """One aiter::rmsnorm(out, input, weight, eps) call on [4, 64] bf16 tensors, launched from the
    pybind11 frame inside the op (as in mi300x_sglang_qwen3_8b_decode_graph)."""
    kernel = "void aiter::add_rmsnorm_quant_kernel<__hip_bfloat16, 64, 1, false, false>(P)"
    row = {
        "trace": "t", "rank": 0, "kind": "kernel", "name": kernel, "dur_us": 3.0, "cpu_op": "aiter::rmsnorm",
        "cpu_op_id": 7, "launcher": "rmsnorm (pybind11)", "op_mapping": "rms_norm", "category": "normalization",
        "label_rule": "rule:rms-norm-fused-add", "input_dims": "[[4,64],[4,64],[64],[]]",
        "input_types": '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar"]', "input_strides": None,
        "concrete_inputs": '["","","","1e-06"]', "grid": "[4, 1, 1]", "block": "[64, 1, 1]",
    }  # fmt: skip
    out = tmp_path / "run.atlas"
    out.mkdir()
    pd.DataFrame([row]).to_parquet(out / "kernels.parquet")
    return out


def test_a_replay_names_the_launcher_the_roofline_names_and_joins_it(tmp_path: Path) -> None:
    out = _aiter_output(tmp_path)
    (target,) = targets_from_output(out)
    results = replay_all([target], "cpu")
    result = results.iloc[0]
    # replay.parquet's `launcher` is kernels.parquet's (and roofline.parquet's): the frame, not the op
    assert result["launcher"] == "rmsnorm (pybind11)" and result["cpu_op"] == "aiter::rmsnorm"
    assert json.loads(result["kernels"]) == [target.kernel]
    roofline = pd.DataFrame(
        {
            "name": [target.kernel],
            "launcher": ["rmsnorm (pybind11)"],
            "input_dims": [target.input_dims],
            "input_types": [target.input_types],
            "role": ["main"],
            "flops": [768.0],  # 3 FLOP × 256 elements
            "bytes": [1152.0],  # input 512 + weight 128 read, out 512 written
        }
    )
    merged = merge_replay(roofline, results)
    assert merged["replay_us"].iloc[0] == result["median_us"] > 0  # had been NaN: launchers differed
    # a CPU replay's time is joined but gives no GPU throughput (stop 65, campaign AS 6)
    assert pd.isna(merged["replay_gbps"].iloc[0]) and not merged["replay_same_device"].iloc[0]
    assert "wall clock: not GPU time" in merged["replay_note"].iloc[0]
    # on a GPU the same join gives its rate: 1152 B / replay time
    on_gpu = results.assign(device_name="NVIDIA H100 80GB HBM3", device="cuda")
    merged = merge_replay(roofline, on_gpu)
    assert merged["replay_gbps"].iloc[0] == pytest.approx(1152.0 / (result["median_us"] * 1e3))


# --- 3. aiter::rmsnorm(out, input, weight, eps) is a plain RMSNorm ------------------------------------


def test_aiter_rmsnorm_replays_the_plain_rmsnorm_its_schema_says(tmp_path: Path, monkeypatch) -> None:
    # Its kernel's name matches the fused residual-add rule; its schema takes 3 tensors: plain.
    # x = [3, 4] in each row, w = [1, 2]: rms = √((9 + 16)/2) = √12.5 → out = [3/√12.5, 2·4/√12.5]
    # = [0.848528, 2.262742]. The fused-add kernel had run (out = None; x += residual in place).
    from kernel_atlas.replay import runner
    from kernel_atlas.replay.kernels import norms

    given = iter([[[3.0, 4.0], [3.0, 4.0]], [[1.0, 0.0], [1.0, 0.0]]])

    def randn(shape, dtype, device, generator, std=1.0):
        values = torch.tensor(next(given) if len(shape) == 2 else [1.0, 2.0])
        return values.to(dtype)

    monkeypatch.setattr(norms, "randn", randn)
    target = Target(
        "void aiter::add_rmsnorm_quant_kernel<__hip_bfloat16, 64, 1, false, false>(P)",
        "aiter::rmsnorm",
        "rms_norm",
        "normalization",
        "[[2,2],[2,2],[2],[]]",
        '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar"]',
        None,
        '["","","","1e-06"]',
        3.0,
        1,
        "trace",
        "rule:rms-norm-fused-add",
    )
    case = runner._case(target, "cpu", 16.0, 1.0)
    out = case.run()
    assert out is not None and tuple(out.shape) == (2, 2)
    expected = [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)]
    assert math.isclose(expected[0], 0.848528, abs_tol=1e-6) and math.isclose(expected[1], 2.262742, abs_tol=1e-6)
    assert out.float().reshape(-1).tolist() == pytest.approx(expected * 2, abs=1e-5)
    assert case.timed == "stand-in" and "rmsnorm_kernel" in case.implementation
    assert "fused_add" not in case.implementation and "x + residual" not in case.check()[1]


# --- 4. a string argument passed without its value ---------------------------------------------------


def test_div_whose_rounding_mode_is_not_recorded_is_refused() -> None:
    # torch.div(a, b, rounding_mode="floor"): 3 inputs, the third of type "" and no value. It had
    # been replayed as true division (div.Tensor_mode with None), nothing said.
    recorded = _call([[8, 16], [16], []], ["float", "float", ""], ["", "", ""])
    with pytest.raises(NotReplayable, match="rounding_mode is not recorded"):
        build_case("aten::div", recorded, "cpu")


def test_a_recorded_rounding_mode_is_replayed(hand_inputs) -> None:
    # a catalog entry's value "floor": floor(7 / 2) = 3, floor(−7 / 2) = −4 (true division: 3.5, −3.5)
    hand_inputs([7.0, -7.0], [2.0, 2.0])
    recorded = _call([[2], [2], []], ["float", "float", "str"], ["", "", "floor"])
    case = build_case("aten::div", recorded, "cpu")
    assert case.implementation == "aten::div (aten::div.Tensor_mode)"
    assert case.run().tolist() == [3.0, -4.0]


# --- 5. integer inputs drawn below what they index ---------------------------------------------------


@pytest.mark.parametrize(
    ("op", "dims", "types", "concrete", "position", "bound"),
    [
        # nll_loss_forward(self [8, 4], target [8], weight, reduction, ignore_index): 4 classes
        ("aten::nll_loss_forward", [[8, 4], [8], [], [], []], ["float", "long int", "", "Scalar", "Scalar"],
         ["", "", "", "1", "-100"], 1, 4),
        # one_hot(self [64], num_classes 3)
        ("aten::one_hot", [[64], []], ["long int", "Scalar"], ["", "3"], 0, 3),
        # embedding_dense_backward(grad [3, 7, 16], indices [3, 7], num_weights 4, padding_idx, scale_grad_by_freq)
        ("aten::embedding_dense_backward", [[3, 7, 16], [3, 7], [], [], []],
         ["float", "long int", "Scalar", "Scalar", "Scalar"], ["", "", "4", "-1", "False"], 1, 4),
        # nll_loss2d_forward(self [2, 5, 3, 3], target [2, 3, 3], …): 5 classes on axis 1
        ("aten::nll_loss2d_forward", [[2, 5, 3, 3], [2, 3, 3], [], [], []],
         ["float", "long int", "", "Scalar", "Scalar"], ["", "", "", "1", "-100"], 1, 5),
    ],
)  # fmt: skip
def test_class_and_row_indices_lie_below_what_they_index(op, dims, types, concrete, position, bound) -> None:
    recorded = _call(dims, types, concrete)
    schema = aten.find_overload(op, recorded)._schema
    positional, _ = aten._materialise(op, schema, recorded, "cpu", aten.generator("cpu", 0))
    indices = positional[position]
    assert int(indices.min()) >= 0 and int(indices.max()) < bound  # had been drawn in [0, 8)
    case = build_case(op, recorded, "cpu")
    assert case.check()[0] == "pass"  # nll_loss: "Target 5 is out of bounds"; one_hot: skipped


# --- 6. tensor lists the profiler did not record ----------------------------------------------------


@pytest.mark.parametrize(
    ("op", "dims", "types", "concrete"),
    [
        ("aten::index", [[10, 6, 4], []], ["float", ""], ["", ""]),  # torch 2.13: Tensor?[] written as ""
        ("aten::index_put_", [[10, 6], [], [2, 6], []], ["float", "", "float", "Scalar"], ["", "", "", "True"]),
        ("aten::cat", [[], []], ["TensorList", "Scalar"], ["", "0"]),  # an old trace: no element shapes
    ],
)
def test_a_tensor_list_not_recorded_is_skipped_as_not_recorded(op, dims, types, concrete) -> None:
    recorded = _call(dims, types, concrete)
    with pytest.raises(NotReplayable, match=r"\(a list of tensors\) is not recorded"):
        build_case(op, recorded, "cpu")
