"""Rich terminal output of the commands, fitted to the terminal width (`COLUMNS` is respected).

Tables show short kernel names (`classify.names.display_name`) and shapes in their own column,
at most two lines per row; columns that do not fit are left out and named. `wide=True` prints
everything in full. The report and the ingest summary are lists of small section functions:
adding a section is adding one function to `REPORT_SECTIONS` / `TRACE_LINES`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.cells import cell_len
from rich.console import Console

from kernel_atlas.classify.names import display_name
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import redact_text
from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.capture import graph_summary_line
from kernel_atlas.ingest.infer import inferred_summary_line
from kernel_atlas.report.efficiency_view import efficiency_lines, report_lines
from kernel_atlas.report.fit import Column, print_table
from kernel_atlas.report.markup import esc
from kernel_atlas.report.progress import progress_bar
from kernel_atlas.report.trust_view import trust_lines
from kernel_atlas.report.units import (
    change_pct,
    describe_key,
    device_number,
    device_time_line,
    fmt_number,
    fmt_pct,
    fmt_shapes,
    fmt_signed_us,
    fmt_us,
    no_peaks_line,
    nothing_found,
    one_run_kernels,
    other_gpus_line,
    peaks_line,
    present_us,
    projection_note,
    shared_rank_line,
    unknown_gpu_text,
)
from kernel_atlas.report.waits_view import print_waits

if TYPE_CHECKING:
    from kernel_atlas.ingest.pipeline import IngestResult
    from kernel_atlas.report.build import Report

__all__ = [
    "fmt_us",
    "print_catalog_costs",
    "print_diff",
    "print_ingest_summary",
    "print_replay",
    "print_report",
    "progress",
]

KERNEL = Column("kernel", justify="left", flex=3, min_width=20, middle=True)
SHAPES = Column("shapes", justify="left", flex=2, min_width=12)


def _text(console: Console, line: str) -> None:
    """A line of rich markup; user strings in it went through `esc`."""
    console.print(line, highlight=False)


def _files_line(console: Console, files: dict[str, Path]) -> None:
    """`wrote FOLDER/: a, b` for files in one folder (paths never wrap mid-name); nothing when
    nothing was written."""
    paths = [Path(p) for p in files.values()]
    if not paths:
        return
    folders = {p.parent for p in paths}
    if len(folders) == 1:  # paths the user named (--html, -o) may hold a credential: redacted like any text
        folder = redact_text(str(next(iter(folders))))
        _text(console, f"wrote {esc(folder.rstrip('/') + '/')}: " + esc(redact_text(", ".join(p.name for p in paths))))
        return
    _text(console, "wrote " + esc(redact_text(", ".join(str(p) for p in paths))))


# --- atlas ingest -------------------------------------------------------------------------------


@contextmanager
def progress(console: Console, paths: list[Path], disable: bool = False) -> Iterator[tuple[Any, Any]]:
    """Progress for `atlas ingest`: per stage of one large trace (over 50 MB), per trace for several.

    Yields (on_done(path), on_progress(stage, fraction)) callbacks; silent unless `console` is a terminal."""
    sizes = [_size(p) for p in paths]
    if disable or (len(paths) == 1 and sizes[0] < 50 << 20):
        yield (lambda _p: None), None
        return
    if len(paths) == 1:
        with progress_bar(console, "reading", total=1.0) as bar:
            yield (lambda _p: None), (bar.update if bar.shown else None)
    else:
        with progress_bar(console, f"ingesting {len(paths)} traces", total=len(paths)) as bar:
            yield (lambda p: bar.advance(detail=Path(p).name)), None


def _size(path: Path) -> int:
    """A trace's size for the progress bar, 0 where it is no file — or is no longer one: a trace
    removed as `atlas ingest DIR` starts is that trace's failure, reported with the others
    completed, not the whole ingest's (campaign AW 10)."""
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _trace_header(facts: dict[str, Any]) -> list[str]:
    named = ", ".join(sorted({str(g.get("name", "?")) for g in facts["gpus"]}))
    # the devices no entry of the trace's device table describes have no GPU name, said so
    unknown = unknown_gpu_text(facts.get("undescribed_devices") or [])
    gpus = "; ".join(part for part in (named, unknown) if part) or "unknown GPU"
    return [
        f"[bold]{esc(redact_text(facts['file']))}[/]  rank {facts['rank']}  {esc(gpus)}",
        f"  {facts['events']:,} events, {facts['kernels']:,} kernels, "
        f"{facts['gpu_activities'] - facts['kernels']:,} memcpy/memset",
    ]


