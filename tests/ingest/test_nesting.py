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


def test_ranges_of_one_start_and_length_nest_by_their_tie_not_their_order() -> None:
    """Two ranges [100, 131] on one thread and a third [105, 110] inside both: the one of lower
    `tie` encloses the other, whichever comes first in the arrays."""
    thread = np.zeros(3, np.int64)
    start, end = np.array([100.0, 100.0, 105.0]), np.array([131.0, 131.0, 110.0])
    assert nesting_parents(thread, start, end, np.array([10, 11, 12]).__getitem__).tolist() == [-1, 0, 1]
    assert nesting_parents(thread, start, end, np.array([11, 10, 12]).__getitem__).tolist() == [1, -1, 0]


def test_aten_item_encloses_its_local_scalar_dense_in_any_file_order(tmp_path) -> None:
    """`aten::item` calls `aten::_local_scalar_dense`; PyTorch recorded both over the same 31 µs,
    External ids 10 and 11 (an op's id is taken as it starts). The copy launched inside is the
    inner op's, whichever order the trace writes the two in (a shuffled trace swapped them)."""
    import json

    from kernel_atlas.ingest.pipeline import ingest_trace

    def op(name: str, ext: int) -> dict:
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 1,
            "tid": 1,
            "ts": 100,
            "dur": 31,
            "args": {"External id": ext},
        }

    launch = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaMemcpyAsync",
        "pid": 1,
        "tid": 1,
        "ts": 105,
        "dur": 5,
        "args": {"External id": 11, "correlation": 7},
    }
    copy = {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy DtoH (Device -> Pageable)",
        "pid": 0,
        "tid": 7,
        "ts": 112,
        "dur": 2,
        "args": {"External id": 11, "correlation": 7, "device": 0, "stream": 7, "bytes": 4},
    }
    outer, inner = op("aten::item", 10), op("aten::_local_scalar_dense", 11)
    for name, events in (("a", [outer, inner, launch, copy]), ("b", [inner, outer, launch, copy])):
        trace = tmp_path / f"{name}.json"
        trace.write_text(json.dumps({"traceEvents": events}))
        row = ingest_trace(trace).frame.iloc[0]
        assert row["launcher"] == "aten::_local_scalar_dense", name
        assert row["call_stack"] == "cudaMemcpyAsync <- aten::_local_scalar_dense <- aten::item", name
