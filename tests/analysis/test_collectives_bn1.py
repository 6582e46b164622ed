"""Collectives across ranks, defects found by campaign BN (classes 2–5) and mended: the group
size of the bus factor, groups of one name, message sizes that differ under one Seq, and world
sizes the traces contradict. Every expected value is worked out by hand from the kernels each test
writes (the derivation is in its comment).

Every test builds rank traces on one clock: instance i ends at E_i = 250 + 200 i µs on every rank,
and a rank arrives at E_i − 150 plus its delay; its kernel runs from its arrival to E_i."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from kernel_atlas.analysis.collectives import cross_rank_view, missing_line, ranks_missing
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.fleet import print_cross_rank

KERNELS = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "allgather": "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "reduce_scatter": "ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
}
M = 1 << 20


def kernel(collective: str, i: int, delay: float = 0.0, **params: Any) -> dict[str, Any]:
    """Instance i's kernel on one rank, from E_i − 150 + delay to E_i, with its recorded parameters."""
    end = 250.0 + 200.0 * i
    return {"collective": collective, "start": end - 150.0 + delay, "end": end, "params": params}


def _rank_trace(rank: int, world: int, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for k, item in enumerate(kernels):
        params = {"Collective name": item["collective"], "dtype": "Float", **item["params"]}
        host = item["start"] - 40.0
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": host}
            | {"dur": 10, "args": {"External id": k + 1, **params}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": host + 2}
            | {"dur": 4, "args": {"correlation": k + 1, "External id": k + 1}},
            {"ph": "X", "cat": "kernel", "name": KERNELS[item["collective"]], "pid": 0, "tid": 20, "ts": item["start"]}
            | {"dur": item["end"] - item["start"], "args": {"correlation": k + 1, "device": 0, "stream": 20, **params}},
        ]
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
    }


def _view(tmp_path: Path, world: int, per_rank: dict[int, list[dict[str, Any]]]):
    paths = []
    for rank, kernels in per_rank.items():
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(_rank_trace(rank, world, kernels)))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    view = cross_rank_view(out, sorted(per_rank), world_size=world)
    rows = pd.read_parquet(view.path) if view.path is not None else None
    return view, rows


# --- class 2: the group size the message sizes say ---------------------------------------------------
# Ranks 0 and 1 of world 8, process group "5" ("tp_group"): no Group size, no members, no pg_config.
# all_gather In 1,000,000 / Out 4,000,000 floats, reduce_scatter 4,000,000 → 1,000,000, all_reduce
# 4,000,000; rank 1 arrives 50 µs after rank 0, so the transfer after the last arrival is 100 µs.
# By hand: msg_bytes = 4,000,000 × 4 = 16,000,000 B; algbw = 16e6 B / 100 µs = 160 GB/s. The sizes
# say n = 4,000,000 / 1,000,000 = 4 for all_gather and reduce_scatter: busbw = 160 × 3/4 = 120 GB/s
# (roofline.parquet's figure for those kernels; the 2 ranks seen had made it 160 × 1/2 = 80). The
# all_reduce's size says nothing: the 2 ranks seen, factor 2·1/2 = 1, busbw 160 — and a note says
# the roofline assumes the world size, 8, for it.
def test_the_group_size_is_the_one_the_message_sizes_say(tmp_path: Path) -> None:
    group = {"Process Group Name": "5", "Process Group Description": "tp_group"}
    specs = [
        ("allgather", {"In msg nelems": 1_000_000, "Out msg nelems": 4_000_000}),
        ("reduce_scatter", {"In msg nelems": 4_000_000, "Out msg nelems": 1_000_000}),
        ("allreduce", {"In msg nelems": 4_000_000, "Out msg nelems": 4_000_000}),
    ]
    per_rank = {
        r: [kernel(c, i, 50.0 if r == 1 else 0.0, Seq=i, **group, **p) for i, (c, p) in enumerate(specs)]
        for r in range(2)
    }
    view, rows = _view(tmp_path, 8, per_rank)
    assert rows["msg_bytes"].tolist() == [16_000_000] * 6
    assert rows["algbw_gbps"].tolist() == pytest.approx([160.0] * 6)
    assert rows["busbw_gbps"].tolist() == pytest.approx([120.0, 120.0, 120.0, 120.0, 160.0, 160.0])
    notes = view.facts["collectives"]["notes"]
    assert len(notes) == 1
    assert notes[0].startswith("process group 5: the group size of 1 instance is not recorded")
    assert "busbw takes the ranks seen, 2, at most the group's size" in notes[0]
    assert "roofline.parquet assumes the job's world size, 8" in notes[0]


