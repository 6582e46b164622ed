"""A self-contained interactive report (plotly, inlined): roofline, a sortable and filterable table of
the roofline rows, time-share treemaps by category and by `nn.Module`, top kernels, headroom, GPU time
per step and a timeline; and the page of `atlas diff --html`.

The report is a list of sections (`HTML_SECTIONS`), each a function of the `Page` that returns an
HTML fragment: adding a section is adding one function to the list.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kernel_atlas.analysis.views import (
    NO_MODULE,
    OUTSIDE_STEPS,
    KernelViews,
    StepRowTimes,
    Timeline,
    kernel_views,
    text_codes,
)
from kernel_atlas.analysis.waits import Waits
from kernel_atlas.classify.names import display_name
from kernel_atlas.core.devices import Device
from kernel_atlas.core.safe_files import write_text
from kernel_atlas.core.texts import counted
from kernel_atlas.ingest.frames import STACK_SEPARATOR
from kernel_atlas.report.datatable import TableColumn, data_table, table_assets
from kernel_atlas.report.fit import trim
from kernel_atlas.report.plot import Figure, apart, div, figure, label, numbered_alike, title, values
from kernel_atlas.report.trust_view import trust_lines
from kernel_atlas.report.units import (
    MISSING,
    device_number,
    device_time_line,
    fmt_gbps,
    fmt_number,
    fmt_pct,
    fmt_shapes,
    fmt_signed_us,
    fmt_tflops,
    fmt_us,
    no_peaks_line,
    nothing_found,
    other_gpus_line,
    peaks_line,
    projection_note,
    shared_rank_line,
)
from kernel_atlas.report.waits_view import waits_html
from kernel_atlas.roofline.analysis import Analysis

if TYPE_CHECKING:
    from kernel_atlas.analysis.diff import Diff

FIGURE_IDS = ("roofline", "timeshare", "top-kernels", "headroom", "modules", "steps", "timeline")


def _short(name: str, width: int = 70) -> str:
    name = display_name(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def _stack_hint(call_stack: object, frames: int = 6) -> str:
    """The innermost frames of a call stack, one per line, for hover text."""
    if not isinstance(call_stack, str) or not call_stack:
        return ""
    parts = call_stack.split(" <- ")[1 : frames + 1]
    # frames and ops as the terminal shows them (`linear.py(124): forward`): the kernel-name
    # shortener would cut a frame at its `(` and blank `<built-in function linear>`
    return "<br>".join(html.escape(trim(p, 90)) for p in parts)


MAX_ROOFLINE_POINTS = 5_000  # points of the roofline figure (each ~350 bytes of page); the file has all
_OPS_NAMED = 3  # ops named in the roofline title's line on the groups it cannot draw


def _estimated(rows: pd.DataFrame) -> np.ndarray:
    """Rows whose cost is an estimate (roofline.parquet `estimate`), as booleans."""
    if "estimate" not in rows:
        return np.zeros(len(rows), dtype=bool)
    return rows["estimate"].fillna(False).to_numpy(dtype=bool)


def _assumed(row: object) -> str:
    """What an estimated row's cost assumed: its formula names it (docs/costs.md), else its note."""
    for field_name in ("formula", "note"):
        text = getattr(row, field_name, None)
        if isinstance(text, str) and text:
            return text
    return "what the trace did not record"


def _own_us(row: object) -> float:
    """A roofline row's kernel's own time (`total_us`; a table without it: its op calls' time)."""
    total = getattr(row, "total_us", None)
    return float(total) if total is not None and total == total else float(row.op_time_us)  # type: ignore[attr-defined]


def _helpers_us(row: object) -> float:
    """The time of a roofline row's op calls beyond its kernel's own (helper kernels of the
    calls: a cuDNN convolution's transposes, a scan's init kernel); 0 where none."""
    own, extra = _own_us(row), float(row.op_time_us) - _own_us(row)  # type: ignore[attr-defined]
    return extra if extra > 1e-9 * max(abs(own), 1.0) else 0.0


def _calls_time(row: object) -> str:
    """A roofline row's calls and time for a hover: the kernel's own time, as the table's `time`
    column gives it, and the op calls' time where helper kernels make it longer — the time the
    rates and SOL are over (the hover had given that one alone, beside a table of the other)."""
    calls = f"{row.count:,} calls, {fmt_us(_own_us(row))} of this kernel"  # type: ignore[attr-defined]
    if _helpers_us(row):
        calls += f"; the op calls {fmt_us(row.op_time_us)} with their helper kernels"  # type: ignore[attr-defined]
    return calls


def _rated_over(row: object) -> str:
    return " over the op calls' time" if _helpers_us(row) else ""


def _no_points(table: pd.DataFrame) -> str:
    """Why a roofline has no point (no kernel group with FLOPs), from the roofline rows' roles."""
    if not len(table):
        return "no GPU activity to place"
    roles = table["role"].astype(object)
    times = table["total_us"] if "total_us" in table else table["op_time_us"]
    shapeless = float(times[(roles == "no shapes").to_numpy()].sum())
    if shapeless > 0 and not (roles == "main").any():
        return (
            f"no op call recorded its input shapes ({fmt_us(shapeless)} of kernels): a kernel's FLOPs come "
            "from its op's shapes — profile with record_shapes=True (a GPU-only trace has no ops)"
        )
    if shapeless > 0:
        return (
            f"no costed kernel has FLOPs; {fmt_us(shapeless)} of kernels ran under ops that recorded no input "
            "shapes (profile with record_shapes=True)"
        )
    return "no costed kernel has FLOPs (the ops' costs are bytes only, or have no model)"


