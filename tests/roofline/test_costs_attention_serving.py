"""Serving attention ops whose own arguments say what the generic step formula guessed: vLLM's
paged decode (query second, its own cache layouts), partial-output merges (no attention at all),
a recorded causal flag and sliding window, and FlashInfer's recorded KV layout. Every expected
number is worked out by hand in the comments beside it, from the call written in the test.

The shared decode step: 32 requests × 4096 context (Σsq = 32, Σsq·sk = Σsk = 131,072), H_q = 32,
H_kv = 8, d = 128, bf16: FLOPs 4·32·128·131,072 = 2,147,483,648; Q+O 2·32·32·128·2 = 524,288 B,
K+V 2·131,072·8·128·2 = 536,870,912 B."""

from __future__ import annotations

import json

import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

BF16, FP32, I32, U8 = "c10::BFloat16", "float", "int", "unsigned char"
NONE = ([], "", "")
DECODE = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk131072sqsq32sqsk131072)"
# two context requests of 1024 tokens each: Σsq = Σsk = 2048, Σsq² = Σsq·sk = 2·1024² = 2,097,152
PREFILL = "execute_2_context_2(sq2048sk2048sqsq2097152sqsk2097152)_generation_0(sq0sk0sqsq0sqsk0)"
# one SGLang extend request: 1024 new tokens on a 3072-token prefix: Σsq·sk = 1024·4096 = 4,194,304, Σsq² = 1,048,576
EXTEND = "step[EXTEND bs=1 c=1 g=0 c_sq=1024 c_sk=4096 c_sqsq=1048576 c_sqsk=4194304 g_sq=0 g_sk=0 g_sqsq=0 g_sqsk=0]"
DECODE_FLOPS = 2_147_483_648
DECODE_BYTES = 524_288 + 536_870_912  # = 537,395,200


def _t(dims: list[int], dtype: str = BF16) -> tuple[list[int], str, str]:
    return (dims, dtype, "")


def _s(text: str, dtype: str = "Scalar") -> tuple[list[int], str, str]:
    return ([], dtype, text)


def _call(launcher: str, args: list[tuple[list[int], str, str]], step: str = "", op: str = "attention") -> Call:
    dims, types, concrete = (json.dumps([a[i] for a in args]) for i in range(3))
    return Call(launcher, op, parse_call(dims, types, None, concrete), "", None, step)


# --- 1. vLLM paged_attention_v1/v2 -------------------------------------------------------------


def _v1(key_cache: tuple, value_cache: tuple, kv_dtype: str = "auto", num_kv_heads: str = "8") -> list[tuple]:
    # paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale, block_tables, seq_lens,
    # block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale, v_scale, tp_rank, blocksparse ×4)
    return [
        _t([32, 32, 128]),
        _t([32, 32, 128]),
        key_cache,
        value_cache,
        _s(num_kv_heads),
        _s("0.0883883"),
        _t([32, 256], I32),
        _t([32], I32),
        _s("16"),
        _s("4096"),
        NONE,
        _s(kv_dtype, "str"),
        _t([], FP32),
        _t([], FP32),
        *[_s("0")] * 4,
        _s("64"),
    ]


def test_vllm_paged_attention_v1_reads_the_query_second_and_num_kv_heads() -> None:
    # key_cache [20000, 8, 128/8, 16, 8], value_cache [20000, 8, 128, 16]: neither ends in d; out came first and
    # was taken for the query, the query for an MHA key (H_kv 32: K+V 2·131072·32·128·2, 4× too much)
    bf16 = _v1(_t([20000, 8, 16, 16, 8]), _t([20000, 8, 128, 16]))
    cost = cost_of(_call("_C::paged_attention_v1", bf16, DECODE))
    assert cost.flops == 4 * 32 * 128 * 131_072 == DECODE_FLOPS
    assert cost.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 131_072 * 8 * 128 * 2 == 537_395_200
    assert "num_kv_heads" in cost.formula
    # an fp8 cache (recorded uint8, kv_cache_dtype "fp8"): K and V at 1 byte: 524,288 + 2·131072·8·128·1
    fp8 = _v1(_t([20000, 8, 8, 16, 16], U8), _t([20000, 8, 128, 16], U8), kv_dtype="fp8")
    cost = cost_of(_call("_C::paged_attention_v1", fp8, DECODE))
    assert cost.flops == DECODE_FLOPS
    assert cost.bytes == 524_288 + 268_435_456 == 268_959_744
    # num_kv_heads not recorded: the key cache's axis 1 (vLLM's [blocks, H_kv, d/x, block, x]) gives 8
    blank = _v1(_t([20000, 8, 16, 16, 8]), _t([20000, 8, 128, 16]), num_kv_heads="")
    cost = cost_of(_call("_C::paged_attention_v1", blank, DECODE))
    assert cost.bytes == 537_395_200
    assert "axis 1" in cost.formula


