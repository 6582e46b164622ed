"""Replay on the CPU: ATen ops from the H100 traces, the Triton kernels under the interpreter
(at shapes with tail blocks), the command line and the report merge."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is defined
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernel_atlas.cli import app  # noqa: E402
from kernel_atlas.ingest.fleet import write_outputs  # noqa: E402
from kernel_atlas.ingest.recorded import parse_call  # noqa: E402
from kernel_atlas.replay import runner as runner_module  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_all, replay_one, targets_from_output  # noqa: E402
from kernel_atlas.replay.timing import measure  # noqa: E402
from kernel_atlas.replay.values import make_tensor  # noqa: E402
from kernel_atlas.report.build import build_report  # noqa: E402
from tests.support.traces import ingested  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def h100_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    outs = {}
    for stem in ("h100_bert_small_infer", "h100_vit_image_classify_infer"):
        out = tmp_path_factory.mktemp(stem) / f"{stem}.atlas"
        write_outputs(ingested(stem), out)
        outs[stem] = out
    return outs


@pytest.fixture(scope="module")
def h100_replayed(h100_outputs: dict[str, Path]) -> dict[str, Path]:
    """`atlas replay --from OUT --device cpu --all` of both outputs, as a user runs it: in a process
    of its own, whose memory the CPU replay's budget is measured against (a test session holds
    more than a command does). Each writes OUT/replay.parquet."""
    from tests.support.hostile import atlas

    for out in h100_outputs.values():
        done = atlas("replay", "--from", out, "--device", "cpu", "--all")
        assert done.code == 0, done.output
    return h100_outputs


def test_aten_signatures_of_the_h100_traces_replay_on_cpu(h100_replayed) -> None:
    results = pd.concat([pd.read_parquet(out / "replay.parquet") for out in h100_replayed.values()])
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
    # the op itself is timed, except where a CPU stand-in replaces it; no CPU time is a ratio to a GPU time
    assert set(replayed.loc[replayed["launcher"].isin(stand_ins), "timed"]) == {"stand-in"}
    assert set(replayed.loc[~replayed["launcher"].isin(stand_ins), "timed"]) == {"kernel"}
    assert replayed["ratio"].isna().all() and (replayed["scale"] == 1.0).all()
    assert results["input_types"].notna().all()


def test_inputs_follow_recorded_strides_dtypes_and_index_ranges() -> None:
    recorded = parse_call("[[4,6],[],[3]]", '["c10::BFloat16","Scalar","long int"]', "[[1,4],[],[1]]", '["","0",""]')
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


@pytest.mark.parametrize("room_mib", [None, 128])
def test_calls_beyond_a_cpu_checks_work_are_refused_on_the_cpu(monkeypatch: pytest.MonkeyPatch, room_mib) -> None:
    """An mm of 32768×2048 by 2048×8192 is 2·32768·2048·8192 = 1,099.5 GFLOP: within --max-gib
    (its inputs 335.5 MB in float32) but minutes and gigabytes on two CPU cores. The same reason
    whatever room the process has (a test worker holding ~760 MB had 200 MiB, less than the
    inputs, and the row read "needs more memory" instead)."""
    if room_mib is not None:
        monkeypatch.setattr(runner_module, "cpu_room", lambda: room_mib << 20)
    target = Target(
        "k",
        "aten::mm",
        "matmul",
        "gemm",
        "[[32768,2048],[2048,8192]]",
        '["float","float"]',
        None,
        None,
        None,
        1,
        "trace",
    )
    result = replay_one(target, "cpu")
    assert result.check == "skipped"
    assert (
        result.reason == "1,100 GFLOP at the recorded shape: more than a CPU check runs (20 GFLOP); replay it on a GPU"
    )


@pytest.mark.parametrize(
    ("kernel", "launcher", "dims", "types", "concrete", "error"),
    [
        # a scalar beyond int64 in Concrete Inputs: torch's float64 reference overflows
        ("vectorized_elementwise_kernel<MulFunctor<float>>", "aten::mul", [[64], []], ["float", "Scalar"],
         ["", str(2**64)], "OverflowError"),
        # a zero hidden size: the Triton interpreter's arange refuses it (its own exception type)
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
         "aiter::rmsnorm", [[32, 0], [32, 0], [0], []], ["c10::BFloat16"] * 3 + ["Scalar"], ["", "", "", "1e-6"],
         "InterpreterError"),
    ],
)  # fmt: skip
def test_a_replay_that_fails_in_torch_or_triton_costs_only_its_target(
    kernel: str, launcher: str, dims: list, types: list[str], concrete: list[str], error: str
) -> None:
    target = Target(
        kernel, launcher, "", "", json.dumps(dims), json.dumps(types), None, json.dumps(concrete), 2.0, 1, "trace"
    )
    result = replay_one(target, "cpu")
    assert result.check == "skipped" and result.reason.startswith(f"replay failed: {error}"), result.reason


def test_a_cpu_replay_keeps_the_process_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data segment may grow by 600 MiB, and by no more than keeps the process within 960
    MiB: a process holding 700 MiB at its first replay may add 260, one holding 900 still 128; one
    past the bound is no command's (a test session) and may add 600. The room is measured once, so
    every replay of a command gets the same. The CPU's thread pools start before the limit (OpenMP
    ended the process, `libgomp: Thread creation failed`, when the replay had used it up)."""
    import resource

    from kernel_atlas.replay import runner

    started = []
    monkeypatch.setattr(runner, "_start_thread_pools", lambda: started.append(True))
    real = runner._status_bytes
    try:
        for held, more in ((700, 260), (900, 128), (2048, 600)):
            runner.cpu_room.cache_clear()
            monkeypatch.setattr(
                runner, "_status_bytes", lambda field, held=held: held << 20 if field == "VmRSS" else real(field)
            )
            assert runner.cpu_room() == more << 20
            monkeypatch.setattr(runner, "_status_bytes", lambda field: 4000 << 20 if field == "VmRSS" else real(field))
            assert runner.cpu_room() == more << 20  # measured once: what the process holds later changes nothing
            with runner._bounded_memory("cpu"):
                soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
                used = runner._data_bytes()
            assert used is not None and soft <= used + (more << 20)
    finally:
        runner.cpu_room.cache_clear()
    assert started == [True, True, True]


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


