"""Progress bars for long commands: shown on a terminal, silent in pipes, files and CI logs.

    with progress_bar(err_console, "replaying", total=len(targets)) as bar:
        for target in targets:
            ...
            bar.advance(detail=name)

`bar.update(fraction, stage)` moves a bar of total 1.0 through the stages of one long job
(reading, decoding, linking a large trace). The same helper serves ingest, `replay --all` and
fleet ingest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from kernel_atlas.report.fit import trim
from kernel_atlas.report.markup import plain


class Bar:
    """One task of a rich progress display; every method is a no-op when nothing is shown."""

    def __init__(self, progress: Progress | None = None, task: TaskID | None = None, description: str = "") -> None:
        self._progress = progress
        self._task = task
        self._description = description

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def advance(self, steps: float = 1, detail: str | None = None) -> None:
        """`steps` more done; `detail` (what was just finished) is shown after the description."""
        if self._progress is None or self._task is None:
            return
        description = self._description if detail is None else f"{self._description} {trim(plain(detail), 40)}"
        self._progress.update(self._task, advance=steps, description=description)

    def update(self, completed: float, stage: str | None = None) -> None:
        """Set how much is done; `stage` replaces the description."""
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, completed=completed, description=stage or self._description)


def shows_progress(console: Console) -> bool:
    """Whether a live bar makes sense on `console`: an interactive terminal, not a pipe or a file."""
    return console.is_terminal and not console.is_dumb_terminal


@contextmanager
def progress_bar(console: Console, description: str, total: float, enabled: bool = True) -> Iterator[Bar]:
    """A transient progress bar on `console` for the duration of the block (see module docstring)."""
    if not enabled or not shows_progress(console):
        yield Bar()
        return
    # descriptions hold trace and kernel names: shown as they are, never read as markup
    columns = [TextColumn("{task.description}", markup=False), BarColumn()]
    if float(total).is_integer() and total > 1:
        columns.append(MofNCompleteColumn())
    else:
        columns.append(TextColumn("{task.percentage:>3.0f}%"))
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield Bar(progress, task, description)
