"""The Triton fused-MoE path of SGLang/vLLM: top-k routing, `moe_align_block_size`, the
grouped expert GEMM `fused_moe_kernel` (run twice: gate/up projection, then down projection
with the routing weight), SiLU-and-mul between them, and `moe_sum_reduce`.

`fused_moe_kernel` follows the original's algorithm and launch shape: a 1-D grid over
(padded sorted-token blocks × N blocks) in grouped order; each program loads the rows of its
tokens through `sorted_token_ids // top_k`, the weight tile of its block's expert, and writes
one row per (token, k) slot. Validated against a per-token, per-expert plain-torch loop.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import (
    compare,
    compute_dtype,
    guard_interpreter,
    interpreting,
    label,
    scaled,
)


@triton.jit
def fused_moe_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    N,
    K,
    EM,
    num_valid_tokens,
    stride_am,
    stride_ak,
    stride_be,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    top_k: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
    if pid_m * BLOCK_SIZE_M >= num_tokens_post_padded:
        return
    offs_token_id = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_token = tl.load(sorted_token_ids_ptr + offs_token_id)
    token_mask = offs_token < num_valid_tokens

    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_token[:, None] // top_k * stride_am + offs_k[None, :] * stride_ak)
    off_expert = tl.load(expert_ids_ptr + pid_m)
    b_ptrs = b_ptr + off_expert * stride_be + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        remaining = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < remaining), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < remaining, other=0.0)
        accumulator += tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if MUL_ROUTED_WEIGHT:
        weight = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0)
        accumulator = accumulator * weight[:, None]
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=token_mask[:, None] & (offs_cn[None, :] < N))


@triton.jit
def moe_sum_reduce_kernel(
    x_ptr, out_ptr, num_tokens, hidden, scaling, TOPK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr
):
    """out[t, :] = scaling · Σ_k x[t, k, :]."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (offs_m[:, None] < num_tokens) & (offs_d[None, :] < hidden)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for k in tl.static_range(TOPK):
        acc += tl.load(x_ptr + (offs_m[:, None] * TOPK + k) * hidden + offs_d[None, :], mask=mask, other=0.0).to(
            tl.float32
        )
    tl.store(
        out_ptr + offs_m[:, None] * hidden + offs_d[None, :], (acc * scaling).to(out_ptr.dtype.element_ty), mask=mask
    )


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing: softmax over experts, the k largest, renormalised."""
    weights, ids = torch.topk(torch.softmax(logits.float(), dim=-1), top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids.to(torch.int32)


def moe_align_block_size(topk_ids: torch.Tensor, block_size: int, num_experts: int):
    """Token slots sorted by expert, each expert's run padded to a multiple of `block_size`
    (padding slots hold `numel`), the expert of every block, and the padded total."""
    flat = topk_ids.flatten().long()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    total = int(padded.sum())
    sorted_ids = torch.full((total,), flat.numel(), dtype=torch.int32, device=topk_ids.device)
    order = torch.argsort(flat, stable=True)
    expert_of_sorted = flat[order]
    start_sorted = torch.cumsum(counts, 0) - counts
    start_padded = torch.cumsum(padded, 0) - padded
    rank = torch.arange(flat.numel(), device=flat.device) - start_sorted[expert_of_sorted]
    sorted_ids[start_padded[expert_of_sorted] + rank] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(num_experts, device=flat.device), padded // block_size)
    return sorted_ids, expert_ids.to(torch.int32), torch.tensor([total], dtype=torch.int32, device=flat.device)


def _blocks(device: str) -> dict[str, int]:
    if interpreting() or not device.startswith("cuda"):
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}


def invoke_fused_moe(a, w, c, topk_weights, sorted_ids, expert_ids, post_padded, top_k, mul_routed, blocks):
    num_valid = topk_weights.numel()
    n, k = w.shape[1], w.shape[2]
    em = sorted_ids.numel()
    grid = (triton.cdiv(em, blocks["BLOCK_SIZE_M"]) * triton.cdiv(n, blocks["BLOCK_SIZE_N"]),)
    fused_moe_kernel[grid](
        a,
        w,
        c,
        topk_weights,
        sorted_ids,
        expert_ids,
        post_padded,
        n,
        k,
        em,
        num_valid,
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(2),
        w.stride(1),
        c.stride(0),
        c.stride(1),
        MUL_ROUTED_WEIGHT=mul_routed,
        top_k=top_k,
        **blocks,
    )


def moe_sum_reduce(x: torch.Tensor, scaling: float = 1.0) -> torch.Tensor:
    tokens, topk, hidden = x.shape
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(tokens, 16), triton.cdiv(hidden, 64))
    moe_sum_reduce_kernel[grid](x, out, tokens, hidden, scaling, TOPK=topk, BLOCK_M=16, BLOCK_D=64)
    return out


def fused_experts(x, w1, w2, topk_weights, topk_ids, device: str) -> torch.Tensor:
    tokens, top_k = topk_ids.shape
    blocks = _blocks(device)
    sorted_ids, expert_ids, post = moe_align_block_size(topk_ids, blocks["BLOCK_SIZE_M"], w1.shape[0])
    up = torch.empty((tokens * top_k, w1.shape[1]), dtype=x.dtype, device=x.device)
    invoke_fused_moe(x, w1, up, topk_weights.flatten(), sorted_ids, expert_ids, post, top_k, False, blocks)
    gate, value = up.chunk(2, dim=-1)
    act = (F.silu(gate.float()) * value.float()).to(x.dtype)
    down = torch.empty((tokens * top_k, w2.shape[1]), dtype=x.dtype, device=x.device)
    invoke_fused_moe(act, w2, down, topk_weights.flatten(), sorted_ids, expert_ids, post, 1, True, blocks)
    return moe_sum_reduce(down.view(tokens, top_k, -1))


def fused_experts_reference(x, w1, w2, topk_weights, topk_ids) -> torch.Tensor:
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    x32, w1f, w2f = x.float(), w1.float(), w2.float()
    for t in range(x.shape[0]):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            gate, value = (x32[t] @ w1f[e].T).chunk(2)
            out[t] += float(topk_weights[t, j]) * ((F.silu(gate) * value) @ w2f[e].T)
    return out.to(x.dtype)


def _moe_problem(target: Any, device: str, scale: float) -> dict[str, Any]:
    found = tensor_shapes(target.args)
    three = [s for s in found if len(s) == 3]
    two = [s for s in found if len(s) == 2]
    if len(three) < 2 or not two:
        raise NotReplayable("needs hidden_states [T, D], w1 [E, 2I, D], w2 [E, D, I] and topk ids [T, k]")
    (tokens, hidden), (experts, n1, _), (_, _, inter) = two[0], three[0], three[1]
    top_k = next((s[1] for s in two[1:] if s[0] == tokens), 2)
    tokens, hidden, n1, inter = (scaled(v, scale) for v in (tokens, hidden, n1, inter))
    n1 = 2 * inter if n1 != 2 * inter else n1
    flops = 2.0 * tokens * top_k * (n1 * hidden + hidden * inter)
    guard_interpreter(device, flops, "fused MoE")
    dtype = compute_dtype(device)
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(tokens, hidden, generator=generator) * 0.5).to(device, dtype)
    w1 = (torch.randn(experts, n1, hidden, generator=generator) / hidden**0.5).to(device, dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=generator) / inter**0.5).to(device, dtype)
    weights, ids = route(torch.randn(tokens, experts, generator=generator).to(device), top_k)
    return {"x": x, "w1": w1, "w2": w2, "weights": weights, "ids": ids, "top_k": top_k}


def _close(out: torch.Tensor, ref: torch.Tensor) -> tuple[str, str]:
    return compare(out, ref, low=3e-2, full=1e-3)  # two chained GEMMs: looser than one op


@register(rules=("triton-fused-moe",))
def _fused_moe(target: Any, device: str, scale: float) -> Case:
    p = _moe_problem(target, device, scale)
    tokens, top_k = p["ids"].shape
    blocks = _blocks(device)
    sorted_ids, expert_ids, post = moe_align_block_size(p["ids"], blocks["BLOCK_SIZE_M"], p["w1"].shape[0])
    up = torch.empty((tokens * top_k, p["w1"].shape[1]), dtype=p["x"].dtype, device=device)

    def run() -> None:  # the traced kernel: the gate/up projection launch
        invoke_fused_moe(
            p["x"], p["w1"], up, p["weights"].flatten(), sorted_ids, expert_ids, post, top_k, False, blocks
        )

    def check() -> tuple[str, str]:
        out = fused_experts(p["x"], p["w1"], p["w2"], p["weights"], p["ids"], device)
        verdict, why = _close(out, fused_experts_reference(p["x"], p["w1"], p["w2"], p["weights"], p["ids"]))
        return verdict, why + " (whole path: routing, align, 2× fused_moe_kernel, silu_and_mul, moe_sum_reduce)"

    return Case(run, label("Triton fused_moe_kernel (gate/up projection launch)", device, scale), check)


@register(rules=("sglang-moe-sum-reduce",))
def _sum_reduce(target: Any, device: str, scale: float) -> Case:
    p = _moe_problem(target, device, scale)
    tokens, top_k = p["ids"].shape
    x = torch.randn(tokens, top_k, p["x"].shape[1], device=device, dtype=p["x"].dtype)

    def check() -> tuple[str, str]:
        return _close(moe_sum_reduce(x), x.float().sum(1).to(x.dtype))

    return Case(lambda: moe_sum_reduce(x), label("Triton moe_sum_reduce_kernel", device, scale), check)


@register(rules=("sglang-moe-align",))
def _align(target: Any, device: str, scale: float) -> Case:
    found = tensor_shapes(target.args)
    ids_shape = found[0] if found and len(found[0]) == 2 else (1024, 8)
    tokens, top_k = scaled(ids_shape[0], scale), ids_shape[1]
    experts = 64
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, experts, (tokens, top_k), generator=generator).to(device)

    def check() -> tuple[str, str]:
        sorted_ids, expert_ids, post = moe_align_block_size(ids, 16, experts)
        flat = ids.flatten().tolist()
        ok = int(post) % 16 == 0 and sorted(i for i in sorted_ids.tolist() if i < len(flat)) == list(range(len(flat)))
        for block, expert in enumerate(expert_ids.tolist()):
            ok &= all(flat[i] == expert for i in sorted_ids[block * 16 : (block + 1) * 16].tolist() if i < len(flat))
        return ("pass" if ok else "fail"), "every slot once, each block holds one expert's tokens"

    return Case(
        lambda: moe_align_block_size(ids, 16, experts),
        label("torch moe_align_block_size (same output layout)", device, scale, triton=False),
        check,
    )
