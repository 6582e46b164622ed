"""Kernels flashinfer provides (SiLU/GeLU-and-mul here; RMSNorm in `norms`, RoPE and attention in
`attention`): flashinfer itself on a GPU where it is installed, torch stand-ins otherwise (the
`timed` column says which). sgl-kernel's DeepSeek-V3 small GEMMs are in `gemm`."""

from __future__ import annotations

import math
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


def traced_flashinfer(target: Any) -> bool:
    """The traced kernel is flashinfer's (its label's rule is a flashinfer family)."""
    return (rule_id(target.label_rule) or "").startswith("flashinfer")


@register(ops=("silu_and_mul", "gelu_and_mul"))
def _act_and_mul(target: Any, device: str, scale: float) -> Case:
    rule = rule_id(target.label_rule)
    found = [s for s in tensor_shapes(target.args) if s]
    if rule == "inductor-gated-activation":
        # Inductor's fused act(a) · b reads two whole operands (a [2, 8, 64] and b [16, 64]: 1024
        # outputs), not the halves of one [T, 2·d] tensor: gate and up of the output's size each
        if not found:
            raise NotReplayable("no operand shapes recorded")
        widest = max(found, key=math.prod)
        rows, half = math.prod(widest[:-1]), widest[-1]
        cols = 2 * half
        what = f"act(a) · b over the whole recorded operands ({math.prod(widest)} outputs)"
    else:
        two = [s for s in found if len(s) == 2]
        if not two:
            raise NotReplayable("no [tokens, 2·d] input recorded")
        rows, cols = max(two, key=lambda s: s[1])
        what = "act(x[:, :d]) · x[:, d:]"
    rows, cols = scaled(rows, scale), scaled(cols, scale, 32)
    gelu_tanh = rule == "act-and-mul-gelu-tanh"
    kind = "silu" if target.op_mapping == "silu_and_mul" else "gelu_tanh" if gelu_tanh else "gelu"
    dtype = compute_dtype(device, target)
    x = randn((rows, cols), dtype, device, generator(device))
    out = guarded((rows, cols // 2), dtype, device)
    library = flashinfer_module(device)
    if library is not None:
        function = getattr(library.activation, f"{kind}_and_mul")

        def run() -> torch.Tensor:
            return function(x, out=out.tensor)

        # flashinfer's kernel is the traced one only where the label says flashinfer: the act-and-mul
        # rules match vLLM's, sgl-kernel's HIP and Inductor's kernels too
        implementation = f"flashinfer.activation.{kind}_and_mul"
        timed = KERNEL if traced_flashinfer(target) else STAND_IN
        implementation = implementation if timed == KERNEL else f"stand-in: {implementation}, {what}"
    else:

        def run() -> torch.Tensor:
            return out.tensor.copy_(_gated(kind, x.float()).to(x.dtype))

        implementation, timed = f"stand-in: torch {kind}: {what} (no flashinfer on {device})", STAND_IN

    def check() -> tuple[str, str]:
        run()
        return out.check(compare(out.tensor, _gated(kind, x.double()), "float64 torch"))

    text = label(implementation, device, scale, triton=False, target=target, dtype=dtype)
    return Case(run, text, check, timed=timed)
