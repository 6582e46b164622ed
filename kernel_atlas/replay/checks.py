"""Whether a replay computed the right thing: one comparison routine and guard regions.

* The tolerance comes from the dtype of the output being checked (not of some input): a
  float32 result is held to float32 accuracy even when its inputs were bf16, a bf16 result to
  bf16 accuracy even when a float64 scalar took part.
* Integer and boolean outputs must match exactly.
* Non-finite values prove nothing: a NaN in the reference fails the check (the inputs were
  outside the op's domain, or the reference itself is wrong), a NaN in the output where the
  reference is finite fails it, and infinities must sit at the same places with the same sign.
* Guard regions: outputs that a kernel writes are views into a larger buffer whose margins
  hold a sentinel; a kernel that writes past its output (a dropped mask, an off-by-one bound)
  changes a margin, and the check says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Allowed max |output − reference| relative to max |reference|, by the output's dtype. fp8:
# e4m3 keeps 3 mantissa bits, e5m2 two; tf32 matmuls keep 10 bits of each product.
TOLERANCE = {
    "float64": 1e-9,
    "float32": 2e-3,
    "tf32": 1e-2,
    "float16": 5e-3,
    "bfloat16": 3e-2,
    "float8_e4m3fn": 7e-2,
    "float8_e4m3fnuz": 7e-2,
    "float8_e5m2": 1.3e-1,
    "float8_e5m2fnuz": 1.3e-1,
    "complex64": 2e-3,
    "complex128": 1e-9,
}

GUARD_ELEMENTS = 4096  # margin on each side of a guarded output (more than one block of any kernel here)


def dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def tolerance(dtype: Any, factor: float = 1.0, precision: str | None = None) -> float:
    """Relative tolerance for an output of `dtype` (or of the named `precision`, e.g. "tf32")."""
    return TOLERANCE.get(precision or dtype_name(dtype), 3e-2) * factor


def compare(
    out: Any, ref: Any, against: str = "plain-torch reference", *, factor: float = 1.0, precision: str | None = None
) -> tuple[str, str]:
    """pass/fail of one output tensor against its reference (any dtype, any device)."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return "fail", f"shape {tuple(out.shape)} != {tuple(ref.shape)} of the {against}"
    if out.numel() == 0:
        return "pass", f"empty output, as the {against}"
    if not (out.dtype.is_floating_point or out.dtype.is_complex):
        ref_cast = ref.detach().to(out.device)
        if ref_cast.dtype != out.dtype:
            ref_cast = ref_cast.round().to(out.dtype) if ref_cast.dtype.is_floating_point else ref_cast.to(out.dtype)
        wrong = int((out != ref_cast).sum())
        if wrong:
            return "fail", f"{wrong} of {out.numel()} integer values differ from the {against}"
        return "pass", f"exact match with the {against}"
    wide = torch.complex128 if out.dtype.is_complex else torch.float64
    o, r = out.detach().to(wide), ref.detach().to(out.device).to(wide)
    r_nan, o_nan = r.isnan(), o.isnan()
    if bool(r_nan.any()):
        return "fail", f"the {against} is NaN at {int(r_nan.sum())} places: inputs outside the op's domain?"
    if bool(o_nan.any()):
        return "fail", f"NaN at {int(o_nan.sum())} places where the {against} is finite"
    r_inf, o_inf = r.isinf(), o.isinf()
    if bool(r_inf.any()) or bool(o_inf.any()):
        if not torch.equal(r_inf, o_inf) or not torch.equal(o[o_inf], r[r_inf]):
            return "fail", f"infinities differ from the {against}"
        o, r = o[~o_inf], r[~r_inf]
    if r.numel() == 0:
        return "pass", f"same infinities as the {against}"
    scale = float(r.abs().max())
    error = float((o - r).abs().max())
    allowed = tolerance(out.dtype, factor, precision) * max(scale, 1e-6)
    verdict = "pass" if error <= allowed else "fail"
    return verdict, f"max |error| {error:.3g} vs {against} (tolerance {allowed:.3g})"


def combine(*verdicts: tuple[str, str]) -> tuple[str, str]:
    """One verdict for several outputs: the first failure, else the first reason."""
    for verdict in verdicts:
        if verdict[0] == "fail":
            return verdict
    for verdict in verdicts:
        if verdict[0] == "skipped":
            return verdict
    return verdicts[0] if verdicts else ("skipped", "nothing to check")


def _sentinel(dtype: Any) -> float | int | bool:
    import torch

    if dtype == torch.bool:
        return True
    if dtype.is_floating_point:
        return -3.0  # exactly representable in every float format, fp8 included
    if dtype == torch.uint8:
        return 0x5A
    # values no index or count takes; the int64 one does not fit in 32 bits, so an int64 read
    # past an input and stored into an int32 output does not look like an untouched sentinel
    return -0x5A5A5A5A5A5A if dtype == torch.int64 else -0x5A5A5A


@dataclass
class Guarded:
    """An output tensor (`.tensor`) inside a buffer with sentinel-filled margins."""

    buffer: Any
    tensor: Any
    margin: int
    pattern: Any  # the sentinel's bytes

    def _differs(self, part: Any) -> Any:
        """Per element of a flat part of the buffer: does it differ from the sentinel?"""
        import torch

        return (part.reshape(-1).view(torch.uint8).view(-1, self.pattern.numel()) != self.pattern).any(dim=1)

    def _changed(self, part: Any) -> int:
        return int(self._differs(part).sum())

    def written(self) -> int:
        """How many elements of the output no longer hold the sentinel."""
        return self._changed(self.tensor)

    def breached(self) -> str | None:
        """None when both margins are intact, else what was written where."""
        n = self.tensor.numel()
        for name, part in (("before", self.buffer[: self.margin]), ("after", self.buffer[self.margin + n :])):
            changed = self._changed(part)
            if changed:
                return f"{changed} values written {name} the output"
        return None

    def check(self, verdict: tuple[str, str]) -> tuple[str, str]:
        """`verdict` (of the output's values), failed when a margin was written."""
        breach = self.breached()
        return ("fail", f"{breach} (guard region); {verdict[1]}") if breach else verdict


def guarded(shape: tuple[int, ...], dtype: Any, device: str, margin: int = GUARD_ELEMENTS) -> Guarded:
    """A contiguous output of `shape` with `margin` sentinel elements before and after it."""
    import math

    import torch

    n = math.prod(shape)
    pattern = torch.tensor([_sentinel(dtype)], device=device).to(dtype).view(torch.uint8)
    buffer = torch.empty(n + 2 * margin, dtype=dtype, device=device)
    buffer.view(torch.uint8).view(-1, pattern.numel()).copy_(pattern.expand(n + 2 * margin, -1))
    return Guarded(buffer, buffer[margin : margin + n].view(shape), margin, pattern)


def inside_guard(values: Any) -> Any:
    """A contiguous copy of `values` inside a guarded buffer: a kernel that reads past an input
    (a dropped mask) finds the sentinel there, which spoils its output, instead of whatever
    memory follows."""
    holder = guarded(tuple(values.shape), values.dtype, str(values.device))
    holder.tensor.copy_(values)
    return holder.tensor
