"""Attention: SDPA, FlashAttention and efficient attention, forward and backward, with causal
and windowed masks; paged decode."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from kernel_atlas.core.devices import MATRIX, VECTOR
from kernel_atlas.ingest.recorded import Arg
from kernel_atlas.ingest.steps import StepLengths, is_native_step, parse_step
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
# token its whole context), and so does `aten::_scaled_dot_product_flash_attention`, which calls it
# (torch/nn/attention/bias.py: "for this particular op it means lower right"; SDPA never sends it a
# non-square causal call of its own). Square, both are one mask.
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
    call: Call,
    layout: str,
    causal: str | None,
    assumed: str = "",
    window: tuple[int, int] | None = None,
    lse: tuple[bool, str] = (False, ""),
) -> Cost:
    """QKᵀ and PV over the pairs kept of q, k, v (its first three arguments, `layout` BSHD or
    BHSD): 2 FLOP per MAC, Sq·Skv pairs (causal: `causal_pairs`; a sliding `window` (left,
    right): `window_pairs`); `assumed`: what the formula says it assumed. `lse`: whether the op
    writes a logsumexp — fp32, one per query row and head, B·H·Sq·4 bytes, which its backward
    reads; it had been left out of the bytes, campaign BH 8 —, and what the formula says of it
    (`_logsumexp`)."""
    q, k, v = tensor_at(call, 0, "query"), tensor_at(call, 1, "key"), tensor_at(call, 2, "value")
    b, h, sq, _, d, dv, pairs, kept = _attention_geometry(call, q, k, v, layout, causal, window)
    flops = 2.0 * b * h * pairs * (d + dv)
    out = b * h * sq * dv * q.itemsize
    read = q.nbytes + k.nbytes + v.nbytes
    writes_lse, said = lse
    stats = b * h * sq * 4 if writes_lse else 0
    formula = (
        f"2·B·H·pairs·(d+dv), pairs {kept}{assumed} = 2·{b}·{h}·{pairs:g}·({d}+{dv}); bytes = q+k+v {read} + out {out}"
        + (f" + logsumexp {stats} (B·H·Sq fp32: {b}·{h}·{sq}·4)" if writes_lse else "")
        + said
    )
    return Cost(flops, read + out + stats, q.precision, MATRIX, formula)


def _logsumexp(call: Call, index: int) -> tuple[bool, str]:
    """Whether an attention forward whose `compute_log_sumexp` flag is at `index` writes its
    logsumexp (`_attention`'s `lse`), and what the formula says where the flag is not recorded
    (none counted: an estimate). FlashAttention's forwards write one always."""
    flag = call.args[index].flag() if index < len(call.args) else None
    if flag is None:
        return False, " (compute_log_sumexp not recorded: no logsumexp counted)"
    return flag, ""


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


def _not_varlen(call: Call, index: int) -> None:
    """A dense call with cumulative sequence lengths (a tensor at `index`) packs its sequences
    into one: their lengths are values, not recorded, and the pack is no one sequence."""
    if optional_tensor_at(call, index) is not None:
        raise NoCost(f"{call.launcher} with cumulative sequence lengths (varlen): per-sequence lengths not recorded")


@register(launchers=("aten::_flash_attention_backward",))
def _flash_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, rng_state, unused, scale, window_size_left, window_size_right), [B, S, H, D]
    _not_varlen(call, 6)
    causal, assumed = _is_causal(call, 11, BOTTOM_RIGHT)
    return _attention_backward(call, "BSHD", causal, assumed, out_at=4, lse_at=5, window=_window(call, 15))


@register(launchers=("aten::_scaled_dot_product_flash_attention_backward",))
def _sdpa_flash_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, philox_seed, philox_offset, scale), [B, H, S, D]
    _not_varlen(call, 6)
    return _attention_backward(call, "BHSD", *_is_causal(call, 11, BOTTOM_RIGHT), out_at=4, lse_at=5)


@register(launchers=("aten::_efficient_attention_backward",))
def _efficient_backward(call: Call) -> Cost:
    # (grad_out_, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    # max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type,
    # bias_requires_grad, …), [B, S, H, D]
    _not_varlen(call, 6)
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
    _not_varlen(call, 9)
    return _attention_backward(call, "BHSD", *_is_causal(call, 14), out_at=4, lse_at=5, bias_at=8)


@register(launchers=("aten::_flash_attention_forward",))
def _flash_forward(call: Call) -> Cost:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...), [B, S, H, D]
    if len(call.args) > 3 and call.args[3].is_tensor:
        if call.step:
            return _paged_attention(call, mask=_flash_mask(call, 8, 11))
        raise NoCost(
            "aten::_flash_attention_forward with cumulative sequence lengths (varlen): "
            "per-sequence lengths not recorded"
        )
    return _attention(call, "BSHD", *_is_causal(call, 8, BOTTOM_RIGHT), window=_window(call, 11), lse=(True, ""))


# flash-attn ≥ 2.6's own torch.library ops (flash_attn/flash_attn_interface.py), q/k/v [B, S, H, D]
# and FlashAttention's causal diagonal at the bottom right: `_flash_attn_forward(q, k, v, dropout_p,
# softmax_scale, causal, window_size_left, window_size_right, softcap, alibi_slopes, return_softmax)`,
# `_flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale,
# causal, window_size_left, window_size_right, softcap, alibi_slopes, deterministic, rng_state)`
# (dq, dk, dv its preallocated outputs: written, counted at q, k, v's shapes). The varlen forward is
# `_FLASH_MASK_AT`'s, costed from the step.
@register(launchers=("flash_attn::_flash_attn_forward",))
def _flash_attn_forward(call: Call) -> Cost:
    return _attention(call, "BSHD", *_is_causal(call, 5, BOTTOM_RIGHT), window=_window(call, 6), lse=(True, ""))


