"""Campaign BL, class 9: docs/outputs.md, the page of every output file, listed no column of
`replay.parquet` and none of the ten `replay_*` columns `atlas report` adds to roofline.parquet
(both lists were in docs/replay.md only, so tests/project/test_docs.py, which reads every page,
did not see the gap)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

OUTPUTS = Path(__file__).resolve().parents[2] / "docs" / "outputs.md"

# roofline.parquet's replay columns, as report/build.py:merge_replay names them
REPLAY_ON_ROOFLINE = [
    "replay_us",
    "replay_device",
    "replay_check",
    "replay_implementation",
    "replay_timed",
    "replay_ratio",
    "replay_same_device",
    "replay_note",
    "replay_tflops",
    "replay_gbps",
]


def _section(title: str) -> str:
    text = OUTPUTS.read_text()
    start = text.index(title)
    following = re.search(r"^## ", text[start + len(title) :], flags=re.MULTILINE)
    return text[start : start + len(title) + following.start()] if following else text[start:]


def _backticked(text: str) -> set[str]:
    return {word for span in re.findall(r"`([^`\n]+)`", text) for word in re.split(r"[\s,()]+", span) if word}


def test_outputs_lists_the_replay_parquet_columns() -> None:
    from kernel_atlas.replay.runner import Result  # the rows of replay.parquet

    section = _section("## What `atlas replay --all` writes")
    assert "`OUT/replay.parquet`" in section
    assert [f.name for f in fields(Result) if f.name not in _backticked(section)] == []
    # the columns a scaled replay is read by (written by hand)
    assert {"scale", "input_dims", "median_us", "ratio"} <= _backticked(section)


def test_outputs_lists_the_roofline_replay_columns() -> None:
    report = _section("## What `atlas report` writes")
    assert [c for c in REPLAY_ON_ROOFLINE if c not in _backticked(report)] == []
    replay = _section("## What `atlas replay --all` writes")
    assert [c for c in REPLAY_ON_ROOFLINE if c not in _backticked(replay)] == []
