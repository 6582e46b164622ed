"""Rich tables that fit the terminal: at most `lines` lines per row, columns dropped when too narrow.

A table is described by its columns (numbers keep their natural width; `flex` text columns share
what is left and fold onto at most `lines` lines, trimmed with an ellipsis) and its rows of
strings. `wide=True` prints every column in full on as many characters as it needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from kernel_atlas.report.markup import literal, plain

ELLIPSIS = "…"
# Column separation: box=None with one space of padding on each side between columns.
_GAP = 2
_AFTER_SEPARATOR = re.compile(r"(?<=[./ ])")


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "right"
    flex: float = 0.0  # > 0: a text column sharing the remaining width in this proportion
    min_width: int = 10  # of a flex column
    drop: int = 0  # > 0: may be left out on a narrow terminal, the highest first
    middle: bool = False  # trim in the middle (kernel names: the tail tells tile sizes apart)
    tail: bool = False  # trim at the start (nn.Module paths: the innermost module is at the end)
    lines: bool = False  # its cells break lines where they hold "\n" (else a "\n" is shown as such)


def trim(text: str, width: int, middle: bool = False) -> str:
    """`text` on at most `width` cells, with an ellipsis where something was cut."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    if middle:
        head = (width - 1) * 3 // 5
        tail = width - 1 - head
        return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")
    return text[: width - 1] + ELLIPSIS


def _components(path: str) -> list[str]:
    """`a.b/c d` → `a.`, `b/`, `c `, `d`: a path's components, each with the separator after it."""
    return [part for part in _AFTER_SEPARATOR.split(path) if part]


def _fold_tail(text: str, width: int, lines: int) -> str:
    """A path (`a.b.c`, `a/b/c`) on at most `lines` lines of `width` cells, keeping its end: lines
    hold whole components, innermost last; what does not fit at the start becomes an ellipsis (a
    component wider than a line shows its end)."""
    parts = _components(text)
    out: list[str] = []
    while parts and len(out) < lines:
        line = ""
        while parts and cell_len(parts[-1] + line) <= width:
            line = parts.pop() + line
        out.append(line.rstrip() or parts.pop())
        if not line:  # a component wider than a line
            break
    if parts or cell_len(out[-1]) > width:  # the first line shown starts with the ellipsis
        first = _components(out[-1])
        while len(first) > 1 and cell_len("".join(first)) > width - 1:
            first.pop(0)
        out[-1] = ELLIPSIS + "".join(first)[-(width - 1) :]
    return "\n".join(reversed(out))


def fold(text: str, width: int, lines: int, middle: bool = False, tail: bool = False) -> str:
    """`text` on at most `lines` lines of `width` cells: broken after a space or comma when
    one is near the end of a line, else hard; what does not fit is trimmed (`middle`: the last
    line shows the end of the text after an ellipsis; `tail`: the start is trimmed instead)."""
    if width < 1:
        return ""
    if cell_len(text) <= width:
        return text
    if tail:
        return _fold_tail(text, width, lines) if width > 1 else ELLIPSIS
    if middle and cell_len(text) > width * lines:
        head = fold(text[: width * (lines - 1)], width, lines - 1) if lines > 1 else ""
        tail = trim(text, width, middle=True) if lines == 1 else ELLIPSIS + text[-(width - 1) :]
        return f"{head}\n{tail}" if head else tail
    out: list[str] = []
    rest = text
    while rest and len(out) < lines:
        if cell_len(rest) <= width or len(out) == lines - 1:
            out.append(trim(rest, width))
            break
        cut = width
        if rest[width] not in " ,":
            soft = max(rest.rfind(" ", 0, width), rest.rfind(",", 0, width))
            if soft >= width // 3:
                cut = soft + 1
        out.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip(" ,")
    return "\n".join(out)


def _natural(column: Column, cells: Sequence[str]) -> int:
    widest = max((max(cell_len(line) for line in c.split("\n")) for c in cells if c), default=0)
    return max(cell_len(column.header), widest)


