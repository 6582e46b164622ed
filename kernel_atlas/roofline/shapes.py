"""Recorded op inputs (Input Dims / Input type / Concrete Inputs) as typed arguments."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

from kernel_atlas.paths import read_toml


@dataclass(frozen=True)
class DType:
    bytes: int
    precision: str
    torch: str  # torch dtype name used for replay


@lru_cache(maxsize=1)
def dtypes() -> dict[str, DType]:
    data = read_toml("dtypes.toml")
    return {name: DType(int(v["bytes"]), v["precision"], v["torch"]) for name, v in data["dtypes"].items()}


@dataclass(frozen=True)
class Arg:
    dims: tuple[int, ...] | None  # None: not a tensor (scalar, list, missing)
    dtype: str
    value: str  # Concrete Inputs entry ("" for tensors)

    @property
    def is_tensor(self) -> bool:
        return self.dims is not None and self.dtype in dtypes()

    @property
    def numel(self) -> int:
        return math.prod(self.dims) if self.dims else (1 if self.dims == () else 0)

    @property
    def itemsize(self) -> int:
        return dtypes()[self.dtype].bytes

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def precision(self) -> str:
        return dtypes()[self.dtype].precision


def _dims(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


@lru_cache(maxsize=65536)
def parse_args(dims_text: str | None, types_text: str | None, concrete_text: str | None) -> tuple[Arg, ...]:
    """Typed arguments of a launching op; unknown dtypes are kept as non-tensors."""

    def load(text: object) -> list:
        return json.loads(text) if isinstance(text, str) and text else []  # None/NaN: not recorded

    try:
        dims, types, values = load(dims_text), load(types_text), load(concrete_text)
    except ValueError:
        return ()
    count = max(len(dims), len(types))
    args = []
    for i in range(count):
        d = _dims(dims[i]) if i < len(dims) else None
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        v = values[i] if i < len(values) and isinstance(values[i], str) else ""
        args.append(Arg(d if t in dtypes() else None, t, v))
    return tuple(args)


def int_list(value: str) -> list[int] | None:
    """Concrete ScalarList text such as "[16, 16]" → [16, 16]."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    if isinstance(parsed, int):
        return [parsed]
    if isinstance(parsed, list) and all(isinstance(v, int) for v in parsed):
        return parsed
    return None


def truthy(value: str) -> bool | None:
    return {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
