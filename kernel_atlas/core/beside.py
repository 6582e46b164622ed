"""Work done in a forked process beside the caller's own: `atlas report` solves the critical path
while it computes the roofline, the waits and the page. The child inherits what the parent holds
at the fork (nothing is pickled on the way in), may wait for one value the parent hands it later,
and hands back its result or its exception. Besides what its work writes (the files the caller
asks of it), what it hands back is all it does. A caller may bound the child's time and memory
(`Beside.result`): an MCP agent's SQL runs so.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from kernel_atlas.core.errors import AtlasError

T = TypeVar("T")
A = TypeVar("A")


# Linux's default limit for a pipe an unprivileged process widens (/proc/sys/fs/pipe-max-size)
PIPE_BYTES = 1 << 20
WATCH_INTERVAL_S = 0.02  # how often a bounded child's time and memory are looked at
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _widen(*connections: Any) -> None:
    """Pipes of PIPE_BYTES instead of 64 KiB: a value of several pipefuls (the roofline a report
    hands its critical path's what-if) crosses in 16 times fewer turns of the two processes, each
    of which waits for the other to run; where the system refuses, the pipe stays as it is."""
    try:
        import fcntl
    except ImportError:  # not on Linux, where no process runs beside (`can_fork`)
        return
    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        return
    for connection in connections:
        with contextlib.suppress(OSError):
            fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class ChildLost(Exception):
    """The child ended without a result (killed, e.g. for memory): the caller does the work itself."""


class OverBound(Exception):
    """The child ran past the time or the memory `Beside.result` allowed it, and was killed."""

    def __init__(self, bound: str, limit: float) -> None:
        super().__init__(f"past its {bound} bound ({limit:g})")
        self.bound = bound  # "time" (limit in seconds) or "memory" (limit in bytes)
        self.limit = limit


def resident_bytes(pid: int) -> int:
    """A process's resident memory (0 where /proc cannot say: gone, or not Linux). A forked
    child starts with its parent's, which it shares: a write to a shared page copies it without
    changing the count, so what the count gains is the child's own."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


# Below this limit on a user's processes (`ulimit -u`, which counts threads too), work runs in
# this process's one thread: a pool whose own thread could not start waited for ever, and a
# user's other processes count against the same limit.
FEW_PROCESSES = 256


def usable_cpus() -> int:
    """CPUs this process may run on; 1 under a limit of few processes (`FEW_PROCESSES`)."""
    if few_processes():
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def few_processes() -> bool:
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    except (ImportError, AttributeError, OSError, ValueError):
        return False
    # root (its capabilities, in fact) is not held to the limit
    return soft != resource.RLIM_INFINITY and soft < FEW_PROCESSES and os.geteuid() != 0


def side_by_side(function: Callable[[A], T], items: Iterable[A], workers: int) -> Iterator[T]:
    """`map(function, items)` on up to `workers` threads (work that releases the GIL: numpy's
    sorts and searches), results in order; one after another in this thread where no thread
    can be started (a process's thread limit, `ulimit -u`): the same results."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        yield from map(function, items)
        return
    pool = ThreadPoolExecutor(min(workers, len(items)))
    try:
        try:
            futures = [pool.submit(function, item) for item in items]
        except RuntimeError:  # "can't start new thread": what started finishes, unread
            futures = None
        if futures is None:
            yield from map(function, items)
        else:
            for future in futures:
                yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


MANAGER_JOIN_S = 2.0  # the most a pool left by an exception waits for its manager thread


def submit_held(pool: ProcessPoolExecutor, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """`pool.submit(function, *args, **kwargs)` with Ctrl-C and SIGTERM held back meanwhile (main thread):
    the pool forks its processes as work is submitted, and a KeyboardInterrupt that landed in
    the fork's at-fork hooks was printed and dropped by Python (`Exception ignored in:
    _releaseLock`): the Ctrl-C was lost and the command ran to its end. Held, it lands just
    after, where the caller's handling sees it. The workers unblock both (`_pool_worker`)."""
    import signal

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return pool.submit(function, *args, **kwargs)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        return pool.submit(function, *args, **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` processes forked from this one, for the caller's work (the report's
    ranks). Each ignores Ctrl-C — the terminal sends it to every process of the group, and a
    worker interrupted inside the pool's queue lock left the caller waiting on the pool for ever
    (a 1,000-rank report, Ctrl-C 8 s in) — dies at SIGTERM, and dies with its parent (killed,
    or by the out-of-memory killer: it would wait for a task for ever). Left by an exception
    (a task's error, Ctrl-C, SIGTERM), its processes are killed, not waited for."""
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_pool_worker, initargs=(os.getpid(),))
    try:
        yield pool
        pool.shutdown(wait=True)  # here: Ctrl-C while it waits is the exception below too
    except BaseException:
        processes = list((getattr(pool, "_processes", None) or {}).values())  # private names, guarded
        manager = getattr(pool, "_executor_manager_thread", None)  # `shutdown` forgets it: read first
        _give_back_lost_locks(pool)
        pool.shutdown(wait=False, cancel_futures=True)  # first: nothing more is sent to them
        for process in processes:
            with contextlib.suppress(Exception):
                process.kill()
        # its manager thread let wind down (it sees the processes gone): at the interpreter's exit,
        # waking a manager thread that is closing its pipe meanwhile printed "OSError: Bad file
        # descriptor" (CPython 3.11's `_python_exit`)
        if isinstance(manager, threading.Thread):
            manager.join(MANAGER_JOIN_S)
        raise


