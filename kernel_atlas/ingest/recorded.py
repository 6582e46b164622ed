"""The recorded call: one launching op's arguments as the profiler recorded them, typed once.

`Input Dims`, `Input type`, `Input Strides` and `Concrete Inputs` (kernels.parquet keeps them as
JSON text) or a catalog entry's `params` become a tuple of `Arg`: a tensor (shape, dtype,
strides), a tensor list (`aten::cat`, `aten::stack`, `_foreach_*` record nested shapes such as
`[[[1,559,32],[1,559,32]],[]]`), a scalar or list with its concrete value, or nothing. Costs
(roofline) and replay both read this model; each distinct recorded signature is parsed once
per process.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from kernel_atlas.core.paths import read_toml

TENSOR, TENSOR_LIST, SCALAR, LIST, NONE = "tensor", "tensor_list", "scalar", "list", "none"
NOT_TENSORS = ("", "Scalar", "ScalarList", "IntList", "TensorList", "GenericList", "None", "str", "Device", "Layout")


@dataclass(frozen=True)
class DType:
    bytes: int
    precision: str  # key into a device's peaks: bf16, fp16, fp32, fp8, int, ...
    torch: str  # torch dtype name used for replay


@lru_cache(maxsize=1)
def dtypes() -> dict[str, DType]:
    """catalogs/dtypes.toml: recorded dtype spellings → size, precision and torch dtype."""
    data = read_toml("dtypes.toml")
    return {name: DType(int(v["bytes"]), v["precision"], v["torch"]) for name, v in data["dtypes"].items()}


@lru_cache(maxsize=1)
def _scalar_types() -> dict[int, str]:
    return {int(code): name for code, name in read_toml("dtypes.toml").get("scalar_types", {}).items()}


def scalar_type(code: int | None) -> str | None:
    """The dtype spelling (a key of `dtypes()`) of a c10::ScalarType code as `Concrete Inputs`
    record a dtype argument (6: float, 15: c10::BFloat16, 24: c10::Float8_e4m3fn), else None."""
    name = None if code is None else _scalar_types().get(code)
    return name if name in dtypes() else None


@lru_cache(maxsize=1)
def _scalar_type_names() -> dict[str, str]:
    return dict(read_toml("dtypes.toml").get("scalar_type_names", {}))


def scalar_type_name(name: object) -> str | None:
    """The dtype spelling (a key of `dtypes()`) of a c10::ScalarType name as `c10::toString`
    writes it — NCCL's `dtype` field ("Float": float, "Float8_e4m3fn": c10::Float8_e4m3fn) —
    or of a spelling `dtypes()` holds already; else None."""
    text = str(name)
    spelling = text if text in dtypes() else _scalar_type_names().get(text)
    return spelling if spelling in dtypes() else None


def _value(text: str) -> Any:
    """A `Concrete Inputs` entry as a Python value: "True" → True, "2" → 2, "[1, 2]" → [1, 2]."""
    text = text.strip()
    if text in ("", "None"):
        return None
    if text in ("True", "False"):
        return text == "True"
    for cast in (int, float, json.loads, _python_list):
        try:
            return cast(text)
        except (ValueError, RecursionError):
            pass
    return text


_PYTHON_WORDS = re.compile(r"\b(True|False|None)\b")


def _python_list(text: str) -> Any:
    """A list the profiler wrote as Python prints it, `[True, False, None]` (an `output_mask`):
    JSON once its words are JSON's; else ValueError."""
    if not text.startswith("["):
        raise ValueError(text)
    return json.loads(_PYTHON_WORDS.sub(lambda m: {"True": "true", "False": "false", "None": "null"}[m[1]], text))


