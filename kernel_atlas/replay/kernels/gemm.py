"""The GEMM builders of replay's kernel families (ATen GEMMs replay through `aten`), together:

* `_w8a8_block_fp8_matmul` (SGLang `layers/quantization/fp8_kernel.py`): C = (A · As) (B · Bs)^T
  with per-(row, 128-column-group) scales for A and per-(128×128 block) scales for B,
  accumulated block by block in fp32, following SGLang's algorithm and launch shape;
* DeepGEMM's fp8 GEMM: the block-fp8 Triton GEMM as its stand-in;
* sgl-kernel's DeepSeek-V3 small-M GEMMs (fused-A projection, router): a torch.mm stand-in.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.ingest.recorded import TENSOR, tensor_shapes
from kernel_atlas.replay.aten import KERNEL, STAND_IN, Case
from kernel_atlas.replay.checks import compare, guarded, inside_guard
from kernel_atlas.replay.configs import Config, candidates, pick
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import (
    activation_dtype,
    compute_dtype,
    guard_interpreter,
    interpreting,
    label,
    scaled,
)
from kernel_atlas.replay.values import generator, randn

GROUP = 128  # fp8 quantisation group


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
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :] * K + offs_k[:, None]
    scale_cols = tl.cdiv(K, group_k)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - kb * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - kb * BLOCK_SIZE_K, other=0.0)
        k_group = kb * BLOCK_SIZE_K // group_k
        a_s = tl.load(as_ptr + offs_m * scale_cols + k_group)
        b_s = tl.load(bs_ptr + (offs_n // group_n) * scale_cols + k_group)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_SIZE_K
        b_ptrs += BLOCK_SIZE_K
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None] * N + offs_cn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def fp8_values(shape: tuple[int, ...], device: str, gen: Any) -> torch.Tensor:
    """e4m3 values; under the interpreter held in fp32 (its fp8 loads and stores are unreliable)."""
    values = randn(shape, torch.float8_e4m3fn, device, gen, 2.0)
    return values.float() if interpreting() else values


@register(rules=("deepgemm",))
def _deep_gemm(target: Any, device: str, scale: float) -> Case:
    case = _block_fp8_matmul(target, device, scale)
    case.implementation = "stand-in for DeepGEMM: " + case.implementation
    case.timed = STAND_IN
    return case


@register(rules=("triton-block-fp8-gemm",))
def _block_fp8_matmul(target: Any, device: str, scale: float) -> Case:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    pair = next(((a, b) for i, a in enumerate(found) for b in found[i + 1 :] if a[1] == b[1]), None)
    if pair is None:
        raise NotReplayable("needs A [M, K] and B [N, K] with the same K")
    (m0, k0), (n0, _) = pair
    m, n, k = scaled(m0, scale), scaled(n0, scale, GROUP), scaled(k0, scale, GROUP)
    guard_interpreter(device, 2.0 * m * n * k, "block-fp8 GEMM")
    gen = generator(device)
    a, b = inside_guard(fp8_values((m, k), device, gen)), inside_guard(fp8_values((n, k), device, gen))
    a_s = torch.rand(m, triton.cdiv(k, GROUP), device=device, generator=gen) + 0.5
    b_s = torch.rand(triton.cdiv(n, GROUP), triton.cdiv(k, GROUP), device=device, generator=gen) + 0.5
    # the output's recorded dtype (C [M, N]: the Triton launch's c, DeepGEMM's out) is what it writes
    out = next((a for a in target.args if a.kind == TENSOR and a.dims == (m0, n0) and activation_dtype(a)), None)
    recorded = activation_dtype(out)
    dtype = compute_dtype(device, recorded=recorded or torch.bfloat16)  # SGLang's bf16 where not recorded
    c = guarded((m, n), dtype, device)

    def programs(config: Config) -> int:
        return triton.cdiv(m0, config["BLOCK_SIZE_M"]) * triton.cdiv(n0, config["BLOCK_SIZE_N"])

    def make_run(config: Config):
        grid = (triton.cdiv(m, config["BLOCK_SIZE_M"]) * triton.cdiv(n, config["BLOCK_SIZE_N"]),)
        steps = triton.cdiv(k, config["BLOCK_SIZE_K"])
        guard_interpreter(device, 0.0, "block-fp8 GEMM", programs=grid[0], steps=steps)  # the programs the CPU runs

        def run() -> torch.Tensor:
            w8a8_block_fp8_matmul_kernel[grid](a, b, c.tensor, a_s, b_s, m, n, k, GROUP, GROUP, **config.kwargs())
            return c.tensor

        return run

    _, run, config_text = pick(candidates("w8a8_block_fp8_matmul", target, device, programs), make_run, device)

    def check() -> tuple[str, str]:
        produced = run()
        a_full = a.double() * a_s.double().repeat_interleave(GROUP, 1)[:, :k]
        b_full = b.double() * b_s.double().repeat_interleave(GROUP, 0)[:n].repeat_interleave(GROUP, 1)[:, :k]
        return c.check(compare(produced, a_full @ b_full.T, "dequantised float64 GEMM"))

    text = "Triton w8a8 block-fp8 matmul" + (" (fp8 values in fp32)" if interpreting() else "")
    if recorded is None and device.startswith("cuda"):
        text += " (output dtype not recorded: bfloat16 assumed)"
    text = label(text, device, scale, dtype=dtype, recorded=recorded)
    return Case(run, text, check, timed=KERNEL, config=config_text)


@register(rules=("dsv3-small-gemm",))
def _small_gemm(target: Any, device: str, scale: float) -> Case:
    """sgl-kernel's DeepSeek-V3 small-M GEMMs (fused-A projection, router): torch.mm stand-in."""
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    if len(found) >= 3:
        found = found[1:]  # sgl-kernel passes the output first: (out, mat1, mat2)
    if len(found) < 2 or found[0][1] not in found[1]:
        raise NotReplayable("needs mat1 [M, K] and mat2 [K, N] or [N, K]")
    (m, k), w = found[0], found[1]
    n = w[1] if w[0] == k else w[0]
    m, n, k = scaled(m, scale), scaled(n, scale), scaled(k, scale)
    dtype = compute_dtype(device, target)
    gen = generator(device)
    a = randn((m, k), dtype, device, gen)
    b = randn((k, n), dtype, device, gen, k**-0.5)
    out = torch.empty(m, n, dtype=dtype, device=device)

    def run() -> torch.Tensor:
        return torch.mm(a, b, out=out)

    def check() -> tuple[str, str]:
        return compare(run(), a.double() @ b.double(), "float64 GEMM")

    text = f"stand-in: torch.mm [{m}×{k}]·[{k}×{n}]"
    return Case(run, label(text, device, scale, triton=False, target=target, dtype=dtype), check, timed=STAND_IN)
