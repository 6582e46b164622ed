"""Serving-attention variants the seed catalog lacks (campaign AV 1, 2, 3, 8): MLA's latent cache,
a d_v other than d_qk, flash-attn's own torch.library ops and TRT-LLM's HND paged cache. Each call
is written as its library's schema orders it; every expected number is worked out by hand in the
comments beside it.

The decode step: 32 requests × 4096 context — Σsq = 32, Σsk = Σsq·sk = 131,072."""

from __future__ import annotations

import json

import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

BF16, FP32, I32, I64, U8 = "c10::BFloat16", "float", "int", "long int", "unsigned char"
NONE = ([], "", "")
DECODE = "step[DECODE bs=32 c=0 g=32 c_sq=0 c_sk=0 c_sqsq=0 c_sqsk=0 g_sq=32 g_sk=131072 g_sqsq=32 g_sqsk=131072]"
# two context requests of 1024 new tokens, no prefix: Σsq = Σsk = 2048, Σsq² = Σsq·sk = 2·1024² = 2,097,152
EXTEND = "step[EXTEND bs=2 c=2 g=0 c_sq=2048 c_sk=2048 c_sqsq=2097152 c_sqsk=2097152 g_sq=0 g_sk=0 g_sqsq=0 g_sqsk=0]"
# one request of 1024 new tokens on a 3072-token prefix: Σsq·sk = 1024·4096 = 4,194,304, Σsq² = 1,048,576
PREFIXED = "step[EXTEND bs=1 c=1 g=0 c_sq=1024 c_sk=4096 c_sqsq=1048576 c_sqsk=4194304 g_sq=0 g_sk=0 g_sqsq=0 g_sqsk=0]"

# DeepSeek MLA decode, 128 query heads, c_kv 512 + k_pe 64, bf16, the decode step above:
# QKᵀ over 576 and PV over 512 per (query head, key): 2·128·131072·(576 + 512) = 36,507,222,016 FLOPs;
# q_nope + q_pe 32·128·576·2 = 4,718,592, o 32·128·512·2 = 4,194,304, one latent row of 576 per key
# read once 131072·576·2 = 150,994,944: 159,907,840 B
MLA_FLOPS = 36_507_222_016
MLA_BYTES = 4_718_592 + 4_194_304 + 150_994_944
# GQA decode, H_q 32, H_kv 8, d 128, bf16: 4·32·128·131072 FLOPs; Q+O 2·32·32·128·2 + K+V 2·131072·8·128·2
GQA_FLOPS = 2_147_483_648
GQA_BYTES = 524_288 + 536_870_912


def _t(dims: list[int], dtype: str = BF16) -> tuple[list[int], str, str]:
    return (dims, dtype, "")


def _s(text: str, dtype: str = "Scalar") -> tuple[list[int], str, str]:
    return ([], dtype, text)


def _call(launcher: str, args: list[tuple[list[int], str, str]], step: str = "", op: str = "attention") -> Call:
    dims, types, concrete = (json.dumps([a[i] for a in args]) for i in range(3))
    return Call(launcher, op, parse_call(dims, types, None, concrete), "", None, step)


# --- 1. MLA: one latent row per key, QKᵀ over c_kv + k_pe, PV over c_kv --------------------------------

FLASHINFER_MLA = (
    "batch_mla_attention_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_ckv_512_head_dim_kpe_64"
    "_profiler_False::run"
)


def _flashinfer_mla(tokens: int, pages: int, page: int, mask_mode: str = "0") -> list[tuple]:
    # run(float_ws, int_ws, plan_info, q_nope [T,128,512], q_pe [T,128,64], ckv_cache [pages,page,512],
    # kpe_cache [pages,page,64], kv_indices, o [T,128,512], lse, mask_mode, num_heads, page_size, sm_scale)
    return [
        _t([134217728], U8),
        _t([8388608], U8),
        _s("[0, 1, 2]", "GenericList"),
        _t([tokens, 128, 512]),
        _t([tokens, 128, 64]),
        _t([pages, page, 512]),
        _t([pages, page, 64]),
        _t([pages], I32),
        _t([tokens, 128, 512]),
        _t([tokens, 128], FP32),
        _s(mask_mode),
        _s("128"),
        _s(str(page)),
        _s("0.1352"),
    ]


