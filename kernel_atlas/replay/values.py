"""Values for replayed inputs, generated where they are used.

Tensors are filled on the replay device by a generator of that device, in the tensor's own
dtype (fp8 through fp16): a GPU replay never builds an fp32 copy on the host first. Floating
values come from each op's valid domain (`catalogs/replay.toml` [domains]; N(0, 0.5²) else),
index tensors hold indices below what they index (`catalogs/replay.toml` [indices]: a loss's
classes, an embedding's rows; else the dimension of `self` they index), masks are random
booleans, other integers small non-negative numbers.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from kernel_atlas.core.paths import read_toml
from kernel_atlas.replay.checks import dtype_name
from kernel_atlas.replay.inputs import torch_dtype

FP8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
DOMAIN_KINDS = ("any", "positive", "nonzero", "open_unit", "at_least_one", "probability")


@lru_cache(maxsize=1)
def _domains() -> dict[str, dict[str, str]]:
    table = read_toml("replay.toml").get("domains", {})
    for op, arguments in table.items():
        for argument, kind in arguments.items():
            if kind not in DOMAIN_KINDS:
                raise ValueError(f"replay.toml: unknown domain {kind!r} for {op} {argument}")
    return table


_BOUND = re.compile(r"(?P<argument>\w+)(?:\.size\((?P<axis>-?\d+|\w+)\))?")


@lru_cache(maxsize=1)
def _index_bounds() -> dict[str, dict[str, tuple[str, str | None]]]:
    """catalogs/replay.toml [indices], each bound parsed: (argument, None) for a scalar
    argument's value, (argument, axis) for a tensor argument's size along an axis (an integer or
    a scalar argument's name)."""
    table: dict[str, dict[str, tuple[str, str | None]]] = {}
    for op, arguments in read_toml("replay.toml").get("indices", {}).items():
        for argument, text in arguments.items():
            found = _BOUND.fullmatch(str(text))
            if found is None:
                raise ValueError(f"replay.toml: [indices] {op} {argument} = {text!r} is no bound")
            table.setdefault(op, {})[argument] = (found["argument"], found["axis"])
    return table


def index_bounds(op: str) -> dict[str, tuple[str, str | None]]:
    """The arguments of an ATen op that index something, and what bounds their values
    (catalogs/replay.toml [indices]; `aten::nll_loss_forward_` shares `aten::nll_loss_forward`'s)."""
    return _index_bounds().get(op) or _index_bounds().get(op.rstrip("_")) or {}


def comparable(op: str) -> bool:
    """False for ops whose output is random or uninitialised (catalogs/replay.toml [values])."""
    return op not in _not_comparable()


@lru_cache(maxsize=1)
def _not_comparable() -> frozenset[str]:
    return frozenset(read_toml("replay.toml").get("values", {}).get("not_comparable", []))


def domain_of(op: str, argument: str) -> str:
    """The value domain of one argument of an ATen op (`aten::rsqrt_` shares `aten::rsqrt`'s)."""
    entry = _domains().get(op) or _domains().get(op.rstrip("_")) or {}
    return entry.get(argument, "any")


def generator(device: str, seed: int = 0) -> Any:
    """A random generator on the replay device."""
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def fill_random(tensor: Any, generator: Any, domain: str = "any", high: int | None = None) -> Any:
    """Fill a contiguous tensor in place with values valid for `domain` (floats) or in
    [0, high) (integers), generated on the tensor's device in its dtype."""
    import torch

    dtype, device, shape = tensor.dtype, tensor.device, tensor.shape
    if tensor.numel() == 0:
        return tensor
    if dtype == torch.bool:
        return tensor.copy_(torch.rand(shape, device=device, generator=generator) < 0.5)
    if dtype.is_complex:
        return tensor.copy_(torch.randn(shape, device=device, dtype=dtype, generator=generator) * 0.5)
    if not dtype.is_floating_point:
        top = max(int(high if high is not None else 8), 1)
        # an integer divisor (or a value that must be positive or at least one) is never 0: a
        # long/long div had checked "NaN at 38 places", a remainder raised ZeroDivisionError
        low = 1 if domain in ("nonzero", "positive", "at_least_one") and high is None else 0
        values = torch.randint(low, max(top, low + 1), shape, device=device, dtype=dtype, generator=generator)
        return tensor.copy_(values)
    fp8 = dtype_name(dtype) in FP8
    work = torch.float16 if fp8 else dtype

    def uniform(low: float, top: float) -> Any:
        return torch.rand(shape, device=device, dtype=work, generator=generator) * (top - low) + low

    if domain == "positive":
        values = uniform(0.25, 2.0)
    elif domain == "nonzero":
        sign = torch.where(torch.rand(shape, device=device, generator=generator) < 0.5, -1.0, 1.0).to(work)
        values = uniform(0.5, 1.5) * sign
    elif domain == "open_unit":
        values = uniform(-0.9, 0.9)
    elif domain == "at_least_one":
        values = uniform(1.1, 3.0)
    elif domain == "probability":
        values = uniform(0.05, 0.95)
    else:
        values = torch.randn(shape, device=device, dtype=work, generator=generator) * 0.5
    if fp8:
        values = values.clamp(-4, 4)
    return tensor.copy_(values)


def make_tensor(
    dims: tuple[int, ...],
    dtype_name: str,
    device: str,
    strides: tuple[int, ...] | None = None,
    high: int | None = None,
    generator: Any = None,
    domain: str = "any",
) -> Any:
    """A tensor of the recorded shape/dtype/strides (`empty_strided`) with valid values."""
    import torch

    dtype = torch_dtype(dtype_name)
    if strides is not None and len(strides) == len(dims) and dims:
        tensor = torch.empty_strided(dims, strides, dtype=dtype, device=device)
    else:
        tensor = torch.empty(dims, dtype=dtype, device=device)
    if tensor.numel() == 0:
        return tensor
    # fill through the underlying storage so that non-contiguous layouts are fully initialised
    base = tensor.as_strided((tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0)
    fill_random(base, generator if generator is not None else _default(device), domain, high)
    return tensor


def randn(shape: tuple[int, ...], dtype: Any, device: str, generator: Any, std: float = 1.0) -> Any:
    """N(0, std²) values of `dtype` made on `device` (fp8: through fp16)."""
    import torch

    fp8 = dtype_name(dtype) in FP8
    values = torch.randn(shape, device=device, dtype=torch.float16 if fp8 else dtype, generator=generator)
    values = values * std if std != 1.0 else values
    return values.to(dtype) if fp8 else values


def _default(device: str) -> Any:
    return generator(device, 0)
