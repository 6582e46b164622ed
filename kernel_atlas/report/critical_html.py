"""The report.html section of the critical path: its segments drawn on their threads and streams."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.names import display_name
from kernel_atlas.report.critical_view import unweighted_words
from kernel_atlas.report.fit import trim
from kernel_atlas.report.plot import Figure, div, figure, label, title, values
from kernel_atlas.report.units import fmt_us

MAX_BARS = 3000  # the longest segments drawn; the path line joins the drawn ones in path order
PICTURE_COLUMNS = ["rank", "stream", "thread", "bound", "name", "start_us", "dur_us"]


@dataclass
class PathPicture:
    """What the page draws of a critical path: its longest segments (at most MAX_BARS, in path
    order, only the columns drawn), where the path starts and how many segments it has — a few
    thousand rows whatever the path's length, so it is made where the path was solved and only it
    crosses to the report."""

    drawn: pd.DataFrame
    origin_us: float
    segments: int


def path_picture(segs: pd.DataFrame, start_us: float | None = None) -> PathPicture:
    """`start_us`: where the path starts (report.json `span.start_us`): a path may begin with an
    edge that weighs nothing (a sync whose wait is not the path's), before its first timed segment
    — the figure's times had been counted from that segment, 219 µs early on the example trace."""
    drawn = segs.nlargest(MAX_BARS, "dur_us").sort_values("seq") if len(segs) > MAX_BARS else segs
    first = float(segs["start_us"].min()) if len(segs) else 0.0
    origin = min(start_us, first) if start_us is not None and np.isfinite(start_us) else first
    return PathPicture(drawn[PICTURE_COLUMNS].reset_index(drop=True), origin, len(segs))


def _lanes(segs: pd.DataFrame) -> np.ndarray:
    """`stream S` / `thread T` (prefixed by the rank when there are several) of each segment."""
    several = segs["rank"].nunique() > 1
    lanes = []
    for rank, stream, thread in zip(segs["rank"], segs["stream"], segs["thread"], strict=True):  # drawn rows only
        lane = f"stream {stream}" if pd.notna(stream) else f"thread {thread}" if pd.notna(thread) else "host"
        lanes.append(f"rank {rank} {lane}" if several else lane)
    return np.asarray(lanes, dtype=object)


def critical_path_figure(picture: PathPicture, facts: dict[str, Any]) -> Figure:
    drawn, origin = picture.drawn, picture.origin_us
    lanes = _lanes(drawn)
    data = []
    bounds = drawn["bound"].astype(str).to_numpy(dtype=object)
    for bound in pd.unique(bounds):
        mine = bounds == bound
        group = drawn[mine]
        names = [label(display_name(n)) if isinstance(n, str) else "" for n in group["name"]]
        data.append(
            {
                "type": "bar",
                "base": values((group["start_us"] - origin) / 1e3),
                "x": values(group["dur_us"] / 1e3),
                "y": lanes[mine],
                "orientation": "h",
                "name": bound,
                "text": names,
                "textposition": "none",
                "hovertemplate": "%{text}<br>start %{base:.3f} ms, %{x:.4f} ms<extra>" + bound + "</extra>",
            }
        )
    mid = values((drawn["start_us"] + drawn["dur_us"] / 2 - origin) / 1e3)
    path = {"type": "scatter", "x": mid, "y": lanes, "mode": "lines", "name": "path"}
    data.append({**path, "line": {"width": 1, "color": "black"}})
    shown = f"; the {len(drawn):,} longest of {picture.segments:,} segments" if len(drawn) < picture.segments else ""
    window = label(trim(str(facts.get("window", {}).get("name", "")), 60))  # trace text, shown as written
    layout = {
        "title": title(f"Critical path of {window} ({fmt_us(facts.get('total_us'))}, ms from its start{shown})"),
        "barmode": "overlay",
        "xaxis": {"title": title("ms")},
        "height": max(300, 40 * len(set(lanes)) + 160),
    }
    return figure(data, layout)


def critical_path_html(picture: PathPicture, facts: dict[str, Any]) -> str:
    """The section (plotly.js is already on the page)."""
    head = "<h2 id='critical-path'>Critical path</h2>"
    if not picture.segments:
        return f"{head}<p>No critical path (no events in the window).</p>"
    pct = ", ".join(f"{k} {v:.1f} %" for k, v in facts.get("breakdown_pct", {}).items() if v)
    total = fmt_us(facts.get("total_us")) + unweighted_words(facts)
    text = f"<p>{html.escape(total)}: {html.escape(pct)}</p>"
    drawn = div(critical_path_figure(picture, facts), "critical")
    return f"{head}{text}<div class='fig'>{drawn}</div>"
