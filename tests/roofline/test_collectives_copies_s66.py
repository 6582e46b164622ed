"""A collective's group size from what the trace records (campaign AV 9), and a peer copy told by
the call that launched it (campaign AZ 2). Hand-built Kineto traces; every expected value is worked
out here by hand from the events below.

Collectives: the roofline had taken the trace's world size (distributedInfo 8) wherever NCCL's
`Group size` was missing, though the kernel's `Process Group Ranks`, its own `In msg nelems` /
`Out msg nelems`, or its op's `world_size` argument named the group; and a gather (an NCCL
SendRecv kernel, labelled send_recv) was costed with factor 1, not nccl-tests' Gather (n−1)/n.

Copies: ROCm names every device copy `Memcpy DtoD (Device -> Device)`; a copy launched by
`hipMemcpyPeerAsync` goes between two GPUs and had been costed as an on-device copy (twice its
bytes against HBM). MI300X (catalogs/devices.toml, AMD's product page): HBM3 5.3 TB/s, Infinity
Fabric 448 GB/s per direction (7 links × 64 GB/s); H100 SXM: NVLink 450 GB/s per direction."""

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
MI300X = {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992, "numSms": 304, "computeMajor": 9}
WORLD = {"backend": "nccl", "rank": 0, "world_size": 8}
DTOD = "Memcpy DtoD (Device -> Device)"

REDUCE_SCATTER = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
AR_FUSION = (
    "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<"
    "(tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 4, true, false>"
    "(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams<__nv_bfloat16>)"
)


def _nccl(ts: float, ext: int, kernel: str, record: dict[str, Any], dur: float = 100.0) -> list[dict[str, Any]]:
    """record_param_comms with NCCL's fields, its launch, and the kernel (on device 0, stream 20)
    carrying the same fields, as newer Kineto writes them."""
    record = {"Process Group Name": "3", "Process Group Description": "tp", **record}
    return [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 10}
        | {"args": {"External id": ext, **record}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 2, "dur": 4}
        | {"args": {"correlation": ext, "External id": ext}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 20, "ts": ts + 50, "dur": dur}
        | {"args": {"correlation": ext, "External id": ext, "device": 0, "stream": 20, "grid": [2, 1, 1], **record}},
    ]


def _kernels(tmp_path: Path, events: list[dict[str, Any]]) -> pd.DataFrame:
    """The costed kernel rows of an H100 rank of a world of 8, in time order."""
    doc = {"traceEvents": events, "deviceProperties": [H100], "distributedInfo": WORLD}
    tmp_path.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    return build_report(out, None, tmp_path / "r.html").analysis.kernels.sort_values("ts_us")


def _copy_row(tmp_path: Path, call: str, nbytes: int, dur: float) -> pd.Series:
    """The roofline row of one `Memcpy DtoD` copy of `nbytes` on an MI300X, launched by `call`
    (one trace each: copies of one name and no launching op share a roofline row)."""
    ids = {"correlation": 201, "External id": 201}
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 1000, "tid": 1000, "ts": 1000, "dur": 20, "args": ids},
        {"ph": "X", "cat": "gpu_memcpy", "name": DTOD, "pid": 0, "tid": 0, "ts": 1030, "dur": dur}
        | {"args": {**ids, "device": 0, "stream": 0, "bytes": nbytes}},
    ]
    doc = {"traceEvents": events, "deviceProperties": [MI300X], "roctracer_version": 4.1}
    trace = tmp_path / call / "rank0.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(doc))
    out = tmp_path / call / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    roofline = build_report(out, None, tmp_path / call / "r.html").analysis.roofline
    rows = roofline[roofline["name"] == DTOD]
    assert len(rows) == 1, roofline[["name", "bytes"]]
    return rows.iloc[0]


def _bf16(n_in: int, n_out: int, **fields: Any) -> dict[str, Any]:
    return {"In msg nelems": n_in, "Out msg nelems": n_out, "dtype": "BFloat16", **fields}


# --- class 9: the group size the trace records ---------------------------------------------------


