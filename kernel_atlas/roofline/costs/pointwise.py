"""Bytes-dominated ops: elementwise arithmetic with ATen's type promotion, norms, activations, foreach lists."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.core.paths import catalogs_dir, read_toml
from kernel_atlas.ingest.recorded import SCALAR, TENSOR_LIST, Arg, dtypes, scalar_type
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    broadcast_shape,
    concrete_int,
    flops_per_element,
    inductor_bytes,
    no_tensors,
    optional_tensor_at,
    register,
    tensor_at,
    tensor_lists,
    tensors_of,
    triton_launcher,
)


def _output_numel(shapes: list[tuple[int, ...]]) -> int:
    """Elements of a pointwise op's output: the broadcast of its inputs' shapes; when they do
    not broadcast (an Inductor kernel's arguments are views of one buffer, [8,4096,2048] beside
    [32768,2048]), the largest input, never the per-axis maximum of shapes that do not fit."""
    broadcast = broadcast_shape(shapes)
    fits = all(size in (1, broadcast[axis - len(shape)]) for shape in shapes for axis, size in enumerate(shape))
    return math.prod(broadcast) if fits else max(math.prod(shape) for shape in shapes)


def _foreach(call: Call, out_itemsize: int | None) -> Cost:
    """A foreach op: elementwise over each element of its first list; other lists and tensors read."""
    lists, size, precision, note = tensor_lists(call)
    out_numel = lists[0].numel
    per = flops_per_element().get(call.op_mapping, 1.0)
    read = sum(a.numel for a in lists) * size + sum(a.nbytes for a in tensors_of(call))
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


def written_arguments_of(call: Call) -> dict[str, list] | None:
    """The call's `written_arguments` entry: its launcher's; for a Triton launch (`triton_launcher`,
    whose launcher names no kernel: every hand-written kernel's reads `<built-in function launch>`)
    its label rule's (`rule:<id>`), where the rule names one kernel's argument layout."""
    table = written_arguments()
    spec = table.get(call.launcher)
    if spec is None and call.rule and triton_launcher(call.launcher):
        spec = table.get(call.rule)
    return spec


def split_written(call: Call, spec: dict[str, list]) -> tuple[list[Arg], list[Arg], list[int]]:
    """The recorded tensors a launcher with written arguments (costs.toml `written_arguments`)
    reads and writes: every tensor but the `out` ones read once, the `out` and `inplace` ones
    written once; with the positions written. None of them recorded: NoCost."""
    args = call.args
    out = [i for i in spec.get("out", []) if optional_tensor_at(call, i)]
    inplace = [i for i in spec.get("inplace", []) if optional_tensor_at(call, i)]
    if not out and not inplace:
        raise NoCost(f"{call.what}: the tensors it writes (arguments {spec}) are not recorded")
    read_from = [a for i, a in enumerate(args) if a.is_tensor and i not in out]
    return read_from, [args[i] for i in (*out, *inplace)], [*out, *inplace]


def _with_written_arguments(call: Call, spec: dict[str, list]) -> Cost:
    """A pointwise op whose recorded arguments include its outputs: every recorded tensor but the
    `out` ones read once, the `out` and `inplace` ones written once; FLOPs per element of the
    largest written tensor, the fused ops' added to the op's own."""
    read_from, written_to, _ = split_written(call, spec)
    out = [i for i in spec.get("out", []) if optional_tensor_at(call, i)]
    inplace = [i for i in spec.get("inplace", []) if optional_tensor_at(call, i)]
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


def functional_tensors() -> dict[str, int]:
    """ATen pointwise op → how many leading arguments its functional overloads may take a tensor
    at (costs.toml `[functional_tensors]`): a tensor recorded at or past that count is the output
    of its `out=` overload. Read once per catalogs folder (parsing costs.toml at every call had
    taken 0.9 s of a report)."""
    return _functional_tensors(str(catalogs_dir()))


@lru_cache(maxsize=4)
def _functional_tensors(folder: str) -> dict[str, int]:  # `folder`: the cache's key, the catalogs in use
    table = read_toml("costs.toml").get("functional_tensors", {})
    return {f"aten::{op}": int(count) for count, ops in table.items() for op in ops}


def out_arguments(call: Call) -> list[int]:
    """Positions of an ATen pointwise op's recorded `out=` tensors (`functional_tensors`): those at
    or past the count of arguments its functional overloads may take a tensor at."""
    first = functional_tensors().get(call.launcher)
    if first is None:
        return []
    return [i for i in range(first, len(call.args)) if call.args[i].is_tensor]


def pointwise_cost(call: Call, out_itemsize: int | None = None) -> Cost:
    if any(a.kind == TENSOR_LIST and a.dims for a in call.args):
        return _foreach(call, out_itemsize)
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    spec = written_arguments_of(call)
    if spec is not None:
        return _with_written_arguments(call, spec)
    if triton_launcher(call.launcher):
        return _triton_pointwise(call, tensors)
    outs = out_arguments(call)
    if outs and len(outs) < len(tensors):
        return _with_out(call, outs)
    out_numel = _output_numel([a.dims for a in tensors])
    result, note = _result_dtype(call, tensors)
    size = out_itemsize if out_itemsize is not None else dtypes()[result].bytes
    per = flops_per_element().get(call.op_mapping, 1.0)
    read = sum(a.nbytes for a in tensors)
    written = out_numel * size
    formula = f"{per:g} FLOP × {out_numel} elements; bytes = inputs {read} + output {out_numel}·{size}{note}"
    return Cost(per * out_numel, read + written, dtypes()[result].precision, VECTOR, formula)


def _with_out(call: Call, outs: list[int]) -> Cost:
    """An ATen pointwise op's `out=` overload (`out_arguments`): its inputs read once, its recorded
    output written once at its own dtype and size (ATen casts the result into it), never read.
    FLOPs per element of the inputs' broadcast, at the precision the op computes in."""
    inputs = [a for i, a in enumerate(call.args) if a.is_tensor and i not in outs]
    out_numel = _output_numel([a.dims for a in inputs])
    result, note = _result_dtype(call, inputs)
    per = flops_per_element().get(call.op_mapping, 1.0)
    read = sum(a.nbytes for a in inputs)
    written = sum(call.args[i].nbytes for i in outs)
    where = ", ".join(str(i) for i in outs)
    formula = (
        f"{per:g} FLOP × {out_numel} elements; bytes = inputs {read} + output {written} written "
        f"(the out= tensor, argument {where}: written, not read){note}"
    )
    return Cost(per * out_numel, read + written, dtypes()[result].precision, VECTOR, formula)


def _triton_pointwise(call: Call, tensors: list[Arg]) -> Cost:
    """A Triton pointwise, norm or softmax kernel (`triton_launcher`: Inductor's, or a hand-written
    one under Triton's launch): its recorded arguments are its inputs and its outputs, so each is
    counted once and no output is added on top (one was: +50 % bytes for Inductor's `relu(in_ptr0,
    out_ptr0)`, +50 % for SGLang's `fused_rmsnorm_kernel(output, activ, weight)`). A single
    recorded tensor is the op's input and its output at once (in_out_ptr0: these ops read what
    they write; output-only kernels — fills, arange — are labelled so and costed in memory.py):
    read and written. FLOPs per element of the largest argument (`_output_numel`), at the first
    one's precision."""
    out_numel = _output_numel([a.dims for a in tensors])
    per = flops_per_element().get(call.op_mapping, 1.0)
    if len(tensors) == 1:
        moved = 2 * tensors[0].nbytes
        text = f"its one recorded argument read and written {tensors[0].nbytes}·2 (updated in place: in_out_ptr0)"
    else:
        moved, text = inductor_bytes(tensors, call.launcher)
    formula = f"{per:g} FLOP × {out_numel} elements; bytes = {text}"
    return Cost(per * out_numel, moved, tensors[0].precision, VECTOR, formula)


# op_mappings of ATen's arithmetic, whose result takes the inputs' promoted dtype
# (torch.result_type): bf16 + fp32 → fp32; the norms, softmax and masked_fill keep self's
_PROMOTING = frozenset(
    ("add", "sub", "mul", "div", "pow", "minimum", "maximum", "clamp", "where", "fused_elementwise", "max")
)
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
        name = scalar_type(concrete_int(call, _DTYPE_ARGUMENT[launcher]))  # a ScalarType code
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
    return pointwise_cost(call)


@register(
    launchers=(
        "aten::native_layer_norm",
        "aten::layer_norm",
        "aten::native_group_norm",
        "aten::group_norm",
        "aten::_fused_rms_norm",
    )
)
def _norm_with_statistics(call: Call) -> Cost:
    """A layer, group or RMS norm: its input, weight and bias read and its output written (as
    other pointwise ops), plus the per-row statistics ATen's kernels write at the accumulation
    dtype — fp32 for fp32/bf16/fp16 inputs, fp64 for fp64: mean and rstd (native_layer_norm's and
    native_group_norm's second and third outputs), rstd alone (_fused_rms_norm(input,
    normalized_shape, weight, eps)'s second output, e.g. [8,16,1,1] for [8,16,32,32] over [32,32]:
    it had been left out, campaign BH 8). Rows: layer and RMS norm, the input's elements over
    normalized_shape's (its argument 1; else the weight's shape; else the last axis, said); group
    norm, N·groups (native_group_norm(input, weight, bias, N, C, HxW, group, eps),
    group_norm(input, num_groups, …))."""
    base = pointwise_cost(call)
    x = tensor_at(call, 0, "input")
    stat = 8 if dtypes()[x.dtype].precision == "fp64" else 4
    note = ""
    if "group_norm" in call.launcher:
        groups = concrete_int(call, 6 if call.launcher == "aten::native_group_norm" else 1)
        if groups is None or not x.dims:
            return replace(base, formula=base.formula + " (groups not recorded: mean/rstd not counted)")
        rows = x.dims[0] * groups
    else:
        shape = call.args[1].ints() if len(call.args) > 1 else None
        weight = optional_tensor_at(call, 2)
        if shape is None and weight is not None and weight.dims:
            shape, note = list(weight.dims), " (normalized_shape from the weight)"
        if shape is None:
            shape, note = list(x.dims[-1:]), " (normalized_shape not recorded: the last axis assumed)"
        rows = x.numel // max(math.prod(shape), 1)
    count, names = (1, "rstd") if "rms_norm" in call.launcher else (2, "mean and rstd")
    written = count * rows * stat
    formula = f"{base.formula} + {names} {count}·{rows}·{stat}{note}"
    return replace(base, bytes=base.bytes + written, formula=formula)


BATCH_NORM_FORWARD = ("aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm")
# The forward kernels of cuDNN and MIOpen name their mode: cuDNN's `cudnn::bn_fw_tr_…` (forward
# training) and `cudnn::bn_fw_inf_…`; MIOpen's `MIOpenBatchNormFwdTrain…` (Spatial, PerActivation
# and the multi-pass Spatial…MeanVariance / …Norm kernels: ROCm/MIOpen src/kernels/
# MIOpenBatchNormFwdTrain*.cl) and `MIOpenBatchNormFwdInfer…` (MIOpenBatchNormFwdInfer*.cl).
# PyTorch before 2.0 records no Concrete Inputs, so its `training` flag is read there (campaign BU 4:
# 34 ms of a V100 ResNet-50 step had been costed "training not recorded"). ATen's own kernels
# (native_batch_norm) use the same transform kernel in both modes: not read.
_MODE_IN_KERNEL = (
    ("bn_fw_tr_", True),
    ("bn_fw_inf_", False),
    ("MIOpenBatchNormFwdTrain", True),
    ("MIOpenBatchNormFwdInfer", False),
)
_FROM_KERNEL = "its kernel's name "  # `Arg.name` of a flag read from the kernel's name, not recorded


def with_kernel_mode(launcher: str, args: tuple[Arg, ...], kernel: str) -> tuple[Arg, ...]:
    """A batch norm forward's arguments with its `training` flag (argument 5) read from its main
    kernel's name (`_MODE_IN_KERNEL`) where the call did not record it; any other call's, and a
    name that says nothing, as they are. The flag's `name` says where it came from."""
    if launcher not in BATCH_NORM_FORWARD or len(args) <= 5 or args[5].flag() is not None:
        return args
    said = next(((marker, training) for marker, training in _MODE_IN_KERNEL if marker in kernel), None)
    if said is None:
        return args
    flag = Arg(SCALAR, None, args[5].dtype, None, "", said[1], _FROM_KERNEL + said[0])
    return (*args[:5], flag, *args[6:])


@register(launchers=BATCH_NORM_FORWARD)
def _batch_norm(call: Call) -> Cost:
    """A batch norm (input, weight, bias, running_mean, running_var, training, momentum, eps): its
    tensors read and its output written (as other pointwise ops); training, also its saved mean
    and inverse std (one per channel, C = the input's axis 1, at the accumulation dtype: fp32,
    fp64 for fp64) and the running statistics it updates in place (written back where recorded).
    Inference writes neither. They had been left out (campaign BH 8); cuDNN's reserve space, of
    a size not recorded, is not counted. The mode is the recorded `training` flag, else the one
    its kernel's name says (`with_kernel_mode`), which the formula names."""
    base = pointwise_cost(call)
    x = tensor_at(call, 0, "input")
    flag = call.args[5] if len(call.args) > 5 else None
    training = flag.flag() if flag is not None else None
    if training is None:
        return replace(base, formula=base.formula + " (training not recorded: saved statistics not counted)")
    source = f" ({'training' if training else 'inference'}: {flag.name})" if flag.name.startswith(_FROM_KERNEL) else ""
    if not training or len(x.dims) < 2:
        return replace(base, formula=base.formula + source)
    stat = 8 if dtypes()[x.dtype].precision == "fp64" else 4
    channels = x.dims[1]
    running = [a for a in (optional_tensor_at(call, 3), optional_tensor_at(call, 4)) if a is not None]
    updated = sum(a.nbytes for a in running)
    written = 2 * channels * stat + updated
    formula = f"{base.formula} + saved mean and invstd 2·{channels}·{stat}" + (
        f" + running statistics {updated} written back" if running else ""
    )
    return replace(base, bytes=base.bytes + written, formula=formula + source)


# A norm's backward, by launcher: where its output_mask (grad_input, grad_weight[, grad_bias]) is
# (None: every gradient is written), its weight and its bias (None: no such argument; grad_bias is
# the weight's shape and dtype), and whether it has a bias gradient. Its weight and bias gradients
# had been left out, one output at the input's shape written (campaign BH 8:
# native_layer_norm_backward 1,704,000 B for 1,769,536). The bias is never read: the backward of
# x̂·w + b needs no b — ATen's layer_norm_backward_cuda (aten/src/ATen/native/cuda/
# layer_norm_kernel.cu) uses it only to allocate grad_bias (empty_like(beta)) and passes it to no
# kernel; it had been counted as read (campaign BU 5: +65,536 B of 1,835,072).
_NORM_BACKWARD: dict[str, tuple[int | None, int, int | None, bool]] = {
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    "aten::native_layer_norm_backward": (7, 5, 6, True),
    # (grad_out, input, normalized_shape, rstd, weight, output_mask[2]): no bias
    "aten::_fused_rms_norm_backward": (5, 4, None, False),
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)
    "aten::native_batch_norm_backward": (9, 2, None, True),
    # (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
    "aten::native_group_norm_backward": (9, 4, None, True),
    # (input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon[, reserveSpace])
    "aten::cudnn_batch_norm_backward": (None, 2, None, True),
    "aten::miopen_batch_norm_backward": (None, 2, None, True),
}


