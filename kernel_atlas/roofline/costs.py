"""FLOPs and bytes of one op call from its recorded inputs: a registry of small formulas.

A formula is registered for what it serves, and looked up from the call's label and launcher:
first a label rule (a kernel family with its own argument layout, e.g. `deepgemm`, named by
catalogs/rules.toml), then the launching op (an ATen op's schema says how to read its recorded
arguments, e.g. `aten::addmm`), then the op_mapping. A key is registered once; a second
registration is refused. Formulas return a `Cost` or raise `NoCost` with the reason (a missing
input, an op whose recorded inputs are only workspaces). Bytes are the minimum traffic: every
input read once, every output written once. Elementwise-style ops count `flops_per_element`
(catalogs/costs.toml) FLOPs per output element.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise

from kernel_atlas.classify.classifier import rule_id, rule_precision
from kernel_atlas.core.devices import MATRIX, VECTOR
from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.recorded import TENSOR, TENSOR_LIST, Arg, dtypes
from kernel_atlas.ingest.steps import is_native_step, parse_step


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    precision: str  # key into the device's peaks: bf16, fp32, fp8, int, ...
    unit: str  # MATRIX or VECTOR
    formula: str  # the arithmetic, for people checking it


class NoCost(Exception):
    """No cost for this call, and why."""


@dataclass(frozen=True)
class Call:
    launcher: str
    op_mapping: str
    args: tuple[Arg, ...]
    rule: str = ""  # the label's rule (`rule:<id>`), as kernels.parquet's label_rule
    list_dtype: str | None = None  # dtype assumed for tensor-list elements (not recorded)
    step: str = ""  # the enclosing per-step attention annotation (attention calls only)
    enclosed: str = ""  # a composite MoE op's enclosed tensors, top-k, buffers (ingest/composite.py), JSON
    partner: str = ""  # its forward op's / backward node's name, sequence number, shapes (ingest/autograd.py), JSON

    @property
    def what(self) -> str:
        return self.launcher or self.rule or self.op_mapping


Formula = Callable[[Call], Cost]
REGISTRY: dict[tuple[str, str], Formula] = {}  # ("rule" | "launcher" | "op", key) → formula
# launchers whose formula reads `Call.partner`: only their calls are told it (one partner per call
# would make every call of a training step a signature of its own)
PARTNER_LAUNCHERS: set[str] = set()


def register(
    *,
    rules: tuple[str, ...] = (),
    launchers: tuple[str, ...] = (),
    ops: tuple[str, ...] = (),
    partner: bool = False,
) -> Callable[[Formula], Formula]:
    """Attach a formula to label rule ids (catalogs/rules.toml), launching ops, or op_mappings.
    Each key takes one formula: registering a second is an error, as in torch's flop_counter.
    `partner`: the formula reads the call's autograd partner (its launchers' calls get it)."""

    def wrap(func: Formula) -> Formula:
        if partner:
            PARTNER_LAUNCHERS.update(launchers)
        for kind, keys in (("rule", rules), ("launcher", launchers), ("op", ops)):
            for key in keys:
                if (kind, key) in REGISTRY:
                    raise ValueError(f"{kind} {key!r} already has a cost formula ({REGISTRY[kind, key].__name__})")
                REGISTRY[kind, key] = func
        return func

    return wrap


@lru_cache(maxsize=1)
def flops_per_element() -> dict[str, float]:
    data = read_toml("costs.toml")
    return {k: float(v) for k, v in data["flops_per_element"].items()}


def cost_of(call: Call) -> Cost:
    keys = (("rule", rule_id(call.rule) or ""), ("launcher", call.launcher), ("op", call.op_mapping))
    formula = next((REGISTRY[key] for key in keys if key in REGISTRY), None)
    if formula is None:
        raise NoCost(f"no cost model for {call.launcher or call.op_mapping}")
    return formula(call)


# --- helpers ---------------------------------------------------------------------------------


def _tensors(call: Call) -> list[Arg]:
    return [a for a in call.args if a.is_tensor]


def _tensor(call: Call, index: int, what: str) -> Arg:
    if index >= len(call.args) or not call.args[index].is_tensor:
        raise NoCost(f"{call.what}: input {index} ({what}) {_why_not_tensor(call.args, index)}")
    return call.args[index]


def _optional_tensor(call: Call, index: int) -> Arg | None:
    """Input `index` where it is a tensor that can be costed (an optional weight, an output), else None."""
    return call.args[index] if index < len(call.args) and call.args[index].is_tensor else None


def _concrete_int(call: Call, index: int) -> int | None:
    """An integer Concrete Input (a reduction mode, a size), else None."""
    if index >= len(call.args):
        return None
    value = call.args[index].value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _no_tensors(call: Call) -> NoCost:
    """Why a call has no tensor to cost, as the trace shows it: shapes without a dtype (an Nsight
    export's NVTX ranges, PyTorch 1.8) or of a dtype not in catalogs/dtypes.toml were said to be
    "no input tensor shapes recorded"."""
    shaped = [a for a in call.args if a.dims and (a.kind in (TENSOR, TENSOR_LIST) or not a.dtype)]
    if shaped and not any(a.dtype for a in shaped):
        return NoCost(
            f"{call.what}: input shapes recorded but no dtype (an Nsight export's NVTX ranges and PyTorch 1.8 "
            "record none): the bytes and the peak need it"
        )
    if shaped:
        unknown = sorted({a.dtype for a in shaped if a.dtype and a.kind == TENSOR})
        if unknown:
            return NoCost(f"{call.what}: input shapes recorded, of a dtype not in catalogs/dtypes.toml ({unknown[0]})")
    return NoCost(f"{call.what}: no input tensor shapes recorded")


def _why_not_tensor(args: Sequence[Arg], index: int) -> str:
    """Why input `index` is no tensor that can be costed, as the trace shows it."""
    arg = args[index] if index < len(args) else None
    if arg is not None and arg.dims and not arg.dtype:  # PyTorch 1.8: `Input Dims` without `Input type`
        return "has a recorded shape but no dtype (`Input type`, recorded since PyTorch 1.9)"
    if arg is not None and arg.kind == TENSOR:
        return f"has a dtype not in catalogs/dtypes.toml ({arg.dtype})"
    return "has no recorded shape or a dtype not in catalogs/dtypes.toml"


def _gemm_precision(call: Call, arg: Arg) -> tuple[str, str]:
    precision = arg.precision
    if precision == "fp32":
        # fp32 inputs run on TF32 tensor cores where the kernel's family says so (rules.toml `precision`)
        return ("tf32", MATRIX) if rule_precision(call.rule) == "tf32" else ("fp32", VECTOR)
    if precision == "int":
        return "int", VECTOR
    return precision, MATRIX


def _gemm(
    call: Call, batch: int, m: int, n: int, k: int, inputs: list[Arg], out_itemsize: int, extra: str = ""
) -> Cost:
    precision, unit = _gemm_precision(call, inputs[0])
    flops = 2.0 * batch * m * n * k
    written = batch * m * n * out_itemsize
    # an empty output (M, N or the batch 0) asks for no element: no operand is read
    read = sum(a.nbytes for a in inputs) if written else 0
    b = f"{batch}·" if batch != 1 else ""
    formula = f"2·{b}M·N·K = 2·{b}{m}·{n}·{k}; bytes = inputs {read} + output {b}{m}·{n}·{out_itemsize}{extra}"
    if not written:
        formula += " (an empty output: no operand read)"
    return Cost(flops, read + written, precision, unit, formula)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        out.append(max(sizes) if sizes else 1)
    return tuple(out)


def _output_numel(shapes: list[tuple[int, ...]]) -> int:
    """Elements of a pointwise op's output: the broadcast of its inputs' shapes; when they do
    not broadcast (an Inductor kernel's arguments are views of one buffer, [8,4096,2048] beside
    [32768,2048]), the largest input, never the per-axis maximum of shapes that do not fit."""
    broadcast = _broadcast(shapes)
    fits = all(size in (1, broadcast[axis - len(shape)]) for shape in shapes for axis, size in enumerate(shape))
    return math.prod(broadcast) if fits else max(math.prod(shape) for shape in shapes)


# --- GEMMs -----------------------------------------------------------------------------------


@register(launchers=("aten::mm", "aten::_int_mm"))
def _mm(call: Call) -> Cost:
    a, b = _tensor(call, 0, "self"), _tensor(call, 1, "mat2")
    (m, k), (_, n) = a.dims, b.dims
    return _gemm(call, 1, m, n, k, [a, b], a.itemsize if a.precision != "int8" else 4)


@register(launchers=("aten::addmm", "aten::_addmm_activation"))
def _addmm(call: Call) -> Cost:
    bias, a, b = _tensor(call, 0, "self"), _tensor(call, 1, "mat1"), _tensor(call, 2, "mat2")
    (m, k), (_, n) = a.dims, b.dims
    return _gemm(call, 1, m, n, k, [a, b, bias], a.itemsize, " (inputs include the bias)")


@register(launchers=("aten::linear",))
def _linear(call: Call) -> Cost:
    x, w = _tensor(call, 0, "input"), _tensor(call, 1, "weight")
    inputs = [x, w] + ([call.args[2]] if len(call.args) > 2 and call.args[2].is_tensor else [])
    m = math.prod(x.dims[:-1])
    n, k = w.dims
    return _gemm(call, 1, m, n, k, inputs, x.itemsize)


@register(launchers=("aten::matmul",))
def _matmul(call: Call) -> Cost:
    a, b = _tensor(call, 0, "self"), _tensor(call, 1, "other")
    if len(a.dims) < 2 or len(b.dims) < 2:
        raise NoCost("aten::matmul with a vector operand: see the mv/dot kernels it launches")
    batch = math.prod(_broadcast([a.dims[:-2], b.dims[:-2]]))
    return _gemm(call, batch, a.dims[-2], b.dims[-1], a.dims[-1], [a, b], a.itemsize)


@register(launchers=("aten::bmm",))
def _bmm(call: Call) -> Cost:
    a, b = _tensor(call, 0, "self"), _tensor(call, 1, "mat2")
    (batch, m, k), (_, _, n) = a.dims, b.dims
    return _gemm(call, batch, m, n, k, [a, b], a.itemsize)


@register(launchers=("aten::baddbmm",))
def _baddbmm(call: Call) -> Cost:
    c, a, b = _tensor(call, 0, "self"), _tensor(call, 1, "batch1"), _tensor(call, 2, "batch2")
    (batch, m, k), (_, _, n) = a.dims, b.dims
    return _gemm(call, batch, m, n, k, [a, b, c], a.itemsize)


@register(launchers=("aten::_scaled_mm",))
def _scaled_mm(call: Call) -> Cost:
    a, b = _tensor(call, 0, "self"), _tensor(call, 1, "mat2")
    (m, k), (_, n) = a.dims, b.dims
    scales = [x for x in call.args[2:] if x.is_tensor]
    # (self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum): out_dtype is
    # recorded as a ScalarType code; not recorded (None: the inputs' dtype), a 2-byte result assumed
    code = _concrete_int(call, 6)
    size = scalar_type_bytes(code)
    if size is None:
        return _gemm(call, 1, m, n, k, [a, b, *scales], 2, " (scales included; 2-byte output assumed)")
    return _gemm(call, 1, m, n, k, [a, b, *scales], size, f" (scales included; out_dtype code {code})")


# --- convolution -----------------------------------------------------------------------------


@register(
    launchers=(
        "aten::cudnn_convolution",
        "aten::miopen_convolution",
        "aten::_convolution",
        "aten::convolution",
        "aten::conv2d",
        "aten::conv1d",
        "aten::conv3d",
    ),
    partner=True,
)
def _conv(call: Call) -> Cost:
    x, w = _tensor(call, 0, "input"), _tensor(call, 1, "weight")
    spatial = len(x.dims) - 2
    if spatial < 1 or len(w.dims) != len(x.dims):
        raise NoCost(f"{call.launcher}: unexpected input/weight ranks {x.dims} / {w.dims}")
    lists = [a.ints() for a in call.args[2:] if a.dtype == "ScalarList"]
    lists = [v for v in lists if v is not None]
    named = _named_padding(call)  # conv*d(…, padding="same" | "valid", …)
    # cudnn/miopen_convolution: (padding, stride, dilation); convolution/conv2d: (stride, padding, dilation)
    if named is not None:
        stride, dilation = [*lists, [1], [1]][:2]
        padding = [0]
    elif call.launcher in ("aten::cudnn_convolution", "aten::miopen_convolution"):
        padding, stride, dilation = [*lists, [0], [1], [1]][:3]
    else:
        stride, padding, dilation = [*lists, [1], [0], [1]][:3]
    if len(lists) < 3 and named is None:
        return _conv_from_backward(call, x, w)
    # aten::convolution / _convolution(input, weight, bias, stride, padding, dilation, transposed,
    # output_padding, groups, …)
    transposed = call.launcher in ("aten::convolution", "aten::_convolution") and len(call.args) > 8
    transposed = transposed and call.args[6].flag() is True
    if transposed:
        return _conv_transposed(call, x, w, (stride, padding, dilation))
    out_spatial = []
    for axis in range(spatial):
        p = padding[axis % len(padding)]
        s = stride[axis % len(stride)]
        d = dilation[axis % len(dilation)]
        if named == "same":
            if s != 1:
                raise NoCost(f"{call.launcher}: padding 'same' with stride {s} (PyTorch allows it with stride 1 only)")
            out_spatial.append(x.dims[2 + axis])
        else:
            out_spatial.append((x.dims[2 + axis] + 2 * p - d * (w.dims[2 + axis] - 1) - 1) // s + 1)
    if min(out_spatial) < 1:
        raise NoCost(f"{call.launcher}: no output from input {list(x.dims)} and weight {list(w.dims)}")
    n, k = x.dims[0], w.dims[0]
    macs_per_output = math.prod(w.dims[1:])  # C/groups · R · S
    outputs = n * k * math.prod(out_spatial)
    flops = 2.0 * outputs * macs_per_output
    read, written = _conv_traffic(call, x, w, outputs)
    precision, unit = _gemm_precision(call, x)
    padded = f" (padding '{named}')" if named else ""
    formula = (
        f"2·N·K·out·(C/g·R·S) = 2·{n}·{k}·{'·'.join(map(str, out_spatial))}·{macs_per_output}{padded}; "
        f"bytes = input {x.nbytes} + weight {w.nbytes} + output {written}"
    )
    return Cost(flops, read + written, precision, unit, formula)


def _conv_traffic(call: Call, x: Arg, w: Arg, outputs: int) -> tuple[int, int]:
    """A forward convolution's bytes: input, weight and bias (its third argument, where it is a
    tensor) read, `outputs` elements of the input's type written."""
    bias = [a for a in call.args[2:3] if a.is_tensor]
    return x.nbytes + w.nbytes + sum(a.nbytes for a in bias), outputs * x.itemsize


