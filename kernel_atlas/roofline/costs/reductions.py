"""Reductions, scans, sorts and selections: what they read and what they write per output element."""

from __future__ import annotations

import math

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.ingest.recorded import Arg, dtypes, scalar_type
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    concrete_int,
    inductor_bytes,
    no_tensors,
    optional_tensor_at,
    register,
    tensors_of,
    triton_launcher,
)
from kernel_atlas.roofline.costs.pointwise import pointwise_cost

# Reductions whose second argument is the dim (or dims) reduced over, by launcher, with what they
# write per output element: values (the input's dtype), int64 indices, or a 1-byte bool
# (ATen's schemas: sum.dim_IntList(self, dim, keepdim, dtype), max.dim(self, dim, keepdim) →
# (values, indices), argmax(self, dim, keepdim), all.dim(self, dim, keepdim), …; norm and
# linalg_vector_norm take `ord` first, their dim at 2)
_VALUES, _INDICES, _BOOL = "values", "int64 indices", "bool"
_DIM_REDUCTIONS: dict[str, tuple[int, tuple[str, ...]]] = {
    **dict.fromkeys(
        (
            "aten::sum",
            "aten::nansum",
            "aten::mean",
            "aten::prod",
            "aten::std",
            "aten::var",
            "aten::amax",
            "aten::amin",
            "aten::logsumexp",
        ),
        (1, (_VALUES,)),
    ),
    **dict.fromkeys(("aten::norm", "aten::linalg_vector_norm"), (2, (_VALUES,))),
    **dict.fromkeys(("aten::var_mean", "aten::std_mean", "aten::aminmax"), (1, (_VALUES, _VALUES))),
    **dict.fromkeys(("aten::argmax", "aten::argmin", "aten::count_nonzero"), (1, (_INDICES,))),
    **dict.fromkeys(("aten::all", "aten::any"), (1, (_BOOL,))),
    # max(self) → one value; max.dim(self, dim, keepdim) → values and indices (max.other: pointwise)
    **dict.fromkeys(("aten::max", "aten::min", "aten::median", "aten::nanmedian"), (1, (_VALUES, _INDICES))),
}
# the arguments of each one's overload without a dim (sum(self, dtype), var(self, unbiased),
# max(self), all(self)): a call recording no more reduces over every axis and, for max/min/median,
# writes the value alone
_FULL_ARITY = {
    **dict.fromkeys(
        (
            "aten::sum",
            "aten::nansum",
            "aten::mean",
            "aten::prod",
            "aten::std",
            "aten::var",
            "aten::var_mean",
            "aten::std_mean",
            "aten::norm",
        ),
        2,
    ),
    **dict.fromkeys(("aten::max", "aten::min", "aten::median", "aten::nanmedian", "aten::all", "aten::any"), 1),
}
# values and indices along a dim (max.dim), the value alone over every axis (max(self))
_VALUE_ONLY_WHEN_FULL = frozenset(op for op, (_, out) in _DIM_REDUCTIONS.items() if out == (_VALUES, _INDICES))
# ops of the scan/sort family writing as many elements as they read, by launcher: values and
# indices (sort, cummax), indices only (argsort); others (cumsum, unique) their values
_SCANS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("aten::sort", "aten::cummax", "aten::cummin"), (_VALUES, _INDICES)),
    "aten::argsort": (_INDICES,),
}
# reductions accumulating values, by launcher, with their recorded arities (without an `out=`
# tensor) of the overloads whose last argument is `dtype` (sum(self, dtype), sum.dim_IntList(self,
# dim, keepdim, dtype), cumsum(self, dim, dtype), …): the values take that dtype when it is
# recorded, else int64 for an integer or bool input (ATen promotes them; mean refuses them)
_ACCUMULATING: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(("aten::sum", "aten::prod", "aten::mean"), (2, 4)),
    "aten::nansum": (4,),
    **dict.fromkeys(("aten::cumsum", "aten::cumprod"), (3,)),
}
_PROMOTED_TO_INT64 = frozenset(("aten::sum", "aten::nansum", "aten::prod", "aten::cumsum", "aten::cumprod"))


