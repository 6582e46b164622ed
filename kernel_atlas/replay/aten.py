"""Replaying ATen ops from their recorded inputs, dispatched through the op's schema.

The overload is the one whose schema accepts the recorded argument kinds in order (tensor,
tensor list, scalar, list, None); kwarg-only arguments are passed by name. Ops that do not
exist on the replay device get a stated stand-in (flash attention → SDPA math on the CPU,
`cudnn_convolution` → `aten::convolution`).

The check runs the timed callable itself on the inputs the timing will use and compares every
tensor it returns with the same op on float64 copies of those inputs, with the tolerance of
each output's dtype and exact comparison for integer outputs (`replay.checks`; a GPU replay's
integer outputs against the op on the CPU, an independent implementation).
Floating inputs are drawn from each op's valid domain (`replay.values`). A kernel whose label
says it computes on TF32 tensor cores (rules.toml `precision = "tf32"`) is replayed with TF32
allowed, other fp32 kernels without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from kernel_atlas.classify.classifier import rule_precision
from kernel_atlas.ingest.recorded import NONE, TENSOR, TENSOR_LIST, Arg, dtypes, shape_refusal
from kernel_atlas.replay.checks import combine, compare
from kernel_atlas.replay.inputs import NotReplayable, nbytes, torch_dtype
from kernel_atlas.replay.values import comparable, domain_of, generator, index_bounds, make_tensor

INDEX_NAMES = ("index", "indices", "idx")
# A GPU replay's integer outputs are compared with the op on the CPU (the same GPU kernel would
# agree with itself), when its inputs are at most this large; float references run in float64 on
# the replay device.
CPU_REFERENCE_BYTES = 1 << 30

# What a Case's timed region is, relative to the traced kernel (the `timed` column):
KERNEL = "kernel"  # the traced kernel (or ATen op) itself, one launch as traced
PIPELINE = "pipeline"  # the traced kernel and more work
STAND_IN = "stand-in"  # another implementation of the same computation


@dataclass
class Case:
    """One replay: `run` launches exactly what is timed and returns its output; `check` calls
    `run` itself and says whether that output is right; `reset` (untimed, before every
    repetition) restores state that `run` consumes; `config` is the launch configuration used."""

    run: Callable[[], Any]
    implementation: str
    check: Callable[[], tuple[str, str]]
    timed: str = KERNEL
    config: str = ""
    reset: Callable[[], Any] | None = None


def _is_tensor_type(text: str) -> bool:
    return "Tensor" in text and "[]" not in text and "List" not in text


def _is_tensor_list_type(text: str) -> bool:
    return "Tensor" in text and ("[]" in text or "List" in text)


def _fits(schema: Any, recorded: tuple[Arg, ...]) -> bool:
    arguments = schema.arguments
    if len(recorded) > len(arguments):
        return False
    for arg, rec in zip(arguments, recorded, strict=False):
        kind = str(arg.type)
        if rec.kind == "tensor" and not _is_tensor_type(kind):
            return False
        if rec.kind == "tensor_list" and not _is_tensor_list_type(kind):
            return False
        if rec.kind in ("scalar", "list") and (_is_tensor_type(kind) or _is_tensor_list_type(kind)):
            return False
        # a tensor list recorded without its shapes (`Tensor?[] indices` written as "") or a string
        # without its value (`scatter_reduce`'s `reduce`) fits its schema; `_materialise` refuses
        # it as not recorded
        unrecorded = _is_tensor_list_type(kind) or (_is_string(arg) and rec.dtype == "")
        if rec.kind == "none" and not (_optional(arg) or arg.has_default_value() or unrecorded):
            return False
    # what was not recorded must have a default, or be the out= argument of an out variant
    return all(a.has_default_value() or (a.kwarg_only and a.is_out) for a in arguments[len(recorded) :])


def find_overload(name: str, recorded: tuple[Arg, ...]) -> Any:
    import torch

    if not name.startswith("aten::"):
        raise NotReplayable(f"{name} is not an ATen op")
    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    if packet is None:
        raise NotReplayable(f"{name} is not in this torch build")
    overloads = [getattr(packet, name) for name in sorted(packet.overloads(), key=lambda o: (o != "default", o))]
    # functional and in-place overloads first; out= variants (`sum.IntList_out`) only where none fits
    for overload in sorted(overloads, key=lambda o: any(a.is_out for a in o._schema.arguments)):  # stable
        if _fits(overload._schema, recorded):
            return overload
    raise NotReplayable(f"no overload of {name} takes the recorded argument kinds {[r.kind for r in recorded]}")


def _bounds(name: str, schema: Any, recorded: tuple[Arg, ...]) -> dict[int, int]:
    """Upper bounds (exclusive) for integer tensors that index something, by argument position:
    where `catalogs/replay.toml` [indices] names the op's argument, the bound the call's other
    recorded arguments give (`nll_loss_forward`'s target: the classes, `self.size(-1)`;
    `one_hot`: `num_classes`; `embedding_dense_backward`'s indices: `num_weights`); else an
    argument named index/indices/idx, by the size of `self`/`weight`/`input` along `dim` (0
    without one)."""
    names = [a.name for a in schema.arguments[: len(recorded)]]
    bounds: dict[int, int] = {}
    source = next((i for i, n in enumerate(names) if n in ("self", "weight", "input")), None)
    if source is not None and recorded[source].kind == TENSOR:
        shape = recorded[source].dims
        dim = 0
        if "dim" in names:
            value = recorded[names.index("dim")].value
            dim = value if isinstance(value, int) and not isinstance(value, bool) else 0
        for i, argument in enumerate(names):
            if _is_index(argument) and shape:
                bounds[i] = shape[dim % len(shape)] if argument != "indices" or recorded[i].kind == TENSOR else shape[0]
    for argument, spec in index_bounds(name).items():
        if argument in names:
            bound = _resolve_bound(spec, names, recorded)
            if bound is not None:
                bounds[names.index(argument)] = bound
    return bounds


def _resolve_bound(spec: tuple[str, str | None], names: list[str], recorded: tuple[Arg, ...]) -> int | None:
    """The number an [indices] entry names in this call: a scalar argument's value, or a tensor
    argument's size along an axis (an integer, or a scalar argument's value; an axis at or past
    the tensor's rank is its last: a 1-D `[C]` input's classes); None where not recorded (an
    unrecorded value, `num_classes=-1`: inferred by the op)."""

    def recorded_int(argument: str) -> int | None:
        if argument not in names:
            return None
        value = recorded[names.index(argument)].value
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    argument, axis = spec
    if axis is None:
        value = recorded_int(argument)
        return value if value is not None and value > 0 else None
    if argument not in names or recorded[names.index(argument)].kind != TENSOR:
        return None
    shape = recorded[names.index(argument)].dims
    at = int(axis) if axis.lstrip("-").isdigit() else recorded_int(axis)
    if at is None or not shape:
        return None
    at = min(at, len(shape) - 1) if at >= 0 else at % len(shape)
    return shape[at]


def _optional(arg: Any) -> bool:
    """Whether the argument itself may be None (`Tensor?`, `str?`); a list of optional tensors
    (`Tensor?[]`, `List[Optional[Tensor]]`) may not."""
    kind = str(arg.type)
    return kind.endswith("?") or kind.startswith("Optional[")


def _is_string(arg: Any) -> bool:
    return str(arg.type) in ("str", "str?", "Optional[str]")


def _is_index(argument: str) -> bool:
    """Whether an argument of this name holds indices (`index`, `indices`, `sorted_idx`)."""
    return any(key in argument for key in INDEX_NAMES)


def _indexes(schema: Any) -> bool:
    """Whether an op takes index tensors (`index_select`, `gather`, `scatter_add_`)."""
    return any(_is_index(a.name) for a in schema.arguments)


def _assumed(arg: Any, shape: tuple[int, ...], indexes: bool = False) -> Any:
    """A value for an argument the recording has no value for (catalog shapes and PyTorch 1.x
    traces carry no `Concrete Inputs`): the last dimension for shape lists; for `dim` (an int or a
    list), 0 where the op takes index tensors (an embedding's `index_select`; `_bounds` sizes its
    indices by that dimension), else the last; PyTorch's defaults for a normalisation's `eps`
    (1e-5) and `momentum` (0.1: a 1 was a guess no model uses); `training` True (a dropout in eval
    launches no kernel at all); 0 for other ints, False for other bools, 1 for other numbers."""
    kind = str(arg.type)
    if arg.name == "kernel_size":  # a pooling window: a guess would time another problem (it was [112])
        raise NotReplayable("its kernel_size is not recorded (no Concrete Inputs)")
    if "[]" in kind or "List" in kind:
        if arg.name == "dim":  # `int[1] dim`, `int[1]? dim`: [] or None would reduce every dimension
            return [0 if indexes else -1]
        return list(shape[-1:]) if "shape" in arg.name or "size" in arg.name else []
    if kind in ("int", "SymInt"):
        return -1 if arg.name == "dim" and not indexes else 0
    if kind == "bool":
        return arg.name in ("training", "train")
    if arg.name in ("eps", "epsilon"):
        return 1e-5
    if arg.name in ("momentum", "exponential_average_factor"):
        return 0.1
    return 1


def _concrete(recorded: tuple[Arg, ...]) -> bool:
    """Whether the call was recorded with its `Concrete Inputs` (PyTorch ≥ 1.10 writes each
    scalar's value, and `""` for None): then an argument written as `""` was None. Without them (a
    catalog entry, PyTorch 1.x) an argument without a value is one not recorded."""
    return any(r.text for r in recorded if r.kind != TENSOR)


def _reduced(source: tuple[int, ...], out: tuple[int, ...], keepdim: bool | None) -> tuple[list, bool] | None:
    """The dimensions a reduction of `source` to `out` may have reduced (each candidate a tuple,
    in order; several where sizes repeat: [4, 4] → [4]) and its keepdim, or None where the shapes
    are no reduction (alike: a reduction over size-1 dimensions, or none at all)."""
    n, m = len(source), len(out)
    if m == n and keepdim is not False:  # keepdim: the reduced dimensions are the 1s that differ
        dims = tuple(k for k in range(n) if out[k] != source[k])
        return ([dims], True) if dims and all(out[k] == 1 for k in dims) else None
    if m < n <= 16 and keepdim is not True:  # at most C(16, 8) = 12,870 candidates: a doctored rank is not
        kept = list(out)
        candidates = [
            dropped
            for dropped in combinations(range(n), n - m)
            if [size for k, size in enumerate(source) if k not in dropped] == kept
        ]
        return (candidates, False) if candidates else None
    return None


def _fitted(schema: Any, recorded: tuple[Arg, ...]) -> dict[str, tuple[Any, str]]:
    """Values the call's recorded shapes fix for arguments recorded without theirs, by name, each
    with why: a reduction's `dim` and `keepdim` from its recorded out= tensor (the seed's sum
    [1024,8,4096] with out [1024,4096]: dim [1], keepdim False — `dim=-1` would time another
    reduction, and an unfilled `int[1]? dim` is None, every element to one); a loss's `reduction`
    from a 0-d grad_output (or out): only a reduced loss has one, so mean (1), not "none" (0)."""
    arguments = schema.arguments[: len(recorded)]
    at = {a.name: i for i, a in enumerate(arguments)}

    def shape(i: int | None) -> tuple[int, ...] | None:
        return tuple(recorded[i].dims) if i is not None and recorded[i].kind == TENSOR else None

    source = shape(next((at[n] for n in ("self", "input") if n in at), None))
    out_at = next((i for i, a in enumerate(arguments) if a.is_out), None)
    out = shape(out_at)
    fitted: dict[str, tuple[Any, str]] = {}
    if "dim" in at and source is not None and out is not None:
        keepdim = recorded[at["keepdim"]].flag() if "keepdim" in at else None
        found = _reduced(source, out, keepdim)
        if found is not None:
            candidates, keep = found
            dims = candidates[-1]  # where several fit, the last: the side `dim=-1` takes
            listed = "[]" in str(arguments[at["dim"]].type) or "List" in str(arguments[at["dim"]].type)
            why = f"from its {arguments[out_at].name}'s shape {list(out)}"
            if len(candidates) > 1:
                why = f"the last of {len(candidates)} that its {arguments[out_at].name}'s shape {list(out)} allows"
            if listed or len(dims) == 1:
                fitted["dim"] = (list(dims) if listed else dims[0], why)
            fitted["keepdim"] = (keep, f"from its {arguments[out_at].name}'s shape {list(out)}")
    if "reduction" in at and source:
        grad_at = next((at[n] for n in ("grad_output", "grad_out", "grad") if n in at), None)
        given_at = grad_at if shape(grad_at) is not None else out_at
        given = shape(given_at)
        if given_at is not None and given is not None and not given:
            fitted["reduction"] = (1, f"mean: its {arguments[given_at].name} is 0-d")
    return fitted


def _materialise(
    name: str, schema: Any, recorded: tuple[Arg, ...], device: str, gen: Any, assumed: list[str] | None = None
) -> tuple[list, dict]:
    assumed = assumed if assumed is not None else []
    bounds = _bounds(name, schema, recorded)
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    source_shape = next((r.dims for r in recorded if r.kind == "tensor"), ())
    indexes = _indexes(schema)
    concrete = _concrete(recorded)
    fitted = _fitted(schema, recorded)
    for i, (arg, rec) in enumerate(zip(schema.arguments, recorded, strict=False)):
        listed = _is_tensor_list_type(str(arg.type))
        if listed and ((rec.kind == NONE and not _optional(arg)) or (rec.kind == TENSOR_LIST and not rec.dims)):
            # `Tensor?[] indices` of aten::index written as "", an old trace's `cat` list as []
            raise NotReplayable(
                f"{name}: its {arg.name} (a list of tensors) is not recorded: the profiler wrote no shapes for it"
            )
        if rec.kind == TENSOR:
            domain = domain_of(name, arg.name)
            value: Any = make_tensor(rec.dims, rec.dtype, device, rec.strides, bounds.get(i), gen, domain)
        elif rec.kind == TENSOR_LIST:
            # Kineto records a list's shapes and strides, not its dtype: index lists are int64
            indices = _is_index(arg.name)
            dtype = rec.dtype if rec.dtype in dtypes() else "long int" if indices else "float"
            if dtype != rec.dtype and rec.dims and not indices:
                assumed.append(f"{arg.name} elements float32")
            strides = rec.strides or [None] * len(rec.dims or [])
            value = [
                make_tensor(d, dtype, device, st, source_shape[k] if k < len(source_shape) else None, gen)
                for k, (d, st) in enumerate(zip(rec.dims or [], strides, strict=False))
            ]
        else:
            value = None if rec.kind == NONE else rec.value
            if value is None and _is_string(arg) and not arg.has_default_value() and rec.dtype == "":
                # passed, but a string's value is never recorded (its type is written as ""): None
                # (true division) or a mode (`div`'s "trunc", "floor") is another kernel
                raise NotReplayable(
                    f"{name}: its {arg.name} is not recorded (a string: the profiler writes no value), and "
                    f"each value it may take{' (None too)' if _optional(arg) else ''} is another computation"
                )
            # no value, and not one recorded as None (its type "None", or "" among Concrete Inputs)
            unrecorded = value is None and rec.dtype != "None" and not (concrete and rec.kind == NONE)
            joined = _joined_dim(recorded) if value is None and arg.name == "dim" else None
            if joined is not None:  # a concatenation's dim not recorded: the one its inputs differ in
                value = joined
                assumed.append(f"dim={joined} (the one its inputs differ in)")
            elif unrecorded and arg.name in fitted:  # what the call's recorded shapes fix
                value, why = fitted[arg.name]
                assumed.append(f"{arg.name}={value!r} ({why})")
            elif value is None and arg.has_default_value() and arg.default_value is None and rec.dtype == "Scalar":
                value = 1  # a number was passed (`clamp`'s min), its value not recorded (PyTorch 1.9)
                assumed.append(f"{arg.name}=1")
            elif value is None and arg.has_default_value():
                value = arg.default_value  # e.g. gelu's `approximate`, recorded without a value
                if rec.dtype != "None":  # passed, its value not recorded (a string's type is ""): a guess
                    assumed.append(f"{arg.name}={value!r}")
            elif value is None and (not _optional(arg) or (unrecorded and arg.name == "dim")):
                # `int[1]? dim` (sum, mean) left None reduces every element to one: another kernel
                value = _assumed(arg, source_shape, indexes)
                assumed.append(f"{arg.name}={value!r}")
        if arg.kwarg_only:
            keywords[arg.name] = value
        else:
            positional.append(value)
    return positional, keywords


def _joined_dim(recorded: tuple[Arg, ...]) -> int | None:
    """The dimension a concatenation joins along, read off its recorded input shapes: the only one
    in which they differ (None where they agree everywhere or differ in several, or ranks differ)."""
    lists = [r.dims for r in recorded if r.kind == "tensor_list"]
    shapes = [tuple(d) for d in (lists[0] if lists else []) if d]
    if len(shapes) < 2 or len({len(s) for s in shapes}) != 1:
        return None
    differ = [k for k in range(len(shapes[0])) if len({s[k] for s in shapes}) > 1]
    return differ[0] if len(differ) == 1 else None


def _tensors(value: Any) -> list[Any]:
    """Every tensor in an op's result, in order (tuples and lists flattened)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _compare_outputs(output: Any, reference: Any, precision: str | None = None, values: bool = True) -> tuple[str, str]:
    """Each tensor of the replayed result against the float64 reference's, by its own dtype
    (`values` False: shapes and dtypes only, for random or uninitialised outputs)."""
    outs, refs = _tensors(output), _tensors(reference)
    if not outs:
        return "skipped", "op returns no tensor"
    if len(outs) != len(refs):
        return "fail", f"{len(outs)} output tensors, the reference has {len(refs)}"
    if not values:
        for o, r in zip(outs, refs, strict=True):
            if tuple(o.shape) != tuple(r.shape):
                return "fail", f"shape {tuple(o.shape)} != {tuple(r.shape)} of the reference"
        return "skipped", "random or uninitialised output: shapes match, values cannot be compared"
    verdicts = [compare(o, r, "float64 reference", precision=precision) for o, r in zip(outs, refs, strict=True)]
    verdict = combine(*verdicts)
    return verdict if len(outs) == 1 else (verdict[0], f"{len(outs)} outputs; {verdict[1]}")


