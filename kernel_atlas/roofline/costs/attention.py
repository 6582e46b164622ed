"""Attention: SDPA, FlashAttention and efficient attention, forward and backward, with causal
and windowed masks; paged decode."""

from __future__ import annotations

from itertools import pairwise

from kernel_atlas.core.devices import MATRIX
from kernel_atlas.ingest.recorded import Arg
from kernel_atlas.ingest.steps import is_native_step, parse_step
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    concrete_int,
    optional_tensor_at,
    register,
    tensor_at,
    tensors_of,
)

# Where a causal mask's diagonal starts when Sq ≠ Skv: PyTorch's `is_causal` (SDPA and its
# backends) aligns it top-left (query i sees keys 0…i); FlashAttention ≥ 2.1, which
# `aten::_flash_attention_forward` runs, bottom-right (query i sees keys 0…i + Skv − Sq, a decode
# token its whole context). Square, both are one mask.
TOP_LEFT, BOTTOM_RIGHT = "top-left", "bottom-right"


def causal_pairs(sq: int, skv: int, align: str) -> float:
    """The query–key pairs a causal mask keeps, as the area under its diagonal — the convention of
    FlashAttention's benchmarks and TraceLens (½·Sq·Skv when square; the diagonal's own Sq/2 not
    added), applied where the diagonal starts (`align`)."""
    if align == TOP_LEFT:  # query i sees min(i, Skv) keys
        return sq * sq / 2 if sq <= skv else skv * sq - skv * skv / 2
    # bottom-right: query i sees i + Skv − Sq keys (none where that is negative)
    return sq * skv - sq * sq / 2 if skv >= sq else skv * skv / 2


def window_pairs(sq: int, skv: int, left: int, right: int, causal: bool) -> float:
    """The query–key pairs a sliding window keeps, FlashAttention's (≥ 2.3) convention: query i
    sees keys p − left … p + right at p = i + Skv − Sq (a negative side: unbounded; causal:
    right = 0) within 0 … Skv − 1. Causal, the diagonal's own ½ per row that sees its diagonal is
    left out, as `causal_pairs` counts (an unbounded left side gives its bottom-right area)."""
    offset = skv - sq
    reach = 0 if causal else right
    start, end = offset, offset + sq - 1  # the rows' positions p
    # a row's count, max(0, min(Skv−1, p+reach) − max(0, p−left) + 1), is linear in p between
    # these positions, and of one sign
    cuts = [*((left, skv + left) if left >= 0 else ()), *((skv - reach, -reach) if reach >= 0 else ())]
    edges = sorted({start, end + 1, *(min(max(at, start), end + 1) for at in cuts)})
    total = 0.0
    for lo_p, hi_p in ((a, b - 1) for a, b in pairwise(edges) if b > a):
        first, last = _window_row(lo_p, skv, left, reach), _window_row(hi_p, skv, left, reach)
        if first > 0 or last > 0:
            total += (hi_p - lo_p + 1) * (max(first, 0) + max(last, 0)) / 2
    if causal:  # rows whose own diagonal key exists: 0 ≤ p ≤ Skv − 1
        total -= max(0, min(end, skv - 1) - max(start, 0) + 1) / 2
    return total


def _window_row(p: int, skv: int, left: int, reach: int) -> int:
    """Keys a query at position p sees in a window (`window_pairs`), before clipping at 0."""
    hi = skv - 1 if reach < 0 else min(skv - 1, p + reach)
    lo = 0 if left < 0 else max(0, p - left)
    return hi - lo + 1


def _is_causal(call: Call, index: int, align: str = TOP_LEFT) -> tuple[str | None, str]:
    """The mask an `is_causal` argument at `index` asks for (`align`, or None), and what the
    formula says where it is not recorded (no mask assumed)."""
    flag = call.args[index].flag() if index < len(call.args) else None
    return (align if flag else None), ("" if flag is not None else " (is_causal not recorded: no mask assumed)")


