"""The terminal the commands print to, whatever it turns out to be.

* Its width: never below MIN_WIDTH cells (`COLUMNS=0`, a terminal of one column: cutting a line
  to fit no cell never ended).
* Its encoding: a text it cannot encode (an ASCII or Latin-1 locale; µs, →, a kernel named in
  another script) is written with substitutes — `µ` as `u`, `→` as `->`, anything else as `?` —
  never a `UnicodeEncodeError`.
* Its streams (`StandardStream`): a stream closed before the command started (`>&-`) is a sink;
  a write that fails (`> /dev/full`) is one line naming the stream; a reader that went away
  (`| head`) ends the command quietly (`ReaderGone`) as it ends any Unix tool. Writing to
  stderr never fails a command: there is nowhere left to say so.
"""

from __future__ import annotations

import codecs
import sys
from typing import Any

from rich.console import Console, ConsoleDimensions

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import os_problem

MIN_WIDTH = 40  # cells: the narrowest terminal the report lays itself out for
FALLBACK = "kernel_atlas.substitute"  # the codec error handler writing substitutes
# what the commands print beyond ASCII, as ASCII (anything else: "?")
SUBSTITUTES = {
    **{"µ": "u", "×": "x", "·": ".", "…": "...", "≈": "~", "±": "+-", "°": "deg"},
    **{"—": "-", "–": "-", "−": "-", "→": "->", "←": "<-", "≤": "<=", "≥": ">=", "▕": "|", "█": "#"},
}


def _substitute(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(SUBSTITUTES.get(char, "?") for char in text), error.end


codecs.register_error(FALLBACK, _substitute)


class ReaderGone(Exception):
    """stdout's reader closed the pipe (`atlas report OUT | head`): nothing more can be shown."""


class StandardStream:
    """`sys.stdout` or `sys.stderr` as it is at each write (tests and notebooks swap them), made
    safe as the module docstring says."""

    def __init__(self, name: str) -> None:
        assert name in ("stdout", "stderr")
        self.name = name

    def _stream(self) -> Any:
        return getattr(sys, self.name)

    def write(self, text: str) -> int:
        stream = self._stream()
        if stream is None:  # closed when the command started
            return len(text)
        try:
            try:
                return stream.write(text)
            except UnicodeEncodeError:  # the whole text is encoded before any of it is written
                encoding = getattr(stream, "encoding", None) or "ascii"
                return stream.write(text.encode(encoding, FALLBACK).decode(encoding))
        except OSError as exc:
            self._failed(exc)
            return len(text)

    def flush(self) -> None:
        stream = self._stream()
        if stream is None:
            return
        try:
            stream.flush()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if self.name == "stderr":
            return
        if isinstance(exc, BrokenPipeError):
            raise ReaderGone from None
        raise AtlasError(self.name, f"cannot write: {os_problem(exc)}") from None

    def isatty(self) -> bool:
        stream = self._stream()
        try:
            return bool(stream is not None and stream.isatty())
        except (OSError, ValueError):  # closed under us
            return False

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream(), "encoding", None) or "utf-8"


class FittedConsole(Console):
    """A rich console never narrower than MIN_WIDTH cells, whose size, unless given, is the
    terminal's and `COLUMNS`/`LINES`'s at each use, not at its making (the command line's consoles
    are made at import: a width fixed then outlived a change of the environment)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("width") is None:
            self._width = None
        if kwargs.get("height") is None:
            self._height = None

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return ConsoleDimensions(max(size.width, MIN_WIDTH), size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        width, height = new_size
        self._width, self._height = width, height


def terminal(name: str) -> FittedConsole:
    """The console of the command's stdout or stderr (no emoji codes: `:fire:` in a file name or
    an option value is text, printed as typed)."""
    return FittedConsole(file=StandardStream(name), emoji=False)  # type: ignore[arg-type]


def write_stdout(text: str) -> None:
    """`text` on stdout as the consoles write theirs (JSON answers printed whole)."""
    stream = StandardStream("stdout")
    stream.write(text)
    stream.flush()