def _device_lines(facts: dict[str, Any]) -> list[str]:
    return [
        f"  device {device_number(dev['device'])}: span {fmt_us(dev['span_us'])}, busy {fmt_us(dev['busy_us'])} "
        f"({dev['busy_pct']:.1f}%), idle {fmt_us(dev['idle_us'])}, streams {dev['streams']}"
        for dev in facts["devices"]
    ]


def _link_lines(facts: dict[str, Any]) -> list[str]:
    linked, total = facts["with_launcher"], facts["gpu_activities"]
    if not total:
        return []
    return [
        f"  launcher known for {linked:,}/{total:,} ({100 * linked / total:.1f}%), "
        f"shapes for {facts['with_shapes']:,}, graph-replayed {facts['graph_launched_kernels']:,}"
    ]


def _graph_lines(facts: dict[str, Any]) -> list[str]:
    lines = (graph_summary_line(facts.get("graphs")), inferred_summary_line(facts.get("shapes_inferred")))
    return ["  " + esc(line) for line in lines if line]


def _memory_lines(facts: dict[str, Any]) -> list[str]:
    count = facts.get("memory_events", 0)
    return [f"  {count:,} memory events (`atlas report` shows where the GPU memory goes)"] if count else []


# Lines printed per trace by `atlas ingest`, in order; each takes the trace's facts (summary.json).
TRACE_LINES: list[Callable[[dict[str, Any]], list[str]]] = [
    _trace_header,
    _device_lines,
    _link_lines,
    _graph_lines,
    _memory_lines,
    efficiency_lines,
]


_TRACES_SHOWN = 16  # traces described one by one in the ingest summary


def print_ingest_summary(
    console: Console, result: IngestResult, files: dict[str, Path], top: int = 10, wide: bool = False
) -> None:
    traces = result.facts["traces"]
    shown = traces if wide else traces[:_TRACES_SHOWN]
    for facts in shown:
        for lines in TRACE_LINES:
            for line in lines(facts):
                _text(console, line)
    if len(traces) > len(shown):
        _text(console, f"… and {len(traces) - len(shown):,} more traces (summary.json; --wide shows all)")
    times = result.kernel_time  # GPU time per (name, category, op_mapping), heaviest first
    if len(times):
        kernel_time = float(times["sum"].sum())
        grouped = times.head(top)
        columns = [
            Column("time"),
            Column("%"),
            Column("calls", drop=1),
            Column("category", justify="left", drop=2),
            Column("op", justify="left"),
            KERNEL,
        ]
        rows = [
            [
                fmt_us(row.sum),
                f"{100 * row.sum / kernel_time:.1f}" if kernel_time > 0 else "–",  # every kernel of no length
                f"{int(row.count):,}",
                str(row.category),
                str(row.op_mapping),
                str(row.name) if wide else display_name(str(row.name)),
            ]
            for row in grouped.itertuples(index=False)
        ]
        print_table(console, columns, rows, f"Top {len(grouped)} kernels by GPU time", wide)
    _files_line(console, files)


# --- atlas report -------------------------------------------------------------------------------


@dataclass
class ReportView:
    """How the terminal report is printed: `full` prints every section in full, the default a
    brief version of each (rows too small to matter folded into one line)."""

    top: int = 12
    wide: bool = False
    full: bool = False


BRIEF_ROWS = 5  # table rows of the brief report
BRIEF_CATEGORIES = 8
BRIEF_DEVICES = 2  # per-device lines of the brief report's sections
SMALL_SHARE = 0.01  # rows under this share of GPU time are folded in the brief report


