"""Replay builders of Triton and library kernels replay the recorded problem or refuse it (campaign
BL 3, 6, 8.2, checked by hand): a tensor whose recorded shape is impossible or not recorded is
refused with ATen's reason, never replaced by a made-up shape; MoE tensors are found by name or by
shapes that agree, not by rank; the interpreter guard bounds a launch's programs, not its FLOPs;
every label says the recorded dtype where the replay computed in another."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is defined
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernel_atlas.ingest.recorded import from_params  # noqa: E402
from kernel_atlas.replay.inputs import NotReplayable  # noqa: E402
from kernel_atlas.replay.kernels import find_implementation  # noqa: E402
from kernel_atlas.replay.kernels.common import TooLargeForCPU  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_one, targets_from_catalog  # noqa: E402

LAUNCH = "<built-in function launch>"
IMPOSSIBLE = "a recorded input shape is impossible (negative, or beyond any GPU's memory)"


def _catalog(tmp_path: Path, kernel: str, params: list[tuple[str, object, str]], launcher: str = LAUNCH) -> Target:
    """One catalog entry (seed schema: description, example_dim, example_dtype), read as replay reads it."""
    entry = {
        "kernel_name": kernel,
        "kernel_implementation": launcher,
        "op_mapping": "TBD",
        "params": [
            {"role": "input", "description": name, "example_dim": dims, "example_dtype": dtype}
            for name, dims, dtype in params
        ],
    }
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps([entry]))
    (target,) = targets_from_catalog(path)
    return target


def _trace(kernel: str, dims: list, types: list[str]) -> Target:
    """A target as a trace records it: shapes and dtypes, no names."""
    return Target(kernel, LAUNCH, "", "", json.dumps(dims), json.dumps(types), None, None, None, 1, "trace")


def _moe(hidden: object, w1: object, w2: object, topk: object, dtype: str = "c10::BFloat16") -> list:
    return [
        ("hidden_states", hidden, dtype),
        ("w1", w1, dtype),
        ("w2", w2, dtype),
        ("topk_weights", topk, "float"),
        ("topk_ids", topk, "int"),
    ]


# --- class 3: impossible / not recorded shapes, made-up shapes ----------------------------------


def test_a_quantisation_input_of_impossible_shape_is_refused_as_aten_refuses_it(tmp_path: Path) -> None:
    # cases/cat_quant_negative.json: input_2d [-2, 1024, 7168] had been replayed as (1024, 7168), `pass`
    target = _catalog(tmp_path, "_per_token_group_quant_fp8", [("input_2d", [-2, 1024, 7168], "torch.bfloat16")])
    result = replay_one(target, "cpu")
    assert result.check == "skipped" and result.reason == IMPOSSIBLE
    assert result.median_us is None


def test_a_moe_whose_hidden_states_are_impossible_is_refused(tmp_path: Path) -> None:
    # cat_moe_negative.json, smaller: hidden_states [-64, 48]; the [64, 2] top-k tensor had been
    # taken for the hidden states (T 64, D 2)
    target = _catalog(tmp_path, "fused_moe_kernel", _moe([-64, 48], [4, 96, 48], [4, 48, 48], [64, 2]))
    with pytest.raises(NotReplayable) as refused:
        find_implementation(target, "cpu", 1.0)
    assert str(refused.value) == IMPOSSIBLE


def test_moe_tensors_are_found_by_name_then_by_shapes_that_agree(tmp_path: Path) -> None:
    # recorded out of order: topk first, w2 before w1. By rank the [24, 2] top-k had been the
    # hidden states (D 2) and [4, 72, 48] w1 (N 72, forced to 2·72 = 144). Gate/up launch: one
    # output row per (token, k) slot, 24·2 = 48, of w1's N = 96 columns
    params = [
        ("topk_ids", [24, 2], "int"),
        ("hidden_states", [24, 72], "c10::BFloat16"),
        ("w2", [4, 72, 48], "c10::BFloat16"),
        ("w1", [4, 96, 72], "c10::BFloat16"),
        ("topk_weights", [24, 2], "float"),
    ]
    case = find_implementation(_catalog(tmp_path, "fused_moe_kernel", params), "cpu", 1.0)
    assert tuple(case.run().shape) == (48, 96)
    assert "tensors found by name" in case.implementation
    # the same shapes unnamed (a trace): w1 [4, 96, 72] and w2 [4, 72, 48] are the pair whose
    # D (72) agree, [24, 72] the hidden states of that D, [24, 2] the top-k of its 24 tokens
    dims = [[24, 2], [24, 72], [4, 72, 48], [4, 96, 72], [24, 2]]
    traced = _trace("fused_moe_kernel", dims, ["int", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float"])
    case = find_implementation(traced, "cpu", 1.0)
    assert tuple(case.run().shape) == (48, 96)
    assert "tensors found by their shapes" in case.implementation
    assert case.check()[0] == "pass"


def test_moe_shapes_that_do_not_agree_are_refused_not_replayed(tmp_path: Path) -> None:
    # the hidden states missing from a trace: only [1024, 2] tensors beside w1 [8, 8192, 6144]
    # and w2 [8, 6144, 4096]: no [T, 6144]; it had run as hidden size 2 (98 s, `pass`)
    dims = [[1024, 2], [8, 8192, 6144], [8, 6144, 4096], [1024, 2]]
    target = _trace("fused_moe_kernel", dims, ["float", "c10::BFloat16", "c10::BFloat16", "int"])
    with pytest.raises(NotReplayable) as refused:
        find_implementation(target, "cpu", 1.0)
    assert not isinstance(refused.value, TooLargeForCPU)
    assert "whose sizes agree" in str(refused.value)
    # named, but w2's D (4096) is not the hidden states' (6144)
    named = _catalog(tmp_path, "fused_moe_kernel", _moe([1024, 6144], [8, 8192, 6144], [8, 4096, 4096], [1024, 2]))
    with pytest.raises(NotReplayable, match="disagree"):
        find_implementation(named, "cpu", 1.0)


@pytest.mark.parametrize(
    ("kernel", "dims", "why"),
    [
        ("_per_token_group_quant_fp8", [], "needs the input [tokens, hidden] recorded"),  # had been (1024, 7168)
        ("_fwd_kernel_ep_gather", [[5]], "needs the tokens [T, hidden] recorded"),  # had been (1024, 7168)
        ("write_req_to_token_pool_triton", [[3], [3]], "needs the req_to_token pool"),  # had been (4096, 163844)
        ("void moe_align_block_size_kernel<long>(long const*)", [[40]], "needs topk_ids [T, k]"),  # (1024, 8)
    ],
)
def test_a_builder_refuses_a_shape_it_needs_and_the_recording_lacks(kernel: str, dims: list, why: str) -> None:
    target = _trace(kernel, dims, ["c10::BFloat16"] * len(dims))
    with pytest.raises(NotReplayable, match=why.replace("[", r"\[").replace("]", r"\]")):
        find_implementation(target, "cpu", 1.0)


def test_rope_says_the_cos_sin_cache_it_assumed() -> None:
    # q [16, 4, 64], k [16, 2, 64], positions [16]: no [max_pos, rot_dim] cache recorded
    target = _trace("rotary_embedding_kernel", [[16, 4, 64], [16, 2, 64], [16]], ["c10::BFloat16"] * 3)
    case = find_implementation(target, "cpu", 1.0)
    assert "cos/sin cache [8192, 64] assumed (not recorded)" in case.implementation


# --- class 3: the interpreter guard bounds programs × work -------------------------------------


def test_the_interpreter_guard_counts_a_moe_launchs_programs_not_its_flops() -> None:
    # hidden [1024, 2], w1 [8, 4096, 2], w2 [8, 2, 2048]: 2·1024·2·4096·2 = 33.6 MFLOP, under the
    # 60 MFLOP limit. Interpreter tiles BLOCK_SIZE_M 32, N 64, K 64: 2048 slots + 8·31 padding =
    # 2296 → 72 row blocks, all holding slots; 4096 / 64 = 64 column blocks: 4608 programs of
    # cdiv(2, 64) = 1 step, some 4608 · 14 ms = 65 s a launch — the refusal's scale: the power of
    # two under √(3 s / 65 s) = 0.21, 0.125
    dims = [[1024, 2], [8, 4096, 2], [8, 2, 2048], [1024, 2], [1024, 2]]
    target = _trace("fused_moe_kernel", dims, ["c10::BFloat16"] * 3 + ["float", "int"])
    with pytest.raises(TooLargeForCPU) as refused:
        find_implementation(target, "cpu", 1.0)
    assert "4608 programs of 1 step(s)" in str(refused.value)
    assert refused.value.scale == 0.125
    # at 0.125: 128 tokens · 2 = 256 slots + 248 → 16 row blocks, 512 / 64 = 8 columns: 128
    # programs, some 1.8 s
    assert find_implementation(target, "cpu", 0.125) is not None


# --- class 6: recorded dtypes said ---------------------------------------------------------------


def test_every_builder_says_the_dtype_it_ran_where_the_recording_had_another(tmp_path: Path) -> None:
    said = "run in float32, recorded float16: bytes and time are of float32"
    # cases/cat_fp16_moe_and_rmsnorm.json: an fp16 fused MoE
    moe = _catalog(tmp_path, "fused_moe_kernel", _moe([64, 64], [4, 128, 64], [4, 64, 64], [64, 2], "c10::Half"))
    assert said in find_implementation(moe, "cpu", 1.0).implementation
    # topk_weights (float32) recorded before the fp16 hidden states: the hidden states' dtype is said
    params = [("topk_weights", [64, 2], "float"), *_moe([64, 64], [4, 128, 64], [4, 64, 64], [64, 2], "c10::Half")]
    assert said in find_implementation(_catalog(tmp_path, "fused_moe_kernel", params), "cpu", 1.0).implementation
    quant = _trace("_per_token_group_quant_fp8", [[3, 5, 256]], ["c10::Half"])
    assert said in find_implementation(quant, "cpu", 1.0).implementation
    gather = _trace("_fwd_kernel_ep_gather", [[24, 200]], ["c10::Half"])
    assert said in find_implementation(gather, "cpu", 1.0).implementation
    merge = _trace("void merge_attn_states_kernel<half, 128u>(half*)", [[40, 4, 32], [40, 4]], ["c10::Half", "float"])
    assert said in find_implementation(merge, "cpu", 1.0).implementation
    # block-fp8 GEMM: A [24, 256] and B [200, 256] fp8; its output C [24, 200] recorded bf16
    gemm = _trace(
        "_w8a8_block_fp8_matmul",
        [[24, 256], [200, 256], [24, 200]],
        ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "c10::BFloat16"],
    )
    text = find_implementation(gemm, "cpu", 1.0).implementation
    assert "run in float32, recorded bfloat16: bytes and time are of float32" in text


# --- class 8.2: a catalog's TBD / N/A shape is not recorded ------------------------------------


def test_a_catalog_shape_given_as_tbd_or_na_is_not_recorded_not_a_scalar(tmp_path: Path) -> None:
    params = [
        {"description": "self", "example_dim": "N/A", "example_dtype": "c10::BFloat16"},
        {"description": "mat2", "example_dim": "TBD", "example_dtype": "TBD"},
        {"description": "alpha", "example_dim": [], "example_dtype": "Scalar"},
    ]
    self_, mat2, alpha = from_params(params)
    assert (self_.kind, self_.dims, self_.missing, self_.name) == ("none", None, "not recorded", "self")
    assert (mat2.kind, mat2.missing) == ("none", "not recorded")
    assert alpha.kind == "scalar" and not alpha.missing  # a scalar stays one
    # cases/cat_quant_na.json: input_2d "N/A" had been replayed as (1024, 7168), `pass`
    target = _catalog(tmp_path, "_per_token_group_quant_fp8", [("input_2d", "N/A", "torch.bfloat16")])
    result = replay_one(target, "cpu")
    assert result.check == "skipped"
    assert result.reason == "shapes not recorded: input_2d (the catalog gives no example_dim list)"
