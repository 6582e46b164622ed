"""Why the GPU waits, over many ranks: each rank's `Waits` (computed where its kernels are loaded,
`analysis/ranks.py`) folded into the report's as they arrive.

* Tables that have a `rank` column — the idle breakdown in both conventions, its causes and the
  graph candidates — are the ranks' rows together (their `pct` columns are shares within one
  rank's device or stream, so they stay right); the candidates are ranked by saving over the
  whole fleet.
* Launch statistics are per kernel and per op over all ranks: counts, CPU and GPU times and
  launch-bound counts add up, means are recomputed from the sums, the maximum delay is the
  maximum. A median does not follow from the ranks' medians, so with several ranks
  `delay_p50_us` is left empty (each rank's medians are in `report.json`, `launches.per_rank`).
* Facts: settings (the kernel-wait threshold, the basis, the short-kernel threshold) are the
  run's, not summed; counts and times add up; the launch-bound share is weighted by each rank's
  eager activities; per-device and per-stream lists are joined.

With one rank the result is that rank's `Waits` unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.idle import hta_convention, other_basis
from kernel_atlas.analysis.launches import LAUNCH_COLUMNS
from kernel_atlas.analysis.waits import Waits
from kernel_atlas.core.groups import BatchFold

_LAUNCH_SUMS = {
    "count": "sum",
    "launch_us": "sum",
    "delay_us": "sum",
    "delays": "sum",
    "delay_max_us": "max",
    "gpu_us": "sum",
    "bound": "sum",
}
PERCENTILE_NOTE = (
    "medians (launch_p50_us, delay_p50_us) are per rank (per_rank): the median of all the fleet's "
    "launches does not follow from the ranks' medians"
)


def _launch_sums(stats: pd.DataFrame) -> pd.DataFrame:
    """A rank's launch statistics as quantities that add up across ranks."""
    count = stats["count"].to_numpy(dtype="float64")
    delays = stats["delays"].to_numpy(dtype="float64")
    return pd.DataFrame(
        {
            "level": stats["level"].astype(str).to_numpy(),
            "key": stats["key"].astype(str).to_numpy(),
            "count": stats["count"].to_numpy(dtype="int64"),
            "launch_us": stats["launch_us"].to_numpy(dtype="float64"),
            # the mean is over the measured delays: a batch whose clocks disagree for some ranks
            # measured fewer than its count (its mean times the count had made 8.03 µs of 55)
            "delay_us": np.nan_to_num(stats["delay_mean_us"].to_numpy(dtype="float64") * delays),
            "delays": delays.astype("int64"),
            "delay_max_us": stats["delay_max_us"].to_numpy(dtype="float64"),
            "gpu_us": stats["gpu_us"].to_numpy(dtype="float64"),
            "bound": np.rint(stats["launch_bound_pct"].to_numpy(dtype="float64") * count / 100.0).astype("int64"),
        }
    )


def _sum_launches(tables: list[pd.DataFrame]) -> pd.DataFrame:
    both = pd.concat(tables, ignore_index=True)
    return both.groupby(["level", "key"], sort=False).agg(_LAUNCH_SUMS).reset_index()


def _launch_table(sums: pd.DataFrame) -> pd.DataFrame:
    """launch_stats.parquet of several ranks: per level, largest launch CPU time first."""
    count = sums["count"].to_numpy(dtype="float64")
    table = pd.DataFrame(
        {
            "level": sums["level"],
            "key": sums["key"],
            "count": sums["count"].astype("int64"),
            "launch_us": sums["launch_us"],
            "launch_mean_us": sums["launch_us"] / count,
            "delay_mean_us": sums["delay_us"] / sums["delays"].where(sums["delays"] > 0),  # none measured: empty
            "delay_p50_us": np.nan,
            "delay_max_us": sums["delay_max_us"],
            "delays": sums["delays"].astype("int64"),
            "gpu_us": sums["gpu_us"],
            "gpu_mean_us": sums["gpu_us"] / count,
            "launch_bound_pct": 100.0 * sums["bound"] / count,
        }
    )
    order = {"kernel": 0, "op": 1}
    table = table.assign(_level=table["level"].map(order).fillna(len(order)))
    table = table.sort_values(["_level", "launch_us"], ascending=[True, False], kind="stable")
    return table[LAUNCH_COLUMNS].reset_index(drop=True)


def _joined(tables: list[pd.DataFrame]) -> pd.DataFrame:
    filled = [t for t in tables if len(t)]
    return pd.concat(filled, ignore_index=True) if filled else tables[0]


def _notes(notes: dict[str, list[int]], ranks: int) -> str | None:
    """Distinct notes of the ranks, each with the ranks it applies to unless all."""
    if not notes:
        return None
    return "; ".join(
        text if len(which) == ranks else f"{text} (ranks {', '.join(map(str, which))})" for text, which in notes.items()
    )


