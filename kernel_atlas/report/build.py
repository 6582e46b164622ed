"""`atlas report`: an ingest output (or a trace, ingested first) → roofline and time-share files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from kernel_atlas.analysis.collectives import CrossRank, cross_rank_view, ranks_missing
from kernel_atlas.analysis.critical_path import parse_window
from kernel_atlas.analysis.critical_report import CriticalPathJob, CriticalPathResult, check_window_of_ranks
from kernel_atlas.analysis.findings import graph_word, report_findings
from kernel_atlas.analysis.idle import KERNEL_WAIT_US
from kernel_atlas.analysis.launches import SHORT_KERNEL_US
from kernel_atlas.analysis.memory import MemoryReport, analyse_memory, memory_warnings, read_memory_events
from kernel_atlas.analysis.ranks import WaitOptions, analyse_ranks, default_jobs, rank_batches
from kernel_atlas.analysis.trust import trust_facts
from kernel_atlas.analysis.views import KernelViews
from kernel_atlas.analysis.waits import Waits, last_step_starts, write_waits
from kernel_atlas.core import safe_files
from kernel_atlas.core.beside import on_a_thread, usable_cpus
from kernel_atlas.core.devices import Device, Properties, get_device, match_device, match_properties
from kernel_atlas.core.redact import redact_text
from kernel_atlas.ingest.fleet import run_folder
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.report.efficiency_view import efficiency_facts, efficiency_html, steps_table
from kernel_atlas.roofline.analysis import Analysis
from kernel_atlas.store.outputs import REPORT, load_kernels, lock, read_parquet, write_csv, write_json, write_table
from kernel_atlas.store.run import Run, process_group_sizes

if TYPE_CHECKING:
    from kernel_atlas.report.critical_html import PathPicture


def _trace_events(summary: dict[str, Any]) -> int:
    """The events of the run's traces (summary.json), only where they are counts: the number only
    chooses where the critical path is solved, which changes no result."""
    counts = [trace.get("events") for trace in summary.get("traces", []) if isinstance(trace, dict)]
    return sum(n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n > 0)


def _critical_outputs(result: CriticalPathResult, out_dir: Path, run_id: str | None) -> tuple[Path, PathPicture]:
    """critical_path.parquet written and what the page draws of the path picked, where the path
    was solved (with a large trace: in the process beside, on a thread while it solves the
    what-if), so that every segment of the path — the 0.9 M of a 500 MB trace — never crosses to
    the report: only the few thousand drawn do."""
    from kernel_atlas.report.critical_html import path_picture

    written = write_table(result.segments, out_dir / "critical_path.parquet", run_id)
    span = result.facts.get("span")
    start = span.get("start_us") if isinstance(span, dict) else None
    return written, path_picture(result.segments, float(start) if isinstance(start, (int, float)) else None)


@dataclass
class Report:
    out_dir: Path
    analysis: Analysis
    device: Device | None
    traced_gpu: str | None
    files: dict[str, Path]
    waits: Waits | None = None
    cross_rank: CrossRank | None = None
    views: KernelViews | None = None
    memory: MemoryReport | None = None


# what names a recorded call in both tables; roofline.parquet keys its rows by the first three
# (and the kernel), so replays that differ only in the others (strides, Concrete Inputs) are
# calls that one roofline row mixes
_CALL_KEYS = ("launcher", "input_dims", "input_types", "input_strides", "concrete_inputs")


def merge_replay(
    roofline: pd.DataFrame, replay: pd.DataFrame, device: Device | None = None, rates_apart: bool = False
) -> pd.DataFrame:
    """Replayed times next to traced ones: each roofline row gets the replay of the call it
    stands for, matched on the recorded call's keys both tables carry (launcher — the innermost
    op or Python frame in both —, input shapes and dtypes; strides and Concrete Inputs where the
    roofline has them) and on the kernel: a replay joins the rows of the kernels its calls
    launched (replay.parquet `kernels`). A row that several replays match (calls of another
    layout or other arguments, which its keys do not tell apart, or several launches of one
    kernel per call) is left without one, as is a row whose replay ran smaller shapes than
    recorded (`scale` < 1: its time is of another problem). Joined: the replay's median per call,
    its device, check, what it timed (`replay_timed`: kernel, pipeline or stand-in).

    The roofline is `device`'s (the GPU whose peaks it draws): a replay's throughput
    (`replay_tflops`, `replay_gbps`) and `replay_ratio` to the traced time are given only where it
    ran on that GPU (`replay_same_device`); a CPU replay's wall clock, or another GPU's time, is
    kept apart and `replay_note` says why. `device` None (unknown): no CPU replay is on it, and a
    GPU replay's GPU is not checked. `rates_apart`: the throughput of the replays kept apart too
    (the replay notebook draws them under a title that says where they ran; never a ratio)."""
    if replay["median_us"].notna().sum() == 0:
        return roofline
    columns = {
        "median_us": "replay_us",
        "device_name": "replay_device",
        "check": "replay_check",
        "implementation": "replay_implementation",
        "timed": "replay_timed",
        "ratio": "replay_ratio",
    }
    # a replay.parquet written before dtypes (strides, arguments) were recorded joins on what it has
    keys = [key for key in _CALL_KEYS if key in replay and key in roofline]
    candidates = replay.reindex(columns=[*keys, *columns, "scale", "kernels", "device"]).reset_index(drop=True)
    for key in keys:  # the roofline writes missing shapes as ""
        candidates[key] = candidates[key].astype(object).fillna("")
    candidates["replayed"] = candidates.index  # each replay.parquet row: one replayed call
    if "kernels" in replay:  # the kernels each replayed call launched: the rows it joins
        candidates["name"] = [_names(text) for text in candidates["kernels"]]
        candidates = candidates.explode("name")
        keys = [*keys, "name"]
    # every replay counts, timed or not: a row matched by two calls is no one call's, even if one was skipped
    matches = candidates.groupby(keys, dropna=False, sort=False)["replayed"].transform("nunique")
    scale = pd.to_numeric(candidates["scale"], errors="coerce").fillna(1.0)
    joined = candidates[(matches == 1) & candidates["median_us"].notna() & (scale >= 1.0)].copy()
    # the replay's device kind (cpu, cuda); a table without it (made by hand, or by other means): by its name
    names = joined["device_name"].astype(object).fillna("").astype(str)
    kinds = (
        joined["device"]
        .astype(object)
        .where(joined["device"].notna(), names.str.startswith("CPU").map({True: "cpu", False: "cuda"}))
    )
    joined["replay_note"] = [
        _off_roofline(str(kind or ""), name, device) for kind, name in zip(kinds, names, strict=True)
    ]
    joined["replay_same_device"] = joined["replay_note"].isna()
    extra = ["replay_same_device", "replay_note"]
    keyed = joined.rename(columns=columns).reindex(columns=[*keys, *columns.values(), *extra]).drop_duplicates(keys)
    merged = roofline.merge(keyed, on=keys, how="left")
    main = merged["role"] == "main"
    on_roofline = main & merged["replay_same_device"].eq(True)
    rated = main if rates_apart else on_roofline
    merged["replay_ratio"] = pd.to_numeric(merged["replay_ratio"], errors="coerce").where(on_roofline)
    merged["replay_tflops"] = (merged["flops"] / (merged["replay_us"] * 1e6)).where(rated)
    merged["replay_gbps"] = (merged["bytes"] / (merged["replay_us"] * 1e3)).where(rated)
    return merged


def _off_roofline(kind: str, name: str, device: Device | None) -> str | None:
    """Why a replay's time is not on the roofline of `device`, or None where it ran on that GPU."""
    if not kind.startswith("cuda"):
        return f"{name or kind or 'CPU'} wall clock: not GPU time, kept off the GPU roofline"
    if device is None:
        return None
    ran_on = match_device(name.rsplit(" (CUDA/HIP", 1)[0])
    if ran_on is None or ran_on.key != device.key:
        return f"replayed on {name}, the roofline is {device.name}'s: kept off it"
    return None