def _named_padding(call: Call) -> str | None:
    """`same` or `valid` where a conv*d call records its padding by name (the `padding: str`
    overload: input, weight, bias, stride, padding, dilation, groups), else None."""
    if call.launcher not in ("aten::conv1d", "aten::conv2d", "aten::conv3d") or len(call.args) < 5:
        return None
    text = call.args[4].text.strip().strip("'\"").lower()
    return text if text in ("same", "valid") else None


def _conv_transposed(call: Call, x: Arg, w: Arg, geometry: tuple[list[int], list[int], list[int]]) -> Cost:
    """A transposed convolution (`transposed` = True): every input element scatters into a
    K/g·R·S window of the output, 2·N·C·H·W·(K/g·R·S) FLOPs; the weight is [C, K/g, R, S…] and
    the output's size per axis (in − 1)·stride − 2·padding + dilation·(R − 1) + output_padding + 1."""
    stride, padding, dilation = geometry
    extra = call.args[7].ints() or [0]  # output_padding
    groups = call.args[8].ints() or [1]
    if w.dims[0] != x.dims[1] or groups[0] < 1:
        raise NoCost(f"{call.launcher}: transposed, unexpected input/weight {list(x.dims)} / {list(w.dims)}")
    out_spatial = []
    for axis in range(len(x.dims) - 2):
        size = (x.dims[2 + axis] - 1) * stride[axis % len(stride)] - 2 * padding[axis % len(padding)]
        size += dilation[axis % len(dilation)] * (w.dims[2 + axis] - 1) + extra[axis % len(extra)] + 1
        out_spatial.append(size)
    if min(out_spatial) < 1:
        raise NoCost(f"{call.launcher}: transposed, no output from input {list(x.dims)} and weight {list(w.dims)}")
    out = (x.dims[0], w.dims[1] * groups[0], *out_spatial)
    macs = x.numel * math.prod(w.dims[1:])
    read, written = _conv_traffic(call, x, w, math.prod(out))
    precision, unit = _gemm_precision(call, x)
    formula = (
        f"transposed: 2·N·C·in·(K/g·R·S) = 2·{'·'.join(map(str, x.dims))}·{math.prod(w.dims[1:])}; "
        f"bytes = input {x.nbytes} + weight {w.nbytes} + output {list(out)} {written}"
    )
    return Cost(2.0 * macs, read + written, precision, unit, formula)


def _partner(call: Call, backward: bool) -> dict | None:
    """The call's autograd partner (kernels.parquet `autograd_partner`) when it is on the wanted
    side (a backward node, or a forward op) and names a (non-transposed) convolution."""
    if not call.partner:
        return None
    partner = json.loads(call.partner)
    name = str(partner.get("op", "")).lower()
    if bool(partner.get("backward")) != backward or "conv" not in name or "transpose" in name:
        return None
    dims = partner.get("dims") or []
    return partner if all(isinstance(d, list) for d in dims[: 1 if backward else 2]) and dims else None


def _partner_dims(partner: dict, index: int) -> tuple[int, ...] | None:
    dims = partner["dims"]
    return tuple(int(v) for v in dims[index]) if index < len(dims) and dims[index] else None


def _from(partner: dict) -> str:
    side = "backward node" if partner["backward"] else "forward"
    return f"the {side} {partner['op']} with sequence number {partner['seq']}"


def _conv_macs(grad: tuple[int, ...], weight: tuple[int, ...]) -> int:
    """Multiply-adds of a convolution, its data gradient and its weight gradient alike: one per
    output element and weight element of its group, N·K·P·Q·(C/g·R·S); stride and padding are
    already in the output's shape."""
    return math.prod(grad) * math.prod(weight[1:])


def _conv_from_backward(call: Call, x: Arg, w: Arg) -> Cost:
    """A forward convolution without stride/padding/dilation: its output's shape is the
    grad_output its backward node (same sequence number) received."""
    partner = _partner(call, backward=True)
    out = _partner_dims(partner, 0) if partner else None
    if out is None or len(out) != len(x.dims) or out[0] != x.dims[0] or out[1] != w.dims[0]:
        raise NoCost(
            f"{call.launcher}: stride/padding/dilation not recorded (Concrete Inputs missing) and no "
            "backward node with its sequence number gives the output's shape"
        )
    macs = _conv_macs(out, w.dims)
    read, written = _conv_traffic(call, x, w, math.prod(out))
    precision, unit = _gemm_precision(call, x)
    formula = (
        f"2·N·K·P·Q·(C/g·R·S) = 2·{'·'.join(map(str, out))}·{math.prod(w.dims[1:])} (input {list(x.dims)}, "
        f"weight {list(w.dims)} recorded; output {list(out)} from {_from(partner)}, its grad_output); "
        f"bytes = input {x.nbytes} + weight {w.nbytes} + output {written}"
    )
    return Cost(2.0 * macs, read + written, precision, unit, formula)


@register(launchers=("aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input"), partner=True)
def _conv_backward_input(call: Call) -> Cost:
    """cudnn_convolution_backward_input(self_size, grad_output [N,K,P,Q…], weight [K,C/g,R,S…], padding,
    stride, dilation, groups, …): the data gradient, 2·N·K·P·Q·(C/g·R·S) FLOPs from what it records;
    the input size list is not recorded (only `[]`): grad_input's shape, for the bytes, is the
    input of the forward op with the same sequence number."""
    grad, w = _tensor(call, 1, "grad_output"), _tensor(call, 2, "weight")
    if len(grad.dims) != len(w.dims) or len(grad.dims) < 3 or grad.dims[1] != w.dims[0]:
        raise NoCost(f"{call.launcher}: unexpected grad_output/weight shapes {grad.dims} / {w.dims}")
    partner = _partner(call, backward=False)
    x = _partner_dims(partner, 0) if partner else None
    if x is None or len(x) != len(grad.dims) or x[0] != grad.dims[0] or _partner_dims(partner, 1) != w.dims:
        raise NoCost(
            f"{call.launcher}: the input's shape (grad_input, for the bytes) is not recorded and no forward "
            "convolution with its sequence number gives it"
        )
    macs = _conv_macs(grad.dims, w.dims)
    written = math.prod(x) * grad.itemsize
    precision, unit = _gemm_precision(call, grad)
    formula = (
        f"data gradient 2·N·K·P·Q·(C/g·R·S) = 2·{'·'.join(map(str, grad.dims))}·{math.prod(w.dims[1:])} "
        f"(grad_output {list(grad.dims)}, weight {list(w.dims)} recorded); bytes = grad_output {grad.nbytes} + "
        f"weight {w.nbytes} read + grad_input {list(x)} {written} written (input {list(x)} from {_from(partner)})"
    )
    return Cost(2.0 * macs, grad.nbytes + w.nbytes + written, precision, unit, formula)


@register(
    launchers=("aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight"), partner=True
)
def _conv_backward_weight(call: Call) -> Cost:
    """cudnn_convolution_backward_weight(weight_size, grad_output [N,K,P,Q…], input [N,C,H,W…], padding,
    stride, dilation, groups, …): the weight gradient; the weight size list is not recorded (only
    `[]`): the weight's shape is that of the forward op with the same sequence number."""
    grad, x = _tensor(call, 1, "grad_output"), _tensor(call, 2, "input")
    if len(grad.dims) != len(x.dims) or len(grad.dims) < 3 or grad.dims[0] != x.dims[0]:
        raise NoCost(f"{call.launcher}: unexpected grad_output/input shapes {grad.dims} / {x.dims}")
    partner = _partner(call, backward=False)
    w = _partner_dims(partner, 1) if partner else None
    if w is None or len(w) != len(grad.dims) or w[0] != grad.dims[1] or _partner_dims(partner, 0) != x.dims:
        raise NoCost(
            f"{call.launcher}: the weight's shape is not recorded and no forward convolution with its "
            "sequence number gives it"
        )
    macs = _conv_macs(grad.dims, w)
    written = math.prod(w) * grad.itemsize
    precision, unit = _gemm_precision(call, x)
    formula = (
        f"weight gradient 2·N·K·P·Q·(C/g·R·S) = 2·{'·'.join(map(str, grad.dims))}·{math.prod(w[1:])} "
        f"(grad_output {list(grad.dims)}, input {list(x.dims)} recorded; weight {list(w)} from {_from(partner)}); "
        f"bytes = grad_output {grad.nbytes} + input {x.nbytes} read + weight gradient {written} written"
    )
    return Cost(2.0 * macs, grad.nbytes + x.nbytes + written, precision, unit, formula)