def test_vllm_paged_attention_v2_ignores_its_partition_buffers() -> None:
    # paged_attention_v2(out, exp_sums [32,32,16], max_logits, tmp_out [32,32,16,128], query, key_cache,
    # value_cache, num_kv_heads, …): tmp_out's axis −2 (16 partitions) had been read as H_kv (2× K+V)
    args = [
        _t([32, 32, 128]),
        _t([32, 32, 16], FP32),
        _t([32, 32, 16], FP32),
        _t([32, 32, 16, 128]),
        *_v1(_t([20000, 8, 16, 16, 8]), _t([20000, 8, 128, 16]))[1:],
    ]
    args[12] = _s("8192")  # max_seq_len
    cost = cost_of(_call("_C::paged_attention_v2", args, DECODE))
    assert cost.flops == DECODE_FLOPS
    assert cost.bytes == 524_288 + 2 * 131_072 * 8 * 128 * 2 == 537_395_200


# --- 2. merging partial attention outputs ----------------------------------------------------------


def test_merge_state_is_a_merge_not_an_attention() -> None:
    # merge_state(v_a [32,32,128] bf16, s_a [32,32] fp32, v_b, s_b, v_merged, s_merged): 32·32·128 = 131,072
    # elements per output. Read 2·131072·2 + 2·1024·4 = 532,480; written 131072·2 + 1024·4 = 266,240
    args = [_t([32, 32, 128]), _t([32, 32], FP32)] * 3
    for launcher in ("sgl_kernel::merge_state", "sgl_kernel::merge_state_v2"):
        for step in (DECODE, ""):  # the same under a step (had been a whole decode attention) and outside one
            cost = cost_of(_call(launcher, args, step))
            assert cost.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 32 * 32 * 4 + 32 * 32 * 128 * 2 + 32 * 32 * 4 == 798_720
            assert cost.flops == 3 * 32 * 32 * 128 == 393_216  # v_a·w_a + v_b·w_b: 3 FLOP per merged element
            assert cost.unit == "vector"


def test_vllm_merge_attn_states_writes_first() -> None:
    # merge_attn_states(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse), lse [H, T]
    args = [_t([32, 32, 128]), _t([32, 32], FP32), _t([32, 32, 128]), _t([32, 32], FP32)]
    args += [_t([32, 32, 128]), _t([32, 32], FP32)]
    assert cost_of(_call("_C::merge_attn_states", args, DECODE)).bytes == 798_720
    # without output_lse: 798,720 − 32·32·4 = 794,624
    assert cost_of(_call("_C::merge_attn_states", [args[0], NONE, *args[2:]], DECODE)).bytes == 794_624


# --- 3. a recorded causal flag and sliding window ---------------------------------------------------


def _fa3(is_causal: str, left: str, right: str, q: int = 32, max_q: str = "1", max_k: str = "4096") -> list[tuple]:
    # _vllm_fa3_C::fwd(q, k, v, k_new, v_new, q_v, out, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q,
    # seqused_k, max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx, leftpad_k, rotary_cos, rotary_sin,
    # seqlens_rotary, q_descale, k_descale, v_descale, softmax_scale, is_causal, window_size_left,
    # window_size_right, softcap, is_rotary_interleaved, scheduler_metadata, num_splits, pack_gqa, sm_margin, s_aux)
    cache = _t([1000, 16, 8, 128])  # [pages, page_size, H_kv, d]
    return [
        _t([q, 32, 128]),
        cache,
        cache,
        NONE,
        NONE,
        NONE,
        _t([q, 32, 128]),
        _t([33], I32),
        NONE,
        NONE,
        NONE,
        _t([32], I32),
        _s(max_q),
        _s(max_k),
        _t([32, 256], I32),
        *[NONE] * 8,
        _s("0.0883883"),
        _s(is_causal),
        _s(left),
        _s(right),
        _s("0.0"),
        _s("False"),
        NONE,
        _s("0"),
        NONE,
        _s("0"),
        NONE,
    ]


