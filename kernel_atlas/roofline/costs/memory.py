"""Memory ops: copies, fills, gathers and scatters, KV-cache writes, concatenations, rotary
embeddings, arange — the bytes they move."""

from __future__ import annotations

import math

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.ingest.recorded import NONE, SCALAR, TENSOR_LIST, Arg, dtypes, scalar_type
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    broadcast_shape,
    concrete_int,
    inductor_launcher,
    no_tensors,
    optional_tensor_at,
    register,
    tensor_at,
    tensor_lists,
    tensors_of,
)


def _index_select(call: Call, table: Arg, index: Arg) -> Cost:
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


def _memory_lists(call: Call) -> Cost:
    """foreach copies and fills: the first list is written, the others read."""
    lists, size, precision, note = tensor_lists(call)
    written = lists[0].numel * size
    read = sum(a.numel for a in lists[1:]) * size + sum(a.nbytes for a in tensors_of(call))
    if call.op_mapping in ("fill_", "arange"):
        read = 0
    return Cost(0.0, read + written, precision, VECTOR, f"reads {read} + writes {written} bytes{note}")


@register(ops=("copy_", "fill_", "arange", "index", "index_select", "index_put_", "gather", "scatter"), aten=True)
def _memory(call: Call) -> Cost:
    if any(a.kind == TENSOR_LIST and a.dims for a in call.args):
        return _memory_lists(call)
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    op = call.op_mapping
    if op in ("fill_", "arange"):
        written = tensors[0].nbytes
        return Cost(0.0, written, tensors[0].precision, VECTOR, f"writes {written} bytes")
    if op == "copy_" and len(tensors) >= 2:
        dst, src = tensors[0], tensors[1]
        return Cost(0.0, src.nbytes + dst.nbytes, dst.precision, VECTOR, f"reads {src.nbytes} + writes {dst.nbytes}")
    if call.launcher == "aten::index_select" and len(tensors) >= 2:
        return _index_select(call, tensors[0], tensors[-1])
    if op == "index_select" and len(tensors) >= 2:
        table, index = tensors[0], tensors[-1]
        row = table.nbytes // max(table.dims[0], 1) if table.dims else table.itemsize
        moved = index.numel * row
        return Cost(
            0.0,
            index.nbytes + 2 * moved,
            table.precision,
            VECTOR,
            f"{index.numel} rows of {row} bytes read and written + index {index.nbytes} read",
        )
    if op == "gather" and len(tensors) >= 2:
        # gather(self, dim, index[, out]): one element of self read per index, the output written
        source, index = tensors[0], next((a for a in tensors[1:] if a.precision == "int"), tensors[1])
        moved = index.numel * source.itemsize
        return Cost(
            0.0,
            index.nbytes + 2 * moved,
            source.precision,
            VECTOR,
            f"{index.numel} elements of {source.itemsize} bytes read and written, index {index.nbytes} read",
        )
    if op == "kv_cache_write" and len(tensors) >= 2:
        return _kv_cache_write(call, tensors)
    if op in ("index_put_", "scatter") and len(tensors) >= 2:
        # the destination (the largest tensor: a pool) is only touched where written
        destination = max(tensors, key=lambda a: a.nbytes)
        others = [a for a in tensors if a is not destination]
        indices = sum(a.nbytes for a in others if a.precision == "int")
        values = sum(a.nbytes for a in others if a.precision != "int")
        return Cost(
            0.0,
            indices + 2.0 * values,
            destination.precision,
            VECTOR,
            f"values {values} read and written into the destination, indices {indices} read",
        )
    read = sum(a.nbytes for a in tensors)
    if len(tensors) == 1 and (call.launcher in _SAME_SIZE_COPIES or inductor_launcher(call.launcher)):
        return Cost(0.0, 2.0 * read, tensors[0].precision, VECTOR, f"inputs {read} read and written once")
    # what the op writes is not known here (bucketize writes int64 positions, repeat and pad more
    # than they read, an index op with its indices unrecorded fewer): a guess, flagged
    return Cost(
        0.0,
        2.0 * read,
        tensors[0].precision,
        VECTOR,
        f"inputs {read} read and written once (an estimate: its outputs taken as large as its inputs)",
    )


