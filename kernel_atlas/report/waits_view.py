"""Why the GPU waits, shown: a terminal section (fitted tables) and an HTML section (plotly +
sortable, filterable tables). Both are bounded on runs of many ranks: the tables and the figure
show the devices and streams with the most idle time and say where the rest is."""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from kernel_atlas.analysis.idle import CATEGORIES, other_basis
from kernel_atlas.analysis.launches import clocks_found
from kernel_atlas.analysis.waits import Waits
from kernel_atlas.classify.names import display_name
from kernel_atlas.ingest.frames import STACK_SEPARATOR
from kernel_atlas.report import plot
from kernel_atlas.report.datatable import TableColumn, data_table
from kernel_atlas.report.fit import Column, print_table
from kernel_atlas.report.markup import literal
from kernel_atlas.report.units import fmt_pct, fmt_us

_LABEL = {"host_wait": "host wait", "kernel_wait": "kernel wait", "other": "other"}
# `dir/file.py(line): function`: the directories are dropped on a narrow terminal
_PY_FRAME = re.compile(r"^\S*[/\\](?=[^/\\\s]+\(\d+\): )")

FRAME = Column("frame", justify="left", flex=3, min_width=12, middle=True)
MODULE = Column("module", justify="left", flex=2, min_width=12, tail=True, drop=1)
FIGURE_BARS = 16  # devices, and streams, drawn in the idle figure; the rest summed in one bar each
CONVENTION_DEVICES = 3  # devices named in the line comparing the two conventions
DIFFERENT_PCT = 3.0  # the conventions differ when a category's times differ by more than this
_BASIS = {"exact": "exact timestamps", "hta": "HTA's conventions"}
_BASIS_IN_FULL = {
    "exact": "Exact timestamps",
    "hta": "HTA's conventions (timestamps rounded to the µs, window ending at the last ProfilerStep)",
}


def _text(value: object, missing: str = "") -> str:
    return missing if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)) else str(value)


def _whole(value: object) -> object:
    """A stream or device id as the integer it is (a float column's 7.0 as 7); a missing one as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _where(rank: object, device: object, stream: object = None) -> str:
    text = f"rank {rank} device {'?' if pd.isna(device) else _whole(device)}"
    return text if stream is None or pd.isna(stream) else f"{text} stream {_whole(stream)}"


def _file_and_function(frame: str) -> str:
    """`transformers/models/bert/modeling_bert.py(1001): forward` → `modeling_bert.py(1001): forward`;
    other frames (CPU ops, `## record_function ##` ranges) as they are."""
    return _PY_FRAME.sub("", frame)


def _frame(value: object, wide: bool, missing: str = "") -> str:
    text = _text(value, missing)
    return text if wide else _file_and_function(text)


def _wide(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per (rank, device, stream) with idle time and gaps of each category."""
    table = rows.set_index([*by, "category"])[["idle_us", "count"]].unstack("category", fill_value=0)
    table.columns = [f"{c}_{v}" for v, c in table.columns]
    return table.reset_index()


def _named_pct(devices: list[dict[str, Any]]) -> float | None:
    """Share of host-wait time for which a host frame is named, over all devices."""
    named = [d for d in devices if d.get("host_wait_named_pct") is not None]
    total = sum(d["host_wait_us"] for d in named)
    return sum(d["host_wait_us"] * d["host_wait_named_pct"] for d in named) / total if total else None


