"""Serving-engine bookkeeping and quantisation kernels of SGLang, as Triton kernels:
`write_req_to_token_pool_triton`, `create_flashinfer_kv_indices_triton`,
`compute_position_kernel` and `_per_token_group_quant_fp8`, each checked against plain torch."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.ingest.recorded import tensor_shapes
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import compute_dtype, interpreting, label, scaled

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
def compute_position_kernel(positions, extend_start_loc, extend_prefix_lens, extend_seq_lens):
    """positions[start_b + i] = prefix_b + i; extend_start_loc[b] = Σ earlier extend lengths."""
    pid = tl.program_id(0)
    prefix = tl.load(extend_prefix_lens + pid)
    length = tl.load(extend_seq_lens + pid)
    start = tl.zeros((), dtype=tl.int64)
    for i in range(pid):
        start += tl.load(extend_seq_lens + i)
    for block in range(tl.cdiv(length, 512)):
        offs = block * 512 + tl.arange(0, 512)
        tl.store(positions + start + offs, prefix + offs, mask=offs < length)
    tl.store(extend_start_loc + pid, start)


@triton.jit
def per_token_group_quant_fp8_kernel(y, y_q, y_s, group_size, eps, fp8_min, fp8_max, BLOCK_SIZE: tl.constexpr):
    """One program per group of `group_size` values: scale = max|y| / fp8_max, q = y / scale."""
    g = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < group_size
    values = tl.load(y + g * group_size + cols, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(values)), eps)
    scale = absmax / fp8_max
    q = tl.clamp(values / scale, fp8_min, fp8_max)
    tl.store(y_q + g * group_size + cols, q.to(y_q.dtype.element_ty), mask=mask)
    tl.store(y_s + g, scale)


def _requests(target: Any, scale: float, device: str) -> dict[str, Any]:
    found = tensor_shapes(target.args)
    pool = next((s for s in found if len(s) == 2), (4096, 163844))
    rows, stride = scaled(pool[0], scale), scaled(pool[1], scale)
    batch = 4
    generator = torch.Generator().manual_seed(0)
    seq = torch.randint(stride // 4, stride // 2, (batch,), generator=generator)
    pre = (seq * torch.rand(batch, generator=generator) * 0.5).long()
    return {
        "req_to_token": torch.zeros((rows, stride), dtype=torch.int32, device=device),
        "req_pool": torch.randperm(rows, generator=generator)[:batch].to(device),
        "pre": pre.to(device),
        "seq": seq.to(device),
        "extend": (seq - pre).to(device),
        "stride": stride,
    }


@register(rules=("sglang-req-to-token",))
def _write_req_to_token(target: Any, device: str, scale: float) -> Case:
    p = _requests(target, scale, device)
    total = int(p["extend"].sum())
    out_cache_loc = torch.randperm(total * 4)[:total].to(device)
    batch = p["seq"].numel()

    def run() -> None:
        write_req_to_token_pool_kernel[(batch,)](
            p["req_to_token"],
            p["req_pool"],
            p["pre"],
            p["seq"],
            p["extend"],
            out_cache_loc,
            stride=p["stride"],
            BLOCK_SIZE=BLOCK,
        )

    def check() -> tuple[str, str]:
        run()
        expected, start = p["req_to_token"].clone(), 0
        for b in range(batch):
            req, pre, seq = (int(p[k][b]) for k in ("req_pool", "pre", "seq"))
            expected[req, pre:seq] = out_cache_loc[start : start + seq - pre].to(torch.int32)
            start += seq - pre
        ok = torch.equal(p["req_to_token"], expected)
        return ("pass" if ok else "fail"), "req_to_token rows equal the plain-torch slice assignment"

    return Case(run, label("Triton write_req_to_token_pool", device, scale), check)


@register(rules=("sglang-kv-indices",))
def _kv_indices(target: Any, device: str, scale: float) -> Case:
    p = _requests(target, scale, device)
    p["req_to_token"].copy_(torch.randint(0, 1 << 30, p["req_to_token"].shape, dtype=torch.int32))
    lens = p["seq"].to(torch.int32)
    indptr = torch.zeros(lens.numel() + 1, dtype=torch.int32, device=device)
    indptr[1:] = torch.cumsum(lens, 0)
    kv_indices = torch.empty(int(indptr[-1]), dtype=torch.int32, device=device)
    starts = torch.zeros(lens.numel(), dtype=torch.int64, device=device)

    def run() -> None:
        create_kv_indices_kernel[(lens.numel(),)](
            p["req_to_token"], p["req_pool"], lens, indptr, starts, kv_indices, stride=p["stride"], BLOCK_SIZE=BLOCK
        )

    def check() -> tuple[str, str]:
        run()
        expected = torch.cat([p["req_to_token"][int(r), : int(n)] for r, n in zip(p["req_pool"], lens, strict=True)])
        ok = torch.equal(kv_indices, expected)
        return ("pass" if ok else "fail"), "kv_indices equal the concatenated req_to_token rows"

    return Case(run, label("Triton create_flashinfer_kv_indices", device, scale), check)


@register(rules=("sglang-compute-position",))
def _positions(target: Any, device: str, scale: float) -> Case:
    generator = torch.Generator().manual_seed(0)
    batch = 8
    prefix = torch.randint(0, 4096, (batch,), generator=generator).to(device)
    lengths = torch.randint(1, max(2, scaled(2048, scale)), (batch,), generator=generator).to(device)
    positions = torch.empty(int(lengths.sum()), dtype=torch.int64, device=device)
    starts = torch.empty(batch, dtype=torch.int64, device=device)

    def run() -> None:
        compute_position_kernel[(batch,)](positions, starts, prefix, lengths)

    def check() -> tuple[str, str]:
        run()
        expected = torch.cat([torch.arange(int(n)) + int(p) for p, n in zip(prefix, lengths, strict=True)])
        ok = torch.equal(positions.cpu(), expected) and torch.equal(
            starts.cpu(), torch.cumsum(lengths.cpu(), 0) - lengths.cpu()
        )
        return ("pass" if ok else "fail"), "positions and extend_start_loc equal the plain-torch arange/cumsum"

    return Case(run, label("Triton compute_position", device, scale), check)


@register(rules=("per-token-group-quant",))
def _group_quant(target: Any, device: str, scale: float) -> Case:
    found = tensor_shapes(target.args)
    shape = found[0] if found else (1024, 7168)
    rows, cols = scaled(shape[-2] if len(shape) >= 2 else 1024, scale), scaled(shape[-1], scale, 128)
    group = 128 if cols % 128 == 0 else cols
    dtype = compute_dtype(device)
    y = torch.randn(rows, cols, device=device, dtype=dtype) * 3
    y_q = torch.empty(rows, cols, device=device, dtype=torch.float8_e4m3fn)
    y_s = torch.empty(rows, cols // group, device=device, dtype=torch.float32)
    info = torch.finfo(torch.float8_e4m3fn)
    groups = rows * cols // group

    # The Triton interpreter's fp8 conversion is wrong for some values: there the kernel writes
    # fp32 and torch casts to e4m3 (stated in the implementation label).
    staging = torch.empty(rows, cols, device=device, dtype=torch.float32) if interpreting() else y_q

    def run() -> None:
        per_token_group_quant_fp8_kernel[(groups,)](
            y, staging, y_s, group, 1e-10, info.min, info.max, BLOCK_SIZE=triton.next_power_of_2(group)
        )
        if staging is not y_q:
            y_q.copy_(staging.to(torch.float8_e4m3fn))

    def check() -> tuple[str, str]:
        run()
        ref_s = y.float().view(-1, group).abs().amax(-1).clamp(min=1e-10) / info.max
        scales_ok = torch.allclose(y_s.flatten(), ref_s, rtol=1e-6)
        dequant = (y_q.float().view(-1, group) * y_s.view(-1, 1)).view_as(y)
        # e4m3 keeps 3 mantissa bits (a value rounds to within 1/8 of itself); below 2^-6 it is
        # subnormal with a fixed step of 2^-9, times the group's scale
        step = (y_s.view(-1, 1) * 2.0**-9).expand(-1, group).reshape_as(y)
        error = ((dequant - y.float()).abs() - y.float().abs() / 8 - step).max()
        ok = scales_ok and float(error) <= 0
        return ("pass" if ok else "fail"), "scales equal max|y|/448; dequantised values within one e4m3 step"

    name = "Triton per_token_group_quant_fp8" + (" (fp8 cast by torch)" if interpreting() else "")
    return Case(run, label(name, device, scale), check)
