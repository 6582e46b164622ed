"""A trace whose GPU activities are all CUDA-graph replays (torch.compile mode="reduce-overhead")
recorded its CPU ops with their `Input Dims`, yet was told `shapes_recorded: "no"` and to
re-profile with CPU activity and record_shapes (campaign AJ 9): a replayed kernel has no launching
op because the graph launch replays it, whatever the profiler recorded. Such replays do not count
as activities no op launched; the advice is the graph capture's alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.analysis.trust import shapes_recorded, trust_facts
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

GRAPH = "replayed from a CUDA/HIP graph (no per-kernel launcher)"
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}
BF16 = "c10::BFloat16"


def _replayed(tmp_path: Path, eager_shapes: bool | None) -> Path:
    """CompiledFunction and an aten::copy_ with Input Dims, then one cudaGraphLaunch replaying 3
    kernels (200 + 30 + 40 µs); `eager_shapes` not None: an eager aten::add kernel (10 µs) too,
    its op recorded with or without shapes."""
    dims = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": [BF16, BF16]}
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 1, "tid": 1, "ts": 1000, "dur": 880}
        | {"args": {"External id": 1, **dims}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 1020, "dur": 20}
        | {"args": {"External id": 2, **dims}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 1100, "dur": 20}
        | {"args": {"correlation": 100}},
    ]
    replayed = [
        ("triton_tem_fused_mm_0", 1200, 200),
        ("triton_poi_fused_relu_1", 1400, 30),
        ("triton_red_fused_add_mean_mul_pow_rsqrt_2", 1430, 40),
    ]
    for name, ts, dur in replayed:
        args = {"device": 0, "stream": 7, "correlation": 100, "grid": [1024, 1, 1], "block": [256, 1, 1]}
        events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}
        )
    if eager_shapes is not None:
        add = {"External id": 3, **({"Input Dims": [[64], [64], []], "Input type": ["float", "float", "Scalar"]})}
        if not eager_shapes:
            add = {"External id": 3}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 2000, "dur": 20, "args": add},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2005, "dur": 5}
            | {"args": {"correlation": 101, "External id": 3}},
            {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 2100}
            | {
                "dur": 10,
                "args": {"device": 0, "stream": 7, "correlation": 101, "grid": [1, 1, 1], "block": [64, 1, 1]},
            },
        ]
    trace = tmp_path / "replayed.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "record_shapes": 1, "traceEvents": events}))
    return trace


def _trust(tmp_path: Path, trace: Path) -> dict[str, Any]:
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out, None, tmp_path / "r.html")
    return json.loads((out / "report.json").read_text())["trust"]


def test_a_trace_of_graph_replays_is_not_said_to_lack_cpu_activity_or_shapes(tmp_path: Path) -> None:
    trust = _trust(tmp_path, _replayed(tmp_path, None))
    assert trust["uncosted_time_us"] == 270.0  # 200 + 30 + 40 µs, all replayed
    assert trust["shapes_recorded"] == "yes"  # was "no"
    # the one advice is the capture's: no "no CPU activity", no record_shapes
    assert trust["advice"] == ["profile the graph capture too and pass it with `atlas ingest --capture`"]


def test_eager_kernels_still_decide_beside_the_replays(tmp_path: Path) -> None:
    # an eager kernel whose op recorded no shapes: the trace lacks them (record_shapes advice, not CPU activity)
    trust = _trust(tmp_path, _replayed(tmp_path, eager_shapes=False))
    assert trust["shapes_recorded"] == "no"
    assert "record_shapes=True" in trust["advice"][0] and "no CPU activity" not in trust["advice"][0]
    assert trust["advice"][1] == "profile the graph capture too and pass it with `atlas ingest --capture`"
    # with its shapes: recorded
    trust = _trust(tmp_path / "shaped", _replayed(tmp_path, eager_shapes=True))
    assert trust["shapes_recorded"] == "yes"


def test_replays_are_left_out_of_the_verdict_by_the_summary_counts() -> None:
    replays = {"file": "r.json", "gpu_activities": 4, "with_launcher": 0, "with_shapes": 0, "unlinked": {GRAPH: 4}}
    assert shapes_recorded({"traces": [replays]}) == "yes"  # was "no"
    # a Kineto trace of GPU activity alone: activities no op launched, and no graph launch — still "no"
    gpu_only = {"file": "g.json", "gpu_activities": 4, "with_launcher": 0, "with_shapes": 0}
    gpu_only["unlinked"] = {"launch not in the trace (it records no launches)": 4}
    assert shapes_recorded({"traces": [gpu_only]}) == "no"
    assert shapes_recorded({"traces": [replays, gpu_only]}) == "no"
    roofline = pd.DataFrame([("", "no shapes", GRAPH, 4.0)], columns=["launcher", "role", "note", "op_time_us"])
    facts = {"gpu_time_us": 4.0, "costed_time_us": 0.0}
    advice = trust_facts(roofline, facts, {"traces": [replays]})["advice"]
    assert advice == ["profile the graph capture too and pass it with `atlas ingest --capture`"]
    # 3 replays and 1 unlaunched activity of another reason: that one still lacks an op
    mixed = {**replays, "unlinked": {GRAPH: 3, "launch not in the trace (it records no launches)": 1}}
    assert shapes_recorded({"traces": [mixed]}) == "no"
    assert "no CPU activity" in trust_facts(roofline, facts, {"traces": [mixed]})["advice"][0]
