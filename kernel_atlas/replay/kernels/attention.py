"""Attention and rotary-embedding kernels of flashinfer / sgl-kernel.

flashinfer's batch attention ops record workspaces, the query and the whole KV pool, not the
sequence lengths. They are inferred where the recorded index arrays allow (requests =
len(indptr) − 1, KV tokens = len(kv_indices) × page size, split evenly) or taken from
`--seq-len` / `--batch`; the implementation label states what was assumed. The computation is
a stated stand-in: scaled-dot-product attention over the gathered KV pages (MLA in its absorbed
form), on the CPU and the GPU alike. Rotary embedding uses flashinfer on a GPU where it is
installed, a torch implementation of the same cos/sin-cache rotation otherwise.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F

from kernel_atlas.ingest.recorded import positional_shapes
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compare, compute_dtype, label, scaled
from kernel_atlas.replay.kernels.flashinfer_ops import flashinfer_module


def _override(name: str) -> int | None:
    value = os.environ.get(f"ATLAS_REPLAY_{name}")
    return int(value) if value else None


def _close(out: torch.Tensor, ref: torch.Tensor) -> tuple[str, str]:
    return compare(out, ref, "a float64 loop over requests")


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q [Sq, Hq, D], k/v [Skv, Hk, D] → [Sq, Hq, Dv] with grouped-query heads."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=causal)
    return out.transpose(0, 1)


@register(rules=("flashinfer-attention", "flash-attention"))
def _batch_attention(target: Any, device: str, scale: float) -> Case:
    params = positional_shapes(target.args)
    tensors = [p for p in params if p]
    q_shape = next((p for p in tensors if len(p) == 3), None)
    cache = next((p for p in tensors if len(p) == 4), None)
    if q_shape is None:
        raise NotReplayable("no query [tokens, heads, dim] recorded")
    after_q = tensors[tensors.index(q_shape) + 1 :]
    vectors = [p for p in after_q if len(p) == 1]  # indptr first, then the KV page indices
    batch = _override("BATCH") or (max(vectors[0][0] - 1, 1) if vectors else 1)
    tokens, heads, dim = q_shape
    kv_heads, dim_v = (cache[2], cache[3]) if cache else (heads, dim)
    ragged = cache is None
    if ragged:  # ragged prefill: k/v [tokens, Hk, D] follow q
        k_shape = next((p for p in tensors[tensors.index(q_shape) + 1 :] if len(p) == 3), q_shape)
        v_shape = next((p for p in tensors[tensors.index(k_shape) + 1 :] if len(p) == 3), k_shape)
        kv_heads, dim_v = k_shape[1], v_shape[2]
        kv_len = _override("SEQ_LEN") or max(tokens // batch, 1)
        q_len = kv_len
    else:
        total = vectors[1][0] if len(vectors) > 1 and vectors[1][0] > batch + 1 else 0
        q_len = max(tokens // batch, 1)
        # no page table recorded (e.g. FA3 with a paged cache): assume a prefill of q_len tokens
        kv_len = _override("SEQ_LEN") or (max(total // batch, 1) if total else q_len)
    q_len, kv_len = scaled(q_len, scale), scaled(kv_len, scale)
    causal = ragged or q_len > 1
    dtype = compute_dtype(device)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(batch * q_len, heads, dim, generator=generator).to(device, dtype)
    pool = batch * kv_len + 7  # a KV pool with pages in shuffled order, page size 1
    k_pool = torch.randn(pool, kv_heads, dim, generator=generator).to(device, dtype)
    v_pool = torch.randn(pool, kv_heads, dim_v, generator=generator).to(device, dtype)
    pages = torch.randperm(pool, generator=generator)[: batch * kv_len].to(device)

    def run() -> torch.Tensor:
        outs = []
        for b in range(batch):
            rows = pages[b * kv_len : (b + 1) * kv_len]
            outs.append(_sdpa(q[b * q_len : (b + 1) * q_len], k_pool[rows], v_pool[rows], causal and q_len == kv_len))
        return torch.cat(outs)

    def check() -> tuple[str, str]:
        out = run()
        reference = []
        for b in range(batch):
            rows = pages[b * kv_len : (b + 1) * kv_len]
            qq, kk, vv = q[b * q_len : (b + 1) * q_len].double(), k_pool[rows].double(), v_pool[rows].double()
            kk, vv = (t.repeat_interleave(heads // kv_heads, 1) for t in (kk, vv))
            logits = torch.einsum("qhd,khd->hqk", qq, kk) / dim**0.5
            if causal and q_len == kv_len:
                logits = logits.masked_fill(torch.ones(q_len, kv_len, dtype=torch.bool, device=device).triu(1), -1e300)
            reference.append(torch.einsum("hqk,khd->qhd", logits.softmax(-1), vv))
        return _close(out, torch.cat(reference))

    kind = "ragged prefill" if ragged else ("decode" if q_len == 1 else "paged prefill")
    assumed = f"{batch} request(s), {q_len} query and {kv_len} KV tokens each ({kind}, page size 1)"
    library = flashinfer_module(device)
    if library is not None and kind == "decode":
        try:
            flash_run = _flashinfer_decode(library, q, k_pool, v_pool, pages, batch, kv_len)
            flash_run()
        except Exception as exc:  # an API this code does not know: keep the stand-in, say why
            assumed += f"; flashinfer decode unavailable ({type(exc).__name__})"
        else:
            label_text = f"flashinfer BatchDecodeWithPagedKVCacheWrapper; assumed {assumed}"
            return Case(flash_run, label(label_text, device, scale, triton=False), lambda: _close(flash_run(), run()))
    return Case(
        run, label(f"stand-in: SDPA over gathered KV pages; assumed {assumed}", device, scale, triton=False), check
    )


def _flashinfer_decode(library: Any, q, k_pool, v_pool, pages, batch: int, kv_len: int):  # pragma: no cover - GPU
    """flashinfer's paged decode on the same pages (page size 1, NHD layout)."""
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=q.device)
    wrapper = library.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    indptr = torch.arange(0, (batch + 1) * kv_len, kv_len, dtype=torch.int32, device=q.device)
    last_page_len = torch.ones(batch, dtype=torch.int32, device=q.device)
    wrapper.plan(
        indptr,
        pages.to(torch.int32),
        last_page_len,
        q.shape[1],
        k_pool.shape[1],
        q.shape[2],
        1,
        q_data_type=q.dtype,
        kv_data_type=k_pool.dtype,
    )
    k_cache, v_cache = k_pool.unsqueeze(1), v_pool.unsqueeze(1)  # [pages, page_size=1, heads, dim]
    return lambda: wrapper.run(q, (k_cache, v_cache))