def test_the_group_size_is_read_from_the_ranks_list_then_the_message_sizes(tmp_path: Path) -> None:
    events = [
        # no `Group size`; `Process Group Ranks` lists 4 members (the messages say 4 too)
        *_nccl(
            100,
            1,
            REDUCE_SCATTER,
            _bf16(8_388_608, 2_097_152, **{"Collective name": "_reduce_scatter_base"})
            | {"Process Group Ranks": "[0, 1, 2, 3]"},
        ),
        # neither: In 8,388,608 over Out 2,097,152 = 4 ranks (reduce_scatter's input holds n outputs)
        *_nccl(400, 2, REDUCE_SCATTER, _bf16(8_388_608, 2_097_152, **{"Collective name": "_reduce_scatter_base"})),
        # ranks list of 2 against messages of ratio 4: the list comes first
        *_nccl(
            700,
            3,
            ALL_GATHER,
            _bf16(1_000_000, 4_000_000, **{"Collective name": "_allgather_base"}) | {"Process Group Ranks": "[4, 5]"},
        ),
        # `Group size` 4 recorded: first of all (the cut-short list names no size anyway)
        *_nccl(
            1000,
            4,
            ALL_GATHER,
            _bf16(1_000_000, 4_000_000, **{"Collective name": "_allgather_base"})
            | {"Group size": 4, "Process Group Ranks": "[0, 1, ...]"},
        ),
    ]
    listed, messages, precedence, recorded = (row for _, row in _kernels(tmp_path, events).iterrows())
    # 8,388,608 bf16 · 2 B · (4−1)/4 = 16,777,216 · 0.75 = 12,582,912 (the world's 8 had made 14,680,064)
    assert listed["bytes"] == 12_582_912
    assert listed["formula"] == "bus bytes = 8388608·2 B · 0.750 (reduce_scatter, n=4 from the process group's ranks)"
    assert messages["bytes"] == 12_582_912
    assert messages["formula"].endswith("(reduce_scatter, n=4 from the recorded message sizes)")
    # 4,000,000 · 2 B · (2−1)/2 = 4,000,000
    assert precedence["bytes"] == 4_000_000 and "n=2 from the process group's ranks" in precedence["formula"]
    # 4,000,000 · 2 B · 3/4 = 6,000,000
    assert recorded["bytes"] == 6_000_000 and recorded["formula"].endswith("(all_gather, n=4)")
    # none of them is an estimate: every n was recorded
    kernels = pd.concat([listed, messages, precedence, recorded], axis=1).T
    assert not kernels["estimate"].astype(bool).any()
    # bus bandwidth over the kernel's 100 µs: 12,582,912 B / 100e-6 s = 125.82912 GB/s
    assert listed["op_time_us"] == 100.0 and listed["bytes"] / listed["op_time_us"] / 1e3 == pytest.approx(125.82912)


def test_the_default_group_is_the_world_and_other_groups_are_assumed_so(tmp_path: Path) -> None:
    events = [
        # all_reduce of 1000 floats in the default group, no size nor ranks: the world's 8, known
        *_nccl(
            100,
            1,
            ALL_REDUCE,
            {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000}
            | {"dtype": "Float", "Process Group Description": "default_pg"},
        ),
        # the same in group "tp": the world's 8, assumed
        *_nccl(
            400,
            2,
            ALL_REDUCE,
            {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000} | {"dtype": "Float"},
        ),
    ]
    default, other = (row for _, row in _kernels(tmp_path, events).iterrows())
    # 1000 · 4 B · 2·7/8 = 7,000 both
    assert default["bytes"] == 7000 and other["bytes"] == 7000
    assert (
        default["formula"]
        == "bus bytes = 1000·4 B · 1.750 (all_reduce, n=8: the default process group's, the trace's world size)"
    )
    assert not default["estimate"]
    assert "n=8: the trace's world size assumed" in other["formula"] and other["estimate"]


