"""Small ranks analysed together (`analysis/ranks.rank_batches`) report what they report analysed
one at a time, on random fleets: ranks without GPU activity, with two devices and two streams,
graph-launched and unlaunched activities, copies, collectives, profiler steps, and more ranks
than one batch holds. Every file of the report is compared (floats within 1e-12: sums in
another order)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest

import kernel_atlas.analysis.ranks as ranks
from kernel_atlas.report.build import build_report
from tests.analysis.test_fleet_waits import _close, _report_files, _texts
from tests.support.hostile import cli

NAMES = [
    "ampere_sgemm_64x64_nn",
    "vectorized_elementwise_kernel",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "Memcpy HtoD (Pageable -> Device)",
    "triton_poi_fused_add_0",
]


def _rank_events(rng: random.Random, rank: int) -> list[dict]:
    events: list[dict] = []
    start = t = 1000.0 + rng.random() * 100
    for i in range(rng.choice([0, 1, 2, 5, 12, 30])):
        call = 100_000 + 100 * rank + i
        name, stream, device = rng.choice(NAMES), rng.choice([7, 7, 13]), rng.choice([0, 0, 1])
        if rng.random() < 0.8:
            args = {"External id": call, "Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]}
            op = rng.choice(["aten::mm", "aten::add", "aten::copy_"])
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 20, "args": args}
            )
        if rng.random() < 0.9:
            launch = rng.choice(["cudaLaunchKernel", "cudaGraphLaunch"])
            args = {"correlation": call, "External id": call}
            dur = rng.choice([1, 5, 40])
            events.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": 1, "tid": 1, "ts": t + 2, "dur": dur,
                           "args": args})  # fmt: skip
        args = {"correlation": call, "External id": call, "device": device, "stream": stream, "grid": [4, 1, 1]}
        events.append({"ph": "X", "cat": "gpu_memcpy" if name.startswith("Memcpy") else "kernel", "name": name,
                       "pid": device, "tid": stream, "ts": t + rng.choice([3, 10, 50]) + rng.random(),
                       "dur": rng.choice([2, 8, 19, 30, 100]), "args": args})  # fmt: skip
        t += rng.choice([5, 20, 60])
    steps = rng.choice([0, 1, 3])
    for step in range(steps):
        length = (t - start) / steps
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start + step * length, "dur": length})  # fmt: skip
    return events


@pytest.mark.parametrize("seed", [6, 17])  # 38 and 35 ranks: two batches each
def test_random_fleets_report_the_same_in_batches_and_rank_by_rank(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    count = rng.randint(2, 40)
    (tmp_path / "traces").mkdir()
    for rank in range(count):
        doc = {
            "distributedInfo": {"rank": rank, "world_size": count, "backend": "nccl"},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
            "traceEvents": _rank_events(rng, rank),
        }
        (tmp_path / "traces" / f"rank{rank}.json").write_text(json.dumps(doc))
    assert cli("ingest", tmp_path / "traces", "-o", tmp_path / "out", "-q").code == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    batches = ranks.rank_batches(summary, sorted({t["rank"] for t in summary["traces"]}))
    assert len(batches) == 2 and count > ranks.BATCH_RANKS
    for name in ("together", "alone"):
        shutil.copytree(tmp_path / "out", tmp_path / name)
    build_report(tmp_path / "together", jobs=1)
    monkeypatch.setattr(ranks, "BATCH_RANKS", 1)
    build_report(tmp_path / "alone", jobs=1)
    (facts_a, tables_a), (facts_b, tables_b) = _report_files(tmp_path / "together"), _report_files(tmp_path / "alone")
    assert facts_a.pop("run_id") == facts_b.pop("run_id")
    assert _close(facts_a, facts_b)
    assert facts_a["ranks"] == count and len(facts_a["idle"]["devices"]) > count // 2
    assert tables_a.keys() == tables_b.keys()
    for name, table in tables_a.items():
        pd.testing.assert_frame_equal(
            _texts(table), _texts(tables_b[name]), check_exact=False, rtol=1e-12, check_dtype=False, obj=name
        )


def test_ranks_solved_alone_in_parallel_give_the_paths_solved_in_turn(tmp_path: Path) -> None:
    """More ranks than are joined (MAX_JOINT_RANKS): each rank's path is solved alone, by two
    processes or in turn, and the longest (the first of equals) is the one described."""
    from kernel_atlas.analysis.critical_ranks import MAX_JOINT_RANKS
    from kernel_atlas.analysis.critical_report import solve_paths

    rng = random.Random(5)
    count = MAX_JOINT_RANKS + 6
    (tmp_path / "traces").mkdir()
    for rank in range(count):
        doc = {"distributedInfo": {"rank": rank, "world_size": count}, "traceEvents": _rank_events(rng, rank)}
        (tmp_path / "traces" / f"rank{rank}.json").write_text(json.dumps(doc))
    assert cli("ingest", tmp_path / "traces", "-o", tmp_path / "out", "-q").code == 0
    ranks_ = list(range(count))
    in_turn = solve_paths(tmp_path / "out", ranks_, None, jobs=1).result
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # each rank alone; in the report's batches (kernel rows read a batch at a time: the ranks' kernel
    # names, streams and devices differ, so a batch's categories are none of its ranks' own); in
    # uneven batches of 7; and batches that do not cover the ranks in order (each alone then)
    for batches in (None, ranks.rank_batches(summary, ranks_), [ranks_[i : i + 7] for i in range(0, count, 7)],
                    [ranks_[::-1]]):  # fmt: skip
        parallel = solve_paths(tmp_path / "out", ranks_, None, jobs=2, batches=batches).result
        assert parallel.facts == in_turn.facts
        pd.testing.assert_frame_equal(parallel.segments, in_turn.segments)
    lengths = [r["total_us"] for r in in_turn.facts["per_rank"]]
    assert [r["rank"] for r in in_turn.facts["per_rank"]] == ranks_ and max(lengths) > min(lengths) >= 0
    assert in_turn.facts["rank"] == lengths.index(max(lengths)) and in_turn.facts["joint_ranks"] == 1
    assert in_turn.facts["total_us"] == max(lengths)


def test_a_batchs_kernel_rows_are_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths of a batch of ranks: their kernel rows read in one call, each rank's path its
    own — the lengths of each rank solved alone, in the batch's order."""
    import kernel_atlas.analysis.critical_report as critical_report

    rng = random.Random(9)
    (tmp_path / "traces").mkdir()
    for rank in range(6):
        doc = {"distributedInfo": {"rank": rank, "world_size": 6}, "traceEvents": _rank_events(rng, rank)}
        (tmp_path / "traces" / f"rank{rank}.json").write_text(json.dumps(doc))
    assert cli("ingest", tmp_path / "traces", "-o", tmp_path / "out", "-q").code == 0
    reads: list[list[int]] = []
    read = critical_report.load_kernels

    def counted(out: Path, ranks_: list[int], columns: object) -> pd.DataFrame:
        reads.append(list(ranks_))
        return read(out, ranks_, columns)

    monkeypatch.setattr(critical_report, "load_kernels", counted)
    order = [3, 1, 4, 0, 5, 2]
    together = critical_report._batch_lengths(tmp_path / "out", order, [None] * 6, None, "exact")
    assert reads == [order]
    alone = [critical_report._batch_lengths(tmp_path / "out", [rank], [None], None, "exact")[0] for rank in order]
    assert together == alone and len(set(alone)) > 1
