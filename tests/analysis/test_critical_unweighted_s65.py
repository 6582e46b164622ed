"""A critical path whose edges weigh a small part of the time it spans says so (stop 65): the
SGLang graph-replay trace's exact path is 10.30 ms of a 473.77 ms run — a kernel started 463 ms
after its launch on an idle stream while the host sat in a blocking copy, a wait the trace does
not explain — and the report printed "Critical path: 10.30 ms — gpu_compute_bound 94.4 %" as if
the run took 10 ms. `span.unweighted_us` is that time, a note names its longest wait, and the
terminal and report.html put the path's length beside the time it spans. Every expected value is
worked out by hand from the events (the derivation is in each test's comment)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.report.critical_view import print_critical_path
from tests.support.traces import trace_path

MI210 = {"id": 0, "name": "AMD Instinct MI210", "numSms": 104, "computeMajor": 9, "computeMinor": 0, "warpSize": 64}
ADD = "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<float> >"


def call(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    args = {"correlation": corr, "cbid": 1}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def kernel(ts: float, dur: float, corr: int) -> dict[str, Any]:
    args = {"device": 0, "stream": 7, "correlation": corr, "grid": [304, 1, 1], "block": [256, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": ADD, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def report_of(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [MI210]}))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    return build_report(out).analysis.facts["critical_path"]


def printed(facts: dict[str, Any]) -> str:
    console = Console(width=400, record=True, color_system=None)
    print_critical_path(console, facts, top=8)
    return console.export_text()


def test_a_stream_waiting_for_what_the_trace_does_not_record_is_said(tmp_path: Path) -> None:
    # Host thread: launch k1 0–5, launch k2 20–25, device sync 30–10,055 (blocking: weighs 0).
    # Stream 7: k1 10–110 (its stream was empty at the launch: launch overhead 10 − 0 = 10 µs);
    # k2 launched at 20 behind k1 but started at 10,000: 9,890 µs after k1 ended, over the 1.5 ms
    # kernel-gap limit, so no kernel-kernel overhead — a zero-weight stream-order edge; k2 runs 50.
    # Path: launch 10 + k1 100 + (stream order 0) + k2 50 + (sync release 0) = 160 µs, from the
    # first launch's start (0) to the sync's end (10,055): it spans 10,055 µs, of which its edges
    # weigh 160 — 9,895 µs unweighted: k1's end → k2's start 9,890 and k2's end → the sync's end 5.
    facts = report_of(
        tmp_path,
        [
            *(call("hipLaunchKernel", 0, 5, 1), kernel(10, 100, 1), call("hipLaunchKernel", 20, 5, 2)),
            *(kernel(10_000, 50, 2), call("hipDeviceSynchronize", 30, 10_025, 3)),
        ],
    )
    assert facts["total_us"] == 160.0
    assert facts["span"]["start_us"] == 0.0 and facts["span"]["end_us"] == 10_055.0
    assert facts["span"]["unweighted_us"] == 9_895.0
    (note,) = [n for n in facts["notes"] if "no edge on it weighs" in n]
    # 9,895 / 10,055 = 98.4 %; the longest: k1's end (110) → k2's start (10,000)
    assert note.startswith("9895.0 µs of the 10055.0 µs the path spans (98.4 %)")
    assert "the longest: 9890.0 µs from the end of" in note and "(stream 7)" in note
    text = printed(facts)
    assert (
        "160.0 µs of the 10.05 ms it spans (9.89 ms between host ops or waiting for what the trace does not record)"
        in text
    )


def test_a_path_its_edges_weigh_whole_has_no_such_words(tmp_path: Path) -> None:
    # k1 launched 0–5 starts at 10 (launch overhead 10), runs 100; k2 launched 20–25 queues behind
    # it and starts at 112 (kernel-kernel overhead 2), runs 50 → 162; the sync 30–165 returns 3 µs
    # after k2 ends. Path: 10 + 100 + 2 + 50 = 162 µs from 0 to 165: unweighted 3 µs (1.8 %, under
    # the 5 % that a note and the headline words take).
    facts = report_of(
        tmp_path,
        [
            *(call("hipLaunchKernel", 0, 5, 1), kernel(10, 100, 1), call("hipLaunchKernel", 20, 5, 2)),
            *(kernel(112, 50, 2), call("hipDeviceSynchronize", 30, 135, 3)),
        ],
    )
    assert facts["total_us"] == 162.0
    assert facts["span"]["unweighted_us"] == 3.0
    assert not [n for n in facts["notes"] if "no edge on it weighs" in n]
    assert "it spans" not in printed(facts)


def test_the_sglang_graph_trace_says_what_its_path_leaves_out(tmp_path: Path) -> None:
    # mi300x_sglang_qwen3_8b_decode_graph, read by hand: the host's hipMemcpyWithStream (a blocking
    # copy) starts 216,566.336 and lasts 463,063.75 µs; resolve_future_token_ids_kernel, launched
    # 0.04 ms into the run, starts 463.30 ms in; the last activity (a DtoD copy at 690,031.242,
    # 3.925 µs) ends at 4,909,914,690,035.167. The path's time apart from its weight is at least
    # that copy call's 463,063.75 µs, and every point of the path lies within the span, so its
    # length and its unweighted time add up to at most the span.
    trace = trace_path("mi300x_sglang_qwen3_8b_decode_graph")
    with gzip.open(trace, "rt") as f:
        copy = [e for e in json.load(f)["traceEvents"] if e.get("name") == "hipMemcpyWithStream"]
    assert [e["dur"] for e in copy] == [463_063.75]
    out = tmp_path / "sg.atlas"
    write_outputs(ingest_paths([trace]), out)
    facts = build_report(out).analysis.facts["critical_path"]
    span = facts["span"]
    assert span["end_us"] == 4_909_914_690_035.167
    assert span["unweighted_us"] >= 463_063.75
    assert facts["total_us"] + span["unweighted_us"] <= span["end_us"] - span["start_us"] + 1e-3
    (note,) = [n for n in facts["notes"] if "no edge on it weighs" in n]
    assert "hipMemcpyWithStream" in note or "resolve_future_token_ids" in note
    assert "ms it spans (" in printed(facts)