@register(launchers=("flash_attn::_flash_attn_backward",))
def _flash_attn_backward(call: Call) -> Cost:
    causal, assumed = _is_causal(call, 11, BOTTOM_RIGHT)
    return _attention_backward(call, "BSHD", causal, assumed, out_at=4, lse_at=5, window=_window(call, 12))


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
    _not_varlen(call, 4)  # packed sequences [1, Σs, H, D]: not one sequence of Σs (as its backward)
    recorded = call.args[9] if len(call.args) > 9 and call.args[9].text.strip() else None
    mask = recorded.value if recorded is not None else 0  # not recorded: no mask assumed (said)
    if isinstance(mask, bool) or mask not in _MASK_TYPES:
        raise NoCost(f"{call.launcher}: custom_mask_type {recorded.text[:20]!r} is none of 0, 1, 2")  # type: ignore[union-attr]
    assumed = "" if recorded is not None else " (custom_mask_type not recorded: no mask assumed)"
    # compute_log_sumexp at 10 (the tensor is padded to a multiple of 32 rows; Sq of them written)
    return _attention(call, "BSHD", _MASK_TYPES[mask], assumed, lse=_logsumexp(call, 10))


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
    # the flash op runs FlashAttention's kernel: its diagonal at the bottom right (see TOP_LEFT),
    # and writes its logsumexp always; cuDNN's where compute_log_sumexp (4) asks; SDPA itself
    # returns none (its kernels run under the backend's own op, recorded beside it)
    flash = call.launcher == "aten::_scaled_dot_product_flash_attention"
    cudnn = call.launcher == "aten::_scaled_dot_product_cudnn_attention"
    lse = (True, "") if flash else _logsumexp(call, 4) if cudnn else (False, "")
    return _attention(call, "BHSD", *_is_causal(call, index, BOTTOM_RIGHT if flash else TOP_LEFT), lse=lse)


@register(launchers=("aten::_scaled_dot_product_efficient_attention",))
def _sdpa_efficient(call: Call) -> Cost:
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale)
    return _attention(call, "BHSD", *_is_causal(call, 6), lse=_logsumexp(call, 4))


@dataclass(frozen=True)
class _Mask:
    """What a serving attention call's own arguments say of its mask: `causal` (the context
    part's; decode tokens see their whole context either way), a sliding `window` (left, right)
    as FlashAttention counts it (query at p sees keys p − left … p + right, −1 unbounded), and
    what the formula says it read or assumed."""

    causal: bool = True
    window: tuple[int, int] | None = None
    said: str = ""  # empty: nothing read, causal context assumed (said where the step has a context part)


@dataclass(frozen=True)
class _Heads:
    """What a serving attention call's tensors say of its heads: the query (its dtype: Q read, O
    written), H_q, QKᵀ's head dim `d` and PV's `d_v` (None: d — DeepSeek's MLA prefill runs 192
    and 128), H_kv and the tensor K and V are read as (its dtype), where H_kv came from. `latent`:
    (elements, bytes each) per key of the rows that hold K and V together, read once — MLA's
    compressed c_kv (PV's V is its first d_v) and its rope part k_pe, or FA3's q_v split —; empty:
    K (d) and V (d_v) read apart, H_kv heads each."""

    q: Arg
    h_q: int
    d: int
    h_kv: int
    kv: Arg
    source: str
    d_v: int | None = None
    latent: tuple[tuple[int, int], ...] = ()

    @property
    def dv(self) -> int:
        return self.d if self.d_v is None else self.d_v

    def flops(self, pairs: float) -> float:
        """QKᵀ (d) and PV (d_v) over `pairs`, 2 FLOP per MAC, every query head."""
        return 2.0 * self.h_q * (self.d + self.dv) * pairs

    def factor(self) -> tuple[str, str]:
        """The FLOPs per pair in words and numbers: 4·H_q·d where d_v = d."""
        if self.dv == self.d:
            return "4·H_q·d", f"4·{self.h_q}·{self.d}"
        return "2·H_q·(d_qk+d_v)", f"2·{self.h_q}·({self.d}+{self.dv})"

    def q_o(self, sq: int) -> tuple[float, str]:
        """Q read (d) and O written (d_v), Σsq rows of H_q heads, at the query's dtype."""
        size = self.q.itemsize
        if self.dv == self.d:
            return 2.0 * sq * self.h_q * self.d * size, f"Q+O 2·{sq}·{self.h_q}·{self.d}·{size}"
        return float(sq * self.h_q * (self.d + self.dv) * size), f"Q+O {sq}·{self.h_q}·({self.d}+{self.dv})·{size}"

    def k_v(self, sk: int) -> tuple[float, str]:
        """K and V read for `sk` keys, and the formula's words for them and where H_kv came from
        (its parenthesis left open for the caller's)."""
        if self.latent:
            row = sum(n * size for n, size in self.latent)
            parts = "+".join(f"{n}·{size}" for n, size in self.latent)
            said = f"K,V {sk}·({parts}) (one latent row per key holds K and V, read once; {self.source}"
            return float(sk * row), said
        size = self.kv.itemsize
        if self.dv == self.d:
            said = f"K+V 2·{sk}·{self.h_kv}·{self.d}·{size} (H_kv from {self.source}"
            return 2.0 * sk * self.h_kv * self.d * size, said
        return float(sk * self.h_kv * (self.d + self.dv) * size), (
            f"K+V {sk}·{self.h_kv}·({self.d}+{self.dv})·{size} (H_kv from {self.source}"
        )