def roofline_figure(analysis: Analysis, device: Device | None) -> Figure:
    table = analysis.roofline
    points = table[(table["role"] == "main") & table["achieved_tflops"].notna() & (table["flops"] > 0)]
    plotted = len(points)
    if plotted > MAX_ROOFLINE_POINTS:  # dynamic shapes: a group per shape (200k groups: a 70 MB page)
        heaviest = np.argsort(-points["op_time_us"].to_numpy(np.float64), kind="stable")[:MAX_ROOFLINE_POINTS]
        points = points.iloc[np.sort(heaviest)]
    data = []
    for category, group in points.groupby("category", sort=True):
        size = np.sqrt(group["op_time_us"].to_numpy() / max(points["op_time_us"].max(), 1e-9)) * 40 + 6
        estimated = _estimated(group)
        hover = [
            f"<b>{html.escape(_short(r.name))}</b><br>{html.escape(str(r.launcher))}"
            f"<br>shapes {html.escape(str(r.input_dims))}"
            f"<br>{_calls_time(r)}"
            f"<br>{fmt_tflops(r.achieved_tflops)}, {fmt_gbps(r.achieved_gbps)}{_rated_over(r)}"
            f"<br>SOL {fmt_pct(r.sol_pct)} ({r.bound if isinstance(r.bound, str) else '–'}), "
            f"headroom {fmt_us(r.headroom_us)}"
            + (f"<br><b>estimate</b>: {html.escape(trim(_assumed(r), 120))}" if guess else "")
            + f"<br><i>{_stack_hint(r.call_stack)}</i>"
            for r, guess in zip(group.itertuples(index=False), estimated, strict=True)
        ]
        data.append(
            {
                "type": "scatter",
                "x": values(group["intensity"]),
                "y": values(group["achieved_tflops"]),
                "mode": "markers",
                "name": label(category),
                # an open marker: a cost that stands on what the trace did not record
                "marker": {
                    "size": size,
                    "opacity": 0.75,
                    "symbol": np.where(estimated, "circle-open", "circle").tolist(),
                },
                "text": hover,
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    if "replay_tflops" in table:
        replayed = points[points["replay_tflops"].notna()]
        if len(replayed):
            data.append(
                {
                    "type": "scatter",
                    "x": values(replayed["intensity"]),
                    "y": values(replayed["replay_tflops"]),
                    "mode": "markers",
                    "name": "replayed",
                    "marker": {"symbol": "diamond-open", "size": 11, "color": "black"},
                    "text": [
                        f"replayed {html.escape(_short(str(r.name)))}: {fmt_us(r.replay_us)} on "
                        f"{html.escape(str(r.replay_device))} ({r.replay_check})"
                        for r in replayed.itertuples()
                    ],
                    "hovertemplate": "%{text}<extra></extra>",
                }
            )
    if device is not None and len(points):
        bw_tflops = device.memory_gbps / 1e3
        roofs = [
            (roof, peak)
            for roof, peak in sorted(
                {(p, v) for p, v in device.tensor.items()} | {(p + " vector", v) for p, v in device.vector.items()}
            )
            if roof in ("bf16", "fp8", "fp32 vector", "tf32", "fp16")
            and not (roof == "fp16" and "bf16" in device.tensor)
        ]
        # from below the points to past the points and every roof's ridge: each roof's flat part,
        # at the peak its legend names, is drawn however low the points' intensities are
        lo = max(points["intensity"].min() / 4, 1e-3)
        hi = max(points["intensity"].max() * 4, max((peak / bw_tflops for _, peak in roofs), default=0.0) * 4, 10.0)
        x = np.logspace(np.log10(lo), np.log10(hi), 200)
        for roof, peak in roofs:
            data.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": np.minimum(peak, bw_tflops * x),
                    "mode": "lines",
                    "name": f"roof {roof} {peak:g} TF/s",
                    "line": {"dash": "dot", "width": 1},
                    "hoverinfo": "name",
                }
            )
        ridge_peak = device.tensor.get("bf16") or device.vector.get("fp32", 1.0)
        data.append(
            {
                "type": "scatter",
                "x": [ridge_peak / bw_tflops],
                "y": [ridge_peak],
                "mode": "markers+text",
                "name": "ridge point",
                "text": [f"ridge {ridge_peak / bw_tflops:.0f} FLOP/B"],
                "textposition": "top left",
                "marker": {"symbol": "x", "size": 10, "color": "black"},
            }
        )
    heading = f"Roofline — {device.name if device else 'no device peaks'}"
    if device is not None and projection_note(analysis.facts):
        heading += f" ({label(projection_note(analysis.facts))})"
    guessed = int(_estimated(points).sum())
    if guessed:
        heading += (
            f"<br><sup>open markers: {guessed:,} estimated costs (standing on what the trace did not "
            "record: the hover says what was assumed)</sup>"
        )
    if not plotted:
        heading += f"<br><sup>no point drawn: {label(_no_points(table))}</sup>"
    if plotted > len(points):
        heading += (
            f"<br><sup>the {len(points):,} kernel groups with the most time of {plotted:,} "
            "(each one in roofline.parquet)</sup>"
        )
    # costed with bytes and no FLOPs (copies, gathers, memsets, collectives): no place on a FLOP/s
    # axis; named by their ops, most time first (a fixed "copies, memsets, collectives" had named
    # index_select gathers as one of those)
    moved = table[(table["role"] == "main") & table["achieved_gbps"].notna() & ~(table["flops"] > 0)]
    if len(moved):
        op = moved["op_mapping"].fillna(moved["name"]) if "op_mapping" in moved else moved["name"]
        ops = moved.groupby(op, sort=False)["op_time_us"].sum()
        named = [trim(str(name), 40) for name in ops.sort_values(ascending=False, kind="stable").index[:_OPS_NAMED]]
        more = f" and {len(ops) - _OPS_NAMED:,} more ops" if len(ops) > _OPS_NAMED else ""
        heading += (
            f"<br><sup>not drawn: {len(moved):,} costed groups without FLOPs ({label(', '.join(named))}{more}; "
            f"{fmt_us(float(moved['op_time_us'].sum()))}), in the table below and roofline.parquet</sup>"
        )
    layout = {
        "title": title(heading),
        "xaxis": {"type": "log", "title": title("arithmetic intensity (FLOP/byte)")},
        "yaxis": {"type": "log", "title": title("achieved TFLOP/s")},
        "height": 600,
    }
    return figure(data, layout)


