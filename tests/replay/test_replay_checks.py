"""The pieces replay's verdicts and launches rest on, by hand: comparison by output dtype,
guard regions, value domains, launch configurations from a traced grid and block."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from kernel_atlas.classify.classifier import default_classifier, rule_precision  # noqa: E402
from kernel_atlas.ingest.recorded import parse_call  # noqa: E402
from kernel_atlas.replay.aten import _tf32, build_case  # noqa: E402
from kernel_atlas.replay.checks import compare, guarded, inside_guard  # noqa: E402
from kernel_atlas.replay.configs import Config, candidates, traced_programs, traced_warps  # noqa: E402
from kernel_atlas.replay.runner import Target  # noqa: E402
from kernel_atlas.replay.values import comparable, domain_of, generator, make_tensor  # noqa: E402


def test_tolerance_follows_the_output_dtype() -> None:
    ref = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    off = ref * (1 + 1e-2)  # 1 % of the largest value: 0.04
    assert compare(off.to(torch.bfloat16), ref)[0] == "pass"  # bf16: 3e-2 · 4 = 0.12
    assert compare(off.to(torch.float32), ref)[0] == "fail"  # fp32: 2e-3 · 4 = 0.008
    assert compare(off.to(torch.float32), ref, precision="tf32")[0] == "pass"  # tf32: 1e-2 · 4 = 0.04
    # a float32 output of a float64 scalar and a float32 tensor is held to float32, not float64
    sub = parse_call("[[],[64],[]]", '["double","float","Scalar"]', None, '["","","1"]')
    assert build_case("aten::sub", sub, "cpu").check()[0] == "pass"


def test_integers_exactly_and_nan_never_passes() -> None:
    assert compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))[0] == "pass"
    verdict = compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))
    assert verdict == ("fail", "1 of 3 integer values differ from the plain-torch reference")
    nan = torch.tensor([1.0, float("nan")])
    assert compare(nan, nan.double())[0] == "fail"  # NaN == NaN proves nothing
    assert compare(nan, torch.tensor([1.0, 2.0], dtype=torch.float64))[0] == "fail"
    inf = torch.tensor([1.0, float("-inf")])
    assert compare(inf, inf.double())[0] == "pass"
    assert compare(inf, torch.tensor([1.0, float("inf")], dtype=torch.float64))[0] == "fail"
    assert compare(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))[0] == "fail"


def test_guard_regions_see_writes_outside_the_output() -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int32, torch.int64, torch.bool):
        out = guarded((3, 5), dtype, "cpu", margin=16)
        assert out.breached() is None and out.written() == 0
        out.tensor.view(torch.uint8).fill_(0)  # every output element changed, nothing else
        assert out.breached() is None and out.written() == 15
        out.buffer[16 + 15 : 16 + 17].view(torch.uint8).fill_(7)  # two elements past the end
        assert out.breached() == "2 values written after the output"
        assert out.check(("pass", "values right"))[0] == "fail"
    values = torch.arange(6.0).view(2, 3)
    copy = inside_guard(values)
    assert torch.equal(copy, values) and copy.untyped_storage().nbytes() > values.untyped_storage().nbytes()


def test_inputs_come_from_each_ops_domain_on_the_device() -> None:
    assert domain_of("aten::rsqrt", "self") == domain_of("aten::rsqrt_", "self") == "positive"
    assert domain_of("aten::div", "other") == "nonzero" and domain_of("aten::div", "self") == "any"
    assert domain_of("aten::native_batch_norm", "running_var") == "positive"
    gen = generator("cpu", 3)
    positive = make_tensor((1000,), "float", "cpu", generator=gen, domain="positive")
    assert positive.min() >= 0.25 and positive.max() <= 2.0
    nonzero = make_tensor((1000,), "c10::BFloat16", "cpu", generator=gen, domain="nonzero")
    assert nonzero.dtype == torch.bfloat16 and nonzero.abs().min() >= 0.5
    unit = make_tensor((1000,), "float", "cpu", generator=gen, domain="open_unit")
    assert unit.abs().max() <= 0.9
    strided = make_tensor((4, 6), "float", "cpu", (1, 4), generator=gen)
    assert strided.stride() == (1, 4) and torch.isfinite(strided).all()
    fp8 = make_tensor((64,), "c10::Float8_e4m3fn", "cpu", generator=gen)
    assert fp8.dtype == torch.float8_e4m3fn and fp8.float().abs().max() <= 4
    index = make_tensor((100,), "long int", "cpu", high=7, generator=gen)
    assert index.min() >= 0 and index.max() < 7
    # rsqrt replays on valid inputs, and random ops say their values cannot be compared
    assert build_case("aten::rsqrt", parse_call("[[64]]", '["float"]'), "cpu").check()[0] == "pass"
    assert not comparable("aten::normal_") and comparable("aten::add")
    verdict = build_case("aten::normal_", parse_call("[[8,8],[],[],[]]", '["float","Scalar","Scalar",""]'), "cpu")
    assert verdict.check() == ("skipped", "random or uninitialised output: shapes match, values cannot be compared")


def test_tf32_is_allowed_only_while_a_tf32_kernel_runs() -> None:
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with _tf32(True):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    with _tf32(False):
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    # which kernels are TF32 kernels is the label's business: the rule's `precision` in rules.toml
    classify = default_classifier().classify
    tf32 = classify("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_kernel", "aten::mm")
    fp32 = classify("ampere_sgemm_128x64_nn", "aten::mm")
    assert rule_precision(tf32.rule) == "tf32" and rule_precision(fp32.rule) is None


def _target(grid: str | None, block: str | None) -> Target:
    return Target("k", "l", "", "", None, None, None, None, None, 1, "trace", grid=grid, block=block)


def test_launch_config_from_the_traced_grid_and_block() -> None:
    assert traced_programs(_target("[6, 4, 2]", None)) == 48
    assert traced_warps(_target(None, "[256, 1, 1]"), "cpu") == 8
    assert traced_warps(_target(None, "[32, 4, 1]"), "cpu") == 4
    assert traced_warps(_target(None, "[16, 1, 1]"), "cpu") is None  # not a Triton block
    assert traced_programs(_target("garbage", None)) is None

    # w8a8 block-fp8 GEMM, M 1024, N 2112, traced with 528 programs of 128 threads. Tiles over the
    # usual values: BLOCK_SIZE_M 64 → 16 row tiles × cdiv(2112, 64) = 33 = 528, and BLOCK_SIZE_M 128
    # → 8 × cdiv(2112, 32) = 66 = 528; BLOCK_SIZE_M 16 or 32 give 64 or 32 row tiles, of which 528 is no multiple
    def programs(c: Config) -> int:
        return -(-1024 // c["BLOCK_SIZE_M"]) * -(-2112 // c["BLOCK_SIZE_N"])

    traced = _target("[528, 1, 1]", "[128, 1, 1]")
    gpu = candidates("w8a8_block_fp8_matmul", traced, "cuda", programs)
    tilings = {(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c.num_warps) for c in gpu.candidates}
    assert tilings == {(64, 64, 4), (128, 32, 4)}
    assert "BLOCK_SIZE_M=64 BLOCK_SIZE_N=64, BLOCK_SIZE_M=128 BLOCK_SIZE_N=32 from the traced grid" in gpu.source
    assert "autotuned over" in gpu.source  # group size, stages and the two tilings: autotuned
    assert len({(c["GROUP_SIZE_M"], c.num_stages) for c in gpu.candidates}) > 1
    cpu = candidates("w8a8_block_fp8_matmul", traced, "cpu", programs)
    assert len(cpu.candidates) == 1 and cpu.candidates[0]["BLOCK_SIZE_M"] == 64
    untraced = candidates("w8a8_block_fp8_matmul", _target(None, None), "cuda", programs)
    assert len(untraced.candidates) == 6 and untraced.source == "autotuned over 6 configs"
    interpreter = candidates("w8a8_block_fp8_matmul", _target(None, None), "cpu", programs)
    assert interpreter.source.startswith("interpreter config")
