"""How the `atlas` process starts and ends, apart from what its commands do: the environment
the libraries read as they load (set before they are imported), Ctrl-C while the command line
loads, SIGTERM as an exit, and an exit that does not wait on decode workers (`leave`).

`begin` runs first, before `cli` imports typer, rich, numpy or pyarrow."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any

from kernel_atlas.core import signals
from kernel_atlas.core.beside import few_processes

READER_GONE = 141  # the exit status of a command killed by SIGPIPE, as the shell reports it


def interrupted_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(130)


def _address_space_limited() -> bool:
    """Whether the process's address space is capped (`ulimit -v`)."""
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):
        return False


def begin() -> None:
    """What the process needs before the libraries load (called by `cli` before it imports any):

    - Ctrl-C while the `atlas` script loads the command line and parses it (typer, rich, click:
      ~0.2 s) ends it as an interrupt ends a command, 130, without Python's traceback of the
      import it stopped; the command restores Python's own handler as it starts
      (`cli._one_line_errors`).
    - numpy asks the kernel for transparent huge pages for every array of 4 MB or more
      (madvise); where the kernel then compacts memory to find them on first touch
      (`defrag=madvise`, a common default), the commands' many short-lived large arrays cost
      more system time than the pages save: `atlas report` on a 510 MB trace's output, 4.7 s
      (2.2 s of it system time) with them, 3.5 s (0.9 s) without (docs/performance.md).
    - Arrow's default allocator (mimalloc) reserves address space by the GiB: under
      `ulimit -v 1500000` reading a 2,000-row kernels file aborted the process
      (std::bad_alloc). Capped, Arrow allocates through malloc, as everything else does.
    - OpenBLAS starts a thread per CPU as numpy loads, in every process (the decode workers
      too), and each spins a while after it starts: no command multiplies matrices with numpy,
      so those spins only took CPU from the work (~0.2 s of a 500 MB trace's ingest, 0.1 s of
      its report, on two cores). One thread: none started.
    - Under a limit of few processes (`ulimit -u`, which counts threads), the numeric libraries'
      other thread pools could not start and said so on stderr, line after line; the work runs
      in one thread then (`beside.usable_cpus`).
    - A MemoryError Python cannot raise (in a finaliser) is not printed: the command says it is
      out of memory in its one line (`_quiet_out_of_memory`).

    A value the user set in the environment is kept."""
    if os.path.basename(sys.argv[0]) == "atlas" and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, interrupted_quietly)
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    if _address_space_limited():
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.unraisablehook = _quiet_out_of_memory
    if few_processes():
        os.environ.setdefault("OMP_NUM_THREADS", "1")


_UNRAISABLE = sys.unraisablehook


def _quiet_out_of_memory(unraisable: Any) -> None:
    """Python's report of an exception it could not raise (`Exception ignored in …` and a
    traceback), but for a MemoryError: out of memory (`ulimit -v`), a generator closed while the
    stack unwound printed one before the command's own line."""
    if isinstance(unraisable.exc_value, MemoryError):
        return
    _UNRAISABLE(unraisable)


def stdout_to_null() -> None:
    """stdout's file descriptor pointed at the null device, so that what is still buffered for
    the closed pipe does not fail again when the interpreter flushes it at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno() if sys.stdout is not None else 1)
        os.close(null)
    except (OSError, ValueError):
        pass


def terminate_as_exit() -> None:
    """SIGTERM (`kill`, a job scheduler) ends the command as an exit does, 143 as the shell reports
    it: what it started is shut down (its decode workers; multiprocessing's resource tracker
    otherwise warned of leaked semaphores), its temporary files removed, no partial output named
    final (outputs are renamed into place only once whole)."""

    with contextlib.suppress(ValueError, OSError):  # not the main thread (an embedding caller)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signals.terminate)  # recorded: `signals.received`


SCRIPT = False  # set by `cli.main`: this process is the `atlas` command, not a caller's library


def leave(code: int, *, always: bool = False) -> None:
    """The `atlas` command ends now with `code` when it had decode workers (or `always`): they
    are killed, and the interpreter's exit handlers — which join the pool's threads, waiting on
    reads the killed workers never answer — are not run (Ctrl-C or SIGTERM mid-ingest hung there
    for ever); nor are the C libraries' (`always` after the system refused memory: Arrow's
    allocator faulted in its own exit handler under `ulimit -v`, SIGSEGV after the one line).
    Everything the command wrote is whole or renamed away already (its `finally` blocks ran)."""
    if not SCRIPT:
        return
    # the pools' objects, torn down by other threads as the command ends, may fail in their
    # `__del__` or exit hooks ("Exception ignored in: ...": CPython 3.11's process pool woke a
    # manager thread that was closing its pipe, `OSError: Bad file descriptor`): nothing of
    # this command's own
    sys.unraisablehook = lambda unraisable: None
    workers = sys.modules.get("kernel_atlas.ingest.workers")
    started = workers is not None and workers.started_any()
    if not started and not always:
        return
    for sig in (signal.SIGINT, signal.SIGTERM):  # leaving already: a second Ctrl-C changes nothing
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_IGN)
    if started:
        workers.end_for_exit()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def stop_workers() -> None:
    """The decode workers ended, where ingest started some (`workers.stop_workers`)."""
    workers = sys.modules.get("kernel_atlas.ingest.workers")
    if workers is not None:
        with contextlib.suppress(Exception):
            workers.stop_workers()