# the pool's manager thread holds the pool's locks for microseconds: one held this long is lost
LOST_LOCK_S = 0.5


def _give_back_lost_locks(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C lands in the main thread wherever it is — inside the pool's `submit` too, between
    taking one of the pool's locks and the block that gives it back (`with` is not atomic against
    a signal). The caller has left the pool's code when this runs, so a lock held for LOST_LOCK_S
    is held by nobody, and is given back: else the pool's manager thread waited for it for ever,
    and the interpreter's exit, which joins that thread, with it (1 run in ~40 of
    tests/core/test_process_pool.py with the CPUs busy). Private names, guarded."""
    work_ids = getattr(pool, "_work_ids", None)
    for lock in (getattr(pool, "_shutdown_lock", None), getattr(work_ids, "mutex", None)):
        if not hasattr(lock, "acquire") or not hasattr(lock, "release"):
            continue
        if lock.acquire(timeout=LOST_LOCK_S):
            lock.release()
            continue
        with contextlib.suppress(RuntimeError):  # given back meanwhile
            lock.release()


def _pool_worker(parent: int) -> None:
    """`process_pool`'s initializer: Ctrl-C ignored, SIGTERM the default (an end), and the end of
    the parent an end too (Linux's PR_SET_PDEATHSIG)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # forked while `submit_held` held them back
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent was gone before the death signal was asked for
        os._exit(0)


def start_thread(thread: threading.Thread) -> bool:
    """`thread` started; False where the process may start no more (a thread limit)."""
    try:
        thread.start()
    except RuntimeError:
        return False
    return True


def on_a_thread(work: Callable[..., T], *args: Any, name: str = "atlas-beside", here: bool = False) -> Future[T]:
    """`work(*args)` on a thread of its own, or done here — with `here` (work too small for a
    thread to pay), or where the process may start no more threads (a limit on processes counts
    them): its outcome either way, its exception raised by whoever takes the outcome."""
    outcome: Future[T] = Future()

    def run() -> None:
        try:
            outcome.set_result(work(*args))
        except BaseException as exc:
            outcome.set_exception(exc)

    if here or not start_thread(threading.Thread(target=run, name=name, daemon=True)):
        run()
    return outcome


def can_fork() -> bool:
    """Whether work beside the caller can run at the same time: on Linux (macOS has fork, but a
    forked child of a process with threads may crash there, hence Python's spawn default) with a
    second CPU."""
    return sys.platform.startswith("linux") and usable_cpus() > 1


class Receiver:
    """What a child's work is given: `receive()` waits for the value the parent sends;
    `receive.ready()` says whether it has come (without waiting)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def __call__(self) -> Any:
        return self._connection.recv()

    def ready(self) -> bool:
        try:
            return bool(self._connection.poll())
        except (EOFError, OSError):  # the parent is gone or sends nothing: receiving says so
            return True


class Beside(Generic[T]):
    """`work(receive)` in a forked child: `receive()` waits for the value given to `send`
    (`receive.ready()`: whether it has come).
    `result()` waits for the child and returns its value or raises its exception (ChildLost when
    it died without one); leaving the `with` block without it stops the child. A child that
    `may_fork` may start a `Beside` of its own (multiprocessing forbids that to daemonic
    processes); it is stopped by its caller all the same, whose `with` block ends it."""

    def __init__(self, work: Callable[[Callable[[], Any]], T], may_fork: bool = False) -> None:
        context = multiprocessing.get_context("fork")
        values_read, self._values = context.Pipe(duplex=False)  # parent → child: the value sent
        self._results, results_write = context.Pipe(duplex=False)  # child → parent: the outcome
        _widen(self._values, self._results)
        self._sender: threading.Thread | None = None
        ends = (values_read, results_write, self._values, self._results)
        self._process = context.Process(target=_run, args=(work, *ends), daemon=not may_fork)
        self._resident_at_fork = resident_bytes(os.getpid())  # what the child starts with (shared)
        with warnings.catch_warnings():  # Python 3.12+ warns on fork with threads (Arrow's pool waits idle)
            warnings.simplefilter("ignore", DeprecationWarning)
            self._process.start()
        values_read.close()  # the child's ends
        results_write.close()
        self._done = False

    def send(self, value: Any) -> None:
        """Hand the child its value without waiting for it to take it (it may still be busy)."""
        self._sender = threading.Thread(target=self._hand, args=(value,), daemon=True)
        if not start_thread(self._sender):  # no thread to be had: handed here (the child reads it when it can)
            self._hand(value)

    def _hand(self, value: Any) -> None:
        with contextlib.suppress(OSError):  # the child is gone: `result` says so
            self._values.send(value)

    def result(self, seconds: float | None = None, max_growth_bytes: int | None = None) -> T:
        """The child's value (or its exception raised here). With `seconds` or `max_growth_bytes`
        the child is killed past that time, or once its resident memory has grown by that much
        over what it was forked with (OverBound) — the pages it shares with this process are
        this process's memory, not the work's: a bound that holds whatever the work does, where
        a timer the work must check, or an allocator's own limit, holds only where it looks."""
        if self._sender is None:
            self._values.close()  # nothing will be sent: a child waiting for it gets EOFError
        try:
            if seconds is not None or max_growth_bytes is not None:
                self._watch(seconds, max_growth_bytes)
            try:
                status, payload = self._results.recv()
            except (EOFError, OSError):
                status, payload = "lost", None
        finally:
            self._finish()
        if status == "error":
            raise payload
        if status == "lost":
            raise ChildLost(f"the process beside ended with exit code {self._process.exitcode}")
        return payload

    def _watch(self, seconds: float | None, max_growth_bytes: int | None) -> None:
        """Wait for the child's outcome, killing it (OverBound) when it runs past a bound."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self._results.poll(WATCH_INTERVAL_S):
            if deadline is not None and time.monotonic() > deadline:
                self._kill()
                raise OverBound("time", seconds or 0.0)
            if max_growth_bytes is not None:
                grown = resident_bytes(self._process.pid) - self._resident_at_fork
                if grown > max_growth_bytes:
                    self._kill()
                    raise OverBound("memory", max_growth_bytes)

    def _kill(self) -> None:
        self._process.kill()
        self._finish()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        self._process.join()
        if self._sender is not None:
            self._sender.join(timeout=1.0)
        self._values.close()
        self._results.close()

    def stop(self) -> None:
        """Stop the child unless its result was taken (the caller failed first)."""
        if not self._done:
            self._process.terminate()
            self._finish()

    def __enter__(self) -> Beside[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _run(work: Callable[..., Any], values: Any, results: Any, *parents_ends: Any) -> None:
    for end in parents_ends:  # else the child's own copy of the writer keeps `values` from ending
        end.close()
    from kernel_atlas.core.heap import release_free_memory  # here: glibc is looked up at its import

    # the parent's free heap pages, shared with it until either writes: handed back here, the
    # child's arrays fault in pages of their own rather than copy (or split, huge) shared ones
    release_free_memory()
    try:
        outcome: tuple[str, Any] = ("ok", work(Receiver(values)))
    except BaseException as error:  # handed to the parent, which raises it
        if not isinstance(error, AtlasError):
            error.add_note("in the process beside:\n" + "".join(traceback.format_exception(error)))
        outcome = ("error", error)
    try:
        results.send(outcome)
    except Exception as error:  # a result or an exception that does not pickle
        results.send(("error", RuntimeError(f"the process beside could not hand back its outcome: {error}")))
    results.close()
