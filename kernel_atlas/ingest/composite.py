"""What a composite MoE op (`vllm::moe_forward`, catalogs/costs.toml `[moe]`) encloses: the 3-D
tensors recorded on the ops inside it (the experts' weights, viewed at their stored dtype) and its
top-k (the first integer Concrete Input of an enclosed TopK op), as one JSON text per composite
call, for the launches whose CPU op is that call (`enclosed_shapes` in kernels.parquet)."""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np
import pandas as pd

from kernel_atlas.core.paths import read_toml
from kernel_atlas.ingest.columns import CPU_OP, HostTable


@lru_cache(maxsize=1)
def _catalog() -> tuple[frozenset[str], re.Pattern[str]]:
    moe = read_toml("costs.toml")["moe"]
    return frozenset(moe["composites"]), re.compile(moe["topk_ops"])


def _features(shape: tuple[str | None, ...]) -> tuple[list[list], int | None]:
    """(3-D tensors as [dims, dtype], the first integer concrete input) of one recorded shape."""
    dims, types = json.loads(shape[0] or "[]"), json.loads(shape[1] or "[]")
    tensors = [[d, t] for d, t in zip(dims, types, strict=False) if isinstance(d, list) and len(d) == 3]
    first = next((int(v) for v in json.loads(shape[3] or "[]") if isinstance(v, str) and v.isdigit()), None)
    return tensors, first


def enclosed_shapes(host: HostTable, cpu_op_idx: np.ndarray) -> pd.Categorical:
    """Per launch: the JSON summary of its composite CPU op's enclosed ops, missing otherwise."""
    composites, topk = _catalog()
    named = np.array([n in composites for n in host.names] + [False])
    has = cpu_op_idx >= 0
    codes = np.full(len(cpu_op_idx), -1, dtype=np.int64)
    codes[has] = host.name_code[cpu_op_idx[has]]
    calls = np.unique(cpu_op_idx[has & named[codes]])
    if len(calls) == 0:
        return pd.Categorical.from_codes(np.full(len(cpu_op_idx), -1), categories=pd.Index([], dtype=object))
    is_topk = np.array([bool(topk.search(n)) for n in host.names])
    ops = np.flatnonzero((host.family == CPU_OP) & (host.shape >= 0))
    features: dict[int, tuple[list[list], int | None]] = {}
    texts: dict[int, str] = {}
    for thread in np.unique(host.thread[calls]).tolist():
        mine = ops[host.thread[ops] == thread]
        mine = mine[np.argsort(host.ts[mine], kind="stable")]
        starts = host.ts[mine]
        for call in calls[host.thread[calls] == thread].tolist():
            lo = np.searchsorted(starts, host.ts[call], side="left")
            hi = np.searchsorted(starts, host.end[call], side="right")
            texts[call] = _summary(host, mine[lo:hi][mine[lo:hi] != call], features, is_topk)
    # one category per distinct summary; each launch takes its call's
    distinct = sorted(set(texts.values()))
    position = {text: i for i, text in enumerate(distinct)}
    code_of_row = np.full(len(host.ts) + 1, -1, dtype=np.int64)  # the last: a launch without a CPU op
    code_of_row[list(texts)] = [position[t] for t in texts.values()]
    return pd.Categorical.from_codes(code_of_row[cpu_op_idx], categories=distinct)


def _summary(
    host: HostTable, rows: np.ndarray, features: dict[int, tuple[list[list], int | None]], is_topk: np.ndarray
) -> str:
    tensors: list[list] = []
    k = None
    for row in rows.tolist():
        code = int(host.shape[row])
        if code not in features:
            features[code] = _features(host.shapes[code])
        found, first = features[code]
        tensors += [t for t in found if t not in tensors]
        if k is None and is_topk[host.name_code[row]]:
            k = first
    return json.dumps({"topk": k, "tensors": tensors}, separators=(",", ":"))
