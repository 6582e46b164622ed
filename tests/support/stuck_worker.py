"""A task for a decode worker that stops half-way through sending its result — as a worker
killed while it sends (SIGTERM to the process group) leaves the pool's result thread (the
signal tests of `tests/cli/test_environment_limits.py`)."""

from __future__ import annotations

import gc
import os
import struct
import time
from multiprocessing.queues import SimpleQueue
from pathlib import Path


def half_write(marker: str) -> None:
    """Announce a 1 MiB message on this worker's result pipe, send 10 bytes of it, say so by
    creating `marker`, and wait to be killed."""
    results = next(q for q in gc.get_objects() if isinstance(q, SimpleQueue))
    os.write(results._writer.fileno(), struct.pack("!i", 1 << 20) + b"0123456789")
    Path(marker).touch()
    time.sleep(600)