def test_flashinfer_mla_decode_reads_one_latent_row_per_key_whatever_the_page_size() -> None:
    # page size 1 (SGLang's FlashInfer MLA backend): had been MHA at d 512 — 4·128·512·131072 =
    # 34,359,738,368 FLOPs, K and V apart 2·131072·1·512·2 (+73 % bytes)
    page1 = cost_of(_call(FLASHINFER_MLA, _flashinfer_mla(32, 131072, 1), DECODE))
    assert page1.flops == 2 * 128 * 131_072 * (576 + 512) == MLA_FLOPS
    assert page1.bytes == 32 * 128 * 576 * 2 + 32 * 128 * 512 * 2 + 131_072 * 576 * 2 == MLA_BYTES == 159_907_840
    # page size 64: the cache's axis −2 (64) had been read as 64 KV heads — 17.2 GB, "impossible"
    page64 = cost_of(_call(FLASHINFER_MLA, _flashinfer_mla(32, 2048, 64), DECODE))
    assert (page64.flops, page64.bytes) == (MLA_FLOPS, MLA_BYTES)
    assert page64.precision == "bf16"
    assert not any(word in page64.formula for word in ("assumed", "estimate", "not recorded"))


def test_flashinfer_mla_causal_prefill_reads_mask_mode() -> None:
    # mask_mode 1 (causal) over the extend step: pairs 2,097,152 − 2,097,152/2 = 1,048,576;
    # FLOPs 2·128·1,048,576·(576+512) = 292,057,776,128; Q+O 2048·128·(576+512)·2 = 570,425,344,
    # latent rows 2048·576·2 = 2,359,296
    cost = cost_of(_call(FLASHINFER_MLA, _flashinfer_mla(2048, 2048, 1, mask_mode="1"), EXTEND))
    assert cost.flops == 2 * 128 * 1_048_576 * 1088 == 292_057_776_128
    assert cost.bytes == 2048 * 128 * 1088 * 2 + 2048 * 576 * 2 == 572_784_640
    assert "mask_mode 1 recorded" in cost.formula


def test_flashmla_and_cutlass_mla_decode_by_their_schemas() -> None:
    # vLLM's FlashMLA fwd_kvcache_mla(q [32,1,128,576], kcache [2048,64,1,576], head_size_v 512, seqlens_k,
    # block_table, softmax_scale, is_causal, tile_scheduler_metadata, num_splits): the numbers above
    flash = [
        _t([32, 1, 128, 576]),
        _t([2048, 64, 1, 576]),
        _s("512"),
        _t([32], I32),
        _t([32, 64], I32),
        _s("0.1352"),
        _s("True"),
        _t([133, 8], I32),
        _t([33], I32),
    ]
    cost = cost_of(_call("_flashmla_C::fwd_kvcache_mla", flash, DECODE))
    assert (cost.flops, cost.bytes) == (MLA_FLOPS, MLA_BYTES)
    # sgl-kernel cutlass_mla_decode(out [32,128,512], q_nope, q_pe [32,128,64], kv_c_and_k_pe_cache [2048,64,576],
    # seq_lens, page_table, workspace, sm_scale, num_kv_splits): the same
    cutlass = [
        _t([32, 128, 512]),
        _t([32, 128, 512]),
        _t([32, 128, 64]),
        _t([2048, 64, 576]),
        _t([32], I32),
        _t([32, 64], I32),
        _t([1048576], U8),
        _s("0.1352"),
        _s("1"),
    ]
    cost = cost_of(_call("sgl_kernel::cutlass_mla_decode", cutlass, DECODE))
    assert (cost.flops, cost.bytes) == (MLA_FLOPS, MLA_BYTES)
    # its first version (out, q_nope_and_q_pe [32,128,576], kv_c_and_k_pe_cache, …): d_v from out's 512
    first = [cutlass[0], _t([32, 128, 576]), *cutlass[3:7]]
    cost = cost_of(_call("sgl_kernel::cutlass_mla_decode", first, DECODE))
    assert (cost.flops, cost.bytes) == (MLA_FLOPS, MLA_BYTES)


