"""`atlas replay` on a CPU-only machine (an independent tester's findings, campaign AS): what is not
replayed is counted with its reason, a run without shapes is refused, a call is found and
labelled by its main kernel, a replay of another problem than the recorded one fails its check,
GPU-only ops get a stand-in or one clear reason, stand-ins are said, recorded dtypes and eps are
used, CPU times stay off the GPU roofline. Expected values are worked out by hand in the comments.
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

from kernel_atlas.core.errors import AtlasError  # noqa: E402
from kernel_atlas.ingest.recorded import parse_call  # noqa: E402
from kernel_atlas.replay import aten, runner  # noqa: E402
from kernel_atlas.replay.aten import build_case  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_all, select, targets_from_output  # noqa: E402
from kernel_atlas.report.build import merge_replay  # noqa: E402

E = math.e
MM = "ampere_sgemm_32x32_sliced1x4_tn"


def _row(name: str, dur: float, **fields) -> dict:
    base = {
        "trace": "t", "rank": 0, "kind": "kernel", "name": name, "dur_us": dur, "ts_us": 0.0, "cpu_op": None,
        "cpu_op_id": None, "launcher": None, "op_mapping": "", "category": "", "label_rule": "", "input_dims": None,
        "input_types": None, "input_strides": None, "concrete_inputs": None, "grid": "[1, 1, 1]",
        "block": "[128, 1, 1]", "graph_launch": False, "link": "correlation",
    }  # fmt: skip
    return {**base, **fields}


def _mm(op_id: int, dur: float, dims: str | None = "[[4,8],[8,2]]", ts: float = 0.0) -> dict:
    return _row(
        MM, dur, ts_us=ts, cpu_op="aten::mm", cpu_op_id=op_id, launcher="aten::mm", op_mapping="matmul",
        category="gemm", label_rule="rule:gemm", input_dims=dims, input_types='["float","float"]' if dims else None,
        concrete_inputs='["",""]' if dims else None,
    )  # fmt: skip


def _output(tmp_path: Path, rows: list[dict]) -> Path:
    out = tmp_path / "run.atlas"
    out.mkdir()
    frame = pd.DataFrame(rows)
    frame["cpu_op_id"] = frame["cpu_op_id"].astype("Int64")
    frame["graph_launch"] = frame["graph_launch"].astype(bool)
    frame.to_parquet(out / "kernels.parquet")
    return out


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


def _call(dims: list, types: list[str], concrete: list[str]):
    return parse_call(json.dumps(dims), json.dumps(types), None, json.dumps(concrete))


# --- 4. what is not replayed is counted --------------------------------------------------------------


def test_kernels_without_a_cpu_op_are_targets_counted_with_their_reason(tmp_path: Path) -> None:
    # One mm call (5 µs); two sgemm launches outside every op (10, 11 µs); one graph-replayed
    # kernel launched twice with one grid (7 + 9 µs: mean 8, 16 in all). They had been dropped:
    # "1/1 replayed", nothing said of 37 of the 42 µs.
    out = _output(
        tmp_path,
        [
            _mm(1, 5.0),
            _row("sgemm_nt", 10.0, link="launch has no enclosing CPU op or Python frame"),
            _row("sgemm_nn", 11.0, link="launch has no enclosing CPU op or Python frame"),
            _row("graph_gather", 7.0, graph_launch=True, link="replayed from a CUDA/HIP graph"),
            _row("graph_gather", 9.0, graph_launch=True, link="replayed from a CUDA/HIP graph"),
        ],
    )
    targets = targets_from_output(out)
    assert [t.kernel for t in targets] == [MM, "sgemm_nt", "sgemm_nn", "graph_gather"]
    by_name = {t.kernel: t for t in targets}
    assert by_name["graph_gather"].count == 2 and by_name["graph_gather"].traced_us == 8.0
    results = replay_all(targets, "cpu")
    assert len(results) == 4 and int(runner.replayed(results).sum()) == 1
    reasons = results.set_index("kernel")["reason"]
    assert "no CPU op recorded" in reasons["sgemm_nt"] and "10.0 µs in all" in reasons["sgemm_nt"]
    assert "graph replay" in reasons["graph_gather"] and "--capture" in reasons["graph_gather"]
    assert "16.0 µs in all" in reasons["graph_gather"] and results.set_index("kernel")["count"]["graph_gather"] == 2


def test_a_timed_replay_whose_values_were_not_compared_is_replayed() -> None:
    # median set, check skipped (dropout): replayed; a skipped row without a time: not
    results = pd.DataFrame({"median_us": [3.0, None, 4.0], "check": ["skipped", "skipped", "pass"]})
    assert runner.replayed(results).tolist() == [True, False, True]


def test_an_in_place_op_returning_nothing_is_checked_on_what_it_wrote() -> None:
    # _foreach_add_(self=[x1 [4], x2 [3]], 2) returns nothing: its two written tensors are compared
    # (had been "skipped: op returns no tensor")
    case = build_case("aten::_foreach_add_", _call([[[4], [3]], []], ["TensorList", "Scalar"], ["", "2"]), "cpu")
    verdict, why = case.check()
    assert verdict == "pass" and why.startswith("2 outputs")


# --- 5. a run without shapes --------------------------------------------------------------------------


def test_a_run_that_recorded_no_shapes_is_refused_in_one_line(tmp_path: Path) -> None:
    out = _output(tmp_path, [_mm(1, 5.0, dims=None), _mm(2, 7.0, dims=None)])
    with pytest.raises(AtlasError, match="record_shapes"):
        targets_from_output(out)


def test_calls_without_shapes_are_not_given_a_mean_time_no_call_had(tmp_path: Path) -> None:
    # two aten::addmm calls without Input Dims (5 and 7 µs) beside a shaped mm: one target, not
    # replayed, no traced time (the mean 6 µs was neither call's), 12 µs in all said
    addmm = [
        {**_mm(i, d, dims=None), "cpu_op": "aten::addmm", "launcher": "aten::addmm"} for i, d in ((2, 5.0), (3, 7.0))
    ]
    targets = targets_from_output(_output(tmp_path, [_mm(1, 4.0), *addmm]))
    bare = next(t for t in targets if t.launcher == "aten::addmm")
    assert bare.traced_us is None and bare.count == 2
    result = replay_all([bare], "cpu").iloc[0]
    assert result["check"] == "skipped" and "shapes not recorded" in result["reason"]
    assert "12.0 µs in all" in result["reason"]


# --- 1. a call is found and labelled by its main kernel -----------------------------------------------


def test_a_convolution_is_named_and_labelled_by_its_longest_kernel_and_found_by_any(tmp_path: Path) -> None:
    # cudnn_convolution launching nchwToNhwc (3 µs, first), the TF32 fprop (20 µs), nhwcToNchw (2 µs)
    conv = {"cpu_op": "aten::cudnn_convolution", "cpu_op_id": 1, "launcher": "aten::cudnn_convolution"}
    conv |= {"input_dims": "[[1,2,5,5],[2,2,3,3]]", "input_types": '["float","float"]'}
    rows = [
        _row("nchwToNhwcKernel", 3.0, ts_us=0.0, op_mapping="copy_", category="memory",
             label_rule="rule:layout-transform", **conv),
        _row("sm80_xmma_fprop_implicit_gemm_tf32f32", 20.0, ts_us=4.0, op_mapping="conv", category="gemm",
             label_rule="rule:conv-tf32", **conv),
        _row("nhwcToNchwKernel", 2.0, ts_us=25.0, op_mapping="copy_", category="memory",
             label_rule="rule:layout-transform", **conv),
    ]  # fmt: skip
    (target,) = targets_from_output(_output(tmp_path, rows))
    assert target.kernel == "sm80_xmma_fprop_implicit_gemm_tf32f32"
    assert (target.label_rule, target.op_mapping, target.category) == ("rule:conv-tf32", "conv", "gemm")
    assert target.traced_us == 25.0  # 3 + 20 + 2: the whole call
    assert select([target], "fprop", None, None) == [target]
    assert select([target], "nchwToNhwc", None, None) == [target]  # any kernel the call launched
    assert select([target], None, "conv", None) == [target]


# --- 2. a replay of another problem fails -------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "first tensor's leading dimension halved, recorded strides dropped",
        "every float scalar replaced by 1.0 (layer-norm eps 0.5 → 1)",
        "FlashAttention's causal mask at the top left (4 queries, 6 keys)",
        "attention stand-in's recorded scale replaced by 1",
    ],
)
def test_a_replay_of_another_problem_than_the_recorded_one_fails(name: str) -> None:
    from tests.support.replay_mutants import MUTANTS, run_mutant

    outcome = run_mutant(next(m for m in MUTANTS if m.name == name))
    assert outcome.original[0] == "pass", outcome.original
    assert outcome.mutated[0] == "fail", outcome.mutated


# --- 3. GPU-only ops on the CPU ----------------------------------------------------------------------


def test_efficient_attention_forward_has_a_stand_in_with_its_bias_scale_and_mask_type(hand_inputs) -> None:
    # [B,S,H,D] q = 1, keys [0, 2], values [2, 4], bias [1, 0], scale 0.5, custom_mask_type 0:
    # logits 0.5·[0, 2] + [1, 0] = [1, 1] → out = 3 (had failed: no CPU kernel)
    hand_inputs([[[[1.0]]]], [[[[0.0]], [[2.0]]]], [[[[2.0]], [[4.0]]]], [[[[1.0, 0.0]]]])
    recorded = _call(
        [[1, 1, 1, 1], [1, 2, 1, 1], [1, 2, 1, 1], [1, 1, 1, 2], [], [], [], [], [], [], [], []],
        ["float"] * 4 + ["", "", "", ""] + ["Scalar"] * 4,
        ["", "", "", "", "", "", "", "", "0.", "0", "False", "0.5"],
    )
    case = build_case("aten::_efficient_attention_forward", recorded, "cpu")
    assert float(case.run().reshape(-1)[0]) == pytest.approx(3.0, abs=1e-6)
    assert case.timed == "stand-in" and "scale=0.5" in case.implementation
    assert case.check()[0] == "pass"


def test_grouped_query_flash_attention_shares_each_kv_head(hand_inputs) -> None:
    # q [B=1, S=1, H=2, D=1] both 1; one KV head: k [0, 2], v [2, 4]; scale 0.5, not causal:
    # logits [0, 1] → out = (2 + 4e)/(1 + e) = 3.46212 for both query heads (had failed: 2 vs 1 heads)
    hand_inputs([[[[1.0], [1.0]]]], [[[[0.0]], [[2.0]]]], [[[[2.0]], [[4.0]]]])
    recorded = _call(
        [[1, 1, 2, 1], [1, 2, 1, 1], [1, 2, 1, 1], [], [], [], [], [], [], [], []],
        ["float"] * 3 + ["", ""] + ["Scalar"] * 6,
        ["", "", "", "", "", "1", "2", "0.", "False", "False", "0.5"],
    )
    case = build_case("aten::_flash_attention_forward", recorded, "cpu")
    assert math.isclose((2 + 4 * E) / (1 + E), 3.46212, abs_tol=1e-5)
    assert case.run().reshape(-1).tolist() == pytest.approx([3.46212] * 2, abs=1e-5)
    assert "GQA: 2 query heads on 1 key/value heads" in case.implementation and case.check()[0] == "pass"


def test_miopen_batch_norm_runs_native_batch_norm(hand_inputs) -> None:
    # training, x = [1, 3] (N 2, C 1), w 1, b 0, eps 0: mean 2, biased var 1 → out [-1, 1]
    hand_inputs([[[[1.0]]], [[[3.0]]]], [1.0], [0.0], [0.0], [1.0])
    recorded = _call(
        [[2, 1, 1, 1], [1], [1], [1], [1], [], [], []],
        ["float"] * 5 + ["Scalar"] * 3,
        ["", "", "", "", "", "True", "0.1", "0."],
    )
    case = build_case("aten::miopen_batch_norm", recorded, "cpu")
    assert case.run()[0].reshape(-1).tolist() == pytest.approx([-1.0, 1.0], abs=1e-6)
    assert "native_batch_norm" in case.implementation and case.check()[0] == "pass"


def test_a_gpu_only_op_without_a_stand_in_says_so_in_one_line() -> None:
    target = Target(
        "k", "aten::cudnn_grid_sampler", "", "", "[[1,1,2,2],[1,2,2,2]]", '["float","float"]', None, None,
        None, 1, "trace",
    )  # fmt: skip
    reason = runner.replay_one(target, "cpu").reason
    assert reason == "aten::cudnn_grid_sampler has no kernel on the CPU and no stand-in: replay it on a GPU"


# --- 7, 8. stand-ins are said; recorded dtype and eps are used ----------------------------------------


def _norm_target(eps: str = "0.5", dtype: str = "c10::Half") -> Target:
    return Target(
        "void vllm::rms_norm_kernel<c10::Half, 1, 1>(P)", "_C::rms_norm", "rms_norm", "normalization",
        "[[2,2],[2,2],[2],[]]", json.dumps([dtype] * 3 + ["Scalar"]), None, json.dumps(["", "", "", eps]),
        3.0, 1, "trace", "rule:rms-norm",
    )  # fmt: skip


def test_vllm_rms_norm_is_a_stand_in_run_with_the_recorded_eps(monkeypatch) -> None:
    # x rows [3, 4], w [1, 1], eps 0.5 recorded: rms = √((9 + 16)/2 + 0.5) = √13 → [0.832050, 1.109400]
    # (with the fixed 1e-6 it had been [0.848528, 1.131371]); a Triton kernel standing in for
    # vLLM's CUDA one, not "kernel"
    from kernel_atlas.replay.kernels import norms

    given = iter([[[3.0, 4.0], [3.0, 4.0]]])

    def randn(shape, dtype, device, generator, std=1.0):
        return torch.tensor(next(given) if len(shape) == 2 else [1.0, 1.0]).to(dtype)

    monkeypatch.setattr(norms, "randn", randn)
    case = runner._case(_norm_target(), "cpu", 16.0, 1.0)
    assert math.isclose(3 / math.sqrt(13), 0.832050, abs_tol=1e-6)
    assert case.run().reshape(-1).tolist() == pytest.approx([0.832050, 1.109400] * 2, abs=1e-5)
    assert case.timed == "stand-in" and case.check()[0] == "pass"
    assert "recorded float16" in case.implementation  # run in fp32 on the CPU, said


def test_a_gpu_replay_computes_in_the_recorded_dtype() -> None:
    from kernel_atlas.replay.kernels.common import compute_dtype

    assert compute_dtype("cuda", _norm_target(dtype="c10::Half")) == torch.float16
    assert compute_dtype("cuda", _norm_target(dtype="float")) == torch.float32
    assert compute_dtype("cpu", _norm_target(dtype="c10::Half")) == torch.float32


# --- 9. builders read the recorded problem ------------------------------------------------------------


def test_rotary_embedding_with_flat_q_and_k_takes_its_heads_from_the_head_size() -> None:
    # q [4, 2·8], k [4, 1·8], head_size 8, cache [32, 8]: q as [4, 2, 8], k as [4, 1, 8]
    target = Target(
        "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(P)", "_C::rotary_embedding", "rotary_embedding",
        "", "[[4],[4,16],[4,8],[],[32,8],[]]", '["long int","float","float","Scalar","float","Scalar"]', None,
        '["","","","8","","True"]', 2.0, 1, "trace", "rule:rope-neox",
    )  # fmt: skip
    case = runner._case(target, "cpu", 16.0, 1.0)
    q, k = case.run()
    assert tuple(q.shape) == (4, 2, 8) and tuple(k.shape) == (4, 1, 8)
    assert "head size 8" in case.implementation and case.check()[0] == "pass"


def test_inductor_fused_mul_silu_replays_its_whole_output() -> None:
    # triton_poi_fused_mul_silu over a [2, 8, 64] and b [16, 64]: 1024 outputs (had been 512: a
    # [16, 64] tensor split into two halves of [16, 32])
    target = Target(
        "triton_poi_fused_mul_silu_0", "<built-in function launch>", "silu_and_mul", "activation",
        "[[2,8,64],[16,64],[]]", '["c10::BFloat16","c10::BFloat16","Scalar"]', None, '["","","1024"]', 2.0, 1,
        "trace", "rule:inductor-gated-activation",
    )  # fmt: skip
    case = runner._case(target, "cpu", 16.0, 1.0)
    assert case.run().numel() == 1024 and case.timed == "stand-in" and case.check()[0] == "pass"


# --- 10. input handling --------------------------------------------------------------------------------


def test_a_negative_max_gib_is_refused() -> None:
    with pytest.raises(AtlasError, match="--max-gib -1"):
        replay_all([], "cpu", max_gib=-1.0)


# --- 6 and campaign AP 3. CPU replays stay off the GPU roofline; replay columns are declared ----------


def test_cpu_and_other_gpu_replays_stay_off_the_roofline_and_a_same_gpu_replay_is_on_it() -> None:
    from kernel_atlas.core.devices import get_device, match_device

    h100 = match_device("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    roofline = pd.DataFrame(
        {
            "name": ["k_cpu", "k_a100", "k_h100"],
            "launcher": ["aten::mm"] * 3,
            "input_dims": ["[[1]]", "[[2]]", "[[3]]"],
            "input_types": ['["float"]'] * 3,
            "role": ["main"] * 3,
            "flops": [2e6] * 3,
            "bytes": [4e6] * 3,
        }
    )
    base = {"launcher": "aten::mm", "input_types": '["float"]', "check": "pass", "implementation": "x"}
    replay = pd.DataFrame(
        [
            {**base, "input_dims": "[[1]]", "kernels": '["k_cpu"]', "device": "cpu", "device_name": "CPU (x86_64)",
             "median_us": 1000.0, "timed": "kernel", "ratio": None, "scale": 1.0},
            {**base, "input_dims": "[[2]]", "kernels": '["k_a100"]', "device": "cuda",
             "device_name": "NVIDIA A100-SXM4-80GB (CUDA/HIP 12.4)", "median_us": 4.0, "timed": "kernel",
             "ratio": 1.5, "scale": 1.0},
            {**base, "input_dims": "[[3]]", "kernels": '["k_h100"]', "device": "cuda",
             "device_name": "NVIDIA H100 80GB HBM3 (CUDA/HIP 12.4)", "median_us": 2.0, "timed": "kernel",
             "ratio": 1.1, "scale": 1.0},
        ]
    )  # fmt: skip
    merged = merge_replay(roofline, replay, h100).set_index("name")
    # CPU wall clock: 2e6 FLOP / 1000 µs would have been 0.002 TFLOP/s under the H100's roofs
    assert pd.isna(merged.loc["k_cpu", "replay_tflops"]) and not merged.loc["k_cpu", "replay_same_device"]
    assert "wall clock" in merged.loc["k_cpu", "replay_note"]
    assert pd.isna(merged.loc["k_a100", "replay_tflops"]) and pd.isna(merged.loc["k_a100", "replay_ratio"])
    assert "A100" in merged.loc["k_a100", "replay_note"]
    # the H100 replay: 2e6 / (2 µs · 1e6) = 1.0 TFLOP/s, 4e6 / (2 · 1e3) = 2000 GB/s, ratio kept
    assert merged.loc["k_h100", "replay_tflops"] == pytest.approx(1.0)
    assert merged.loc["k_h100", "replay_gbps"] == pytest.approx(2000.0)
    assert merged.loc["k_h100", "replay_ratio"] == pytest.approx(1.1) and merged.loc["k_h100", "replay_same_device"]
    assert get_device(h100.key).key == h100.key


def test_replay_columns_are_written_with_their_declared_types(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from kernel_atlas.store.outputs import write_table

    # a CPU replay: ratio null in every row (had been written as string)
    results = replay_all([], "cpu")
    results.loc[0] = {column: None for column in results.columns} | {"kernel": "k", "median_us": 1.0, "count": 1}
    path = write_table(results, tmp_path / "replay.parquet", None)
    schema = pq.read_schema(path)
    assert str(schema.field("ratio").type) == "double" and str(schema.field("count").type) == "int64"
    roofline = write_table(pd.DataFrame({"name": ["k"], "replay_ratio": [None]}), tmp_path / "roofline.parquet", None)
    schema = pq.read_schema(roofline)
    assert str(schema.field("replay_ratio").type) == "double" and str(schema.field("replay_tflops").type) == "double"
