"""Mutation testing of replay's checks: deliberate bugs applied to copies of the replay modules,
each of which the replay's own check must catch (its verdict on the mutant is not "pass", where
the unmutated module's is).

A mutant replaces one exact piece of source (it must occur exactly once, so the harness notices
when the code it targets changes) in a copy of a module written to a temporary file, imported
under a fresh name with `register` made a no-op (the mutant never enters the replay registry);
module attributes listed in `patch` are swapped for the mutant's while its scenario runs
(e.g. `aten.make_tensor` for a bug in value generation). The scenario builds the case at small
shapes with tail blocks and runs its check; Triton kernels run in the interpreter.

Used by tests/replay/test_replay_mutants.py (a handful, in CI) and benchmarks/replay_mutation.py (all).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.util
import itertools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is defined

from kernel_atlas.replay.runner import Target

_counter = itertools.count()


def catalog_target(kernel: str, dims: list, **fields: Any) -> Target:
    types = json.dumps(["c10::BFloat16"] * len(dims))
    target = Target(
        kernel, "<built-in function launch>", "", "", json.dumps(dims), types, None, None, None, 1, "catalog"
    )
    return replace(target, **fields)


def aten_target(op: str, dims: list, types: list[str], concrete: list[str] | None = None) -> Target:
    return Target(
        op, op, "", "", json.dumps(dims), json.dumps(types), None, json.dumps(concrete) if concrete else None,
        None, 1, "trace",
    )  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    name: str
    module: str  # dotted module whose copy is mutated
    old: str  # exact source replaced (once)
    new: str
    builder: str = ""  # the replay builder in the module (kernel mutants)
    target: Target | None = None
    patch: tuple[str, ...] = field(default=())  # "module:attribute" swapped for the mutant's attribute
    scenario: str = ""  # aten mutants: "aten" (build_case of target, through the patched modules)


@dataclass(frozen=True)
class Outcome:
    mutant: str
    original: tuple[str, str]
    mutated: tuple[str, str]

    @property
    def caught(self) -> bool:
        return self.original[0] == "pass" and self.mutated[0] == "fail"


def _source(module: str) -> str:
    return Path(importlib.import_module(module).__file__).read_text()


@functools.cache
def _folder() -> Path:
    """One folder for this process's mutant sources, removed when the process exits (Triton
    reads a kernel's source file when it first runs it, so the files must outlive `_load`)."""
    folder = Path(tempfile.mkdtemp(prefix="atlas-mutants-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _load(module: str, source: str) -> ModuleType:
    """Import `source` as a fresh module (from a real file: Triton reads kernel sources)."""
    import kernel_atlas.replay.kernels as registry

    folder = _folder()
    name = f"_atlas_mutant_{next(_counter)}_{module.rsplit('.', 1)[-1]}"
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # dataclasses look their module up while the class is made
    saved = registry.register
    registry.register = lambda *args, **kwargs: lambda builder: builder  # keep mutants out of the registry
    try:
        spec.loader.exec_module(loaded)
    finally:
        registry.register = saved
    return loaded


@contextmanager
def _patched(patches: tuple[str, ...], donor: ModuleType) -> Iterator[None]:
    saved = []
    for spec in patches:
        module_name, attribute = spec.split(":")
        module = importlib.import_module(module_name)
        saved.append((module, attribute, getattr(module, attribute)))
        setattr(module, attribute, getattr(donor, attribute))
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


def _verdict(run: Callable[[], tuple[str, str]]) -> tuple[str, str]:
    try:
        return run()
    except Exception as exc:  # a mutant that crashes the replay is reported as such, not as caught
        return "crashed", f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def _scenario(mutant: Mutant, module: ModuleType) -> tuple[str, str]:
    if mutant.scenario == "aten":
        aten = importlib.import_module("kernel_atlas.replay.aten")
        build = module.build_case if mutant.module == "kernel_atlas.replay.aten" else aten.build_case
        t = mutant.target
        case = build(t.launcher, t.args, "cpu", label_rule=t.label_rule)
        return case.check()
    case = getattr(module, mutant.builder)(mutant.target, "cpu", 1.0)
    return case.check()


def run_mutant(mutant: Mutant) -> Outcome:
    """The check's verdict on the unmutated module and on the mutant."""
    source = _source(mutant.module)
    if source.count(mutant.old) != 1:
        raise AssertionError(
            f"{mutant.name}: the source to mutate occurs {source.count(mutant.old)}× in {mutant.module}"
        )
    original = _load(mutant.module, source)
    with _patched(mutant.patch, original):
        before = _verdict(lambda: _scenario(mutant, original))
    mutated = _load(mutant.module, source.replace(mutant.old, mutant.new))
    with _patched(mutant.patch, mutated):
        after = _verdict(lambda: _scenario(mutant, mutated))
    return Outcome(mutant.name, before, after)


# Shapes with tail blocks for the interpreter's tiles (fused_moe: K 72, N 96 in 64-wide tiles).
MOE = [[24, 72], [4, 96, 72], [4, 72, 48], [24, 2], [24, 2]]
FM, EP, GEMM, NORMS, SERVING = (
    f"kernel_atlas.replay.kernels.{m}" for m in ("fused_moe", "ep", "gemm", "norms", "serving")
)

MUTANTS = [
    Mutant(
        "fused_moe_kernel: K masks dropped",
        FM,
        """        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < remaining), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < remaining, other=0.0)""",
        """        a = tl.load(a_ptrs, mask=token_mask[:, None], other=0.0)
        b = tl.load(b_ptrs)""",
        "_fused_moe",
        catalog_target("fused_moe_kernel", MOE),
    ),
    Mutant(
        "fused_moe_kernel: N mask dropped from the store",
        FM,
        "tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=token_mask[:, None] & (offs_cn[None, :] < N))",
        "tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=token_mask[:, None])",
        "_fused_moe",
        catalog_target("fused_moe_kernel", MOE),
    ),
    Mutant(
        "fused_moe_kernel: wrong top_k in the timed launch",
        FM,
        "        k_of_launch = 1 if down else top_k",
        "        k_of_launch = 1",
        "_fused_moe",
        catalog_target("fused_moe_kernel", MOE),
    ),
    Mutant(
        "fused_moe_kernel: routing weight not applied in the down launch",
        FM,
        "        accumulator = accumulator * weight[:, None]",
        "        accumulator = accumulator",
        "_fused_moe",
        catalog_target("fused_moe_kernel", MOE, launch_index=1),
    ),
    Mutant(
        "moe_sum_reduce: hidden mask dropped",
        FM,
        "    mask = (offs_m[:, None] < num_tokens) & (offs_d[None, :] < hidden)",
        "    mask = offs_m[:, None] < num_tokens",
        "_sum_reduce",
        catalog_target("_moe_sum_reduce_kernel", MOE),
    ),
    Mutant(
        "moe_align: padding not written",
        FM,
        "        tl.store(sorted_ids + slots, numel + tl.zeros_like(slots), mask=padding)",
        "        pass",
        "_align",
        catalog_target("void moe_align_block_size_kernel<long>(long const*)", [[40, 3]]),
    ),
    Mutant(
        "compute_position: off-by-one mask",
        SERVING,
        "        tl.store(positions + start + offs, prefix + offs, mask=offs < length)",
        "        tl.store(positions + start + offs, prefix + offs, mask=offs <= length)",
        "_positions",
        catalog_target("compute_position_kernel", [[5], [5]]),
    ),
    Mutant(
        "write_req_to_token_pool: writes past the request's slice",
        SERVING,
        "        mask = offs < seq - pre\n        value = tl.load(out_cache_loc",
        "        mask = offs < seq - pre + 1\n        value = tl.load(out_cache_loc",
        "_write_req_to_token",
        catalog_target("write_req_to_token_pool_triton", [[8, 700], [3], [3], [3], [3], [600]]),
    ),
    Mutant(
        "create_flashinfer_kv_indices: start off by one",
        SERVING,
        "        value = tl.load(req_to_token + req * stride + start + offs, mask=mask)",
        "        value = tl.load(req_to_token + req * stride + start + offs + 1, mask=mask)",
        "_kv_indices",
        catalog_target("create_flashinfer_kv_indices_triton", [[8, 1300], [3], [3], [4], [0]]),
    ),
    Mutant(
        "per_token_group_quant_fp8: scale for the wrong fp8 format",
        SERVING,
        "    scale = absmax / fp8_max",
        "    scale = absmax / 240.0",
        "_group_quant",
        catalog_target("_per_token_group_quant_fp8", [[3, 5, 256]]),
    ),
    Mutant(
        "rmsnorm: column mask dropped from the load",
        NORMS,
        "    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)",
        "    x = tl.load(x_ptr + row * n_cols + cols).to(tl.float32)",
        "_plain",
        catalog_target("fused_rmsnorm_kernel", [[9, 100], [9, 100], [100]]),
    ),
    Mutant(
        "fused_add_rmsnorm: residual not updated",
        NORMS,
        "    tl.store(res_ptr + offs, total, mask=mask)",
        "    pass",
        "_fused_add",
        catalog_target("fused_add_rmsnorm", [[9, 100], [9, 100], [100]]),
    ),
    Mutant(
        "ep_gather: slots on other ranks gathered",
        EP,
        "            if expert >= 0:\n                src = tl.load(input_index",
        "            if expert >= -1:\n                src = tl.load(input_index",
        "_gather",
        catalog_target("_fwd_kernel_ep_gather", [[24, 200]]),
    ),
    Mutant(
        "ep_scatter_2: rows taken from expert 0's run",
        EP,
        "                dest = tl.atomic_add(expert_start_loc + expert, 1)",
        "                dest = tl.atomic_add(expert_start_loc + 0 * expert, 1)",
        "_scatter",
        catalog_target("_fwd_kernel_ep_scatter_2", [[24, 256], [64, 256], [64, 2]]),
    ),
    Mutant(
        "w8a8 block-fp8 GEMM: N mask dropped from the store",
        GEMM,
        "    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)",
        "    mask = offs_cm[:, None] < M",
        "_block_fp8_matmul",
        catalog_target("_w8a8_block_fp8_matmul", [[24, 256], [200, 256]]),
    ),
    Mutant(
        "rsqrt on negative inputs (domain ignored)",
        "kernel_atlas.replay.values",
        '    if domain == "positive":',
        '    if domain == "positive (ignored)":',
        target=aten_target("aten::rsqrt", [[64]], ["float"]),
        patch=("kernel_atlas.replay.aten:make_tensor",),
        scenario="aten",
    ),
    Mutant(
        "integer output off by one in the timed call",
        "kernel_atlas.replay.aten",
        "        if not matmul_flags:\n            return overload(*positional, **keywords)",
        "        if not matmul_flags:\n            return overload(*positional, **keywords) + 1",
        target=aten_target("aten::argmax", [[8, 13], [], []], ["float", "Scalar", "Scalar"], ["", "1", "False"]),
        scenario="aten",
    ),
    Mutant(
        "tolerance from the first input's dtype (a float64 scalar makes aten::sub fail)",
        "kernel_atlas.replay.aten",
        '_compare_outputs(produced, reference, "tf32" if tf32 else None, values=comparable(name))',
        '_compare_outputs(produced, reference, next(str(x.dtype).rsplit(".", 1)[-1] for x in positional'
        ' if hasattr(x, "dtype")), values=comparable(name))',
        target=aten_target("aten::sub", [[], [64], []], ["double", "float", "Scalar"], ["", "", "1"]),
        scenario="aten",
    ),
    # a replay of another problem than the recorded one: the float64 reference runs the same op on
    # the same (wrong) inputs and agrees, so only a comparison with the recording catches these
    Mutant(
        "first tensor's leading dimension halved, recorded strides dropped",
        "kernel_atlas.replay.aten",
        "            value: Any = make_tensor(rec.dims, rec.dtype, device, rec.strides, bounds.get(i), gen, domain)",
        "            halved = (max(1, rec.dims[0] // 2), *rec.dims[1:]) if rec.dims and i == 0 else rec.dims\n"
        "            value: Any = make_tensor(halved, rec.dtype, device, None, bounds.get(i), gen, domain)",
        target=replace(
            aten_target("aten::mm", [[64, 32], [32, 48]], ["float", "float"]), input_strides="[[32,1],[1,32]]", args=()
        ),
        scenario="aten",
    ),
    Mutant(
        "every float scalar replaced by 1.0 (layer-norm eps 0.5 → 1)",
        "kernel_atlas.replay.aten",
        "            value = None if rec.kind == NONE else rec.value\n",
        "            value = None if rec.kind == NONE else (1.0 if isinstance(rec.value, float) else rec.value)\n",
        target=aten_target(
            "aten::native_layer_norm",
            [[4, 10, 20], [], [20], [20], []],
            ["float", "ScalarList", "float", "float", "Scalar"],
            ["", "[20]", "", "", "0.5"],
        ),
        scenario="aten",
    ),
    Mutant(
        "FlashAttention's causal mask at the top left (4 queries, 6 keys)",
        "kernel_atlas.replay.aten",
        "tril(s_k - s_q if bottom_right else 0)",
        "tril(0)",
        target=aten_target(
            "aten::_flash_attention_forward",
            [[1, 4, 2, 8], [1, 6, 2, 8], [1, 6, 2, 8], [], [], [], [], [], [], [], []],
            ["float", "float", "float", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
            ["", "", "", "", "", "4", "6", "0.", "True", "False", "0.25"],
        ),
        scenario="aten",
    ),
    Mutant(
        "attention stand-in's recorded scale replaced by 1",
        "kernel_atlas.replay.aten",
        '    scale, dropout = number("scale"), number("dropout_p") or 0.0',
        '    scale, dropout = 1.0, number("dropout_p") or 0.0',
        target=aten_target(
            "aten::_scaled_dot_product_efficient_attention",
            [[1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], [1, 2, 4, 6], [], [], [], []],
            ["float", "float", "float", "float", "Scalar", "Scalar", "Scalar", "Scalar"],
            ["", "", "", "", "False", "0.", "False", "0.3"],
        ),
        scenario="aten",
    ),
]

# The CI subset: one per kind of bug the issue names (masks, the timed launch, bounds, domains,
# integers, tolerance, another problem than the recorded one).
CI = (
    "fused_moe_kernel: K masks dropped",
    "fused_moe_kernel: wrong top_k in the timed launch",
    "compute_position: off-by-one mask",
    "write_req_to_token_pool: writes past the request's slice",
    "rsqrt on negative inputs (domain ignored)",
    "integer output off by one in the timed call",
    "tolerance from the first input's dtype (a float64 scalar makes aten::sub fail)",
    "first tensor's leading dimension halved, recorded strides dropped",
    "every float scalar replaced by 1.0 (layer-norm eps 0.5 → 1)",
)
