"""Recorded arguments (`kernel_atlas.ingest.recorded.Arg`) as replay needs them: their torch
dtypes and the bytes their tensors take (their values are made by `replay.values`)."""

from __future__ import annotations

import math

from kernel_atlas.ingest.recorded import Arg, dtypes


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