def timeshare_figure(analysis: Analysis) -> Figure:
    k = analysis.kernels
    # a kernel tile per kernel, labelled with its short name: two kernels of one short name (template
    # arguments apart: fft2d_r2c_32x32<float, false, 5u, true> and <…, 0u, false>) were one tile
    keys = [text_codes(k["category"], label), text_codes(k["op_mapping"], label), text_codes(k["name"])]
    kept = np.logical_and.reduce([codes >= 0 for codes, _ in keys])
    # summed per distinct (category, op, kernel) over the rows in their order, as a groupby of the texts would
    summed = pd.Series(k["dur_us"].to_numpy()[kept]).groupby([codes[kept] for codes, _ in keys], sort=False).sum()
    frame = pd.DataFrame(
        {
            column: texts[summed.index.get_level_values(i).to_numpy()]
            for i, (column, (_, texts)) in enumerate(zip(("category", "op", "kernel"), keys, strict=True))
        }
        | {"time": summed.to_numpy()}
    )
    frame, folded = _fold_small_kernels(frame)
    frame = frame.sort_values(["category", "op", "kernel"], ignore_index=True)
    ids, labels, parents, times, names = [], [], [], [], []
    for category, g in frame.groupby("category"):
        ids.append(category), labels.append(category), parents.append(""), times.append(g["time"].sum())
        names.append("")
        for op, h in g.groupby("op"):
            op_id = f"{category}/{op}"
            ids.append(op_id), labels.append(op), parents.append(category), times.append(h["time"].sum())
            names.append("")
            # sibling kernels of one short name (template arguments apart) numbered, and each
            # hover names its kernel whole: their tiles had read, and hovered, alike
            kernels, other = h["kernel"].tolist(), h["other"].tolist()
            shown = numbered_alike([k if o else _short(k) for k, o in zip(kernels, other, strict=True)])
            hovers = apart(kernels, HOVER_NAME_CHARS)
            for row, tile, hover in zip(h.itertuples(index=False), shown, hovers, strict=True):
                # `… N other kernels` as it is
                ids.append(f"{op_id}/{label(row.kernel)}"), labels.append(row.kernel if row.other else label(tile))
                parents.append(op_id), times.append(row.time), names.append("" if row.other else f"<br>{label(hover)}")
    tree = {
        "type": "treemap",
        "ids": ids,
        "labels": labels,
        "parents": parents,
        "values": times,
        "branchvalues": "total",
        "customdata": names,
        "hovertemplate": "%{label}%{customdata}<br>%{value:.1f} µs (%{percentRoot:.1%})<extra></extra>",
    }
    heading = "GPU time: category → op → kernel"
    if folded:
        heading += (
            f"<br><sup>the {MAX_TREEMAP_KERNELS:,} kernels with the most time; the other {folded:,} "
            "summed per op (each one in timeshare.csv)</sup>"
        )
    return figure([tree], {"title": title(heading), "height": 600})


MAX_TREEMAP_KERNELS = 2_000  # kernel tiles of the treemap: a browser draws 200k of them in minutes


