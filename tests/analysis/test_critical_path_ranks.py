"""The critical path across two ranks joined at an all-reduce, with a late rank (answers by hand)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _rank_trace(rank: int, cpu_us: float, after_us: float) -> dict[str, Any]:
    """host: aten::work [0, cpu_us] ⊃ launch [cpu_us-2, cpu_us-1] → all-reduce [cpu_us, 60]
    (every rank's ends at 60: the last arrival's transfer); cudaStreamSynchronize
    [cpu_us+1, 61]; then aten::after [61, 61+after_us]."""
    t = {"pid": 10 + rank, "tid": 10 + rank}
    comm = {
        "Collective name": "allreduce",
        "In msg nelems": 1 << 20,
        "Out msg nelems": 1 << 20,
        "Group size": 2,
        "dtype": "Float",
        "Process Group Name": "0",
        "Process Group Ranks": [0, 1],
        "Seq": 1,
    }
    kernel_args = {"correlation": 1, "device": 0, "stream": 20, "grid": [2, 1, 1], "block": [512, 1, 1], **comm}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::work", **t, "ts": 0, "dur": cpu_us, "args": {}},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            **t,
            "ts": cpu_us - 2,
            "dur": 1,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": NCCL,
            "pid": 0,
            "tid": 20,
            "ts": cpu_us,
            "dur": 60 - cpu_us,
            "args": kernel_args,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamSynchronize",
            **t,
            "ts": cpu_us + 1,
            "dur": 60 - cpu_us,
            "args": {"correlation": 2},
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::after", **t, "ts": 61, "dur": after_us, "args": {}},
    ]
    return {
        "traceEvents": events,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
    }


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    # rank 0 is quick (8 µs of CPU, arrives at 10) and has 10 µs of work after the collective;
    # rank 1 is late (38 µs of CPU, arrives at 40) and has 5 µs after it.
    paths = []
    for rank, cpu, after in ((0, 10.0, 10.0), (1, 40.0, 5.0)):
        path = tmp_path / f"run_rank{rank}.json"
        path.write_text(json.dumps(_rank_trace(rank, cpu, after)))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    return out


def test_late_rank_bounds_the_run(two_ranks: Path) -> None:
    build_report(two_ranks)
    facts = json.loads((two_ranks / "report.json").read_text())["critical_path"]
    # Joint path: rank 1's CPU to its launch (38) + its launch overhead (2) + the all-reduce's transfer
    # after the last arrival (60 − 40 = 20, ending rank 0's kernel) + (sync released, 0) + rank 0's
    # aten::after (10) = 70 µs. Rank 0 alone: 8 + 2 + 20 (its kernel now weighs the transfer only)
    # + 10 = 40; rank 1 alone: 38 + 2 + 20 + 5 = 65.
    assert facts["joint_ranks"] == 2
    assert facts["total_us"] == pytest.approx(70.0)
    segs = pd.read_parquet(two_ranks / "critical_path.parquet")
    assert segs["rank"].tolist() == [1, 1, 0, 0]
    assert segs["kind"].tolist() == ["cpu", "launch", "collective", "cpu"]
    assert segs["dur_us"].tolist() == pytest.approx([38.0, 2.0, 20.0, 10.0])
    assert segs["name"].tolist() == ["aten::work", NCCL, NCCL, "aten::after"]
    # 48/70 CPU, 2/70 launch, 20/70 communication
    pct = facts["breakdown_pct"]
    assert (pct["cpu_bound"], pct["gpu_kernel_launch_overhead"], pct["gpu_communication_bound"]) == (68.57, 2.86, 28.57)
    # each rank alone (HTA's view): rank 0 counts its 50 µs in the all-reduce as communication
    assert {r["rank"]: r["total_us"] for r in facts["per_rank"]} == {0: 70.0, 1: 65.0}


def test_whatif_across_ranks(two_ranks: Path) -> None:
    from kernel_atlas.analysis.whatif import run_whatif

    build_report(two_ranks)  # matches the collectives (collectives.parquet)
    # the all-reduce 2x: its transfer after the last arrival 20 → 10 on both ranks: the joint path
    # 38 + 2 + 10 + 10 = 60, saving 10 µs
    joint = run_whatif(two_ranks, ["category=communication:2x"], False, None, None)
    assert joint["joint_ranks"] == 2
    assert (joint["baseline_us"], joint["new_us"], joint["saving_us"]) == (70.0, 60.0, 10.0)
    # rank 0 alone counts its 50 µs in the kernel (30 of them waiting for rank 1) as communication:
    # 8 + 2 + 25 + 10 = 45, a saving of 25 µs that the run would not see
    alone = run_whatif(two_ranks, ["category=communication:2x"], False, None, 0)
    assert (alone["joint_ranks"], alone["baseline_us"], alone["saving_us"]) == (1, 70.0, 25.0)


def test_ranks_too_large_together_are_solved_alone(two_ranks: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_JOINT_NODES nodes together (64 ranks of 3.8M nodes peaked at 1.7 GB), the report
    solves each rank alone — the longest is rank 0's 70 µs of the test above, as each alone —
    and says so; `whatif` across them is refused in one line, asking for a rank."""
    from kernel_atlas.analysis import critical_report, whatif
    from kernel_atlas.core.errors import AtlasError

    monkeypatch.setattr(critical_report, "MAX_JOINT_NODES", 10)
    monkeypatch.setattr(whatif, "MAX_JOINT_NODES", 10)
    build_report(two_ranks)
    facts = json.loads((two_ranks / "report.json").read_text())["critical_path"]
    assert facts["joint_ranks"] == 1 and facts["total_us"] == pytest.approx(70.0)
    assert any("ranks not joined: their graphs exceed 10 nodes" in note for note in facts["notes"])
    with pytest.raises(AtlasError, match="the ranks' graphs exceed 10 nodes together: give --rank R"):
        whatif.run_whatif(two_ranks, ["category=communication:2x"], False, None, None)


