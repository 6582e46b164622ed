"""Attention and rotary-embedding kernels of flashinfer / sgl-kernel.

flashinfer's batch attention ops record workspaces, the query, the whole KV pool and the index
arrays, not the sequence lengths. Requests and KV lengths come from the index arrays that follow
the KV cache (decode: kv_indptr, kv_indices, last_page_len; paged prefill: qo_indptr first):
requests = len(kv_indptr) − 1, KV tokens = len(kv_indices) × page size, split evenly; or from
`--batch` / `--seq-len` (`Target.batch`, `Target.seq_len`). The label states what was assumed.
On a GPU with flashinfer installed, decode and paged prefill run flashinfer's own wrappers on a
page-size-1 pool with those lengths; otherwise (and for ragged prefill, FA3 and MLA) a stated
stand-in: scaled-dot-product attention over the gathered KV pages (MLA in its absorbed form).
The check compares the timed call's output with a float64 loop over requests.

Which kernel it is comes from its label: the rule says flashinfer or FlashAttention, decode or
prefill, and a prefill's mask mode where the kernel's template arguments state it
(catalogs/rules.toml `flashinfer-decode`, `flashinfer-prefill-causal`, …).

Rotary embedding: flashinfer's `BatchQKApplyRotaryPosIdsCosSinCache*<interleave, …>` kernels
take `interleave` as their first template argument (true: GPT-J pairs, false: NeoX halves);
vLLM/sgl-kernel's `rotary_embedding_kernel<T, IS_NEOX>` the NeoX flag as their second. The
classifier reads them (rules `rope-interleaved`, `rope-neox`); other rotary kernels are replayed
with NeoX halves, and the label says it was assumed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import SCALAR, positional_shapes
from kernel_atlas.replay.aten import KERNEL, STAND_IN, Case
from kernel_atlas.replay.checks import combine, compare
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compute_dtype, label, scaled
from kernel_atlas.replay.kernels.flashinfer_ops import flashinfer_module
from kernel_atlas.replay.values import generator, randn

PREFILL_RULES = ("flashinfer-prefill", "flashinfer-prefill-causal", "flashinfer-prefill-noncausal")
CAUSAL_BY_RULE = {"flashinfer-prefill-causal": True, "flashinfer-prefill-noncausal": False}  # MaskMode 1 / 0


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q [Sq, Hq, D], k/v [Skv, Hk, D] → [Sq, Hq, Dv] with grouped-query heads; a causal mask is
    aligned to the end of the KV sequence (the queries are its last Sq tokens)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    mask = None
    if causal and q.shape[0] > 1:
        offset = k.shape[0] - q.shape[0]
        rows = torch.arange(q.shape[0], device=q.device)[:, None]
        mask = torch.arange(k.shape[0], device=q.device)[None, :] <= rows + offset
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
    return out.transpose(0, 1)


def _lengths(target: Any, tensors: list[tuple[int, ...]], q_index: int) -> dict[str, Any]:
    """Requests, query and KV tokens per request, page size and kind, from the recorded arrays."""
    tokens = tensors[q_index][0]
    caches = [i for i, p in enumerate(tensors) if len(p) == 4 and i > q_index]
    ragged = not caches
    after = caches[-1] + 1 if caches else q_index + 3  # ragged: q, k, v, then the index arrays
    vectors = []
    for p in tensors[after:]:
        if len(p) != 1:
            break
        vectors.append(p[0])
    page_size = tensors[caches[0]][1] if caches else 1
    family = rule_id(target.label_rule) or ""
    if family == "flash-attention":
        # FlashAttention-3 (varlen): cu_seqlens_q, cu_seqlens_k, seqused_k, then a page table; the
        # KV lengths are values of seqused_k, not recorded
        kind, indptr, indices = "varlen (FA3)", (vectors[0] if vectors else 2), 0
    elif ragged:  # qo_indptr, kv_indptr
        kind, indptr, indices = "ragged prefill", (vectors[0] if vectors else 2), 0
    elif family in PREFILL_RULES:  # qo_indptr, kv_indptr, kv_indices, kv_last_page_len
        kind = "paged prefill"
        indptr, indices = (vectors[1], vectors[2]) if len(vectors) >= 3 else (vectors[0] if vectors else 2, 0)
    else:  # decode: kv_indptr, kv_indices, kv_last_page_len
        kind = "decode"
        indptr, indices = (vectors[0], vectors[1]) if len(vectors) >= 2 else (vectors[0] if vectors else 2, 0)
    batch = target.batch or max(indptr - 1, 1)
    q_len = max(tokens // batch, 1)
    if target.seq_len:
        kv_len = target.seq_len
    elif indices > batch:
        kv_len = max(indices * page_size // batch, 1)
    else:  # no KV lengths recorded (ragged prefill, FA3): self-attention over the queries
        kv_len = q_len
    causal = CAUSAL_BY_RULE.get(family, ragged or q_len > 1)
    if causal:  # the queries are the last tokens of their sequence: never more of them than KV tokens
        kv_len = max(kv_len, q_len)
    return {"batch": batch, "q_len": q_len, "kv_len": kv_len, "kind": kind, "page_size": page_size, "causal": causal}


@register(rules=("flashinfer-attention", "flashinfer-decode", *PREFILL_RULES, "flash-attention"))
def _batch_attention(target: Any, device: str, scale: float) -> Case:
    tensors = [p for p in positional_shapes(target.args) if p]
    q_index = next((i for i, p in enumerate(tensors) if len(p) == 3), None)
    if q_index is None:
        raise NotReplayable("no query [tokens, heads, dim] recorded")
    _, heads, dim = tensors[q_index]
    shape = _lengths(target, tensors, q_index)
    cache = next((p for p in tensors[q_index:] if len(p) == 4), None)
    if cache is not None:
        kv_heads, dim_v = cache[2], cache[3]
    else:  # ragged prefill: k/v [tokens, Hk, D] follow q
        k_shape = tensors[q_index + 1] if len(tensors) > q_index + 1 else tensors[q_index]
        v_shape = tensors[q_index + 2] if len(tensors) > q_index + 2 else k_shape
        kv_heads, dim_v = k_shape[1], v_shape[2]
    batch, kind, causal = shape["batch"], shape["kind"], shape["causal"]
    q_len, kv_len = scaled(shape["q_len"], scale), scaled(shape["kv_len"], scale)
    dtype = compute_dtype(device, target)
    gen = generator(device)
    q = randn((batch * q_len, heads, dim), dtype, device, gen)
    pool = batch * kv_len + 7  # a KV pool with pages in shuffled order, page size 1
    k_pool = randn((pool, kv_heads, dim), dtype, device, gen)
    v_pool = randn((pool, kv_heads, dim_v), dtype, device, gen)
    pages = torch.randperm(pool, device=device, generator=gen)[: batch * kv_len]

    def stand_in() -> torch.Tensor:
        outs = []
        for b in range(batch):
            rows = pages[b * kv_len : (b + 1) * kv_len]
            outs.append(_sdpa(q[b * q_len : (b + 1) * q_len], k_pool[rows], v_pool[rows], causal))
        return torch.cat(outs)

    def reference() -> torch.Tensor:
        outs = []
        for b in range(batch):
            rows = pages[b * kv_len : (b + 1) * kv_len]
            qq, kk, vv = q[b * q_len : (b + 1) * q_len].double(), k_pool[rows].double(), v_pool[rows].double()
            kk, vv = (t.repeat_interleave(heads // kv_heads, 1) for t in (kk, vv))
            logits = torch.einsum("qhd,khd->hqk", qq, kk) / dim**0.5
            if causal and q_len > 1:
                later = torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).triu(kv_len - q_len + 1)
                logits = logits.masked_fill(later, float("-inf"))
            outs.append(torch.einsum("hqk,khd->qhd", logits.softmax(-1), vv))
        return torch.cat(outs)

    pages_text = "" if cache is None else f", page size {shape['page_size']} recorded, 1 replayed"
    causal_text = ", causal" if causal else ""
    assumed = f"{batch} request(s), {q_len} query and {kv_len} KV tokens each ({kind}{causal_text}{pages_text})"
    run, implementation, timed = stand_in, f"stand-in: SDPA over gathered KV pages; assumed {assumed}", STAND_IN
    library = flashinfer_module(device)
    if library is not None and kind in ("decode", "paged prefill"):
        try:
            run = _flashinfer_paged(library, kind, q, k_pool, v_pool, pages, batch, q_len, kv_len, causal)
            run()
        except Exception as exc:  # an API this code does not know: keep the stand-in, say why
            run = stand_in
            implementation += f"; flashinfer unavailable ({type(exc).__name__})"
        else:
            wrapper = "BatchDecode" if kind == "decode" else "BatchPrefill"
            implementation, timed = f"flashinfer {wrapper}WithPagedKVCacheWrapper; assumed {assumed}", KERNEL

    def check() -> tuple[str, str]:
        return compare(run(), reference(), "a float64 loop over requests")

    return Case(run, label(implementation, device, scale, triton=False, target=target, dtype=dtype), check, timed=timed)


def _flashinfer_paged(
    library: Any, kind: str, q, k_pool, v_pool, pages, batch: int, q_len: int, kv_len: int, causal: bool
):  # pragma: no cover - needs a GPU and flashinfer
    """flashinfer's paged decode or prefill on the same pages (page size 1, NHD layout); the plan
    (host work) happens here, the timed callable only runs."""
    device = q.device
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    kv_indptr = torch.arange(0, (batch + 1) * kv_len, kv_len, dtype=torch.int32, device=device)
    last_page_len = torch.ones(batch, dtype=torch.int32, device=device)
    indices = pages.to(torch.int32)
    heads, kv_heads, dim = q.shape[1], k_pool.shape[1], q.shape[2]
    if kind == "decode":
        wrapper = library.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        wrapper.plan(
            kv_indptr, indices, last_page_len, heads, kv_heads, dim, 1, q_data_type=q.dtype, kv_data_type=k_pool.dtype
        )
    else:
        qo_indptr = torch.arange(0, (batch + 1) * q_len, q_len, dtype=torch.int32, device=device)
        wrapper = library.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        wrapper.plan(
            qo_indptr, kv_indptr, indices, last_page_len, heads, kv_heads, dim, 1,
            causal=causal, q_data_type=q.dtype, kv_data_type=k_pool.dtype,
        )  # fmt: skip
    k_cache, v_cache = k_pool.unsqueeze(1), v_pool.unsqueeze(1)  # [pages, page_size=1, heads, dim]
    out = torch.empty(q.shape[0], heads, v_pool.shape[2], dtype=q.dtype, device=device)
    try:
        wrapper.run(q, (k_cache, v_cache), out=out)
    except TypeError:  # an older run() without out=: it allocates its output
        return lambda: wrapper.run(q, (k_cache, v_cache))
    return lambda: wrapper.run(q, (k_cache, v_cache), out=out)


@register(rules=("flashinfer-mla",))
def _mla(target: Any, device: str, scale: float) -> Case:
    tensors = [p for p in positional_shapes(target.args) if p]
    three = [p for p in tensors if len(p) == 3]
    if len(three) < 4:
        raise NotReplayable("MLA needs q_nope, q_pe, ckv_cache and kpe_cache shapes")
    (batch_q, heads, d_ckv), (_, _, d_pe) = three[0], three[1]
    after_cache = tensors[tensors.index(three[3]) + 1 :]
    indices = [p for p in after_cache if len(p) == 1]
    batch = target.batch or batch_q
    kv_len = target.seq_len or (indices[0][0] // batch if indices else 0)
    if not kv_len:
        raise NotReplayable("KV length not recorded: pass --seq-len")
    kv_len = scaled(kv_len, scale)
    dtype = compute_dtype(device, target)
    gen = generator(device)
    q_nope = randn((batch, heads, d_ckv), dtype, device, gen)
    q_pe = randn((batch, heads, d_pe), dtype, device, gen)
    ckv = randn((batch * kv_len, d_ckv), dtype, device, gen)
    kpe = randn((batch * kv_len, d_pe), dtype, device, gen)
    softmax_scale = (d_ckv + d_pe) ** -0.5  # the absorbed head dimension

    def attend(qn, qp, c, k) -> torch.Tensor:
        outs = []
        for b in range(batch):
            rows = slice(b * kv_len, (b + 1) * kv_len)
            logits = (qn[b] @ c[rows].T + qp[b] @ k[rows].T) * softmax_scale
            outs.append(logits.float().softmax(-1).to(c.dtype) @ c[rows])
        return torch.stack(outs)

    def run() -> torch.Tensor:
        return attend(q_nope, q_pe, ckv, kpe)

    def check() -> tuple[str, str]:
        reference = attend(q_nope.double(), q_pe.double(), ckv.double(), kpe.double())
        return compare(run(), reference, "a float64 loop over requests")

    assumed = f"{batch} request(s) × {kv_len} KV tokens, absorbed MLA (latent {d_ckv} + rope {d_pe})"
    text = f"stand-in: torch MLA decode; assumed {assumed}"
    return Case(run, label(text, device, scale, triton=False, target=target, dtype=dtype), check, timed=STAND_IN)


def rope_reference(positions, q, k, cos_sin_cache, is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q/k [tokens, heads, dim] by the cache's cos/sin rows at `positions` (computed in
    at least float32, returned in the inputs' dtypes)."""
    wide = torch.promote_types(q.dtype, torch.float32)
    cos, sin = cos_sin_cache[positions].to(wide).chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x = x.to(wide)
        if is_neox:
            a, b = x.chunk(2, dim=-1)
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * cos - b * sin, b * cos + a * sin
        return torch.cat([ra, rb], -1) if is_neox else torch.stack([ra, rb], -1).flatten(-2)

    return rotate(q).to(q.dtype), rotate(k).to(k.dtype)