@register(launchers=("aten::convolution_backward",))
def _conv_backward(call: Call) -> Cost:
    """convolution_backward(grad_output [N,K,P,Q…], input [N,C,H,W…], weight [K,C/g,R,S…], bias_sizes,
    stride, padding, dilation, transposed, output_padding, groups, output_mask): the data gradient
    and the weight gradient each 2·N·K·P·Q·(C/g·R·S) FLOPs where output_mask asks for them (a
    transposed convolution the same with the roles of input and grad_output swapped), the bias
    gradient N·K·P·Q."""
    grad, x, w = _tensor(call, 0, "grad_output"), _tensor(call, 1, "input"), _tensor(call, 2, "weight")
    if len(grad.dims) != len(x.dims) or len(w.dims) != len(x.dims) or len(x.dims) < 3:
        raise NoCost(f"{call.launcher}: unexpected ranks {grad.dims} / {x.dims} / {w.dims}")
    mask_text = call.args[10].text if len(call.args) > 10 else ""
    mask = [m.strip() == "True" for m in mask_text.strip("[]").split(",")] if mask_text else []
    if len(mask) != 3:
        raise NoCost(f"{call.launcher}: output_mask not recorded (Concrete Inputs missing)")
    transposed = len(call.args) > 7 and call.args[7].text.strip() == "True"
    out = x if transposed else grad  # the forward's output
    macs = math.prod(out.dims) * math.prod(w.dims[1:])  # N·K·P·Q·(C/g·R·S)
    flops = 2.0 * macs * (int(mask[0]) + int(mask[1])) + (math.prod(grad.dims) if mask[2] else 0)
    read = grad.nbytes + (w.nbytes if mask[0] else 0) + (x.nbytes if mask[1] else 0)
    bias = grad.dims[1] * grad.itemsize if mask[2] else 0
    written = (x.nbytes if mask[0] else 0) + (w.nbytes if mask[1] else 0) + bias
    precision, unit = _gemm_precision(call, x)
    formula = (
        f"2·N·K·P·Q·(C/g·R·S) = 2·{macs} FLOP per gradient × (data {mask[0]}, weight {mask[1]}) "
        f"+ bias {mask[2]}; bytes = grad_output, weight/input as needed {read} + gradients {written}"
    )
    return Cost(flops, read + written, precision, unit, formula)


# --- attention -------------------------------------------------------------------------------


# Where a causal mask's diagonal starts when Sq ≠ Skv: PyTorch's `is_causal` (SDPA and its
# backends) aligns it top-left (query i sees keys 0…i); FlashAttention ≥ 2.1, which
# `aten::_flash_attention_forward` runs, bottom-right (query i sees keys 0…i + Skv − Sq, a decode
# token its whole context). Square, both are one mask.
TOP_LEFT, BOTTOM_RIGHT = "top-left", "bottom-right"


def causal_pairs(sq: int, skv: int, align: str) -> float:
    """The query–key pairs a causal mask keeps, as the area under its diagonal — the convention of
    FlashAttention's benchmarks and TraceLens (½·Sq·Skv when square; the diagonal's own Sq/2 not
    added), applied where the diagonal starts (`align`)."""
    if align == TOP_LEFT:  # query i sees min(i, Skv) keys
        return sq * sq / 2 if sq <= skv else skv * sq - skv * skv / 2
    # bottom-right: query i sees i + Skv − Sq keys (none where that is negative)
    return sq * skv - sq * sq / 2 if skv >= sq else skv * skv / 2


def window_pairs(sq: int, skv: int, left: int, right: int, causal: bool) -> float:
    """The query–key pairs a sliding window keeps, FlashAttention's (≥ 2.3) convention: query i
    sees keys p − left … p + right at p = i + Skv − Sq (a negative side: unbounded; causal:
    right = 0) within 0 … Skv − 1. Causal, the diagonal's own ½ per row that sees its diagonal is
    left out, as `causal_pairs` counts (an unbounded left side gives its bottom-right area)."""
    offset = skv - sq
    reach = 0 if causal else right
    start, end = offset, offset + sq - 1  # the rows' positions p
    # a row's count, max(0, min(Skv−1, p+reach) − max(0, p−left) + 1), is linear in p between
    # these positions, and of one sign
    cuts = [*((left, skv + left) if left >= 0 else ()), *((skv - reach, -reach) if reach >= 0 else ())]
    edges = sorted({start, end + 1, *(min(max(at, start), end + 1) for at in cuts)})
    total = 0.0
    for lo_p, hi_p in ((a, b - 1) for a, b in pairwise(edges) if b > a):
        first, last = _window_row(lo_p, skv, left, reach), _window_row(hi_p, skv, left, reach)
        if first > 0 or last > 0:
            total += (hi_p - lo_p + 1) * (max(first, 0) + max(last, 0)) / 2
    if causal:  # rows whose own diagonal key exists: 0 ≤ p ≤ Skv − 1
        total -= max(0, min(end, skv - 1) - max(start, 0) + 1) / 2
    return total


def _window_row(p: int, skv: int, left: int, reach: int) -> int:
    """Keys a query at position p sees in a window (`window_pairs`), before clipping at 0."""
    hi = skv - 1 if reach < 0 else min(skv - 1, p + reach)
    lo = 0 if left < 0 else max(0, p - left)
    return hi - lo + 1


def _is_causal(call: Call, index: int, align: str = TOP_LEFT) -> tuple[str | None, str]:
    """The mask an `is_causal` argument at `index` asks for (`align`, or None), and what the
    formula says where it is not recorded (no mask assumed)."""
    flag = call.args[index].flag() if index < len(call.args) else None
    return (align if flag else None), ("" if flag is not None else " (is_causal not recorded: no mask assumed)")


def _attention_geometry(
    call: Call, q: Arg, k: Arg, v: Arg, layout: str, causal: str | None, window: tuple[int, int] | None
) -> tuple[int, int, int, int, int, int, float, str]:
    """(B, H_q, Sq, Skv, d, dv, pairs kept, what the pairs are) of dense q, k, v in `layout` (BSHD or
    BHSD): Sq·Skv pairs, causal `causal_pairs`, a sliding `window` (left, right) `window_pairs`.
    H is the query's heads: grouped-query attention's fewer K/V heads do as many MACs per query head."""
    if len(q.dims) != 4:
        raise NoCost(f"{call.launcher}: query of rank {len(q.dims)} (varlen/packed layout: sequence lengths missing)")
    if layout == "BSHD":
        b, sq, h, d = q.dims
        skv, dv = k.dims[1], v.dims[3]
    else:  # BHSD
        b, h, sq, d = q.dims
        skv, dv = k.dims[2], v.dims[3]
    pairs = causal_pairs(sq, skv, causal) if causal else float(sq * skv)
    if window is not None:
        pairs = window_pairs(sq, skv, *window, causal is not None)
    if window is not None:
        left, right = (str(side) if side >= 0 else "unbounded" for side in window)
        kept = f"sliding window (left {left}, right {'0, causal' if causal else right}): {pairs:g} of {sq}·{skv}"
    elif causal is None:
        kept = f"Sq·Skv = {sq}·{skv}"
    elif sq == skv:
        kept = f"Sq·Skv·½ (causal) = {sq}·{skv}·½"
    else:
        kept = f"causal, diagonal from the {causal}: {pairs:g} of {sq}·{skv}"
    return b, h, sq, skv, d, dv, pairs, kept


def _attention(
    call: Call, layout: str, causal: str | None, assumed: str = "", window: tuple[int, int] | None = None
) -> Cost:
    """QKᵀ and PV over the pairs kept of q, k, v (its first three arguments, `layout` BSHD or
    BHSD): 2 FLOP per MAC, Sq·Skv pairs (causal: `causal_pairs`; a sliding `window` (left,
    right): `window_pairs`); `assumed`: what the formula says it assumed."""
    q, k, v = _tensor(call, 0, "query"), _tensor(call, 1, "key"), _tensor(call, 2, "value")
    b, h, sq, _, d, dv, pairs, kept = _attention_geometry(call, q, k, v, layout, causal, window)
    flops = 2.0 * b * h * pairs * (d + dv)
    out = b * h * sq * dv * q.itemsize
    read = q.nbytes + k.nbytes + v.nbytes
    formula = (
        f"2·B·H·pairs·(d+dv), pairs {kept}{assumed} = 2·{b}·{h}·{pairs:g}·({d}+{dv}); bytes = q+k+v {read} + out {out}"
    )
    return Cost(flops, read + out, q.precision, MATRIX, formula)


def _attention_backward(
    call: Call,
    layout: str,
    causal: str | None,
    assumed: str = "",
    *,
    out_at: int,
    lse_at: int,
    bias_at: int | None = None,
    bias_grad: bool = False,
    window: tuple[int, int] | None = None,
) -> Cost:
    """The backward of dense attention, ATen's argument order (grad_out, query, key, value, …, out
    at `out_at`, logsumexp at `lse_at`): five matmuls over the pairs the forward kept — S = QKᵀ
    recomputed and dQ = dS·K, dK = dSᵀ·Q (d each), dV = Pᵀ·dO and dP = dO·Vᵀ (dv each) —
    2·B·H·pairs·(3d + 2dv) FLOPs, 2.5× the forward's 2·B·H·pairs·(d + dv) when d = dv; the same
    mask rule as the forward. Bytes: grad_out, q, k, v, out, logsumexp (and an attention bias)
    read as recorded, grad_q, grad_k, grad_v (the shapes and dtypes of q, k, v; grad_bias where
    asked for) written. The RNG state/seed tensors (a few bytes) are not counted."""
    grad = _tensor(call, 0, "grad_out")
    q, k, v = _tensor(call, 1, "query"), _tensor(call, 2, "key"), _tensor(call, 3, "value")
    b, h, _, _, d, dv, pairs, kept = _attention_geometry(call, q, k, v, layout, causal, window)
    out, lse = _optional_tensor(call, out_at), _optional_tensor(call, lse_at)
    bias = _optional_tensor(call, bias_at) if bias_at is not None else None
    flops = 2.0 * b * h * pairs * (3 * d + 2 * dv)
    read_from = [("grad_out", grad), ("q", q), ("k", k), ("v", v), ("out", out), ("logsumexp", lse), ("bias", bias)]
    read = sum(a.nbytes for _, a in read_from if a is not None)
    written_to = [q, k, v, *([bias] if bias is not None and bias_grad else [])]
    written = sum(a.numel * a.itemsize for a in written_to)
    names = "+".join(name for name, a in read_from if a is not None)
    grads = "grad_q+grad_k+grad_v" + ("+grad_bias" if len(written_to) > 3 else "")
    formula = (
        f"backward: 2·B·H·pairs·(3d+2dv) (QKᵀ recomputed, dV, dP, dQ, dK: 2.5× the forward's 2·B·H·pairs·(d+dv) "
        f"when d = dv), pairs {kept}{assumed} = 2·{b}·{h}·{pairs:g}·(3·{d}+2·{dv}); "
        f"bytes = {names} {read} read + {grads} {written} written"
    )
    return Cost(flops, read + written, q.precision, MATRIX, formula)


def _varlen_backward(call: Call, index: int) -> None:
    """A backward with cumulative sequence lengths (a tensor at `index`): per-sequence lengths are values."""
    if _optional_tensor(call, index) is not None:
        raise NoCost(f"{call.launcher} with cumulative sequence lengths (varlen): per-sequence lengths not recorded")


@register(launchers=("aten::_flash_attention_backward",))
def _flash_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, rng_state, unused, scale, window_size_left, window_size_right), [B, S, H, D]
    _varlen_backward(call, 6)
    causal, assumed = _is_causal(call, 11, BOTTOM_RIGHT)
    return _attention_backward(call, "BSHD", causal, assumed, out_at=4, lse_at=5, window=_window(call, 15))


@register(launchers=("aten::_scaled_dot_product_flash_attention_backward",))
def _sdpa_flash_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, philox_seed, philox_offset, scale), [B, H, S, D]
    _varlen_backward(call, 6)
    return _attention_backward(call, "BHSD", *_is_causal(call, 11), out_at=4, lse_at=5)


