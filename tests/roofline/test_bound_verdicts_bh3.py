"""What bounds a roofline row, checked by hand on hand-built traces (campaign BH 4 and 6).

4. `latency` had gone to any call of an attainable time under 4 µs below half its roofline,
   however long it ran: a 2,546 µs kernel was "latency-bound at 0.0 %" and led what to fix first.
   A call of milliseconds is held up by no launch: its bound stays its roof's, and its likely cause
   says the cost does not explain its time.
6. Collective kernels were given occupancy and wave causes (an NCCL kernel runs on a few blocks by
   design; its link sets its speed), precision `int` whatever dtype they sent, and a finding whose
   bytes rest on the world size taken for the group's size did not say so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85018279936,
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
}
BF16 = "c10::BFloat16"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{}x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def call(
    ext: int, op: str, dims: list[Any], types: list[str], kernel: str, dur: float, record: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One op call at `ext` ms, its launch and its one kernel of `dur` µs on stream 7."""
    ts, record = 1000.0 * ext, record or {}
    args = {"External id": ext, "Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)}
    launch = {"correlation": ext, "External id": ext}
    kernel_args = {**launch, "device": 0, "stream": 7, "grid": [2, 1, 1], "block": [512, 1, 1]}
    kernel_args |= {"registers per thread": 96, "shared memory": 0, **record}
    return [
        {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": ts, "dur": 50, "args": args | record},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 5, "dur": 5}
        | {"args": launch},
        {
            "ph": "X",
            "cat": "kernel",
            "name": kernel,
            "pid": 0,
            "tid": 7,
            "ts": ts + 20,
            "dur": dur,
            "args": kernel_args,
        },
    ]


def report(tmp_path: Path, events: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> Path:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": events, **(meta or {})}))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    return out


def test_a_call_of_milliseconds_is_not_latency_bound(tmp_path: Path) -> None:
    """Three calls of `aten::mm` [16,16]·[16,16] bf16, each its own kernel: 2·16·16·16 = 8,192 FLOPs
    and (256 + 256 + 256)·2 = 1,536 bytes. On an H100 SXM (989.4 TFLOP/s bf16, 3,350 GB/s) the
    bytes take 1,536 / 3,350,000 = 0.000458507 µs and the FLOPs 0.0000083 µs: attainable 0.00046 µs,
    under the 4 µs of latency. Calls of 6 and 16 µs (at most 4 · 4 µs) are latency-bound; the call
    of 2,546 µs is not — its bound is its roof's, memory, and its likely cause says its cost does not
    explain its time."""
    dims, types = [[16, 16], [16, 16]], [BF16, BF16]
    events = [
        *call(1, "aten::mm", dims, types, GEMM.format(64), 6.0),
        *call(2, "aten::mm", dims, types, GEMM.format(128), 16.0),
        *call(3, "aten::mm", dims, types, GEMM.format(256), 2546.0),
    ]
    out = report(tmp_path, events)
    table = pd.read_parquet(out / "roofline.parquet").set_index("mean_us")
    assert table["bytes"].tolist() == [1536.0] * 3 and table["flops"].tolist() == [8192.0] * 3
    assert table["attainable_us"].tolist() == pytest.approx([1536 / 3_350_000] * 3)
    assert table.loc[6.0, "bound"] == "latency" and table.loc[16.0, "bound"] == "latency"
    assert table.loc[2546.0, "bound"] == "memory"
    cause = "2,546 µs a call for 0.00046 µs attainable: work its cost misses, or time the trace does not explain"
    assert table.loc[2546.0, "likely_cause"].startswith(cause)
    assert table.loc[[6.0, 16.0], "likely_cause"].map(lambda c: not isinstance(c, str) or "attainable" not in c).all()
    # what to fix first: the long call leads, memory-bound at 0.0 % and saying why
    findings = json.loads((out / "report.json").read_text())["findings"]
    first = next(f for f in findings if f["kind"] == "kernel_headroom")
    assert first["kernel"] == GEMM.format(256)
    assert first["why"].startswith("memory-bound, 0.0 % SOL, " + cause)


def all_reduce(ext: int, group_size: int | None) -> list[dict[str, Any]]:
    """A bf16 all_reduce of 1,000,000 elements, its kernel 100 µs on 2 blocks of 512 threads (96
    registers each: one block an SM)."""
    record: dict[str, Any] = {"Collective name": "allreduce", "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000}
    record |= {"dtype": "BFloat16"} | ({"Group size": group_size} if group_size else {})
    return call(ext, "record_param_comms", [[1_000_000]], [BF16], ALL_REDUCE, 100.0, record)


@pytest.mark.parametrize("group_size", [8, None])
def test_a_collective_is_bound_by_its_link_not_its_grid(tmp_path: Path, group_size: int | None) -> None:
    """The all_reduce crosses the bus 2·(8−1)/8 = 1.75 times: 1,000,000 · 2 B · 1.75 = 3,500,000 bytes,
    7.78 µs at NVLink's 450 GB/s, 7.8 % of its 100 µs. Its 2 blocks fill 2 / 132 = 1.5 % of one wave
    of 132 SMs at one block each (occupancy under 25 % too), but that is NCCL's design: no occupancy
    or wave cause. Its precision is its message's,
    bf16. Recorded without its group size, the trace's world size (8) is taken for it: its likely
    cause and its finding say its bytes rest on that."""
    meta = {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}}
    out = report(tmp_path, all_reduce(1, group_size), meta)
    row = pd.read_parquet(out / "roofline.parquet").iloc[0]
    assert (row["bytes"], row["bound"], row["precision"]) == (3_500_000.0, "communication", "bf16")
    assert row["sol_pct"] == pytest.approx(100 * 3_500_000 / 450_000 / 100)
    finding = next(
        f for f in json.loads((out / "report.json").read_text())["findings"] if f["kind"] == "kernel_headroom"
    )
    assert "occupancy" not in finding["evidence"] and "wave" not in finding["evidence"]
    assumed = "its bus bytes assume a group of the trace's world size (its group's size not recorded)"
    if group_size:
        assert pd.isna(row["likely_cause"]) and not row["estimate"]
        assert "assume" not in finding["evidence"]
    else:
        assert row["likely_cause"] == assumed and row["estimate"]
        assert finding["why"] == f"communication-bound, 7.8 % SOL, {assumed}"
        assert f"likely cause: {assumed}" in finding["evidence"]