def differs_from_recording(names: list[str], recorded: tuple[Arg, ...], values: list[Any]) -> str | None:
    """What the call about to be replayed has that the recorded one has not, or None: each tensor's
    shape, dtype and (where recorded) strides, each tensor list's shapes, each recorded number,
    flag and list (eps, alpha, a window, padding). The float64 reference runs the same op on the
    same inputs, so a replay of another problem — halved shapes, dropped strides, eps forced to
    1 — agrees with it; the recording is what the replay must match."""
    import torch

    for name, rec, value in zip(names, recorded, values, strict=False):
        if rec.kind == TENSOR:
            if not isinstance(value, torch.Tensor):
                return f"{name}: a tensor was recorded, {type(value).__name__} replayed"
            if tuple(value.shape) != tuple(rec.dims):
                return f"{name}: shape {list(value.shape)} replayed, {list(rec.dims)} recorded"
            if rec.dtype in dtypes() and value.dtype != torch_dtype(rec.dtype):
                return f"{name}: dtype {value.dtype} replayed, {rec.dtype} recorded"
            strides = rec.strides
            if strides is not None and len(strides) == len(rec.dims):
                # a stride along a dimension of size 1 moves nowhere: either is the recorded layout
                moved = [k for k, n in enumerate(rec.dims) if n > 1]
                if [value.stride(k) for k in moved] != [strides[k] for k in moved]:
                    return f"{name}: strides {list(value.stride())} replayed, {list(strides)} recorded"
        elif rec.kind == TENSOR_LIST and rec.dims:
            shapes = [tuple(t.shape) for t in value] if isinstance(value, (list, tuple)) else None
            if shapes != [tuple(d) for d in rec.dims]:
                return f"{name}: shapes {shapes} replayed, {[list(d) for d in rec.dims]} recorded"
        elif isinstance(rec.value, (bool, int, float, list)) and (
            isinstance(value, torch.Tensor) or value != rec.value
        ):
            return f"{name}={value!r} replayed, {rec.value!r} recorded"
    return None


