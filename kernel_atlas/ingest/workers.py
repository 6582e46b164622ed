"""Decode worker processes (how many suit a trace; one pool per process, reused) and
reading a trace ahead while the caller is still importing the rest of the pipeline."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kernel_atlas.core.beside import start_thread, usable_cpus
from kernel_atlas.ingest.events import ready

# multiprocessing's own complaint when its resource tracker cannot run (a process limit): the
# workers' failure is said once, in the trace's own words (`pipeline.ingest_trace`)
warnings.filterwarnings("ignore", message="resource_tracker: process died unexpectedly", category=UserWarning)

# Below this much JSON text, starting processes costs more than it saves: decode here.
PARALLEL_MIN_BYTES = 48 << 20
_COMPRESSION_GUESS = 10  # typical text/file size of a compressed trace, for that choice only
_MAX_WORKERS = 8  # beyond this, reading ahead (and decompressing) in one process is the limit

_pool: ProcessPoolExecutor | None = None
_pool_size = 0
_started = False  # whether this process ever started decode workers


def started_any() -> bool:
    """Whether this process started decode workers (whose pool may still hold it at exit)."""
    return _started


def workers_for(path: Path) -> int:
    """Decode processes for one trace: all available CPUs for a large trace, else 1 (this
    process decodes)."""
    cpus = min(usable_cpus(), _MAX_WORKERS)
    if cpus < 2:
        return 1
    try:
        if not path.is_file():  # never open a pipe or device here: that could block
            return 1  # the reader reports the problem
        size = path.stat().st_size
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError:
        return 1
    from kernel_atlas.ingest.reader import is_zstd  # loaded already by the ingest that asks

    if magic[:2] == b"\x1f\x8b" or is_zstd(magic):  # as the reader opens them (a skippable frame first too)
        size *= _COMPRESSION_GUESS
    return cpus if size >= PARALLEL_MIN_BYTES else 1


def local_jobs(paths: Sequence[Path]) -> int:
    """Traces ingested at a time on this machine when no number is given: every CPU for several
    traces that are each small enough for one decode process (`workers_for`) — a fleet of small
    ranks, where each trace's fixed cost is most of its time — else one at a time (a large
    trace's decode already uses every CPU)."""
    cpus = usable_cpus()
    if len(paths) < 2 or cpus < 2 or any(workers_for(Path(p)) > 1 for p in paths):
        return 1
    return min(cpus, len(paths))


PARENT_CHECK_S = 1.0  # how often a worker checks that the process that started it still runs