def test_a_gather_crosses_the_bus_n_minus_1_over_n_times(tmp_path: Path) -> None:
    # gather of 1,048,576 floats per rank into 8,388,608 at the root, group 8, on a SendRecv kernel, 100 µs
    gather = {"Collective name": "gather", "In msg nelems": 1_048_576, "Out msg nelems": 8_388_608, "Group size": 8}
    events = _nccl(100, 1, SENDRECV, gather | {"dtype": "Float", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"})
    (row,) = (r for _, r in _kernels(tmp_path, events).iterrows())
    # nccl-tests Gather: 8,388,608 · 4 B = 33,554,432 · 7/8 = 29,360,128 bus bytes (was · 1)
    assert row["op_mapping"] == "send_recv" and row["bytes"] == 29_360_128
    assert row["formula"] == "bus bytes = 8388608·4 B · 0.875 (gather, n=8)"
    # bus bandwidth: 29,360,128 B / 100 µs = 293.60128 GB/s
    assert row["bytes"] / row["op_time_us"] / 1e3 == pytest.approx(293.60128)
    # a gather without its size recorded: Out over In, 8
    events = _nccl(100, 1, SENDRECV, {k: v for k, v in gather.items() if k != "Group size"} | {"dtype": "Float"})
    (row,) = (r for _, r in _kernels(tmp_path / "b", events).iterrows())
    assert row["bytes"] == 29_360_128 and row["formula"].endswith("(gather, n=8 from the recorded message sizes)")


def test_flashinfer_allreduce_fusion_takes_its_world_size_argument(tmp_path: Path) -> None:
    # flashinfer::trtllm_allreduce_fusion(allreduce_in [64, 7168] bf16, world_size 4, world_rank 0,
    # token_num 64, hidden_dim 7168, workspace, launch_with_pdl, use_oneshot, trigger, fp32_acc,
    # pattern 1, allreduce_out, residual_in, residual_out, norm_out, quant_out, scale_out, rms_gamma,
    # rms_eps, scale_factor, layout_code); world 8
    dims = [[64, 7168], [], [], [], [], [4], [], [], [], [], [], [64, 7168], [64, 7168], [64, 7168], [64, 7168]]
    dims += [[], [], [7168], [], [], []]
    bf16, scalar = "c10::BFloat16", "Scalar"
    types = [bf16, scalar, scalar, scalar, scalar, "long int", scalar, scalar, scalar, scalar, scalar]
    types += [bf16] * 4 + ["", "", bf16, scalar, "", ""]
    concrete = ["", "4", "0", "64", "7168", "", "False", "True", "True", "True", "1", "", "", "", ""]
    concrete += ["", "", "", "1e-06", "", ""]
    op = {"ph": "X", "cat": "cpu_op", "name": "flashinfer::trtllm_allreduce_fusion", "pid": 1, "tid": 1}
    op |= {"ts": 100, "dur": 30, "args": {"External id": 1, "Input Dims": dims, "Input type": types}}
    op["args"]["Concrete Inputs"] = concrete
    events = [
        op,
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 4}
        | {"args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": AR_FUSION, "pid": 0, "tid": 20, "ts": 150, "dur": 12}
        | {"args": {"correlation": 1, "External id": 1, "device": 0, "stream": 20, "grid": [64, 1, 1]}},
    ]
    (row,) = (r for _, r in _kernels(tmp_path, events).iterrows())
    # 64·7168 = 458,752 bf16 · 2 B · 2·(4−1)/4 = 917,504 · 1.5 = 1,376,256 (the world's 8: 1,605,632)
    assert row["category"] == "communication" and row["bytes"] == 1_376_256
    assert "(all_reduce, n=4 from its op's group-size argument)" in row["formula"] and not row["estimate"]
    # bus bandwidth over its 12 µs kernel: 1,376,256 B / 12e-6 s = 114.688 GB/s
    assert row["op_time_us"] == 12.0 and row["bytes"] / row["op_time_us"] / 1e3 == pytest.approx(114.688)


# --- campaign AZ 2: a copy between GPUs told by its launch call ----------------------------------


def test_a_rocm_peer_copy_is_told_by_its_launch_call(tmp_path: Path) -> None:
    peer = _copy_row(tmp_path, "hipMemcpyPeerAsync", 67_108_864, 200.0)
    # 67,108,864 B once over Infinity Fabric in 200 µs: 335.54432 GB/s of 448 = 74.898 %;
    # attainable 67,108,864 / 448e9 s = 149.797 µs (it had been 134,217,728 B against 5300 GB/s, 12.66 %)
    assert peer["bytes"] == 67_108_864 and peer["formula"] == "67108864 bytes over the GPU-to-GPU link"
    assert peer["achieved_gbps"] == pytest.approx(335.54432)
    assert peer["peak_gbps"] == 448.0 and peer["peak_label"] == "peer link bandwidth"
    assert peer["sol_pct"] == pytest.approx(74.898286, rel=1e-6) and peer["bound"] == "peer link"
    assert peer["attainable_us"] == pytest.approx(149.796571, rel=1e-6)
    # the synchronous hipMemcpyPeer: 4,480,000 B in 20 µs = 224 GB/s of 448, 50 %
    synchronous = _copy_row(tmp_path, "hipMemcpyPeer", 4_480_000, 20.0)
    assert synchronous["bytes"] == 4_480_000 and synchronous["sol_pct"] == pytest.approx(50.0)
    assert synchronous["bound"] == "peer link"
    # a hipMemcpyAsync DtoD stays on the device: 2 · 106,000,000 B in 50 µs = 4240 GB/s of 5300, 80 %
    local = _copy_row(tmp_path, "hipMemcpyAsync", 106_000_000, 50.0)
    assert local["bytes"] == 212_000_000 and local["formula"] == "106000000 bytes read + written"
    assert local["peak_gbps"] == 5300.0 and local["sol_pct"] == pytest.approx(80.0) and local["bound"] == "memory"


def test_every_peer_copy_call_of_cuda_and_hip_is_between_gpus() -> None:
    from kernel_atlas.roofline.analysis import _between_gpus

    names = pd.Series([DTOD] * 12)
    launches = pd.Series(
        [
            "cudaMemcpyPeerAsync",
            "cudaMemcpyPeer",
            "cudaMemcpy3DPeerAsync",
            "cuMemcpyPeerAsync",
            "hipMemcpyPeerAsync",
            "hipMemcpyPeer",
            "cudaMemcpyPeerAsync_v4000",  # nsys's versioned names
            "cudaMemcpyPeerAsync_ptsz",
            "hipMemcpyAsync",  # not peer copies
            "cudaMemcpyAsync",
            "hipMemcpyDtoD",
            None,
        ]
    )
    assert _between_gpus(names, launches).tolist() == [True] * 8 + [False] * 4