def _attention_geometry(
    call: Call, q: Arg, k: Arg, v: Arg, layout: str, causal: str | None, window: tuple[int, int] | None
) -> tuple[int, int, int, int, int, int, float, str]:
    """(B, H_q, Sq, Skv, d, dv, pairs kept, what the pairs are) of dense q, k, v in `layout` (BSHD or
    BHSD): Sq·Skv pairs, causal `causal_pairs`, a sliding `window` (left, right) `window_pairs`.
    H is the query's heads: grouped-query attention's fewer K/V heads do as many MACs per query head."""
    if len(q.dims) != 4:
        raise NoCost(f"{call.launcher}: query of rank {len(q.dims)} (varlen/packed layout: sequence lengths missing)")
    if layout == "BSHD":
        b, sq, h, d = q.dims
        skv, dv = k.dims[1], v.dims[3]
    else:  # BHSD
        b, h, sq, d = q.dims
        skv, dv = k.dims[2], v.dims[3]
    pairs = causal_pairs(sq, skv, causal) if causal else float(sq * skv)
    if window is not None:
        pairs = window_pairs(sq, skv, *window, causal is not None)
    if window is not None:
        left, right = (str(side) if side >= 0 else "unbounded" for side in window)
        kept = f"sliding window (left {left}, right {'0, causal' if causal else right}): {pairs:g} of {sq}·{skv}"
    elif causal is None:
        kept = f"Sq·Skv = {sq}·{skv}"
    elif sq == skv:
        kept = f"Sq·Skv·½ (causal) = {sq}·{skv}·½"
    else:
        kept = f"causal, diagonal from the {causal}: {pairs:g} of {sq}·{skv}"
    return b, h, sq, skv, d, dv, pairs, kept


def _attention(
    call: Call, layout: str, causal: str | None, assumed: str = "", window: tuple[int, int] | None = None
) -> Cost:
    """QKᵀ and PV over the pairs kept of q, k, v (its first three arguments, `layout` BSHD or
    BHSD): 2 FLOP per MAC, Sq·Skv pairs (causal: `causal_pairs`; a sliding `window` (left,
    right): `window_pairs`); `assumed`: what the formula says it assumed."""
    q, k, v = tensor_at(call, 0, "query"), tensor_at(call, 1, "key"), tensor_at(call, 2, "value")
    b, h, sq, _, d, dv, pairs, kept = _attention_geometry(call, q, k, v, layout, causal, window)
    flops = 2.0 * b * h * pairs * (d + dv)
    out = b * h * sq * dv * q.itemsize
    read = q.nbytes + k.nbytes + v.nbytes
    formula = (
        f"2·B·H·pairs·(d+dv), pairs {kept}{assumed} = 2·{b}·{h}·{pairs:g}·({d}+{dv}); bytes = q+k+v {read} + out {out}"
    )
    return Cost(flops, read + out, q.precision, MATRIX, formula)


