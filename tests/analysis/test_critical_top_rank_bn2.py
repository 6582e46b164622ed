"""report.json `critical_path.top.rank` names each rank as the integer every other rank field of
report.json is (`per_rank`, `devices`, `stragglers`, `ranks_missing`), not as text (campaign BN 7:
`{"rank": "1", "path_us": 910.0, …}`). Expected values by hand from the segments."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernel_atlas.analysis.critical_segments import top_entries
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from tests.analysis.test_critical_path_ranks import _rank_trace


def test_top_entries_key_ranks_by_integer_and_names_by_text() -> None:
    # rank 1: 600 + 310 = 910 µs in 2 segments (91.92 % of 990), rank 0: 80 µs in 1 (8.08 %)
    segs = pd.DataFrame(
        {"rank": [1, 0, 1], "op": ["aten::slow", "aten::mm", "nccl:all_reduce"], "dur_us": [600.0, 80.0, 310.0]}
    )
    assert top_entries(segs, "rank") == [
        {"rank": 1, "path_us": 910.0, "segments": 2, "pct": 91.92},
        {"rank": 0, "path_us": 80.0, "segments": 1, "pct": 8.08},
    ]
    assert [type(e["rank"]) for e in top_entries(segs, "rank")] == [int, int]
    assert [e["op"] for e in top_entries(segs, "op")] == ["aten::slow", "nccl:all_reduce", "aten::mm"]


def test_report_json_top_rank_is_an_integer(tmp_path: Path) -> None:
    # the two ranks of tests/analysis/test_critical_path_ranks.py: the joint path is rank 1's CPU (38)
    # and launch (2), then the all-reduce's transfer (20) and rank 0's aten::after (10): rank 1
    # 40 µs in 2 segments (57.14 % of 70), rank 0 30 µs in 2 (42.86 %)
    paths = []
    for rank, cpu, after in ((0, 10.0, 10.0), (1, 40.0, 5.0)):
        path = tmp_path / f"run_rank{rank}.json"
        path.write_text(json.dumps(_rank_trace(rank, cpu, after)))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    build_report(out)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert facts["top"]["rank"] == [
        {"rank": 1, "path_us": 40.0, "segments": 2, "pct": 57.14},
        {"rank": 0, "path_us": 30.0, "segments": 2, "pct": 42.86},
    ]
    assert [r["rank"] for r in facts["per_rank"]] == [0, 1]  # integers alike
