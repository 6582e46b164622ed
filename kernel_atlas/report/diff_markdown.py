"""`atlas diff --markdown FILE`: a short summary of a comparison that a CI system can post as a
comment — the verdict, how comparable the runs are, the total and the largest changes."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from kernel_atlas.analysis.gate import SHAPES_LOW, Comparability, Verdict
from kernel_atlas.core.texts import counted
from kernel_atlas.report.markup import plain
from kernel_atlas.report.units import change_pct, fmt_signed_us, fmt_us, one_run_kernels, present_us

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


def _device(comp: Comparability) -> str:
    a, b = ", ".join(comp.a_gpus), ", ".join(comp.b_gpus)
    if comp.same_device:
        return "same GPU"
    if comp.same_device is None:  # unknown, not different
        if not a and not b:
            return "GPU not recorded in either run"
        return f"GPU not recorded in A (B: {b})" if not a else f"GPU not recorded in B (A: {a})"
    return f"different GPUs ({a} → {b})"


def _ranks(comp: Comparability) -> str:
    """`A 1 rank, B 2 ranks` where the runs' rank counts differ, else ''."""
    a, b = comp.a_window, comp.b_window
    if a is None or b is None or a.ranks == b.ranks:
        return ""
    return f"A {counted(a.ranks, 'rank', 'ranks')}, B {counted(b.ranks, 'rank', 'ranks')}"


def _window_parts(comp: Comparability) -> tuple[list[str], bool]:
    """What differs between the windows of two runs compared by totals — ranks, whole steps, GPU
    time outside them — or cannot be told; and whether steps do (what --per-step puts right)."""
    a, b = comp.a_window, comp.b_window
    if a is None or b is None:
        return [], False
    ranks = _ranks(comp)
    parts = [ranks] if ranks else []
    steps_apart = False  # what --per-step would put right: other step counts, other time outside them
    if a.steps is None or b.steps is None:
        if not ranks:  # (other rank counts already say the windows differ)
            if a.steps == b.steps:  # ("neither run records no profiler steps" said the opposite)
                parts.append("neither run records profiler steps")
            else:
                parts.append(f"{'A' if a.steps is None else 'B'} records no profiler steps")
    else:
        steps_apart = a.steps != b.steps or not math.isclose(a.outside_steps_us, b.outside_steps_us, rel_tol=1e-9)
        if a.steps != b.steps:
            parts.append(f"A {counted(a.steps, 'step', 'steps')}, B {counted(b.steps, 'step', 'steps')}")
        if not math.isclose(a.outside_steps_us, b.outside_steps_us, rel_tol=1e-9):
            parts += [
                f"{tag} {fmt_us(w.outside_steps_us)} outside its {counted(w.steps or 0, 'whole step', 'whole steps')}"
                for tag, w in (("A", a), ("B", b))
                if w.outside_steps_us > 0
            ]
    return parts, steps_apart


def _window(comp: Comparability) -> str:
    """What the runs' times are: per step (and what that left out; ranks where they differ), or
    totals over each run's window — said where the windows differ (ranks, whole steps, GPU time
    outside them: a cut-short last step) or cannot be told (a run records no profiler steps)."""
    a, b = comp.a_window, comp.b_window
    if a is None or b is None:
        return ""
    if a.per_step and b.per_step:
        ranks = _ranks(comp)
        left = f"outside steps, left out: A {fmt_us(a.outside_steps_us)}, B {fmt_us(b.outside_steps_us)}"
        steps = f"A {counted(a.steps or 0, 'step', 'steps')}, B {counted(b.steps or 0, 'step', 'steps')}"
        together = f"; {ranks}: one step is its ranks' time together" if ranks else ""
        return f"; times per profiler step ({steps}; {left}){together}"
    parts, steps_apart = _window_parts(comp)
    if not parts:
        return ""
    if comp.same_window is None:
        return f"; {', '.join(parts)}: windows unknown, times are totals"
    hint = " (--per-step compares one step of each)" if steps_apart and a.steps and b.steps else ""
    return f"; {', '.join(parts)}: times are totals over each run's window{hint}"


def _share(share: float | None) -> str:
    return f"{100 * share:.1f} %" if share is not None else "–"


def _shapes(comp: Comparability) -> str:
    """How much of the time at recorded shapes is in op calls at shapes both runs record — said
    as other work where that is under SHAPES_LOW (batch 32 against 64 shares every op and kernel);
    not known where a run records no shapes; '' where not measured."""
    shapes = comp.shapes
    if shapes is None:
        return ""
    share = shapes.share
    if share is None:  # a run records no shapes: its calls are at none, not at other ones
        if not shapes.a_records and not shapes.b_records:
            return "; op-call shapes not known: neither run records them"
        return f"; op-call shapes not known: {'A' if not shapes.a_records else 'B'} records none"
    said = f"; {_share(share)} of GPU time at recorded shapes in op calls at shapes both runs record"
    if share < SHAPES_LOW:
        said += ": the work differs (batch size, sequence length?)"
    return said


