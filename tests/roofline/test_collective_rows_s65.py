"""A roofline row holds one op: the SendRecv kernel of an all_to_all and of a gather (one name,
one launcher `record_param_comms`, no input shapes) had been one row labelled all_to_all, "the
mean of 2 formulas", its bytes the mean of both (campaign AQ 8) — while the time share kept them
apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108, "totalGlobalMem": 85899345920, "computeMajor": 8}
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def collective(ts: float, ext: int, name: str, nelems_in: int, nelems_out: int) -> list[dict[str, Any]]:
    record = {"Collective name": name, "In msg nelems": nelems_in, "Out msg nelems": nelems_out, "Group size": 4}
    record |= {"dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]", "Seq": ext}
    kernel_args = {"correlation": ext, "External id": ext, "device": 0, "stream": 20, "grid": [2, 1, 1]}
    return [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 10}
        | {"args": {"External id": ext, **record}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 2, "dur": 4}
        | {"args": {"correlation": ext, "External id": ext}},
        {"ph": "X", "cat": "kernel", "name": SENDRECV, "pid": 0, "tid": 20, "ts": ts + 50, "dur": 100}
        | {"args": {**kernel_args, **record}},
    ]


def test_an_all_to_all_and_a_gather_of_one_kernel_are_two_rows(tmp_path: Path) -> None:
    events = collective(300, 2, "all_to_all", 1_048_576, 1_048_576) + collective(500, 3, "gather", 1_000, 4_000)
    doc = {"traceEvents": events, "deviceProperties": [A100], "distributedInfo": {"rank": 0, "world_size": 4}}
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    table = pd.read_parquet(out / "roofline.parquet")
    rows = table[table["name"] == SENDRECV].sort_values("op_mapping")
    # each call its own row: one call of 100 µs each, costed by its one formula
    assert rows["op_mapping"].tolist() == ["all_to_all", "send_recv"]
    assert rows["count"].tolist() == [1, 1] and rows["total_us"].tolist() == [100.0, 100.0]
    assert rows["formulas"].tolist() == [1, 1]
    assert not rows["formula"].str.startswith("the mean of").any()
