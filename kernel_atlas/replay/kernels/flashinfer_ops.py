"""Kernels flashinfer provides (RMSNorm, fused add-RMSNorm, SiLU/GeLU-and-mul): flashinfer on a
GPU where it is installed, the Triton/torch implementations otherwise (the label says which)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compare, compute_dtype, label, scaled


def flashinfer_module(device: str) -> Any | None:
    if not device.startswith("cuda"):
        return None
    try:
        import flashinfer
    except ImportError:
        return None
    return flashinfer


def _gated(kind: str, x: torch.Tensor) -> torch.Tensor:
    gate, up = x.float().chunk(2, dim=-1)
    act = F.silu(gate) if kind == "silu" else F.gelu(gate, approximate="tanh" if kind == "gelu_tanh" else "none")
    return (act * up).to(x.dtype)


@register(ops=("silu_and_mul", "gelu_and_mul"))
def _act_and_mul(target: Any, device: str, scale: float) -> Case:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    if not found:
        raise NotReplayable("no [tokens, 2·d] input recorded")
    rows, cols = max(found, key=lambda s: s[1])
    rows, cols = scaled(rows, scale), scaled(cols, scale, 32)
    gelu_tanh = rule_id(target.label_rule) == "act-and-mul-gelu-tanh"
    kind = "silu" if target.op_mapping == "silu_and_mul" else "gelu_tanh" if gelu_tanh else "gelu"
    x = torch.randn(rows, cols, device=device, dtype=compute_dtype(device))
    library = flashinfer_module(device)
    if library is not None:
        function = getattr(library.activation, f"{kind}_and_mul")
        implementation = f"flashinfer.activation.{kind}_and_mul"
    else:
        function = lambda t: _gated(kind, t)  # noqa: E731
        implementation = f"torch {kind}(x[:, :d]) · x[:, d:] (flashinfer not available on {device})"

    def check() -> tuple[str, str]:
        return compare(function(x), _gated(kind, x.double()).to(x.dtype), "float64 torch", full=2e-2)

    return Case(lambda: function(x), label(implementation, device, scale, triton=False), check)


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
    dtype = compute_dtype(device)
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype) / k**0.5

    def check() -> tuple[str, str]:
        return compare(torch.mm(a, b), a.double() @ b.double(), "float64", full=2e-2)

    return Case(
        lambda: torch.mm(a, b), label(f"stand-in: torch.mm [{m}×{k}]·[{k}×{n}]", device, scale, triton=False), check
    )
