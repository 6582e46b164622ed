"""A user's own regular expressions (`--kernel`, `--speedup kernel=…`) run within a time bound:
Python's `re` backtracks, and `(.*.*)*Q$` on one long kernel name runs for hours."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from kernel_atlas.core import texts
from kernel_atlas.core.errors import AtlasError
from tests.support.hostile import assert_one_line_error, cli
from tests.support.traces import EXAMPLE

CATASTROPHIC = "(.*.*)*Q$"


def test_a_pattern_that_backtracks_is_stopped_and_the_timer_put_back() -> None:
    pattern = texts.user_pattern(CATASTROPHIC, "--kernel 'x'")
    start = time.monotonic()
    stopped = pytest.raises(AtlasError, match=r"--kernel 'x': matching took more than 0.3 s")
    with stopped, texts.time_bound("--kernel 'x'", seconds=0.3):
        pattern.search("a" * 40)
    assert time.monotonic() - start < 5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    with texts.time_bound("--kernel 'x'", seconds=0.3):  # quick work: untouched
        assert texts.user_pattern("gemm", "--kernel 'gemm'").search("ampere_gemm")
    with pytest.raises(AtlasError, match=r"--kernel '\(': not a regular expression"):
        texts.user_pattern("(", "--kernel '('")
    assert isinstance(texts.user_pattern("a|b", "x"), re.Pattern)


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bert") / "bert.atlas"
    assert cli("ingest", EXAMPLE, "-o", out).code == 0
    assert cli("report", out).code == 0
    return out


@pytest.mark.parametrize("command", ["whatif", "replay"])
def test_a_catastrophic_kernel_pattern_is_one_line(bert_run: Path, command: str, monkeypatch) -> None:
    monkeypatch.setattr(texts, "USER_PATTERN_SECONDS", 0.5)
    if command == "whatif":
        args, given = (
            ["whatif", bert_run, "--speedup", f"kernel={CATASTROPHIC}:2x"],
            f"--speedup 'kernel={CATASTROPHIC}:2x'",
        )
    else:
        args, given = (
            ["replay", "--from", bert_run, "--kernel", CATASTROPHIC, "--device", "cpu"],
            f"--kernel '{CATASTROPHIC}'",
        )
    start = time.monotonic()
    assert_one_line_error(cli(*args), given, "matching took more than 0.5 s")
    assert time.monotonic() - start < 30


def test_a_timer_set_outside_goes_on_after_an_inner_one() -> None:
    """The process has one interval timer: the inner bound (a long name's rules) stops its own
    work, then the outer timer (a harness's) is set again for what it had left, and fires."""
    from kernel_atlas.core.texts import TooSlow, interrupted_after

    fired: list[float] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(TooSlow), interrupted_after(0.05):
            while True:
                pass
        assert not fired
        deadline = time.monotonic() + 5
        while not fired and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(fired) == 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
