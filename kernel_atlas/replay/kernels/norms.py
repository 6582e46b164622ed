"""RMSNorm kernels of serving engines: plain, fused residual-add (flashinfer/sgl-kernel
semantics) and SGLang's dual-residual variant.

SGLang's own Triton kernels (`fused_rmsnorm_kernel`, `fused_dual_residual_rmsnorm_kernel`,
`layers/elementwise.py`) are re-implemented with their launch: one program per row, BLOCK the
next power of two of the hidden size, num_warps from the traced block (else SGLang's rule).
flashinfer's CUDA kernels run as themselves on a GPU where flashinfer is installed; otherwise
the Triton kernels stand in for them (the `timed` column says so). Outputs are written into
guarded buffers; in-place kernels are checked on their first call, against a float64
reference computed from the inputs as they were.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import KERNEL, STAND_IN, Case
from kernel_atlas.replay.checks import Guarded, combine, compare, guarded, inside_guard
from kernel_atlas.replay.configs import traced_warps
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compute_dtype, guard_programs, label, recorded_scalar, scaled
from kernel_atlas.replay.kernels.flashinfer_ops import flashinfer_module, traced_flashinfer
from kernel_atlas.replay.values import generator, randn

EPS = 1e-6
TRITON_LAUNCH = "<built-in function launch>"  # the launcher Kineto records for a Triton kernel


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fused_add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """residual += x; x = rmsnorm(residual) · w (both in place)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    total = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) + tl.load(
        res_ptr + offs, mask=mask, other=0.0
    ).to(tl.float32)
    total = total.to(res_ptr.dtype.element_ty)
    tl.store(res_ptr + offs, total, mask=mask)
    total = total.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(total * total, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + offs, (total * rstd * w).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dual_residual_rmsnorm_kernel(out_ptr, mid_ptr, x_ptr, res_ptr, w1_ptr, w2_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """mid = residual + rmsnorm(x)·w1 (rounded to the residual's dtype first); out = rmsnorm(mid)·w2."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w1 = tl.load(w1_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + offs, mask=mask, other=0.0)
    mid = r + (x * rstd * w1).to(r.dtype)
    tl.store(mid_ptr + offs, mid, mask=mask)
    mid = mid.to(tl.float32)
    rstd2 = 1.0 / tl.sqrt(tl.sum(mid * mid, axis=0) / n_cols + eps)
    w2 = tl.load(w2_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (mid * rstd2 * w2).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm_reference(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """float64 x / rms(x) · w."""
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def sglang_warps(cols: int, device: str) -> int:
    """SGLang's num_warps for its row kernels: next_power_of_2(cdiv(hidden, 256)) within [4, 32]
    (16 on AMD)."""
    limit = 16 if device.startswith("cuda") and getattr(torch.version, "hip", None) else 32
    return max(min(triton.next_power_of_2(triton.cdiv(cols, 256)), limit), 4)


def _launch(target: Any, device: str, cols: int) -> tuple[dict[str, int], str]:
    warps = traced_warps(target, device)
    config = {"BLOCK": triton.next_power_of_2(cols), "num_warps": warps or sglang_warps(cols, device)}
    where = "num_warps from the traced block" if warps else "SGLang's num_warps rule"
    return config, f"BLOCK={config['BLOCK']} num_warps={config['num_warps']} ({where})"


def _triton_launch(target: Any) -> bool:
    """The traced kernel was launched by Triton's launcher (a Triton RMSNorm, as SGLang's), not by a
    library op (vLLM's `_C::rms_norm`, aiter's, sgl-kernel's CUDA kernels)."""
    launcher = target.trace_launcher or target.launcher or ""
    return launcher == TRITON_LAUNCH or launcher.startswith("triton")


def _rows_cols(target: Any, device: str, scale: float) -> tuple[int, int]:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    if not found:
        raise NotReplayable("no [tokens, hidden] activation shape recorded")
    rows, cols = scaled(found[0][0], scale), scaled(found[0][1], scale)
    guard_programs(device, rows, "RMSNorm (one program per row)")
    return rows, cols


def _inputs(rows: int, cols: int, device: str, count: int, target: Any = None) -> list[Guarded]:
    """`count` guarded [rows, cols] tensors with N(0, 1) values, of the recorded dtype on a GPU."""
    gen = generator(device)
    dtype = compute_dtype(device, target)
    out = []
    for _ in range(count):
        buffer = guarded((rows, cols), dtype, device)
        buffer.tensor.copy_(randn((rows, cols), dtype, device, gen))
        out.append(buffer)
    return out


def _weight(cols: int, device: str, seed: int, target: Any = None) -> torch.Tensor:
    return inside_guard(randn((cols,), compute_dtype(device, target), device, generator(device, seed)))


def _said(text: str, note: str) -> str:
    return f"{text} ({note})" if note else text


@register(rules=("flashinfer-rms-norm-fused-add", "rms-norm-fused-add"))
def _fused_add(target: Any, device: str, scale: float) -> Case:
    rows, cols = _rows_cols(target, device, scale)
    x, r = _inputs(rows, cols, device, 2, target)
    w = _weight(cols, device, 1, target)
    eps, assumed = recorded_scalar(target, EPS)
    x0, r0 = x.tensor.clone(), r.tensor.clone()  # the inputs of the first (checked) call
    library = flashinfer_module(device) if traced_flashinfer(target) else None
    if library is not None:

        def run() -> None:
            library.norm.fused_add_rmsnorm(x.tensor, r.tensor, w, eps)

        config, text, timed = "flashinfer's launch", "flashinfer.norm.fused_add_rmsnorm", KERNEL
    else:
        launch, config = _launch(target, device, cols)

        def run() -> None:
            fused_add_rmsnorm_kernel[(rows,)](x.tensor, r.tensor, w, cols, eps, **launch)

        text, timed = "Triton fused_add_rmsnorm_kernel", STAND_IN  # the traced kernels are CUDA ones

    def check() -> tuple[str, str]:
        run()
        total = (x0.double() + r0.double()).to(r0.dtype)  # the residual is stored in its dtype
        return combine(
            x.check(compare(x.tensor, rmsnorm_reference(total, w, eps), "float64 RMSNorm of x + residual")),
            r.check(compare(r.tensor, total, "x + residual")),
        )

    text = label(_said(text, assumed), device, scale, triton=library is None, target=target, dtype=x.tensor.dtype)
    return Case(run, text, check, timed=timed, config=config)


@register(rules=("rms-norm-dual-residual",))
def _dual(target: Any, device: str, scale: float) -> Case:
    rows, cols = _rows_cols(target, device, scale)
    x, r = _inputs(rows, cols, device, 2, target)
    w1, w2 = _weight(cols, device, 1, target), _weight(cols, device, 2, target)
    eps, assumed = recorded_scalar(target, EPS)
    out, mid = guarded((rows, cols), x.tensor.dtype, device), guarded((rows, cols), x.tensor.dtype, device)
    launch, config = _launch(target, device, cols)

    def run() -> torch.Tensor:
        dual_residual_rmsnorm_kernel[(rows,)](out.tensor, mid.tensor, x.tensor, r.tensor, w1, w2, cols, eps, **launch)
        return out.tensor

    def check() -> tuple[str, str]:
        run()
        normed = rmsnorm_reference(x.tensor, w1, eps).to(r.tensor.dtype).double()
        ref_mid = (r.tensor.double() + normed).to(r.tensor.dtype)
        return combine(
            out.check(compare(out.tensor, rmsnorm_reference(ref_mid, w2, eps), "float64 RMSNorm of the mid value")),
            mid.check(compare(mid.tensor, ref_mid, "residual + RMSNorm(x)")),
        )

    text = _said("Triton fused_dual_residual_rmsnorm_kernel", assumed)
    return Case(run, label(text, device, scale, target=target, dtype=x.tensor.dtype), check, config=config)


@register(rules=("flashinfer-rms-norm", "rms-norm"))
def _plain(target: Any, device: str, scale: float) -> Case:
    rows, cols = _rows_cols(target, device, scale)
    (x,) = _inputs(rows, cols, device, 1, target)
    w = _weight(cols, device, 1, target)
    eps, assumed = recorded_scalar(target, EPS)
    out = guarded((rows, cols), x.tensor.dtype, device)
    library = flashinfer_module(device) if traced_flashinfer(target) else None
    if library is not None:

        def run() -> torch.Tensor:
            return library.norm.rmsnorm(x.tensor, w, eps, out=out.tensor)

        config, text, timed = "flashinfer's launch", "flashinfer.norm.rmsnorm", KERNEL
    else:
        launch, config = _launch(target, device, cols)

        def run() -> torch.Tensor:
            rmsnorm_kernel[(rows,)](x.tensor, w, out.tensor, cols, eps, **launch)
            return out.tensor

        # the `rms-norm` rule matches vLLM's CUDA rms_norm_kernel, aiter's CK rmsnorm2d, Gemma's
        # x·(1+w) and q/k norms as well as SGLang's Triton kernel: this re-implementation is the
        # traced kernel only where a Triton launch launched it, else another implementation
        text = "Triton rmsnorm_kernel"
        timed = KERNEL if _triton_launch(target) and not traced_flashinfer(target) else STAND_IN

    def check() -> tuple[str, str]:
        run()
        return out.check(compare(out.tensor, rmsnorm_reference(x.tensor, w, eps), "float64 RMSNorm"))

    text = label(_said(text, assumed), device, scale, triton=library is None, target=target, dtype=x.tensor.dtype)
    return Case(run, text, check, timed=timed, config=config)