@register(launchers=tuple(_NORM_BACKWARD))
def _norm_backward(call: Call) -> Cost:
    """A norm's backward (`_NORM_BACKWARD`): every recorded tensor but the bias read once, and the
    gradients its output_mask asks for written — grad_input at the first tensor's shape and dtype (grad_out,
    or cuDNN's input), grad_weight at the weight's, grad_bias at the bias's, else the weight's
    (one per channel or normalized element). A gradient asked for whose shape is not recorded is
    not counted, and the formula says so; output_mask not recorded: every gradient assumed."""
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    mask_at, weight_at, bias_at, has_bias = _NORM_BACKWARD[call.launcher]
    x = tensors[0]
    weight = optional_tensor_at(call, weight_at)
    bias = (optional_tensor_at(call, bias_at) if bias_at is not None else None) or weight
    grads = [("grad_input", x), ("grad_weight", weight)]
    if has_bias:
        grads.append(("grad_bias", bias))
    mask = call.args[mask_at].value if mask_at is not None and mask_at < len(call.args) else None
    note = ""
    if mask_at is not None and not (isinstance(mask, list) and len(mask) == len(grads)):
        mask, note = [True] * len(grads), " (output_mask not recorded: every gradient assumed)"
    asked = [(name, arg) for (name, arg), wanted in zip(grads, mask or [True] * len(grads), strict=True) if wanted]
    counted = [(name, arg) for name, arg in asked if arg is not None]
    missing = [name for name, arg in asked if arg is None]
    if missing:
        note += f" ({', '.join(missing)}: its shape not recorded, not counted)"
    read = sum(
        a.nbytes for i, a in enumerate(call.args) if a.is_tensor and i != bias_at
    )  # the bias sizes grad_bias only
    written = sum(a.nbytes for _, a in counted)
    per = flops_per_element().get(call.op_mapping, 1.0)
    terms = " + ".join(f"{name} {a.nbytes}" for name, a in counted) or "nothing"
    formula = f"{per:g} FLOP × {x.numel} elements; bytes = inputs {read} + {terms} written{note}"
    return Cost(per * x.numel, read + written, x.precision, VECTOR, formula)


