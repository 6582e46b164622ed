"""Recorded arguments (`kernel_atlas.ingest.recorded.Arg`) → real torch values: tensors of the
recorded shape, dtype and strides (`empty_strided`), tensor lists, scalars and lists from
`Concrete Inputs`.

Values are chosen so the op is valid: floating tensors are small normal values, index tensors
hold indices in range of the tensor they index, masks are random booleans, other integer
tensors small non-negative numbers.
"""

from __future__ import annotations

import math

from kernel_atlas.ingest.recorded import Arg, dtypes

FP8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


class NotReplayable(Exception):
    """This call cannot be replayed here, and why."""


def torch_dtype(name: str):  # -> torch.dtype
    import torch

    spec = dtypes().get(name)
    if spec is None or not hasattr(torch, spec.torch):
        raise NotReplayable(f"unknown dtype {name!r}")
    return getattr(torch, spec.torch)


def nbytes(args: tuple[Arg, ...]) -> int:
    """Bytes the recorded tensors take (tensor-list elements, whose dtype is not recorded: 4)."""
    size = {a.dtype: dtypes()[a.dtype].bytes if a.dtype in dtypes() else 4 for a in args}
    return sum(math.prod(shape) * size[a.dtype] for a in args for shape in a.shapes)


def make_tensor(
    dims: tuple[int, ...],
    dtype_name: str,
    device: str,
    strides: tuple[int, ...] | None = None,
    high: int | None = None,
    generator=None,
):
    """A tensor of the recorded shape/dtype/strides with valid values."""
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
    if dtype == torch.bool:
        base.copy_(torch.rand(base.shape, generator=generator) < 0.5)
    elif dtype.is_floating_point:
        values = torch.randn(base.shape, generator=generator) * 0.5
        if str(dtype).split(".")[-1] in FP8:
            values = values.clamp(-4, 4)
        base.copy_(values.to(dtype))
    elif dtype.is_complex:
        base.copy_(torch.randn(base.shape, dtype=dtype, generator=generator))
    else:
        top = max(int(high if high is not None else 8), 1)
        base.copy_(torch.randint(0, top, base.shape, generator=generator).to(dtype))
    return tensor
