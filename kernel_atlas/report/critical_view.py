"""Terminal sections for the critical path (`atlas report`) and a what-if (`atlas whatif`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from kernel_atlas.analysis.critical_segments import UNCOVERED_NOTE_PCT
from kernel_atlas.classify.names import display_name
from kernel_atlas.report.fit import Column, print_table
from kernel_atlas.report.markup import esc
from kernel_atlas.report.units import fmt_us

_TOP_COLUMNS = (
    Column("on path"),
    Column("share %"),
    Column("segments", drop=2),
    Column("as", "left", drop=1),
    Column("host frame or kernel", "left", flex=2.0, middle=True),
)
_PAYS_COLUMNS = (
    Column("end-to-end saving"),
    Column("kernel headroom"),
    Column("op", "left", flex=1.0, drop=1),
    Column("kernel", "left", flex=2.0, middle=True),
)


def _name(text: str | None, wide: bool) -> str:
    """A kernel's name, shortened (`display_name`) unless `wide`."""
    if not text:
        return "—"
    return text if wide else display_name(text)


def _frame(text: str | None, wide: bool) -> str:
    """A host frame as it is, a Python frame without its folders (`torch/nn/modules/linear.py(114):
    forward` → `linear.py(114): forward`): a kernel's shortening cut `Torch-Compiled Region: 0/0`
    to `0/0` and a DataLoader frame to `enumerate`. The table fits what is still too long."""
    if not text:
        return "—"
    if wide or ".py(" not in text:
        return text
    where, _, function = text.partition("): ")
    return where.rsplit("/", 1)[-1] + "): " + function if function else where.rsplit("/", 1)[-1]


def _where(facts: dict[str, Any]) -> str:
    joint = facts.get("joint_ranks", 1)
    return f"{joint} ranks joined at their collectives" if joint > 1 else f"rank {facts.get('rank', 0)}"


def unweighted_words(facts: dict[str, Any]) -> str:
    """Where the path spans much more time than its edges weigh (`span.unweighted_us` over
    UNCOVERED_NOTE_PCT of it): how long it spans and how much of that no edge weighs (a host
    thread between top-level ops, a stream waiting for what the trace does not record) — a length
    of 10 ms beside a window of 474 ms otherwise reads as a 10 ms run. Empty otherwise."""
    span = facts.get("span") or {}
    spanned = (span.get("end_us") or 0.0) - (span.get("start_us") or 0.0)
    unweighted = span.get("unweighted_us") or 0.0
    if spanned <= 0 or 100.0 * unweighted / spanned <= UNCOVERED_NOTE_PCT:
        return ""
    waited = f"{fmt_us(unweighted)} between host ops or waiting for what the trace does not record"
    return f" of the {fmt_us(spanned)} it spans ({waited})"


def print_critical_path(console: Console, facts: dict[str, Any] | None, top: int = 8, wide: bool = False) -> None:
    if not facts:
        return
    total = facts.get("total_us") or 0.0
    window = facts.get("window", {}).get("name", "whole trace")
    console.print(
        f"[bold]Critical path[/] ({esc(window)}, {_where(facts)}): {fmt_us(total)}{unweighted_words(facts)} — "
        + ", ".join(f"{k} {v:.1f} %" for k, v in facts.get("breakdown_pct", {}).items() if v),
        highlight=False,
    )
    rows = []
    for entry in facts.get("top", {}).get("frame", [])[:top]:
        rows.append(
            [
                fmt_us(entry["path_us"]),
                f"{entry['pct']:.1f}",
                f"{entry['segments']:,}",
                "frame",
                _frame(entry["frame"], wide),
            ]
        )
    kernels = facts.get("top", {}).get("kernel", [])[:top]
    rows += [
        [fmt_us(e["path_us"]), f"{e['pct']:.1f}", f"{e['segments']:,}", "kernel", _name(e["kernel"], wide)]
        for e in kernels
    ]
    if rows:
        print_table(console, _TOP_COLUMNS, rows[: 2 * top], "On the critical path (host frames, then kernels)", wide)
    pays = facts.get("where_optimisation_pays") or []
    if pays and top:
        rows = [
            [fmt_us(p["end_to_end_saving_us"]), fmt_us(p["headroom_us"]), p.get("op") or "—", _name(p["kernel"], wide)]
            for p in pays[:top]
        ]
        print_table(
            console, _PAYS_COLUMNS, rows, "Where optimisation pays end to end (each kernel at its roofline alone)", wide
        )
    notes = facts.get("notes", [])
    if notes and not top:  # the brief report: the notes counted, not spelled out
        console.print(f"[dim]critical path: {len(notes)} note(s) on how it was read (--section critical_path)[/]")
        return
    for note in notes:
        console.print(f"[dim]critical path: {esc(note)}[/]", highlight=False)


def print_whatif(console: Console, result: dict[str, Any]) -> None:
    where = (
        f"{result['joint_ranks']} ranks joined" if result.get("joint_ranks", 1) > 1 else f"rank {result.get('rank')}"
    )
    # no saving where the selected activities have no roofline cost: unknown, never a 0.0 read as known
    known = result.get("saving_us") is not None
    missing = result.get("no_cost") or 0
    after = (
        f"{fmt_us(result['new_us'])}, saving {fmt_us(result['saving_us'])} ({result['saving_pct']:.1f} %)"
        + (f", not counting {missing:,} activities without a roofline cost (unknown)" if missing else "")
        if known
        else "? (saving unknown: no selected activity has a roofline cost)"
    )
    console.print(
        f"[bold]What if[/] ({esc(result['window'])}, {where}): critical path {fmt_us(result['baseline_us'])} → {after}",
        highlight=False,
    )
    for change in result.get("changes", []):
        missing = change.get("no_cost", 0)
        costs = f", {change['activities'] - missing:,} with a roofline cost" if missing else ""
        console.print(
            f"  {esc(change['change'])}: {change['activities']:,} activities{costs}, "
            f"{fmt_us(change['gpu_us'])} of GPU time",
            highlight=False,
        )
    if result.get("no_launch_gaps"):
        console.print("  --no-launch-gaps: launch and kernel-to-kernel overheads removed", highlight=False)
    if known:
        console.print(
            f"  GPU time saved where it runs: {fmt_us(result['gpu_us_saved_locally'])}; "
            f"end to end: {fmt_us(result['saving_us'])}",
            highlight=False,
        )
    for note in result.get("notes", []):
        console.print(f"[dim]note: {esc(note)}[/]", highlight=False)
