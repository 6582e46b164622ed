"""One measurement routine for every replay, done the way kernel engineers time kernels
(`triton.testing.do_bench` and `do_bench_cudagraph` are the reference).

GPU: the caller allocates and fills inputs once, outside the timed region. One call compiles
and allocates; five calls, each after an L2 flush, estimate the time; warm-up runs for ~25 ms
(not a fixed count). Then either
* CUDA events around each repetition, the L2 cache flushed before each (a buffer of twice the
  L2 size, at least 256 MiB, is zeroed) and an optional per-repetition `reset` of the state the
  kernel consumes, both outside the events; or, for kernels under `GRAPH_BELOW_US`,
* a CUDA graph of n unrolled calls (~1 ms of work per replay), timed per replay and divided by
  n, the L2 flushed before each replay (warm between the calls inside it). A call that
  synchronises with the host (checked with `torch.cuda.set_sync_debug_mode`), needs a per-call
  reset, allocates more per call than a quarter of free memory holds n times over, or fails to
  capture falls back to events; `method` says which and why.
Repetitions until a time budget or a count is reached; median and 10th/90th percentiles.

CPU: wall clock (`time.perf_counter`) around each call after a timed warm-up, marked as such.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

GRAPH_BELOW_US = 10.0
WARMUP_MS = 25.0  # as do_bench
GRAPH_REPLAY_US = 1000.0  # work unrolled into one graph replay
MAX_UNROLL = 1000


@dataclass(frozen=True)
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    reps: int
    method: str  # "cuda-events…", "cuda-graph…" or "cpu-wall-clock", with the reason for a fallback
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
    warmup_ms: float = WARMUP_MS,
    min_reps: int = 10,
    max_reps: int = 200,
    budget_s: float = 0.5,
    reset: Callable[[], object] | None = None,
    graphs: bool = True,
    l2_bytes: int | None = None,
) -> Timing:
    """Time `fn` (which must only launch the work to time); `reset` restores state that `fn`
    consumes (run before every repetition, never timed)."""
    if device.startswith("cuda"):
        return _measure_cuda(fn, warmup_ms, min_reps, max_reps, budget_s, reset, graphs, l2_bytes)
    return _measure_cpu(fn, warmup_ms, min_reps, max_reps, budget_s, reset)


def _measure_cpu(
    fn: Callable[[], object],
    warmup_ms: float,
    min_reps: int,
    max_reps: int,
    budget_s: float,
    reset: Callable[[], object] | None,
) -> Timing:
    import platform

    warm_until = time.perf_counter() + warmup_ms / 1e3
    while warmup_ms > 0:  # at least one call, then until the warm-up time is spent
        if reset:
            reset()
        fn()
        if time.perf_counter() >= warm_until:
            break
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() < deadline):
        if reset:
            reset()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    median, p10, p90 = _quantiles(samples)
    return Timing(
        median, p10, p90, len(samples), "cpu-wall-clock", f"CPU ({platform.processor() or platform.machine()})"
    )


def _syncs_with_host(fn: Callable[[], object]) -> str | None:  # pragma: no cover - needs a GPU
    """Why `fn` cannot go into a CUDA graph because it synchronises with the host, else None."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as exc:
        return f"it synchronises with the host ({str(exc).splitlines()[0][:80]})"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return None


def _unroll(fn: Callable[[], object], calls: int) -> tuple[int, str | None]:  # pragma: no cover - needs a GPU
    """How many calls of `fn` one graph may hold: a call that allocates its output keeps it in
    the graph's memory pool, so calls × bytes per call stay within a quarter of free memory."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    held = fn()
    torch.cuda.synchronize()
    per_call = torch.cuda.memory_allocated() - before
    del held
    if per_call <= 0:
        return calls, None
    free, _ = torch.cuda.mem_get_info()
    fits = int(free / 4 // per_call)
    if fits < 1:
        return 0, f"it allocates {per_call / (1 << 30):.1f} GiB per call"
    return min(calls, fits), None


def _capture(fn: Callable[[], object], calls: int):  # pragma: no cover - needs a GPU
    """A CUDA graph of `calls` unrolled calls of `fn`, or the reason it could not be captured."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # libraries initialise workspaces outside the capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as exc:  # any capture failure means: time with events
        with contextlib.suppress(RuntimeError):  # the failed capture's error may surface here
            torch.cuda.synchronize()
        return None, f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"
    torch.cuda.synchronize()
    return graph, None


def _event_times(
    run: Callable[[], object], reps: int, flush, reset: Callable[[], object] | None = None
) -> list[float]:  # pragma: no cover - needs a GPU
    """µs of `reps` calls of `run`, each between CUDA events after an L2 flush (and `reset`),
    both outside the events."""
    import torch

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in pairs:
        if reset:
            reset()
        flush.zero_()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in pairs]


def _measure_cuda(
    fn: Callable[[], object],
    warmup_ms: float,
    min_reps: int,
    max_reps: int,
    budget_s: float,
    reset: Callable[[], object] | None,
    graphs: bool,
    l2_bytes: int | None,
) -> Timing:  # pragma: no cover - needs a GPU
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = _flush_buffer(l2_bytes or getattr(props, "L2_cache_size", 50 << 20))

    if reset:
        reset()
    fn()  # compiles, allocates, fills caches of the libraries
    torch.cuda.synchronize()
    estimate_us = statistics.median(_event_times(fn, 5, flush, reset))
    for _ in range(max(1, min(100_000, int(warmup_ms * 1e3 / max(estimate_us, 1.0))))):
        if reset:
            reset()
        fn()
    torch.cuda.synchronize()

    why_not = None
    if graphs and estimate_us < GRAPH_BELOW_US:
        why_not = "it consumes state that is reset between calls" if reset else _syncs_with_host(fn)
        if why_not is None:
            calls = max(1, min(MAX_UNROLL, int(GRAPH_REPLAY_US / max(estimate_us, 0.5))))
            calls, why_not = _unroll(fn, calls)
            graph, why_not = _capture(fn, calls) if why_not is None else (None, why_not)
            if graph is not None:
                replay_us = estimate_us * calls
                reps = max(min_reps, min(max_reps, int(budget_s * 1e6 / max(replay_us, 1.0))))
                samples = [t / calls for t in _event_times(graph.replay, reps, flush)]
                median, p10, p90 = _quantiles(samples)
                method = f"cuda-graph ({calls} calls per replay; L2 flushed before each replay, warm within)"
                return Timing(median, p10, p90, reps, method, _name(torch, props))

    reps = max(min_reps, min(max_reps, int(budget_s * 1e6 / max(estimate_us, 1.0))))
    samples = _event_times(fn, reps, flush, reset)
    median, p10, p90 = _quantiles(samples)
    method = "cuda-events (L2 flushed before each repetition)"
    if why_not:
        method += f"; no CUDA graph: {why_not}"
    return Timing(median, p10, p90, reps, method, _name(torch, props))


def _flush_buffer(l2_bytes: int):  # pragma: no cover - needs a GPU
    """Zeroing this evicts the L2 cache: twice its size, at least 256 MiB (as do_bench)."""
    import torch

    return torch.empty(max(2 * l2_bytes, 256 << 20), dtype=torch.int8, device="cuda")


def _name(torch, props) -> str:  # pragma: no cover - needs a GPU
    driver = torch.version.cuda or getattr(torch.version, "hip", None) or "?"
    return f"{props.name} (CUDA/HIP {driver})"
