"""The critical path of an ingest output for `atlas report`: each rank's graph solved, ranks
joined at their matched collectives where they can be, and what a kernel at its roofline would
save end to end (`critical_path` of report.json, critical_path.parquet)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import Graph, build_graph, check_window, window_count
from kernel_atlas.analysis.critical_ranks import (
    MAX_JOINT_NODES,
    MAX_JOINT_RANKS,
    join_ranks,
    p2p_instances,
    p2p_rows,
)
from kernel_atlas.analysis.critical_segments import (
    breakdown_pct,
    breakdown_us,
    path_span,
    point_words,
    segments,
    top_entries,
)
from kernel_atlas.analysis.longest_path import Path as CriticalPath
from kernel_atlas.analysis.longest_path import longest_path, longest_path_length, solves_exactly
from kernel_atlas.analysis.relaxation import COMPILED_MIN_RUNS, warm_up
from kernel_atlas.analysis.whatif import where_optimisation_pays
from kernel_atlas.core.beside import Beside, ChildLost, Receiver, can_fork, on_a_thread, process_pool
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.host_events import host_names, load_host_events
from kernel_atlas.store.outputs import load_kernels

# traces of at least this many events (summary.json, all ranks) have their critical path solved in
# a process beside the report's own work (`CriticalPathJob`); below, the fork would cost more than it saves
BESIDE_MIN_EVENTS = 250_000
# a trace this large makes a graph of more runs than COMPILED_MIN_RUNS (~4 events a run: the
# 510 MB benchmark's 1.96 M events, 516,798 runs): the process beside compiles its relaxation at once
WARM_MIN_EVENTS = 4 * COMPILED_MIN_RUNS
# the kernel columns the graphs, their segments and the what-if read (all but these are left unread)
GRAPH_COLUMNS = (
    *("trace", "rank", "name", "kind", "ts_us", "dur_us", "device", "stream", "step", "correlation"),
    *("launch_ts_us", "launch_dur_us", "launch_thread", "graph_launch", "launcher", "module"),
    *("input_dims", "input_types", "op_mapping", "category", "cpu_op_id"),  # cpu_op_id: the what-if's op calls
    *("collective", "process_group", "process_group_ranks", "collective_seq"),
)
T = TypeVar("T")


@dataclass
class CriticalPathResult:
    segments: pd.DataFrame
    facts: dict[str, Any]


@dataclass
class SolvedPaths:
    """The paths solved, before the what-if: the result (its `where_optimisation_pays` empty) and
    the graph the what-if re-solves (None where there is none: ranks joined at their collectives)."""

    result: CriticalPathResult
    causal: Graph | None


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
    kernel rows of ranks already in memory (the report's own), not read again."""
    solved = solve_paths(out_dir, ranks, window, collectives, convention, last_step_start, loaded)
    if solved.causal is not None:
        solved.result.facts["where_optimisation_pays"] = where_optimisation_pays(solved.causal, roofline)
    return solved.result


