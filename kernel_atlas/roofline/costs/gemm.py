"""GEMMs: ATen matrix products and the GEMMs of libraries launched from Python (catalog entries)."""

from __future__ import annotations

import math

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.ingest.recorded import Arg, dtypes, scalar_type
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    broadcast_shape,
    concrete_int,
    cost_by_launcher_or_op,
    gemm_precision,
    inductor_launcher,
    no_tensors,
    optional_tensor_at,
    register,
    tensor_at,
    tensors_of,
)


def _gemm(
    call: Call,
    batch: int,
    m: int,
    n: int,
    k: int,
    inputs: list[Arg],
    out_itemsize: int,
    extra: str = "",
    out: Arg | None = None,
    runs_at: tuple[str, str] | None = None,
) -> Cost:
    """2·(B·)M·N·K FLOPs; `inputs` read once and the output written once: the recorded `out` at
    its stored bytes (`Arg.nbytes`), else (B·)M·N elements of `out_itemsize`. `runs_at`: the
    precision and unit it runs at, where not the inputs' on the matrix unit (`gemm_precision`)."""
    precision, unit = runs_at or gemm_precision(call, inputs[0])
    flops = 2.0 * batch * m * n * k
    written = out.nbytes if out is not None else batch * m * n * out_itemsize
    # an empty output (M, N or the batch 0) asks for no element: no operand is read
    read = sum(a.nbytes for a in inputs) if batch * m * n else 0
    b = f"{batch}·" if batch != 1 else ""
    output = f"{written} recorded" if out is not None else f"{b}{m}·{n}·{out_itemsize}"
    formula = f"2·{b}M·N·K = 2·{b}{m}·{n}·{k}; bytes = inputs {read} + output {output}{extra}"
    if not batch * m * n:
        formula += " (an empty output: no operand read)"
    return Cost(flops, read + written, precision, unit, formula)


@register(launchers=("aten::mm", "aten::_int_mm"))
def _mm(call: Call) -> Cost:
    a, b = tensor_at(call, 0, "self"), tensor_at(call, 1, "mat2")
    (m, k), (_, n) = a.dims, b.dims
    return _gemm(call, 1, m, n, k, [a, b], a.itemsize if a.precision != "int8" else 4)


@register(launchers=("aten::addmm", "aten::_addmm_activation"))
def _addmm(call: Call) -> Cost:
    bias, a, b = tensor_at(call, 0, "self"), tensor_at(call, 1, "mat1"), tensor_at(call, 2, "mat2")
    (m, k), (_, n) = a.dims, b.dims
    return _gemm(call, 1, m, n, k, [a, b, bias], a.itemsize, " (inputs include the bias)")


@register(launchers=("aten::linear",))
def _linear(call: Call) -> Cost:
    x, w = tensor_at(call, 0, "input"), tensor_at(call, 1, "weight")
    inputs = [x, w] + ([call.args[2]] if len(call.args) > 2 and call.args[2].is_tensor else [])
    m = math.prod(x.dims[:-1])
    n, k = w.dims
    return _gemm(call, 1, m, n, k, inputs, x.itemsize)


@register(launchers=("aten::matmul",))
def _matmul(call: Call) -> Cost:
    a, b = tensor_at(call, 0, "self"), tensor_at(call, 1, "other")
    if len(a.dims) < 2 or len(b.dims) < 2:
        raise NoCost("aten::matmul with a vector operand: see the mv/dot kernels it launches")
    batch = math.prod(broadcast_shape([a.dims[:-2], b.dims[:-2]]))
    return _gemm(call, batch, a.dims[-2], b.dims[-1], a.dims[-1], [a, b], a.itemsize)


@register(launchers=("aten::bmm",))
def _bmm(call: Call) -> Cost:
    a, b = tensor_at(call, 0, "self"), tensor_at(call, 1, "mat2")
    (batch, m, k), (_, _, n) = a.dims, b.dims
    return _gemm(call, batch, m, n, k, [a, b], a.itemsize)


@register(launchers=("aten::baddbmm",))
def _baddbmm(call: Call) -> Cost:
    c, a, b = tensor_at(call, 0, "self"), tensor_at(call, 1, "batch1"), tensor_at(call, 2, "batch2")
    (batch, m, k), (_, _, n) = a.dims, b.dims
    return _gemm(call, batch, m, n, k, [a, b, c], a.itemsize)


