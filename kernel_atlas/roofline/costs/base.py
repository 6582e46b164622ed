"""FLOPs and bytes of one op call from its recorded inputs: a registry of small formulas.

A formula is registered for what it serves, and looked up from the call's launcher and label:
first the launching op (its schema says how to read its recorded arguments, e.g. `aten::addmm`,
`vllm::moe_forward`: the recorded arguments are always the launcher's), then a label rule (a
kernel family with its own argument layout, e.g. `deepgemm`, named by catalogs/rules.toml, for
launchers without a formula: a library's op, `cuLaunchKernelEx`, Inductor's record of the
kernel), then the op_mapping. A formula reading ATen's argument positions does not read a C++
op of another namespace that catalogs/launchers.toml does not list under its op, and no rule or
op formula reads an autograd node's (`unknown_layout`). A key is registered once; a second
registration is refused. Formulas return a `Cost` or raise `NoCost` with the reason (a missing
input, an op whose recorded inputs are only workspaces). Bytes are the minimum traffic: every
input read once, every output written once. Elementwise-style ops count `flops_per_element`
(catalogs/costs.toml) FLOPs per output element.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kernel_atlas.classify.classifier import rule_id, rule_precision
from kernel_atlas.classify.rules import LauncherTable, inductor_kernel_prefix, parse_launchers
from kernel_atlas.core.devices import MATRIX, VECTOR
from kernel_atlas.core.paths import catalog_number, catalogs_dir, read_toml
from kernel_atlas.ingest.recorded import TENSOR, TENSOR_LIST, Arg, dtypes


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
# op_mappings whose formula reads the arguments at the positions of the op's ATen schema
# (`register(aten=True)`): not applied to a library op of another layout (`unknown_layout`)
ATEN_LAYOUT: set[str] = set()


def register(
    *,
    rules: tuple[str, ...] = (),
    launchers: tuple[str, ...] = (),
    ops: tuple[str, ...] = (),
    partner: bool = False,
    aten: bool = False,
) -> Callable[[Formula], Formula]:
    """Attach a formula to label rule ids (catalogs/rules.toml), launching ops, or op_mappings.
    Each key takes one formula: registering a second is an error, as in torch's flop_counter.
    `partner`: the formula reads the call's autograd partner (its launchers' calls get it).
    `aten`: the ops' formula reads ATen's argument positions (`self` first, `index_select(self,
    dim, index)`), not a library's: see `unknown_layout`."""

    def wrap(func: Formula) -> Formula:
        if partner:
            PARTNER_LAUNCHERS.update(launchers)
        if aten:
            ATEN_LAYOUT.update(ops)
        for kind, keys in (("rule", rules), ("launcher", launchers), ("op", ops)):
            for key in keys:
                if (kind, key) in REGISTRY:
                    raise ValueError(f"{kind} {key!r} already has a cost formula ({REGISTRY[kind, key].__name__})")
                REGISTRY[kind, key] = func
        return func

    return wrap


@lru_cache(maxsize=1)
def flops_per_element() -> dict[str, float]:
    """`[flops_per_element]`: each a finite number from 0 (`catalog_number`: a negative one gave
    negative FLOPs and achieved TFLOP/s)."""
    table = read_toml("costs.toml")["flops_per_element"]
    return {k: catalog_number(table, k, zero=True) for k in table}


def cost_of(call: Call) -> Cost:
    # the launcher's formula first: a rule's formula reads the arguments in its kernel family's
    # usual launcher's order, and a kernel launched by another op with a formula of its own
    # (vLLM's `fused_moe_kernel` directly under `vllm::moe_forward`) was read in the wrong order
    keys = (("launcher", call.launcher), ("rule", rule_id(call.rule) or ""), ("op", call.op_mapping))
    return _first_formula(call, keys)


def cost_by_launcher_or_op(call: Call) -> Cost:
    """The formula of the call's launcher, else of its op_mapping, skipping its rule's: for a rule
    formula that serves only some of its rule's kernels (an Inductor template that is a
    convolution or flex attention, or one whose launch is not recorded under its own op)."""
    return _first_formula(call, (("launcher", call.launcher), ("op", call.op_mapping)))