def _flash_mask(call: Call, causal_at: int, window_at: int) -> _Mask:
    """The mask of a FlashAttention-style call: a boolean `is_causal` at `causal_at` and integer
    window sides at `window_at`, `window_at + 1`. Where those positions do not hold a bool and two
    ints (another version of the schema), nothing is read and causal is assumed, said."""
    flag = call.args[causal_at].value if causal_at < len(call.args) else None
    sides = [call.args[i].value if i < len(call.args) else None for i in (window_at, window_at + 1)]
    if not isinstance(flag, bool) or not all(isinstance(v, int) and not isinstance(v, bool) for v in sides):
        where = f"{causal_at}, {window_at}"
        return _Mask(said=f" (is_causal/window not recorded at arguments {where}: causal context assumed)")
    window = _window(call, window_at)
    shown = "" if window is None else f", window_size_left {sides[0]}, window_size_right {sides[1]}"
    return _Mask(flag, window, f" (is_causal {flag}{shown} recorded)")


# FlashAttention's varlen/paged ops: where `is_causal`, the two window sides and FA3's `q_v` sit
# (q, k, v first in each). vLLM's (vllm-project/flash-attention): fa2 `varlen_fwd(q, k, v, out,
# cu_seqlens_q, cu_seqlens_k, seqused_k, leftpad_k, block_table, alibi_slopes, max_seqlen_q,
# max_seqlen_k, p_dropout, softmax_scale, zero_tensors, is_causal, window_size_left,
# window_size_right, softcap, return_softmax, gen)`; fa3 `fwd(q, k, v, k_new, v_new, q_v, out,
# cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k,
# page_table, kv_batch_idx, leftpad_k, rotary_cos, rotary_sin, seqlens_rotary, q_descale,
# k_descale, v_descale, softmax_scale, is_causal, window_size_left, window_size_right, softcap, …)`.
# flash-attn ≥ 2.6's own torch.library op (flash_attn/flash_attn_interface.py)
# `_flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
# dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap, alibi_slopes,
# return_softmax, block_table, …)`. Their K/V are [tokens, H_kv, d], paged [pages, page_size, H_kv, d].
_FLASH_MASK_AT: dict[str, tuple[int, int, int | None]] = {
    "_vllm_fa2_C::varlen_fwd": (15, 16, None),
    "vllm_flash_attn_c::varlen_fwd": (15, 16, None),
    "_vllm_fa3_C::fwd": (24, 25, 5),
    "sgl_kernel::fwd": (24, 25, 5),  # sgl-kernel's FA3 (flash_extension.cc): fa3's schema up to sm_margin
    "flash_attn::_flash_attn_varlen_forward": (9, 10, None),
}


def _flash_heads(call: Call, q_v_at: int | None) -> _Heads | None:
    """Heads of a FlashAttention varlen/paged call (`_FLASH_MASK_AT`): q [tokens, H_q, d], k and v
    [tokens, H_kv, d] or paged [pages, page_size, H_kv, d] at 0, 1, 2 — FlashAttention's one layout,
    H_kv at axis −2 —, d_v from v's last axis. FA3's `q_v` (vLLM's MLA on FA3: q the rope part
    q_pe, k the k_pe cache, v the c_kv cache, q_v the query's c_kv part against v): QKᵀ over
    d + d_v, each key's k and v rows read once. None where the positions hold something else."""
    q, k, v = (optional_tensor_at(call, i) for i in (0, 1, 2))
    if q is None or k is None or v is None or len(q.dims) != 3 or len(k.dims) not in (3, 4):
        return None
    _, h_q, d = q.dims
    h_kv, d_v = k.dims[-2], v.dims[-1]
    if len(v.dims) != len(k.dims) or k.dims[-1] != d or v.dims[-2] != h_kv or h_kv <= 0 or h_q % h_kv:
        return None
    source = "K's axis −2, FlashAttention's [tokens, H_kv, d] or paged [pages, page_size, H_kv, d]"
    q_v = optional_tensor_at(call, q_v_at) if q_v_at is not None else None
    if q_v is None:
        return _Heads(q, h_q, d, h_kv, k, source, d_v)
    if len(q_v.dims) != 3 or list(q_v.dims[:2]) != list(q.dims[:2]) or q_v.dims[-1] != d_v:
        return None
    rows = ((h_kv * d, k.itemsize), (h_kv * d_v, v.itemsize))
    return _Heads(q, h_q, d + d_v, h_kv, k, f"q_v [T, H_q, {d_v}] recorded: QKᵀ over {d}+{d_v}; {source}", d_v, rows)


