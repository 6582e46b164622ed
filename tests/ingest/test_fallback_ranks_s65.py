"""A trace that declares no rank (no `distributedInfo.rank`, no `rank<N>` in its name) is given
the lowest rank no input declares, in input order, and said in one warning (campaign AQ 9).

Its position among the inputs had been its rank: beside `rank0.json` (declaring 0) the first
input `a_trace.json` became rank 0 too, and the report merged the two traces into one timeline
("2 traces claim rank 0") and refused the cross-rank view. The ranks below are derived by hand
from what each trace declares: declared {0} → the unranked trace takes 1; declared {0, 2} → the
two unranked take 1 and 3, in input order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kernel_atlas.ingest.fleet import ingest_fleet
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels
from tests.support.traces import EXAMPLE

NO_RANK = "no rank (no distributedInfo.rank, no rank<N> in the file name)"


def _trace(path: Path, rank: int | None = None) -> str:
    """One GEMM launched by an op; `distributedInfo` (when `rank` is given) written after the
    events, as a trace re-saved by a tool may have it: no reading of the head tells its rank."""
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
    if rank is not None:
        trace["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 4}
    path.write_text(json.dumps(trace))
    return str(path)


def _ranks(facts: dict[str, Any]) -> dict[str, int]:
    return {t["file"]: t["rank"] for t in facts["traces"]}


def _given(warnings: list[str]) -> list[str]:
    return [w for w in warnings if NO_RANK in w]


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_unranked_trace_takes_a_rank_no_trace_declares(tmp_path: Path, jobs: int) -> None:
    """h9b: `a_trace.json` (first input, no rank) beside `rank0.json` (distributedInfo rank 0)."""
    sources = [_trace(tmp_path / "a_trace.json"), _trace(tmp_path / "rank0.json", rank=0)]
    result = ingest_fleet(sources, tmp_path / "out", jobs=jobs)
    assert result.failed == []
    assert _ranks(result.facts) == {"rank0.json": 0, "a_trace.json": 1}
    assert {t["file"]: t["kernels_file"] for t in result.facts["traces"]} == {
        "rank0.json": "kernels.parquet/rank=0/rank0.parquet",
        "a_trace.json": "kernels.parquet/rank=1/a_trace.parquet",
    }
    assert [d["rank"] for d in result.facts["devices"]] == [0, 1]
    assert not any("several traces claim the same rank" in w for w in result.warnings)
    assert _given(result.warnings) == [
        f"1 trace declares {NO_RANK}: given the lowest ranks no trace declares, in input order: {sources[0]} rank 1"
    ]
    kernels = load_kernels(tmp_path / "out")
    assert sorted(zip(kernels["trace"].astype(str), kernels["rank"].astype(int), strict=True)) == [
        ("a_trace", 1),
        ("rank0", 0),
    ]


def test_files_written_under_a_rank_another_trace_declares_move(tmp_path: Path) -> None:
    """`b.json` declares rank 0 in its content only (after its events, not in its name), so
    `a_example.json.gz` — the example, no rank, with host and memory events — was written under
    rank 0 (the lowest no file name declares) before `b.json` told its rank: its three files move
    to rank 1, their rows unchanged; `b.json`'s file holds what it holds ingested alone."""
    example = tmp_path / "a_example.json.gz"
    shutil.copyfile(EXAMPLE, example)
    b = _trace(tmp_path / "b.json", rank=0)
    result = ingest_fleet([str(example), b], tmp_path / "out")
    assert result.failed == []
    assert _ranks(result.facts) == {"b.json": 0, "a_example.json.gz": 1}
    out = tmp_path / "out"
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet") if p.is_file())
    assert files == [
        "host_events.parquet/rank=0/b.parquet",
        "host_events.parquet/rank=1/a_example.parquet",
        "kernels.parquet/rank=0/b.parquet",
        "kernels.parquet/rank=1/a_example.parquet",
        "memory_events.parquet/rank=1/a_example.parquet",
    ]
    moved = next(t for t in result.facts["traces"] if t["file"] == "a_example.json.gz")
    assert moved["kernels_file"] == "kernels.parquet/rank=1/a_example.parquet"
    assert moved["memory_file"] == "memory_events.parquet/rank=1/a_example.parquet"
    assert {d["rank"] for d in moved["devices"]} == {1}
    assert _given(result.warnings) == [
        f"1 trace declares {NO_RANK}: given the lowest ranks no trace declares, in input order: {example} rank 1"
    ]
    # the example alone: 848 host and memory events, its kernels; the same rows at rank 1
    alone = ingest_fleet([str(example)], tmp_path / "alone")
    assert alone.facts["traces"][0]["rank"] == 0 and _given(alone.warnings) == []
    for dataset in ("kernels", "host_events", "memory_events"):
        here = pq.read_table(out / f"{dataset}.parquet/rank=1/a_example.parquet")
        there = pq.read_table(tmp_path / f"alone/{dataset}.parquet/rank=0/a_example.parquet")
        assert here.replace_schema_metadata(None).equals(there.replace_schema_metadata(None))
    only_b = ingest_fleet([b], tmp_path / "only_b")
    here = pq.read_table(out / "kernels.parquet/rank=0/b.parquet")
    there = pq.read_table(tmp_path / "only_b/kernels.parquet/rank=0/b.parquet")
    assert here.replace_schema_metadata(None).equals(there.replace_schema_metadata(None))
    assert only_b.facts["traces"][0]["rank"] == 0


