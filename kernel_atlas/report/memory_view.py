"""The memory analysis in the terminal and in report.html (numbers from `analysis.memory`)."""

from __future__ import annotations

import html
import re
from typing import Any

from rich.console import Console

from kernel_atlas.analysis.memory import BEFORE_WINDOW, MemoryReport, live_by_module, memory_warnings
from kernel_atlas.core.texts import counted
from kernel_atlas.report import plot
from kernel_atlas.report.fit import Column, print_table
from kernel_atlas.report.markup import esc
from kernel_atlas.report.units import fmt_bytes, fmt_pct, fmt_us

TITLE = "GPU memory"
NO_EVENTS = "no [memory] events in the trace (profile with profile_memory=True to see where the memory goes)"
_SHOWN, _HOLDER_TABLES = 8, 2  # device lines, and holder tables, of a multi-trace run (--wide: all)
HOLDER_COLUMNS = [Column("live"), Column("%"), Column("blocks", drop=1), Column("holder", justify="left", flex=1)]


def _where(entry: dict[str, Any], several: bool) -> str:
    """`cuda:0`, `host cpu` (host memory said so: the section is headed "GPU memory"), with the
    trace and rank where the run has several."""
    device = ("host " if entry["host"] else "") + str(entry["device"])
    return f"{entry['trace']} (rank {entry['rank']}) {device}" if several else device


def peak_line(entry: dict[str, Any], origin_us: float | None = None, several: bool = False) -> str:
    """`cuda:0 peak 96.6 MiB allocated at 3.88 ms, 116.0 MiB reserved; baseline 87.1 MiB …`."""
    where = _where(entry, several)
    if entry.get("peak_allocated_bytes") is None:
        return f"{where}: {entry['note']}; largest rise {fmt_bytes(entry.get('peak_change_bytes'))}"
    if entry.get("peak_at_start"):  # the level held from the window's start until its first event
        at = " before the first event"
    else:
        at = "" if origin_us is None else f" at {fmt_us(entry['peak_ts_us'] - origin_us)}"
    at += "" if entry.get("peak_step") is None else f" in step {entry['peak_step']}"
    reserved = entry.get("peak_reserved_bytes")
    text = f"{where} peak {fmt_bytes(entry['peak_allocated_bytes'])} allocated{at}"
    text += f", {fmt_bytes(reserved)} reserved" if reserved is not None else ""
    if entry.get("baseline_bytes") is None:
        text += f"; baseline unknown ({entry.get('baseline_note') or 'not recorded'})"
    else:
        text += f"; baseline {fmt_bytes(entry['baseline_bytes'])}"
    text += f", live at the peak {fmt_bytes(entry['live_at_peak_bytes'])}"
    never = entry.get("never_freed")  # null: no addresses, so unknown
    if never and never["blocks"]:
        text += (
            f"; {counted(never['blocks'], 'block', 'blocks')} ({fmt_bytes(never['bytes'])}) never freed in the window"
        )
        blind = never.get("frees_without_address") or {}
        if blind.get("events"):  # a free without an address may have freed one of them
            frees = counted(blind["events"], "free", "frees")
            text += f", unless by the {frees} of {fmt_bytes(blind['bytes'])} written without an address"
    return text


def brief_memory_lines(entries: list[dict[str, Any]] | None, shown: int = 2) -> list[str]:
    """The brief report's memory: the peak of the first GPUs, one line each, with the module
    holding most of it (`--section memory` shows the holders, slack and step peaks)."""
    gpus = [e for e in entries or [] if not e["host"]]
    several = len({(e["trace"], e["rank"]) for e in gpus}) > 1
    lines = []
    for entry in gpus[:shown]:
        where = _where(entry, several)
        if entry.get("peak_allocated_bytes") is None:
            lines.append(f"GPU memory {where}: {entry['note']}")
            continue
        text = f"GPU memory {where}: peak {fmt_bytes(entry['peak_allocated_bytes'])} allocated"
        if entry.get("peak_reserved_bytes") is not None:
            text += f", {fmt_bytes(entry['peak_reserved_bytes'])} reserved"
        holders = (entry.get("holders") or {}).get("module") or []
        if holders:
            text += f"; most held by {holders[0]['name']} ({fmt_pct(holders[0]['pct'])})"
        lines.append(text)
    if len(gpus) > shown:
        lines.append(f"… and {len(gpus) - shown:,} more devices (--section memory)")
    return lines


_OTHERS = re.compile(r"\((\d+) others\)")