@register(ops=("compare", "bitwise_not", "bitwise_and", "bitwise_or"))
def _logical(call: Call) -> Cost:
    return pointwise_cost(call, out_itemsize=1)


@register(ops=("silu_and_mul", "gelu_and_mul"))
def _gated(call: Call) -> Cost:
    """A gated activation, act(gate)·up: one output element per (gate, up) pair, `flops_per_element`
    FLOPs each. Gate and up given apart (two tensors of the largest size: an Inductor `mul_silu`
    kernel) give as many outputs as each has elements; one [.., 2d] input, half as many. A library
    op records its inputs: they are read, the output written at the input's dtype. A Triton
    kernel (`triton_launcher`: Inductor's, or a hand-written one) records its outputs among its
    arguments: two of the largest size and nothing else are (in_out_ptr0, in_ptr0) — a binary
    op has no third pointer to write — so the first is read and written; otherwise each recorded
    tensor once (`inductor_bytes`, an estimate: which are written is not recorded). Two halves
    and one output had been counted whatever was recorded: (gate, up, silu, out) of a training
    forward, 12,582,912 B for its 16,777,216 (campaign BR 4)."""
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    x = max(tensors, key=lambda a: a.numel)  # the [.., 2d] input
    halves = [a for a in tensors if a.numel == x.numel]
    out_numel = x.numel if len(halves) >= 2 else x.numel // 2
    per = flops_per_element().get(call.op_mapping, 1.0)
    if triton_launcher(call.launcher):
        if len(tensors) == 2 and len(halves) == 2:
            read, back = sum(a.nbytes for a in tensors), tensors[0].nbytes
            moved, text = read + back, f"gate and up read {read}, the first written back {back} (in_out_ptr0)"
        else:
            moved, text = inductor_bytes(tensors, call.launcher)
        formula = f"{per:g} FLOP × {out_numel} outputs; bytes = {text}"
        return Cost(per * out_numel, moved, x.precision, VECTOR, formula)
    read = sum(a.nbytes for a in halves[:2]) if len(halves) >= 2 else x.nbytes
    formula = f"{per:g} FLOP × {out_numel} outputs; bytes = inputs {read} + output {out_numel}·{x.itemsize}"
    return Cost(per * out_numel, read + out_numel * x.itemsize, x.precision, VECTOR, formula)


