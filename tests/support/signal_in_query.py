"""`atlas report OUT` whose cross-rank view receives a signal (`argv[1]`) and raises what DuckDB
raises when a signal stops its query — `RuntimeError: Query interrupted`, in place of the
signal's own exception — as a C library does (the signal tests of
`tests/cli/test_environment_limits.py`). DuckDB notices a signal only now and then (under load
it often ran its query to the end first), so the test plays its part deterministically."""

from __future__ import annotations

import os
import signal
import sys

sys.argv[0] = "atlas"  # as the installed command: its Ctrl-C handling

import kernel_atlas.report.build as build  # noqa: E402
from kernel_atlas.cli import main  # noqa: E402

SIGNAL = getattr(signal, sys.argv[1])


def query_interrupted(*args: object, **kwargs: object) -> None:
    try:
        os.kill(os.getpid(), SIGNAL)  # its handler runs before the next line
        signal.pause()
    except BaseException:  # what the library makes of the signal's exception
        raise RuntimeError("Query interrupted") from None
    raise AssertionError("no signal came")


build.cross_rank_view = query_interrupted
sys.argv[1:] = ["report", sys.argv[2]]
main()
