"""The one exception type the CLI turns into a one-line message."""

from __future__ import annotations

import errno
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


def subject_and_problem(source: str | Path, said: str) -> tuple[str | None, str]:
    """A one-line message (an AtlasError's text: a failed trace's reason) as its subject and its
    problem: `(source, problem)` where it reads `SOURCE: problem`, else `(None, said)` — another
    file named, or none."""
    named = f"{source}: "
    return (str(source), said[len(named) :]) if said.startswith(named) else (None, said)


OUT_OF_MEMORY = "out of memory (the machine's, or a limit such as `ulimit -v`)"
TOO_MANY_FILES = "too many open files (a limit such as `ulimit -n`)"


# what Python says of a C function that failed without raising (under `ulimit -v`: an allocation)
_NO_EXCEPTION_SET = ("without setting an exception", "without exception set")


def system_refusal(exc: BaseException) -> str | None:
    """The one line for an error that is the system refusing a resource rather than a fault of
    ours: memory (also a library that could not be loaded for want of it, under `ulimit -v`), or
    file descriptors (a module that could not be imported for want of one, under `ulimit -n`).
    A file the system could not read for want of memory (ENOMEM: a library's folder listed as
    it loads) is memory too, not the file's fault."""
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return OUT_OF_MEMORY
    if isinstance(exc, SystemError) and any(text in str(exc) for text in _NO_EXCEPTION_SET):
        return OUT_OF_MEMORY  # a C library that could not allocate returned without saying why
    if isinstance(exc, ImportError):
        text = str(exc)
        if "map segment" in text or "allocate memory" in text:
            return OUT_OF_MEMORY
        if "Too many open files" in text:
            return TOO_MANY_FILES
    return None
