"""The Triton fused-MoE path of SGLang/vLLM: `moe_align_block_size`, the grouped expert GEMM
`fused_moe_kernel` (launched twice per MoE layer: the gate/up projection, then the down
projection with the routing weight) and `moe_sum_reduce`.

`fused_moe_kernel` follows the original's algorithm and launch shape: a 1-D grid over (padded
sorted-token blocks × N blocks) in grouped order, the sorted-token buffer sized as SGLang sizes
it (numel + experts·(BLOCK_SIZE_M − 1)); each program loads the rows of its tokens through
`sorted_token_ids // top_k`, the weight tile of its block's expert, and writes one row per
(token, k) slot. The launch replayed is the traced one (`launch_index` 0: gate/up, 1: down),
with the traced tile sizes and warps where the trace has the grid and block; routing and the
token sort are prepared once, outside the timed region, and the check compares the timed
launch's own output with a float64 per-expert GEMM.

`moe_align_block_size` (sgl-kernel: CUDA) is replayed by two Triton kernels of the same output
layout, a stand-in: one program counts each expert's slots, pads the runs to the block size,
writes the expert of every block, the padding slots and the total; then one program per chunk
of slots places each slot with an atomic cursor per expert.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import TENSOR, Arg, tensor_shapes
from kernel_atlas.replay.aten import KERNEL, STAND_IN, Case
from kernel_atlas.replay.checks import compare, guarded, inside_guard
from kernel_atlas.replay.configs import Config, candidates, pick
from kernel_atlas.replay.inputs import NotReplayable
from kernel_atlas.replay.kernels import register
from kernel_atlas.replay.kernels.common import (
    activation_dtype,
    compute_dtype,
    guard_cpu_bytes,
    guard_interpreter,
    guard_programs,
    label,
    scaled,
)
from kernel_atlas.replay.values import generator, randn

ALIGN_CHUNK = 1024  # slots per program of the sort kernel


@triton.jit
def fused_moe_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    N,
    K,
    EM,
    num_valid_tokens,
    stride_am,
    stride_ak,
    stride_be,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    top_k: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
    if pid_m * BLOCK_SIZE_M >= num_tokens_post_padded:
        return
    offs_token_id = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_token = tl.load(sorted_token_ids_ptr + offs_token_id)
    token_mask = offs_token < num_valid_tokens

    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_token[:, None] // top_k * stride_am + offs_k[None, :] * stride_ak)
    off_expert = tl.load(expert_ids_ptr + pid_m)
    b_ptrs = b_ptr + off_expert * stride_be + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        remaining = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < remaining), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < remaining, other=0.0)
        accumulator += tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if MUL_ROUTED_WEIGHT:
        weight = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0)
        accumulator = accumulator * weight[:, None]
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=token_mask[:, None] & (offs_cn[None, :] < N))


@triton.jit
def moe_sum_reduce_kernel(
    x_ptr, out_ptr, num_tokens, hidden, scaling, TOPK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_DIM: tl.constexpr
):
    """out[t, :] = scaling · Σ_k x[t, k, :]."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.program_id(1) * BLOCK_DIM + tl.arange(0, BLOCK_DIM)
    mask = (offs_m[:, None] < num_tokens) & (offs_d[None, :] < hidden)
    acc = tl.zeros((BLOCK_M, BLOCK_DIM), dtype=tl.float32)
    for k in tl.static_range(TOPK):
        acc += tl.load(x_ptr + (offs_m[:, None] * TOPK + k) * hidden + offs_d[None, :], mask=mask, other=0.0).to(
            tl.float32
        )
    tl.store(
        out_ptr + offs_m[:, None] * hidden + offs_d[None, :], (acc * scaling).to(out_ptr.dtype.element_ty), mask=mask
    )