def _attention_backward(
    call: Call,
    layout: str,
    causal: str | None,
    assumed: str = "",
    *,
    out_at: int,
    lse_at: int,
    bias_at: int | None = None,
    bias_grad: bool = False,
    window: tuple[int, int] | None = None,
) -> Cost:
    """The backward of dense attention, ATen's argument order (grad_out, query, key, value, …, out
    at `out_at`, logsumexp at `lse_at`): five matmuls over the pairs the forward kept — S = QKᵀ
    recomputed and dQ = dS·K, dK = dSᵀ·Q (d each), dV = Pᵀ·dO and dP = dO·Vᵀ (dv each) —
    2·B·H·pairs·(3d + 2dv) FLOPs, 2.5× the forward's 2·B·H·pairs·(d + dv) when d = dv; the same
    mask rule as the forward. Bytes: grad_out, q, k, v, out, logsumexp (and an attention bias)
    read as recorded, grad_q, grad_k, grad_v (the shapes and dtypes of q, k, v; grad_bias where
    asked for) written. The RNG state/seed tensors (a few bytes) are not counted."""
    grad = tensor_at(call, 0, "grad_out")
    q, k, v = tensor_at(call, 1, "query"), tensor_at(call, 2, "key"), tensor_at(call, 3, "value")
    b, h, _, _, d, dv, pairs, kept = _attention_geometry(call, q, k, v, layout, causal, window)
    out, lse = optional_tensor_at(call, out_at), optional_tensor_at(call, lse_at)
    bias = optional_tensor_at(call, bias_at) if bias_at is not None else None
    flops = 2.0 * b * h * pairs * (3 * d + 2 * dv)
    read_from = [("grad_out", grad), ("q", q), ("k", k), ("v", v), ("out", out), ("logsumexp", lse), ("bias", bias)]
    read = sum(a.nbytes for _, a in read_from if a is not None)
    written_to = [q, k, v, *([bias] if bias is not None and bias_grad else [])]
    written = sum(a.numel * a.itemsize for a in written_to)
    names = "+".join(name for name, a in read_from if a is not None)
    grads = "grad_q+grad_k+grad_v" + ("+grad_bias" if len(written_to) > 3 else "")
    formula = (
        f"backward: 2·B·H·pairs·(3d+2dv) (QKᵀ recomputed, dV, dP, dQ, dK: 2.5× the forward's 2·B·H·pairs·(d+dv) "
        f"when d = dv), pairs {kept}{assumed} = 2·{b}·{h}·{pairs:g}·(3·{d}+2·{dv}); "
        f"bytes = {names} {read} read + {grads} {written} written"
    )
    return Cost(flops, read + written, q.precision, MATRIX, formula)


def _varlen_backward(call: Call, index: int) -> None:
    """A backward with cumulative sequence lengths (a tensor at `index`): per-sequence lengths are values."""
    if optional_tensor_at(call, index) is not None:
        raise NoCost(f"{call.launcher} with cumulative sequence lengths (varlen): per-sequence lengths not recorded")


@register(launchers=("aten::_flash_attention_backward",))
def _flash_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, rng_state, unused, scale, window_size_left, window_size_right), [B, S, H, D]
    _varlen_backward(call, 6)
    causal, assumed = _is_causal(call, 11, BOTTOM_RIGHT)
    return _attention_backward(call, "BSHD", causal, assumed, out_at=4, lse_at=5, window=_window(call, 15))


@register(launchers=("aten::_scaled_dot_product_flash_attention_backward",))
def _sdpa_flash_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, philox_seed, philox_offset, scale), [B, H, S, D]
    _varlen_backward(call, 6)
    return _attention_backward(call, "BHSD", *_is_causal(call, 11), out_at=4, lse_at=5)


@register(launchers=("aten::_efficient_attention_backward",))
def _efficient_backward(call: Call) -> Cost:
    # (grad_out_, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    # max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type,
    # bias_requires_grad, …), [B, S, H, D]
    _varlen_backward(call, 6)
    recorded = call.args[14] if len(call.args) > 14 and call.args[14].text.strip() else None
    mask = recorded.value if recorded is not None else 0  # not recorded: no mask assumed (said)
    if isinstance(mask, bool) or mask not in _MASK_TYPES:
        raise NoCost(f"{call.launcher}: custom_mask_type {recorded.text[:20]!r} is none of 0, 1, 2")  # type: ignore[union-attr]
    assumed = "" if recorded is not None else " (custom_mask_type not recorded: no mask assumed)"
    bias_grad = len(call.args) > 15 and call.args[15].flag() is True
    return _attention_backward(
        call, "BSHD", _MASK_TYPES[mask], assumed, out_at=5, lse_at=10, bias_at=4, bias_grad=bias_grad
    )


@register(launchers=("aten::_scaled_dot_product_efficient_attention_backward",))
def _sdpa_efficient_backward(call: Call) -> Cost:
    # (grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset,
    # dropout_p, grad_input_mask, is_causal, scale), [B, H, S, D]
    mask = call.args[10].value if len(call.args) > 10 else None
    bias_grad = isinstance(mask, list) and len(mask) == 4 and mask[3] is True
    return _attention_backward(call, "BHSD", *_is_causal(call, 11), out_at=5, lse_at=6, bias_at=4, bias_grad=bias_grad)


