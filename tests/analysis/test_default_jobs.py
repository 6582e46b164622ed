"""How many ranks a report analyses at a time, and how many traces an ingest reads at a time,
when the user gives no --jobs: every CPU for several small ones, else one at a time."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import kernel_atlas.analysis.ranks as ranks_module
import kernel_atlas.ingest.workers as workers
from kernel_atlas.analysis.ranks import default_jobs


def _trace(rank: int, kernels: int, memcpys: int = 0) -> dict:
    return {"rank": rank, "by_kind": {"kernel": {"count": kernels, "total_us": 1.0}, "memcpy": {"count": memcpys}}}


@pytest.fixture
def four_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranks_module, "can_fork", lambda: True)
    monkeypatch.setattr(ranks_module, "usable_cpus", lambda: 4)


def test_small_ranks_go_in_parallel(four_cpus: None) -> None:
    summary = {"traces": [_trace(r, 2) for r in range(200)]}
    assert default_jobs(summary, list(range(200))) == 4
    assert default_jobs({"traces": [_trace(0, 5), _trace(1, 5)]}, [0, 1]) == 2  # no more than the ranks


def test_one_large_rank_keeps_them_one_at_a_time(four_cpus: None) -> None:
    # 99,990 kernels and 10 copies: 100,000 activities, the most a rank in parallel may have
    at_limit = {"traces": [_trace(0, 99_990, 10), _trace(1, 3)]}
    assert default_jobs(at_limit, [0, 1]) == 2
    over = {"traces": [_trace(0, 99_990, 11), _trace(1, 3)]}
    assert default_jobs(over, [0, 1]) == 1
    # two traces of one rank add up: 60,000 + 50,000
    assert default_jobs({"traces": [_trace(0, 60_000), _trace(0, 50_000), _trace(1, 1)]}, [0, 1]) == 1


def test_unknown_sizes_and_single_ranks_stay_one_at_a_time(four_cpus: None) -> None:
    assert default_jobs({"traces": [_trace(0, 2)]}, [0]) == 1
    assert default_jobs({"traces": [_trace(0, 2)]}, [0, 1]) == 1  # rank 1 not in the summary
    doctored = {"traces": [_trace(0, 2), {"rank": 1, "by_kind": {"kernel": {"count": "many"}}}]}
    assert default_jobs(doctored, [0, 1]) == 1
    assert default_jobs({"traces": [_trace(0, 2), "rank 1", _trace(1, 2)]}, [0, 1]) == 2
    assert default_jobs({"traces": "all of them"}, [0, 1]) == 1


def test_no_fork_no_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranks_module, "can_fork", lambda: False)
    assert default_jobs({"traces": [_trace(0, 2), _trace(1, 2)]}, [0, 1]) == 1


def test_ingest_reads_several_small_traces_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 4)
    small = [tmp_path / f"rank{r}.json" for r in range(3)]
    for path in small:
        path.write_text('{"traceEvents": []}')
    assert workers.local_jobs(small) == 3
    assert workers.local_jobs(small[:1]) == 1
    # 5 MB of gzip counts as ~50 MB of JSON, past the 48 MB one decode process takes
    large = tmp_path / "large.json.gz"
    large.write_bytes(gzip.compress(b"x") + b"\0" * (5 << 20))
    assert workers.local_jobs([*small, large]) == 1


def test_small_ranks_are_batched_by_count_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consecutive ranks share a batch while it holds at most BATCH_RANKS ranks and
    BATCH_ACTIVITIES activities; a larger rank, or one of unknown size, is alone."""
    from kernel_atlas.analysis.ranks import rank_batches

    monkeypatch.setattr(ranks_module, "BATCH_RANKS", 3)
    monkeypatch.setattr(ranks_module, "BATCH_ACTIVITIES", 100)
    tiny = {"traces": [_trace(r, 10) for r in range(7)]}
    assert rank_batches(tiny, list(range(7))) == [[0, 1, 2], [3, 4, 5], [6]]
    # 60 + 30 fit, + 20 would be 110; 150 alone; rank 5 unknown (not in the summary): alone
    sized = {"traces": [_trace(0, 60), _trace(1, 30), _trace(2, 20), _trace(3, 150), _trace(4, 5)]}
    assert rank_batches(sized, [0, 1, 2, 3, 4, 5]) == [[0, 1], [2], [3], [4], [5]]
    # two traces of one rank count together (60 + 50 > 100: rank 0 alone)
    shared = {"traces": [_trace(0, 60), _trace(0, 50), _trace(1, 1), _trace(2, 1)]}
    assert rank_batches(shared, [0, 1, 2]) == [[0], [1, 2]]
    assert rank_batches({}, [0, 1]) == [[0], [1]]  # no summary: every size unknown
    # a trace without GPU activity (no kinds) counts 0; a count that is no number, or a kind
    # without its count, is unknown
    odd = [{"rank": 0, "by_kind": {}}, _trace(1, 99), {"rank": 2, "by_kind": {"kernel": {"count": -1}}}]
    odd += [{"rank": 3, "by_kind": {"kernel": 5}}, {"rank": 4, "by_kind": {"kernel": {"count": "5"}}}, _trace(5, 1)]
    assert rank_batches({"traces": odd}, list(range(6))) == [[0, 1], [2], [3], [4], [5]]
    assert rank_batches(tiny, []) == []
