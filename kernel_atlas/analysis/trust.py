"""How far a report's costs can be trusted: the share of GPU time that has FLOPs or bytes, the
largest reasons for the rest (op, reason, time), the other reasons' time in one entry, and what
to re-profile.

The costed share is report.json's `costed_time_us / gpu_time_us`: a costed call's time counts
all of its kernels (`op_time_us` of its "main" row). The uncosted rest is grouped by launching
op and note from the roofline table (each call once, by its `op_time_us`), so the reasons —
`top_uncosted`, then `more_uncosted` (how many other groups and their time) — add up to
`gpu_time_us − costed_time_us`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.launches import clocks_found
from kernel_atlas.ingest.capture import LINK_MISORDERED, LINK_NOT_PAIRED, LINK_UNMATCHED_PREFIX
from kernel_atlas.ingest.link import LINK_REGION, UNLINKED_CAPTURED_NO_OP, UNLINKED_GRAPH
from kernel_atlas.ingest.nsys import NSYS_SUFFIXES

TOP_REASONS = 3

_ROLE_REASON = {"no shapes": "no recorded shapes", "no model": "no cost model"}

# what a warm-up run in the capture trace does for a CUDA capture, whose launches name no kernel
_WARM_UP = (
    "on CUDA, profile the warm-up run before the capture in the same trace: its kernels name the captured "
    "launches, which are otherwise paired by order and count alone"
)
# a reason (substring of its note) → what to do about it, said once
_ADVICE = (
    # no capture given (or none in the trace): the one case where passing one is the advice
    (UNLINKED_GRAPH, "profile the graph capture too and pass it with `atlas ingest --capture`"),
    # a capture was given and did not place these (ingest/capture.py says which way): not "pass one"
    (
        LINK_UNMATCHED_PREFIX,
        "pass the capture of the graphs that were replayed (the same model, batch sizes and code path; "
        f"summary.json `graphs.unmatched` says why the given one matched none); {_WARM_UP}",
    ),
    (LINK_MISORDERED, _WARM_UP),
    (
        LINK_NOT_PAIRED,
        "profile the capture and the replay of the same code path (a replayed kernel no captured launch pairs "
        f"with was not captured, or could not be placed without its name); {_WARM_UP}",
    ),
    ("before the profiling window", "open the profiling window before the first launch (a warm-up step first)"),
    # a kernel the compiled code launched with no op of its own (an older PyTorch's Inductor, which
    # records no op per Triton launch, or a user Triton kernel called in the compiled graph): no op
    # records its arguments, so record_shapes=True gives it none
    (
        "launched inside a compiled region",
        "profile with a PyTorch whose Inductor records each Triton launch as an op named after its kernel "
        "(`triton_poi_fused_…`, with its inputs' shapes): kernels launched inside a compiled region "
        "(CompiledFunction, Torch-Compiled Region) without an op of their own have no recorded arguments, "
        "and record_shapes=True gives them none",
    ),
)
_NO_SHAPES = (
    "recorded without shapes (record_shapes=False): op calls have no FLOPs or bytes; "
    "re-profile with torch.profiler.profile(record_shapes=True)"
)
# a Kineto trace of GPU activities alone (no CPU ops: ProfilerActivity.CPU left out) records no op to cost
_NO_OPS = (
    "recorded without the ops that launch its GPU activities (no CPU activity): op calls have no FLOPs or bytes; "
    "re-profile with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
    "record_shapes=True)"
)
# an Nsight Systems export has shapes only from PyTorch's NVTX ranges (`…, sizes = [[2, 3], …]`)
_NO_SHAPES_NSYS = (
    "recorded without shapes (no NVTX ranges with `sizes`): op calls have no FLOPs or bytes; "
    "re-profile under torch.autograd.profiler.emit_nvtx(record_shapes=True)"
)


def _replayed_unlaunched(trace: dict[str, Any]) -> int:
    """A trace's graph-replayed activities without a launcher (summary.json `unlinked`): no op
    launched them — the graph launch did, with or without CPU activity and recorded shapes — so
    they say nothing of either (a `mode="reduce-overhead"` trace had been told to re-profile with
    CPU activity and record_shapes, which changes nothing; `--capture` does)."""
    unlinked = trace.get("unlinked")
    unlinked = unlinked if isinstance(unlinked, dict) else {}
    # and those a capture given did not place (their graph unmatched, not in it: ingest/capture.py
    # LINK_*), which summary.json's graphs count (a trace of them had been told it lacked CPU activity)
    graphs = trace.get("graphs")
    unpaired = int(graphs.get("unpaired") or 0) if isinstance(graphs, dict) else 0
    return unpaired + sum(int(unlinked.get(why) or 0) for why in (UNLINKED_GRAPH, UNLINKED_CAPTURED_NO_OP))


def _with_activities(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The traces with GPU activities that could carry shapes (only they can lack them): those
    that count activities other than unlaunched graph replays, else (a summary without the
    count) those that launched some."""
    traces = [t for t in summary.get("traces", []) if isinstance(t, dict)]
    return [
        t
        for t in traces
        if (t.get("gpu_activities") and int(t["gpu_activities"]) > _replayed_unlaunched(t)) or t.get("with_launcher")
    ]