# ops whose one recorded tensor is copied whole into an output of its size and dtype
_SAME_SIZE_COPIES = (
    "aten::clone",
    "aten::contiguous",
    "aten::reshape",
    "aten::flatten",
    "aten::transpose",
    "aten::permute",
    "aten::lift_fresh_copy",
    "aten::roll",
    "aten::flip",
)


# int64, the dtype torch gives index tensors: a TensorList records its elements' shapes, not dtypes
_INDEX_ITEMSIZE = 8
_MASK_DTYPES = ("bool", "unsigned char")  # a tensor of these dtypes indexes as a mask


def _indexed(call: Call, table: Arg) -> tuple[int, int, str] | None:
    """What ATen's advanced indexing (`index`, `index_put_`) selects of `self` (`table`) with the
    recorded indices (argument 1, `Tensor?[]`): the elements selected, the indices' bytes and the
    formula's words; None where the indices are not recorded (newer PyTorch records a `Tensor?[]`
    as `[]`). Index tensors index self's axes from the first and broadcast together; the result
    is their broadcast shape times self's axes they leave (torch's rule: the elements are as many
    wherever the broadcast axes go). An empty shape in the list is a None (its axis kept whole).
    A bool mask indexes as many axes as it has and selects its true elements, which the trace does
    not hold: all of them are taken, an upper bound said as an estimate — and so for a list
    element of a mask's shape (self's axes where it stands), whose dtype is not recorded."""
    arg = call.args[1] if len(call.args) > 1 else None
    if arg is not None and arg.kind == TENSOR_LIST and arg.dims:
        elements: list[tuple[tuple[int, ...], str]] = [(shape, "") for shape in arg.dims]
    elif arg is not None and arg.is_tensor:
        elements = [(arg.dims, arg.dtype)]
    else:
        return None
    dims = tuple(table.dims)
    axis, kept, index_bytes = 0, 1, 0
    shapes: list[tuple[int, ...]] = []  # each index's shape as it broadcasts (a mask: its elements)
    notes = []
    for shape, dtype in elements:
        if not shape:  # None: the axis kept whole
            kept *= dims[axis] if axis < len(dims) else 1
            axis += 1
            continue
        span = len(shape)
        index_bytes += math.prod(shape) * (dtypes()[dtype].bytes if dtype else _INDEX_ITEMSIZE)
        mask = dtype in _MASK_DTYPES if dtype else tuple(dims[axis : axis + span]) == shape
        if mask:
            shapes.append((math.prod(shape),))
            maybe = "a bool mask" if dtype else "a bool mask or int64 indices (a TensorList's dtypes are not recorded)"
            notes.append(f"{list(shape)} is {maybe}: every position taken as selected, an upper bound")
            axis += span
        else:
            shapes.append(shape)
            axis += 1
    if axis > len(dims):
        raise NoCost(f"{call.what}: {len(elements)} indices recorded for a self of {len(dims)} axes")
    broadcast = broadcast_shape(shapes)
    rank = len(broadcast)
    for i in range(rank):  # right-aligned, each axis of one size besides 1s
        if len({s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}) > 1:
            raise NoCost(f"{call.what}: index shapes {shapes} do not broadcast together")
    count = math.prod(broadcast) * kept * math.prod(dims[axis:])
    words = f"indices {[list(s) for s, _ in elements]} (int64 unless recorded) select {count} elements of self"
    if notes:
        words += " (an estimate: " + "; ".join(notes) + ")"
    return count, index_bytes, words


@register(launchers=("aten::index", "aten::_unsafe_index"))
def _index(call: Call) -> Cost:
    """index(self, indices): the elements the indices select (`_indexed`) read from self and
    written as the output, the indices read. Indices not recorded: not costed — the output's size
    is theirs (it had been costed as self read and written whole: 50 MB at 500 % of the roofline)."""
    table = tensor_at(call, 0, "self")
    selected = _indexed(call, table)
    if selected is None:
        raise NoCost(
            f"{call.what}: the indices are not recorded (a `Tensor?[]` recorded as `[]`): how many elements "
            "of self are gathered is theirs"
        )
    count, index_bytes, words = selected
    moved = count * table.itemsize
    formula = f"{words}: {moved} read from self and {moved} written + indices {index_bytes} read"
    return Cost(0.0, 2 * moved + index_bytes, table.precision, VECTOR, formula)


