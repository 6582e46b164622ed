"""Campaign AX: one rule of which step a GPU activity belongs to, read alike by kernels.parquet's
`step` and the step split (steps.parquet, efficiency). Each trace is written here; the expected
values are read off the trace by hand (docs/efficiency.md, "Which step": the innermost step row
holding the launch's start; one row per step however many threads record it; a step range inside
another cuts it; rows, not numbers, are steps; GPU-side annotations are no steps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.report.efficiency_view import efficiency_facts, efficiency_lines

MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"


def _step(n: int, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": f"ProfilerStep#{n}", "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _gpu_step(n: int, ts: float, dur: float) -> dict[str, Any]:
    args = {"device": 0, "stream": 7}
    return {"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0, "tid": 7, "ts": ts,
            "dur": dur, "args": args}  # fmt: skip


class Trace:
    """Step ranges, and kernels on device 0 each launched by a `cudaLaunchKernel` (2 µs unless said)."""

    def __init__(self, *ranges: dict[str, Any]) -> None:
        self.events = list(ranges)
        self.correlation = 0

    def kernel(self, launch: float, ts: float, dur: float, tid: int = 1, launch_dur: float = 2) -> None:
        self.correlation += 1
        ids = {"correlation": self.correlation, "External id": self.correlation}
        self.events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": launch,
             "dur": launch_dur, "args": ids},
            {"ph": "X", "cat": "kernel", "name": MUL, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {**ids, "device": 0, "stream": 7}},
        ]  # fmt: skip

    def ingest(self, tmp_path: Path) -> tuple[list[Any], list[dict[str, Any]], dict[str, Any]]:
        """The kernels' `step` by start, the efficiency's step rows, and the efficiency."""
        path = tmp_path / "t.json"
        path.write_text(json.dumps({"traceEvents": self.events}))
        result = ingest_trace(path)
        frame = result.frame.sort_values("ts_us")
        steps = [None if v is None else int(v) for v in frame["step"].astype(object).where(frame["step"].notna(), None)]
        eff = result.facts["efficiency"]
        return steps, eff["steps"], eff


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["step"], r["start_us"], r["end_us"], r["kernel_us"], r["kernel_us_launched"]) for r in rows]


def test_a_step_nested_in_another_cuts_it_and_the_launch_after_it_is_the_outer_ones(tmp_path: Path) -> None:
    # class 1: #1 [0, 2000) holds #2 [500, 1000). Launches at 100, 600, 1500: the innermost range
    # holding each is #1, #2, #1. Rows: #1 [0, 500), #2 [500, 1000), #1 [1000, 2000); stretched:
    # row 0 ends at max(500, 300) = 500, row 1 at max(1000, 800), row 2 at max(2000, 2500) = 2500 —
    # the kernel [1600, 2500) whole in step 1 (it had been 500 µs outside every row)
    trace = Trace(_step(1, 0, 2000), _step(2, 500, 500))
    trace.kernel(100, 200, 100)
    trace.kernel(600, 700, 100)
    trace.kernel(1500, 1600, 900)
    steps, rows, eff = trace.ingest(tmp_path)
    assert steps == [1, 2, 1]
    assert _rows(rows) == [(1, 0.0, 500.0, 100.0, 100.0), (2, 500.0, 1000.0, 100.0, 100.0),
                           (1, 1000.0, 2500.0, 900.0, 900.0)]  # fmt: skip
    assert eff["window_us"] == [0.0, 2500.0] and "steps_left_out" not in eff


def test_a_step_recorded_on_two_threads_is_one_step(tmp_path: Path) -> None:
    # class 1: #1 [0, 1000) and #2 [1000, 2000) on thread 1, #1 [10, 990) and #2 [1010, 1990) on
    # thread 2; four 100 µs kernels, two launched in each step (one per thread): 2 steps of 200 µs
    trace = Trace(_step(1, 0, 1000), _step(2, 1000, 1000), _step(1, 10, 980, tid=2), _step(2, 1010, 980, tid=2))
    trace.kernel(100, 200, 100)
    trace.kernel(500, 600, 100, tid=2)
    trace.kernel(1100, 1200, 100)
    trace.kernel(1500, 1600, 100, tid=2)
    steps, rows, eff = trace.ingest(tmp_path)
    assert steps == [1, 1, 2, 2]
    assert _rows(rows) == [(1, 0.0, 1000.0, 200.0, 200.0), (2, 1000.0, 2000.0, 200.0, 200.0)]
    lines = efficiency_lines({"file": "t.json", "efficiency": eff})
    assert "efficiency over 2 steps:" in lines[0], lines


def test_repeated_step_numbers_are_rows_of_their_own(tmp_path: Path) -> None:
    # class 2: #1 #2 #1 #2 of 1000 µs each (a profiler restarted); kernels of 100, 200, 300 and
    # 400 µs launched in them: each row launched its own (Σ 1000, had been 400, 600, 400, 600)
    trace = Trace(*(_step(1 + s % 2, 1000 * s, 1000) for s in range(4)))
    for s in range(4):
        trace.kernel(1000 * s + 100, 1000 * s + 200, 100 * (s + 1))
    steps, rows, _ = trace.ingest(tmp_path)
    assert steps == [1, 2, 1, 2]
    assert [r["kernel_us_launched"] for r in rows] == [100.0, 200.0, 300.0, 400.0]
    assert [r["step"] for r in rows] == [1, 2, 1, 2]


def test_a_launch_ending_after_its_step_is_in_it(tmp_path: Path) -> None:
    # class 3: #1 [0, 1000), #2 [1000, 2000); a 10 µs launch at 1995 (ending at 2005) of a kernel
    # [2100, 2600): its step is 2 (its start), so step 2 launched 1 activity, is kept and
    # stretched to 2600 with 500 µs of kernels (it had been left out, "launched none")
    trace = Trace(_step(1, 0, 1000), _step(2, 1000, 1000))
    trace.kernel(100, 200, 100)
    trace.kernel(1995, 2100, 500, launch_dur=10)
    steps, rows, eff = trace.ingest(tmp_path)
    assert steps == [1, 2]
    assert _rows(rows) == [(1, 0.0, 1000.0, 100.0, 100.0), (2, 1000.0, 2600.0, 500.0, 500.0)]
    assert "steps_left_out" not in eff


def test_gpu_side_step_annotations_are_no_steps(tmp_path: Path) -> None:
    # class 4: CPU #1 [0, 1000), #2 [1000, 2000); GPU-side #1 [150, 1450), #2 [1450, 2300). The
    # kernel launched at 2100 (after every CPU step) runs [2200, 2250) inside GPU-side #2: in no
    # step. Step 1 launched 100 + 300, step 2 100 + 100 (had been 250, with that kernel)
    trace = Trace(_step(1, 0, 1000), _step(2, 1000, 1000), _gpu_step(1, 150, 1300), _gpu_step(2, 1450, 850))
    trace.kernel(100, 200, 100)
    trace.kernel(900, 1100, 300)
    trace.kernel(1100, 1500, 100)
    trace.kernel(1900, 1700, 100)
    trace.kernel(2100, 2200, 50)
    steps, rows, _ = trace.ingest(tmp_path)
    assert steps == [1, 1, 2, 2, None]
    # step 1 stretched to its kernel's end 1400; step 2 from there to max(2000, 1800)
    assert _rows(rows) == [(1, 0.0, 1400.0, 400.0, 400.0), (2, 1400.0, 2000.0, 200.0, 200.0)]


def test_gpu_side_steps_alone_give_no_steps_anywhere(tmp_path: Path) -> None:
    # class 4: GPU-side #1 [100, 1000) and #2 [1000, 2000) only: no kernel has a step, and the
    # efficiency is over the whole trace (it had given steps 1, 2, 2 beside "no steps recorded")
    trace = Trace(_gpu_step(1, 100, 900), _gpu_step(2, 1000, 1000))
    for launch, ts, dur in ((50, 200, 100), (900, 1100, 300), (1500, 1600, 100)):
        trace.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": launch - 1,
                             "dur": 4})  # fmt: skip
        trace.kernel(launch, ts, dur)
    steps, rows, eff = trace.ingest(tmp_path)
    assert steps == [None, None, None]
    # one row without a number: the CPU ops' span [49, 1503) stretched to the last kernel's end;
    # its kernels launched in it, 100 + 300 + 100 µs (campaign BQ 2: had been null)
    assert _rows(rows) == [(None, 49.0, 1700.0, 500.0, 500.0)]
    assert "the whole trace (no steps recorded)" in efficiency_lines({"file": "t.json", "efficiency": eff})[0]


def test_a_step_recorded_as_a_cpu_op_is_a_step_for_both(tmp_path: Path) -> None:
    # class 5: ProfilerStep#1 [0, 1000) and #2 [1000, 2000) with cat cpu_op; one 100 µs kernel
    # launched in each: steps 1 and 2, 100 µs launched each (had been null, and 0)
    trace = Trace(_step(1, 0, 1000, cat="cpu_op"), _step(2, 1000, 1000, cat="cpu_op"))
    trace.kernel(100, 200, 100)
    trace.kernel(1100, 1200, 100)
    steps, rows, _ = trace.ingest(tmp_path)
    assert steps == [1, 2]
    assert _rows(rows) == [(1, 0.0, 1000.0, 100.0, 100.0), (2, 1000.0, 2000.0, 100.0, 100.0)]


def test_the_time_between_steps_is_said(tmp_path: Path) -> None:
    # class 7: #1 [0, 1000), #2 [1200, 2000), a 100 µs kernel launched in each: rows [0, 1000) and
    # [1200, 2000) (1000 + 800 µs) over the window [0, 2000): 200 µs between them in no row
    trace = Trace(_step(1, 0, 1000), _step(2, 1200, 800))
    trace.kernel(100, 200, 100)
    trace.kernel(1300, 1400, 100)
    _, rows, eff = trace.ingest(tmp_path)
    assert [(r["start_us"], r["end_us"], r["total_us"]) for r in rows] == [
        (0.0, 1000.0, 1000.0),
        (1200.0, 2000.0, 800.0),
    ]
    assert eff["window_us"] == [0.0, 2000.0]
    device = efficiency_facts({"traces": [{"file": "t.json", "rank": 0, "efficiency": eff}]})["devices"][0]
    assert device["between_steps_us"] == pytest.approx(200.0)
    line = efficiency_lines({"file": "t.json", "efficiency": eff})[0]
    assert "efficiency over 2 steps and the 200.0 µs between them:" in line, line
    # utilization over the window: 200 µs of kernels in 2000 µs
    assert device["gpu_utilization_pct"] == pytest.approx(10.0)


def test_a_run_without_steps_is_measured_over_every_launch(tmp_path: Path) -> None:
    """Without steps the window is the CPU ops' span (the TensorBoard plugin's) stretched to what
    was launched in it — and now reaching every launch: a graph replay launched after the last CPU
    op, in an annotation, had been left out of "the whole trace" (campaign AZ 6). aten::mm [0, 30]
    launches a 20 µs kernel at 20; an annotation [100, 140] holds a cudaGraphLaunch at 110 replaying
    20 µs at 130 and 5 µs at 152. Window [0, 157]: 45 µs of kernels, 28.66 % (had been [0, 40]:
    the eager kernel alone, 50 %)."""
    mm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 30},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5, "dur": 10,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": mm, "pid": 0, "tid": 7, "ts": 20, "dur": 20,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "user_annotation", "name": "decode", "pid": 1, "tid": 1, "ts": 100, "dur": 40},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 110, "dur": 15,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": mm, "pid": 0, "tid": 7, "ts": 130, "dur": 20,
         "args": {"correlation": 2, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "rms_norm_kernel", "pid": 0, "tid": 7, "ts": 152, "dur": 5,
         "args": {"correlation": 2, "device": 0, "stream": 7}},
    ]  # fmt: skip
    path = tmp_path / "graph.json"
    path.write_text(json.dumps({"traceEvents": events}))
    efficiency = ingest_trace(path).facts["efficiency"]
    assert efficiency["window_us"] == [0.0, 157.0]
    (row,) = efficiency["steps"]
    assert row["step"] is None and row["kernel_us"] == 45.0 and row["total_us"] == 157.0
    assert round(row["devices"][0]["gpu_utilization_pct"], 2) == 28.66


def test_a_step_recorded_as_a_cpu_op_is_no_launcher_op_or_frame(tmp_path: Path) -> None:
    """`ProfilerStep#1` recorded with cat `cpu_op` around a bare launch: the step rule reads it as a
    step (above), and it is no kernel's launcher, CPU op or call-stack frame either — as a step
    annotation is not (it had been the kernel's launcher and op, and its stack's outer frame)."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 5, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 10,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 70, "dur": 5,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 80, "dur": 10,
         "args": {"correlation": 2, "device": 0, "stream": 7}},
    ]  # fmt: skip
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"traceEvents": events}))
    frame = ingest_trace(path).frame.sort_values("ts_us")
    assert frame["step"].tolist() == [1, 1]
    assert frame["launcher"].iloc[0] == "forward" and pd.isna(frame["launcher"].iloc[1])  # no op around the second
    assert frame["cpu_op"].isna().all()
    assert frame["call_stack"].tolist() == ["cudaLaunchKernel <- forward", "cudaLaunchKernel"]