def _without_shapes_advice(summary: dict[str, Any]) -> str:
    """What to re-profile with, by the format of the traces that lack shapes (Kineto first), and
    whether they recorded any launching op at all."""
    lacking = [t for t in _with_activities(summary) if not t.get("with_shapes")]
    nsys = [str(t.get("file", "")).lower().endswith(NSYS_SUFFIXES) for t in lacking]
    if nsys and all(nsys):
        return _NO_SHAPES_NSYS
    kineto = [t for t, is_nsys in zip(lacking, nsys, strict=True) if not is_nsys]
    return _NO_OPS if kineto and not any(t.get("with_launcher") for t in kineto) else _NO_SHAPES


def shapes_recorded(summary: dict[str, Any], in_regions: int = 0) -> str:
    """ "yes", "no" or "partly": whether the traces with GPU activities recorded op input shapes
    (`Input Dims`), from the ingest summary's activity, launched and shaped counts of each trace
    (one whose activities no op launched recorded none; graph replays no op launched are not
    counted: a trace of nothing else says neither). `in_regions`: the run's activities launched
    inside a compiled region without an op of their own (`compiled_region_kernels`); where they
    account for every launched activity of the traces without shapes, those traces say neither —
    a kernel the compiled code launched has no op to record its arguments, whatever
    record_shapes was."""
    traces = _with_activities(summary)
    lacking = [t for t in traces if not t.get("with_shapes")]
    if not traces or not lacking:
        return "yes"
    if in_regions and sum(int(t.get("with_launcher") or 0) for t in lacking) <= in_regions:
        return "yes"
    return "no" if len(lacking) == len(traces) else "partly"


def compiled_region_kernels(roofline: pd.DataFrame) -> int:
    """The activities launched inside a compiled region without an op of their own (roofline rows
    noted `ingest.link.LINK_REGION`, by `count`) — 0 where any other activity lacks its shapes
    under a launching op (a row "no shapes" with a launcher and another note): that one's op
    recorded no shapes, which record_shapes=True would give it. The roofline sums the traces of a
    run: a trace of ops without shapes beside one of compiled regions reads as before."""
    if not len(roofline) or "note" not in roofline or "count" not in roofline:
        return 0
    note = roofline["note"].astype(object).fillna("").astype(str).to_numpy()
    region = note == LINK_REGION
    if not region.any():
        return 0
    launcher = roofline["launcher"].astype(object).fillna("").astype(str).to_numpy() != ""
    other = (roofline["role"].to_numpy(dtype=object) == "no shapes") & launcher & ~region
    if other.any():
        return 0
    return int(np.nansum(pd.to_numeric(roofline["count"], errors="coerce").to_numpy(np.float64)[region]))