def shown_holders(holders: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """At most `top` holders: past it, the first `top` − 1 and the rest in one row `(N others)`
    (N counts the holders folded into the analysis's own `(N others)` row too), so that the rows
    shown still sum to what the list sums to."""
    if len(holders) <= top:
        return holders
    kept, rest = holders[: top - 1], holders[top - 1 :]
    folded = 0
    for holder in rest:
        others = _OTHERS.fullmatch(holder["name"])
        folded += int(others.group(1)) if others else 1
    pcts = [h["pct"] for h in rest]
    other = {
        "name": f"({folded} others)",
        "bytes": sum(h["bytes"] for h in rest),
        "blocks": sum(h["blocks"] or 0 for h in rest),
        "pct": None if None in pcts else sum(pcts),
    }
    return [*kept, other]


def _holder_rows(holders: list[dict[str, Any]], top: int) -> list[list[str]]:
    return [
        [fmt_bytes(h["bytes"]), fmt_pct(h["pct"]), "–" if h["blocks"] is None else f"{h['blocks']:,}", h["name"]]
        for h in shown_holders(holders, top)
    ]


def print_memory(console: Console, entries: list[dict[str, Any]] | None, top: int = 8, wide: bool = False) -> None:
    """The peak of each device (host memory in one line each), then what holds the GPU peaks."""
    if entries is None:
        return
    console.print(f"[bold]{TITLE}[/]", highlight=False)
    if not entries:
        console.print(esc(NO_EVENTS), highlight=False)
        return
    several = len({(e["trace"], e["rank"]) for e in entries}) > 1
    shown = entries if wide else entries[:_SHOWN]
    for entry in shown:
        console.print(esc(peak_line(entry, several=several)), highlight=False)
    if len(entries) > len(shown):
        console.print(f"… and {len(entries) - len(shown):,} more (report.json `memory`; --wide shows all)")
    gpus = [e for e in shown if not e["host"] and e.get("holders")]
    for entry in gpus if wide else gpus[:_HOLDER_TABLES]:
        title = f"What holds the peak of {_where(entry, several)}, by nn.Module"
        print_table(console, HOLDER_COLUMNS, _holder_rows(entry["holders"]["module"], top), title, wide)
        by_op = ", ".join(f"{h['name']} {fmt_bytes(h['bytes'])}" for h in shown_holders(entry["holders"]["op"], 4))
        console.print(esc(f"by op: {by_op}"), highlight=False)
        for line in _slack_and_steps(entry):
            console.print(esc(line), highlight=False)


def _slack_and_steps(entry: dict[str, Any], steps_shown: int = 8) -> list[str]:
    """Allocator slack (reserved − allocated) and the peak of each step, one line each."""
    lines = []
    slack = entry.get("slack") or {}
    if slack:
        lines.append(
            f"slack (reserved − allocated): {fmt_bytes(slack['at_peak_bytes'])} at the peak, "
            f"largest {fmt_bytes(slack['max_bytes'])}, time-weighted mean {fmt_bytes(slack['mean_bytes'])}"
        )
    steps = entry.get("steps") or []
    if len(steps) > 1:
        shown = ", ".join(f"{s['step']}: {fmt_bytes(s['peak_allocated_bytes'])}" for s in steps[:steps_shown])
        more = f" … ({len(steps)} steps)" if len(steps) > steps_shown else ""
        lines.append(f"peak per step: {shown}{more}")
    return lines


def _entry_html(entry: dict[str, Any], several: bool) -> str:
    parts = [f"<p>{html.escape(peak_line(entry, several=several))}</p>"]
    for key, label in (("module", "nn.Module"), ("op", "CPU op"), ("size_class", "size class")):
        rows = "".join(
            f"<tr><td>{fmt_bytes(h['bytes'])}</td><td>{fmt_pct(h['pct'])}</td><td>{html.escape(h['name'])}</td></tr>"
            for h in entry.get("holders", {}).get(key, [])
        )
        if rows:
            parts.append(
                f"<h4>Live at the peak by {label}</h4>"
                f"<table><tr><th>live</th><th>%</th><th>{label}</th></tr>{rows}</table>"
            )
    return "".join(parts)


def timeline_figure(frame: Any, device: str) -> plot.Figure:
    """Allocated (stacked by holder) and reserved bytes after each event around the peak."""
    data = []
    origin = float(frame["ts_us"].iloc[0])
    x = (frame["ts_us"] - origin) / 1e3
    if frame.attrs.get("peak_at_start") and len(x) > 1:
        # the level held before the first event (the peak): drawn just left of it, as the trace
        # does not say when the window began
        x = x.copy()
        x.iloc[0] = -0.02 * (float(x.iloc[-1]) or 1e-3)
    holders = [c for c in frame.columns if c not in ("ts_us", "total_allocated", "total_reserved")]
    for name in holders:
        if not frame[name].any():
            continue
        live = {
            "x": plot.values(x),
            "y": plot.values(frame[name] / 2**20),
            "name": plot.label(name),
            "stackgroup": "live",
        }
        data.append({"type": "scatter", **live, "line": {"shape": "hv", "width": 0}})
    for column, dash in (("total_allocated", "solid"), ("total_reserved", "dot")):
        shown = frame[column] >= 0
        if column == "total_reserved" and not (frame[column] > 0).any():
            continue
        data.append(
            {
                "type": "scatter",
                "x": plot.values(x[shown]),
                "y": plot.values(frame[column][shown] / 2**20),
                "name": column.replace("_", " "),
                "line": {"shape": "hv", "color": "black", "dash": dash, "width": 1},
            }
        )
    heading = f"{device}: memory around the peak (MiB; stacked: live by nn.Module, {BEFORE_WINDOW} at the bottom)"
    layout = {
        "title": plot.title(heading),
        "xaxis": {"title": plot.title("ms from the first event shown")},
        "yaxis": {"title": plot.title("MiB")},
        "height": 460,
    }
    return plot.figure(data, layout)


MAX_MEMORY_ENTRIES = 64  # devices described on the page
MAX_MEMORY_FIGURES = 16  # of them, drawn over time (each ~10k events around its peak)


def memory_html(memory: MemoryReport | None, warned: list[str] | None = None) -> str:
    """The report.html section (plotly.js is already on the page); `warned`: report.json's
    memory_warnings where the report made them (else made here)."""

    head = f"<h2 id='memory'>{TITLE}</h2>"
    if memory is None or not memory.entries:
        return f"{head}<p>{html.escape(NO_EVENTS)}</p>"
    several = len(memory.events) > 1
    parts = [head]
    # a fleet's devices can be thousands: the highest peaks are shown, the others are in report.json
    entries = memory.entries
    by_peak = sorted(range(len(entries)), key=lambda n: -(entries[n].get("peak_allocated_bytes") or -1))
    shown = set(by_peak[:MAX_MEMORY_ENTRIES])
    # a GPU with totals is drawn (host memory and devices without totals have no timeline)
    drawable = [
        n
        for n in by_peak
        if n in shown and not entries[n]["host"] and entries[n].get("peak_allocated_bytes") is not None
    ]
    drawn = set(drawable[:MAX_MEMORY_FIGURES])
    if len(entries) > len(shown):
        parts.append(
            f"<p>The {len(shown)} devices with the highest allocated peaks of {len(entries):,}, "
            f"{len(drawn)} of them drawn; every device is in report.json <code>memory</code>.</p>"
        )
    if warned is None:  # report.json's memory_warnings, where the report has not made them already
        warned = memory_warnings(entries, memory.left_out, memory.oversized)
    if warned:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in warned)
        parts.append(f"<div class='memory-warnings'><p>What these numbers cannot say:</p><ul>{items}</ul></div>")
    for n, entry in enumerate(entries):
        if n not in shown:
            continue
        key = (entry["trace"], entry["rank"])
        parts.append(f"<h3>{html.escape(_where(entry, several))}</h3>")
        parts.append(_entry_html(entry, several))
        if n not in drawn:
            continue
        frame = live_by_module(memory.events[key], memory.by_trace[key], entry["device"])
        if len(frame):
            div_id = f"memory-timeline-{n}"  # entries may share rank and device (traces of one rank)
            parts.append(f"<div class='fig'>{plot.div(timeline_figure(frame, entry['device']), div_id)}</div>")
    return "".join(parts)


