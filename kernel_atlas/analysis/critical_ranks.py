"""The critical path across ranks: the ranks' graphs joined at their collectives and their
point-to-point transfers.

A collective ends on every rank only when its last member has arrived. Each instance matched by
the cross-rank view (`collectives.parquet`: process group and sequence number, clocks aligned)
joins the ranks' graphs: the start of the kernel of the rank that arrived last → the end of
every other rank's kernel, weighted with the time from that arrival to their end (the
transfer); the other ranks' kernels themselves then weigh only that transfer — the wait before
it is the late rank's doing, found on its own path. Timestamps move to the common clock
(`clock_offset_us`). The joint graph's longest path is the run's critical path; each segment
keeps its rank.

Point-to-point transfers (`send`/`recv`, left out of the cross-rank view) are joined the same
way, as two-member instances: in a process group of two ranks, the k-th send of rank A to B and
the k-th receive of B from A (in start order) are one transfer (`p2p_rows`, `p2p_instances`);
a rank no collective aligned has its clock aligned on its transfers' end times (`p2p_offsets`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.collectives import starting_at
from kernel_atlas.analysis.critical_path import GPU, Graph

COLLECTIVE = 7  # edge kind: a collective's transfer after its last member arrived (see KIND_NAMES)
MAX_JOINT_RANKS = 64  # beyond this, each rank is solved alone (memory: one graph per rank)
# nor when the ranks' graphs together hold more nodes: joining and solving them peaks at ~450 bytes
# a node (64 ranks of 60k nodes: 3.8M nodes, 1.7 GB), so 2M stay under 1 GB with what else the
# report holds
MAX_JOINT_NODES = 2_000_000


_SEND, _RECV = {"send", "_send", "isend"}, {"recv", "_recv", "irecv"}


def p2p_rows(kernels: pd.DataFrame, rank: int) -> pd.DataFrame:
    """This rank's send and receive kernels whose peer is known (a process group of two ranks):
    `rank`, `process_group` (the group and the direction, `p2p:G:A->B`), `seq` (the k-th of that
    direction, by start), `local_ts` and `local_end`."""
    cols = ("collective", "process_group", "process_group_ranks")
    if len(kernels) == 0 or any(c not in kernels for c in cols):
        return pd.DataFrame({"rank": [], "process_group": [], "seq": [], "local_ts": [], "local_end": []})
    coll = kernels["collective"].astype(object).fillna("").astype(str).str.lower()
    comm = (kernels["category"].astype(str) == "communication").to_numpy()
    rows = kernels[comm & coll.isin(_SEND | _RECV).to_numpy()]
    coll = coll[rows.index]
    members = rows["process_group_ranks"].astype(object).astype(str)
    peer_of = {text: _pair_peer(rank)(text) for text in members.unique()}  # a few distinct groups
    peers = members.map(peer_of)
    ok = peers.notna().to_numpy()
    rows, coll, peers = rows[ok], coll[ok], peers[ok].astype(np.int64)
    sending = coll.isin(_SEND).to_numpy()
    sender = np.where(sending, rank, peers.to_numpy())
    receiver = np.where(sending, peers.to_numpy(), rank)
    group = rows["process_group"].astype(object).fillna("?").astype(str).to_numpy()
    key = pd.Series([f"p2p:{g}:{a}->{b}" for g, a, b in zip(group, sender, receiver, strict=True)], dtype=object)
    local_ts = rows["ts_us"].to_numpy(np.float64)
    local_end = local_ts + rows["dur_us"].to_numpy(np.float64)
    table = pd.DataFrame({"rank": rank, "process_group": key.to_numpy(), "local_ts": local_ts, "local_end": local_end})
    table = table.sort_values("local_ts", kind="stable")
    table["seq"] = table.groupby("process_group").cumcount()
    return table.reset_index(drop=True)


def _pair_peer(rank: int) -> Any:
    def peer(text: Any) -> int | None:
        try:
            members = [int(x) for x in str(text).strip("[] ").split(",") if x.strip()]
        except ValueError:
            return None
        return members[1 - members.index(rank)] if len(members) == 2 and rank in members else None

    return peer


def p2p_instances(
    rows: list[pd.DataFrame], collectives: pd.DataFrame | None, notes: list[str] | None = None
) -> pd.DataFrame:
    """Transfers seen from both ends (one send row, one receive row), as instance rows that
    `join_ranks` reads, on the common clock of `collectives`; a rank it lacks has its clock aligned
    on its transfers' end times (`p2p_offsets`), said in `notes`."""
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if len(table) == 0:
        return pd.DataFrame(columns=["rank", "process_group", "seq", "start_us", "clock_offset_us"])
    both = table.groupby(["process_group", "seq"])["rank"].transform("nunique") == 2
    table = table[both.to_numpy()]
    offsets = {}
    if collectives is not None and len(collectives):
        offsets = {int(r): float(c) for r, c in collectives.groupby("rank")["clock_offset_us"].first().items()}
    offsets = p2p_offsets(table, offsets, notes)
    offset = table["rank"].map(lambda r: float(offsets.get(r, 0.0))).to_numpy(np.float64)
    return pd.DataFrame(
        {
            "rank": table["rank"].to_numpy(),
            "process_group": table["process_group"].to_numpy(),
            "seq": table["seq"].to_numpy(),
            "start_us": table["local_ts"].to_numpy() - offset,
            "clock_offset_us": offset,
        }
    )


