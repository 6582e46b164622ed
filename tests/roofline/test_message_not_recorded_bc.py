"""DeepEP compiled into another namespace (campaign BC class 2: DeepSeek's `dpsk::ep::internode::
combine`) sends what deep_ep's kernels send — each rank the tokens routed to it, not recorded — so
costs.toml `[message_not_recorded]` holds it too: the tensors on its launch are not its message.
Hand-built Kineto traces; the expected values are worked out here from the events below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.report.build import build_report
from kernel_atlas.roofline.analysis import template_collective_cost
from kernel_atlas.roofline.costs import Call, NoCost

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "numSms": 132, "computeMajor": 9}
WORLD = {"backend": "nccl", "rank": 0, "world_size": 8}
X_BF16 = {"Input Dims": [[1024, 7168]], "Input type": ["c10::BFloat16"]}


def _row(tmp_path: Path, op: str, kernel: str) -> pd.Series:
    """The row of one `kernel` launched by the CPU op `op` recording x [1024, 7168] bf16, 10 µs."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": 100, "dur": 20}
        | {"args": {"External id": 1} | X_BF16},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 105, "dur": 4}
        | {"args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 20, "ts": 150, "dur": 10}
        | {"args": {"correlation": 1, "External id": 1, "device": 0, "stream": 20, "grid": [36, 1, 1]}},
    ]
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [H100], "distributedInfo": WORLD}))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    kernels = build_report(out, None, tmp_path / "r.html").analysis.kernels
    (row,) = (r for _, r in kernels[kernels["name"] == kernel].iterrows())
    return row


@pytest.mark.parametrize(
    "kernel",
    [
        "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*)",
        "void dpsk::ep::intranode::dispatch<8, 512>(int4*, float*, int*, long*)",
        "void dpsk::ep::internode_ll::combine<false, 7168, 9, 10>(void*, void*, int*)",
    ],
)
def test_deepep_in_another_namespace_is_not_costed_from_its_launchs_tensors(tmp_path: Path, kernel: str) -> None:
    # x [1024, 7168] bf16 is not what it sends: taken for the message it had made an all_to_all of
    # 1024·7168 · 2 B · 7/8 = 12,845,056 bus bytes over the world of 8
    row = _row(tmp_path, "combine", kernel)
    assert (row["category"], row["op_mapping"]) == ("communication", "all_to_all")
    assert row["role"] == "no model" and pd.isna(row["bytes"])
    assert row["note"].startswith("collective message size not recorded: the tensors on its launch are not")


def test_a_catalog_entry_of_deepep_in_another_namespace_has_no_message() -> None:
    kernel = "void dpsk::ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*)"
    call = Call(
        "deep_ep::combine",
        "all_to_all",
        parse_call(json.dumps(X_BF16["Input Dims"]), json.dumps(X_BF16["Input type"]), None, None),
        "rule:expert-parallel-a2a",
    )
    with pytest.raises(NoCost, match="the tensors on its launch are not"):
        template_collective_cost(kernel, call)
