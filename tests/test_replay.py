"""Replay on the CPU: ATen ops from the H100 traces, the Triton kernels under the interpreter,
the command line and the report merge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is defined
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernel_atlas.cli import app  # noqa: E402
from kernel_atlas.ingest.pipeline import write_outputs  # noqa: E402
from kernel_atlas.ingest.recorded import parse_call  # noqa: E402
from kernel_atlas.replay.inputs import make_tensor  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_all, replay_one, targets_from_output  # noqa: E402
from kernel_atlas.replay.timing import measure  # noqa: E402
from kernel_atlas.report.build import build_report  # noqa: E402
from tests.conftest import ingested  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def h100_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    outs = {}
    for stem in ("h100_bert_small_infer", "h100_vit_image_classify_infer"):
        out = tmp_path_factory.mktemp(stem) / f"{stem}.atlas"
        write_outputs(ingested(stem), out)
        outs[stem] = out
    return outs


def test_aten_signatures_of_the_h100_traces_replay_on_cpu(h100_outputs) -> None:
    results = pd.concat([replay_all(targets_from_output(out), "cpu") for out in h100_outputs.values()])
    aten = results[results["launcher"].str.startswith("aten::")]
    replayed = aten[aten["check"] != "skipped"]
    assert len(aten) >= 25
    assert len(replayed) / len(aten) >= 0.95, aten.loc[aten["check"] == "skipped", ["launcher", "reason"]]
    assert (aten.loc[aten["check"] == "skipped", "reason"].str.len() > 0).all()  # the rest say why
    assert (replayed["check"] == "pass").all(), replayed.loc[replayed["check"] != "pass", ["launcher", "reason"]]
    assert (replayed["method"] == "cpu-wall-clock").all() and (replayed["median_us"] > 0).all()
    assert (replayed["p10_us"] <= replayed["median_us"]).all() and (replayed["median_us"] <= replayed["p90_us"]).all()
    stand_ins = set(replayed.loc[replayed["implementation"].str.startswith("stand-in"), "launcher"])
    assert stand_ins == {"aten::_flash_attention_forward", "aten::cudnn_convolution"}


def test_inputs_follow_recorded_strides_dtypes_and_index_ranges() -> None:
    recorded = parse_call(
        "[[4,6],[],[3]]", '["c10::BFloat16","Scalar","long int"]', "[[1,4],[],[1]]", '["","0",""]'
    )
    assert [r.kind for r in recorded] == ["tensor", "scalar", "tensor"]
    t = make_tensor(recorded[0].dims, recorded[0].dtype, "cpu", recorded[0].strides)
    assert t.dtype == torch.bfloat16 and t.stride() == (1, 4) and t.shape == (4, 6)
    target = Target(
        "k",
        "aten::index_select",
        "index_select",
        "memory",
        "[[30522,8],[],[64]]",
        '["float","Scalar","long int"]',
        None,
        '["","0",""]',
        None,
        1,
        "trace",
    )
    result = replay_one(target, "cpu")
    assert result.check == "pass", result.reason
    fp8 = make_tensor((16, 32), "c10::Float8_e4m3fn", "cpu")
    assert fp8.dtype == torch.float8_e4m3fn and torch.isfinite(fp8.float()).all()
    lists = parse_call("[[[4,1,8],[4,3,8]],[]]", '["TensorList","Scalar"]', None, '["","1"]')
    assert lists[0].kind == "tensor_list" and lists[0].dims == ((4, 1, 8), (4, 3, 8))


def test_shapes_over_the_memory_limit_are_refused() -> None:
    target = Target(
        "k",
        "aten::mm",
        "matmul",
        "gemm",
        "[[65536,65536],[65536,65536]]",
        '["float","float"]',
        None,
        None,
        None,
        1,
        "trace",
    )
    result = replay_one(target, "cpu", max_gib=1.0)
    assert result.check == "skipped" and "--max-gib" in result.reason


@pytest.mark.parametrize(
    ("kernel", "why"),
    [
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "collective"),
        ("void deep_ep::intranode::dispatch<8, 512>(int4*)", "DeepEP"),
    ],
)
def test_kernels_that_need_several_gpus_say_why(kernel: str, why: str) -> None:
    result = replay_one(
        Target(kernel, "record_param_comms", "all_reduce", "communication", "[]", "[]", None, None, None, 1, "catalog"),
        "cpu",
    )
    assert result.check == "skipped" and why in result.reason


def _catalog_target(name: str, dims: list, types: list[str]) -> Target:
    return Target(
        name, "<built-in function launch>", "", "", json.dumps(dims), json.dumps(types), None, None, None, 1, "catalog"
    )


@pytest.mark.parametrize(
    ("kernel", "dims"),
    [
        ("fused_moe_kernel", [[24, 64], [4, 96, 64], [4, 64, 48], [24, 2], [24, 2]]),
        ("_moe_sum_reduce_kernel", [[24, 64], [4, 96, 64], [4, 64, 48], [24, 2], [24, 2]]),
        ("void moe_align_block_size_kernel<long>(long const*)", [[40, 4]]),
        ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", [[8, 96], [8, 96], [96]]),
        ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", [[8, 96], [8, 96], [96]]),
        ("fused_dual_residual_rmsnorm_kernel", [[8, 96], [8, 96], [8, 96], [8, 96], [1, 96], [2, 96]]),
        ("write_req_to_token_pool_triton", [[8, 512], [1], [1], [1], [1], [64]]),
        ("create_flashinfer_kv_indices_triton", [[8, 512], [1], [1], [2], [0]]),
        ("compute_position_kernel", [[1], [1]]),
        ("_per_token_group_quant_fp8", [[16, 256]]),
        ("_fwd_kernel_ep_scatter_1", [[24, 256], [64, 256], [64, 2]]),
        ("_fwd_kernel_ep_gather", [[24, 256]]),
        ("_w8a8_block_fp8_matmul", [[24, 256], [256, 256]]),
        (
            "void deep_gemm::fp8_gemm_kernel<256u, 256u, 64u, (deep_gemm::GemmType)0>(__nv_bfloat16*)",
            [[24, 256], [24, 2], [256, 256], [2, 2], [24, 256]],
        ),
    ],
)
def test_triton_kernels_match_their_torch_references(kernel: str, dims: list) -> None:
    result = replay_one(_catalog_target(kernel, dims, ["c10::BFloat16"] * len(dims)), "cpu")
    assert result.check == "pass", (result.implementation, result.reason)
    assert result.median_us > 0
    expected = (
        "torch moe_align" if "align" in kernel else "stand-in for DeepGEMM" if "deep_gemm" in kernel else "Triton"
    )
    assert result.implementation.startswith(expected)


def test_fused_moe_pieces_against_a_loop_reference() -> None:
    from kernel_atlas.replay.kernels.fused_moe import (
        fused_experts,
        fused_experts_reference,
        moe_align_block_size,
        route,
    )

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(10, 32, generator=generator)
    w1 = torch.randn(3, 48, 32, generator=generator) / 6
    w2 = torch.randn(3, 32, 24, generator=generator) / 5
    weights, ids = route(torch.randn(10, 3, generator=generator), 2)
    assert torch.allclose(weights.sum(-1), torch.ones(10))
    out = fused_experts(x, w1, w2, weights, ids, "cpu")
    assert torch.allclose(out, fused_experts_reference(x, w1, w2, weights, ids), atol=1e-4)
    sorted_ids, expert_ids, total = moe_align_block_size(ids, 16, 3)
    assert int(total) % 16 == 0 and len(expert_ids) * 16 == int(total) == len(sorted_ids)


def test_cpu_timing_is_wall_clock_with_quantiles() -> None:
    timing = measure(lambda: sum(range(1000)), "cpu", min_reps=20)
    assert timing.method == "cpu-wall-clock" and timing.reps >= 20
    assert 0 < timing.p10_us <= timing.median_us <= timing.p90_us


def test_replay_command_on_the_seed_catalog_and_json_output() -> None:
    result = runner.invoke(
        app, ["replay", "--kernel", "^fused_moe_kernel$", "--device", "cpu", "--scale", "0.03125", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output[result.output.index("[") :])
    assert len(rows) == 1
    row = rows[0]
    for key in (
        "kernel",
        "launcher",
        "input_dims",
        "implementation",
        "device",
        "median_us",
        "p10_us",
        "p90_us",
        "traced_us",
        "check",
        "reason",
    ):
        assert key in row
    assert (
        row["check"] == "pass"
        and "interpreter" in row["implementation"]
        and "scaled by 0.03125" in row["implementation"]
    )
    full = runner.invoke(app, ["replay", "--kernel", "^fused_moe_kernel$", "--device", "cpu", "--json"])
    assert full.exit_code == 0, full.output
    refused = json.loads(full.output[full.output.index("[") :])[0]
    assert refused["check"] == "skipped" and "--scale" in refused["reason"]  # too big for the interpreter: says how


def test_replay_all_writes_parquet_that_the_report_merges(h100_outputs) -> None:
    out = h100_outputs["h100_bert_small_infer"]
    result = runner.invoke(app, ["replay", "--from", str(out), "--all", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    replay = pd.read_parquet(out / "replay.parquet")
    assert len(replay) == len(targets_from_output(out))
    report = build_report(out)
    merged = report.analysis.roofline
    assert merged["replay_us"].notna().sum() >= 10
    assert "replayed" in report.files["html"].read_text()


@pytest.mark.parametrize(
    ("kernel", "dims", "expect"),
    [
        (
            "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0>(half*)",
            [[4096], [4096], [10], [2, 8, 64], [999999, 1, 2, 64], [999999, 1, 2, 64], [3], [200], [2]],
            "2 request(s), 1 query and 100 KV tokens each (decode",
        ),
        (
            "void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<RaggedParams>>(Params)",
            [[4096], [4096], [8], [64, 4, 32], [64, 4, 32], [64, 4, 32], [2], [2], [64, 4, 32]],
            "1 request(s), 64 query and 64 KV tokens each (ragged prefill",
        ),
        (
            "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<Traits>(Params)",
            [[4096], [4096], [18], [2, 4, 64], [2, 4, 16], [999999, 1, 64], [999999, 1, 16], [96], [2, 4, 64]],
            "2 request(s) × 48 KV tokens",
        ),
        ("void merge_attn_states_kernel<__nv_bfloat16, 128u>(__nv_bfloat16*)", [[40, 4, 32], [40, 4]], "merge_state"),
        (
            "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<true, 64u>(half*)",
            [[16, 4, 64], [16, 2, 64], [16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "NeoX",
        ),
        (
            "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<false, 64u>(half*)",
            [[16, 4, 64], [16, 2, 64], [16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "interleaved",
        ),
        (
            "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &(silu(float const&))>(int)",
            [[8, 64], [8, 128], []],
            "silu",
        ),
    ],
)
def test_attention_rope_and_activation_stand_ins(kernel: str, dims: list, expect: str) -> None:
    result = replay_one(_catalog_target(kernel, dims, ["c10::BFloat16"] * len(dims)), "cpu")
    assert result.check == "pass", (result.implementation, result.reason)
    assert expect in result.implementation


def test_sequence_length_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATLAS_REPLAY_SEQ_LEN", "37")
    target = _catalog_target(
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<0>(half*)",
        [[4096], [4096], [10], [1, 8, 64], [999999, 1, 8, 64], [999999, 1, 8, 64], [2], [9]],
        ["c10::BFloat16"] * 8,
    )
    result = replay_one(target, "cpu")
    assert result.check == "pass" and "37 KV tokens" in result.implementation


def test_rope_reference_rotates_by_position() -> None:
    from kernel_atlas.replay.kernels.attention import rope_reference

    cache = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])  # position 1: a 90° turn
    q = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    neox, _ = rope_reference(torch.tensor([1]), q, q, cache, True)
    assert torch.allclose(neox, torch.tensor([[[-3.0, -4.0, 1.0, 2.0]]]))
    same, _ = rope_reference(torch.tensor([0]), q, q, cache, False)
    assert torch.allclose(same, q)