@register(rules=("flashinfer-mla",))
def _mla(target: Any, device: str, scale: float) -> Case:
    tensors = [p for p in positional_shapes(target.args) if p]
    three = [p for p in tensors if len(p) == 3]
    if len(three) < 4:
        raise NotReplayable("MLA needs q_nope, q_pe, ckv_cache and kpe_cache shapes")
    (batch_q, heads, d_ckv), (_, _, d_pe) = three[0], three[1]
    after_cache = tensors[tensors.index(three[3]) + 1 :]
    indices = [p for p in after_cache if len(p) == 1]
    batch = _override("BATCH") or batch_q
    kv_len = _override("SEQ_LEN") or (indices[0][0] // batch if indices else 0)
    if not kv_len:
        raise NotReplayable("KV length not recorded: pass --seq-len")
    kv_len = scaled(kv_len, scale)
    dtype = compute_dtype(device)
    generator = torch.Generator().manual_seed(0)
    q_nope = torch.randn(batch, heads, d_ckv, generator=generator).to(device, dtype)
    q_pe = torch.randn(batch, heads, d_pe, generator=generator).to(device, dtype)
    ckv = torch.randn(batch * kv_len, d_ckv, generator=generator).to(device, dtype)
    kpe = torch.randn(batch * kv_len, d_pe, generator=generator).to(device, dtype)
    softmax_scale = (d_ckv + d_pe) ** -0.5  # the absorbed head dimension

    def attend(qn, qp, c, k) -> torch.Tensor:
        outs = []
        for b in range(batch):
            rows = slice(b * kv_len, (b + 1) * kv_len)
            logits = (qn[b] @ c[rows].T + qp[b] @ k[rows].T) * softmax_scale
            outs.append(logits.float().softmax(-1).to(c.dtype) @ c[rows])
        return torch.stack(outs)

    def check() -> tuple[str, str]:
        return _close(
            attend(q_nope, q_pe, ckv, kpe), attend(q_nope.double(), q_pe.double(), ckv.double(), kpe.double())
        )

    assumed = f"{batch} request(s) × {kv_len} KV tokens, absorbed MLA (latent {d_ckv} + rope {d_pe})"
    return Case(
        lambda: attend(q_nope, q_pe, ckv, kpe),
        label(f"stand-in: torch MLA decode; assumed {assumed}", device, scale, triton=False),
        check,
    )


def rope_reference(positions, q, k, cos_sin_cache, is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q/k [tokens, heads, dim] by the cache's cos/sin rows at `positions`."""
    cos, sin = cos_sin_cache[positions].float().chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if is_neox:
            a, b = x.chunk(2, dim=-1)
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * cos - b * sin, b * cos + a * sin
        out = torch.cat([ra, rb], -1) if is_neox else torch.stack([ra, rb], -1).flatten(-2)
        return out

    return rotate(q).to(q.dtype), rotate(k).to(k.dtype)


@register(ops=("rotary_embedding",))
def _rope(target: Any, device: str, scale: float) -> Case:
    tensors = [p for p in positional_shapes(target.args) if p]
    three = [p for p in tensors if len(p) == 3]
    if len(three) < 2:
        raise NotReplayable("needs q [tokens, heads, dim] and k [tokens, kv_heads, dim]")
    (tokens, heads, dim), (_, kv_heads, _) = three[0], three[1]
    tokens = scaled(tokens, scale)
    is_neox = "<true" in target.kernel.replace(" ", "")
    dtype = compute_dtype(device)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(tokens, heads, dim, generator=generator).to(device, dtype)
    k = torch.randn(tokens, kv_heads, dim, generator=generator).to(device, dtype)
    angles = torch.arange(8192)[:, None] * (10000 ** (-torch.arange(0, dim, 2) / dim))[None, :]
    cache = torch.cat([angles.cos(), angles.sin()], -1).to(device)
    positions = torch.randint(0, 8192, (tokens,), generator=generator).to(device)
    library = flashinfer_module(device)
    if library is not None:

        def run() -> Any:
            qq, kk = q.clone(), k.clone()
            library.rope.apply_rope_with_cos_sin_cache_inplace(
                positions, qq.view(tokens, -1), kk.view(tokens, -1), dim, cache, is_neox
            )
            return qq, kk

        implementation = "flashinfer.rope.apply_rope_with_cos_sin_cache_inplace"
    else:

        def run() -> Any:
            return rope_reference(positions, q, k, cache, is_neox)

        implementation = f"torch cos/sin-cache rotation ({'NeoX' if is_neox else 'interleaved'} layout)"

    def check() -> tuple[str, str]:
        qq, kk = run()
        rq, rk = rope_reference(positions, q.double(), k.double(), cache.double(), is_neox)
        verdict, why = _close(qq, rq)
        return (verdict if _close(kk, rk)[0] == "pass" else "fail"), why.replace(
            "a float64 loop over requests", "float64"
        )

    return Case(run, label(implementation, device, scale, triton=False), check)


def merge_states(v_a, s_a, v_b, s_b) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attention results by their log-sum-exps (split-KV attention)."""
    s_a32, s_b32 = s_a.float(), s_b.float()
    top = torch.maximum(s_a32, s_b32)
    w_a, w_b = torch.exp(s_a32 - top), torch.exp(s_b32 - top)
    merged = (v_a.float() * w_a[..., None] + v_b.float() * w_b[..., None]) / (w_a + w_b)[..., None]
    return merged.to(v_a.dtype), top + torch.log(w_a + w_b)


@register(rules=("merge-attn-states",))
def _merge(target: Any, device: str, scale: float) -> Case:
    three = [p for p in (positional_shapes(target.args)) if p and len(p) == 3]
    if not three:
        raise NotReplayable("needs v_a [tokens, heads, dim]")
    tokens, heads, dim = three[0]
    tokens = scaled(tokens, scale)
    dtype = compute_dtype(device)
    generator = torch.Generator().manual_seed(0)
    v_a, v_b = (torch.randn(tokens, heads, dim, generator=generator).to(device, dtype) for _ in range(2))
    s_a, s_b = (torch.randn(tokens, heads, generator=generator).to(device) * 3 for _ in range(2))

    def check() -> tuple[str, str]:
        out, lse = merge_states(v_a, s_a, v_b, s_b)
        ref = torch.stack([v_a.double(), v_b.double()])
        weights = torch.softmax(torch.stack([s_a.double(), s_b.double()]), 0)[..., None]
        verdict, why = _close(out, (ref * weights).sum(0))
        lse_ok = torch.allclose(lse.double(), torch.logsumexp(torch.stack([s_a, s_b]).double(), 0), atol=1e-4)
        return (verdict if lse_ok else "fail"), why.replace("a float64 loop over requests", "float64 softmax weights")

    return Case(
        lambda: merge_states(v_a, s_a, v_b, s_b),
        label("torch merge_state (LSE-weighted)", device, scale, triton=False),
        check,
    )