# FlashInfer's run ops (their launchers are named after the JIT module: `batch_decode_with_kv_cache_
# dtype_q_bf16_…::run`, `batch_prefill_with_kv_cache_…::paged_run` / `::ragged_run`): decode
# `run(float_workspace, int_workspace, plan_info, q, paged_k_cache, paged_v_cache, kv_indptr,
# kv_indices, kv_last_page_len, o, maybe_lse, kv_layout_code, window_left, …)`; prefill `paged_run(…,
# q, paged_k_cache, paged_v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, o, maybe_lse,
# mask_mode, layout, window_left, …)`; `ragged_run(…, q, k, v, qo_indptr, kv_indptr, o, maybe_lse,
# mask_mode, layout, window_left, …)`. (query, K, mask_mode or None, layout, window_left) positions;
# V follows K (its last axis d_v: `head_dim_vo`, 128 against `head_dim_qk` 192 in DeepSeek's prefill).
_FLASHINFER = (
    (re.compile(r"batch_decode_with\w*(?:::|_)run$"), (3, 4, None, 11, 12)),
    (re.compile(r"batch_prefill_with\w*(?:::|_)paged_run$"), (3, 4, 12, 13, 14)),
    (re.compile(r"batch_prefill_with\w*(?:::|_)ragged_run$"), (3, 4, 10, 11, 12)),
)
_FLASHINFER_LAYOUTS = {0: ("NHD", -2), 1: ("HND", -3)}  # QKVLayout: where H_kv sits in K and V
# FlashInfer's MaskMode: 0 none, 1 causal; 2 (custom) and 3 (multi-item scoring) keep the causal assumption
_FLASHINFER_MASKS = {0: False, 1: True}


def _flashinfer(call: Call) -> tuple[_Heads, _Mask, int | None] | None:
    """Heads and mask of a FlashInfer run op whose arguments sit where its schema puts them
    (`_FLASHINFER`): H_kv from K's axis −2 (NHD) or −3 (HND) as `kv_layout_code` says, d_v from
    V's last axis; the prefill's `mask_mode`; `window_left` (query at p sees keys p − window_left …
    p); and a ragged run's key count (its K's token axis: every key it reads, None for the paged
    runs). None where the launcher is none of them or the positions hold something else."""
    at = next((where for pattern, where in _FLASHINFER if pattern.search(call.launcher)), None)
    if at is None:
        return None
    q_at, k_at, mask_at, layout_at, window_at = at
    q, k, v = optional_tensor_at(call, q_at), optional_tensor_at(call, k_at), optional_tensor_at(call, k_at + 1)
    layout, left = concrete_int(call, layout_at), concrete_int(call, window_at)
    mode = concrete_int(call, mask_at) if mask_at is not None else None
    if q is None or k is None or len(q.dims) != 3 or len(k.dims) < 3 or layout not in _FLASHINFER_LAYOUTS:
        return None
    if left is None or (mask_at is not None and mode is None):
        return None
    name, axis = _FLASHINFER_LAYOUTS[layout]
    _, h_q, d = q.dims
    h_kv = k.dims[axis]
    if k.dims[-1] != d or h_kv <= 0 or h_q % h_kv:
        return None
    d_v = v.dims[-1] if v is not None and len(v.dims) == len(k.dims) and v.dims[axis] == h_kv else None
    heads = _Heads(q, h_q, d, h_kv, k, f"K's axis {axis}, kv_layout {layout} ({name}) recorded", d_v)
    # a ragged K is [keys, H_kv, d] (NHD) or [H_kv, keys, d] (HND)
    keys = k.dims[-3 if axis == -2 else -2] if "ragged_run" in call.launcher and len(k.dims) == 3 else None
    window = (left, -1) if left >= 0 else None  # FlashInfer's window has no right side
    shown = [f"window_left {left}"] if window is not None else []
    if mode is None:  # decode: one query per request, which sees its whole context (or its window)
        return heads, _Mask(True, window, f" ({shown[0]} recorded)" if shown else ""), keys
    if mode not in _FLASHINFER_MASKS:
        return heads, _Mask(True, window, f" (mask_mode {mode}: its mask not recorded, causal assumed)"), keys
    said = f" ({', '.join([f'mask_mode {mode}', *shown])} recorded)"
    return heads, _Mask(_FLASHINFER_MASKS[mode], window, said), keys


# MLA (DeepSeek's multi-head latent attention) serving ops. Each key is one latent row — c_kv
# (d_c = kv_lora_rank, 512) and its rope part k_pe (d_r, 64) — of one head that every query head
# reads: QKᵀ runs over d_c + d_r (q_nope·c_kv + q_pe·k_pe), PV over V = c_kv (d_v = d_c), and the
# row is read once for both. (q_nope, q_pe or None — one query [T, H_q, d_c + d_r] —, the c_kv
# cache, the k_pe cache or None — one cache of d_c + d_r rows —, out) positions, tried in turn:
# FlashInfer `batch_mla_attention_…::run(float_ws, int_ws, plan_info, q_nope, q_pe, ckv_cache,
# kpe_cache, kv_indices, o, maybe_lse, mask_mode, num_heads, page_size, sm_scale, …)` (csrc/
# batch_mla_run.cu; its sm90 variant alike), caches [pages, page_size, d]; FlashInfer
# `batch_decode_mla_with_kv_cache_…::run(float_ws, int_ws, plan_info, q_nope, q_pe, paged_ckv_cache,
# paged_kpe_cache, kv_indptr, kv_indices, kv_last_page_len, o, sm_scale, window_left, …)`;
# sgl-kernel `cutlass_mla_decode(out, q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table,
# workspace, sm_scale, num_kv_splits)` (its first version `(out, q_nope_and_q_pe,
# kv_c_and_k_pe_cache, …)`), vLLM `_C::cutlass_mla_decode(out, q_nope, q_pe, kv_c_and_k_pe_cache,
# seq_lens, page_table, scale)` and `_C::sm100_cutlass_mla_decode(out, lse, q_nope, q_pe,
# kv_c_and_k_pe_cache, …)`. (pattern, layouts, mask_mode position, window_left position)
_MLA = (
    (re.compile(r"batch_mla_attention\w*(?:::|_)run$"), ((3, 4, 5, 6, 8),), 10, None),
    (re.compile(r"batch_decode_mla_with\w*(?:::|_)run$"), ((3, 4, 5, 6, 10),), None, 12),
    (re.compile(r"(?:^|::)cutlass_mla_decode$"), ((1, 2, 3, None, 0), (1, None, 2, None, 0)), None, None),
    (re.compile(r"(?:^|::)sm100_cutlass_mla_decode$"), ((2, 3, 4, None, 0),), None, None),
)
# FlashMLA `fwd_kvcache_mla(q [B, s_q, H_q, d_qk], kcache [blocks, page_size, H_kv, d_qk],
# head_size_v, seqlens_k, block_table, softmax_scale, is_causal, tile_scheduler_metadata,
# num_splits, …, indices)` (vLLM's `_flashmla_C`, sgl-kernel's `fwd_kvcache_mla`; FlashMLA's own
# binding has an optional vcache, None, before head_size_v): V is the first head_size_v of each K
# row, one cache read once. An fp8 cache (uint8 rows of 656 bytes: 512 fp8, scales, 64 bf16) is
# read as recorded.
_FLASH_MLA = re.compile(r"(?:^|::)fwd_kvcache_mla$")


