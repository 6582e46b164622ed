"""The cross-rank section of `atlas report`: per-rank time, collective skew and stragglers, in
the terminal (rich) and in report.html (plotly), from `analysis.collectives.CrossRank`."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from kernel_atlas.analysis.collectives import CrossRank, missing_line
from kernel_atlas.core.texts import counted
from kernel_atlas.report import plot
from kernel_atlas.report.markup import esc
from kernel_atlas.report.units import fmt_us as _fmt_us

TITLE = "Collectives across ranks"


def per_rank_table(cross: CrossRank, facts: dict[str, Any]) -> pd.DataFrame:
    """One row per rank and device: span, busy, idle, communication, overlap (from the per-rank
    analyses) and the time it waited inside collectives for the last rank (cross-rank)."""
    rows = pd.DataFrame(facts.get("devices", []))
    if rows.empty:
        return rows
    for column in ("communication_us", "compute_us", "overlap_us"):
        if column not in rows:
            rows[column] = 0.0
    if cross.per_rank is not None:
        waits = cross.per_rank[["rank", "wait_us", "last_count"]].rename(columns={"wait_us": "collective_wait_us"})
        rows = rows.merge(waits, on="rank", how="left")
    else:
        rows["collective_wait_us"], rows["last_count"] = float("nan"), 0
    return rows.sort_values(["rank", "device"], kind="stable").reset_index(drop=True)


# how instances were matched (collectives.parquet `seq_source`), in words: matched by position, no
# sequence number is involved ("matched by position sequence numbers" had said one was)
_MATCHED_BY = {"recorded": "recorded sequence numbers (Seq)", "position": "position among each rank's collectives"}


def _headline(cross: CrossRank) -> str:
    c = cross.facts["collectives"]
    sources = sorted(str(c["matched_by"]).split(" and "), key=lambda s: s != "recorded")  # recorded first
    matched = " and ".join(_MATCHED_BY.get(s, s) for s in sources)
    text = (
        f"{c['instances']:,} collective instances on {cross.ranks} ranks, matched by {matched}; "
        f"clocks aligned on {c['clock_alignment']} (±{c['alignment_noise_us']:.1f} µs); "
        f"skew median {_fmt_us(c['median_skew_us'])}, max {_fmt_us(c['max_skew_us'])}; "
        f"{_fmt_us(c['total_wait_us'])} spent waiting for the last rank"
    )
    if c["mismatched_instances"]:
        text += f"; {c['mismatched_instances']} instances whose ranks disagree were left out"
    differ = c.get("instances_of_differing_sizes")  # absent from a report.json written before it was counted
    if differ:
        text += (
            f"; {counted(differ, 'instance', 'instances')} matched by Seq whose ranks record different message "
            "sizes (one collective has one size on every rank: a rank's record is wrong, or the traces are of "
            "different runs) — each rank's bandwidth is of its own size"
        )
    return text


def print_cross_rank(console: Console, cross: CrossRank | None, facts: dict[str, Any], top: int = 12) -> None:
    if cross is None:
        return
    if cross.note:
        console.print(f"[bold]{TITLE}[/]: {esc(cross.note)}", highlight=False)
        return
    console.print(f"[bold]{TITLE}[/]: {esc(_headline(cross))}", highlight=False)
    for note in cross.facts["collectives"].get("notes", []):  # instances matched by position paired again, or refused
        console.print(f"[yellow]{esc(note)}[/]", highlight=False)
    if facts.get("ranks_missing"):
        console.print(f"[yellow]{esc(missing_line(facts['ranks_missing']))}[/]", highlight=False)
    ranks = per_rank_table(cross, facts)
    if len(ranks):
        shown = ranks if len(ranks) <= 2 * top else ranks.sort_values("collective_wait_us", kind="stable").head(top)
        title = "Per rank" if len(shown) == len(ranks) else f"The {top} ranks that wait least in collectives"
        table = Table(title=title, title_justify="left")
        for column in ("rank", "device", "busy", "idle", "communication", "overlapped", "waited", "held up"):
            table.add_column(column, justify="right")
        for row in shown.itertuples(index=False):
            comm = row.communication_us
            table.add_row(
                str(row.rank),
                str(row.device),
                f"{_fmt_us(row.busy_us)} ({row.busy_pct:.0f}%)",
                _fmt_us(row.idle_us),
                _fmt_us(comm),
                f"{100 * row.overlap_us / comm:.0f}%" if comm else "–",
                _fmt_us(row.collective_wait_us),  # "–" when NaN (no cross-rank waits)
                str(int(row.last_count)) if row.last_count == row.last_count else "–",
            )
        console.print(table)
    stragglers = cross.facts["stragglers"]
    if not stragglers:
        console.print("no straggler: no rank arrives last more often than chance", highlight=False)
        return
    table = Table(title="Top stragglers (arrive last more often than chance)", title_justify="left")
    for column in ("rank", "arrived last", "chance", "mean late", "others waited", "p"):
        table.add_column(column, justify="right")
    for s in stragglers[:top]:
        table.add_row(
            str(s["rank"]),
            f"{s['collectives']} of {s['of']}",
            f"{s['expected']:.1f}",
            _fmt_us(s["mean_late_us"]),
            _fmt_us(s["wait_caused_us"]),
            f"{s['p_value']:.1g}",
        )
    console.print(table)


def rank_time_figure(ranks: pd.DataFrame) -> plot.Figure:
    """Per rank: compute only, communication overlapped with compute, exposed communication
    and idle time (they add up to the rank's span)."""
    labels = [f"rank {r.rank}" + (f" gpu {r.device}" if r.device is not None else "") for r in ranks.itertuples()]
    parts = {
        "compute only": ranks["busy_us"] - ranks["communication_us"],
        "communication overlapped": ranks["overlap_us"],
        "communication exposed": ranks["communication_us"] - ranks["overlap_us"],
        "idle": ranks["idle_us"],
    }
    bars = [{"type": "bar", "name": name, "x": labels, "y": plot.values(part / 1e3)} for name, part in parts.items()]
    layout = {"barmode": "stack", "title": plot.title("Time per rank"), "yaxis": {"title": plot.title("ms")}}
    return plot.figure(bars, {**layout, "height": 450})


def lateness_figure(cross: CrossRank) -> plot.Figure:
    from plotly.colors import get_colorscale  # plotly.js knows no reversed names (`RdBu_r`)

    heat = cross.heatmap
    lateness = {
        "type": "heatmap",
        "z": heat.to_numpy(),
        "x": list(heat.columns),
        "y": [f"rank {r}" for r in heat.index],
        "colorscale": get_colorscale("RdBu_r"),
        "zmid": 0.0,
        "colorbar": {"title": plot.title("late µs")},
        "hovertemplate": "%{y}<br>%{x}<br>%{z:.1f} µs after the median arrival<extra></extra>",
    }
    layout = {
        "title": plot.title("Lateness: each rank's arrival at each collective minus the median arrival (µs)"),
        "xaxis": {
            "title": plot.title("collective instance (process group # sequence), in time order"),
            "showticklabels": False,
        },
        "height": max(350, 18 * len(heat) + 150),
    }
    return plot.figure([lateness], layout)


def _stragglers_html(stragglers: list[dict[str, Any]]) -> str:
    if not stragglers:
        return "<p>No straggler: no rank arrives last more often than chance.</p>"
    rows = "".join(
        f"<tr><td>{s['rank']}</td><td>{s['collectives']} of {s['of']}</td><td>{s['expected']:.1f}</td>"
        f"<td>{s['mean_late_us']:.1f}</td><td>{s['wait_caused_us']:.1f}</td><td>{s['p_value']:.1g}</td></tr>"
        for s in stragglers
    )
    return (
        "<table><thead><tr><th>rank</th><th>arrived last</th><th>chance</th><th>mean late µs</th>"
        f"<th>others waited µs</th><th>p</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def cross_rank_html(cross: CrossRank, facts: dict[str, Any]) -> str:
    """The report.html section (plotly.js is already on the page)."""
    head = f"<h2 id='collectives'>{TITLE}</h2>"
    if cross.note:
        return f"{head}<p>{html.escape(cross.note)}</p>"
    parts = [head, f"<p>{html.escape(_headline(cross))}</p>"]
    parts += [f"<p><b>{html.escape(note)}</b></p>" for note in cross.facts["collectives"].get("notes", [])]
    if facts.get("ranks_missing"):
        parts.append(f"<p><b>{html.escape(missing_line(facts['ranks_missing']))}</b></p>")
    parts.append("<h3>Stragglers</h3>")
    parts.append(_stragglers_html(cross.facts["stragglers"]))
    ranks = per_rank_table(cross, facts)
    figures = {"rank-time": rank_time_figure(ranks)} if len(ranks) else {}
    if cross.heatmap is not None and not cross.heatmap.empty:
        figures["lateness"] = lateness_figure(cross)
    for fid, fig in figures.items():
        parts.append(f"<div class='fig'>{plot.div(fig, fid)}</div>")
    return "".join(parts)