def trust_facts(roofline: pd.DataFrame, facts: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """report.json's `trust`: costed share, the largest uncosted (op, reason) groups and the rest's
    time (`more_uncosted`, None where there is none), shapes, advice."""
    gpu, costed = float(facts["gpu_time_us"]), float(facts["costed_time_us"])
    rest = roofline[~roofline["role"].isin(["main", "helper"])]
    op = rest["launcher"].astype(object).fillna("").replace("", "(no launcher)")
    note = rest["note"].astype(object).fillna("").astype(str)
    reason = note.where(note != "", rest["role"].map(_ROLE_REASON).fillna(rest["role"]))
    # a note that starts with its op ("aten::cat: no tensor shapes recorded") says it once
    reason = pd.Series(
        [r.removeprefix(f"{o}: ") for o, r in zip(op.tolist(), reason.tolist(), strict=True)], index=rest.index
    )
    grouped = (
        pd.DataFrame({"op": op, "reason": reason, "time_us": rest["op_time_us"].astype(float)})
        .groupby(["op", "reason"], sort=False)["time_us"]
        .sum()
        .sort_values(ascending=False, kind="stable")
    )
    timed = grouped[grouped > 0]
    reasons = [
        {"op": str(o), "reason": str(r), "time_us": float(t), "pct": 100.0 * t / gpu if gpu else None}
        for (o, r), t in timed.head(TOP_REASONS).items()
    ]
    # the groups past the largest, in one entry: the costed share and the reasons account for all
    # of the GPU time (the three largest of five had left 16.7 % of it in no line; 23.6 % of a
    # real run's)
    rest = timed.iloc[TOP_REASONS:]
    more = float(rest.sum())
    shapes = shapes_recorded(summary, compiled_region_kernels(roofline))
    advice = [_without_shapes_advice(summary)] if shapes != "yes" else []
    texts = " ".join(grouped.index.get_level_values("reason")) if len(grouped) else ""
    advice += [what for key, what in _ADVICE if key in texts]
    return {
        # a part of the GPU time summed apart from it: within 0–100 % and never below 0 µs (float
        # sums made 100.00000000000003 % and -2.8e-14 µs)
        # no GPU time (every activity 0 µs long): no share of it, rather than 0 %
        "costed_pct": min(100.0 * costed / gpu, 100.0) if gpu else None,
        "costed_time_us": costed,
        "uncosted_time_us": max(gpu - costed, 0.0),
        "gpu_time_us": gpu,
        "shapes_recorded": shapes,
        "top_uncosted": reasons,
        "more_uncosted": {"groups": len(rest), "time_us": more, "pct": 100.0 * more / gpu if gpu else None}
        if len(rest)
        else None,
        "advice": advice,
        "clocks": _clocks(facts),
        "estimated": _estimated(facts, gpu),
        "shapes_inferred": _inferred(summary, gpu),
        "traces_failed": _failed(summary),
        "above_roof": _above_roof(roofline, gpu),
    }


def _above_roof(roofline: pd.DataFrame, gpu_time_us: float) -> dict[str, Any] | None:
    """The costed rows that ran faster than their cost allows (SOL over 100 %: a cost that counts
    more work than the kernel did — an estimate, an attention window the trace does not record —,
    data served from cache, or a peak of the wrong precision): how many, their time and the
    highest. Their SOL is no measure of the kernel and their headroom is 0. None where none is."""
    if "sol_pct" not in roofline or not len(roofline):
        return None
    sol = pd.to_numeric(roofline["sol_pct"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    over = np.flatnonzero(sol > 100.0)
    if not len(over):
        return None
    time_us = float(roofline["op_time_us"].to_numpy(np.float64)[over].sum())
    top = int(over[np.argmax(sol[over])])
    return {
        "rows": len(over),
        "time_us": time_us,
        "pct": min(100.0 * time_us / gpu_time_us, 100.0) if gpu_time_us else None,
        "max_sol_pct": float(sol[top]),
        "max_name": str(roofline["name"].iloc[top]),
    }


def _failed(summary: dict[str, Any]) -> list[dict[str, str]]:
    """The traces given to ingest that failed (summary.json's `failed`): their GPU time is in no
    table of this report, and a report of the others alone did not say so."""
    failed = summary.get("failed")
    if not isinstance(failed, list):
        return []
    return [
        {"source": str(f.get("source", "")), "reason": str(f.get("reason", ""))} for f in failed if isinstance(f, dict)
    ]


def _estimated(facts: dict[str, Any], gpu_time_us: float) -> dict[str, Any] | None:
    """The costed time whose cost is an estimate (roofline.parquet `estimate`: an assumed argument,
    dtype, group size or byte count, a count left out, borrowed shapes), None where there is none."""
    time_us = float(facts.get("estimated_time_us") or 0.0)
    if not time_us:
        return None
    return {"time_us": time_us, "pct": min(100.0 * time_us / gpu_time_us, 100.0) if gpu_time_us else None}


def _inferred(summary: dict[str, Any], gpu_time_us: float) -> dict[str, Any] | None:
    """The kernels whose launcher and shapes were borrowed (summary.json's `shapes_inferred` of
    each trace: no launch of their own in the window, the same kernel, grid and block linked
    with one signature), added up over the traces; None where there are none. Their costs stand
    on that inference."""
    kernels, time_us = 0, 0.0
    for trace in summary.get("traces", []):
        inferred = trace.get("shapes_inferred") if isinstance(trace, dict) else None
        if isinstance(inferred, dict):
            kernels += int(inferred.get("kernels") or 0)
            time_us += float(inferred.get("time_us") or 0.0)
    if not kernels:
        return None
    pct = min(100.0 * time_us / gpu_time_us, 100.0) if gpu_time_us else 0.0
    return {"kernels": kernels, "time_us": time_us, "pct": pct}


def _clocks(facts: dict[str, Any]) -> str | None:
    """What the report can tell only as far as the host's and the GPU's clocks agree, where they
    disagree (`launches.clock_checks`); None where they agree."""
    clocks = clocks_found(facts.get("launches") or {})
    if not clocks:
        return None
    first = clocks[0]["line"].removeprefix("the host and GPU clocks disagree: ").split(";")[0]
    more = f"; {len(clocks) - 1} more ranks in report.json launches" if len(clocks) > 1 else ""
    return (
        f"the host and GPU clocks disagree (rank {clocks[0]['rank']}: {first}{more}): launch-to-start delays are "
        "not shown, and what sets GPU times against host times — idle causes (a host wait or not), per-step "
        "GPU figures, the critical path — may be off by as much"
    )