def combine_waits_facts(parts: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """report.json's `idle`, `launches` and `graph_candidates` of several ranks from each
    rank's (`parts`: (rank, facts), in rank order)."""
    if len(parts) == 1:
        return parts[0][1]
    first = parts[0][1]
    other = other_basis(first["idle"]["basis"])
    idle: dict[str, Any] = {
        "kernel_wait_us": first["idle"]["kernel_wait_us"],
        "basis": first["idle"]["basis"],
        "devices": [d for _, f in parts for d in f["idle"]["devices"]],
    }
    if other in first["idle"]:
        idle[other] = {
            "convention": first["idle"][other]["convention"],
            "streams": [s for _, f in parts for s in f["idle"][other]["streams"]],
        }
    windows = [f["idle"]["hta_window_end_us"] for _, f in parts if "hta_window_end_us" in f["idle"]]
    if windows:
        idle["hta_window_end_us"] = {k: v for w in windows for k, v in w.items()}
    notes: dict[str, list[int]] = {}
    for rank, f in parts:
        if f["idle"].get("note"):
            notes.setdefault(f["idle"]["note"], []).append(rank)
    if notes:
        idle["note"] = _notes(notes, len(parts))

    launches = [f["launches"] for _, f in parts]
    eager = [int(x["eager_activities"]) for x in launches]
    combined: dict[str, Any] = {
        "eager_activities": sum(eager),
        "graph_replayed": sum(int(x["graph_replayed"]) for x in launches),
    }
    if combined["eager_activities"]:
        with_launches = [(rank, x, n) for (rank, _), x, n in zip(parts, launches, eager, strict=True) if n]
        combined["launch_cpu_us"] = sum(float(x["launch_cpu_us"]) for _, x, _ in with_launches)
        combined["launch_p50_us"] = None
        combined["delay_p50_us"] = None
        bound = sum(float(x["launch_bound_pct"]) * n / 100.0 for _, x, n in with_launches)
        combined["launch_bound_pct"] = 100.0 * bound / combined["eager_activities"]
        combined["per_rank"] = [
            {"rank": rank, "launch_p50_us": x["launch_p50_us"], "delay_p50_us": x["delay_p50_us"]}
            | ({"clocks": x["clocks"]} if x.get("clocks") else {})  # a rank whose clocks disagree
            for rank, x, _ in with_launches
        ]
        combined["note"] = PERCENTILE_NOTE

    graphs = [f["graph_candidates"] for _, f in parts]
    candidates = {
        "short_kernel_us": graphs[0]["short_kernel_us"],
        "count": sum(int(g["count"]) for g in graphs),
        "stretches": sum(int(g.get("stretches", 0)) for g in graphs),
        "saving_us": sum(float(g["saving_us"]) for g in graphs),
        # the ranks' waits and the name of their graphs carried over (a fleet of ROCm ranks had said
        # "CUDA graphs", and lost the uncapped waits its line shows beside the saving)
        "waits_us": sum(float(g.get("waits_us", g["saving_us"])) for g in graphs),
    }
    words = {str(g["graph"]) for g in graphs if g.get("graph")}
    if words:
        candidates["graph"] = words.pop() if len(words) == 1 else "CUDA/HIP"
    return {"idle": idle, "launches": combined, "graph_candidates": candidates}


class WaitsFold:
    """Per-rank `Waits` folded as they arrive (`add` in rank order), `result` at the end."""

    def __init__(self) -> None:
        self._breakdown: list[pd.DataFrame] = []
        self._alternate: list[pd.DataFrame] = []
        self._causes: list[pd.DataFrame] = []
        self._candidates: list[pd.DataFrame] = []
        self._facts: list[tuple[int, dict[str, Any]]] = []
        self._launch_sums = BatchFold(_sum_launches, single_as_is=True)
        self._first: Waits | None = None  # the only rank's, until a second arrives

    def add(self, waits: Waits, facts: list[tuple[int, dict[str, Any]]]) -> None:
        """The `waits` of one rank, or of several ranks analysed together, and each rank's own
        facts (`waits.facts` for one rank; `waits.facts_by_rank` for several)."""
        self._breakdown.append(waits.breakdown)
        self._alternate.append(waits.alternate)
        self._causes.append(waits.causes)
        self._candidates.append(waits.candidates)
        self._facts.extend(facts)
        self._first = waits if len(self._facts) == 1 else None
        if len(waits.launches):
            self._launch_sums.add(_launch_sums(waits.launches))

    def result(self) -> Waits | None:
        if not self._facts:
            return None
        if self._first is not None:
            return self._first
        candidates = _joined(self._candidates)
        if len(candidates):
            candidates = candidates.sort_values("saving_us", ascending=False, kind="stable").reset_index(drop=True)
        sums = self._launch_sums.result()
        launches = _launch_table(sums) if sums is not None else pd.DataFrame(columns=LAUNCH_COLUMNS)
        alternate = _joined(self._alternate)
        facts = combine_waits_facts(self._facts)
        hta = facts["idle"].get("hta")
        if hta is not None and facts["idle"]["basis"] != "hta":  # said of every rank's streams, not one batch's
            hta["convention"] = hta_convention(alternate)
        return Waits(
            breakdown=_joined(self._breakdown),
            causes=_joined(self._causes),
            launches=launches,
            candidates=candidates,
            facts=facts,
            alternate=alternate,
        )
