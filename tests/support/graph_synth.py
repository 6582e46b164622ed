"""SYNTHETIC (replay, capture) pairs derived from the real MI300X SGLang pair, for tests.

The shared traces hold one real pair, on ROCm, where each captured launch names its kernel
(`args.kernel`). A CUDA capture does not: `cudaLaunchKernel`/`cuLaunchKernel` carry only
`cbid` and `correlation` (Kineto's RuntimeActivity), while CUDA replayed kernels carry grid and
block. These helpers rewrite the real pair into that shape, and copy capture ranges (a second
batch size, eager warm-up runs) to build the situations the matcher must handle. Every trace
made here is synthetic and says so in its metadata.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.traces import trace_path

REPLAY = "mi300x_sglang_qwen3_8b_decode_graph"
CAPTURE = "mi300x_sglang_qwen3_8b_decode_capture_bs32"
HOST_CATS = ("cpu_op", "python_function", "cuda_runtime", "cuda_driver", "user_annotation")
CUDA_NAMES = {
    "hipLaunchKernel": "cudaLaunchKernel",
    "hipExtModuleLaunchKernel": "cuLaunchKernel",
    "hipModuleLaunchKernel": "cuLaunchKernel",
    "hipMemcpyAsync": "cudaMemcpyAsync",
    "hipMemsetAsync": "cudaMemsetAsync",
    "hipStreamBeginCapture": "cudaStreamBeginCapture",
    "hipStreamEndCapture": "cudaStreamEndCapture",
    "hipGraphLaunch": "cudaGraphLaunch",
}


@functools.cache
def _text(stem: str) -> bytes:
    return gzip.decompress(trace_path(stem).read_bytes())


def clone(value: Any) -> Any:
    """A deep copy of plain JSON data (much quicker than `copy.deepcopy`)."""
    return json.loads(json.dumps(value))


def load(stem: str, lean: bool = False) -> dict[str, Any]:
    """A shared trace as plain JSON; `lean` drops its Python frames (90% of the capture's events,
    irrelevant to matching) so that the synthetic variants stay small and quick."""
    doc = json.loads(_text(stem))
    if lean:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    return doc


def save(doc: dict[str, Any], path: Path) -> Path:
    doc["synthetic"] = "derived from a shared MI300X trace by tests/support/graph_synth.py"
    path.write_text(json.dumps(doc))
    return path


def capture_range(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    events = doc["traceEvents"]
    begin = next(e for e in events if e.get("name", "").endswith("StreamBeginCapture"))
    end = next(e for e in events if e.get("name", "").endswith("StreamEndCapture"))
    return begin, end


def captured_launches(doc: dict[str, Any]) -> list[dict[str, Any]]:
    begin, end = capture_range(doc)
    return sorted(
        (
            e
            for e in doc["traceEvents"]
            if e.get("cat") in ("cuda_runtime", "cuda_driver")
            and "LaunchKernel" in e["name"]
            and begin["ts"] < e["ts"] < end["ts"]
        ),
        key=lambda e: e["ts"],
    )


def replayed_kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    events = doc["traceEvents"]
    graph = next(e for e in events if e.get("name", "").endswith("GraphLaunch"))
    corr = graph["args"]["correlation"]
    return sorted(
        (
            e
            for e in events
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") == corr
        ),
        key=lambda e: e["ts"],
    )


def cuda_style(doc: dict[str, Any]) -> dict[str, Any]:
    """Runtime names as on CUDA, and no kernel name, grid or block on launches."""
    doc = clone(doc)
    for key in ("roctracer_version", "hip_runtime_version", "hip_driver_version"):
        doc.pop(key, None)
    doc["cuda_runtime_version"] = 12080
    for event in doc["traceEvents"]:
        if event.get("cat") in ("cuda_runtime", "cuda_driver"):
            event["name"] = CUDA_NAMES.get(event["name"], event["name"])
            for key in ("kernel", "grid", "block", "shared memory"):
                event["args"].pop(key, None)
    return doc


def with_replay_geometry(replay: dict[str, Any], capture: dict[str, Any]) -> dict[str, Any]:
    """CUDA replayed kernels record grid and block: take them from the captured launches."""
    replay = clone(replay)
    for kernel, launch in zip(replayed_kernels(replay), captured_launches(capture), strict=True):
        kernel["args"]["grid"], kernel["args"]["block"] = launch["args"]["grid"], launch["args"]["block"]
    return replay


def copy_capture(
    doc: dict[str, Any],
    shift: float,
    id_offset: int,
    dims: Callable[[list[Any]], list[Any]] | None = None,
    geometry: Callable[[list[int]], list[int]] | None = None,
    eager: bool = False,
) -> list[dict[str, Any]]:
    """Host events of the capture range (begin … end, on the capturing thread), shifted by
    `shift` µs, with correlation/External ids offset; `dims` rewrites `Input Dims`. With
    `eager` the copy is a warm-up run: no Begin/EndCapture, and each launch gets its kernel
    on the GPU (name, grid and block from the ROCm launch, `geometry` applied to the grid)."""
    begin, end = capture_range(doc)
    lo, hi = (begin["ts"], end["ts"] + end["dur"]) if not eager else (begin["ts"] + begin["dur"], end["ts"])
    selected = [
        event
        for event in doc["traceEvents"]
        if event.get("cat") in HOST_CATS
        and event.get("tid") == begin["tid"]
        and lo <= event["ts"]
        and event["ts"] + event.get("dur", 0) <= hi
    ]
    copies = clone(selected)
    kernels = []
    for new in copies:
        new["ts"] += shift
        args = new.setdefault("args", {})
        for key in ("correlation", "External id"):
            if key in args:
                args[key] += id_offset
        if dims is not None and "Input Dims" in args:
            args["Input Dims"] = dims(args["Input Dims"])
        if eager and "LaunchKernel" in new["name"]:
            grid = args["grid"] if geometry is None else geometry(args["grid"])
            kernels.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": args["kernel"],
                    "pid": 9,
                    "tid": 1,
                    "ts": new["ts"] + 5.0,
                    "dur": 1.0,
                    "args": {
                        "device": 9,
                        "stream": 1,
                        "correlation": args["correlation"],
                        "grid": grid,
                        "block": args["block"],
                    },
                }
            )
    return copies + kernels


def batch_16(dims: list[Any]) -> list[Any]:
    """`Input Dims` of the same graph captured at batch 16: every leading 32 becomes 16."""
    return [[16, *d[1:]] if isinstance(d, list) and d and d[0] == 32 else d for d in dims]
