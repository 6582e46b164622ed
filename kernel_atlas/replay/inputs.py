"""Recorded op arguments: tensors of the recorded shape, dtype and strides, tensor lists,
scalars and lists from `Concrete Inputs` (their values are made by `replay.values`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from kernel_atlas.roofline.shapes import dtypes


class NotReplayable(Exception):
    """This call cannot be replayed here, and why."""


@dataclass(frozen=True)
class Recorded:
    """One recorded argument."""

    kind: str  # "tensor", "tensor_list", "scalar", "list", "none"
    dims: Any = None  # tuple for tensors, list of tuples for tensor lists
    dtype: str = ""
    strides: Any = None
    value: Any = None


def _loads(text: str | None) -> list[Any]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("", "None"):
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_recorded(
    dims_text: str | None, types_text: str | None, strides_text: str | None, concrete_text: str | None
) -> list[Recorded]:
    dims, types, strides, values = (_loads(t) for t in (dims_text, types_text, strides_text, concrete_text))
    known = dtypes()
    out = []
    for i in range(max(len(dims), len(types))):
        d = dims[i] if i < len(dims) else []
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        s = strides[i] if i < len(strides) else None
        v = values[i] if i < len(values) and isinstance(values[i], str) else ""
        if t in known and isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append(Recorded("tensor", tuple(d), t, tuple(s) if isinstance(s, list) and s else None))
        elif t == "TensorList" or (isinstance(d, list) and d and all(isinstance(x, list) for x in d)):
            out.append(Recorded("tensor_list", [tuple(x) for x in d], t))
        elif t in ("ScalarList", "IntList") or (isinstance(v, str) and v.startswith("[")):
            out.append(Recorded("list", value=_scalar(v) if v else None))
        elif t == "" and not v:
            out.append(Recorded("none"))
        else:
            out.append(Recorded("scalar", dtype=t, value=_scalar(v)))
    return out


def torch_dtype(name: str):  # -> torch.dtype
    import torch

    spec = dtypes().get(name)
    if spec is None or not hasattr(torch, spec.torch):
        raise NotReplayable(f"unknown dtype {name!r}")
    return getattr(torch, spec.torch)


def nbytes(recorded: list[Recorded]) -> int:
    total = 0
    for r in recorded:
        shapes = [r.dims] if r.kind == "tensor" else (r.dims or []) if r.kind == "tensor_list" else []
        for shape in shapes:
            size = dtypes()[r.dtype].bytes if r.dtype in dtypes() else 4
            total += math.prod(shape) * size
    return total