def _without_out(call: Call) -> tuple[Arg, ...]:
    """The call's arguments but a last tensor after self (an `out=` overload's output: sum.out,
    sum.IntList_out), so its arity names the overload it writes like."""
    return call.args[:-1] if _recorded_out(call) is not None else call.args


def _recorded_out(call: Call) -> Arg | None:
    """A last tensor after self (an `out=` overload's output: sum.IntList_out(self, dim, keepdim,
    dtype, *, out)), else None."""
    return call.args[-1] if len(call.args) > 1 and call.args[-1].is_tensor else None


def _values_dtype(call: Call, x: Arg) -> tuple[int, str]:
    """Bytes per value an accumulating reduction writes, with a note where it is not the input's:
    the recorded `dtype` argument's (a ScalarType code), else int64 for an integer or bool input."""
    args = _without_out(call)
    if call.launcher not in _ACCUMULATING or len(args) not in _ACCUMULATING[call.launcher]:
        return x.itemsize, ""
    name = scalar_type(concrete_int(call, len(args) - 1))
    if name is not None:
        size = dtypes()[name].bytes
        return size, ("" if name == x.dtype else f" (dtype argument: {name} values)")
    if call.launcher in _PROMOTED_TO_INT64 and dtypes()[x.dtype].precision in ("int", "int8"):
        return 8, " (an integer input: int64 values)"
    return x.itemsize, ""


# top-k family: (k's position or None, dim's position, dim's default) → values and indices per row
_SELECTIONS: dict[str, tuple[int | None, int, int]] = {
    "aten::topk": (1, 2, -1),  # topk(self, k, dim=-1, largest, sorted)
    "aten::kthvalue": (None, 2, -1),  # kthvalue(self, k, dim=-1, keepdim): one per row
    "aten::mode": (None, 1, -1),  # mode(self, dim=-1, keepdim)
}


def _written(numel: int, x: Arg, outputs: tuple[str, ...], values: int | None = None) -> tuple[int, str]:
    """Bytes of `numel` elements of each output (values at `values` bytes, else the input's
    dtype's; int64 indices; bools)."""
    sizes = {_VALUES: x.itemsize if values is None else values, _INDICES: 8, _BOOL: 1}
    written = sum(numel * sizes[kind] for kind in outputs)
    return written, " + ".join(f"{kind} {numel}·{sizes[kind]}" for kind in outputs)


def _reduced_dims(call: Call, x: Arg, index: int) -> tuple[list[int] | None, str]:
    """The axes a reduction reduces over (its dim argument at `index`; negative from the end), all
    of them where the dim is recorded as None or the overload has none, else None (not recorded)."""
    rank = len(x.dims)
    arg = call.args[index] if index < len(call.args) else None
    dims = arg.ints() if arg is not None and arg.value is not None else None
    if dims is not None:
        return ([d % rank for d in dims] if dims and rank else list(range(rank))), ""
    if index >= len(call.args) or rank <= 1:  # no dim argument, or one axis at most: all of them
        return list(range(rank)), ""
    if arg is not None and arg.dtype in ("", "None") and any(a.text.strip() for a in call.args):
        return list(range(rank)), ""  # Concrete Inputs recorded and the dim None (no type): all of them
    return None, " (dims not recorded: output not counted)"


