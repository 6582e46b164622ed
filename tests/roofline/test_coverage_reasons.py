"""What a report says of the GPU time it could not cost, or costed on an assumption: hand-built
traces, each missing one piece of information, with the times and reasons written here by hand
from the events below (stop 62's campaign X)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
SPLIT_K = "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasSplitKParams<float>)"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "numSms": 132}
MM_ARGS = {
    "Input Dims": [[1024, 1024], [1024, 1024]],
    "Input type": ["c10::BFloat16", "c10::BFloat16"],
    "Concrete Inputs": ["", ""],
}


class _Trace:
    """One host thread under ProfilerStep#1, one stream; each op at its own 200 µs slot."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = [_range("user_annotation", "ProfilerStep#1", 999_990.0, 100_000, 0)]
        self.slot, self.ext, self.corr = 0, 1, 1000

    def op(self, name: str, args: dict[str, Any] | None = None, cat: str = "cpu_op") -> int:
        self.slot += 1
        ext = self.ext
        self.events.append({**_range(cat, name, self.ts, 50, ext), "args": {"External id": ext, **(args or {})}})
        self.ext += 1
        return ext

    @property
    def ts(self) -> float:
        return 1_000_000.0 + 200.0 * self.slot

    def launch(self, ext: int, name: str, dur: float, cat: str = "kernel", at: float = 10.0, **extra: Any) -> None:
        self.corr += 1
        runtime = {**_range("cuda_runtime", "cudaLaunchKernel", self.ts + 5, 4, ext)}
        runtime["args"]["correlation"] = self.corr
        args = {"External id": ext, "device": 0, "stream": 7, "correlation": self.corr, **extra}
        kernel = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": self.ts + at, "dur": dur, "args": args}
        self.events += [runtime, kernel]

    def write(self, path: Path, **top: Any) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": self.events, **top}))
        return path


def _range(cat: str, name: str, ts: float, dur: float, ext: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext},
    }


def _report(tmp_path: Path, trace: _Trace, **top: Any):
    from kernel_atlas.report.build import build_report

    out = tmp_path / "run"
    write_outputs(ingest_paths([trace.write(tmp_path / "t.json", **top)]), out)
    report = build_report(out, None, tmp_path / "r.html")
    return report.analysis.roofline, json.loads((out / "report.json").read_text())


def _row(roofline: pd.DataFrame, name: str) -> pd.Series:
    rows = roofline[roofline["name"] == name]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_a_memset_without_bytes_inside_a_shaped_op_says_what_is_missing(tmp_path: Path) -> None:
    # aten::mm records both shapes; it launches a 5 µs memset (no `bytes`) and a 100 µs GEMM:
    # the GEMM is costed, the memset is not, for want of its byte count — not of shapes
    trace = _Trace()
    ext = trace.op("aten::mm", MM_ARGS)
    trace.launch(ext, "Memset (Device)", 5.0, cat="gpu_memset", at=6.0)
    trace.launch(ext, GEMM, 100.0, at=20.0)
    roofline, report = _report(tmp_path, trace)
    memset = _row(roofline, "Memset (Device)")
    assert memset["note"] == "memset: no byte count recorded, and aten::mm records no size for it"
    [reason] = report["trust"]["top_uncosted"]
    assert (reason["op"], reason["time_us"]) == ("aten::mm", 5.0)
    assert reason["reason"] == "memset: no byte count recorded, and aten::mm records no size for it"


def test_a_kernel_under_a_python_frame_says_its_launcher_is_no_op(tmp_path: Path) -> None:
    trace = _Trace()
    ext = trace.op("mymod.py(10): my_triton_fn", cat="python_function")
    trace.launch(ext, "triton_poi_fused_add_0", 15.0)
    roofline, report = _report(tmp_path, trace)
    note = "its launcher is a Python frame or an annotation, not an op: no shapes recorded"
    assert _row(roofline, "triton_poi_fused_add_0")["note"] == note
    assert report["trust"]["top_uncosted"][0]["reason"] == note


