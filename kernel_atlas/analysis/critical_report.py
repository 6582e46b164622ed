"""The critical path of an ingest output for `atlas report`: each rank's graph solved, ranks
joined at their matched collectives where they can be, and what a kernel at its roofline would
save end to end (`critical_path` of report.json, critical_path.parquet)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.critical_ranks import (
    MAX_JOINT_NODES,
    MAX_JOINT_RANKS,
    join_ranks,
    p2p_instances,
    p2p_rows,
)
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments, top_entries
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import where_optimisation_pays
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.store.outputs import load_kernels


@dataclass
class CriticalPathResult:
    segments: pd.DataFrame
    facts: dict[str, Any]


def analyse_output(
    out_dir: Any,
    ranks: list[int],
    window: tuple[str, int] | None,
    roofline: pd.DataFrame | None,
    collectives: pd.DataFrame | None = None,
    convention: str = "exact",
    last_step_start: dict[int, float | None] | None = None,
    loaded: dict[int, pd.DataFrame] | None = None,
) -> CriticalPathResult:
    """The critical path of an ingest output: of its one rank; of several ranks joined at their
    matched collectives (`collectives`, at most MAX_JOINT_RANKS); else of each rank alone, the
    longest reported. `per_rank` gives every rank's own path length. `convention="hta"` reads
    the trace as HTA does (`critical_hta.like_hta`; `last_step_start`: per rank, where HTA's
    loader cuts the trace, from summary.json); where optimisation pays stays exact. `loaded`: the
    kernel rows of ranks already in memory (the report's own, with its cost columns), not read again."""
    joint = 1 < len(ranks) <= MAX_JOINT_RANKS
    exact = convention == "exact"
    per_rank, graphs, best, notes, p2p = [], {}, None, [], []
    for rank in ranks:
        if loaded and rank in loaded:
            kernels = loaded[rank]
        else:
            kernels = load_kernels(out_dir, ranks=[rank]) if len(ranks) > 1 else load_kernels(out_dir)
        if joint:
            p2p.append(p2p_rows(kernels, rank))
        host = load_host_events(out_dir, rank)
        cut = (last_step_start or {}).get(rank)
        # the exact graph is built once with the what-if's causal edges, then solved without them
        built = build_graph(
            kernels, host, window, zero_weight_launches=exact, convention=convention, last_step_start_us=cut
        )
        graph = built.without_causal_edges() if exact else built
        path = longest_path(graph)
        per_rank.append({"rank": rank, "total_us": round(path.length_us, 3)})
        if joint:
            graphs[rank] = graph
            if sum(g.n_nodes for g in graphs.values()) > MAX_JOINT_NODES:  # memory: solve rank by rank
                joint, graphs = False, {}
                notes.append(f"ranks not joined: their graphs exceed {MAX_JOINT_NODES:,} nodes; each solved alone")
        if best is None or path.length_us > best[1].length_us:
            best = (rank, path, graph, kernels, host, built)
    if joint:
        pairs = p2p_instances(p2p, collectives)
        parts = [c for c in (collectives, pairs) if c is not None and len(c)]
        joint = bool(parts)
        matched = pd.concat([c[list(pairs.columns)] for c in parts], ignore_index=True) if parts else None
    if joint:
        graph = join_ranks(graphs, matched)
        path = longest_path(graph)
        segs, pays, rank = segments(graph, path), [], None
    else:
        rank, path, graph, kernels, host, built = best
        segs = segments(graph, path, rank)
        causal = built if exact else build_graph(kernels, host, window, zero_weight_launches=True)
        pays = where_optimisation_pays(causal, roofline)
    facts = {
        "window": graph.window,
        "convention": convention,
        "rank": rank,
        "joint_ranks": len(graphs) if joint else 1,
        "total_us": round(path.length_us, 3),
        "breakdown_pct": breakdown_pct(segs),
        "top": {level: top_entries(segs, level) for level in ("category", "op", "kernel", "module", "frame", "rank")},
        "where_optimisation_pays": pays,
        "per_rank": per_rank,
        "notes": notes + graph.notes,
    }
    return CriticalPathResult(segs, facts)