@register(ops=("quantize",))
def _quantize(call: Call) -> Cost:
    """Two FLOPs (scale, convert) per element of the largest tensor. A launcher whose recorded
    arguments include its outputs (costs.toml `written_arguments`: vLLM's `(out, input, scale)`,
    sgl-kernel's `(input, output_q, output_s, …)`): its inputs read once, its quantized values
    and the scales it computes written once at their recorded dtypes, the compute at the input's
    precision. Other launchers: every recorded tensor read, a 1-byte value written per element."""
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    spec = written_arguments_of(call)
    if spec is not None:
        read_from, written_to, where = split_written(call, spec)
        x = max(read_from or written_to, key=lambda a: a.numel)
        read, written = sum(a.nbytes for a in read_from), sum(a.nbytes for a in written_to)
        formula = (
            f"2 FLOP × {x.numel} elements; bytes = inputs {read} read + outputs {written} written "
            f"(arguments {where}: quantized values and computed scales)"
        )
        return Cost(2.0 * x.numel, read + written, x.precision, VECTOR, formula)
    x = max(tensors, key=lambda a: a.numel)
    out = x.numel  # one byte per fp8/int8 element; scales are small and counted as inputs
    read = sum(a.nbytes for a in tensors)
    formula = f"{x.numel} elements; bytes = inputs {read} + 1-byte output {out}"
    return Cost(2.0 * x.numel, read + out, x.precision, VECTOR, formula)