BRIEF_TRUST = 3  # lines of the trust section in the brief report (the costed share, then reasons)


def _trust_section(console: Console, report: Report, view: ReportView) -> None:
    trust = report.analysis.facts.get("trust")
    lines = trust_lines(trust, clocks=False)
    if not view.full and len(lines) > BRIEF_TRUST:  # the share and the largest reasons, one line each
        lines = [*lines[: BRIEF_TRUST - 1], f"  … {len(lines) - BRIEF_TRUST + 1} more lines: --section trust"]
    for i, line in enumerate(lines):
        if not view.full and not view.wide and i > 0 and cell_len(line) > console.width:
            line = _cut(line, console.width)
        _text(console, f"[bold]{esc(line)}[/]" if i == 0 else f"[yellow]{esc(line)}[/]")
    if trust and trust.get("clocks"):  # whole, however narrow the terminal: it qualifies what follows
        console.print(f"[yellow]  {esc(trust['clocks'])}[/]", highlight=False)


def _device_section(console: Console, report: Report, view: ReportView) -> None:
    device = report.device
    facts = report.analysis.facts
    if device is None:
        _text(console, f"[yellow]{esc(no_peaks_line(report.traced_gpu))}[/]")
        _shared_rank_lines(console, report)
        return
    projection = projection_note(facts)
    projected = f" [bold yellow]({esc(projection)})[/]" if projection else ""
    _text(console, f"[bold]device[/] {esc(peaks_line(device))}{projected}")
    if facts.get("traced_gpu_identified"):
        _text(console, f"[yellow]{esc(facts['traced_gpu_identified'])}[/]")
    others = other_gpus_line(facts)
    if others:
        _text(console, f"[yellow]{esc(others)}[/]")
    _shared_rank_lines(console, report)


def _shared_rank_lines(console: Console, report: Report) -> None:
    """One line per rank that several traces claim (whether or not the GPU has peaks)."""
    for shared in report.analysis.facts.get("shared_ranks", []):
        _text(console, f"[yellow]{esc(shared_rank_line(shared))}[/]")


_DEVICES_SHOWN = 8  # device lines of a multi-rank run; the per-rank table follows


def _busy_section(console: Console, report: Report, view: ReportView) -> None:
    devices = report.analysis.facts["devices"]
    shown = devices if view.wide else devices[:_DEVICES_SHOWN]
    for d in shown:
        _text(console, esc(device_time_line(d)))
    if len(devices) > len(shown):
        _text(console, f"… and {len(devices) - len(shown):,} more devices (report.json; --wide shows all)")


def _category_section(console: Console, report: Report, view: ReportView) -> None:
    timeshare = report.analysis.timeshare
    share = timeshare[timeshare["level"] == "category"]
    folded = share.iloc[0:0]
    if not view.full:
        keep = (share["pct"] >= 100 * SMALL_SHARE).to_numpy() & (np.arange(len(share)) < BRIEF_CATEGORIES)
        share, folded = share[keep], share[~keep]
    columns = [Column("category", justify="left"), Column("time"), Column("%"), Column("count")]

    def pct(value: float) -> str:  # NaN: no GPU time to share (every activity 0 µs)
        return f"{value:.1f}" if value == value else "–"

    rows = [[row.key, fmt_us(row.total_us), pct(row.pct), f"{row.count:,}"] for row in share.itertuples()]
    if len(folded):
        rows.append(
            [
                f"… {len(folded)} more",
                fmt_us(folded["total_us"].sum()),
                pct(folded["pct"].sum(min_count=1)),
                f"{int(folded['count'].sum()):,}",
            ]
        )
    # summed over activities, overlaps counted in full: a category's time may exceed the device
    # time the busy lines give it (their communication counts time with any running once)
    title = "GPU time by category (summed: overlaps count in full)"
    print_table(console, columns, rows, title, view.wide)


HEADROOM_COLUMNS = [
    Column("headroom"),
    Column("time"),
    Column("calls", drop=5),
    Column("SOL%"),
    Column("bound", justify="left", drop=3),
    Column("TFLOP/s", drop=1),
    Column("GB/s", drop=2),
    Column("op", justify="left", drop=4),
    KERNEL,
    SHAPES,
]