@register(ops=("sum", "mean", "max", "argmax", "cumsum", "topk", "sort"))
def _reduction(call: Call) -> Cost:
    """Every input element read once (one FLOP each), every output written once: a reduction's
    output keeps the axes not reduced, and what it writes per element — values at the input's
    dtype, int64 indices (argmax, max.dim, sort, topk), 1-byte bools (all, any) — follows the
    op's schema; a full reduction writes one element. A recorded `out=` tensor (`_recorded_out`)
    of a one-output reduction is what it writes, whether or not its dims were recorded."""
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    if triton_launcher(call.launcher):
        return _inductor_reduction(tensors, call.launcher)
    x = tensors[0]
    launcher = call.launcher
    if launcher in ("aten::max", "aten::min") and len(tensors) >= 2 and optional_tensor_at(call, 1) is not None:
        return pointwise_cost(call)  # max.other(self, other): elementwise
    if launcher in _SELECTIONS:
        return _selection(call, x)
    if launcher in _DIM_REDUCTIONS:
        index, outputs = _DIM_REDUCTIONS[launcher]
        if len(_without_out(call)) <= _FULL_ARITY.get(launcher, 0):  # the overload without a dim
            reduced, note = list(range(len(x.dims))), ""
            outputs = (_VALUES,) if launcher in _VALUE_ONLY_WHEN_FULL else outputs
        else:
            reduced, note = _reduced_dims(call, x, index)
    elif call.op_mapping in ("cumsum", "sort", "topk"):
        outputs = _SCANS.get(launcher, (_VALUES,))
        size, dtype_note = _values_dtype(call, x)
        written, what = _written(x.numel, x, outputs, size)
        formula = f"{x.numel} elements read; output {what}{dtype_note}"
        return Cost(float(x.numel), x.nbytes + written, x.precision, VECTOR, formula)
    else:  # the dims among its next two arguments, as recorded (pooling ops and others)
        outputs, reduced, note = (_VALUES,), None, ""
        for arg in call.args[1:3]:
            dims = arg.ints() if arg.value is not None else None
            if dims is not None:
                reduced = [d % len(x.dims) for d in dims] if dims and x.dims else list(range(len(x.dims)))
                break
        if reduced is None and len(x.dims) > 1:
            note = " (dims not recorded: output not counted)"
    size, dtype_note = _values_dtype(call, x)
    out = _recorded_out(call) if launcher in _DIM_REDUCTIONS else None
    if out is not None and len(outputs) == 1:
        # the out= tensor is what it writes, at its own size and dtype (ATen casts into it): the
        # dims need not be recorded (sum(self [1024,8,4096], dim, keepdim, dtype, out [1024,4096])
        # had written 0 bytes, "dims not recorded", campaign BM 6)
        out_numel, size, note, dtype_note = out.numel, out.itemsize, "", " (the out= tensor, written)"
    elif reduced is None:
        out_numel = 1 if len(x.dims) <= 1 else 0  # unknown reduced dims: output counted as 0 bytes
    else:
        out_numel = math.prod(s for i, s in enumerate(x.dims) if i not in reduced)
    written, what = _written(out_numel, x, outputs, size)
    formula = f"{x.numel} elements read; output {what}{note}{dtype_note}"
    return Cost(float(x.numel), x.nbytes + written, x.precision, VECTOR, formula)


def _inductor_reduction(tensors: list[Arg], launcher: str) -> Cost:
    """A Triton reduction (`triton_launcher`: Inductor's `triton_red_`/`triton_per_`, or a
    hand-written kernel under Triton's launch): its recorded arguments are its inputs, its outputs
    and then the sizes `xnumel`, `r0_numel` — no dim argument (xnumel, read as one, picked an axis
    modulo the rank), and every input besides the first (a fused `add`'s second operand) and the
    recorded output count. Each recorded tensor once; one FLOP per element of the largest (the
    reduced input)."""
    x = max(tensors, key=lambda a: a.numel)
    moved, text = inductor_bytes(tensors, launcher)
    formula = f"{x.numel} elements of the largest argument reduced; bytes = {text}"
    return Cost(float(x.numel), moved, x.precision, VECTOR, formula)


def _selection(call: Call, x: Arg) -> Cost:
    """topk(self, k, dim=-1, …), kthvalue(self, k, dim=-1, keepdim), mode(self, dim=-1, keepdim):
    the input read, k (topk) or one (kthvalue, mode) values and int64 indices written per slice
    along dim. topk's k not recorded: its outputs are not counted, and the formula says so."""
    k_at, dim_at, default = _SELECTIONS[call.launcher]
    dim = concrete_int(call, dim_at)
    dim = default if dim is None else dim
    size = x.dims[dim % len(x.dims)] if x.dims else 1
    rows = x.numel // max(size, 1)
    k = concrete_int(call, k_at) if k_at is not None else 1
    if k is None:
        formula = f"{x.numel} elements read; k not recorded: outputs not counted"
        return Cost(float(x.numel), x.nbytes, x.precision, VECTOR, formula)
    out_numel = rows * min(k, size)
    written, what = _written(out_numel, x, (_VALUES, _INDICES))
    formula = f"{x.numel} elements read; output {rows} slices (dim {dim}) × k = {k}: {what}"
    return Cost(float(x.numel), x.nbytes + written, x.precision, VECTOR, formula)
