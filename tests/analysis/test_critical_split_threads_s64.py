"""Critical path defects found by campaign AI (class 4), mended in stop 64: a stream whose kernels
are launched by two host threads, one of them with no recorded tie to earlier work, kept only the
launch edge of a kernel launched after its stream drained — the path was one piece of the stream.
Every expected value is worked out by hand from the events each test builds (the derivation is in
its comment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kernel_atlas.analysis.critical_path import GAP, WAIT, build_graph
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.store.outputs import load_kernels

MI210 = {"id": 0, "name": "AMD Instinct MI210", "numSms": 104, "computeMajor": 9, "computeMinor": 0, "warpSize": 64}
ADD = "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16> >"


def launch(ts: float, dur: float, corr: int, tid: int) -> dict[str, Any]:
    args = {"correlation": corr, "cbid": 1}
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "hipLaunchKernel",
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def kernel(ts: float, dur: float, corr: int, stream: int = 0, name: str = ADD) -> dict[str, Any]:
    args = {"device": 0, "stream": stream, "correlation": corr, "grid": [304, 1, 1], "block": [256, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}


def ingested(tmp_path: Path, events: list[dict[str, Any]], name: str = "t") -> Path:
    trace = tmp_path / f"{name}.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [MI210]}))
    out = tmp_path / f"{name}.atlas"
    write_outputs(ingest_paths([trace]), out)
    return out


def tables(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return load_kernels(out), load_host_events(out, 0)


# The tester's cp_twothreads (GPU-only ROCm trace, no ops, two host threads; times in µs):
#   thread 1: hipLaunchKernel [2i, 2i+1] → k_i on stream 0 [10+100i, 110+100i] (i = 0..9),
#             hipDeviceSynchronize [30, 1390];
#   thread 2 (the autograd thread; nothing recorded ties it to thread 1): hipLaunchKernel
#             [1050+110j, 1052+110j] → k_{10+j} on stream 0 [1060+110j, 1160+110j] (j = 0..2).
# Stream 0 drained at 1010 (k9's end) before k10's launch at 1050: k10 has a launch edge (10 µs);
# k11 and k12 were launched exactly when the kernel before them ended (1160, 1270: the stream was
# not idle before the launch), so they follow it by a kernel gap of 10 µs each.
# Exact, with the stream-order edge k9 end → k10 start (weight 0: the stream idled 50 µs waiting
# for a launch whose cause is not recorded): launch 10 (0 → 10) + k0..k9 1000 + 0 + k10 100 + gap
# 10 + k11 100 + gap 10 + k12 100 = 1330 µs ≥ the 13 × 100 = 1300 µs the stream ran one after
# another (the tester's 1010 + 330 = 1340 counts k10's 10 µs launch edge beside the stream edge
# that replaces it: a path takes one edge into k10). Buckets: GPU 1300/1330 = 97.74 %, kernel gap
# 20/1330 = 1.5 %, launch 10/1330 = 0.75 %. The bug: k10 reached by its launch only — 0 → k9's end
# = 1010 µs, beside thread 2's 330.
# HTA's convention keeps HTA's graph (a launch edge and no stream edge, as its
# critical_path_analysis adds one or the other): there hipDeviceSynchronize is CPU work (HTA knows
# CUDA syncs only) — ten 1 µs launches + 1360 = 1370 µs, all CPU, longer than either GPU chain
# (k0 has no edge in — HTA's queue test, k1 was launched before k0 started —: 1000; thread 2: 330).
def _two_threads() -> list[dict[str, Any]]:
    events = []
    for i in range(10):
        events += [launch(2 * i, 1, 100 + i, tid=1), kernel(10 + 100 * i, 100, 100 + i)]
    for j in range(3):
        events += [launch(1050 + 110 * j, 2, 110 + j, tid=2), kernel(1060 + 110 * j, 100, 110 + j)]
    sync = {"ph": "X", "cat": "cuda_runtime", "name": "hipDeviceSynchronize", "pid": 1, "tid": 1, "ts": 30}
    return [*events, {**sync, "dur": 1360, "args": {"correlation": 113, "cbid": 1}}]


def test_a_stream_stays_chained_where_an_unrecorded_thread_launches_after_it_drained(tmp_path: Path) -> None:
    kernels, host = tables(ingested(tmp_path, _two_threads()))
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(1330.0)
    assert path.length_us >= 1300.0  # 13 kernels of 100 µs, one after another on one stream
    segs = segments(graph, path)
    assert segs["kind"].tolist() == ["launch"] + ["gpu"] * 11 + ["kernel_gap", "gpu", "kernel_gap", "gpu"]
    assert segs["dur_us"].tolist() == pytest.approx([10.0] + [100.0] * 11 + [10.0, 100.0, 10.0, 100.0])
    pct = breakdown_pct(segs)
    assert (pct["gpu_compute_bound"], pct["gpu_kernel_kernel_overhead"]) == (97.74, 1.5)
    assert (pct["gpu_kernel_launch_overhead"], pct["cpu_bound"]) == (0.75, 0.0)
    # the stream-order edge: k9's end (1010) → k10's start (1060), weight 0, a wait
    ts = graph.node_ts
    joins = (ts[graph.src] == 1010.0) & (ts[graph.dst] == 1060.0) & (graph.src >= 2 * graph.n_host)
    assert graph.kind[joins].tolist() == [WAIT] and graph.weight[joins].tolist() == [0.0]


def test_hta_convention_keeps_htas_launch_edge_alone(tmp_path: Path) -> None:
    kernels, host = tables(ingested(tmp_path, _two_threads()))
    hta = build_graph(kernels, host, convention="hta")
    ts = hta.node_ts
    assert not ((ts[hta.src] == 1010.0) & (ts[hta.dst] == 1060.0)).any()  # no k9 → k10 edge of any kind
    assert not (hta.kind == WAIT).any()
    assert (hta.kind == GAP).sum() == 11  # k1..k9 behind the kernel before, k11 and k12
    path = longest_path(hta)
    assert path.length_us == pytest.approx(1370.0)
    assert breakdown_pct(segments(hta, path))["cpu_bound"] == 100.0


# A path that leaves much of the window out says which part it covers and why:
#   thread 1: hipLaunchKernel [0, 1] → k_a on stream 0 [10, 110]; hipLaunchKernel [3500, 3502] →
#             k_c on stream 0 [3510, 3530];
#   thread 2: hipLaunchKernel [1000, 1002] → k_b on stream 1 [1010, 3010] (its first event; nothing
#             ties it to thread 1).
# Chains: thread 1 → k_a → (stream order, 0) k_c: 10 + 100 + 0 + 20 = 130 (or thread 1's first
# launch 1 + k_c's launch 10 + 20 = 31); thread 2 → k_b: launch 10 + 2000 = 2010. The path is k_b's
# chain: 2010 µs from 1000 (thread 2's launch) to 3010 (k_b's end), of events from 0 to 3530:
# (3010 − 1000) / 3530 = 56.94 % covered — said in report.json's `span` and a note.
def test_the_path_says_what_part_of_the_window_it_covers(tmp_path: Path) -> None:
    events = [launch(0, 1, 1, tid=1), kernel(10, 100, 1, name="k_a"), launch(3500, 2, 3, tid=1)]
    events += [kernel(3510, 20, 3, name="k_c"), launch(1000, 2, 2, tid=2), kernel(1010, 2000, 2, 1, "k_b")]
    out = ingested(tmp_path, events)
    build_report(out)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert facts["total_us"] == 2010.0
    assert facts["span"] == {
        "start_us": 1000.0,
        "end_us": 3010.0,
        "events_start_us": 0.0,
        "events_end_us": 3530.0,
        "covered_pct": 56.94,
        "unweighted_us": 0.0,  # its 2010 µs from 1000 to 3010 are all its edges' weight (stop 65)
    }
    (note,) = [n for n in facts["notes"] if n.startswith("the path covers")]
    assert "1000.0–3010.0 µs of the window's 3530.0 µs of events (56.9 %)" in note
    assert "its thread's first recorded event" in note and "the end of k_b (stream 1)" in note


def test_a_path_that_spans_its_window_has_no_coverage_note(tmp_path: Path) -> None:
    # cp_twothreads after the mend: the path runs from thread 1's first launch (0) to the end of
    # the sync (1390) it reaches through k12 — the whole of the events' 0–1390 µs.
    out = ingested(tmp_path, _two_threads())
    build_report(out)
    facts = json.loads((out / "report.json").read_text())["critical_path"]
    assert facts["total_us"] == 1330.0
    assert facts["span"]["covered_pct"] == 100.0
    assert not [n for n in facts["notes"] if n.startswith("the path covers")]
    assert np.isclose(facts["span"]["end_us"] - facts["span"]["start_us"], 1390.0)
    # 1390 µs spanned, 1330 weighed: 60 µs no edge weighs (4.3 %, under the 5 % a note takes)
    assert facts["span"]["unweighted_us"] == 60.0
    assert not [n for n in facts["notes"] if "no edge on it weighs" in n]