# Shapes with tail blocks: no dimension is a multiple of the interpreter's tile sizes, so a
# dropped mask reads or writes out of bounds and the check (values, guard regions) sees it.
MOE = [[24, 72], [4, 96, 72], [4, 72, 48], [24, 2], [24, 2]]


@pytest.mark.parametrize(
    ("kernel", "dims", "timed", "expected"),
    [
        ("fused_moe_kernel", MOE, "kernel", "Triton fused_moe_kernel (gate/up projection launch, 4 experts, top-2)"),
        ("_moe_sum_reduce_kernel", MOE, "kernel", "Triton moe_sum_reduce_kernel"),
        ("void moe_align_block_size_kernel<long>(long const*)", [[40, 3]], "stand-in", "stand-in: Triton moe_align"),
        ("count_and_sort_expert_tokens_kernel", [[40, 3]], "stand-in", "stand-in: Triton moe_align"),
        (
            "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)",
            [[9, 100], [9, 100], [100]],
            "stand-in",
            "Triton rmsnorm_kernel",
        ),
        ("fused_rmsnorm_kernel", [[9, 100], [9, 100], [100]], "kernel", "Triton rmsnorm_kernel"),
        (
            "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)",
            [[9, 100], [9, 100], [100]],
            "stand-in",
            "Triton fused_add_rmsnorm_kernel",
        ),
        (
            "fused_dual_residual_rmsnorm_kernel",
            [[9, 100], [9, 100], [9, 100], [9, 100], [1, 100], [2, 100]],
            "kernel",
            "Triton fused_dual_residual_rmsnorm_kernel",
        ),
        (
            "write_req_to_token_pool_triton",
            [[8, 700], [3], [3], [3], [3], [600]],
            "kernel",
            "Triton write_req_to_token_pool",
        ),
        (
            "create_flashinfer_kv_indices_triton",
            [[8, 1300], [3], [3], [4], [0]],
            "kernel",
            "Triton create_flashinfer_kv",
        ),
        ("compute_position_kernel", [[5], [5]], "kernel", "Triton compute_position (5 programs)"),
        ("_per_token_group_quant_fp8", [[3, 5, 256]], "pipeline", "Triton per_token_group_quant_fp8 (30 programs"),
        ("_fwd_kernel_ep_scatter_1", [[24, 256], [64, 256], [64, 2]], "kernel", "Triton _fwd_kernel_ep_scatter_1"),
        ("_fwd_kernel_ep_scatter_2", [[24, 256], [64, 256], [64, 2]], "kernel", "Triton _fwd_kernel_ep_scatter_2"),
        ("_fwd_kernel_ep_gather", [[24, 200]], "kernel", "Triton _fwd_kernel_ep_gather"),
        ("_w8a8_block_fp8_matmul", [[24, 256], [200, 256]], "kernel", "Triton w8a8 block-fp8 matmul"),
        (
            "void deep_gemm::fp8_gemm_kernel<256u, 256u, 64u, (deep_gemm::GemmType)0>(__nv_bfloat16*)",
            [[24, 256], [24, 2], [200, 256], [2, 2], [24, 200]],
            "stand-in",
            "stand-in for DeepGEMM",
        ),
    ],
)
def test_triton_kernels_match_their_torch_references(kernel: str, dims: list, timed: str, expected: str) -> None:
    result = replay_one(_catalog_target(kernel, dims, ["c10::BFloat16"] * len(dims)), "cpu")
    assert result.check == "pass", (result.implementation, result.reason)
    assert result.median_us > 0 and result.scale == 1.0
    assert result.timed == timed and result.implementation.startswith(expected), result.implementation
    assert result.ratio is None