@dataclass(frozen=True)
class Arg:
    """One recorded argument. `dims` is the shape of a tensor, or the shapes of a tensor list's
    elements; `text` the raw `Concrete Inputs` entry and `value` its parsed value."""

    kind: str  # TENSOR, TENSOR_LIST, SCALAR, LIST or NONE
    dims: Any = None  # tuple[int, ...] (tensor) or tuple[tuple[int, ...], ...] (tensor list)
    dtype: str = ""  # as recorded ("c10::BFloat16", "TensorList", "Scalar", "ScalarList", "")
    strides: Any = None  # like dims, or None when not recorded
    text: str = ""
    value: Any = None
    name: str = ""  # the argument's name where recorded (a catalog entry's `description`)
    # a catalog's tensor whose shape was not recorded (`example_dim` "TBD", "N/A"): UNRECORDED;
    # a NONE of a known dtype without it is a recorded shape that was impossible (`_arg`)
    missing: str = ""

    @property
    def is_tensor(self) -> bool:
        """A tensor whose dtype catalogs/dtypes.toml knows (so its bytes can be counted)."""
        return self.kind == TENSOR and self.dtype in dtypes()

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """The tensor shapes this argument holds: one for a tensor, each element of a list."""
        if self.kind == TENSOR:
            return (self.dims,)
        return self.dims if self.kind == TENSOR_LIST else ()

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    @property
    def itemsize(self) -> int:
        return dtypes()[self.dtype].bytes

    @property
    def stored(self) -> int:
        """The distinct elements the argument's memory holds: `numel`, less the repeats of a view
        whose recorded strides address one element several times — an expanded (stride-0) axis
        counts once, overlapping windows count their span. Without strides, `numel`."""
        if self.strides is None:
            return self.numel
        strides = (self.strides,) if self.kind == TENSOR else self.strides
        return sum(_stored(shape, stride) for shape, stride in zip(self.shapes, strides, strict=False))

    @property
    def nbytes(self) -> int:
        """Bytes in memory: every distinct element once (`stored`)."""
        return self.stored * self.itemsize

    @property
    def precision(self) -> str:
        return dtypes()[self.dtype].precision

    def ints(self) -> list[int] | None:
        """The concrete value as a list of ints (`[16, 16]`, or `2` → `[2]`), else None."""
        value = self.value
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return value
        return None

    def flag(self) -> bool | None:
        """The concrete value as a boolean (True/False/1/0), else None."""
        return {True: True, False: False}.get(self.value) if isinstance(self.value, int) else None  # 1/0 too


