"""Why the GPU waits, as `atlas report` writes it: the idle breakdown, its causes, launch
statistics and graph candidates of one ingest output, and their files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.findings import graph_word
from kernel_atlas.analysis.idle import BREAKDOWN_COLUMNS, KERNEL_WAIT_US, analyse_idle, exact_gaps, other_basis
from kernel_atlas.analysis.launches import (
    SHORT_KERNEL_US,
    clock_checks,
    graph_candidates,
    launch_facts,
    launch_facts_by_rank,
    launch_stats,
)
from kernel_atlas.core.safe_files import remove
from kernel_atlas.store.outputs import write_table

NO_WINDOW_NOTE = "summary.json lacks the end of HTA's window (re-run `atlas ingest`): HTA's numbers keep every activity"
NO_CAUSES_NOTE = "kernels.parquet has no host-activity columns: re-run `atlas ingest` for causes"


@dataclass
class Waits:
    breakdown: pd.DataFrame  # idle.parquet
    causes: pd.DataFrame  # idle_causes.parquet
    launches: pd.DataFrame  # launch_stats.parquet
    candidates: pd.DataFrame  # graph_candidates.parquet
    facts: dict[str, Any]  # report.json: "idle", "launches", "graph_candidates"
    # the breakdown in the other convention (idle_hta.parquet; idle_exact.parquet with --like-hta)
    alternate: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BREAKDOWN_COLUMNS))

    @property
    def basis(self) -> str:
        """The convention of `breakdown`: `exact` or `hta`."""
        return str(self.facts["idle"]["basis"])


def last_step_starts(summary: dict[str, Any]) -> dict[int, float | None]:
    """Per rank, where HTA's analysis window ends (`summary.json`, written by `atlas ingest`)."""
    return {int(t["rank"]): t.get("last_step_start_us") for t in summary.get("traces", []) if "rank" in t}


def analyse_waits(
    frame: pd.DataFrame,
    kernel_wait_us: float = KERNEL_WAIT_US,
    short_kernel_us: float = SHORT_KERNEL_US,
    like_hta: bool = False,
    summary: dict[str, Any] | None = None,
) -> Waits:
    exact = exact_gaps(frame, kernel_wait_us)  # read by the breakdown, the causes and the candidates
    idle = analyse_idle(frame, kernel_wait_us, like_hta, last_step_starts(summary or {}), exact)
    candidates = graph_candidates(
        frame, kernel_wait_us, short_kernel_us, stream_gaps=exact.stream, device_gaps=exact.device
    )
    clocks = clock_checks(frame)
    facts = {
        "idle": idle.facts,
        "launches": launch_facts(frame, clocks),
        "graph_candidates": {
            "short_kernel_us": short_kernel_us,
            "count": len(candidates),  # places (a frame, module and stream each)
            "stretches": int(candidates["stretches"].sum()) if len(candidates) else 0,
            **graph_savings(candidates),
            "graph": graph_word([str(t.get("runtime")) for t in (summary or {}).get("traces", [])]),
        },
    }
    note = _note(frame, (summary or {}).get("traces", [{}]))
    if note:
        facts["idle"]["note"] = note
    return Waits(idle.breakdown, idle.causes, launch_stats(frame, clocks), candidates, facts, idle.alternate)


def graph_savings(candidates: pd.DataFrame) -> dict[str, float]:
    """What graphs of the candidates would save (report.json `graph_candidates`): the waits inside
    the stretches (`waits_us`), each place's at most the time its device was idle during them
    (`saving_us`, as the `launch_bound` findings claim it): a side stream's waits hold nothing up
    while another stream keeps the device busy — 105 µs of waits under another stream's 1 ms GEMM
    had read "CUDA graphs would save up to 105.0 µs" beside no finding at all."""
    if not len(candidates):
        return {"saving_us": 0.0, "waits_us": 0.0}
    waits = candidates["saving_us"].to_numpy(np.float64)
    idle = candidates["device_idle_us"].to_numpy(np.float64)
    return {"saving_us": float(np.minimum(waits, idle).sum()), "waits_us": float(waits.sum())}