def _names(text: object) -> list[str | None]:
    """replay.parquet's `kernels` (a JSON list); [None] where it has none (a catalog replay)."""
    import json

    try:
        names = json.loads(text) if isinstance(text, str) and text else None
    except ValueError:
        names = None
    return [str(n) for n in names] if isinstance(names, list) and names else [None]


def _other_gpus(summary: dict[str, Any], traced: Device | None, traced_name: str | None) -> list[str]:
    """GPUs of the run's traces other than the one its first trace ran on (`traced`, the catalog
    entry of `traced_name`): ranks of different machines, or traces of different runs ingested
    together, each name once. A projection (`--device`) is not one: the traced GPU is said apart."""
    names: dict[str, None] = {}
    for trace in summary.get("traces", []):
        for gpu in trace.get("gpus", []):
            matched = match_properties(gpu.get("name"), Properties.of(gpu))
            if traced is not None or matched is not None:
                other = (matched.key if matched else None) != (traced.key if traced else None)
            else:  # neither in the catalog: told apart by name
                other = gpu.get("name") != traced_name
            if other:
                names[str(gpu.get("name"))] = None
    return list(names)


def _shared_ranks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Ranks claimed by several traces, with their trace files: their activities share one
    timeline in the per-rank analyses (idle time, waits, overlap) that neither trace has."""
    by_rank: dict[int, list[str]] = {}
    for trace in summary.get("traces", []):
        by_rank.setdefault(trace.get("rank", 0), []).append(str(trace.get("file", "?")))
    return [{"rank": rank, "traces": files} for rank, files in sorted(by_rank.items()) if len(files) > 1]


def build_report(
    source: str | Path,
    device_key: str | None = None,
    html: Path | None = None,
    kernel_wait_us: float = KERNEL_WAIT_US,
    short_kernel_us: float = SHORT_KERNEL_US,
    like_hta: bool = False,
    jobs: int | None = None,
    window: str | None = None,
    overlay: Path | None = None,
    trace: Path | None = None,
) -> Report:
    trace = trace or (Path(source) if Path(source).is_file() else None)
    out_dir = run_folder(source, reuse=False)  # a trace is ingested first
    with lock(out_dir):  # one writer: an ingest or another report into this folder fails at once
        report = _build_report(out_dir, device_key, html, kernel_wait_us, short_kernel_us, like_hta, jobs, window)
    if overlay is not None:
        from kernel_atlas.analysis.overlay import overlay_for_report

        report.files["overlay"] = overlay_for_report(report, overlay, trace)
    return report


def _build_report(
    out_dir: Path,
    device_key: str | None,
    html: Path | None,
    kernel_wait_us: float,
    short_kernel_us: float,
    like_hta: bool,
    jobs: int | None,
    window: str | None = None,
) -> Report:
    window_spec = parse_window(window)  # a bad --window fails before anything is written
    run = Run.open(out_dir)
    output = run.output
    ranks = run.ranks
    check_window_of_ranks(out_dir, ranks, window_spec)  # nor one the trace lacks
    safe_files.remove(out_dir / REPORT)  # the previous report's manifest first: files below replace its own
    summary = output.summary
    gpu_name, world = run.gpu.name, run.gpu.world_size
    traced = run.gpu.catalog_device()  # the traced GPU's peaks, whatever `--device` projects onto
    device = get_device(device_key) if device_key else traced
    groups = process_group_sizes(summary)  # a collective's group size, by rank and group name
    cross_rank = cross_rank_view(out_dir, ranks, run_id=output.run_id, world_size=world, process_groups=groups)
    stragglers = cross_rank.facts.get("stragglers") or []
    matched = read_parquet(cross_rank.path) if cross_rank.path is not None else None
    convention = "hta" if like_hta else "exact"
    steps_cut = last_step_starts(summary)  # where HTA's loader cuts each rank (its convention only)
    # on a large trace the critical path is solved beside the rest: started first, it waits for
    # the roofline only for its what-if; one rank's kernel rows and host events are read once,
    # before the process beside is forked (it inherits them: the report's event waits read the
    # same host events)
    trace_events = _trace_events(summary)
    finish = partial(_critical_outputs, out_dir=out_dir, run_id=output.run_id)
    loaded, host = None, None
    if len(ranks) == 1:  # the host events on a thread while the kernel rows are read (Arrow decodes without the GIL)
        host_read = on_a_thread(load_host_events, out_dir, ranks[0], here=usable_cpus() < 2)
        loaded = {ranks[0]: load_kernels(out_dir, ranks=ranks)}
        host = {ranks[0]: host_read.result()}
    jobs = default_jobs(summary, ranks) if jobs is None else jobs  # for the analyses and the paths of small ranks
    batches = rank_batches(summary, ranks)  # small ranks' kernel rows read together, as the analyses read them
    job = CriticalPathJob(
        out_dir, ranks, window_spec, matched, convention, steps_cut, trace_events, finish, loaded, jobs, batches, host
    )
    with job:
        # a rank, or a batch of small ranks, at a time: the memory of one rank whatever the fleet's size
        ranked = analyse_ranks(
            out_dir,
            ranks,
            device,
            world,
            jobs,
            options=WaitOptions(kernel_wait_us, short_kernel_us, like_hta),
            summary=summary,
            timeline_rank=stragglers[0]["rank"] if stragglers else None,
            loaded=loaded,
            collectives=matched,
            host=host,
        )
        analysis, waits, views = ranked.analysis, ranked.waits, ranked.views
        analysis.facts.update(cross_rank.facts)
        replay = run.replay()
        if replay is not None:
            analysis.roofline = merge_replay(analysis.roofline, replay, device)
        job.roofline_ready(analysis.roofline)
        analysis.facts["traced_gpu"] = gpu_name
        analysis.facts["traced_gpu_identified"] = run.gpu.identified()
        # costed against `device`'s peaks all the same
        analysis.facts["other_gpus"] = _other_gpus(summary, traced, gpu_name)
        analysis.facts["shared_ranks"] = _shared_ranks(summary)
        analysis.facts["ranks_missing"] = ranks_missing(summary, ranks)
        analysis.facts["projection"] = bool(device_key) and device is not None and device != traced
        analysis.facts.update(waits.facts)
        analysis.facts["efficiency"] = efficiency_facts(summary)
        events = read_memory_events(out_dir, summary, output.run_id)
        memory = analyse_memory(events) if events else None
        analysis.facts["memory"] = memory.entries if memory else []
        warned = memory_warnings(memory.entries, memory.left_out, memory.oversized) if memory else []
        analysis.facts["memory_warnings"] = warned
        # first in report.json: how much of the GPU time the costs cover
        analysis.facts = {"trust": trust_facts(analysis.roofline, analysis.facts, summary), **analysis.facts}
        files = {
            "roofline": write_table(analysis.roofline, out_dir / "roofline.parquet", output.run_id),
            "timeshare": write_csv(analysis.timeshare, out_dir / "timeshare.csv"),
            "steps": write_table(steps_table(summary), out_dir / "steps.parquet", output.run_id),
            "facts": out_dir / REPORT,
            "html": html or out_dir / "report.html",
        }
        files.update(write_waits(waits, out_dir, output.run_id))
        if memory is not None:
            files["memory"] = write_table(memory.allocations, out_dir / "memory.parquet", output.run_id)
        from kernel_atlas.report.critical_html import critical_path_html
        from kernel_atlas.report.fleet import cross_rank_html
        from kernel_atlas.report.html import draw_html
        from kernel_atlas.report.memory_view import memory_html

        # the page's sections that do not read the critical path, drawn while it is solved
        page = draw_html(analysis, device, f"Kernel Atlas — {redact_text(out_dir.name)}", waits, views)
        critical = job.result()
        analysis.facts["critical_path"] = critical.facts
        files["critical_path"], picture = critical.value  # written where the path was solved
        # after the critical path: findings rank by its end-to-end savings where it has them
        waited = None
        if cross_rank.per_rank is not None and len(cross_rank.per_rank):
            waited = {
                int(r): float(w)
                for r, w in zip(cross_rank.per_rank["rank"], cross_rank.per_rank["wait_us"], strict=True)
            }
        runtimes = [str(t.get("runtime")) for t in summary.get("traces", [])]
        found = report_findings(
            analysis.roofline, waits, analysis.facts, waited, graph_word(runtimes), kernels=analysis.kernels
        )
        analysis.facts["findings"] = [f.to_json() for f in found]
        if cross_rank.path is not None:
            files["collectives"] = cross_rank.path
        page.write(
            files["html"],
            sections=[
                efficiency_html(analysis.facts["efficiency"]),
                cross_rank_html(cross_rank, analysis.facts),
                critical_path_html(picture, critical.facts),
                memory_html(memory, warned),
            ],
        )
        # last, as the manifest of this report: the ingest run it was made from and its files
        listed = {key: path.name if path.parent == out_dir else str(path) for key, path in files.items()}
        write_json(out_dir, REPORT, {**analysis.facts, "run_id": output.run_id, "files": listed})
        return Report(out_dir, analysis, device, gpu_name, files, waits, cross_rank, views, memory)