def _in_schema_order(schema: Any, recorded: tuple[Arg, ...], positional: list, keywords: dict) -> list[Any]:
    """The values `_materialise` passes, one per recorded argument, in schema order."""
    values, at = [], 0
    for arg in schema.arguments[: len(recorded)]:
        if arg.kwarg_only:
            values.append(keywords.get(arg.name))
        else:
            values.append(positional[at] if at < len(positional) else None)
            at += 1
    return values


def _widen(value: Any, device: str) -> Any:
    """A float64 copy (integers and bools: an exact copy) on `device`, lists element-wise."""
    import torch

    if isinstance(value, torch.Tensor):
        copy = value.detach().to(device)
        if value.is_complex():
            return copy.to(torch.complex128)
        return copy.double() if value.is_floating_point() else copy.clone()
    if isinstance(value, list):
        return [_widen(v, device) for v in value]
    return value


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """Allow TF32 in cuBLAS and cuDNN exactly when the traced kernel used it."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


# the tensors each CPU stand-in computes on: the first inputs of the op it stands in for
STAND_IN_INPUTS = {
    "aten::_flash_attention_forward": 3,
    "aten::_scaled_dot_product_flash_attention": 3,
    "aten::_scaled_dot_product_efficient_attention": 3,
    "aten::_efficient_attention_forward": 3,
    "aten::_scaled_dot_product_cudnn_attention": 3,
    "aten::cudnn_convolution": 2,
    "aten::miopen_convolution": 2,
    "aten::cudnn_batch_norm": 1,
    "aten::miopen_batch_norm": 1,
    "aten::miopen_batch_norm_backward": 3,
    "aten::_fused_rms_norm_backward": 2,
}

# The attention ops SDPA (math) stands in for: their layout ([B,S,H,D] for `_flash_attention_forward`
# and `_efficient_attention_forward`, else [B,H,S,D]) and where their causal mask sits when queries
# and keys differ in number — FlashAttention's at the bottom right (query i sees keys
# j ≤ i + S_k − S_q: torch/nn/attention/bias.py calls `_scaled_dot_product_flash_attention` with
# is_causal=True for its lower-right CausalBias, "for this particular op it means lower right"; SDPA
# sends no causal non-square call to flash for this reason), the top left for the ops whose
# `is_causal` is SDPA's (`F.scaled_dot_product_attention` documents "upper left causal" masking):
# the memory-efficient and cuDNN SDPA ops; `_efficient_attention_forward` says it in its
# `custom_mask_type` (0 none, 1 top left, 2 bottom right: torch's CausalVariant).
ATTENTION_STAND_INS = {
    "aten::_flash_attention_forward": ("bshd", "bottom-right"),
    "aten::_scaled_dot_product_flash_attention": ("bhsd", "bottom-right"),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", "top-left"),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", "top-left"),
    "aten::_efficient_attention_forward": ("bshd", "custom_mask_type"),
}
MASK_TYPES = {0: None, 1: "top-left", 2: "bottom-right"}
# arguments that change an attention's result which SDPA cannot follow: variable-length packing,
# a sliding window, ALiBi, a paged KV cache
ATTENTION_NOT_FOLLOWED = (
    "cum_seq_q",
    "cum_seq_k",
    "cu_seqlens_q",
    "cu_seqlens_k",
    "seqlen_k",
    "window_size",
    "window_size_left",
    "window_size_right",
    "seqused_k",
    "alibi_slopes",
    "block_table",
)


@dataclass
class StandIn:
    """What the replay device runs for an op it does not have: `run(*arguments)` takes the op's
    arguments in schema order (tensors made from the recorded ones) and returns the output the
    op's first output is compared with; `values` False where that output is random (dropout)."""

    label: str
    run: Callable[..., Any]
    values: bool = True
    # False where `run` reads the call's numbers off the recording itself (attention, convolution),
    # so that what its unrecorded arguments are filled with is not what it computes, and not said
    scalars: bool = True