def _headroom_section(console: Console, report: Report, view: ReportView) -> None:
    roof = report.analysis.roofline
    ranked = roof[roof["headroom_us"].notna()].head(view.top if view.full else min(view.top, BRIEF_ROWS))
    if ranked.empty:  # a heading over no row said nothing: why there is none, in one line
        why = "no peaks for this GPU (--device)" if report.device is None else "no costed kernel"
        _text(console, f"[bold]Where optimisation pays most:[/] no headroom to rank: {why}")
        return
    rows = [
        [
            fmt_us(row.headroom_us),
            fmt_us(row.op_time_us),
            f"{row.count:,}",
            fmt_pct(row.sol_pct).removesuffix("%"),  # – where no rate is known
            str(row.bound),
            fmt_number(row.achieved_tflops),
            fmt_number(row.achieved_gbps),
            str(row.op_mapping),
            str(row.name) if view.wide else display_name(str(row.name)),
            str(row.input_dims) if view.wide else fmt_shapes(row.input_dims),
        ]
        for row in ranked.itertuples(index=False)
    ]
    title = "Where optimisation pays most (headroom: time above the roofline-attainable time)"
    print_table(console, HEADROOM_COLUMNS, rows, title, view.wide)
    waited = float(roof["peer_wait_us"].sum()) if "peer_wait_us" in roof else 0.0
    if waited > 0:
        _text(
            console,
            f"collectives: {fmt_us(waited)} of their time waited for the last rank to arrive; their SOL and "
            "headroom are of the time after it (`peer_wait_us` in roofline.parquet)",
        )


def _no_cost_section(console: Console, report: Report, view: ReportView) -> None:
    facts = report.analysis.facts
    missing = facts["no_shape_time_us"] + facts["no_model_time_us"]
    if missing:
        _text(
            console,
            f"{fmt_us(missing)} of GPU time has no cost (no recorded shapes or no cost model); "
            "see `note` in roofline.parquet",
        )
    elif view.full:  # asked for (`--section costs`, `--full`): said, not an empty section
        _text(console, "no GPU time lacks a cost for want of recorded shapes or a cost model")


def _waits_section(console: Console, report: Report, view: ReportView) -> None:
    if view.full or report.waits is None:
        print_waits(console, report.waits, top=min(view.top, 8), wide=view.wide)
        return
    for line in brief_waits_lines(report.waits.facts):
        _text(console, esc(line))


def brief_waits_lines(facts: dict[str, Any]) -> list[str]:
    """Why the GPU waits, in two lines: idle by cause with the frame the host ran most, then
    launches and what CUDA graphs would save (`--section waits` shows the tables)."""
    devices = facts.get("idle", {}).get("devices", [])
    lines = []
    if devices:
        idle = sum(d.get("idle_us", 0.0) for d in devices)
        # shares of an idle time shown as none (a float's remainder: 0.011 µs between back-to-back
        # kernels of a ROCm trace read "0.0 µs: kernel wait (100%)") are no shares
        shared = fmt_us(idle) != fmt_us(0.0)
        parts = [
            f"{label} {fmt_us(sum(d.get(key, 0.0) for d in devices))}"
            + (f" ({100 * sum(d.get(key, 0.0) for d in devices) / idle:.0f}%)" if shared else "")
            for key, label in (("host_wait_us", "host wait"), ("kernel_wait_us", "kernel wait"), ("other_us", "other"))
        ]
        worst = max(devices, key=lambda d: d.get("host_wait_us", 0.0))
        cause = f"; the host ran {worst['top_cause']} most" if worst.get("top_cause") else ""
        lines.append(f"GPU idle {fmt_us(idle)}: " + ", ".join(parts) + cause)
    launches, graphs = facts.get("launches", {}), facts.get("graph_candidates", {})
    if launches:
        eager, replayed = launches.get("eager_activities", 0), launches.get("graph_replayed", 0)
        line = f"launches: {eager:,} eager, {replayed:,} graph-replayed"
        if graphs.get("count"):
            places, stretches = graphs["count"], graphs.get("stretches", graphs["count"])
            # at most the device's idle time during the waits, as the launch_bound findings claim
            # (`waits.graph_savings`); HIP graphs on ROCm, as the findings say
            saving, waits = graphs["saving_us"], graphs.get("waits_us", graphs["saving_us"])
            hidden = f"; of {fmt_us(waits)} of waits, the device's idle time" if fmt_us(waits) != fmt_us(saving) else ""
            line += (
                f"; {graphs.get('graph') or 'CUDA'} graphs would save up to {fmt_us(saving)} ({stretches:,} "
                f"stretch{'es' if stretches != 1 else ''} in {places:,} place{'s' if places != 1 else ''}{hidden})"
            )
        lines.append(line)
    return lines


