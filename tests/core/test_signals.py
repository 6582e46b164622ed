"""The signal a command received, recorded for the exception a library makes of it."""

from __future__ import annotations

import signal

import pytest

from kernel_atlas.core import signals


def test_a_received_signal_replaces_the_exception_a_library_made_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signals, "_received", None)
    signals.reraise_if_signalled(RuntimeError("a failure of its own"))  # nothing received: nothing raised
    with pytest.raises(SystemExit) as ended:
        signals.terminate(signal.SIGTERM, None)
    assert ended.value.code == 143 and signals.received() == signal.SIGTERM
    with pytest.raises(SystemExit) as again:
        signals.reraise_if_signalled(RuntimeError("Query interrupted"))
    assert again.value.code == 143
    with pytest.raises(KeyboardInterrupt):
        signals.interrupt(signal.SIGINT, None)
    assert signals.received() == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        signals.reraise_if_signalled(RuntimeError("Query interrupted"))