def solve_paths(
    out_dir: Any,
    ranks: list[int],
    window: tuple[str, int] | None,
    collectives: pd.DataFrame | None = None,
    convention: str = "exact",
    last_step_start: dict[int, float | None] | None = None,
    loaded: dict[int, pd.DataFrame] | None = None,
    graph_ready: Callable[[Graph], None] | None = None,
    jobs: int = 1,
    batches: list[list[int]] | None = None,
    host_loaded: dict[int, pd.DataFrame | None] | None = None,
) -> SolvedPaths:
    """`analyse_output` but the what-if, which alone needs the roofline. `graph_ready(graph)`: told
    of the what-if's graph (one rank, the exact convention) as soon as it is built and its solver
    set up, before its path is walked and described. `jobs`: processes that solve ranks that are
    each solved alone (more than MAX_JOINT_RANKS), each its length; the longest is then solved
    again here for its path. `batches`: those ranks in order, in groups whose kernel rows are read
    together (`ranks.rank_batches`: small ranks), else each alone. `host_loaded`: host events of
    ranks already read, by rank (None: none recorded), not read again."""
    joint = 1 < len(ranks) <= MAX_JOINT_RANKS
    exact = convention == "exact"
    per_rank, graphs, best, notes, p2p = [], {}, None, [], []
    solved = ranks
    lengths = (
        None
        if joint or loaded
        else _lengths_in_parallel(out_dir, ranks, window, convention, last_step_start, jobs, batches)
    )
    if lengths is not None:  # the longest, the first of equals as below
        per_rank = [{"rank": rank, "total_us": round(length, 3)} for rank, length in zip(ranks, lengths, strict=True)]
        solved = [ranks[int(np.argmax(lengths))]]
    for rank in solved:
        if loaded and rank in loaded:
            kernels = loaded[rank][[c for c in loaded[rank].columns if c in GRAPH_COLUMNS]]
        else:
            kernels = load_kernels(out_dir, [rank] if len(ranks) > 1 else None, GRAPH_COLUMNS)
        if joint:
            p2p.append(p2p_rows(kernels, rank))
        host = host_loaded[rank] if host_loaded and rank in host_loaded else load_host_events(out_dir, rank)
        cut = (last_step_start or {}).get(rank)
        # the exact graph is built once with the what-if's causal edges, then solved as if without
        # them (they weigh -inf in `path_weight`): one graph, one solver set-up for the path and the what-if
        graph = _rank_graph(kernels, host, window, convention, cut, rank if len(ranks) > 1 else None)
        if graph_ready is not None and exact and len(ranks) == 1:
            solves_exactly(graph)  # the solver's set-up, shared by the path and the what-if
            graph_ready(graph)
        path = longest_path(graph, graph.path_weight())
        if lengths is None:
            per_rank.append({"rank": rank, "total_us": round(path.length_us, 3)})
        if joint:
            graphs[rank] = graph.without_causal_edges()  # joined at the collectives, solved once
            if sum(g.n_nodes for g in graphs.values()) > MAX_JOINT_NODES:  # memory: solve rank by rank
                joint, graphs = False, {}
                notes.append(f"ranks not joined: their graphs exceed {MAX_JOINT_NODES:,} nodes; each solved alone")
        if best is None or path.length_us > best[1].length_us:
            best = (rank, path, graph, kernels, host)
    if joint:
        p2p_notes: list[str] = []  # said where the ranks are joined
        pairs = p2p_instances(p2p, collectives, p2p_notes)
        parts = [c for c in (collectives, pairs) if c is not None and len(c)]
        joint = bool(parts)
        matched = pd.concat([c[list(pairs.columns)] for c in parts], ignore_index=True) if parts else None
    if joint:
        graph = join_ranks(graphs, matched)
        path = longest_path(graph)
        if not path.converged:  # collectives matched across ranks of other clocks or runs: cycles in time
            joint = False
            notes.append(NOT_JOINED_CYCLES)
        else:
            notes.extend(p2p_notes)
    if joint:
        segs, causal, rank = segments(graph, path), None, None
    else:
        rank, path, graph, kernels, host = best
        segs = segments(graph, path, rank, graph.path_weight())
        causal = graph if exact else build_graph(kernels, host, window, zero_weight_launches=True)
    span, span_notes = path_span(graph, path)  # a path that leaves much of the window out says why
    span_notes.extend(ends_later(graph, path))  # a chain that starts late may hold the end: said
    facts = {
        "window": graph.window,
        "convention": convention,
        "rank": rank,
        "joint_ranks": len(graphs) if joint else 1,
        "total_us": round(path.length_us, 3),
        "span": span,
        "breakdown_pct": breakdown_pct(segs),
        "breakdown_us": breakdown_us(segs),
        "top": {level: top_entries(segs, level) for level in ("category", "op", "kernel", "module", "frame", "rank")},
        "where_optimisation_pays": [],  # the what-if's, filled in by `analyse_output`
        "per_rank": per_rank,
        "notes": notes + graph.notes + span_notes,
    }
    return SolvedPaths(CriticalPathResult(segs, facts), causal)


