"""The MoE forward of vLLM (`vllm::moe_forward`): k and the experts' weights from the ops it
encloses, the cost shared by its kernels. Numbers derived by hand from the recorded shapes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.analysis import analyse
from kernel_atlas.roofline.costs import Call, NoCost, cost_of, expected_experts
from tests.support.hand_built import launch_and_kernel

BF16 = '"c10::BFloat16"'
# TraceLens's vllm_decode_full capture (gpt-oss, mxfp4 weights): moe_forward(hidden [32,3072], router
# logits [32,32]) enclosing TopK(k=4) and views of w1 [32,1536,5888] and w2 [32,1472,3072] as uint8
ENCLOSED = json.dumps(
    {
        "topk": 4,
        "tensors": [
            [[1, 128, 2944], "c10::BFloat16"],
            [[32, 1536, 5888], "unsigned char"],
            [[1, 32, 3072], "c10::BFloat16"],
            [[32, 1472, 3072], "unsigned char"],
        ],
    }
)


def _moe_call(enclosed: str) -> Call:
    args = parse_call("[[32,3072],[32,32],[],[]]", f'[{BF16},{BF16},"",""]')
    return Call("vllm::moe_forward", "fused_moe", args, "rule:moe-gemm", None, "", enclosed)


def test_gated_mxfp4_experts_from_the_enclosed_weights() -> None:
    cost = cost_of(_moe_call(ENCLOSED))
    # w1 [E, H/2 packed, 2·I]: H = 3072 packs two fp4 per byte (1536), 2·I = 5888; w2 [E, I/2, H]: I = 2·1472 = 2944
    # up 2·T·k·H·I·2 + down 2·T·k·I·H with T=32, k=4
    assert cost.flops == 2 * 32 * 4 * 3072 * 2944 * 2 + 2 * 32 * 4 * 2944 * 3072 == 6_945_767_424
    # weights: expected distinct experts 32·(1 − (1 − 4/32)^32) of the 32 experts' stored bytes
    touched = 32 * (1 - (1 - 4 / 32) ** 32)
    weights = 32 * 1536 * 5888 + 32 * 1472 * 3072  # one byte per packed pair
    activations = 2 * 32 * 3072 * 2 + 32 * 32 * 2  # x read, out written, router logits read
    assert cost.bytes == pytest.approx(touched / 32 * weights + activations, rel=1e-12)
    assert expected_experts(32, 4, 32) == pytest.approx(31.553, abs=1e-3)
    assert expected_experts(8, 2, 1) == 2.0  # one token touches exactly k experts


def test_moe_without_enclosed_weights_or_topk_says_so() -> None:
    with pytest.raises(NoCost, match="top-k not recorded"):
        cost_of(_moe_call(json.dumps({"topk": None, "tensors": []})))
    with pytest.raises(NoCost, match="weights"):
        cost_of(_moe_call(json.dumps({"topk": 2, "tensors": []})))


def _op(name: str, ts: float, dur: float, ext: int, dims: list, types: list, concrete: list | None = None) -> dict:
    args = {"External id": ext, "Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(ts: float, corr: int, ext: int, kernel: str, kts: float, kdur: float) -> list[dict]:
    return launch_and_kernel(ts, corr, ext, kernel, kts, kdur, geometry={"grid": [1, 1, 1], "block": [128, 1, 1]})


def test_ingest_gives_the_call_its_enclosed_weights_and_its_kernels_share_the_cost(tmp_path: Path) -> None:
    # moe_forward(x [8,64] bf16, logits [8,4]) encloses TopK(k=2) and views of bf16 w1 [4,256,64] and
    # w2 [4,64,128]: H = 64, I = 128, gated (w1's 256 = 2·128); its two expert GEMMs launch inside it
    events = [
        _op("vllm::moe_forward", 100, 100, 1, [[8, 64], [8, 4], [], []], ["c10::BFloat16"] * 2 + ["", ""]),
        _op("TopK", 110, 5, 2, [[8, 4], [], []], ["c10::BFloat16", "Scalar", "Scalar"], ["", "2", "True"]),
        _op("aten::view", 120, 1, 3, [[4, 256, 64], []], ["c10::BFloat16", "ScalarList"], ["", "[4, 256, 64]"]),
        _op("aten::view", 122, 1, 4, [[4, 64, 128], []], ["c10::BFloat16", "ScalarList"], ["", "[4, 64, 128]"]),
        *_launch(130, 11, 1, "fused_moe_up_kernel", 1000, 30.0),
        *_launch(150, 12, 1, "fused_moe_down_kernel", 1040, 10.0),
    ]
    path = tmp_path / "moe.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    frame = ingest_trace(path).frame
    inside = frame[frame["cpu_op"] == "vllm::moe_forward"]
    assert len(inside) == 2 and inside["enclosed_shapes"].nunique() == 1
    kernels = analyse(frame, None).kernels
    main = kernels[kernels["role"] == "main"]
    assert len(main) == 1 and main["name"].iloc[0] == "fused_moe_up_kernel"  # the longer kernel carries it
    # 2·8·2·64·128·2 + 2·8·2·128·64
    assert main["flops"].iloc[0] == 2 * 8 * 2 * 64 * 128 * 2 + 2 * 8 * 2 * 128 * 64 == 786_432
    assert main["op_time_us"].iloc[0] == 40.0  # both kernels' time
    assert (kernels.loc[kernels["name"] == "fused_moe_down_kernel", "role"] == "helper").all()


def test_fused_experts_reads_the_expected_distinct_experts() -> None:
    # sglang::inplace_fused_experts(hidden [4,64], w1 [8,256,64], w2 [8,64,128], topk_weights [4,2]) in bf16
    args = parse_call("[[4,64],[8,256,64],[8,64,128],[4,2]]", f"[{BF16},{BF16},{BF16},{BF16}]")
    cost = cost_of(Call("sglang::inplace_fused_experts", "fused_moe", args))
    assert cost.flops == 2 * 4 * 2 * 256 * 64 + 2 * 4 * 2 * 64 * 128 == 393_216
    # 8·(1 − (3/4)^4) = 5.46875 of 8 experts: 0.68359375 of w1 (262,144 B) + w2 (131,072 B); x and out 512 B each;
    # the intermediates: up-projection out [8, 256], down-projection in [8, 128] and out [8, 64], read back
    # by the sum [8, 64]: 8·(256 + 128 + 64 + 64)·2 B = 8,192 B
    assert cost.bytes == 512 + 512 + 0.68359375 * (262_144 + 131_072) + 8_192 == 278_016


# TraceLens's B200 vLLM eager trace (FlashInfer/TRT-LLM fp4 MoE): moe_forward(hidden [888, 3072],
# router logits [888, 128]) records no weights and no TopK; inside it, aten::empty Concrete Inputs
# ['[888, 4]', '3', ...] (int32 top-k ids), ['[888, 4]', '15', ...] (bf16 top-k weights),
# ['[5472, 512]', '0', ...] (uint8 intermediate), ['[88064]', '0', ...] (its block scales),
# ['[85248]', '0', ...] (the hidden states' scales), ['[5472, 3072]', '15', ...] (down-projection
# rows); its kernels `bmm_MxE4m3_MxE2m1MxE4m3_..._swiGlu_...` and `bmm_Bfloat16_MxE2m1MxE4m3_...`
B200 = {
    "topk": None,
    "tensors": [],
    "allocated": [
        [[888, 3072], 24],
        [[85248], 0],
        [[888, 4], 3],
        [[888, 4], 15],
        [[888, 3072], 15],
        [[3552], 3],
        [[5472], 3],
        [[5472, 512], 0],
        [[88064], 0],
        [[5472, 3072], 15],
    ],
    "gated_kernel": True,
    "weight_bits": 4.25,
}


def _b200_call(enclosed: dict) -> Call:
    args = parse_call("[[888,3072],[888,128],[]]", f'[{BF16},{BF16},""]')
    return Call("vllm::moe_forward", "fused_moe", args, "", None, "", json.dumps(enclosed))


def test_fused_fp4_moe_from_the_buffers_it_allocates() -> None:
    cost = cost_of(_b200_call(B200))
    # k = 4 ([888, 4] int32 ids and bf16 weights); rows P = 5472 ≥ T·k = 3552; I: [5472, 512] bytes,
    # scales 88064 = 5504 rows × 512 / 32 (5472 ≤ 5504 < 5600): one fp8 value per byte, I = 512
    # (two per byte: 88064·32/1024 = 2752 rows < 5472, no fit). Gated (swiGlu in the first GEMM).
    assert cost.flops == 2 * 888 * 4 * 3072 * 512 * 2 + 2 * 888 * 4 * 512 * 3072 == 33_520_877_568
    # all 128 experts touched (128·(1 − (124/128)^888) = 128.00), 3·512·3072 weights each at 4.25 bits
    weights = 128 * (1 - (1 - 4 / 128) ** 888) * 3 * 512 * 3072 * 4.25 / 8
    assert weights == pytest.approx(320_864_256, rel=1e-9)
    assert cost.bytes == pytest.approx(weights + 2 * 888 * 3072 * 2 + 888 * 128 * 2, rel=1e-12)
    assert "TraceLens takes I = H" in cost.formula and "estimate" in cost.formula


def test_fused_moe_buffers_that_do_not_say_enough_are_not_costed() -> None:
    no_gate = {**B200, "gated_kernel": False}
    with pytest.raises(NoCost, match="gated"):
        cost_of(_b200_call(no_gate))
    with pytest.raises(NoCost, match="format not recorded"):
        cost_of(_b200_call({**B200, "weight_bits": None}))
    # without its block scales the uint8 intermediate could hold one fp8 or two fp4 values per byte
    no_scales = {**B200, "allocated": [a for a in B200["allocated"] if a[0] != [88064]]}
    with pytest.raises(NoCost, match="format is not recorded"):
        cost_of(_b200_call(no_scales))
    # only ids [888, 4], no float weights beside them: k is not taken
    no_weights = {**B200, "allocated": [a for a in B200["allocated"] if a != [[888, 4], 15]]}
    with pytest.raises(NoCost, match="top-k"):
        cost_of(_b200_call(no_weights))
    # an unfused up-projection [P, 2I] beside the activation [P, I] says gated without a kernel name
    unfused = {**B200, "gated_kernel": False, "allocated": [[[8, 2], 4], [[8, 2], 6], [[16, 64], 15], [[16, 32], 15]]}
    args = parse_call("[[8,48],[8,4],[]]", f'[{BF16},{BF16},""]')
    cost = cost_of(Call("vllm::moe_forward", "fused_moe", args, "", None, "", json.dumps(unfused)))
    assert cost.flops == 2 * 8 * 2 * 48 * 32 * 2 + 2 * 8 * 2 * 32 * 48 == 147_456


def test_ingest_records_the_allocations_and_what_the_kernels_name(tmp_path: Path) -> None:
    # moe_forward(x [8, 64] bf16, logits [8, 4]) allocating ids/weights [8, 2] and a bf16 intermediate
    # [16, 32]; its GEMM kernels name a fused SwiGLU and MxE2m1 (fp4) weights
    empty = ["ScalarList", "Scalar", "", "", "Scalar", ""]
    events = [
        _op("vllm::moe_forward", 100, 100, 1, [[8, 64], [8, 4], []], ["c10::BFloat16"] * 2 + [""]),
        _op("aten::empty", 105, 1, 2, [[]] * 6, empty, ["[8, 2]", "3", "", "", "False", ""]),
        _op("aten::empty", 107, 1, 3, [[]] * 6, empty, ["[8, 2]", "15", "", "", "False", ""]),
        _op("aten::empty", 109, 1, 4, [[]] * 6, empty, ["[16, 32]", "15", "", "", "False", ""]),
        *_launch(130, 11, 1, "bmm_Bfloat16_MxE2m1Bfloat16_swiGlu_sm100f", 1000, 30.0),
        *_launch(150, 12, 1, "bmm_Bfloat16_MxE2m1Bfloat16_sm100f", 1040, 10.0),
    ]
    path = tmp_path / "moe.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    frame = ingest_trace(path).frame
    enclosed = json.loads(frame["enclosed_shapes"].iloc[0])
    assert enclosed["allocated"] == [[[8, 2], 3], [[8, 2], 15], [[16, 32], 15]]
    assert enclosed["gated_kernel"] is True and enclosed["weight_bits"] == 4.25
    main = analyse(frame, None).kernels.query("role == 'main'")
    # T=8, k=2, H=64, I=32 gated: 2·8·2·64·32·2 + 2·8·2·32·64
    assert main["flops"].iloc[0] == 2 * 8 * 2 * 64 * 32 * 2 + 2 * 8 * 2 * 32 * 64 == 196_608
    # 4·(1 − (1/2)^8) = 3.984375 experts × 3·32·64 weights × 4.25/8 bytes + x, out 1024 B each + logits 64 B
    assert main["bytes"].iloc[0] == pytest.approx(3.984375 * 6144 * 0.53125 + 2048 + 64, rel=1e-12)


FP8, F32 = '"c10::Float8_e4m3fn"', '"float"'


def test_grouped_deepgemm_contiguous_is_an_upper_bound_from_the_layout() -> None:
    """The seed catalog's DeepEP expert GEMM (`m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`): lhs
    [1024, 7168] fp8 with its scales [1024, 56] fp32, rhs [16, 4096, 7168] fp8 with [16, 32, 56]."""
    args = parse_call("[[1024,7168],[1024,56],[16,4096,7168],[16,32,56]]", f"[{FP8},{F32},{FP8},{F32}]")
    cost = cost_of(Call("cuLaunchKernelEx", "fused_moe", args, "rule:deepgemm-grouped"))
    assert cost.flops == 2 * 1024 * 4096 * 7168 == 60_129_542_144  # padding rows included
    assert cost.precision == "fp8"
    # 1024 rows in segments of ≥ 128 rows hold at most 8 of the 16 experts
    lhs, lhs_scale = 1024 * 7168, 1024 * 56 * 4
    weights = 8 * 4096 * 7168 + 8 * 32 * 56 * 4
    out = 1024 * 4096 * 2  # bf16
    assert cost.bytes == lhs + lhs_scale + weights + out == 250_896_384
    assert cost.formula.startswith("an upper bound") and "8 of 16 experts" in cost.formula
    # a recorded bf16 output and m_indices: the output is written, not read; m_indices [M] int32 read
    args = parse_call(
        "[[256,512],[256,4],[4,384,512],[4,3,4],[256,384],[256]]",
        f'[{FP8},{F32},{FP8},{F32},{BF16},"int"]',
    )
    cost = cost_of(Call("cuLaunchKernelEx", "fused_moe", args, "rule:deepgemm-grouped"))
    assert cost.flops == 2 * 256 * 384 * 512
    # 256 rows hold at most 2 of the 4 experts
    assert cost.bytes == 256 * 512 + 256 * 4 * 4 + 256 * 4 + (2 * 384 * 512 + 2 * 3 * 4 * 4) + 256 * 384 * 2


def test_grouped_deepgemm_masked_layout_says_what_it_lacks() -> None:
    args = parse_call("[[4,64,512],[4,64,4],[4,384,512],[4,3,4],[4]]", f'[{FP8},{F32},{FP8},{F32},"int"]')
    with pytest.raises(NoCost, match="masked layout"):
        cost_of(Call("cuLaunchKernelEx", "fused_moe", args, "rule:deepgemm-grouped"))
    # the seed catalog's down projection records lhs as [2048]: M is not recorded
    args = parse_call("[[2048],[8192,16],[16,7168,2048],[16,56,16]]", f"[{FP8},{F32},{FP8},{F32}]")
    with pytest.raises(NoCost, match=r"no lhs \[M, 2048\] recorded"):
        cost_of(Call("cuLaunchKernelEx", "fused_moe", args, "rule:deepgemm-grouped"))
