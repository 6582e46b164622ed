"""What the machine allows (issue 27, stop 49's campaign): an address-space cap (`ulimit -v`), few
file descriptors (`ulimit -n`), no decode worker or thread to be had (`ulimit -u`), a current
folder that was removed. Each ended in "internal error", a traceback, a C++ abort or exit code 3
(which `atlas diff --fail-above` gives a regression)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import ATLAS, cli
from tests.support.traces import EXAMPLE

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="resource limits of Linux")


def _run(*args: object, limits: dict[int, int] | None = None, cwd_gone: Path | None = None) -> Any:
    """`atlas ARGS` as its own process under `limits` (resource → soft and hard limit), started
    in `cwd_gone`, removed before it runs."""

    def before() -> None:
        for which, value in (limits or {}).items():
            resource.setrlimit(which, (value, value))
        if cwd_gone is not None:
            os.chdir(cwd_gone)
            os.rmdir(cwd_gone)

    env = {k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}
    return subprocess.run(
        [*ATLAS, *map(str, args)], preexec_fn=before, capture_output=True, timeout=180, env={**env, "COLUMNS": "100"}
    )


def _one_line(done: Any) -> str:
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_an_address_space_cap_that_fits_the_work_is_no_failure(tmp_path: Path) -> None:
    """`ulimit -v 1 GiB`: Arrow's allocator (mimalloc) reserved address space by the GiB and the
    report aborted in C++ (std::bad_alloc); reading a JSON file reserved 1 GiB for it first."""
    gib = 1 << 30
    out = tmp_path / "out"
    done = _run("ingest", EXAMPLE, "-o", out, "-q", limits={resource.RLIMIT_AS: gib})
    assert done.returncode == 0, done.stderr.decode()
    done = _run("report", out, limits={resource.RLIMIT_AS: gib})
    assert done.returncode == 0, done.stderr.decode()
    assert b"GPU time by category" in done.stdout


def test_out_of_memory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """200 MB cannot load pandas: one line, exit 2 (not 3, `diff --fail-above`'s "regressed")."""
    out = tmp_path / "out"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    done = _run("report", out, limits={resource.RLIMIT_AS: 200 << 20})
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err, err
    # a C library may say its own line first (jemalloc's background thread): ours is the last
    assert err.strip().splitlines()[-1] == "error: out of memory (the machine's, or a limit such as `ulimit -v`)"


@pytest.mark.parametrize("descriptors", [8, 16])
def test_few_file_descriptors_is_one_line_or_no_failure(tmp_path: Path, descriptors: int) -> None:
    """`ulimit -n`, with decode workers (the example taken for a large trace): the workers' pipes
    ended in "internal error: OSError", and the error's own message needed a file (an import), so
    a second traceback followed. Now the trace is decoded in one process when the workers cannot
    be had, and what still fails is one line."""
    parallel = "import kernel_atlas.ingest.workers as w; w.PARALLEL_MIN_BYTES = 0\n"
    code = parallel + "from kernel_atlas.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "ingest", str(EXAMPLE), "-o", str(tmp_path / "out")],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors)),
        capture_output=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"},
    )
    err = done.stderr.decode()
    assert "Traceback" not in err and "internal error" not in err, err
    if done.returncode == 0:
        assert "decoded in one process" in err
    else:
        assert done.returncode == 2 and len(err.strip().splitlines()) == 1, err
        assert "too many open files" in err.lower()


def test_a_removed_current_folder_is_one_line(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    err = _one_line(_run("ingest", "t.json", cwd_gone=gone))
    assert err.strip() == "error: the current folder no longer exists: cd to one that does"


def test_no_decode_worker_to_be_had_decodes_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """fork's EAGAIN (a process limit) where a large trace would be decoded by workers: the
    trace is decoded here, the kernels the same, and a warning says so."""
    from kernel_atlas.ingest import pipeline

    expected = pipeline.ingest_trace(EXAMPLE, 0, workers=1)

    def no_process(workers: int) -> Any:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(pipeline, "decode_pool", no_process)
    result = pipeline.ingest_trace(EXAMPLE, 0, workers=2)
    assert result.frame.equals(expected.frame)
    assert any("decode worker processes failed" in w and "decoded in one process" in w for w in result.warnings)
    assert not any("decode worker" in w for w in expected.warnings)


def test_no_thread_to_be_had_runs_the_work_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread limit: `side_by_side` runs every item here, results in order."""
    from concurrent.futures import ThreadPoolExecutor

    from kernel_atlas.core import beside

    started = []

    def refuse(self: Any, fn: Any, *args: Any) -> Any:
        started.append(args)
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    assert list(beside.side_by_side(lambda x: x * x, [3, 1, 2], workers=4)) == [9, 1, 4]
    assert started == [(3,)]  # it tried


def test_sigterm_ends_the_command_as_an_exit() -> None:
    """`kill` (SIGTERM) ends an `atlas` command with 143, quietly, its finally blocks run (the
    decode workers shut down: multiprocessing's resource tracker warned of leaked semaphores)."""
    code = (
        "import os, signal, time\n"
        "from kernel_atlas import cli\n"
        "cli._terminate_as_exit()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "finally:\n"
        "    print('cleaned up')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 143, done.stderr
    assert done.stdout == b"cleaned up\n" and done.stderr == b""


def test_decode_workers_start_with_ctrl_c_blocked() -> None:
    """Ctrl-C reaches every process of the terminal's group: a worker still importing printed a
    KeyboardInterrupt traceback. Workers start with SIGINT blocked (their spawner's mask, kept
    across exec); the main process says "interrupted" and ends them."""
    from kernel_atlas.ingest import workers

    pool = workers.decode_pool(2)
    try:
        pids = list(pool._processes)  # started by decode_pool
        assert len(pids) == 2
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
            assert blocked & (1 << (2 - 1)), status  # SIGINT is signal 2
    finally:
        workers.discard_pool()
    import signal

    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # this thread's mask as it was