def p2p_offsets(table: pd.DataFrame, known: dict[int, float], notes: list[str] | None = None) -> dict[int, float]:
    """Clock offsets (local − common) of the ranks of `table` (transfers seen from both ends) that
    `known` (the collectives' alignment) lacks: a receive ends when its send ends, so two ranks'
    offsets differ by the median, over their transfers, of the receiving end's end minus the sending
    end's. Each rank not known is reached from a known one through its transfers (breadth first,
    ranks in order); a group of ranks none of which is known is anchored at its lowest rank
    (offset 0). Returns `known` with them added; `notes` (if given) says which were aligned."""
    if len(table) == 0 or "local_end" not in table:
        return dict(known)
    ends = table.sort_values(["process_group", "seq", "rank"], kind="stable")
    ends = ends.drop_duplicates(["process_group", "seq", "rank"])
    ends = ends[(ends.groupby(["process_group", "seq"])["rank"].transform("size") == 2).to_numpy()]
    first, second = ends.iloc[0::2], ends.iloc[1::2]  # two rows per transfer (one per rank)
    pairs = pd.DataFrame(
        {
            "a": first["rank"].to_numpy(np.int64),
            "b": second["rank"].to_numpy(np.int64),
            "d": second["local_end"].to_numpy(np.float64) - first["local_end"].to_numpy(np.float64),
        }
    )
    links = pairs.groupby(["a", "b"])["d"].median()  # offset of b − offset of a
    neighbours: dict[int, list[tuple[int, float]]] = {}
    for (a, b), d in links.items():
        neighbours.setdefault(int(a), []).append((int(b), float(d)))
        neighbours.setdefault(int(b), []).append((int(a), -float(d)))
    offsets = dict(known)
    aligned: dict[int, float] = {}
    seeds = [r for r in sorted(neighbours) if r in offsets]
    seeds += [r for r in sorted(neighbours) if r not in offsets]
    for seed in seeds:
        if seed not in offsets:  # a group no collective aligned: its lowest rank is the reference
            offsets[seed] = aligned[seed] = 0.0
        queue = [seed]
        while queue:
            rank = queue.pop(0)
            for peer, d in neighbours[rank]:
                if peer not in offsets:
                    offsets[peer] = aligned[peer] = offsets[rank] + d
                    queue.append(peer)
    if notes is not None and aligned:
        shown = ", ".join(f"rank {r} {aligned[r]:+,.1f} µs" for r in sorted(aligned)[:16])
        more = f" and {len(aligned) - 16} more" if len(aligned) > 16 else ""
        notes.append(
            "clocks aligned on send/recv end times (a receive ends when its send ends; no collective aligns "
            f"these ranks): {shown}{more}"
        )
    return offsets


def _global_events(graphs: list[Graph]) -> tuple[list[np.ndarray], int]:
    """Per rank, the global event index of each local event: all ranks' host events first, then
    all GPU activities (the layout `segments` reads)."""
    n_host_total = sum(g.n_host for g in graphs)
    maps, host_off, gpu_off = [], 0, 0
    for g in graphs:
        local = np.arange(g.n_host + len(g.gpu))
        maps.append(np.where(local < g.n_host, host_off + local, n_host_total + gpu_off + (local - g.n_host)))
        host_off += g.n_host
        gpu_off += len(g.gpu)
    return maps, n_host_total


def _instance_kernels(graph: Graph, rows: pd.DataFrame) -> np.ndarray:
    """Local event of the kernel that starts each of this rank's instance rows (-1 not found)."""
    ts = graph.gpu["ts_us"].to_numpy(np.float64)
    order = np.argsort(ts, kind="stable")
    at = starting_at(ts[order], (rows["start_us"] + rows["clock_offset_us"]).to_numpy(np.float64))
    return np.where(at >= 0, graph.n_host + order[np.maximum(at, 0)], -1)