def test_fa3_decode_counts_only_the_keys_its_window_keeps() -> None:
    # window_size_left 127, causal: each decode token sees 128 keys (every context is 4096 ≥ 128):
    # pairs 32·128 = 4096; FLOPs 4·32·128·4096 = 67,108,864; K+V read 4096 keys: 2·4096·8·128·2 = 16,777,216
    cost = cost_of(_call("_vllm_fa3_C::fwd", _fa3("True", "127", "0"), DECODE))
    assert cost.flops == 4 * 32 * 128 * (32 * 128) == 67_108_864
    assert cost.bytes == 524_288 + 2 * 32 * 128 * 8 * 128 * 2 == 17_301_504
    # no window (-1, -1): every key, as before
    whole = cost_of(_call("_vllm_fa3_C::fwd", _fa3("True", "-1", "-1"), DECODE))
    assert (whole.flops, whole.bytes) == (DECODE_FLOPS, DECODE_BYTES)


def test_sgl_kernel_fa3_reads_its_mask_and_window() -> None:
    # sgl_kernel::fwd has fa3's schema (is_causal 24, window_size_left/right 25/26); read nothing before:
    # a 1024+1024-token prefill not causal counts Σsq·sk = 2,097,152 pairs whole → 4·32·128·2,097,152
    prefill = cost_of(_call("sgl_kernel::fwd", _fa3("False", "-1", "-1", q=2048, max_q="1024", max_k="1024"), PREFILL))
    assert prefill.flops == 4 * 32 * 128 * 2_097_152 == 34_359_738_368
    # the decode with window_size_left 127, as fa3's: 67,108,864 FLOPs, 17,301,504 B
    decode = cost_of(_call("sgl_kernel::fwd", _fa3("True", "127", "0"), DECODE))
    assert (decode.flops, decode.bytes) == (67_108_864, 17_301_504)


def test_fa3_prefill_window_is_bounded_and_said() -> None:
    # two 1024-token prefills, causal, window_size_left 127 (W = 128): at most Σsq·(W − ½) = 2048·127.5 = 261,120
    # pairs (the causal square would be 2,097,152 − 2,097,152/2 = 1,048,576); FLOPs 4·32·128·261,120
    args = _fa3("True", "127", "0", q=2048, max_q="1024", max_k="1024")
    cost = cost_of(_call("_vllm_fa3_C::fwd", args, PREFILL))
    assert cost.flops == 4 * 32 * 128 * 261_120 == 4_278_190_080
    # K and V: min(Σsk 2048, Σsq·W) = 2048 keys; Q+O 2·2048·32·128·2 = 33,554,432, K+V 2·2048·8·128·2 = 8,388,608
    assert cost.bytes == 33_554_432 + 8_388_608
    assert "upper bound" in cost.formula


def _varlen(is_causal: str) -> list[tuple]:
    # varlen_fwd(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, leftpad_k, block_table, alibi_slopes,
    # max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors, is_causal, window_size_left,
    # window_size_right, softcap, return_softmax, gen)
    cache = _t([1000, 16, 8, 128])
    return [
        _t([2048, 32, 128]),
        cache,
        cache,
        _t([2048, 32, 128]),
        _t([3], I32),
        _t([3], I32),
        _t([2], I32),
        NONE,
        _t([2, 64], I32),
        NONE,
        _s("1024"),
        _s("1024"),
        _s("0.0"),
        _s("0.0883883"),
        _s("False"),
        _s(is_causal),
        _s("-1"),
        _s("-1"),
        _s("0.0"),
        _s("False"),
        NONE,
    ]


def test_varlen_fwd_reads_is_causal() -> None:
    # is_causal False: every query sees its request's 1024 keys: Σsq·sk = 2,097,152 pairs, 4·32·128·2,097,152
    for launcher in ("vllm_flash_attn_c::varlen_fwd", "_vllm_fa2_C::varlen_fwd"):
        cost = cost_of(_call(launcher, _varlen("False"), PREFILL))
        assert cost.flops == 4 * 32 * 128 * 2_097_152 == 34_359_738_368
        assert cost.bytes == 33_554_432 + 8_388_608  # Q+O 2·2048·32·128·2 + K+V 2·2048·8·128·2
    # is_causal True: half the square, 2,097,152 − 2,097,152/2 = 1,048,576 pairs
    assert cost_of(_call("_vllm_fa2_C::varlen_fwd", _varlen("True"), PREFILL)).flops == 4 * 32 * 128 * 1_048_576


