"""Events of hand-built Kineto traces: a runtime launch and the kernel it launched."""

from __future__ import annotations

from typing import Any


def launch_and_kernel(
    ts: float,
    corr: int,
    ext: int,
    kernel: str,
    kts: float,
    kdur: float,
    *,
    tid: int = 1,
    geometry: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A 2 µs `cudaLaunchKernel` on host thread `tid` at `ts` and its kernel on device 0, stream 7,
    from `kts` for `kdur` µs, linked by correlation `corr` and External id `ext`; `geometry`: the
    kernel's grid/block args."""
    ids = {"correlation": corr, "External id": ext}
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid}
    kernel_args = {**ids, "device": 0, "stream": 7, **(geometry or {})}
    return [
        {**launch, "ts": ts, "dur": 2, "args": ids},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": kts, "dur": kdur, "args": kernel_args},
    ]
