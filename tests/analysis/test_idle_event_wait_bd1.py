"""A kernel held past its launch by a recorded cross-stream event wait (a `Stream Wait Event`
cuda_sync event) waited for the event from its launch on, not for the host, at any length; the
time held is no launch-to-start delay either (campaign BD, class 1). The 1,500 µs rule stays for
waits the trace does not record. Values derived by hand from the event times written below (µs,
relative to B)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_atlas.analysis.idle import EVENT_WAIT_END, event_wait_ends, with_event_waits
from kernel_atlas.analysis.waits import Waits, analyse_waits
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels

B = 1_000_000.0
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85021163520, "computeMajor": 9, "numSms": 132}
GEMM, MUL, ADD = "ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel_mul", "vectorized_elementwise_kernel_add"


class _Trace:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def op(self, name: str, ts: float, dur: float) -> int:
        ext = len(self.events) + 1
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": B + ts, "dur": dur,
                            "args": {"External id": ext}})  # fmt: skip
        return ext

    def call(self, name: str, ts: float, dur: float, ext: int) -> int:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": B + ts,
                            "dur": dur, "args": {"External id": ext, "correlation": self.corr}})  # fmt: skip
        return self.corr

    def kernel(self, name: str, ts: float, dur: float, corr: int, stream: int, ext: int) -> None:
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": B + ts,
                            "dur": dur, "args": {"External id": ext, "correlation": corr, "device": 0,
                                                 "stream": stream, "context": 1}})  # fmt: skip

    def sync(self, kind: str, ts: float, dur: float, corr: int, stream: int, **wait: int) -> None:
        args = {"cuda_sync_kind": kind, "device": 0, "context": 1, "stream": stream, "correlation": corr}
        if wait:
            args |= {"wait_on_stream": wait["on"], "wait_on_cuda_event_record_corr_id": wait["record"]}
            args["wait_on_cuda_event_id"] = 1
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": 0, "tid": stream, "ts": B + ts,
                            "dur": dur, "args": args})  # fmt: skip

    def held(self, at: float, gemm_us: float, start_after: float, recorded: bool = True) -> None:
        """At `at`: aten::mm launches the GEMM K1 (launch at +2) onto stream 7, starting at +15 for
        `gemm_us`; aten::mul launches K0 (+24) onto stream 20, [+30, +50]; an event is recorded on
        stream 7 (+41); stream 20 waits for it (cudaStreamWaitEvent at +62, with its `Stream Wait
        Event` when `recorded`); aten::add launches K2 onto stream 20 at +70, which starts
        `start_after` µs after K1 ends and runs 50 µs."""
        ext = self.op("aten::mm", at, 20)
        self.kernel(GEMM, at + 15, gemm_us, self.call("cudaLaunchKernel", at + 2, 6, ext), 7, ext)
        ext = self.op("aten::mul", at + 22, 13)
        self.kernel(MUL, at + 30, 20, self.call("cudaLaunchKernel", at + 24, 4, ext), 20, ext)
        record = self.call("cudaEventRecord", at + 41, 2, self.op("record_event", at + 40, 5))
        ext = self.op("aten::add", at + 60, 30)
        wait = self.call("cudaStreamWaitEvent", at + 62, 3, ext)
        if recorded:
            self.sync("Stream Wait Event", at + 62, 3, wait, 20, on=7, record=record)
        launch = self.call("cudaLaunchKernel", at + 70, 10, ext)
        self.kernel(ADD, at + 15 + gemm_us + start_after, 50, launch, 20, ext)

    def ingest(self, tmp_path: Path, end: float) -> tuple[Path, pd.DataFrame]:
        """Ends with a cudaDeviceSynchronize (and its Context Sync) from `end` - 300 to `end`."""
        sync = self.call("cudaDeviceSynchronize", end - 300, 300, 0)
        self.sync("Context Sync", end - 300, 300, sync, 4294967295)
        tmp_path.mkdir(exist_ok=True)
        trace = tmp_path / "t.json"
        trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": self.events}))
        out = tmp_path / "out"
        write_outputs(ingest_paths([trace]), out)
        frame = load_kernels(out)
        return out, with_event_waits(frame, {0: load_host_events(out, 0)})


def _stream(waits: Waits, table: str, stream: int) -> dict[str, list[float]]:
    rows = getattr(waits, table)
    rows = rows[rows["stream"] == stream].set_index("category")
    return {c: [float(rows.loc[c, "idle_us"]), int(rows.loc[c, "count"])] for c in rows.index}


def test_a_recorded_event_wait_is_no_host_wait_after_the_launch(tmp_path: Path) -> None:
    """Campaign BD's c8 at B + 10: K1 [25, 325] on stream 7, launched at 12; K0 [40, 60] on stream
    20; the record at 51 follows K1's launch (the last onto stream 7); K2 launched at 80 onto
    stream 20, held by the wait until K1's end at 325, starts at 330. Stream 20 is idle over
    [60, 330]: 20 µs until the launch (host wait), 250 µs held by the event (other; it had been
    270 µs of host wait). The device, busy with K1, is idle 5 µs (a kernel wait). K2's
    launch-to-start delay is 330 - 325 = 5 µs (the wait's release to its start), not 250: delays
    13 (K1), 6 (K0), 5 (K2), median 6. HTA's convention keeps the gap whole."""
    trace = _Trace()
    trace.held(10, 300, 5)
    out, frame = trace.ingest(tmp_path, 400)
    ends = dict(zip(frame["name"].astype(str), frame[EVENT_WAIT_END], strict=True))
    assert ends[ADD] == B + 325.0
    assert pd.isna(ends[GEMM]) and pd.isna(ends[MUL])  # nothing made them wait
    assert np.isnan(event_wait_ends(frame, None)).all()  # no host events read: none recorded
    waits = analyse_waits(frame)
    assert _stream(waits, "breakdown", 20) == {"host_wait": [20.0, 1], "kernel_wait": [0.0, 0], "other": [250.0, 1]}
    device = waits.breakdown[waits.breakdown["stream"].isna()].set_index("category")
    assert device["idle_us"].to_dict() == {"host_wait": 0.0, "kernel_wait": 5.0, "other": 0.0}
    assert _stream(waits, "alternate", 20)["host_wait"] == [270.0, 1]  # HTA's
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, ["delay_mean_us", "delay_max_us"]].tolist() == [5.0, 5.0]
    assert stats.loc[GEMM, "delay_mean_us"] == 13.0 and stats.loc[MUL, "delay_mean_us"] == 6.0
    assert waits.facts["launches"]["delay_p50_us"] == 6.0
    # the kernel rows alone (no host events read) have no recorded wait: the old reading, unchanged
    plain = analyse_waits(load_kernels(out))
    assert _stream(plain, "breakdown", 20)["host_wait"] == [270.0, 1]