def _stored(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Distinct elements of a view of `shape` and `strides`: at most one per index along the axes
    that move (stride ≠ 0), at most the span it reaches; exact for expanded, sliced and permuted
    views. Strides of another rank than the shape: not usable, every element counted."""
    elements = math.prod(shape)
    if len(strides) != len(shape) or elements == 0:
        return elements
    moving = math.prod(size for size, stride in zip(shape, strides, strict=True) if stride != 0)
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(shape, strides, strict=True))
    return min(moving, span)


# No GPU holds a tensor of more elements (2^50 ≈ 10^15, a petabyte of bytes): a larger recorded
# shape, or one with a negative size, is damage, not data — it counts as not recorded.
MAX_NUMEL = 1 << 50


def _ints(value: object) -> bool:
    """A list of sizes (or strides): non-negative ints, their product within `MAX_NUMEL`."""
    if not isinstance(value, list):
        return False
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_NUMEL for v in value):
        return False
    return math.prod(value) <= MAX_NUMEL


def _arg(dims: object, dtype: object, strides: object, text: object) -> Arg:
    dtype = dtype if isinstance(dtype, str) else ""
    text = text if isinstance(text, str) else ""
    known = dtype in dtypes()
    if isinstance(dims, list) and dims and not _ints(dims) and all(isinstance(v, (int, float)) for v in dims):
        return Arg(NONE, None, dtype)  # an impossible shape (negative, beyond any GPU's memory): not recorded
    if _ints(dims) and (known or (dims and dtype not in NOT_TENSORS)):  # an unknown dtype keeps its shape
        return Arg(TENSOR, tuple(dims), dtype, tuple(strides) if _ints(strides) and strides else None)  # type: ignore[arg-type]
    if dtype == "TensorList" or (isinstance(dims, list) and dims and all(_ints(d) for d in dims)):
        shapes = tuple(tuple(d) for d in dims) if isinstance(dims, list) and all(_ints(d) for d in dims) else ()
        element_strides = (
            tuple(tuple(s) for s in strides)
            if isinstance(strides, list) and len(strides) == len(shapes) and all(_ints(s) for s in strides)
            else None
        )
        return Arg(TENSOR_LIST, shapes, dtype or "TensorList", element_strides)
    if dtype in ("ScalarList", "IntList") or text.startswith("["):
        return Arg(LIST, None, dtype, None, text, _value(text) if text else None)
    if dtype == "" and not text:  # sizes without a type (PyTorch 1.8 wrote no `Input type`): kept, to say so
        return Arg(NONE, tuple(dims) if _ints(dims) and dims else None)
    return Arg(SCALAR, None, dtype, None, text, _value(text))


def _loads(text: object) -> list[Any]:
    if not isinstance(text, str) or not text:  # None/NaN: not recorded
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested beyond reason: not recorded
        return []
    return value if isinstance(value, list) else []


@lru_cache(maxsize=65536)
def parse_call(
    dims: str | None, types: str | None, strides: str | None = None, concrete: str | None = None
) -> tuple[Arg, ...]:
    """The arguments of one recorded call from its JSON text columns (missing columns: empty)."""
    dims_, types_, strides_, values = (_loads(t) for t in (dims, types, strides, concrete))

    def at(items: list[Any], i: int) -> Any:
        return items[i] if i < len(items) else None

    return tuple(
        _arg(at(dims_, i), at(types_, i), at(strides_, i), at(values, i)) for i in range(max(len(dims_), len(types_)))
    )


def type_names(types: str | None) -> list[str]:
    """The `Input type` entries of a call."""
    return [t for t in _loads(types) if isinstance(t, str)]


UNRECORDED = "not recorded"
# the reasons a call is not replayed for its tensors' shapes: the ATen path and every builder
IMPOSSIBLE_SHAPE = "a recorded input shape is impossible (negative, or beyond any GPU's memory)"
UNRECORDED_SHAPE = "shapes not recorded"
# `example_dtype` spellings of a non-tensor: its `example_dim` ("N/A", "TBD") says nothing
_SCALAR_SPELLINGS = (*NOT_TENSORS[1:], "double", "bool")


def _param(p: dict[str, Any]) -> Arg:
    dims, dtype = p.get("example_dim"), p.get("example_dtype")
    name = p.get("description") if isinstance(p.get("description"), str) else ""
    if not isinstance(dims, list) and dtype not in _SCALAR_SPELLINGS and (dims is not None or dtype in dtypes()):
        # "TBD", "N/A" (or no `example_dim` for a tensor dtype): a shape not recorded — not a
        # scalar (it had been one: "no overload of aten::mm takes the recorded argument kinds
        # ['scalar', 'scalar']"), nor the 0-d tensor `[]`
        return Arg(NONE, None, dtype if isinstance(dtype, str) else "", name=name, missing=UNRECORDED)
    value = str(p["example_value"]) if p.get("example_value") not in (None, "") else ""
    arg = _arg(dims, dtype, None, value)
    return replace(arg, name=name) if name else arg


def from_params(params: list[dict[str, Any]]) -> tuple[Arg, ...]:
    """The arguments of a catalog entry (seed schema: `example_dim`, `example_dtype`,
    `example_value`, the name in `description`); an argument whose `example_dim` is no list
    ("TBD", "N/A") and whose dtype is no scalar's is NONE, `missing` UNRECORDED."""
    return tuple(_param(p) for p in params)


def shape_refusal(args: tuple[Arg, ...]) -> str | None:
    """Why a call cannot be replayed at its recorded shapes — a tensor whose recorded shape is
    impossible (IMPOSSIBLE_SHAPE) or not recorded (UNRECORDED_SHAPE, naming them) — else None.
    A replay of such a call would invent the shape."""
    unrecorded = [a.name or f"argument {i}" for i, a in enumerate(args) if a.kind == NONE and a.missing]
    if unrecorded:
        return f"{UNRECORDED_SHAPE}: {', '.join(unrecorded)} (the catalog gives no example_dim list)"
    if any(a.kind == NONE and a.dtype in dtypes() for a in args):
        return IMPOSSIBLE_SHAPE
    return None


def example_dim(arg: Arg) -> list[Any]:
    """An argument's shape as a catalog entry writes it (`[]` for non-tensors)."""
    if arg.kind == TENSOR:
        return list(arg.dims)
    return [list(shape) for shape in arg.dims] if arg.kind == TENSOR_LIST else []


def tensor_shapes(args: tuple[Arg, ...]) -> list[tuple[int, ...]]:
    """The non-empty tensor shapes of a call, in order (scalars, lists and 0-d tensors skipped).
    A tensor whose shape is impossible or not recorded has none here: its call is refused first
    (`shape_refusal`, replay's `find_implementation`), never replayed with the others."""
    return [a.dims for a in args if a.kind == TENSOR and a.dims]


def positional_shapes(args: tuple[Arg, ...]) -> list[tuple[int, ...] | None]:
    """Each argument's tensor shape, or None where it is not a tensor (positions kept)."""
    return [a.dims if a.kind == TENSOR else None for a in args]