def ends_later(graph: Graph, path: CriticalPath) -> list[str]:
    """A note where, measured from the window's start (`Graph.origin_us`: every chain — a host
    thread, an activity of no launch — starting at its own time), another chain reaches the end
    later than the path's first point plus its weight: the path is the heaviest chain, compared by
    weight alone (HTA's rule, which keeps a stream's serial work on it where a thread nothing ties
    to it launches late), so it need not be what holds the run's end; the what-if and the
    end-to-end savings measure from the window's start and follow the chain that does. One
    relaxation pass more (the solver is the path's), without predecessors; a second, walking the
    later chain back for the note's words, only where there is one."""
    origin = graph.origin_us()
    if origin is None or not len(path.edges):
        return []
    own = max(float(graph.node_ts[graph.src[path.edges[0]]]) - origin, 0.0) + path.length_us
    if longest_path_length(graph, graph.path_weight(), origin=origin) - own <= 1e-6 * max(1.0, abs(own)):
        return []
    timed = longest_path(graph, graph.path_weight(), origin=origin)
    later = timed.end_us - own
    if not len(timed.edges):
        return []
    first, last = int(graph.src[timed.edges[0]]), int(graph.dst[timed.edges[-1]])
    return [
        f"measured from the window's start, another chain reaches the end {later:,.1f} µs later than this path's "
        f"start and weight: {timed.length_us:,.1f} µs of work from {point_words(graph, first)}, "
        f"{timed.lead_us:,.1f} µs in, to {point_words(graph, last)}. The path is the heaviest chain, each chain "
        "counted from 0 wherever it starts (HTA's rule), so speeding its work up need not move the run's end: the "
        "what-if and the end-to-end savings (where optimisation pays, the kernel findings) follow the chain that ends "
        "last"
    ]


NOT_JOINED_CYCLES = (
    "ranks not joined: the collectives matched across them make cycles in time (clocks that disagree, "
    "or traces of different runs), so no longest path exists; each rank solved alone"
)


# ranks solved alone are solved in parallel (`jobs`) only when there are at least this many: a
# pool's start costs more than a few ranks' paths
PARALLEL_MIN_RANKS = 8


