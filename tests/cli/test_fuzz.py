"""Property-based fuzzing of hostile input (issue 11): real traces mutated by hypothesis
(`tests/support/fuzz.py` says how), each run through `atlas ingest` and `atlas report` in a worker
whose memory is capped, with a time bound per case. Every outcome must keep the contract: exit
0 with a correct result (what a mutation confined to one value could not reach is exactly as
ingested unmutated) or exit 2 with one line naming the file — no traceback, no hang.

CI runs a small derandomized budget (fixed examples, seconds); `ATLAS_FUZZ_EXAMPLES=2000`
runs more here, and `python benchmarks/fuzz_hostile.py` runs a long campaign that records what
it found (benchmarks/results/fuzz-hostile.json).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support.fuzz import Case, Runner, cases, check

EXAMPLES = int(os.environ.get("ATLAS_FUZZ_EXAMPLES", "30"))


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory):
    worker = Runner(tmp_path_factory.mktemp("fuzz"))
    yield worker
    worker.close()


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(case=cases())
def test_mutated_real_traces_keep_the_contract(runner: Runner, case: Case) -> None:
    outcome, trace, out = runner.run(case)
    problems = check(case, outcome, trace, out)
    assert not problems, (case, outcome, problems)


def test_the_worker_is_held_to_its_bounds(runner: Runner, tmp_path: Path) -> None:
    """The bounds themselves work: a case past the time limit is reported as such, not waited for."""
    import tests.support.fuzz as fuzz

    saved = fuzz.TIME_LIMIT_S
    fuzz.TIME_LIMIT_S = 0.01
    try:
        from tests.support.traces import EXAMPLE

        outcome, _, _ = runner.run(Case(EXAMPLE, "bytes", "slow", EXAMPLE.read_bytes(), ".json.gz"), "slow")
    finally:
        fuzz.TIME_LIMIT_S = saved
    assert outcome.died == "timed out"