def _mla_heads(call: Call, layout: tuple[int, int | None, int, int | None, int]) -> _Heads | None:
    """Heads of an MLA call whose tensors sit at `layout` (see `_MLA`), else None."""
    q_at, pe_at, ckv_at, kpe_at, out_at = layout
    q, ckv, out = optional_tensor_at(call, q_at), optional_tensor_at(call, ckv_at), optional_tensor_at(call, out_at)
    pe = optional_tensor_at(call, pe_at) if pe_at is not None else None
    kpe = optional_tensor_at(call, kpe_at) if kpe_at is not None else None
    if q is None or ckv is None or len(q.dims) != 3 or (pe_at is None) != (pe is None):
        return None
    if (kpe_at is None) != (kpe is None):
        return None
    _, h_q, d_c = q.dims
    if pe is not None and (len(pe.dims) != 3 or list(pe.dims[:2]) != list(q.dims[:2])):
        return None
    d_r = pe.dims[-1] if pe is not None else 0
    caches = [ckv, *([kpe] if kpe is not None else [])]
    # [pages, page_size, d] or [pages, page_size, 1, d] (one latent head); the rows hold QKᵀ's d
    if any(len(c.dims) not in (2, 3, 4) or (len(c.dims) == 4 and c.dims[-2] != 1) for c in caches):
        return None
    if sum(c.dims[-1] for c in caches) != d_c + d_r or (kpe is not None and ckv.dims[-1] != d_c):
        return None
    if pe is not None:
        d_v = d_c
    elif out is not None and len(out.dims) == 3 and list(out.dims[:2]) == list(q.dims[:2]) and out.dims[-1] < d_c:
        d_v = out.dims[-1]  # one query of d_c + d_r: PV's width is the output's
    else:
        return None
    latent = tuple((c.dims[-1], c.itemsize) for c in caches)
    return _Heads(q, h_q, d_c + d_r, 1, ckv, f"MLA, d_qk {d_c}+{d_r}, d_v {d_v}, one latent head", d_v, latent)


def _mla(call: Call) -> tuple[_Heads, _Mask]:
    """Heads and mask of an MLA op (`_MLA`, `_FLASH_MLA`): NoCost where its tensors are not where
    its schema puts them — an MLA call is never costed as multi-head attention, whose K and V at
    the c_kv width (and a page size read as heads) are no part of it."""
    if _FLASH_MLA.search(call.launcher):
        flash = _flash_mla(call)
        if flash is None:
            raise NoCost(
                f"{call.what}: FlashMLA call whose q [B, s_q, H_q, d], kcache [blocks, page_size, H_kv, d] and "
                "head_size_v are not where its schema puts them"
            )
        return flash
    _, layouts, mask_at, window_at = next(entry for entry in _MLA if entry[0].search(call.launcher))
    heads = next((h for h in (_mla_heads(call, layout) for layout in layouts) if h is not None), None)
    if heads is None:
        raise NoCost(
            f"{call.what}: MLA call whose q_nope/q_pe and latent c_kv/k_pe caches are not where its schema puts "
            "them (its QKᵀ width, d_v and the latent row per key unknown)"
        )
    if mask_at is not None:
        mode = concrete_int(call, mask_at)
        if mode in _FLASHINFER_MASKS:
            return heads, _Mask(_FLASHINFER_MASKS[mode], None, f" (mask_mode {mode} recorded)")
        return heads, _Mask(said=f" (mask_mode {mode if mode is not None else 'not recorded'}: causal assumed)")
    left = concrete_int(call, window_at) if window_at is not None else None
    if left is not None and left >= 0:
        return heads, _Mask(True, (left, -1), f" (window_left {left} recorded)")
    return heads, _Mask()  # decode kernels: every query sees its whole context