def _cross_rank_section(console: Console, report: Report, view: ReportView) -> None:
    from kernel_atlas.report.fleet import print_cross_rank

    if not view.full and report.analysis.facts.get("ranks", 1) <= 1:
        return  # one rank: nothing across ranks to say
    print_cross_rank(console, getattr(report, "cross_rank", None), report.analysis.facts, top=view.top)


def _findings_section(console: Console, report: Report, view: ReportView) -> None:
    findings = report.analysis.facts.get("findings") or []
    if not findings:
        _text(console, f"[bold]What to fix first:[/] {nothing_found(report.device is not None)}")
        return
    shown = findings if view.full else findings[:BRIEF_ROWS]
    # as the page says it: a host wait and a launch-bound stretch may name the same waits, a kernel's
    # headroom and its device's exposed communication the same kernels
    # (one line at 80 columns; the evidence: --wide, report.json `findings`)
    _text(console, "[bold]What to fix first[/] (estimated savings: they can overlap and do not add up)")
    width = console.width
    for i, finding in enumerate(shown, 1):
        line = finding_line(i, finding, view.wide)
        if not view.wide and cell_len(line) > width:
            line = _cut(line, width)
        _text(console, esc(line))


_KIND = {
    "kernel_headroom": "headroom",
    "launch_bound": "launch-bound",
    "host_wait": "host wait",
    "exposed_communication": "exposed comm",
    "straggler": "straggler",
}


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # `a.b.Module_3`, not `[param|a.b|0]`


def _short_where(where: str) -> str:
    """`op / a.b.Module_3 / dir/file.py(12): forward` → `op / Module_3 / file.py(12)`."""
    parts = []
    for part in where.split(" / "):
        if ".py(" in part:
            part = part.split("): ", 1)[0].rsplit("/", 1)[-1] + ")"
        elif _DOTTED.fullmatch(part):  # a module path: its innermost name
            part = part.rsplit(".", 1)[-1]
        parts.append(part)
    return " / ".join(parts)


def finding_line(i: int, finding: dict[str, Any], wide: bool = False) -> str:
    """`3.  347.5 µs headroom     cutlass…align8> @ matmul / Linear_0 (latency-bound, 12.9 % SOL)`."""
    kind = _KIND.get(str(finding.get("kind")), str(finding.get("kind")))
    if finding.get("bound") == "latency":  # per-call latency is no headroom to a roofline (docs/findings.md)
        kind = "latency"
    what = str(finding["what"])
    if not wide and finding.get("kind") == "kernel_headroom" and cell_len(what) > 30:  # a kernel name
        what = what[:14] + "…" + what[-15:]
    where = str(finding.get("where") or "")
    text = what + (" @ " + (where if wide else _short_where(where)) if where else "")
    if finding.get("why"):
        text += f" ({finding['why']})"
    if wide:
        text += f"; {finding['evidence']}"
    # a saving on an estimated cost (report.json `estimated_pct`) is marked where the line starts:
    # its `why` says so at the line's end, which 80 columns cut
    saving = ("~" if (finding.get("estimated_pct") or 0) > 0 else "") + fmt_us(finding["saving_us"])
    return f"{i}. {saving:>9} {kind:<12} {text}"


