"""Copies, gathers and concatenations: bytes moved."""

from __future__ import annotations

import math

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.ingest.recorded import Arg
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    concrete_int,
    register,
    tensor_lists,
    tensors_of,
)


def index_select_cost(call: Call, table: Arg, index: Arg) -> Cost:
    """index_select(self, dim, index): the output is self with axis `dim` (negative: from the end)
    cut to the index's length; the slices selected are read, the output written, the index read.
    `dim` not recorded (Concrete Inputs): 0, the embedding case, assumed and said."""
    dim = concrete_int(call, 1)
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


def memory_lists_cost(call: Call) -> Cost:
    """foreach copies and fills: the first list is written, the others read."""
    lists, size, precision, note = tensor_lists(call)
    written = lists[0].numel * size
    read = sum(a.numel for a in lists[1:]) * size + sum(a.nbytes for a in tensors_of(call))
    if call.op_mapping in ("fill_", "arange"):
        read = 0
    return Cost(0.0, read + written, precision, VECTOR, f"reads {read} + writes {written} bytes{note}")


@register(ops=("cat",))
def _cat(call: Call) -> Cost:
    """cat/stack: every element of the input list read once, the result (as large) written once."""
    lists, size, precision, note = tensor_lists(call)
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
    tensors = tensors_of(call)
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
    tensors = tensors_of(call)
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
