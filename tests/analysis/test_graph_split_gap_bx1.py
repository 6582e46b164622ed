"""Campaign BX, classes 1 and 2. A gap split at its kernel's launch (a recorded event wait held the
kernel past its launch, `idle.gaps`) ends a CUDA-graph stretch: the kernel waited for an event,
which a graph replay waits for too. It had joined the stretch through the gap's kernel_wait
category (the part after the launch), and its host part had been read as kernel wait. Also: the
unlinked warning's counts agree with their nouns, and report.json's launch medians carry no float
noise. Every expected value is derived by hand from the event times written below (µs, relative
to B)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernel_atlas.analysis.idle import with_event_waits
from kernel_atlas.analysis.launches import launch_facts, launch_facts_by_rank
from kernel_atlas.analysis.waits import Waits, analyse_waits
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths, ingest_trace
from kernel_atlas.store.outputs import load_kernels

B = 1_000_000.0
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920, "computeMajor": 8, "numSms": 108}


class _Trace:
    """Kernels launched from thread 1 with no enclosing op, on device 0."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 100

    def call(self, name: str, ts: float, dur: float) -> int:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": B + ts,
                            "dur": dur, "args": {"correlation": self.corr, "External id": self.corr}})  # fmt: skip
        return self.corr

    def kernel(self, name: str, launch: float, start: float, dur: float, stream: int = 7) -> None:
        corr = self.call("cudaLaunchKernel", launch, 3)
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": B + start,
                            "dur": dur, "args": {"correlation": corr, "External id": corr, "device": 0,
                                                 "stream": stream, "context": 1}})  # fmt: skip

    def wait(self, record_at: float, wait_at: float) -> None:
        """An event recorded on stream 20 at `record_at`; stream 7 waits for it at `wait_at` (the
        `cudaStreamWaitEvent` and its `Stream Wait Event`)."""
        record = self.call("cudaEventRecord", record_at, 1)
        wait = self.call("cudaStreamWaitEvent", wait_at, 1)
        args = {"cuda_sync_kind": "Stream Wait Event", "device": 0, "context": 1, "stream": 7, "correlation": wait,
                "wait_on_stream": 20, "wait_on_cuda_event_record_corr_id": record, "wait_on_cuda_event_id": 1}  # fmt: skip
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 7,
                            "ts": B + wait_at + 1, "dur": 1, "args": args})  # fmt: skip

    def frame(self, tmp_path: Path) -> pd.DataFrame:
        trace = tmp_path / "t.json"
        trace.write_text(json.dumps({"deviceProperties": [A100], "traceEvents": self.events}))
        out = tmp_path / "out"
        write_outputs(ingest_paths([trace]), out)
        return with_event_waits(load_kernels(out), {0: load_host_events(out, 0)})


def _stream7(waits: Waits) -> dict[str, list[float]]:
    rows = waits.breakdown[waits.breakdown["stream"] == 7].set_index("category")
    return {c: [float(rows.loc[c, "idle_us"]), int(rows.loc[c, "count"])] for c in rows.index}


def test_a_gap_split_at_the_launch_ends_the_stretch(tmp_path: Path) -> None:
    """Campaign BX's case7. Stream 7: a0 [995, 1000] (launched 990); a1 launched 1090, [1110,
    1115]; a2 launched 1100, [1120, 1125]. Stream 20: w1 [1005, 1105] (launched 1000), an event
    recorded after it (1002) that stream 7 waits for (1010). The gap before a1, 1000 → 1110, is
    split at its launch: 90 µs host wait, then 20 µs held by the event (kernel wait, under 30 µs);
    a2's gap is 5 µs of kernel wait. The split gap ends the stretch: a0 | a1, a2 — two kernels,
    no candidate (it had been one of 3 kernels saving 115 µs, all read as kernel wait)."""
    trace = _Trace()
    trace.kernel("a0", 990, 995, 5)
    trace.kernel("w1_other_stream", 1000, 1005, 100, stream=20)
    trace.wait(1002, 1010)
    trace.kernel("a1_held", 1090, 1110, 5)
    trace.kernel("a2", 1100, 1120, 5)
    waits = analyse_waits(trace.frame(tmp_path))
    assert _stream7(waits) == {"host_wait": [90.0, 1], "kernel_wait": [25.0, 2], "other": [0.0, 0]}
    assert waits.candidates.empty
    assert waits.facts["graph_candidates"]["count"] == 0 and waits.facts["graph_candidates"]["stretches"] == 0