@register(launchers=("aten::_scaled_dot_product_cudnn_attention_backward",))
def _sdpa_cudnn_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
    # cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, scale), [B, H, S, D]
    _varlen_backward(call, 9)
    return _attention_backward(call, "BHSD", *_is_causal(call, 14), out_at=4, lse_at=5, bias_at=8)


@register(launchers=("aten::_flash_attention_forward",))
def _flash_forward(call: Call) -> Cost:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...), [B, S, H, D]
    if len(call.args) > 3 and call.args[3].is_tensor:
        if call.step:
            return _paged_attention(call)
        raise NoCost(
            "aten::_flash_attention_forward with cumulative sequence lengths (varlen): "
            "per-sequence lengths not recorded"
        )
    return _attention(call, "BSHD", *_is_causal(call, 8, BOTTOM_RIGHT), window=_window(call, 11))


def _window(call: Call, index: int) -> tuple[int, int] | None:
    """A sliding window's (left, right) sizes recorded at `index` and `index + 1` (-1 or not
    recorded: that side unbounded), or None where neither side is bounded."""
    left, right = (concrete_int(call, i) for i in (index, index + 1))
    sides = (left if left is not None and left >= 0 else -1, right if right is not None and right >= 0 else -1)
    return sides if max(sides) >= 0 else None


# `custom_mask_type` of `_efficient_attention_forward` (PyTorch's CustomMaskType): none, causal
# from the top left, causal from the bottom right
_MASK_TYPES = {0: None, 1: TOP_LEFT, 2: BOTTOM_RIGHT}


@register(launchers=("aten::_efficient_attention_forward",))
def _efficient_forward(call: Call) -> Cost:
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_q, max_k, dropout_p, custom_mask_type, ...)
    recorded = call.args[9] if len(call.args) > 9 and call.args[9].text.strip() else None
    mask = recorded.value if recorded is not None else 0  # not recorded: no mask assumed (said)
    if isinstance(mask, bool) or mask not in _MASK_TYPES:
        raise NoCost(f"{call.launcher}: custom_mask_type {recorded.text[:20]!r} is none of 0, 1, 2")  # type: ignore[union-attr]
    assumed = "" if recorded is not None else " (custom_mask_type not recorded: no mask assumed)"
    return _attention(call, "BSHD", _MASK_TYPES[mask], assumed)


@register(
    launchers=(
        "aten::_scaled_dot_product_flash_attention",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    )
)
def _sdpa(call: Call) -> Cost:
    # (query, key, value, dropout_p, is_causal, ...) for the flash variant; SDPA itself has
    # attn_mask at 3 and is_causal at 5; cuDNN: (q, k, v, attn_bias, compute_lse, dropout_p, is_causal)
    index = {"aten::scaled_dot_product_attention": 5, "aten::_scaled_dot_product_cudnn_attention": 6}.get(
        call.launcher, 4
    )
    return _attention(call, "BHSD", *_is_causal(call, index))


@register(launchers=("aten::_scaled_dot_product_efficient_attention",))
def _sdpa_efficient(call: Call) -> Cost:
    return _attention(call, "BHSD", *_is_causal(call, 6))


@register(ops=("attention",))
def _attention_step(call: Call) -> Cost:
    dense = [a for a in tensors_of(call)[:3] if len(a.dims) == 4]
    if not call.step and len(dense) == 3 and dense[0].dims[0] == dense[1].dims[0]:
        # a library's dense attention (e.g. aiter's sage_fwd) with no known argument layout
        raise NoCost(
            f"{call.what}: dense q/k/v {list(dense[0].dims)} recorded, but not their layout (which axis is "
            "heads, which sequence: [B, S, H, D] or [B, H, S, D]) nor whether it is causal"
        )
    return _paged_attention(call)


