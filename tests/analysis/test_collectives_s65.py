"""Collectives across ranks, defects found by campaign AQ and mended in stop 65: every expected
value is worked out by hand from the kernels each test writes (the derivation is in its comment).

Every test builds rank traces on one clock: instance i ends at E_i = 250 + 200 i µs on every rank,
and a rank arrives at E_i − 100 plus its delay; its kernel runs from its arrival to E_i."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.analysis.collectives import cross_rank_view
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths

KERNELS = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "reduce": "ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "all_to_all": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    "all_to_allv": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    "gather": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    "send": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
}
M = 1 << 20


def end(i: int) -> float:
    return 250.0 + 200.0 * i


def kernel(collective: str, i: int, delay: float = 0.0, **params: Any) -> dict[str, Any]:
    """Instance i's kernel on one rank: from E_i − 100 + delay to E_i, its recorded parameters
    (`Collective name`, and `params`: In/Out msg nelems, dtype, Group size, Seq …)."""
    return {"collective": collective, "start": end(i) - 100.0 + delay, "end": end(i), "params": params}


def _rank_trace(rank: int, world: int, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for k, item in enumerate(kernels):
        params = {"Collective name": item["collective"], "Process Group Name": "0", **item["params"]}
        params = {key: value for key, value in params.items() if value is not None}
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


def _view(tmp_path: Path, world: int, per_rank: dict[int, list[dict[str, Any]]], **options: Any):
    paths = []
    for rank, kernels in per_rank.items():
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(_rank_trace(rank, world, kernels)))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    view = cross_rank_view(out, sorted(per_rank), **options)
    rows = pd.read_parquet(view.path) if view.path is not None else None
    return view, rows


def _float(n: int, group: int | None = 3, **more: Any) -> dict[str, Any]:
    return {"In msg nelems": n, "Out msg nelems": n, "dtype": "Float", "Group size": group, **more}


# --- class 1: no Seq, sizes that vary, one rank lacks an instance ---------------------------------
# 3 ranks, 10 all-reduces alternating 1,048,576 and 262,144 floats; rank 1 arrives 30 µs late in
# every one; rank 2's trace lacks instance 4. By position rank 2's later kernels were paired with
# the next instance, whose size differs: 5 instances "mismatched", never paired again.
# By hand: 10 instances (instance 4 on ranks 0 and 1); wait = 10 × 30 (rank 0) + 9 × 30 (rank 2)
# = 570 µs. Rank 1 is last in 10 of 10, by chance 9/3 + 1/2 = 3.5; p = (1/3)^9 · (1/2) = 2.54e-5
# < 0.01/3. Its lateness (start − median start): 30 in a 3-rank instance, 15 in instance 4:
# mean (9 × 30 + 15) / 10 = 28.5 µs.
def test_a_missing_collective_is_paired_again_when_sizes_vary(tmp_path: Path) -> None:
    per_rank = {
        r: [
            kernel("allreduce", i, 30.0 if r == 1 else 0.0, **_float(M if i % 2 == 0 else M // 4))
            for i in range(10)
            if not (r == 2 and i == 4)
        ]
        for r in range(3)
    }
    view, rows = _view(tmp_path, 3, per_rank)
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"], facts["instances_on_one_rank"]) == (10, 0, 0)
    assert facts["total_wait_us"] == pytest.approx(570.0)
    assert any("rank 2 paired with rank 0's instances by time" in note for note in facts["notes"])
    assert sorted(rows.loc[rows["rank"] == 2, "seq"]) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    (straggler,) = view.facts["stragglers"]
    assert (straggler["rank"], straggler["collectives"], straggler["of"]) == (1, 10, 10)
    assert straggler["expected"] == pytest.approx(3.5)
    assert straggler["mean_late_us"] == pytest.approx(28.5)


# Every instance disagrees: rank 2 lacks instance 0 of 6 all-reduces alternating in size, so by
# position each of its kernels sits one instance early and no position agrees (none matched, no
# clock alignment from a matched instance). By hand: rank 2 paired by time gives instances 1-5 on
# 3 ranks and instance 0 on 2; no delays, so every skew and wait 0; 6 instances, none mismatched.
def test_a_group_whose_every_instance_disagrees_is_paired_again(tmp_path: Path) -> None:
    per_rank = {
        r: [kernel("allreduce", i, **_float(M if i % 2 == 0 else M // 4)) for i in range(6) if not (r == 2 and i == 0)]
        for r in range(3)
    }
    view, rows = _view(tmp_path, 3, per_rank)
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"]) == (6, 0)
    assert sorted(rows.loc[rows["rank"] == 2, "seq"]) == [1, 2, 3, 4, 5]
    assert facts["total_wait_us"] == pytest.approx(0.0)


# --- class 2: Seq recorded on some kernels of a rank, or on some ranks only -----------------------
# 3 ranks, 10 all-reduces with Seq 100…109; rank 2 arrives 30 µs late in every one. `first`: only
# rank 2's first kernel lacks its Seq (its record_param_comms fell before the window); `none`: rank
# 2 records none (an older build). By hand: 10 instances on 3 ranks, skew 30, wait 2 × 30 per
# instance = 600 µs; rank 2 last in 10 of 10, by chance 10/3 = 3.33, p = (1/3)^10 = 1.7e-5, mean
# late 30 µs. Rank 2's kernels without a Seq pair by time with Seq 100 (and on).
@pytest.mark.parametrize("missing", ["first", "none"])
def test_a_rank_with_seq_missing_on_some_kernels_still_matches(tmp_path: Path, missing: str) -> None:
    def seq(r: int, i: int) -> int | None:
        return None if r == 2 and (missing == "none" or i == 0) else 100 + i

    per_rank = {
        r: [kernel("allreduce", i, 30.0 if r == 2 else 0.0, **_float(M, Seq=seq(r, i))) for i in range(10)]
        for r in range(3)
    }
    view, rows = _view(tmp_path, 3, per_rank)
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["instances_on_one_rank"], facts["mismatched_instances"]) == (10, 0, 0)
    assert (facts["median_skew_us"], facts["max_skew_us"]) == (30.0, 30.0)
    assert facts["total_wait_us"] == pytest.approx(600.0)
    mine = rows[rows["rank"] == 2].sort_values("seq")
    assert mine["seq"].tolist() == list(range(100, 110))
    assert mine["late_us"].tolist() == pytest.approx([30.0] * 10)
    (straggler,) = view.facts["stragglers"]
    assert (straggler["rank"], straggler["collectives"], straggler["of"]) == (2, 10, 10)
    assert straggler["mean_late_us"] == pytest.approx(30.0)
    assert any("rank 2" in note and "paired by time" in note for note in facts["notes"])


# A rank whose collectives match nothing is said: ranks 0 and 1 record Seq 0…3, rank 2 records Seq
# 50…53 (another numbering) — 4 instances on ranks 0 and 1, rank 2 in none, and a note says so.
def test_a_rank_that_matches_nothing_is_said(tmp_path: Path) -> None:
    per_rank = {
        r: [kernel("allreduce", i, **_float(M, Seq=i + (50 if r == 2 else 0))) for i in range(4)] for r in range(3)
    }
    view, rows = _view(tmp_path, 3, per_rank)
    assert view.facts["collectives"]["instances"] == 4
    assert set(rows["rank"]) == {0, 1}
    assert any(
        note.startswith("rank 2: 4 collectives matching no instance") for note in view.facts["collectives"]["notes"]
    )


# --- class 3: a message size per rank by design ----------------------------------------------------
# 4 ranks, 8 all_to_allv (SendRecv kernels) with uneven splits: rank r sends n = 1000(r+1) + 10i
# and receives n + 7 BFloat16 elements in instance i; rank 3 arrives 25 µs late. By hand: 8
# instances, skew 25, wait 3 × 25 × 8 = 600 µs; rank 3 last in 8 of 8, p = (1/4)^8 = 1.5e-5.
# msg_bytes per rank = its own larger count × 2 B: rank 0, instance 0: 1007 × 2 = 2014; rank 3,
# instance 7: (4070 + 7) × 2 = 8154. With a Seq or by position alike.
@pytest.mark.parametrize("seq", [True, False])
def test_all_to_allv_whose_sizes_differ_per_rank_matches(tmp_path: Path, seq: bool) -> None:
    def params(r: int, i: int) -> dict[str, Any]:
        n = 1000 * (r + 1) + 10 * i
        return {"In msg nelems": n, "Out msg nelems": n + 7, "dtype": "BFloat16", "Group size": 4} | (
            {"Seq": i} if seq else {}
        )

    per_rank = {
        r: [kernel("all_to_allv", i, 25.0 if r == 3 else 0.0, **params(r, i)) for i in range(8)] for r in range(4)
    }
    view, rows = _view(tmp_path, 4, per_rank)
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"]) == (8, 0)
    assert facts["total_wait_us"] == pytest.approx(600.0)
    by = rows.set_index(["rank", "seq"])["msg_bytes"]
    assert (by[0, 0], by[3, 7]) == (2014.0, 8154.0)
    (straggler,) = view.facts["stragglers"]
    assert (straggler["rank"], straggler["collectives"]) == (3, 8)


# --- class 4: no message size recorded -------------------------------------------------------------
# 2 ranks, 4 all-reduces with dtype Float but no In/Out msg nelems: no message size, so msg_bytes,
# algbw and busbw are null (not 0); the instances still match (sizes neither agree nor disagree).
def test_no_recorded_message_size_gives_null_bandwidths(tmp_path: Path) -> None:
    per_rank = {
        r: [kernel("allreduce", i, dtype="Float", Seq=i, **{"Group size": 2}) for i in range(4)] for r in range(2)
    }
    view, rows = _view(tmp_path, 2, per_rank)
    assert view.facts["collectives"]["instances"] == 4
    assert rows[["msg_bytes", "algbw_gbps", "busbw_gbps"]].isna().all().all()


# --- class 5: the group size where `Group size` is not recorded -------------------------------------
# World 4, ranks 0 and 1 ingested; `Process Group Ranks` "[0, 1, 2, 3]", no Group size. 4
# all-reduces of 1,048,576 floats, rank 1 10 µs late: transfer after the last arrival 90 µs.
# By hand: algbw = 4,194,304 B / 90 µs = 46.603 GB/s; n = 4, factor 2·3/4 = 1.5: busbw 69.905.
def test_the_group_size_is_the_recorded_members_not_the_ranks_present(tmp_path: Path) -> None:
    params = _float(M, group=None, **{"Process Group Ranks": "[0, 1, 2, 3]"})
    per_rank = {
        r: [kernel("allreduce", i, 10.0 if r == 1 else 0.0, Seq=i, **params) for i in range(4)] for r in range(2)
    }
    _, rows = _view(tmp_path, 4, per_rank)
    assert rows["group_size"].tolist() == [4] * 8
    assert rows["algbw_gbps"].tolist() == pytest.approx([46.603378] * 8)
    assert rows["busbw_gbps"].tolist() == pytest.approx([69.905067] * 8)


# Neither Group size nor members recorded, the group described as default_pg: the job's world
# size (4, given) is its size — busbw 46.603 × 1.5 = 69.905 as above; without it, the ranks seen
# (2, factor 1): 46.603.
@pytest.mark.parametrize(("world", "busbw"), [(4, 69.905067), (None, 46.603378)])
def test_the_default_group_is_the_world(tmp_path: Path, world: int | None, busbw: float) -> None:
    params = _float(M, group=None, **{"Process Group Description": "default_pg"})
    per_rank = {
        r: [kernel("allreduce", i, 10.0 if r == 1 else 0.0, Seq=i, **params) for i in range(4)] for r in range(2)
    }
    _, rows = _view(tmp_path, 4, per_rank, world_size=world)
    assert rows["busbw_gbps"].tolist() == pytest.approx([busbw] * 8)


# --- class 6: reduce crosses the bus once ------------------------------------------------------------
# 4 ranks, one `ncclDevKernel_Reduce` recorded as reduce, 1,048,576 floats, rank 3 20 µs late:
# transfer 80 µs. By hand: algbw = 4,194,304 / 80 µs = 52.4288 GB/s; nccl-tests' Reduce: busBw =
# algBw = 52.4288 (reduce_scatter's (n−1)/n had made it 39.3216).
def test_reduce_has_bus_factor_one(tmp_path: Path) -> None:
    per_rank = {r: [kernel("reduce", 0, 20.0 if r == 3 else 0.0, **_float(M, group=4, Seq=0))] for r in range(4)}
    _, rows = _view(tmp_path, 4, per_rank)
    assert rows["algbw_gbps"].tolist() == pytest.approx([52.4288] * 4)
    assert rows["busbw_gbps"].tolist() == pytest.approx([52.4288] * 4)


# --- class 7: gather (a SendRecv kernel the record names) is a collective -----------------------------
# 4 ranks: Seq 0 an all-reduce, Seq 1 a gather (SendRecv kernel; root rank 0 receives 4000 floats,
# the others send 1000), Seq 2 a send (point to point: not a collective). Rank 3 arrives 20 µs late
# in both collectives. By hand: 2 instances, wait 3 × 20 × 2 = 120 µs; the gather's msg_bytes:
# root 4000 × 4 = 16,000, others 4000 B. The send is in no instance.
def test_gather_is_matched_and_send_is_not(tmp_path: Path) -> None:
    def kernels(r: int) -> list[dict[str, Any]]:
        late = 20.0 if r == 3 else 0.0
        return [
            kernel("allreduce", 0, late, **_float(M, group=4, Seq=0)),
            kernel("gather", 1, late, **_float(1000, group=4, Seq=1, **{"Out msg nelems": 4000 if r == 0 else 1000})),
            kernel("send", 2, **_float(1000, group=4, Seq=2)),
        ]

    view, rows = _view(tmp_path, 4, {r: kernels(r) for r in range(4)})
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["mismatched_instances"], facts["instances_on_one_rank"]) == (2, 0, 0)
    assert facts["total_wait_us"] == pytest.approx(120.0)
    gather = rows[rows["collective"] == "gather"].set_index("rank")
    assert gather["msg_bytes"].tolist() == [16000.0, 4000.0, 4000.0, 4000.0]
    assert gather["wait_us"].tolist() == pytest.approx([20.0, 20.0, 20.0, 0.0])
    assert set(rows["seq"]) == {0, 1}