# --- class 3: two groups recorded under one name ------------------------------------------------------
# World 4; groups {0, 1} and {2, 3}, both named "1", Group size 2, members "[0, 1]" resp. "[2, 3]";
# 3 all-reduces (Seq 0..2) in each; ranks 1 and 2 arrive 50 µs late. By hand: 6 instances of 2
# ranks (3 per group), not 3 of 4; in each the late rank — 1 in [0, 1], 2 in [2, 3] — leads the
# other by 50 µs > the noise (1 µs): last. (Merged, ranks 1 and 2 tied for last: nobody was.)
def test_groups_of_one_name_with_different_members_are_told_apart(tmp_path: Path) -> None:
    def members(r: int) -> dict[str, Any]:
        listed = "[0, 1]" if r < 2 else "[2, 3]"
        return {"Process Group Name": "1", "Group size": 2, "Process Group Ranks": listed}

    params = {"In msg nelems": M, "Out msg nelems": M}
    per_rank = {
        r: [kernel("allreduce", i, 50.0 if r in (1, 2) else 0.0, Seq=i, **members(r), **params) for i in range(3)]
        for r in range(4)
    }
    view, rows = _view(tmp_path, 4, per_rank)
    assert view.facts["collectives"]["instances"] == 6
    assert view.facts["collectives"]["notes"] == []
    assert rows["ranks"].tolist() == [2] * 12
    by_group = rows.groupby("process_group")["rank"].unique().map(sorted).to_dict()
    assert by_group == {"1 [0, 1]": [0, 1], "1 [2, 3]": [2, 3]}
    assert sorted(rows.loc[rows["last"], "rank"].tolist()) == [1, 1, 1, 2, 2, 2]


# The same without the members: nothing tells the groups apart, so each Seq is one instance on 4
# ranks — more than the recorded group size, 2: a note says so for the 3 instances.
def test_more_ranks_than_the_recorded_group_size_is_said(tmp_path: Path) -> None:
    params = {"Process Group Name": "1", "Group size": 2, "In msg nelems": M, "Out msg nelems": M}
    per_rank = {
        r: [kernel("allreduce", i, 50.0 if r in (1, 2) else 0.0, Seq=i, **params) for i in range(3)] for r in range(4)
    }
    view, rows = _view(tmp_path, 4, per_rank)
    assert view.facts["collectives"]["instances"] == 3
    assert (rows["ranks"].tolist(), rows["group_size"].tolist()) == ([4] * 12, [2] * 12)
    assert view.facts["collectives"]["notes"] == [
        "process group 1: 3 instances seen on up to 4 ranks, more than its group size, 2: ranks of different "
        "groups recorded under one name without their members — those instances mix the groups (skew, waits, "
        "stragglers)"
    ]


# --- class 4: one Seq, different message sizes -------------------------------------------------------
# 3 ranks of world 3, Group size 3, Seq recorded; all-reduce 1 (of 0..2) has 2 Mi floats on rank 1
# and 1 Mi on ranks 0 and 2, the others 1 Mi everywhere. By hand: 3 instances matched (a Seq every
# rank recorded vetoes nothing), 0 mismatched, 1 whose ranks record different sizes — counted and
# said in the headline.
def test_an_instance_whose_ranks_record_different_sizes_is_counted_and_said(tmp_path: Path) -> None:
    def params(r: int, i: int) -> dict[str, Any]:
        n = 2 * M if (r, i) == (1, 1) else M
        return {"Process Group Name": "0", "Group size": 3, "In msg nelems": n, "Out msg nelems": n}

    per_rank = {r: [kernel("allreduce", i, 10.0 * r, Seq=i, **params(r, i)) for i in range(3)] for r in range(3)}
    view, _ = _view(tmp_path, 3, per_rank)
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"], facts["instances_of_differing_sizes"]) == (3, 0, 1)
    console = Console(record=True, width=1000)
    print_cross_rank(console, view, {})
    assert (
        "; 1 instance matched by Seq whose ranks record different message sizes (one collective has one size on "
        "every rank" in console.export_text()
    )


# --- class 5: world sizes the traces contradict ------------------------------------------------------
# Rank 0 and rank 5, both saying world_size 4: ranks 1, 2, 3 are not here, and rank 5 cannot be in a
# job of 4 ranks (0 to 3) — said in the same JSON and line.
def test_a_rank_beyond_the_world_size_is_said() -> None:
    summary = {"traces": [{"distributed": {"rank": 0, "world_size": 4}}, {"distributed": {"rank": 5, "world_size": 4}}]}
    missing = ranks_missing(summary, [0, 5])
    assert missing == {"world_size": 4, "ranks": [1, 2, 3], "count": 3, "outside": [5]}
    assert missing_line(missing) == (
        "ranks 1, 2, 3 of the job's 4 not in this run (not given, or failed to ingest): collectives, skew and "
        "stragglers cover the ranks here; rank 5 is beyond the job's world size, 4 (ranks 0 to 3): traces of "
        "another job, or a wrong rank — counted among the ranks here"
    )


# Rank 0 says world_size 4, rank 1 says 8: no one job to name missing ranks of — said, not null.
def test_traces_naming_different_world_sizes_are_said() -> None:
    summary = {"traces": [{"distributed": {"rank": 0, "world_size": 4}}, {"distributed": {"rank": 1, "world_size": 8}}]}
    missing = ranks_missing(summary, [0, 1])
    assert missing == {"world_size": None, "ranks": [], "count": 0, "world_sizes": [4, 8]}
    assert missing_line(missing).startswith("the traces name different world sizes (4, 8; distributedInfo.world_size)")