def rope_layout(label_rule: str) -> tuple[bool, str]:
    """(is_neox, where it was read) from a rotary kernel's label: the rules `rope-interleaved`
    and `rope-neox` read the layout from the kernel's template arguments."""
    family = rule_id(label_rule)
    if family == "rope-interleaved":
        return False, "rule rope-interleaved (template argument interleave=true or IS_NEOX=false)"
    if family == "rope-neox":
        return True, "rule rope-neox (template argument interleave=false or IS_NEOX=true)"
    return True, "NeoX assumed (the kernel's name does not state the layout)"


@register(ops=("rotary_embedding",))
def _rope(target: Any, device: str, scale: float) -> Case:
    tensors = [p for p in positional_shapes(target.args) if p]
    three = [p for p in tensors if len(p) == 3]
    two = [p for p in tensors if len(p) == 2]
    flat = ""
    if len(three) >= 2:
        (tokens, heads, dim), (_, kv_heads, _) = three[0], three[1]
        cache_shape = two[0] if two else None
    else:
        # vLLM's / sgl-kernel's rotary_embedding(positions, query [T, H·D], key [T, Hkv·D],
        # head_size, cos_sin_cache, is_neox): the heads from the recorded head size
        head = next((a.value for a in target.args if a.kind == SCALAR and type(a.value) is int and a.value > 0), None)
        if len(two) < 2 or head is None or two[0][1] % head or two[1][1] % head:
            raise NotReplayable(
                "needs q [tokens, heads, dim] and k [tokens, kv_heads, dim], or q [tokens, heads·dim] and "
                "k [tokens, kv_heads·dim] with the head size recorded"
            )
        tokens, heads, kv_heads, dim = two[0][0], two[0][1] // head, two[1][1] // head, head
        cache_shape = two[2] if len(two) > 2 else None
        flat = f"; q/k [T, H·D] as [T, {heads}, {dim}] and [T, {kv_heads}, {dim}] (head size {head})"
    if cache_shape is None:  # the positions' range only: assumed, and said
        cache_shape = (8192, dim)
        flat += f"; cos/sin cache [8192, {dim}] assumed (not recorded)"
    max_pos, rot_dim = cache_shape[0], min(cache_shape[1], dim)
    tokens = scaled(tokens, scale)
    is_neox, layout = rope_layout(target.label_rule)
    dtype = compute_dtype(device, target)
    gen = generator(device)
    q = randn((tokens, heads, dim), dtype, device, gen)
    k = randn((tokens, kv_heads, dim), dtype, device, gen)
    q0, k0 = q.clone(), k.clone()  # the inputs of the first (checked) call
    inv_freq = 10000 ** (-torch.arange(0, rot_dim, 2, device=device, dtype=torch.float64) / rot_dim)
    angles = torch.arange(max_pos, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cache = torch.cat([angles.cos(), angles.sin()], -1).float()
    positions = torch.randint(0, max_pos, (tokens,), device=device, generator=gen)
    library = flashinfer_module(device)
    if rot_dim != dim:
        raise NotReplayable(f"partial rotary ({rot_dim} of {dim} dims) is not replayed")
    if library is not None:

        def run() -> tuple[torch.Tensor, torch.Tensor]:  # in place, as the traced op: no copies
            library.rope.apply_rope_with_cos_sin_cache_inplace(
                positions, q.view(tokens, -1), k.view(tokens, -1), dim, cache, is_neox
            )
            return q, k

        # flashinfer's kernel is the traced one only where flashinfer's op launched it: the rope rules
        # match vLLM's rotary_embedding_kernel too
        implementation = "flashinfer.rope.apply_rope_with_cos_sin_cache_inplace"
        timed = KERNEL if _flashinfer_launcher(target) else STAND_IN
        implementation = implementation if timed == KERNEL else f"stand-in: {implementation}"
    else:

        def run() -> tuple[torch.Tensor, torch.Tensor]:
            return rope_reference(positions, q, k, cache, is_neox)

        implementation, timed = "stand-in: torch cos/sin-cache rotation", STAND_IN
    implementation += f" ({'NeoX halves' if is_neox else 'interleaved pairs'}: {layout}{flat})"

    def check() -> tuple[str, str]:
        qq, kk = run()
        rq, rk = rope_reference(positions, q0.double(), k0.double(), cache.double(), is_neox)
        return combine(compare(qq, rq, "float64 rotation of q"), compare(kk, rk, "float64 rotation of k"))

    text = label(implementation, device, scale, triton=False, target=target, dtype=dtype)
    return Case(run, text, check, timed=timed)


def _flashinfer_launcher(target: Any) -> bool:
    """flashinfer's RoPE op (or sgl-kernel's, which is flashinfer's kernel) launched the traced kernel."""
    launcher = f"{target.launcher} {target.trace_launcher or ''}".lower()
    return "flashinfer" in launcher or "apply_rope_pos_ids_cos_sin_cache" in launcher


def merge_states(v_a, s_a, v_b, s_b) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attention results by their log-sum-exps (split-KV attention)."""
    s_a32, s_b32 = s_a.float(), s_b.float()
    top = torch.maximum(s_a32, s_b32)
    w_a, w_b = torch.exp(s_a32 - top), torch.exp(s_b32 - top)
    merged = (v_a.float() * w_a[..., None] + v_b.float() * w_b[..., None]) / (w_a + w_b)[..., None]
    return merged.to(v_a.dtype), top + torch.log(w_a + w_b)


@register(rules=("merge-attn-states",))
def _merge(target: Any, device: str, scale: float) -> Case:
    three = [p for p in positional_shapes(target.args) if p and len(p) == 3]
    if not three:
        raise NotReplayable("needs v_a [tokens, heads, dim]")
    tokens, heads, dim = three[0]
    tokens = scaled(tokens, scale)
    dtype = compute_dtype(device, target)
    gen = generator(device)
    v_a, v_b = (randn((tokens, heads, dim), dtype, device, gen) for _ in range(2))
    s_a, s_b = (randn((tokens, heads), torch.float32, device, gen, 3.0) for _ in range(2))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return merge_states(v_a, s_a, v_b, s_b)

    def check() -> tuple[str, str]:
        out, lse = run()
        stacked = torch.stack([v_a.double(), v_b.double()])
        weights = torch.softmax(torch.stack([s_a.double(), s_b.double()]), 0)[..., None]
        lse_ref = torch.logsumexp(torch.stack([s_a, s_b]).double(), 0)
        merged = compare(out, (stacked * weights).sum(0), "float64 softmax weights")
        return combine(merged, compare(lse, lse_ref, "float64 log-sum-exp"))

    text = "stand-in: torch merge_state (LSE-weighted)"
    return Case(run, label(text, device, scale, triton=False, target=target, dtype=dtype), check, timed=STAND_IN)