def _case1(tmp_path: Path) -> pd.DataFrame:
    """Stream 7 (start, end; launch):
    kA [1020, 1030] 1010 | kB [1040, 1050] 1012: gap 10, launched before kA ended: kernel wait |
    kC [1100, 1110] 1016: gap 50, queued: kernel wait under 60 µs, other under 30 µs |
    kD [1130, 1140] 1120: gap 20, launched after kC ended: host wait |
    kE [1200, 1205] 1150: gap 60, launched after kD ended, held by a wait (at 1145) on s20 — the
    event recorded at 1128 after s20 [1135, 1200], launched 1125 — past its launch: split, 10 µs
    host wait + 50 µs queued (kernel wait under 60 µs, other under 30 µs) |
    kF [1210, 1215] 1160, kG [1220, 1225] 1165, kH [1230, 1235] 1170: gaps 5, kernel waits |
    kI [1310, 1315] 1300: gap 75, launched after kH ended: host wait |
    kJ [1320, 1325] 1305: gap 5, kernel wait."""
    trace = _Trace()
    for name, launch, start, dur in [
        ("kA", 1010, 1020, 10), ("kB", 1012, 1040, 10), ("kC", 1016, 1100, 10), ("kD", 1120, 1130, 10),
    ]:  # fmt: skip
        trace.kernel(name, launch, start, dur)
    trace.kernel("s20", 1125, 1135, 65, stream=20)
    trace.wait(1128, 1145)
    for name, launch, start in [
        ("kE", 1150, 1200), ("kF", 1160, 1210), ("kG", 1165, 1220), ("kH", 1170, 1230), ("kI", 1300, 1310),
        ("kJ", 1305, 1320),
    ]:  # fmt: skip
        trace.kernel(name, launch, start, 5)
    return trace.frame(tmp_path)


def test_the_split_gap_ends_the_stretch_at_a_kernel_wait_of_60_us(tmp_path: Path) -> None:
    """`--kernel-wait-us 60` (campaign BX's case1): the split gap before kE is 10 µs host wait and
    50 µs kernel wait, and ends the stretch: kA–kD (waits 10 + 50 + 20 = 80 µs, host 20) and kE–kJ
    (waits 5 + 5 + 5 + 75 + 5 = 95 µs, host 75), one place of 2 stretches, 10 kernels, saving 175
    µs: 95 host, 80 kernel. kE's 10 µs of host wait is in no stretch (idle.parquet counts it: 20 +
    10 + 75 = 105 µs). The device (stream 20 busy over [1135, 1200] only) is idle through every
    wait: 175 µs. The old reading had kA–kJ one stretch of 235 µs, 95 host and 140 kernel (kE's
    whole 60 µs read as kernel wait)."""
    waits = analyse_waits(_case1(tmp_path), kernel_wait_us=60.0)
    assert _stream7(waits) == {"host_wait": [105.0, 3], "kernel_wait": [130.0, 7], "other": [0.0, 0]}
    assert len(waits.candidates) == 1
    row = waits.candidates.iloc[0]
    got = {c: float(row[c]) for c in ("saving_us", "host_wait_us", "kernel_wait_us", "stretches", "kernels")}
    assert got == {"saving_us": 175.0, "host_wait_us": 95.0, "kernel_wait_us": 80.0, "stretches": 2.0, "kernels": 10.0}
    assert float(row["gpu_us"]) == 4 * 10.0 + 6 * 5.0
    assert float(row["device_idle_us"]) == 175.0
    assert str(row["first_kernel"]) == "kA" and float(row["first_ts_us"]) == B + 1020


