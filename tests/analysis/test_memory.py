"""GPU memory: `[memory]` events decoded, paired, attributed, the peak and what holds it.

The hand-built trace below is small enough to work out on paper; every expected number is derived
in the comments from its events, not from the code under test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from kernel_atlas.analysis.memory import (
    BEFORE_WINDOW,
    NO_MODULE,
    analyse_memory,
    live_by_module,
    memory_warnings,
    pair_allocations,
    read_memory_events,
)
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.store.outputs import SUMMARY

BASE = 1_700_000_000_000.0  # µs: realistic epoch offsets, where float64 resolution matters


def _range(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": BASE + ts, "dur": dur, "args": args}


def _mem(ts: float, addr: int, nbytes: int, allocated: int, reserved: int, tid: int = 1, kind: int = 1) -> dict:
    args = {"Addr": addr, "Bytes": nbytes, "Total Allocated": allocated, "Total Reserved": reserved}
    args.update({"Device Type": kind, "Device Id": 0 if kind else -1})
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": tid,
            "ts": BASE + ts, "args": args}  # fmt: skip


# Ranges on thread 1: ProfilerStep#3 [0, 1000] ⊃ Net_0 [10, 900] ⊃ Linear_0 [20, 200] ⊃ aten::linear [30, 150]
# ⊃ {aten::empty [40, 50], cudaLaunchKernel [60, 70]}; Net_0 ⊃ ReLU_0 [300, 400] ⊃ aten::relu [310, 390].
# Thread 2 (autograd, no step range of its own): aten::mm [500, 600].
RANGES = [
    _range("user_annotation", "ProfilerStep#3", 0, 1000),
    _range("python_function", "nn.Module: Net_0", 10, 890),
    _range("python_function", "nn.Module: Linear_0", 20, 180),
    _range("cpu_op", "aten::linear", 30, 120),
    _range("cpu_op", "aten::empty", 40, 10),
    _range("cuda_runtime", "cudaLaunchKernel", 60, 10, correlation=7),
    _range("python_function", "nn.Module: ReLU_0", 300, 100),
    _range("cpu_op", "aten::relu", 310, 80),
    _range("cpu_op", "aten::mm", 500, 100, tid=2),
]
KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": BASE + 80, "dur": 5,
          "args": {"correlation": 7, "device": 0, "stream": 7}}  # fmt: skip
# cuda:0 holds 1000 bytes before the window: block P (400 bytes at 0x900) and others. Events (Total
# Allocated after each = the previous + Bytes):
#   45  alloc A  0x100 +100 → 1100 (reserved 2048)  in aten::empty
#   65  alloc B  0x200 +200 → 1300                   in cudaLaunchKernel → aten::linear
#   120 free A   0x100 −100 → 1200
#   130 alloc A2 0x100 +50  → 1250                   the same address again: a second allocation
#   305 free P   0x900 −400 →  850                   allocated before the window
#   320 alloc C  0x300 +300 → 1150 (reserved 4096)  in aten::relu
#   550 alloc D  0x400 +500 → 1650                   thread 2, aten::mm: the peak
#   560 free B   0x200 −200 → 1450
#   960 free C   0x300 −300 → 1150
# Host memory: 16 bytes at 0x50 allocated at 66 (in cudaLaunchKernel → aten::linear), freed at 68.
MEMORY = [
    _mem(45, 0x100, 100, 1100, 2048),
    _mem(65, 0x200, 200, 1300, 2048),
    _mem(66, 0x50, 16, 16, 0, kind=0),
    _mem(68, 0x50, -16, 0, 0, kind=0),
    _mem(120, 0x100, -100, 1200, 2048),
    _mem(130, 0x100, 50, 1250, 2048),
    _mem(305, 0x900, -400, 850, 2048),
    _mem(320, 0x300, 300, 1150, 4096),
    _mem(550, 0x400, 500, 1650, 4096, tid=2),
    _mem(560, 0x200, -200, 1450, 4096),
    _mem(960, 0x300, -300, 1150, 4096),
]


def _texts(series: pd.Series) -> list[str | None]:
    return [None if pd.isna(v) else v for v in series.astype(object)]


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "mem.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.fixture
def ingested_run(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    write_outputs(ingest_trace(_write(tmp_path, [*RANGES, KERNEL, *MEMORY]), workers=1), out)
    return out


def _events(out: Path) -> dict:
    summary = json.loads((out / SUMMARY).read_text())
    return read_memory_events(out, summary, summary["run_id"])


def test_events_decoded_and_attributed(ingested_run: Path) -> None:
    (events,) = _events(ingested_run).values()
    assert len(events) == len(MEMORY)
    assert events["ts_us"].is_monotonic_increasing
    gpu = events[events["device"] == "cuda:0"]
    assert gpu["bytes"].tolist() == [100, 200, -100, 50, -400, 300, 500, -200, -300]
    assert _texts(gpu["op"]) == [
        "aten::empty", "aten::linear", "aten::linear", "aten::linear", None,
        "aten::relu", "aten::mm", None, None,
    ]  # fmt: skip
    modules = _texts(gpu["module"])
    assert modules[:4] == ["Net_0.Linear_0"] * 4
    assert modules[4:] == ["Net_0.ReLU_0", "Net_0.ReLU_0", None, "Net_0", None]  # 560 in Net_0; 960 past it
    assert gpu["call_stack"].iloc[0] == "aten::empty <- aten::linear <- nn.Module: Linear_0 <- nn.Module: Net_0"
    assert gpu["step"].tolist() == [3] * 9  # thread 2 has no step range: the one on thread 1 contains 550
    assert _texts(events.loc[events["device"] == "cpu", "op"]) == ["aten::linear"] * 2


def test_pairs_reallocation_and_pre_window_free(ingested_run: Path) -> None:
    (events,) = _events(ingested_run).values()
    rows = pair_allocations(events)
    got = {
        (r.device, r.addr, r.bytes, None if np.isnan(r.alloc_ts_us) else round(r.alloc_ts_us - BASE),
         None if np.isnan(r.free_ts_us) else round(r.free_ts_us - BASE))
        for r in rows.itertuples()
    }  # fmt: skip
    assert got == {
        ("cuda:0", 0x100, 100, 45, 120),  # A
        ("cuda:0", 0x100, 50, 130, None),  # A2: a new allocation at A's address, never freed
        ("cuda:0", 0x200, 200, 65, 560),  # B
        ("cuda:0", 0x300, 300, 320, 960),  # C
        ("cuda:0", 0x400, 500, 550, None),  # D
        ("cuda:0", 0x900, 400, None, 305),  # P, allocated before the window
        ("cpu", 0x50, 16, 66, 68),
    }
    assert rows.loc[rows["alloc_ts_us"].isna(), "op"].isna().all()


def test_peak_baseline_and_holders(ingested_run: Path) -> None:
    report = analyse_memory(_events(ingested_run))
    gpu, host = report.entries
    assert (gpu["device"], host["device"], host["host"]) == ("cuda:0", "cpu", True)
    assert gpu["peak_allocated_bytes"] == 1650 and round(gpu["peak_ts_us"] - BASE) == 550
    assert gpu["peak_reserved_bytes"] == 4096 and round(gpu["peak_reserved_ts_us"] - BASE) == 320
    assert gpu["baseline_bytes"] == 1000  # 1100 − 100 at the first event
    assert gpu["baseline_freed_before_peak_bytes"] == 400  # P
    assert gpu["live_at_peak_bytes"] == 1050 and gpu["live_at_peak_blocks"] == 4  # A2 + B + C + D
    assert gpu["unexplained_bytes"] == 0  # 1000 − 400 + 1050 = 1650
    assert gpu["peak_step"] == 3
    assert gpu["pre_window_frees"] == {"blocks": 1, "bytes": 400}
    assert (gpu["never_freed"]["blocks"], gpu["never_freed"]["bytes"]) == (2, 550)  # A2, D
    modules = [(h["name"], h["bytes"], h["blocks"]) for h in gpu["holders"]["module"]]
    assert modules == [
        (BEFORE_WINDOW, 600, None),
        (NO_MODULE, 500, 1),
        ("Net_0.ReLU_0", 300, 1),
        ("Net_0.Linear_0", 250, 2),
    ]
    ops = [(h["name"], h["bytes"]) for h in gpu["holders"]["op"]]
    assert ops == [(BEFORE_WINDOW, 600), ("aten::mm", 500), ("aten::relu", 300), ("aten::linear", 250)]
    assert [(h["name"], h["bytes"]) for h in gpu["holders"]["size_class"]] == [("≤ 1 MiB", 1050), (BEFORE_WINDOW, 600)]
    assert [r["bytes"] for r in gpu["largest_at_peak"]] == [500, 300, 200, 50]
    assert gpu["slack"]["at_peak_bytes"] == 4096 - 1650
    assert gpu["slack"]["max_bytes"] == 4096 - 1150 and round(gpu["slack"]["max_ts_us"] - BASE) == 320
    assert gpu["steps"] == [{"step": 3, "peak_allocated_bytes": 1650, "peak_ts_us": BASE + 550}]
    assert host["peak_allocated_bytes"] == 16 and host["baseline_bytes"] == 0
    assert host["peak_reserved_bytes"] is None and host["slack"] == {}  # the host allocator reserves nothing
    assert memory_warnings(report.entries) == [
        "1 frees of blocks allocated before the profiling window (counted apart)"
    ]


def test_module_timeline_sums_to_allocated(ingested_run: Path) -> None:
    report = analyse_memory(_events(ingested_run))
    key = next(iter(report.events))
    frame = live_by_module(report.events[key], report.by_trace[key], "cuda:0")
    holders = frame.drop(columns=["ts_us", "total_allocated", "total_reserved"])
    assert (holders.sum(axis=1) == frame["total_allocated"]).all()
    assert frame[BEFORE_WINDOW].tolist() == [1000, 1000, 1000, 1000, 600, 600, 600, 600, 600]


def test_report_writes_memory_outputs(ingested_run: Path) -> None:
    from kernel_atlas.report.build import build_report

    report = build_report(ingested_run)
    facts = json.loads((ingested_run / "report.json").read_text())
    assert [e["peak_allocated_bytes"] for e in facts["memory"]] == [1650, 16]
    table = pd.read_parquet(ingested_run / "memory.parquet")
    assert len(table) == 7 and int(table["bytes"].sum()) == 100 + 50 + 200 + 300 + 500 + 400 + 16
    assert {"device", "addr", "bytes", "alloc_ts_us", "free_ts_us", "op", "module", "call_stack", "step"} <= set(table)
    page = (ingested_run / "report.html").read_text()
    assert "id='memory'" in page and 'id="memory-timeline-0"' in page  # the timeline of cuda:0
    assert report.memory is not None


def test_forgiving_decode_keeps_memory_events(tmp_path: Path) -> None:
    """An event of unexpected type elsewhere in the slice sends it down the forgiving path."""
    odd = [
        *MEMORY[:2],
        {**MEMORY[4], "args": {**MEMORY[4]["args"], "Bytes": "-100"}},
        {"ph": "Z", "name": "unknown phase"},
    ]
    result = ingest_trace(_write(tmp_path, [*RANGES, KERNEL, *odd]), workers=1)
    assert result.memory is not None and result.memory["bytes"].tolist() == [100, 200, -100]


def test_trace_without_memory_events(tmp_path: Path) -> None:
    result = ingest_trace(_write(tmp_path, [*RANGES, KERNEL]), workers=1)
    assert result.memory is None and result.facts["memory_events"] == 0


def _shifted_d(extra: int) -> list[dict[str, Any]]:
    """MEMORY with allocation D `extra` bytes larger: every total from D on grows by `extra`."""
    events = []
    for event in MEMORY:
        args = dict(event["args"])
        if event["ts"] - BASE >= 550 and args["Device Type"] == 1:
            args["Total Allocated"] += extra
            args["Bytes"] += extra if event["ts"] - BASE == 550 else 0
        events.append({**event, "args": args})
    return events


def test_diff_compares_peaks_and_holders(tmp_path: Path) -> None:
    from kernel_atlas.analysis.diff import diff_runs
    from kernel_atlas.analysis.memory import compare_memory, run_memory

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_outputs(ingest_trace(_write(tmp_path / "a", [*RANGES, KERNEL, *MEMORY]), workers=1), tmp_path / "a.atlas")
    write_outputs(
        ingest_trace(_write(tmp_path / "b", [*RANGES, KERNEL, *_shifted_d(200)]), workers=1), tmp_path / "b.atlas"
    )
    gpu, host = diff_runs(tmp_path / "a.atlas", tmp_path / "b.atlas").memory
    # B: D is 700 bytes, so its peak (still at D) is 1650 + 200
    assert (gpu["a_peak_allocated_bytes"], gpu["b_peak_allocated_bytes"], gpu["delta_peak_allocated_bytes"]) == (
        1650,
        1850,
        200,
    )
    assert gpu["delta_peak_reserved_bytes"] == 0 and gpu["delta_baseline_bytes"] == 0
    assert gpu["holders"][0] == {"module": NO_MODULE, "a_bytes": 500, "b_bytes": 700, "delta_bytes": 200}
    assert all(h["delta_bytes"] == 0 for h in gpu["holders"][1:])
    assert host["host"] and host["delta_peak_allocated_bytes"] == 0
    same = compare_memory(
        run_memory(tmp_path / "a.atlas", json.loads((tmp_path / "a.atlas" / SUMMARY).read_text())), []
    )
    assert same[0]["b_peak_allocated_bytes"] is None and same[0]["delta_peak_allocated_bytes"] is None


def test_fleet_ingest_writes_and_replaces_memory_events(tmp_path: Path) -> None:
    from kernel_atlas.ingest.fleet import ingest_fleet

    out = tmp_path / "out"
    ingest_fleet([str(_write(tmp_path, [*RANGES, KERNEL, *MEMORY]))], str(out))
    (trace,) = json.loads((out / SUMMARY).read_text())["traces"]
    assert trace["memory_events"] == len(MEMORY)
    assert (out / trace["memory_file"]).is_file()
    no_memory = tmp_path / "plain"
    no_memory.mkdir()
    ingest_fleet([str(_write(no_memory, [*RANGES, KERNEL]))], str(out))  # a new run into the same folder
    assert not (out / "memory_events.parquet").exists()  # the previous run's events are gone
    assert "memory_file" not in json.loads((out / SUMMARY).read_text())["traces"][0]


def test_memory_file_of_another_run_is_refused(ingested_run: Path, tmp_path: Path) -> None:
    from kernel_atlas.core.errors import AtlasError

    summary = json.loads((ingested_run / SUMMARY).read_text())
    with pytest.raises(AtlasError, match="not from the ingest run"):
        read_memory_events(ingested_run, summary, "another-run")


def test_odd_instants_cost_nothing(tmp_path: Path) -> None:
    """Instants are read leniently: odd fields on other instants change nothing; a `[memory]` event
    whose time or args cannot be used is left out or loses only the unusable field, counted."""
    from kernel_atlas.ingest.events import decode_slice

    odd = [
        {"ph": "i", "name": 5, "cat": 3, "ts": "soon", "pid": 1.5, "args": [1]},  # not a memory event
        {**MEMORY[0], "ts": "soon"},  # no usable time: left out
        {**MEMORY[1], "args": {**MEMORY[1]["args"], "Addr": 2**70}},  # beyond int64: the address alone is lost
        {**MEMORY[2], "args": [1]},  # args not an object
    ]
    from kernel_atlas.ingest.events import UNKNOWN_BYTES

    part = decode_slice(json.dumps([*RANGES, *odd]).encode())
    # args not an object: the size is unknown, not 0 (a size of 0 had been analysed as real)
    assert part.memory["bytes"].tolist() == [200, UNKNOWN_BYTES] and part.memory["addr"].tolist() == [-1, -1]
    assert part.ignored == {"memory events without a ts": 1, "Addr": 1, "args": 1}
    assert len(part.ts) == len(RANGES)  # the host ranges of the slice are all there


def test_memory_file_outside_the_folder_is_refused(ingested_run: Path) -> None:
    from kernel_atlas.core.errors import AtlasError

    summary = json.loads((ingested_run / SUMMARY).read_text())
    summary["traces"][0]["memory_file"] = "../elsewhere.parquet"
    with pytest.raises(AtlasError, match=r"is not in memory_events\.parquet"):
        read_memory_events(ingested_run, summary, summary["run_id"])


def test_terminal_lines(ingested_run: Path) -> None:
    from rich.console import Console

    from kernel_atlas.report.memory_view import print_memory
    from kernel_atlas.report.units import fmt_bytes

    assert [fmt_bytes(n) for n in (512, 1536, 101305344, -2048)] == ["512 B", "1.50 KiB", "96.61 MiB", "−2.00 KiB"]
    console = Console(width=200, record=True)
    print_memory(console, analyse_memory(_events(ingested_run)).entries)
    text = console.export_text()
    # 1050 B live = 1.03 KiB; 4096 B reserved = 4.00 KiB; A2 + D never freed: 550 B
    assert (
        "cuda:0 peak 1.61 KiB allocated in step 3, 4.00 KiB reserved; baseline 1000 B, live at the peak 1.03 KiB; "
        "2 blocks (550 B) never freed in the window" in text
    )
    assert "host cpu peak 16 B allocated in step 3; baseline 0 B, live at the peak 16 B" in text
    # 4096 − 1650 = 2446 B at the peak; largest 4096 − 1150 = 2946 B (after C, at 320)
    assert "slack (reserved − allocated): 2.39 KiB at the peak, largest 2.88 KiB" in text
    (line,) = [row for row in text.splitlines() if row.endswith(BEFORE_WINDOW)]
    assert line.split() == ["600", "B", "36.4%", "–", *BEFORE_WINDOW.split()]  # 600 / 1650


def test_memory_plot_renders(ingested_run: Path, tmp_path: Path) -> None:
    from kernel_atlas.report.build import build_report
    from tests.support.browser import Chromium

    build_report(ingested_run)
    with Chromium.start(tmp_path / "profile") as browser:
        browser.open((ingested_run / "report.html").as_uri())
        names = browser.evaluate("document.getElementById('memory-timeline-0').data.map(t => t.name)")
        assert not browser.errors
    # the pre-window holder, the three modules at the peak (no module, ReLU_0, Linear_0), then the totals
    assert names == [BEFORE_WINDOW, NO_MODULE, "Net_0.ReLU_0", "Net_0.Linear_0", "total allocated", "total reserved"]


def test_devices_beyond_the_limit_are_left_out_and_said(ingested_run: Path, monkeypatch) -> None:
    from kernel_atlas.analysis import memory as memory_analysis
    from kernel_atlas.report import memory_view

    (events,) = _events(ingested_run).values()
    events = events.reset_index(drop=True)
    events["device"] = events["device"].astype("category")
    events = memory_analysis.prepare_events(events)
    allocations = pair_allocations(events)
    # cuda:0 peaks at 1650 bytes, the host at 16: with room for one device, cuda:0 is kept
    entries, left_out = memory_analysis.memory_summary(events, allocations, limit=1)
    assert [e["device"] for e in entries] == ["cuda:0"] and left_out == 1
    entries, left_out = memory_analysis.memory_summary(events, allocations, limit=2)
    assert [e["device"] for e in entries] == ["cuda:0", "cpu"] and left_out == 0
    assert memory_analysis.memory_warnings([], 3)[0].startswith("3 more devices have memory events: only the 64")
    # the page describes the highest peaks and says how many it shows
    monkeypatch.setattr(memory_view, "MAX_MEMORY_ENTRIES", 1)
    report = memory_analysis.analyse_memory(_events(ingested_run))
    page = memory_view.memory_html(report)
    assert page.count("<h3>") == 1 and "The 1 devices with the highest allocated peaks of 2" in page


def test_allocation_columns_become_sorted_categoricals_of_the_values_used() -> None:
    from kernel_atlas.analysis.memory import _sorted_categories

    cases = [
        (pd.Series(["b", None, "a", "b", float("nan"), "c"], dtype=object), ["a", "b", "c"], [1, -1, 0, 1, -1, 2]),
        (pd.Series(pd.Categorical(["x", "y", None], categories=["z", "y", "x"])), ["x", "y"], [0, 1, -1]),
        (pd.Series(["q", "p", None], dtype="str"), ["p", "q"], [1, 0, -1]),
        (pd.Series(pd.Categorical([1, "a", None])), [1, "a"], [0, 1, -1]),
    ]
    for column, categories, codes in cases:
        made = _sorted_categories(column)
        assert list(made.categories) == categories
        assert made.codes.tolist() == codes


def test_sizes_no_allocator_writes_cost_their_field(tmp_path: Path) -> None:
    """`Bytes` beyond ±2^48 (2^63 − 1 wrapped the report's sums into a holder of 3·10^20 %) and
    totals beyond 2^48 or below -1 are ignored, counted; 2^47 is kept. An ignored size is unknown
    (UNKNOWN_BYTES), not 0: a 0 had been analysed as a real size."""
    from kernel_atlas.ingest.events import UNKNOWN_BYTES, decode_slice

    odd = [
        {**MEMORY[0], "args": {**MEMORY[0]["args"], "Bytes": 2**63 - 1}},
        {**MEMORY[1], "args": {**MEMORY[1]["args"], "Bytes": -(2**63), "Total Allocated": -5}},
        {**MEMORY[4], "args": {**MEMORY[4]["args"], "Bytes": 2**47, "Total Reserved": 2**48 + 1}},
        {**MEMORY[5], "args": {**MEMORY[5]["args"], "Total Allocated": 2**48}},
    ]
    part = decode_slice(json.dumps(odd).encode())
    assert part.memory["bytes"].tolist() == [UNKNOWN_BYTES, UNKNOWN_BYTES, 2**47, 50]
    assert part.memory["total_allocated"].tolist() == [1100, -1, 1200, 2**48]
    assert part.memory["total_reserved"].tolist() == [2048, 2048, -1, 2048]
    assert part.ignored == {"Bytes": 2, "Total Allocated": 1, "Total Reserved": 1}


def test_holder_shares_stay_within_the_whole_when_totals_disagree() -> None:
    """Totals that say 300 bytes at the peak while the events hold 500 live (frees lost): shares
    are of the 500 the holders hold (300 + 200), not 167 % and 67 % of the peak; a pre-window
    holding the totals make negative is no holder."""
    from kernel_atlas.analysis.memory import _holders

    live = pd.DataFrame({"bytes": [300, 200], "module": ["a", "b"]})
    rows = _holders(live, live["module"], baseline_held=-700, peak=300)
    assert [(r["name"], r["bytes"], r["pct"]) for r in rows] == [("a", 300, 60.0), ("b", 200, 40.0)]
    consistent = _holders(live, live["module"], baseline_held=500, peak=1000)
    assert [(r["name"], r["pct"]) for r in consistent] == [(BEFORE_WINDOW, 50.0), ("a", 30.0), ("b", 20.0)]


def test_a_device_whose_sizes_sum_past_int64_is_left_out_and_said(tmp_path: Path) -> None:
    """2^14 allocations of 2^48 bytes sum to 2^62 (twice that wraps int64); the host's 16 bytes are kept."""
    events = [_mem(1 + i * 0.01, 0x1000 + i, 2**48, 2**48, 2**48) for i in range(2**14)]
    events += [_mem(500, 0x50, 16, 16, 0, kind=0)]
    out = tmp_path / "out"
    write_outputs(ingest_trace(_write(tmp_path, [*RANGES, KERNEL, *events]), workers=1), out)
    report = analyse_memory(_events(out))
    assert [e["device"] for e in report.entries] == ["cpu"] and report.oversized == 1
    assert memory_warnings(report.entries, report.left_out, report.oversized)[0] == (
        "1 devices' memory events sum past 2^62 bytes (damaged sizes): not analysed"
    )


def test_sizes_ingest_never_writes_are_refused_where_read(ingested_run: Path) -> None:
    import pyarrow.parquet as pq

    from kernel_atlas.core.errors import AtlasError

    summary = json.loads((ingested_run / SUMMARY).read_text())
    path = ingested_run / summary["traces"][0]["memory_file"]
    table = pq.read_table(path)
    sizes = table.column("bytes").to_pylist()
    sizes[0] = 2**63 - 1
    pq.write_table(table.set_column(table.column_names.index("bytes"), "bytes", pa.array(sizes)), path)
    with pytest.raises(AtlasError, match="1 sizes beyond ±2\\^48 bytes or totals below -1"):
        _events(ingested_run)


def test_a_thread_written_as_digits_is_the_thread_written_as_a_number(tmp_path: Path) -> None:
    # PyTorch 1.9 writes a range's tid as "7" and a [memory] event's as 7: one thread. The 4 MiB
    # allocation at 150 lies inside aten::empty [100, 200] inside nn.Module Linear_0 [90, 290]; it had
    # no op, module or call stack (on v100_resnet50_train_pt19: none of 12,838 events; now 8,514).
    events = [
        {**_range("cpu_op", "aten::empty", 100, 100), "tid": "7"},
        {**_range("python_function", "nn.Module: Linear_0", 90, 200), "tid": "7"},
        _mem(150, 0xA, 4 << 20, 4 << 20, 8 << 20, tid=7),
        {**_range("cuda_runtime", "cudaLaunchKernel", 160, 5, correlation=1), "tid": "7"},
        {**KERNEL, "args": {"correlation": 1, "device": 0, "stream": 7}},
    ]
    out = tmp_path / "out"
    write_outputs(ingest_trace(_write(tmp_path, events), workers=1), out)
    table = pd.read_parquet(next((out / "memory_events.parquet").rglob("*.parquet")))
    assert _texts(table["op"]) == ["aten::empty"] and _texts(table["module"]) == ["Linear_0"]
    assert _texts(table["call_stack"]) == ["aten::empty <- nn.Module: Linear_0"]


def _modules_run(tmp_path: Path, name: str, modules: list[tuple[str, int]], before: int) -> Path:
    """One allocation inside each module, in order; `before` bytes held before the window."""
    events, total, at = [], before, 100.0
    for module, size in modules:
        events.append(_range("python_function", f"nn.Module: {module}", at, 50))
        total += size
        events.append(_mem(at + 10, 0x1000 + int(at), size, total, total + (64 << 20)))
        at += 100
    events += [_range("cuda_runtime", "cudaLaunchKernel", at, 5, correlation=7), {**KERNEL, "ts": BASE + at + 10}]
    (tmp_path / name).mkdir()
    out = tmp_path / f"{name}.atlas"
    write_outputs(ingest_trace(_write(tmp_path / name, events), workers=1), out)
    return out


def test_the_memory_diff_compares_every_holder_not_the_top_ones(tmp_path: Path) -> None:
    # A: Enc 100 MiB and Head 5 MiB, 10 MiB held before the window. B adds 9 modules of 6 MiB and
    # holds 12 MiB before the window: Head (5 MiB in both) falls into B's "(2 others)" row of the top
    # 10. Had read: Head −5 MiB, "(allocated before the window)" −10 MiB, "(2 others)" +11 MiB.
    from kernel_atlas.analysis.diff import diff_runs

    mib = 1 << 20
    a = _modules_run(tmp_path, "a", [("Enc", 100 * mib), ("Head", 5 * mib)], 10 * mib)
    b = _modules_run(
        tmp_path, "b", [("Enc", 100 * mib), ("Head", 5 * mib)] + [(f"N{k}", 6 * mib) for k in range(9)], 12 * mib
    )
    [gpu] = diff_runs(a, b).memory
    changes = {h["module"]: h["delta_bytes"] for h in gpu["holders"]}
    assert gpu["delta_baseline_bytes"] == 2 * mib
    assert changes[BEFORE_WINDOW] == 2 * mib and changes.get("Head", 0) == 0
    assert {m for m, d in changes.items() if d == 6 * mib} == {f"N{k}" for k in range(9)}
    assert not any(m.endswith("others)") for m in changes)


def test_devices_in_their_numbers_order() -> None:
    from kernel_atlas.analysis.memory import _device_order

    assert sorted(["cpu", "hip:10", "hip:2", "cuda:1", "hip:19"], key=_device_order) == [
        "cuda:1",
        "hip:2",
        "hip:10",
        "hip:19",
        "cpu",
    ]


def test_a_baseline_before_events_without_totals_and_a_fall_that_never_rises(tmp_path: Path) -> None:
    mib = 1 << 20

    def entry(name: str, memory: list[dict[str, Any]]) -> dict[str, Any]:
        (tmp_path / name).mkdir()
        out = tmp_path / f"{name}.atlas"
        write_outputs(ingest_trace(_write(tmp_path / name, [*RANGES, KERNEL, *memory]), workers=1), out)
        [gpu] = [e for e in analyse_memory(_events(out)).entries if not e["host"]]
        return gpu

    def untotalled(event: dict[str, Any]) -> dict[str, Any]:
        args = {k: v for k, v in event["args"].items() if k not in ("Total Allocated", "Total Reserved")}
        return {**event, "args": args}

    # 10 MiB held before the window; +2 MiB recorded without a total, then +3 MiB to a total of 15 MiB:
    # the baseline is 15 − 3 − 2 = 10 MiB (it had been 15 − 3 = 12, with 2 MiB "unexplained")
    first = entry("a", [untotalled(_mem(45, 0x10, 2 * mib, 0, 0)), _mem(46, 0x20, 3 * mib, 15 * mib, 64 * mib)])
    assert (first["baseline_bytes"], first["unexplained_bytes"]) == (10 * mib, 0)
    # no totals (PyTorch 1.9): −8 then +4 bytes never rise above the window's start: 0, not −4
    fall = entry("b", [untotalled(_mem(45, 0x10, -8, 0, 0)), untotalled(_mem(46, 0x20, 4, 0, 0))])
    assert (fall["peak_change_bytes"], fall["peak_change_ts_us"]) == (0, None)


def test_a_zero_byte_event_or_a_second_free_does_not_split_a_blocks_pair() -> None:
    # one address on cuda:0: a 4 KiB block allocated at 10, a 0-byte event at 20 on its address,
    # freed at 30, freed again at 40 (a damaged trace); then a 1 KiB block from before the window
    # freed at 50 at another address, its first event
    kib = 1024
    events = pd.DataFrame(
        {
            "ts_us": [10.0, 20.0, 30.0, 40.0, 50.0],
            "addr": [0x100, 0x100, 0x100, 0x100, 0x200],
            "bytes": [4 * kib, 0, -4 * kib, -4 * kib, -kib],
            "device": pd.Categorical(["cuda:0"] * 5),
            "op": pd.Categorical(["aten::empty", None, None, None, None]),
            "module": pd.Categorical([None] * 5, categories=["M"]),
            "call_stack": pd.Categorical([None] * 5, categories=["s"]),
            "step": [1, 1, 1, 1, 1],
        }
    )
    rows = pair_allocations(events)
    got = [
        (r.addr, r.bytes, None if np.isnan(r.alloc_ts_us) else r.alloc_ts_us, r.free_ts_us) for r in rows.itertuples()
    ]
    assert got == [(0x200, kib, None, 50.0), (0x100, 4 * kib, 10.0, 30.0)]