def _signed_bytes(n: int | None) -> str:
    return "–" if n is None else ("+" if n > 0 else "") + fmt_bytes(n)


DIFF_COLUMNS = [Column("Δ"), Column("A"), Column("B"), Column("module", justify="left", flex=1, middle=True)]


def print_memory_diff(console: Console, rows: list[dict[str, Any]], top: int = 10, wide: bool = False) -> None:
    """`atlas diff`: the memory peaks of A and B per device, and the modules whose share changed."""
    if not rows:
        return
    console.print(f"[bold]{TITLE}: A → B[/]", highlight=False)
    for row in rows:
        device_a = row["device_a"] if row["device_a"] is not None else "(none in A)"
        device_b = row["device_b"] if row["device_b"] is not None else "(none in B)"
        names = device_a if device_a == device_b else f"{device_a} → {device_b}"
        where = ("host " if row["host"] else "") + f"rank {row['rank']} {names}"
        if (
            row.get("paired_by") == "position"
            and None not in (row["device_a"], row["device_b"])
            and device_a != device_b
        ):
            where += " (paired by position: the runs name their devices apart)"
        parts = []
        for key, label in (
            ("peak_allocated_bytes", "peak"),
            ("peak_reserved_bytes", "reserved"),
            ("baseline_bytes", "held before the window"),
        ):
            a, b, delta = row[f"a_{key}"], row[f"b_{key}"], row[f"delta_{key}"]
            if a is not None or b is not None:
                parts.append(f"{label} {fmt_bytes(a)} → {fmt_bytes(b)} ({_signed_bytes(delta)})")
        console.print(esc(f"{where}: {'; '.join(parts) or 'no totals in either run'}"), highlight=False)
        if row["host"] or not row["holders"]:
            continue
        cells = [
            [_signed_bytes(h["delta_bytes"]), fmt_bytes(h["a_bytes"]), fmt_bytes(h["b_bytes"]), h["module"]]
            for h in row["holders"][:top]
            if h["delta_bytes"]
        ]
        if cells:
            print_table(console, DIFF_COLUMNS, cells, f"What holds the peak, A → B ({names}, by nn.Module)", wide)