@register(launchers=("aten::_scaled_mm",))
def _scaled_mm(call: Call) -> Cost:
    a, b = tensor_at(call, 0, "self"), tensor_at(call, 1, "mat2")
    (m, k), (_, n) = a.dims, b.dims
    scales = [x for x in call.args[2:] if x.is_tensor]
    # (self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum): out_dtype is
    # recorded as a ScalarType code; not recorded (None: the inputs' dtype), a 2-byte result assumed
    code = concrete_int(call, 6)
    name = scalar_type(code)
    size = dtypes()[name].bytes if name else None
    if size is None:
        return _gemm(call, 1, m, n, k, [a, b, *scales], 2, " (scales included; 2-byte output assumed)")
    return _gemm(call, 1, m, n, k, [a, b, *scales], size, f" (scales included; out_dtype code {code})")


def _two_operand_gemm(call: Call, out_itemsize: int, what: str) -> Cost:
    """A [M, K] and the first later 2-D operand sharing K ([N, K] or [K, N]). The output is the
    first other recorded tensor of the product's shape [M, N] (DeepGEMM's `d`, a Triton kernel's
    C): written once at its dtype, never read; not recorded, it is written at `out_itemsize` and
    the formula says so. Every other recorded tensor (block scales, an accumulator `c`) is read
    once, whatever its size: a recorded output smaller than A had been counted as an input too,
    and a scale larger than A (M = 1) left out."""
    tensors = [a for a in tensors_of(call) if len(a.dims) == 2]
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            m, k = a.dims
            if k in b.dims and b is not a:
                n = b.dims[0] if b.dims[1] == k else b.dims[1]
                rest = [t for t in tensors_of(call) if t is not a and t is not b]
                out = next((t for t in rest if t.dims == (m, n)), None)
                reads = [t for t in rest if t is not out]
                if out is None:
                    assumed = f" ({what}; output not recorded: {out_itemsize}-byte elements assumed)"
                    return _gemm(call, 1, m, n, k, [a, b, *reads], out_itemsize, assumed)
                written = f" ({what}; output [{m}, {n}] {out.dtype} recorded, written once)"
                return _gemm(call, 1, m, n, k, [a, b, *reads], out.itemsize, written)
    raise NoCost(f"{call.what}: no A [M, K] / B [N, K] pair among the recorded shapes")


Product = tuple[int, int, int, int]  # (B, M, N, K)


def _products(tensors: list[Arg], as_stored: bool = False) -> dict[Product, tuple[int, int]]:
    """The A·B products an Inductor kernel's recorded tensors fit, each (B, M, N, K) with the
    positions of A and of its output: A a 2-D or 3-D tensor followed by a B of its rank whose
    batch agrees and whose inner dim is A's last, B [(B,) K, N] — or, `as_stored`, B [(B,) N, K],
    a weight as stored that the kernel reads transposed (a linear's `W`: Inductor passes the
    buffer, not the view) — with another tensor of the product's shape [(B,) M, N]: the output,
    the LAST such tensor, since Inductor orders in_ptr… before out_ptr… (an epilogue input of
    that shape — an expanded bias [M, N] of strides [0, 1], a residual — comes before it; the
    first had been taken, the bias written at M·N elements and the output read: +28 % bytes,
    campaign BR 3)."""
    fits: dict[Product, tuple[int, int]] = {}
    for i, a in enumerate(tensors):
        for j in range(i + 1, len(tensors)):
            b = tensors[j]
            if len(a.dims) not in (2, 3) or len(b.dims) != len(a.dims) or a.dims[:-2] != b.dims[:-2]:
                continue
            ns = [b.dims[-1]] if a.dims[-1] == b.dims[-2] else []
            if as_stored and a.dims[-1] == b.dims[-1]:
                ns.append(b.dims[-2])
            for n in ns:
                product = (*a.dims[:-1], n)
                outs = [o for o, t in enumerate(tensors) if o not in (i, j) and t.dims == product]
                if outs:
                    batch = a.dims[0] if len(a.dims) == 3 else 1
                    fits.setdefault((batch, a.dims[-2], n, a.dims[-1]), (i, outs[-1]))
    return fits


