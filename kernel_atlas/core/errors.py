"""The one exception type the CLI turns into a one-line message."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class AtlasError(Exception):
    """A problem with user input: printed as one line, exit code 2, no traceback.

    It pickles (a worker process raising it hands it back to the parent intact)."""

    def __init__(self, source: str | Path | None, problem: str) -> None:
        self.source = str(source) if source is not None else None
        self.problem = problem
        super().__init__(f"{self.source}: {problem}" if self.source else problem)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.source, self.problem))
