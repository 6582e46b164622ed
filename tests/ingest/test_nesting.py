"""The sort that nesting and memory attribution share, and the parents it leads to, worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_atlas.ingest.nesting import by_thread_start_longest_first, nesting_parents


def test_ranges_sort_by_thread_then_start_then_longest_first() -> None:
    # rows:             0    1    2    3    4
    thread = np.array([1, 0, 1, 0, 1])
    start = np.array([5.0, 3.0, 5.0, 3.0, 2.0])
    length = np.array([1.0, 2.0, 3.0, 2.0, 0.0])
    # thread 0: rows 1 and 3 tie on every key and keep their order; thread 1: row 4 starts
    # first, then rows 2 (3 µs) and 0 (1 µs) start together, the longer first
    assert by_thread_start_longest_first(thread, start, length).tolist() == [1, 3, 4, 2, 0]


def test_parents_are_the_innermost_enclosing_range_on_the_thread() -> None:
    # thread 0: a step [0, 10) holding an op [1, 5) holding a kernel launch [2, 3), and an op [6, 9)
    # that starts with a same-start shorter range [6, 7); thread 1: one range [1, 4)
    thread = np.array([0, 0, 0, 0, 0, 1])
    start = np.array([0.0, 1.0, 2.0, 6.0, 6.0, 1.0])
    end = np.array([10.0, 5.0, 3.0, 7.0, 9.0, 4.0])
    assert nesting_parents(thread, start, end).tolist() == [-1, 0, 1, 4, 0, -1]


@pytest.mark.parametrize("walk_levels", [0, 32, 1000])
def test_the_first_wanted_ancestor_of_a_deep_chain(monkeypatch: pytest.MonkeyPatch, walk_levels: int) -> None:
    """A chain 0 ← 1 ← … ← 99 (each node's parent the one before), wanted at 10 and 60: from 99
    and 65 the first wanted node up is 60, from 59 it is 10, from 10 itself, from 5 none. Level by
    level, by pointer doubling, or both (past `WALK_LEVELS`), the same nodes."""
    from kernel_atlas.ingest import nesting

    monkeypatch.setattr(nesting, "WALK_LEVELS", walk_levels)
    parent = np.arange(-1, 99)
    wanted = np.zeros(100, bool)
    wanted[[10, 60]] = True
    start = np.array([99, 65, 59, 5, -1, 10])
    assert nesting.first_matching(start, parent, wanted).tolist() == [60, 60, 10, -1, -1, 10]


def test_a_call_stack_holds_its_innermost_ranges_only(tmp_path) -> None:
    """300 `aten::op` ranges of one thread with the same start and end nest 300 deep, a launch
    inside them all: its kernel's stack is the launch and the 255 innermost ops (MAX_STACK_RANGES
    = 256 ranges), then the cut mark — not all 300, and not one stack per level of N² frames."""
    import json

    from kernel_atlas.ingest.link import MAX_STACK_RANGES
    from kernel_atlas.ingest.pipeline import ingest_trace

    ops = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": 10.0, "dur": 50.0,
            "args": {"External id": i + 1}} for i in range(300)]  # fmt: skip
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20.0,
              "dur": 1.0, "args": {"correlation": 1}}  # fmt: skip
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30.0, "dur": 5.0,
              "args": {"correlation": 1, "device": 0, "stream": 7}}  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [*ops, launch, kernel]}))
    frames = ingest_trace(path).frame["call_stack"].iloc[0].split(" <- ")
    assert MAX_STACK_RANGES == 256 and len(frames) == 257
    assert frames[0] == "cudaLaunchKernel" and frames[-1] == "…"
    assert frames[1:-1] == [f"aten::op{i}" for i in range(299, 44, -1)]  # op299 innermost … op45


def test_the_distinct_stacks_of_a_trace_are_bounded_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past STACKS_TEXT characters of distinct stacks and module paths (32 MiB; 20,000 ops each
    with its own leaf under 5,000 shared frames made 320 MB of stacks, 1.4 GB in all), a new
    stack keeps its innermost SHORT_STACK_TEXT characters, marked, and a warning counts them.
    Here with a budget of 5,000 characters on the example (61 distinct stacks of up to 1,713):
    every stack is either whole or, past the budget, its first 511 characters then `…`."""
    from kernel_atlas.ingest import host_activity, link
    from kernel_atlas.ingest.pipeline import ingest_trace
    from tests.support.traces import EXAMPLE

    whole = ingest_trace(EXAMPLE)
    monkeypatch.setattr(link, "STACKS_TEXT", 5_000)
    monkeypatch.setattr(host_activity, "STACKS_TEXT", 5_000)
    bounded = ingest_trace(EXAMPLE)
    full = whole.frame["call_stack"].astype(object).tolist()
    kept = bounded.frame["call_stack"].astype(object).tolist()
    short = [(f, k) for f, k in zip(full, kept, strict=True) if f != k]
    assert short and all(len(f) > 512 and k == f[:511] + "…" for f, k in short)
    assert all(len(k) <= 512 for _, k in short)
    distinct_short = len({k for _, k in short})
    assert any(f"{distinct_short} call stacks kept to their innermost 512 characters" in w for w in bounded.warnings)
    assert sum(len(t) for t in set(kept)) < 5_000 + 1_713 + 512 * 61


def test_a_module_path_keeps_its_innermost_modules() -> None:
    from kernel_atlas.ingest.frames import innermost_modules

    assert innermost_modules("a.b.c.d", 7) == "a.b.c.d"
    assert innermost_modules("a.b.c.d", 4) == "…c.d"  # 1 + 3 characters
