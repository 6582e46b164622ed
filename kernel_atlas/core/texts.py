"""Tests on texts: on text columns, evaluated once per distinct text, not once per row; many
literals searched for in one pass (`trie_pattern`); the user's own regular expressions compiled
and run within a time bound (`user_pattern`, `time_bound`)."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from kernel_atlas.core.errors import AtlasError

if TYPE_CHECKING:  # imported where a frame is read: saying an error (`core.redact`) never waits for pandas
    import pandas as pd

# the longest a user's regular expression may take over all the texts it is tried on: Python's
# `re` backtracks, and `(.*.*)*Q$` on one 40-character name runs for hours
USER_PATTERN_SECONDS = 10.0


def filled(n: int, text: str) -> np.ndarray:
    """An object array of `n` references to one `text`. `np.full(n, text, dtype=object)` casts
    the text element by element: `n` strings (1M of "no shapes" held 62 MB, where one takes 58 B)."""
    values = np.empty(n, dtype=object)
    values[:] = text
    return values


def counted(n: int, one: str, many: str, verb: tuple[str, str] | None = None) -> str:
    """`n` things, in the singular or plural as `n` asks ("1 value", "3 values"), followed by the
    verb's form for it when given (`("was", "were")`)."""
    text = f"{n:,} {one if n == 1 else many}"
    return text if verb is None else f"{text} {verb[0] if n == 1 else verb[1]}"


WAS = ("was", "were")


def name_mask(values: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """`test(text)` per row of a string or categorical column, evaluated once per distinct text."""
    import pandas as pd

    cat = values.astype("category") if not isinstance(values.dtype, pd.CategoricalDtype) else values
    codes = cat.cat.codes.to_numpy()
    hit = np.array([bool(test(str(c))) for c in cat.cat.categories], dtype=bool)
    return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(hit) else False, False)


def trie_pattern(words: Sequence[str]) -> str:
    """A regular expression matching exactly `words`, factored as a trie (shared prefixes once):
    at each position a search follows one branch instead of trying every word (~40× faster than
    their alternation for 1,000 words), and it matches the longest word that starts there (the
    optional tails are greedy, the branches begin with distinct characters)."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, dict]) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(trie)


def user_pattern(text: str, given: str) -> re.Pattern[str]:
    """A regular expression given on the command line (`given`: how, for the error)."""
    try:
        return re.compile(text)
    except (re.error, RecursionError, OverflowError) as exc:
        raise AtlasError(None, f"{given}: not a regular expression ({exc})") from None


class TooSlow(Exception):
    """The work inside `interrupted_after` ran past its time."""


@contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    """Raises `TooSlow` inside the work after `seconds`. `re` checks for signals while it
    matches, so a timer signal ends even a regular expression that backtracks catastrophically;
    only the main thread receives signals — elsewhere (a notebook's worker thread, a platform
    without SIGALRM) the work runs unbounded."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise TooSlow

    outer = signal.getitimer(signal.ITIMER_REAL)  # a timer set outside (one per process): resumed after
    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer[0] - (time.monotonic() - started), 1e-3), outer[1])


@contextmanager
def time_bound(what: str, seconds: float | None = None) -> Iterator[None]:
    """Stops the work inside after `seconds` (default USER_PATTERN_SECONDS) with a one-line
    error naming `what` (a user's pattern that backtracks catastrophically); see
    `interrupted_after`."""
    seconds = USER_PATTERN_SECONDS if seconds is None else seconds
    try:
        with interrupted_after(seconds):
            yield
    except TooSlow:
        raise AtlasError(
            None, f"{what}: matching took more than {seconds:g} s (a pattern that backtracks catastrophically?)"
        ) from None


def strings_in(document: object) -> Iterator[str]:
    """Every string inside a JSON-like document (dicts' keys and values, lists and tuples), walked
    without recursion (a document may nest thousands deep)."""
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
