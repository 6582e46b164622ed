"""Ctrl-C while a large trace decodes: one line from the main process, nothing from its workers."""

from __future__ import annotations

import signal

from kernel_atlas.ingest.workers import decode_pool, discard_pool


def test_decode_workers_leave_ctrl_c_to_the_main_process() -> None:
    # Ctrl-C reaches every process of the terminal's process group: a worker that did not ignore it
    # printed a KeyboardInterrupt traceback of its own under the main process's "interrupted"
    pool = decode_pool(2)
    try:
        handlers = {pool.submit(signal.getsignal, signal.SIGINT).result(timeout=120) for _ in range(4)}
    finally:
        discard_pool()
    assert handlers == {signal.SIG_IGN}