@triton.jit
def moe_align_count_kernel(
    topk_ids, numel, num_experts, cursor, expert_ids, sorted_ids, post,
    BLOCK_SIZE_M: tl.constexpr, EXPERTS: tl.constexpr, CHUNK: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    """Per expert: its slot count padded to BLOCK_SIZE_M, the start of its run (`cursor`); the
    expert of every block, `numel` in every padding slot, and the padded total (`post`)."""
    counts = tl.zeros((EXPERTS,), dtype=tl.int32)
    for start in range(0, numel, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(topk_ids + offs, mask=offs < numel, other=0)
        counts += tl.histogram(ids, EXPERTS, mask=offs < numel)
    padded = (counts + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M * BLOCK_SIZE_M
    ends = tl.cumsum(padded, 0)
    starts = ends - padded
    experts = tl.arange(0, EXPERTS)
    tl.store(cursor + experts, starts, mask=experts < num_experts)
    total = tl.sum(padded, 0)
    tl.store(post, total)
    num_blocks = total // BLOCK_SIZE_M
    for first in range(0, num_blocks, BLOCKS):
        blocks = first + tl.arange(0, BLOCKS)
        # a block's expert: the number of runs that end at or before the block's first slot
        expert = tl.sum((ends[None, :] <= blocks[:, None] * BLOCK_SIZE_M).to(tl.int32), axis=1)
        tl.store(expert_ids + blocks, expert, mask=blocks < num_blocks)
        own = experts[None, :] == expert[:, None]
        filled = tl.sum(tl.where(own, starts[None, :] + counts[None, :], 0), axis=1)
        slots = blocks[:, None] * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)[None, :]
        padding = (slots >= filled[:, None]) & (blocks[:, None] < num_blocks)
        tl.store(sorted_ids + slots, numel + tl.zeros_like(slots), mask=padding)


@triton.jit
def moe_align_sort_kernel(topk_ids, numel, cursor, sorted_ids, CHUNK: tl.constexpr):
    """Each slot to the next free place of its expert's run."""
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < numel
    ids = tl.load(topk_ids + offs, mask=mask, other=0)
    place = tl.atomic_add(cursor + ids, 1, mask=mask)
    tl.store(sorted_ids + place, offs, mask=mask)


def max_padded(numel: int, experts: int, block_m: int) -> int:
    """The sorted-token buffer size SGLang allocates (every expert's run padded)."""
    return numel * block_m if numel < experts else numel + experts * (block_m - 1)


class Alignment:
    """moe_align_block_size's buffers for one routing, and its two launches."""

    def __init__(self, topk_ids: torch.Tensor, block_m: int, experts: int) -> None:
        device = topk_ids.device
        self.ids = topk_ids.flatten().contiguous()
        self.numel, self.experts, self.block_m = self.ids.numel(), experts, block_m
        size = max_padded(self.numel, experts, block_m)
        self.sorted_ids = torch.empty(size, dtype=torch.int32, device=device)
        self.expert_ids = torch.empty(triton.cdiv(size, block_m), dtype=torch.int32, device=device)
        self.post = torch.empty(1, dtype=torch.int32, device=device)
        self.cursor = torch.empty(experts, dtype=torch.int32, device=device)
        self.starts = torch.empty_like(self.cursor)

    def count(self) -> None:
        moe_align_count_kernel[(1,)](
            self.ids, self.numel, self.experts, self.cursor, self.expert_ids, self.sorted_ids, self.post,
            BLOCK_SIZE_M=self.block_m, EXPERTS=triton.next_power_of_2(self.experts), CHUNK=ALIGN_CHUNK, BLOCKS=64,
        )  # fmt: skip

    def sort(self) -> None:
        grid = (triton.cdiv(self.numel, ALIGN_CHUNK),)
        moe_align_sort_kernel[grid](self.ids, self.numel, self.cursor, self.sorted_ids, CHUNK=ALIGN_CHUNK)

    def run(self) -> None:
        self.count()
        self.starts.copy_(self.cursor)  # kept to reset the cursor before a timed sort
        self.sort()


def moe_align_block_size(topk_ids: torch.Tensor, block_m: int, experts: int):
    """(sorted_token_ids, expert_ids, num_tokens_post_padded) in SGLang's layout."""
    alignment = Alignment(topk_ids, block_m, experts)
    alignment.run()
    return alignment.sorted_ids, alignment.expert_ids, alignment.post


def check_alignment(
    ids: torch.Tensor, sorted_ids: torch.Tensor, expert_ids: torch.Tensor, post: torch.Tensor, block_m: int
) -> tuple[str, str]:
    """Every slot exactly once, in a block of its own expert, padding elsewhere, runs padded."""
    flat = ids.flatten().long()
    numel, total = flat.numel(), int(post.item())
    used = sorted_ids[:total].long()
    real = used[used < numel]
    problems = []
    if total % block_m:
        problems.append(f"padded total {total} is no multiple of {block_m}")
    if real.numel() != numel or not torch.equal(real.sort().values, torch.arange(numel, device=real.device)):
        problems.append("slots missing or repeated")
    if bool((used > numel).any()):
        problems.append("values past the padding marker")
    blocks = torch.arange(total, device=used.device) // block_m
    owner = expert_ids[: total // block_m].long()[blocks]
    is_real = used < numel
    if bool((flat[used[is_real]] != owner[is_real]).any()):
        problems.append("a slot in another expert's block")
    counts = torch.bincount(flat, minlength=int(owner.max()) + 1 if owner.numel() else 1)
    expected = int(((counts + block_m - 1) // block_m * block_m).sum())
    if expected != total:
        problems.append(f"padded total {total}, expected {expected}")
    reason = "; ".join(problems) or "every slot once, in a block of its own expert, runs padded to the block size"
    return ("fail" if problems else "pass"), reason


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing: softmax over experts, the k largest, renormalised."""
    weights, ids = torch.topk(torch.softmax(logits.float(), dim=-1), top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids.to(torch.int32)


def invoke_fused_moe(a, w, c, topk_weights, sorted_ids, expert_ids, post_padded, top_k, mul_routed, config: Config):
    """One launch of fused_moe_kernel: c[slot] = a[slot // top_k] @ w[expert].T (× its weight)."""
    n, k = w.shape[1], w.shape[2]
    em = sorted_ids.numel()
    grid = (triton.cdiv(em, config["BLOCK_SIZE_M"]) * triton.cdiv(n, config["BLOCK_SIZE_N"]),)
    fused_moe_kernel[grid](
        a,
        w,
        c,
        topk_weights,
        sorted_ids,
        expert_ids,
        post_padded,
        n,
        k,
        em,
        topk_weights.numel(),
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(2),
        w.stride(1),
        c.stride(0),
        c.stride(1),
        MUL_ROUTED_WEIGHT=mul_routed,
        top_k=top_k,
        **config.kwargs(),
    )


def _sum_reduce_programs(tokens: int, hidden: int):
    return lambda c: triton.cdiv(tokens, c["BLOCK_M"]) * triton.cdiv(hidden, c["BLOCK_DIM"])


def moe_sum_reduce(x: torch.Tensor, out: torch.Tensor, config: Config, scaling: float = 1.0) -> torch.Tensor:
    tokens, topk, hidden = x.shape
    grid = (triton.cdiv(tokens, config["BLOCK_M"]), triton.cdiv(hidden, config["BLOCK_DIM"]))
    guard_programs(str(x.device), grid[0] * grid[1], "moe_sum_reduce", dims=2)
    moe_sum_reduce_kernel[grid](x, out, tokens, hidden, scaling, TOPK=topk, **config.kwargs())
    return out


def expert_gemm_reference(a, w, ids, weights=None, rows_per_token: int = 1) -> torch.Tensor:
    """float64 c[slot] = a[slot // rows_per_token] @ w[ids[slot]].T (× weights[slot]), expert by expert."""
    flat = ids.flatten().long()
    source = a.double()[torch.arange(flat.numel(), device=a.device) // rows_per_token]
    out = torch.zeros(flat.numel(), w.shape[1], dtype=torch.float64, device=a.device)
    for e in torch.unique(flat).tolist():
        rows = (flat == e).nonzero().flatten()
        out[rows] = source[rows] @ w[e].double().T
    if weights is not None:
        out *= weights.flatten().double()[:, None]
    return out


# the fused_experts arguments a seed catalog names (`description`): their role in the problem
_MOE_ROLES = {"hidden_states": "hidden", "w1": "w1", "w2": "w2", "topk_ids": "topk", "topk_weights": "topk"}
_MOE_NEEDS = "needs hidden_states [T, D], w1 [E, N, D], w2 [E, D, I] and topk ids [T, k]"


def _agree(hidden: tuple[int, ...], w1: tuple[int, ...], w2: tuple[int, ...], topk: tuple[int, ...]) -> bool:
    """hidden [T, D], w1 [E, N, D], w2 [E, D, I], topk [T, k]: E, D and T the same wherever they recur."""
    return (
        (len(hidden), len(w1), len(w2), len(topk)) == (2, 3, 3, 2)
        and w1[0] == w2[0]
        and hidden[1] == w1[2] == w2[1]
        and topk[0] == hidden[0]
    )


def moe_tensors(args: tuple[Arg, ...]) -> tuple[Arg, Arg, Arg, Arg, str]:
    """The recorded hidden states, w1, w2 and top-k tensor of a fused MoE call, and how they were
    found: by their names where the recording names them (a seed catalog's `description`), else
    by the shapes that agree — w1 and w2 of one expert count whose D agree, the hidden states the
    [T, D] of that D, the top-k tensor a [T, k] of its T. Never by rank alone: a [1024, 2] top-k
    tensor had been taken for the hidden states (D = 2) of a call whose hidden states were
    impossible. NotReplayable where they are not there or disagree."""
    named: dict[str, Arg] = {}
    for arg in args:
        role = _MOE_ROLES.get(arg.name)
        if role is not None and arg.kind == TENSOR and role not in named:
            named[role] = arg
    if len(named) == 4:
        shapes = [named[r].dims for r in ("hidden", "w1", "w2", "topk")]
        if not _agree(*shapes):
            raise NotReplayable(
                "the recorded hidden_states {}, w1 {}, w2 {} and top-k {} disagree ({})".format(
                    *(list(s) for s in shapes), _MOE_NEEDS.removeprefix("needs ")
                )
            )
        return named["hidden"], named["w1"], named["w2"], named["topk"], "by name"
    tensors = [a for a in args if a.kind == TENSOR and a.dims]
    three = [a for a in tensors if len(a.dims) == 3]
    two = [a for a in tensors if len(a.dims) == 2]
    pairs = [(a, b) for i, a in enumerate(three) for b in three[i + 1 :]]  # in the recorded order first
    for w1, w2 in [*pairs, *((b, a) for a, b in pairs)]:
        for hidden in two:
            topk = next((t for t in two if t is not hidden and _agree(hidden.dims, w1.dims, w2.dims, t.dims)), None)
            if topk is not None:
                return hidden, w1, w2, topk, "by their shapes"
    raise NotReplayable(f"{_MOE_NEEDS} whose sizes agree (E, D and T)")


def _moe_problem(target: Any, device: str, scale: float, gemm: bool = True) -> dict[str, Any]:
    hidden_arg, w1, w2, topk, found_by = moe_tensors(target.args)
    (tokens, hidden), (experts, n1, _), (_, _, inter), top_k = hidden_arg.dims, w1.dims, w2.dims, topk.dims[1]
    recorded = {"tokens": tokens, "hidden": hidden, "n1": n1, "inter": inter, "experts": experts, "top_k": top_k}
    # each launch is replayed at its own recorded N (gate/up: w1's, down: w2's D), not forced to 2·I
    tokens, hidden, n1, inter = (scaled(v, scale) for v in (tokens, hidden, n1, inter))
    if gemm:
        guard_interpreter(device, 2.0 * tokens * top_k * max(n1 * hidden, hidden * inter), "fused_moe_kernel launch")
    else:
        guard_cpu_bytes(device, 4.0 * tokens * top_k * hidden, "moe_sum_reduce input")
    recorded_dtype = activation_dtype(hidden_arg)  # the hidden states': the kernel's a and b
    dtype = compute_dtype(device, target, recorded_dtype)
    gen = generator(device)
    weights, ids = route(randn((tokens, experts), torch.float32, device, gen), top_k)
    return {
        "tokens": tokens,
        "hidden": hidden,
        "n1": n1,
        "inter": inter,
        "experts": experts,
        "top_k": top_k,
        "dtype": dtype,
        "recorded_dtype": recorded_dtype,
        "generator": gen,
        "weights": weights,
        "ids": ids,
        "recorded": recorded,
        "found_by": found_by,
    }


def interpreter_programs(numel: int, experts: int, n: int, k: int, config: Config) -> dict[str, int]:
    """fused_moe_kernel's programs under the interpreter: those whose row block holds slots (at
    most numel + min(E, numel)·(BLOCK_SIZE_M − 1) padded slots), each over the K loop, and the
    rest of the grid, which returns at once (experts without tokens pad nothing)."""
    block_m, block_n = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]
    columns = triton.cdiv(n, block_n)
    grid = triton.cdiv(max_padded(numel, experts, block_m), block_m) * columns
    active = min(grid, triton.cdiv(numel + min(experts, numel) * (block_m - 1), block_m) * columns)
    return {"programs": active, "steps": triton.cdiv(k, config["BLOCK_SIZE_K"]), "idle": grid - active}


@register(rules=("triton-fused-moe",))
def _fused_moe(target: Any, device: str, scale: float) -> Case:
    p = _moe_problem(target, device, scale)
    down = getattr(target, "launch_index", 0) == 1
    gen, dtype, experts, top_k = p["generator"], p["dtype"], p["experts"], p["top_k"]
    slots = p["tokens"] * top_k
    if down:  # the down projection: activation [T·k, I] by w2 [E, D, I], one row per slot, weighted
        a = inside_guard(randn((slots, p["inter"]), dtype, device, gen, 0.5))
        w = inside_guard(randn((experts, p["hidden"], p["inter"]), dtype, device, gen, p["inter"] ** -0.5))
        recorded_n, per_token = p["recorded"]["hidden"], 1
    else:  # gate/up: hidden states [T, D] by w1 [E, 2I, D], each token's row to its k slots
        a = inside_guard(randn((p["tokens"], p["hidden"]), dtype, device, gen, 0.5))
        w = inside_guard(randn((experts, p["n1"], p["hidden"]), dtype, device, gen, p["hidden"] ** -0.5))
        recorded_n, per_token = p["recorded"]["n1"], top_k
    recorded_numel = p["recorded"]["tokens"] * p["recorded"]["top_k"]

    def programs(c: Config) -> int:  # the traced grid, for the recorded problem
        em = max_padded(recorded_numel, experts, c["BLOCK_SIZE_M"])
        return triton.cdiv(em, c["BLOCK_SIZE_M"]) * triton.cdiv(recorded_n, c["BLOCK_SIZE_N"])

    out = guarded((slots, w.shape[1]), dtype, device)
    flat_weights = p["weights"].flatten().contiguous()
    alignments: dict[int, Alignment] = {}

    def make_run(config: Config):
        work = interpreter_programs(slots, experts, w.shape[1], w.shape[2], config)
        guard_interpreter(device, 0.0, "fused_moe_kernel launch", **work)  # the programs the CPU runs
        block_m = config["BLOCK_SIZE_M"]
        if block_m not in alignments:  # routing is sorted once per block size, before any timing
            alignments[block_m] = Alignment(p["ids"], block_m, experts)
            alignments[block_m].run()
        al = alignments[block_m]
        k_of_launch = 1 if down else top_k

        def run() -> torch.Tensor:
            invoke_fused_moe(
                a, w, out.tensor, flat_weights, al.sorted_ids, al.expert_ids, al.post, k_of_launch, down, config
            )
            return out.tensor

        return run

    _, run, config_text = pick(candidates("fused_moe_kernel", target, device, programs), make_run, device)

    def check() -> tuple[str, str]:
        produced = run()
        reference = expert_gemm_reference(a, w, p["ids"], flat_weights if down else None, per_token)
        return out.check(compare(produced, reference, "float64 per-expert GEMM"))

    launch = "down projection" if down else "gate/up projection"
    text = f"Triton fused_moe_kernel ({launch} launch, {experts} experts, top-{top_k}), tensors found {p['found_by']}"
    text = label(text, device, scale, target=target, dtype=dtype, recorded=p["recorded_dtype"])
    return Case(run, text, check, timed=KERNEL, config=config_text)


@register(rules=("sglang-moe-sum-reduce",))
def _sum_reduce(target: Any, device: str, scale: float) -> Case:
    p = _moe_problem(target, device, scale, gemm=False)
    tokens, top_k, hidden = p["tokens"], p["top_k"], p["hidden"]
    x = inside_guard(randn((tokens, top_k, hidden), p["dtype"], device, p["generator"]))
    out = guarded((tokens, hidden), p["dtype"], device)
    recorded = p["recorded"]
    choice = candidates("moe_sum_reduce", target, device, _sum_reduce_programs(recorded["tokens"], recorded["hidden"]))

    def make_run(config: Config):
        return lambda: moe_sum_reduce(x, out.tensor, config)

    _, run, config_text = pick(choice, make_run, device)

    def check() -> tuple[str, str]:
        return out.check(compare(run(), x.double().sum(1), "float64 sum over k"))

    text = label(
        "Triton moe_sum_reduce_kernel", device, scale, target=target, dtype=p["dtype"], recorded=p["recorded_dtype"]
    )
    return Case(run, text, check, timed=KERNEL, config=config_text)


def _alignment_of(args: tuple[Any, ...], shapes: list[tuple[int, ...]]) -> tuple[int, int, str]:
    """Experts and block size of an sgl-kernel `moe_align_block_size(topk_ids, num_experts,
    block_size, sorted_ids, expert_ids, post_pad, token_cnts, cumsum)` call: its scalars where
    recorded; else what its buffers' sizes imply — `cumsum` holds experts + 1, `sorted_ids`
    topk_ids.numel() + experts · (block − 1) ([1024, 2] ids, [3064] and [9]: 8 experts, block
    128); else 64 experts, block 16, assumed."""
    values = [a.value for a in args[1:3]]
    if len(values) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return values[0], values[1], "recorded"
    if len(shapes) >= 6 and len(shapes[0]) == 2 and all(len(s) == 1 for s in shapes[1:]):
        numel, padded, experts = shapes[0][0] * shapes[0][1], shapes[1][0], shapes[-1][0] - 1
        if experts > 0 and padded >= numel and (padded - numel) % experts == 0:
            return experts, (padded - numel) // experts + 1, "from its buffers' sizes"
    return 64, 16, "assumed: not recorded"


@register(rules=("sglang-moe-align", "sglang-moe-align-small-batch", "sglang-moe-sort"))
def _align(target: Any, device: str, scale: float) -> Case:
    found = tensor_shapes(target.args)
    if not found or len(found[0]) != 2:
        raise NotReplayable("needs topk_ids [T, k] recorded first")  # no made-up routing size
    ids_shape = found[0]
    tokens, top_k = scaled(ids_shape[0], scale), ids_shape[1]
    experts, block_m, said = _alignment_of(target.args, found)
    gen = generator(device)
    ids = torch.randint(0, experts, (tokens, top_k), generator=gen, device=device, dtype=torch.int32)
    if target.args and target.args[0].dtype in ("long int", "long"):  # the stand-in's histogram takes int32
        said += "; int32 ids for the recorded int64"
    al = Alignment(ids, block_m, experts)
    al.run()
    family = rule_id(target.label_rule)
    if family == "sglang-moe-sort":
        run, reset, what = al.sort, (lambda: al.cursor.copy_(al.starts)), "the sort launch (cursor reset untimed)"
    elif family == "sglang-moe-align-small-batch":
        run, reset, what = al.run, None, "count and sort launches (one kernel in sgl-kernel)"
    else:
        run, reset, what = al.count, None, "the count launch"

    def check() -> tuple[str, str]:
        al.sorted_ids.fill_(-1)
        al.run()  # the timed launch(es), in their place in the sequence count → sort
        return check_alignment(ids, al.sorted_ids, al.expert_ids, al.post, block_m)

    text = f"stand-in: Triton moe_align_block_size, {what}; {experts} experts, block size {block_m} ({said})"
    config = "counts: one program; sort: one program per 1024 slots"
    return Case(run, label(text, device, scale), check, timed=STAND_IN, config=config, reset=reset)
