"""Shared pieces of the Triton replay kernels: scaling, device policy, checks."""

from __future__ import annotations

import math
import os
from typing import Any

from kernel_atlas.replay.inputs import NotReplayable

# The Triton interpreter runs kernels in NumPy: keep CPU replays small.
INTERPRETER_FLOP_LIMIT = 5e9


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def compute_dtype(device: str) -> Any:
    """bf16 on a GPU; fp32 under the Triton interpreter, whose bf16 tl.dot is wrong."""
    import torch

    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def scaled(n: int, scale: float, multiple: int = 16) -> int:
    """A dimension shrunk by `scale` (dimensions under 64 are kept), rounded to `multiple`."""
    if scale >= 1.0 or n < 64:
        return n
    return max(multiple, round(n * scale / multiple) * multiple)


def guard_interpreter(device: str, flops: float, what: str) -> None:
    if not device.startswith("cuda") and flops > INTERPRETER_FLOP_LIMIT:
        raise NotReplayable(
            f"{what}: {flops / 1e9:.0f} GFLOP is too much for the Triton interpreter on the CPU; "
            f"pass --scale {max(2 ** -int(math.log2(flops / INTERPRETER_FLOP_LIMIT) + 1), 2**-8):g} to shrink it"
        )


def label(implementation: str, device: str, scale: float, triton: bool = True) -> str:
    parts = [implementation]
    if not device.startswith("cuda"):
        parts.append("Triton interpreter (fp32)" if triton and interpreting() else "CPU")
    if scale < 1.0:
        parts.append(f"dimensions ≥ 64 scaled by {scale:g}")
    return ", ".join(parts)


def compare(
    out: Any, ref: Any, against: str = "plain-torch reference", low: float = 2e-2, full: float = 1e-4
) -> tuple[str, str]:
    """pass/fail by max |error| relative to max |reference|: `low` for bf16/fp16 outputs,
    `full` otherwise."""
    import torch

    error = float((out.float() - ref.float()).abs().max())
    tolerance = low if out.dtype in (torch.bfloat16, torch.float16) else full
    ok = error <= tolerance * max(float(ref.float().abs().max()), 1e-6)
    return ("pass" if ok else "fail"), f"max |error| {error:.3g} vs {against}"
