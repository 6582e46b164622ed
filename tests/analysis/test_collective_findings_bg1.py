"""Findings and stragglers of collectives across ranks, defects found by campaign BG: every expected
value is worked out by hand from the kernels each test builds (the derivation is in its comment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from kernel_atlas.analysis.collectives import cross_rank_view
from kernel_atlas.analysis.findings import communication_findings
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.report.fleet import print_cross_rank

ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
)
M = 1 << 20  # elements of each all-reduce, fp32: 4,194,304 B


def _rank_trace(
    rank: int, world: int, instances: list[tuple[list[float], float]], adds: list[tuple[float, float]], seq: bool
) -> dict[str, Any]:
    """Per instance i (arrivals per rank on the common clock, its end): the rank's all-reduce on
    stream 20 from its arrival to the end, launched under record_param_comms (Seq i where `seq`);
    `adds`: (start, duration) of add kernels on stream 7, launched under aten::add."""
    events: list[dict[str, Any]] = []
    correlation = 0
    for start, dur in adds:
        correlation += 1
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": start - 20, "dur": 15}
            | {"args": {"Input Dims": [[M], [M], []], "Input type": ["float", "float", "Scalar"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": start - 18}
            | {"dur": 5, "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": ADD, "pid": 0, "tid": 7, "ts": start, "dur": dur}
            | {"args": {"correlation": correlation, "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1]}},
        ]
    for i, (arrivals, end) in enumerate(instances):
        correlation += 1
        arrival = arrivals[rank]
        params = {
            "Collective name": "allreduce",
            "In msg nelems": M,
            "Out msg nelems": M,
            "Group size": world,
            "dtype": "Float",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(world))),
        } | ({"Seq": i} if seq else {})
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": arrival - 10}
            | {"dur": 8, "args": params},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": arrival - 8}
            | {"dur": 4, "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": ALL_REDUCE, "pid": 0, "tid": 20, "ts": arrival}
            | {"dur": end - arrival, "args": {"correlation": correlation, "device": 0, "stream": 20, **params}},
        ]
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
    }


def _ingested(
    tmp_path: Path,
    instances: list[tuple[list[float], float]],
    adds: dict[int, list[tuple[float, float]]] | None = None,
    seq: bool = True,
) -> Path:
    world = len(instances[0][0])
    paths = []
    for rank in range(world):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(_rank_trace(rank, world, instances, (adds or {}).get(rank, []), seq)))
        paths.append(path)
    out = tmp_path / "run.atlas"
    write_outputs(ingest_paths(paths), out)
    return out


# --- classes 1 and 2: a collective's headroom and exposed time, net of the wait for the last rank ----
# Three H100 ranks on one clock, six all-reduces of 1 Mi fp32 with Seq; instance k (b = 1,000 + 2,000 k):
# rank 0 arrives at b, rank 2 at b+10, rank 1 at b+200 (last), every kernel ends at b+300. Rank 0
# also runs an add on stream 7 at [1,250, 1,350]: 50 µs beside the first all-reduce [1,000, 1,300].
# By hand: the 18 all-reduces take 6 × (300 + 100 + 290) = 4,140 µs, 6 × (200 + 0 + 190) = 2,340 µs of
# it waiting for rank 1, so 18 × 100 = 1,800 µs after the last arrival. An all-reduce over 3 ranks
# moves 4,194,304 B × 2·(3−1)/3 = 5,592,405.3 B over the link; at the H100's 450 GB/s that takes
# 12.4276 µs, × 18 = 223.70 µs attainable: SOL 223.70 / 1,800 = 12.4 %, headroom 1,576.3 µs.
# (Taking the 2,340 µs of waiting as attainable had said 2,563.7 µs attainable, 61.9 % SOL.)
# Rank 0: communication 6 × 300 = 1,800 µs, 50 µs of it beside the add (2.8 %, "3 %"): 1,750 µs with no
# compute beside it, of which 6 × 200 = 1,200 µs waiting for rank 1 and 550 µs to hide.
def _three_ranks(tmp_path: Path) -> Path:
    instances = []
    for k in range(6):
        b = 1_000.0 + 2_000.0 * k
        instances.append(([b, b + 200.0, b + 10.0], b + 300.0))
    return _ingested(tmp_path, instances, adds={0: [(1_250.0, 100.0)]})


def test_a_collectives_headroom_finding_leaves_out_the_wait_for_the_last_rank(tmp_path: Path) -> None:
    out = _three_ranks(tmp_path)
    build_report(out)
    roofline = pd.read_parquet(out / "roofline.parquet")
    [row] = roofline[roofline["name"].str.startswith("ncclDevKernel_AllReduce")].to_dict("records")
    assert (row["count"], row["op_time_us"], row["peer_wait_us"]) == (18, 4_140.0, 2_340.0)
    assert row["sol_pct"] == pytest.approx(12.43, abs=0.01)
    assert row["headroom_us"] == pytest.approx(1_576.3, abs=0.05)
    findings = json.loads((out / "report.json").read_text())["findings"]
    [finding] = [f for f in findings if f["kind"] == "kernel_headroom" and "AllReduce" in f["kernel"]]
    assert finding["why"] == "communication-bound, 12.4 % SOL"
    assert finding["evidence"].startswith(
        "communication-bound at 12.4 % of the roofline: 4,140.0 µs in 18 calls (2,340.0 µs of it waiting for the "
        "last rank to arrive, left out), 223.7 µs attainable"
    )


def test_the_exposed_communication_finding_says_how_long_it_ran_with_no_compute_beside_it(tmp_path: Path) -> None:
    out = _three_ranks(tmp_path)
    build_report(out)
    findings = json.loads((out / "report.json").read_text())["findings"]
    [finding] = [f for f in findings if f["kind"] == "exposed_communication" and f["where"].startswith("rank 0 ")]
    assert finding["evidence"].startswith(
        "1,750.0 µs of the 1,800.0 µs the device had communication running (overlaps counted once) ran with no "
        "compute beside it (3 % overlapped): 550.0 µs to hide, and 1,200.0 µs more waiting for the last rank to "
        "arrive, which no overlap hides"
    )


def test_exposed_communication_wording_by_hand() -> None:
    # 1,800 µs of communication, 100 µs beside compute (6 %), 1,200 µs of it waiting for the last rank:
    # 1,700 µs with no compute beside it, 500 µs of which an overlap could hide (the saving)
    devices = [{"rank": 0, "device": 0, "communication_us": 1_800.0, "overlap_us": 100.0}]
    devices[0]["overlap_pct_of_communication"] = 100.0 * 100.0 / 1_800.0
    [finding] = communication_findings(devices, {0: 1_200.0})
    assert finding.saving_us == 500.0
    assert finding.evidence == (
        "1,700.0 µs of the 1,800.0 µs the device had communication running (overlaps counted once) ran with no "
        "compute beside it (6 % overlapped): 500.0 µs to hide, and 1,200.0 µs more waiting for the last rank to "
        "arrive, which no overlap hides"
    )
    # nothing waited: all of the exposed time is to hide, said once
    [plain] = communication_findings(devices)
    assert plain.saving_us == 1_700.0 and plain.evidence.endswith("ran with no compute beside it (6 % overlapped)")


# --- class 4: a rank last at every instance by a fixed margin is a straggler ------------------------
# Three ranks on one clock, 20 all-reduces with Seq; instance k (b = 2,000 + 1,000 k): rank 0 arrives
# at b, rank 2 at b+20, rank 1 at b+50, all end at b+200 — the alignment noise is its 1 µs floor.
# Lateness against the median start (b+20): −20, +30, 0 at every instance; about each rank's own
# median, 0 every time, so no jitter beyond the noise: rank 1 leads the second-latest by 30 µs > 1 and
# the median by 30 µs > 1 at every instance — it held up 20 of 20, p = (1/3)^20 = 2.87e-10 < 0.01/3.
# The others waited 50 + 30 = 80 µs per instance: 1,600 µs; its lead over the second-latest, 30 × 20 = 600.
# (The lateness MAD over the rows, 20 µs, had made a jitter of 3 × 1.4826 × 20 = 88.96 µs: no instance
# held up, "no straggler".)
def _systematic(tmp_path: Path, lateness: tuple[float, float, float]) -> Path:
    instances = []
    for k in range(20):
        b = 2_000.0 + 1_000.0 * k
        instances.append(([b + late for late in lateness], b + 200.0))
    return _ingested(tmp_path, instances)


def test_a_rank_last_by_a_fixed_margin_at_every_instance_is_a_straggler(tmp_path: Path) -> None:
    view = cross_rank_view(_systematic(tmp_path, (0.0, 50.0, 20.0)), [0, 1, 2])
    facts = view.facts["collectives"]
    assert (facts["instances"], facts["alignment_noise_us"], facts["arrival_jitter_us"]) == (20, 1.0, 1.0)
    assert facts["total_wait_us"] == 1_600.0
    [straggler] = view.facts["stragglers"]
    assert (straggler["rank"], straggler["collectives"], straggler["of"]) == (1, 20, 20)
    assert straggler["p_value"] == pytest.approx(3.0**-20)
    assert (straggler["mean_late_us"], straggler["wait_caused_us"], straggler["lead_us"]) == (30.0, 1_600.0, 600.0)
    rows = pd.read_parquet(view.path)
    assert rows.loc[rows["rank"] == 1, "last"].all() and not rows.loc[rows["rank"] != 1, "last"].any()
    assert set(rows.loc[rows["rank"] == 1, "late_us"]) == {30.0}


# The same run, rank 1 arriving 0.5 µs after rank 2 (b+20.5) instead: its lead over the second-latest,
# 0.5 µs, is within the 1 µs alignment noise — clock noise, not a straggler: no instance held up.
def test_a_lead_within_the_clock_noise_is_no_straggler(tmp_path: Path) -> None:
    view = cross_rank_view(_systematic(tmp_path, (0.0, 20.5, 20.0)), [0, 1, 2])
    assert view.facts["collectives"]["alignment_noise_us"] == 1.0
    assert view.facts["stragglers"] == []
    assert not pd.read_parquet(view.path)["last"].any()


# Four ranks, 12 all-reduces, no rank late by habit: at instance k rank k mod 4 arrives 40 µs after the
# others (b), all end at b+200. Lateness about the median (b): +40 for the late rank, 0 for the others;
# about each rank's own median (0: late in 3 of its 12), the same, so the MAD is 0 and the jitter the
# noise floor, 1 µs. Each rank held up 3 of 12, as chance gives (expected 3): p = P(X ≥ 3 | 12, ¼) =
# 0.609, no straggler.
def test_a_late_arrival_that_moves_between_ranks_is_no_straggler(tmp_path: Path) -> None:
    instances = []
    for k in range(12):
        b = 2_000.0 + 1_000.0 * k
        instances.append(([b + (40.0 if rank == k % 4 else 0.0) for rank in range(4)], b + 200.0))
    view = cross_rank_view(_ingested(tmp_path, instances), [0, 1, 2, 3])
    assert view.facts["stragglers"] == []
    rows = pd.read_parquet(view.path)
    assert rows.groupby("rank")["last"].sum().to_dict() == {0: 3, 1: 3, 2: 3, 3: 3}


# --- class 5: the headline says how instances were matched -------------------------------------------
# Two all-reduces on three ranks (rank 1 last by 30 µs), with and without Seq: matched by the recorded
# sequence numbers, or by their position among each rank's collectives — no sequence number then.
@pytest.mark.parametrize(
    ("seq", "said"),
    [
        (False, "matched by position among each rank's collectives;"),
        (True, "matched by recorded sequence numbers (Seq);"),
    ],
)
def test_the_headline_says_how_instances_were_matched(tmp_path: Path, seq: bool, said: str) -> None:
    instances = [([b, b + 50.0, b + 20.0], b + 200.0) for b in (1_000.0, 2_000.0)]
    view = cross_rank_view(_ingested(tmp_path, instances, seq=seq), [0, 1, 2])
    console = Console(record=True, width=400)
    print_cross_rank(console, view, view.facts)
    text = console.export_text()
    assert said in text
    assert "position sequence numbers" not in text