def _lengths_in_parallel(
    out_dir: Any,
    ranks: list[int],
    window: tuple[str, int] | None,
    convention: str,
    last_step_start: dict[int, float | None] | None,
    jobs: int,
    batches: list[list[int]] | None = None,
) -> list[float] | None:
    """Each rank's critical path length alone, ranks solved by `jobs` processes (each batch of
    ranks read, built and solved in one of them: the memory of `jobs` batches at a time); None
    where that does not pay (one process, few ranks) or no process can be had — then they are
    solved in turn. `batches` (consecutive ranks, `ranks` in order) have their kernel rows read
    at once (a batch's memory is bounded as the analyses' is): 12.5 → 10.3 ms a tiny rank."""
    if jobs < 2 or len(ranks) < PARALLEL_MIN_RANKS or not can_fork():
        return None
    if batches is None or [rank for batch in batches for rank in batch] != ranks:
        batches = [[rank] for rank in ranks]
    share = -(-len(ranks) // (4 * jobs))  # at least four batches a process: the processes share the work evenly
    batches = [batch[i : i + share] for batch in batches for i in range(0, len(batch), share)]
    cuts = [[(last_step_start or {}).get(rank) for rank in batch] for batch in batches]
    try:
        with process_pool(min(jobs, len(batches))) as pool:
            chunk = max(1, len(batches) // (4 * jobs))
            solve = partial(_batch_lengths, out_dir, window=window, convention=convention)
            return [length for lengths in pool.map(solve, batches, cuts, chunksize=chunk) for length in lengths]
    except (BrokenProcessPool, OSError):  # a process lost (killed for memory) or none to be had: in turn
        return None


def _batch_lengths(
    out_dir: Any, batch: list[int], cuts: list[float | None], window: tuple[str, int] | None, convention: str
) -> list[float]:
    """The critical path length of each rank of `batch` alone, their kernel rows read at once and
    each rank's graph built from its own, as `solve_paths` builds it."""
    kernels = load_kernels(out_dir, batch, GRAPH_COLUMNS)
    rows = kernels.groupby("rank", observed=True, sort=False).indices
    lengths = []
    for rank, cut in zip(batch, cuts, strict=True):
        mine = kernels.iloc[rows.get(rank, [])].reset_index(drop=True)
        graph = _rank_graph(mine, load_host_events(out_dir, rank), window, convention, cut, rank)
        lengths.append(longest_path(graph, graph.path_weight()).length_us)
    return lengths


def check_window_of_ranks(out_dir: Path, ranks: list[int], window: tuple[str, int] | None) -> None:
    """Every rank has the range `window` names (its NAME's K-th), checked on the host events'
    names alone before the report replaces anything: a refused `--window` had removed the earlier
    report's manifest and left its other files. A table that cannot be read is left to the path's
    own reading, which refuses it."""
    import pyarrow as pa

    if window is None:
        return
    for rank in ranks:
        try:
            names = host_names(out_dir, rank)
        except (OSError, ValueError, KeyError, pa.ArrowException):
            return
        try:
            check_window(window_count(names, window[0]), window)
        except AtlasError as error:
            raise _of_rank(error, rank if len(ranks) > 1 else None) from None


def _rank_graph(
    kernels: pd.DataFrame,
    host: pd.DataFrame | None,
    window: tuple[str, int] | None,
    convention: str,
    cut: float | None,
    rank: int | None = None,
) -> Graph:
    """One rank's graph as its path is solved (exact: zero-weight launches and the causal edges).
    `rank`: the rank, named in a refusal (a `--window` that one rank of several lacks), None
    where the run has one."""
    exact = convention == "exact"
    try:
        return build_graph(
            kernels, host, window, zero_weight_launches=exact, convention=convention, last_step_start_us=cut
        )
    except AtlasError as error:
        raise _of_rank(error, rank) from None


def _of_rank(error: AtlasError, rank: int | None) -> AtlasError:
    """A refusal naming the rank it is of (`rank`: None where the run has one)."""
    return error if rank is None else AtlasError(error.source, f"rank {rank}: {error.problem}")


@dataclass
class Finished(Generic[T]):
    value: T  # `finish`'s
    facts: dict[str, Any]  # the critical path's, the what-if's savings included


@dataclass(frozen=True)
class _PathQuestion:
    """What a critical path is asked of (`analyse_output`'s arguments but the roofline)."""

    out_dir: Path
    ranks: list[int]
    window: tuple[str, int] | None
    collectives: pd.DataFrame | None
    convention: str
    last_step_start: dict[int, float | None] | None
    loaded: dict[int, pd.DataFrame] | None  # kernel rows read before the question was asked
    jobs: int = 1  # processes for ranks solved alone
    batches: list[list[int]] | None = None  # those ranks in groups read together (`solve_paths`)
    host_loaded: dict[int, pd.DataFrame | None] | None = None  # host events read before it, likewise

    def solve(self, graph_ready: Callable[[Graph], None] | None = None) -> SolvedPaths:
        return solve_paths(
            self.out_dir,
            self.ranks,
            self.window,
            self.collectives,
            self.convention,
            self.last_step_start,
            self.loaded,
            graph_ready,
            self.jobs,
            self.batches,
            self.host_loaded,
        )


class _ForkedWhatIf:
    """Where optimisation pays, solved in a process forked from the one that built the graph
    (it inherits the graph and its solver): started by `start` once the graph is ready if the
    roofline has come by then — else the report is the longer side (a GPU-only trace of 466k
    kernels), and waiting for it would hold the path up: the what-if is then solved after the
    path, where it was; solved in place too if its process is lost."""

    def __init__(self, receive: Receiver) -> None:
        self._receive = receive
        self._received = False
        self._roofline: pd.DataFrame | None = None
        self._forked: Beside[list[dict[str, Any]]] | None = None

    @property
    def started(self) -> bool:
        return self._forked is not None

    def roofline(self) -> pd.DataFrame | None:
        """The roofline the report sends (received once, kept)."""
        if not self._received:
            self._roofline, self._received = self._receive(), True
        return self._roofline

    def start(self, graph: Graph) -> None:
        if not can_fork() or not self._receive.ready():
            return
        try:
            sent = self.roofline()
        except EOFError:  # the report failed and will send none: the path is still solved
            return
        try:
            self._forked = Beside(lambda _: where_optimisation_pays(graph, sent))
        except OSError:  # no process to be had (a process limit, memory): solved here after the path
            self._forked = None

    def result(self, graph: Graph) -> list[dict[str, Any]]:
        assert self._forked is not None
        try:
            return self._forked.result()
        except ChildLost:
            return where_optimisation_pays(graph, self.roofline())

    def stop(self) -> None:
        if self._forked is not None:
            self._forked.stop()


class CriticalPathJob(Generic[T]):
    """`analyse_output` for `atlas report`, started before the roofline exists, with `finish` (what
    the report makes of the solved paths: files, what its page draws), run where the paths are solved.
    On a large trace (BESIDE_MIN_EVENTS) with a second CPU that is a forked process: it reads the
    host events and kernel rows not `host_loaded` and `loaded` already (those it inherits at the fork), solves
    the paths, runs `finish` on a thread while it waits for the roofline and solves the what-if,
    and hands back `finish`'s value (which must pickle) and the facts — never the path's segments
    (a 500 MB trace's are ~60 MB). Else, and if that process is lost, the same is done here when
    `result` is asked for, from the same rows."""

    def __init__(
        self,
        out_dir: Path,
        ranks: list[int],
        window: tuple[str, int] | None,
        collectives: pd.DataFrame | None,
        convention: str,
        last_step_start: dict[int, float | None] | None,
        events: int,
        finish: Callable[[CriticalPathResult], T],
        loaded: dict[int, pd.DataFrame] | None = None,
        jobs: int = 1,
        batches: list[list[int]] | None = None,
        host_loaded: dict[int, pd.DataFrame | None] | None = None,
    ) -> None:
        self._question = _PathQuestion(
            out_dir, ranks, window, collectives, convention, last_step_start, loaded, jobs, batches, host_loaded
        )
        self._finish = finish
        self._roofline: pd.DataFrame | None = None
        self._beside: Beside[Finished[T]] | None = None
        self._warm = events >= WARM_MIN_EVENTS  # the relaxation compiled while the graph is built
        if events >= BESIDE_MIN_EVENTS and can_fork():
            try:
                self._beside = Beside(self._solve_beside, may_fork=True)
            except OSError:  # no process to be had (a process limit, memory): solved here when asked for
                self._beside = None

    def _solve_beside(self, receive: Receiver) -> Finished[T]:
        """What the process beside does: all of it, the roofline received from the report — the
        what-if of one rank in a process of its own, forked as soon as its graph is ready, while
        this one walks and describes the path and writes its files (the two took 1.2 s after
        the report's own work had ended, on a 510 MB trace)."""
        early = _ForkedWhatIf(receive)
        if self._warm:
            warm_up()
        try:
            return self._work(receive, early)
        finally:
            early.stop()

    def _work(self, roofline: Callable[[], pd.DataFrame | None], early: _ForkedWhatIf | None = None) -> Finished[T]:
        """The paths solved and finished, the what-if solved meanwhile once `roofline()` gives
        the roofline (by `early`'s process where it started one). An error of `finish` is raised
        before one of the what-if (which, when `finish` failed first, may only have ended
        because nobody will send the roofline)."""
        solved = self._question.solve(early.start if early is not None else None)
        facts = solved.result.facts
        finishing = on_a_thread(self._finish, solved.result)  # where no thread is to be had: here, first
        try:
            if solved.causal is not None and early is not None and early.started:
                facts["where_optimisation_pays"] = early.result(solved.causal)
            elif solved.causal is not None:
                solves_exactly(solved.causal)  # the what-if solver's set-up needs no roofline: done before it
                received = early.roofline() if early is not None else roofline()
                facts["where_optimisation_pays"] = where_optimisation_pays(solved.causal, received)
        finally:
            value = finishing.result()
        return Finished(value, facts)

    def roofline_ready(self, roofline: pd.DataFrame | None) -> None:
        self._roofline = roofline
        if self._beside is not None:
            self._beside.send(roofline)

    def result(self) -> Finished[T]:
        """`finish`'s value and the facts."""
        if self._beside is not None:
            beside, self._beside = self._beside, None
            try:
                return beside.result()
            except ChildLost:
                pass  # e.g. killed for memory: solved here instead
            finally:
                beside.stop()  # only when it failed: its result was taken otherwise
        return self._work(lambda: self._roofline)

    def __enter__(self) -> CriticalPathJob[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        """A solve beside that was not asked for (the report failed first) is stopped."""
        if self._beside is not None:
            self._beside.stop()
            self._beside = None
