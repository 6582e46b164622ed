"""Which signal asked the `atlas` command to end, for code that must tell an exception the signal
caused from a failure: a C library that notices the signal may raise its own exception in place
of ours (DuckDB's `RuntimeError: Query interrupted`, for Ctrl-C and SIGTERM alike), which was
then reported as an internal error — or, caught as one rank's failure, let the command go on."""

from __future__ import annotations

import signal
from typing import Any

_received: int | None = None


def received() -> int | None:
    """SIGINT or SIGTERM once one of the handlers below has run in this process, else None."""
    return _received


def interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C: recorded, then Python's KeyboardInterrupt."""
    global _received
    _received = signum
    raise KeyboardInterrupt


def terminate(signum: int, frame: Any) -> None:
    """SIGTERM: recorded, then an exit with 128 + its number (143), as the shell reports it."""
    global _received
    _received = signum
    raise SystemExit(128 + signum)


def reraise_if_signalled(exc: BaseException) -> None:
    """The signal's own exception in place of `exc` when a signal was received (`exc` is then
    what a library made of it)."""
    if _received == signal.SIGINT:
        raise KeyboardInterrupt from exc
    if _received is not None:
        raise SystemExit(128 + _received) from exc
