"""Expert-parallel token layout kernels of SGLang's DeepEP path and the block-fp8 GEMM.

* `_fwd_kernel_ep_scatter_1`: per expert, the start of its 128-aligned run in the contiguous
  layout, and `m_indices` (the expert of every row) for the grouped GEMM;
* `_fwd_kernel_ep_scatter_2`: every (token, k) copies its fp8 row and scales to the next free
  row of its expert (an atomic counter per expert) and records where (`output_index`);
* `_fwd_kernel_ep_gather`: output[t] = Σ_k weight[t, k] · input[output_index[t, k]];
* `_w8a8_block_fp8_matmul`: C = (A · As) (B · Bs)^T with per-(row, 128-column-group) scales for A
  and per-(128×128 block) scales for B, accumulated block by block in fp32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import guard_interpreter, interpreting, label, scaled

ALIGN = 128
GROUP = 128


@triton.jit
def ep_scatter_1_kernel(
    tokens_per_expert, expert_start, m_indices, num_experts, ALIGN: tl.constexpr, BLOCK: tl.constexpr
):
    expert = tl.program_id(0)
    start = tl.zeros((), dtype=tl.int32)
    for e in range(expert):
        count = tl.load(tokens_per_expert + e)
        start += (count + ALIGN - 1) // ALIGN * ALIGN
    tl.store(expert_start + expert, start)
    count = tl.load(tokens_per_expert + expert)
    for block in range(tl.cdiv(count, BLOCK)):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        tl.store(m_indices + start + offs, expert + tl.zeros((BLOCK,), dtype=tl.int32), mask=offs < count)


@triton.jit
def ep_scatter_2_kernel(
    recv_x,
    recv_scale,
    topk_ids,
    expert_start,
    expert_fill,
    output,
    output_scale,
    output_index,
    hidden,
    scale_cols,
    TOPK: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    token = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    scols = tl.arange(0, BLOCK_S)
    row = tl.load(recv_x + token * hidden + cols, mask=cols < hidden)
    srow = tl.load(recv_scale + token * scale_cols + scols, mask=scols < scale_cols)
    for k in tl.static_range(TOPK):
        expert = tl.load(topk_ids + token * TOPK + k)
        if expert >= 0:
            dest = tl.load(expert_start + expert) + tl.atomic_add(expert_fill + expert, 1)
            tl.store(output + dest * hidden + cols, row, mask=cols < hidden)
            tl.store(output_scale + dest * scale_cols + scols, srow, mask=scols < scale_cols)
            tl.store(output_index + token * TOPK + k, dest)


@triton.jit
def ep_gather_kernel(
    inputs, topk_ids, topk_weights, output_index, output, hidden, TOPK: tl.constexpr, BLOCK_H: tl.constexpr
):
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < hidden
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for k in tl.static_range(TOPK):
        expert = tl.load(topk_ids + token * TOPK + k)
        if expert >= 0:
            src = tl.load(output_index + token * TOPK + k)
            weight = tl.load(topk_weights + token * TOPK + k)
            acc += tl.load(inputs + src * hidden + cols, mask=mask, other=0.0).to(tl.float32) * weight
    tl.store(output + token * hidden + cols, acc.to(output.dtype.element_ty), mask=mask)


@triton.jit
def w8a8_block_fp8_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    as_ptr,
    bs_ptr,
    M,
    N,
    K,
    group_n,
    group_k,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :] * K + offs_k[:, None]
    scale_cols = tl.cdiv(K, group_k)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - kb * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - kb * BLOCK_K, other=0.0)
        k_group = kb * BLOCK_K // group_k
        a_s = tl.load(as_ptr + offs_m * scale_cols + k_group)
        b_s = tl.load(bs_ptr + (offs_n // group_n) * scale_cols + k_group)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None] * N + offs_cn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def _fp8(shape: tuple[int, ...], device: str, generator: Any) -> torch.Tensor:
    """fp8 e4m3 values; under the interpreter kept in fp32 (its fp8 handling is unreliable)."""
    values = (torch.randn(shape, generator=generator) * 2).to(torch.float8_e4m3fn)
    return values.float().to(device) if interpreting() else values.to(device)


def _problem(target: Any, device: str, scale: float) -> dict[str, Any]:
    found = tensor_shapes(target.args)
    tokens, hidden = next((s for s in found if len(s) == 2), (1024, 7168))
    tokens, hidden = scaled(tokens, scale), scaled(hidden, scale, GROUP)
    experts, top_k = 8, 4
    generator = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)]).to(torch.int32)
    ids[torch.rand(ids.shape, generator=generator) < 0.1] = -1  # experts on other ranks
    return {
        "tokens": tokens,
        "hidden": hidden,
        "experts": experts,
        "top_k": top_k,
        "ids": ids.to(device),
        "generator": generator,
    }


def ep_scatter(x, x_scale, ids, experts: int):
    tokens, top_k = ids.shape
    counts = torch.bincount(ids[ids >= 0].long(), minlength=experts).to(torch.int32)
    rows = int(((counts + ALIGN - 1) // ALIGN * ALIGN).sum())
    output = torch.zeros((rows, x.shape[1]), dtype=x.dtype, device=x.device)
    output_scale = torch.zeros((rows, x_scale.shape[1]), dtype=x_scale.dtype, device=x.device)
    m_indices = torch.full((rows,), -1, dtype=torch.int32, device=x.device)
    start = torch.empty(experts, dtype=torch.int32, device=x.device)
    fill = torch.zeros(experts, dtype=torch.int32, device=x.device)
    index = torch.full((tokens, top_k), -1, dtype=torch.int32, device=x.device)
    ep_scatter_1_kernel[(experts,)](counts, start, m_indices, experts, ALIGN=ALIGN, BLOCK=128)
    ep_scatter_2_kernel[(tokens,)](
        x,
        x_scale,
        ids,
        start,
        fill,
        output,
        output_scale,
        index,
        x.shape[1],
        x_scale.shape[1],
        TOPK=top_k,
        BLOCK_H=triton.next_power_of_2(x.shape[1]),
        BLOCK_S=triton.next_power_of_2(x_scale.shape[1]),
    )
    return output, output_scale, m_indices, index, start


@register(rules=("sglang-ep-scatter",))
def _scatter(target: Any, device: str, scale: float) -> Case:
    p = _problem(target, device, scale)
    x = _fp8((p["tokens"], p["hidden"]), device, p["generator"])
    x_scale = torch.rand(p["tokens"], p["hidden"] // GROUP, generator=p["generator"]).to(device)

    def check() -> tuple[str, str]:
        output, output_scale, m_indices, index, start = ep_scatter(x, x_scale, p["ids"], p["experts"])
        ok = True
        for t in range(p["tokens"]):
            for k in range(p["top_k"]):
                e, dest = int(p["ids"][t, k]), int(index[t, k])
                if e < 0:
                    ok &= dest == -1
                    continue
                run_start = int(start[e])
                ok &= run_start <= dest and int(m_indices[dest]) == e
                ok &= torch.equal(output[dest].float(), x[t].float()) and torch.equal(output_scale[dest], x_scale[t])
        return ("pass" if ok else "fail"), "every routed row and its scales land in its expert's aligned run"

    return Case(
        lambda: ep_scatter(x, x_scale, p["ids"], p["experts"]),
        label("Triton ep_scatter (_fwd_kernel_ep_scatter_1 + _2)", device, scale),
        check,
    )


@register(rules=("sglang-ep-gather",))
def _gather(target: Any, device: str, scale: float) -> Case:
    p = _problem(target, device, scale)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    slots = p["tokens"] * p["top_k"]
    inputs = torch.randn(slots, p["hidden"], generator=p["generator"]).to(device, dtype)
    index = torch.randperm(slots, generator=p["generator"]).view(p["tokens"], p["top_k"]).to(device, torch.int32)
    weights = torch.rand(p["tokens"], p["top_k"], generator=p["generator"]).to(device)
    out = torch.empty(p["tokens"], p["hidden"], device=device, dtype=dtype)
    grid = (p["tokens"], triton.cdiv(p["hidden"], 256))

    def run() -> None:
        ep_gather_kernel[grid](inputs, p["ids"], weights, index, out, p["hidden"], TOPK=p["top_k"], BLOCK_H=256)

    def check() -> tuple[str, str]:
        run()
        valid = (p["ids"] >= 0).float() * weights
        ref = (inputs.float()[index.long()] * valid[..., None]).sum(1)
        error = float((out.float() - ref).abs().max())
        ok = error <= 1e-3 * max(float(ref.abs().max()), 1.0) * (20 if dtype == torch.bfloat16 else 1)
        return ("pass" if ok else "fail"), f"max |error| {error:.3g} vs plain-torch weighted gather"

    return Case(run, label("Triton ep_gather (_fwd_kernel_ep_gather)", device, scale), check)


@register(rules=("deepgemm",))
def _deep_gemm(target: Any, device: str, scale: float) -> Case:
    case = _block_fp8_matmul(target, device, scale)
    case.implementation = "stand-in for DeepGEMM: " + case.implementation
    return case


@register(rules=("triton-block-fp8-gemm",))
def _block_fp8_matmul(target: Any, device: str, scale: float) -> Case:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    pair = next(((a, b) for i, a in enumerate(found) for b in found[i + 1 :] if a[1] == b[1]), None)
    if pair is None:
        raise NotReplayable("needs A [M, K] and B [N, K] with the same K")
    (m, k), (n, _) = pair
    m, n, k = scaled(m, scale), scaled(n, scale, GROUP), scaled(k, scale, GROUP)
    guard_interpreter(device, 2.0 * m * n * k, "block-fp8 GEMM")
    generator = torch.Generator().manual_seed(0)
    a, b = _fp8((m, k), device, generator), _fp8((n, k), device, generator)
    a_s = torch.rand(m, k // GROUP, generator=generator).to(device) + 0.5
    b_s = torch.rand(n // GROUP, k // GROUP, generator=generator).to(device) + 0.5
    c = torch.empty(m, n, device=device, dtype=torch.bfloat16 if device.startswith("cuda") else torch.float32)
    blocks = (16, 32) if not device.startswith("cuda") else (64, 128)
    grid = (triton.cdiv(m, blocks[0]) * triton.cdiv(n, blocks[1]),)

    def run() -> None:
        w8a8_block_fp8_matmul_kernel[grid](
            a,
            b,
            c,
            a_s,
            b_s,
            m,
            n,
            k,
            GROUP,
            GROUP,
            BLOCK_M=blocks[0],
            BLOCK_N=blocks[1],
            BLOCK_K=GROUP,
            GROUP_SIZE_M=8,
        )

    def check() -> tuple[str, str]:
        run()
        a_full = a.float() * a_s.repeat_interleave(GROUP, 1)
        b_full = b.float() * b_s.repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)
        ref = a_full @ b_full.T
        error = float((c.float() - ref).abs().max())
        ok = error <= 2e-2 * max(float(ref.abs().max()), 1.0)
        return ("pass" if ok else "fail"), f"max |error| {error:.3g} vs dequantised fp32 GEMM"

    return Case(
        run,
        label("Triton w8a8 block-fp8 matmul" + (" (fp8 values in fp32)" if interpreting() else ""), device, scale),
        check,
    )