def _first_formula(call: Call, keys: tuple[tuple[str, str], ...]) -> Cost:
    refused = ""  # why a formula there was not applied to this launcher's arguments
    for kind, key in keys:
        if (kind, key) not in REGISTRY:
            continue
        why = unknown_layout(call.launcher, kind, key)
        if not why:
            return REGISTRY[kind, key](call)
        refused = refused or why
    if refused:
        raise NoCost(f"no cost model for {call.launcher}: {refused}")
    raise NoCost(f"no cost model for {call.launcher or call.op_mapping}")


_NAMESPACED = re.compile(r"^\w+::")
_AUTOGRAD_NODE = re.compile(r"autograd::|^\w+Backward\d*$")


@lru_cache(maxsize=4)
def _launcher_table(folder: str) -> LauncherTable:
    return parse_launchers(Path(folder) / "launchers.toml")


def unknown_layout(launcher: str, kind: str, key: str) -> str:
    """`_unknown_layout` under the catalogs in use (ATLAS_CATALOGS may name another folder)."""
    return _unknown_layout(launcher, kind, key, str(catalogs_dir()))


@lru_cache(maxsize=4096)
def _unknown_layout(launcher: str, kind: str, key: str, folder: str) -> str:
    """Why the formula registered for (`kind`, `key`) may not read `launcher`'s recorded
    arguments, or "" where it may. A launcher's own formula always may. An autograd node
    (`torch::autograd::CppNode<…>`, a `…Backward0` node) records the gradients it receives, not
    its kernels' arguments: no rule or op formula reads them (fbgemm's permute backward had been
    costed 580 MB, its forward 15,696 B, for one kernel). An op's formula registered `aten` reads
    the positions of ATen's schema (`index_select(self, dim, index)`): a C++ op of another
    namespace lays its arguments out otherwise (fbgemm's embedding lookup records an empty `[0]`
    placeholder first: costed as 123 rows of 0 bytes, 984 B for a 2.5 ms kernel), unless
    catalogs/launchers.toml lists it under that op. Launchers that are no C++ op (Python frames,
    Inductor's records of its kernels, JIT-compiled modules) and the ops' other formulas, written
    for libraries' layouts (attention, KV-cache writes, rotary, norms), keep theirs."""
    if kind == "launcher" or not launcher or launcher.startswith("aten::"):
        return ""
    if _AUTOGRAD_NODE.search(launcher):
        return (
            f"an autograd node: its recorded inputs are the gradients it receives, not its kernels' arguments "
            f"(the {key} formula would read them as its own)"
        )
    if kind != "op" or key not in ATEN_LAYOUT or not _NAMESPACED.match(launcher):
        return ""
    hit = _launcher_table(folder).lookup(launcher)
    if hit is not None and hit.op == key:
        return ""
    return (
        f"a library op of unknown argument layout (catalogs/launchers.toml lists it under no op {key!r}): "
        f"the {key} formula reads ATen's argument positions"
    )


def inductor_launcher(launcher: str) -> bool:
    """A call launched under Inductor's own record of a Triton kernel: the CPU op Inductor names
    after the kernel, `triton_<kind>_…` for the kinds rules.toml `[sets] inductor_kernels` lists
    (the templates `triton_mm` and `triton_bmm` are their kind alone). The op is the launcher
    whether or not Python stacks were recorded (kernels.parquet's `launcher` then reads `<built-in
    function launch>`, the op's shapes are still the call's). Its recorded Input Dims are every
    argument of the kernel in Inductor's order — in_out_ptr* (read and written), in_ptr* (read),
    out_ptr* (written), then the size scalars (xnumel, r0_numel) — without their names: its outputs
    are among the recorded tensors, and which of them are written is not recorded."""
    return inductor_kernel_prefix().match(f"{launcher}_") is not None  # `^triton_(?:<kinds>)_`


# the launcher Kineto records for a Triton kernel launched by Triton's own runtime (a hand-written
# `@triton.jit` kernel: SGLang's norms, MoE routing), the Python frame `<built-in function launch>`
TRITON_LAUNCH = "<built-in function launch>"


def triton_launcher(launcher: str) -> bool:
    """A call whose recorded arguments are a Triton kernel's own: Inductor's record of its kernel
    (`inductor_launcher`), or Triton's launch itself (`TRITON_LAUNCH`: a catalog entry of a
    hand-written kernel, SGLang's `fused_dual_residual_rmsnorm_kernel(output, mid, x, residual,
    weight1, weight2)`). A Triton kernel returns nothing and writes through its pointer arguments,
    so its outputs are among the recorded tensors: each is counted once (`inductor_bytes`), no
    output is added on top (one was: +25 % bytes for the dual-residual norm, +50 % for
    `fused_rmsnorm_kernel(output, activ, weight)`, campaign BM 5)."""
    return launcher == TRITON_LAUNCH or inductor_launcher(launcher)


