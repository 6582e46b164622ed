"""A collective's group size from the trace's process-group table (campaign BD 3). Newer PyTorch
writes `distributedInfo.pg_config` — per process group its `pg_name`, `pg_desc`,
`backend_config`, `pg_size` and `ranks` — while the NCCL kernels of some releases record the
group's `Process Group Name` and neither `Group size` nor `Process Group Ranks`. The roofline had
taken the world size (8 for a TP group of 4) and said the group's size was "not being recorded".
Hand-built Kineto traces; every expected value is worked out here by hand from the events below
(nccl-tests PERFORMANCE.md: all_reduce crosses the bus 2(n−1)/n times, broadcast once)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.report.dashboard import load_run

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85052260352, "numSms": 132, "computeMajor": 9}
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
# PyTorch's `_get_all_pg_configs` as Kineto writes it: the default group of the 8 ranks and a TP group of 4
PG_CONFIG = [
    {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, "ranks": list(range(8))},
    {"pg_name": "1", "pg_desc": "tp_group", "backend_config": "cuda:nccl", "pg_size": 4, "ranks": [0, 1, 2, 3]},
]


def _nccl(ts: float, ext: int, kernel: str, collective: str, **extra: Any) -> list[dict[str, Any]]:
    """record_param_comms of 1,000,000 bf16 elements in group "1" (its name and description only, as
    the releases that write pg_config record it), its launch and the kernel of 100 µs."""
    record = {"Collective name": collective, "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000}
    record |= {"dtype": "BFloat16", "Process Group Name": "1", "Process Group Description": "tp_group", **extra}
    return [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 30}
        | {"args": {"External id": ext, **record}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 10, "dur": 10}
        | {"args": {"correlation": ext, "External id": ext}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 40, "ts": ts + 40, "dur": 100}
        | {"args": {"correlation": ext, "External id": ext, "device": 0, "stream": 40, **record}},
    ]


def _trace(folder: Path, events: list[dict[str, Any]], distributed: dict[str, Any], name: str = "rank0") -> Path:
    doc = {"traceEvents": events, "deviceProperties": [H100], "distributedInfo": distributed}
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / f"{name}.json"
    trace.write_text(json.dumps(doc))
    return trace


def _world(rank: int = 0, **fields: Any) -> dict[str, Any]:
    return {"backend": "nccl", "rank": rank, "world_size": 8, "pg_count": 2, "pg_config": PG_CONFIG, **fields}


def test_the_group_size_is_read_from_pg_config(tmp_path: Path) -> None:
    events = [*_nccl(1000, 1, ALL_REDUCE, "allreduce"), *_nccl(2000, 2, BROADCAST, "broadcast")]
    # the kernel's own `Group size` comes first: 2 here, though the table says 4
    events += _nccl(3000, 3, ALL_REDUCE, "allreduce", **{"Group size": 2})
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([_trace(tmp_path, events, _world())]), out)
    kernels = build_report(out, None, tmp_path / "r.html").analysis.kernels.sort_values("ts_us")
    table, broadcast, recorded = (row for _, row in kernels.iterrows())
    # 1,000,000 bf16 · 2 B · 2·(4−1)/4 = 2,000,000 · 1.5 = 3,000,000 (the world's 8 had made 3,500,000)
    assert table["bytes"] == 3_000_000
    assert table["formula"] == "bus bytes = 1000000·2 B · 1.500 (all_reduce, n=4 from the trace's process-group table)"
    assert not table["estimate"]
    # broadcast: 2,000,000 B · 1 whatever n; its formula no longer says the size was not recorded
    assert broadcast["bytes"] == 2_000_000
    assert broadcast["formula"].endswith("(broadcast, n=4 from the trace's process-group table)")
    assert not broadcast["estimate"]
    # 2,000,000 · 2·(2−1)/2 = 2,000,000
    assert recorded["bytes"] == 2_000_000 and recorded["formula"].endswith("(all_reduce, n=2)")
    # summary.json keeps the table as name → size, per trace
    summary = json.loads((out / "summary.json").read_text())
    assert summary["traces"][0]["distributed"]["process_groups"] == {"0": 8, "1": 4}
    # the notebook's analysis reads the same table
    again = load_run(out).analyse().kernels.sort_values("ts_us")
    assert again["bytes"].tolist() == [3_000_000, 2_000_000, 2_000_000]


def test_unusable_pg_config_entries_are_ignored_and_counted(tmp_path: Path) -> None:
    bad = [
        {"pg_name": "1", "pg_size": "4", "ranks": [0, 1, 2, 3]},  # a size that is a text
        {"pg_name": "2", "pg_size": -1, "ranks": []},  # negative
        {"pg_name": "3", "pg_size": 16, "ranks": list(range(16))},  # above the world's 8
        {"pg_name": "4", "pg_size": 4, "ranks": [0, 1]},  # a ranks list of another size
        {"pg_name": "5", "pg_size": 2, "ranks": [0, 1]},
        {"pg_name": "5", "pg_size": 4, "ranks": [0, 1, 2, 3]},  # the same name, another size
        "tp_group",  # no object
        {"pg_name": "6", "ranks": [0, 1]},  # no pg_size: its ranks counted (kept)
    ]
    events = _nccl(1000, 1, ALL_REDUCE, "allreduce")
    result = ingest_paths([_trace(tmp_path, events, _world(pg_config=bad))])
    facts = result.facts["traces"][0]
    assert facts["distributed"]["process_groups"] == {"6": 2}
    # 7 of the 8 entries: "1", "2", "3", "4", both "5", and the text
    lines = [w for w in result.warnings if "pg_config" in w]
    assert len(lines) == 1 and "7 process groups of 8 ignored" in lines[0], result.warnings
    out = tmp_path / "t.atlas"
    write_outputs(result, out)
    row = build_report(out, None, tmp_path / "r.html").analysis.kernels.iloc[0]
    # group "1" has no usable size: the world's 8 assumed, 2,000,000 B · 2·7/8 = 3,500,000, said
    assert row["bytes"] == 3_500_000 and row["formula"].endswith("the process group's size not being recorded)")
    # a pg_config that is no list: ignored, said
    result = ingest_paths([_trace(tmp_path / "dict", events, _world(pg_config={"pg_name": "1", "pg_size": 4}))])
    assert "process_groups" not in result.facts["traces"][0]["distributed"]
    assert any("pg_config is not a list: ignored" in w for w in result.warnings)


def test_a_summary_without_process_groups_still_loads(tmp_path: Path) -> None:
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([_trace(tmp_path, _nccl(1000, 1, ALL_REDUCE, "allreduce"), _world())]), out)
    path = out / "summary.json"
    summary = json.loads(path.read_text())
    del summary["traces"][0]["distributed"]["process_groups"]  # as ingest wrote it before
    path.write_text(json.dumps(summary))
    row = build_report(out, None, tmp_path / "r.html").analysis.kernels.iloc[0]
    assert row["bytes"] == 3_500_000  # 2,000,000 B · 2·7/8: the world size, assumed (all it can know)
    # a size that is no whole number ≥ 1 in a doctored summary: refused in one line
    summary["traces"][0]["distributed"]["process_groups"] = {"1": 0}
    path.write_text(json.dumps(summary))
    with pytest.raises(AtlasError, match="process_groups"):
        build_report(out, None, tmp_path / "r2.html")


def test_the_cross_rank_view_reads_the_same_table(tmp_path: Path) -> None:
    # ranks 0 and 1 of the TP group of 4 (ranks 2 and 3 not profiled): one all-reduce each, Seq 7
    traces = [
        _trace(tmp_path, _nccl(1000, 1, ALL_REDUCE, "allreduce", Seq=7), _world(rank), name=f"rank{rank}")
        for rank in (0, 1)
    ]
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths(traces), out)
    build_report(out, None, tmp_path / "r.html")
    rows = pd.read_parquet(out / "collectives.parquet")
    assert len(rows) == 2 and rows["msg_bytes"].tolist() == [2_000_000, 2_000_000]
    # bus bandwidth = algorithm bandwidth · 2(n−1)/n with n = 4 from the table: 1.5 (the 2 ranks
    # seen had made it 2·1/2 = 1)
    assert (rows["busbw_gbps"] / rows["algbw_gbps"]).tolist() == pytest.approx([1.5, 1.5])