def _attention_stand_in(name: str, recorded: tuple[Arg, ...]) -> StandIn:
    """SDPA (math) computing what the recorded attention call computes: every argument of it that
    changes the result read by its schema name — the additive bias (`attn_bias`), `scale`,
    `is_causal` with the op's own alignment, `dropout_p` (above 0 the output is random: its
    values are not compared); an argument SDPA cannot follow (a window, ALiBi, packed lengths)
    refuses the replay."""
    import torch
    import torch.nn.functional as F

    layout, alignment = ATTENTION_STAND_INS[name]
    schema = getattr(torch.ops.aten, name.split("::", 1)[1]).default._schema
    position = {a.name: i for i, a in enumerate(schema.arguments)}
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}

    def given(argument: str) -> Arg | None:
        at = position.get(argument)
        return recorded[at] if at is not None and at < len(recorded) else None

    for argument in ATTENTION_NOT_FOLLOWED:
        arg = given(argument)
        if arg is None or arg.kind == NONE:
            continue
        numeric = isinstance(arg.value, (int, float)) and not isinstance(arg.value, bool)
        if arg.kind == TENSOR or (numeric and arg.value >= 0):  # a window of -1: none
            raise NotReplayable(f"{name}: its {argument} is recorded, which the SDPA stand-in does not follow")
    assumed: list[str] = []

    def number(argument: str) -> float | None:
        """The recorded value; None where recorded as None (`scale`: 1/√d); the schema's default,
        said, where passed without its value (a catalog entry); else refused."""
        arg = given(argument)
        value = arg.value if arg is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        default = defaults.get(argument, "none")
        if default is None and (arg is None or arg.kind == NONE):
            return None
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if arg is not None:
                assumed.append(f"{argument}={default:g}")
            return float(default)
        raise NotReplayable(f"{name}: its {argument} is not recorded")

    causal, alignment = _causal(name, given, defaults, alignment, assumed)
    scale, dropout = number("scale"), number("dropout_p") or 0.0
    bias_at = position.get("attn_bias", position.get("bias"))  # `_efficient_attention_forward`: bias
    q_dims, k_dims = recorded[0].dims, recorded[1].dims
    s_q, s_k = (q_dims[1], k_dims[1]) if layout == "bshd" else (q_dims[-2], k_dims[-2])
    h_q, h_k = (q_dims[2], k_dims[2]) if layout == "bshd" else (q_dims[-3], k_dims[-3])
    if h_q % h_k:
        raise NotReplayable(f"{name}: {h_q} query heads are no multiple of its {h_k} key/value heads")
    groups = h_q // h_k  # grouped-query attention: each KV head serves `groups` query heads
    bottom_right = causal and alignment == "bottom-right" and s_q != s_k
    if bottom_right and s_q > s_k:
        raise NotReplayable(
            f"{name}: causal with more queries ({s_q}) than keys ({s_k}): rows with no key, whose "
            f"output the SDPA stand-in does not reproduce"
        )

    def run(*args: Any) -> Any:
        q, k, v = args[:3]
        bias = args[bias_at] if bias_at is not None and bias_at < len(args) else None
        bias = bias if isinstance(bias, torch.Tensor) else None
        if layout == "bshd":
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if groups > 1:
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        mask: Any = bias
        if causal:
            keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q if bottom_right else 0)
            mask = keep if bias is None else bias.masked_fill(~keep, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale)
        return out.transpose(1, 2) if layout == "bshd" else out

    has_bias = bias_at is not None and bias_at < len(recorded) and recorded[bias_at].kind == TENSOR
    read = [
        *(["attn_bias"] if has_bias else []),
        f"scale={scale:g}" if scale is not None else "scale=1/√d",
        (f"causal ({alignment})" if s_q != s_k else "causal") if causal else "not causal",
        f"dropout_p={dropout:g}",
        *([f"GQA: {h_q} query heads on {h_k} key/value heads"] if groups > 1 else []),
    ]
    view = " on [B,H,S,D] views of the [B,S,H,D] inputs" if layout == "bshd" else ""
    note = f"; assumed {', '.join(assumed)} (not recorded)" if assumed else ""
    return StandIn(f"stand-in: SDPA (math){view}, {', '.join(read)}{note}", run, values=dropout == 0.0, scalars=False)