def test_mla_outside_a_step_and_unreadable_mla_say_so() -> None:
    with pytest.raises(NoCost, match="no sequence lengths recorded"):
        cost_of(_call(FLASHINFER_MLA, _flashinfer_mla(32, 2048, 64)))
    # q_pe missing: not costed as multi-head attention at d 512
    args = _flashinfer_mla(32, 2048, 64)
    args[4] = NONE
    with pytest.raises(NoCost, match="MLA call"):
        cost_of(_call(FLASHINFER_MLA, args, DECODE))


# --- 2. a recorded d_v other than d_qk ----------------------------------------------------------------

RAGGED_192_128 = (
    "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_192_head_dim_vo_128"
    "_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False::ragged_run"
)


def _ragged(tokens: int) -> list[tuple]:
    # ragged_run(float_ws, int_ws, plan_info, q [T,128,192], k [T,128,192], v [T,128,128], qo_indptr, kv_indptr,
    # o [T,128,128], lse, mask_mode 1, layout 0 (NHD), window_left -1, …)
    return [
        _t([134217728], U8),
        _t([8388608], U8),
        _s("[0]", "GenericList"),
        _t([tokens, 128, 192]),
        _t([tokens, 128, 192]),
        _t([tokens, 128, 128]),
        _t([3], I32),
        _t([3], I32),
        _t([tokens, 128, 128]),
        _t([tokens, 128], FP32),
        _s("1"),
        _s("0"),
        _s("-1"),
    ]


def test_deepseek_prefill_takes_d_v_from_v() -> None:
    # pairs 2,097,152 − 2,097,152/2 = 1,048,576; FLOPs 2·128·1,048,576·(192+128) = 85,899,345,920 (had been
    # 4·128·192·… = 103,079,215,104); bytes Q, K at 192, V, O at 128: 2048·128·(192+192+128+128)·2 = 335,544,320
    cost = cost_of(_call(RAGGED_192_128, _ragged(2048), EXTEND))
    assert cost.flops == 2 * 128 * 1_048_576 * 320 == 85_899_345_920
    assert cost.bytes == 2048 * 128 * (192 + 192 + 128 + 128) * 2 == 335_544_320
    # the new tokens of one request on a 3072-token prefix (K holds Σsq = 1024 of Σsk 4096): ½·1024² = 524,288
    # pairs; FLOPs 2·128·524,288·320 = 42,949,672,960; bytes 1024·128·640·2 = 167,772,160
    cost = cost_of(_call(RAGGED_192_128, _ragged(1024), PREFIXED))
    assert cost.flops == 2 * 128 * 524_288 * 320 == 42_949_672_960
    assert cost.bytes == 1024 * 128 * 640 * 2 == 167_772_160


def test_fa3_takes_d_v_from_v() -> None:
    # sgl_kernel::fwd (FA3's schema: q, k, v, k_new, v_new, q_v, out, …, softmax_scale 23, is_causal 24,
    # window 25, 26) on q, k [2048,16,192], v [2048,16,128], causal: pairs 1,048,576;
    # FLOPs 2·16·1,048,576·320 = 10,737,418,240; bytes 2048·16·(192+128)·2 (Q, O) + the same for K, V
    args = [_t([2048, 16, 192]), _t([2048, 16, 192]), _t([2048, 16, 128]), *[NONE] * 4]
    args += [*[NONE] * 16, _s("0.07"), _s("True"), _s("-1"), _s("-1"), _s("0.0")]
    cost = cost_of(_call("sgl_kernel::fwd", args, EXTEND))
    assert cost.flops == 2 * 16 * 1_048_576 * 320 == 10_737_418_240
    assert cost.bytes == 2 * 2048 * 16 * 320 * 2 == 41_943_040


# --- 3. flash-attn's own torch.library ops ----------------------------------------------------------------


def _varlen(causal: str, left: str, right: str) -> list[tuple]:
    # flash_attn::_flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    # dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap, alibi_slopes,
    # return_softmax, block_table, leftpad_k, seqused_k, zero_tensors)
    return [
        _t([2048, 32, 128]),
        _t([2048, 8, 128]),
        _t([2048, 8, 128]),
        _t([3], I32),
        _t([3], I32),
        _s("1024"),
        _s("1024"),
        _s("0.0"),
        _s("0.0884"),
        _s(causal),
        _s(left),
        _s(right),
        _s("0.0"),
        NONE,
        _s("False"),
        NONE,
        NONE,
        NONE,
        _s("False"),
    ]


