"""A host wait lasts until the launch, not the start: an activity enqueued onto an idle device that
starts 1,500 µs or more after its launch call waited, from the launch on, for something the trace
does not show (an event, untraced work), not for the host (campaign AT, class 2). Values derived
by hand from the event times written below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.analysis.idle import analyse_idle, gaps
from kernel_atlas.analysis.waits import analyse_waits
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.store.outputs import load_kernels
from tests.support.traces import ingested

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85021163520, "computeMajor": 9, "numSms": 132}


def _fill(ext: int, ts: float, corr: int, start: float, dur: float, stream: int) -> list[dict]:
    """An aten::fill_ at `ts` (6 µs), its launch at ts + 1 and its kernel on `stream`."""
    ids = {"External id": ext, "correlation": corr}
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 1, "ts": ts, "dur": 6,
         "args": {"External id": ext, "Input Dims": [[1024, 1024], []], "Input type": ["float", "Scalar"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1, "dur": 4,
         "args": ids},
        {"ph": "X", "cat": "kernel", "name": FILL, "pid": 0, "tid": stream, "ts": start, "dur": dur,
         "args": {**ids, "device": 0, "stream": stream}},
    ]  # fmt: skip


def _ingest(tmp_path: Path, events: list[dict]) -> Path:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": events}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    return out


def _late_start_trace() -> list[dict]:
    """K1 runs on stream 1 over [100, 105]. K2 is launched onto stream 2 at 110 (the GPU idle
    since 105) but starts at 10,110; K3 is launched at 120 and follows it at 10,115. The host
    waits in cudaStreamSynchronize over [130, 10,130], in the frame scheduler.py(2919)."""
    frame = {"ph": "X", "cat": "python_function", "name": "scheduler.py(2919): run_batch", "pid": 1, "tid": 1,
             "ts": 50, "dur": 10200, "args": {"Python id": 1}}  # fmt: skip
    sync = {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 130,
            "dur": 10000, "args": {"correlation": 13}}  # fmt: skip
    return [frame, *_fill(1, 94, 10, 100, 5, 1), *_fill(2, 109, 11, 10110, 5, 2), *_fill(3, 119, 12, 10115, 5, 2), sync]


def test_a_launch_long_before_its_start_is_a_host_wait_only_until_the_launch(tmp_path: Path) -> None:
    """The device is idle over [105, 10,110]: 5 µs until K2's launch at 110 (the host had not
    enqueued it: host wait), then 10,000 µs with K2 enqueued (other). The host was blocked in a
    sync waiting on the GPU: its frame accounts for the 5 µs, and the finding says 5 µs (it had
    said 10,005 µs, the #1 finding)."""
    out = _ingest(tmp_path, _late_start_trace())
    report = build_report(out)
    device = report.waits.breakdown[report.waits.breakdown["stream"].isna()].set_index("category")
    assert device.loc["host_wait", ["idle_us", "count"]].tolist() == [5.0, 1]
    assert device.loc["other", ["idle_us", "count"]].tolist() == [10000.0, 1]
    assert device.loc["kernel_wait", ["idle_us", "count"]].tolist() == [0.0, 0]
    causes = report.waits.causes
    assert causes[["frame", "gaps", "idle_us"]].values.tolist() == [["scheduler.py(2919): run_batch", 1, 5.0]]
    facts = json.loads((out / "report.json").read_text())
    (fact,) = facts["idle"]["devices"]
    assert (fact["late_start_us"], fact["late_start_gaps"]) == (10000.0, 1)
    host = [f for f in facts["findings"] if f["kind"] == "host_wait"]
    assert [f["saving_us"] for f in host] == [5.0]
    # HTA's convention keeps the gap whole (HTA 0.5.0's numbers, reproduced)
    hta = report.waits.alternate
    hta_device = hta[hta["stream"].isna()].set_index("category")
    assert hta_device.loc["host_wait", "idle_us"] == 10005.0


def test_a_launch_latency_under_the_limit_stays_a_host_wait(tmp_path: Path) -> None:
    """One stream: K1 [100, 105]; K2 launched at 110 (cpu op at 109), starts at 1,600 — 1,490 µs
    after its launch, under the 1,500 µs limit: the gap [105, 1,600] is a host wait whole,
    1,495 µs. K3 launched at 1,700, starts at 3,200 — 1,500 µs after it: the gap [1,605, 3,200]
    is split, a host wait of 95 µs until the launch and 1,500 µs of other. With
    --kernel-wait-us 2000 the 1,500 µs are a kernel wait."""
    events = [*_fill(1, 94, 10, 100, 5, 7), *_fill(2, 109, 11, 1600, 5, 7), *_fill(3, 1699, 12, 3200, 5, 7)]
    frame = load_kernels(_ingest(tmp_path, events))
    table = gaps(frame, per_stream=True).sort_values("gap_us")
    assert table[["gap_us", "category", "host_us"]].values.tolist() == [
        [1495.0, "host_wait", 0.0],
        [1595.0, "other", 95.0],
    ]
    for kernel_wait_us, late in ((30.0, "other"), (2000.0, "kernel_wait")):
        idle = analyse_idle(frame, kernel_wait_us).breakdown
        for rows in (idle[idle["stream"].isna()], idle[idle["stream"] == 7]):
            got = rows.set_index("category")
            assert got.loc["host_wait", ["idle_us", "count"]].tolist() == [1590.0, 2]
            assert got.loc[late, ["idle_us", "count"]].tolist() == [1500.0, 1]
            assert got["idle_us"].sum() == 3090.0


def test_sglang_decode_resolve_kernel_waited_on_its_stream_not_on_the_host() -> None:
    """mi300x_sglang_qwen3_8b_decode_graph, from the raw JSON (µs): the first activity, an
    elementwise kernel on stream 2, runs from 4909914216285.224 for 4.246 (ends 216289.470);
    resolve_future_token_ids_kernel (stream 3) is launched by hipLaunchKernel at 216327.779 and
    starts at 679584.875, while the host sits in hipMemcpyWithStream (216566.336, 463,063.75 µs).
    The device gap is 463,295.405 µs: 38.309 µs until the launch (host wait), 463,257.096 µs with
    the kernel enqueued (other; it had been a 463 ms host wait, the report's #1 finding)."""
    frame = ingested("mi300x_sglang_qwen3_8b_decode_graph").frame
    start = 4909914679584.875
    row = frame.index[(frame["ts_us"] - start).abs() < 1e-3]
    assert len(row) == 1
    gap = gaps(frame, per_stream=False).loc[row[0]]
    assert gap["gap_us"] == pytest.approx(463295.405, abs=1e-3)
    assert gap["host_us"] == pytest.approx(38.309, abs=1e-3)
    assert gap["category"] == "other"
    waits = analyse_waits(frame)
    resolve = waits.causes[waits.causes["frame"].str.contains("scheduler.py(2919)", regex=False)]
    assert resolve["gaps"].tolist() == [1]
    assert resolve["idle_us"].tolist() == pytest.approx([38.309], abs=1e-3)
    (fact,) = waits.facts["idle"]["devices"]
    assert fact["late_start_gaps"] == 1
    assert fact["late_start_us"] == pytest.approx(463257.096, abs=1e-3)