def _fold_small_kernels(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The treemap's (category, op, kernel, time, other) rows: the MAX_TREEMAP_KERNELS with the
    most time, the others summed into one `… N other kernels` tile per (category, op) (`other`);
    and how many were summed."""
    if len(frame) <= MAX_TREEMAP_KERNELS:
        return frame.assign(other=False), 0
    order = np.argsort(-frame["time"].to_numpy(), kind="stable")
    top, rest = frame.iloc[order[:MAX_TREEMAP_KERNELS]], frame.iloc[order[MAX_TREEMAP_KERNELS:]]
    others = rest.groupby(["category", "op"], sort=False)["time"].agg(["sum", "count"]).reset_index()
    others["kernel"] = [f"… {n:,} other kernel{'s' if n > 1 else ''}" for n in others["count"]]
    others = others.rename(columns={"sum": "time"})[["category", "op", "kernel", "time"]]
    return pd.concat([top.assign(other=False), others.assign(other=True)], ignore_index=True), len(rest)


HOVER_NAME_CHARS = 400  # a kernel's name (and shapes) in a bar's hover: whole but for pathological lengths


def top_kernels_figure(analysis: Analysis, top: int = 20) -> Figure:
    share = analysis.timeshare[analysis.timeshare["level"] == "kernel"].head(top).iloc[::-1]
    bar = {
        "type": "bar",
        "x": values(share["total_us"]),
        "y": [f"{len(share) - i}. {label(_short(key, 60))}" for i, key in enumerate(share["key"])],
        "orientation": "h",
        "text": [f"{p:.1f}%" if p == p else "–" for p in share["pct"]],  # NaN: no GPU time to share
        # the hover names the kernel whole, or where it differs from another kernel's name: two
        # kernels can share a cut label (template arguments apart), and a cut hover
        "customdata": [label(text) for text in apart([str(key) for key in share["key"]], HOVER_NAME_CHARS)],
        "hovertemplate": "%{customdata}<br>%{x:.1f} µs<extra></extra>",
    }
    layout = {
        "title": title(f"Top {len(share)} kernels by GPU time"),
        "xaxis": {"title": title("µs")},
        "height": max(400, 24 * len(share)),
    }
    return figure([bar], layout)


def headroom_figure(analysis: Analysis, top: int = 20) -> Figure:
    table = analysis.roofline
    rows = table[table["headroom_us"] > 0].head(top).iloc[::-1]
    # rows alike in kernel and shapes are told apart by their launcher on the bar itself
    # (`aten::add` and `aten::add_` read as one bar twice, but for the hover)
    shown = [f"{_short(str(r.name), 50)} {r.input_dims}" for r in rows.itertuples(index=False)]
    twice = pd.Series(shown).duplicated(keep=False).to_numpy()
    texts = [
        f"{_short(str(r.name), 50)} · {r.launcher} {r.input_dims}" if alike else text
        for r, text, alike in zip(rows.itertuples(index=False), shown, twice, strict=True)
    ]
    labels = [label(f"{len(rows) - i}. {text}"[:90]) for i, text in enumerate(texts)]
    bar = {
        "type": "bar",
        "x": values(rows["headroom_us"]),
        "y": labels,
        "orientation": "h",
        "text": [f"SOL {fmt_pct(p, 0)}" for p in rows["sol_pct"]],
        "customdata": _headroom_hovers(rows),
        "hovertemplate": "%{customdata}<br>headroom %{x:.1f} µs<extra></extra>",
    }
    heading = "Headroom: time above the roofline-attainable time"
    if not len(rows):
        heading += f"<br><sup>no bar: {label(_no_headroom(table))}</sup>"
    layout = {
        "title": title(heading),
        "xaxis": {"title": title("µs")},
        "height": max(400, 24 * len(rows)),
    }
    return figure([bar], layout)


def _headroom_hovers(rows: pd.DataFrame) -> list[str]:
    """A headroom bar's hover: the kernel (whole, or where it differs from another's), the shapes
    and dtypes, the launcher and the note — what tells the roofline's rows of one kernel apart
    (rows launched by `aten::add_` and by `aten::sub_`, or told apart by their note alone, had
    one hover, their shapes cut off a 400-character name)."""
    names = apart([str(name) for name in rows["name"]], HOVER_NAME_CHARS)
    hovers = []
    for name, r in zip(names, rows.itertuples(index=False), strict=True):
        parts = [label(name)]
        for heading, value in (
            ("shapes", r.input_dims),
            ("dtypes", getattr(r, "input_types", None)),
            ("launched by", r.launcher),
            ("note:", getattr(r, "note", None)),
        ):
            if isinstance(value, str) and value:  # a 10,000-character shape list: its start and end
                parts.append(f"{heading} {label(trim(value, HOVER_NAME_CHARS, middle=True))}")
        hovers.append("<br>".join(parts))
    return hovers


def _no_headroom(table: pd.DataFrame) -> str:
    """Why the headroom figure has no bar, from the roofline rows."""
    if not len(table) or not (table["role"].astype(object) == "main").any():
        return "no kernel has a cost (FLOPs or bytes) to hold against the roofline"
    if "sol_pct" not in table or not table["sol_pct"].notna().any():
        return "no roofline-attainable time: the GPU's peaks are not known (no SOL or headroom)"
    return "no costed kernel takes longer than its roofline-attainable time"


def _summed(ranks: int, before: str = ", ") -> str:
    """What a figure of several ranks adds to its title."""
    return f"{before}{ranks} ranks summed" if ranks > 1 else ""


# levels of nn.Module nesting the treemap holds (it shows 3 at a time; real models nest under 10):
# a deeper path's time is drawn at its ancestor this deep — each level is a tile whose id is
# the whole path down to it, so a path of 8,000 levels made a 217 MB page in 36 s
MODULE_LEVELS = 16


def module_figure(modules: pd.DataFrame, ranks: int = 1) -> Figure:
    """GPU time by `nn.Module` path (`views.module_times`) as a treemap: each module holds its
    submodules (down to MODULE_LEVELS); the time of kernels launched outside any module is
    `(no module)`."""
    own = modules.set_index("module")["dur_us"]
    own.index = [label(path) for path in own.index]  # escaping adds no "."
    times: dict[str, float] = {}
    folded = 0
    for path, time in own.items():
        parts = path.split(".", MODULE_LEVELS) if path != NO_MODULE else [NO_MODULE]
        if len(parts) > MODULE_LEVELS:
            parts, folded = parts[:MODULE_LEVELS], folded + 1
        for depth in range(1, len(parts) + 1):
            times.setdefault(".".join(parts[:depth]), 0.0)
        times[".".join(parts)] += float(time)
    ids = sorted(times)
    total = float(own.sum()) or 1.0
    tree = {
        "type": "treemap",
        "ids": ids,
        "labels": [i.rsplit(".", 1)[-1] if i != NO_MODULE else i for i in ids],
        "parents": [i.rsplit(".", 1)[0] if "." in i and i != NO_MODULE else "" for i in ids],
        "values": [times[i] for i in ids],
        "branchvalues": "remainder",
        "customdata": [[i] for i in ids],
        "hovertemplate": "%{customdata[0]}<br>%{value:.1f} µs, %{percentRoot:.1%} of GPU time<extra></extra>",
        "maxdepth": 3,
    }
    if own.sum() > 0:
        covered = 100 * (1 - own.get(NO_MODULE, 0.0) / total)
        heading = f"GPU time by nn.Module ({covered:.0f}% of GPU time inside a module{_summed(ranks)})"
    else:  # a share of nothing is no share
        heading = f"GPU time by nn.Module (no GPU time{_summed(ranks)})"
    if folded:
        heading += f"; {folded:,} paths deeper than {MODULE_LEVELS} levels drawn at level {MODULE_LEVELS}"
    return figure([tree], {"title": title(heading), "height": 600})


def step_figure(steps: pd.DataFrame, ranks: int = 1, rows: StepRowTimes | None = None) -> Figure:
    """GPU time of every step row of steps.parquet (`rows`, `views.step_row_times`: a repeated
    number's rows are bars of their own, `step 1 (2nd)`; the GPU time in no listed row one bar,
    OUTSIDE_STEPS), stacked by category. Without `rows` — a run ingested before summary.json
    listed each row's time by category, a page drawn without the summary — of every step number
    (`views.step_times`, activities outside any step apart), and the title says that a number's
    rows are one bar there."""
    if rows is not None and rows.by_number_why is None:
        order = rows.table.drop_duplicates("label")["label"].tolist()  # by row, OUTSIDE_STEPS last
        table = rows.table.pivot_table(index="label", columns="category", values="dur_us", aggfunc="sum")
        table = table.reindex(order).fillna(0.0)
        labels = order
    else:
        step = steps["step"].astype(str).where(steps["step"].notna(), "no step").to_numpy()
        table = steps.groupby([step, steps["category"].to_numpy()])["dur_us"].sum().unstack(fill_value=0.0)
        table = table.loc[sorted(table.index, key=lambda s: (s == "no step", int(s) if s != "no step" else 0))]
        labels = [f"step {s}" if s != "no step" else s for s in table.index]
    bars = [
        {
            "type": "bar",
            "x": [label(x) for x in labels],
            "y": values(table[category] / 1e3),
            "name": label(category),
            "hovertemplate": "%{x}: %{y:.3f} ms<extra>" + label(category) + "</extra>",
        }
        for category in table.columns
    ]
    heading = "GPU time per step by category" + (f" ({_summed(ranks, '')})" if ranks > 1 else "")
    heading += f"<br><sup>{label(_step_rows_note(rows))}</sup>"
    layout = {"title": title(heading), "barmode": "stack", "yaxis": {"title": title("ms")}, "height": 420}
    return figure(bars, layout)


def _step_rows_note(rows: StepRowTimes | None) -> str:
    """Which steps the per-step chart's bars are, in words: steps.parquet's rows, and where the GPU
    time of the steps it leaves out went (docs/efficiency.md "Which step")."""
    if rows is None:
        return "by step number: a repeated number's rows, apart in steps.parquet, are one bar here"
    if rows.by_number_why is not None:  # the rows disagree with the kernels: not drawn as they are
        return f"by step number: {rows.by_number_why}"
    if (rows.table["label"] == OUTSIDE_STEPS).all():
        return "no profiler steps in steps.parquet"
    parts = ["the step rows of steps.parquet, each the GPU activities launched in it"]
    if rows.table["label"].str.endswith(")").any():
        parts.append("a repeated number's later rows as 'step N (2nd)'")
    # where their time went, where they had any (a step left out for launching none had none)
    under = f": under '{OUTSIDE_STEPS}'" if (rows.table["label"] == OUTSIDE_STEPS).any() else ""
    if rows.left_out:
        steps = counted(rows.left_out, "trailing step", "trailing steps")
        why = f" ({rows.left_out_why})" if rows.left_out_why else ""
        them = "it" if rows.left_out == 1 else "them"
        parts.append(f"{steps} left out as steps.parquet leaves {them}{why}{under}")
    if rows.unlisted:
        parts.append(f"{counted(rows.unlisted, 'step', 'steps')} past those summary.json lists{under}")
    return "; ".join(parts)


def timeline_figure(timeline: Timeline, note: str = "") -> Figure:
    """GPU activities per stream (`views.timeline_of`), coloured by category: of one step, or of
    the whole profiled window with every step shaded (then only the longest activities)."""
    rows, step = timeline.rows, timeline.step
    data = []
    origin = float(rows["ts_us"].min()) if len(rows) else 0.0
    scale, unit = (1e3, "ms") if step is None else (1.0, "µs")
    lanes, devices = timeline_lanes(rows)
    for category, group in rows.groupby("category", observed=True):
        data.append(
            {
                "type": "bar",
                "base": values((group["ts_us"] - origin) / scale),
                "x": values(group["dur_us"] / scale),
                "y": lanes.loc[group.index].tolist(),
                "orientation": "h",
                "name": label(category),
                "text": [label(display_name(str(n))) for n in group["name"]],
                "textposition": "none",
                "hovertemplate": "%{text}<br>start %{base:.3f} " + unit + ", %{x:.4f} " + unit + "<extra></extra>",
            }
        )
    if step is not None:
        what = f"step {step}"
    else:  # a whole window without steps is no "all steps"
        what = "all steps" if len(timeline.steps) else "the whole profile — no profiler steps in the trace"
    shown = f"; the {len(rows):,} longest of {timeline.total:,}" if timeline.total > len(rows) else ""
    layout = {
        "title": title(f"Timeline of {what} ({unit}, per stream{shown}{'; ' + note if note else ''})"),
        "barmode": "overlay",
        "xaxis": {"title": title(unit)},
        "yaxis": {"title": title("device and stream" if devices > 1 else "stream")},
        "height": 420,
    }
    if step is None and len(rows):
        layout.update(_step_shading(timeline.steps, origin, scale))
    return figure(data, layout)


def timeline_lanes(rows: pd.DataFrame) -> tuple[pd.Series, int]:
    """Each activity's lane on a timeline (`rows`' index) and how many devices the rows hold: its
    stream, or where one rank drives several GPUs `device D stream S`, as timeshare.csv keys
    streams — stream 7 of two devices is two streams (one lane `7` had drawn two GPUs' kernels
    overlapping, a stream that seemed to run two kernels at once)."""
    streams = rows["stream"].astype(str)
    devices = rows.get("device")  # None: a Timeline made without it, of one device
    count = int(devices.nunique(dropna=False)) if devices is not None else 1
    if count < 2:
        return streams, count
    return "device " + devices.map(device_number).astype(str) + " stream " + streams, count


def _step_shading(steps: pd.DataFrame, origin: float, scale: float) -> dict[str, list[dict]]:
    """Every step of a whole-window timeline shaded (alternating) and labelled, as layout
    shapes and annotations set at once: what `fig.add_vrect` draws, without re-validating
    every earlier shape at each call (quadratic in the number of steps)."""
    shapes, annotations = [], []
    for span in _step_bands(steps):
        x0, x1 = (span.start - origin) / scale, (span.end - origin) / scale
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "y domain",
                "x0": x0,
                "x1": x1,
                "y0": 0,
                "y1": 1,
                "fillcolor": "grey",
                "opacity": 0.08 + 0.06 * span.shade,
                "line": {"width": 0},
            }
        )
        annotations.append(
            {
                "text": span.label,
                "showarrow": False,
                "xref": "x",
                "yref": "y domain",
                "x": x0,
                "y": 1,
                "xanchor": "left",
                "yanchor": "top",
            }
        )
    return {"shapes": shapes, "annotations": annotations}


MAX_STEP_BANDS = 200  # shaded bands of a whole-window timeline: plotly spends ~0.5 ms on each


def _step_bands(steps: pd.DataFrame) -> list[SimpleNamespace]:
    """The steps as shaded bands: one per step, or with more steps than MAX_STEP_BANDS, runs of
    consecutive steps, one band each (`steps 10–19`)."""
    per_band = max(1, -(-len(steps) // MAX_STEP_BANDS))
    numbers, starts, ends = (steps[k].to_numpy() for k in ("step", "start", "end"))
    bands = []
    for lo in range(0, len(steps), per_band):
        hi = min(lo + per_band, len(steps)) - 1
        label = f"step {int(numbers[lo])}" if hi == lo else f"steps {int(numbers[lo])}–{int(numbers[hi])}"
        shade = int(numbers[lo]) % 2 if per_band == 1 else (lo // per_band) % 2  # alternating
        bands.append(
            SimpleNamespace(start=float(starts[lo]), end=float(ends[lo : hi + 1].max()), label=label, shade=shade)
        )
    return bands


ROOFLINE_TABLE_COLUMNS = [
    TableColumn("kernel", "kernel", title="short name; expand the row for the full name and call stack"),
    TableColumn("op", "op", wrap=False),
    TableColumn("launcher", "launcher"),
    TableColumn("shapes", "shapes", title="recorded input shapes"),
    TableColumn("calls", "calls", numeric=True),
    TableColumn("time", "time", numeric=True, title="GPU time of this kernel at these shapes, all calls"),
    TableColumn("tflops", "TFLOP/s", numeric=True, title="achieved, over the op calls' time"),
    TableColumn("gbps", "GB/s", numeric=True, title="achieved, over the op calls' time"),
    TableColumn("sol", "SOL %", numeric=True, title="roofline-attainable time / measured time"),
    TableColumn("bound", "bound", wrap=False),
    TableColumn("headroom", "headroom", numeric=True, title="measured − attainable time, all calls"),
]


def _row_detail(row: object) -> str:
    lines = [str(getattr(row, "name", ""))]
    if getattr(row, "input_dims", None):
        lines.append(f"shapes: {row.input_dims}  types: {getattr(row, 'input_types', '')}")
    for heading, attr in (("formula", "formula"), ("note", "note"), ("role", "role")):
        value = getattr(row, attr, None)
        if isinstance(value, str) and value:
            lines.append(f"{heading}: {value}")
    stack = getattr(row, "call_stack", None)
    if isinstance(stack, str) and stack:
        lines.append("call stack (innermost first):")
        lines.extend("  " + frame for frame in stack.split(STACK_SEPARATOR))
    return "\n".join(lines)


NAME_CELL = 56  # characters of a kernel name in a table cell; the full name is in the row's details


def _name_cell(name: object) -> str:
    """A kernel name as the terminal shortens it, cut in the middle to NAME_CELL characters."""
    return _cut_cell(display_name(str(name)))


def _cut_cell(text: str) -> str:
    """A text cut in the middle to NAME_CELL characters."""
    return text if len(text) <= NAME_CELL else text[: NAME_CELL // 2 - 1] + "…" + text[-(NAME_CELL // 2) :]


def _bound_cell(row: object) -> str:
    """The bound, or — where a row has none — a dash and why (`– no shapes`, `– helper`)."""
    bound = getattr(row, "bound", None)
    if isinstance(bound, str) and bound:
        return bound
    role = getattr(row, "role", None)
    return f"{MISSING} {role}" if isinstance(role, str) and role and role != "main" else MISSING


MAX_TABLE_ROWS = 5_000  # roofline rows the page's table holds (each ~600 bytes of HTML); the file has all


def roofline_table(analysis: Analysis) -> str:
    """The roofline rows (kernel, launcher, shapes) in a sortable, filterable table, ranked by
    headroom: all of them, or the first MAX_TABLE_ROWS, said above the table (a trace with 200k
    distinct kernels made a 118 MB page)."""
    rows = analysis.roofline.head(MAX_TABLE_ROWS)
    note = ""
    if len(analysis.roofline) > len(rows):
        note = (
            f"<p>The first {len(rows):,} of {len(analysis.roofline):,} rows (most headroom first); "
            "roofline.parquet holds every row.</p>"
        )
    cells, details = [], []
    for row in rows.itertuples(index=False):
        cells.append(
            [
                (_name_cell(row.name), None),
                (str(row.op_mapping), None),
                (str(row.launcher or ""), None),
                (trim(fmt_shapes(row.input_dims), 100), None),
                (f"{row.count:,}", row.count),
                (fmt_us(row.total_us), row.total_us),
                (fmt_number(row.achieved_tflops), row.achieved_tflops),
                (fmt_number(row.achieved_gbps), row.achieved_gbps),
                (fmt_number(row.sol_pct), row.sol_pct),
                (_bound_cell(row), None),
                (fmt_us(row.headroom_us), row.headroom_us),
            ]
        )
        details.append(_row_detail(row))
    return note + data_table("roofline-table", ROOFLINE_TABLE_COLUMNS, cells, details, sort=None)


# --- the report page, section by section ---------------------------------------------------------


class Figures:
    """The plotly figures of one page: plotly.js is inlined with the first (the page works offline)."""

    def __init__(self) -> None:
        self._included = False

    def html(self, fig: Figure, div_id: str) -> str:
        drawn = div(fig, div_id, include_plotlyjs=not self._included)
        self._included = True
        return f"<div class='fig'>{drawn}</div>"


@dataclass
class Page:
    """What the sections of the report draw from."""

    analysis: Analysis
    device: Device | None
    title: str
    waits: Waits | None = None
    extra: Sequence[str] = ()  # further HTML fragments placed at the end (e.g. the cross-rank view)
    figures: Figures = field(default_factory=Figures)
    views: KernelViews | None = None  # module, step and timeline views (`report.views`)

    def figure(self, fig: Figure, div_id: str) -> str:
        return self.figures.html(fig, div_id)


MAX_DEVICE_LINES = 64  # device lines of the summary; report.json lists every device


def _summary_section(page: Page) -> str:
    facts = page.analysis.facts
    devices = facts["devices"]
    items = [f"<li>{html.escape(device_time_line(d))}</li>" for d in devices[:MAX_DEVICE_LINES]]
    if len(devices) > MAX_DEVICE_LINES:
        items.append(f"<li>… and {len(devices) - MAX_DEVICE_LINES:,} more devices (report.json `devices`)</li>")
    # whose peaks the roofline, SOL and headroom stand on, as the terminal says it
    if page.device is None:
        head = [f"<li><b>{html.escape(no_peaks_line(facts.get('traced_gpu')))}</b>: no roofline, SOL or headroom</li>"]
    else:
        projection = projection_note(facts)
        head = [
            f"<li>peaks of {html.escape(peaks_line(page.device))}"
            + (f" <b>({html.escape(projection)})</b>" if projection else "")
            + "</li>"
        ]
        if facts.get("traced_gpu_identified"):
            head.append(f"<li>{html.escape(facts['traced_gpu_identified'])}</li>")
        if other_gpus_line(facts):
            head.append(f"<li><b>{html.escape(other_gpus_line(facts))}</b></li>")
    items = head + items
    items.append(f"<li>GPU time (all activities, overlaps counted in full) {fmt_us(facts['gpu_time_us'])}</li>")
    items += [f"<li><b>{html.escape(shared_rank_line(shared))}</b></li>" for shared in facts.get("shared_ranks", [])]
    trust = "".join(f"<p><b>{html.escape(line)}</b></p>" for line in trust_lines(facts.get("trust")))
    return f"<h1>{html.escape(page.title)}</h1>{trust}<ul>{''.join(items)}</ul>"


def _findings_section(page: Page) -> str:
    """What to fix first (report.json `findings`), right under the summary."""
    findings = page.analysis.facts.get("findings") or []
    if not findings:
        return f"<h2>What to fix first</h2><p>{html.escape(nothing_found(page.device is not None).capitalize())}.</p>"
    rows = "".join(
        "<tr>"
        f"<td class='num'>{fmt_us(f['saving_us'])}</td><td>{html.escape(str(f['kind']))}</td>"
        # a kernel headroom's `what` is its kernel's short name already; other kinds' is a phrase
        f"<td title='{html.escape(str(f['what']), quote=True)}'>{html.escape(_cut_cell(str(f['what'])))}</td>"
        f"<td>{html.escape(str(f.get('where') or MISSING))}</td><td>{html.escape(str(f['evidence']))}</td>"
        "</tr>"
        for f in findings
    )
    return (
        "<h2>What to fix first</h2><p>Ranked by estimated saving; savings of different kinds can overlap "
        "and do not add up.</p><table class='findings'><thead><tr><th>saving</th><th>kind</th><th>what</th>"
        f"<th>where</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _roofline_section(page: Page) -> str:
    return page.figure(roofline_figure(page.analysis, page.device), "roofline")


def _table_section(page: Page) -> str:
    return "<h2>Kernels, shapes and their roofline position</h2>" + roofline_table(page.analysis)


def _timeshare_section(page: Page) -> str:
    return page.figure(timeshare_figure(page.analysis), "timeshare")


def _top_kernels_section(page: Page) -> str:
    return page.figure(top_kernels_figure(page.analysis), "top-kernels")


def _headroom_section(page: Page) -> str:
    return page.figure(headroom_figure(page.analysis), "headroom")


def _module_section(page: Page) -> str:
    if page.views is None:
        return ""
    return page.figure(module_figure(page.views.modules, page.views.ranks), "modules")


def _steps_section(page: Page) -> str:
    if page.views is None:
        return ""
    return page.figure(step_figure(page.views.steps, page.views.ranks, page.views.step_rows), "steps")


def _timeline_section(page: Page) -> str:
    if page.views is None or page.views.timeline is None:
        return ""
    return page.figure(timeline_figure(page.views.timeline, page.views.timeline_note), "timeline")


def _extra_sections(page: Page) -> str:
    return "".join(page.extra)


HTML_SECTIONS: list[Callable[[Page], str]] = [
    _summary_section,
    _findings_section,
    _roofline_section,
    _table_section,
    _timeshare_section,
    _top_kernels_section,
    _headroom_section,
    _module_section,
    _steps_section,
    _timeline_section,
    lambda page: waits_html(page.waits),
    _extra_sections,
]
# sections that read the critical path's outcome (findings rank by its savings; the further
# fragments hold its view): `draw_html` draws them last, once it is solved
AFTER_CRITICAL_PATH = (_findings_section, _extra_sections)

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:24px} .fig{margin-bottom:32px}"
    " table.findings{border-collapse:collapse} table.findings td,table.findings th{padding:2px 8px;"
    "border-bottom:1px solid #ddd;text-align:left;vertical-align:top} table.findings td.num{text-align:right;"
    "white-space:nowrap}"
)


def _document(title: str, body: list[str]) -> str:
    return "".join(
        [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
            *body,
            table_assets(),
            "</body></html>",
        ]
    )


def write_html(
    analysis: Analysis,
    device: Device | None,
    path: Path,
    title: str,
    waits: Waits | None = None,
    sections: Sequence[str] = (),
    views: KernelViews | None = None,
) -> Path:
    """The report page; `sections` are further HTML fragments placed after the others. Without
    `views`, they are made from `analysis.kernels` when it holds kernel rows (one rank)."""
    return draw_html(analysis, device, title, waits, views).write(path, sections)


@dataclass
class DrawnPage:
    """A report page with every section drawn but those of AFTER_CRITICAL_PATH."""

    page: Page
    drawn: list[str | None]  # per HTML_SECTIONS, None: drawn by `write`

    def write(self, path: Path, sections: Sequence[str] = ()) -> Path:
        """The remaining sections drawn from the facts as they are now, and the page written."""
        self.page.extra = sections
        body = [part if part is not None else HTML_SECTIONS[i](self.page) for i, part in enumerate(self.drawn)]
        write_text(path, _document(self.page.title, body))
        return path


def draw_html(
    analysis: Analysis,
    device: Device | None,
    title: str,
    waits: Waits | None = None,
    views: KernelViews | None = None,
) -> DrawnPage:
    """The report page's sections that do not read the critical path, drawn now (`atlas report`
    draws them while the critical path is solved beside it); `DrawnPage.write` does the rest."""
    if views is None and {"module", "step", "ts_us"} <= set(analysis.kernels.columns):
        views = kernel_views(analysis.kernels)
    page = Page(analysis, device, title, waits, (), views=views)
    return DrawnPage(page, [None if s in AFTER_CRITICAL_PATH else s(page) for s in HTML_SECTIONS])


# --- the page of `atlas diff --html` ----------------------------------------------------------------


DIFF_TABLE_COLUMNS = [
    TableColumn("level", "level", wrap=False),
    TableColumn("key", "key", title="category, op, nn.Module path or kernel; expand a kernel for its full names"),
    TableColumn("a", "A", numeric=True),
    TableColumn("b", "B", numeric=True),
    TableColumn("delta", "Δ (B − A)", numeric=True),
    TableColumn("ratio", "B / A", numeric=True),
    # GPU activities, not op calls: one addmm call is 1 kernel on one GPU, 2 (sgemm + epilogue) on another
    TableColumn(
        "calls", "activities A→B", title="GPU activities (kernels, copies, sets) in A and B, not op calls", wrap=False
    ),
    TableColumn(
        "status",
        "status",
        title="both, appeared (B only) or vanished (A only): whether each run ran it — a kernel name's row holds "
        "its activities outside op+shapes groups",
        wrap=False,
    ),
    TableColumn("matched", "matched by", wrap=False),
]


def diff_figure(diff: Diff, level: str = "category", top: int = 20) -> Figure:
    """GPU time per `level` in A and B side by side, the largest first."""
    rows = diff.level(level)
    rows = rows.reindex(rows[["a_us", "b_us"]].max(axis=1).sort_values(ascending=False).index).head(top)
    names = [label(display_name(str(v))[:60] if level == "kernel" else v) for v in rows["key"]]
    bars = [
        {"type": "bar", "name": label(side.label), "x": names, "y": values(rows[f"{key}_us"] / 1e3)}
        | {"hovertemplate": "%{x}: %{y:.3f} ms"}
        for side, key in ((diff.a, "a"), (diff.b, "b"))
    ]
    layout = {
        "barmode": "group",
        "title": title(f"GPU time per {level}: {label(diff.a.label)} vs {label(diff.b.label)}"),
        "yaxis": {"title": title("ms")},
        "height": 450,
    }
    return figure(bars, layout)


def _largest_changes(table: pd.DataFrame, limit: int) -> pd.DataFrame:
    """At most `limit` rows of the comparison, those with the largest changes (|delta|) of each
    level, in the table's order: the levels share `limit` evenly, a level with fewer rows than
    its share leaving the rest to the others. The table itself when it has at most `limit` rows."""
    if len(table) <= limit:
        return table
    size = table["delta_us"].abs().to_numpy(np.float64)
    level = table["level"].to_numpy()
    rows_of = {value: np.flatnonzero(level == value) for value in pd.unique(level)}
    keep = np.zeros(len(table), bool)
    budget, left = limit, len(rows_of)
    for rows in sorted(rows_of.values(), key=len):  # the smallest levels first: they take all they have
        take = min(len(rows), budget // left)
        keep[rows[np.argsort(-size[rows], kind="stable")[:take]]] = True
        budget, left = budget - take, left - 1
    return table[keep]


def diff_table(diff: Diff) -> str:
    """Every row of the comparison, or at most MAX_TABLE_ROWS of them with the largest changes,
    said above the table: two traces with 200k distinct kernels made a 60 MB page."""
    from kernel_atlas.report.units import describe_key

    rows = _largest_changes(diff.table, MAX_TABLE_ROWS)
    note = ""
    if len(rows) < len(diff.table):
        note = (
            f"<p>The {len(rows):,} rows of {len(diff.table):,} with the largest changes, shared "
            "between the levels; <code>atlas diff -o FILE.csv</code> writes every row.</p>"
        )
    cells, details = [], []
    for row in rows.itertuples(index=False):
        cells.append(
            [
                (row.level, None),
                (describe_key(row), None),
                (fmt_us(row.a_us), row.a_us),
                (fmt_us(row.b_us), row.b_us),
                (fmt_signed_us(row.delta_us), row.delta_us),
                (fmt_number(row.ratio), row.ratio),
                (f"{row.a_count:,}→{row.b_count:,}", None),
                (row.status, None),
                (row.matched_by, None),
            ]
        )
        if row.level != "kernel":
            details.append(None)
        elif row.matched_by == "op+shapes":
            details.append(f"{row.key}\nA: {row.a_kernels}\nB: {row.b_kernels}")
        else:
            details.append(str(row.key))
    return note + data_table("diff-table", DIFF_TABLE_COLUMNS, cells, details, sort=4)


def write_diff_html(diff: Diff, path: Path, comparability: str | None = None) -> Path:
    """One self-contained page: both runs, the change with its sign, how comparable they are
    (`comparability`: `diff_markdown.comparability_line`'s), time per category and op side by
    side, the kernels only one run ran (`Diff.one_run_kernels`, as the terminal counts them), the
    table of rows (`diff_table`)."""
    from kernel_atlas.report.units import describe_key, one_run_kernels

    a, b = diff.a, diff.b
    # the kernels only one run ran, each with all its time, in op+shapes groups too: the table's
    # kernel rows hold only a kernel's time outside groups (61 vanished of the 66 on the A100/V100 pair)
    only_one = one_run_kernels(diff)
    one_run = only_one.rows
    said = [f"<li>{html.escape(title)}</li>" for _, title, _ in only_one.sections]
    shown = one_run.head(MAX_TABLE_ROWS)
    note = (
        f"<p>The {len(shown):,} of {len(one_run):,} with the largest changes.</p>" if len(shown) < len(one_run) else ""
    )
    cells = [
        [
            (row.status, None),
            (describe_key(row), None),
            (fmt_us(row.a_us), row.a_us),
            (fmt_us(row.b_us), row.b_us),
            (fmt_signed_us(row.delta_us), row.delta_us),
            (f"{row.a_count:,}→{row.b_count:,}", None),
        ]
        for row in shown.itertuples(index=False)
    ]
    by_key = {column.key: column for column in DIFF_TABLE_COLUMNS}
    only = TableColumn("status", "status", title="appeared (B only) or vanished (A only)", wrap=False)
    columns = [only, *(by_key[key] for key in ("key", "a", "b", "delta", "calls"))]
    one_run_table = data_table("diff-one-run", columns, cells, [str(k) for k in shown["key"]]) if len(shown) else ""
    change = b.gpu_time_us - a.gpu_time_us
    summary = "".join(
        f"<li>{tag} {html.escape(side.label)} ({html.escape(', '.join(side.gpus) or 'unknown GPU')}): "
        f"GPU time {fmt_us(side.gpu_time_us)}, {side.count:,} activities</li>"
        for tag, side in (("A", a), ("B", b))
    )
    pct = fmt_pct(100 * change / a.gpu_time_us) if a.gpu_time_us else "–"
    pct = "+" + pct if a.gpu_time_us and change > 0 else pct.replace("-", "−")
    if comparability is not None:
        summary += f"<li>comparability: {html.escape(comparability)}</li>"
    title = f"Kernel Atlas diff — {a.label} vs {b.label}"
    figures = Figures()
    body = [
        f"<h1>{html.escape(title)}</h1><ul>{summary}<li>B − A: {fmt_signed_us(change)} ({pct})</li></ul>",
        figures.html(diff_figure(diff, "category"), "diff-category"),
        figures.html(diff_figure(diff, "op_mapping"), "diff-op"),
        "<h2>Kernels only one run ran (all their time, in op+shapes groups too)</h2>",
        f"<ul>{''.join(said)}</ul>{note}{one_run_table}",
        "<h2>Each category, op, module and kernel (largest regression first)</h2>",
        diff_table(diff),
    ]
    write_text(path, _document(title, body))
    return path