def test_unranked_traces_take_the_lowest_free_ranks_in_input_order(tmp_path: Path) -> None:
    """Inputs (sorted): `a.json` (none), `b_rank2.json` (name: 2), `c.json` (none), `d.json`
    (distributedInfo 0, after the events). Declared {0, 2}: a → 1, c → 3. Before: a 0, c 2 —
    both ranks another trace declares."""
    folder = tmp_path / "in"
    folder.mkdir()
    _trace(folder / "a.json")
    _trace(folder / "b_rank2.json")
    _trace(folder / "c.json")
    _trace(folder / "d.json", rank=0)
    result = ingest_fleet([str(p) for p in sorted(folder.iterdir())], tmp_path / "out", jobs=2)
    assert _ranks(result.facts) == {"d.json": 0, "a.json": 1, "b_rank2.json": 2, "c.json": 3}
    assert _given(result.warnings) == [
        f"2 traces declare {NO_RANK}: given the lowest ranks no trace declares, in input order: "
        f"{folder / 'a.json'} rank 1, {folder / 'c.json'} rank 3"
    ]


def test_traces_that_all_declare_none_keep_their_positions_and_are_said(tmp_path: Path) -> None:
    """Nothing declared: ranks 0 and 1 in input order, as before, and now said; one trace alone
    is rank 0 without a word (no other trace to share a rank with)."""
    sources = [_trace(tmp_path / "x.json"), _trace(tmp_path / "y.json")]
    result = ingest_fleet(sources, tmp_path / "out")
    assert _ranks(result.facts) == {"x.json": 0, "y.json": 1}
    assert _given(result.warnings) == [
        f"2 traces declare {NO_RANK}: given the lowest ranks no trace declares, in input order: "
        f"{sources[0]} rank 0, {sources[1]} rank 1"
    ]
    alone = ingest_fleet(sources[:1], tmp_path / "alone")
    assert _ranks(alone.facts) == {"x.json": 0} and _given(alone.warnings) == []


def test_ingest_paths_gives_the_same_ranks_in_memory(tmp_path: Path) -> None:
    """`ingest_paths` (one table in memory): the unranked first trace's rows, devices and facts
    take rank 1, beside the trace declaring 0."""
    a, b = _trace(tmp_path / "a.json"), _trace(tmp_path / "b.json", rank=0)
    result = ingest_paths([a, b])
    assert _ranks(result.facts) == {"a.json": 1, "b.json": 0}
    rows = result.frame.groupby("trace", observed=True)["rank"].unique()
    assert {trace: ranks.tolist() for trace, ranks in rows.items()} == {"a": [1], "b": [0]}
    assert sorted(result.host_events) == [("a", 1), ("b", 0)]
    assert [d["rank"] for t in result.facts["traces"] for d in t["devices"]] == [1, 0]
    assert not any("several traces claim the same rank" in w for w in result.warnings)
    assert _given(result.warnings) == [
        f"1 trace declares {NO_RANK}: given the lowest ranks no trace declares, in input order: {a} rank 1"
    ]