def start_worker(parent: int) -> None:
    """A worker's initializer. Ctrl-C reaches every process of the terminal's process group: the
    main process says "interrupted" and ends the workers, which would otherwise each print a
    KeyboardInterrupt traceback. And a worker ends when the main process is gone (killed with
    SIGKILL, or by the out-of-memory killer): it holds its task pipe's writing end too, so it
    would wait for a task for ever. `parent`: the main process's id, as it gave it (it may be
    gone before this runs). Checked on a timer signal, not by a thread: a limit on processes
    (`ulimit -u`) counts threads, and may allow none."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def check(_signum: int, _frame: object) -> None:
        if os.getppid() != parent:  # adopted: the main process is gone
            os._exit(0)

    check(0, None)
    if hasattr(signal, "setitimer"):
        signal.signal(signal.SIGALRM, check)
        signal.setitimer(signal.ITIMER_REAL, PARENT_CHECK_S, PARENT_CHECK_S)


def _block_interrupts() -> set[signal.Signals] | None:
    """SIGINT blocked in this thread (the mask it had, to restore; None where not possible)."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def decode_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` decode processes, kept for the next trace.

    Workers are spawned (a fresh interpreter that imports only the decoder), never forked
    from this process and its threads. A spawned process normally re-runs the caller's main
    script first, which breaks scripts without an `if __name__ == "__main__":` guard; the
    workers are therefore all started at once here, with the main module hidden."""
    global _pool, _pool_size, _started
    if _pool is None or _pool_size != workers:
        discard_pool()
        pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=start_worker, initargs=(os.getpid(),)
        )
        _pool, _pool_size = pool, workers  # known before its workers start: `stop_workers` may end them
        _started = True
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        # started with Ctrl-C blocked (a process inherits its spawner's signal mask, across exec):
        # one pressed while a worker still imports printed its KeyboardInterrupt traceback
        blocked = _block_interrupts()
        try:  # one task per worker starts them all now (processes start on demand)
            for _ in range(workers):
                pool.submit(ready)
        finally:
            if main is not None:
                sys.modules["__main__"] = main
            if blocked is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return _pool


class _ReadAhead:
    """`columns.build_columns` of one trace, run in a background thread. With `last`, no other
    trace follows: the decode workers are shut down once it is decoded, so their memory is
    free for what comes after decoding."""

    def __init__(self, path: Path, workers: int, last: bool = False):
        self.path = path
        self.last = last
        self.fraction = 0.0
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(workers,), name="atlas-read-ahead", daemon=True)
        self.started = start_thread(self.thread)  # not where no thread can be had: read when asked for

    def _run(self, workers: int) -> None:
        def progress(fraction: float) -> None:
            self.fraction = fraction

        try:  # the import too: what fails here (too many open files) is the caller's to say
            from kernel_atlas.ingest.columns import build_columns

            executor = decode_pool(workers) if workers > 1 else None
            self.result = build_columns(self.path, executor, workers, on_progress=progress)
        except BaseException as exc:  # handed to whoever takes the result
            self.error = exc
        finally:
            if self.last:
                discard_pool()

    def take(self, on_progress: Callable[[float], None] | None) -> Any:
        while self.thread.is_alive():
            if on_progress:
                on_progress(self.fraction)
            self.thread.join(0.1)
        if self.error is not None:
            raise self.error
        return self.result


_read_ahead: _ReadAhead | None = None  # until its result is taken
_read_aheads: weakref.WeakSet[_ReadAhead] = weakref.WeakSet()  # started, result taken or not


def start_early(paths: Sequence[Path], jobs: int = 1) -> None:
    """Start what ingesting `paths` (`jobs` traces at a time, on this machine) will do first, so
    that it runs while the caller is still importing the rest of the pipeline (pandas and
    pyarrow take a while): the decode workers, and reading the first trace. `ingest_trace`
    picks the reading up."""
    global _read_ahead
    if not paths or (jobs > 1 and len(paths) > 1):
        return
    first = Path(paths[0])
    if not first.is_file() or first.name.lower().endswith((".sqlite", ".nsys-rep")):  # not JSON (`nsys.py`)
        return
    ahead = _ReadAhead(first, workers_for(first), last=len(paths) == 1)
    _read_ahead = ahead if ahead.started else None
    if ahead.started:
        _read_aheads.add(ahead)


def reading_ahead(path: Path) -> bool:
    """Whether `start_early` is reading this trace (its decoding runs while the caller does
    other work)."""
    ahead = _read_ahead
    return ahead is not None and ahead.path.resolve() == Path(path).resolve()


def take_read_ahead(path: Path, on_progress: Callable[[float], None] | None = None) -> Any:
    """`build_columns(path)`'s (info, columns) when `start_early` began reading this trace,
    else None."""
    global _read_ahead
    ahead = _read_ahead
    if ahead is None or not reading_ahead(path):
        return None
    _read_ahead = None
    return ahead.take(on_progress)


def stop_workers() -> None:
    """End the decode workers at once, then the pool: the command failed, and a worker still
    starting would print its own traceback (EOFError) once this process's end of its pipe closed."""
    pool = _pool
    if pool is not None:
        # the pool's, and any this process started that the pool has not listed yet
        started = {*(getattr(pool, "_processes", None) or {}).values(), *multiprocessing.active_children()}
        for process in started:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                process.kill()
        for process in started:  # reaped here, not left to whoever adopts them
            with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
                process.join(1.0)
    discard_pool()


def end_for_exit() -> None:
    """Ready this process to end at once (`os._exit`), its decode workers having been started:
    the workers killed and reaped (a worker still starting opens the pool's semaphores by name,
    so they go after it); the read-ahead and the pool's thread given a moment to see that; the
    shared memory of slices still in flight and the pool's named semaphores removed — what exit
    handlers and `finally` blocks that will not run would have done; and multiprocessing's
    resource tracker ended, its work done (a thread tearing the pool down may still be between
    removing a semaphore and telling the tracker, which would then warn of a "leaked" one).

    Why not a normal exit: a worker killed while it wrote its result (SIGTERM to the process
    group, or `stop_workers`) leaves the pool's result thread waiting for the rest of that
    message for ever, and the interpreter's exit joins that thread (CPython 3.11–3.13)."""
    from multiprocessing import resource_tracker, util

    from kernel_atlas.ingest.reader import release_shared_memory

    manager = getattr(_pool, "_executor_manager_thread", None)
    stop_workers()
    for thread in [*(ahead.thread for ahead in _read_aheads), manager]:
        if thread is not None and thread.ident is not None:
            thread.join(1.0)  # their own clean-up, where their waits end now
    for process in multiprocessing.active_children():  # any a thread started meanwhile
        with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
            process.kill()
            process.join(1.0)
    release_shared_memory()
    with contextlib.suppress(Exception):
        util._run_finalizers(0)  # the semaphores' (priority 0), the queues' closing (10); no joins
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    pid = getattr(tracker, "_pid", None)
    if isinstance(pid, int):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def discard_pool() -> None:
    """Shut the pool down (after a worker died, or to free its processes)."""
    global _pool, _pool_size
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool, _pool_size = None, 0
