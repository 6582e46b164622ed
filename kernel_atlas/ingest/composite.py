"""What a composite MoE op (`vllm::moe_forward`, catalogs/costs.toml `[moe]`) encloses: the 3-D
tensors recorded on the ops inside it (the experts' weights, viewed at their stored dtype), its
top-k (`_topk`: from the enclosed TopK ops over the router's [T, E] scores), the buffers it
allocates (an enclosed `aten::empty`-like op's Concrete Inputs: size list and dtype code) and
whether one of its kernels names a gated activation (`swiGlu` fused into the first GEMM), as one
JSON text per composite call, for the launches whose CPU op is that call (`enclosed_shapes` in
kernels.parquet)."""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np
import pandas as pd

from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.columns import CPU_OP, HostTable


@lru_cache(maxsize=1)
def _catalog() -> tuple[frozenset[str], re.Pattern[str], dict[str, int], frozenset[str], re.Pattern[str], list]:
    moe = read_toml("costs.toml")["moe"]
    return (
        frozenset(moe["composites"]),
        re.compile(moe["topk_ops"]),
        {str(op): int(n) for op, n in moe.get("topk_integer", {}).items()},
        frozenset(moe["allocation_ops"]),
        re.compile(moe["gated_kernels"]),
        [(re.compile(pattern), float(bits)) for pattern, bits in moe["weight_bits"]],
    )


def _kernel_facts(name: str, gated: re.Pattern[str], bits: list) -> tuple[bool, float]:
    """(names a gated activation, the narrowest weight format it names in bits; inf: none)."""
    return bool(gated.search(name)), min((b for pattern, b in bits if pattern.search(name)), default=np.inf)


_SIZES = re.compile(r"^\[(\d+(?:, \d+)*)\]$")

# what one recorded op shows of its top-k: (its 2-D tensors as (position, [rows, width]), its
# integer Concrete Inputs by position)
TopKFacts = tuple[list[tuple[int, list[int]]], dict[int, int]]


def _features(shape: tuple[str | None, ...]) -> tuple[list[list], TopKFacts, list | None]:
    """(3-D tensors as [dims, dtype], what the op shows of a top-k (`TopKFacts`), the [sizes, dtype
    code] an allocation's Concrete Inputs name: `['[888, 4]', '3', ...]`) of one recorded shape."""
    dims, types = json.loads(shape[0] or "[]"), json.loads(shape[1] or "[]")
    tensors = [[d, t] for d, t in zip(dims, types, strict=False) if isinstance(d, list) and len(d) == 3]
    concrete = json.loads(shape[3] or "[]")
    matrices = [(i, d) for i, d in enumerate(dims) if isinstance(d, list) and len(d) == 2]
    integers = {i: int(v) for i, v in enumerate(concrete) if isinstance(v, str) and v.isdigit()}
    sizes = _SIZES.match(concrete[0]) if concrete and isinstance(concrete[0], str) else None
    code = concrete[1] if len(concrete) > 1 and isinstance(concrete[1], str) and concrete[1].isdigit() else None
    allocated = [[int(x) for x in sizes.group(1).split(", ")], int(code)] if sizes and code else None
    return tensors, (matrices, integers), allocated


def _topk(facts: TopKFacts, experts: int, nth: int) -> int | None:
    """k of one enclosed TopK op, where it selects over all E experts: the op records the router's
    scores [R, E] (a grouped top-k's group-wise steps run over [T, G, E/G] and [T, G], and their k
    is the groups', not the experts': DeepSeek's top-2 per group and top-4 groups before the top-8).
    Then k is the width of its recorded [R, k] tensors (the top-k weights and ids an op such as
    vLLM's `topk_softmax(topk_weights!, topk_ids!, token_expert_indices!, gating_output)` records
    among its arguments, one width); else its `nth` integer Concrete Input (costs.toml `[moe]
    topk_integer`: a fused grouped top-k's `n_group, topk_group, topk`), or with `nth` −1 the
    integer right after the scores (`topk(self, k, dim, largest, sorted)`); else none."""
    matrices, integers = facts
    scores = next(((i, d) for i, d in matrices if d[1] == experts), None)
    if scores is None:
        return None
    at, (rows, _) = scores
    widths = {d[1] for _, d in matrices if d[0] == rows and 1 <= d[1] < experts}
    if len(widths) == 1:
        return widths.pop()
    if nth > 0:
        values = [integers[i] for i in sorted(integers)]
        k = values[nth - 1] if len(values) >= nth else None
    else:
        k = integers.get(at + 1)
    return k if k is not None and 1 <= k <= experts else None


