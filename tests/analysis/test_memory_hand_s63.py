"""The memory analysis on damaged and edge-case `[memory]` events, against values worked out by hand.

Every trace here is small enough to follow on paper: one step `ProfilerStep#1` [0, 1000] ⊃ nn.Module
`Net_0` [10, 990] ⊃ `aten::linear` [20, 920] ⊃ `aten::empty` [30, 830] on thread 1, one kernel, then
the `[memory]` events of each test (times in µs from BASE, totals after each event). The expected
numbers are derived in the comments from those events, never from the code under test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from kernel_atlas.analysis.memory import (
    BEFORE_WINDOW,
    MemoryReport,
    analyse_memory,
    live_by_module,
    memory_warnings,
    read_memory_events,
)
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.store.outputs import SUMMARY

BASE = 1_700_000_000_000.0


def _range(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": BASE + ts, "dur": dur, "args": args}


def _mem(ts: float, addr: int | None, nbytes: Any, allocated: Any = None, reserved: Any = 2048, **raw: Any) -> dict:
    """A `[memory]` event on cuda:0 (thread 1); None leaves a key out."""
    args = {"Addr": addr, "Bytes": nbytes, "Total Allocated": allocated, "Total Reserved": reserved}
    args = {k: v for k, v in args.items() if v is not None}
    args.update({"Device Type": 1, "Device Id": 0, **raw})
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
            "ts": BASE + ts, "args": args}  # fmt: skip


KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": BASE + 910, "dur": 50,
          "args": {"correlation": 7, "device": 0, "stream": 7}}  # fmt: skip
SKELETON = [
    _range("user_annotation", "ProfilerStep#1", 0, 1000),
    _range("python_function", "nn.Module: Net_0", 10, 980),
    _range("cpu_op", "aten::linear", 20, 900),
    _range("cpu_op", "aten::empty", 30, 800),
    _range("cuda_runtime", "cudaLaunchKernel", 900, 5, correlation=7),
    KERNEL,
]


def _write(tmp_path: Path, events: list[dict[str, Any]], name: str = "mem") -> Path:
    path = tmp_path / f"{name}.json"
    # NaN and inf written as the profiler's JSON writer would (json.dumps spells them NaN, Infinity)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _out(tmp_path: Path, memory: list[dict[str, Any]], skeleton: list[dict[str, Any]] = SKELETON) -> Path:
    out = tmp_path / "out"
    write_outputs(ingest_trace(_write(tmp_path, [*skeleton, *memory]), workers=1), out)
    return out


def _report(out: Path) -> MemoryReport:
    summary = json.loads((out / SUMMARY).read_text())
    return analyse_memory(read_memory_events(out, summary, summary["run_id"]))


def _gpu(tmp_path: Path, memory: list[dict[str, Any]], **kw: Any) -> tuple[dict[str, Any], list[str]]:
    report = _report(_out(tmp_path, memory, **kw))
    [gpu] = [e for e in report.entries if not e["host"]]
    return gpu, memory_warnings(report.entries, report.left_out, report.oversized)


def _terminal(entries: list[dict[str, Any]]) -> str:
    from kernel_atlas.report.memory_view import print_memory

    console = Console(width=400, record=True)
    print_memory(console, entries, top=8, wide=True)
    return console.export_text()


# ---- 1. totals that disagree with the sizes, anywhere ------------------------------------------------


def test_totals_that_disagree_after_the_peak_are_counted_and_said(tmp_path: Path) -> None:
    # +100@0x10 → 100, +200@0x20 → 300, +50@0x30 → 250 (a total 50 lower though 50 were allocated:
    # a free of 0x10 was lost), −200@0x20 → 50, −50@0x30 → 0. TA[2] − TA[1] = −50 ≠ +50: 1 event.
    # The totals peak at 300; the sizes' running sum 100, 300, 350, 150, 100 peaks at 350.
    gpu, warnings = _gpu(
        tmp_path,
        [_mem(100, 0x10, 100, 100), _mem(200, 0x20, 200, 300), _mem(300, 0x30, 50, 250),
         _mem(400, 0x20, -200, 50), _mem(500, 0x30, -50, 0)],
    )  # fmt: skip
    assert warnings == [
        "1 memory events on cuda:0 moved Total Allocated by other than their Bytes (the totals and the sizes "
        "disagree: events lost?); on cuda:0 the sizes' running sum peaks at 350 bytes, the totals at 300"
    ]
    assert (gpu["peak_allocated_bytes"], gpu["inconsistent_events"], gpu["running_peak_bytes"]) == (300, 1, 350)


def test_a_baseline_below_zero_is_not_shown_and_is_said(tmp_path: Path) -> None:
    # +500@0x10 with a total of 100: held before = 100 − 500 = −400, impossible. Then +50 → 150 (+50,
    # agrees), −500 → 0 (−150 ≠ −500), −50 → 0 (0 ≠ −50): 2 events disagree.
    gpu, warnings = _gpu(
        tmp_path,
        [_mem(100, 0x10, 500, 100), _mem(200, 0x20, 50, 150), _mem(300, 0x10, -500, 0), _mem(400, 0x20, -50, 0)],
    )
    assert gpu["baseline_bytes"] is None and gpu["unexplained_bytes"] is None and gpu["running_peak_bytes"] is None
    assert "-400 bytes, below zero" in gpu["baseline_note"]
    assert gpu["inconsistent_events"] == 2 and gpu["peak_allocated_bytes"] == 150
    assert f"no baseline on cuda:0: {gpu['baseline_note']}" in warnings
    assert any(line.startswith("2 memory events on cuda:0 moved Total Allocated") for line in warnings)
    assert [h["name"] for h in gpu["holders"]["module"]] == ["Net_0"]  # no pre-window holder of −400
    text = _terminal([{"trace": "t", "rank": 0, **gpu}])
    assert "baseline unknown (the first Total Allocated less the sizes up to it is -400 bytes" in text
    assert "−400" not in text and "-400 B" not in text


# ---- 2. the level held before the first event of the window / of a step -------------------------------


def test_the_peak_includes_what_was_held_before_the_first_event(tmp_path: Path) -> None:
    # frees only: −100@0x10 → 900, −200@0x20 → 700, −300@0x30 → 400. Held before: 900 + 100 = 1000,
    # from the window's start until ts 100: the peak is 1000 there, all of it allocated before the window.
    gpu, _ = _gpu(tmp_path, [_mem(100, 0x10, -100, 900), _mem(200, 0x20, -200, 700), _mem(300, 0x30, -300, 400)])
    assert (gpu["peak_allocated_bytes"], gpu["peak_ts_us"]) == (1000, BASE + 100)
    assert gpu["peak_at_start"]
    assert (gpu["baseline_bytes"], gpu["live_at_peak_bytes"], gpu["unexplained_bytes"]) == (1000, 0, 0)
    assert gpu["baseline_freed_before_peak_bytes"] == 0
    assert [(h["name"], h["bytes"], h["pct"]) for h in gpu["holders"]["module"]] == [(BEFORE_WINDOW, 1000, 100.0)]
    assert gpu["steps"] == [{"step": 1, "peak_allocated_bytes": 1000, "peak_ts_us": BASE + 100}]


def test_a_step_peak_includes_the_level_carried_into_it(tmp_path: Path) -> None:
    # step 1 [0, 400]: +500@0x10 at 20 → 500. Step 2 [500, 900]: −500@0x10 at 600 → 0, +100@0x20 at 700
    # → 100, −100 at 800 → 0. Step 2 holds 500 from its start until 600: its peak is 500, at 600.
    skeleton = [
        _range("user_annotation", "ProfilerStep#1", 0, 400),
        _range("user_annotation", "ProfilerStep#2", 500, 400),
        _range("cpu_op", "aten::empty", 10, 100),
        _range("cpu_op", "aten::add", 510, 380),
        _range("cuda_runtime", "cudaLaunchKernel", 520, 5, correlation=7),
        {**KERNEL, "ts": BASE + 530},
    ]
    memory = [_mem(20, 0x10, 500, 500, 1024), _mem(600, 0x10, -500, 0, 1024)]
    memory += [_mem(700, 0x20, 100, 100, 1024), _mem(800, 0x20, -100, 0, 1024)]
    gpu, _ = _gpu(tmp_path, memory, skeleton=skeleton)
    assert gpu["steps"] == [
        {"step": 1, "peak_allocated_bytes": 500, "peak_ts_us": BASE + 20},
        {"step": 2, "peak_allocated_bytes": 500, "peak_ts_us": BASE + 600},
    ]
    assert "peak per step: 1: 500 B, 2: 500 B" in _terminal([{"trace": "t", "rank": 0, **gpu}])


# ---- 3. exact repeats -------------------------------------------------------------------------------


def test_events_written_twice_are_read_once(tmp_path: Path) -> None:
    # +100@0x10 → 100, +200@0x20 → 300, −100@0x10 → 200, −200@0x20 → 0, each written twice: 4 events,
    # 2 allocations both freed, the peak 300 held by both (live 300), nothing unexplained.
    memory = [
        _mem(100, 0x10, 100, 100),
        _mem(200, 0x20, 200, 300),
        _mem(300, 0x10, -100, 200),
        _mem(400, 0x20, -200, 0),
    ]
    gpu, warnings = _gpu(tmp_path, [e for event in memory for e in (event, dict(event))])
    assert (gpu["events"], gpu["allocations"]) == (4, 2)
    assert gpu["duplicate_events"] == 4
    assert (gpu["never_freed"]["blocks"], gpu["never_freed"]["bytes"]) == (0, 0)
    assert (gpu["peak_allocated_bytes"], gpu["live_at_peak_bytes"], gpu["unexplained_bytes"]) == (300, 300, 0)
    assert gpu["inconsistent_events"] == 0 and gpu["unmatched_frees"] == 0
    assert [(h["name"], h["bytes"], h["pct"]) for h in gpu["holders"]["module"]] == [("Net_0", 300, 100.0)]
    assert warnings == [
        "4 memory events repeat an earlier one exactly (time, device, address, size, totals): each read once"
    ]


def test_repeats_apart_in_the_file_and_twins_without_address_or_total(tmp_path: Path) -> None:
    # at ts 100, A (+100@0x10 → 100), B (+200@0x20 → 300), A again, B again; then −100@0x10 → 200 at 200
    # and −200@0x20 → 0 at 300. Read once: 4 events, the totals agree (100, 300, 200, 0), peak 300.
    a, b = _mem(100, 0x10, 100, 100), _mem(100, 0x20, 200, 300)
    gpu, _ = _gpu(tmp_path, [a, b, dict(a), dict(b), _mem(200, 0x10, -100, 200), _mem(300, 0x20, -200, 0)])
    assert (gpu["events"], gpu["allocations"]) == (4, 2)
    assert (gpu["duplicate_events"], gpu["inconsistent_events"]) == (2, 0)
    assert (gpu["peak_allocated_bytes"], gpu["never_freed"]["blocks"]) == (300, 0)
    # PyTorch 1.9: two allocations of 512 bytes in one microsecond, written without address or total,
    # are two allocations (nothing tells them apart): a rise of 1024
    (tmp_path / "twins").mkdir()
    twin = _mem(100, None, 512, None, None)
    gpu, _ = _gpu(tmp_path / "twins", [twin, dict(twin)])
    assert (gpu["events"], gpu["duplicate_events"], gpu["peak_change_bytes"]) == (2, 0, 1024)


# ---- 4. a size that cannot be read ------------------------------------------------------------------


def test_an_unreadable_size_is_worked_out_not_taken_as_zero(tmp_path: Path) -> None:
    # 0x10 written with Bytes NaN, total 100; +50@0x20 → 150; −100@0x10 → 50; −50@0x20 → 0. The free
    # says 0x10 held 100, allocated in the window at 100 (in aten::empty): the baseline is 100 − 100 = 0,
    # no pre-window free, and at the peak (150, at 200) 0x10's 100 B and 0x20's 50 B are live.
    gpu, warnings = _gpu(
        tmp_path,
        [
            _mem(100, 0x10, float("nan"), 100),
            _mem(200, 0x20, 50, 150),
            _mem(300, 0x10, -100, 50),
            _mem(400, 0x20, -50, 0),
        ],
    )
    assert (gpu["baseline_bytes"], gpu["pre_window_frees"], gpu["unexplained_bytes"]) == (
        0,
        {"blocks": 0, "bytes": 0},
        0,
    )
    assert (gpu["peak_allocated_bytes"], gpu["live_at_peak_bytes"], gpu["live_at_peak_blocks"]) == (150, 150, 2)
    assert [(r["addr"], r["bytes"], r["op"]) for r in gpu["largest_at_peak"]] == [
        (0x10, 100, "aten::empty"),
        (0x20, 50, "aten::empty"),
    ]
    assert (gpu["unreadable_size_events"], gpu["worked_out_size_events"]) == (1, 1)
    assert warnings == [
        "1 memory events have a Bytes that cannot be read: 1 sized from the totals or their address's other "
        "events, 0 left out of pairing and sums"
    ]


def test_an_unreadable_size_that_nothing_gives_leaves_the_baseline_unknown(tmp_path: Path) -> None:
    # 0x40 written with Bytes "abc" and no totals, nothing else at 0x40; then +200@0x20 → 1200. The
    # baseline (1200 − 200 − the unknown size) cannot be known; the event is out of pairing and sums.
    gpu, warnings = _gpu(tmp_path, [_mem(100, 0x40, "abc"), _mem(200, 0x20, 200, 1200)])
    assert gpu["baseline_bytes"] is None  # had been 1000, the unreadable size taken as 0
    assert gpu["baseline_note"] == "a size before the first Total Allocated cannot be read"
    assert (gpu["allocations"], gpu["unreadable_size_events"], gpu["worked_out_size_events"]) == (1, 1, 0)
    assert warnings == [
        "1 memory events have a Bytes that cannot be read: 0 sized from the totals or their address's other "
        "events, 1 left out of pairing and sums",
        "no baseline on cuda:0: a size before the first Total Allocated cannot be read",
    ]


def test_fractions_are_not_cut_to_whole_bytes() -> None:
    from kernel_atlas.ingest.events import decode_slice

    events = [
        _mem(100, 0x10, 100.5, 100),  # 100.5 bytes: no size (had been read as 100)
        _mem(200, 0x20, 50, 150.7),  # a total of 150.7: not recorded (had been 150)
        _mem(300, 0x30, 100.0, 250),  # 100.0 is the whole number 100
    ]
    part = decode_slice(json.dumps(events).encode())
    assert part.memory["bytes"].tolist() == [-(2**62), 50, 100]  # −2^62: a size that cannot be read
    assert part.memory["total_allocated"].tolist() == [100, -1, 250]
    assert part.ignored == {"Bytes": 1, "Total Allocated": 1}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "abc", None, True, [1], 10**30, 2**50])
def test_each_unreadable_size_is_unknown_and_reaches_the_report(tmp_path: Path, value: Any) -> None:
    # +100@0x10 → 100; 0x30 with the damaged Bytes, the total still 100; +200@0x20 → 300; −100@0x10 →
    # 200; −200@0x20 → 0. The totals give 0x30's size: 100 − 100 = 0 (it held nothing). Nothing else
    # changes: 2 allocations, baseline 0, the peak 300 = live 300.
    from kernel_atlas.report.build import build_report

    out = _out(
        tmp_path,
        [_mem(100, 0x10, 100, 100), _mem(150, 0x30, 0, 100, Bytes=value), _mem(200, 0x20, 200, 300),
         _mem(300, 0x10, -100, 200), _mem(400, 0x20, -200, 0)],
    )  # fmt: skip
    build_report(out)
    facts = json.loads((out / "report.json").read_text())
    [gpu] = facts["memory"]
    assert (gpu["allocations"], gpu["baseline_bytes"], gpu["peak_allocated_bytes"], gpu["live_at_peak_bytes"]) == (
        2,
        0,
        300,
        300,
    )
    line = (
        "1 memory events have a Bytes that cannot be read: 1 sized from the totals or their address's other "
        "events, 0 left out of pairing and sums"
    )
    assert facts["memory_warnings"] == [line]
    assert line.replace("'", "&#x27;") in (out / "report.html").read_text()
    assert (gpu["unreadable_size_events"], gpu["worked_out_size_events"], gpu["inconsistent_events"]) == (1, 1, 0)
    # the file says "unknown" as null, so that pandas or DuckDB summing `bytes` skip it: 100 + 200 − 100 − 200 = 0
    import duckdb

    [(nulls, total)] = duckdb.sql(
        f"SELECT count(*) FILTER (bytes IS NULL), sum(bytes) FROM '{out}/memory_events.parquet/**/*.parquet'"
    ).fetchall()
    assert (nulls, total) == (1, 0)


# ---- 5. a time beyond 2^53 µs -----------------------------------------------------------------------


@pytest.mark.parametrize("ts", [1.7e16, 1e300, -1e17])
def test_a_memory_event_beyond_the_time_bound_is_left_out_at_ingest(tmp_path: Path, ts: float) -> None:
    # +100@0x10 → 100 at 100, −100@0x10 → 0 at 200, and +50@0x20 at ts 1.7e16 µs (a ns epoch written as
    # µs): the last is no time, left out and said; the report of the other two runs (peak 100).
    from kernel_atlas.report.build import build_report

    late = {**_mem(0, 0x20, 50, 50), "ts": ts}
    memory = [_mem(100, 0x10, 100, 100), _mem(200, 0x10, -100, 0), late]
    result = ingest_trace(_write(tmp_path, [*SKELETON, *memory]), workers=1)
    assert result.memory is not None and len(result.memory) == 2
    assert any(w.endswith("1 [memory] event without a usable ts was left out") for w in result.warnings)
    out = tmp_path / "out"
    write_outputs(result, out)
    build_report(out)
    [gpu] = json.loads((out / "report.json").read_text())["memory"]
    assert (gpu["events"], gpu["peak_allocated_bytes"]) == (2, 100)


# ---- 6. the timeline's pre-window layer when the first event has no total ------------------------------


def test_the_timeline_baseline_counts_events_before_the_first_total(tmp_path: Path) -> None:
    # +100@0x10 with no totals, +200@0x20 → 1300, −100@0x10 → 1200, −200@0x20 → 1000: held before the
    # window 1300 − 200 − 100 = 1000. The stack after each event: 1000 + 100, + 300, + 200, + 0.
    report = _report(
        _out(tmp_path, [_mem(100, 0x10, 100, None, None), _mem(200, 0x20, 200, 1300, 4096),
                        _mem(300, 0x10, -100, 1200, 4096), _mem(400, 0x20, -200, 1000, 4096)])
    )  # fmt: skip
    key = next(iter(report.events))
    frame = live_by_module(report.events[key], report.by_trace[key], "cuda:0")
    assert frame[BEFORE_WINDOW].tolist() == [1000, 1000, 1000, 1000]
    holders = frame.drop(columns=["ts_us", "total_allocated", "total_reserved"])
    assert holders.sum(axis=1).tolist() == [1100, 1300, 1200, 1000]
    assert report.entries[0]["baseline_bytes"] == 1000


# ---- 7. report.html says memory_warnings -------------------------------------------------------------


def test_the_page_says_the_memory_warnings(tmp_path: Path) -> None:
    from kernel_atlas.report.memory_view import memory_html

    # three frees of blocks allocated before the window (900, 700, 400 after them)
    report = _report(
        _out(tmp_path, [_mem(100, 0x10, -100, 900), _mem(200, 0x20, -200, 700), _mem(300, 0x30, -300, 400)])
    )
    page = memory_html(report)
    assert "<li>3 frees of blocks allocated before the profiling window (counted apart)</li>" in page


# ---- 8. the terminal's holders sum to the peak --------------------------------------------------------


def test_the_terminal_folds_the_holders_it_does_not_show(tmp_path: Path) -> None:
    # 12 blocks, M0 … M11 of 1200, 1100, …, 100 bytes, each allocated in its module inside its own op
    # aten::opK, none freed, nothing held before: the peak is 7800 (the last total). The analysis keeps
    # 9 modules and "(3 others)" (300 + 200 + 100); the terminal shows 7 rows and "(5 others)":
    # 500 + 400 + 300 + 200 + 100 = 1500, and 6300 + 1500 = 7800. By op, 3 and "(9 others)": 4500.
    events, total = [], 0
    for k in range(12):
        size, at = (12 - k) * 100, 10 + 60 * k
        total += size
        events += [_range("python_function", f"nn.Module: M{k}", at, 50), _range("cpu_op", f"aten::op{k}", at + 5, 40)]
        events.append(_mem(at + 10, 0x1000 + 0x100 * k, size, total))
    events += [_range("cuda_runtime", "cudaLaunchKernel", 900, 5, correlation=7), KERNEL]
    report = analyse_memory({("t", 0): ingest_trace(_write(tmp_path, events), workers=1).memory.drop(columns="rank")})
    [gpu] = report.entries
    assert gpu["peak_allocated_bytes"] == 7800
    text = _terminal(report.entries)
    table = text[text.index("by nn.Module") : text.index("by op:")].splitlines()
    rows = [line.split() for line in table if line.strip() and line.split()[-1].endswith(("others)", "M0"))]
    held = [line.split()[-1] for line in table if line.split() and line.split()[-1][:1] == "M"]
    assert held == [f"M{k}" for k in range(7)]  # then one row for the 5 others, 1500 B of 7800
    assert ["1.46", "KiB", "19.2%", "5", "(5", "others)"] in rows
    assert "by op: aten::op0 1.17 KiB, aten::op1 1.07 KiB, aten::op2 1000 B, (9 others) 4.39 KiB" in text


# ---- 9. no address at all -----------------------------------------------------------------------------


def test_without_any_address_blocks_never_freed_are_unknown(tmp_path: Path) -> None:
    # PyTorch 1.9: −500, +100, −50 with neither address nor totals. Nothing can be paired: whether a
    # block outlived the window, or was allocated before it, is unknown (null), not 0.
    gpu, _ = _gpu(tmp_path, [_mem(100, None, -500, None, None), _mem(200, None, 100, None, None),
                             _mem(300, None, -50, None, None)])  # fmt: skip
    assert (gpu["never_freed"], gpu["pre_window_frees"]) == (None, None)
    assert gpu["unmatched_frees"] is None
    # with totals but still no address: the same
    (tmp_path / "totals").mkdir()
    gpu, warnings = _gpu(tmp_path / "totals", [_mem(100, None, 100, 100), _mem(200, None, -100, 0)])
    assert (gpu["never_freed"], gpu["pre_window_frees"], gpu["peak_allocated_bytes"]) == (None, None, 100)
    assert "never freed" not in _terminal([{"trace": "t", "rank": 0, **gpu}])
    assert not any("before the profiling window" in line for line in warnings)


# ---- 10. the instant spelt "I" --------------------------------------------------------------------------


def test_a_memory_event_written_with_phase_capital_i_is_read(tmp_path: Path) -> None:
    # +100@0x10 → 100, then (ph "I") +50@0x20 → 150, then −100@0x10 → 50: 3 events, the peak 150 at 150,
    # 0x20 never freed (50 B).
    gpu, warnings = _gpu(
        tmp_path, [_mem(100, 0x10, 100, 100), {**_mem(150, 0x20, 50, 150), "ph": "I"}, _mem(200, 0x10, -100, 50)]
    )
    assert (gpu["events"], gpu["peak_allocated_bytes"], gpu["peak_ts_us"]) == (3, 150, BASE + 150)
    assert (gpu["never_freed"]["blocks"], gpu["never_freed"]["bytes"]) == (1, 50)
    assert gpu["inconsistent_events"] == 0 and warnings == []


# ---- 11. a free closes only a block of its size ----------------------------------------------------------


def test_a_free_closes_the_block_of_its_size(tmp_path: Path) -> None:
    # +100@0x10 at 100 → 100; at 200, +300@0x10 → 400 written before −100@0x10 → 300 (one time, the
    # file's order impossible: 0x10 was taken); −300@0x10 at 300 → 0. The −100 frees the 100-byte
    # block (100 → 200), the −300 the 300-byte one (200 → 300): both freed, none left.
    gpu, warnings = _gpu(
        tmp_path,
        [_mem(100, 0x10, 100, 100), _mem(200, 0x10, 300, 400), _mem(200, 0x10, -100, 300), _mem(300, 0x10, -300, 0)],
    )
    assert (gpu["allocations"], gpu["never_freed"]["blocks"]) == (2, 0)
    assert gpu["unmatched_frees"] == 0
    [pairs] = _report(tmp_path / "out").by_trace.values()
    got = [(int(r.bytes), r.alloc_ts_us - BASE, r.free_ts_us - BASE) for r in pairs.itertuples()]
    assert got == [(100, 100.0, 200.0), (300, 200.0, 300.0)]
    assert warnings == []


def test_a_free_of_another_size_closes_nothing_and_is_counted(tmp_path: Path) -> None:
    # +100@0x10 → 100, then −60@0x10 → 40 (no block of 60 bytes at 0x10: damage). The 100-byte block
    # is not freed; the −60 closes nothing (not before the window either: 0x10's first event was the
    # allocation).
    gpu, warnings = _gpu(tmp_path, [_mem(100, 0x10, 100, 100), _mem(200, 0x10, -60, 40)])
    assert (gpu["never_freed"]["blocks"], gpu["never_freed"]["bytes"]) == (1, 100)
    assert gpu["unmatched_frees"] == 1
    assert gpu["pre_window_frees"] == {"blocks": 0, "bytes": 0}
    assert (
        "1 frees on cuda:0 close no allocation at their address (a second free, or a size no block there had): "
        "not paired"
    ) in warnings


def test_preparing_keeps_row_numbers() -> None:
    """memory.parquet's `alloc_event` / `free_event` are rows of memory_events.parquet: a repeat is
    marked, never dropped. Two identical +64@0xA events (total 64 both) and the free: rows 0 and 2."""
    events = pd.DataFrame(
        {
            "device": pd.Categorical(["cuda:0"] * 3),
            "ts_us": [1.0, 1.0, 2.0],
            "addr": [0xA, 0xA, 0xA],
            "bytes": [64, 64, -64],
            "total_allocated": [64, 64, 0],
            "total_reserved": [128, 128, 128],
            "op": pd.Categorical([None] * 3, categories=["x"]),
            "module": pd.Categorical([None] * 3, categories=["m"]),
            "call_stack": pd.Categorical([None] * 3, categories=["s"]),
            "step": [-1, -1, -1],
        }
    )
    report = analyse_memory({("t", 0): events})
    assert report.allocations[["alloc_event", "free_event"]].to_numpy().tolist() == [[0, 2]]
    assert np.array_equal(report.events[("t", 0)]["repeat"].to_numpy(), [False, True, False])