def test_a_helper_of_a_call_without_a_cost_does_not_point_at_a_cost(tmp_path: Path) -> None:
    # aten::mm without shapes: its GEMM (100 µs, the call's main kernel) and split-K reduction (10 µs)
    trace = _Trace()
    ext = trace.op("aten::mm")
    trace.launch(ext, GEMM, 100.0)
    trace.launch(ext, SPLIT_K, 10.0, at=120.0)
    roofline, report = _report(tmp_path, trace)
    helper = _row(roofline, SPLIT_K)
    assert helper["role"] == "helper"
    assert helper["note"] == f"same aten::mm call as {GEMM[:60]}, which has no cost"
    assert report["no_shape_time_us"] == 110.0  # the call's both kernels, once


def test_an_estimated_byte_count_is_said_as_an_estimate(tmp_path: Path) -> None:
    # a 60 µs memcpy without `bytes` under aten::copy_ of [1048576] fp32 (its bytes: 4 MiB, taken
    # from the op's tensor — an estimate) and a GEMM of 100 µs whose shapes are recorded
    trace = _Trace()
    trace.launch(trace.op("aten::mm", MM_ARGS), GEMM, 100.0)
    copy = {"Input Dims": [[1048576], [1048576], []], "Input type": ["float", "float", "Scalar"]}
    trace.launch(trace.op("aten::copy_", copy), "Memcpy HtoD (Pinned -> Device)", 60.0, cat="gpu_memcpy")
    roofline, report = _report(tmp_path, trace)
    assert _row(roofline, "Memcpy HtoD (Pinned -> Device)")["estimate"]
    assert not _row(roofline, GEMM)["estimate"]
    assert report["trust"]["costed_pct"] == 100.0
    # 60 of 160 µs: 37.5 %
    assert report["trust"]["estimated"] == {"time_us": 60.0, "pct": 37.5}


def test_a_collective_of_borrowed_shapes_keeps_its_own_row(tmp_path: Path) -> None:
    # one all_reduce kernel before the window (no launch: its shapes borrowed from the two launched
    # in it, same kernel, grid and block), 300 µs each; the group size is the trace's world size, 16
    trace = _Trace()
    geometry = {"grid": [8, 1, 1], "block": [256, 1, 1]}
    early = {"device": 0, "stream": 7, "correlation": 5, **geometry}
    trace.events.append(
        {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 7, "ts": 999_500.0, "dur": 300.0, "args": early}
    )
    message = {"Input Dims": [[1048576]], "Input type": ["float"]}
    for _ in range(2):
        trace.op("record_param_comms", message)
        ext = trace.ext
        trace.events.append(
            {
                **_range("user_annotation", "nccl:all_reduce", trace.ts + 2, 60, ext),
                "args": {"External id": ext, **message},
            }
        )
        trace.ext += 1
        trace.launch(ext, NCCL, 300.0, at=12.0, **geometry)
    roofline, report = _report(tmp_path, trace, distributedInfo={"backend": "nccl", "rank": 0, "world_size": 16})
    rows = roofline[roofline["name"] == NCCL].sort_values("count")
    assert rows["count"].tolist() == [1, 2]
    assert rows["note"].tolist() == ["inferred: same kernel, grid and block", ""]
    # every call assumed the world size for its group: all 900 µs estimated
    assert rows["estimate"].tolist() == [True, True]
    assert report["trust"]["estimated"] == {"time_us": 900.0, "pct": 100.0}


def test_shapes_without_dtypes_count_as_no_shapes(tmp_path: Path) -> None:
    trace = _Trace()
    trace.launch(trace.op("aten::mm", {"Input Dims": [[1024, 1024], [1024, 1024]]}), GEMM, 100.0)
    _, report = _report(tmp_path, trace)
    assert (report["no_shape_time_us"], report["no_model_time_us"]) == (100.0, 0.0)


def test_no_gpu_time_gives_no_share(tmp_path: Path) -> None:
    # two costed calls, both recorded 0 µs long: 0 of 0 µs is no share
    trace = _Trace()
    trace.launch(trace.op("aten::mm", MM_ARGS), GEMM, 0.0)
    trace.launch(trace.op("aten::mm", MM_ARGS), GEMM, 0.0)
    _, report = _report(tmp_path, trace)
    assert report["trust"]["costed_pct"] is None
    timeshare = pd.read_csv(tmp_path / "run" / "timeshare.csv")
    assert timeshare["pct"].map(math.isnan).all()
    from kernel_atlas.report.trust_view import trust_lines

    assert trust_lines(report["trust"])[0] == "costed: no share to give: the GPU activities recorded take 0 µs in all"
