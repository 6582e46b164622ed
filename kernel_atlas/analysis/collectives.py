"""Collectives across ranks: which rank every collective waits for, and how long — DuckDB
queries over the kernels dataset, so the driver never holds the fleet's rows.

* **Instances.** A collective kernel (category `communication`, point-to-point excluded; a gather
  or scatter, whose SendRecv kernel is labelled `send_recv`, counts where its record names it) is
  one rank's part of one instance. Instances are matched across ranks by process group (its name,
  and its members where ranks list different ones under one name) and sequence number: the `Seq`
  that PyTorch records on `record_param_comms` (copied to the kernel by newer Kineto;
  `collective_seq`) wherever a kernel has one — kernels without one in a group where others have
  one are paired by time with the instances matched by Seq (`_pair_unrecorded`) — else the
  kernel's position among its rank's collectives of that process group (which assumes every rank's
  trace starts at the same collective — ranks that disagree on what an instance is are counted as
  `mismatched`). A group matched by position whose ranks' ends, once the clocks are aligned, lie
  further apart than half the time to the next instance (a trace lacks one collective of the
  others) is paired again by time, or refused and counted as mismatched where that pairs too few
  or is ambiguous (`_pair_again`).
* **Clocks.** Ranks on different hosts have different clocks. Every rank of an instance leaves
  it at (nearly) the same moment — nobody finishes an all-reduce before the last rank's data
  is in — so each rank's offset is estimated from end times: alternately, an instance's end is
  the median of its ranks' ends minus their offsets, and a rank's offset the median of its
  ends minus the instances' ends; rank offsets are relative to the lowest rank. The residual
  spread of end times after alignment is the alignment's precision (`noise_us`).
* **Per row** (`collectives.parquet`, one per rank per instance): start on the common clock,
  `skew_us` = latest − earliest start of the instance, `wait_us` = latest start − this rank's
  start (its time in the kernel before the last rank arrived, at most its duration), `late_us`
  = its start − the instance's median start, bandwidths over the time after the last arrival.
* **Stragglers.** An instance has a clear last rank when the latest arrival leads the second
  latest by more than `noise_us` and, among three ranks or more, the median arrival by more
  than the arrival jitter (3σ of the ranks' lateness, each rank's about its own median in the
  process group — a rank's fixed lateness is no jitter —, by its median absolute deviation over
  instances of three ranks or more; of two, the lead over the other rank is the whole test).
  Under no straggler, each of the n ranks is that last rank with probability 1/n; a rank is a
  straggler when it is last so often that the binomial tail probability is below 0.01 / (number
  of ranks) (Bonferroni over the ranks).
"""

from __future__ import annotations

import math
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.taxonomy import COMMUNICATION, SEND_RECV
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import remove
from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.summary import declared_world_size
from kernel_atlas.roofline.analysis import (
    COST_OPS,
    DEFAULT_GROUP,
    GROUP_RANKS_LIST,
    ProcessGroups,
    bus_factor,
    comm_itemsize,
    process_group_entries,
    sizes_from_messages,
)
from kernel_atlas.store.limits import CLOCK_RESOLUTION_US
from kernel_atlas.store.outputs import RUN_KEY, kernels_sql, load_table, rank_files

if TYPE_CHECKING:
    import duckdb

ONE_RANK = "one rank: no cross-rank view"
SIGNIFICANCE = 0.01  # family-wise, over the ranks
MIN_NOISE_US = 1.0
HEATMAP_COLUMNS = 200  # at most this many columns (instances, or bins of consecutive instances)
HEATMAP_ROWS = 512  # at most this many ranks (the latest on average when there are more)
_ALIGN_ROUNDS = 4
_MAD_SCALE = 3.0 * 1.4826  # three standard deviations, estimated from the median absolute deviation
# recorded collective names, letters only (`Collective name`, as catalogs/launchers.toml `[collectives]` reads them):
# point-to-point transfers, not collectives
_P2P = ("send", "recv", "sendrecv", "recvanysource")
# collectives whose message differs per rank by design (uneven splits; a gather's or scatter's root holds all
# the parts): their ranks' sizes never disagree
_SIZE_PER_RANK = (
    "alltoallv",
    "gather",
    "scatter",
    "gatherv",
    "scatterv",
    "allgatherv",
    "reducescatterv",
)
_OPTIONAL = {
    "collective": "VARCHAR",
    "process_group": "VARCHAR",
    "process_group_desc": "VARCHAR",
    "process_group_ranks": "VARCHAR",
    "collective_seq": "BIGINT",
    "msg_in_nelems": "BIGINT",
    "msg_out_nelems": "BIGINT",
    "group_size": "INTEGER",
    "msg_dtype": "VARCHAR",
}

COLLECTIVE_COLUMNS = [
    "rank",
    "process_group",
    "seq",
    "collective",
    "start_us",
    "dur_us",
    "msg_bytes",
    "algbw_gbps",
    "busbw_gbps",
    "skew_us",
    "wait_us",
    "late_us",
    "last",
    "ranks",
    "group_size",
    "clock_offset_us",
    "seq_source",
    "trace",
]


@dataclass
class CrossRank:
    """The cross-rank view of a run (`note` says why there is none)."""

    ranks: int
    note: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # goes into report.json
    per_rank: pd.DataFrame | None = None  # rank, collectives, wait_us, late_count, clock_offset_us
    heatmap: pd.DataFrame | None = None  # rank × instance (or bin) lateness, µs
    path: Path | None = None


def ranks_missing(summary: dict[str, Any], ranks: list[int]) -> dict[str, Any] | None:
    """The ranks of the job that are not in this run, where every trace names one world size
    (`distributedInfo.world_size`) and at least two ranks are here — a cross-rank view that covers
    part of a job, said (a missing or failed rank went unmentioned) — with, under `outside`, the
    ranks here that a job of that size cannot hold (rank 5 of 4: another job's trace, or a wrong
    rank); where the traces name different world sizes, `world_sizes` says so and no rank is
    named missing (which job's?). None otherwise (one rank profiled alone is the usual case)."""
    if len(ranks) < 2:
        return None
    traces = [t for t in summary.get("traces", []) if isinstance(t, dict)]
    sizes = {t.get("distributed", {}).get("world_size") for t in traces}
    named = sorted({s for t in traces if (s := declared_world_size(t)) is not None and s <= 1 << 20})
    if len(named) > 1:  # traces of different jobs, or a wrong distributedInfo: said, not guessed at
        return {"world_size": None, "ranks": [], "count": 0, "world_sizes": named}
    if len(sizes) != 1 or not named:
        return None
    (world,) = named
    missing = sorted(set(range(world)) - set(ranks))
    outside = sorted(r for r in ranks if r >= world)
    if not missing and not outside:
        return None
    found: dict[str, Any] = {"world_size": world, "ranks": missing, "count": len(missing)}
    if outside:
        found["outside"] = outside
    return found