def test_per_token_group_quant_keeps_leading_dims() -> None:
    from kernel_atlas.replay.kernels import find_implementation

    target = _catalog_target("_per_token_group_quant_fp8", [[2, 7, 384]], ["c10::BFloat16"])
    case = find_implementation(target, "cpu", 1.0)
    q = case.run()
    assert tuple(q.shape) == (2, 7, 384)  # not flattened to [14, 384]
    assert "42 programs, group 128" in case.implementation  # 2·7 rows × 3 groups of 128


def test_fused_moe_replays_the_traced_launch_and_tiling() -> None:
    down = replay_one(replace(_catalog_target("fused_moe_kernel", MOE, ["c10::BFloat16"] * 5), launch_index=1), "cpu")
    assert down.check == "pass" and "down projection launch" in down.implementation
    # The traced launch had 21 programs of 256 threads. SGLang sizes the sorted-token buffer
    # 24·2 slots + 4 experts·(BLOCK_SIZE_M − 1): BLOCK_SIZE_M 16 → 108 slots = 7 row blocks, and
    # N = 96 in BLOCK_SIZE_N 32 → 3 column blocks: 21. No other tiling of the usual values gives 21
    # (BLOCK_SIZE_M 32 → 172 slots = 6 blocks: 36, 18, 12, 6; 64 and up → 5 blocks: 30, 15, 10, 5).
    traced = replace(
        _catalog_target("fused_moe_kernel", MOE, ["c10::BFloat16"] * 5), grid="[21, 1, 1]", block="[256, 1, 1]"
    )
    result = replay_one(traced, "cpu")
    assert result.check == "pass", result.reason
    assert "BLOCK_SIZE_M=16 BLOCK_SIZE_N=32" in result.config and "num_warps=8" in result.config
    assert "from the traced grid (21 programs)" in result.config


