"""The GPU branch of replay's timing routine, run against a stand-in for `torch.cuda` whose
events read the host clock: no GPU number comes out of this, but every decision the routine takes
on a GPU (graph or events, and why not a graph) and its bookkeeping run as they will there."""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from kernel_atlas.replay import timing  # noqa: E402


class FakeCuda:
    """Events on the host clock, graphs that replay the calls made while capturing."""

    def __init__(self) -> None:
        self.sync_mode = "default"
        self.capturing: FakeGraph | None = None

    def Event(self, enable_timing: bool = False) -> SimpleNamespace:  # torch.cuda.Event
        event = SimpleNamespace(t=0.0)
        event.record = lambda: setattr(event, "t", time.perf_counter())
        event.elapsed_time = lambda end: (end.t - event.t) * 1e3  # ms, as torch's
        return event

    def graph(self, graph: FakeGraph) -> contextlib.AbstractContextManager:
        @contextlib.contextmanager
        def capture():
            self.capturing = graph
            try:
                yield
            finally:
                self.capturing = None

        return capture()

    def set_sync_debug_mode(self, mode: str) -> None:
        self.sync_mode = mode

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = {
            "Event": self.Event,
            "graph": self.graph,
            "CUDAGraph": FakeGraph,
            "set_sync_debug_mode": self.set_sync_debug_mode,
            "synchronize": lambda: None,
            "current_device": lambda: 0,
            "get_device_properties": lambda _: SimpleNamespace(name="Fake GPU", L2_cache_size=1 << 20),
            "Stream": lambda: SimpleNamespace(wait_stream=lambda _: None),
            "stream": lambda _: contextlib.nullcontext(),
            "current_stream": lambda: SimpleNamespace(wait_stream=lambda _: None),
            "memory_allocated": lambda: 0,
            "mem_get_info": lambda: (80 << 30, 80 << 30),
        }
        for name, value in fake.items():
            monkeypatch.setattr(torch.cuda, name, value, raising=False)
        monkeypatch.setattr(timing, "_flush_buffer", lambda _: torch.empty(16, dtype=torch.int8))


class FakeGraph:
    def __init__(self) -> None:
        self.calls: list = []

    def replay(self) -> None:
        for call in self.calls:
            call()


def _kernel(cuda: FakeCuda, seconds: float = 0.0, syncs: bool = False, capture_fails: bool = False):
    """A stand-in kernel: takes `seconds` of host time; may synchronise or refuse capture."""
    counter = {"calls": 0}

    def call() -> None:
        counter["calls"] += 1
        if seconds:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass

    def fn() -> None:
        if syncs and cuda.sync_mode == "error":
            raise RuntimeError("called a synchronizing CUDA operation")
        if cuda.capturing is not None:
            if capture_fails:
                raise RuntimeError("operation not permitted when stream is capturing")
            cuda.capturing.calls.append(call)
            return
        call()

    return fn, counter


def test_short_kernels_are_timed_in_an_unrolled_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    fn, counter = _kernel(cuda)
    result = timing.measure(fn, "cuda", budget_s=0.05)
    assert result.method.startswith("cuda-graph (") and "calls per replay" in result.method
    calls = int(result.method.split("(")[1].split()[0])
    assert 1 < calls <= timing.MAX_UNROLL  # about 1 ms of work per replay
    assert result.reps >= 10 and 0 < result.p10_us <= result.median_us <= result.p90_us
    assert counter["calls"] >= calls * result.reps  # each replay ran every unrolled call


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("syncs", "no CUDA graph: it synchronises with the host"),
        ("reset", "no CUDA graph: it consumes state that is reset between calls"),
        ("capture_fails", "no CUDA graph: graph capture failed (RuntimeError"),
        ("long", None),
    ],
)
def test_what_cannot_go_into_a_graph_is_timed_with_events_and_says_why(
    monkeypatch: pytest.MonkeyPatch, kind: str, why: str | None
) -> None:
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    fn, counter = _kernel(
        cuda, seconds=2e-5 if kind == "long" else 0.0, syncs=kind == "syncs", capture_fails=kind == "capture_fails"
    )
    resets = {"n": 0}
    reset = (lambda: resets.__setitem__("n", resets["n"] + 1)) if kind == "reset" else None
    result = timing.measure(fn, "cuda", budget_s=0.02, reset=reset)
    assert result.method.startswith("cuda-events (L2 flushed before each repetition)")
    if why:
        assert why in result.method
    else:  # 20 µs: over GRAPH_BELOW_US, events without a word about graphs
        assert "graph" not in result.method and result.median_us >= 20
    if reset:
        assert resets["n"] == counter["calls"]  # before every call, including warm-up and estimate
    # warm-up by time: ~25 ms of calls before the timed ones
    assert counter["calls"] > result.reps + 5