@register(rules=("inductor-template", "inductor-triton-bmm"))
def _inductor_template(call: Call) -> Cost:
    """An Inductor template GEMM (`triton_tem_fused_mm/addmm/bmm_…`, `triton_mm`, `triton_bmm`)
    launched under its own record (`inductor_launcher`), which records every kernel argument: A
    [(B,) M, K], B [(B,) K, N], any epilogue inputs (a bias, a residual) and the output [(B,) M,
    N], in an order that varies (a bias may come first; the output comes after the inputs).
    `_products` finds them; the shapes must give one (B, M, N, K), else no cost and why.
    2·(B·)M·N·K FLOPs; every recorded tensor once at its stored bytes (A, B, epilogue inputs read,
    the output written). The template's other ops (a convolution, flex attention) and a launch
    under another op keep their formulas."""
    if call.op_mapping not in ("matmul", "bmm") or not inductor_launcher(call.launcher):
        return cost_by_launcher_or_op(call)
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    fits = _products(tensors)
    shapes = [list(a.dims) for a in tensors]
    if not fits:
        raise NoCost(f"{call.what}: no A [M, K], B [K, N] and output [M, N] among the recorded shapes {shapes}")
    if len(fits) > 1:
        raise NoCost(f"{call.what}: the recorded shapes {shapes} fit more than one A·B product: M, N, K ambiguous")
    (batch, m, n, k), (a_at, out_at) = next(iter(fits.items()))
    inputs = [tensors[a_at], *(t for o, t in enumerate(tensors) if o not in (a_at, out_at))]  # A first: its precision
    what = " (an Inductor template: every recorded argument once, A, B and epilogue inputs read, the output written)"
    return _gemm(call, batch, m, n, k, inputs, tensors[out_at].itemsize, what, out=tensors[out_at])


def _reduction_sizes(call: Call) -> tuple[int, int] | None:
    """An Inductor reduction kernel's recorded `xnumel, r0_numel` (its last two arguments, after
    the tensors and any size symbols `ks0`…), else None (not recorded)."""
    last = max((i for i, a in enumerate(call.args) if a.is_tensor), default=-1)
    sizes = [concrete_int(call, i) for i in range(last + 1, len(call.args))][-2:]
    xnumel, r0_numel = sizes if len(sizes) == 2 else (None, None)
    return (xnumel, r0_numel) if xnumel is not None and r0_numel is not None else None


@register(rules=("inductor-gemv",))
def _inductor_gemv(call: Call) -> Cost:
    """An Inductor GEMV (`triton_red_fused_mm_…`, `triton_per_fused_bmm_…`): with coordinate-descent
    tuning Inductor decomposes an mm/bmm with M = 1 or N = 1 into a multiply and a sum over K, one
    reduction kernel under its own record (`inductor_launcher`), which records every argument —
    A, B (a weight as stored, [N, K], read transposed), epilogue inputs, the output — then
    `xnumel` (B·M·N outputs) and `r0_numel` (K). (B, M, N, K) as a template's (`_products`, B
    [K, N] or as stored [N, K]), held to the recorded xnumel and r0_numel where recorded: shapes
    that fit no product, or more than one, or whose product the sizes contradict (a split
    reduction's partial sums over part of K), are not costed, and say so. 2·(B·)M·N·K FLOPs;
    every recorded tensor once at its stored bytes (A, B and epilogue inputs read, the output
    written). Its math runs on the vector unit (tl.sum of products, no tl.dot) in fp32: the
    decomposition upcasts bf16/fp16 (`pw_cast_for_opmath`); fp64 stays fp64, integers integer
    math. A launch under another op keeps its formula."""
    if call.op_mapping not in ("matmul", "bmm") or not inductor_launcher(call.launcher):
        return cost_by_launcher_or_op(call)
    tensors = tensors_of(call)
    if not tensors:
        raise no_tensors(call)
    fits = _products(tensors, as_stored=True)
    shapes = [list(a.dims) for a in tensors]
    if not fits:
        raise NoCost(
            f"{call.what}: no A [M, K], B [K, N] (or [N, K] as stored) and output [M, N] among the recorded "
            f"shapes {shapes}"
        )
    sizes = _reduction_sizes(call)
    if sizes is not None:
        xnumel, r0_numel = sizes
        agreed = {key: at for key, at in fits.items() if key[0] * key[1] * key[2] == xnumel and key[3] == r0_numel}
        if not agreed:
            raise NoCost(
                f"{call.what}: the recorded shapes {shapes} give (B, M, N, K) {sorted(fits)}, which its recorded "
                f"xnumel {xnumel} (B·M·N) and r0_numel {r0_numel} (K) contradict (a split reduction's partial sums?)"
            )
        fits = agreed
    if len(fits) > 1:
        raise NoCost(f"{call.what}: the recorded shapes {shapes} fit more than one A·B product: M, N, K ambiguous")
    (batch, m, n, k), (a_at, out_at) = next(iter(fits.items()))
    a = tensors[a_at]
    inputs = [a, *(t for o, t in enumerate(tensors) if o not in (a_at, out_at))]
    precision = a.precision if a.precision in ("fp64", "int") else "int" if a.precision == "int8" else "fp32"
    what = " (an Inductor GEMV: every recorded argument once, A, B and epilogue inputs read, the output written)"
    out = tensors[out_at]
    return _gemm(call, batch, m, n, k, inputs, out.itemsize, what, out=out, runs_at=(precision, VECTOR))