def test_at_the_default_kernel_wait_the_split_gap_is_other_and_ends_the_stretch_too(tmp_path: Path) -> None:
    """At 30 µs kC's 50 µs gap is other (kA, kB | kC, kD: two kernels each) and so is kE's queued
    50 µs: one stretch kE–kJ, waits 95 µs, host 75 (kI's), kernel 20 (unchanged by the mend)."""
    waits = analyse_waits(_case1(tmp_path))
    assert _stream7(waits) == {"host_wait": [105.0, 3], "kernel_wait": [30.0, 5], "other": [100.0, 2]}
    assert len(waits.candidates) == 1
    row = waits.candidates.iloc[0]
    got = {c: float(row[c]) for c in ("saving_us", "host_wait_us", "kernel_wait_us", "stretches", "kernels")}
    assert got == {"saving_us": 95.0, "host_wait_us": 75.0, "kernel_wait_us": 20.0, "stretches": 1.0, "kernels": 6.0}
    assert str(row["first_kernel"]) == "kE"


def test_launch_medians_carry_no_float_noise() -> None:
    """Campaign BX's case2 gave report.json `delay_p50_us` 21.550000000000068. Two eager kernels:
    launched at 1000.1 (a 0.1 µs call), started at 1021.7 → delay 21.6; launched at 1101.3 (0.2
    µs), started at 1122.8 → delay 21.5. Medians: delay (21.6 + 21.5) / 2 = 21.55, launch call
    (0.1 + 0.2) / 2 = 0.15; CPU time 0.3 µs. Computed in floats each leaves noise in the last
    bits (21.55000000000001, 0.15000000000000002, 0.30000000000000004); report.json's times are
    to the nanosecond (3 decimals)."""
    frame = pd.DataFrame(
        {
            "rank": [0, 0],
            "device": [0, 0],
            "stream": [7, 7],
            "kind": ["kernel", "kernel"],
            "ts_us": [1021.7, 1122.8],
            "dur_us": [5.0, 5.0],
            "launch_ts_us": [1000.1, 1101.3],
            "launch_dur_us": [0.1, 0.2],
            "graph_launch": [False, False],
        }
    )
    for facts in (launch_facts(frame), launch_facts_by_rank(frame)[0]):
        assert (facts["delay_p50_us"], facts["launch_p50_us"], facts["launch_cpu_us"]) == (21.55, 0.15, 0.3)
        assert json.dumps(facts["delay_p50_us"]) == "21.55"


def test_the_unlinked_warning_counts_agree_with_their_nouns(tmp_path: Path) -> None:
    """Five kernels on stream 7, no CPU op: k1 and k2 launched (correlations 1, 2: no enclosing
    op); k3 and k4 with correlations 3 and 4 and no launch in the trace (after the first recorded
    launch's: issued inside the profiling window, not recorded); k5 with no correlation id. The
    reasons stay in the singular where stored (summary.json's `unlinked` keys)."""
    events = []
    for corr in (1, 2, 3, 4, None):
        n = corr or 5
        args = {"device": 0, "stream": 7} | ({"correlation": corr} if corr else {})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{n}", "pid": 0, "tid": 7, "ts": 100.0 * n + 10,
                       "dur": 5, "args": args})  # fmt: skip
        if corr in (1, 2):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": 100.0 * n, "dur": 2, "args": {"correlation": corr}})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = ingest_trace(path)
    assert result.facts["unlinked"] == {
        "no correlation id on the GPU event": 1,
        "launch has no enclosing CPU op or Python frame": 2,
        "launch not in the trace (issued inside the profiling window, not recorded)": 2,
    }
    assert [w for w in result.warnings if "no launcher" in w] == [
        f"{path}: 5 of 5 GPU activities have no launcher (1 with no correlation id on the GPU event, 2 launches "
        "have no enclosing CPU op or Python frame, 2 launches not in the trace (issued inside the profiling "
        "window, not recorded))"
    ]
