"""One measurement routine for every replay, done the way kernel engineers time kernels.

GPU: inputs allocated once by the caller; warm-up; the L2 cache flushed before every
repetition (a buffer twice the L2 size, at least 256 MiB, is zeroed); CUDA events around each
repetition; kernels shorter than ~10 µs are captured in a CUDA graph and replayed so that the
launch overhead does not dominate; repetitions until a time budget or a count is reached;
median and 10th/90th percentiles. CPU: wall clock (`time.perf_counter`) around each call,
clearly marked as such.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

GRAPH_BELOW_US = 10.0


@dataclass(frozen=True)
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    reps: int
    method: str  # "cuda-events", "cuda-graph+events" or "cpu-wall-clock"
    device_name: str


def _quantiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0], ordered[0], ordered[0]
    cuts = statistics.quantiles(ordered, n=10, method="inclusive")
    return statistics.median(ordered), cuts[0], cuts[-1]


def measure(
    fn: Callable[[], object],
    device: str = "cpu",
    *,
    warmup: int = 3,
    min_reps: int = 10,
    max_reps: int = 200,
    budget_s: float = 0.5,
    l2_bytes: int | None = None,
) -> Timing:
    if device.startswith("cuda"):
        return _measure_cuda(fn, warmup, min_reps, max_reps, budget_s, l2_bytes)
    return _measure_cpu(fn, warmup, min_reps, max_reps, budget_s)


def _measure_cpu(fn: Callable[[], object], warmup: int, min_reps: int, max_reps: int, budget_s: float) -> Timing:
    import platform

    for _ in range(warmup):
        fn()
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    median, p10, p90 = _quantiles(samples)
    return Timing(
        median, p10, p90, len(samples), "cpu-wall-clock", f"CPU ({platform.processor() or platform.machine()})"
    )


def _measure_cuda(
    fn: Callable[[], object], warmup: int, min_reps: int, max_reps: int, budget_s: float, l2_bytes: int | None
) -> Timing:  # pragma: no cover - needs a GPU
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = l2_bytes or getattr(props, "L2_cache_size", 50 << 20)
    flush = torch.empty(max(2 * l2, 256 << 20), dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe_start.record()
    fn()
    probe_end.record()
    torch.cuda.synchronize()
    estimate_us = probe_start.elapsed_time(probe_end) * 1e3
    run, method = fn, "cuda-events"
    if estimate_us < GRAPH_BELOW_US:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # allocations of the first call happen outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            fn()
        run, method = graph.replay, "cuda-graph+events"
    reps = max(min_reps, min(max_reps, int(budget_s * 1e6 / max(estimate_us, 1.0))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        flush.zero_()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]
    median, p10, p90 = _quantiles(samples)
    driver = torch.version.cuda or getattr(torch.version, "hip", None) or "?"
    return Timing(median, p10, p90, reps, method, f"{props.name} (CUDA/HIP {driver})")