def _note(frame: pd.DataFrame, traces: list[dict[str, Any]]) -> str | None:
    """What the waits of `frame` lack, from its traces' part of summary.json."""
    notes = []
    if any("last_step_start_us" not in t for t in traces):
        notes.append(NO_WINDOW_NOTE)
    if "wait_frame" not in frame:
        notes.append(NO_CAUSES_NOTE)
    return "; ".join(notes) or None


def facts_by_rank(frame: pd.DataFrame, waits: Waits, summary: dict[str, Any] | None = None) -> list[tuple[int, dict]]:
    """(rank, facts) of each rank of `frame` — the kernel rows of several ranks analysed together
    by `analyse_waits` into `waits` — in rank order: the facts `analyse_waits` gives the rank's
    rows alone. The idle facts are per (rank, device) and per stream already; launch medians and
    the graph candidates' totals are worked out per rank."""
    ranks = np.unique(frame["rank"].to_numpy()).tolist()
    idle, other = waits.facts["idle"], other_basis(waits.basis)
    # the checks `analyse_waits` made of these rows, not made again
    found = waits.facts["launches"].get("clocks", [])
    checks = {c["rank"]: {k: v for k, v in c.items() if k not in ("rank", "line")} for c in found}
    launches = launch_facts_by_rank(frame, checks)
    candidates = waits.candidates
    by_rank = candidates.groupby("rank") if len(candidates) else None
    traces = [t for t in (summary or {}).get("traces", []) if isinstance(t, dict)]
    parts = []
    for rank in ranks:
        own = {
            "kernel_wait_us": idle["kernel_wait_us"],
            "basis": idle["basis"],
            "devices": [d for d in idle["devices"] if d["rank"] == rank],
            other: {
                "convention": idle[other]["convention"],
                "streams": [s for s in idle[other]["streams"] if s["rank"] == rank],
            },
            "hta_window_end_us": {k: v for k, v in idle["hta_window_end_us"].items() if k == str(rank)},
        }
        note = _note(frame, [t for t in traces if t.get("rank") == rank] or [{}])
        if note:
            own["note"] = note
        mine = by_rank.get_group(rank) if by_rank is not None and rank in by_rank.groups else None
        graphs = {
            "short_kernel_us": waits.facts["graph_candidates"]["short_kernel_us"],
            "count": 0 if mine is None else len(mine),
            "stretches": 0 if mine is None else int(mine["stretches"].sum()),
            **graph_savings(candidates.iloc[0:0] if mine is None else mine),
            "graph": graph_word([str(t.get("runtime")) for t in traces if t.get("rank") == rank]),
        }
        parts.append((rank, {"idle": own, "launches": launches[rank], "graph_candidates": graphs}))
    return parts


def write_waits(waits: Waits, out_dir: Path, run_id: str | None = None) -> dict[str, Path]:
    """The wait files (tied to the ingest run `run_id`, see `outputs.write_table`); the other
    convention's breakdown is `idle_hta.parquet` (`idle_exact.parquet` with --like-hta), and a
    previous run's file of the other name is removed (it would be stale)."""
    other = other_basis(waits.basis)
    remove(out_dir / f"idle_{other_basis(other)}.parquet")
    tables = {
        "idle": (waits.breakdown, "idle.parquet"),
        f"idle_{other}": (waits.alternate, f"idle_{other}.parquet"),
        "idle_causes": (waits.causes, "idle_causes.parquet"),
        "launch_stats": (waits.launches, "launch_stats.parquet"),
        "graph_candidates": (waits.candidates, "graph_candidates.parquet"),
    }
    return {key: write_table(frame, out_dir / name, run_id) for key, (frame, name) in tables.items()}