def _cut(line: str, width: int) -> str:
    """`line` cut to `width` terminal cells, ending in `…` (at least the `…`)."""
    if width < 2:
        return "…"
    while cell_len(line) > width - 1:
        line = line[: max(1, len(line) - max(1, cell_len(line) - width + 1))]
    return line + "…"


def _memory_section(console: Console, report: Report, view: ReportView) -> None:
    from kernel_atlas.report.memory_view import brief_memory_lines, print_memory

    if not view.full:
        for line in brief_memory_lines(report.analysis.facts.get("memory")):
            _text(console, esc(line))
        return
    print_memory(console, report.analysis.facts.get("memory"), top=min(view.top, 8), wide=view.wide)
    for warning in report.analysis.facts.get("memory_warnings", []):
        _text(console, f"[yellow]{esc(warning)}[/]")


def _report_files_section(console: Console, report: Report, view: ReportView) -> None:
    _files_line(console, report.files)


def _efficiency_section(console: Console, report: Report, view: ReportView) -> None:
    shown = None if view.wide else (_DEVICES_SHOWN if view.full else BRIEF_DEVICES)
    for line in report_lines(report.analysis.facts.get("efficiency"), shown):
        _text(console, esc(line))


def _critical_path_section(console: Console, report: Report, view: ReportView) -> None:
    """What bounds the run: the path's length and breakdown; in full its top frames and kernels
    and where optimisation pays end to end."""
    from kernel_atlas.report.critical_view import print_critical_path

    facts = report.analysis.facts.get("critical_path")
    print_critical_path(console, facts, top=min(view.top, 8) if view.full else 0, wide=view.wide)


@dataclass(frozen=True)
class Section:
    """One section of the terminal report: `--section NAME` prints it alone, in full; `brief`
    sections are in the default report (a brief version), the others only with --full."""

    name: str
    show: Callable[[Console, Report, ReportView], None]
    brief: bool = True


# The terminal report, section by section, in order; `show(console, report, view)`.
REPORT_SECTIONS: list[Section] = [
    Section("trust", _trust_section),
    Section("device", _device_section),
    Section("busy", _busy_section),
    Section("efficiency", _efficiency_section),
    Section("findings", _findings_section),
    Section("critical_path", _critical_path_section),
    Section("categories", _category_section),
    Section("headroom", _headroom_section),
    Section("costs", _no_cost_section),
    Section("waits", _waits_section),
    Section("ranks", _cross_rank_section),
    Section("memory", _memory_section),
    Section("files", _report_files_section),
]
SECTION_NAMES = tuple(section.name for section in REPORT_SECTIONS)


def print_report(
    console: Console,
    report: Report,
    top: int = 12,
    wide: bool = False,
    full: bool = False,
    sections: list[str] | None = None,
) -> None:
    """The terminal report: brief by default (fits 60 lines at 80 columns), every section in
    full with `full`, or only the named `sections` (in full)."""
    unknown = sorted(set(sections or []) - set(SECTION_NAMES))
    if unknown:
        raise AtlasError("--section", f"no section {', '.join(unknown)} (sections: {', '.join(SECTION_NAMES)})")
    view = ReportView(top=top, wide=wide, full=full or bool(sections))
    for section in REPORT_SECTIONS:
        if sections and section.name not in sections:
            continue
        if sections or full or section.brief:
            section.show(console, report, view)
    if not sections and not full:
        _text(console, "[dim]--full: every section in full; --section NAME: one of them (see --help)[/]")


# --- atlas replay -------------------------------------------------------------------------------


