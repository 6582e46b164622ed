"""Mutation test of replay's checks (a CI-sized subset; `python benchmarks/replay_mutation.py`
runs every mutant): each deliberate bug in a copy of the replay code must make the replay's own
check fail, where the unmutated code passes."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported
pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.support.replay_mutants import CI, MUTANTS, run_mutant

BY_NAME = {m.name: m for m in MUTANTS}


@pytest.mark.parametrize("name", CI)
def test_the_check_catches_the_mutant(name: str) -> None:
    outcome = run_mutant(BY_NAME[name])
    assert outcome.original[0] == "pass", outcome.original
    assert outcome.mutated[0] == "fail", outcome.mutated


def test_every_mutant_targets_code_that_exists() -> None:
    """The harness refuses a mutant whose source no longer occurs exactly once: kept honest as the
    replay code changes (the mutants themselves run in benchmarks/replay_mutation.py)."""
    from tests.support.replay_mutants import _source

    for mutant in MUTANTS:
        assert _source(mutant.module).count(mutant.old) == 1, mutant.name