def comparability_line(comp: Comparability) -> str:
    if comp.ops_matched_share is None and comp.kernels_matched_share is None:  # 0/0: no share to give
        shares = "no GPU time in either run"
    else:
        shares = (
            f"{_share(comp.ops_matched_share)} of GPU time in ops both runs have, "
            f"{_share(comp.kernels_matched_share)} in kernels both runs have{_shapes(comp)}"
        )
    return f"{_device(comp)}; {shares}{_window(comp)}"


_LEVEL_NAMES = {"category": "category", "op_mapping": "op"}


def _rise(regression: Any) -> str:
    """How a judged row rose: in percent, `new` (A ran nothing in it) or from A's 0 µs."""
    if regression.appeared or regression.a_us > 0:
        return change_pct(regression.a_us, regression.b_us, not regression.appeared)
    return f"{fmt_us(regression.a_us)} → {fmt_us(regression.b_us)}"


def _other_windows(comp: Comparability | None) -> str:
    """The caveat of a FAIL judged on totals over windows that differ (`same_window` False): what
    differs and — where both runs record steps and times are totals — `--per-step`, the
    comparison without the window. (A 1-rank, 3-step run against a 2-rank, 4-step one failed at
    +160 % from the window alone: 10 µs a step against 22.)"""
    if comp is None or comp.same_window is not False or comp.a_window is None or comp.b_window is None:
        return ""
    a, b = comp.a_window, comp.b_window
    if a.per_step and b.per_step:  # then only the ranks differ: one step is more ranks' time
        return f" — over windows that differ ({_ranks(comp)}: one step is its ranks' time together)"
    parts, _ = _window_parts(comp)
    hint = "; --per-step compares one step of each" if a.steps and b.steps else ""
    return f" — totals over windows that differ ({', '.join(parts)}){hint}"


def verdict_line(verdict: Verdict) -> str:
    if not verdict.failed:
        return f"PASS: nothing regressed by more than {verdict.fail_above_pct:g} %"
    names = ", ".join(
        f"{_LEVEL_NAMES[r.level] + ' ' if r.level in _LEVEL_NAMES else ''}{r.key} ({_rise(r)})"
        for r in verdict.regressions
    )
    caveat = _other_windows(verdict.comparability)
    return f"FAIL{caveat}: regressed by more than {verdict.fail_above_pct:g} %: {names}"


def _rows(diff: Any, level: str, top: int | None) -> list[Any]:
    """Every category in the table's order (largest regression first), or the `top` ops of the
    largest change either way — as the terminal orders them."""
    table = diff.level(level)
    if top is None:
        return list(table.itertuples(index=False))
    order = table["delta_us"].abs().sort_values(ascending=False, kind="stable").index
    return list(table.loc[order].head(top).itertuples(index=False))


def markdown(diff: Any, verdict: Verdict | None, comp: Comparability, top: int = 10) -> str:
    a, b = diff.a, diff.b
    change = change_pct(a.gpu_time_us, b.gpu_time_us, a.count > 0, b.count > 0)
    lines = ["## Kernel Atlas diff", ""]
    if verdict is not None:
        lines += [f"**{_cell(verdict_line(verdict))}**", ""]
    lines += [
        f"- A: {_cell(a.label)} on {_cell(', '.join(a.gpus) or 'unknown GPU')}: GPU time {fmt_us(a.gpu_time_us)}",
        f"- B: {_cell(b.label)} on {_cell(', '.join(b.gpus) or 'unknown GPU')}: GPU time {fmt_us(b.gpu_time_us)}",
        f"- B − A: {fmt_signed_us(b.gpu_time_us - a.gpu_time_us)} ({change})",
        f"- Comparability: {_cell(comparability_line(comp))}",
        "",
    ]
    for level, title in (("category", "By category"), ("op_mapping", "Largest changes by op")):
        lines += [f"### {title}", "", "| key | A | B | B − A | change |", "|---|---:|---:|---:|---:|"]
        for row in _rows(diff, level, None if level == "category" else top):  # every category, as the terminal
            lines.append(
                f"| {_cell(row.key)} | {present_us(row.a_us, row.a_count)} | {present_us(row.b_us, row.b_count)} | "
                f"{fmt_signed_us(row.delta_us)} | {change_pct(row.a_us, row.b_us, row.a_count > 0, row.b_count > 0)} |"
            )
        lines.append("")
    # the kernels only one run ran, with all their time, as the terminal and the page count them
    # (`Diff.one_run_kernels`): the Markdown had no such section
    for _, title, rows in one_run_kernels(diff).sections:
        if not len(rows):
            continue
        lines += [f"### {title}", ""]
        lines += ["| kernel | A | B | B − A |", "|---|---:|---:|---:|"]
        for row in rows.head(top).itertuples(index=False):
            lines.append(
                f"| {_cell(row.key)} | {present_us(row.a_us, row.a_count)} | {present_us(row.b_us, row.b_count)} | "
                f"{fmt_signed_us(row.delta_us)} |"
            )
        if len(rows) > top:
            lines.append(f"| … {len(rows) - top:,} more | | | |")
        lines.append("")
    return "\n".join(lines)


def write_markdown(diff: Any, verdict: Verdict | None, comp: Comparability, path: Path, top: int = 10) -> Path:
    from kernel_atlas.core.safe_files import write_text

    return write_text(path, markdown(diff, verdict, comp, top))