def _causal(name: str, given: Callable[[str], Arg | None], defaults: dict, alignment: str, assumed: list[str]):
    """Whether the recorded attention call is causal, and where its mask sits."""
    if alignment == "custom_mask_type":
        arg = given("custom_mask_type")
        value = arg.value if arg is not None else None
        if not isinstance(value, int) or isinstance(value, bool) or value not in MASK_TYPES:
            raise NotReplayable(f"{name}: its custom_mask_type is not recorded, or not 0, 1 or 2")
        return MASK_TYPES[value] is not None, MASK_TYPES[value] or "top-left"
    causal_arg = given("is_causal")
    causal = causal_arg.flag() if causal_arg is not None else None
    if causal is None:
        if not isinstance(defaults.get("is_causal"), bool):
            raise NotReplayable(f"{name}: its is_causal is not recorded")
        causal = defaults["is_causal"]
        if causal_arg is not None:
            assumed.append(f"is_causal={causal}")
    return causal, alignment


def attention_reference(name: str, recorded: tuple[Arg, ...], args: list[Any]) -> Any:
    """The recorded attention call computed in float64 from its definition, not through SDPA:
    softmax(scale · q·kᵀ + bias, masked) · v, each head group's keys repeated for its query heads,
    with the causal mask built from the recorded flag (or `custom_mask_type`) by comparing query
    and key indices at the op's alignment — what the stand-in's output is checked against, so that
    a stand-in reading the wrong scale, mask corner or heads fails."""
    import torch

    layout, alignment = ATTENTION_STAND_INS[name]
    schema = getattr(torch.ops.aten, name.split("::", 1)[1]).default._schema
    at = {a.name: i for i, a in enumerate(schema.arguments)}

    def value(argument: str) -> Any:
        i = at.get(argument)
        return recorded[i].value if i is not None and i < len(recorded) else None

    q, k, v = (a.detach().double() for a in args[:3])
    if layout == "bshd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    scale = value("scale")
    scale = float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) else q.shape[-1] ** -0.5
    logits = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    bias_at = at.get("attn_bias", at.get("bias"))
    if bias_at is not None and bias_at < len(args) and isinstance(args[bias_at], torch.Tensor):
        logits = logits + args[bias_at].double()
    if alignment == "custom_mask_type":
        corner = MASK_TYPES.get(value("custom_mask_type"))
    else:
        i = at.get("is_causal")
        flag = recorded[i].flag() if i is not None and i < len(recorded) else None
        flag = schema.arguments[i].default_value if flag is None and i is not None else flag
        corner = alignment if flag else None
    s_q, s_k = q.shape[-2], k.shape[-2]
    if corner is not None:
        rows = torch.arange(s_q, device=q.device)[:, None]
        cols = torch.arange(s_k, device=q.device)[None, :]
        keep = cols <= rows + (s_k - s_q if corner == "bottom-right" else 0)
        logits = logits.masked_fill(~keep, float("-inf"))
    out = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(logits, -1), v)
    return out.transpose(1, 2) if layout == "bshd" else out


