"""A compiled region (`CompiledFunction`, `CompiledFunctionBackward`, `Torch-Compiled Region: 0/0`)
is no kernel's op (campaign AJ 8): its `Input Dims` are the compiled graph's inputs. A kernel
launched inside it without an op of its own (a Triton launch wrapped in a record_function, or in
nothing) took those shapes and was costed from them, and every kernel under one CompiledFunction
call was merged into one "call" (one row's SOL on two kernels' time). Such a kernel now keeps the
region or annotation as launcher, takes no CPU op, shapes or op call from it, keeps its own time,
and says why it has no cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.link import describe_launches
from kernel_atlas.ingest.pipeline import ingest_paths, ingest_trace
from kernel_atlas.report.build import build_report

N = 1 << 20
BF16 = "c10::BFloat16"
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}
COMPILED_FUNCTION_ID = 2  # its External id: a real kernel inside it names it too


def _cpu(name: str, ts: float, dur: float, ext: int, dims: list | None = None, cat: str = "cpu_op") -> dict[str, Any]:
    args: dict[str, Any] = {"External id": ext}
    if dims is not None:
        args["Input Dims"] = dims
        args["Input type"] = [BF16 if d else "Scalar" for d in dims]
        args["Concrete Inputs"] = ["" if d else str(N) for d in dims]
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(name: str, ts: float, dur: float, launch_ts: float, corr: int, ext: int) -> list[dict[str, Any]]:
    launch = {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 1, "ts": launch_ts}
    launch |= {"dur": 5, "args": {"External id": ext, "correlation": corr}}
    return [launch, _kernel(name, ts, dur, corr, ext)]


def _kernel(name: str, ts: float, dur: float, corr: int, ext: int) -> dict[str, Any]:
    args = {"device": 0, "stream": 7, "correlation": corr, "External id": ext, "grid": [1024, 1, 1]}
    args["block"] = [128, 1, 1]
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path: Path) -> Path:
    events = [
        _cpu("Torch-Compiled Region: 0/0", 1000, 900, 1),
        _cpu("CompiledFunction", 1005, 880, COMPILED_FUNCTION_ID, [[N], [N]]),
        # Inductor's own record of its launch: the kernel's op, with the kernel's arguments
        _cpu("triton_poi_fused_add_0", 1020, 30, 3, [[N], [N], [N], []]),
        *_launch("triton_poi_fused_add_0", 1100, 10.0, 1030, 100, 3),
        # an older Inductor's record_function (an annotation, no shapes) around the launch
        _cpu("triton_poi_fused_sub_1", 1100, 30, 4, cat="user_annotation"),
        *_launch("triton_poi_fused_sub_1", 1140, 10.0, 1110, 101, COMPILED_FUNCTION_ID),
        # no record at all: the launch sits directly in CompiledFunction
        *_launch("triton_poi_fused_div_2", 1220, 15.0, 1200, 102, COMPILED_FUNCTION_ID),
        # the backward region: the autograd node and the compiled backward inside it
        _cpu("autograd::engine::evaluate_function: CompiledFunctionBackward", 2000, 300, 5),
        _cpu("CompiledFunctionBackward", 2005, 290, 6, [[N]]),
        *_launch("triton_poi_fused_mul_3", 2150, 20.0, 2100, 103, 6),
        # launched before the window (correlation below the first launch's), its External id the
        # CompiledFunction's: not linked "by external id" to the region
        _kernel("triton_poi_fused_neg_4", 500, 5.0, 50, COMPILED_FUNCTION_ID),
    ]
    trace = tmp_path / "compiled.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": events}))
    return trace


def test_a_kernel_inside_a_compiled_region_takes_no_shapes_from_it(tmp_path: Path) -> None:
    frame = ingest_trace(_trace(tmp_path)).frame.sort_values("ts_us")
    got = frame.set_index("name")[["launcher", "cpu_op", "input_dims", "cpu_op_id", "link"]].astype(object)
    # the kernel with its own op keeps it and its shapes
    assert got.loc["triton_poi_fused_add_0", "cpu_op"] == "triton_poi_fused_add_0"
    assert got.loc["triton_poi_fused_add_0", "input_dims"] == "[[1048576],[1048576],[1048576],[]]"
    assert got.loc["triton_poi_fused_add_0", "link"] == "correlation"
    region = ["triton_poi_fused_sub_1", "triton_poi_fused_div_2", "triton_poi_fused_mul_3"]
    # the innermost enclosing range stays the launcher: the annotation, else the region itself
    assert got.loc[region, "launcher"].tolist() == [
        "triton_poi_fused_sub_1",
        "CompiledFunction",
        "CompiledFunctionBackward",
    ]
    assert got.loc[region, "cpu_op"].isna().all()  # was CompiledFunction / CompiledFunctionBackward
    assert got.loc[region, "input_dims"].isna().all()  # was [[1048576],[1048576]] and [[1048576]]
    assert got.loc[region, "cpu_op_id"].isna().all()  # no op call: sub_1 and div_2 had shared one
    assert all("compiled region" in link and "compiled graph's inputs" in link for link in got.loc[region, "link"])
    # no fallback by External id to the region: its launch is simply missing
    assert (
        got.loc["triton_poi_fused_neg_4", "link"]
        == "launch not in the trace (issued before the profiling window opened)"
    )
    assert pd.isna(got.loc["triton_poi_fused_neg_4", "launcher"])


def test_each_kernel_inside_a_compiled_region_keeps_its_own_time_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_outputs(ingest_paths([_trace(tmp_path)]), out)
    build_report(out, None, tmp_path / "r.html")
    roofline = pd.read_parquet(out / "roofline.parquet").set_index("name")
    region = ["triton_poi_fused_sub_1", "triton_poi_fused_div_2", "triton_poi_fused_mul_3"]
    rows = roofline.loc[region]
    # each its own kernel's time (10, 15, 20 µs); sub_1 had carried 10 + 15 = 25 µs as one call
    assert rows["op_time_us"].tolist() == [10.0, 15.0, 20.0]
    assert rows["role"].tolist() == ["no shapes"] * 3
    assert rows["bytes"].isna().all() and rows["flops"].isna().all()
    assert all("compiled region" in note for note in rows["note"])
    # the kernel with its own op is still costed from its arguments: 3 tensors of N bf16
    assert roofline.loc["triton_poi_fused_add_0", "role"] == "main"
    assert roofline.loc["triton_poi_fused_add_0", "op_time_us"] == 10.0
    trust = json.loads((out / "report.json").read_text())["trust"]
    reasons = {(r["op"], r["time_us"]) for r in trust["top_uncosted"]}
    assert reasons == {("CompiledFunctionBackward", 20.0), ("CompiledFunction", 15.0), ("triton_poi_fused_sub_1", 10.0)}
    assert all("compiled region" in r["reason"] for r in trust["top_uncosted"])


def test_a_captured_launch_inside_a_compiled_region_has_no_op(tmp_path: Path) -> None:
    """`describe_launches` (what a profiled capture gives its replays) follows the same rule."""
    from kernel_atlas.ingest.columns import build_columns

    cols = build_columns(_trace(tmp_path), None, 1)[1]
    host = cols.host
    launches = np.flatnonzero(np.array([host.names[c] == "cuLaunchKernel" for c in host.name_code]))
    ctx = describe_launches(host, launches[np.argsort(host.ts[launches])])
    assert ctx.launcher == [
        "triton_poi_fused_add_0",
        "triton_poi_fused_sub_1",
        "CompiledFunction",
        "CompiledFunctionBackward",
    ]
    assert ctx.cpu_op == ["triton_poi_fused_add_0", None, None, None]
    assert ctx.input_dims == ["[[1048576],[1048576],[1048576],[]]", None, None, None]
    assert (ctx.cpu_op_idx[1:] == -1).all() and ctx.cpu_op_idx[0] >= 0
