"""The compiled relaxation (numba, `analysis/relaxation.py`) is the Python loop's twin: the same
distances, predecessors and settling on any graph, and the same hand-derived paths."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import kernel_atlas.analysis.relaxation as relaxation
from kernel_atlas.analysis.critical_path import build_graph, parse_window
from kernel_atlas.analysis.longest_path import longest_path, longest_path_length
from kernel_atlas.analysis.whatif import what_if
from tests.analysis.test_critical_hand_s63 import WINDOW_EVENTS
from tests.analysis.test_critical_path import solved


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> relaxation.Passes:
    """Every graph relaxed compiled, however small."""
    pytest.importorskip("numba")
    monkeypatch.setattr(relaxation, "COMPILED_MIN_RUNS", 0)
    passes = relaxation.compiled_passes()
    assert passes is not None
    return passes


def _random_graph(rng: np.random.Generator) -> tuple[list[int], list[int], list[float], list[float]]:
    """Runs between a few nodes, some going back (cycles), weights that tie (small integers), that
    round (tenths) and that cut (-inf, a what-if's causal edge), starts like `_starts`'."""
    n = int(rng.integers(2, 40))
    m = int(rng.integers(1, 120))
    src = rng.integers(0, n, m).tolist()
    dst = rng.integers(0, n, m).tolist()
    choices = [0.0, 1.0, 2.0, 0.1, 0.7, 3.3, -math.inf, 5.0]
    weights = [choices[i] for i in rng.integers(0, len(choices), m)]
    start = [float(x) for x in rng.choice([0.0, 0.0, 0.0, 1.5, 10.0], n)]
    return src, dst, weights, start


def test_the_compiled_passes_give_the_python_loops_distances_to_the_last_bit(compiled: relaxation.Passes) -> None:
    rng = np.random.default_rng(20261207)
    settled_both = unsettled_both = 0
    for _ in range(400):
        src, dst, weights, start = _random_graph(rng)
        passes = int(rng.integers(1, 6))
        for with_pred in (True, False):
            dist, pred = list(start), [-1] * len(start)
            changed = relaxation.python_passes(src, dst, weights, dist, pred, with_pred, passes)
            dist_c = np.array(start)
            pred_c = np.full(len(start), -1, np.int64)
            ends = (np.array(src, np.int64), np.array(dst, np.int64), np.array(weights))
            changed_c = compiled(*ends, dist_c, pred_c, with_pred, passes)
            assert bool(changed_c) == changed
            assert dist_c.tolist() == dist  # exact: the same additions in the same order
            assert pred_c.tolist() == pred
            settled_both += not changed
            unsettled_both += changed
    assert settled_both and unsettled_both  # both endings were exercised


def test_a_compiled_solve_finds_the_hand_derived_path_and_what_if(tmp_path: Path, compiled: relaxation.Passes) -> None:
    # tests/analysis/test_critical_hand_s63.py's window case, derived there by hand: k1's 50 µs →
    # the sync's end → opC 10 = 60 µs; the what-if from the window's start 76 → 76, nothing saved.
    kernels, host = solved(tmp_path, WINDOW_EVENTS)
    window = parse_window("ProfilerStep#1")
    graph = build_graph(kernels, host, window)
    path = longest_path(graph)
    assert graph.solver is not None and graph.solver.compiled is compiled
    assert path.length_us == pytest.approx(60.0)
    assert longest_path_length(graph) == pytest.approx(60.0)
    result = what_if(kernels, host, [], no_launch_gaps=True, window=window)
    assert (result["baseline_us"], result["new_us"], result["saving_us"]) == (76.0, 76.0, 0.0)
    # the whole trace (derived there too): opA 2 + launch overhead 4 + k0 139 + k1 50 + opC 10
    whole = build_graph(kernels, host)
    assert longest_path(whole).length_us == pytest.approx(205.0)


def test_without_numba_the_python_loop_solves_every_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relaxation, "COMPILED_MIN_RUNS", 0)
    monkeypatch.setattr(relaxation, "_tried", True)  # as if `import numba` had failed
    monkeypatch.setattr(relaxation, "_compiled", None)
    assert relaxation.use_compiled(10**9) is None
    kernels, host = solved(tmp_path, WINDOW_EVENTS)
    graph = build_graph(kernels, host, parse_window("ProfilerStep#1"))
    assert longest_path(graph).length_us == pytest.approx(60.0)
    assert graph.solver is not None and graph.solver.compiled is None


def test_a_small_graph_is_not_worth_compiling() -> None:
    assert relaxation.use_compiled(relaxation.COMPILED_MIN_RUNS - 1) is None


def test_a_fork_waits_for_a_compile_in_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    # The process beside the report compiles on a thread while it builds its graph; it may fork
    # meanwhile (the what-if's process, a pool for many ranks). The fork waits for the compile,
    # and the child can take the compile's lock (no thread it lacks holds it).
    compiles: list[str] = []

    def slow_compile() -> None:
        time.sleep(0.3)
        compiles.append("done")
        return None

    monkeypatch.setattr(relaxation, "_tried", False)
    monkeypatch.setattr(relaxation, "_compiled", None)
    monkeypatch.setattr(relaxation, "_compile", slow_compile)
    relaxation.warm_up()
    time.sleep(0.05)  # the thread holds the lock by now
    assert relaxation.use_compiled(1) is None  # a small graph: the Python loop, at once
    assert compiles == []
    pid = os.fork()
    if pid == 0:  # the child: the lock is free, the compile was tried
        os._exit(0 if relaxation._compiling.acquire(timeout=2.0) and relaxation._tried else 1)
    assert compiles == ["done"]  # the fork waited for it
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for thread in threading.enumerate():
        if thread.name == "atlas-compile-relaxation":
            thread.join(timeout=1.0)
            assert not thread.is_alive()
    assert relaxation.use_compiled(relaxation.COMPILED_MIN_RUNS) is None  # compiled once: it gave none
    assert compiles == ["done"]
