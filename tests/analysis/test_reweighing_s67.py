"""Where optimisation pays re-solves one graph per candidate with a few weights changed
(`longest_path.Reweighing`): the runs are weighed once and each candidate re-weighs only the runs
holding an edge it changes. Its lengths must be those of a whole new weighing, to the last bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import CPU, GPU, Graph, build_graph
from kernel_atlas.analysis.longest_path import Reweighing, longest_path_length
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels
from tests.support.traces import trace_path


def _diamond(weight: list[float]) -> Graph:
    """Nodes 0–5 in time order. Run A: e0 0→1, e1 1→2, e2 2→3 (nodes 1 and 2 pass through);
    run B: e3 0→4, e4 4→3 (node 4 passes through); run C: e5 3→5. Node 0 leaves twice and node
    3 is entered twice, so A, B and C are three runs."""
    return Graph(
        node_ts=np.array([0.0, 1.0, 2.0, 6.0, 3.0, 8.0]),
        src=np.array([0, 1, 2, 0, 4, 3]),
        dst=np.array([1, 2, 3, 4, 3, 5]),
        weight=np.array(weight, np.float64),
        kind=np.full(6, CPU, np.int8),
        event=np.full(6, -1),
        n_host=3,
        host=pd.DataFrame(),
        gpu=pd.DataFrame(),
        window={},
    )


def test_a_run_reweighed_by_one_of_its_edges() -> None:
    # A = 1 + 2 + 3 = 6, B = 4 + 1 = 5, C = 2: the longest is A then C, 8
    reweighing = Reweighing(_diamond([1, 2, 3, 4, 1, 2]), np.array([1, 2, 3, 4, 1, 2], np.float64))
    assert reweighing.length(np.array([], np.int64), np.array([])) == 8.0
    # e1 at 0: A = 4 < B = 5, so B then C = 7
    assert reweighing.length(np.array([1]), np.array([0.0])) == 7.0
    # e1 at 0 and e4 at 0.5 (two runs changed): A = 4 < B = 4.5, 6.5
    assert reweighing.length(np.array([4, 1]), np.array([0.5, 0.0])) == 6.5
    # e0 and e2 of one run: A = 0.5 + 2 + 0.25 = 2.75 < B = 5, so 7
    assert reweighing.length(np.array([2, 0]), np.array([0.25, 0.5])) == 7.0
    # e5 at 0: A alone, 6; the base weighing is left as it was for the next candidate
    assert reweighing.length(np.array([5]), np.array([0.0])) == 6.0
    assert reweighing.length(np.array([1]), np.array([0.0])) == 7.0


def test_a_reweighed_run_is_summed_as_a_whole_weighing_sums_it() -> None:
    # 0.1 + 0.2 + 0.3 is 0.6000000000000001 in edge order; A is re-weighed by e2 (0.3 again): the
    # sum must be the same float, not 0.6 from another order or from adding a difference
    weight = np.array([0.1, 0.2, 0.3, 0.1, 0.1, 0.0])
    reweighing = Reweighing(_diamond(weight.tolist()), weight)
    assert reweighing.length(np.array([2]), np.array([0.3])) == 0.6000000000000001
    lowered = weight.copy()
    lowered[1] = 0.15
    assert reweighing.length(np.array([1]), np.array([0.15])) == longest_path_length(_diamond(weight.tolist()), lowered)


def test_reweighing_equals_a_whole_weighing_on_a_real_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace_path("a100_diff_control")]), out)
    graph = build_graph(load_kernels(out), load_host_events(out, 0), zero_weight_launches=True)
    own = np.flatnonzero(graph.kind == GPU)
    reweighing = Reweighing(graph, graph.weight)
    rng = np.random.default_rng(7)
    for share in (0.01, 0.1, 0.5, 1.0):
        edges = rng.choice(own, size=max(1, int(share * len(own))), replace=False)
        lowered = graph.weight[edges] * rng.uniform(0.0, 1.0, len(edges))
        whole = graph.weight.copy()
        whole[edges] = lowered
        assert reweighing.length(edges, lowered) == longest_path_length(graph, whole)