def _flash_mla(call: Call) -> tuple[_Heads, _Mask] | None:
    """Heads and mask of FlashMLA's `fwd_kvcache_mla` (`_FLASH_MLA`), else None."""
    q, cache = optional_tensor_at(call, 0), optional_tensor_at(call, 1)
    dv_at = next((i for i in (2, 3) if concrete_int(call, i) is not None), None)
    if q is None or cache is None or dv_at is None or len(q.dims) != 4 or len(cache.dims) != 4:
        return None
    if optional_tensor_at(call, dv_at + 8) is not None:  # sparse (top-k indices): the keys each query sees unknown
        raise NoCost(f"{call.what}: sparse FlashMLA (top-k indices recorded): the keys each query reads are values")
    _, _, h_q, d = q.dims
    h_kv, d_v = cache.dims[-2], concrete_int(call, dv_at) or 0
    if h_kv <= 0 or h_q % h_kv or not 0 < d_v < d:
        return None
    flag = call.args[dv_at + 4].flag() if dv_at + 4 < len(call.args) else None
    mask = _Mask() if flag is None else _Mask(flag, None, f" (is_causal {flag} recorded)")
    source = f"MLA, the cache's axis −2 (FlashMLA's [blocks, page_size, H_kv, d]), head_size_v {d_v} recorded"
    return _Heads(q, h_q, d, h_kv, cache, source, d_v, ((h_kv * cache.dims[-1], cache.itemsize),)), mask


# TRT-LLM's generation and context kernels through FlashInfer (csrc/trtllm_fmha_kernel_launcher.cu):
# `trtllm_paged_attention_decode/_context(out, out_scale_factor, query, key_cache, value_cache,
# workspace, …)`, its 2025 versions `(out, query, key_value_cache, workspace, …)` and `(out,
# out_scale_factor, query, key_value_cache, …)` — the query right before the cache in each. The
# cache is TRT-LLM's HND layout in every version ("Assume HND layout after Python-side transpose:
# [..., H, N, D]"): [pages, 2, H_kv, page_size, d] or K and V caches [pages, H_kv, page_size, d],
# H_kv at axis −3 (its axis −2 is the page size). K's head dim is the query's; out's last axis is
# d_v: MLA (576 against 512) reads K and V from one cache of d-wide latent rows.
_TRTLLM = re.compile(r"trtllm_paged_attention_(?:decode|context)$")


def _trtllm(call: Call) -> tuple[_Heads, _Mask]:
    """Heads of a TRT-LLM paged attention call (`_TRTLLM`); NoCost where its tensors do not fit."""
    ranked = [(i, a) for i, a in enumerate(call.args) if a.is_tensor and i > 0]
    cache_at = next((i for i, a in ranked if len(a.dims) >= 4), None)
    q_at = max((i for i, a in ranked if len(a.dims) == 3 and cache_at is not None and i < cache_at), default=None)
    if cache_at is None or q_at is None:
        raise NoCost(f"{call.what}: no query [tokens, H_q, d] before a paged KV cache recorded")
    q, cache, out = call.args[q_at], call.args[cache_at], optional_tensor_at(call, 0)
    _, h_q, d = q.dims
    h_kv = cache.dims[-3]
    if cache.dims[-1] != d or h_kv <= 0 or h_q % h_kv:
        raise NoCost(f"{call.what}: KV cache {list(cache.dims)} is not TRT-LLM's HND [pages, (2,) H_kv, page, {d}]")
    d_v = out.dims[-1] if out is not None and len(out.dims) == 3 else d
    source = "the KV cache's axis −3, TRT-LLM's HND [pages, (2,) H_kv, page_size, d]"
    latent = ((h_kv * d, cache.itemsize),) if d_v != d else ()  # MLA: K and V one cache
    return _Heads(q, h_q, d, h_kv, cache, source, d_v, latent), _Mask()


@register(ops=("attention",))
def _attention_step(call: Call) -> Cost:
    if _FLASH_MLA.search(call.launcher) or any(entry[0].search(call.launcher) for entry in _MLA):
        _step_lengths(call)  # without one: the note every serving attention call gives
        return _paged_attention(call, *_mla(call))
    if _TRTLLM.search(call.launcher):
        _step_lengths(call)
        return _paged_attention(call, *_trtllm(call))
    dense = [a for a in tensors_of(call)[:3] if len(a.dims) == 4]
    if not call.step and len(dense) == 3 and dense[0].dims[0] == dense[1].dims[0]:
        # a library's dense attention (e.g. aiter's sage_fwd) with no known argument layout
        raise NoCost(
            f"{call.what}: dense q/k/v {list(dense[0].dims)} recorded, but not their layout (which axis is "
            "heads, which sequence: [B, S, H, D] or [B, H, S, D]) nor whether it is causal"
        )
    if call.launcher in _FLASH_MASK_AT:
        causal_at, window_at, q_v_at = _FLASH_MASK_AT[call.launcher]
        return _paged_attention(call, _flash_heads(call, q_v_at), _flash_mask(call, causal_at, window_at))
    flashinfer = _flashinfer(call)
    if flashinfer is not None:
        return _paged_attention(call, *flashinfer)
    return _paged_attention(call)


# vLLM's paged decode ops: `paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads,
# scale, block_tables, seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, …)`;
# `paged_attention_v2` and ROCm's `paged_attention` put `exp_sums, max_logits, tmp_out` between
# out and query. Their caches are key_cache [blocks, H_kv, d/x, block_size, x] and value_cache
# [blocks, H_kv, d, block_size] (an fp8 cache is recorded uint8: 1 byte).
_VLLM_PAGED_QUERY_AT = {"_C::paged_attention_v1": 1, "_C::paged_attention_v2": 4, "_rocm_C::paged_attention": 4}


