"""Data and figures behind the notebook dashboards (notebooks/*.ipynb) and `atlas dashboard`.

Notebooks only call these functions: loading a run, filtering it, the figures, comparing two
runs, and replayed-vs-traced tables. Everything works on the Parquet/JSON files that
`atlas ingest` / `atlas report` / `atlas replay` write.

Bad input met by the functions a notebook's loading cells call (`load_run`, `gpu_activities`,
`findings_html`) is a `NotebookError`: the one line `error: …` that `atlas dashboard --html`
prints, in JupyterLab and `jupyter nbconvert --execute` too, where an `AtlasError` was a
traceback of 25 frames — and, an error, it stops the notebook there.
"""

from __future__ import annotations

import html
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from kernel_atlas.analysis.collectives import cross_rank_view, peer_waits
from kernel_atlas.analysis.diff import Diff, Side, compare, side_of_kernels
from kernel_atlas.analysis.gate import Comparability, comparability
from kernel_atlas.analysis.views import Timeline, module_times, timeline_of, timeline_rows
from kernel_atlas.classify.names import display_name
from kernel_atlas.core.devices import Device, get_device
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import redact_text, redacted_error
from kernel_atlas.ingest.fleet import run_folder
from kernel_atlas.ingest.summary import gpu_time_facts
from kernel_atlas.report import units
from kernel_atlas.report.diff_markdown import comparability_line
from kernel_atlas.report.html import (
    diff_figure,
    headroom_figure,
    module_figure,
    roofline_figure,
    timeline_figure,
    timeshare_figure,
    top_kernels_figure,
)
from kernel_atlas.report.plot import label, numbered_alike, widget
from kernel_atlas.report.units import device_number, fmt_us, nothing_found
from kernel_atlas.roofline.analysis import Analysis, ProcessGroups, analyse
from kernel_atlas.store.outputs import lock, read_parquet, read_report, table_run
from kernel_atlas.store.run import Run as StoredRun
from kernel_atlas.store.run import gpu_names, process_group_sizes


class NotebookError(AtlasError):
    """An `AtlasError` as a notebook shows it: IPython draws an exception's `_render_traceback_`
    instead of its traceback, so the cell's error is the one line the CLI prints (source and
    problem redacted apart, as the CLI does). `notebooks.execute` turns it back into the CLI's
    one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"error: {redacted_error(self)}"]


F = TypeVar("F", bound=Callable[..., Any])


def _one_line(func: F) -> F:
    """What a notebook's loading cell calls: an `AtlasError` raised as a `NotebookError`."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NotebookError:
            raise
        except AtlasError as exc:
            raise NotebookError(exc.source, exc.problem) from None

    return wrapper  # type: ignore[return-value]


@dataclass
class Run:
    """One ingest output, loaded for exploration: its kernels (every rank) in memory."""

    out_dir: Path
    kernels: pd.DataFrame
    summary: dict[str, Any]
    device: Device | None
    world_size: int | None
    replay: pd.DataFrame | None
    ranks: int = 1  # ranks stored (what its times are totals over)
    # the cross-rank view of several ranks (`cross_rank`): its collectives.parquet rows, whose
    # waits for the last rank the report leaves out of the collectives' time, and its top straggler
    collectives: pd.DataFrame | None = None
    straggler: int | None = None
    example: bool = False  # the bundled example, no run having been named
    notes: list[str] = field(default_factory=list)  # what ingesting a trace on first use said (`load_run`)

    @property
    def label(self) -> str:
        return redact_text(self.out_dir.name.removesuffix(".atlas"))  # drawn on the dashboards' pictures

    @property
    def where(self) -> str:
        """The run folder's path as the CLI prints it: a credential in a folder name redacted."""
        return redact_text(str(self.out_dir))

    def analyse(self, kernels: pd.DataFrame | None = None) -> Analysis:
        """The analysis of the run (or of `kernels`, a part of it) as `atlas report` makes it: of
        several ranks, a collective's time, rates, SOL and headroom are of its time after the
        last rank arrived (`peer_wait_us`) — a fresh analysis without them counted the wait for
        the other ranks as headroom (an AllReduce's 114,861 µs where the report said 97,097)."""
        rows = self.kernels if kernels is None else kernels
        if self.collectives is not None and len(self.collectives) and len(rows):
            rows = rows.assign(peer_wait_us=peer_waits(rows, self.collectives))
        return analyse(rows, self.device, self.world_size, process_groups=process_group_sizes(self.summary))


