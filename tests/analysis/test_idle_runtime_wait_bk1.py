"""Campaign BK, classes 1 and 4.

1. An event wait the trace records only as runtime calls — `hipStreamWaitEvent` (ROCm's Kineto
   writes no cuda_sync events) or `cudaStreamWaitEvent` in a CUDA trace without them — holds the
   waiting kernel past its launch just as a `Stream Wait Event` cuda_sync event does: the idle
   split and the launch-to-start delay read it, paired as the critical path pairs it
   (`critical_path.runtime_event_waits`).
2. idle_hta.parquet / report.json `idle.hta` keep apart the streams of one id on several devices,
   which HTA (grouping by stream alone) merges: the convention text says so where it happens.

Every expected value is worked out by hand from the event times written below (µs after B)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.idle import CONVENTIONS, EVENT_WAIT_END, with_event_waits
from kernel_atlas.analysis.waits import Waits, analyse_waits
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels

B = 1_000_000
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0,
        "totalGlobalMem": 85520809984}  # fmt: skip
MI300X = {"id": 0, "name": "AMD Instinct MI300X", "numSms": 304, "computeMajor": 9, "computeMinor": 4,
          "totalGlobalMem": 206141652992}  # fmt: skip
GEMM, MUL, ADD = "gemm_kernel_nn", "vectorized_elementwise_kernel_mul", "vectorized_elementwise_kernel_add"
HIP = {
    "cudaLaunchKernel": "hipLaunchKernel",
    "cudaEventRecord": "hipEventRecord",
    "cudaStreamWaitEvent": "hipStreamWaitEvent",
    "cudaDeviceSynchronize": "hipDeviceSynchronize",
}


def _op(name: str, ts: float, dur: float, ext: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": B + ts, "dur": dur,
            "args": {"External id": ext}}  # fmt: skip


def _call(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": B + ts, "dur": dur,
            "args": {"correlation": corr, "External id": corr}}  # fmt: skip


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int, device: int = 0) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": B + ts, "dur": dur,
            "args": {"correlation": corr, "External id": corr, "device": device, "stream": stream,
                     "grid": [1, 1, 1], "block": [128, 1, 1]}}  # fmt: skip


def _held(add_start: float = 330.0) -> list[dict[str, Any]]:
    """Campaign BD's c8c layout, one thread: aten::mm launches the GEMM at 12 onto stream 7, where
    it runs [25, 325]; aten::mul launches the mul at 34 onto stream 20, [40, 60]; an event is
    recorded at 51 (after the GEMM's launch, the last onto stream 7); stream 20 waits for it at
    72 (cudaStreamWaitEvent); aten::add launches the add at 80 onto stream 20, starting at
    `add_start` for 50 µs; a cudaDeviceSynchronize [110, 385] ends the trace."""
    return [
        _op("aten::mm", 10, 20, 1), _call("cudaLaunchKernel", 12, 6, 1), _kernel(GEMM, 25, 300, 1, 7),
        _op("aten::mul", 32, 13, 2), _call("cudaLaunchKernel", 34, 4, 2), _kernel(MUL, 40, 20, 2, 20),
        _op("record_event", 50, 5, 3), _call("cudaEventRecord", 51, 2, 3),
        _op("aten::add", 70, 30, 4), _call("cudaStreamWaitEvent", 72, 3, 4),
        _call("cudaLaunchKernel", 80, 10, 5), _kernel(ADD, add_start, 50, 5, 20),
        _call("cudaDeviceSynchronize", 110, 275, 6),
    ]  # fmt: skip


# the cuda_sync event Kineto writes for the wait (stream 20 waits for the event recorded at
# correlation 3 on stream 7)
STREAM_WAIT_EVENT = {
    "ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 20, "ts": B + 72, "dur": 3,
    "args": {"correlation": 4, "External id": 4, "cuda_sync_kind": "Stream Wait Event", "device": 0,
             "stream": 20, "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 3},
}  # fmt: skip


def _variant(kind: str, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The three traces of campaign BK's gen_wait.py: CUDA with its cuda_sync event, ROCm (hip*
    names, no cuda_sync: what ROCm's Kineto writes), CUDA without cuda_sync (older Kineto)."""
    if kind == "cuda_sync":
        return H100, [*events, STREAM_WAIT_EVENT]
    if kind == "rocm_runtime":
        return MI300X, [dict(e, name=HIP.get(e["name"], e["name"])) for e in events]
    return H100, events


def _ingest(tmp_path: Path, device: dict[str, Any], events: list[dict[str, Any]]) -> tuple[pd.DataFrame, Any]:
    """The kernel rows with the recorded event waits read from the host events (what the report
    reads), and the host events."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [device], "traceEvents": events}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    host = load_host_events(out, 0)
    return with_event_waits(load_kernels(out), {0: host}), host


def _stream(waits: Waits, stream: int) -> dict[str, list[float]]:
    rows = waits.breakdown[waits.breakdown["stream"] == stream].set_index("category")
    return {c: [float(rows.loc[c, "idle_us"]), int(rows.loc[c, "count"])] for c in rows.index}


@pytest.mark.parametrize("kind", ["rocm_runtime", "cuda_runtime", "cuda_sync"])
def test_a_wait_recorded_only_as_runtime_calls_splits_the_gap_as_a_stream_wait_event(tmp_path: Path, kind: str) -> None:
    """Stream 20 is idle over [60, 330] = 270 µs. The host launched the add at 80, 20 µs after the
    stream went idle (host wait); the wait then held it until the GEMM ended at 325, and it
    started at 330: the 250 µs after the launch are `other` (≥ 30 µs). The add's launch-to-start
    delay is from the wait's release: 330 - 325 = 5 µs (not 330 - 80 = 250). The GEMM's delay is
    25 - 12 = 13 µs, the mul's 40 - 34 = 6 µs. The same with the cuda_sync event (as before) and
    with the wait recorded only as hipStreamWaitEvent / cudaStreamWaitEvent (it had been 270 µs
    of host wait, delay 250 µs)."""
    device, events = _variant(kind, _held())
    frame, _ = _ingest(tmp_path, device, events)
    gemm = frame.loc[frame["stream"] == 7, "name"].astype(str).tolist()[0]
    ends = dict(zip(frame["name"].astype(str), frame[EVENT_WAIT_END], strict=True))
    assert ends[ADD] == B + 325.0  # the GEMM's end
    assert np.isnan(ends[gemm]) and np.isnan(ends[MUL])
    waits = analyse_waits(frame)
    assert _stream(waits, 20) == {"host_wait": [20.0, 1], "kernel_wait": [0.0, 0], "other": [250.0, 1]}
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, ["delay_mean_us", "delay_max_us"]].tolist() == [5.0, 5.0]
    assert stats.loc[gemm, "delay_mean_us"] == 13.0 and stats.loc[MUL, "delay_mean_us"] == 6.0
    # HTA's convention keeps the gap whole, recorded wait or not
    hta = waits.alternate[waits.alternate["stream"] == 20].set_index("category")
    assert hta.loc["host_wait", "idle_us"] == 270.0


@pytest.mark.parametrize("kind", ["rocm_runtime", "cuda_runtime"])
def test_the_idle_split_and_the_critical_path_read_one_pairing(tmp_path: Path, kind: str) -> None:
    """The critical path of the same trace takes the one runtime-call wait as a Stream Wait Event
    edge (GEMM → add); the idle split's recorded wait is that GEMM's end (325)."""
    device, events = _variant(kind, _held())
    frame, host = _ingest(tmp_path, device, events)
    notes = build_graph(frame, host).notes
    assert any("1 event wait recorded as runtime calls" in n for n in notes)
    assert frame.loc[frame["name"].astype(str) == ADD, EVENT_WAIT_END].tolist() == [B + 325.0]


@pytest.mark.parametrize("kind", ["rocm_runtime", "cuda_runtime"])
def test_no_wait_is_read_where_the_gpu_shows_none(tmp_path: Path, kind: str) -> None:
    """The add starting at 200, before the GEMM it would wait for ends (325): the GPU shows no
    wait (the critical path's guard), none is read, and stream 20's gap [60, 200] is 140 µs of
    host wait, whole (the launch at 80 came after the stream went idle at 60); the add's delay is
    200 - 80 = 120 µs."""
    device, events = _variant(kind, _held(add_start=200.0))
    frame, _ = _ingest(tmp_path, device, events)
    assert frame[EVENT_WAIT_END].isna().all()
    waits = analyse_waits(frame)
    assert _stream(waits, 20) == {"host_wait": [140.0, 1], "kernel_wait": [0.0, 0], "other": [0.0, 0]}
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, "delay_max_us"] == 120.0


def _two_devices(same_stream: bool) -> list[dict[str, Any]]:
    """Campaign BK's gen_twodev.py: four adds, launched at 1, 2, 3, 4 (each call 0.5 µs), their
    kernels on stream 7 of device 0 at [10, 20] and [50, 60], of device 1 at [30, 40] and [70, 80]
    (stream 8 on device 1 where not `same_stream`)."""
    events = []
    for i, (launch, start, device) in enumerate([(1, 10, 0), (2, 30, 1), (3, 50, 0), (4, 70, 1)], 1):
        stream = 7 if same_stream or device == 0 else 8
        events += [_op("aten::add", launch - 0.2, 0.8, i), _call("cudaLaunchKernel", launch, 0.5, i)]
        events.append(_kernel(ADD, start, 10, i, stream, device))
    return events


def test_htas_numbers_say_where_hta_would_merge_one_stream_id_of_several_devices(tmp_path: Path) -> None:
    """Stream 7 on devices 0 and 1 of one trace. Per (device, stream), as kept here: device 0's
    stream 7 is idle over [20, 50] and device 1's over [40, 70], each 30 µs, one gap, launched
    long before (no host wait), not shorter than 30 µs: `other` 30 µs / 1 gap each — unchanged.
    HTA would take the four kernels as one stream (three 10 µs kernel waits): the convention text
    says which streams it merges. The same trace with device 1 on stream 8 says nothing of it."""
    h100s = [dict(H100, id=d) for d in (0, 1)]
    for same, name in ((True, "same"), (False, "apart")):
        trace = tmp_path / name / "t.json"
        trace.parent.mkdir()
        trace.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": h100s,
                                     "traceEvents": _two_devices(same)}))  # fmt: skip
        write_outputs(ingest_paths([trace]), trace.parent / "out")
        waits = analyse_waits(load_kernels(trace.parent / "out"))
        hta = waits.facts["idle"]["hta"]
        streams = [
            (s["device"], s["stream"], s["other_us"], s["other_gaps"], s["kernel_wait_us"]) for s in hta["streams"]
        ]
        assert streams == [(0, 7, 30.0, 1, 0.0), (1, 7 if same else 8, 30.0, 1, 0.0)]
        assert hta["convention"].startswith(CONVENTIONS["hta"])
        assert "per (rank, device, stream), where HTA groups a trace's activities by stream alone" in hta["convention"]
        merged = "rank 0 stream 7 on devices 0, 1): HTA would merge each into one stream, these numbers keep them apart"
        assert (merged in hta["convention"]) == same
        if not same:
            assert hta["convention"] == CONVENTIONS["hta"]