def _rms_norm_backward(grad: Any, x: Any, normalized_shape: list, rstd: Any, weight: Any, *rest: Any) -> Any:
    """RMSNorm's backward from its definition (y = x · rstd · w): grad_input =
    rstd · (g·w − x̂ · mean(g·w · x̂)) over the normalised dims, grad_weight = Σ g · x̂ over the others."""
    x_hat = x * rstd
    gw = grad * weight if weight is not None else grad
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    grad_input = rstd * (gw - x_hat * (gw * x_hat).mean(dims, keepdim=True))
    grad_weight = (grad * x_hat).sum(tuple(range(x.dim() - len(normalized_shape)))) if weight is not None else None
    return (grad_input, grad_weight) if grad_weight is not None else grad_input


def _stand_in(name: str, recorded: tuple[Arg, ...], device: str) -> StandIn | None:
    """An equivalent computation for ops the replay device does not have."""
    import torch

    def tensors(count: int) -> None:  # what the stand-in computes on: refused where not recorded as tensors
        if len(recorded) < count or not all(r.is_tensor for r in recorded[:count]):
            raise NotReplayable(f"{name}: its first {count} inputs are not all recorded tensors")

    if device == "cpu" and name in STAND_IN_INPUTS:
        tensors(STAND_IN_INPUTS[name])
    if name in ATTENTION_STAND_INS and device == "cpu":
        return _attention_stand_in(name, recorded)
    if name in ("aten::cudnn_convolution", "aten::miopen_convolution") and device == "cpu":
        has_bias = name == "aten::miopen_convolution"
        lists = [r.value for r in recorded if r.kind == "list" and isinstance(r.value, list)]
        if len(lists) < 3:  # PyTorch < 1.10 records no Concrete Inputs: another convolution would be timed
            raise NotReplayable(f"{name}: its padding, stride and dilation are not recorded (no Concrete Inputs)")
        x_dims, w_dims = recorded[0].dims, recorded[1].dims
        # groups: recorded, else what the shapes imply (C_in = groups · the weight's C/g)
        implied = x_dims[1] // w_dims[1] if len(x_dims) > 1 and len(w_dims) > 1 and w_dims[1] else 1
        groups = next((r.value for r in recorded[2 + has_bias + 3 :] if isinstance(r.value, int)), implied)
        padding, stride, dilation = lists[:3]

        def run(x, w, *rest):
            bias = rest[0] if has_bias and rest and isinstance(rest[0], torch.Tensor) else None
            return torch.ops.aten.convolution(x, w, bias, stride, padding, dilation, False, [0], groups)

        return StandIn("stand-in: aten::convolution", run, scalars=False)
    if name in ("aten::cudnn_batch_norm", "aten::miopen_batch_norm") and device == "cpu":
        # the same arguments in the same order (input, weight, bias, running stats, training,
        # momentum, eps); cuDNN's fourth output (its reserve space) has no counterpart
        return StandIn("stand-in: aten::native_batch_norm", lambda *a: torch.ops.aten.native_batch_norm(*a))
    if name == "aten::miopen_batch_norm_backward" and device == "cpu":

        def backward(x, grad, weight, running_mean, running_var, save_mean, save_var, eps):
            # MIOpen's saved "variance" is its inverse standard deviation, as native's save_invstd
            train = save_mean is not None
            return torch.ops.aten.native_batch_norm_backward(
                grad, x, weight, running_mean, running_var, save_mean, save_var, train, eps, [True, True, True]
            )

        return StandIn("stand-in: aten::native_batch_norm_backward (save_var as MIOpen's saved 1/std)", backward)
    if name == "aten::_fused_rms_norm_backward" and device == "cpu":
        return StandIn("stand-in: RMSNorm backward from its definition (torch)", _rms_norm_backward)
    return None


