"""`atlas report`: an ingest output (or a trace, ingested first) → roofline and time-share files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas import safe_files
from kernel_atlas.analysis.trust import trust_facts
from kernel_atlas.ingest.outputs import (
    REPORT,
    check_derived,
    lock,
    open_output,
    output_ranks,
    read_parquet,
    write_csv,
    write_json,
    write_table,
)
from kernel_atlas.report.idle import KERNEL_WAIT_US
from kernel_atlas.report.launches import SHORT_KERNEL_US
from kernel_atlas.report.views import KernelViews
from kernel_atlas.report.waits import Waits, write_waits
from kernel_atlas.roofline.analysis import Analysis
from kernel_atlas.roofline.collectives import CrossRank, cross_rank_view
from kernel_atlas.roofline.devices import Device, get_device, match_device
from kernel_atlas.roofline.ranks import WaitOptions, analyse_ranks


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


def merge_replay(roofline: pd.DataFrame, replay: pd.DataFrame) -> pd.DataFrame:
    """Replayed times next to traced ones: per (launcher, input shapes, input dtypes), the
    replay's median per call, its device, check, what it timed (`replay_timed`: kernel, pipeline
    or stand-in), its `replay_ratio` to the traced time (only where the timed region was the
    traced kernel itself, on a GPU) and the achieved throughput of the replay."""
    timed = replay[replay["median_us"].notna()]
    if timed.empty:
        return roofline
    columns = {
        "median_us": "replay_us",
        "device_name": "replay_device",
        "check": "replay_check",
        "implementation": "replay_implementation",
        "timed": "replay_timed",
        "ratio": "replay_ratio",
    }
    # a replay.parquet written before dtypes were recorded joins on shapes alone
    keys = ["launcher", "input_dims", *(["input_types"] if "input_types" in replay else [])]
    keyed = timed.rename(columns=columns).reindex(columns=[*keys, *columns.values()])
    for key in keys:  # the roofline writes missing shapes as ""
        keyed[key] = keyed[key].astype(object).fillna("")
    keyed = keyed.drop_duplicates(keys)
    merged = roofline.merge(keyed, on=keys, how="left")
    main = merged["role"] == "main"
    merged["replay_tflops"] = (merged["flops"] / (merged["replay_us"] * 1e6)).where(main)
    merged["replay_gbps"] = (merged["bytes"] / (merged["replay_us"] * 1e3)).where(main)
    return merged


def _resolve_input(source: Path) -> Path:
    """An ingest output directory for `source` (ingesting a trace file first)."""
    if source.is_dir():
        return source
    from kernel_atlas.ingest.fleet import ingest_one

    return ingest_one(source)[0]


def _traced_gpu(summary: dict[str, Any]) -> tuple[str | None, int | None, int | None]:
    for trace in summary.get("traces", []):
        for gpu in trace.get("gpus", []):
            world = trace.get("distributed", {}).get("world_size")
            return gpu.get("name"), gpu.get("numSms"), world
    return None, None, None


def _other_gpus(summary: dict[str, Any], device: Device | None) -> list[str]:
    """GPUs of the run's traces whose peaks are not `device`'s (ranks of different machines, or
    traces of different runs ingested together), each name once."""
    names: dict[str, None] = {}
    for trace in summary.get("traces", []):
        for gpu in trace.get("gpus", []):
            matched = match_device(gpu.get("name"), gpu.get("numSms"))
            if (matched.key if matched else None) != (device.key if device else None):
                names[str(gpu.get("name"))] = None
    return list(names)


def build_report(
    source: str | Path,
    device_key: str | None = None,
    html: Path | None = None,
    kernel_wait_us: float = KERNEL_WAIT_US,
    short_kernel_us: float = SHORT_KERNEL_US,
    like_hta: bool = False,
    jobs: int = 1,
) -> Report:
    out_dir = _resolve_input(Path(source))
    with lock(out_dir):  # one writer: an ingest or another report into this folder fails at once
        return _build_report(out_dir, device_key, html, kernel_wait_us, short_kernel_us, like_hta, jobs)


def _build_report(
    out_dir: Path,
    device_key: str | None,
    html: Path | None,
    kernel_wait_us: float,
    short_kernel_us: float,
    like_hta: bool,
    jobs: int,
) -> Report:
    output = open_output(out_dir)
    safe_files.remove(out_dir / REPORT)  # the previous report's manifest first: files below replace its own
    ranks = sorted(output.files) if output.files else output_ranks(out_dir)
    summary = output.summary
    gpu_name, sms, world = _traced_gpu(summary)
    device = get_device(device_key) if device_key else match_device(gpu_name, sms)
    cross_rank = cross_rank_view(out_dir, ranks, run_id=output.run_id)
    stragglers = cross_rank.facts.get("stragglers") or []
    # one rank at a time (a single trace is one rank): the memory of one rank, whatever the fleet's size
    ranked = analyse_ranks(
        out_dir,
        ranks,
        device,
        world,
        jobs,
        options=WaitOptions(kernel_wait_us, short_kernel_us, like_hta),
        summary=summary,
        timeline_rank=stragglers[0]["rank"] if stragglers else None,
    )
    analysis, waits, views = ranked.analysis, ranked.waits, ranked.views
    analysis.facts.update(cross_rank.facts)
    replay_path = out_dir / "replay.parquet"
    if replay_path.exists() or replay_path.is_symlink():
        check_derived(replay_path, output)
        analysis.roofline = merge_replay(analysis.roofline, read_parquet(replay_path))
    analysis.facts["traced_gpu"] = gpu_name
    analysis.facts["other_gpus"] = _other_gpus(summary, device)  # costed against `device`'s peaks all the same
    analysis.facts["projection"] = bool(device_key) and device is not None and device != match_device(gpu_name, sms)
    analysis.facts.update(waits.facts)
    # first in report.json: how much of the GPU time the costs cover
    analysis.facts = {"trust": trust_facts(analysis.roofline, analysis.facts, summary), **analysis.facts}
    files = {
        "roofline": write_table(analysis.roofline, out_dir / "roofline.parquet", output.run_id),
        "timeshare": write_csv(analysis.timeshare, out_dir / "timeshare.csv"),
        "facts": out_dir / REPORT,
        "html": html or out_dir / "report.html",
    }
    files.update(write_waits(waits, out_dir, output.run_id))
    if cross_rank.path is not None:
        files["collectives"] = cross_rank.path
    from kernel_atlas.report.fleet import cross_rank_html
    from kernel_atlas.report.html import write_html

    title = f"Kernel Atlas — {out_dir.name}"
    write_html(
        analysis,
        device,
        files["html"],
        title,
        waits=waits,
        sections=[cross_rank_html(cross_rank, analysis.facts)],
        views=views,
    )
    # last, as the manifest of this report: the ingest run it was made from and its files
    listed = {key: path.name if path.parent == out_dir else str(path) for key, path in files.items()}
    write_json(out_dir, REPORT, {**analysis.facts, "run_id": output.run_id, "files": listed})
    return Report(out_dir, analysis, device, gpu_name, files, waits, cross_rank, views)
