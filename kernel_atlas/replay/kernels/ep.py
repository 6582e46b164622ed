"""Expert-parallel token layout kernels of SGLang's DeepEP path, each following SGLang's
algorithm and launch shape (`layers/moe/ep_moe/kernels.py`; the block-fp8 GEMM is in `gemm`):

* `_fwd_kernel_ep_scatter_1`: one program per expert; each computes the exclusive cumsum of the
  (128-aligned) per-expert row counts into `expert_start_loc` and fills its rows of `m_indices`
  (the expert of every row of the grouped GEMM);
* `_fwd_kernel_ep_scatter_2`: min(tokens, 8192) programs striding over tokens; every routed
  (token, k) takes the next row of its expert (an atomic add on `expert_start_loc`, which it
  consumes: restored before each timed repetition, untimed), copies its fp8 row and scales
  there and records the row in `output_index`;
* `_fwd_kernel_ep_gather`: output[t] = Σ_k weight[t, k] · input[output_index[t, k]], over a grid
  of (hidden / BLOCK_D, min(tokens, 1024)) programs.

The router's choices are not recorded: the number of local experts and the share of slots
routed to other ranks are assumed and stated in the label.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import TENSOR, tensor_shapes
from kernel_atlas.replay.aten import KERNEL, Case
from kernel_atlas.replay.checks import combine, compare, guarded, inside_guard
from kernel_atlas.replay.configs import Config, candidates, pick, traced_warps
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
from kernel_atlas.replay.kernels.gemm import GROUP, fp8_values
from kernel_atlas.replay.values import generator, randn

ALIGN = 128  # rows of each expert's run in the contiguous layout are a multiple of this
LOCAL_EXPERTS = 32  # DeepSeek-V3's 256 routed experts over 8 expert-parallel ranks
REMOTE_SHARE = 0.1  # share of (token, k) slots whose expert lives on another rank


@triton.jit
def ep_scatter_1_kernel(
    num_recv_tokens_per_expert,
    expert_start_loc,
    m_indices,
    num_experts: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EXPERT_NUM: tl.constexpr,
):
    cur_expert = tl.program_id(0)
    experts = tl.arange(0, BLOCK_EXPERT_NUM)
    counts = tl.load(num_recv_tokens_per_expert + experts, mask=experts < num_experts, other=0)
    starts = tl.cumsum(counts, 0) - counts
    tl.store(expert_start_loc + experts, starts, mask=experts < num_experts)
    start = tl.sum(tl.where(experts == cur_expert, starts, 0), 0)
    count = tl.load(num_recv_tokens_per_expert + cur_expert)
    offs = tl.arange(0, BLOCK_E)
    for m in range(0, count, BLOCK_E):
        tl.store(m_indices + start + m + offs, cur_expert + tl.zeros_like(offs), mask=m + offs < count)


@triton.jit
def ep_scatter_2_kernel(
    total_tokens,
    expert_start_loc,
    recv_x,
    recv_x_scale,
    recv_topk,
    output,
    output_scale,
    output_index,
    TOPK: tl.constexpr,
    HIDDEN: tl.constexpr,
    HIDDEN_PAD: tl.constexpr,
    SCALE_HIDDEN: tl.constexpr,
    SCALE_HIDDEN_PAD: tl.constexpr,
):
    first = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, HIDDEN_PAD)
    scols = tl.arange(0, SCALE_HIDDEN_PAD)
    for token in range(first, total_tokens, programs):
        row = tl.load(recv_x + token * HIDDEN + cols, mask=cols < HIDDEN)
        srow = tl.load(recv_x_scale + token * SCALE_HIDDEN + scols, mask=scols < SCALE_HIDDEN)
        for k in tl.static_range(TOPK):
            expert = tl.load(recv_topk + token * TOPK + k)
            if expert >= 0:
                dest = tl.atomic_add(expert_start_loc + expert, 1)
                tl.store(output_index + token * TOPK + k, dest)
                tl.store(output + dest * HIDDEN + cols, row, mask=cols < HIDDEN)
                tl.store(output_scale + dest * SCALE_HIDDEN + scols, srow, mask=scols < SCALE_HIDDEN)


@triton.jit
def ep_gather_kernel(
    total_tokens, inputs, topk_ids, topk_weights, input_index, output, hidden, TOPK: tl.constexpr, BLOCK_D: tl.constexpr
):
    block = tl.program_id(0)
    first = tl.program_id(1)
    programs = tl.num_programs(1)
    cols = block * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < hidden
    for token in range(first, total_tokens, programs):
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for k in tl.static_range(TOPK):
            expert = tl.load(topk_ids + token * TOPK + k)
            if expert >= 0:
                src = tl.load(input_index + token * TOPK + k)
                weight = tl.load(topk_weights + token * TOPK + k)
                acc += tl.load(inputs + src * hidden + cols, mask=mask, other=0.0).to(tl.float32) * weight
        tl.store(output + token * hidden + cols, acc.to(output.dtype.element_ty), mask=mask)


def _routing(target: Any, device: str, scale: float) -> dict[str, Any]:
    found = [s for s in tensor_shapes(target.args) if len(s) == 2]
    if not found:  # no layout of a made-up (1024, 7168)
        raise NotReplayable("needs the tokens [T, hidden] recorded")
    tokens, hidden = found[0]
    rows = next((s[0] for s in found[1:] if s[1] == hidden and s[0] >= tokens), None)
    top_k = max(1, min(8, rows // tokens)) if rows else 8
    tokens, hidden = scaled(tokens, scale), scaled(hidden, scale, GROUP)
    guard_cpu_bytes(device, 4.0 * tokens * top_k * hidden, "expert-parallel layout")
    experts = LOCAL_EXPERTS
    gen = generator(device)
    # each token's k distinct experts; some slots routed to other ranks (-1)
    ids = torch.rand(tokens, experts, device=device, generator=gen).argsort(dim=1)[:, :top_k].to(torch.int32)
    ids[torch.rand(ids.shape, device=device, generator=gen) < REMOTE_SHARE] = -1
    assumed = f"assumed {experts} local experts, top-{top_k}, {REMOTE_SHARE:.0%} of slots on other ranks"
    return {"tokens": tokens, "hidden": hidden, "experts": experts, "top_k": top_k, "ids": ids, "gen": gen,
            "assumed": assumed}  # fmt: skip


def _aligned_counts(ids: torch.Tensor, experts: int) -> torch.Tensor:
    counts = torch.bincount(ids[ids >= 0].long(), minlength=experts)
    return ((counts + ALIGN - 1) // ALIGN * ALIGN).to(torch.int32)


@register(rules=("sglang-ep-scatter-1", "sglang-ep-scatter"))
def _scatter(target: Any, device: str, scale: float) -> Case:
    r = _routing(target, device, scale)
    tokens, hidden, experts, top_k, ids = r["tokens"], r["hidden"], r["experts"], r["top_k"], r["ids"]
    counts = _aligned_counts(ids, experts)  # DeepEP hands these over already aligned
    rows = int(counts.sum())
    starts_ref = torch.cumsum(counts, 0) - counts
    warps = traced_warps(target, device) or 8
    if rule_id(target.label_rule) == "sglang-ep-scatter-1":
        start = guarded((experts,), torch.int32, device)
        m_indices = guarded((rows,), torch.int32, device)

        def run() -> None:
            ep_scatter_1_kernel[(experts,)](
                counts, start.tensor, m_indices.tensor, num_experts=experts, BLOCK_E=ALIGN,
                BLOCK_EXPERT_NUM=triton.next_power_of_2(experts), num_warps=warps,
            )  # fmt: skip

        def check() -> tuple[str, str]:
            run()
            expected = torch.repeat_interleave(torch.arange(experts, device=device, dtype=torch.int32), counts.long())
            verdict = combine(
                start.check(compare(start.tensor, starts_ref, "exclusive cumsum of the aligned counts")),
                m_indices.check(compare(m_indices.tensor, expected, "expert of every row")),
            )
            return verdict

        text = f"Triton _fwd_kernel_ep_scatter_1 ({experts} programs); {r['assumed']}"
        return Case(run, label(text, device, scale), check, timed=KERNEL, config=f"BLOCK_E={ALIGN} num_warps={warps}")

    x = inside_guard(fp8_values((tokens, hidden), device, r["gen"]))
    scale_cols = hidden // GROUP
    x_scale = torch.rand(tokens, scale_cols, device=device, generator=r["gen"]) + 0.5
    cursor = torch.empty(experts, dtype=torch.int32, device=device)
    output = guarded((rows, hidden), x.dtype, device)
    output_scale = guarded((rows, scale_cols), torch.float32, device)
    index = guarded((tokens, top_k), torch.int32, device)
    index.tensor.fill_(-1)
    programs = min(tokens, 8192)
    guard_programs(device, programs, "_fwd_kernel_ep_scatter_2")

    def reset() -> None:
        cursor.copy_(starts_ref.to(torch.int32))  # the start of every expert's run, as scatter_1 leaves it

    def run() -> None:
        ep_scatter_2_kernel[(programs,)](
            tokens, cursor, x, x_scale, ids, output.tensor, output_scale.tensor, index.tensor,
            TOPK=top_k, HIDDEN=hidden, HIDDEN_PAD=triton.next_power_of_2(hidden),
            SCALE_HIDDEN=scale_cols, SCALE_HIDDEN_PAD=triton.next_power_of_2(scale_cols), num_warps=warps,
        )  # fmt: skip

    def check() -> tuple[str, str]:
        reset()
        run()
        routed = ids >= 0
        dest = index.tensor.long()
        problems = []
        if bool((dest[~routed] != -1).any()):
            problems.append("an unrouted slot got a row")
        token_of = torch.arange(tokens, device=device)[:, None].expand(-1, top_k)[routed]
        d, e = dest[routed], ids[routed].long()
        if d.numel() != torch.unique(d).numel():
            problems.append("two slots share a row")
        elif bool(((d < starts_ref[e]) | (d >= starts_ref[e] + counts[e])).any()):
            problems.append("a row outside its expert's run")
        elif not torch.equal(output.tensor.view(torch.uint8)[d], x.view(torch.uint8)[token_of]):
            problems.append("a copied row differs from its token's")
        elif not torch.equal(output_scale.tensor[d], x_scale[token_of]):
            problems.append("copied scales differ")
        reason = "; ".join(problems) or "every routed slot copied with its scales to a row of its expert's run"
        verdict = ("fail" if problems else "pass", reason)
        return combine(output.check(verdict), output_scale.check(verdict), index.check(verdict))

    text = f"Triton _fwd_kernel_ep_scatter_2 ({programs} programs); {r['assumed']}"
    if interpreting():
        text += " (fp8 values in fp32)"
    config = f"num_warps={warps}"
    # it copies fp8 rows; a recording of another dtype (bf16 DeepEP) is said, as every builder's
    recorded = activation_dtype(next((a for a in target.args if a.kind == TENSOR and a.dims), None))
    text = label(text, device, scale, dtype=torch.float8_e4m3fn, recorded=recorded)
    return Case(run, text, check, timed=KERNEL, config=config, reset=reset)


@register(rules=("sglang-ep-gather",))
def _gather(target: Any, device: str, scale: float) -> Case:
    r = _routing(target, device, scale)
    tokens, hidden, top_k, ids, gen = r["tokens"], r["hidden"], r["top_k"], r["ids"], r["gen"]
    dtype = compute_dtype(device, target)  # the gathered rows' recorded dtype on a GPU
    slots = tokens * top_k
    inputs = inside_guard(randn((slots, hidden), dtype, device, gen))
    index = torch.randperm(slots, device=device, generator=gen).view(tokens, top_k).to(torch.int32)
    weights = torch.rand(tokens, top_k, device=device, generator=gen)
    out = guarded((tokens, hidden), dtype, device)
    recorded_tokens, recorded_hidden = next((s for s in tensor_shapes(target.args) if len(s) == 2), (tokens, hidden))

    def programs(c: Config) -> int:
        return triton.cdiv(recorded_hidden, c["BLOCK_D"]) * min(recorded_tokens, 1024)

    def make_run(config: Config):
        grid = (triton.cdiv(hidden, config["BLOCK_D"]), min(tokens, 1024))
        guard_programs(device, grid[0] * grid[1], "_fwd_kernel_ep_gather", dims=2)

        def run() -> torch.Tensor:
            ep_gather_kernel[grid](
                tokens, inputs, ids, weights, index, out.tensor, hidden, TOPK=top_k, **config.kwargs()
            )
            return out.tensor

        return run

    _, run, config_text = pick(candidates("ep_gather", target, device, programs), make_run, device)

    def check() -> tuple[str, str]:
        produced = run()
        valid = (ids >= 0).double() * weights.double()
        reference = (inputs.double()[index.long()] * valid[..., None]).sum(1)
        return out.check(compare(produced, reference, "float64 weighted gather"))

    text = label(f"Triton _fwd_kernel_ep_gather; {r['assumed']}", device, scale, target=target, dtype=dtype)
    return Case(run, text, check, timed=KERNEL, config=config_text)
