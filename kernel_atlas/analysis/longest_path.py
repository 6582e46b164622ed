"""The longest path through a critical-path graph (`critical_path.Graph`): the heaviest path,
found by relaxing the graph's chains, contracted to one edge each, in time order — one pass
when no edge goes back in time. What every solve of one graph shares is worked out once and
kept with the graph, so a what-if re-solves it with new weights at the cost of the pass alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernel_atlas.analysis.critical_path import Graph
from kernel_atlas.analysis.relaxation import Passes, python_passes, use_compiled


@dataclass
class Path:
    length_us: float
    edges: np.ndarray  # edge indices on the path, in time order
    # False where the runs going back in time form a cycle of positive weight: the relaxation
    # never settles, its distances grow with every pass, and `length_us` is the weight of the
    # path walked back from the farthest node (cycle cut), not a longest path
    converged: bool = True
    # solved from an origin (`origin_us`): the time from the origin to the path's first node, where
    # its chain starts (0 without one); `lead_us + length_us` is when the path ends, from the origin
    lead_us: float = 0.0

    @property
    def end_us(self) -> float:
        """When the path ends, from the origin it was solved from (its length without one)."""
        return self.lead_us + self.length_us


def _node_order(graph: Graph, nodes: np.ndarray) -> np.ndarray:
    """Each of `nodes` (ascending node numbers)'s position among them in time order; at equal
    times GPU ends first, then host points in call-stack order, then GPU starts — the order of
    every edge but rare clock disagreements. Only the nodes some run touches are ordered: the
    order among them is the order of the whole graph's nodes, restricted to them."""
    cls = np.ones(len(nodes), np.int8)
    gpu = nodes >= 2 * graph.n_host
    cls[gpu] = np.where(nodes[gpu] % 2 == 1, 0, 2)
    tie = graph.node_tie[nodes] if graph.node_tie is not None else np.zeros(len(nodes), np.int64)
    position = np.empty(len(nodes), np.int64)
    position[np.lexsort((tie, cls, graph.node_ts[nodes]))] = np.arange(len(nodes))
    return position


# the distances and predecessors of a relaxation: lists, or arrays where it ran compiled
Distances = list[float] | np.ndarray
Predecessors = list[int] | np.ndarray


@dataclass
class _Runs:
    """The graph with its chains contracted: a node with one edge in and one out is passed
    through, so each run of such edges becomes one edge (most of the graph: the calls of a thread
    between launches, the kernels of a stream)."""

    on_run: np.ndarray  # the original edges on a run, ascending (those on a cycle are not)
    run_of: np.ndarray  # and the run each belongs to (index into heads)
    heads: np.ndarray  # first edge of each run
    tail_dst: np.ndarray  # per run (aligned with heads), the node the run ends at
    members: np.ndarray  # original edges grouped by run, in order along it
    bounds: np.ndarray  # members[bounds[k]:bounds[k+1]] are run k's edges


def _contract(graph: Graph) -> _Runs:
    n, src, dst = graph.n_nodes, graph.src, graph.dst
    e = len(src)
    indeg, outdeg = np.bincount(dst, minlength=n), np.bincount(src, minlength=n)
    through = (indeg == 1) & (outdeg == 1)
    if graph.causal is not None and graph.causal.any():  # runs stop at a what-if's causal edges: each
        # is a run of its own, so that weighing them -inf (`Graph.path_weight`) cuts only them
        through[src[graph.causal]] = through[dst[graph.causal]] = False
    in_edge = np.full(n, -1, np.int64)
    in_edge[dst] = np.arange(e)
    prev = np.where(through[src], in_edge[src], -1)  # the one edge before, inside a run
    root, depth = _run_heads(prev)
    heads = np.flatnonzero(prev < 0)
    ends = np.flatnonzero(~through[dst] & (root >= 0))
    tail_dst = np.full(e, -1, np.int64)
    tail_dst[root[ends]] = dst[ends]
    run_index = np.full(e, -1, np.int64)
    run_index[heads] = np.arange(len(heads))
    on = np.flatnonzero(root >= 0)
    run_of = run_index[root[on]]
    # members grouped by run, each at its depth along it (a head is at depth 0): no sort needed
    bounds = np.zeros(len(heads) + 1, np.int64)
    np.cumsum(np.bincount(run_of, minlength=len(heads)), out=bounds[1:])
    members = np.empty(len(on), np.int64)
    members[bounds[run_of] + depth[on]] = on
    return _Runs(on, run_of, heads, tail_dst[heads], members, bounds)