def test_a_flag_where_the_schema_does_not_put_it_is_not_read() -> None:
    # guard: an older 20-argument varlen_fwd (no leftpad_k) has is_causal at 14 and window_size_left (an int) at
    # 15. Nothing is read there: the causal context is assumed, as before, and the formula says so
    old = _varlen("False")
    del old[7]
    cost = cost_of(_call("vllm_flash_attn_c::varlen_fwd", old, PREFILL))
    assert cost.flops == 4 * 32 * 128 * 1_048_576 == 17_179_869_184
    assert "causal context assumed" in cost.formula


def test_aten_flash_forward_varlen_reads_its_mask() -> None:
    # _flash_attention_forward(q [2048,32,128], k [2048,8,128], v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal False, return_debug_mask, scale, window_size_left, window_size_right) under the prefill step
    args = [_t([2048, 32, 128]), _t([2048, 8, 128]), _t([2048, 8, 128]), _t([3], I32), _t([3], I32)]
    args += [_s("1024"), _s("1024"), _s("0.0"), _s("False"), _s("False"), NONE, _s("-1"), _s("-1")]
    cost = cost_of(_call("aten::_flash_attention_forward", args, PREFILL))
    assert cost.flops == 4 * 32 * 128 * 2_097_152 == 34_359_738_368


# --- FlashInfer: mask_mode, kv_layout, window_left -------------------------------------------------

FI_DECODE = (
    "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
    "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False::run"
)
FI_PAGED = (
    "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
    "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False::paged_run"
)
FI_RAGGED = FI_PAGED.replace("::paged_run", "_sm90::ragged_run")
WORKSPACE = [_t([134217728], U8), _t([8388608], U8), _t([15], "long int")]


def _fi_decode(cache: list[int], layout: str, window_left: str = "-1") -> list[tuple]:
    # run(float_ws, int_ws, plan_info, q, paged_k_cache, paged_v_cache, kv_indptr, kv_indices, kv_last_page_len,
    # o, maybe_lse, kv_layout_code, window_left, enable_pdl, …)
    return [
        *WORKSPACE,
        _t([32, 32, 128]),
        _t(cache),
        _t(cache),
        _t([33], I32),
        _t([8192], I32),
        _t([32], I32),
        _t([32, 32, 128]),
        NONE,
        _s(layout),
        _s(window_left),
        NONE,
        _s("0.0"),
        _s("0.0883883"),
        _s("1.0"),
        _s("10000.0"),
    ]


def test_flashinfer_decode_reads_its_kv_layout() -> None:
    # HND cache [pages, H_kv 8, page 16, d]: axis −2 is the page size (16 read as H_kv: K+V 2×); layout 1 recorded
    for launcher in (FI_DECODE, "flashinfer::batch_decode_with_paged_kv_cache_run"):
        hnd = cost_of(_call(launcher, _fi_decode([20000, 8, 16, 128], "1"), DECODE))
        assert (hnd.flops, hnd.bytes) == (DECODE_FLOPS, 524_288 + 2 * 131_072 * 8 * 128 * 2)
        assert "HND" in hnd.formula
    # NHD [pages, page 16, H_kv 8, d], layout 0: the same 537,395,200 B
    nhd = cost_of(_call(FI_DECODE, _fi_decode([20000, 16, 8, 128], "0"), DECODE))
    assert nhd.bytes == DECODE_BYTES
    # window_left 127: 128 keys per decode token, as FA3's above: 67,108,864 FLOPs, 17,301,504 B
    swa = cost_of(_call(FI_DECODE, _fi_decode([20000, 8, 16, 128], "1", "127"), DECODE))
    assert (swa.flops, swa.bytes) == (67_108_864, 17_301_504)


def _fi_paged(mask_mode: str) -> list[tuple]:
    # paged_run(float_ws, int_ws, plan_info, q, paged_k_cache, paged_v_cache, qo_indptr, kv_indptr, kv_indices,
    # kv_last_page_len, o, maybe_lse, mask_mode, layout, window_left, …): NHD cache [pages, 16, H_kv 8, d]
    cache = _t([20000, 16, 8, 128])
    return [
        *WORKSPACE,
        _t([1024, 32, 128]),
        cache,
        cache,
        _t([2], I32),
        _t([2], I32),
        _t([256], I32),
        _t([1], I32),
        _t([1024, 32, 128]),
        NONE,
        _s(mask_mode),
        _s("0"),
        _s("-1"),
        NONE,
        NONE,
        NONE,
        _s("0.0"),
        _s("0.0883883"),
        _s("1.0"),
        _s("10000.0"),
    ]