@register(launchers=("aten::_efficient_attention_backward",))
def _efficient_backward(call: Call) -> Cost:
    # (grad_out_, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    # max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type,
    # bias_requires_grad, …), [B, S, H, D]
    _varlen_backward(call, 6)
    recorded = call.args[14] if len(call.args) > 14 and call.args[14].text.strip() else None
    mask = recorded.value if recorded is not None else 0  # not recorded: no mask assumed (said)
    if isinstance(mask, bool) or mask not in _MASK_TYPES:
        raise NoCost(f"{call.launcher}: custom_mask_type {recorded.text[:20]!r} is none of 0, 1, 2")  # type: ignore[union-attr]
    assumed = "" if recorded is not None else " (custom_mask_type not recorded: no mask assumed)"
    bias_grad = len(call.args) > 15 and call.args[15].flag() is True
    return _attention_backward(
        call, "BSHD", _MASK_TYPES[mask], assumed, out_at=5, lse_at=10, bias_at=4, bias_grad=bias_grad
    )


@register(launchers=("aten::_scaled_dot_product_efficient_attention_backward",))
def _sdpa_efficient_backward(call: Call) -> Cost:
    # (grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset,
    # dropout_p, grad_input_mask, is_causal, scale), [B, H, S, D]
    mask = call.args[10].value if len(call.args) > 10 else None
    bias_grad = isinstance(mask, list) and len(mask) == 4 and mask[3] is True
    return _attention_backward(call, "BHSD", *_is_causal(call, 11), out_at=5, lse_at=6, bias_at=4, bias_grad=bias_grad)


@register(launchers=("aten::_scaled_dot_product_cudnn_attention_backward",))
def _sdpa_cudnn_backward(call: Call) -> Cost:
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
    # cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, scale), [B, H, S, D]
    _varlen_backward(call, 9)
    return _attention_backward(call, "BHSD", *_is_causal(call, 14), out_at=4, lse_at=5, bias_at=8)


@register(launchers=("aten::_flash_attention_forward",))
def _flash_forward(call: Call) -> Cost:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...), [B, S, H, D]
    if len(call.args) > 3 and call.args[3].is_tensor:
        if call.step:
            return _paged_attention(call)
        raise NoCost(
            "aten::_flash_attention_forward with cumulative sequence lengths (varlen): "
            "per-sequence lengths not recorded"
        )
    return _attention(call, "BSHD", *_is_causal(call, 8, BOTTOM_RIGHT), window=_window(call, 11))


def _window(call: Call, index: int) -> tuple[int, int] | None:
    """A sliding window's (left, right) sizes recorded at `index` and `index + 1` (-1 or not
    recorded: that side unbounded), or None where neither side is bounded."""
    left, right = (_concrete_int(call, i) for i in (index, index + 1))
    sides = (left if left is not None and left >= 0 else -1, right if right is not None and right >= 0 else -1)
    return sides if max(sides) >= 0 else None


# `custom_mask_type` of `_efficient_attention_forward` (PyTorch's CustomMaskType): none, causal
# from the top left, causal from the bottom right
_MASK_TYPES = {0: None, 1: TOP_LEFT, 2: BOTTOM_RIGHT}


@register(launchers=("aten::_efficient_attention_forward",))
def _efficient_forward(call: Call) -> Cost:
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_q, max_k, dropout_p, custom_mask_type, ...)
    recorded = call.args[9] if len(call.args) > 9 and call.args[9].text.strip() else None
    mask = recorded.value if recorded is not None else 0  # not recorded: no mask assumed (said)
    if isinstance(mask, bool) or mask not in _MASK_TYPES:
        raise NoCost(f"{call.launcher}: custom_mask_type {recorded.text[:20]!r} is none of 0, 1, 2")  # type: ignore[union-attr]
    assumed = "" if recorded is not None else " (custom_mask_type not recorded: no mask assumed)"
    return _attention(call, "BSHD", _MASK_TYPES[mask], assumed)


@register(
    launchers=(
        "aten::_scaled_dot_product_flash_attention",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    )
)
def _sdpa(call: Call) -> Cost:
    # (query, key, value, dropout_p, is_causal, ...) for the flash variant; SDPA itself has
    # attn_mask at 3 and is_causal at 5; cuDNN: (q, k, v, attn_bias, compute_lse, dropout_p, is_causal)
    index = {"aten::scaled_dot_product_attention": 5, "aten::_scaled_dot_product_cudnn_attention": 6}.get(
        call.launcher, 4
    )
    return _attention(call, "BHSD", *_is_causal(call, index))


@register(launchers=("aten::_scaled_dot_product_efficient_attention",))
def _sdpa_efficient(call: Call) -> Cost:
    return _attention(call, "BHSD", *_is_causal(call, 6))


@register(ops=("attention",))
def _attention_step(call: Call) -> Cost:
    dense = [a for a in _tensors(call)[:3] if len(a.dims) == 4]
    if not call.step and len(dense) == 3 and dense[0].dims[0] == dense[1].dims[0]:
        # a library's dense attention (e.g. aiter's sage_fwd) with no known argument layout
        raise NoCost(
            f"{call.what}: dense q/k/v {list(dense[0].dims)} recorded, but not their layout (which axis is "
            "heads, which sequence: [B, S, H, D] or [B, H, S, D]) nor whether it is causal"
        )
    return _paged_attention(call)


def _heads(call: Call) -> tuple[Arg, int, int, int, Arg, str]:
    """query [T, H_q, d] and the KV heads: from a [T, H_kv, d] key (H_kv < H_q), else the
    second-to-last axis of a KV cache ([blocks, block_size, H_kv, d], [2, blocks, block_size,
    H_kv, d]: the NHD layout, which the formula then says it assumed: an HND cache's axis −2 is
    its page size), else H_q (MHA, only [T, H, d] tensors); H_q must be a multiple of H_kv.
    Returns (query, H_q, d, H_kv, the tensor the K/V are read as — the cache where one is
    recorded, for its dtype —, where H_kv came from)."""
    tensors = _tensors(call)
    q = next((a for a in tensors if len(a.dims) == 3), None)
    if q is None:
        raise NoCost(f"{call.what}: no [tokens, heads, head_dim] query recorded (heads unknown)")
    _, h_q, d = q.dims
    fits = [a for a in tensors if a is not q and len(a.dims) >= 3 and a.dims[-1] == d and 0 < a.dims[-2] <= h_q]
    fits = [a for a in fits if h_q % a.dims[-2] == 0]
    caches = [a for a in fits if len(a.dims) >= 4]
    keys = [a for a in fits if len(a.dims) == 3 and a.dims[-2] < h_q]
    cache = max(caches, key=lambda a: a.numel) if caches else None
    if keys:
        return q, h_q, d, keys[0].dims[-2], cache or keys[0], "key"
    if cache is not None:
        return q, h_q, d, cache.dims[-2], cache, "the KV cache's axis −2, NHD layout assumed"
    # MHA with only [T, H, d] tensors recorded: K/V heads equal the query's
    same = [a for a in fits if len(a.dims) == 3]
    if not same:
        raise NoCost(f"{call.what}: the KV heads are not recorded (no key or KV-cache tensor with head_dim {d})")
    return q, h_q, d, same[0].dims[-2], same[0], "key"


def _paged_attention(call: Call) -> Cost:
    """Attention over a batch of variable-length requests (paged KV cache, ragged/varlen
    layouts): sequence lengths from the step annotation enclosing the launch, heads from the
    recorded query and key/cache. FLOPs = 4·H_q·d·(Σ sq·sk of decode + Σ sq·sk − ½ Σ sq² of the
    causal context part), as FlashAttention's benchmarks and TraceLens count; bytes = Q and O
    (Σ sq·H_q·d each) + K and V read (Σ sk·H_kv·d each, at the cache's dtype)."""
    lengths = parse_step(call.step)
    if lengths is None and is_native_step(call.step):
        raise NoCost(
            f"{call.what}: paged/varlen attention: the step annotation {call.step!r} counts tokens but gives "
            "no Σ sq·sk (the engine's native annotation; its detailed roofline annotation has them), "
            "and no sequence lengths are recorded"
        )
    if lengths is None:
        raise NoCost(
            f"{call.what}: paged/varlen attention: no sequence lengths recorded and no per-step "
            "annotation with them (vLLM/SGLang detailed roofline annotations) encloses the launch"
        )
    q, h_q, d, h_kv, kv, heads_from = _heads(call)
    products = lengths.g_sqsk + lengths.c_sqsk - lengths.c_sqsq / 2
    flops = 4.0 * h_q * d * products
    sq = lengths.c_sq + lengths.g_sq
    sk = lengths.c_sk + lengths.g_sk
    q_o = 2.0 * sq * h_q * d * q.itemsize
    k_v = 2.0 * sk * h_kv * d * kv.itemsize
    formula = (
        f"4·H_q·d·(Σsq·sk − ½Σsq² causal context) = 4·{h_q}·{d}·({lengths.g_sqsk}+{lengths.c_sqsk}−"
        f"{lengths.c_sqsq}/2) ({lengths.engine} step annotation); bytes = Q+O 2·{sq}·{h_q}·{d}·{q.itemsize} "
        f"+ K+V 2·{sk}·{h_kv}·{d}·{kv.itemsize} (H_kv from {heads_from}; KV-cache writes on their own op)"
    )
    return Cost(flops, q_o + k_v, q.precision, MATRIX, formula)


# --- fused MoE -------------------------------------------------------------------------------


@register(
    rules=("triton-fused-moe",),
    launchers=(
        "sglang::inplace_fused_experts",
        "sglang::outplace_fused_experts",
        "vllm::inplace_fused_experts",
        "vllm::outplace_fused_experts",
    ),
)
def _fused_experts(call: Call) -> Cost:
    """hidden_states [T, D], w1 [E, N1, D], w2 [E, D, N2], topk_weights [T, k] (the argument order
    of SGLang/vLLM's fused_experts and of the seed catalog's fused_moe_kernel params)."""
    x, w1, w2 = _tensor(call, 0, "hidden_states"), _tensor(call, 1, "w1"), _tensor(call, 2, "w2")
    topk = _tensor(call, 3, "topk_weights")
    if (len(x.dims), len(w1.dims), len(w2.dims)) != (2, 3, 3):
        raise NoCost(f"{call.what}: not the fused_experts layout (hidden [T, D], w1 [E, N1, D], w2 [E, D, N2])")
    tokens, hidden = x.dims
    experts, n1, _ = w1.dims
    _, _, n2 = w2.dims
    k = topk.dims[-1]
    flops = 2.0 * tokens * k * n1 * hidden + 2.0 * tokens * k * hidden * n2
    touched = expected_experts(experts, k, tokens) / experts
    read = x.nbytes + touched * (w1.nbytes + w2.nbytes)
    written = x.nbytes
    # the expert-ordered intermediates, at the activations' dtype: the up-projection writes
    # [T·k, N1], the down-projection reads [T·k, N2] and writes [T·k, D], the sum over the k
    # experts reads that back (the activation between them is an op of its own)
    intermediates = tokens * k * (n1 + n2 + 2 * hidden) * x.itemsize
    precision, unit = _gemm_precision(call, w1)
    formula = (
        f"2·T·k·N1·D + 2·T·k·D·N2 = 2·{tokens}·{k}·{n1}·{hidden} + 2·{tokens}·{k}·{hidden}·{n2}; "
        f"bytes = x + out + {touched:.3f} of the expert weights (expected distinct experts E·(1−(1−k/E)^T)) "
        f"+ intermediates T·k·(N1 + N2 + 2·D)·{x.itemsize} = {intermediates}"
    )
    return Cost(flops, read + written + intermediates, precision, unit, formula)


def expected_experts(experts: int, k: int, tokens: int) -> float:
    """Distinct experts a batch touches when each of T tokens picks k of E experts uniformly and
    independently: E·(1 − (1 − k/E)^T)."""
    return experts * (1.0 - (1.0 - min(k, experts) / experts) ** tokens)


