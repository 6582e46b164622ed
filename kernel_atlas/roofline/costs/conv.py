"""Convolutions, forward, transposed and backward, from their recorded geometry."""

from __future__ import annotations

import json
import math

from kernel_atlas.ingest.recorded import Arg
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    gemm_precision,
    register,
    tensor_at,
)


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
    x, w = tensor_at(call, 0, "input"), tensor_at(call, 1, "weight")
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
    read, written, inputs = _conv_traffic(call, x, w, outputs)
    precision, unit = gemm_precision(call, x)
    padded = f" (padding '{named}')" if named else ""
    formula = (
        f"2·N·K·out·(C/g·R·S) = 2·{n}·{k}·{'·'.join(map(str, out_spatial))}·{macs_per_output}{padded}; "
        f"bytes = {inputs} + output {written}"
    )
    return Cost(flops, read + written, precision, unit, formula)


def _conv_traffic(call: Call, x: Arg, w: Arg, outputs: int) -> tuple[int, int, str]:
    """A forward convolution's bytes: input, weight and bias (its third argument, where it is a
    tensor) read, `outputs` elements of the input's type written; with the formula's words for
    what is read (the bias named where it is counted: the formula had left it out, its terms
    summing short of `bytes` by the bias's size, campaign BH 7)."""
    bias = [a for a in call.args[2:3] if a.is_tensor]
    read = x.nbytes + w.nbytes + sum(a.nbytes for a in bias)
    words = f"input {x.nbytes} + weight {w.nbytes}" + "".join(f" + bias {a.nbytes}" for a in bias)
    return read, outputs * x.itemsize, words


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
    read, written, inputs = _conv_traffic(call, x, w, math.prod(out))
    precision, unit = gemm_precision(call, x)
    formula = (
        f"transposed: 2·N·C·in·(K/g·R·S) = 2·{'·'.join(map(str, x.dims))}·{math.prod(w.dims[1:])}; "
        f"bytes = {inputs} + output {list(out)} {written}"
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
    read, written, inputs = _conv_traffic(call, x, w, math.prod(out))
    precision, unit = gemm_precision(call, x)
    formula = (
        f"2·N·K·P·Q·(C/g·R·S) = 2·{'·'.join(map(str, out))}·{math.prod(w.dims[1:])} (input {list(x.dims)}, "
        f"weight {list(w.dims)} recorded; output {list(out)} from {_from(partner)}, its grad_output); "
        f"bytes = {inputs} + output {written}"
    )
    return Cost(2.0 * macs, read + written, precision, unit, formula)


@register(launchers=("aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input"), partner=True)
def _conv_backward_input(call: Call) -> Cost:
    """cudnn_convolution_backward_input(self_size, grad_output [N,K,P,Q…], weight [K,C/g,R,S…], padding,
    stride, dilation, groups, …): the data gradient, 2·N·K·P·Q·(C/g·R·S) FLOPs from what it records;
    the input size list is not recorded (only `[]`): grad_input's shape, for the bytes, is the
    input of the forward op with the same sequence number."""
    grad, w = tensor_at(call, 1, "grad_output"), tensor_at(call, 2, "weight")
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
    precision, unit = gemm_precision(call, grad)
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
    grad, x = tensor_at(call, 1, "grad_output"), tensor_at(call, 2, "input")
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
    precision, unit = gemm_precision(call, x)
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
    grad, x, w = tensor_at(call, 0, "grad_output"), tensor_at(call, 1, "input"), tensor_at(call, 2, "weight")
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
    precision, unit = gemm_precision(call, x)
    formula = (
        f"2·N·K·P·Q·(C/g·R·S) = 2·{macs} FLOP per gradient × (data {mask[0]}, weight {mask[1]}) "
        f"+ bias {mask[2]}; bytes = grad_output, weight/input as needed {read} + gradients {written}"
    )
    return Cost(flops, read + written, precision, unit, formula)
