"""A self-contained interactive report (plotly): roofline, time-share treemap, top kernels, headroom."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from kernel_atlas.classify.names import display_name
from kernel_atlas.roofline.analysis import Analysis
from kernel_atlas.roofline.devices import Device

FIGURE_IDS = ("roofline", "timeshare", "top-kernels", "headroom")


def _short(name: str, width: int = 70) -> str:
    name = display_name(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def _stack_hint(call_stack: object, frames: int = 6) -> str:
    """The innermost frames of a call stack, one per line, for hover text."""
    if not isinstance(call_stack, str) or not call_stack:
        return ""
    parts = call_stack.split(" <- ")[1 : frames + 1]
    return "<br>".join(html.escape(_short(p, 90)) for p in parts)


def roofline_figure(analysis: Analysis, device: Device | None) -> go.Figure:
    table = analysis.roofline
    points = table[(table["role"] == "main") & table["achieved_tflops"].notna() & (table["flops"] > 0)]
    fig = go.Figure()
    for category, group in points.groupby("category", sort=True):
        size = np.sqrt(group["op_time_us"].to_numpy() / max(points["op_time_us"].max(), 1e-9)) * 40 + 6
        hover = [
            f"<b>{html.escape(_short(r.name))}</b><br>{html.escape(str(r.launcher))}"
            f"<br>shapes {html.escape(str(r.input_dims))}"
            f"<br>{r.count} calls, {r.op_time_us:.1f} µs<br>{r.achieved_tflops:.2f} TFLOP/s, {r.achieved_gbps:.0f} GB/s"
            f"<br>SOL {r.sol_pct:.1f}% ({r.bound}), headroom {r.headroom_us:.1f} µs"
            f"<br><i>{_stack_hint(r.call_stack)}</i>"
            for r in group.itertuples(index=False)
        ]
        fig.add_trace(
            go.Scatter(
                x=group["intensity"],
                y=group["achieved_tflops"],
                mode="markers",
                name=str(category),
                marker={"size": size, "opacity": 0.75},
                text=hover,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    if "replay_tflops" in table:
        replayed = points[points["replay_tflops"].notna()]
        if len(replayed):
            fig.add_trace(
                go.Scatter(
                    x=replayed["intensity"],
                    y=replayed["replay_tflops"],
                    mode="markers",
                    name="replayed",
                    marker={"symbol": "diamond-open", "size": 11, "color": "black"},
                    text=[
                        f"replayed {html.escape(_short(str(r.name)))}: {r.replay_us:.2f} µs on "
                        f"{html.escape(str(r.replay_device))} ({r.replay_check})"
                        for r in replayed.itertuples()
                    ],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    if device is not None and len(points):
        lo = max(points["intensity"].min() / 4, 1e-3)
        hi = max(points["intensity"].max() * 4, 10.0)
        x = np.logspace(np.log10(lo), np.log10(hi), 200)
        bw_tflops = device.memory_gbps / 1e3
        for label, peak in sorted(
            {(p, v) for p, v in device.tensor.items()} | {(p + " vector", v) for p, v in device.vector.items()}
        ):
            if label not in ("bf16", "fp8", "fp32 vector", "tf32", "fp16") or (
                label == "fp16" and "bf16" in device.tensor
            ):
                continue
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=np.minimum(peak, bw_tflops * x),
                    mode="lines",
                    name=f"roof {label} {peak:g} TF/s",
                    line={"dash": "dot", "width": 1},
                    hoverinfo="name",
                )
            )
        ridge_peak = device.tensor.get("bf16") or device.vector.get("fp32", 1.0)
        fig.add_trace(
            go.Scatter(
                x=[ridge_peak / bw_tflops],
                y=[ridge_peak],
                mode="markers+text",
                name="ridge point",
                text=[f"ridge {ridge_peak / bw_tflops:.0f} FLOP/B"],
                textposition="top left",
                marker={"symbol": "x", "size": 10, "color": "black"},
            )
        )
    title = f"Roofline — {device.name if device else 'no device peaks'}"
    fig.update_layout(
        title=title,
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s"},
        height=600,
    )
    return fig


def timeshare_figure(analysis: Analysis) -> go.Figure:
    k = analysis.kernels
    frame = (
        pd.DataFrame(
            {
                "category": k["category"].astype(str),
                "op": k["op_mapping"].astype(str),
                "kernel": k["name"].astype(str).map(_short),
                "time": k["dur_us"],
            }
        )
        .groupby(["category", "op", "kernel"], as_index=False)["time"]
        .sum()
    )
    ids, labels, parents, values = [], [], [], []
    for category, g in frame.groupby("category"):
        ids.append(category), labels.append(category), parents.append(""), values.append(g["time"].sum())
        for op, h in g.groupby("op"):
            op_id = f"{category}/{op}"
            ids.append(op_id), labels.append(op), parents.append(category), values.append(h["time"].sum())
            for row in h.itertuples(index=False):
                ids.append(f"{op_id}/{row.kernel}"), labels.append(row.kernel), parents.append(op_id)
                values.append(row.time)
    fig = go.Figure(
        go.Treemap(
            ids=ids,
            labels=labels,
            parents=parents,
            values=values,
            branchvalues="total",
            hovertemplate="%{label}<br>%{value:.1f} µs (%{percentRoot:.1%})<extra></extra>",
        )
    )
    fig.update_layout(title="GPU time: category → op → kernel", height=600)
    return fig


def top_kernels_figure(analysis: Analysis, top: int = 20) -> go.Figure:
    share = analysis.timeshare[analysis.timeshare["level"] == "kernel"].head(top).iloc[::-1]
    bar = go.Bar(
        x=share["total_us"],
        y=[f"{len(share) - i}. {_short(key, 60)}" for i, key in enumerate(share["key"])],
        orientation="h",
        text=share["pct"].map(lambda p: f"{p:.1f}%"),
        hovertemplate="%{y}<br>%{x:.1f} µs<extra></extra>",
    )
    fig = go.Figure(bar)
    fig.update_layout(title=f"Top {len(share)} kernels by GPU time", xaxis_title="µs", height=max(400, 24 * len(share)))
    return fig


def headroom_figure(analysis: Analysis, top: int = 20) -> go.Figure:
    table = analysis.roofline
    rows = table[table["headroom_us"] > 0].head(top).iloc[::-1]
    labels = [
        f"{len(rows) - i}. {_short(str(r.name), 50)} {r.input_dims}"[:90]
        for i, r in enumerate(rows.itertuples(index=False))
    ]
    fig = go.Figure(
        go.Bar(
            x=rows["headroom_us"],
            y=labels,
            orientation="h",
            text=rows["sol_pct"].map(lambda p: f"SOL {p:.0f}%"),
            hovertemplate="%{y}<br>headroom %{x:.1f} µs<extra></extra>",
        )
    )
    fig.update_layout(
        title="Headroom: time above the roofline-attainable time", xaxis_title="µs", height=max(400, 24 * len(rows))
    )
    return fig


def write_html(analysis: Analysis, device: Device | None, path: Path, title: str, sections: Sequence[str] = ()) -> Path:
    """The report page; `sections` are further HTML fragments placed after the figures."""
    figures = {
        "roofline": roofline_figure(analysis, device),
        "timeshare": timeshare_figure(analysis),
        "top-kernels": top_kernels_figure(analysis),
        "headroom": headroom_figure(analysis),
    }
    facts = analysis.facts
    summary = "".join(
        f"<li>rank {d['rank']} device {d['device']}: busy {d['busy_us']:.1f} µs of {d['span_us']:.1f} µs, "
        f"idle {d['idle_us']:.1f} µs, communication {d['communication_us']:.1f} µs "
        f"({d['overlap_pct_of_communication']:.0f}% overlapped with compute)</li>"
        for d in facts["devices"]
    )
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:24px} .fig{margin-bottom:32px}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1><ul>{summary}</ul>",
    ]
    first = True
    for fid, fig in figures.items():
        div = pio.to_html(fig, full_html=False, include_plotlyjs=first, div_id=fid)
        parts.append(f"<div class='fig'>{div}</div>")
        first = False
    parts.extend(sections)
    parts.append("</body></html>")
    path.write_text("".join(parts), encoding="utf-8")
    return path