def _argument_names(name: str, count: int) -> list[str]:
    """The schema names of an op's first `count` arguments (its default overload), else arg0, arg1…"""
    import torch

    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None) if name.startswith("aten::") else None
    arguments = packet.default._schema.arguments if packet is not None and "default" in packet.overloads() else []
    return [arguments[i].name if i < len(arguments) else f"arg{i}" for i in range(count)]


def _out_of_memory(exc: BaseException) -> bool:
    """Whether torch failed for want of memory: its CPU allocator's "[enforce fail at
    alloc_cpu.cpp] … can't allocate memory", a GPU's `OutOfMemoryError` ("CUDA out of memory")."""
    text = str(exc)
    return type(exc).__name__ == "OutOfMemoryError" or "allocate memory" in text or "out of memory" in text.lower()


def _stand_in_arguments(name: str, recorded: tuple[Arg, ...], device: str, gen: Any, assumed: list[str]) -> list[Any]:
    """The arguments a stand-in's `run` takes, one per recorded argument in the op's schema order:
    `_materialise`'s values for the op's default schema (tensors of the recorded shapes, what was
    not recorded from the schema's defaults or stated assumptions); past the schema, as recorded."""
    import torch

    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    schema = packet.default._schema if packet is not None and "default" in packet.overloads() else None
    filled: list[Any] = []
    if schema is not None:
        positional, keywords = _materialise(name, schema, recorded, device, gen, assumed)
        filled = _in_schema_order(schema, recorded, positional, keywords)
    names = _argument_names(name, len(recorded))
    return filled + [
        make_tensor(r.dims, r.dtype, device, r.strides, None, gen, domain_of(name, n)) if r.kind == TENSOR else r.value
        for r, n in zip(recorded[len(filled) :], names[len(filled) :], strict=True)
    ]