def _run_heads(prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per edge, the first edge of its run (-1: on a cycle of pass-through nodes) and its depth
    along the run, from each edge's predecessor `prev` (-1: a run's first edge).

    Edges that follow the edge just before them in the array (a thread's calls are added in
    order) form blocks; pointer doubling runs over the blocks, each pointing at the block of its
    first edge's predecessor, only over those whose root is not yet a run's head."""
    e = len(prev)
    index = np.arange(e)
    starts = (prev < 0) | (prev != index - 1)
    first = np.flatnonzero(starts)  # each block's first edge
    block = np.cumsum(starts) - 1
    offset = index - first[block]  # an edge's depth inside its block
    before = prev[first]  # the edge each block continues (-1: it starts a run)
    b_root = np.where(before < 0, np.arange(len(first)), block[np.maximum(before, 0)])
    b_depth = np.where(before < 0, 0, offset[np.maximum(before, 0)] + 1)
    active = np.flatnonzero(before[b_root] >= 0)  # blocks whose root is not yet a run's first block
    for _ in range(64):
        if not len(active):
            break
        jump = b_root[active]
        b_depth[active] += b_depth[jump]
        b_root[active] = b_root[jump]
        active = active[before[b_root[active]] >= 0]
    head = np.where(before[b_root] < 0, first[b_root], -1)  # still inside a run: a cycle
    return head[block], b_depth[block] + offset


@dataclass
class _Solver:
    """What every solve of one graph shares, worked out once: the contracted runs in the order
    they are relaxed, their ends as compact node numbers (only nodes some run touches), how
    many runs go back in time, and the compiled relaxation where the graph is large enough for it
    (`relaxation`): then the runs' ends, weights and distances are arrays, else Python lists."""

    runs: _Runs
    order: np.ndarray  # runs in relaxation order (the time order of their ends)
    src: list[int] | np.ndarray  # per run in that order: compact start and end node
    dst: list[int] | np.ndarray
    n_compact: int
    backward: int
    nodes: np.ndarray  # the graph's node of each compact node
    dst_array: np.ndarray  # `dst` as an array (which nodes a run enters: `_starts`)
    compiled: Passes | None = None  # the compiled passes, None: the Python loop over lists


def _solver(graph: Graph) -> _Solver:
    if graph.solver is not None:
        return graph.solver
    runs = _contract(graph)
    k = len(runs.heads)
    # compact numbers keep the nodes' order, so the first node of largest distance stays the first
    # (the nodes a run touches, numbered in order by a mark and a running count: no sort)
    ends = np.concatenate([graph.src[runs.heads], runs.tail_dst])
    touched = np.zeros(graph.n_nodes, bool)
    touched[ends] = True
    nodes = np.flatnonzero(touched)
    compact = (np.cumsum(touched) - 1)[ends]
    c_src, c_dst = compact[:k], compact[k:]
    position = _node_order(graph, nodes)
    order = np.argsort(position[c_dst], kind="stable")
    backward = int(np.count_nonzero(position[c_src] >= position[c_dst]))
    compiled = use_compiled(k)  # compiled here, once per process: before a what-if's process is forked
    src, dst = c_src[order], c_dst[order]
    if compiled is None:
        solver = _Solver(runs, order, src.tolist(), dst.tolist(), len(nodes), backward, nodes, dst)
    else:
        src, dst = np.ascontiguousarray(src, np.int64), np.ascontiguousarray(dst, np.int64)
        solver = _Solver(runs, order, src, dst, len(nodes), backward, nodes, dst, compiled)
    graph.solver = solver
    return solver


def _run_weights(solver: _Solver, w: np.ndarray) -> np.ndarray:
    """Each run's weight, the sum of its edges' (summed in edge order), runs in relaxation order."""
    runs = solver.runs
    return np.bincount(runs.run_of, weights=w[runs.on_run], minlength=len(runs.heads))[solver.order]


def _weights_as_used(solver: _Solver, weights: np.ndarray) -> list[float] | np.ndarray:
    """The runs' weights as the relaxation reads them: an array for the compiled loop, else a list."""
    return weights.tolist() if solver.compiled is None else np.ascontiguousarray(weights, np.float64)


def _starts(graph: Graph, solver: _Solver, ws: np.ndarray, origin: float | None) -> list[float] | np.ndarray:
    """Each compact node's distance before any run reaches it: 0 without an origin (HTA's graph:
    every chain starts at 0, wherever it starts in time); from `origin`, a chain's first node —
    one no run of finite weight enters: a host thread's first point, an activity of no launch first
    on its stream — starts at its time after the origin, as if a source at the origin had an edge
    to it weighing that offset. Chains that start late are then compared by when they end, not by
    their weight alone: a thread starting at 100 µs with 100 µs of work holds the end of a run
    over one starting at 0 with 150 (campaign BV 1)."""
    if origin is None:
        return [0.0] * solver.n_compact if solver.compiled is None else np.zeros(solver.n_compact)
    entered = np.zeros(solver.n_compact, bool)
    entered[solver.dst_array[np.isfinite(ws)]] = True
    lead = np.maximum(graph.node_ts[solver.nodes] - origin, 0.0)
    start = np.where(entered, 0.0, lead)  # float64, as node_ts
    return start.tolist() if solver.compiled is None else start