def missing_line(missing: dict[str, Any]) -> str:
    """`ranks 2, 5 of the job's 8 not in this run (…): …`, the first 16 ranks named; what the
    traces say that one job cannot be (different world sizes, a rank beyond the world size)."""
    if missing.get("world_sizes"):
        sizes = ", ".join(f"{s:,}" for s in missing["world_sizes"])
        return (
            f"the traces name different world sizes ({sizes}; distributedInfo.world_size): traces of different "
            "jobs, or a wrong distributedInfo — no one job to say which of its ranks are not in this run"
        )
    parts = []
    if missing["count"]:
        named = ", ".join(map(str, missing["ranks"][:16])) + (" …" if missing["count"] > 16 else "")
        which = "rank" if missing["count"] == 1 else "ranks"
        parts.append(
            f"{which} {named} of the job's {missing['world_size']:,} not in this run (not given, or failed to "
            "ingest): collectives, skew and stragglers cover the ranks here"
        )
    outside = missing.get("outside") or []
    if outside:
        named = ", ".join(map(str, outside[:16])) + (" …" if len(outside) > 16 else "")
        which, verb = ("rank", "is") if len(outside) == 1 else ("ranks", "are")
        parts.append(
            f"{which} {named} {verb} beyond the job's world size, {missing['world_size']:,} (ranks 0 to "
            f"{missing['world_size'] - 1:,}): traces of another job, or a wrong rank — counted among the ranks here"
        )
    return "; ".join(parts)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k, n + 1):
        term = math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
        total += term
        if i > n * p and term < total * 1e-12:
            break
    return min(total, 1.0)


def _connect(work: Path) -> duckdb.DuckDBPyConnection:
    import duckdb  # here: a one-rank report never needs it (importing it takes a while)

    con = duckdb.connect()
    con.execute(f"SET temp_directory = '{work}'")  # larger-than-memory joins spill here
    con.execute("SET memory_limit = '2GB'")
    return con


def _source_columns(con: duckdb.DuckDBPyConnection, source: str) -> set[str]:
    return {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}


def _letters(column: str) -> str:
    """SQL: a recorded collective name in letters only, lower case (`_all_to_allv` → `alltoallv`)."""
    return f"regexp_replace(lower(coalesce(CAST({column} AS VARCHAR), '')), '[^a-z]', '', 'g')"