def test_flash_attn_varlen_reads_causal_and_window() -> None:
    launcher = "flash_attn::_flash_attn_varlen_forward"
    # causal False: every pair of each request, Σsq·sk = 2,097,152: 4·32·128·2,097,152 = 34,359,738,368
    # (had been halved: "no mask argument read: causal context assumed"); Q+O 2·2048·32·128·2 + K+V 2·2048·8·128·2
    cost = cost_of(_call(launcher, _varlen("False", "-1", "-1"), EXTEND))
    assert cost.flops == 4 * 32 * 128 * 2_097_152 == 34_359_738_368
    assert cost.bytes == 2 * 2048 * 32 * 128 * 2 + 2 * 2048 * 8 * 128 * 2 == 41_943_040
    assert "is_causal False recorded" in cost.formula
    # causal, window (127, 0): W = 128 keys per query at most; the step records sums, so the bound
    # Σsq·(W − ½) = 2048·127.5 = 261,120 pairs: 4·32·128·261,120 = 4,278,190,080 (had been 17,179,869,184),
    # an estimate (exact per request: Σ_{i<1024} min(i+1, 128) − 512 = 122,432 pairs each)
    cost = cost_of(_call(launcher, _varlen("True", "127", "0"), EXTEND))
    assert cost.flops == 4 * 32 * 128 * 261_120 == 4_278_190_080
    assert "estimate" in cost.formula
    # keys read ≤ Σsq·W = 2048·128 ≥ Σsk 2048: all of them, the same bytes
    assert cost.bytes == 41_943_040


def _dense_forward(causal: str, left: str = "-1", right: str = "-1") -> list[tuple]:
    # flash_attn::_flash_attn_forward(q [2,4096,32,128], k, v [2,4096,8,128], dropout_p, softmax_scale, causal,
    # window_size_left, window_size_right, softcap, alibi_slopes, return_softmax)
    kv = _t([2, 4096, 8, 128])
    return [_t([2, 4096, 32, 128]), kv, kv, _s("0.0"), _s("0.0884"), _s(causal), _s(left), _s(right), _s("0.0")]


def test_flash_attn_dense_forward_and_backward_are_bshd() -> None:
    # causal, square 4096: pairs 4096²/2 = 8,388,608; FLOPs 2·B·H·pairs·(d+dv) = 2·2·32·8,388,608·256 =
    # 274,877,906,944; bytes q 67,108,864 + k, v 16,777,216 each + out 67,108,864 = 167,772,160, + the
    # logsumexp it writes, B·H·Sq fp32 = 2·32·4096·4 = 1,048,576: 168,820,736
    # (had been refused: "dense q/k/v … recorded, but not their layout")
    cost = cost_of(_call("flash_attn::_flash_attn_forward", [*_dense_forward("True"), NONE, _s("False")]))
    assert cost.flops == 2 * 2 * 32 * 8_388_608 * 256 == 274_877_906_944
    assert cost.bytes == 67_108_864 * 2 + 16_777_216 * 2 + 1_048_576 == 168_820_736
    # causal with window_size_left 1023: row i sees min(i+1, 1024) keys: Σ_{i<1024}(i+1) = 524,800 plus
    # 3072·1024 = 3,145,728, less ½ per diagonal (2048): 3,668,480 pairs; 2·2·32·3,668,480·256 = 120,208,752,640
    cost = cost_of(_call("flash_attn::_flash_attn_forward", _dense_forward("True", "1023", "0")))
    assert cost.flops == 2 * 2 * 32 * 3_668_480 * 256 == 120_208_752_640
    # not causal: 4096² pairs: 549,755,813,888
    assert cost_of(_call("flash_attn::_flash_attn_forward", _dense_forward("False"))).flops == 549_755_813_888
    # _flash_attn_backward(dout, q, k, v, out, softmax_lse [2,32,4096] fp32, dq, dk, dv, dropout_p, softmax_scale,
    # causal, window_size_left, window_size_right, softcap, alibi_slopes, deterministic, rng_state):
    # 2·B·H·pairs·(3d + 2dv) = 2·2·32·8,388,608·640 = 687,194,767,360; read dout, q, out 67,108,864 each,
    # k, v 16,777,216 each, lse 1,048,576 = 235,929,600; dq, dk, dv written 100,663,296
    q, kv = _t([2, 4096, 32, 128]), _t([2, 4096, 8, 128])
    args = [q, q, kv, kv, q, _t([2, 32, 4096], FP32), q, kv, kv, _s("0.0"), _s("0.0884"), _s("True")]
    args += [_s("-1"), _s("-1"), _s("0.0"), NONE, _s("False"), _t([2], I64)]
    cost = cost_of(_call("flash_attn::_flash_attn_backward", args, op="attention_backward"))
    assert cost.flops == 2 * 2 * 32 * 8_388_608 * 640 == 687_194_767_360
    assert cost.bytes == 235_929_600 + 100_663_296 == 336_592_896


