"""Shared pieces of the replay kernels: scaling and the CPU budget, device policy, labels."""

from __future__ import annotations

import math
import os
from typing import Any

from kernel_atlas.replay.inputs import NotReplayable

# The Triton interpreter runs kernels in NumPy at some 20 MFLOP/s (2 cores): keep a CPU replay
# of a GEMM-like kernel to a few seconds per launch.
INTERPRETER_FLOP_LIMIT = 6e7
INTERPRETER_PROGRAM_LIMIT = 256  # the interpreter runs programs one after another, ~1-10 ms each
CPU_BYTES_LIMIT = 256 << 20  # buffers one CPU replay may allocate


class TooLargeForCPU(NotReplayable):
    """Too much work or memory for a replay on the CPU; `scale` is the factor that fits."""

    def __init__(self, message: str, scale: float) -> None:
        super().__init__(message)
        self.scale = scale


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


def _fitting_scale(cost: float, limit: float, dims: int) -> float:
    """The largest power of two s ≤ 1/2 with cost · s^dims ≤ limit (cost grows with `dims` scaled dims)."""
    fits = (limit / cost) ** (1.0 / dims)
    return min(0.5, 2.0 ** math.floor(math.log2(fits)))


def _refuse_on_cpu(device: str, cost: float, limit: float, dims: int, too_much: str) -> None:
    if not device.startswith("cuda") and cost > limit:
        fit = _fitting_scale(cost, limit, dims)
        raise TooLargeForCPU(f"{too_much}; --scale {fit:g} shrinks it", fit)


def guard_interpreter(device: str, flops: float, what: str, dims: int = 3) -> None:
    """Refuse more than INTERPRETER_FLOP_LIMIT on the CPU; the exception carries the scale that fits
    (`dims`: how many of the problem's scaled dimensions the FLOP count grows with)."""
    too_much = f"{what}: {flops / 1e9:.1f} GFLOP is too much for the Triton interpreter on the CPU"
    _refuse_on_cpu(device, flops, INTERPRETER_FLOP_LIMIT, dims, too_much)


def guard_programs(device: str, programs: int, what: str, dims: int = 1) -> None:
    """Refuse launches of more than INTERPRETER_PROGRAM_LIMIT programs on the CPU, likewise."""
    too_much = f"{what}: {programs} programs are too many for the Triton interpreter on the CPU"
    _refuse_on_cpu(device, programs, INTERPRETER_PROGRAM_LIMIT, dims, too_much)


def guard_cpu_bytes(device: str, nbytes: float, what: str, dims: int = 2) -> None:
    """Refuse buffers over CPU_BYTES_LIMIT on the CPU, likewise."""
    too_much = f"{what}: {nbytes / (1 << 30):.2f} GiB of buffers is too much for a CPU replay"
    _refuse_on_cpu(device, nbytes, CPU_BYTES_LIMIT, dims, too_much)


def label(implementation: str, device: str, scale: float, triton: bool = True) -> str:
    parts = [implementation]
    if not device.startswith("cuda"):
        parts.append("Triton interpreter (fp32)" if triton and interpreting() else "CPU")
    if scale < 1.0:
        parts.append(f"dimensions ≥ 64 scaled by {scale:g}")
    return ", ".join(parts)
