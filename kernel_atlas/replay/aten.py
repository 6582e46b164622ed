"""Replaying ATen ops from their recorded inputs, dispatched through the op's schema.

The overload is the one whose schema accepts the recorded argument kinds in order (tensor,
tensor list, scalar, list, None); kwarg-only arguments are passed by name. Ops that do not
exist on the replay device get a stated stand-in (flash attention → SDPA math on the CPU,
`cudnn_convolution` → `aten::convolution`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel_atlas.ingest.recorded import Arg
from kernel_atlas.replay.inputs import NotReplayable, make_tensor, torch_dtype

INDEX_NAMES = ("index", "indices", "idx")
TOLERANCE = {"bfloat16": 3e-2, "float16": 5e-3, "float32": 2e-3, "float64": 1e-9}


@dataclass
class Case:
    run: Callable[[], Any]
    implementation: str
    check: Callable[[], tuple[str, str]]


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
        if rec.kind == "none" and not (kind.endswith("?") or "Optional" in kind or arg.has_default_value()):
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
    names = sorted(packet.overloads(), key=lambda o: (o != "default", "out" in o, o))
    for overload_name in names:
        overload = getattr(packet, overload_name)
        schema = overload._schema
        if any(a.is_out for a in schema.arguments) and overload_name != names[-1]:
            continue  # prefer functional/in-place overloads; out= variants only as a last resort
        if _fits(schema, recorded):
            return overload
    raise NotReplayable(f"no overload of {name} takes the recorded argument kinds {[r.kind for r in recorded]}")


def _bounds(schema: Any, recorded: tuple[Arg, ...]) -> dict[int, int]:
    """Upper bounds for index tensors: the size of the dimension they index."""
    names = [a.name for a in schema.arguments]
    bounds: dict[int, int] = {}
    source = next((i for i, n in enumerate(names[: len(recorded)]) if n in ("self", "weight", "input")), None)
    if source is None or recorded[source].kind != "tensor":
        return bounds
    shape = recorded[source].dims
    dim = 0
    if "dim" in names and names.index("dim") < len(recorded):
        value = recorded[names.index("dim")].value
        dim = value if isinstance(value, int) else 0
    for i, name in enumerate(names[: len(recorded)]):
        if any(key in name for key in INDEX_NAMES) and shape:
            bounds[i] = shape[dim % len(shape)] if name != "indices" or recorded[i].kind == "tensor" else shape[0]
    return bounds


def _optional(arg: Any) -> bool:
    kind = str(arg.type)
    return kind.endswith("?") or "Optional" in kind


def _assumed(arg: Any, shape: tuple[int, ...]) -> Any:
    """A value for a required argument the recording has no value for (catalog shapes carry no
    `Concrete Inputs`): the last dimension for shape lists, 0 for dims, 1 for numbers."""
    kind = str(arg.type)
    if "[]" in kind or "List" in kind:
        return list(shape[-1:]) if "shape" in arg.name or "size" in arg.name else []
    if kind in ("int", "SymInt"):
        return -1 if arg.name == "dim" and "index" not in arg.name else 0
    if kind == "bool":
        return False
    return 1


def _materialise(
    schema: Any, recorded: tuple[Arg, ...], device: str, generator: Any, assumed: list[str] | None = None
) -> tuple[list, dict]:
    assumed = assumed if assumed is not None else []
    bounds = _bounds(schema, recorded)
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    source_shape = next((r.dims for r in recorded if r.kind == "tensor"), ())
    for i, (arg, rec) in enumerate(zip(schema.arguments, recorded, strict=False)):
        if rec.kind == "tensor":
            value: Any = make_tensor(rec.dims, rec.dtype, device, rec.strides, bounds.get(i), generator)
        elif rec.kind == "tensor_list":
            dtype = rec.dtype if rec.dtype not in ("", "TensorList") else "float"
            value = [
                make_tensor(d, dtype, device, None, source_shape[k] if k < len(source_shape) else None, generator)
                for k, d in enumerate(rec.dims or [])
            ]
        else:
            value = None if rec.kind == "none" else rec.value
            if value is None and arg.has_default_value():
                value = arg.default_value  # e.g. gelu's `approximate`, recorded without a value
            elif value is None and not _optional(arg):
                value = _assumed(arg, source_shape)
                assumed.append(f"{arg.name}={value!r}")
        if arg.kwarg_only:
            keywords[arg.name] = value
        else:
            positional.append(value)
    return positional, keywords


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _compare(output: Any, reference: Any, dtype_name: str) -> tuple[str, str]:
    import torch

    out, ref = _first_tensor(output), _first_tensor(reference)
    if out is None or ref is None:
        return "skipped", "op returns no tensor"
    if not out.dtype.is_floating_point:
        equal = torch.equal(out.cpu(), ref.cpu().to(out.dtype)) if out.shape == ref.shape else False
        return ("pass", "exact match with a float64 run") if equal else ("skipped", "integer/bool output")
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    if out64.shape != ref64.shape:
        return "fail", f"shape {tuple(out64.shape)} != reference {tuple(ref64.shape)}"
    scale = float(ref64.abs().max()) if ref64.numel() else 0.0
    error = float((out64 - ref64).abs().max()) if ref64.numel() else 0.0
    tolerance = TOLERANCE.get(dtype_name, 3e-2) * max(scale, 1e-6)
    verdict = "pass" if error <= tolerance or (error != error and scale != scale) else "fail"
    return verdict, f"max |error| {error:.3g} vs float64 reference (tolerance {tolerance:.3g})"


def _stand_in(name: str, recorded: tuple[Arg, ...], device: str) -> tuple[str, Callable[..., Any]] | None:
    """An equivalent computation for ops the replay device does not have."""
    import torch
    import torch.nn.functional as F

    def value(i: int) -> Any:
        return recorded[i].value if i < len(recorded) else None

    if name == "aten::_flash_attention_forward" and device == "cpu":
        causal, scale = bool(value(8)), value(10)

        def run(q, k, v, *_rest):
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                is_causal=causal,
                scale=scale if isinstance(scale, float) else None,
            )
            return out.transpose(1, 2)

        return "stand-in: SDPA (math) on [B,H,S,D] views of the flash-attention inputs", run
    if name in ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention") and (
        device == "cpu"
    ):
        causal_at = 4 if "flash" in name else 6

        def run(q, k, v, *_rest):
            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(value(causal_at)))

        return "stand-in: SDPA (math)", run
    if name in ("aten::cudnn_convolution", "aten::miopen_convolution") and device == "cpu":
        has_bias = name == "aten::miopen_convolution"
        lists = [r.value for r in recorded if r.kind == "list"]
        groups = next((r.value for r in recorded[2 + has_bias + 3 :] if isinstance(r.value, int)), 1)
        padding, stride, dilation = [*lists, [0], [1], [1]][:3]

        def run(x, w, *rest):
            bias = rest[0] if has_bias and rest and isinstance(rest[0], torch.Tensor) else None
            return torch.ops.aten.convolution(x, w, bias, stride, padding, dilation, False, [0], groups)

        return "stand-in: aten::convolution", run
    return None


def build_case(name: str, recorded: tuple[Arg, ...], device: str, seed: int = 0) -> Case:
    """An ATen op (`name`) replayed with its recorded arguments."""
    import torch

    first = next((r for r in recorded if r.kind == "tensor"), None)
    dtype_name = str(torch_dtype(first.dtype)).split(".")[-1] if first else "float32"
    stand_in = _stand_in(name, recorded, device)
    if stand_in is not None:
        label, fn = stand_in
        generator = torch.Generator().manual_seed(seed)
        args = [
            make_tensor(r.dims, r.dtype, device, r.strides, None, generator) if r.kind == "tensor" else r.value
            for r in recorded
        ]

        def run() -> Any:
            return fn(*args)

        def check() -> tuple[str, str]:
            doubles = [
                a.detach().double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
            ]
            return _compare(run(), fn(*doubles), dtype_name)

        return Case(run, label, check)
    overload = find_overload(name, recorded)
    schema = overload._schema
    generator = torch.Generator().manual_seed(seed)
    assumed: list[str] = []
    positional, keywords = _materialise(schema, recorded, device, generator, assumed)

    def run_op() -> Any:
        return overload(*positional, **keywords)

    def check_op() -> tuple[str, str]:
        def widen(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.detach().double().clone() if x.is_floating_point() else x.detach().clone()
            if isinstance(x, list):
                return [widen(i) for i in x]
            return x

        fresh = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in positional]
        try:
            reference = overload(*[widen(x) for x in positional], **{k: widen(v) for k, v in keywords.items()})
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            return "skipped", f"no float64 reference ({str(exc).splitlines()[0][:80]})"
        return _compare(overload(*fresh, **keywords), reference, dtype_name)

    note = f"; assumed {', '.join(assumed)} (not recorded)" if assumed else ""
    return Case(run_op, f"{name} ({schema.name}.{schema.overload_name or 'default'}){note}", check_op)