def print_replay(console: Console, results: Any, device: str, wide: bool = False) -> None:
    from kernel_atlas.replay.runner import replayed

    done = replayed(results)  # timed, checked or not (a skipped check is still a replay)
    # dimensions ≥ 64 shrunk by `scale` (the CPU's Triton interpreter, --scale): the shapes column
    # shows the recorded shapes, so a row that ran smaller says so next to them, never dropped
    # (the label saying "scaled by" is cut on a narrow terminal); no column where none ran scaled
    scaled = bool((done & (results["scale"] < 1)).any()) if len(results) and "scale" in results else False
    columns = [
        KERNEL,
        SHAPES,
        *([Column("scale")] if scaled else []),
        Column("implementation", justify="left", flex=1, min_width=12, drop=2),
        Column("timed", justify="left", drop=1),  # kernel / pipeline / stand-in: ratio only for kernel
        Column("config", justify="left", flex=1, min_width=12, drop=6),
        Column("median"),
        Column("p10–p90", drop=5),
        Column("traced"),
        Column("ratio"),
        Column("TFLOP/s", drop=3),
        Column("GB/s", drop=4),
        Column("check", justify="left", flex=2, min_width=12),
    ]
    rows = [
        [
            str(row.kernel) if wide else display_name(str(row.kernel)),
            str(row.input_dims or "") if wide else fmt_shapes(row.input_dims),
            # a skipped row ran at no scale: "–" as its median
            *([f"{row.scale:g}" if ran else "–"] if scaled else []),
            str(row.implementation),
            str(getattr(row, "timed", "") or ""),
            str(getattr(row, "config", "") or ""),
            fmt_us(row.median_us),
            f"{fmt_us(row.p10_us)}–{fmt_us(row.p90_us)}" if fmt_us(row.median_us) != "–" else "–",
            fmt_us(row.traced_us),
            fmt_number(row.ratio),
            fmt_number(row.achieved_tflops),
            fmt_number(row.achieved_gbps),
            f"{row.check}: {row.reason}" if row.reason else str(row.check),
        ]
        for row, ran in zip(results.itertuples(index=False), done, strict=True)
    ]
    title = f"Replay on {device}" + (" (wall clock: CPU times are not GPU times)" if device == "cpu" else "")
    print_table(console, columns, rows, title, wide)
    methods = ", ".join(sorted(set(results["method"].dropna()) - {""})) or "–"
    _text(console, f"{int(done.sum())}/{len(results)} replayed; timing method: {esc(methods)}")


# --- atlas report CATALOG -----------------------------------------------------------------------


def print_catalog_costs(
    console: Console, table: Any, device: str, path: Path, top: int = 12, wide: bool = False
) -> None:
    costed = table[table["flops"].notna()] if "flops" in table else table.iloc[0:0]
    _text(console, f"{len(costed)}/{len(table)} catalog entries costed at their example shapes on {esc(device)}")
    if "labelled_by" in table:  # some entry had no op_mapping (TBD/empty): the classifier's label costed it
        classified = int((table["labelled_by"] != "catalog").sum())
        _text(
            console,
            f"{counted(classified, 'entry', 'entries')} without a label costed by the op the classifier gives "
            "(as `atlas classify` fills it; column labelled_by)",
        )
    if len(costed):
        columns = [
            Column("attainable"),
            Column("GFLOP"),
            Column("MB"),
            Column("bound", justify="left"),
            Column("op", justify="left", drop=1),
            KERNEL,
        ]
        rows = [
            [
                fmt_us(row.attainable_us),
                fmt_number(row.flops / 1e9),
                fmt_number(row.bytes / 1e6),
                str(row.bound),
                str(row.op_mapping),
                str(row.kernel_name) if wide else display_name(str(row.kernel_name)),
            ]
            for row in costed.sort_values("attainable_us", ascending=False).head(top).itertuples(index=False)
        ]
        print_table(console, columns, rows, f"Largest attainable times on {device}", wide)
    _text(console, f"wrote {esc(redact_text(str(path)))}")


# --- atlas diff ---------------------------------------------------------------------------------


def _change(a_us: float, b_us: float, a_count: int, b_count: int) -> str:
    """`change_pct` by presence (as the Markdown says it), in the terminal's `+12.3%`."""
    return change_pct(a_us, b_us, a_count > 0, b_count > 0).replace(" %", "%")


def _largest_first(table: Any) -> Any:
    return table.reindex(table["delta_us"].abs().sort_values(ascending=False, kind="stable").index)