def resolve_source(
    source: str | Path | None = None,
    suffix: str = "",
    default: str | Path | None = None,
    notes: list[str] | None = None,
) -> Path:
    """An ingest output directory: `source`, else $ATLAS_OUT<suffix>, else $ATLAS_TRACE<suffix>,
    else `default` (a trace is ingested on first use, and again when it is newer than its output;
    what that ingest says is added to `notes`, where given: `fleet.run_folder`). A relative path
    from the environment is the caller's (`callers_path`)."""
    if source is None:
        named = os.environ.get(f"ATLAS_OUT{suffix}") or os.environ.get(f"ATLAS_TRACE{suffix}")
        source = callers_path(named) if named else default
    if source is None:
        raise AtlasError(None, f"no run given: set ATLAS_OUT{suffix} (an ingest output) or ATLAS_TRACE{suffix}")
    return run_folder(source, notes=notes)


def callers_path(path: str | Path) -> Path:
    """A path set in the environment, relative to the directory of whoever set it: a notebook's
    kernel runs in the notebook's folder (notebooks/), not in the shell's that started Jupyter
    (`ATLAS_OUT=runs/a.atlas jupyter lab notebooks/dashboard.ipynb` read notebooks/runs/a.atlas),
    and keeps that shell's directory in $PWD, which it inherits and never changes."""
    path = Path(path).expanduser()
    caller = os.environ.get("PWD")
    if path.is_absolute() or "ipykernel" not in sys.modules or not caller or not os.path.isabs(caller):
        return path
    return Path(caller) / path


@_one_line
def load_run(
    source: str | Path | None = None, device: str | None = None, suffix: str = "", default: str | Path | None = None
) -> Run:
    example = source is None and not any(os.environ.get(f"{k}{suffix}") for k in ("ATLAS_OUT", "ATLAS_TRACE"))
    notes: list[str] = []
    out_dir = resolve_source(source, suffix, default, notes)
    for note in notes:  # as `atlas report TRACE` says them: in a notebook, the loading cell's output
        print(f"warning: {redact_text(note)}", file=sys.stderr)
    with lock(out_dir, shared=True):  # not while an ingest or a report writes it
        stored = StoredRun.open(out_dir)
        kernels = stored.kernels()
        replay = stored.replay()
        ranks = len(stored.ranks) or 1
        gpu = stored.gpu
        groups = process_group_sizes(stored.summary)
        collectives, straggler = cross_rank(out_dir, stored.ranks, stored.summary.get("run_id"), gpu.world_size, groups)
    found = get_device(device) if device else gpu.catalog_device()
    return Run(
        out_dir, kernels, stored.summary, found, gpu.world_size, replay, ranks, collectives, straggler, example, notes
    )


def cross_rank(
    out_dir: Path,
    ranks: list[int],
    run_id: str | None,
    world_size: int | None,
    process_groups: ProcessGroups | None = None,
) -> tuple[pd.DataFrame | None, int | None]:
    """The cross-rank view `atlas report` holds a run of several ranks to: the matched
    collectives (collectives.parquet's rows) and the top straggler (the rank report.html's
    timeline draws) — the report's own where it wrote them for this ingest run, else made here
    as `atlas report` makes them (in a private temporary folder: the run folder is not written);
    none of one rank."""
    if len(ranks) < 2:
        return None, None
    report = read_report(out_dir, run_id)
    path = out_dir / "collectives.parquet"
    if report is not None and path.is_file() and table_run(path) == run_id:
        return read_parquet(path), _top_straggler(report.get("stragglers"))
    with tempfile.TemporaryDirectory(prefix="atlas-dashboard-") as folder:
        view = cross_rank_view(out_dir, ranks, Path(folder) / path.name, run_id, world_size, process_groups)
        rows = read_parquet(view.path) if view.path is not None else None
    return rows, _top_straggler(view.facts.get("stragglers"))


