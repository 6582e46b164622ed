"""A thread whose ops overlap a sibling without nesting in it: the critical path never counts the
time the two share twice, so it is never longer than the run (stop 69; fuzz seed 69 had found a
30,000-deep nest overlapping a compiled region giving a 13,564 µs path in a 12,940 µs run).
Every expected value is worked out by hand from the events the test builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.critical_segments import breakdown_pct, path_span, segments
from kernel_atlas.analysis.longest_path import longest_path
from tests.analysis.test_critical_path import call, kernel, op, solved

# One thread (times in µs):
#   opA [0,40] ⊃ cudaLaunchKernel [2,4] → kA on stream 7 [10,30]
#   opB [20,60] — starts inside opA and ends after it: a sibling at the top, not its child —
#        ⊃ cudaLaunchKernel [50,52] → kB on stream 7 [55,70] (the stream idle since 30: a launch edge)
# The call-stack walk visits opA 0 → 2 → 4 → 40, then opB from 20: back in time. Weighed as the
# points' own times, the host chain counted [20,40] twice: 2 + 2 + 36 + (enter opB) 0 + 30 to
# the second launch at 50, + its launch overhead 5 + kB 15 = 90 µs in a run of 70.
# Held to the time reached: opB's start is reached at 40, so opB's first edge weighs 50 − 40 = 10:
# CPU 2 + 2 + 36 + 10 = 50, launch overhead 55 − 50 = 5, kB 15: 70 µs, the run's span [0,70].
# The other path, through kA: 2 + launch overhead 8 + kA 20 = 30.
OVERLAP = [
    op("opA", 0, 40),
    call("cudaLaunchKernel", 2, 2, 1),
    kernel("kA", 10, 20, 1),
    op("opB", 20, 40),
    call("cudaLaunchKernel", 50, 2, 2),
    kernel("kB", 55, 15, 2),
]


def test_overlapping_siblings_count_their_shared_time_once(tmp_path: Path) -> None:
    kernels, host = solved(tmp_path, OVERLAP)
    graph = build_graph(kernels, host)
    path = longest_path(graph)
    assert path.length_us == pytest.approx(70.0)
    segs = segments(graph, path)
    by_kind = segs.groupby("kind")["dur_us"].sum().to_dict()
    assert by_kind == pytest.approx({"cpu": 50.0, "launch": 5.0, "gpu": 15.0})
    pct = breakdown_pct(segs)
    assert (pct["cpu_bound"], pct["gpu_kernel_launch_overhead"], pct["gpu_compute_bound"]) == (71.43, 7.14, 21.43)
    assert any("go back in time" in note for note in graph.notes)
    # the path spans [0,70] and its edges weigh 70: no time is left unweighed (the shared [20,40]
    # is not "time no edge weighs" — opB's first edge spans 20 → 50 but moves the time reached
    # from 40 to 50, all of it weighed)
    span, _ = path_span(graph, path)
    assert span is not None
    assert (span["start_us"], span["end_us"], span["unweighted_us"]) == (0.0, 70.0, 0.0)


def test_a_well_nested_thread_keeps_its_weights(tmp_path: Path) -> None:
    # The same, opB nested in opA ([20,38]: its launch at 30 → kB [55,70]): no edge goes back, no
    # note. Host: opA 0→2 (2), launch 2, opA 4→20 (16), opB 20→30 (10), launch 30→32 (2) — then the
    # launch edge 30 → 55 (25) and kB 15: 2 + 2 + 16 + 10 + 25 + 15 = 70.
    nested = [*OVERLAP[:3], op("opB", 20, 18), call("cudaLaunchKernel", 30, 2, 2), kernel("kB", 55, 15, 2)]
    kernels, host = solved(tmp_path, nested)
    graph = build_graph(kernels, host)
    assert longest_path(graph).length_us == pytest.approx(70.0)
    assert not any("go back in time" in note for note in graph.notes)