def test_fused_moe_pieces_against_a_loop_reference() -> None:
    from kernel_atlas.replay.kernels.fused_moe import (
        check_alignment,
        expert_gemm_reference,
        max_padded,
        moe_align_block_size,
        route,
    )

    generator = torch.Generator().manual_seed(1)
    weights, ids = route(torch.randn(10, 3, generator=generator), 2)
    assert torch.allclose(weights.sum(-1), torch.ones(10))
    sorted_ids, expert_ids, total = moe_align_block_size(ids, 16, 3)
    # SGLang's buffer sizes: 20 slots + 3 experts · 15 padding slots; one expert per 16-slot block
    assert len(sorted_ids) == max_padded(20, 3, 16) == 65 and len(expert_ids) == 5
    counts = torch.bincount(ids.flatten().long(), minlength=3)
    assert int(total) == int(((counts + 15) // 16 * 16).sum())
    assert check_alignment(ids, sorted_ids, expert_ids, total, 16)[0] == "pass"
    broken = sorted_ids.clone()
    broken[0], broken[int(total) - 1] = broken[int(total) - 1], broken[0]  # a slot into another expert's block
    assert check_alignment(ids, broken, expert_ids, total, 16)[0] == "fail"
    a = torch.randn(4, 8, generator=generator)
    w = torch.randn(3, 5, 8, generator=generator)
    slot_ids = torch.tensor([[0, 2], [1, 0], [2, 2], [0, 1]])
    out = expert_gemm_reference(a, w, slot_ids, rows_per_token=2)
    assert torch.allclose(out[5], a[2].double() @ w[2].double().T)  # slot 5 = token 2, its second expert


def test_cpu_timing_is_wall_clock_with_quantiles() -> None:
    calls: list[str] = []
    timing = measure(lambda: calls.append("run"), "cpu", min_reps=20, reset=lambda: calls.append("reset"))
    assert timing.method == "cpu-wall-clock" and timing.reps >= 20
    assert 0 < timing.p10_us <= timing.median_us <= timing.p90_us
    # the reset runs before every call (warm-up and repetitions), never inside a timed call
    assert calls[0::2] == ["reset"] * (len(calls) // 2) and calls[1::2] == ["run"] * (len(calls) // 2)
    assert len(calls) // 2 > timing.reps  # warm-up by time ran at least once


def test_replay_command_as_typed_on_a_cpu() -> None:
    """`atlas replay --kernel fused_moe_kernel` works without a GPU: the scale is chosen for the CPU
    and said so; an explicit --scale is honoured; --device cuda without CUDA is one line, exit 2."""
    typed = runner.invoke(app, ["replay", "--kernel", "fused_moe_kernel", "--device", "cpu", "--json"])
    assert typed.exit_code == 0, typed.output
    row = json.loads(typed.output[typed.output.index("[") :])[0]
    # catalog entry: 1024 tokens × top-2, D 6144, 2I 8192: 2·2048·8192·6144 = 206 GFLOP; the
    # interpreter takes 6e7 FLOP per launch, so dimensions shrink by the power of two ≤ (6e7/206e9)^(1/3)
    assert row["check"] == "pass" and row["scale"] == 0.0625
    assert "scale chosen automatically for the CPU" in row["implementation"]
    assert row["timed"] == "kernel" and row["ratio"] is None and row["flops"] is None
    for key in ("kernel", "launcher", "input_dims", "input_types", "config", "method", "p10_us", "p90_us", "reason"):
        assert key in row
    table = runner.invoke(app, ["replay", "--kernel", "^_moe_sum_reduce_kernel$", "--device", "cpu"])
    assert table.exit_code == 0 and "chosen automatically" in table.output
    chosen = runner.invoke(
        app, ["replay", "--kernel", "^fused_moe_kernel$", "--device", "cpu", "--scale", "0.03125", "--json"]
    )
    row = json.loads(chosen.output[chosen.output.index("[") :])[0]
    assert row["check"] == "pass" and row["scale"] == 0.03125 and "automatically" not in row["implementation"]
    if not torch.cuda.is_available():
        refused = runner.invoke(app, ["replay", "--kernel", "fused_moe_kernel", "--device", "cuda"])
        assert refused.exit_code == 2 and "no CUDA/HIP GPU" in refused.output
        assert len(refused.output.strip().splitlines()) == 1 and "Traceback" not in refused.output


def test_a_kernel_pattern_that_is_no_regular_expression_is_one_line(h100_outputs) -> None:
    """`atlas replay --from OUT --kernel "("` ended in "internal error" (re.error)."""
    for source in (["--from", str(h100_outputs["h100_bert_small_infer"])], []):
        result = runner.invoke(app, ["replay", *source, "--kernel", "(", "--device", "cpu"])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            "error: --kernel '(': not a regular expression (missing ), unterminated subpattern at position 0)"
        ]


def test_replay_all_writes_parquet_that_the_report_merges(h100_replayed) -> None:
    out = h100_replayed["h100_bert_small_infer"]
    replay = pd.read_parquet(out / "replay.parquet")
    assert len(replay) == len(targets_from_output(out))
    assert {"input_types", "timed", "config", "scale"} <= set(replay.columns)
    report = build_report(out)
    merged = report.analysis.roofline
    assert merged["replay_us"].notna().sum() >= 10
    assert set(merged["replay_timed"].dropna()) <= {"kernel", "stand-in"}
    assert merged["replay_ratio"].isna().all()  # CPU times are no ratio to GPU times
    # nor points under the traced GPU's roofs (campaign AS 6): kept apart, said, not drawn
    replayed = merged[merged["replay_us"].notna()]
    assert not replayed["replay_same_device"].astype(bool).any() and replayed["replay_tflops"].isna().all()
    assert replayed["replay_note"].str.len().gt(0).all()
    assert '"name":"replayed"' not in report.files["html"].read_text()


def test_report_merge_joins_on_dtypes_and_gives_ratios_only_for_the_traced_kernel() -> None:
    from kernel_atlas.report.build import merge_replay

    roofline = pd.DataFrame(
        {
            "name": ["copy_a", "copy_b", "gemm"],
            "launcher": ["aten::copy_", "aten::copy_", "aten::mm"],
            "input_dims": ["[[8,8],[8,8],[]]", "[[8,8],[8,8],[]]", "[[4,4],[4,4]]"],
            "input_types": ['["float","c10::BFloat16",""]', '["c10::BFloat16","float",""]', '["float","float"]'],
            "role": ["main", "main", "main"],
            "flops": [0.0, 0.0, 128.0],
            "bytes": [384.0, 384.0, 192.0],
        }
    )
    replay = pd.DataFrame(
        {
            "launcher": ["aten::copy_", "aten::copy_", "aten::mm"],
            "input_dims": ["[[8,8],[8,8],[]]", "[[8,8],[8,8],[]]", "[[4,4],[4,4]]"],
            "input_types": ['["c10::BFloat16","float",""]', '["float","c10::BFloat16",""]', '["float","float"]'],
            "median_us": [3.0, 5.0, 2.0],
            "device_name": ["H100"] * 3,
            "check": ["pass"] * 3,
            "implementation": ["aten::copy_"] * 2 + ["aten::mm"],
            "timed": ["kernel", "kernel", "stand-in"],
            "ratio": [1.5, 2.5, None],
        }
    )
    merged = merge_replay(roofline, replay).set_index("name")
    assert merged.loc["copy_a", "replay_us"] == 5.0 and merged.loc["copy_b", "replay_us"] == 3.0  # by dtype
    assert merged.loc["copy_a", "replay_ratio"] == 2.5 and merged.loc["copy_b", "replay_ratio"] == 1.5
    assert merged.loc["gemm", "replay_timed"] == "stand-in" and pd.isna(merged.loc["gemm", "replay_ratio"])
    assert merged.loc["gemm", "replay_tflops"] == 128.0 / (2.0 * 1e6)


def test_targets_of_non_aten_launchers_are_per_kernel_launch(tmp_path: Path) -> None:
    """An op that launches fused_moe_kernel twice (gate/up, then down) gives one target per launch,
    each with its own time, grid and block; an ATen op's kernels stay one target timed per call."""
    rows = []
    for call, (up, down, mm1, mm2) in enumerate([(10.0, 4.0, 1.0, 2.0), (12.0, 6.0, 3.0, 4.0)]):
        common = {"trace": "t", "rank": 0, "kind": "kernel", "input_strides": None, "concrete_inputs": None}
        moe = {"cpu_op": "sglang::fused_experts", "op_mapping": "moe", "category": "gemm", "input_dims": "[[4,8]]"}
        mm = {"cpu_op": "aten::mm", "op_mapping": "matmul", "category": "gemm", "input_dims": "[[4,4],[4,4]]"}
        for name, dur, grid in (("fused_moe_kernel", up, "[21, 1, 1]"), ("fused_moe_kernel", down, "[9, 1, 1]")):
            rows.append({**common, **moe, "cpu_op_id": 100 + call, "name": name, "dur_us": dur, "grid": grid,
                         "block": "[128, 1, 1]", "input_types": '["c10::BFloat16"]'})  # fmt: skip
        for name, dur in (("gemm_part", mm1), ("reduce_part", mm2)):
            rows.append({**common, **mm, "cpu_op_id": 200 + call, "name": name, "dur_us": dur, "grid": "[1, 1, 1]",
                         "block": "[32, 1, 1]", "input_types": '["float","float"]'})  # fmt: skip
    out = tmp_path / "run.atlas"
    out.mkdir()
    pd.DataFrame(rows).to_parquet(out / "kernels.parquet")
    targets = {(t.kernel, t.launch_index): t for t in targets_from_output(out)}
    # the ATen call is named by its longest kernel (reduce_part: 2 > 1 and 4 > 3 µs), as the roofline
    # names its main kernel — it had been its first, gemm_part (campaign AS 1)
    assert set(targets) == {("fused_moe_kernel", 0), ("fused_moe_kernel", 1), ("reduce_part", 0)}
    assert targets["fused_moe_kernel", 0].traced_us == 11.0 and targets["fused_moe_kernel", 0].grid == "[21, 1, 1]"
    assert targets["fused_moe_kernel", 1].traced_us == 5.0 and targets["fused_moe_kernel", 1].grid == "[9, 1, 1]"
    assert targets["reduce_part", 0].traced_us == 5.0 and targets["reduce_part", 0].count == 2  # (1+2 + 3+4) / 2 calls


@pytest.mark.parametrize(
    ("kernel", "dims", "expect"),
    [
        (
            "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0>(half*)",
            [[4096], [4096], [10], [2, 8, 64], [999999, 1, 2, 64], [999999, 1, 2, 64], [3], [200], [2]],
            "2 request(s), 1 query and 100 KV tokens each (decode",
        ),
        (  # qo_indptr [2], kv_indptr [2], kv_indices [1025], last_page_len [1]: 1 request, 1025 pages of 1
            "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0>>(P)",
            [
                [4096],
                [4096],
                [15],
                [1, 6, 128],
                [9999, 1, 1, 128],
                [9999, 1, 1, 128],
                [2],
                [2],
                [1025],
                [1],
                [1, 6, 128],
            ],
            "1 request(s), 1 query and 1025 KV tokens each (paged prefill, page size 1",
        ),
        (  # page size 4: 3 requests over 30 pages = 40 KV tokens each, 2 queries each (causal mask mode)
            "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1>>(P)",
            [[4096], [4096], [15], [6, 4, 32], [999, 4, 2, 32], [999, 4, 2, 32], [4], [4], [30], [3], [6, 4, 32]],
            "3 request(s), 2 query and 40 KV tokens each (paged prefill, causal, page size 4",
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
        (  # flashinfer's first template argument is `interleave`
            "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<true, 64u>(half*)",
            [[16, 4, 64], [16, 2, 64], [16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "interleaved pairs: rule rope-interleaved",
        ),
        (
            "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<(bool)0, 64u>(half*)",
            [[16, 4, 64], [16, 2, 64], [16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "NeoX halves: rule rope-neox",
        ),
        (  # vLLM / sgl-kernel: rotary_embedding_kernel<scalar_t, IS_NEOX>
            "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*)",
            [[16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "NeoX halves: rule rope-neox",
        ),
        (
            "void vllm::rotary_embedding_kernel<c10::BFloat16, false>(long const*)",
            [[16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "interleaved pairs: rule rope-interleaved",
        ),
        (  # a rotary kernel whose name does not state the layout
            "rotary_embedding_kernel",
            [[16, 4, 64], [16, 2, 64], [8192, 64], [16]],
            "NeoX halves: NeoX assumed",
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
    assert result.timed == "stand-in" and result.ratio is None  # no flashinfer on the CPU


def test_sequence_length_and_batch_are_arguments() -> None:
    target = _catalog_target(
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<0>(half*)",
        [[4096], [4096], [10], [1, 8, 64], [999999, 1, 8, 64], [999999, 1, 8, 64], [2], [9]],
        ["c10::BFloat16"] * 8,
    )
    results = replay_all([target], "cpu", seq_len=37, batch=3)
    assert results["check"].iloc[0] == "pass"
    assert "3 request(s), 1 query and 37 KV tokens each" in results["implementation"].iloc[0]
    assert "ATLAS_REPLAY_SEQ_LEN" not in os.environ


def test_rope_reference_rotates_by_position() -> None:
    from kernel_atlas.replay.kernels.attention import rope_reference

    cache = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])  # position 1: a 90° turn
    q = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    neox, _ = rope_reference(torch.tensor([1]), q, q, cache, True)
    assert torch.allclose(neox, torch.tensor([[[-3.0, -4.0, 1.0, 2.0]]]))
    same, _ = rope_reference(torch.tensor([0]), q, q, cache, False)
    assert torch.allclose(same, q)


def test_a_cpu_replay_past_its_memory_is_skipped_not_allocated() -> None:
    """`aten::zeros` of 1 GiB from its Concrete Inputs (268,435,456 float32 values, no input
    tensor: --max-gib saw 0 bytes) took 11.6 GB of RSS on the CPU. The replay may grow the
    process's data by CPU_REPLAY_BYTES (600 MiB); past it the allocation fails, the replay is
    skipped saying why, and the limit is as it was after."""
    import resource

    from kernel_atlas.replay.runner import CPU_REPLAY_BYTES, cpu_room

    before = resource.getrlimit(resource.RLIMIT_DATA)
    target = Target(
        "k", "aten::zeros", "fill", "memory", "[[],[],[],[],[]]", '["GenericList","Scalar","","",""]',
        None, '["[268435456]","6","","",""]', None, 1, "trace",
    )  # fmt: skip
    result = replay_one(target, "cpu")
    assert result.check == "skipped", result.reason
    assert result.reason == (
        f"needs more memory than a CPU replay may take ({cpu_room() >> 20} MiB more than the process holds): "
        "replay it on a GPU"
    )
    assert CPU_REPLAY_BYTES == 600 << 20
    assert resource.getrlimit(resource.RLIMIT_DATA) == before
    # a replay within it still runs
    small = Target(
        "k", "aten::zeros", "fill", "memory", "[[],[],[],[],[]]", '["GenericList","Scalar","","",""]',
        None, '["[1024]","6","","",""]', None, 1, "trace",
    )  # fmt: skip
    assert replay_one(small, "cpu").check != "skipped"


def test_scale_says_which_replays_it_left_at_their_recorded_shapes(h100_outputs) -> None:
    """`--scale` shrinks library and Triton kernel replays; ATen ops always run the recorded shapes.
    `--scale 0.5` on BERT's add ([1, 141, 512] + [1, 141, 512]) had said nothing of it (campaign AP 5)."""
    out = str(h100_outputs["h100_bert_small_infer"])
    result = runner.invoke(
        app, ["replay", "--from", out, "--kernel", "CUDAFunctor_add", "--device", "cpu", "--scale", "0.5"]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "--scale 0.5 left 1 of 1 replays at their recorded shapes: ATen ops replay through their schema" in said
    typed = runner.invoke(
        app, ["replay", "--from", out, "--kernel", "CUDAFunctor_add", "--device", "cpu", "--scale", "0.5", "--json"]
    )
    row = json.loads(typed.output[typed.output.index("[") :])[0]
    assert row["scale"] == 1 and row["input_dims"] == "[[1,141,512],[1,141,512],[]]"
