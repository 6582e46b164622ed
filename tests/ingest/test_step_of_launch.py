"""Each GPU activity's `step` is the ProfilerStep holding its launch — on the launch's thread, else
on any thread (autograd's backward thread records no steps) — and only then Kineto's GPU-side step
annotation, which covers a part of the step (stop 61's campaign, by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.traces import has_trace, ingested, raw_events


def _kernel(name: str, ts: float, dur: float, correlation: int) -> dict:
    args = {"correlation": correlation, "device": 0, "stream": 7}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _launch(ts: float, correlation: int, tid: int) -> dict:
    args = {"correlation": correlation}
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": ts, "dur": 2,
            "args": args}  # fmt: skip


def test_a_backward_thread_launch_takes_the_step_holding_it(tmp_path: Path) -> None:
    # ProfilerStep#1 [0, 1000) on thread 1, projected on the GPU as [100, 150) only. Thread 2 (no
    # step ranges) launches at 500, inside step 1; its 40 µs kernel runs at 600, outside the
    # projection: its step had been none, and step 1's launched kernel time 50 µs, not 90
    mul = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        _launch(20, 1, 1),
        _kernel(mul, 100, 50, 1),
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 100, "dur": 50,
         "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MulBackward0", "pid": 1, "tid": 2,
         "ts": 490, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 2, "ts": 495, "dur": 50},
        _launch(500, 2, 2),
        _kernel(mul, 600, 40, 2),
    ]  # fmt: skip
    path = tmp_path / "backward.json"
    path.write_text(json.dumps({"traceEvents": events}))
    kernels = ingest_paths([path]).frame
    assert kernels.sort_values("ts_us")["step"].tolist() == [1, 1]


@pytest.mark.skipif(not has_trace("mi250_minitoy_train"), reason="shared traces absent")
def test_mi250_backward_kernels_are_in_step_1() -> None:
    # mi250_minitoy_train: 7 activities launched from autograd's thread (tid 598009), 48.48 µs of
    # the trace's 149.042, their launches inside ProfilerStep#1 (read off the JSON below)
    events = raw_events("mi250_minitoy_train")
    step = next(e for e in events if e.get("cat") == "user_annotation" and e.get("name") == "ProfilerStep#1")
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and e.get("tid") == 598009 and "correlation" in e.get("args", {})
    }
    assert all(step["ts"] <= ts <= step["ts"] + step["dur"] for ts in launches.values())
    kernels = ingested("mi250_minitoy_train").frame
    backward = kernels[kernels["correlation"].isin(list(launches))]
    assert len(backward) == 7 and backward["dur_us"].sum() == pytest.approx(48.48)
    assert set(backward["step"]) == {1}
    # step 1's kernel time: 62.401 µs launched from the main thread + these 48.48 (and 38.161 µs of copies)
    in_step = kernels[kernels["step"] == 1]
    assert in_step.loc[in_step["kind"] == "kernel", "dur_us"].sum() == pytest.approx(110.881)
    assert in_step["dur_us"].sum() == pytest.approx(149.042)  # every activity of the trace
