"""Shared pieces of the replay kernels: scaling and the CPU budget, device policy, labels."""

from __future__ import annotations

import math
import os
from typing import Any

from kernel_atlas.replay.checks import dtype_name
from kernel_atlas.replay.inputs import NotReplayable

# The Triton interpreter runs kernels in NumPy at some 20 MFLOP/s (2 cores): keep a CPU replay
# of a GEMM-like kernel to a few seconds per launch.
INTERPRETER_FLOP_LIMIT = 6e7
INTERPRETER_PROGRAM_LIMIT = 256  # the interpreter runs programs one after another, ~1-10 ms each
# ... and what a tiled GEMM's launch costs there is its programs, not its FLOPs: each program's
# ops are dispatched one by one (fused_moe_kernel, 2 cores: some 12 ms a program plus 2 ms per
# step of its K loop, at most; 384 programs of K = 2 took 5.2 s for 2 MFLOP). A launch estimated
# beyond INTERPRETER_SECONDS is shrunk: a fused MoE of hidden size 2 and 2,560 programs passed the
# FLOP limit and took 21 s a launch, 98 s a replay (a replay runs a launch 4-5 times).
INTERPRETER_PROGRAM_S = 0.012
INTERPRETER_STEP_S = 0.002
INTERPRETER_SECONDS = 3.0
CPU_BYTES_LIMIT = 256 << 20  # buffers one CPU replay may allocate


class TooLargeForCPU(NotReplayable):
    """Too much work or memory for a replay on the CPU; `scale` is the factor that fits."""

    def __init__(self, message: str, scale: float) -> None:
        super().__init__(message)
        self.scale = scale


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# the floating dtypes a replay computes in as recorded (fp8 inputs are cast by their builders)
_ACTIVATION_DTYPES = ("float16", "bfloat16", "float32")


def recorded_dtype(target: Any) -> Any | None:
    """The torch dtype of the first floating fp16/bf16/fp32 tensor the target's call recorded (its
    activations), or None where none is recorded (catalog entries without dtypes)."""
    from kernel_atlas.ingest.recorded import TENSOR, dtypes
    from kernel_atlas.replay.inputs import torch_dtype

    for arg in getattr(target, "args", ()) or ():
        if arg.kind == TENSOR and arg.dtype in dtypes():
            dtype = torch_dtype(arg.dtype)
            if dtype_name(dtype) in _ACTIVATION_DTYPES:
                return dtype
    return None


def activation_dtype(arg: Any) -> Any | None:
    """The torch dtype of one recorded tensor where it is fp16, bf16 or fp32, else None."""
    from kernel_atlas.ingest.recorded import TENSOR, dtypes
    from kernel_atlas.replay.inputs import torch_dtype

    if arg is None or arg.kind != TENSOR or arg.dtype not in dtypes():
        return None
    dtype = torch_dtype(arg.dtype)
    return dtype if dtype_name(dtype) in _ACTIVATION_DTYPES else None


def compute_dtype(device: str, target: Any = None, recorded: Any = None) -> Any:
    """The recorded activation dtype on a GPU — `recorded` where the builder knows which tensor's
    dtype the kernel computes in (the MoE's hidden states, a GEMM's output), else `target`'s
    first activation's; bf16 where none is recorded — and fp32 on the CPU, whose Triton
    interpreter computes bf16 tl.dot wrongly (the label says so)."""
    import torch

    if not device.startswith("cuda"):
        return torch.float32
    return recorded or recorded_dtype(target) or torch.bfloat16


def recorded_scalar(target: Any, default: float, what: str = "eps") -> tuple[float, str]:
    """The call's recorded floating scalar (an RMSNorm's epsilon: the only float it takes), else
    `default`; and a note for the label where the default was assumed."""
    from kernel_atlas.ingest.recorded import SCALAR

    for arg in getattr(target, "args", ()) or ():
        if arg.kind == SCALAR and isinstance(arg.value, float):
            return arg.value, ""
    return default, f"{what}={default:g} assumed (not recorded)"


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


def guard_interpreter(
    device: str, flops: float, what: str, dims: int = 3, *, programs: int | None = None, steps: int = 1, idle: int = 0
) -> None:
    """Refuse more than INTERPRETER_FLOP_LIMIT on the CPU; the exception carries the scale that fits
    (`dims`: how many of the problem's scaled dimensions the FLOP count grows with). Given the
    launch's `programs` (each `steps` iterations of its inner loop; `idle` more that return at
    once, counted as one step), refuse too a launch the interpreter would take more than
    INTERPRETER_SECONDS for, whatever its FLOPs (programs grow with two scaled dimensions)."""
    too_much = f"{what}: {flops / 1e9:.1f} GFLOP is too much for the Triton interpreter on the CPU"
    _refuse_on_cpu(device, flops, INTERPRETER_FLOP_LIMIT, dims, too_much)
    if programs is None:
        return
    seconds = programs * (INTERPRETER_PROGRAM_S + steps * INTERPRETER_STEP_S) + idle * INTERPRETER_STEP_S
    too_long = (
        f"{what}: {programs} programs of {steps} step(s) would take some {seconds:.0f} s a launch in the "
        "Triton interpreter on the CPU"
    )
    _refuse_on_cpu(device, seconds, INTERPRETER_SECONDS, 2, too_long)


def guard_programs(device: str, programs: int, what: str, dims: int = 1) -> None:
    """Refuse launches of more than INTERPRETER_PROGRAM_LIMIT programs on the CPU, likewise."""
    too_much = f"{what}: {programs} programs are too many for the Triton interpreter on the CPU"
    _refuse_on_cpu(device, programs, INTERPRETER_PROGRAM_LIMIT, dims, too_much)


def guard_cpu_bytes(device: str, nbytes: float, what: str, dims: int = 2) -> None:
    """Refuse buffers over CPU_BYTES_LIMIT on the CPU, likewise."""
    too_much = f"{what}: {nbytes / (1 << 30):.2f} GiB of buffers is too much for a CPU replay"
    _refuse_on_cpu(device, nbytes, CPU_BYTES_LIMIT, dims, too_much)


def label(
    implementation: str,
    device: str,
    scale: float,
    triton: bool = True,
    *,
    target: Any = None,
    dtype: Any = None,
    recorded: Any = None,
) -> str:
    """The implementation label: what ran, where, at what scale, and — given the `target` (or the
    `recorded` dtype the builder read) and the `dtype` it computed in — the recorded dtype where
    the replay ran another."""
    parts = [implementation]
    if not device.startswith("cuda"):
        parts.append("Triton interpreter (fp32)" if triton and interpreting() else "CPU")
    if recorded is None and target is not None and dtype is not None:
        recorded = recorded_dtype(target)
    if recorded is not None and dtype is not None and recorded != dtype:
        name = dtype_name(dtype)
        parts.append(f"run in {name}, recorded {dtype_name(recorded)}: bytes and time are of {name}")
    if scale < 1.0:
        parts.append(f"dimensions ≥ 64 scaled by {scale:g}")
    return ", ".join(parts)
