"""`atlas explain`: the label of one kernel, the evidence behind it, and who won a conflict."""

from __future__ import annotations

from rich.console import Console

from kernel_atlas.classify.classifier import Explanation, Opinion
from kernel_atlas.report.fit import Column, print_table
from kernel_atlas.report.markup import esc


def _opinion(opinion: Opinion | None, what: str) -> str:
    if opinion is None:
        return f"[dim]no {what} evidence[/]"
    return f"[green]{esc(opinion.op)}[/] ({esc(opinion.source)}: {esc(opinion.detail)})"


def print_explanation(
    console: Console,
    name: str,
    base: str,
    family: str,
    explanation: Explanation,
    all_steps: bool,
    wide: bool = False,
) -> None:
    label = explanation.label
    console.print(f"[bold]kernel[/]   {esc(name)}", highlight=False)
    console.print(f"[bold]base[/]     {esc(base)}", highlight=False)
    console.print(f"[bold]family[/]   {esc(family)}", highlight=False)
    console.print(f"[bold]name[/]     {_opinion(explanation.name, 'name')}", highlight=False)
    console.print(f"[bold]launcher[/] {_opinion(explanation.launcher, 'launcher')}", highlight=False)
    if explanation.conflict:
        console.print(
            f"[bold yellow]conflict[/] {esc(explanation.conflict)}: the {esc(explanation.winner)} wins — "
            f"{esc(explanation.resolution_why)}",
            highlight=False,
        )
    if explanation.context is not None:
        console.print(f"[bold]context[/]  {_opinion(explanation.context, 'context')}", highlight=False)
    console.print(
        f"[bold]label[/]    op_mapping=[green]{esc(label.op_mapping)}[/] category=[green]{esc(label.category)}[/] "
        f"rule={esc(label.rule)} evidence={esc(label.evidence)} confidence={label.confidence:.2f}",
        highlight=False,
    )
    if explanation.name is None and explanation.launcher is None:
        console.print(f"[bold]fallback[/] {esc(label.detail)}", highlight=False)
    title = "name rules that match (→ the name's evidence: the function name, then the qualified, then the full name)"
    rows = [
        [str(i), step.rule, f"{'→ ' if step.chosen else ''}{step.op_mapping}", step.detail]
        for i, step in enumerate(explanation.steps, 1)
        if step.chosen or (all_steps and step.matched)
    ]
    if rows:
        columns = [
            Column("#"),
            Column("rule", justify="left", flex=1, min_width=12),
            Column("result", justify="left"),
            Column("detail", justify="left", flex=2, min_width=16),
        ]
        print_table(console, columns, rows, title if all_steps else "the name's evidence", wide)