def _layout(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> tuple[list[int], dict[int, int]]:
    """Indices of the columns shown and the width of each flex column."""
    # a column without any value says nothing on a narrow terminal
    shown = [i for i, c in enumerate(columns) if not c.drop or any(r[i] for r in rows)]
    natural = [_natural(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    while True:
        fixed = sum(natural[i] for i in shown if not columns[i].flex) + _GAP * (len(shown) - 1)
        flex = [i for i in shown if columns[i].flex]
        wanted = sum(natural[i] for i in flex)
        room = width - fixed
        floor = sum(min(columns[i].min_width, natural[i]) for i in flex)
        droppable = [i for i in shown if columns[i].drop]
        if room >= floor or not droppable:
            break
        shown.remove(max(droppable, key=lambda i: columns[i].drop))
    if room < floor:  # every column that may go is gone and still too narrow: text gives way, never numbers
        return _squeezed(shown, flex, natural, room)
    if wanted <= room:
        return shown, {i: natural[i] for i in flex}
    # share the room: every flex column gets its floor, the rest in proportion to `flex`,
    # never more than it needs
    widths = {i: min(columns[i].min_width, natural[i]) for i in flex}
    spare = max(room - sum(widths.values()), 0)
    hungry = [i for i in flex if natural[i] > widths[i]]
    while spare > 0 and hungry:
        total = sum(columns[i].flex for i in hungry)
        given = 0
        for i in hungry:
            share = min(int(spare * columns[i].flex / total), natural[i] - widths[i])
            widths[i] += share
            given += share
        if given == 0:  # rounding: hand out the remainder one cell at a time
            widths[hungry[0]] += 1
            given = 1
        spare -= given
        hungry = [i for i in hungry if natural[i] > widths[i]]
    return shown, widths


# the fewest cells a text column is shown on (below its `min_width` when nothing else fits)
_NARROWEST = 4


def _squeezed(shown: list[int], flex: list[int], natural: list[int], room: int) -> tuple[list[int], dict[int, int]]:
    """Text columns on `room` cells shared equally, each on at least `_NARROWEST` (the last text
    columns left out until they fit), where the numbers' own width leaves too little for their
    `min_width`: rich squeezed the numbers instead, `94.6 µs` shown as `94.…`."""
    shown, flex = list(shown), list(flex)
    while flex and room < _NARROWEST * len(flex):
        shown.remove(flex.pop())
        room += _GAP  # its gap with it
    widths = {}
    for k, i in enumerate(flex):
        share = room // len(flex) + (1 if k < room % len(flex) else 0)
        widths[i] = min(share, natural[i])
    return shown, widths


def fitted_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int,
    title: str | None = None,
    wide: bool = False,
    lines: int = 2,
) -> tuple[Table, list[str]]:
    """A table that fits `width` cells (unless `wide`), and the headers of left-out columns."""
    if wide:
        shown, widths = list(range(len(columns))), {}
    else:
        shown, widths = _layout(columns, rows, width)
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD if wide else None,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style="bold",
        row_styles=["", "dim"] if not wide and widths else None,
        expand=False,
    )
    for i in shown:
        column = columns[i]
        table.add_column(
            column.header,
            justify=column.justify,  # type: ignore[arg-type]
            no_wrap=True,
            overflow="ellipsis",
            width=widths.get(i),
        )
    for row in rows:
        cells = []
        for i in shown:
            text = plain(row[i], newlines=columns[i].lines)  # as they are, markup and control characters too
            if i in widths:
                text = fold(text, widths[i], lines, columns[i].middle, columns[i].tail)
            cells.append(Text(text))
        table.add_row(*cells)
    left_out = [columns[i].header for i in range(len(columns)) if i not in shown and any(r[i] for r in rows)]
    return table, left_out


def print_table(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    wide: bool = False,
    lines: int = 2,
) -> None:
    """Print a fitted table; in `wide` mode on as many columns as it needs."""
    table, left_out = fitted_table(columns, rows, console.width, None, wide, lines)
    if title:
        console.print(literal(title, "bold"), highlight=False)
    if wide:  # laid out on the width it needs; the terminal wraps or `less -S` scrolls
        options = console.options.update(width=1 << 14)
        needed = max(console.measure(table, options=options).maximum, console.width)
        lines = console.render_lines(table, options.update(width=needed), pad=False)
        console.print(Segments(segment for line in lines for segment in (*line, Segment.line())), soft_wrap=True)
        return
    console.print(table)
    if left_out:
        console.print(f"[dim](narrow terminal: {', '.join(left_out)} left out; --wide shows everything)[/]")
