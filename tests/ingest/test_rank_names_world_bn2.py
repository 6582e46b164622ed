"""Ranks from file names and from `distributedInfo` (campaign BN 5 and 6).

`rank<N>` in a file name is a rank only where `rank` starts a part of the name: `frank2_trace.json`
had been rank 2 (the search matched inside the word). And what the traces' `distributedInfo` says
that cannot be true of one job — two world sizes, a rank its world size does not hold — went
unsaid (summary.json `warnings: []`). Expected ranks and lines written by hand from each case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.ingest.fleet import ingest_fleet, plan
from kernel_atlas.ingest.pipeline import rank_in_name

WORLDS = "the traces declare different world sizes (distributedInfo.world_size)"
BEYOND = "beyond the world size (distributedInfo.world_size; a job of N ranks has ranks 0 to N − 1)"


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank0.json", 0),
        ("trace_rank_3.json", 3),
        ("worker_rank-12.pt.trace.json", 12),
        ("Rank3.json", 3),
        ("RANK4.json.gz", 4),
        ("node1_rank7.json", 7),
        ("host.rank5.pt.trace.json", 5),
        ("workerRank0.json", 0),
        ("frank2_rank3.json", 3),  # the word's `rank2` is none; the later `rank3` is
        ("frank2_trace.json", None),
        ("FRANK2.json", None),
        ("cranky3.json", None),
        ("ranks8.json", None),
        ("trace_a.json", None),
    ],
)
def test_rank_in_name_starts_a_part_of_the_name(name: str, rank: int | None) -> None:
    assert rank_in_name(name) == rank


def _trace(path: Path, rank: int | None = None, world: int | None = None) -> str:
    """One GEMM launched by an op; `distributedInfo` with the rank and world size given."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10,
         "args": {"External id": 1, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2.0, "dur": 3,
         "args": {"correlation": 7, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 7, "ts": 20.0, "dur": 40,
         "args": {"correlation": 7, "External id": 1, "device": 0, "stream": 7, "grid": [4, 1, 1],
                  "block": [128, 1, 1]}},
    ]  # fmt: skip
    trace: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    info = {key: value for key, value in (("rank", rank), ("world_size", world)) if value is not None}
    if info:
        trace["distributedInfo"] = {"backend": "nccl", **info}
    path.write_text(json.dumps(trace))
    return str(path)


def test_a_word_ending_in_rank_declares_no_rank(tmp_path: Path) -> None:
    """cases/N: `frank2_trace.json` and `trace_a.json`, neither with distributedInfo: neither
    declares a rank, so they take ranks 0 and 1 in input order, both named in the warning."""
    sources = [_trace(tmp_path / "frank2_trace.json"), _trace(tmp_path / "trace_a.json")]
    assert [task.fallback for task in plan(sources, str(tmp_path / "out"))] == [0, 1]
    result = ingest_fleet(sources, tmp_path / "out", jobs=1)
    assert {t["file"]: t["rank"] for t in result.facts["traces"]} == {"frank2_trace.json": 0, "trace_a.json": 1}
    assert [w for w in result.warnings if "declare no rank" in w] == [
        "2 traces declare no rank (no distributedInfo.rank, no rank<N> in the file name): given the lowest "
        f"ranks no trace declares, in input order: {sources[0]} rank 0, {sources[1]} rank 1"
    ]


def test_a_rank_its_world_size_does_not_hold_is_said(tmp_path: Path) -> None:
    """cases/K2: rank0.json {rank 0, world 4} and rank5.json {rank 5, world 4}: rank 5 is no rank
    of a 4-rank job (ranks 0–3)."""
    zero = _trace(tmp_path / "rank0.json", rank=0, world=4)
    five = _trace(tmp_path / "rank5.json", rank=5, world=4)
    result = ingest_fleet([zero, five], tmp_path / "out", jobs=1)
    assert result.failed == []
    said = [w for w in result.warnings if "world size" in w]
    assert said == [f"1 trace has a rank {BEYOND}: {five} rank 5 of 4 — traces of another job, or a wrong rank"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [w for w in summary["warnings"] if "world size" in w] == said


def test_different_world_sizes_are_said(tmp_path: Path) -> None:
    """cases/K1: rank 0 says world 4, rank 1 says world 8 — no one job."""
    zero = _trace(tmp_path / "rank0.json", rank=0, world=4)
    one = _trace(tmp_path / "rank1.json", rank=1, world=8)
    result = ingest_fleet([one, zero], tmp_path / "out", jobs=2)
    assert [w for w in result.warnings if "world size" in w] == [
        f"{WORLDS}: 4 ({zero}); 8 ({one}) — traces of different jobs, or a wrong world size"
    ]


def test_a_rank_in_the_name_beyond_the_runs_world_size_is_said(tmp_path: Path) -> None:
    """rank7.json declares no distributedInfo; the only world size the run's traces declare is 4
    (rank0.json's, rank1.json's): rank 7 is none of it. Two traces of rank ≥ 4, both named."""
    zero = _trace(tmp_path / "rank0.json", rank=0, world=4)
    one = _trace(tmp_path / "rank1.json", rank=1, world=4)
    seven = _trace(tmp_path / "rank7.json")
    four = _trace(tmp_path / "b.json", rank=4, world=4)
    result = ingest_fleet([seven, one, four, zero], tmp_path / "out", jobs=1)
    assert [w for w in result.warnings if "world size" in w] == [
        f"2 traces have ranks {BEYOND}: {four} rank 4 of 4, {seven} rank 7 of 4 — traces of another job, "
        "or a wrong rank"
    ]


def test_one_job_says_nothing_of_world_sizes(tmp_path: Path) -> None:
    """ranks 0 and 3 of a world of 4 (ranks 1, 2 not given) and a trace declaring no world size."""
    sources = [
        _trace(tmp_path / "rank0.json", rank=0, world=4),
        _trace(tmp_path / "rank3.json", rank=3, world=4),
        _trace(tmp_path / "rank2.json", rank=2),
    ]
    result = ingest_fleet(sources, tmp_path / "out", jobs=1)
    assert result.failed == []
    assert [w for w in result.warnings if "world size" in w] == []