def _diff_table(console: Console, table: Any, header: str, title: str, wide: bool, matched: bool = False) -> None:
    """Rows of one level of a diff: the change, both times, and the key (`matched`: how it was matched)."""
    if table.empty:
        _text(console, f"[bold]{esc(title)}[/]: none")
        return
    columns = [Column("Δ"), Column("A"), Column("B"), Column("Δ%", drop=2), Column("activities A→B", drop=3)]
    if matched:
        columns.append(Column("matched", justify="left", drop=1))
    columns.append(Column(header, justify="left", flex=1, min_width=20, middle=True))
    rows = []
    for row in table.itertuples(index=False):
        cells = [
            fmt_signed_us(row.delta_us),
            present_us(row.a_us, row.a_count),
            present_us(row.b_us, row.b_count),
            _change(row.a_us, row.b_us, row.a_count, row.b_count),
            f"{row.a_count:,}→{row.b_count:,}",
        ]
        if matched:
            cells.append(str(row.matched_by))
        cells.append(str(row.key) if wide and row.matched_by != "op+shapes" else describe_key(row))
        rows.append(cells)
    print_table(console, columns, rows, title, wide)


def print_diff(console: Console, diff: Any, files: dict[str, Path], top: int = 10, wide: bool = False) -> None:
    """`atlas diff`: both runs, then time per category, op, module and kernel with the change."""
    a, b = diff.a, diff.b
    for tag, side in (("A", a), ("B", b)):
        _text(
            console,
            f"[bold]{tag}[/] {esc(side.label)}  {esc(', '.join(map(str, side.gpus)) or 'unknown GPU')}  "
            f"GPU time {fmt_us(side.gpu_time_us)} ({side.count:,} activities)",
        )
    change = b.gpu_time_us - a.gpu_time_us
    pct = _change(a.gpu_time_us, b.gpu_time_us, a.count, b.count)
    _text(console, f"[bold]B − A[/] {fmt_signed_us(change)} ({pct})")
    _diff_table(console, diff.level("category"), "category", "GPU time by category", wide)
    _diff_table(console, _largest_first(diff.level("op_mapping")).head(top), "op", "Largest changes by op", wide)
    modules = _largest_first(diff.level("module")).head(top)
    _diff_table(console, modules, "module", "Largest changes by nn.Module", wide)
    kernels = diff.level("kernel")
    both = kernels[kernels["status"] == "both"]
    title = "Biggest kernel regressions (B slower; matched by name, or by op and shapes)"
    _diff_table(console, both[both["delta_us"] > 0].head(top), "kernel", title, wide, matched=True)
    by_op = int((kernels["matched_by"] == "op+shapes").sum())
    if by_op:
        _text(console, f"{by_op:,} ops at recorded shapes matched across kernels of different names (op+shapes)")
    faster = both[both["delta_us"] < 0]
    if len(faster):
        _text(
            console,
            f"{len(faster):,} matched kernels got faster, by {fmt_us(-faster['delta_us'].sum())} in all "
            f"(largest: {esc(describe_key(faster.iloc[-1]))}, "
            f"{fmt_signed_us(faster.iloc[-1]['delta_us'])})",
        )
    # the kernels only one run ran with all their time: a kernel row holds only what lies outside
    # op+shapes groups, and these sections summed it (286.24 of the 308.16 ms only a V100 ran)
    for _, title, rows in one_run_kernels(diff).sections:
        if len(rows):
            _diff_table(console, rows.head(top), "kernel", title, wide)
    from kernel_atlas.report.memory_view import print_memory_diff

    print_memory_diff(console, getattr(diff, "memory", []), top=top, wide=wide)
    _files_line(console, files)


def print_gate(console: Console, comparability: str, verdict: str | None, failed: bool) -> None:
    """After `atlas diff`: how comparable the runs are and, with --fail-above, the verdict."""
    _text(console, f"[bold]comparability:[/] {esc(comparability)}")
    if verdict is not None:
        colour = "red" if failed else "green"
        _text(console, f"[bold {colour}]diff gate:[/] {esc(verdict)}")