@register(rules=("deepgemm", "triton-block-fp8-gemm"))
def _block_fp8_gemm(call: Call) -> Cost:
    return _two_operand_gemm(call, 2, "fp8 operands with block scales")


# DeepGEMM's m-grouped contiguous layout pads each expert's rows to this many (its
# `get_m_alignment_for_contiguous_layout()`, the kernel's BLOCK_M)
_DEEPGEMM_CONTIGUOUS_ALIGNMENT = 128


@register(rules=("deepgemm-grouped",))
def _grouped_deepgemm(call: Call) -> Cost:
    """DeepGEMM's m-grouped contiguous GEMM (`m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`, the
    expert GEMMs of SGLang's DeepEP MoE): lhs [M, K] holds every expert's rows back to back, each
    expert's segment padded to a multiple of 128 rows; rhs [G, N, K] the G local experts' weights;
    out [M, N] bf16. Which rows belong to which expert (`m_indices`, −1 on padding) is a value the
    trace does not record, so both numbers are upper bounds, and the formula says it is an
    estimate (the roofline's `estimate` column, the trust line): the FLOPs count the padding rows,
    whose 128-row blocks the kernel skips, and the bytes count the weights of every expert the
    layout can hold (each non-empty segment takes at least 128 rows: at most min(G, ⌈M/128⌉)).
    The masked layout (lhs [G, M_max, K], each expert's row count `masked_m` a value) and the
    k-grouped one are not costed."""
    tensors = tensors_of(call)
    rhs = next((a for a in tensors if len(a.dims) == 3 and a.precision != "fp32"), None)
    if rhs is None:
        raise NoCost(f"grouped DeepGEMM: no experts' weights [G, N, K] recorded ({[list(a.dims) for a in tensors]})")
    groups, n, k = rhs.dims
    lhs = next((a for a in tensors if len(a.dims) == 2 and a.dims[1] == k and a.precision != "fp32"), None)
    if lhs is None:
        if any(len(a.dims) == 3 and a is not rhs and a.dims[0] == groups and a.dims[2] == k for a in tensors):
            raise NoCost(
                "grouped DeepGEMM: the masked layout: each expert's row count (masked_m) is a value not recorded"
            )
        raise NoCost(f"grouped DeepGEMM: no lhs [M, {k}] recorded beside the weights {list(rhs.dims)}")
    m = lhs.dims[0]
    touched = min(groups, -(-m // _DEEPGEMM_CONTIGUOUS_ALIGNMENT))
    out = next((a for a in tensors if a is not lhs and a.dims == (m, n)), None)
    weights = [a for a in tensors if a.dims[:1] == (groups,) and len(a.dims) == 3]  # rhs and its block scales
    rows = [a for a in tensors if a is not lhs and a is not out and a.dims[:1] == (m,)]  # lhs scales, m_indices
    row_bytes = lhs.nbytes + sum(a.nbytes for a in rows)
    weight_bytes = sum(a.nbytes for a in weights) * touched / groups
    out_itemsize = out.itemsize if out is not None else 2  # bf16
    precision, unit = gemm_precision(call, lhs)
    formula = (
        "an upper bound, an estimate (the rows' experts, m_indices' values, not recorded): "
        f"2·M·N·K = 2·{m}·{n}·{k}, M counting each expert's padding to "
        f"{_DEEPGEMM_CONTIGUOUS_ALIGNMENT} rows (blocks the kernel skips); bytes = lhs and its row-wise "
        f"inputs {row_bytes} + weights and scales of at most min(G, ⌈M/{_DEEPGEMM_CONTIGUOUS_ALIGNMENT}⌉) "
        f"= {touched} of {groups} experts {weight_bytes:.0f} + output {m}·{n}·{out_itemsize}"
    )
    return Cost(2.0 * m * n * k, row_bytes + weight_bytes + m * n * out_itemsize, precision, unit, formula)


@register(rules=("dsv3-small-gemm",))
def _small_m_gemm(call: Call) -> Cost:
    tensors = [a for a in tensors_of(call) if len(a.dims) == 2]
    if len(tensors) >= 3:  # sgl-kernel passes (out, mat1, mat2): out last, where it is found by its
        # [M, N] shape and written at its dtype (the router GEMM's fp32), not paired as A
        call = Call(call.launcher, call.op_mapping, (*tensors[1:], tensors[0]), call.rule)
    return _two_operand_gemm(call, 2, "DeepSeek-V3 small-M GEMM")


def _scaled_gemm(call: Call, a_at: int, b_at: int, out: Arg | None, out_code: int | None, what: str) -> Cost:
    """A library GEMM a [M, K] × b [K, N] (b column-major, recorded [K, N]) with its scales and
    bias read as recorded; the output written at the recorded `out`'s dtype, else at the
    `out_dtype` argument's (a ScalarType code), else not costed."""
    a, b = tensor_at(call, a_at, "a"), tensor_at(call, b_at, "b")
    if len(a.dims) != 2 or len(b.dims) != 2 or a.dims[1] != b.dims[0]:
        raise NoCost(f"{call.what}: not a [M, K] × [K, N] pair ({list(a.dims)}, {list(b.dims)})")
    (m, k), n = a.dims, b.dims[1]
    others = [x for i, x in enumerate(call.args) if x.is_tensor and i not in (a_at, b_at) and x is not out]
    if out is not None:
        size, note = out.itemsize, f"{out.dtype} output recorded"
    else:
        name = scalar_type(out_code)
        if name is None:
            raise NoCost(f"{call.what}: output dtype (out_dtype code {out_code}) not recorded")
        size, note = dtypes()[name].bytes, f"out_dtype code {out_code}: {name}"
    return _gemm(call, 1, m, n, k, [a, b, *others], size, f" ({what}; scales and bias read; {note})")


# Library ops launched from Python (vLLM `_C::`/`_moe_C::`, sgl-kernel), by launcher: their
# argument orders are the libraries' own, so each launcher has its formula here.


@register(launchers=("_C::cutlass_scaled_mm",))
def _cutlass_scaled_mm(call: Call) -> Cost:
    """vLLM `cutlass_scaled_mm(out! [M, N], a [M, K], b [K, N], a_scales, b_scales, bias?)`."""
    out = tensor_at(call, 0, "out")
    return _scaled_gemm(call, 1, 2, out, None, "vLLM cutlass_scaled_mm")


@register(launchers=("sgl_kernel::fp8_scaled_mm", "sgl_kernel::int8_scaled_mm", "sgl_kernel::fp8_blockwise_scaled_mm"))
def _sgl_scaled_mm(call: Call) -> Cost:
    """sgl-kernel `fp8_scaled_mm` / `int8_scaled_mm(mat_a [M, K], mat_b [K, N], scales_a, scales_b,
    out_dtype, bias?)`, `fp8_blockwise_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype)`:
    the output [M, N] is returned (not recorded), of `out_dtype` (argument 4)."""
    return _scaled_gemm(call, 0, 1, None, concrete_int(call, 4), "sgl-kernel scaled mm")


@register(launchers=("sgl_kernel::bmm_fp8",))
def _bmm_fp8(call: Call) -> Cost:
    """sgl-kernel / FlashInfer `bmm_fp8(A [b, M, K], B [b, K, N] column-major, D! [b, M, N],
    A_scale, B_scale, workspace_buffer, cublas_handle, cuda_stream)`: A, B and the scales read, D
    written (found by its shape [b, M, N]); the cuBLAS workspace is not traffic of the product."""
    a, b = tensor_at(call, 0, "A"), tensor_at(call, 1, "B")
    if len(a.dims) != 3 or len(b.dims) != 3 or a.dims[0] != b.dims[0] or a.dims[2] != b.dims[1]:
        raise NoCost(f"{call.what}: not A [b, M, K] × B [b, K, N] ({list(a.dims)}, {list(b.dims)})")
    (batch, m, k), n = a.dims, b.dims[2]
    rest = [x for x in call.args[2:] if x.is_tensor]
    out = next((x for x in rest if x.dims == (batch, m, n)), None)
    if out is None:
        raise NoCost(f"{call.what}: no output D [{batch}, {m}, {n}] recorded")
    scales = [x for x in rest if x is not out and x.numel <= 1]
    return _gemm(call, batch, m, n, k, [a, b, *scales], out.itemsize, " (scales read; workspace not counted)")


@register(launchers=("_C::gptq_marlin_gemm", "sgl_kernel::gptq_marlin_gemm"))
def _marlin_gemm(call: Call) -> Cost:
    """Marlin weight-only quantized GEMM: a [M, K] (fp16/bf16) × b_q_weight (4 or 8-bit values
    packed into int32) → [M, N] at a's dtype. The argument order differs across versions (vLLM
    0.6: `(a, b_q_weight, b_scales, b_zeros, g_idx, perm, workspace, b_q_type, size_m, size_n,
    size_k, …)`; later `(a, c_or_none, b_q_weight, b_scales, global_scale, b_zeros, g_idx, perm,
    workspace, b_q_type, size_m, size_n, size_k, …)`), so M, N and K are the recorded
    `size_m, size_n, size_k` found as consecutive Concrete Inputs with M and K equal to a's axes,
    and the packed weight is the tensor holding K·N values of 4 or 8 bits. FLOPs 2·M·N·K at a's
    precision (the weights are dequantized into a's type: w4a16); bytes: every recorded tensor but
    an output read once (weights as packed, scales, zero points, g_idx, perm, workspace), the output
    [M, N] written."""
    a = tensor_at(call, 0, "a")
    if len(a.dims) != 2:
        raise NoCost(f"{call.what}: a is not [M, K] ({list(a.dims)})")
    m, k = a.dims
    values = [x.value if isinstance(x.value, int) and not isinstance(x.value, bool) else None for x in call.args]
    n = next((values[i + 1] for i in range(len(values) - 2) if (values[i], values[i + 2]) == (m, k)), None)
    if not n:
        raise NoCost(f"{call.what}: size_m, size_n, size_k not recorded beside a [{m}, {k}]")
    tensors = [x for i, x in enumerate(call.args) if i > 0 and x.is_tensor]
    packed = [x for x in tensors if x.precision == "int" and x.nbytes * 8 in (4 * k * n, 8 * k * n)]
    if not packed:
        raise NoCost(f"{call.what}: no packed weight of K·N = {k}·{n} 4- or 8-bit values recorded")
    bits = packed[0].nbytes * 8 // (k * n)
    c = optional_tensor_at(call, 1)  # the later order's c_or_none: an output buffer where recorded
    out = c if c is not None and c.dims == (m, n) and c.dtype == a.dtype else None
    read = [a, *(x for x in tensors if x is not out)]
    precision, unit = gemm_precision(call, a)
    flops = 2.0 * m * n * k
    read_bytes = sum(x.nbytes for x in read)
    written = m * n * a.itemsize
    formula = (
        f"2·M·N·K = 2·{m}·{n}·{k} (size_m, size_n, size_k recorded) at a's precision ({bits}-bit weights "
        f"dequantized); bytes = a, packed weights, scales and the rest {read_bytes} read + output {m}·{n}·{a.itemsize}"
    )
    return Cost(flops, read_bytes + written, precision, unit, formula)


@register(launchers=("_moe_C::moe_sum", "sgl_kernel::moe_sum", "sgl_kernel::moe_sum_reduce"))
def _moe_sum(call: Call) -> Cost:
    """The weighted experts' outputs summed over top-k: vLLM `moe_sum(input [T, k, H], output! [T,
    H])`, sgl-kernel `moe_sum(input, output!)`, `moe_sum_reduce(input, output!,
    routed_scaling_factor)`: the input read, the output written; one FLOP per element read (the
    reductions' convention)."""
    x, out = tensor_at(call, 0, "input"), tensor_at(call, 1, "output")
    if len(x.dims) != 3 or out.dims != (x.dims[0], x.dims[2]):
        raise NoCost(f"{call.what}: not input [T, k, H] and output [T, H] ({list(x.dims)}, {list(out.dims)})")
    tokens, k, hidden = x.dims
    formula = f"sum over k = {k}: {x.numel} elements read ({x.nbytes}), [{tokens}, {hidden}] written ({out.nbytes})"
    return Cost(float(x.numel), x.nbytes + out.nbytes, x.precision, VECTOR, formula)
