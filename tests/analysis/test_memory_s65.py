"""The memory analysis where events share a microsecond, lack a total or an address, the peak is held
before the first event, or two runs name their GPUs alike (campaign AO), against values worked out by
hand.

Every trace here: one step `ProfilerStep#1` [0, 1000] ⊃ `aten::empty` [5, 995] on thread 1, one
kernel, then the `[memory]` events of the test (integer µs from BASE, as PyTorch <= 1.13 wrote them;
totals after each event). The expected numbers are derived in the comments from those events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from kernel_atlas.analysis.memory import (
    BEFORE_WINDOW,
    MemoryReport,
    analyse_memory,
    compare_memory,
    live_by_module,
    memory_warnings,
    read_memory_events,
)
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.report.memory_view import memory_html, peak_line, print_memory_diff, timeline_figure
from kernel_atlas.store.outputs import SUMMARY

BASE = 1_700_000_000_000.0


def _range(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": BASE + ts, "dur": dur, "args": args}


def _mem(ts: float, addr: int | None, nbytes: int, allocated: int | None, device: int = 0, kind: int = 1) -> dict:
    """A `[memory]` event (cuda:`device`, 4 MiB reserved; None leaves a key out)."""
    args = {"Addr": addr, "Bytes": nbytes, "Total Allocated": allocated}
    args = {k: v for k, v in args.items() if v is not None}
    args.update({"Total Reserved": 4 << 20 if kind == 1 else 0, "Device Type": kind, "Device Id": device})
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
            "ts": BASE + ts, "args": args}  # fmt: skip


SKELETON = [
    _range("user_annotation", "ProfilerStep#1", 0, 1000),
    _range("cpu_op", "aten::empty", 5, 990),
    _range("cuda_runtime", "cudaLaunchKernel", 900, 5, correlation=7),
    {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": BASE + 910, "dur": 50,
     "args": {"correlation": 7, "device": 0, "stream": 7}},
]  # fmt: skip


def _out(tmp_path: Path, memory: list[dict[str, Any]], name: str = "out") -> Path:
    trace = tmp_path / f"{name}.json"
    trace.write_text(json.dumps({"traceEvents": [*SKELETON, *memory]}))
    out = tmp_path / name
    write_outputs(ingest_trace(trace, workers=1), out)
    return out


def _report(out: Path) -> MemoryReport:
    summary = json.loads((out / SUMMARY).read_text())
    return analyse_memory(read_memory_events(out, summary, summary["run_id"]))


def _gpu(tmp_path: Path, memory: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str], MemoryReport]:
    report = _report(_out(tmp_path, memory))
    [gpu] = [e for e in report.entries if not e["host"]]
    return gpu, memory_warnings(report.entries, report.left_out, report.oversized), report


# ---- 1. a free and a reallocation within one µs are not a repeat --------------------------------------


def test_a_block_freed_and_allocated_again_in_one_microsecond_is_no_repeat(tmp_path: Path) -> None:
    # +100@0x3000 → 1100 at 20 (baseline 1000); at 50: +100@0x1000 → 1200, −100@0x1000 → 1100,
    # +100@0x1000 → 1200 (the third is written like the first, with the free between); +200@0x2000 →
    # 1400 at 60. The totals are the running sum: 5 events, peak 1400 at 60, live 100 + 100 + 200 = 400
    # in 3 blocks (0x3000, the second 0x1000, 0x2000), none of them freed; nothing unexplained.
    memory = [
        _mem(20, 0x3000, 100, 1100),
        _mem(50, 0x1000, 100, 1200),
        _mem(50, 0x1000, -100, 1100),
        _mem(50, 0x1000, 100, 1200),
        _mem(60, 0x2000, 200, 1400),
    ]
    gpu, warnings, _ = _gpu(tmp_path, memory)
    assert (gpu["events"], gpu["duplicate_events"], gpu["allocations"]) == (5, 0, 4)
    assert (gpu["peak_allocated_bytes"], gpu["peak_ts_us"]) == (1400, BASE + 60)
    assert (gpu["live_at_peak_bytes"], gpu["live_at_peak_blocks"], gpu["unexplained_bytes"]) == (400, 3, 0)
    assert (gpu["inconsistent_events"], gpu["unmatched_frees"]) == (0, 0)
    assert (gpu["never_freed"]["blocks"], gpu["never_freed"]["bytes"]) == (3, 400)
    assert warnings == []


def test_a_copy_directly_after_its_original_is_still_read_once(tmp_path: Path) -> None:
    # +100@0x10 → 1100 at 20 written twice in a row, then −100@0x10 → 1000 at 30: 2 events, 1 repeat,
    # the block freed, peak 1100.
    first = _mem(20, 0x10, 100, 1100)
    gpu, _, _ = _gpu(tmp_path, [first, dict(first), _mem(30, 0x10, -100, 1000)])
    assert (gpu["events"], gpu["duplicate_events"], gpu["allocations"]) == (2, 1, 1)
    assert (gpu["peak_allocated_bytes"], gpu["never_freed"]["blocks"], gpu["inconsistent_events"]) == (1100, 0, 0)


# ---- 2. events of one time in the order their totals require --------------------------------------


def test_the_totals_put_a_free_before_the_reuse_of_its_block(tmp_path: Path) -> None:
    # +100@0x1000 → 1100 at 10 (baseline 1000); at 50 the file writes +100@0x1000 → 1100 before
    # −100@0x1000 → 1000: from 1100, only the free can come first (1100 − 100 = 1000, then + 100 =
    # 1100); +200@0x2000 → 1300 at 60. So the block of 10 is freed at 50; live at the peak (1300 at 60):
    # the block of 50 and 0x2000, 300 in 2 blocks; no event inconsistent.
    memory = [
        _mem(10, 0x1000, 100, 1100),
        _mem(50, 0x1000, 100, 1100),
        _mem(50, 0x1000, -100, 1000),
        _mem(60, 0x2000, 200, 1300),
    ]
    out = _out(tmp_path, memory)
    [events] = read_memory_events(out, json.loads((out / SUMMARY).read_text()), None).values()
    assert events["bytes"].tolist() == [100, -100, 100, 200]  # memory_events.parquet in that order
    report = _report(out)
    [gpu] = [e for e in report.entries if not e["host"]]
    warnings = memory_warnings(report.entries)
    assert gpu["inconsistent_events"] == 0 and warnings == []
    assert (gpu["peak_allocated_bytes"], gpu["live_at_peak_bytes"], gpu["live_at_peak_blocks"]) == (1300, 300, 2)
    assert sorted(r["alloc_ts_us"] - BASE for r in gpu["largest_at_peak"]) == [50, 60]
    pairs = report.allocations[["alloc_ts_us", "free_ts_us"]] - BASE
    assert pairs.fillna(-1).to_numpy().tolist() == [[10, 50], [50, -1], [60, -1]]


def test_ties_in_consecutive_microseconds_are_ordered_one_after_the_other(tmp_path: Path) -> None:
    # +100@0x1000 → 1100 at 10; at 50 and again at 60 the block is freed (→ 1000) and allocated again
    # (→ 1100), each time written allocation first. Read from 1100, the free must come first at 50,
    # which ends at 1100, so again at 60: three allocations, 10 → 50, 50 → 60, 60 → never; none
    # inconsistent.
    memory = [_mem(10, 0x1000, 100, 1100)]
    memory += [e for t in (50, 60) for e in (_mem(t, 0x1000, 100, 1100), _mem(t, 0x1000, -100, 1000))]
    gpu, warnings, report = _gpu(tmp_path, memory)
    assert (gpu["inconsistent_events"], gpu["unmatched_frees"], gpu["allocations"]) == (0, 0, 3)
    pairs = report.allocations[["alloc_ts_us", "free_ts_us"]] - BASE
    assert pairs.fillna(-1).to_numpy().tolist() == [[10, 50], [50, 60], [60, -1]]
    assert warnings == []


def test_a_free_written_after_the_reuse_of_its_address_frees_a_block_from_before_the_window(
    tmp_path: Path,
) -> None:
    # +100@0x2000 → 1100 at 20 (baseline 1000); at 50 +400@0x1000 → 1500, then −300@0x1000 → 1200 (the
    # totals keep that order); −400@0x1000 → 800 at 60. The 300 freed at 50 is a block from before the
    # window: 1 block, 300 B; no free closes nothing. The plot's pre-window layer: 1000, 1000, 700, 700,
    # with the window's blocks on top summing to 1100, 1500, 1200, 800.
    memory = [
        _mem(20, 0x2000, 100, 1100),
        _mem(50, 0x1000, 400, 1500),
        _mem(50, 0x1000, -300, 1200),
        _mem(60, 0x1000, -400, 800),
    ]
    gpu, warnings, report = _gpu(tmp_path, memory)
    assert gpu["pre_window_frees"] == {"blocks": 1, "bytes": 300}
    assert gpu["unmatched_frees"] == 0
    assert not any("close no allocation" in line for line in warnings)
    [key] = report.events
    frame = live_by_module(report.events[key], report.by_trace[key], "cuda:0")
    assert frame[BEFORE_WINDOW].tolist() == [1000, 1000, 700, 700]
    assert frame.drop(columns=["ts_us", "total_allocated", "total_reserved"]).sum(axis=1).tolist() == [
        1100,
        1500,
        1200,
        800,
    ]


# ---- 3. some events without a total or an address -------------------------------------------------


def test_the_peak_at_an_event_without_a_total_is_worked_out_from_the_sizes(tmp_path: Path) -> None:
    # +100@X (no total) at 20, +200@Y → 1300 at 30, +300@Z (no total) at 40, −300@Z → 1300 at 50,
    # −100@X → 1200 at 60. Baseline 1300 − 300 = 1000; after 40 the level is 1300 + 300 = 1600 (the
    # total at 50, 1600 − 300, agrees): the peak, with X, Y and Z live (600 in 3 blocks); step 1's too.
    memory = [
        _mem(20, 0x1000, 100, None),
        _mem(30, 0x2000, 200, 1300),
        _mem(40, 0x3000, 300, None),
        _mem(50, 0x3000, -300, 1300),
        _mem(60, 0x1000, -100, 1200),
    ]
    gpu, warnings, _ = _gpu(tmp_path, memory)
    assert (gpu["peak_allocated_bytes"], gpu["peak_ts_us"], gpu["baseline_bytes"]) == (1600, BASE + 40, 1000)
    assert (gpu["live_at_peak_bytes"], gpu["live_at_peak_blocks"], gpu["unexplained_bytes"]) == (600, 3, 0)
    assert gpu["steps"] == [{"step": 1, "peak_allocated_bytes": 1600, "peak_ts_us": BASE + 40}]
    assert gpu["inconsistent_events"] == 0
    assert any("the peak of cuda:0 lies at an event that records no Total Allocated" in line for line in warnings)


def test_a_free_without_an_address_qualifies_never_freed(tmp_path: Path) -> None:
    # +100@0x1000 → 1100 at 10, +200@0x2000 → 1300 at 20, −100 with no address → 1200 at 30,
    # −200@0x2000 → 1000 at 40. Paired, 0x1000's block is never freed (1 block, 100 B) — unless the free
    # written without an address (100 B) freed it, as the totals suggest.
    memory = [
        _mem(10, 0x1000, 100, 1100),
        _mem(20, 0x2000, 200, 1300),
        _mem(30, None, -100, 1200),
        _mem(40, 0x2000, -200, 1000),
    ]
    gpu, warnings, _ = _gpu(tmp_path, memory)
    assert (gpu["never_freed"]["blocks"], gpu["never_freed"]["bytes"]) == (1, 100)
    assert gpu["never_freed"]["frees_without_address"] == {"events": 1, "bytes": 100}
    assert not any("PyTorch < 1.10" in line for line in warnings)
    assert any("carry no address where the device's other events do" in line for line in warnings)
    line = peak_line(gpu)
    assert "1 block (100 B) never freed in the window, unless by the 1 free of 100 B written without an address" in line


# ---- 4. atlas diff pairs GPUs by name where both runs name them ---------------------------------


def _entries(tmp_path: Path, name: str, memory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return analyse_memory(
        read_memory_events(_out(tmp_path, memory, name), json.loads((tmp_path / name / SUMMARY).read_text()), None),
        top=None,
    ).entries


def test_the_memory_diff_pairs_devices_by_name(tmp_path: Path) -> None:
    # A: cuda:0 (+600 → 1600: peak 1600) and cuda:1 (+1000 → 1000: peak 1000); B: cuda:1 alone, as A's.
    # cuda:0 meets nothing in B, cuda:1 meets cuda:1 with no change.
    cuda1 = _mem(20, 0x1000, 1000, 1000, device=1)
    a = _entries(tmp_path, "a", [_mem(10, 0x1000, 600, 1600), cuda1])
    b = _entries(tmp_path, "b", [cuda1])
    rows = compare_memory(a, b)
    pairs = [(r["device_a"], r["device_b"], r["paired_by"], r["delta_peak_allocated_bytes"]) for r in rows]
    assert pairs == [("cuda:0", None, "name", None), ("cuda:1", "cuda:1", "name", 0)]
    console = Console(record=True, width=200)
    print_memory_diff(console, rows)
    text = console.export_text()
    assert "None" not in text and "cuda:0 → (none in B)" in text and "rank 0 cuda:1: peak 1000 B → 1000 B" in text
    # named apart (cuda:0 and hip:0): paired in order, and said so
    hip = _entries(tmp_path, "hip", [_mem(10, 0x1000, 600, 1600, kind=6)])
    [row] = compare_memory([a[0]], hip)
    assert (row["device_a"], row["device_b"], row["paired_by"]) == ("cuda:0", "hip:0", "position")


# ---- 5. the plot shows a peak held before the first event -------------------------------------------


def test_the_plot_starts_at_a_peak_held_before_the_first_event(tmp_path: Path) -> None:
    # −500@0x1000 → 500 at 20 (baseline 500 + 500 = 1000: the peak, before the first event),
    # +100@0x2000 → 600 at 30, −100@0x2000 → 500 at 40. The plot's first point: 1000, all of it from
    # before the window; then 500, 600, 500.
    memory = [_mem(20, 0x1000, -500, 500), _mem(30, 0x2000, 100, 600), _mem(40, 0x2000, -100, 500)]
    gpu, _, report = _gpu(tmp_path, memory)
    assert (gpu["peak_allocated_bytes"], gpu["peak_at_start"]) == (1000, True)
    [key] = report.events
    frame = live_by_module(report.events[key], report.by_trace[key], "cuda:0")
    assert frame["total_allocated"].tolist() == [1000, 500, 600, 500]
    assert frame[BEFORE_WINDOW].tolist() == [1000, 500, 500, 500]
    figure = timeline_figure(frame, "cuda:0")
    [total] = [t for t in figure["data"] if t.get("name") == "total allocated"]
    assert max(total["y"]) * 2**20 == 1000 and total["x"][0] < total["x"][1]


# ---- 6. wording -----------------------------------------------------------------------------------


def test_host_memory_is_named_so_under_the_gpu_memory_heading(tmp_path: Path) -> None:
    # cuda:0 +100 → 1100 and host memory +8 → 8: the page heads them "cuda:0" and "host cpu"
    out = _out(tmp_path, [_mem(10, 0x1000, 100, 1100), _mem(20, 0x10, 8, 8, device=-1, kind=0)])
    page = memory_html(_report(out))
    assert "<h3>host cpu</h3>" in page and "<h3>cuda:0</h3>" in page
