"""Collectives across ranks, defects found by campaign AC and mended in stop 63: every expected
value is worked out by hand from the kernels each test builds (the derivation is in its comment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.analysis.collectives import cross_rank_view
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths

NAMES = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
}
M = 1 << 20


def _rank_trace(rank: int, world: int, instances: list[tuple[str, list[float], float]], seq: bool) -> dict[str, Any]:
    """Per instance i (collective, arrivals per rank on the common clock, transfer): the rank's
    collective kernel on stream 20 from its arrival to the instance's end (last arrival + transfer),
    launched by record_param_comms; None as an arrival: the rank's trace lacks the instance."""
    events: list[dict[str, Any]] = []
    for i, (collective, arrivals, transfer) in enumerate(instances):
        arrival = arrivals[rank]
        if arrival is None:
            continue
        end = max(a for a in arrivals if a is not None) + transfer
        params = {
            "Collective name": collective,
            "In msg nelems": M,
            "Out msg nelems": M,
            "Group size": world,
            "dtype": "Float",
            "Process Group Name": "0",
            "Process Group Ranks": str(list(range(world))),
        }
        if seq:
            params["Seq"] = i
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": arrival - 10}
            | {"dur": 8, "args": params},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": arrival - 8}
            | {"dur": 4, "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": NAMES[collective], "pid": 0, "tid": 20, "ts": arrival}
            | {"dur": end - arrival, "args": {"correlation": i + 1, "device": 0, "stream": 20, **params}},
        ]
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
    }


def _ingested(tmp_path: Path, world: int, instances: list[tuple[str, list[float], float]], seq: bool) -> Path:
    paths = []
    for rank in range(world):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(_rank_trace(rank, world, instances, seq)))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    return out


# --- class 2: matched by position, one rank's trace lacks one instance ----------------------------
# Four ranks on one clock, ten all-reduces 5 ms apart: in instance i (base b = 10,000 + 5,000 i)
# ranks 0-3 arrive at b, b+10, b+30, b+20 and every kernel ends at b+30+100. Rank 1's trace lacks
# instance 3, and no Seq is recorded: by position, rank 1's 4th kernel (instance 4's) was paired
# with the others' instance 3, and so on — rank 1 came out 5,000 µs early, skews of 5,020 µs.
# By hand: every clock offset 0; every instance's skew 30 (b+30 − b); instance 3 has ranks 0, 2,
# 3 (3 rows), the others 4; total wait 9 × (30+20+0+10) + (30+0+10) = 580 µs; lateness in a
# 4-rank instance −15/−5/15/5 (median start b+15), in instance 3 −20/10/0 (median b+20).
def _missing_instance(tmp_path: Path, seq: bool) -> Path:
    instances = []
    for i in range(10):
        b = 10_000.0 + 5_000.0 * i
        instances.append(("allreduce", [b, None if i == 3 else b + 10, b + 30, b + 20], 100.0))
    return _ingested(tmp_path, 4, instances, seq)


def test_a_rank_missing_an_instance_matched_by_position_is_paired_again_by_time(tmp_path: Path) -> None:
    out = _missing_instance(tmp_path, seq=False)
    view = cross_rank_view(out, [0, 1, 2, 3])
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"], facts["instances_on_one_rank"]) == (10, 0, 0)
    assert (facts["median_skew_us"], facts["max_skew_us"], facts["total_wait_us"]) == (30.0, 30.0, 580.0)
    assert facts["alignment_noise_us"] == 1.0  # every rank's ends agree exactly: the floor
    rows = pd.read_parquet(view.path)
    assert set(rows["clock_offset_us"]) == {0.0}
    assert set(rows["skew_us"]) == {30.0}
    assert len(rows) == 39
    assert rows.groupby("rank").size().to_dict() == {0: 10, 1: 9, 2: 10, 3: 10}
    third = rows[rows["seq"] == 3].sort_values("rank")
    assert third["rank"].tolist() == [0, 2, 3]
    assert third["late_us"].tolist() == [-20.0, 10.0, 0.0]
    assert third["wait_us"].tolist() == [30.0, 0.0, 10.0]
    fourth = rows[rows["seq"] == 4].sort_values("rank")
    assert fourth["late_us"].tolist() == [-15.0, -5.0, 15.0, 5.0]
    assert any("rank 1" in note and "by time" in note for note in facts["notes"])


def test_the_same_run_with_seq_recorded_gives_the_same_rows(tmp_path: Path) -> None:
    # with Seq the instances were always matched right: the same 39 rows, offsets 0, skews 30
    view = cross_rank_view(_missing_instance(tmp_path, seq=True), [0, 1, 2, 3])
    rows = pd.read_parquet(view.path)
    assert (len(rows), set(rows["clock_offset_us"]), set(rows["skew_us"])) == (39, {0.0}, {30.0})
    assert view.facts["collectives"]["notes"] == []


# Two ranks whose collectives cannot be paired by time: rank 1's five all-reduces come at other
# moments than rank 0's (an unrelated run), no Seq. Rank 0's kernels [1,000 + 5,000 i, +100],
# rank 1's [1,000 + 7,000 i, +100], i = 0..4. By position the end differences are 0, 2,000, 4,000,
# 6,000, 8,000: rank 1's offset comes out 4,000 (their median), and its ends then lie 4,000 µs
# from rank 0's in instances 0 and 4 — more than half the 6,000 µs between the aligned instances.
# Paired again by time, at the offset of each shift of rank 1's kernels against rank 0's (−1, 0,
# +1: 10,000, 4,000, −2,000 µs), at most 1 of rank 1's 5 kernels overlaps one of rank 0's (shift
# 0: instance 2), under half of them: the pairing is refused, the five instances are counted as
# mismatched and none is matched; the view says why.
def test_collectives_that_pair_neither_by_position_nor_by_time_are_refused(tmp_path: Path) -> None:
    paths = []
    for rank, spacing in ((0, 5_000.0), (1, 7_000.0)):
        instances = [("allreduce", [1_000.0 + spacing * i] * 2, 100.0) for i in range(5)]
        trace = _rank_trace(rank, 2, instances, seq=False)
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    view = cross_rank_view(out, [0, 1])
    assert view.facts["collectives"]["instances"] == 0
    assert view.facts["collectives"]["mismatched_instances"] == 5
    assert view.note is not None and "not paired" in view.note and "Seq" in view.note


# --- class 6: `instances` counts matched instances only ----------------------------------------------
# Two ranks, one instance with Seq 0: rank 0 records an all-reduce, rank 1 an all-gather. They
# disagree: 0 instances matched, 1 mismatched, 0 seen on one rank.
def test_instances_count_matched_instances_only(tmp_path: Path) -> None:
    paths = []
    for rank, collective in ((0, "allreduce"), (1, "allgather")):
        trace = _rank_trace(rank, 2, [(collective, [1_000.0, 1_010.0], 50.0)], seq=True)
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    view = cross_rank_view(out, [0, 1])
    assert view.note == "no collective instance matches across ranks"
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"], facts["instances_on_one_rank"]) == (0, 1, 0)
