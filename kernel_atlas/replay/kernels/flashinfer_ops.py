"""Kernels flashinfer provides (SiLU/GeLU-and-mul here; RMSNorm in `norms`, RoPE and attention in
`attention`): flashinfer itself on a GPU where it is installed, torch stand-ins otherwise (the
`timed` column says which); and sgl-kernel's DeepSeek-V3 small GEMMs (a torch.mm stand-in)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import KERNEL, STAND_IN, Case
from kernel_atlas.replay.checks import compare, guarded
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compute_dtype, label, scaled
from kernel_atlas.replay.values import generator, randn


def flashinfer_module(device: str) -> Any | None:
    if not device.startswith("cuda"):
        return None
    try:
        import flashinfer
    except ImportError:
        return None
    return flashinfer


def _gated(kind: str, x: torch.Tensor) -> torch.Tensor:
    """act(x[:, :d]) · x[:, d:] in x's dtype."""
    gate, up = x.chunk(2, dim=-1)
    act = F.silu(gate) if kind == "silu" else F.gelu(gate, approximate="tanh" if kind == "gelu_tanh" else "none")
    return act * up


@register(ops=("silu_and_mul", "gelu_and_mul"))
def _act_and_mul(target: Any, device: str, scale: float) -> Case:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    if not found:
        raise NotReplayable("no [tokens, 2·d] input recorded")
    rows, cols = max(found, key=lambda s: s[1])
    rows, cols = scaled(rows, scale), scaled(cols, scale, 32)
    gelu_tanh = rule_id(target.label_rule) == "act-and-mul-gelu-tanh"
    kind = "silu" if target.op_mapping == "silu_and_mul" else "gelu_tanh" if gelu_tanh else "gelu"
    dtype = compute_dtype(device)
    x = randn((rows, cols), dtype, device, generator(device))
    out = guarded((rows, cols // 2), dtype, device)
    library = flashinfer_module(device)
    if library is not None:
        function = getattr(library.activation, f"{kind}_and_mul")

        def run() -> torch.Tensor:
            return function(x, out=out.tensor)

        implementation, timed = f"flashinfer.activation.{kind}_and_mul", KERNEL
    else:

        def run() -> torch.Tensor:
            return out.tensor.copy_(_gated(kind, x.float()).to(x.dtype))

        implementation, timed = f"stand-in: torch {kind}(x[:, :d]) · x[:, d:] (no flashinfer on {device})", STAND_IN

    def check() -> tuple[str, str]:
        run()
        return out.check(compare(out.tensor, _gated(kind, x.double()), "float64 torch"))

    return Case(run, label(implementation, device, scale, triton=False), check, timed=timed)


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
    gen = generator(device)
    a = randn((m, k), dtype, device, gen)
    b = randn((k, n), dtype, device, gen, k**-0.5)
    out = torch.empty(m, n, dtype=dtype, device=device)

    def run() -> torch.Tensor:
        return torch.mm(a, b, out=out)

    def check() -> tuple[str, str]:
        return compare(run(), a.double() @ b.double(), "float64 GEMM")

    text = f"stand-in: torch.mm [{m}×{k}]·[{k}×{n}]"
    return Case(run, label(text, device, scale, triton=False), check, timed=STAND_IN)
