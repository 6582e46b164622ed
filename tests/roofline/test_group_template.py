"""A collective's group size from its kernel's template arguments (fixer BA). Custom all-reduces
(vLLM's and SGLang's `cross_device_reduce_1stage<T, ngpus>`) and DeepEP's intranode kernels
(`dispatch<kNumRanks, kNumThreads>`, `combine<dtype_t, kNumRanks, kNumThreads>`) have no process
group that records their size: a trace of a world of 16 (TP 8 × 2 nodes) had costed an 8-GPU
all-reduce with n = 16. Hand-built Kineto traces; every expected value is worked out here by hand
from the events below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "numSms": 132, "computeMajor": 9}
WORLD = {"backend": "nccl", "rank": 0, "world_size": 8}


def _custom_all_reduce(ngpus: str) -> str:
    return (
        f"void sglang::cross_device_reduce_1stage<__nv_bfloat16, {ngpus}>(sglang::RankData*, "
        "sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)"
    )


def _all_reduce_row(tmp_path: Path, kernel: str, world: dict[str, Any] | None) -> pd.Series:
    """The row of one `kernel` launched by sgl_kernel::all_reduce(fa, inp [2, 4096] bf16, out
    [2, 4096] bf16, reg_buffer, reg_buffer_sz_bytes), 10 µs, on an H100 rank of `world`."""
    bf16 = "c10::BFloat16"
    args = {"External id": 1, "Input Dims": [[], [2, 4096], [2, 4096], [], []]}
    args |= {"Input type": ["Scalar", bf16, bf16, "Scalar", "Scalar"], "Concrete Inputs": ["1", "", "", "0", "0"]}
    return _row(tmp_path, "sgl_kernel::all_reduce", args, kernel, world)


def _row(tmp_path: Path, op: str, args: dict[str, Any], kernel: str, world: dict[str, Any] | None) -> pd.Series:
    """The row of one `kernel` launched by the CPU op `op` (its `args`), 10 µs, on an H100 rank."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": 100, "dur": 20} | {"args": args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 105, "dur": 4}
        | {"args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 20, "ts": 150, "dur": 10}
        | {"args": {"correlation": 1, "External id": 1, "device": 0, "stream": 20, "grid": [36, 1, 1]}},
    ]
    doc: dict[str, Any] = {"traceEvents": events, "deviceProperties": [H100]}
    if world is not None:
        doc["distributedInfo"] = world
    tmp_path.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    kernels = build_report(out, None, tmp_path / "r.html").analysis.kernels
    (row,) = (r for _, r in kernels[kernels["name"] == kernel].iterrows())
    return row


def test_a_custom_all_reduce_takes_its_group_size_from_its_template(tmp_path: Path) -> None:
    row = _all_reduce_row(tmp_path, _custom_all_reduce("4"), WORLD)
    # message: the larger of inp and out, 2·4096 = 8192 bf16 · 2 B = 16,384 B; all_reduce over 4 GPUs
    # crosses the bus 2·(4−1)/4 = 1.5 times: 24,576 bus bytes (the world's 8 had made 1.75: 28,672)
    assert row["category"] == "communication" and row["op_mapping"] == "all_reduce"
    assert row["bytes"] == 24_576
    assert row["formula"] == (
        "bus bytes = 8192·2 B · 1.500 (all_reduce, n=4 from its kernel's template arguments)"
        " (message: the largest tensor recorded on its launch)"
    )
    assert not row["estimate"]  # the size is the kernel's own, not assumed
    # bus bandwidth over its 10 µs: 24,576 B / 10e-6 s = 2.4576 GB/s
    assert row["bytes"] / row["op_time_us"] / 1e3 == pytest.approx(2.4576)


def test_a_template_size_above_the_world_size_is_no_size(tmp_path: Path) -> None:
    # <__nv_bfloat16, 16> in a world of 8: no group is larger than the job, so the world's 8, assumed:
    # 8192 · 2 B · 2·7/8 = 28,672
    row = _all_reduce_row(tmp_path, _custom_all_reduce("16"), WORLD)
    assert row["bytes"] == 28_672
    assert "(all_reduce, n=8: the trace's world size assumed" in row["formula"] and row["estimate"]
    # a template argument of 0 is no size either: the world's 8 again
    row = _all_reduce_row(tmp_path / "zero", _custom_all_reduce("0"), WORLD)
    assert row["bytes"] == 28_672 and "n=8: the trace's world size assumed" in row["formula"]


