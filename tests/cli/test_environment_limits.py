"""What the machine allows (issue 27, stop 49's campaign): an address-space cap (`ulimit -v`), few
file descriptors (`ulimit -n`), no decode worker or thread to be had (`ulimit -u`), a current
folder that was removed. Each ended in "internal error", a traceback, a C++ abort or exit code 3
(which `atlas diff --fail-above` gives a regression)."""

from __future__ import annotations

import contextlib
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
        "from kernel_atlas import process_life\n"
        "process_life.terminate_as_exit()\n"
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


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_while_a_worker_writes_its_result_ends_the_command_at_once(tmp_path: Path, sig: str) -> None:
    """SIGTERM or Ctrl-C while a decode worker is half-way through sending its result (the
    timing a real ingest met ~1 s in): the pool's result thread waits for the rest of that
    message for ever, and the interpreter's exit joined it — the command hung, then warned of
    "leaked semaphore objects". Now: 143 or 130 within seconds, at most "interrupted" said, no
    worker left, nothing left in shared memory."""
    import signal
    import time

    marker = tmp_path / "half-written"
    driver = (
        "import kernel_atlas.ingest.workers as w, kernel_atlas.ingest.columns as c\n"
        "from tests.support.stuck_worker import half_write\n"
        "w.PARALLEL_MIN_BYTES = 0\n"
        f"c.build_columns = lambda path, executor, *a, **k: executor.submit(half_write, {str(marker)!r}).result()\n"
        "from kernel_atlas.cli import main; main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    proc = subprocess.Popen(
        [sys.executable, "-c", driver, "ingest", str(EXAMPLE), "-o", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "the worker never wrote"
        workers = _children(proc.pid)
        time.sleep(0.2)
        os.killpg(proc.pid, getattr(signal, sig))
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == (143 if sig == "SIGTERM" else 130), err
    assert err.decode().strip() in ("", "interrupted"), err
    time.sleep(0.5)
    for pid in workers:  # ended, or at most not yet reaped by whoever adopted them
        state = Path(f"/proc/{pid}/stat")
        assert not state.exists() or state.read_text().split(") ")[1].startswith("Z"), pid
    if shm_before or os.path.isdir("/dev/shm"):
        left = {n for n in set(os.listdir("/dev/shm")) - shm_before if n.startswith(("sem.mp-", "psm_"))}
        assert not left, left


def test_decode_workers_end_when_the_main_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL of the main process (or the out-of-memory killer): its decode workers waited for
    a task for ever (each holds its task pipe's writing end too). Now they notice they were
    adopted and end within seconds."""
    import signal
    import time

    driver = (
        "import sys, time\n"
        "from kernel_atlas.ingest import workers\n"
        "pool = workers.decode_pool(2)\n"
        "print(*pool._processes, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, start_new_session=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
        assert not alive, f"workers {alive} outlived the main process"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def test_a_limit_of_few_processes_runs_the_work_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ulimit -u 7` for a user other than root: the decode pool's own thread could not start, so
    its workers waited for ever (the command hung after "internal error: RuntimeError"). Under
    a limit below `FEW_PROCESSES` the work runs in this process's one thread."""
    from kernel_atlas.core import beside
    from kernel_atlas.ingest import workers

    big = Path(__file__)  # any file: its size is not asked for one CPU
    monkeypatch.setattr(resource, "getrlimit", lambda which: (7, 7))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert beside.few_processes() and beside.usable_cpus() == 1 and workers.workers_for(big) == 1
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # root is not held to it
    assert not beside.few_processes()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert not beside.few_processes()


def test_ingest_as_a_user_allowed_seven_processes(tmp_path: Path) -> None:
    """The campaign's case itself, where this machine can run it (root, `setpriv`, a checkout
    `nobody` can import): exit 0, nothing on stderr (OpenBLAS said it could not start threads)."""
    import shutil
    import tempfile

    from tests.cli.test_hostile_input import _AS_NOBODY, _skip_unless_nobody_imports_this_package

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as nobody")
    folder = Path(tempfile.mkdtemp(prefix="atlas-nproc-"))
    try:
        folder.chmod(0o777)
        _skip_unless_nobody_imports_this_package(folder)
        code = "import kernel_atlas.ingest.workers as w; w.PARALLEL_MIN_BYTES = 0\nfrom kernel_atlas.cli import main; main()"
        done = subprocess.run(
            [*_AS_NOBODY, sys.executable, "-c", code, "ingest", str(EXAMPLE), "-o", str(folder / "out"), "-q"],
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NPROC, (7, 7)),
            capture_output=True,
            timeout=60,
            cwd=folder,
            env={**{k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}, "HOME": "/nonexistent"},
        )
        assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()
        assert (folder / "out" / "summary.json").is_file()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize(("sig", "code", "said"), [("SIGTERM", 143, ""), ("SIGINT", 130, "interrupted")])
def test_a_signal_a_library_turns_into_its_own_error_still_ends_the_command(
    tmp_path: Path, sig: str, code: int, said: str
) -> None:
    """SIGTERM or Ctrl-C while DuckDB runs a query (the report's cross-rank view): DuckDB raises
    its own `RuntimeError: Query interrupted` in place of the signal's exception, which was
    reported as an internal error (exit 1). The signal is recorded where it is received."""
    out = tmp_path / "out"
    assert _run("ingest", EXAMPLE, "-o", out, "-q").returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    script = Path(__file__).resolve().parents[1] / "support" / "signal_in_query.py"
    done = subprocess.run([sys.executable, str(script), sig, str(out)], capture_output=True, timeout=120, env=env)
    err = done.stderr.decode()
    assert done.returncode == code, err
    assert err.strip() == said, err


_THREADS_AND_COLLECTOR = (
    "import gc, os\n"
    "from kernel_atlas import cli\n"  # `process_life.begin()` runs as the command line loads
    "import numpy\n"
    "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'), gc.get_threshold())\n"
)


def test_a_command_starts_no_blas_threads() -> None:
    """numpy's OpenBLAS started a thread per CPU in every `atlas` process, each spinning a while
    after it started (~0.2 s of CPU in a 500 MB trace's ingest, on two cores; no command
    multiplies matrices with numpy). The process that loads the command line and numpy is one
    thread, its cycle collector Python's own (only `atlas report` of an ingested run collects
    rarely); a thread count the user set is theirs."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", _THREADS_AND_COLLECTOR], capture_output=True, timeout=60, env=env)
    assert done.stdout.decode().split(maxsplit=2) == ["1", "1", "(700, 10, 10)\n"], done.stderr
    env["OPENBLAS_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", _THREADS_AND_COLLECTOR], capture_output=True, timeout=60, env=env)
    assert done.stdout.decode().split(maxsplit=1)[1] == "2 (700, 10, 10)\n", done.stderr