@register(launchers=("aten::index_put_", "aten::index_put", "aten::_index_put_impl_", "aten::_unsafe_index_put"))
def _index_put(call: Call) -> Cost:
    """index_put_(self, indices, values, accumulate[, unsafe]): the values read, the elements the
    indices select (`_indexed`) written into self — read too where `accumulate` adds into them —
    and the indices read; self is touched only there. Indices not recorded (`[]`): the elements
    written taken as the values' (they broadcast to them), the indices not counted, an estimate;
    with a 0-d value as well, not costed.
    (The indices had been taken for a foreach op's list, self read whole: 2,179,328 B for 262,656.)"""
    table = tensor_at(call, 0, "self")
    values = optional_tensor_at(call, 2)
    if values is None:
        raise NoCost(f"{call.what}: input 2 (values) has no recorded shape")
    selected = _indexed(call, table)
    if selected is None and not values.dims:  # a 0-d value (`x[idx] = 1`) fills as many as the indices select
        raise NoCost(f"{call.what}: the indices are not recorded (a `Tensor?[]` recorded as `[]`) and the value is 0-d")
    if selected is None:
        count, index_bytes = values.numel, 0
        words = (
            f"indices not recorded (a `Tensor?[]` recorded as `[]`): not counted, the values' {values.numel} "
            "elements taken for those written"
        )
    else:
        count, index_bytes, words = selected
    accumulate = call.args[3].flag() if len(call.args) > 3 else None
    written = count * table.itemsize
    updated = written if accumulate else 0  # accumulate: each element written is read first
    how = {True: "accumulated: read and written", False: "written", None: "written (accumulate not recorded)"}
    formula = f"{words}: values {values.nbytes} read, {written} {how[accumulate]} into self"
    if selected is not None:
        formula += f" + indices {index_bytes} read"
    return Cost(0.0, values.nbytes + written + updated + index_bytes, table.precision, VECTOR, formula)


# the dtype argument of a copy to another dtype (a ScalarType code in Concrete Inputs), by launcher
# and recorded arity: _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format),
# to.dtype(self, dtype, non_blocking, copy, memory_format), to.device(self, device, dtype, non_blocking,
# copy, memory_format), to.dtype_layout(self, dtype, layout, device, pin_memory, non_blocking, copy,
# memory_format); to.other(self, other, non_blocking, copy, memory_format) takes other's dtype
_DTYPE_AT = {("aten::_to_copy", 7): 1, ("aten::to", 5): 1, ("aten::to", 6): 2, ("aten::to", 8): 1}


@register(launchers=("aten::_to_copy", "aten::to"))
def _to_dtype(call: Call) -> Cost:
    """_to_copy / to: self read at its dtype, a copy of its elements written at the dtype argument's
    (an fp32 → bf16 cast had been counted at fp32 both ways: 8,388,608 B for 6,291,456). A dtype
    recorded as None beside other Concrete Inputs keeps self's; no Concrete Inputs recorded:
    self's assumed, said. The precision is the output's."""
    source = tensor_at(call, 0, "self")
    args = call.args
    other = args[1] if call.launcher == "aten::to" and len(args) == 5 and args[1].is_tensor else None
    at = _DTYPE_AT.get((call.launcher, len(args)))
    code = concrete_int(call, at) if at is not None else None
    if other is not None:
        name, how = other.dtype, "the other tensor's dtype"
    elif scalar_type(code) is not None:
        name, how = scalar_type(code), f"dtype argument {code}"
    elif code is None and at is not None and any(a.text for a in args if a.kind == SCALAR):
        name, how = source.dtype, "dtype None: self's"
    else:
        why = f"dtype {code} not in catalogs/dtypes.toml" if code is not None else "dtype not recorded"
        name, how = source.dtype, f"{why}: self's assumed"
    read = source.nbytes
    size = dtypes()[str(name)].bytes
    written = source.numel * size
    formula = f"self {read} read + {source.numel} elements written at {size} B ({how}) {written}"
    return Cost(0.0, read + written, dtypes()[str(name)].precision, VECTOR, formula)


# KV-cache writes are libraries' ops (vLLM's `reshape_and_cache`, SGLang's `set_kv_buffer`): their
# branch finds the caches by size, not by ATen's positions
register(ops=("kv_cache_write",))(_memory)