def test_a_trace_without_a_world_size_costs_it_from_the_template(tmp_path: Path) -> None:
    # no distributedInfo: the template's 4 is the only size (it had been "group size unknown")
    row = _all_reduce_row(tmp_path, _custom_all_reduce("4"), None)
    assert row["role"] == "main" and row["bytes"] == 24_576
    assert "n=4 from its kernel's template arguments" in row["formula"]


def test_deep_ep_is_not_costed_from_the_tensors_on_its_launch(tmp_path: Path) -> None:
    # DeepEP's combine<__nv_bfloat16, 8, 768> under an op recording x [1024, 7168] bf16: x is not what it
    # sends (each rank gets back the tokens routed to it, not recorded). It had been costed as an
    # all_to_all of all of x over the world: 1024·7168 · 2 B · 7/8 = 12,845,056 bus bytes
    kernel = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*, __nv_bfloat16 const*)"
    args = {"External id": 1, "Input Dims": [[1024, 7168]], "Input type": ["c10::BFloat16"]}
    row = _row(tmp_path, "deep_ep::combine", args, kernel, WORLD)
    assert row["category"] == "communication" and row["op_mapping"] == "all_to_all"
    assert row["role"] == "no model" and pd.isna(row["bytes"])
    assert row["note"].startswith("collective message size not recorded: the tensors on its launch are not")


@pytest.mark.parametrize(
    ("name", "size"),
    [
        (
            "void vllm::cross_device_reduce_2stage<half, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, half*, int, int)",
            4,
        ),
        ("void vllm::cross_device_reduce_half_butterfly<float, 6>(vllm::RankData*)", 6),
        # DeepEP intranode (csrc/kernels/intranode.cu): kNumRanks first, combine's second after dtype_t
        ("void deep_ep::intranode::dispatch<8, 512>(int4*, float*, int*, long*)", 8),
        ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*)", 8),
        ("void deep_ep::intranode::cached_notify_combine<2>(void**, int*, int, int, int, int**, int, int)", 2),
        ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*)", 8),
        # an unsigned argument as a demangler writes it
        ("void deep_ep::intranode::cached_notify_dispatch<4u>(int const*, int, void**, int**, int)", 4),
        # not group sizes: DeepEP's internode layout (threads, experts per SM, ranks per SM), NCCL, a
        # name cut short, a type where the size should be
        ("void deep_ep::internode::get_dispatch_layout<256, 32, 8>(long const*, int*)", None),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", None),
        ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8", None),
        ("void deep_ep::intranode::combine<8, __nv_bfloat16>(float*)", None),
    ],
)
def test_the_template_argument_that_is_the_rank_count(name: str, size: int | None) -> None:
    from kernel_atlas.roofline.analysis import template_group_size

    assert template_group_size(name) == size


def test_the_registered_buffer_recorded_on_an_unregistered_all_reduce_is_not_its_message(tmp_path: Path) -> None:
    """vLLM ≤ 0.6's `_C_custom_ar::all_reduce_unreg(fa, inp, reg_buffer, out)` records its whole
    registered buffer, 8 MiB of uint8, beside inp and out [2, 4096] bf16 (campaign BB 3). The
    message is inp: 2 · 4096 = 8192 bf16 = 16,384 B, n = 4 from the template, bus bytes 16,384 ·
    2·3/4 = 24,576 — the buffer, as the largest tensor, had made 8,388,608 · 1 B · 1.5 =
    12,582,912."""
    kernel = (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, "
        "vllm::Signal*, __nv_bfloat16*, int, int)"
    )
    bf16 = "c10::BFloat16"
    args = {"External id": 1, "Input Dims": [[], [2, 4096], [8388608], [2, 4096]]}
    args |= {"Input type": ["Scalar", bf16, "unsigned char", bf16], "Concrete Inputs": ["1", "", "", ""]}
    row = _row(tmp_path, "_C_custom_ar::all_reduce_unreg", args, kernel, WORLD)
    assert row["bytes"] == 24_576
    assert "n=4 from its kernel's template arguments" in row["formula"]
