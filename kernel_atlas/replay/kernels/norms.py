"""RMSNorm kernels of serving engines: plain, fused residual-add (flashinfer/sgl-kernel
semantics) and SGLang's dual-residual variant, as Triton kernels with one program per row."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compare, compute_dtype, label, scaled
from kernel_atlas.replay.kernels.flashinfer_ops import flashinfer_module

EPS = 1e-6


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fused_add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """residual += x; x = rmsnorm(residual) · w (both in place)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    total = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) + tl.load(
        res_ptr + offs, mask=mask, other=0.0
    ).to(tl.float32)
    tl.store(res_ptr + offs, total.to(res_ptr.dtype.element_ty), mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(total * total, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + offs, (total * rstd * w).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dual_residual_rmsnorm_kernel(out_ptr, mid_ptr, x_ptr, res_ptr, w1_ptr, w2_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """mid = rmsnorm(x)·w1 + residual; out = rmsnorm(mid)·w2."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w1 = tl.load(w1_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mid = x * rstd * w1 + tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(mid_ptr + offs, mid.to(mid_ptr.dtype.element_ty), mask=mask)
    rstd2 = 1.0 / tl.sqrt(tl.sum(mid * mid, axis=0) / n_cols + eps)
    w2 = tl.load(w2_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (mid * rstd2 * w2).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm_reference(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    rmsnorm_kernel[(rows,)](x, w, out, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return out


def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> None:
    rows, cols = x.shape
    fused_add_rmsnorm_kernel[(rows,)](x, residual, w, cols, eps, BLOCK=triton.next_power_of_2(cols))


def dual_residual_rmsnorm(x, residual, w1, w2, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = x.shape
    out, mid = torch.empty_like(x), torch.empty_like(x)
    dual_residual_rmsnorm_kernel[(rows,)](out, mid, x, residual, w1, w2, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return out, mid


def _rows_cols(target: Any, scale: float) -> tuple[int, int]:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    if not found:
        raise NotReplayable("no [tokens, hidden] activation shape recorded")
    rows, cols = found[0]
    return scaled(rows, scale), scaled(cols, scale)


def _flashinfer_fused_add_check(library: Any, x0, r0, w) -> tuple[str, str]:  # pragma: no cover - GPU
    xc, rc = x0.clone(), r0.clone()
    library.norm.fused_add_rmsnorm(xc, rc, w, EPS)
    total = (x0.float() + r0.float()).to(x0.dtype)
    return _close(xc, rmsnorm_reference(total, w))


def _close(a: torch.Tensor, b: torch.Tensor) -> tuple[str, str]:
    return compare(a, b)


@register(rules=("flashinfer-rms-norm-fused-add", "rms-norm-fused-add"))
def _fused_add(target: Any, device: str, scale: float) -> Case:
    rows, cols = _rows_cols(target, scale)
    dtype = compute_dtype(device)
    x0 = torch.randn(rows, cols, device=device, dtype=dtype)
    r0 = torch.randn(rows, cols, device=device, dtype=dtype)
    w = torch.randn(cols, device=device, dtype=dtype)
    x, r = x0.clone(), r0.clone()
    library = flashinfer_module(device) if (rule_id(target.label_rule) or "").startswith("flashinfer") else None
    if library is not None:
        return Case(
            lambda: library.norm.fused_add_rmsnorm(x, r, w, EPS),
            label("flashinfer.norm.fused_add_rmsnorm", device, scale, triton=False),
            lambda: _flashinfer_fused_add_check(library, x0, r0, w),
        )

    def check() -> tuple[str, str]:
        xc, rc = x0.clone(), r0.clone()
        fused_add_rmsnorm(xc, rc, w)
        total = (x0.float() + r0.float()).to(dtype)
        verdict, why = _close(xc, rmsnorm_reference(total, w))
        residual_ok = _close(rc, total)[0] == "pass"
        return (verdict if residual_ok else "fail"), why + ("" if residual_ok else "; residual wrong")

    return Case(lambda: fused_add_rmsnorm(x, r, w), label("Triton fused_add_rmsnorm_kernel", device, scale), check)


@register(rules=("rms-norm-dual-residual",))
def _dual(target: Any, device: str, scale: float) -> Case:
    rows, cols = _rows_cols(target, scale)
    dtype = compute_dtype(device)
    x, r = (torch.randn(rows, cols, device=device, dtype=dtype) for _ in range(2))
    w1, w2 = (torch.randn(cols, device=device, dtype=dtype) for _ in range(2))

    def check() -> tuple[str, str]:
        out, mid = dual_residual_rmsnorm(x, r, w1, w2)
        ref_mid = (rmsnorm_reference(x, w1).float() + r.float()).to(dtype)
        verdict, why = _close(out, rmsnorm_reference(ref_mid, w2))
        return (verdict if _close(mid, ref_mid)[0] == "pass" else "fail"), why

    return Case(
        lambda: dual_residual_rmsnorm(x, r, w1, w2),
        label("Triton fused_dual_residual_rmsnorm_kernel", device, scale),
        check,
    )


@register(rules=("flashinfer-rms-norm", "rms-norm"))
def _plain(target: Any, device: str, scale: float) -> Case:
    rows, cols = _rows_cols(target, scale)
    dtype = compute_dtype(device)
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    w = torch.randn(cols, device=device, dtype=dtype)
    library = flashinfer_module(device) if (rule_id(target.label_rule) or "").startswith("flashinfer") else None
    if library is not None:
        return Case(
            lambda: library.norm.rmsnorm(x, w, EPS),
            label("flashinfer.norm.rmsnorm", device, scale, triton=False),
            lambda: _close(library.norm.rmsnorm(x, w, EPS), rmsnorm_reference(x, w)),
        )
    return Case(
        lambda: rmsnorm(x, w),
        label("Triton rmsnorm_kernel", device, scale),
        lambda: _close(rmsnorm(x, w), rmsnorm_reference(x, w)),
    )