def moe_flops(tokens: int, k: int, hidden: int, inter: int, up: int) -> float:
    """The experts' two GEMMs over T·k routed rows: 2·T·k·H·I·up (up = 2 for a gated
    up-projection) + 2·T·k·I·H."""
    return 2.0 * tokens * k * hidden * inter * up + 2.0 * tokens * k * inter * hidden


def _expert_weights(weights: list[tuple[list[int], str]], hidden: int) -> tuple[Arg, Arg, int, bool]:
    """(w1, w2, I, gated) from the [E, ·, ·] weights recorded inside the call: each has a hidden
    axis (H, or H/2 when two fp4 values pack one byte) and another one; w1's other axis is the
    larger (2·I gated, or I), w2's is I over the same packing."""
    found = []
    for dims, dtype in weights:
        axes = dims[1:]
        pack = next((p for p in (1, 2) if hidden // p in axes and hidden % p == 0), None)
        if pack is not None:
            other = axes[1] if axes[0] == hidden // pack else axes[0]
            found.append((other, pack, Arg(TENSOR, tuple(dims), dtype)))
    if len(found) < 2:
        raise NoCost(f"experts' weights [E, ·, H] not recorded inside the call (found {len(found)})")
    (n1, pack, w1), (n2, _, w2) = sorted(found, key=lambda f: -f[0])[:2]
    inter = n2 * pack
    if n1 not in (inter, 2 * inter):
        raise NoCost(f"experts' weights {list(w1.dims)} / {list(w2.dims)} do not fit one intermediate size")
    return w1, w2, inter, n1 == 2 * inter


@register(launchers=("vllm::moe_forward", "vllm::moe_forward_shared"))
def _moe_forward(call: Call) -> Cost:
    """vLLM's moe_forward(hidden_states [T, H], router_logits [T, E], ...): k and the experts'
    weights from the ops it encloses (TopK's k; the weights viewed at their stored dtype)."""
    x, logits = _tensor(call, 0, "hidden_states"), _tensor(call, 1, "router_logits")
    if len(x.dims) != 2 or len(logits.dims) != 2:
        raise NoCost(f"{call.what}: not hidden_states [T, H] and router_logits [T, E]")
    (tokens, hidden), experts = x.dims, logits.dims[-1]
    enclosed = json.loads(call.enclosed) if call.enclosed else {}
    k = enclosed.get("topk")
    weights = [(d, t) for d, t in enclosed.get("tensors", []) if d[0] == experts and t in dtypes()]
    if not weights and enclosed.get("allocated"):  # no weights recorded: the buffers it allocates
        return _moe_from_buffers(call, x, logits, enclosed)
    if not k:
        raise NoCost(f"{call.what}: top-k not recorded inside the call (no TopK op with its k)")
    try:
        w1, w2, inter, gated = _expert_weights(weights, hidden)
    except NoCost as exc:
        raise NoCost(f"{call.what}: {exc}") from None
    up = 2 if gated else 1
    flops = moe_flops(tokens, k, hidden, inter, up)
    touched = expected_experts(experts, k, tokens)
    weight_bytes = touched / experts * (w1.nbytes + w2.nbytes)
    activations = 2 * x.nbytes + logits.nbytes
    formula = (
        f"2·T·k·H·I{'·2 (gated)' if gated else ''} + 2·T·k·I·H = 2·{tokens}·{k}·{hidden}·{inter}·{up} + "
        f"2·{tokens}·{k}·{inter}·{hidden} (I as the weights record it; TraceLens takes I = H); "
        f"bytes = {touched:.2f} of {experts} experts (E·(1−(1−k/E)^T)) × w1 {list(w1.dims)} + w2 {list(w2.dims)} "
        f"{w1.dtype} as stored (block scales not recorded, not counted) + x, out, router logits {activations}"
    )
    precision, unit = _gemm_precision(call, x)
    return Cost(flops, weight_bytes + activations, precision, unit, formula)


# torch ScalarType codes of an allocation's Concrete Inputs: integer types, and the bytes per value
# of the floating ones (0, uint8, is raw bytes: packed or block-scaled formats)
_INTEGER_CODES = frozenset((1, 2, 3, 4))
_FLOAT_CODE_BYTES = {5: 2, 6: 4, 7: 8, 15: 2, 23: 1, 24: 1, 25: 1, 26: 1}
_BYTE_CODE = 0
_CODE_BYTES = {_BYTE_CODE: 1, 1: 1, 2: 2, 3: 4, 4: 8, 11: 1, **_FLOAT_CODE_BYTES}  # 11: bool


def scalar_type_bytes(code: int | None) -> int | None:
    """Bytes per element of a torch ScalarType code as Concrete Inputs record a dtype argument
    (6: float32, 15: bfloat16, 24: float8_e4m3fn), else None."""
    return None if code is None else _CODE_BYTES.get(code)


def _moe_from_buffers(call: Call, x: Arg, logits: Arg, enclosed: dict) -> Cost:
    """moe_forward whose experts' weights are not recorded (fused FlashInfer/TRT-LLM MoE): k from
    the top-k buffers it allocates (ids [T, k] of an integer type and weights [T, k] of a float
    type), I from its expert-ordered intermediate [P, I] (P ≥ T·k rows, I ≠ H): a float dtype gives
    I, bytes (uint8) take the format its block-scale buffer fits (S scales for P' rows of I values,
    one per 16 or 32, P ≤ P' < P + 128), a [P, 2I] beside it or a kernel naming a gated activation
    says the up-projection is gated; the weights' bytes from the format the call's kernels name."""
    (tokens, hidden), experts = x.dims, logits.dims[-1]
    buffers = [(list(d), int(c)) for d, c in enclosed["allocated"]]
    ids = {d[1] for d, c in buffers if len(d) == 2 and d[0] == tokens and c in _INTEGER_CODES}
    scores = {d[1] for d, c in buffers if len(d) == 2 and d[0] == tokens and c in _FLOAT_CODE_BYTES}
    ks = {k for k in ids & scores if 1 <= k < experts}
    if len(ks) != 1:
        raise NoCost(f"{call.what}: top-k not recorded inside the call (no TopK op, top-k buffers {sorted(ks)})")
    k = ks.pop()
    rows = [(d, c) for d, c in buffers if len(d) == 2 and d[0] >= tokens * k and d[0] != tokens and d[1] != hidden]
    widths = sorted({d[1] for d, _ in rows})
    gated = bool(enclosed.get("gated_kernel"))
    if len(widths) == 2 and widths[1] == 2 * widths[0]:  # the up-projection's [P, 2I] and its activation [P, I]
        widths, gated = widths[:1], True
    if len(widths) != 1:
        raise NoCost(f"{call.what}: experts' weights not recorded, and no one intermediate [P, I] buffer ({widths})")
    width = widths[0]
    codes = {c for d, c in rows if d[1] == width}
    if codes & set(_FLOAT_CODE_BYTES):
        inter, how = width, f"intermediate [P, {width}] allocated"
    elif codes == {_BYTE_CODE}:
        padded = max(d[0] for d, _ in rows if d[1] == width)
        scales = [d[0] for d, c in buffers if len(d) == 1 and c == _BYTE_CODE]
        fits = {
            (per_byte, block)
            for s in scales
            for per_byte in (1, 2)
            for block in (16, 32)
            if padded <= s * block / (width * per_byte) < padded + 128 and (s * block) % (width * per_byte) == 0
        }
        if len({per_byte for per_byte, _ in fits}) != 1:
            raise NoCost(
                f"{call.what}: intermediate [{padded}, {width}] bytes: its format is not recorded ({sorted(fits)})"
            )
        per_byte = next(iter(fits))[0]
        inter = width * per_byte
        how = f"intermediate [{padded}, {width}] bytes, {per_byte} value(s) per byte by its block scales {sorted(fits)}"
    else:
        raise NoCost(f"{call.what}: intermediate [P, {width}] of dtype codes {sorted(codes)}")
    if not gated:
        # neither a [P, 2I] buffer nor a kernel naming a gated activation: not known
        raise NoCost(f"{call.what}: experts' weights not recorded and no sign whether the up-projection is gated")
    bits = enclosed.get("weight_bits")
    if bits is None:
        raise NoCost(f"{call.what}: experts' weights and their format not recorded (no kernel names one)")
    up = 2
    flops = moe_flops(tokens, k, hidden, inter, up)
    touched = expected_experts(experts, k, tokens)
    weight_bytes = touched * (up * inter * hidden + inter * hidden) * bits / 8
    activations = 2 * x.nbytes + logits.nbytes
    formula = (
        f"2·T·k·H·I·2 (gated) + 2·T·k·I·H = 2·{tokens}·{k}·{hidden}·{inter}·2 + 2·{tokens}·{k}·{inter}·{hidden} "
        f"(k from the [T, k] top-k buffers, I from the {how}; I is the recorded intermediate, where "
        f"TraceLens takes I = H); bytes, an estimate: {touched:.2f} of {experts} experts (E·(1−(1−k/E)^T)) × "
        f"(2I·H + I·H) weights at {bits} bits (the format the call's kernels name, block scales included; "
        f"weights not recorded) + x, out, router logits {activations}"
    )
    precision, unit = _gemm_precision(call, x)
    return Cost(flops, weight_bytes + activations, precision, unit, formula)


@register(ops=("moe_gate", "moe_align"))
def _routing(call: Call) -> Cost:
    """MoE routing (top-k of the router logits, sorting tokens by expert): an estimate, every
    recorded input read once and as many bytes written (ids, weights, offsets); one op per element."""
    tensors = _tensors(call)
    if not tensors:
        raise _no_tensors(call)
    read = sum(a.nbytes for a in tensors)
    elements = sum(a.numel for a in tensors)
    formula = f"estimate: {elements} elements; bytes = inputs {read} read + as many written"
    return Cost(float(elements), 2.0 * read, tensors[0].precision, VECTOR, formula)


# --- bytes-dominated ops ---------------------------------------------------------------------


def _lists(call: Call) -> tuple[list[Arg], int, str, str]:
    """The recorded tensor lists of a call, their element size, precision and a note: a trace
    records each element's shape but not its dtype (`Input type` says only "TensorList"), so the
    dtype of the call's other tensors is used, else the one the caller assumed (`list_dtype`)."""
    lists = [a for a in call.args if a.kind == TENSOR_LIST and a.dims]
    if not lists:
        raise _no_tensors(call)
    # the dtype of the call's other tensors of some size: a 0-d one is a scalar (an fp32 `lr`, a
    # clip coefficient) beside lists of another dtype (bf16 parameters were costed as fp32)
    tensors = [a for a in _tensors(call) if a.dims]
    name = tensors[0].dtype if tensors else call.list_dtype
    if name not in dtypes():
        raise NoCost(f"{call.what}: the dtype of tensor-list elements is not recorded")
    note = "" if tensors else f" (list elements assumed {name}: not recorded)"
    return lists, dtypes()[name].bytes, dtypes()[name].precision, note


def _foreach(call: Call, out_itemsize: int | None) -> Cost:
    """A foreach op: elementwise over each element of its first list; other lists and tensors read."""
    lists, size, precision, note = _lists(call)
    out_numel = lists[0].numel
    per = flops_per_element().get(call.op_mapping, 1.0)
    read = sum(a.numel for a in lists) * size + sum(a.nbytes for a in _tensors(call))
    written = out_numel * (out_itemsize or size)
    formula = (
        f"{per:g} FLOP × {out_numel} elements of {len(lists[0].dims)} tensors; "
        f"bytes = inputs {read} + output {out_numel}·{out_itemsize or size}{note}"
    )
    return Cost(per * out_numel, read + written, precision, VECTOR, formula)


@lru_cache(maxsize=1)
def written_arguments() -> dict[str, dict[str, list]]:
    """Launcher → the positions of the arguments it writes (`out`: written only; `inplace`: read
    and written back) and the ops fused into it (costs.toml `written_arguments`)."""
    return read_toml("costs.toml")["written_arguments"]


def _with_written_arguments(call: Call, spec: dict[str, list]) -> Cost:
    """A pointwise op whose recorded arguments include its outputs: every recorded tensor but the
    `out` ones read once, the `out` and `inplace` ones written once; FLOPs per element of the
    largest written tensor, the fused ops' added to the op's own."""
    args = call.args
    out = [i for i in spec.get("out", []) if _optional_tensor(call, i)]
    inplace = [i for i in spec.get("inplace", []) if _optional_tensor(call, i)]
    if not out and not inplace:
        raise NoCost(f"{call.what}: the tensors it writes (arguments {spec}) are not recorded")
    read_from = [a for i, a in enumerate(args) if a.is_tensor and i not in out]
    written_to = [args[i] for i in (*out, *inplace)]
    read = sum(a.nbytes for a in read_from)
    written = sum(a.nbytes for a in written_to)
    elements = max(a.numel for a in written_to)
    per_element = flops_per_element()
    fused = list(spec.get("fused", []))
    per = per_element.get(call.op_mapping, 1.0) + sum(per_element.get(op, 1.0) for op in fused)
    plus = "".join(f" + {op}" for op in fused)
    formula = (
        f"{per:g} FLOP ({call.op_mapping}{plus}) × {elements} elements; bytes = inputs {read} read "
        f"+ {written} written (arguments {[*out, *inplace]}: {'out' if out else ''}"
        f"{', ' if out and inplace else ''}{'updated in place' if inplace else ''})"
    )
    return Cost(per * elements, read + written, written_to[0].precision, VECTOR, formula)


def _pointwise(call: Call, out_itemsize: int | None = None) -> Cost:
    if any(a.kind == TENSOR_LIST and a.dims for a in call.args):
        return _foreach(call, out_itemsize)
    tensors = _tensors(call)
    if not tensors:
        raise _no_tensors(call)
    spec = written_arguments().get(call.launcher)
    if spec is not None:
        return _with_written_arguments(call, spec)
    out_numel = _output_numel([a.dims for a in tensors])
    result, note = _result_dtype(call, tensors)
    size = out_itemsize if out_itemsize is not None else dtypes()[result].bytes
    per = flops_per_element().get(call.op_mapping, 1.0)
    read = sum(a.nbytes for a in tensors)
    written = out_numel * size
    formula = f"{per:g} FLOP × {out_numel} elements; bytes = inputs {read} + output {out_numel}·{size}{note}"
    return Cost(per * out_numel, read + written, dtypes()[result].precision, VECTOR, formula)


# op_mappings of ATen's arithmetic, whose result takes the inputs' promoted dtype
# (torch.result_type): bf16 + fp32 → fp32; the norms, softmax and masked_fill keep self's
_PROMOTING = frozenset(
    ("add", "sub", "mul", "div", "pow", "minimum", "maximum", "clamp", "where", "fused_elementwise", "max")
)
# ScalarType codes of a dtype argument (softmax.int(self, dim, dtype)) → a dtypes.toml spelling
_CODE_DTYPES = {5: "c10::Half", 6: "float", 7: "double", 15: "c10::BFloat16"}
_HALF_TO_FLOAT = ("aten::_softmax", "aten::_log_softmax")  # (self, dim, half_to_float)
_DTYPE_ARGUMENT = {
    "aten::softmax": 2,
    "aten::log_softmax": 2,
    "aten::_softmax_backward_data": 3,
    "aten::_log_softmax_backward_data": 3,
}


def _category(name: str) -> int:
    precision = dtypes()[name].precision
    return 0 if name in ("bool", "torch.bool") else 1 if precision in ("int", "int8") else 2


def _promoted(tensors: list[Arg]) -> str:
    """torch.result_type of tensors: the highest category (bool < integer < floating) among the
    dimensioned ones, a 0-d tensor counting only where its category is higher; within floating
    types the larger, bf16 with fp16 → fp32."""
    dimensioned = [a for a in tensors if a.dims] or tensors
    top = max(_category(a.dtype) for a in dimensioned)
    zero_d = [a for a in tensors if not a.dims and _category(a.dtype) > top]
    group = zero_d or dimensioned
    top = max(_category(a.dtype) for a in group)
    names = [a.dtype for a in group if _category(a.dtype) == top]
    widest = max(names, key=lambda n: dtypes()[n].bytes)
    precisions = {dtypes()[n].precision for n in names if dtypes()[n].bytes == dtypes()[widest].bytes}
    if top == 2 and {"bf16", "fp16"} <= precisions:
        return "float"  # bfloat16 with float16: float32
    return widest


def _result_dtype(call: Call, tensors: list[Arg]) -> tuple[str, str]:
    """The dtype a pointwise-style ATen op writes (and computes in), with a note where it is not
    self's: the promoted dtype of arithmetic (in-place ops write self's), fp32 from softmax's
    half_to_float, a recorded dtype argument; other launchers (Inductor, libraries): self's."""
    first = tensors[0].dtype
    launcher = call.launcher
    if not launcher.startswith("aten::"):
        return first, ""
    if launcher in _HALF_TO_FLOAT:
        if len(call.args) > 2 and call.args[2].flag() is True and dtypes()[first].precision in ("fp16", "bf16"):
            return "float", " (half_to_float: fp32 output)"
        return first, ""
    if launcher in _DTYPE_ARGUMENT:
        name = _CODE_DTYPES.get(_concrete_int(call, _DTYPE_ARGUMENT[launcher]) or -1)
        return (name, f" (dtype argument: {name} output)") if name and name != first else (first, "")
    if call.op_mapping not in _PROMOTING or launcher.endswith("_"):
        return first, ""
    promoted = _promoted(tensors)
    return promoted, ("" if promoted == first else f" ({promoted} output by type promotion)")


@register(
    ops=(
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "tanh",
        "exp",
        "neg",
        "minimum",
        "maximum",
        "clamp",
        "where",
        "fused_elementwise",
        "gelu",
        "silu",
        "relu",
        "sigmoid",
        "layer_norm",
        "rms_norm",
        "group_norm",
        "batch_norm",
        "softmax",
        "dequantize",
        "masked_fill_",
    )
)
def _elementwise(call: Call) -> Cost:
    return _pointwise(call)


@register(launchers=("aten::native_layer_norm", "aten::layer_norm", "aten::native_group_norm", "aten::group_norm"))
def _norm_with_statistics(call: Call) -> Cost:
    """A layer or group norm: its input, weight and bias read and its output written (as other
    pointwise ops), plus the per-row mean and rstd ATen's kernels write (native_layer_norm's and
    native_group_norm's second and third outputs) at the accumulation dtype — fp32 for
    fp32/bf16/fp16 inputs, fp64 for fp64. Rows: layer norm, the input's elements over
    normalized_shape's (its argument 1; else the weight's shape; else the last axis, said); group
    norm, N·groups (native_group_norm(input, weight, bias, N, C, HxW, group, eps),
    group_norm(input, num_groups, …))."""
    base = _pointwise(call)
    x = _tensor(call, 0, "input")
    stat = 8 if dtypes()[x.dtype].precision == "fp64" else 4
    note = ""
    if "group_norm" in call.launcher:
        groups = _concrete_int(call, 6 if call.launcher == "aten::native_group_norm" else 1)
        if groups is None or not x.dims:
            return replace(base, formula=base.formula + " (groups not recorded: mean/rstd not counted)")
        rows = x.dims[0] * groups
    else:
        shape = call.args[1].ints() if len(call.args) > 1 else None
        weight = _optional_tensor(call, 2)
        if shape is None and weight is not None and weight.dims:
            shape, note = list(weight.dims), " (normalized_shape from the weight)"
        if shape is None:
            shape, note = list(x.dims[-1:]), " (normalized_shape not recorded: the last axis assumed)"
        rows = x.numel // max(math.prod(shape), 1)
    written = 2 * rows * stat
    formula = f"{base.formula} + mean and rstd 2·{rows}·{stat}{note}"
    return replace(base, bytes=base.bytes + written, formula=formula)


@register(ops=("compare", "bitwise_not", "bitwise_and", "bitwise_or"))
def _logical(call: Call) -> Cost:
    return _pointwise(call, out_itemsize=1)


@register(ops=("silu_and_mul", "gelu_and_mul"))
def _gated(call: Call) -> Cost:
    tensors = _tensors(call)
    if not tensors:
        raise _no_tensors(call)
    x = max(tensors, key=lambda a: a.numel)  # the [.., 2d] input
    halves = [a for a in tensors if a.numel == x.numel]
    if len(halves) >= 2:  # gate and up given apart (an Inductor `mul_silu` kernel): one output element per pair
        out_numel, read = x.numel, sum(a.nbytes for a in halves[:2])
    else:
        out_numel, read = x.numel // 2, x.nbytes
    per = flops_per_element().get(call.op_mapping, 1.0)
    formula = f"{per:g} FLOP × {out_numel} outputs; bytes = inputs {read} + output {out_numel}·{x.itemsize}"
    return Cost(per * out_numel, read + out_numel * x.itemsize, x.precision, VECTOR, formula)


@register(ops=("quantize",))
def _quantize(call: Call) -> Cost:
    tensors = _tensors(call)
    if not tensors:
        raise _no_tensors(call)
    x = max(tensors, key=lambda a: a.numel)
    out = x.numel  # one byte per fp8/int8 element; scales are small and counted as inputs
    read = sum(a.nbytes for a in tensors)
    formula = f"{x.numel} elements; bytes = inputs {read} + 1-byte output {out}"
    return Cost(2.0 * x.numel, read + out, x.precision, VECTOR, formula)


# --- training ops read or written by index -------------------------------------------------


@register(launchers=("aten::nll_loss_forward", "aten::nll_loss2d_forward"))
def _nll_loss_forward(call: Call) -> Cost:
    """nll_loss_forward(self [N, C, …], target [N, …], weight, reduction, ignore_index): one
    log-probability gathered per target (and its class weight), the loss (per target where
    reduction is 0, none; else one value) and total_weight written; one FLOP per target. It was
    costed as a reduction over all of [N, C]: 32,000× the work for C = 32,000."""
    logp, target = _tensor(call, 0, "self"), _tensor(call, 1, "target")
    n = target.numel
    weight = _optional_tensor(call, 2)
    per_row = n * logp.itemsize + (n * weight.itemsize if weight is not None else 0)
    reduction = _concrete_int(call, 3)
    out = n if reduction == 0 else 1
    written = (out + 1) * logp.itemsize  # the loss and total_weight
    formula = (
        f"{n} targets: a log-probability{' and its class weight' if weight is not None else ''} gathered each "
        f"({per_row} B), target {target.nbytes} B read; loss {out} + total_weight 1 × {logp.itemsize} B written"
        + ("" if reduction is not None else " (reduction not recorded: a reduced loss assumed)")
    )
    return Cost(float(n), target.nbytes + per_row + written, logp.precision, VECTOR, formula)


@register(launchers=("aten::nll_loss_backward", "aten::nll_loss2d_backward"))
def _nll_loss_backward(call: Call) -> Cost:
    """nll_loss_backward(grad_output, self [N, C, …], target [N, …], weight, reduction,
    ignore_index, total_weight): one gradient element written per target, into a grad_input an
    op of its own zeroed; grad_output, target, the gathered weights and total_weight read."""
    grad, logp, target = _tensor(call, 0, "grad_output"), _tensor(call, 1, "self"), _tensor(call, 2, "target")
    n = target.numel
    weight, total = _optional_tensor(call, 3), _optional_tensor(call, 6)
    read = grad.nbytes + target.nbytes + (n * weight.itemsize if weight is not None else 0)
    read += total.nbytes if total is not None else 0
    written = n * logp.itemsize
    formula = (
        f"{n} targets: one gradient element each written ({written} B); grad_output, target, weights read {read} B"
    )
    return Cost(float(n), read + written, logp.precision, VECTOR, formula)


@register(launchers=("aten::embedding_dense_backward", "aten::embedding_backward"))
def _embedding_backward(call: Call) -> Cost:
    """embedding_dense_backward(grad_output [.., D], indices [..], num_weights, padding_idx,
    scale_grad_by_freq): every gradient row added into its index's row of a dense
    [num_weights, D] gradient, written whole (zeros included); one FLOP per gradient element.
    The gradient had been taken for the destination, and the dense gradient left out."""
    grad, indices = _tensor(call, 0, "grad_output"), _tensor(call, 1, "indices")
    rows = _concrete_int(call, 2)
    if rows is None or rows < 0:
        raise NoCost(f"{call.what}: num_weights (the embedding's rows) not recorded")
    width = grad.dims[-1] if grad.dims else 1
    written = rows * width * grad.itemsize
    formula = (
        f"{grad.numel} gradient elements added into a dense [{rows}, {width}] gradient; bytes = grad_output "
        f"{grad.nbytes} + indices {indices.nbytes} read + {written} written"
    )
    return Cost(float(grad.numel), grad.nbytes + indices.nbytes + written, grad.precision, VECTOR, formula)


@register(launchers=("aten::index_add_", "aten::index_add", "aten::scatter_add_", "aten::scatter_add"))
def _accumulating_scatter(call: Call) -> Cost:
    """index_add_(self, dim, index, source, alpha) and scatter_add_(self, dim, index, src): one
    update per source (index_add_) or index (scatter_add_) element, added into the destination
    (`self`, whatever its size beside an int64 index), whose elements touched — at most all of
    them — are read and written; one FLOP per update. The destination's read and the adds were
    left out, and the larger index taken for the destination."""
    dest = _tensor(call, 0, "self")
    index, source = _tensor(call, 2, "index"), _tensor(call, 3, "source")
    scatter = "scatter" in call.launcher
    updates = index.numel if scatter else source.numel
    if scatter:
        touched = min(updates, dest.numel)
    else:  # whole slices along dim: each index selects a slice of self.numel / self.dims[dim]
        dim = _concrete_int(call, 1) or 0
        size = dest.dims[dim % len(dest.dims)] if dest.dims else 1
        touched = min(index.numel, size) * (dest.numel // max(size, 1))
    read_source = updates * source.itemsize
    formula = (
        f"{updates} updates added into {touched} destination elements (read and written, "
        f"{2 * touched * dest.itemsize} B); index {index.nbytes} + source {read_source} B read"
    )
    return Cost(
        float(updates), index.nbytes + read_source + 2 * touched * dest.itemsize, dest.precision, VECTOR, formula
    )


@register(launchers=("aten::_fused_adam_", "aten::_fused_adamw_"))
def _fused_adam(call: Call) -> Cost:
    """_fused_adam(w)_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, …):
    params, grads and both moments read, params and both moments written (max_exp_avg_sqs read
    and written too where recorded: AMSGrad), each step read; FLOPs per parameter from
    costs.toml (`fused_adam`). Only the first list had been counted as written, at 1 FLOP."""
    lists = [a for a in call.args if a.kind == TENSOR_LIST]
    if len(lists) < 4 or not lists[0].dims:
        raise NoCost(f"{call.what}: params, grads, exp_avgs and exp_avg_sqs not recorded as tensor lists")
    _, size, precision, note = _lists(call)
    params = lists[0].numel
    amsgrad = len(lists) > 4 and bool(lists[4].dims) and lists[4].numel == params
    moved = (4 + amsgrad) * params * size + (3 + amsgrad) * params * size
    steps = lists[5].numel * 4 if len(lists) > 5 and lists[5].dims else 0  # float32 step counts
    per = flops_per_element().get("fused_adam", 1.0)
    formula = (
        f"{per:g} FLOP × {params} parameters; bytes = params, grads, moments{', max moments' if amsgrad else ''} "
        f"read ({4 + amsgrad}×) and params, moments written ({3 + amsgrad}×) at {size} B + steps {steps}{note}"
    )
    return Cost(per * params, moved + steps, precision, VECTOR, formula)


@register(launchers=("aten::native_dropout",))
def _dropout(call: Call) -> Cost:
    """native_dropout(input, p, train): the input read, the output and a one-byte keep mask written."""
    x = _tensor(call, 0, "input")
    written = x.numel * (x.itemsize + 1)
    per = flops_per_element().get(call.op_mapping, 1.0)
    formula = f"{per:g} FLOP × {x.numel} elements; bytes = input {x.nbytes} + output and bool mask {written}"
    return Cost(per * x.numel, x.nbytes + written, x.precision, VECTOR, formula)


@register(launchers=("aten::_foreach_norm",))
def _foreach_norm(call: Call) -> Cost:
    """_foreach_norm(tensors, ord): every element of the list read, one norm per tensor written;
    two FLOPs per element (square and add)."""
    lists, size, precision, note = _lists(call)
    elements, count = lists[0].numel, len(lists[0].dims)
    formula = f"2 FLOP × {elements} elements of {count} tensors; bytes = {elements}·{size} read + {count} norms{note}"
    return Cost(2.0 * elements, elements * size + count * size, precision, VECTOR, formula)


def _pool_output(call: Call, x: Arg) -> tuple[int, ...]:
    """The output shape of max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode)."""
    spatial = 2
    if len(x.dims) < spatial + 1:
        raise NoCost(f"{call.what}: input of rank {len(x.dims)}")

    def pair(index: int, default: list[int] | None) -> list[int]:
        values = (call.args[index].ints() if index < len(call.args) else None) or default
        if values is None:
            raise NoCost(f"{call.what}: kernel_size not recorded (Concrete Inputs)")
        return values * spatial if len(values) == 1 else values[:spatial]

    kernel = pair(1, None)
    stride = pair(2, kernel)
    padding, dilation = pair(3, [0]), pair(4, [1])
    ceil_mode = call.args[5].flag() if len(call.args) > 5 else False
    sizes = []
    for axis in range(spatial):
        size = x.dims[-spatial + axis] + 2 * padding[axis] - dilation[axis] * (kernel[axis] - 1) - 1
        out = (-(-size // stride[axis]) if ceil_mode else size // stride[axis]) + 1
        if ceil_mode and (out - 1) * stride[axis] >= x.dims[-spatial + axis] + padding[axis]:
            out -= 1  # PyTorch: the last window must start inside the input or its left padding
        sizes.append(max(out, 0))
    return (*x.dims[:-spatial], *sizes)


@register(launchers=("aten::max_pool2d_with_indices",))
def _max_pool(call: Call) -> Cost:
    """max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode): the input
    read, the output and its int64 indices written; one compare per window element. It was
    costed as a reduction whose output is unknown (0 bytes)."""
    x = _tensor(call, 0, "self")
    out = math.prod(_pool_output(call, x))
    kernel = call.args[1].ints() or [1]
    window = math.prod(kernel * 2 if len(kernel) == 1 else kernel[:2])
    written = out * (x.itemsize + 8)
    formula = (
        f"{out} outputs of a {window}-element window; bytes = input {x.nbytes} + output and int64 indices {written}"
    )
    return Cost(float(out * window), x.nbytes + written, x.precision, VECTOR, formula)


@register(launchers=("aten::max_pool2d_with_indices_backward",))
def _max_pool_backward(call: Call) -> Cost:
    """max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
    ceil_mode, indices): grad_output and the indices read, each gradient added at its index into
    grad_input (self's shape), written whole."""
    grad, x = _tensor(call, 0, "grad_output"), _tensor(call, 1, "self")
    indices = _optional_tensor(call, 7)
    read = grad.nbytes + (indices.nbytes if indices is not None else grad.numel * 8)
    written = x.numel * x.itemsize
    formula = f"{grad.numel} gradients scattered; bytes = grad_output and indices {read} read + grad_input {written}"
    return Cost(float(grad.numel), read + written, x.precision, VECTOR, formula)


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
# top-k family: (k's position or None, dim's position, dim's default) → values and indices per row
_SELECTIONS: dict[str, tuple[int | None, int, int]] = {
    "aten::topk": (1, 2, -1),  # topk(self, k, dim=-1, largest, sorted)
    "aten::kthvalue": (None, 2, -1),  # kthvalue(self, k, dim=-1, keepdim): one per row
    "aten::mode": (None, 1, -1),  # mode(self, dim=-1, keepdim)
}


def _written(numel: int, x: Arg, outputs: tuple[str, ...]) -> tuple[int, str]:
    """Bytes of `numel` elements of each output (values at the input's dtype, int64 indices, bools)."""
    sizes = {_VALUES: x.itemsize, _INDICES: 8, _BOOL: 1}
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
    op's schema; a full reduction writes one element."""
    tensors = _tensors(call)
    if not tensors:
        raise _no_tensors(call)
    x = tensors[0]
    launcher = call.launcher
    if launcher in ("aten::max", "aten::min") and len(tensors) >= 2 and _optional_tensor(call, 1) is not None:
        return _pointwise(call)  # max.other(self, other): elementwise
    if launcher in _SELECTIONS:
        return _selection(call, x)
    if launcher in _DIM_REDUCTIONS:
        index, outputs = _DIM_REDUCTIONS[launcher]
        if len(call.args) <= _FULL_ARITY.get(launcher, 0):  # the overload without a dim
            reduced, note = list(range(len(x.dims))), ""
            outputs = (_VALUES,) if launcher in _VALUE_ONLY_WHEN_FULL else outputs
        else:
            reduced, note = _reduced_dims(call, x, index)
    elif call.op_mapping in ("cumsum", "sort", "topk"):
        outputs = _SCANS.get(launcher, (_VALUES,))
        written, what = _written(x.numel, x, outputs)
        formula = f"{x.numel} elements read; output {what}"
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
    if reduced is None:
        out_numel = 1 if len(x.dims) <= 1 else 0  # unknown reduced dims: output counted as 0 bytes
    else:
        out_numel = math.prod(s for i, s in enumerate(x.dims) if i not in reduced)
    written, what = _written(out_numel, x, outputs)
    formula = f"{x.numel} elements read; output {what}{note}"
    return Cost(float(x.numel), x.nbytes + written, x.precision, VECTOR, formula)


def _selection(call: Call, x: Arg) -> Cost:
    """topk(self, k, dim=-1, …), kthvalue(self, k, dim=-1, keepdim), mode(self, dim=-1, keepdim):
    the input read, k (topk) or one (kthvalue, mode) values and int64 indices written per slice
    along dim. topk's k not recorded: its outputs are not counted, and the formula says so."""
    k_at, dim_at, default = _SELECTIONS[call.launcher]
    dim = _concrete_int(call, dim_at)
    dim = default if dim is None else dim
    size = x.dims[dim % len(x.dims)] if x.dims else 1
    rows = x.numel // max(size, 1)
    k = _concrete_int(call, k_at) if k_at is not None else 1
    if k is None:
        formula = f"{x.numel} elements read; k not recorded: outputs not counted"
        return Cost(float(x.numel), x.nbytes, x.precision, VECTOR, formula)
    out_numel = rows * min(k, size)
    written, what = _written(out_numel, x, (_VALUES, _INDICES))
    formula = f"{x.numel} elements read; output {rows} slices (dim {dim}) × k = {k}: {what}"
    return Cost(float(x.numel), x.nbytes + written, x.precision, VECTOR, formula)


@register(
    ops=(
        "copy_",
        "fill_",
        "arange",
        "index",
        "index_select",
        "index_put_",
        "gather",
        "scatter",
        "kv_cache_write",
    )
)
def _memory(call: Call) -> Cost:
    if any(a.kind == TENSOR_LIST and a.dims for a in call.args):
        return _memory_lists(call)
    tensors = _tensors(call)
    if not tensors:
        raise _no_tensors(call)
    op = call.op_mapping
    if op in ("fill_", "arange"):
        written = tensors[0].nbytes
        return Cost(0.0, written, tensors[0].precision, VECTOR, f"writes {written} bytes")
    if op == "copy_" and len(tensors) >= 2:
        dst, src = tensors[0], tensors[1]
        return Cost(0.0, src.nbytes + dst.nbytes, dst.precision, VECTOR, f"reads {src.nbytes} + writes {dst.nbytes}")
    if call.launcher == "aten::index_select" and len(tensors) >= 2:
        return _index_select(call, tensors[0], tensors[-1])
    if op == "index_select" and len(tensors) >= 2:
        table, index = tensors[0], tensors[-1]
        row = table.nbytes // max(table.dims[0], 1) if table.dims else table.itemsize
        moved = index.numel * row
        return Cost(
            0.0,
            index.nbytes + 2 * moved,
            table.precision,
            VECTOR,
            f"{index.numel} rows of {row} bytes read and written",
        )
    if op == "gather" and len(tensors) >= 2:
        # gather(self, dim, index[, out]): one element of self read per index, the output written
        source, index = tensors[0], next((a for a in tensors[1:] if a.precision == "int"), tensors[1])
        moved = index.numel * source.itemsize
        return Cost(
            0.0,
            index.nbytes + 2 * moved,
            source.precision,
            VECTOR,
            f"{index.numel} elements of {source.itemsize} bytes read and written, index {index.nbytes} read",
        )
    if op in ("index_put_", "scatter", "kv_cache_write") and len(tensors) >= 2:
        # the destination (the largest tensor: a cache or a pool; a KV-cache write has two, the K
        # and V caches of one shape) is only touched where written
        destination = max(tensors, key=lambda a: a.nbytes)
        same = [a for a in tensors if a.dims == destination.dims] if op == "kv_cache_write" else [destination]
        others = [a for a in tensors if not any(a is d for d in same)]
        indices = sum(a.nbytes for a in others if a.precision == "int")
        values = sum(a.nbytes for a in others if a.precision != "int")
        return Cost(
            0.0,
            indices + 2.0 * values,
            destination.precision,
            VECTOR,
            f"values {values} read and written into the destination, indices {indices} read",
        )
    read = sum(a.nbytes for a in tensors)
    return Cost(0.0, 2.0 * read, tensors[0].precision, VECTOR, f"inputs {read} read and written once")


def _index_select(call: Call, table: Arg, index: Arg) -> Cost:
    """index_select(self, dim, index): the output is self with axis `dim` (negative: from the end)
    cut to the index's length; the slices selected are read, the output written, the index read.
    `dim` not recorded (Concrete Inputs): 0, the embedding case, assumed and said."""
    dim = _concrete_int(call, 1)
    rank = len(table.dims)
    assumed = "" if dim is not None else " (dim not recorded: 0 assumed)"
    if rank == 0:
        out_dims: tuple[int, ...] = ()
        out = index.numel  # a 0-d self: one element per index
    else:
        axis = (dim or 0) % rank
        out_dims = (*table.dims[:axis], index.numel, *table.dims[axis + 1 :])
        out = math.prod(out_dims)
    moved = out * table.itemsize
    formula = (
        f"output {list(out_dims)} ({out} elements, dim {dim if dim is not None else 0}{assumed}): "
        f"{moved} read from self and {moved} written + index {index.nbytes} read"
    )
    return Cost(0.0, index.nbytes + 2 * moved, table.precision, VECTOR, formula)


def _memory_lists(call: Call) -> Cost:
    """foreach copies and fills: the first list is written, the others read."""
    lists, size, precision, note = _lists(call)
    written = lists[0].numel * size
    read = sum(a.numel for a in lists[1:]) * size + sum(a.nbytes for a in _tensors(call))
    if call.op_mapping in ("fill_", "arange"):
        read = 0
    return Cost(0.0, read + written, precision, VECTOR, f"reads {read} + writes {written} bytes{note}")


@register(ops=("cat",))
def _cat(call: Call) -> Cost:
    """cat/stack: every element of the input list read once, the result (as large) written once."""
    lists, size, precision, note = _lists(call)
    moved = sum(a.numel for a in lists) * size
    shapes = " + ".join("·".join(map(str, shape)) for a in lists for shape in a.dims)
    return Cost(0.0, 2.0 * moved, precision, VECTOR, f"({shapes}) elements · {size} B read and written{note}")


@register(ops=("rotary_embedding",))
def _rotary(call: Call) -> Cost:
    """q and k rotated in place; one cos/sin cache row read per token. The [tokens, heads, dim]
    tensors before the cache are q and k, and where their second half repeats the first's shapes,
    the tensors they are rotated into (sgl-kernel's `apply_rope_pos_ids_cos_sin_cache(q, k, q_rope,
    k_rope, cos_sin_cache, pos_ids, …)`): counted once. Two are q and k, of one shape where the
    heads are equal (MHA), both rotated. Tensors after the cache (a fused KV-cache write's buffers)
    are not rotated."""
    tensors = _tensors(call)
    cache_at = next((i for i, a in enumerate(tensors) if len(a.dims) == 2), len(tensors))
    cache = tensors[cache_at] if cache_at < len(tensors) else None
    rotated = [a for a in tensors[:cache_at] if len(a.dims) == 3]
    half = len(rotated) // 2
    if half >= 2 and len(rotated) % 2 == 0 and all(rotated[i].dims == rotated[half + i].dims for i in range(half)):
        rotated = rotated[:half]
    if not rotated:
        rotated, cache = _rotary_2d(call)
    tokens = rotated[0].dims[0]
    row = cache.nbytes // cache.dims[0] if cache is not None and cache.dims[0] else 0
    moved = sum(a.nbytes for a in rotated)
    elements = sum(a.numel for a in rotated)
    formula = f"3 FLOP × {elements} q/k elements; bytes = q/k {moved} read and written + {tokens} cache rows of {row}"
    return Cost(3.0 * elements, 2.0 * moved + tokens * row, rotated[0].precision, VECTOR, formula)


def _rotary_2d(call: Call) -> tuple[list[Arg], Arg | None]:
    """vLLM `_C::rotary_embedding` / sgl-kernel `rotary_embedding(positions [T], query [T, H_q·d],
    key [T, H_kv·d], head_size, cos_sin_cache [max_pos, d], is_neox)`: the query and key (the
    first two float [T, ·] tensors after the positions), and the cache (a 2-D tensor of other rows)."""
    tensors = _tensors(call)
    positions = next((a for a in tensors if len(a.dims) == 1 and a.precision == "int"), None)
    if positions is None:
        raise NoCost(f"{call.what}: no [tokens, heads, dim] query/key or [tokens] positions recorded")
    tokens = positions.dims[0]
    flat = [a for a in tensors if len(a.dims) == 2 and a.precision != "int"]
    rotated = [a for a in flat if a.dims[0] == tokens][:2]
    if len(rotated) < 2:
        raise NoCost(f"{call.what}: no [tokens, H·d] query and key recorded apart (a packed qkv cannot be split)")
    cache = next((a for a in flat if a.dims[0] != tokens), None)
    return rotated, cache


# --- GEMMs launched from Python (catalog entries) -------------------------------------------


def _two_operand_gemm(call: Call, out_itemsize: int, what: str) -> Cost:
    """A [M, K] and the first later 2-D operand sharing K ([N, K] or [K, N]); other tensors
    (scales, outputs) are read/written as recorded."""
    tensors = [a for a in _tensors(call) if len(a.dims) == 2]
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            m, k = a.dims
            if k in b.dims and b is not a:
                n = b.dims[0] if b.dims[1] == k else b.dims[1]
                extras = [t for t in tensors if t is not a and t is not b and t.numel < a.numel]
                return _gemm(call, 1, m, n, k, [a, b, *extras], out_itemsize, f" ({what})")
    raise NoCost(f"{call.what}: no A [M, K] / B [N, K] pair among the recorded shapes")


@register(rules=("deepgemm", "triton-block-fp8-gemm"))
def _block_fp8_gemm(call: Call) -> Cost:
    return _two_operand_gemm(call, 2, "fp8 operands with block scales, bf16 output")


# DeepGEMM's m-grouped contiguous layout pads each expert's rows to this many (its
# `get_m_alignment_for_contiguous_layout()`, the kernel's BLOCK_M)
_DEEPGEMM_CONTIGUOUS_ALIGNMENT = 128


@register(rules=("deepgemm-grouped",))
def _grouped_deepgemm(call: Call) -> Cost:
    """DeepGEMM's m-grouped contiguous GEMM (`m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`, the
    expert GEMMs of SGLang's DeepEP MoE): lhs [M, K] holds every expert's rows back to back, each
    expert's segment padded to a multiple of 128 rows; rhs [G, N, K] the G local experts' weights;
    out [M, N] bf16. Which rows belong to which expert (`m_indices`, −1 on padding) is a value the
    trace does not record, so both numbers are upper bounds: the FLOPs count the padding rows,
    whose 128-row blocks the kernel skips, and the bytes count the weights of every expert the
    layout can hold (each non-empty segment takes at least 128 rows: at most min(G, ⌈M/128⌉)).
    The masked layout (lhs [G, M_max, K], each expert's row count `masked_m` a value) and the
    k-grouped one are not costed."""
    tensors = _tensors(call)
    rhs = next((a for a in tensors if len(a.dims) == 3 and a.precision != "fp32"), None)
    if rhs is None:
        raise NoCost(f"grouped DeepGEMM: no experts' weights [G, N, K] recorded ({[list(a.dims) for a in tensors]})")
    groups, n, k = rhs.dims
    lhs = next((a for a in tensors if len(a.dims) == 2 and a.dims[1] == k and a.precision != "fp32"), None)
    if lhs is None:
        if any(len(a.dims) == 3 and a is not rhs and a.dims[0] == groups and a.dims[2] == k for a in tensors):
            raise NoCost(
                "grouped DeepGEMM: the masked layout: each expert's row count (masked_m) is a value not recorded"
            )
        raise NoCost(f"grouped DeepGEMM: no lhs [M, {k}] recorded beside the weights {list(rhs.dims)}")
    m = lhs.dims[0]
    touched = min(groups, -(-m // _DEEPGEMM_CONTIGUOUS_ALIGNMENT))
    out = next((a for a in tensors if a is not lhs and a.dims == (m, n)), None)
    weights = [a for a in tensors if a.dims[:1] == (groups,) and len(a.dims) == 3]  # rhs and its block scales
    rows = [a for a in tensors if a is not lhs and a is not out and a.dims[:1] == (m,)]  # lhs scales, m_indices
    row_bytes = lhs.nbytes + sum(a.nbytes for a in rows)
    weight_bytes = sum(a.nbytes for a in weights) * touched / groups
    out_itemsize = out.itemsize if out is not None else 2  # bf16
    precision, unit = _gemm_precision(call, lhs)
    formula = (
        f"an upper bound: 2·M·N·K = 2·{m}·{n}·{k}, M counting each expert's padding to "
        f"{_DEEPGEMM_CONTIGUOUS_ALIGNMENT} rows (blocks the kernel skips); bytes = lhs and its row-wise "
        f"inputs {row_bytes} + weights and scales of at most min(G, ⌈M/{_DEEPGEMM_CONTIGUOUS_ALIGNMENT}⌉) "
        f"= {touched} of {groups} experts {weight_bytes:.0f} + output {m}·{n}·{out_itemsize}"
    )
    return Cost(2.0 * m * n * k, row_bytes + weight_bytes + m * n * out_itemsize, precision, unit, formula)


@register(rules=("dsv3-small-gemm",))
def _small_m_gemm(call: Call) -> Cost:
    tensors = [a for a in _tensors(call) if len(a.dims) == 2]
    if len(tensors) >= 3:  # sgl-kernel passes (out, mat1, mat2)
        call = Call(call.launcher, call.op_mapping, tuple(tensors[1:]), call.rule)
    return _two_operand_gemm(call, 2, "DeepSeek-V3 small-M GEMM")
