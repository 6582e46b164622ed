"""Serving-engine bookkeeping and quantisation kernels of SGLang, re-implemented with their
launch shape: `write_req_to_token_pool_triton`, `create_flashinfer_kv_indices_triton` and
`compute_position_kernel` (one program per request, 512-wide blocks) and
`_per_token_group_quant_fp8` (one program per group, all leading dims kept).

The recorded shapes give the pool, the number of requests and (where recorded) the total of
new tokens; lengths the recording does not hold are assumed and stated. Outputs sit in guarded
buffers (a pool pre-filled with a sentinel), so a write past a request's slice fails the check.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.ingest.recorded import TENSOR, tensor_shapes
from kernel_atlas.replay.aten import KERNEL, PIPELINE, Case
from kernel_atlas.replay.checks import combine, compare, guarded, inside_guard
from kernel_atlas.replay.configs import traced_warps
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import (
    activation_dtype,
    compute_dtype,
    guard_cpu_bytes,
    guard_programs,
    interpreting,
    label,
    scaled,
)
from kernel_atlas.replay.values import generator, randn

BLOCK = 512


@triton.jit
def write_req_to_token_pool_kernel(
    req_to_token,
    req_pool_indices,
    pre_lens,
    seq_lens,
    extend_lens,
    out_cache_loc,
    stride: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """req_to_token[req, pre_len : seq_len] = out_cache_loc[this request's slice]."""
    pid = tl.program_id(0)
    req = tl.load(req_pool_indices + pid)
    pre = tl.load(pre_lens + pid)
    seq = tl.load(seq_lens + pid)
    start = tl.zeros((), dtype=tl.int64)
    for i in range(pid):
        start += tl.load(extend_lens + i)
    for block in range(tl.cdiv(seq - pre, BLOCK_SIZE)):
        offs = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < seq - pre
        value = tl.load(out_cache_loc + start + offs, mask=mask)
        tl.store(req_to_token + req * stride + pre + offs, value, mask=mask)


@triton.jit
def create_kv_indices_kernel(
    req_to_token,
    req_pool_indices,
    page_kernel_lens,
    kv_indptr,
    kv_start_idx,
    kv_indices,
    stride: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """kv_indices[kv_indptr[b] : +len_b] = req_to_token[req_b, start_b : start_b + len_b]."""
    pid = tl.program_id(0)
    req = tl.load(req_pool_indices + pid)
    out_start = tl.load(kv_indptr + pid)
    start = tl.load(kv_start_idx + pid).to(tl.int32)
    length = tl.load(page_kernel_lens + pid)
    for block in range(tl.cdiv(length, BLOCK_SIZE)):
        offs = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < length
        value = tl.load(req_to_token + req * stride + start + offs, mask=mask)
        tl.store(kv_indices + out_start + offs, value, mask=mask)


@triton.jit
def compute_position_kernel(positions, extend_start_loc, extend_prefix_lens, extend_seq_lens, BLOCK_SIZE: tl.constexpr):
    """positions[start_b + i] = prefix_b + i; extend_start_loc[b] = Σ earlier extend lengths."""
    pid = tl.program_id(0)
    prefix = tl.load(extend_prefix_lens + pid)
    length = tl.load(extend_seq_lens + pid)
    start = tl.zeros((), dtype=tl.int64)
    for i in range(pid):
        start += tl.load(extend_seq_lens + i)
    for block in range(tl.cdiv(length, BLOCK_SIZE)):
        offs = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(positions + start + offs, prefix + offs, mask=offs < length)
    tl.store(extend_start_loc + pid, start)


@triton.jit
def per_token_group_quant_fp8_kernel(y, y_q, y_s, group_size, eps, fp8_min, fp8_max, BLOCK_SIZE: tl.constexpr):
    """One program per group of `group_size` values: scale = max|y| / fp8_max, q = y / scale."""
    g = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < group_size
    values = tl.load(y + g * group_size + cols, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(values)), eps)
    scale = absmax / fp8_max
    q = tl.clamp(values / scale, fp8_min, fp8_max)
    tl.store(y_q + g * group_size + cols, q.to(y_q.dtype.element_ty), mask=mask)
    tl.store(y_s + g, scale)


def _warps(target: Any, device: str, default: int = 4) -> tuple[int, str]:
    warps = traced_warps(target, device)
    return (warps, f"num_warps={warps} (from the traced block)") if warps else (default, f"num_warps={default}")


def _split(total: int, parts: int) -> list[int]:
    """`total` split into `parts` near-equal positive lengths."""
    base, extra = divmod(max(total, parts), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _pool(target: Any, device: str, scale: float) -> dict[str, Any]:
    """The req_to_token pool (recorded shape, scaled), sentinel-filled, and the request count."""
    found = tensor_shapes(target.args)
    pool = next((s for s in found if len(s) == 2), None)
    if pool is None:  # no pool of a made-up size
        raise NotReplayable("needs the req_to_token pool [rows, stride] recorded")
    rows, stride = scaled(pool[0], scale), scaled(pool[1], scale)
    guard_cpu_bytes(device, 4.0 * rows * stride, "req_to_token pool")
    vectors = [s[0] for s in found if len(s) == 1]
    batch = max(1, min(vectors[0] if vectors else 4, rows))
    return {"rows": rows, "stride": stride, "batch": batch, "pool": guarded((rows, stride), torch.int32, device)}


@register(rules=("sglang-req-to-token",))
def _write_req_to_token(target: Any, device: str, scale: float) -> Case:
    p = _pool(target, device, scale)
    rows, stride, batch, pool = p["rows"], p["stride"], p["batch"], p["pool"]
    found = tensor_shapes(target.args)
    recorded_total = found[-1][0] if len(found) >= 6 and len(found[-1]) == 1 else None
    total = min(scaled(recorded_total, scale) if recorded_total else batch * stride // 4, batch * (stride - 1))
    extend = torch.tensor(_split(total, batch), dtype=torch.int64)
    gen_cpu = torch.Generator().manual_seed(0)
    pre = (torch.rand(batch, generator=gen_cpu) * (stride - extend)).long()
    seq = pre + extend
    req_pool = torch.randperm(rows, generator=gen_cpu)[:batch]
    out_cache_loc = torch.randperm(max(4 * total, 1), generator=gen_cpu)[:total]
    on = {k: v.to(device) for k, v in {"pre": pre, "seq": seq, "extend": extend, "req": req_pool}.items()}
    loc = inside_guard(out_cache_loc.to(device))
    warps, config = _warps(target, device)

    def run() -> None:
        write_req_to_token_pool_kernel[(batch,)](
            pool.tensor, on["req"], on["pre"], on["seq"], on["extend"], loc, stride=stride, BLOCK_SIZE=BLOCK,
            num_warps=warps,
        )  # fmt: skip

    def check() -> tuple[str, str]:
        run()
        rows_of = torch.repeat_interleave(req_pool, extend)
        cols_of = torch.cat([torch.arange(int(a), int(b)) for a, b in zip(pre, seq, strict=True)])
        flat = (rows_of * stride + cols_of).to(device)
        written = pool.tensor.flatten()[flat]
        untouched = pool.written() - total
        verdict = compare(written, loc.to(torch.int32), "out_cache_loc slices")
        if verdict[0] == "pass" and untouched:
            verdict = ("fail", f"{untouched} pool entries written outside the requests' slices")
        return pool.check(verdict)

    assumed = f"{batch} request(s), {total} new tokens"
    text = f"Triton write_req_to_token_pool ({batch} programs, BLOCK_SIZE={BLOCK}); assumed {assumed}"
    return Case(run, label(text, device, scale), check, timed=KERNEL, config=f"BLOCK_SIZE={BLOCK} {config}")


@register(rules=("sglang-kv-indices",))
def _kv_indices(target: Any, device: str, scale: float) -> Case:
    p = _pool(target, device, scale)
    rows, stride, batch, pool = p["rows"], p["stride"], p["batch"], p["pool"]
    gen_cpu = torch.Generator().manual_seed(0)
    pool.tensor.copy_(torch.randint(0, 1 << 30, (rows, stride), generator=gen_cpu, dtype=torch.int32))
    lens = torch.randint(max(stride // 4, 1), max(stride // 2, 2), (batch,), generator=gen_cpu, dtype=torch.int32)
    req_pool = torch.randperm(rows, generator=gen_cpu)[:batch]
    indptr = torch.zeros(batch + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    on = {"lens": lens.to(device), "req": req_pool.to(device), "indptr": indptr.to(device)}
    starts = torch.zeros(batch, dtype=torch.int64, device=device)
    kv_indices = guarded((int(indptr[-1]),), torch.int32, device)
    warps, config = _warps(target, device)

    def run() -> None:
        create_kv_indices_kernel[(batch,)](
            pool.tensor, on["req"], on["lens"], on["indptr"], starts, kv_indices.tensor, stride=stride,
            BLOCK_SIZE=BLOCK, num_warps=warps,
        )  # fmt: skip

    def check() -> tuple[str, str]:
        run()
        expected = torch.cat([pool.tensor[int(r), : int(n)] for r, n in zip(req_pool, lens, strict=True)])
        return kv_indices.check(compare(kv_indices.tensor, expected, "concatenated req_to_token rows"))

    assumed = f"{batch} request(s) of {int(lens.min())}–{int(lens.max())} KV tokens"
    text = f"Triton create_flashinfer_kv_indices ({batch} programs); assumed {assumed}"
    return Case(run, label(text, device, scale), check, timed=KERNEL, config=f"BLOCK_SIZE={BLOCK} {config}")


@register(rules=("sglang-compute-position",))
def _positions(target: Any, device: str, scale: float) -> Case:
    found = tensor_shapes(target.args)
    batch = found[0][0] if found and len(found[0]) == 1 and found[0][0] > 1 else 8
    gen_cpu = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, 4096, (batch,), generator=gen_cpu)
    lengths = torch.randint(1, max(2, scaled(2048, scale)), (batch,), generator=gen_cpu)
    on = {"prefix": prefix.to(device), "lengths": lengths.to(device)}
    positions = guarded((int(lengths.sum()),), torch.int64, device)
    starts = guarded((batch,), torch.int64, device)
    warps, config = _warps(target, device)

    def run() -> None:
        compute_position_kernel[(batch,)](
            positions.tensor, starts.tensor, on["prefix"], on["lengths"], BLOCK_SIZE=BLOCK, num_warps=warps
        )

    def check() -> tuple[str, str]:
        run()
        expected = torch.cat([torch.arange(int(n)) + int(p) for p, n in zip(prefix, lengths, strict=True)])
        return combine(
            positions.check(compare(positions.tensor, expected, "prefix + arange per request")),
            starts.check(compare(starts.tensor, torch.cumsum(lengths, 0) - lengths, "exclusive cumsum of lengths")),
        )

    assumed = f"{batch} request(s), prefixes < 4096, {int(lengths.min())}–{int(lengths.max())} new tokens each"
    text = f"Triton compute_position ({batch} programs); assumed {assumed}"
    return Case(run, label(text, device, scale), check, timed=KERNEL, config=f"BLOCK_SIZE={BLOCK} {config}")


@register(rules=("per-token-group-quant",))
def _group_quant(target: Any, device: str, scale: float) -> Case:
    found = tensor_shapes(target.args)
    if not found:  # it had been replayed as a (1024, 7168) input, said nowhere
        raise NotReplayable("needs the input [tokens, hidden] recorded")
    shape = found[0]
    # the group: the input's columns over its scales' (sgl-kernel records y_s [1024, 12] for
    # [1024, 1536]); else 128, SGLang's, assumed (the Triton launch records no scales)
    scales = [s for s in found[1:] if s[:-1] == shape[:-1] and 0 < s[-1] < shape[-1] and shape[-1] % s[-1] == 0]
    recorded_group = shape[-1] // scales[0][-1] if scales else None
    lead = tuple(scaled(d, scale) for d in shape[:-1]) or (1,)
    cols = scaled(shape[-1], scale, recorded_group or 128)
    group = recorded_group or (128 if cols % 128 == 0 else cols)
    groups = math.prod(lead) * cols // group
    guard_programs(device, groups, "per-token-group quantisation (one program per group)", dims=2)
    recorded = activation_dtype(next(a for a in target.args if a.kind == TENSOR and a.dims == shape))
    dtype = compute_dtype(device, target, recorded)  # the kernel reads any float input, computes in fp32
    y = inside_guard(randn((*lead, cols), dtype, device, generator(device), 3.0))
    fp8 = torch.float8_e4m3fn
    y_q = guarded((*lead, cols), fp8, device)
    y_s = guarded((*lead, cols // group), torch.float32, device)
    info = torch.finfo(fp8)
    block = triton.next_power_of_2(group)
    traced = traced_warps(target, device)
    warps = traced or min(max(block // 256, 1), 8)  # SGLang's rule
    # The Triton interpreter's fp8 conversion is wrong for some values: there the kernel writes
    # fp32 and torch casts to e4m3 inside the timed region (stated: `timed` = pipeline).
    staging = torch.empty((*lead, cols), device=device, dtype=torch.float32) if interpreting() else y_q.tensor

    def run() -> torch.Tensor:
        per_token_group_quant_fp8_kernel[(groups,)](
            y, staging, y_s.tensor, group, 1e-10, info.min, info.max, BLOCK_SIZE=block, num_warps=warps, num_stages=1
        )
        if staging is not y_q.tensor:
            y_q.tensor.copy_(staging.to(fp8))
        return y_q.tensor

    def check() -> tuple[str, str]:
        run()
        grouped = y.double().reshape(-1, group)
        ref_s = grouped.abs().amax(-1).clamp(min=1e-10) / info.max
        scales = compare(y_s.tensor.reshape(-1), ref_s, "max|y|/448 per group")
        dequant = y_q.tensor.double().reshape(-1, group) * y_s.tensor.double().reshape(-1, 1)
        # e4m3 keeps 3 mantissa bits (a value rounds to within 1/16 of itself); below 2^-6 it is
        # subnormal with a fixed step of 2^-9 (half a step: 2^-10), times the group's scale
        slack = (dequant - grouped).abs() - grouped.abs() / 16 - y_s.tensor.double().reshape(-1, 1) * 2.0**-10
        worst = float(slack.max())
        values = ("pass" if worst <= 0 else "fail", f"dequantised values within half an e4m3 step (slack {worst:.3g})")
        return combine(y_s.check(scales), y_q.check(values))

    said = "recorded" if recorded_group else "assumed"
    text = f"Triton per_token_group_quant_fp8 ({groups} programs, group {group}, {said})"
    timed = KERNEL
    if interpreting():
        text += " (fp8 cast by torch)"
        timed = PIPELINE
    config = f"BLOCK={block} num_warps={warps}" + (" (from the traced block)" if traced else " (SGLang's rule)")
    return Case(run, label(text, device, scale, dtype=dtype, recorded=recorded), check, timed=timed, config=config)