def test_a_long_recorded_wait_splits_as_before_and_an_unrecorded_short_one_stays_whole(tmp_path: Path) -> None:
    """K1 lasting 3,000 µs (c8b): stream 20 idle over [60, 3,030], 20 µs host wait and 2,950 µs
    held (as before the fix: the start is 2,950 ≥ 1,500 µs after the launch); K2's delay 5 µs. The
    same short trace without its Stream Wait Event (c8c) records no wait: the gap [60, 330] stays
    270 µs of host wait (the 1,500 µs rule for unrecorded waits)."""
    long = _Trace()
    long.held(10, 3000, 5)
    waits = analyse_waits(long.ingest(tmp_path / "long", 3100)[1])
    assert _stream(waits, "breakdown", 20) == {"host_wait": [20.0, 1], "kernel_wait": [0.0, 0], "other": [2950.0, 1]}
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, "delay_max_us"] == 5.0
    bare = _Trace()
    bare.held(10, 300, 5, recorded=False)
    frame = bare.ingest(tmp_path / "bare", 400)[1]
    assert frame[EVENT_WAIT_END].isna().all()
    waits = analyse_waits(frame)
    assert _stream(waits, "breakdown", 20) == {"host_wait": [270.0, 1], "kernel_wait": [0.0, 0], "other": [0.0, 0]}


def test_a_recorded_wait_released_before_the_launch_held_nothing(tmp_path: Path) -> None:
    """K1 lasts 40 µs ([25, 65]): the event is done at 65, before K2's launch at 80, and nothing
    holds K2 past its launch; it starts at 65 + 25 = 90. Stream 20 is idle over [60, 90]: a host
    wait of 30 µs, whole, as any launch onto an idle stream. K2's delay is 90 - 80 = 10 µs."""
    trace = _Trace()
    trace.held(10, 40, 25)
    frame = trace.ingest(tmp_path, 400)[1]
    assert frame.loc[frame["name"] == ADD, EVENT_WAIT_END].tolist() == [B + 65.0]
    waits = analyse_waits(frame)
    assert _stream(waits, "breakdown", 20) == {"host_wait": [30.0, 1], "kernel_wait": [0.0, 0], "other": [0.0, 0]}
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, "delay_max_us"] == 10.0