def build_case(name: str, recorded: tuple[Arg, ...], device: str, seed: int = 0, *, label_rule: str = "") -> Case:
    """An ATen op (`name`) replayed with its recorded arguments; `label_rule` is the traced
    kernel's label rule (a TF32 kernel family is replayed with TF32 allowed)."""
    refusal = shape_refusal(recorded)  # a tensor whose shape is impossible or not recorded: as every builder
    if refusal:
        raise NotReplayable(f"{name}: {refusal}")
    gen = generator(device, seed)
    small = nbytes(recorded) <= CPU_REFERENCE_BYTES
    stand_in = _stand_in(name, recorded, device)
    if stand_in is not None:
        fn = stand_in.run
        names = _argument_names(name, len(recorded))
        # the op's own schema fills what was not recorded, as for any ATen op (PyTorch 1.9's
        # cudnn_batch_norm records training, momentum and eps without values: None failed
        # native_batch_norm's schema), said where the stand-in computes with it
        assumed: list[str] = []
        args = _stand_in_arguments(name, recorded, device, gen, assumed)
        said = [a for a in assumed if stand_in.scalars]
        label = f"{stand_in.label}; assumed {', '.join(said)} (not recorded)" if said else stand_in.label

        def run() -> Any:
            return fn(*args)

        def check() -> tuple[str, str]:
            wrong = differs_from_recording(names, recorded, args)
            if wrong is not None:
                return "fail", f"not the recorded call: {wrong}"
            if name in ATTENTION_STAND_INS:  # from the attention's definition, not through SDPA
                output = _tensors(run())[0]
                reference = attention_reference(name, recorded, [_widen(a, device) for a in args])
                return _compare_outputs(output, reference, values=stand_in.values)
            reference = fn(*[_widen(a, device) for a in args])
            return _compare_outputs(run(), reference, values=stand_in.values)

        return Case(run, label, check, timed=STAND_IN)
    overload = find_overload(name, recorded)
    schema = overload._schema
    assumed: list[str] = []
    positional, keywords = _materialise(name, schema, recorded, device, gen, assumed)
    tf32 = rule_precision(label_rule) == "tf32" and device.startswith("cuda")
    matmul_flags = device.startswith("cuda")

    def run_op() -> Any:
        if not matmul_flags:
            return overload(*positional, **keywords)
        with _tf32(tf32):
            return overload(*positional, **keywords)

    names = [a.name for a in schema.arguments[: len(recorded)]]
    # the arguments an op writes in place (`Tensor(a!)[] self`): what is checked where it returns nothing
    written = [i for i, a in enumerate(schema.arguments[: len(recorded)]) if a.alias_info and a.alias_info.is_write]

    def check_op() -> tuple[str, str]:
        given = _in_schema_order(schema, recorded, positional, keywords)  # the tensors themselves, written in place
        wrong = differs_from_recording(names, recorded, given)
        if wrong is not None:
            return "fail", f"not the recorded call: {wrong}"
        # the reference first, from the inputs as they are before the timed call (in-place ops
        # change them), then the timed call itself
        widened = [_widen(x, device) for x in positional]
        wide_keywords = {k: _widen(v, device) for k, v in keywords.items()}
        try:
            reference = overload(*widened, **wide_keywords)
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            if _out_of_memory(exc):  # the float64 copies did not fit: the replay's memory reason, not "no kernel"
                raise MemoryError(str(exc)) from exc
            # no float64 kernel for this op here (flash attention on a GPU): the CPU stand-in's
            # computation in float64 checks the first output
            try:
                equivalent = _stand_in(name, recorded, "cpu")
            except NotReplayable as why:
                return "skipped", f"no float64 reference: {why}"
            if equivalent is None:
                return "skipped", f"no float64 reference ({str(exc).splitlines()[0][:80]})"
            reference = equivalent.run(*widened)
            first = _tensors(run_op())[0]
            values = comparable(name) and equivalent.values
            return _compare_outputs(first, reference, "tf32" if tf32 else None, values=values)
        produced = run_op()
        returned = bool(_tensors(produced))
        if not returned and written:
            # an in-place op returning nothing (`_foreach_add_`, `_foreach_copy_`): what it wrote,
            # against what the float64 call wrote into its copies
            wide_at = _in_schema_order(schema, recorded, widened, wide_keywords)
            produced, reference = [given[i] for i in written], [wide_at[i] for i in written]
        exact = any(not (t.is_floating_point() or t.is_complex()) for t in _tensors(produced))
        if exact and device != "cpu" and small and returned:
            reference = overload(*_widen(widened, "cpu"), **{k: _widen(v, "cpu") for k, v in wide_keywords.items()})
        return _compare_outputs(produced, reference, "tf32" if tf32 else None, values=comparable(name))

    notes = [f"assumed {', '.join(assumed)} (not recorded)"] if assumed else []
    if tf32:
        notes.append("TF32 allowed, as the traced tf32 kernel")
    note = f"; {'; '.join(notes)}" if notes else ""
    return Case(run_op, f"{name} ({schema.name}.{schema.overload_name or 'default'}){note}", check_op)
