"""Costs of serving ops from per-step annotations and recorded tensors, derived by hand from the
trace's JSON (the SGLang decode pair of ../shared/traces) or from hand-written calls."""

from __future__ import annotations

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.ingest.steps import parse_step
from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from tests.support.traces import trace_path

BF16 = '"c10::BFloat16"'
# sglang_profiler::attention_paged_attention_ragged_100 in the bs32 capture: out [32,32,128], workspace,
# q [32,32,128], k_cache / v_cache [835874,1,8,128], kv_indptr [33], kv_indices, last_page_lens, ...
PAGED_DIMS = (
    "[[32,32,128],[10905190400],[32,32,128],[835874,1,8,128],[835874,1,8,128],[33],[20971520],[4096],[],[1],[1],[]]"
)
PAGED_TYPES = [BF16, '"unsigned char"', BF16, BF16, BF16, '"int"', '"int"', '"int"', '""', '"float"', '"float"', '""']
DECODE_STEP = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)"


def _call(launcher: str, op: str, dims: str, types: list[str], step: str = "", concrete: str | None = None) -> Call:
    return Call(launcher, op, parse_call(dims, "[" + ",".join(types) + "]", None, concrete), "", None, step)


def test_step_annotations_of_each_engine_format() -> None:
    # vLLM's format (SGLang on ROCm writes it too): context and generation aggregates
    mixed = parse_step(
        "execute_6147_context_2(sq6144sk7144sqsq20971520sqsk23019520)_generation_3(sq3sk6144sqsq3sqsk6144)"
    )
    assert mixed is not None and mixed.engine == "vLLM-format"
    assert (mixed.c_sq, mixed.c_sk, mixed.c_sqsq, mixed.c_sqsk) == (6144, 7144, 20971520, 23019520)
    assert (mixed.g_sq, mixed.g_sk, mixed.g_sqsq, mixed.g_sqsk) == (3, 6144, 3, 6144)
    sglang = parse_step("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]")
    assert sglang is not None and (sglang.c_sqsk, sglang.g_sk, sglang.tokens) == (40, 12, 6)
    atom = parse_step("decode[bs=32 tok=128 d=32 spec=3 sqsq=512 sqsk=262144 sk=65536]")
    assert atom is not None and (atom.g_sq, atom.g_sk, atom.g_sqsq, atom.g_sqsk, atom.c_sq) == (
        128,
        65536,
        512,
        262144,
        0,
    )
    # steps without the aggregates, and other names, are no steps
    for name in ("step[DECODE bs=32]", "execute_context_0(0)_generation_64(64)", "ProfilerStep#3", ""):
        assert parse_step(name) is None


def test_paged_decode_attention_from_the_step_annotation() -> None:
    # generation: Σ sq·sk = 32785, no context part; H_q = 32, d = 128 (q [32,32,128]); H_kv = 8 (cache [.,1,8,128])
    cost = cost_of(
        _call(
            "csrc/cpp_itfs/pa/pa_ragged.py(65): paged_attention_ragged",
            "attention",
            PAGED_DIMS,
            PAGED_TYPES,
            DECODE_STEP,
        )
    )
    assert cost.flops == 4 * 32 * 128 * 32785 == 537_149_440  # TraceLens's InferenceAttention_fwd.csv: 0.53714944 GFLOP
    # Q and O: 2·32·32·128·2 B; K and V read: 2·32785·8·128·2 B → 134,811,648 B = 128.566 MiB (TraceLens: 128.56640625 MB)
    assert cost.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 32785 * 8 * 128 * 2 == 134_811_648
    assert cost.precision == "bf16"


def test_causal_context_part_is_halved_on_its_square() -> None:
    # the mixed step above on q [6147,32,128], key [6147,8,128] (vLLM unified_attention_with_output's layout)
    step = "execute_6147_context_2(sq6144sk7144sqsq20971520sqsk23019520)_generation_3(sq3sk6144sqsq3sqsk6144)"
    dims = "[[6147,32,128],[6147,8,128],[6147,8,128],[6147,32,128],[]]"
    cost = cost_of(_call("vllm::unified_attention_with_output", "attention", dims, [BF16] * 4 + ['"Scalar"'], step))
    # 4·32·128·(6144 + 23019520 − 20971520/2)
    assert cost.flops == 4 * 32 * 128 * (6144 + 23019520 - 10485760) == 205_453_787_136
    # Q+O over 6147 tokens, K+V over 7144 + 6144 keys
    assert cost.bytes == 2 * 6147 * 32 * 128 * 2 + 2 * 13288 * 8 * 128 * 2