def _relax(
    graph: Graph,
    w: np.ndarray,
    max_passes: int,
    with_pred: bool,
    run_weights: list[float] | np.ndarray | None = None,
    origin: float | None = None,
    start: list[float] | np.ndarray | None = None,
) -> tuple[Distances, Predecessors, _Solver, bool, Distances]:
    """The heaviest distance to every compact node over the contracted graph, each node's
    incoming run with `with_pred` (index into the solver's order, -1 none; see `longest_path`),
    whether the distances settled (a last pass changed nothing), and each node's distance before
    the pass (`_starts`: its time after `origin` where it starts a chain, else 0). `run_weights`:
    the runs' weights under `w`, in relaxation order, where the caller has them (`Reweighing`);
    `start`: the nodes' starting distances, where the caller has them (`Reweighing`). Lists, or
    arrays where the solver relaxes compiled (`_Solver.compiled`)."""
    solver = _solver(graph)
    if run_weights is None:
        weights: np.ndarray | None = _run_weights(solver, w)
        ws = _weights_as_used(solver, weights)
    else:  # the caller's, read, never written: no copy of 0.5 M weights per solve
        weights, ws = None, run_weights
    if start is None:
        start = _starts(graph, solver, weights if weights is not None else np.asarray(ws), origin)
    passes = min(solver.backward, max_passes) + 1
    dist: Distances
    pred: Predecessors
    if solver.compiled is None:
        dist, pred = list(start), ([-1] * solver.n_compact if with_pred else [])
        changed = python_passes(solver.src, solver.dst, ws, dist, pred, with_pred, passes)
    else:
        dist = np.array(start, np.float64)
        pred = np.full(solver.n_compact if with_pred else 1, -1, np.int64)
        changed = bool(solver.compiled(solver.src, solver.dst, ws, dist, pred, with_pred, passes))
        pred = pred if with_pred else np.empty(0, np.int64)
    if changed and solver.backward:  # the passes ran out before a pass changed nothing
        note = f"{solver.backward} edges go back in time (clock disagreements); the path may be inexact"
        if note not in graph.notes:
            graph.notes.append(note)
    # one pass orders everything when nothing goes back; else a pass that changed nothing settles it
    return dist, pred, solver, not (changed and solver.backward), start


def solves_exactly(graph: Graph) -> bool:
    """Whether one pass in time order solves the graph (no run goes back in time): then lowering
    weights off a longest path cannot shorten it, and a what-if may skip that solve."""
    return graph.n_nodes == 0 or len(graph.src) == 0 or _solver(graph).backward == 0


def longest_path_length(
    graph: Graph, weight: np.ndarray | None = None, max_passes: int = 50, origin: float | None = None
) -> float:
    """`longest_path(graph, weight, origin=origin).end_us` without building the path (what-if
    savings need only the length): from `origin`, the time from it to the end the path reaches."""
    if graph.n_nodes == 0 or len(graph.src) == 0:
        return 0.0
    w = graph.weight if weight is None else weight
    return _farthest(_relax(graph, w, max_passes, with_pred=False, origin=origin)[0])


def _farthest(dist: Distances) -> float:
    """The largest distance (0 where no node has one)."""
    return float(np.max(dist)) if len(dist) else 0.0