def _top_straggler(stragglers: object) -> int | None:
    first = stragglers[0] if isinstance(stragglers, list) and stragglers else None
    rank = first.get("rank") if isinstance(first, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


@_one_line
def gpu_activities(run: Run) -> Run:
    """`run`, refused as `atlas report` refuses it where it holds no GPU activity (a CPU-only
    trace): one statement, not a page of cards of 0 µs, shares of an empty span and a slider
    whose maximum is NaN."""
    if run.kernels.empty:
        raise AtlasError(run.out_dir, "no GPU activities to report on")
    return run


class Stream(NamedTuple):
    """A stream of one device, as the stream filter offers it where a run holds several devices
    (one process driving two GPUs): stream 7 of two devices is two streams, as timeshare.csv and
    the timeline's lanes say — a bare 7 had selected both. Shown as its lane is named."""

    device: int | None
    stream: int

    def __str__(self) -> str:
        return f"device {device_number(self.device)} stream {self.stream}"


def filter_kernels(
    kernels: pd.DataFrame,
    step: int | None = None,
    rank: int | None = None,
    stream: int | Stream | tuple[int | None, int] | None = None,
    category: str | None = None,
    module: str | None = None,
    min_us: float = 0.0,
) -> pd.DataFrame:
    """Rows matching every given filter; `module` matches that module and its sub-modules
    (`Net_0.Linear_1` and `Net_0.Linear_1.*`, never its sibling `Net_0.Linear_10`); `stream` a
    (device, stream) pair (`Stream`, what `choices` offers of several devices) or a stream number
    (that stream of every device)."""
    mask = np.ones(len(kernels), dtype=bool)
    if step is not None:
        mask &= (kernels["step"] == step).fillna(False).to_numpy()
    if rank is not None:
        mask &= (kernels["rank"] == rank).to_numpy()
    if isinstance(stream, tuple):
        device, stream = stream
        on = kernels["device"].isna() if device is None else (kernels["device"] == device).fillna(False)
        mask &= on.to_numpy(dtype=bool)
    if stream is not None:
        mask &= (kernels["stream"] == stream).fillna(False).to_numpy()
    if category is not None:
        mask &= (kernels["category"].astype(str) == category).to_numpy()
    if module is not None:
        paths = kernels["module"].astype(str)
        mask &= ((paths == module) | paths.str.startswith(module + ".")).to_numpy()
    if min_us:
        mask &= (kernels["dur_us"] >= min_us).to_numpy()
    return kernels[mask]


MAX_CHOICES = 1_000  # values of a dropdown (a trace may claim 100k streams: a page of widget state)


def choices(kernels: pd.DataFrame) -> dict[str, list[Any]]:
    """Filter values present in a run, for dropdowns: at most MAX_CHOICES of each, the lowest."""

    def values(column: str) -> list[Any]:
        return sorted(v for v in kernels[column].dropna().unique().tolist())[:MAX_CHOICES]

    modules = kernels["module"].dropna().astype(str)
    top_modules = sorted({".".join(m.split(".")[:2]) for m in modules.unique()})[:MAX_CHOICES]
    return {
        "step": [int(v) for v in values("step")],
        "rank": [int(v) for v in values("rank")],
        "stream": streams(kernels),
        "category": [str(v) for v in values("category")],
        "module": top_modules,
    }


def streams(kernels: pd.DataFrame) -> list[int] | list[Stream]:
    """The streams of `kernels`, the lowest MAX_CHOICES: their numbers where the rows hold one
    device (the plain label `7`), else one `Stream` per device and stream (`device 1 stream 7`)."""
    pairs = kernels[["device", "stream"]] if "device" in kernels else kernels[["stream"]].assign(device=0)
    pairs = pairs[pairs["stream"].notna().to_numpy()].drop_duplicates()
    if pairs["device"].nunique(dropna=False) < 2:
        return sorted(int(v) for v in pairs["stream"].unique())[:MAX_CHOICES]
    found = [
        Stream(None if pd.isna(d) else int(d), int(s)) for d, s in zip(pairs["device"], pairs["stream"], strict=True)
    ]
    return sorted(found, key=lambda p: (p.device is None, p.device or 0, p.stream))[:MAX_CHOICES]


def _busy_span(kernels: pd.DataFrame) -> tuple[float, float, int]:
    """Busy and span time summed over the devices of `kernels`, and how many devices."""
    devices = gpu_time_facts(kernels)["devices"] if len(kernels) else []  # no full analysis for the cards
    return sum(d["busy_us"] for d in devices), sum(d["span_us"] for d in devices), len(devices)


def summary_cards(run: Run, kernels: pd.DataFrame) -> str:
    """HTML cards: GPU, kernels, busy/idle, top category — of the run, or of `kernels` where it
    is a filtered part of the run (fewer rows than `run.kernels`): then its time and share of the
    run's GPU time, and the run's own busy, span and idle. The span of a part less its busy time
    is no idle time: the GPU ran the other kernels then (a gemm filter called the elementwise
    kernels between two gemms idle, more idle than the GPU ever had)."""
    whole = getattr(run, "kernels", kernels)  # a stand-in of a run without kernels: `kernels` are the run
    part = len(kernels) < len(whole)
    busy, span, devices = _busy_span(whole)
    gpus = gpu_names(run.summary)
    # as the terminal and report.html write times; several devices' busy and span add up, said
    summed = f" ({devices} devices summed)" if devices > 1 else ""
    top = kernels.groupby("category", observed=True)["dur_us"].sum().sort_values(ascending=False)
    time = float(kernels["dur_us"].sum())
    utilisation = (f"busy / span{summed}", f"{fmt_us(busy)} / {fmt_us(span)} ({100 * busy / span if span else 0:.1f}%)")
    if part:
        total = float(whole["dur_us"].sum())
        share = f" ({100 * time / total:.1f}%)" if total > 0 else ""
        counts = [
            ("GPU activities (selected)", f"{len(kernels):,} of {len(whole):,}"),
            ("GPU time (selected)", f"{fmt_us(time)} of {fmt_us(total)}{share}"),
            (f"run {utilisation[0]}", utilisation[1]),
            (f"run idle{summed}", fmt_us(span - busy)),
        ]
    else:
        counts = [
            ("GPU activities", f"{len(kernels):,}"),
            ("GPU time", fmt_us(time)),
            utilisation,
            (f"idle{summed}", fmt_us(span - busy)),
        ]
    cards = [
        ("GPU", ", ".join(gpus) or "unknown"),
        ("peaks", run.device.name if run.device else "no device peaks"),
        *counts,
        (
            "top category (selected)" if part else "top category",
            f"{top.index[0]} {100 * top.iloc[0] / top.sum():.1f}%" if len(top) and top.sum() > 0 else "–",
        ),
    ]
    style = "display:inline-block;margin:4px;padding:8px 12px;border:1px solid #ccc;border-radius:6px"
    body = "".join(
        f"<div style='{style}'><div style='font-size:11px;color:#666'>{html.escape(k)}</div>"
        f"<div style='font-size:16px'>{html.escape(v)}</div></div>"
        for k, v in cards
    )
    return inert(f"<div>{body}</div>")


@_one_line
def findings_html(run: Run) -> str:
    """The top of the dashboard: the costed share of GPU time and what to fix first — from the
    run's report.json where `atlas report` wrote one with this page's peaks, else the kernel
    headroom of a fresh analysis. One device per page: a report projected on another GPU
    (`atlas report --device mi300x`) costed its findings with that GPU's peaks, and beside this
    page's cards, roofline and headroom (the traced H100's) had put a kernel at 0.3 % of the
    roofline above a table that said 0.5 %."""
    from kernel_atlas.analysis.findings import headroom_findings

    facts = read_report(run.out_dir, run.summary.get("run_id"))
    note = " (kernel headroom only: run `atlas report` for waits, launch-bound stretches and communication)"
    if facts is not None and not _same_device(facts.get("device"), run.device):
        reported = facts.get("device")
        other = str(reported.get("name")) if isinstance(reported, dict) else "no device peaks"
        theirs = f"a projection on {other}" if facts.get("projection") else f"costed with {other}"
        mine = run.device.name if run.device is not None else "no device peaks"
        note = (
            f" (kernel headroom with {mine}: report.json's findings are {theirs}; `atlas report` with "
            "this page's device adds waits, launch-bound stretches and communication)"
        )
        facts = None
    elif facts is not None:
        note = ""
    if facts is None:
        analysis = run.analyse()
        facts = {
            **analysis.facts,
            "findings": [f.to_json() for f in headroom_findings(analysis.roofline, kernels=analysis.kernels)],
        }
    gpu, costed = facts.get("gpu_time_us") or 0.0, facts.get("costed_time_us") or 0.0
    share = f"{100 * costed / gpu:.1f} % of {fmt_us(gpu)} of GPU time has a cost (FLOPs or bytes)" if gpu else ""
    rows = "".join(
        f"<li><b>{fmt_us(f['saving_us'])}</b> {html.escape(str(f['kind']))}: "
        f"{html.escape(str(f['what']))} — {html.escape(str(f.get('where') or '–'))} "
        f"<span style='color:#666'>({html.escape(str(f['evidence']))})</span></li>"
        for f in facts.get("findings", [])[:5]
    )
    body = f"<ol>{rows}</ol>" if rows else f"<p>{html.escape(nothing_found(run.device is not None))}</p>"
    return inert(f"<div><p>{html.escape(share)}</p><h3>What to fix first{html.escape(note)}</h3>{body}</div>")


def _same_device(reported: object, device: Device | None) -> bool:
    """Whether report.json's `device` (its key, name and source; null without peaks) is `device`,
    the peaks this page costs with."""
    key = reported.get("key") if isinstance(reported, dict) else None
    return key == (device.key if device is not None else None)


def first_step(kernels: pd.DataFrame) -> int | None:
    steps = kernels["step"].dropna()
    return int(steps.min()) if len(steps) else None


def _one_rank_timeline(kernels: pd.DataFrame, straggler: int | None = None) -> tuple[Timeline, str]:
    """The first step of one rank — of several, the one report.html draws (`timeline_rows`): the
    top straggler `straggler` where it has activities here, else the rank with the most GPU time
    — and the note naming it (a first step taken over all ranks drew only the ranks that recorded
    it, under no rank's name)."""
    rows, ranks = timeline_rows(kernels, straggler)
    timeline = timeline_of(rows, first_step(rows))
    why = "the top straggler" if straggler is not None and timeline.rank == straggler else "the most GPU time"
    return timeline, f"rank {timeline.rank} of {ranks}: {why}" if ranks > 1 else ""


def _ranks(kernels: pd.DataFrame) -> int:
    return int(kernels["rank"].nunique()) if "rank" in kernels and len(kernels) else 1


def figures(run: Run, kernels: pd.DataFrame) -> dict[str, go.Figure]:
    analysis = run.analyse(kernels)
    drawn = {
        "timeshare": timeshare_figure(analysis),
        "top-kernels": top_kernels_figure(analysis),
        "roofline": roofline_figure(analysis, run.device),
        "headroom": headroom_figure(analysis),
        "modules": module_figure(module_times(kernels), _ranks(kernels)),  # "N ranks summed", as report.html
        "timeline": timeline_figure(*_one_rank_timeline(kernels, run.straggler)),
    }
    return {key: widget(fig) for key, fig in drawn.items()}


def kernel_details(kernels: pd.DataFrame, name: str) -> pd.DataFrame:
    """Shapes, launcher and call stack of one kernel's distinct calls (for a click-to-inspect view)."""
    rows = kernels[kernels["name"].astype(str) == name]
    columns = ["launcher", "input_dims", "input_types", "module", "call_stack"]
    grouped = rows.groupby(columns, dropna=False, observed=True)["dur_us"].agg(["count", "sum", "mean"])
    return grouped.sort_values("sum", ascending=False).reset_index()


def kernel_options(names: list[str], width: int = 90) -> list[tuple[str, str]]:
    """(label, name) of a kernel picker: each kernel's short name, cut to `width` characters,
    those that read alike numbered (`[2/3]`) — 37 of a run's 91 kernels had shared a label."""
    shown = [display_name(str(name))[:width] for name in names]
    return list(zip(numbered_alike(shown), names, strict=True))


def kernel_roofline(analysis: Analysis, name: str) -> pd.DataFrame:
    """Where one kernel's shapes sit on the roofline (its rows of the roofline table), the most
    time first (dynamic shapes give a kernel thousands of rows)."""
    table = analysis.roofline
    columns = [
        "input_dims",
        "role",
        "count",
        "total_us",  # the kernel's own time, beside its op calls' (helper kernels too)
        "op_time_us",
        "achieved_tflops",
        "achieved_gbps",
        "sol_pct",
        "bound",
        "headroom_us",
        "note",
    ]
    # a roofline.parquet of an older report has no `total_us`: its op calls' time then
    rows = table.loc[table["name"].astype(str) == name, [c for c in columns if c in table]]
    return rows.sort_values("total_us" if "total_us" in rows else "op_time_us", ascending=False, kind="stable")


# --- comparing two runs --------------------------------------------------------------------


def _side(run: Run) -> Side:
    """A run's side as `atlas diff` reads it (`diff.side_of_kernels`, one rule with `side_of`), from
    the kernels in memory: its activities, its ingest warnings and its window — ranks, profiler
    steps and the GPU time outside them. A side without its summary left that time at 0: a run
    with 40 µs of warm-up before its 3 steps read "comparable" beside one without, where `atlas
    diff` said the windows differ."""
    return side_of_kernels(run.label, run.kernels, gpu_names(run.summary), run.summary, run.ranks)


@_one_line
def compare_runs(a: Run, b: Run) -> Diff:
    """Time per category, op, module and kernel in both runs and the change (`atlas diff`)."""
    return compare(_side(a), _side(b))


def compare_comparability(diff: Diff) -> Comparability:
    """How comparable the two runs are, as `atlas diff` judges it (`gate.comparability`)."""
    calls = (diff.a.activities, diff.b.activities)  # the share at shapes both runs record, as `atlas diff`
    return comparability(diff.table, diff.a.gpus, diff.b.gpus, diff.a.window, diff.b.window, calls)


def comparability_html(diff: Diff) -> str:
    """The comparability line `atlas diff` prints with every comparison: the two GPUs, what each
    run's times are totals over (ranks, steps) where they differ, the share of GPU time in ops
    and kernels both runs have."""
    line = comparability_line(compare_comparability(diff))
    a, b = diff.a, diff.b
    runs = "".join(
        f"<li>{name}: {html.escape(side.label)} on {html.escape(', '.join(side.gpus) or 'unknown GPU')}, "
        f"GPU time {fmt_us(side.gpu_time_us)}</li>"
        for name, side in (("A", a), ("B", b))
    )
    warned = "".join(f"<li><b>warning:</b> {html.escape(said)}</li>" for said in ingest_warnings(diff))
    return inert(f"<ul>{runs}<li><b>comparability:</b> {html.escape(line)}</li>{warned}</ul>")


def ingest_warnings(diff: Diff) -> list[str]:
    """What ingest said of each run (its summary.json's warnings) as `atlas diff` prints it after
    loading them, since it changes the comparison: a run's first warning and how many there are
    ("5291 of 15632 GPU activities have no launcher" on the V100 of the A100/V100 pair)."""
    said = []
    for name, side in (("A", diff.a), ("B", diff.b)):
        if side.warnings:
            more = f" ({len(side.warnings)} ingest warnings: summary.json)" if len(side.warnings) > 1 else ""
            said.append(redact_text(f"{name} ({side.label}): {side.warnings[0]}{more}"))
    return said


ONE_RUN_COLUMNS = ["key", "a_us", "b_us", "delta_us", "a_count", "b_count"]


def one_run_kernels(diff: Diff) -> list[tuple[str, pd.DataFrame]]:
    """The kernels that appeared in B and those that vanished from A, as `atlas diff` counts and
    prints them (`Diff.one_run_kernels`): each kernel with all its GPU time, in op+shapes groups
    too, largest first, under a title giving how many and how long. The kernel level's rows with
    status appeared or vanished hold only a kernel's time outside groups, and a kernel that ran
    only inside them has none: counted there, the A100/V100 pair had 61 vanished, not 66."""
    # the terminal's titles, begun in lower case as the notebook's other lines are
    return [
        (title[0].lower() + title[1:], rows[ONE_RUN_COLUMNS]) for _, title, rows in units.one_run_kernels(diff).sections
    ]


def compare_figure(diff: Diff, level: str = "category", top: int = 20) -> go.Figure:
    """GPU time per `level` (category, op_mapping, module, kernel) in both runs side by side."""
    return widget(diff_figure(diff, level, top))


# --- replay -----------------------------------------------------------------------------------


def replay_vs_traced(run: Run) -> pd.DataFrame | None:
    """Replayed (median) against traced time per replayed kernel and shape, when replay.parquet exists."""
    if run.replay is None or run.replay.empty:
        return None
    table = run.replay.copy()
    # replay writes `ratio` only where it timed the traced kernel itself; older files lack it
    if "ratio" not in table and "traced_us" in table and "median_us" in table:
        table["ratio"] = table["median_us"] / table["traced_us"].where(table["traced_us"] > 0)
    return table


def on_cpu(table: pd.DataFrame) -> np.ndarray:
    """Rows of replay.parquet replayed on the CPU: wall clock, no GPU time (`atlas replay`
    leaves their `ratio` empty and says "CPU times are not GPU times")."""
    device = table["device"].astype(str) if "device" in table else pd.Series("", index=table.index)
    method = table["method"].astype(str) if "method" in table else pd.Series("", index=table.index)
    return ((device == "cpu") | method.str.startswith("cpu")).to_numpy()


def replay_figure(table: pd.DataFrame) -> go.Figure:
    """Replayed (median) against traced time per kernel and shape. Replays on a GPU are drawn
    against the line replayed = traced; replays on the CPU (wall clock) apart, said, and never
    against that line — their times are not GPU times."""
    hover = [label(f"{display_name(str(k))} {d}") for k, d in zip(table["kernel"], table["input_dims"], strict=True)]
    cpu = on_cpu(table)
    fig = go.Figure()
    for rows, name, what in ((~cpu, "replayed on the GPU", "replayed"), (cpu, "replayed on the CPU", "CPU wall clock")):
        if rows.any():
            fig.add_trace(
                go.Scatter(
                    x=table["traced_us"][rows],
                    y=table["median_us"][rows],
                    mode="markers",
                    name=name,
                    text=[t for t, keep in zip(hover, rows, strict=True) if keep],
                    hovertemplate=f"%{{text}}<br>traced %{{x:.2f}} µs, {what} %{{y:.2f}} µs<extra></extra>",
                )
            )
    heading = "Replayed vs traced time per kernel and shape"
    gpu = table[~cpu]
    if len(gpu):
        top = float(np.nanmax([gpu["traced_us"].max(), gpu["median_us"].max(), 1.0]))
        fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="replayed = traced", line={"dash": "dot"}))
    if cpu.any():
        heading += (
            f"<br><sup>{int(cpu.sum()):,} replayed on the CPU: wall clock, not GPU time — not comparable with "
            "the traced GPU times (no replayed = traced line for them)</sup>"
        )
    axis = "replayed µs (median)" if not cpu.any() else "replayed µs (median; CPU: wall clock)"
    fig.update_layout(title=heading, xaxis_title="traced µs (GPU)", yaxis_title=axis, height=500)
    return fig