def _heads(call: Call) -> tuple[Arg, int, int, int, Arg, str]:
    """query [T, H_q, d] and the KV heads: from a [T, H_kv, d] key (H_kv < H_q), else the
    second-to-last axis of a KV cache ([blocks, block_size, H_kv, d], [2, blocks, block_size,
    H_kv, d]: the NHD layout, which the formula then says it assumed: an HND cache's axis −2 is
    its page size), else H_q (MHA, only [T, H, d] tensors); H_q must be a multiple of H_kv.
    Returns (query, H_q, d, H_kv, the tensor the K/V are read as — the cache where one is
    recorded, for its dtype —, where H_kv came from)."""
    tensors = tensors_of(call)
    q = next((a for a in tensors if len(a.dims) == 3), None)
    if q is None:
        raise NoCost(f"{call.what}: no [tokens, heads, head_dim] query recorded (heads unknown)")
    _, h_q, d = q.dims
    fits = [a for a in tensors if a is not q and len(a.dims) >= 3 and a.dims[-1] == d and 0 < a.dims[-2] <= h_q]
    fits = [a for a in fits if h_q % a.dims[-2] == 0]
    caches = [a for a in fits if len(a.dims) >= 4]
    keys = [a for a in fits if len(a.dims) == 3 and a.dims[-2] < h_q]
    cache = max(caches, key=lambda a: a.numel) if caches else None
    if keys:
        return q, h_q, d, keys[0].dims[-2], cache or keys[0], "key"
    if cache is not None:
        return q, h_q, d, cache.dims[-2], cache, "the KV cache's axis −2, NHD layout assumed"
    # MHA with only [T, H, d] tensors recorded: K/V heads equal the query's
    same = [a for a in fits if len(a.dims) == 3]
    if not same:
        raise NoCost(f"{call.what}: the KV heads are not recorded (no key or KV-cache tensor with head_dim {d})")
    return q, h_q, d, same[0].dims[-2], same[0], "key"


def _paged_attention(call: Call) -> Cost:
    """Attention over a batch of variable-length requests (paged KV cache, ragged/varlen
    layouts): sequence lengths from the step annotation enclosing the launch, heads from the
    recorded query and key/cache. FLOPs = 4·H_q·d·(Σ sq·sk of decode + Σ sq·sk − ½ Σ sq² of the
    causal context part), as FlashAttention's benchmarks and TraceLens count; bytes = Q and O
    (Σ sq·H_q·d each) + K and V read (Σ sk·H_kv·d each, at the cache's dtype)."""
    lengths = parse_step(call.step)
    if lengths is None and is_native_step(call.step):
        raise NoCost(
            f"{call.what}: paged/varlen attention: the step annotation {call.step!r} counts tokens but gives "
            "no Σ sq·sk (the engine's native annotation; its detailed roofline annotation has them), "
            "and no sequence lengths are recorded"
        )
    if lengths is None:
        raise NoCost(
            f"{call.what}: paged/varlen attention: no sequence lengths recorded and no per-step "
            "annotation with them (vLLM/SGLang detailed roofline annotations) encloses the launch"
        )
    q, h_q, d, h_kv, kv, heads_from = _heads(call)
    products = lengths.g_sqsk + lengths.c_sqsk - lengths.c_sqsq / 2
    flops = 4.0 * h_q * d * products
    sq = lengths.c_sq + lengths.g_sq
    sk = lengths.c_sk + lengths.g_sk
    q_o = 2.0 * sq * h_q * d * q.itemsize
    k_v = 2.0 * sk * h_kv * d * kv.itemsize
    formula = (
        f"4·H_q·d·(Σsq·sk − ½Σsq² causal context) = 4·{h_q}·{d}·({lengths.g_sqsk}+{lengths.c_sqsk}−"
        f"{lengths.c_sqsq}/2) ({lengths.engine} step annotation); bytes = Q+O 2·{sq}·{h_q}·{d}·{q.itemsize} "
        f"+ K+V 2·{sk}·{h_kv}·{d}·{kv.itemsize} (H_kv from {heads_from}; KV-cache writes on their own op)"
    )
    return Cost(flops, q_o + k_v, q.precision, MATRIX, formula)