# --- 8. TRT-LLM's HND paged cache ----------------------------------------------------------------------------


def test_trtllm_decode_reads_kv_heads_at_axis_minus_3() -> None:
    # flashinfer::trtllm_paged_attention_decode(out [32,32,128], out_scale_factor None, query [32,32,128],
    # kv_cache [8192, 2, 8, 16, 128] (TRT-LLM's [pages, 2, H_kv, page, d]), workspace, block_tables, seq_lens,
    # max_kv_len, bmm1_scale, bmm2_scale, window_left): H_kv 8, not the page size 16 (K+V 2×, SOL 400 %)
    args = [_t([32, 32, 128]), NONE, _t([32, 32, 128]), _t([8192, 2, 8, 16, 128]), _t([33554432], U8)]
    args += [_t([32, 256], I32), _t([32], I32), _s("4096"), _s("0.0884"), _s("1.0"), _s("-1")]
    cost = cost_of(_call("flashinfer::trtllm_paged_attention_decode", args, DECODE))
    assert cost.flops == 4 * 32 * 128 * 131_072 == GQA_FLOPS
    assert cost.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 131_072 * 8 * 128 * 2 == GQA_BYTES == 537_395_200
    # the newer schema: (out, out_scale_factor, query, key_cache [8192,8,16,128], value_cache, workspace, …)
    cache = _t([8192, 8, 16, 128])
    newer = [*args[:3], cache, cache, *args[4:]]
    cost = cost_of(_call("flashinfer::trtllm_paged_attention_decode", newer, DECODE))
    assert (cost.flops, cost.bytes) == (GQA_FLOPS, GQA_BYTES)
    # the first: (out, query, key_value_cache, workspace, …)
    first = [args[0], *args[2:]]
    cost = cost_of(_call("flashinfer::trtllm_paged_attention_decode", first, DECODE))
    assert (cost.flops, cost.bytes) == (GQA_FLOPS, GQA_BYTES)


def test_trtllm_context_and_mla() -> None:
    # context over the extend step, query [2048,32,128], causal assumed: 4·32·128·1,048,576 = 17,179,869,184;
    # Q+O 2·2048·32·128·2 + K+V 2·2048·8·128·2 = 41,943,040
    args = [_t([2048, 32, 128]), NONE, _t([2048, 32, 128]), _t([8192, 2, 8, 16, 128]), _t([33554432], U8)]
    args += [_t([2, 256], I32), _t([2], I32), _s("1024"), _s("1024"), _s("0.0884"), _s("1.0"), _s("2"), _s("-1")]
    cost = cost_of(_call("flashinfer::trtllm_paged_attention_context", args, EXTEND))
    assert cost.flops == 17_179_869_184
    assert cost.bytes == 41_943_040
    # MLA through the TRT-LLM decode: query [32,128,576], one cache [2048, 1, 64, 576] as K and V, out
    # [32,128,512]: d_v 512 from out, the latent row read once — the MLA numbers above
    cache = _t([2048, 1, 64, 576])
    mla = [_t([32, 128, 512]), NONE, _t([32, 128, 576]), cache, cache, _t([33554432], U8), _t([32, 64], I32)]
    cost = cost_of(_call("flashinfer::trtllm_paged_attention_decode", mla, DECODE))
    assert (cost.flops, cost.bytes) == (MLA_FLOPS, MLA_BYTES)