def _load_rows(con: duckdb.DuckDBPyConnection, source: str) -> None:
    """`inst`: one row per rank per collective instance, on each rank's own clock; `loose`: the
    kernels without a recorded Seq in a process group where other kernels have one, numbered by
    their position (`_pair_unrecorded` pairs them by time)."""
    present = _source_columns(con, source)
    optional = ", ".join(
        f"{name}" if name in present else f"NULL::{kind} AS {name}" for name, kind in _OPTIONAL.items()
    )
    p2p = ", ".join(f"'{name}'" for name in _P2P)
    cost_ops = " ".join(f"WHEN '{name}' THEN '{op}'" for name, op in COST_OPS.items())
    # gather and scatter keep their kernel name's send_recv label (NCCL runs them as sends and receives);
    # the recorded name says they are collectives
    con.execute(f"""
        CREATE TEMP TABLE kern AS
        SELECT rank, CAST(trace AS VARCHAR) AS trace, ts_us, dur_us, CAST(op_mapping AS VARCHAR) AS op_mapping,
               {optional}
        FROM {source}
        WHERE kind = 'kernel' AND category = '{COMMUNICATION}'
              AND (op_mapping <> '{SEND_RECV}' OR {_letters("collective")} NOT IN ('', {p2p}))
    """)
    # a Seq is used wherever recorded: a kernel whose record_param_comms fell before the profiling window
    # lacks one, and had numbered its rank's whole group by position (matched against nothing);
    # a message size not recorded is none (NULL), not 0 elements
    # a process group is its name and, where ranks list different members under one name, those
    # members: two tensor-parallel groups [0, 1] and [2, 3] both named "1" had made one 4-rank
    # instance of each pair of theirs, no rank of either ever last (campaign BN 3). A list cut
    # short names no members; a rank's list is any its kernels of that name record
    listed = f"regexp_full_match(CAST(process_group_ranks AS VARCHAR), '{GROUP_RANKS_LIST}')"
    member_list = "replace(regexp_replace(CAST(process_group_ranks AS VARCHAR), '\\s', '', 'g'), ',', ', ')"
    con.execute(f"""
        CREATE TEMP TABLE inst_all AS
        WITH called AS (
            SELECT * FROM (
                SELECT *, coalesce(CAST(process_group AS VARCHAR), '?' || op_mapping) AS pg_name,
                       CASE WHEN {listed} THEN {member_list} END AS listed_members,
                       coalesce(CAST(collective AS VARCHAR), op_mapping) AS coll, {_letters("collective")} AS called
                FROM kern
            ) WHERE called NOT IN ({p2p})
        ), lists AS (
            SELECT rank, pg_name, max(listed_members) AS rank_members FROM called GROUP BY rank, pg_name
        ), split AS (
            SELECT pg_name FROM lists GROUP BY pg_name HAVING count(DISTINCT rank_members) > 1
        ), named AS (
            SELECT c.* EXCLUDE (listed_members),
                   CASE WHEN s.pg_name IS NOT NULL AND l.rank_members IS NOT NULL
                        THEN c.pg_name || ' ' || l.rank_members ELSE c.pg_name END AS pg
            FROM called c JOIN lists l USING (rank, pg_name) LEFT JOIN split s USING (pg_name)
        ), numbered AS (
            SELECT *, collective_seq IS NOT NULL AS recorded,
                   count(collective_seq) OVER (PARTITION BY pg) > 0 AS group_recorded,
                   row_number() OVER (PARTITION BY rank, pg ORDER BY ts_us) - 1 AS position
            FROM named
        )
        SELECT rank, pg AS process_group, pg_name,
               CASE WHEN recorded THEN collective_seq ELSE position END AS seq,
               CASE WHEN recorded THEN 'recorded' ELSE 'position' END AS seq_source,
               group_recorded AND NOT recorded AS loose,
               first(coll ORDER BY ts_us) AS collective, first(op_mapping ORDER BY ts_us) AS op_mapping,
               coalesce(CASE first(called ORDER BY ts_us) {cost_ops} END, first(op_mapping ORDER BY ts_us)) AS cost_op,
               first(called ORDER BY ts_us) IN ({", ".join(f"'{n}'" for n in _SIZE_PER_RANK)}) AS size_per_rank,
               min(ts_us) AS start_local, max(ts_us + dur_us) AS end_local,
               CASE WHEN bool_and(msg_in_nelems IS NOT NULL OR msg_out_nelems IS NOT NULL)
                    THEN sum(greatest(msg_in_nelems, msg_out_nelems)) END AS nelems,
               CASE WHEN bool_and(msg_in_nelems IS NOT NULL AND msg_out_nelems IS NOT NULL)
                    THEN sum(least(msg_in_nelems, msg_out_nelems)) END AS smaller_nelems,
               first(CAST(msg_dtype AS VARCHAR) ORDER BY ts_us) AS msg_dtype,
               max(group_size) AS recorded_size,
               first(CAST(process_group_ranks AS VARCHAR) ORDER BY ts_us) AS group_ranks,
               first(CAST(process_group_desc AS VARCHAR) ORDER BY ts_us) AS group_desc,
               first(trace ORDER BY ts_us) AS trace
        FROM numbered GROUP BY ALL
    """)
    # the group's size: recorded, else the members `Process Group Ranks` lists (a list of rank numbers:
    # the rule the roofline's `listed_group_sizes` applies)
    members = f"regexp_full_match(group_ranks, '{GROUP_RANKS_LIST}')"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE inst_all AS
        SELECT * EXCLUDE (recorded_size, group_ranks),
               coalesce(recorded_size, CASE WHEN {members} THEN len(string_split(group_ranks, ',')) END) AS group_size
        FROM inst_all
    """)
    con.execute("CREATE TEMP TABLE loose AS SELECT * EXCLUDE (loose) FROM inst_all WHERE loose")
    con.execute("CREATE TEMP TABLE inst AS SELECT * EXCLUDE (loose) FROM inst_all WHERE NOT loose")
    con.execute("DROP TABLE inst_all")


def _instances(con: duckdb.DuckDBPyConnection, refused: list[str] | None = None) -> None:
    """`ok`: instances seen on two ranks or more whose ranks agree on what they are; those of the
    `refused` process groups (`_pair_again`) are counted as mismatched. The ranks must name one
    collective; their message sizes must agree only where the instance was not matched by a Seq
    every rank recorded (a size that differs then says the positions are paired wrong) and the
    collective's size is not per rank by design (all_to_allv's splits, a gather's root). Where a
    Seq every rank recorded matched them, sizes that differ are kept and counted (`sizes_differ`:
    an all-reduce of 1 Mi elements on two ranks and 2 Mi on the third had given its rows busbw
    32 / 65 / 32 GB/s, nothing said — campaign BN 4)."""
    refusal = ""
    if refused:
        refusal = " OR process_group IN (" + ", ".join(f"'{_sql_text(g)}'" for g in refused) + ")"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE shape AS
        SELECT process_group, seq, count(*) AS ranks,
               count(DISTINCT collective) > 1
               OR (count(DISTINCT nelems) > 1 AND NOT bool_and(seq_source = 'recorded') AND NOT bool_or(size_per_rank))
               {refusal} AS mismatched,
               count(DISTINCT nelems) > 1 AND NOT bool_or(size_per_rank) AS sizes_differ
        FROM inst GROUP BY process_group, seq
    """)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE ok AS
        SELECT process_group, seq, ranks FROM shape WHERE ranks > 1 AND NOT mismatched
    """)


# a rank whose count of collectives differs from the reference rank's by more is not paired again (refused)
_MAX_SHIFTS = 64


def _pair_again(con: duckdb.DuckDBPyConnection, notes: list[str]) -> tuple[bool, list[str]]:
    """Process groups matched by position whose instances do not hold together once the clocks are
    aligned — in some instance seen on two ranks or more, agreeing or not (where message sizes or
    collectives vary, a shift by one makes most later instances disagree, and those that still
    agree can end close together), the ranks' ends lie further apart than half the time to the next
    instance (a rank's trace lacks a collective, or has one more: every later one was paired with
    the next instance, and the alignment took part of that shift for a clock offset) — are paired
    again by time (`_pairs_by_time`) or refused (their instances counted as mismatched); `notes`
    says which and why. Returns whether `inst` changed and the refused groups."""
    flagged = con.execute(f"""
        WITH a AS (
            SELECT i.process_group, i.seq, i.end_local - c.c AS e
            FROM inst i JOIN shape s USING (process_group, seq) JOIN clock c USING (rank)
            WHERE s.ranks > 1
        ), per AS (
            SELECT process_group, seq, max(e) - min(e) AS spread, median(e) AS mid FROM a GROUP BY process_group, seq
        ), spaced AS (
            SELECT *, least(mid - lag(mid) OVER w, lead(mid) OVER w - mid) AS spacing
            FROM per WINDOW w AS (PARTITION BY process_group ORDER BY mid, seq)
        ), by_position AS (
            SELECT process_group FROM inst GROUP BY process_group HAVING bool_and(seq_source = 'position')
        )
        SELECT process_group, count(*) AS instances,
               count(*) FILTER (spread > greatest(coalesce(spacing, 'infinity'::DOUBLE) / 2, {MIN_NOISE_US})) AS bad,
               max(spread) AS worst_us
        FROM spaced JOIN by_position USING (process_group)
        GROUP BY process_group HAVING bad > 0 ORDER BY process_group
    """).df()
    if not len(flagged):
        return False, []
    groups = ", ".join(f"'{_sql_text(g)}'" for g in flagged["process_group"])
    rows = con.execute(f"""
        SELECT rank, process_group, seq, start_local, end_local,
               collective || ' ' || coalesce(CAST(nelems AS VARCHAR), '?') AS shape
        FROM inst WHERE process_group IN ({groups})
    """).df()
    updates, refused = [], []
    for found in flagged.itertuples(index=False):
        group = str(found.process_group)
        part = rows[(rows["process_group"] == group).to_numpy()].reset_index(drop=True)
        seen = (
            f"process group {group}, matched by position: once the clocks are aligned its ranks' ends lie up "
            f"to {found.worst_us:,.0f} µs apart in {found.bad:,} of its {found.instances:,} instances (more than "
            "half the time to the next one)"
        )
        new_seq, ref, moved, why = _pairs_by_time(part)
        if why is not None:
            refused.append(group)
            notes.append(
                f"{seen}, and {why}: not paired — its instances are counted as mismatched (a trace lacks "
                "collectives of the others or has more; the Seq that newer PyTorch records would match them)"
            )
        elif moved:
            left = int((new_seq < 0).sum())
            dropped = f"; {left:,} of their kernels fit no instance of rank {ref} and are left out" if left else ""
            named = ", ".join(f"rank {r}" for r in moved)
            notes.append(f"{seen}: {named} paired with rank {ref}'s instances by time, not by position{dropped}")
            updates.append(part.assign(new_seq=new_seq)[["rank", "process_group", "seq", "new_seq"]])
        else:
            notes.append(f"{seen}; no pairing by time fits better than by position: kept")
    if updates:
        con.register("repaired", pd.concat(updates, ignore_index=True))
        con.execute("""
            CREATE OR REPLACE TEMP TABLE inst AS
            SELECT i.* REPLACE (coalesce(n.new_seq, i.seq) AS seq)
            FROM inst i LEFT JOIN repaired n
                 ON n.rank = i.rank AND n.process_group = i.process_group AND n.seq = i.seq
            WHERE coalesce(n.new_seq, 0) >= 0
        """)
        con.unregister("repaired")
    return bool(updates or refused), refused


def _pairs_by_time(part: pd.DataFrame) -> tuple[np.ndarray, int, list[int], str | None]:
    """One process group's rows (`rank`, `seq` = position, `start_local`, `end_local`, `shape` =
    collective and message size) paired by time with a reference rank's — the one with the most,
    the lowest of those: for each shift of a rank's positions against the reference's (up to the
    difference in their counts, and one more either way), its clock offset is the median end
    difference of the rows the shift pairs; at that offset each row is paired with the reference
    instance that ends nearest, when their kernels overlap in time (every member of a collective is
    in it when the last one arrives). The pairing that pairs the most rows is taken — of those, the
    ones that pair the most rows with an instance of the same collective and size (a trace that
    starts one collective later than the others' is told from a clock one instance apart where
    the sizes vary); kept by position where that is one of the best; refused where fewer than half
    of a rank's rows pair, or two different pairings pair as many.
    Returns each row's new seq (-1: left out), the reference, the ranks paired anew and why
    refused (None: not)."""
    sizes = part.groupby("rank").size()
    ref = int(sizes[sizes == sizes.max()].index.min())
    seq = part["seq"].to_numpy(np.int64)
    starts, ends = part["start_local"].to_numpy(np.float64), part["end_local"].to_numpy(np.float64)
    mine = np.flatnonzero(part["rank"].to_numpy() == ref)
    mine = mine[np.argsort(seq[mine], kind="stable")]
    q_start, q_end, q_seq = starts[mine], ends[mine], seq[mine]
    shape = part["shape"].to_numpy(object) if "shape" in part else np.zeros(len(part), dtype=object)
    new_seq = seq.copy()
    moved = []
    for rank, rows in sorted(part.groupby("rank").indices.items()):
        if rank == ref:
            continue
        rows = rows[np.argsort(seq[rows], kind="stable")]
        r_start, r_end = starts[rows], ends[rows]
        gap = len(mine) - len(rows)
        if abs(gap) > _MAX_SHIFTS:
            return new_seq, ref, [], f"rank {rank} has {abs(gap):,} collectives more or fewer than rank {ref}"
        best, top = _shifted(r_start, r_end, q_start, q_end)
        if 2 * best < len(rows):
            why = f"at best {best:,} of rank {rank}'s {len(rows):,} collectives pair with rank {ref}'s in time"
            return new_seq, ref, [], why
        agree = [int((shape[mine][p[p >= 0]] == shape[rows][p >= 0]).sum()) for p in top]
        top = [p for p, a in zip(top, agree, strict=True) if a == max(agree)]
        if any((q_seq[p[p >= 0]] == seq[rows][p >= 0]).all() for p in top):
            continue  # the positions pair as well as any shift
        if len(top) > 1:
            return new_seq, ref, [], f"rank {rank}'s collectives pair with rank {ref}'s as well at two shifts"
        paired = top[0]
        new_seq[rows] = np.where(paired >= 0, q_seq[np.maximum(paired, 0)], -1)
        moved.append(int(rank))
    return new_seq, ref, moved, None


def _shifted(
    r_start: np.ndarray, r_end: np.ndarray, q_start: np.ndarray, q_end: np.ndarray
) -> tuple[int, list[np.ndarray]]:
    """A rank's kernels (in time order) paired by time with reference instances (in time order) of
    unknown clock offset: for each shift of the rank's positions against the reference's (up to
    the difference in their counts, and one more either way), the offset is the median end
    difference of the rows the shift pairs, and each kernel pairs at that offset (`_overlapping`).
    Returns the most kernels any shift pairs and the distinct pairings that pair as many."""
    gap = len(q_end) - len(r_end)
    found: dict[bytes, tuple[int, np.ndarray]] = {}
    for shift in range(min(0, gap) - 1, max(0, gap) + 2):
        j = np.arange(len(r_end)) + shift
        valid = (j >= 0) & (j < len(q_end))
        if not valid.any():
            continue
        offset = float(np.median(r_end[valid] - q_end[j[valid]]))
        paired = _overlapping(r_start - offset, r_end - offset, q_start, q_end)
        found[paired.tobytes()] = (int((paired >= 0).sum()), paired)
    best = max((count for count, _ in found.values()), default=0)
    return best, [paired for count, paired in found.values() if count == best]


def _pair_unrecorded(con: duckdb.DuckDBPyConnection, notes: list[str]) -> bool:
    """Kernels without a recorded Seq in a process group where other kernels have one (`loose`: its
    record_param_comms fell before the profiling window, or an older build traced that rank) are
    paired by time with the group's instances matched by Seq, as the ranks with a known clock
    offset (matched somewhere) saw them — the last of their arrivals and the median of their ends
    on the common clock: a kernel of a rank whose offset is known pairs at that offset with the
    instance that ends nearest where they overlap in time (`_overlapping`) and that the rank has
    not recorded itself; a rank matched nowhere is shifted against the instances first
    (`_shifted`), as `_pairs_by_time` does, and left out where fewer than half of its kernels pair
    or two pairings pair as many. Kernels that pair join `inst` (seq_source `position`: no Seq);
    the others are left out; `notes` says which. Returns whether `inst` changed."""
    loose = con.execute("""
        SELECT rank, process_group, seq, start_local, end_local FROM loose ORDER BY process_group, rank, start_local
    """).df()
    if not len(loose):
        return False
    known = con.execute("""
        SELECT i.rank, i.process_group, i.seq, i.start_local - c.c AS s, i.end_local - c.c AS e
        FROM inst i JOIN clock c USING (rank)
        WHERE i.process_group IN (SELECT process_group FROM loose) AND i.seq_source = 'recorded'
    """).df()
    offsets = dict(con.execute("SELECT rank, c FROM clock").fetchall())
    matched = {
        int(r[0]) for r in con.execute("SELECT DISTINCT rank FROM inst JOIN ok USING (process_group, seq)").fetchall()
    }
    updates = []
    for group, rows in loose.groupby("process_group", sort=True):
        mine = known[(known["process_group"] == group).to_numpy()]
        by_rank = mine.groupby("rank")["seq"]
        reference = mine[mine["rank"].isin(matched).to_numpy()]
        matched_here = len(reference) > 0
        if not matched_here and len(mine):  # none of the group is matched: the rank that recorded most, alone
            counts = by_rank.size()
            reference = mine[(mine["rank"] == counts[counts == counts.max()].index.min()).to_numpy()]
        inst = reference.groupby("seq").agg(s=("s", "max"), e=("e", "median")).sort_values("e")
        paired_ranks, left, refused = [], 0, []
        for rank, part in rows.groupby("rank", sort=True):
            rank = int(rank)
            offset = float(offsets.get(rank, 0.0)) if rank in matched and matched_here else None
            own = by_rank.get_group(rank).to_numpy() if rank in by_rank.groups else np.zeros(0, np.int64)
            paired, why = _pair_loose_rank(part, inst, offset, own)
            if why is not None:
                refused.append(f"rank {rank}'s {counted(len(part), 'collective', 'collectives')}: {why}")
                continue
            hit = paired >= 0
            left += int((~hit).sum())
            paired_ranks.append(rank)
            seqs = inst.index.to_numpy(np.int64)[paired[hit]]
            seq = part["seq"].to_numpy()[hit]
            updates.append(pd.DataFrame({"rank": rank, "process_group": group, "seq": seq, "new_seq": seqs}))
        notes.extend(_unrecorded_note(str(group), len(rows), paired_ranks, left, refused))
    if not updates:
        return False
    con.register("paired", pd.concat(updates, ignore_index=True))
    con.execute("""
        INSERT INTO inst
        SELECT l.* REPLACE (p.new_seq AS seq) FROM loose l JOIN paired p USING (rank, process_group, seq)
    """)
    con.unregister("paired")
    return True


def _unrecorded_note(group: str, kernels: int, paired: list[int], left: int, refused: list[str]) -> list[str]:
    """What `_pair_unrecorded` did with one process group's kernels without a Seq (the first 16
    ranks named)."""
    what = (
        f"process group {group}: {counted(kernels, 'collective', 'collectives')} without a recorded Seq "
        "(other kernels of the group have one)"
    )
    parts = []
    if paired:
        named = ", ".join(map(str, paired[:16])) + (" …" if len(paired) > 16 else "")
        parts.append(
            f"those of rank{'s' if len(paired) > 1 else ''} {named} paired by time with the instances matched by Seq"
        )
    if left:
        parts.append(f"{counted(left, 'collective', 'collectives')} of them fit no instance and are left out")
    if refused:
        more = f" (and {len(refused) - 3:,} ranks more)" if len(refused) > 3 else ""
        parts.append("left out: " + "; ".join(refused[:3]) + more)
    return [f"{what}: {'; '.join(parts)}"] if parts else []


def _pair_loose_rank(
    part: pd.DataFrame, inst: pd.DataFrame, offset: float | None, own: np.ndarray
) -> tuple[np.ndarray, str | None]:
    """One rank's kernels without a Seq (`start_local`, `end_local`, in time order) paired with a
    group's instances (`s` last arrival, `e` end on the common clock, by seq, in end order): at
    the rank's clock `offset` where known, else at the best shift (`_shifted`); an instance the
    rank recorded itself (`own` seqs) takes none. Returns each kernel's instance (index, -1 none)
    and why none pairs (None: they were paired)."""
    start, end = part["start_local"].to_numpy(np.float64), part["end_local"].to_numpy(np.float64)
    q_start, q_end = inst["s"].to_numpy(np.float64), inst["e"].to_numpy(np.float64)
    if not len(q_end):
        return np.full(len(part), -1, np.int64), "no instance of the group to pair with"
    if offset is None:
        best, top = _shifted(start, end, q_start, q_end)
        if len(top) > 1:
            return top[0], "two shifts pair as many with the instances"
        if 2 * best < len(part):
            return top[0], f"at best {best:,} pair with the instances in time"
        return top[0], None
    paired = _overlapping(start - offset, end - offset, q_start, q_end)
    recorded = np.isin(inst.index.to_numpy(np.int64), own)
    paired[(paired >= 0) & recorded[np.maximum(paired, 0)]] = -1
    return paired, None


def _overlapping(start: np.ndarray, end: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """Per kernel [start, end], the reference kernel (index) that ends nearest it, where the two
    overlap in time (within MIN_NOISE_US) and no other kernel pairs with it more nearly; -1 none."""
    by_end = np.argsort(q_end, kind="stable")
    at = np.searchsorted(q_end[by_end], end)
    below = by_end[np.clip(at - 1, 0, len(by_end) - 1)]
    above = by_end[np.clip(at, 0, len(by_end) - 1)]
    near = np.where(np.abs(q_end[below] - end) <= np.abs(q_end[above] - end), below, above)
    fits = np.maximum(start, q_start[near]) <= np.minimum(end, q_end[near]) + MIN_NOISE_US
    distance = np.where(fits, np.abs(q_end[near] - end), np.inf)
    order = np.lexsort((distance, near))
    first = np.r_[True, near[order][1:] != near[order][:-1]]
    paired = np.full(len(end), -1, np.int64)
    chosen = order[first & np.isfinite(distance[order])]
    paired[chosen] = near[chosen]
    return paired


def _align_clocks(con: duckdb.DuckDBPyConnection) -> None:
    """`clock`: each rank's clock offset, estimated on instance end times (alternating medians),
    starting from each rank's median end against the lowest rank's on the instances they share
    (0 for a rank that shares none): a start that moves with a rank's clock, so that shifting one
    rank's timestamps shifts its offset by as much and nothing else (from zeros, the other ranks'
    offsets moved by up to 0.23 µs and a critical-path segment changed rank)."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE clock_est AS
        WITH m AS (SELECT process_group, seq, rank, end_local FROM inst JOIN ok USING (process_group, seq)),
        ref AS (SELECT process_group, seq, end_local AS e FROM m WHERE rank = (SELECT min(rank) FROM inst))
        SELECT r.rank, coalesce(median(m.end_local - ref.e), 0.0)::DOUBLE AS c
        FROM (SELECT DISTINCT rank FROM inst) r
        LEFT JOIN (m JOIN ref USING (process_group, seq)) ON m.rank = r.rank
        GROUP BY r.rank
    """)
    matched = "inst JOIN ok USING (process_group, seq) JOIN clock_est USING (rank)"
    for _ in range(_ALIGN_ROUNDS):
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE ends AS
            SELECT process_group, seq, median(end_local - c) AS e FROM {matched} GROUP BY process_group, seq
        """)
        con.execute("""
            CREATE OR REPLACE TEMP TABLE clock_next AS
            SELECT o.rank, coalesce(median(i.end_local - e.e), 0.0) AS c
            FROM clock_est o
            LEFT JOIN (inst i JOIN ends e USING (process_group, seq)) ON i.rank = o.rank
            GROUP BY o.rank
        """)
        con.execute("DROP TABLE clock_est")
        con.execute("ALTER TABLE clock_next RENAME TO clock_est")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE clock AS
        SELECT rank, c - (SELECT c FROM clock_est ORDER BY rank LIMIT 1) AS c FROM clock_est
    """)


def _rows(
    con: duckdb.DuckDBPyConnection, world_size: int | None = None, process_groups: ProcessGroups | None = None
) -> tuple[float, float]:
    """`rows`: the matched rows on the common clock with skew, wait, lateness and whether the
    rank held the instance up, and `n`, the group size of the bus factor: recorded (or the members
    `Process Group Ranks` lists), else the size the rank's process-group table gives the group's
    name (`process_groups`: `distributedInfo.pg_config`, as the roofline reads it), else the size
    its message sizes say (all_gather's Out / In: `roofline.analysis.sizes_from_messages`, the
    roofline's rule — the ranks seen had made 2 of a 4-rank all_gather's busbw 80 GB/s where
    roofline.parquet gave 120), else the job's world size for the default group, else the ranks
    seen (at most the group's size: where a rank is missing, less; `known_n` is null then);
    returns the alignment noise and the arrival jitter (µs)."""
    world = f"CASE WHEN i.group_desc = '{DEFAULT_GROUP}' THEN {int(world_size)} END" if world_size else "NULL"
    con.register("pg_sizes", process_group_entries(process_groups, world_size))  # as the roofline reads them
    con.register("message_sizes", _message_sizes(con))
    con.execute(f"""
        CREATE TEMP TABLE aligned AS
        SELECT *, coalesce(known_n, ranks) AS n FROM (
            SELECT i.*, ok.ranks, i.start_local - o.c AS start_us, i.end_local - o.c AS end_us,
                   o.c AS clock_offset_us, coalesce(i.group_size, p.size, m.size, {world}) AS known_n
            FROM inst i JOIN ok USING (process_group, seq) JOIN clock o USING (rank)
            LEFT JOIN pg_sizes p ON p.rank = i.rank AND CAST(p.process_group AS VARCHAR) = i.pg_name
            LEFT JOIN message_sizes m
                 ON m.cost_op = i.cost_op AND m.nelems = i.nelems AND m.smaller_nelems = i.smaller_nelems
        )
    """)
    con.execute("""
        CREATE TEMP TABLE inst_stats AS
        SELECT process_group, seq, max(start_us) AS last_start, min(start_us) AS first_start,
               median(start_us) AS median_start, median(end_us) AS median_end,
               arg_max(rank, start_us) AS last_rank, list_sort(list(start_us), 'DESC')[2] AS second_start,
               count(*) AS arrived
        FROM aligned GROUP BY process_group, seq
    """)
    # the arrival jitter from instances of three ranks or more: of two, each rank's lateness is
    # ±skew/2 whoever arrives last, so their spread is the skew itself and no rank could ever lead
    # by 3σ of it (a rank last in 10 of 10 instances of a 2-rank job was no straggler). Each rank's
    # lateness is taken about its own median in the group: a rank's fixed lateness is no jitter —
    # ranks arriving at −20, +30 and 0 µs at each of 20 all-reduces had made a "jitter" of 89 µs
    # out of those fixed offsets, and the rank 30 µs behind the others every time no straggler
    noise, jitter = con.execute("""
        WITH late AS (
            SELECT a.process_group, a.rank, s.arrived, a.end_us - s.median_end AS ended,
                   a.start_us - s.median_start AS late
            FROM aligned a JOIN inst_stats s USING (process_group, seq)
        ), usual AS (
            SELECT process_group, rank, median(late) AS usual FROM late WHERE arrived >= 3 GROUP BY ALL
        )
        SELECT median(abs(l.ended)), median(abs(l.late - u.usual)) FILTER (WHERE l.arrived >= 3)
        FROM late l LEFT JOIN usual u USING (process_group, rank)
    """).fetchall()[0]
    noise = max(MIN_NOISE_US, _MAD_SCALE * float(noise or 0.0))
    jitter = max(noise, _MAD_SCALE * float(jitter or 0.0))
    held_up = f"s.last_start - s.second_start > {noise} AND (s.arrived < 3 OR s.last_start - s.median_start > {jitter})"
    con.execute(f"""
        CREATE TEMP TABLE rows AS
        SELECT a.*, s.last_start - s.first_start AS skew_us,
               least(greatest(s.last_start - a.start_us, 0.0), a.end_local - a.start_local) AS wait_us,
               a.start_us - s.median_start AS late_us,
               {held_up} AS held_up, {held_up} AND a.rank = s.last_rank AS last,
               greatest(a.end_us - s.last_start, 0.0) AS transfer_us
        FROM aligned a JOIN inst_stats s USING (process_group, seq)
    """)
    return noise, jitter


def _message_sizes(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The group size the message sizes say (`sizes_from_messages`, the roofline's rule) per
    distinct (op, larger, smaller element count) of the matched rows that give one."""
    found = con.execute("""
        SELECT DISTINCT cost_op, nelems, smaller_nelems FROM inst JOIN ok USING (process_group, seq)
        WHERE nelems IS NOT NULL AND smaller_nelems IS NOT NULL
    """).df()
    ops = found["cost_op"].astype(object).to_numpy()
    larger, smaller = found["nelems"].to_numpy(np.float64), found["smaller_nelems"].to_numpy(np.float64)
    found["size"] = sizes_from_messages(ops, larger, smaller)
    return found[found["size"].notna()].astype({"size": "int64"})


def _bandwidth_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Element sizes and bus factors for the dtypes and (op, group size) pairs present: the op is
    the label's, or the recorded collective's where its nccl-tests factor differs (`COST_OPS`)."""
    dtypes = [r[0] for r in con.execute("SELECT DISTINCT msg_dtype FROM rows WHERE msg_dtype IS NOT NULL").fetchall()]
    sizes = pd.DataFrame({"msg_dtype": dtypes, "itemsize": [comm_itemsize(d) for d in dtypes]}, dtype=object)
    sizes["itemsize"] = pd.to_numeric(sizes["itemsize"])
    pairs = con.execute("SELECT DISTINCT cost_op, n FROM rows").fetchall()
    factors = pd.DataFrame(
        [(op, n, bus_factor(str(op), int(n))) for op, n in pairs], columns=["cost_op", "n", "factor"]
    )
    con.register("itemsizes", sizes)
    con.register("bus_factors", factors)


def cross_rank_view(
    out_dir: str | Path,
    ranks: list[int],
    target: Path | None = None,
    run_id: str | None = None,
    world_size: int | None = None,
    process_groups: ProcessGroups | None = None,
) -> CrossRank:
    """Match collective instances across the ranks of an ingest output; write
    `collectives.parquet` (to `target`, default OUT/collectives.parquet, tied to the ingest run
    `run_id`) and return the facts, the per-rank waits and the lateness heatmap. With one rank
    there is nothing to compare. `world_size` (the traces' `distributedInfo`) is the size of the
    default process group where its collectives record none; `process_groups` (per rank, its
    process groups' sizes by name: `store.run.process_group_sizes`) that of a named group."""
    target = target or Path(out_dir) / "collectives.parquet"
    remove(target)  # an earlier report's, when this run has none
    if len(ranks) < 2:
        return CrossRank(ranks=len(ranks), note=ONE_RANK)
    shared = [rank for rank, files in rank_files(out_dir).items() if len(files) > 1]
    if shared:
        return CrossRank(ranks=len(ranks), note=f"several traces claim rank {shared[0]}: no cross-rank view")
    import duckdb  # for `duckdb.Error` below (already loaded by `_connect`; never on one rank)

    with tempfile.TemporaryDirectory(prefix="atlas-duckdb-") as work:
        con = _connect(Path(work))
        try:
            return _cross_rank(con, kernels_sql(out_dir), len(ranks), target, run_id, world_size, process_groups)
        except duckdb.Error as exc:
            for files in rank_files(out_dir).values():  # name the file DuckDB could not read, when one is
                for file in files:
                    load_table(file)
            raise AtlasError(out_dir, f"cannot read the kernels dataset: {str(exc).strip().splitlines()[0]}") from None
        finally:
            con.close()


def _cross_rank(
    con: duckdb.DuckDBPyConnection,
    source: str,
    rank_count: int,
    target: Path,
    run_id: str | None,
    world_size: int | None = None,
    process_groups: ProcessGroups | None = None,
) -> CrossRank:
    _load_rows(con, source)
    _instances(con)
    notes: list[str] = []  # kernels paired by time (no Seq; matched by position, paired again), or refused
    total, _, _, seen_once = _counts(con)
    has_loose = bool(con.execute("SELECT count(*) FROM loose").fetchall()[0][0])
    # not only where some instance matches: where every instance disagrees (a rank lacks the first
    # collective, and sizes vary), the ranks' ends still say how to pair them
    if total > seen_once or has_loose:
        _align_clocks(con)
        if _pair_unrecorded(con, notes):
            _instances(con)
            _align_clocks(con)
        changed, refused = _pair_again(con, notes)
        if changed:
            _instances(con, refused)
            _align_clocks(con)
    total, matched, mismatched, seen_once = _counts(con)
    if not matched:
        note = "no collective is seen on two ranks" if not total else "no collective instance matches across ranks"
        counts = {"instances": 0, "mismatched_instances": mismatched, "instances_on_one_rank": seen_once}
        note = f"{note}: {'; '.join(notes)}" if notes else note
        return CrossRank(ranks=rank_count, note=note, facts={"collectives": {**counts, "notes": notes}})
    notes += _unmatched_ranks(con)  # counted among the ranks of the headline, in none of its figures
    noise, jitter = _rows(con, world_size, process_groups)
    notes += _group_size_notes(con, world_size)
    _bandwidth_tables(con)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}.tmp"  # renamed when complete
    metadata = f", KV_METADATA {{'{RUN_KEY.decode()}': '{run_id}'}}" if run_id else ""
    # a transfer shorter than the clock records (or none) has no bandwidth
    transfer = f"(CASE WHEN r.transfer_us >= {CLOCK_RESOLUTION_US!r} THEN r.transfer_us END)"
    con.execute(f"""
        COPY (
            SELECT r.rank, r.process_group, r.seq, r.collective, r.start_us, r.end_local - r.start_local AS dur_us,
                   r.nelems * t.itemsize AS msg_bytes,
                   r.nelems * t.itemsize / {transfer} / 1e3 AS algbw_gbps,
                   r.nelems * t.itemsize / {transfer} / 1e3 * f.factor AS busbw_gbps,
                   r.skew_us, r.wait_us, r.late_us, r.last, r.ranks, r.group_size, r.clock_offset_us,
                   r.seq_source, r.trace
            FROM rows r
            LEFT JOIN itemsizes t USING (msg_dtype)
            LEFT JOIN bus_factors f ON f.cost_op = r.cost_op AND f.n = r.n
            ORDER BY r.process_group, r.seq, r.rank
        ) TO '{_sql_text(partial)}' (FORMAT PARQUET, COMPRESSION ZSTD{metadata})
    """)
    try:
        os.replace(partial, target)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    per_rank = con.execute("""
        SELECT rank, count(*) AS collectives, sum(wait_us) AS wait_us, count(*) FILTER (held_up) AS held_instances,
               sum(1.0 / ranks) FILTER (held_up) AS expected_last, count(*) FILTER (last) AS last_count,
               avg(late_us) FILTER (last) AS mean_late_us, any_value(clock_offset_us) AS clock_offset_us
        FROM rows GROUP BY rank ORDER BY rank
    """).df()
    # per instance a rank held up: the others' waits, summed, and its lead over the second-latest
    # (the least any other waited): how much sooner the instance would start had it arrived with them
    caused = con.execute("""
        SELECT rank, sum(waited) AS wait_caused_us, sum(lead) AS lead_us FROM (
            SELECT l.rank, sum(o.wait_us) AS waited, min(o.wait_us) AS lead
            FROM rows l JOIN rows o ON o.process_group = l.process_group AND o.seq = l.seq AND o.rank <> l.rank
            WHERE l.last GROUP BY l.rank, l.process_group, l.seq
        ) GROUP BY rank
    """).df()
    per_rank = per_rank.merge(caused, on="rank", how="left").fillna({"wait_caused_us": 0.0, "lead_us": 0.0})
    stragglers = _stragglers(per_rank, rank_count)
    skew = con.execute("""
        SELECT median(skew_us), max(skew_us), sum(wait_us) FROM rows
    """).fetchall()[0]
    seq_sources = sorted(r[0] for r in con.execute("SELECT DISTINCT seq_source FROM rows").fetchall())
    facts = {
        "collectives": {
            "instances": int(matched),
            "mismatched_instances": int(mismatched),
            "instances_on_one_rank": int(seen_once),
            "instances_of_differing_sizes": _differing_sizes(con),
            "matched_by": " and ".join(seq_sources),
            "clock_alignment": "collective end times",
            "alignment_noise_us": round(noise, 3),
            "arrival_jitter_us": round(jitter, 3),
            "median_skew_us": float(skew[0]),
            "max_skew_us": float(skew[1]),
            "total_wait_us": float(skew[2]),
            "notes": notes,
        },
        "stragglers": stragglers,
    }
    return CrossRank(ranks=rank_count, facts=facts, per_rank=per_rank, heatmap=_heatmap(con, per_rank), path=target)


def _group_size_notes(con: duckdb.DuckDBPyConnection, world_size: int | None) -> list[str]:
    """A line per process group whose instances are seen on more ranks than its group size (ranks
    of different groups recorded under one name, their members not recorded to tell them apart:
    the instance mixes them), and one per group whose size nothing recorded gives — its bus
    factor takes the ranks seen (at most its size), where roofline.parquet, costing each kernel
    alone, assumes the job's world size: the two bandwidths differ, and this says why."""
    found = con.execute("""
        SELECT process_group, count(*) FILTER (ranks > known_n) AS over, max(ranks) FILTER (ranks > known_n) AS seen,
               max(known_n) FILTER (ranks > known_n) AS size,
               count(*) FILTER (known_n IS NULL AND nelems IS NOT NULL) AS unsized,
               min(ranks) FILTER (known_n IS NULL AND nelems IS NOT NULL) AS fewest,
               max(ranks) FILTER (known_n IS NULL AND nelems IS NOT NULL) AS most
        FROM (SELECT process_group, seq, any_value(ranks) AS ranks, max(known_n) AS known_n, max(nelems) AS nelems
              FROM aligned GROUP BY process_group, seq)
        GROUP BY process_group ORDER BY process_group
    """).fetchall()
    notes = []
    for group, over, seen, size, unsized, fewest, most in found:
        if over:
            notes.append(
                f"process group {group}: {counted(int(over), 'instance', 'instances')} seen on up to {int(seen):,} "
                f"ranks, more than its group size, {int(size):,}: ranks of different groups recorded under one "
                "name without their members — those instances mix the groups (skew, waits, stragglers)"
            )
        if unsized and world_size and int(most) < world_size:
            ranks = f"{int(fewest):,}" if fewest == most else f"{int(fewest):,}–{int(most):,}"
            notes.append(
                f"process group {group}: the group size of {counted(int(unsized), 'instance', 'instances')} is not "
                f"recorded (nor its members, its process-group table entry, or message sizes that say it): their "
                f"busbw takes the ranks seen, {ranks}, at most the group's size — roofline.parquet assumes the "
                f"job's world size, {world_size:,}, for the same kernels"
            )
    return notes


def _unmatched_ranks(con: duckdb.DuckDBPyConnection) -> list[str]:
    """A line per rank whose collectives match no instance of another rank (its collectives are in
    none of the cross-rank figures, though it is counted among the ranks)."""
    found = con.execute("""
        SELECT rank, count(*) AS collectives FROM (SELECT rank FROM inst UNION ALL SELECT rank FROM loose)
        GROUP BY rank HAVING rank NOT IN (SELECT rank FROM inst JOIN ok USING (process_group, seq))
        ORDER BY rank
    """).fetchall()
    return [
        f"rank {int(rank)}: {counted(int(n), 'collective', 'collectives')} matching no instance of the other "
        "ranks (it is in none of the skews, waits and stragglers)"
        for rank, n in found
    ]


def _counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int, int, int]:
    """Instances in all, matched (on two ranks or more, agreeing), mismatched, seen on one rank."""
    total, matched, mismatched, seen_once = con.execute("""
        SELECT count(*), count(*) FILTER (ranks > 1 AND NOT mismatched), count(*) FILTER (mismatched),
               count(*) FILTER (ranks = 1) FROM shape
    """).fetchall()[0]
    return int(total or 0), int(matched or 0), int(mismatched or 0), int(seen_once or 0)


def _differing_sizes(con: duckdb.DuckDBPyConnection) -> int:
    """Matched instances whose ranks record different message sizes (a Seq every rank recorded
    matched them; one collective has one size on every rank, or NCCL hangs)."""
    found = con.execute("SELECT count(*) FILTER (ranks > 1 AND NOT mismatched AND sizes_differ) FROM shape")
    return int(found.fetchall()[0][0] or 0)


MATCH_US = 0.01  # a row's start back on its rank's clock finds its kernel within this (float rounding)


def peer_waits(kernels: pd.DataFrame, rows: pd.DataFrame | None) -> np.ndarray:
    """Per kernel row, the time it spent waiting for the last rank of its collective instance to
    arrive (`rows`: collectives.parquet's `rank`, `start_us`, `clock_offset_us`, `wait_us`); NaN
    where no instance starts with it. An instance's row is found at its first kernel on its rank,
    by its start on the rank's own clock (`start_us + clock_offset_us`, as the joint critical path
    finds it); the wait is at most that kernel's duration (an instance of several kernels on one
    rank waits in its first)."""
    waited = np.full(len(kernels), np.nan)
    if rows is None or not len(rows) or not len(kernels) or "rank" not in kernels:
        return waited
    rank = kernels["rank"].to_numpy(np.int64)
    ts, dur = kernels["ts_us"].to_numpy(np.float64), kernels["dur_us"].to_numpy(np.float64)
    comm = (kernels["category"].astype(object) == COMMUNICATION).to_numpy() & (
        kernels["kind"].astype(object) == "kernel"
    ).to_numpy()
    for r, part in rows.groupby("rank", sort=False):
        mine = np.flatnonzero(comm & (rank == int(r)))
        if not len(mine):
            continue
        mine = mine[np.argsort(ts[mine], kind="stable")]
        at = starting_at(ts[mine], (part["start_us"] + part["clock_offset_us"]).to_numpy(np.float64))
        hit = at >= 0
        found = mine[at[hit]]
        waited[found] = np.minimum(part["wait_us"].to_numpy(np.float64)[hit], dur[found])
    return waited


def starting_at(starts: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time of `times`, the position in `starts` (ascending) of an entry within MATCH_US of it
    (-1: none): a collectives.parquet row's start on its rank's clock finds its kernel."""
    found = np.full(len(times), -1, np.int64)
    if not len(starts):
        return found
    at = np.searchsorted(starts, times)
    for shift in (0, -1):
        near = np.clip(at + shift, 0, len(starts) - 1)
        close = (found < 0) & (np.abs(starts[near] - times) < MATCH_US)
        found[close] = near[close]
    return found


def _stragglers(per_rank: pd.DataFrame, rank_count: int) -> list[dict[str, Any]]:
    """Ranks last significantly more often than chance, heaviest wait caused first."""
    threshold = SIGNIFICANCE / max(rank_count, 1)
    found = []
    for row in per_rank.itertuples(index=False):
        trials, lasts = int(row.held_instances), int(row.last_count)
        if not trials or not lasts:
            continue
        chance = float(row.expected_last) / trials
        p_value = binomial_tail(lasts, trials, chance)
        if p_value < threshold:
            found.append(
                {
                    "rank": int(row.rank),
                    "mean_late_us": round(float(row.mean_late_us), 3),
                    "collectives": lasts,
                    "of": trials,
                    "expected": round(float(row.expected_last), 2),
                    "p_value": p_value,
                    "wait_caused_us": round(float(row.wait_caused_us), 3),
                    "lead_us": round(float(row.lead_us), 3),
                }
            )
    return sorted(found, key=lambda s: s["wait_caused_us"], reverse=True)


def _heatmap(con: duckdb.DuckDBPyConnection, per_rank: pd.DataFrame) -> pd.DataFrame:
    """Mean lateness per rank (rows) and instance in time order (columns; consecutive
    instances binned when there are more than HEATMAP_COLUMNS)."""
    instances = con.execute("SELECT count(DISTINCT (process_group, seq)) FROM rows").fetchall()[0][0]
    per_bin = max(1, math.ceil(instances / HEATMAP_COLUMNS))
    shown = per_rank.sort_values("last_count", ascending=False).head(HEATMAP_ROWS)["rank"].tolist()
    con.register("shown_ranks", pd.DataFrame({"rank": shown}))
    cells = con.execute(f"""
        WITH ordered AS (
            SELECT process_group, seq, collective,
                   dense_rank() OVER (ORDER BY min(start_us), process_group, seq) - 1 AS k
            FROM rows GROUP BY process_group, seq, collective
        )
        SELECT r.rank, o.k // {per_bin} AS bin, avg(r.late_us) AS late_us,
               min(o.process_group || '#' || o.seq || ' ' || o.collective) AS label
        FROM rows r JOIN ordered o USING (process_group, seq) JOIN shown_ranks USING (rank)
        GROUP BY r.rank, bin
    """).df()
    table = cells.pivot(index="rank", columns="bin", values="late_us").sort_index()
    labels = cells.drop_duplicates("bin").set_index("bin")["label"].sort_index()
    table.columns = [labels[c] if per_bin == 1 else f"{labels[c]} (+{per_bin - 1})" for c in table.columns]
    return table


def _sql_text(path: Path) -> str:
    return str(path).replace("'", "''")