def enclosed_shapes(
    host: HostTable, cpu_op_idx: np.ndarray, kernel_names: pd.Categorical | None = None
) -> pd.Categorical:
    """Per launch: the JSON summary of its composite CPU op's enclosed ops, missing otherwise.
    `kernel_names` (per launch, as `cpu_op_idx`): the call's kernels, to find a gated activation."""
    composites, topk, topk_integer, allocation_ops, gated_kernels, weight_bits = _catalog()
    named = np.array([n in composites for n in host.names] + [False])
    has = cpu_op_idx >= 0
    codes = np.full(len(cpu_op_idx), -1, dtype=np.int64)
    codes[has] = host.name_code[cpu_op_idx[has]]
    calls = np.unique(cpu_op_idx[has & named[codes]])
    if len(calls) == 0:
        return pd.Categorical.from_codes(np.full(len(cpu_op_idx), -1), categories=pd.Index([], dtype=object))
    # per op name: 0 not a TopK op, −1 k right after the scores, n > 0 k its n-th integer argument
    is_topk = np.array([topk_integer.get(n, -1) if topk.search(n) else 0 for n in host.names], dtype=np.int64)
    is_allocation = np.array([n in allocation_ops for n in host.names])
    ops = np.flatnonzero((host.family == CPU_OP) & (host.shape >= 0))
    features: dict[int, tuple[list[list], TopKFacts, list | None]] = {}
    texts: dict[int, str] = {}
    gated: set[int] = set()
    bits: dict[int, float] = {}
    if kernel_names is not None:  # what the calls' kernels name: a gated activation, weight formats
        facts = [_kernel_facts(str(n), gated_kernels, weight_bits) for n in kernel_names.categories]
        named_gated = np.array([f[0] for f in facts] + [False])
        named_bits = np.array([f[1] for f in facts] + [np.inf])
        kernel_codes = np.asarray(kernel_names.codes, dtype=np.int64)
        gated = set(np.unique(cpu_op_idx[named_gated[kernel_codes] & has]).tolist())
        narrow = has & np.isfinite(named_bits[kernel_codes])
        per_call = pd.Series(named_bits[kernel_codes][narrow]).groupby(cpu_op_idx[narrow]).min()
        bits = {int(c): float(b) for c, b in per_call.items()}
    for thread in np.unique(host.thread[calls]).tolist():
        mine = ops[host.thread[ops] == thread]
        mine = mine[np.argsort(host.ts[mine], kind="stable")]
        starts = host.ts[mine]
        for call in calls[host.thread[calls] == thread].tolist():
            lo = np.searchsorted(starts, host.ts[call], side="left")
            hi = np.searchsorted(starts, host.end[call], side="right")
            rows = mine[lo:hi][mine[lo:hi] != call]
            experts = _experts(host, call)
            texts[call] = _summary(host, rows, features, is_topk, is_allocation, call in gated, bits.get(call), experts)
    # one category per distinct summary; each launch takes its call's
    distinct = sorted(set(texts.values()))
    position = {text: i for i, text in enumerate(distinct)}
    code_of_row = np.full(len(host.ts) + 1, -1, dtype=np.int64)  # the last: a launch without a CPU op
    code_of_row[list(texts)] = [position[t] for t in texts.values()]
    return pd.Categorical.from_codes(code_of_row[cpu_op_idx], categories=distinct)


def _experts(host: HostTable, call: int) -> int | None:
    """E, the width of the composite's router logits [T, E] (its argument 1: `moe_forward(
    hidden_states, router_logits, …)`), where recorded."""
    if host.shape[call] < 0:
        return None
    dims = json.loads(host.shapes[int(host.shape[call])][0] or "[]")
    logits = dims[1] if len(dims) > 1 else None
    return int(logits[1]) if isinstance(logits, list) and len(logits) == 2 else None


def _summary(
    host: HostTable,
    rows: np.ndarray,
    features: dict[int, tuple[list[list], TopKFacts, list | None]],
    is_topk: np.ndarray,
    is_allocation: np.ndarray,
    gated: bool,
    weight_bits: float | None,
    experts: int | None,
) -> str:
    tensors: list[list] = []
    allocated: list[list] = []
    ks: list[int] = []
    for row in rows.tolist():
        code = int(host.shape[row])
        if code not in features:
            features[code] = _features(host.shapes[code])
        found, facts, buffer = features[code]
        tensors += [t for t in found if t not in tensors]
        if experts is not None and is_topk[host.name_code[row]]:
            k = _topk(facts, experts, int(is_topk[host.name_code[row]]))
            if k is not None and k not in ks:
                ks.append(k)
        if buffer is not None and is_allocation[host.name_code[row]]:
            allocated.append(buffer)
    # one k over all experts; TopK ops that disagree leave it unknown, with what they said
    summary: dict = {"topk": ks[0] if len(ks) == 1 else None, "tensors": tensors}
    if len(ks) > 1:
        summary["topk_candidates"] = sorted(ks)
    if allocated:
        summary["allocated"] = allocated
    if gated:
        summary["gated_kernel"] = True
    if weight_bits is not None:
        summary["weight_bits"] = weight_bits
    return json.dumps(summary, separators=(",", ":"))