@register(launchers=tuple(_VLLM_PAGED_QUERY_AT))
def _vllm_paged(call: Call) -> Cost:
    at = _VLLM_PAGED_QUERY_AT[call.launcher]
    q, key_cache = tensor_at(call, at, "query"), tensor_at(call, at + 1, "key_cache")
    if len(q.dims) != 3 or len(key_cache.dims) < 2:
        raise NoCost(f"{call.what}: query {list(q.dims)} not [seqs, heads, head_dim], or a key cache without heads")
    _, h_q, d = q.dims
    recorded = concrete_int(call, at + 3)
    h_kv, source = (
        (recorded, "num_kv_heads")
        if recorded is not None and recorded > 0
        else (key_cache.dims[1], "the key cache's axis 1, vLLM's [blocks, H_kv, d/x, block_size, x]")
    )
    if h_kv <= 0 or h_q % h_kv:
        raise NoCost(f"{call.what}: {h_q} query heads are no multiple of {h_kv} KV heads ({source})")
    return _paged_attention(call, _Heads(q, h_q, d, h_kv, key_cache, source), _Mask(said=""))


# Merging two partial attention results (split KV, a cached prefix and the new tokens): sgl-kernel
# `merge_state(v_a, s_a, v_b, s_b, v_merged, s_merged)` (and `merge_state_v2`), vLLM
# `merge_attn_states(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, …)`:
# (the two partial outputs and their log-sum-exps read, the merged ones written) positions
_MERGES = {
    "sgl_kernel::merge_state": ((0, 1, 2, 3), (4, 5)),
    "sgl_kernel::merge_state_v2": ((0, 1, 2, 3), (4, 5)),
    "_C::merge_attn_states": ((2, 3, 4, 5), (0, 1)),
}
MERGE_FLOPS_PER_ELEMENT = 3  # v_a·w_a + v_b·w_b per output element; the per-(token, head) weights not counted


@register(launchers=tuple(_MERGES))
def _merge_states(call: Call) -> Cost:
    """Merging two partial attention outputs v [T, H, d] by their log-sum-exps s [T, H] (fp32):
    each merged element is v_a·w_a + v_b·w_b (3 FLOP; the weights, a few FLOP per token and head,
    not counted); bytes = both partials and both log-sum-exps read, the merged output (and its
    log-sum-exp, where one is passed) written. No attention is computed: no sequence lengths used."""
    read_at, (out_at, lse_at) = _MERGES[call.launcher]
    names = ("v_a", "s_a", "v_b", "s_b")
    v_a, s_a, v_b, s_b = (tensor_at(call, i, name) for i, name in zip(read_at, names, strict=True))
    out, lse = optional_tensor_at(call, out_at) or v_a, optional_tensor_at(call, lse_at)
    read = v_a.nbytes + s_a.nbytes + v_b.nbytes + s_b.nbytes
    written = out.numel * out.itemsize + (lse.numel * lse.itemsize if lse is not None else 0)
    flops = MERGE_FLOPS_PER_ELEMENT * out.numel
    formula = (
        f"merge of two partial attention outputs: {MERGE_FLOPS_PER_ELEMENT} FLOP per merged element "
        f"(v_a·w_a + v_b·w_b) · {out.numel}; bytes = 2 partials + 2 log-sum-exps {read} read + merged output"
        f"{' and log-sum-exp' if lse is not None else ''} {written} written"
    )
    return Cost(float(flops), read + written, v_a.precision, VECTOR, formula)


def _heads(call: Call) -> _Heads:
    """query [T, H_q, d] and the KV heads: from a [T, H_kv, d] key (H_kv < H_q), else the
    second-to-last axis of a KV cache ([blocks, block_size, H_kv, d], [2, blocks, block_size,
    H_kv, d]: the NHD layout, which the formula then says it assumed: an HND cache's axis −2 is
    its page size), else H_q (MHA, only [T, H, d] tensors); H_q must be a multiple of H_kv.
    Returns the query, H_q, d (d_v = d: the schema is unknown, and so is which tensor is V), H_kv,
    the tensor the K/V are read as — the cache where one is recorded, for its dtype —, and where
    H_kv came from."""
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
        return _Heads(q, h_q, d, keys[0].dims[-2], cache or keys[0], "key")
    if cache is not None:
        return _Heads(q, h_q, d, cache.dims[-2], cache, "the KV cache's axis −2, NHD layout assumed")
    # MHA with only [T, H, d] tensors recorded: K/V heads equal the query's
    same = [a for a in fits if len(a.dims) == 3]
    if not same:
        raise NoCost(f"{call.what}: the KV heads are not recorded (no key or KV-cache tensor with head_dim {d})")
    return _Heads(q, h_q, d, same[0].dims[-2], same[0], "key")


def _reach(mask: _Mask) -> int | None:
    """The most keys one query sees in `mask`'s sliding window: left + 1 (+ right where not
    causal); None where a side it needs is unbounded."""
    if mask.window is None:
        return None
    left, right = mask.window
    right = 0 if mask.causal else right
    return left + right + 1 if left >= 0 and right >= 0 else None


def _step_lengths(call: Call) -> StepLengths:
    """The sequence-length sums of the step annotation enclosing the launch; NoCost saying what is
    missing where there is none (or only an engine's native one, which has no Σ sq·sk)."""
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
    return lengths


