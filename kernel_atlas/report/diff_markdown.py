"""`atlas diff --markdown FILE`: a short summary of a comparison that a CI system can post as a
comment — the verdict, how comparable the runs are, the total and the largest changes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernel_atlas.analysis.gate import Comparability, Verdict
from kernel_atlas.core.texts import counted
from kernel_atlas.report.markup import plain
from kernel_atlas.report.units import fmt_signed_us, fmt_us

# The punctuation that can open or close something inside a line of CommonMark or GitHub's
# Markdown — emphasis, code spans, links and images, autolinks and HTML, entities,
# strikethrough, table cells, math, a heading — each escaped with a backslash; the rest
# (parentheses, colons, signs, percent) cannot once these are
_PUNCTUATION = re.compile(r"([\\`*_\[\]<>!&~|#$])")


def _cell(text: object) -> str:
    """Text from the runs (names, labels, GPUs) as Markdown that renders it literally, on one
    line: line breaks and characters that change how a line shows written as escapes (`plain`),
    the punctuation that could start or end markup escaped (`_PUNCTUATION`) — no emphasis,
    link, image, HTML, code span or table cell can start or end inside it."""
    return _PUNCTUATION.sub(r"\\\1", plain(text))


def _pct(a_us: float, b_us: float) -> str:
    if a_us > 0:  # the minus sign of every signed number here (`fmt_signed_us`)
        return f"{100.0 * (b_us - a_us) / a_us:+.1f} %".replace("-", "−")
    return "new" if b_us > 0 else "–"  # no time on either side: no change to put in percent


def _device(comp: Comparability) -> str:
    a, b = ", ".join(comp.a_gpus), ", ".join(comp.b_gpus)
    if comp.same_device:
        return "same GPU"
    if comp.same_device is None:  # unknown, not different
        if not a and not b:
            return "GPU not recorded in either run"
        return f"GPU not recorded in A (B: {b})" if not a else f"GPU not recorded in B (A: {a})"
    return f"different GPUs ({a} → {b})"


def _window(comp: Comparability) -> str:
    """What the runs' times are: per step (and what that left out), or — where they differ —
    totals over each run's window (nothing where the same or unknown)."""
    a, b = comp.a_window, comp.b_window
    if a is not None and b is not None and a.per_step and b.per_step:
        left = f"outside steps, left out: A {fmt_us(a.outside_steps_us)}, B {fmt_us(b.outside_steps_us)}"
        steps = f"A {counted(a.steps or 0, 'step', 'steps')}, B {counted(b.steps or 0, 'step', 'steps')}"
        return f"; times per profiler step ({steps}; {left})"
    if comp.same_window is not False or a is None or b is None:
        return ""
    parts = []
    if a.ranks != b.ranks:
        parts.append(f"A {counted(a.ranks, 'rank', 'ranks')}, B {counted(b.ranks, 'rank', 'ranks')}")
    if a.steps is not None and b.steps is not None and a.steps != b.steps:
        parts.append(f"A {counted(a.steps, 'step', 'steps')}, B {counted(b.steps, 'step', 'steps')}")
    hint = " (--per-step compares one step of each)" if a.steps and b.steps and a.steps != b.steps else ""
    return f"; {', '.join(parts)}: times are totals over each run's window{hint}"


def comparability_line(comp: Comparability) -> str:
    return (
        f"{_device(comp)}; {100 * comp.ops_matched_share:.1f} % of GPU time in ops both runs have, "
        f"{100 * comp.kernels_matched_share:.1f} % in kernels both runs have{_window(comp)}"
    )


_LEVEL_NAMES = {"category": "category", "op_mapping": "op"}


def verdict_line(verdict: Verdict) -> str:
    if not verdict.failed:
        return f"PASS: nothing regressed by more than {verdict.fail_above_pct:g} %"
    names = ", ".join(
        f"{_LEVEL_NAMES[r.level] + ' ' if r.level in _LEVEL_NAMES else ''}{r.key} ({_pct(r.a_us, r.b_us)})"
        for r in verdict.regressions
    )
    return f"FAIL: regressed by more than {verdict.fail_above_pct:g} %: {names}"


def _rows(diff: Any, level: str, top: int | None) -> list[Any]:
    table = diff.level(level)
    order = table["delta_us"].abs().sort_values(ascending=False, kind="stable").index
    table = table.loc[order]
    return list((table if top is None else table.head(top)).itertuples(index=False))


def markdown(diff: Any, verdict: Verdict | None, comp: Comparability, top: int = 10) -> str:
    a, b = diff.a, diff.b
    lines = ["## Kernel Atlas diff", ""]
    if verdict is not None:
        lines += [f"**{_cell(verdict_line(verdict))}**", ""]
    lines += [
        f"- A: {_cell(a.label)} on {_cell(', '.join(a.gpus) or 'unknown GPU')}: GPU time {fmt_us(a.gpu_time_us)}",
        f"- B: {_cell(b.label)} on {_cell(', '.join(b.gpus) or 'unknown GPU')}: GPU time {fmt_us(b.gpu_time_us)}",
        f"- B − A: {fmt_signed_us(b.gpu_time_us - a.gpu_time_us)} ({_pct(a.gpu_time_us, b.gpu_time_us)})",
        f"- Comparability: {_cell(comparability_line(comp))}",
        "",
    ]
    for level, title in (("category", "By category"), ("op_mapping", "Largest changes by op")):
        lines += [f"### {title}", "", "| key | A | B | B − A | change |", "|---|---:|---:|---:|---:|"]
        for row in _rows(diff, level, None if level == "category" else top):  # every category, as the terminal
            lines.append(
                f"| {_cell(row.key)} | {fmt_us(row.a_us)} | {fmt_us(row.b_us)} | "
                f"{fmt_signed_us(row.delta_us)} | {_pct(row.a_us, row.b_us)} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_markdown(diff: Any, verdict: Verdict | None, comp: Comparability, path: Path, top: int = 10) -> Path:
    from kernel_atlas.core.safe_files import write_text

    return write_text(path, markdown(diff, verdict, comp, top))
