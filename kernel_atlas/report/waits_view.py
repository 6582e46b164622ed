"""Why the GPU waits, shown: a terminal section (rich) and an HTML section (plotly + tables)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import pandas as pd
from rich.console import Console
from rich.table import Table

from kernel_atlas.classify.names import display_name
from kernel_atlas.report.idle import CATEGORIES
from kernel_atlas.report.terminal import fmt_us
from kernel_atlas.report.waits import Waits

if TYPE_CHECKING:
    import plotly.graph_objects as go

_LABEL = {"host_wait": "host wait", "kernel_wait": "kernel wait", "other": "other"}


def _text(value: object, missing: str = "") -> str:
    return missing if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)) else str(value)


def _where(rank: object, device: object, stream: object = None) -> str:
    text = f"rank {rank} device {'?' if pd.isna(device) else device}"
    return text if stream is None or pd.isna(stream) else f"{text} stream {stream}"


def _wide(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per (rank, device, stream) with idle time and gaps of each category."""
    table = rows.set_index([*by, "category"])[["idle_us", "count"]].unstack("category", fill_value=0)
    table.columns = [f"{c}_{v}" for v, c in table.columns]
    return table.reset_index()


def print_waits(console: Console, waits: Waits | None, top: int = 8) -> None:
    """Idle breakdown per device (and its busiest streams), the top host-wait causes, launch
    statistics and graph candidates."""
    if waits is None:
        return
    facts = waits.facts["idle"]
    basis = "HTA's conventions" if facts["basis"] == "hta" else "exact timestamps"
    table = Table(
        title=f"Why the GPU waits (host wait: launched after the GPU went idle; kernel wait: other gaps "
        f"under {facts['kernel_wait_us']:g} µs; {basis})",
        title_justify="left",
    )
    for column in ("where", "idle", *(_LABEL[c] for c in CATEGORIES), "host wait named"):
        table.add_column(column, justify="left" if column == "where" else "right")
    named = {(d["rank"], d["device"]): d.get("host_wait_named_pct") for d in facts["devices"]}
    breakdown = waits.breakdown
    for stream_rows in (breakdown[breakdown["stream"].isna()], breakdown[breakdown["stream"].notna()]):
        if stream_rows.empty:
            continue
        wide = _wide(stream_rows.fillna({"stream": -1}), ["rank", "device", "stream"])
        total = sum(wide[f"{c}_idle_us"] for c in CATEGORIES)
        wide = wide.assign(total=total).sort_values("total", ascending=False).head(top)
        for row in wide.itertuples(index=False):
            stream = None if row.stream == -1 else row.stream
            share = named.get((row.rank, None if pd.isna(row.device) else int(row.device))) if stream is None else None
            table.add_row(
                _where(row.rank, row.device, stream)
                if stream is not None
                else f"[bold]{_where(row.rank, row.device)}[/]",
                fmt_us(row.total),
                *(
                    f"{fmt_us(getattr(row, f'{c}_idle_us'))} ({100 * getattr(row, f'{c}_idle_us') / row.total:.0f}%)"
                    if row.total
                    else "–"
                    for c in CATEGORIES
                ),
                f"{share:.0f}%" if share is not None else "",
            )
    console.print(table)
    causes = waits.causes.sort_values("idle_us", ascending=False, kind="stable").head(top)
    if len(causes):
        several = len(waits.causes[["rank", "device"]].drop_duplicates()) > 1
        view = Table(title="What the host was doing while the GPU waited for it (host waits)", title_justify="left")
        for column in ("idle", "%", "gaps", *(("where",) if several else ()), "frame", "module"):
            view.add_column(column, justify="right" if column in ("idle", "%", "gaps") else "left", overflow="fold")
        for row in causes.itertuples(index=False):
            where = (_where(row.rank, row.device),) if several else ()
            view.add_row(
                fmt_us(row.idle_us), f"{row.pct:.1f}", f"{row.gaps:,}", *where, _text(row.frame), _text(row.module)
            )
        console.print(view)
    launches = waits.facts["launches"]
    if launches.get("eager_activities"):
        console.print(
            f"launches: {launches['eager_activities']:,} eager ({launches['graph_replayed']:,} graph-replayed), "
            f"launch call p50 {fmt_us(launches['launch_p50_us'])}, "
            f"launch-to-start p50 {fmt_us(launches['delay_p50_us'])}, "
            f"{launches['launch_bound_pct']:.0f}% shorter on the GPU than their launch call",
            highlight=False,
        )
    candidates = waits.candidates.head(top)
    if len(candidates):
        view = Table(
            title="Graph this: stretches of short eager kernels separated by waits (saving = the waits)",
            title_justify="left",
        )
        for column in ("saving", "stretches", "kernels", "where", "frame / module"):
            view.add_column(
                column, justify="left" if column in ("where", "frame / module") else "right", overflow="fold"
            )
        for row in candidates.itertuples(index=False):
            view.add_row(
                fmt_us(row.saving_us),
                f"{row.stretches:,}",
                f"{row.kernels:,}",
                _where(row.rank, row.device, row.stream),
                _text(row.frame, "(no common frame)") + (f" [dim]{row.module}[/]" if _text(row.module) else ""),
            )
        console.print(view)