# a KV cache's dtype argument (vLLM's `kv_cache_dtype`: "auto", "fp8", "fp8_e4m3", "fp8_e5m2") naming
# the format a byte (uint8) cache holds
_FP8_CACHE = ("fp8",)


def _kv_cache_write(call: Call, tensors: list[Arg]) -> Cost:
    """Keys/values written into a KV cache, which is touched only where written. The caches are the
    largest tensor and those of as many elements: vLLM's `reshape_and_cache(key, value, key_cache
    [blocks, H, d/x, page, x], value_cache [blocks, H, d, page], slot_mapping, kv_cache_dtype,
    k_scale, v_scale)` holds K and V in caches of one size and two shapes (the V cache had been
    counted as values, 1.3 GB). The values (the other float tensors of more than one element: key
    and value, kv_c and k_pe) are read at their dtype and written at the cache's (an fp8 cache: one
    byte each); slot indices and one-element scales read once. The precision is the cache's; a byte
    cache's is the format its dtype argument names (fp8), else the values'."""
    largest = max(tensors, key=lambda a: a.nbytes)
    caches = [a for a in tensors if a.numel == largest.numel]
    others = [a for a in tensors if not any(a is c for c in caches)]
    values = [a for a in others if a.precision != "int" and a.numel > 1]
    read_once = [a for a in others if not any(a is v for v in values)]  # slot indices, scales
    read = sum(a.nbytes for a in values)
    written = sum(a.numel for a in values) * largest.itemsize
    small = sum(a.nbytes for a in read_once)
    precision = largest.precision
    if precision == "int" and largest.itemsize == 1:  # raw bytes: the format is the dtype argument's
        named = any(a.kind == SCALAR and isinstance(a.value, str) and a.value.startswith(_FP8_CACHE) for a in call.args)
        precision = "fp8" if named else (values[0].precision if values else precision)
    formula = (
        f"values {read} read, written into {len(caches)} cache(s) at {largest.itemsize} B per element "
        f"({written}); slot indices and scales {small} read"
    )
    return Cost(0.0, read + written + small, precision, VECTOR, formula)


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
    are not rotated. The cache `[max_pos, rotary_dim]` narrower than a head (partial rotary,
    rotary_dim < head_size): 3 FLOP per rotated element, rotary_dim of each head; FlashInfer's
    [T, H, d] kernel still loads and stores whole heads, vLLM's flat one (below) touches only the
    rotated part. The [T] positions are not counted (T·8 bytes beside the q/k traffic)."""
    tensors = tensors_of(call)
    cache_at = next((i for i, a in enumerate(tensors) if len(a.dims) == 2), len(tensors))
    cache = tensors[cache_at] if cache_at < len(tensors) else None
    rotated = [a for a in tensors[:cache_at] if len(a.dims) == 3]
    half = len(rotated) // 2
    if half >= 2 and len(rotated) % 2 == 0 and all(rotated[i].dims == rotated[half + i].dims for i in range(half)):
        rotated = rotated[:half]
    whole_heads = bool(rotated)  # FlashInfer's [T, H, d] layout: every head element loaded and stored
    if rotated:
        head, note = rotated[0].dims[-1], ""
    else:
        rotated, cache, head, note = _rotary_2d(call)
    tokens = rotated[0].dims[0]
    row = cache.nbytes // cache.dims[0] if cache is not None and cache.dims[0] else 0
    width = cache.dims[-1] if cache is not None else head
    rot = width if 0 < width < head else head  # partial rotary: the cache's width, rotary_dim
    elements = sum(a.numel for a in rotated) * rot // head
    moved = sum(a.nbytes for a in rotated) * (1 if whole_heads else rot / head)
    part = f" (partial rotary: {rot} of each head's {head})" if rot < head else ""
    formula = (
        f"3 FLOP × {elements} rotated q/k elements{part}; bytes = q/k {moved:.0f} read and written "
        f"+ {tokens} cache rows of {row}{note}"
    )
    return Cost(3.0 * elements, 2.0 * moved + tokens * row, rotated[0].precision, VECTOR, formula)


def _rotary_2d(call: Call) -> tuple[list[Arg], Arg | None, int, str]:
    """vLLM `_C::rotary_embedding` / sgl-kernel `rotary_embedding(positions [T], query [T, H_q·d],
    key [T, H_kv·d], head_size, cos_sin_cache [max_pos, rotary_dim], is_neox)`: the query and key
    (the first two float [T, ·] tensors after the positions; the query alone where the key is
    None), the cache (a 2-D tensor of other rows) and the head size (its Concrete Input; not
    recorded: the cache's width, whole heads)."""
    tensors = tensors_of(call)
    positions = next((a for a in tensors if len(a.dims) == 1 and a.precision == "int"), None)
    if positions is None:
        raise NoCost(f"{call.what}: no [tokens, heads, dim] query/key or [tokens] positions recorded")
    tokens = positions.dims[0]
    flat = [a for a in tensors if len(a.dims) == 2 and a.precision != "int"]
    # key=None (vLLM's Optional key, an MLA rope on the query alone): the query is all that turns
    no_key = len(call.args) > 2 and call.args[2].kind == NONE and call.args[1].is_tensor
    wanted = 1 if no_key else 2
    rotated = [a for a in flat if a.dims[0] == tokens][:wanted]
    if len(rotated) < wanted:
        raise NoCost(f"{call.what}: no [tokens, H·d] query and key recorded apart (a packed qkv cannot be split)")
    cache = next((a for a in flat if a.dims[0] != tokens), None)
    head = concrete_int(call, 3)
    if head is None or head <= 0 or any(a.dims[1] % head for a in rotated):
        width = cache.dims[-1] if cache is not None else 0
        return rotated, cache, width or rotated[0].dims[1], " (head_size not recorded: the cache's width taken)"
    return rotated, cache, head, ""


# aten::arange's overloads by recorded arity: the number of leading bounds (end; start, end;
# start, end, step) and where the dtype argument is, without an `out=` tensor (arange(end, dtype,
# layout, device, pin_memory), arange.start(start, end, dtype, …), arange.start_step(start, end,
# step, dtype, …)) and with one (arange.out(end, *, out), arange.start_out(start, end, step, *, out))
_ARANGE = {5: (1, 1), 6: (2, 2), 7: (3, 3)}
_ARANGE_OUT = {2: 1, 4: 3}


@register(launchers=("aten::arange",))
def _arange(call: Call) -> Cost:
    """arange writes ⌈(end − start) / step⌉ values and reads nothing. The count comes from its
    recorded start, end and step (Concrete Inputs), not from an `out=` tensor, which is recorded
    before the op resizes it (`[0]`: costed "writes 0 bytes", SOL 0 %); the dtype is the out
    tensor's, else the dtype argument's (a ScalarType code), else int64 for integer bounds and
    fp32 otherwise (torch's default dtype). Bounds not recorded: the out tensor as recorded
    where it holds any element, else not costed."""
    args = call.args
    out = args[-1] if args and args[-1].is_tensor else None
    if out is not None:
        count, dtype_at = _ARANGE_OUT.get(len(args), 0), None
    else:
        count, dtype_at = _ARANGE.get(len(args), (0, None))
    numbers = [a.value for a in args[:count]]
    if not count or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
        if out is not None and out.numel:
            return Cost(
                0.0, out.nbytes, out.precision, VECTOR, f"writes {out.nbytes} bytes (start/end/step not recorded)"
            )
        raise NoCost(f"{call.what}: start, end and step not recorded (an out= tensor is recorded before it is resized)")
    start, end, step = (0, numbers[0], 1) if count == 1 else (*numbers[:2], numbers[2] if count == 3 else 1)
    if not step:
        raise NoCost(f"{call.what}: step 0")
    elements = max(0, math.ceil((end - start) / step))
    if out is not None:
        name, how = out.dtype, "the out tensor's dtype"
    else:
        name = scalar_type(concrete_int(call, dtype_at)) if dtype_at is not None else None
        how = "dtype argument"
        if name is None:
            integral = all(isinstance(v, int) for v in numbers)
            name, how = ("long int", "integer bounds: int64") if integral else ("float", "float bounds: fp32")
    size = dtypes()[name].bytes
    written = elements * size
    formula = f"⌈({end} − {start}) / {step}⌉ = {elements} values written at {size} B ({how}): {written} bytes"
    return Cost(0.0, written, dtypes()[name].precision, VECTOR, formula)