def test_attention_without_lengths_says_so() -> None:
    with pytest.raises(NoCost, match="no per-step annotation"):
        cost_of(_call("aiter::paged_attention", "attention", PAGED_DIMS, PAGED_TYPES))


def test_native_step_annotation_is_named_as_lacking_the_sums() -> None:
    # TraceLens's B200 vLLM trace: unified_attention_with_output(q [888,8,64] fp8, k [888,1,64], v, out)
    # under `execute_context_1(888_788544)_generation_0(0)` (888² = 788,544: one context request, but
    # whether the second number is Σsq² or Σsq·sk the name does not say): not costed, and the note says why
    dims = "[[888,8,64],[888,1,64],[888,1,64],[888,8,64],[],[],[]]"
    types = ['"c10::Float8_e4m3fn"', BF16, BF16, BF16, '""', '""', '""']
    step = "execute_context_1(888_788544)_generation_0(0)"
    assert parse_step(step) is None
    with pytest.raises(NoCost, match="counts tokens but gives no"):
        cost_of(_call("vllm::unified_attention_with_output", "attention", dims, types, step))


def test_dense_library_attention_says_what_it_lacks() -> None:
    # xDiT Flux's aiter sage_fwd_1(q [1,24,768,128] int8, k int8, v fp8, ...): dense, but whether 24
    # or 768 is the heads axis, and whether it is causal, the recorded call does not say
    dims = "[[1,24,768,128],[1,24,768,128],[1,24,768,128],[],[1,24,3]]"
    types = ['"signed char"', '"signed char"', '"c10::Float8_e4m3fnuz"', '"Scalar"', '"float"']
    with pytest.raises(NoCost, match="not their layout"):
        cost_of(_call("sage_fwd_1", "attention", dims, types))


def test_rotary_embedding_on_flat_query_and_key() -> None:
    # sgl_kernel::rotary_embedding(positions [32] int64, query [32,4096], key [32,1024], head_size, cache [41216,128], is_neox)
    dims = "[[32],[32,4096],[32,1024],[],[41216,128],[]]"
    types = ['"long int"', BF16, BF16, '"Scalar"', BF16, '"Scalar"']
    cost = cost_of(_call("sgl_kernel::rotary_embedding", "rotary_embedding", dims, types))
    assert cost.flops == 3 * 32 * (4096 + 1024) == 491_520  # TraceLens RoPE_fwd.csv: 0.00049152 GFLOP
    # q and k read and written (TraceLens's 0.625 MB) + one 128·2-byte cache row per token (ours, not TraceLens's)
    assert cost.bytes == 2 * 32 * 5120 * 2 + 32 * 256 == 663_552


def test_rotary_embedding_on_views_of_a_packed_qkv() -> None:
    # TraceLens's B200 vLLM trace: _C::rotary_embedding(positions [888] int64, query [888,512],
    # key [888,64], head_size, cache [131072,64], is_neox), Input Strides [[1],[640,1],[640,1],[],[64,1],[]]:
    # query and key are views of one packed qkv [888, 640] = (8 + 2·1)·64; only q and k are rotated
    dims = "[[888],[888,512],[888,64],[],[131072,64],[]]"
    types = ['"long int"', BF16, BF16, '"Scalar"', BF16, '"Scalar"']
    cost = cost_of(_call("_C::rotary_embedding", "rotary_embedding", dims, types))
    assert cost.flops == 3 * 888 * (512 + 64) == 1_534_464
    # q and k read and written (not the packed v) + one 64·2-byte cache row per token
    assert cost.bytes == 2 * 888 * 576 * 2 + 888 * 128 == 2_159_616


def test_shared_decode_pair_costs_attention_per_step(tmp_path) -> None:
    from kernel_atlas.report.build import build_report

    out = tmp_path / "out"
    replay, capture = (
        trace_path("mi300x_sglang_qwen3_8b_decode_graph"),
        trace_path("mi300x_sglang_qwen3_8b_decode_capture_bs32"),
    )
    write_outputs(ingest_paths([replay], captures=[capture]), out)
    kernels = build_report(out, None, tmp_path / "r.html").analysis.kernels
    assert set(kernels["step_annotation"].dropna().unique()) == {DECODE_STEP}
    attention = kernels[(kernels["category"] == "attention") & (kernels["role"] == "main")]
    assert len(attention) == 36  # 36 layers, each one call: QKV kernel (main) and its reduce kernel (helper)
    assert (attention["flops"] == 537_149_440).all()
