"""A communication kernel's own `Collective name` settles its op over its name's: PyTorch runs
all_to_all as `ncclDevKernel_SendRecv` kernels. Values below are derived by hand."""

from __future__ import annotations

import json
from pathlib import Path

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _trace(path: Path, kernels: list[tuple[str, str]]) -> Path:
    events = []
    for i, (name, collective) in enumerate(kernels, 1):
        args = {"Collective name": collective, "In msg nelems": 4096, "Out msg nelems": 4096, "Group size": 4}
        args |= {"dtype": "BFloat16"}
        ts = 100 * i
        op = {"Input Dims": [[4096], [4096]], "Input type": ["c10::BFloat16"] * 2, "External id": i, **args}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 20, "args": op},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 5, "dur": 3,
             "args": {"correlation": i, "External id": i}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": ts + 30, "dur": 10,
             "args": {"correlation": i, "External id": i, "device": 0, "stream": 20, **args}},
        ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_all_to_all_on_send_recv_kernels_is_all_to_all(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.json", [(SENDRECV, "all_to_all"), (SENDRECV, "send"), (ALLREDUCE, "allreduce")])
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    kernels = build_report(out).analysis.kernels.sort_values("ts_us")
    assert kernels["op_mapping"].astype(str).tolist() == ["all_to_all", "send_recv", "all_reduce"]
    assert kernels["label_evidence"].astype(str).tolist() == ["collective>name", "name", "name"]
    assert kernels["label_rule"].astype(str).tolist()[0] == "rule:nccl-device-kernel"  # the name's family
    # bus bytes: 4096 bf16 × (n − 1)/n for all_to_all (n = 4); × 1 point to point; × 2(n − 1)/n all-reduce
    assert kernels["bytes"].tolist() == [4096 * 2 * 3 / 4, 4096 * 2, 4096 * 2 * 2 * 3 / 4]