def _by_device(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Idle time per (rank, device) and category, summed over the device's streams (device -1:
    unknown)."""
    rows = breakdown[breakdown["stream"].notna()].astype({"device": "float64"}).fillna({"device": -1})
    table = rows.pivot_table(index=["rank", "device"], columns="category", values="idle_us", aggfunc="sum")
    return table.reindex(columns=list(CATEGORIES), fill_value=0.0).fillna(0.0)


def convention_differences(waits: Waits) -> pd.DataFrame:
    """Devices whose idle time of some category, summed over their streams, differs by more
    than `DIFFERENT_PCT` % between the two conventions: `{category}` (the breakdown's) and
    `{category}_other` (the other convention's) µs, largest difference first."""
    ours, theirs = _by_device(waits.breakdown), _by_device(waits.alternate)
    both = ours.join(theirs.add_suffix("_other"), how="inner")
    differs, largest = np.zeros(len(both), dtype=bool), np.zeros(len(both))
    for c in CATEGORIES:
        a, b = both[c].to_numpy(), both[f"{c}_other"].to_numpy()
        diff = np.abs(a - b)
        differs |= diff > DIFFERENT_PCT / 100 * np.maximum(np.abs(a), np.abs(b))
        largest = np.maximum(largest, diff)
    both = both.assign(_largest=largest)[differs]
    return both.sort_values("_largest", ascending=False, kind="stable").drop(columns="_largest").reset_index()


def convention_note(waits: Waits, devices: int = CONVENTION_DEVICES) -> str | None:
    """One line giving the other convention's host wait / kernel wait / other per device where
    it differs from the breakdown's by more than `DIFFERENT_PCT` %, or None."""
    differences = convention_differences(waits)
    if differences.empty:
        return None
    basis = waits.basis
    other = other_basis(basis)
    parts = []
    for row in differences.head(devices).itertuples(index=False):
        values = row._asdict()
        theirs = ", ".join(f"{_LABEL[c]} {fmt_us(values[f'{c}_other'])}" for c in CATEGORIES)
        ours = ", ".join(fmt_us(values[c]) for c in CATEGORIES)
        device = None if row.device == -1 else int(row.device)
        parts.append(f"{_where(int(row.rank), device)} {theirs} ({_BASIS[basis]}: {ours})")
    more = len(differences) - len(parts)
    return (
        f"{_BASIS_IN_FULL[other]} give, streams summed: "
        + "; ".join(parts)
        + (f"; … and {more:,} more devices" if more > 0 else "")
        + f"; per stream in idle_{other}.parquet"
    )


def _left_out(devices: int, streams: int) -> str | None:
    """What the breakdown table does not show, and where it is."""
    parts = [f"{n:,} more {what}" for n, what in ((devices, "devices"), (streams, "streams")) if n]
    return f"… and {' and '.join(parts)} with less idle time: idle.parquet" if parts else None


def _print_breakdown(console: Console, waits: Waits, top: int, wide: bool) -> None:
    """Per device (all streams), then per stream: idle time and its split, largest first; at
    most `top` of each, then the line comparing the conventions."""
    facts = waits.facts["idle"]
    title = (
        f"Why the GPU waits (host wait: launched after the GPU went idle; kernel wait: other gaps "
        f"under {facts['kernel_wait_us']:g} µs; {_BASIS[waits.basis]})"
    )
    where = Column("where", justify="left", flex=1, min_width=10)
    columns = [Column("idle"), *(Column(_LABEL[c], lines=True) for c in CATEGORIES), where]
    between = " " if wide else "\n"  # a share under its time on a narrow terminal
    rows = []
    left_out = []
    breakdown = waits.breakdown
    for stream_rows in (breakdown[breakdown["stream"].isna()], breakdown[breakdown["stream"].notna()]):
        if stream_rows.empty:
            left_out.append(0)
            continue
        table = _wide(stream_rows.fillna({"stream": -1}), ["rank", "device", "stream"])
        total = sum(table[f"{c}_idle_us"] for c in CATEGORIES)
        left_out.append(max(len(table) - top, 0))
        table = table.assign(total=total).sort_values("total", ascending=False).head(top)
        for row in table.itertuples(index=False):
            shares = [
                f"{fmt_us(getattr(row, f'{c}_idle_us'))}{between}"
                f"({fmt_pct(100 * getattr(row, f'{c}_idle_us') / row.total, 0)})"
                if row.total
                else "–"
                for c in CATEGORIES
            ]
            stream = _where(row.rank, row.device, row.stream) if row.stream != -1 else None
            rows.append([fmt_us(row.total), *shares, stream or _where(row.rank, row.device) + ", all streams"])
    print_table(console, columns, rows, title, wide)
    for line in (_left_out(*left_out), convention_note(waits)):
        if line:
            console.print(literal(line, "dim" if line.startswith("…") else ""), highlight=False)


def _origin(
    rows: pd.DataFrame, every: pd.DataFrame, wide: bool, missing: str = ""
) -> tuple[list[Column], list[list[str]]]:
    """The last columns of the causes and candidates tables: where (when `every` row, shown or
    not, is not on one device), frame and module."""
    several = len(every[["rank", "device"]].drop_duplicates()) > 1
    columns = [*([Column("where", justify="left", drop=2)] if several else []), FRAME, MODULE]
    cells = [
        [*([_where(row.rank, row.device)] if several else []), _frame(row.frame, wide, missing), _text(row.module)]
        for row in rows.itertuples(index=False)
    ]
    return columns, cells


def _print_causes(console: Console, waits: Waits, top: int, wide: bool) -> None:
    causes = waits.causes.sort_values("idle_us", ascending=False, kind="stable").head(top)
    if causes.empty:
        return
    named = _named_pct(waits.facts["idle"]["devices"])
    title = "What the host was doing while the GPU waited for it (host waits" + (
        f"; a frame is named for {fmt_pct(named, 0)} of their time)" if named is not None else ")"
    )
    origin, cells = _origin(causes, waits.causes, wide)
    rows = [
        [fmt_us(row.idle_us), f"{row.pct:.1f}", f"{row.gaps:,}", *more]
        for row, more in zip(causes.itertuples(index=False), cells, strict=True)
    ]
    print_table(console, [Column("idle"), Column("%"), Column("gaps"), *origin], rows, title, wide)


def _median(launches: dict[str, Any], key: str) -> str:
    """A median of the launches; over several ranks the range of the ranks' medians (the fleet's
    median does not follow from them)."""
    if launches.get(key) is not None or "per_rank" not in launches:
        return fmt_us(launches.get(key))
    values = [r[key] for r in launches["per_rank"] if r.get(key) is not None]
    if not values:
        return fmt_us(None)
    low, high = min(values), max(values)
    return f"{fmt_us(low)}–{fmt_us(high)} across ranks" if high != low else f"{fmt_us(low)} on every rank"


def _print_launches(console: Console, waits: Waits) -> None:
    launches = waits.facts["launches"]
    clocks = clocks_found(launches)
    if launches.get("eager_activities"):
        delay = "not shown (clocks disagree)" if clocks and launches.get("delay_p50_us") is None else None
        console.print(
            f"launches: {launches['eager_activities']:,} eager ({launches['graph_replayed']:,} graph-replayed), "
            f"launch call p50 {_median(launches, 'launch_p50_us')}, "
            f"launch-to-start p50 {delay or _median(launches, 'delay_p50_us')}, "
            f"{launches['launch_bound_pct']:.0f}% shorter on the GPU than their launch call"
            + (" (per-rank medians: report.json launches.per_rank)" if "per_rank" in launches else ""),
            highlight=False,
        )
    for clock in clocks[:3]:
        console.print(f"note: rank {clock['rank']}: {clock['line']}", highlight=False)


def _print_candidates(console: Console, waits: Waits, top: int, wide: bool) -> None:
    candidates = waits.candidates.head(top)
    if candidates.empty:
        return
    origin, cells = _origin(candidates, waits.candidates, wide, "(no common frame)")
    columns = [Column("waits"), Column("idle"), Column("stretches"), Column("kernels"), Column("stream"), *origin]
    rows = [
        [
            fmt_us(row.saving_us),
            fmt_us(min(row.saving_us, row.device_idle_us)),
            f"{row.stretches:,}",
            f"{row.kernels:,}",
            _text(_whole(row.stream), "?"),
            *more,
        ]
        for row, more in zip(candidates.itertuples(index=False), cells, strict=True)
    ]
    # a graph saves the waits only where nothing else kept the device busy (`device_idle_us`): a side
    # stream's waits beside another stream's kernel hold nothing up
    title = (
        "Graph this: stretches of short eager kernels separated by waits (a graph saves at most the "
        "idle: the waits while the device was idle)"
    )
    print_table(console, columns, rows, title, wide)


def print_waits(console: Console, waits: Waits | None, top: int = 8, wide: bool = False) -> None:
    """Idle breakdown per device (and its busiest streams), the top host-wait causes, launch
    statistics and graph candidates, fitted as the other report tables (`wide`: all in full)."""
    if waits is None:
        return
    _print_breakdown(console, waits, top, wide)
    _print_causes(console, waits, top, wide)
    _print_launches(console, waits)
    _print_candidates(console, waits, top, wide)


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` of a breakdown with their bar's label (`where`)."""
    where = [
        _where(r, d, s) if not pd.isna(s) else _where(r, d) + " (all streams)"
        for r, d, s in zip(rows["rank"], rows["device"], rows["stream"], strict=True)
    ]
    return rows.assign(where=where)


def _figure_rows(breakdown: pd.DataFrame, bars: int = FIGURE_BARS) -> tuple[pd.DataFrame, str]:
    """The breakdown's rows drawn in the idle figure (`where`, `category`, `idle_us`, `count`):
    of the devices (all streams) and of the streams, the `bars` with the most idle time each,
    the rest summed into one "others" bar of each kind; and the figure's title."""
    kept, counted = [], []
    per_stream = breakdown["stream"].notna()
    for kind, part in (("devices", breakdown[~per_stream]), ("streams", breakdown[per_stream])):
        # a bar per (rank, device[, stream]); labels only for the bars drawn (a trace may claim 100k devices)
        keys = ["rank", "device"] if kind == "devices" else ["rank", "device", "stream"]
        number = part.groupby(keys, sort=False, dropna=False, observed=True).ngroup().to_numpy() if len(part) else []
        total = part["idle_us"].groupby(number).sum()
        counted.append((kind, len(total)))
        if len(total) <= bars + 1:  # an "others" bar of one would hide nothing
            kept.append(_labelled(part))
            continue
        top = total.sort_values(ascending=False, kind="stable").index[:bars]
        in_top = np.isin(number, top)
        others = part[~in_top].groupby("category", sort=False)[["idle_us", "count"]].sum().reset_index()
        others["where"] = f"{len(total) - bars:,} other {kind}" + (" (all streams)" if kind == "devices" else "")
        kept += [_labelled(part[in_top]), others]
    drawn = [k for k in kept if len(k)]
    shown = pd.concat(drawn, ignore_index=True) if drawn else _labelled(breakdown)
    title = "Idle time by cause, per device (all streams) and per stream"
    capped = [(kind, n) for kind, n in counted if n > bars + 1]
    if capped:
        which = " and ".join(f"the {bars} {kind} of {n:,}" for kind, n in capped)
        title += f"<br><sup>{which} with the most idle time; the rest summed (each one in idle.parquet)</sup>"
    return shown[["where", "category", "idle_us", "count"]], title


def idle_figure(waits: Waits, bars: int = FIGURE_BARS) -> plot.Figure:
    rows, heading = _figure_rows(waits.breakdown, bars)
    data = []
    for category in CATEGORIES:
        part = rows[rows["category"] == category]
        data.append(
            {
                "type": "bar",
                "x": plot.values(part["idle_us"]),
                "y": [plot.label(where) for where in part["where"]],
                "orientation": "h",
                "name": _LABEL[category],
                "customdata": [[fmt_us(t), int(n)] for t, n in zip(part["idle_us"], part["count"], strict=True)],
                "hovertemplate": "%{y}<br>%{customdata[0]} in %{customdata[1]} gaps<extra>"
                + _LABEL[category]
                + "</extra>",
            }
        )
    layout = {
        "barmode": "stack",
        "title": plot.title(heading),
        "xaxis": {"title": plot.title("µs")},
        "height": max(300, 40 * rows["where"].nunique() + 120),
    }
    return plot.figure(data, layout)


CAUSE_COLUMNS = [
    TableColumn("where", "where", wrap=False),
    TableColumn("idle", "idle", numeric=True, title="GPU idle time of host waits while the host ran this"),
    TableColumn("pct", "%", numeric=True, title="share of the device's host-wait time"),
    TableColumn("gaps", "gaps", numeric=True),
    TableColumn("frame", "frame", title="innermost CPU op or Python frame on the launching thread"),
    TableColumn("module", "module", title="nn.Module path"),
]
CANDIDATE_COLUMNS = [
    TableColumn("saving", "waits", numeric=True, title="the waits inside the stretches"),
    TableColumn(
        "idle",
        "idle",
        numeric=True,
        title="the waits while the device was idle: at most what a CUDA/HIP graph saves (another stream kept it busy)",
    ),
    TableColumn("stretches", "stretches", numeric=True),
    TableColumn("kernels", "kernels", numeric=True),
    TableColumn("where", "where", wrap=False),
    TableColumn("frame", "frame", title="innermost frame common to the stretch; expand for the call stack"),
    TableColumn("module", "module", title="nn.Module path"),
    TableColumn("kernel", "first kernel"),
]
LAUNCH_COLUMNS = [
    TableColumn("op", "op"),
    TableColumn("launches", "launches", numeric=True),
    TableColumn("launch", "launch CPU", numeric=True, title="CPU time of the launch calls, all launches"),
    TableColumn("mean", "mean launch", numeric=True, title="CPU time of one launch call"),
    TableColumn("delay", "launch→start p50", numeric=True, title="median queueing: launch call to kernel start"),
    TableColumn("gpu", "GPU mean", numeric=True, title="GPU time of one launch"),
    TableColumn("bound", "% shorter than launch", numeric=True, title="share of kernels shorter than their launch"),
]


def _us(value: float) -> tuple[str, float]:
    return fmt_us(value), value


def _causes_table(causes: pd.DataFrame) -> str:
    cells = [
        [
            (_where(row.rank, row.device), None),
            _us(row.idle_us),
            (fmt_pct(row.pct), row.pct),
            (f"{row.gaps:,}", row.gaps),
            (_text(row.frame), None),
            (_text(row.module), None),
        ]
        for row in causes.itertuples(index=False)
    ]
    return data_table("causes-table", CAUSE_COLUMNS, cells, sort=1)


def _candidate_detail(row: Any) -> str:
    lines = [f"first kernel: {_text(row.first_kernel)}"]
    if _text(row.call_stack):
        lines.append("call stack (innermost first):")
        lines.extend("  " + frame for frame in row.call_stack.split(STACK_SEPARATOR))
    return "\n".join(lines)


def _candidates_table(candidates: pd.DataFrame) -> str:
    cells, details = [], []
    for row in candidates.itertuples(index=False):
        cells.append(
            [
                _us(row.saving_us),
                _us(min(row.saving_us, row.device_idle_us)),
                (f"{row.stretches:,}", row.stretches),
                (f"{row.kernels:,}", row.kernels),
                (_where(row.rank, row.device, row.stream), None),
                (_text(row.frame, "(no common frame)"), None),
                (_text(row.module), None),
                (display_name(_text(row.first_kernel)), None),
            ]
        )
        details.append(_candidate_detail(row))
    return data_table("candidates-table", CANDIDATE_COLUMNS, cells, details, sort=1)  # by the idle


def _launches_table(ops: pd.DataFrame) -> str:
    cells = [
        [
            (str(row.key), None),
            (f"{row.count:,}", row.count),
            _us(row.launch_us),
            _us(row.launch_mean_us),
            _us(row.delay_p50_us),
            _us(row.gpu_mean_us),
            (fmt_pct(row.launch_bound_pct, 0), row.launch_bound_pct),
        ]
        for row in ops.itertuples(index=False)
    ]
    return data_table("launches-table", LAUNCH_COLUMNS, cells, sort=2)


def waits_html(waits: Waits | None) -> str:
    """The report's "Why the GPU waits" section (plotly.js and `datatable.table_assets` must be on the page)."""
    if waits is None:
        return ""
    parts = ["<h2>Why the GPU waits</h2>", f"<div class='fig'>{plot.div(idle_figure(waits), 'idle')}</div>"]
    note = convention_note(waits)
    if note:
        parts.append(f"<p>{html.escape(note)}</p>")
    if len(waits.causes):
        parts += ["<h3>What the host was doing during host waits</h3>", _causes_table(waits.causes)]
    if len(waits.candidates):
        parts += ["<h3>Graph this: short eager kernels separated by waits</h3>", _candidates_table(waits.candidates)]
    ops = waits.launches[waits.launches["level"] == "op"]
    if len(ops):
        parts += ["<h3>Launch statistics per op (eager launches)</h3>", _launches_table(ops)]
    return "".join(parts)