def inductor_bytes(tensors: list[Arg], launcher: str = "") -> tuple[int, str]:
    """Bytes of a Triton kernel's call (`triton_launcher`; Inductor's unless `launcher` is
    `TRITON_LAUNCH`): each recorded tensor once — its inputs read, its outputs (among them)
    written — with the formula's words for it. An in_out_ptr (an input buffer the kernel writes
    back in place) is read and written, so its write is left out: the trace does not say which
    argument that is, and the text says so (an estimate)."""
    total = sum(a.nbytes for a in tensors)
    kernel = "a Triton kernel" if launcher == TRITON_LAUNCH else "an Inductor kernel"
    return total, (
        f"each of its {len(tensors)} recorded arguments once {total} ({kernel} records its outputs "
        "among its arguments, not which they are: none assumed updated in place, whose write would add its bytes)"
    )


def tensors_of(call: Call) -> list[Arg]:
    return [a for a in call.args if a.is_tensor]


def tensor_at(call: Call, index: int, what: str) -> Arg:
    if index >= len(call.args) or not call.args[index].is_tensor:
        raise NoCost(f"{call.what}: input {index} ({what}) {_why_not_tensor(call.args, index)}")
    return call.args[index]


def optional_tensor_at(call: Call, index: int) -> Arg | None:
    """Input `index` where it is a tensor that can be costed (an optional weight, an output), else None."""
    return call.args[index] if index < len(call.args) and call.args[index].is_tensor else None


def concrete_int(call: Call, index: int) -> int | None:
    """An integer Concrete Input (a reduction mode, a size), else None."""
    if index >= len(call.args):
        return None
    value = call.args[index].value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def no_tensors(call: Call) -> NoCost:
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


def gemm_precision(call: Call, arg: Arg) -> tuple[str, str]:
    """The peak a GEMM-like call's math is held against: its inputs' precision on the matrix unit.
    fp32 inputs run on TF32 tensor cores where the kernel's family says so (rules.toml
    `precision`); other fp32 math takes the device's fp32 matrix peak where it has one — AMD CDNA's
    fp32 MFMA (devices.toml `tensor.fp32`: MI210 45.3, MI300X/MI325X 163.4 TFLOP/s), which
    rocBLAS/hipBLASLt, CK, MIOpen and Triton GEMMs use (Tensile names it: `_MI32x32x2_`) —, else
    its fp32 vector peak (`Device.peak`'s fallback: NVIDIA has no fp32 tensor-core math, so no
    NVIDIA entry lists one)."""
    precision = arg.precision
    if precision == "fp32":
        return ("tf32", MATRIX) if rule_precision(call.rule) == "tf32" else ("fp32", MATRIX)
    if precision == "int":
        return "int", VECTOR
    return precision, MATRIX


def tensor_lists(call: Call) -> tuple[list[Arg], int, str, str]:
    """The recorded tensor lists of a call, their element size, precision and a note: a trace
    records each element's shape but not its dtype (`Input type` says only "TensorList"), so the
    dtype of the call's other tensors is used, else the one the caller assumed (`list_dtype`)."""
    lists = [a for a in call.args if a.kind == TENSOR_LIST and a.dims]
    if not lists:
        raise no_tensors(call)
    # the dtype of the call's other tensors of some size: a 0-d one is a scalar (an fp32 `lr`, a
    # clip coefficient) beside lists of another dtype (bf16 parameters were costed as fp32)
    tensors = [a for a in tensors_of(call) if a.dims]
    name = tensors[0].dtype if tensors else call.list_dtype
    if name not in dtypes():
        raise NoCost(f"{call.what}: the dtype of tensor-list elements is not recorded")
    note = "" if tensors else f" (list elements assumed {name}: not recorded)"
    return lists, dtypes()[name].bytes, dtypes()[name].precision, note


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape shapes broadcast to (NumPy's rules, right-aligned)."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        out.append(max(sizes) if sizes else 1)
    return tuple(out)
