"""`core/beside.process_pool`: the report's worker processes end with the command — Ctrl-C to the
process group (a worker interrupted inside the pool's queue lock left a 1,000-rank report
waiting for ever), and SIGKILL of the parent (the out-of-memory killer)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and PR_SET_PDEATHSIG")

DRIVER = """
import sys, time
from kernel_atlas.core.beside import process_pool

def work(x):
    time.sleep(0.002)
    return x

if __name__ == "__main__":
    try:
        with process_pool(2) as pool:
BODY
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        raise SystemExit(130)
"""
# the pool maps for ever, until the test interrupts or kills the driver
MAPPING = """
            print("mapping", flush=True)
            list(pool.map(work, range(10**7), chunksize=20))
"""


def _driver(tmp_path: Path, body: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run DRIVER with `body` inside the pool's block."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.replace("BODY", body.strip("\n")))
    return [sys.executable, str(script)], {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _start(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    command, env = _driver(tmp_path, MAPPING)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"mapping"
    time.sleep(0.5)
    children = [int(pid) for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    assert len(children) == 2
    return proc, children


def _gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [Path(f"/proc/{p}/stat") for p in pids]
        if all(not s.exists() or s.read_text().split(") ")[1].startswith("Z") for s in states):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("attempt", range(3))
def test_ctrl_c_to_the_group_ends_the_pool_at_once(tmp_path: Path, attempt: int) -> None:
    proc, children = _start(tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and err.decode().strip() == "interrupted", err
    assert _gone(children)


def test_the_workers_end_with_their_parent(tmp_path: Path) -> None:
    proc, children = _start(tmp_path)
    proc.kill()
    proc.wait()
    try:
        assert _gone(children)
    finally:
        for pid in children:
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)


# the pool given tasks, then one of its locks taken as Ctrl-C inside `submit` can leave it: never given back
LOST_LOCK = """
            futures = [pool.submit(work, x) for x in range(200)]
            pool.LOCK.acquire()
            raise KeyboardInterrupt
"""


@pytest.mark.parametrize("lock", ["_work_ids.mutex", "_shutdown_lock"])
def test_a_pool_lock_lost_to_ctrl_c_does_not_hold_the_exit(tmp_path: Path, lock: str) -> None:
    """Ctrl-C can land between `submit` taking one of the pool's locks and the block that gives
    it back. The pool's manager thread then waited for the work-id queue's lock for ever, and the
    exit with it, which joins that thread; the shutdown lock held up `shutdown` itself. Either
    lock taken here as Ctrl-C leaves it: the command ends at once, 130."""
    command, env = _driver(tmp_path, LOST_LOCK.replace("LOCK", lock))
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, env=env, timeout=60)
    assert done.returncode == 130 and done.stderr.decode().strip() == "interrupted", done.stderr
    assert time.monotonic() - start < 30


def _blocked() -> set[int]:
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])}


def test_work_is_submitted_with_ctrl_c_held_and_the_workers_take_it_again() -> None:
    """A pool forks its processes as work is submitted; a KeyboardInterrupt landing in the fork's
    at-fork hooks was dropped by Python, and a multi-trace ingest ran on to exit 0 (1 Ctrl-C in
    ~30). Ctrl-C and SIGTERM are held while `submit_held` forks, then as they were; the workers,
    which inherit the mask, unblock them (SIGTERM must still end one)."""
    from kernel_atlas.core.beside import process_pool, submit_held

    before = _blocked()
    seen: list[set[int]] = []
    with process_pool(1) as pool:
        submit = pool.submit

        def watched(*args: object, **kwargs: object):
            seen.append(_blocked())
            return submit(*args, **kwargs)

        pool.submit = watched  # type: ignore[method-assign]
        in_worker = submit_held(pool, _blocked).result()
    assert {int(signal.SIGINT), int(signal.SIGTERM)} <= seen[0]
    assert _blocked() == before
    assert int(signal.SIGINT) not in in_worker and int(signal.SIGTERM) not in in_worker


def _nap(x: int) -> int:
    time.sleep(0.002)
    return x


@pytest.mark.parametrize("attempt", range(3))
def test_a_pool_left_by_an_exception_has_ended_its_manager_thread(attempt: int) -> None:
    """The pool's manager thread is waited for (MANAGER_JOIN_S) before the exception goes on: one
    still closing its pipe as the interpreter's exit woke it printed "OSError: Bad file descriptor"
    under a Ctrl-C's "interrupted" (CPython 3.11's `_python_exit`; CI, 1 run in ~20). `shutdown`
    forgets the thread, so it was never waited for."""
    from kernel_atlas.core.beside import process_pool

    with pytest.raises(KeyboardInterrupt), process_pool(2) as pool:
        [pool.submit(_nap, x) for x in range(200)]
        manager = pool._executor_manager_thread  # type: ignore[attr-defined]
        raise KeyboardInterrupt
    assert manager is not None and not manager.is_alive()