def test_flashinfer_prefill_reads_mask_mode() -> None:
    # one extend of 1024 tokens over 4096 keys. mask_mode 0 (none): Σsq·sk = 4,194,304 pairs:
    # 4·32·128·4,194,304 = 68,719,476,736 (the causal half had been assumed)
    none = cost_of(_call(FI_PAGED, _fi_paged("0"), EXTEND))
    assert none.flops == 4 * 32 * 128 * 4_194_304 == 68_719_476_736
    # Q+O 2·1024·32·128·2 = 16,777,216; K+V 2·4096·8·128·2 = 16,777,216
    assert none.bytes == 16_777_216 + 16_777_216
    # mask_mode 1 (causal): 4,194,304 − 1,048,576/2 = 3,670,016 pairs: 60,129,542,144
    causal = cost_of(_call("flashinfer::batch_prefill_with_kv_cache_paged_run", _fi_paged("1"), EXTEND))
    assert causal.flops == 4 * 32 * 128 * 3_670_016 == 60_129_542_144


def test_flashinfer_ragged_prefill_reads_mask_mode() -> None:
    # ragged_run(float_ws, int_ws, plan_info, q [1024,32,128], k [4096,8,128], v, qo_indptr, kv_indptr, o,
    # maybe_lse, mask_mode 0, layout 0, window_left -1, …): 68,719,476,736 FLOPs as the paged one
    args = [*WORKSPACE, _t([1024, 32, 128]), _t([4096, 8, 128]), _t([4096, 8, 128]), _t([2], I32), _t([2], I32)]
    args += [_t([1024, 32, 128]), NONE, _s("0"), _s("0"), _s("-1"), _s("0.0"), _s("0.0883883")]
    cost = cost_of(_call(FI_RAGGED, args, EXTEND))
    assert cost.flops == 68_719_476_736
    assert cost.bytes == 16_777_216 + 16_777_216


def test_flashinfer_ragged_prefill_over_the_new_tokens_alone() -> None:
    # SGLang's extend over a cached prefix: ragged_run over the 1024 new tokens (K [1024,8,128], causal),
    # a paged_run over the 3072-token prefix, a merge. The ragged call had been costed over the step's
    # 4096 keys: 4·32·128·(4,194,304 − 524,288) = 60,129,542,144 FLOPs.
    # By hand: ½Σsq² = 1,048,576/2 = 524,288 pairs → 4·32·128·524,288 = 8,589,934,592 FLOPs;
    # Q+O 2·1024·32·128·2 = 16,777,216 B, K+V 2·1024·8·128·2 = 4,194,304 B
    args = [*WORKSPACE, _t([1024, 32, 128]), _t([1024, 8, 128]), _t([1024, 8, 128]), _t([2], I32), _t([2], I32)]
    tail = [NONE, _s("0"), _s("-1"), _s("0.0"), _s("0.0883883")]
    causal = cost_of(_call(FI_RAGGED, [*args, _t([1024, 32, 128]), NONE, _s("1"), *tail[1:]], EXTEND))
    assert causal.flops == 8_589_934_592
    assert causal.bytes == 16_777_216 + 4_194_304
    # mask_mode 0: Σsq² = 1,048,576 pairs → 17,179,869,184 FLOPs
    whole = cost_of(_call(FI_RAGGED, [*args, _t([1024, 32, 128]), NONE, _s("0"), *tail[1:]], EXTEND))
    assert whole.flops == 17_179_869_184
    # HND layout (1): K [8, 1024, 128], its keys on axis −2; same counts
    hnd = [*WORKSPACE, _t([1024, 32, 128]), _t([8, 1024, 128]), _t([8, 1024, 128]), _t([2], I32), _t([2], I32)]
    flipped = cost_of(_call(FI_RAGGED, [*hnd, _t([1024, 32, 128]), NONE, _s("1"), _s("1"), *tail[2:]], EXTEND))
    assert (flipped.flops, flipped.bytes) == (8_589_934_592, 16_777_216 + 4_194_304)


def test_merge_without_its_tensors_says_why() -> None:
    with pytest.raises(NoCost, match="v_a"):
        cost_of(_call("sgl_kernel::merge_state", [NONE] * 6))