class Reweighing:
    """One graph's longest-path length under many weightings that each differ from `weight` on a
    few edges (a what-if per candidate): the runs are weighed once, and each weighting re-weighs
    only the runs holding an edge it changes — its solve is then the relaxation pass alone, where
    summing 2.8 M edges into their runs again had cost a third of it. A changed run's weight is
    summed afresh from its edges, in the order a full weighing sums them, so every length equals
    `longest_path_length` under the whole weighting to the last bit. `origin`: solved from it
    (`longest_path`), every length then the time from it to the path's end."""

    def __init__(self, graph: Graph, weight: np.ndarray, origin: float | None = None) -> None:
        self.graph, self.weight, self.origin = graph, weight, origin
        if graph.n_nodes == 0 or len(graph.src) == 0:
            return
        solver = _solver(graph)
        runs = solver.runs
        weights = _run_weights(solver, weight)
        self._run_weights = _weights_as_used(solver, weights)
        # where each chain starts, from the origin: a candidate's weights are finite, so the runs
        # that enter a node stay those of the weighting it changes (a list's copy per solve)
        self._start = _starts(graph, solver, weights, origin)
        self._place = np.empty(len(solver.order), np.int64)  # each run's place in relaxation order
        self._place[solver.order] = np.arange(len(solver.order))
        self._run = np.full(len(graph.src), -1, np.int64)  # per edge: its run (-1: on none)
        self._run[runs.on_run] = runs.run_of

    def path(self, max_passes: int = 50) -> Path:
        """`longest_path(graph, weight, origin=origin)`, from the runs as weighed."""
        if self.graph.n_nodes == 0 or len(self.graph.src) == 0:
            return Path(0.0, np.empty(0, np.int64))
        solved = _relax(self.graph, self.weight, max_passes, True, self._run_weights, self.origin, self._start)
        return _walked(self.weight, *solved)

    def length(self, edges: np.ndarray, weights: np.ndarray, max_passes: int = 50) -> float:
        """The longest path's length (from the origin: its end) with each of `edges` (distinct)
        weighing `weights` instead."""
        graph = self.graph
        if graph.n_nodes == 0 or len(graph.src) == 0:
            return 0.0
        solver = _solver(graph)
        edges = np.asarray(edges, np.int64)
        changed = np.unique(self._run[edges[self._run[edges] >= 0]])
        members = np.sort(_run_members(solver.runs, changed))  # in edge order, as a full weighing sums
        w = self.weight[members]
        by_edge = np.argsort(edges, kind="stable")
        at = np.minimum(np.searchsorted(edges[by_edge], members), len(edges) - 1)
        given = edges[by_edge][at] == members
        w[given] = np.asarray(weights, np.float64)[by_edge][at[given]]
        sums = np.bincount(np.searchsorted(changed, self._run[members]), weights=w, minlength=len(changed))
        run_weights = self._run_weights.copy()
        if isinstance(run_weights, np.ndarray):
            run_weights[self._place[changed]] = sums
        else:
            for place, total in zip(self._place[changed].tolist(), sums.tolist(), strict=True):
                run_weights[place] = total
        return _farthest(_relax(graph, self.weight, max_passes, False, run_weights, self.origin, self._start)[0])


def longest_path(
    graph: Graph, weight: np.ndarray | None = None, max_passes: int = 50, origin: float | None = None
) -> Path:
    """The heaviest path over the contracted graph: runs relaxed in the time order of their
    heads' ends (one pass when every run goes forward in that order; one going back — clocks
    that disagree — takes another pass, until nothing changes). `origin` (a time, µs): every
    chain starts at its first node's time after it (`_starts`), so the path found is the one that
    ends last; its `length_us` is still its edges' weight, `lead_us` its start after the origin.
    None: every chain starts at 0 (HTA's graph: the heaviest chain, wherever it starts)."""
    if graph.n_nodes == 0 or len(graph.src) == 0:
        return Path(0.0, np.empty(0, np.int64))
    w = graph.weight if weight is None else weight
    return _walked(w, *_relax(graph, w, max_passes, with_pred=True, origin=origin))


def _walked(
    w: np.ndarray, dist: Distances, pred: Predecessors, solver: _Solver, converged: bool, start: Distances
) -> Path:
    """The path a relaxation under weights `w` found, walked back from the first node of largest
    distance; its length is that distance less the one its first node started at (`start`)."""
    if not len(dist):
        return Path(0.0, np.empty(0, np.int64))
    dist_a = np.asarray(dist)
    # the first node of largest distance that a run reaches: a chain's first node, started at its
    # time after the origin, ties with the end of its own chain where that adds nothing (else the first)
    top = dist_a == dist_a.max()
    reached = top & (np.asarray(pred) >= 0) if len(pred) else top
    node = int(np.argmax(reached if reached.any() else top))
    back = pred.tolist() if isinstance(pred, np.ndarray) else pred  # a walk of ~10^5 steps: over lists
    src = solver.src.tolist() if isinstance(solver.src, np.ndarray) else solver.src
    walked: list[int] = []  # the runs walked back, in relaxation order's numbers
    seen: set[int] = set()
    while back[node] >= 0 and node not in seen:
        seen.add(node)
        i = back[node]
        walked.append(i)
        node = src[i]
    walked.reverse()
    edges = _run_members(solver.runs, solver.order[np.asarray(walked, np.int64)])
    lead = float(start[node])  # where the walk back stopped: no run improved it
    if converged:
        return Path(float(dist_a.max()) - lead, edges, lead_us=lead)
    return Path(float(w[edges].sum()) if len(edges) else 0.0, edges, converged=False, lead_us=lead)


def _run_members(runs: _Runs, chosen: np.ndarray) -> np.ndarray:
    """The original edges of runs `chosen`, run after run, each in order along it (one gather)."""
    starts, ends = runs.bounds[chosen], runs.bounds[chosen + 1]
    lengths = ends - starts
    if not lengths.sum():
        return np.empty(0, np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return runs.members[offsets + np.arange(int(lengths.sum()))].astype(np.int64, copy=False)
