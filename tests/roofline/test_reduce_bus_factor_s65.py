"""NCCL's reduce crosses the bus once (nccl-tests: busbw = algbw), though its label is
reduce_scatter (the taxonomy has no reduce): it had been costed with reduce_scatter's (n-1)/n —
bytes and bandwidth scaled by 0.75 on 4 ranks (campaign AQ 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108, "totalGlobalMem": 85899345920, "computeMajor": 8}
REDUCE = "ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_a_reduce_is_costed_with_bus_factor_one(tmp_path: Path) -> None:
    record = {"Collective name": "reduce", "In msg nelems": 1_048_576, "Out msg nelems": 1_048_576, "Group size": 4}
    record |= {"dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]", "Seq": 1}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 100, "dur": 10}
        | {"args": {"External id": 1, **record}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 102, "dur": 4}
        | {"args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": REDUCE, "pid": 0, "tid": 20, "ts": 150, "dur": 100}
        | {"args": {"correlation": 1, "External id": 1, "device": 0, "stream": 20, "grid": [2, 1, 1], **record}},
    ]
    doc = {"traceEvents": events, "deviceProperties": [A100], "distributedInfo": {"rank": 0, "world_size": 4}}
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    row = pd.read_parquet(out / "roofline.parquet").set_index("name").loc[REDUCE]
    # 1,048,576 floats · 4 B · factor 1 = 4,194,304 bus bytes in 100 µs: 41.94304 GB/s
    assert row["op_mapping"] == "reduce_scatter"
    assert row["bytes"] == 1_048_576 * 4 == 4_194_304
    assert row["formula"].startswith("bus bytes = 1048576·4 B · 1.000 (reduce, n=4)")
