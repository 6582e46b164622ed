"""Fused mixture-of-experts: the experts' GEMMs from recorded weights or from the buffers a fused
op allocates; routing."""

from __future__ import annotations

import json
from functools import lru_cache

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.recorded import NONE, SCALAR, TENSOR, Arg, dtypes, scalar_type
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    gemm_precision,
    no_tensors,
    register,
    tensor_at,
    tensors_of,
)
from kernel_atlas.roofline.costs.pointwise import split_written, written_arguments


@lru_cache(maxsize=1)
def _layouts() -> list[list[tuple[str, str]]]:
    """catalogs/costs.toml `[fused_experts] layouts`: per known version, the (name, kind) of each
    argument after topk_ids."""
    layouts = read_toml("costs.toml")["fused_experts"]["layouts"]
    return [[(slot.split(":")[0], slot.split(":")[1]) for slot in layout] for layout in layouts]


def _fits(arg: Arg, kind: str) -> bool:
    value = arg.value if arg.kind == SCALAR else None
    if kind == "tensor?":
        return arg.kind in (TENSOR, NONE) or (arg.kind == SCALAR and value is None)
    if arg.kind != SCALAR:
        return kind == "str?" and arg.kind == NONE
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str) or (kind == "str?" and value is None)


def _quantisation(call: Call) -> tuple[str | None, bool]:
    """(the `use_…` flag set True, or "" for none, where every known layout that fits the recorded
    arguments says the same; whether any fits). None: no layout fits, or they disagree."""
    rest = call.args[5:]
    said: set[str] = set()
    for layout in _layouts():
        if len(rest) < len(layout) or not all(_fits(a, kind) for a, (_, kind) in zip(rest, layout, strict=False)):
            continue
        named = zip(rest, layout, strict=False)
        flags = (name for a, (name, _) in named if name.startswith("use_") and a.value is True)
        said.add(next(flags, ""))
    return (said.pop() if len(said) == 1 else None), bool(said)


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
    of SGLang/vLLM's fused_experts and of the seed catalog's fused_moe_kernel params). int4
    weights (`use_int4_w4a16`) pack two values per byte along the reduced axis: w1 [E, N1, D/2],
    w2 [E, D, N2/2] uint8, so N2 is twice the recorded axis, and the weight-only quantized GEMMs
    run at the activations' precision (w4a16: the weights are dequantized into x's type). The
    quantisation flags (`_quantisation`, by the catalog's known layouts) say the same of int8
    weights: `use_int8_w8a16` runs at x's precision, `use_int8_w8a8` at int8's; int8 weights whose
    flags fit no known layout take int8's, an estimate the formula says. Expert parallelism (vLLM's
    `expert_map`, a 1-D integer tensor [G] over G > E global experts: global id → local index or
    −1): of the T·k picks only those landing on the E local experts are computed (the kernel
    writes zeros for the others' rows), E/G of them under uniform routing, an estimate."""
    x, w1, w2 = tensor_at(call, 0, "hidden_states"), tensor_at(call, 1, "w1"), tensor_at(call, 2, "w2")
    topk = tensor_at(call, 3, "topk_weights")
    if (len(x.dims), len(w1.dims), len(w2.dims)) != (2, 3, 3):
        raise NoCost(f"{call.what}: not the fused_experts layout (hidden [T, D], w1 [E, N1, D], w2 [E, D, N2])")
    tokens, hidden = x.dims
    experts, n1, reduced = w1.dims
    # two int4 values per byte: the reduced axes of a packed integer w1 [E, N1, D/2] and w2 [E, D, N2/2]
    pack = 2 if w1.precision == "int" and reduced * 2 == hidden and w2.precision == "int" else 1
    n2 = w2.dims[2] * pack
    k = topk.dims[-1]
    # expert parallelism: the global experts of vLLM's expert_map [G]
    maps = [a.dims[0] for a in call.args[5:] if a.is_tensor and len(a.dims) == 1 and a.precision == "int"]
    total = max((g for g in maps if g > experts), default=experts)
    local = experts / total
    picks = tokens * k * local  # the routed rows computed on this rank's experts
    flops = 2.0 * picks * n1 * hidden + 2.0 * picks * hidden * n2
    touched = expected_experts(total, k, tokens) * local / experts  # of the local experts: E·(1−(1−k/G)^T)
    read = x.nbytes + touched * (w1.nbytes + w2.nbytes)
    written = x.nbytes
    # the expert-ordered intermediates, at the activations' dtype: the up-projection writes
    # [T·k, N1], the down-projection reads [T·k, N2] and writes [T·k, D], the sum over the k
    # experts reads that back (the activation between them is an op of its own); under expert
    # parallelism both GEMMs write every row (zeros for other ranks' picks), the down-projection
    # reads only the local ones
    intermediates = tokens * k * (n1 + local * n2 + 2 * hidden) * x.itemsize
    mode, known = _quantisation(call)
    # weight-only formats run at x's precision: packed int4, the flags' w8a16/w4a16, and unsigned
    # 8-bit weights unpacked (GPTQ/AWQ-style storage; int8 w8a8 weights are signed)
    dequantised = pack == 2 or w1.precision == "int" or mode in ("use_int8_w8a16", "use_int4_w4a16")
    precision, unit = gemm_precision(call, x if dequantised else w1)
    packed = f" (int4 weights, two per byte: N2 = 2·{w2.dims[2]}; computed at x's {precision})" if pack == 2 else ""
    if dequantised and pack == 1:
        how = mode or "unsigned 8-bit weights"
        packed += f" ({how}: weights dequantised, computed at x's {precision})"
    elif w1.precision == "int8" and mode is None:
        why = "fit no known layout" if not known else "are read differently by the layouts they fit"
        packed += f" (quantisation flags {why}: int8 w8a8 assumed, an estimate; w8a16 would run at x's precision)"
    if total > experts:
        share = (
            f"·{experts}/{total}",
            f" (expert parallelism: {experts} of {total} experts local by expert_map [{total}], "
            f"{experts}/{total} of the T·k picks under uniform routing, an estimate)",
        )
    else:
        share = ("", "")
    expected = "E·(1−(1−k/G)^T)" if total > experts else "E·(1−(1−k/E)^T)"
    formula = (
        f"2·T·k·N1·D + 2·T·k·D·N2 = 2·{tokens}·{k}{share[0]}·{n1}·{hidden} + 2·{tokens}·{k}{share[0]}·{hidden}·{n2}"
        f"{packed}{share[1]}; bytes = x + out + {touched:.3f} of the expert weights "
        f"({experts_read(experts, total, k, tokens, expected)}) + intermediates "
        f"T·k·(N1 + {'E/G·' if total > experts else ''}N2 + 2·D)·{x.itemsize} = {intermediates:.0f}"
    )
    return Cost(flops, read + written + intermediates, precision, unit, formula)


def expected_experts(experts: int, k: int, tokens: int) -> float:
    """Distinct experts a batch touches when each of T tokens picks k of E experts uniformly and
    independently: E·(1 − (1 − k/E)^T)."""
    return experts * (1.0 - (1.0 - min(k, experts) / experts) ** tokens)


def experts_read(experts: int, total: int, k: int, tokens: int, expected: str) -> str:
    """The formula's words for the experts whose weights a call reads, of its E local experts (of G
    = `total` global ones): which were picked is a value the trace does not record, so the count
    is the uniform-routing expectation (`expected_experts`), an estimate, between the fewest the
    recorded shapes allow (every token picks the same k: k, or under expert parallelism
    max(0, k − (G − E)) of them local) and the most (min(E, T·k)). Only where the two meet is the
    count exact: k ≥ G (every expert picked), or one token without expert parallelism (exactly k)
    — T·k ≥ E is not enough, as the tokens may all pick the same experts."""
    picks = min(k, total)
    most = min(experts, tokens * picks)
    fewest = min(max(0, picks - (total - experts)), most)
    if fewest == most:
        why = f"k ≥ {'G' if total > experts else 'E'}: every expert" if picks == total else "one token: exactly its k"
        return f"experts read: {most} of {experts}, {why}"
    return (
        f"experts read: not recorded, an estimate: the expected distinct experts under uniform routing "
        f"{expected}; between {fewest} and {most} of {experts} whatever the routing"
    )


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
    weights from the ops it encloses (the k of its TopK ops over all E experts, ingest/composite.py
    `_topk`; the weights viewed at their stored dtype)."""
    x, logits = tensor_at(call, 0, "hidden_states"), tensor_at(call, 1, "router_logits")
    if len(x.dims) != 2 or len(logits.dims) != 2:
        raise NoCost(f"{call.what}: not hidden_states [T, H] and router_logits [T, E]")
    (tokens, hidden), experts = x.dims, logits.dims[-1]
    enclosed = json.loads(call.enclosed) if call.enclosed else {}
    k = enclosed.get("topk")
    weights = [(d, t) for d, t in enclosed.get("tensors", []) if d[0] == experts and t in dtypes()]
    if not weights and enclosed.get("allocated"):  # no weights recorded: the buffers it allocates
        return _moe_from_buffers(call, x, logits, enclosed)
    if not k and enclosed.get("topk_candidates"):
        raise NoCost(
            f"{call.what}: top-k ambiguous: the TopK ops over the router's {experts} experts give "
            f"k = {enclosed['topk_candidates']}"
        )
    if not k:
        raise NoCost(f"{call.what}: top-k not recorded inside the call (no TopK op over the router's scores)")
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
        f"bytes = {touched:.2f} of {experts} experts ({experts_read(experts, experts, k, tokens, 'E·(1−(1−k/E)^T)')}) "
        f"× w1 {list(w1.dims)} + w2 {list(w2.dims)} "
        f"{w1.dtype} as stored (block scales not recorded, not counted) + x, out, router logits {activations}"
    )
    precision, unit = gemm_precision(call, x)
    return Cost(flops, weight_bytes + activations, precision, unit, formula)


def _code_kind(code: int) -> str | None:
    """What an allocation inside a fused op holds, by its recorded torch ScalarType code
    (catalogs/dtypes.toml `scalar_types`): "float", "integer" (signed), "bytes" (uint8: raw,
    packed or block-scaled formats), or None (bool, a code not catalogued)."""
    name = scalar_type(code)
    if name is None or dtypes()[name].torch == "bool":
        return None
    if dtypes()[name].torch == "uint8":
        return "bytes"
    return "integer" if dtypes()[name].precision in ("int", "int8") else "float"


def _moe_from_buffers(call: Call, x: Arg, logits: Arg, enclosed: dict) -> Cost:
    """moe_forward whose experts' weights are not recorded (fused FlashInfer/TRT-LLM MoE): k from
    the top-k buffers it allocates (ids [T, k] of an integer type and weights [T, k] of a float
    type), I from its expert-ordered intermediate [P, I] (P ≥ T·k rows, I ≠ H): a float dtype gives
    I, bytes (uint8) take the format its block-scale buffer fits (S scales for P' rows of I values,
    one per 16 or 32, P ≤ P' < P + 128), a [P, 2I] beside it or a kernel naming a gated activation
    says the up-projection is gated; the weights' bytes from the format the call's kernels name."""
    (tokens, hidden), experts = x.dims, logits.dims[-1]
    buffers = [(list(d), int(c)) for d, c in enclosed["allocated"]]
    ids = {d[1] for d, c in buffers if len(d) == 2 and d[0] == tokens and _code_kind(c) == "integer"}
    scores = {d[1] for d, c in buffers if len(d) == 2 and d[0] == tokens and _code_kind(c) == "float"}
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
    kinds = {_code_kind(c) for c in codes}
    if "float" in kinds:
        inter, how = width, f"intermediate [P, {width}] allocated"
    elif kinds == {"bytes"}:
        padded = max(d[0] for d, _ in rows if d[1] == width)
        scales = [d[0] for d, c in buffers if len(d) == 1 and _code_kind(c) == "bytes"]
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
    precision, unit = gemm_precision(call, x)
    return Cost(flops, weight_bytes + activations, precision, unit, formula)


@lru_cache(maxsize=1)
def _topk_catalog() -> tuple[dict[str, int], dict[str, str]]:
    """catalogs/costs.toml `[moe]`: the TopK ops whose k is their n-th integer argument
    (`topk_integer`, as ingest reads it), and those that return their top-k weights and ids
    (`topk_returned`: the weights' dtype)."""
    moe = read_toml("costs.toml")["moe"]
    return {str(op): int(n) for op, n in moe.get("topk_integer", {}).items()}, dict(moe.get("topk_returned", {}))


def _nth_integer(call: Call, nth: int) -> int | None:
    """The call's n-th integer Concrete Input, counted among the integers (bools are not), as
    ingest/composite.py `_topk` reads a fused top-k's k; None where fewer were recorded."""
    values = [a.value for a in call.args if a.kind == SCALAR and type(a.value) is int]
    return values[nth - 1] if 0 < nth <= len(values) else None


# the top-k ids a routing op returns: int32 (sgl-kernel's moe_fused_gate, SGLang's Triton router)
_TOPK_ID_BYTES = 4


def _returned_topk(call: Call, elements: int, weights_dtype: str) -> Cost:
    """A TopK op that returns its top-k (costs.toml `[moe] topk_returned`: sgl-kernel's
    `moe_fused_gate(input [T, E], bias [E], num_expert_group, topk_group, topk, …)` → weights
    [T, k] fp32, ids [T, k] int32): its inputs read once, the two [T, k] outputs written once, k
    its catalogued integer (`topk_integer`). k not recorded (a catalog entry records no values):
    counted at 1, the least, and the formula says so."""
    tensors = tensors_of(call)
    scores = next((a for a in tensors if len(a.dims) == 2), None)
    if scores is None:
        raise NoCost(f"{call.what}: no router scores [T, E] recorded ({[list(a.dims) for a in tensors]})")
    rows, experts = scores.dims
    read = sum(a.nbytes for a in tensors)
    per_row = dtypes()[weights_dtype].bytes + _TOPK_ID_BYTES
    nth = _topk_catalog()[0].get(call.launcher, 0)
    k = _nth_integer(call, nth)
    if k is not None and 1 <= k <= experts:
        said = f"k = {k}, the recorded topk: its integer no. {nth}"
    else:
        k = 1
        said = f"k not recorded: counted at 1, the least; at most E = {experts}: {rows * experts * per_row}"
    written = rows * k * per_row
    sizes = f"{dtypes()[weights_dtype].bytes} + {_TOPK_ID_BYTES}"
    formula = (
        f"estimate: {elements} elements; bytes = inputs {read} read + top-k weights and ids returned "
        f"[T, k]·({sizes}) = {rows}·{k}·{per_row} = {written} written ({said})"
    )
    return Cost(float(elements), read + written, scores.precision, VECTOR, formula)


def _router_gemm(call: Call, tensors: list[Arg]) -> Cost | None:
    """A routing op that computes the router's logits itself: its first two tensors x [T, D] and the
    router's weight [E, D] (one last axis, 1 < E < D, the two not alike) — SGLang's Triton
    `fused_moe_router_kernel(input, moe_router_weight, topk_weights!, topk_ids!, …)` (grok). A GEMM,
    2·T·E·D FLOPs in fp32 (both operands upcast, summed without tl.dot: the fp32 vector peak; its
    large-batch top-1 variant's tl.dot would take TF32's, a kernel name the call does not carry;
    either way these calls are memory-bound at E ≪ D), the logits kept on chip: x and the weight
    read once, only the top-k weights [T, k] fp32 and ids [T, k] int32 written. k from those
    outputs where recorded among the arguments (a Triton kernel writes through them), else not
    recorded: counted at 1, the least. None: not this layout."""
    if len(tensors) < 2:
        return None
    x, weight = tensors[0], tensors[1]
    floats = x.precision not in ("int", "int8") and weight.precision not in ("int", "int8")
    if not floats or len(x.dims) != 2 or len(weight.dims) != 2 or x.dims == weight.dims:
        return None
    (tokens, hidden), experts = x.dims, weight.dims[0]
    if weight.dims[1] != hidden or not 1 < experts < hidden:
        return None
    outputs = tensors[2:]  # the top-k weights and ids [T, k], where recorded: one k below E
    widths = {a.dims[1] if len(a.dims) == 2 and a.dims[0] == tokens else 0 for a in outputs}
    if outputs and (len(widths) != 1 or not 1 <= min(widths) < experts):
        return None
    read = x.nbytes + weight.nbytes
    if outputs:
        k = widths.pop()
        written = sum(a.nbytes for a in outputs)
        said = f"outputs [T, k] recorded: k = {k}, written {written}"
    else:
        k, per_row = 1, 4 + _TOPK_ID_BYTES
        written = tokens * per_row
        said = (
            f"top-k weights fp32 + ids int32 [T, k]·8, k not recorded: counted at 1, the least, "
            f"{tokens}·{per_row} = {written} (at most k = E: {tokens * experts * per_row})"
        )
    formula = (
        f"router GEMM 2·T·E·D = 2·{tokens}·{experts}·{hidden} (fp32 math, the logits kept on chip); bytes = "
        f"x {x.nbytes} + router weight {weight.nbytes} read + {said}"
    )
    return Cost(2.0 * tokens * experts * hidden, read + written, "fp32", VECTOR, formula)


@register(ops=("moe_gate", "moe_align"))
def _routing(call: Call) -> Cost:
    """MoE routing (top-k of the router logits, sorting tokens by expert): an estimate, one op per
    recorded element. A launcher whose recorded arguments include its outputs (costs.toml
    `written_arguments`: vLLM's topk_softmax(topk_weights!, topk_ids!, token_expert_indices!,
    gating_output)): its inputs read once and its outputs written once; one that returns its
    top-k (`[moe] topk_returned`: sgl-kernel's moe_fused_gate): its inputs and the [T, k] weights
    and ids (`_returned_topk`; as many bytes as it read had been written, 8× the outputs at T 512,
    E 256, k 8); the router's own GEMM fused with its top-k (`_router_gemm`: it had been one FLOP
    per element and its inputs written back, 2× the bytes); others: every recorded input read
    once and as many bytes written (ids, weights, offsets), an estimate said in the formula."""
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    elements = sum(a.numel for a in tensors)
    spec = written_arguments().get(call.launcher)
    if spec is not None:
        read_from, written_to, where = split_written(call, spec)
        read, written = sum(a.nbytes for a in read_from), sum(a.nbytes for a in written_to)
        formula = (
            f"estimate: {elements} elements; bytes = inputs {read} read + outputs {written} written (arguments {where})"
        )
        return Cost(float(elements), read + written, tensors[0].precision, VECTOR, formula)
    returned = _topk_catalog()[1].get(call.launcher)
    if returned is not None:
        return _returned_topk(call, elements, returned)
    router = _router_gemm(call, tensors)
    if router is not None:
        return router
    read = sum(a.nbytes for a in tensors)
    formula = f"estimate: {elements} elements; bytes = inputs {read} read + as many written"
    return Cost(float(elements), 2.0 * read, tensors[0].precision, VECTOR, formula)
