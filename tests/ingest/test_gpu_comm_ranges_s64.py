"""GPU-side `nccl:*` / `gloo:*` annotations are communication in the step split (campaign AK 3c): the
TensorBoard plugin reads a `gpu_user_annotation` as a user annotation, so its communication role
holds them, as the host-side `nccl:*` ranges.

The trace, by hand: one step, `ProfilerStep#1` [1000, 1200] µs on thread (1, 1).
- `aten::add` [1010, 1020] launches (cudaLaunchKernel [1012, 1014]) a compute kernel [1030, 1080];
- `record_param_comms` [1100, 1110] launches ([1102, 1104]) `ncclKernel_AllReduce` [1120, 1170] on
  stream 20: its External id names that CPU op, not an `nccl:*` one, so it is a kernel to the plugin;
- the GPU-side `nccl:all_reduce` annotation on stream 20 spans [1119, 1171] (Kineto writes it 1 µs
  before the kernel and 1 µs after it); a GPU-side `## backward ##` one [1025, 1085] is no communication.

Split, the earlier role winning: kernel 50 + 50 = 100; communication: [1119, 1171] less the NCCL
kernel = 1 + 1 = 2; runtime 2 + 2 = 4; cpu_exec: the two ops less their launches, 8 + 8 = 16;
other: 200 − 100 − 2 − 4 − 16 = 78. Before, the annotation's 2 µs were "other" (80). The plugin,
run on this trace, gives the same but for the GPU-side `## backward ##` range, which it counts as
CPU execution (CpuOp 26, Other 68): a departure docs/efficiency.md states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.traces import trace_path

NCCL_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float"


def _event(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_a_gpu_side_nccl_annotation_is_communication(tmp_path: Path) -> None:
    events = [
        _event("user_annotation", "ProfilerStep#1", 1, 1, 1000.0, 200.0),
        _event("cpu_op", "aten::add", 1, 1, 1010.0, 10.0, **{"External id": 1}),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 1012.0, 2.0, correlation=11, **{"External id": 1}),
        _event("kernel", "add_kernel", 0, 7, 1030.0, 50.0, device=0, stream=7, correlation=11, **{"External id": 1}),
        _event("cpu_op", "record_param_comms", 1, 1, 1100.0, 10.0, **{"External id": 2}),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 1102.0, 2.0, correlation=12, **{"External id": 2}),
        _event("kernel", NCCL_KERNEL, 0, 20, 1120.0, 50.0, device=0, stream=20, correlation=12, **{"External id": 2}),
        _event("gpu_user_annotation", "nccl:all_reduce", 0, 20, 1119.0, 52.0, device=0, **{"External id": 3}),
        _event("gpu_user_annotation", "## backward ##", 0, 7, 1025.0, 60.0, device=0, **{"External id": 4}),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = ingest_trace(path).facts["efficiency"]["steps"]
    assert len(steps) == 1
    split = {key: steps[0][key] for key in steps[0] if key.endswith("_us") and key not in ("start_us", "end_us")}
    assert split == {
        "total_us": 200.0,
        "kernel_us": 100.0,
        "memcpy_us": 0.0,
        "memset_us": 0.0,
        "communication_us": 2.0,
        "runtime_us": 4.0,
        "dataloader_us": 0.0,
        "cpu_exec_us": 16.0,
        "other_us": 78.0,
    }


def test_nccl_8rank_steps_match_the_plugins_communication() -> None:
    """a100_nccl_8rank_rank0, steps 4-6: the TensorBoard plugin 0.4.3 (campaign AK, its parser run on
    the trace) finds 356.04 / 311.43 / 372.80 µs of communication; its 21 GPU-side `nccl:*` ranges
    are 3 µs a step beyond the host-side ones (353.04 / 308.18 / 369.80 before)."""
    steps = ingest_trace(trace_path("a100_nccl_8rank_rank0")).facts["efficiency"]["steps"]
    assert [s["step"] for s in steps] == [4, 5, 6]
    assert [s["communication_us"] for s in steps] == pytest.approx([356.04, 311.43, 372.80], abs=0.005)