def _paged_attention(
    call: Call,
    heads: _Heads | None = None,
    mask: _Mask | None = None,
    ragged_keys: int | None = None,
) -> Cost:
    """Attention over a batch of variable-length requests (paged KV cache, ragged/varlen
    layouts): sequence lengths from the step annotation enclosing the launch, heads from the
    recorded query and key/cache (`heads`, where the caller read them from a known schema).
    FLOPs = 2·H_q·(d + d_v)·(Σ sq·sk of decode + Σ sq·sk − ½ Σ sq² of the causal context part) —
    4·H_q·d·(…) where d_v = d —, as FlashAttention's benchmarks and TraceLens count (a `mask`
    recorded not causal: Σ sq·sk of the context part whole); bytes = Q (Σ sq·H_q·d) and O
    (Σ sq·H_q·d_v) + K and V read (Σ sk·H_kv·(d + d_v) at the cache's dtype; MLA's latent rows,
    which hold both, once per key: `_Heads.k_v`). A sliding window where each query sees at most
    W keys: pairs at most Σ sq·W (causal context Σ sq·(W − ½), its diagonal's half as
    `window_pairs` counts) and keys read at most Σ sq·W, per part — exact for decode when every
    context is at least W (the step records only sums, not each request's length: otherwise an
    upper bound, said).

    A ragged run whose K holds one key per query (`ragged_keys` = Σ sq of the step, fewer than its
    Σ sk) attends each request's new tokens to themselves — SGLang's split of an extend over a
    cached prefix: this call over the new tokens, a paged call over the prefix, then a merge —:
    pairs ½ Σ sq² causal (Σ sq² not), keys read Σ sq."""
    mask = mask if mask is not None else _Mask()
    lengths = _step_lengths(call)
    heads = heads if heads is not None else _heads(call)
    if ragged_keys is not None and ragged_keys == lengths.c_sq + lengths.g_sq < lengths.c_sk + lengths.g_sk:
        return _new_tokens_attention(call, lengths, heads, mask)
    context = lengths.c_sqsk - lengths.c_sqsq / 2 if mask.causal else float(lengths.c_sqsk)
    context_said = f"{lengths.c_sqsk}−{lengths.c_sqsq}/2 causal context" if mask.causal else f"{lengths.c_sqsk} context"
    said = mask.said or (" (no mask argument read: causal context assumed)" if lengths.c_sq else "")
    decode, keys_c, keys_g = float(lengths.g_sqsk), lengths.c_sk, lengths.g_sk
    reach = _reach(mask)
    window_said = ""
    if reach is not None:
        context = min(context, lengths.c_sq * (reach - 0.5 if mask.causal else reach))
        decode = min(decode, lengths.g_sq * reach)
        keys_c, keys_g = min(keys_c, lengths.c_sq * reach), min(keys_g, lengths.g_sq * reach)
        window_said = (
            f"; sliding window of W = {reach} keys per query: pairs ≤ Σsq·W per part (causal context "
            f"Σsq·(W−½)), keys read ≤ Σsq·W — an estimate, exact for decode where every context holds W keys, "
            "else an upper bound (the step records sums, not each request's length)"
        )
    words, numbers = heads.factor()
    q_o, q_o_said = heads.q_o(lengths.c_sq + lengths.g_sq)
    k_v, k_v_said = heads.k_v(keys_c + keys_g)
    formula = (
        f"{words}·(Σsq·sk decode + {'Σsq·sk − ½Σsq² causal context' if mask.causal else 'Σsq·sk context, no mask'})"
        f"{said}{window_said} = {numbers}·({decode:g} decode + {context:g} context: {context_said}) "
        f"({lengths.engine} step annotation); bytes = {q_o_said} + {k_v_said}; KV-cache writes on their own op)"
    )
    return Cost(heads.flops(decode + context), q_o + k_v, heads.q.precision, MATRIX, formula)


def _new_tokens_attention(call: Call, lengths: StepLengths, heads: _Heads, mask: _Mask) -> Cost:
    """A ragged run over each request's new tokens alone (see `_paged_attention`): every request's
    sq queries see its own sq keys — ½ Σ sq² pairs causal (Σ sq² not), keys read Σ sq; a sliding
    window of W keys bounds the pairs by Σ sq·W as in `_paged_attention`."""
    sq = lengths.c_sq + lengths.g_sq
    squares = lengths.c_sqsq + lengths.g_sqsq
    pairs = squares / 2 if mask.causal else float(squares)
    reach = _reach(mask)
    bound = ""
    if reach is not None and sq * (reach - 0.5 if mask.causal else reach) < pairs:
        pairs = sq * (reach - 0.5 if mask.causal else reach)
        bound = f"; sliding window of W = {reach}: ≤ Σsq·W pairs — an estimate, an upper bound"
    said = mask.said or " (no mask argument read: causal assumed)"
    words, numbers = heads.factor()
    q_o, q_o_said = heads.q_o(sq)
    k_v, k_v_said = heads.k_v(sq)
    formula = (
        f"{words}·({'½Σsq²' if mask.causal else 'Σsq²'}: the new tokens' keys alone, K holding Σsq = {sq} "
        f"of the step's Σsk = {lengths.c_sk + lengths.g_sk}, a cached prefix attended on another call){said}{bound} "
        f"= {numbers}·{pairs:g} ({lengths.engine} step annotation); bytes = {q_o_said} + {k_v_said})"
    )
    return Cost(heads.flops(pairs), q_o + k_v, heads.q.precision, MATRIX, formula)