def join_ranks(graphs: dict[int, Graph], collectives: pd.DataFrame | None) -> Graph:
    """One graph over all ranks (see the module docstring)."""
    ranks = sorted(graphs)
    parts = [graphs[r] for r in ranks]
    maps, n_host_total = _global_events(parts)
    offsets = (
        {r: float(v) for r, v in collectives.groupby("rank")["clock_offset_us"].first().items()}
        if collectives is not None and len(collectives)
        else {}
    )
    node_ts, src, dst, weight, kind, event, ties = [], [], [], [], [], [], []
    for r, g, m in zip(ranks, parts, maps, strict=True):
        nodes = 2 * m[np.arange(g.n_nodes) // 2] + np.arange(g.n_nodes) % 2
        node_ts.append((nodes, g.node_ts - offsets.get(r, 0.0)))
        ties.append((nodes, g.node_tie if g.node_tie is not None else np.zeros(g.n_nodes, np.int64)))
        src.append(nodes[g.src])
        dst.append(nodes[g.dst])
        weight.append(g.weight.copy())
        kind.append(g.kind)
        event.append(np.where(g.event >= 0, m[np.maximum(g.event, 0)], -1))
    n_nodes = 2 * (n_host_total + sum(len(g.gpu) for g in parts))
    ts_all = np.zeros(n_nodes)
    for nodes, ts in node_ts:
        ts_all[nodes] = ts
    src_a, dst_a, w_a = np.concatenate(src), np.concatenate(dst), np.concatenate(weight)
    kind_a, ev_a = np.concatenate(kind), np.concatenate(event)
    if collectives is not None and len(collectives):
        extra = _collective_edges(ranks, parts, maps, collectives, ts_all, kind_a, ev_a, w_a)
        src_a, dst_a = np.concatenate([src_a, extra[0]]), np.concatenate([dst_a, extra[1]])
        w_a, kind_a = np.concatenate([w_a, extra[2]]), np.concatenate([kind_a, np.full(len(extra[0]), COLLECTIVE)])
        ev_a = np.concatenate([ev_a, extra[3]])
    host = pd.concat([g.host.assign(rank=r) for r, g in zip(ranks, parts, strict=True)], ignore_index=True)
    gpu = pd.concat([g.gpu.assign(rank=r) for r, g in zip(ranks, parts, strict=True)], ignore_index=True)
    notes = sorted({n for g in parts for n in g.notes})
    window = parts[0].window if parts else {"name": "whole trace", "start_us": None, "end_us": None}
    node_tie = np.zeros(n_nodes, np.int64)
    for nodes, tie in ties:
        node_tie[nodes] = tie
    kinds = kind_a.astype(np.int8)
    joint = Graph(ts_all, src_a, dst_a, w_a, kinds, ev_a, n_host_total, host, gpu, window, notes, node_tie)
    if any(g.node_reached is not None for g in parts):  # a rank's ops overlapped a sibling (`_held_to_time`)
        joint.node_reached = ts_all.copy()
        for r, g, (nodes, _) in zip(ranks, parts, node_ts, strict=True):
            joint.node_reached[nodes] = g.reached_ts() - offsets.get(r, 0.0)
    return joint


def _collective_edges(
    ranks: list[int],
    parts: list[Graph],
    maps: list[np.ndarray],
    collectives: pd.DataFrame,
    ts_all: np.ndarray,
    kind: np.ndarray,
    event: np.ndarray,
    weight: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Edges last arrival → every other member's end; the members' own edges shortened to their
    transfer (in place on `weight`)."""
    rows = []
    for r, g, m in zip(ranks, parts, maps, strict=True):
        mine = collectives[collectives["rank"] == r]
        local = _instance_kernels(g, mine)
        found = local >= 0
        rows.append(mine[found].assign(ev=m[local[found]]))
    if not rows:
        return tuple(np.empty(0, t) for t in (np.int64, np.int64, np.float64, np.int64))
    table = pd.concat(rows, ignore_index=True)
    table["start"] = ts_all[2 * table["ev"].to_numpy()]
    table["end"] = ts_all[2 * table["ev"].to_numpy() + 1]
    last = table.loc[table.groupby(["process_group", "seq"])["start"].idxmax(), ["process_group", "seq", "ev", "start"]]
    table = table.merge(last, on=["process_group", "seq"], suffixes=("", "_last"))
    others = table[table["ev"] != table["ev_last"]]
    transfer = np.maximum(others["end"].to_numpy() - others["start_last"].to_numpy(), 0.0)
    own = np.flatnonzero(kind == GPU)
    own_of = pd.Series(own, index=event[own])
    idx = own_of.reindex(others["ev"].to_numpy()).to_numpy()
    ok = ~np.isnan(idx)
    weight[idx[ok].astype(np.int64)] = transfer[ok]
    ev = others["ev"].to_numpy()
    return 2 * others["ev_last"].to_numpy(), 2 * ev + 1, transfer, ev