def replay_roofline(run: Run) -> go.Figure:
    """The traced roofline with the replayed points (`merge_replay`: the replay's throughput at the
    row's intensity), CPU replays among them — which report.html keeps off the GPU roofline — said
    where they ran on the CPU."""
    from kernel_atlas.report.build import merge_replay  # the report's whole pipeline: loaded when asked

    analysis = run.analyse()
    replayed = run.replay is not None and not run.replay.empty
    if replayed:
        # the report keeps a CPU replay off the GPU roofline; this notebook shows the replays
        # themselves, so draws them, under a title that says where they ran (below)
        analysis.roofline = merge_replay(analysis.roofline, run.replay, run.device, rates_apart=True)
    fig = widget(roofline_figure(analysis, run.device))
    if replayed and on_cpu(run.replay).any():
        fig.layout.title.text = (
            f"{fig.layout.title.text}<br><sup>replayed points ran on the CPU: wall clock, not GPU time</sup>"
        )
    return fig


MISSING = "–"  # how a table shows a value the trace does not give (the report's own sign)


def table_html(frame: pd.DataFrame, rows: int | None = None) -> str:
    """A table for a notebook: its first `rows` rows, values the trace does not give (null,
    NaN, pandas' NA, ±inf) shown as `–` rather than `NaN`, `None` or `<NA>`, texts escaped."""
    shown = (frame if rows is None else frame.head(rows)).copy()
    for column in shown.columns:
        values = shown[column]
        if pd.api.types.is_float_dtype(values.dtype):  # pandas' own number format, NaN as na_rep
            shown[column] = values.where(np.isfinite(values.to_numpy(np.float64, na_value=np.nan)))
        else:
            cells = values.astype(object)
            known = cells.notna().to_numpy() & ~np.array([_not_finite(v) for v in cells], dtype=bool)
            shown[column] = cells.where(known, MISSING)
    return inert(shown.to_html(index=False, na_rep=MISSING, escape=True))


def text(value: object) -> str:
    """Text from a trace (a kernel's name) for a notebook's HTML: escaped, shown as written."""
    return html.escape(str(value))


def inert(snippet: str) -> str:
    """An HTML snippet that notebooks show as it is: the classes that keep MathJax 2 and 3
    (classic notebooks, JupyterLab) from typesetting trace text between `$` or `\\(`."""
    return f"<div class='tex2jax_ignore mathjax_ignore'>{snippet}</div>"


def _not_finite(value: Any) -> bool:
    return isinstance(value, float | np.floating) and not np.isfinite(value)


def display_output(item: go.Figure | str) -> dict[str, Any]:
    """An output record for an ipywidgets `Output` panel: a plotly figure (interactive in
    JupyterLab and classic notebooks) or an HTML snippet."""
    if isinstance(item, go.Figure):
        data = {
            "application/vnd.plotly.v1+json": json.loads(item.to_json()),
            "text/html": item.to_html(include_plotlyjs=False, full_html=False),
            "text/plain": f"<Figure: {item.layout.title.text}>",
        }
    else:
        data = {"text/html": inert(item), "text/plain": "<HTML>"}
    return {"output_type": "display_data", "data": data, "metadata": {}}