def _html_table(frame: pd.DataFrame, columns: dict[str, str], formats: dict[str, str]) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for label in columns.values())
    body = []
    for row in frame.itertuples(index=False):
        cells = []
        for column in columns:
            value = getattr(row, column)
            text = _text(value)
            if text and column in formats:
                text = formats[column].format(value)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='waits'><tr>{head}</tr>{''.join(body)}</table>"


def idle_figure(waits: Waits) -> go.Figure:
    import plotly.graph_objects as go  # imported here: the terminal report does not need plotly

    rows = waits.breakdown.copy()
    rows["where"] = [
        _where(r, d, s) if not pd.isna(s) else _where(r, d) + " (all streams)"
        for r, d, s in zip(rows["rank"], rows["device"], rows["stream"], strict=True)
    ]
    fig = go.Figure()
    for category in CATEGORIES:
        part = rows[rows["category"] == category]
        fig.add_trace(
            go.Bar(
                x=part["idle_us"],
                y=part["where"],
                orientation="h",
                name=_LABEL[category],
                customdata=part["count"],
                hovertemplate="%{y}<br>%{x:.1f} µs in %{customdata} gaps<extra>" + _LABEL[category] + "</extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        title="Idle time by cause, per device (all streams) and per stream",
        xaxis_title="µs",
        height=max(300, 40 * rows["where"].nunique() + 120),
    )
    return fig


def waits_html(waits: Waits | None, top: int = 30) -> str:
    """The report's "Why the GPU waits" section (plotly.js must already be on the page)."""
    if waits is None:
        return ""
    import plotly.io as pio

    us = "{:,.1f}"
    figure = pio.to_html(idle_figure(waits), full_html=False, include_plotlyjs=False, div_id="idle")
    parts = [
        "<h2>Why the GPU waits</h2>",
        "<style>table.waits{border-collapse:collapse;font-size:13px;margin-bottom:24px}"
        "table.waits td,table.waits th{border:1px solid #ddd;padding:3px 6px;text-align:left}</style>",
        f"<div class='fig'>{figure}</div>",
    ]
    if len(waits.causes):
        parts.append("<h3>What the host was doing during host waits</h3>")
        parts.append(
            _html_table(
                waits.causes.head(top),
                {
                    "rank": "rank",
                    "device": "device",
                    "idle_us": "idle µs",
                    "pct": "%",
                    "gaps": "gaps",
                    "frame": "frame",
                    "module": "module",
                },
                {"idle_us": us, "pct": "{:.1f}"},
            )
        )
    if len(waits.candidates):
        parts.append("<h3>Graph this: short eager kernels separated by waits</h3>")
        candidates = waits.candidates.head(top).assign(first_kernel=lambda f: f["first_kernel"].map(display_name))
        parts.append(
            _html_table(
                candidates,
                {
                    "saving_us": "saving µs",
                    "stretches": "stretches",
                    "kernels": "kernels",
                    "stream": "stream",
                    "frame": "frame",
                    "module": "module",
                    "first_kernel": "first kernel",
                    "call_stack": "call stack",
                },
                {"saving_us": us},
            )
        )
    ops = waits.launches[waits.launches["level"] == "op"].head(top)
    if len(ops):
        parts.append("<h3>Launch statistics per op (eager launches)</h3>")
        parts.append(
            _html_table(
                ops,
                {
                    "key": "op",
                    "count": "launches",
                    "launch_us": "launch CPU µs",
                    "launch_mean_us": "mean",
                    "delay_p50_us": "launch→start p50 µs",
                    "gpu_mean_us": "GPU mean µs",
                    "launch_bound_pct": "% shorter than launch",
                },
                {
                    "launch_us": us,
                    "launch_mean_us": us,
                    "delay_p50_us": us,
                    "gpu_mean_us": us,
                    "launch_bound_pct": "{:.0f}",
                },
            )
        )
    return "".join(parts)