SEND_RECV_KERNEL = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def test_send_and_recv_are_joined_across_ranks(tmp_path: Path) -> None:
    # The same two ranks, with a point-to-point transfer instead of the all-reduce: rank 0 sends
    # (arrives at 10), rank 1 receives (late, arrives at 40), in their group of two ranks. The
    # receive ends the transfer on both ends only when the late rank is there, as a collective
    # does: 38 (rank 1's CPU to its launch) + 2 (launch) + 20 (the transfer after the last
    # arrival, 60 − 40, ending rank 0's send) + 10 (rank 0's aten::after) = 70 µs joined; rank 0
    # alone would read 8 + 2 + 50 + 10 = 70 with 50 µs of communication, rank 1 alone 65.
    paths = []
    for rank, cpu, after in ((0, 10.0, 10.0), (1, 40.0, 5.0)):
        trace = _rank_trace(rank, cpu, after)
        for event in trace["traceEvents"]:
            if event["cat"] == "kernel":
                event["name"] = SEND_RECV_KERNEL
                event["args"]["Collective name"] = "send" if rank == 0 else "recv"
                del event["args"]["Seq"]
        path = tmp_path / f"p2p_rank{rank}.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    out = tmp_path / "p2p.atlas"
    write_outputs(ingest_paths(paths), out)
    build_report(out)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert (facts["joint_ranks"], facts["total_us"]) == (2, 70.0)
    segs = pd.read_parquet(out / "critical_path.parquet")
    assert segs["rank"].tolist() == [1, 1, 0, 0]
    assert segs["kind"].tolist() == ["cpu", "launch", "collective", "cpu"]
    assert segs["dur_us"].tolist() == pytest.approx([38.0, 2.0, 20.0, 10.0])
    assert facts["breakdown_pct"]["gpu_communication_bound"] == 28.57  # 20 of 70


def test_ranks_whose_collectives_make_cycles_in_time_are_solved_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 3 of an 8-rank A100 job and rank 1 of a 2-rank V100 job, ingested together: their
    collectives match by name and order, but the two clocks are unrelated, so the joined graph
    has cycles of positive weight and no longest path. The joint solve gave 3,099,291 µs — more
    than either rank's whole span — beside segments summing to 356,834 µs. Each rank is solved
    alone instead, and the run's path is the longer rank's: 740,769 µs (rank 1), its segments
    summing to it (stop 57's cross-output campaign). Stop 63: rank 1 was 740,619 µs and rank 3
    189,828 while cudaEventQuery (a poll, 86 calls on rank 1's path: 150 µs) weighed nothing, and
    rank 3's two `cudaStreamSynchronize` of 3-4 µs in `sparse_data_dist` — their thread had launched
    onto streams 20/21 since its previous sync, whose work had ended 11-14 µs before — were taken
    as released by a stream-7 kernel ending inside them (no cuda_sync events). Since stop 63 the
    cross-rank view itself no longer pairs them: matched by position, their ends lie 150 ms apart
    once aligned, and no pairing by time fits half of them (`collectives._pair_again`); with that
    check left out, the joint path's own guard still finds the cycles."""
    from tests.support.traces import has_trace, trace_path

    if not (has_trace("a100_diff_control") and has_trace("v100_diff_test")):
        pytest.skip("../shared/traces not present")
    out = tmp_path / "two_jobs"
    write_outputs(ingest_paths([trace_path("a100_diff_control"), trace_path("v100_diff_test")]), out)
    from kernel_atlas.analysis import collectives

    build_report(out)
    report = json.loads((out / "report.json").read_text())
    assert report["collectives"]["instances"] == 0
    assert all("not paired" in note for note in report["collectives"]["notes"])
    facts = report["critical_path"]
    per_rank = {entry["rank"]: entry["total_us"] for entry in facts["per_rank"]}
    # stop 66: the runtime's cudaStreamWaitEvent calls (106 and 104 of them) are sync edges in these traces
    # without cuda_sync events — stream-7 kernels starting 1–2 µs after the SendRecv on stream 21 they waited for;
    # stop 68: six more of rank 3's (110), whose thread's last launch before the record was onto the waiting stream
    # campaign BV 2: rank 3's cudaMemcpyAsync calls whose copy started after they returned (150 pinned
    # HtoD, 18 DtoD; its 60 pageable DtoH calls outlive their copies and still wait) are CPU work: 361,642 before
    assert per_rank == {1: 741_681.0, 3: 362_210.0}
    assert facts["joint_ranks"] == 1 and facts["total_us"] == 741_681.0 and facts["rank"] == 1
    monkeypatch.setattr(collectives, "_pair_again", lambda con, notes: (False, []))  # paired by position
    build_report(out)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert facts["joint_ranks"] == 1 and facts["total_us"] == 741_681.0 and facts["rank"] == 1
    assert facts["notes"][0].startswith("ranks not joined: the collectives matched across them make cycles in time")
    assert pd.read_parquet(out / "critical_path.parquet")["dur_us"].sum() == pytest.approx(741_681.0)
