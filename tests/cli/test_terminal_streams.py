"""Whatever the terminal turns out to be (issue 27, stop 49's campaign): an ASCII or Latin-1
locale, no width, stdout full, closed or a pipe whose reader left, stdin closed under the MCP
server. Each ended in "internal error" (UnicodeEncodeError, OSError, BrokenPipeError,
AttributeError) or ran for ever (`COLUMNS=0`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import ATLAS, cli
from tests.support.traces import EXAMPLE


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("streams") / "out"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    return out


def _run(*args: object, env: dict[str, str] | None = None, **popen: Any) -> subprocess.CompletedProcess[bytes]:
    """`atlas ARGS` as its own process, its environment `env` over ours (COLUMNS 100, no ATLAS_DEBUG)."""
    base = {k: v for k, v in os.environ.items() if k not in ("ATLAS_DEBUG", "PYTHONIOENCODING")}
    merged = {**base, "COLUMNS": "100", **(env or {})}
    popen.setdefault("capture_output", "stdout" not in popen)
    return subprocess.run([*ATLAS, *map(str, args)], env=merged, timeout=120, **popen)


def _clean(done: subprocess.CompletedProcess[bytes]) -> None:
    err = (done.stderr or b"").decode("utf-8", "replace")
    assert "Traceback" not in err and "internal error" not in err, err


ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}


def test_an_ascii_locale_gets_substitutes(output: Path) -> None:
    """The report prints µs: in an ASCII locale it is `us`, and the command succeeds."""
    done = _run("report", output, env=ASCII_LOCALE)
    _clean(done)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("ascii")  # every byte ASCII
    assert " us" in text and "µ" not in text


def test_a_latin1_stdout_gets_substitutes(output: Path) -> None:
    done = _run("report", output, "--full", env={"PYTHONIOENCODING": "latin-1"})
    _clean(done)
    assert done.returncode == 0, done.stderr
    done.stdout.decode("latin-1")


@pytest.mark.parametrize("columns", ["0", "1", "5"])
def test_a_terminal_without_width_is_laid_out_at_forty_cells(output: Path, columns: str) -> None:
    """`COLUMNS=0` cut a line to fit no cell for ever."""
    done = _run("report", output, env={"COLUMNS": columns})
    _clean(done)
    assert done.returncode == 0, done.stderr
    assert b"GPU time by category" in done.stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_stdout_is_one_line(output: Path) -> None:
    with open("/dev/full", "wb") as full:
        done = _run("report", output, stdout=full, stderr=subprocess.PIPE)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.strip().splitlines() == ["error: stdout: cannot write: no space left on the device"]


def test_a_reader_that_left_ends_the_command_quietly(output: Path) -> None:
    """`atlas report OUT | head`: the pipe's reader is gone before anything is written; the
    command ends as a Unix tool killed by SIGPIPE is reported (141), saying nothing."""
    child = subprocess.Popen(
        [*ATLAS, "report", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141
    assert err == ""


def test_a_stdout_closed_at_start_is_a_sink(output: Path) -> None:
    """`atlas report OUT >&-`: the report is written (its files), nothing shown."""
    (output / "report.json").unlink(missing_ok=True)
    done = _run("report", output, pass_fds=(), preexec_fn=lambda: os.close(1), stdout=None, stderr=subprocess.PIPE)
    _clean(done)
    assert done.returncode == 0, done.stderr
    assert (output / "report.json").is_file()


@pytest.mark.skipif(sys.platform != "linux", reason="file descriptors closed at start")
@pytest.mark.parametrize(("fd", "stream"), [(0, "stdin"), (1, "stdout")])
def test_the_mcp_server_with_a_closed_stream_is_one_line(output: Path, fd: int, stream: str) -> None:
    """stdin closed: Python opens its next file (the event loop's) as descriptor 0, which the
    wire then claimed — an OSError from epoll."""
    pytest.importorskip("mcp")
    done = subprocess.run(
        [*ATLAS, "mcp", "--root", str(output.parent)],
        preexec_fn=lambda: os.close(fd),
        stdin=None if fd == 0 else subprocess.DEVNULL,
        stdout=None if fd == 1 else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"},
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {stream}: closed"), err


def test_substitutes_and_width_floor() -> None:
    """What the locale cannot encode: the listed symbols as ASCII, anything else `?`; a console
    asked for no width lays out at 40 cells."""
    from kernel_atlas.report.console import FALLBACK, FittedConsole

    assert "5 µs → 3×, ≤ 2 … 漢".encode("ascii", FALLBACK) == b"5 us -> 3x, <= 2 ... ?"
    assert "µ".encode("latin-1", FALLBACK) == "µ".encode("latin-1")  # only what cannot be encoded
    assert FittedConsole(width=0).width == 40
    assert FittedConsole(width=1).width == 40
    assert FittedConsole(width=120).width == 120


def test_the_command_consoles_take_the_width_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's consoles are made at import: made while COLUMNS said 80, they printed at
    80 columns after COLUMNS said 200 (a test runner's worker sets COLUMNS before the import; a
    notebook or a long-lived process may change it after). A width given when made is kept."""
    from kernel_atlas.report.console import FittedConsole, terminal

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    console, fixed = terminal("stdout"), FittedConsole(width=100, height=30)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LINES", "50")
    assert (console.width, console.height) == (200, 50)
    assert (fixed.width, fixed.height) == (100, 30)
    monkeypatch.setenv("COLUMNS", "7")
    assert console.width == 40  # the floor holds


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_failed_command_says_only_its_error(tmp_path: Path) -> None:
    """A trace that earns a warning (a credential-shaped name, written redacted), then an
    output that cannot be written: exit 2 said the warning too — two lines. A failed command
    says its one error line; one that succeeds says its warnings at the end."""
    import gzip
    import json

    trace = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    kernel["name"] += " ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    path = tmp_path / "tok.json"
    path.write_text(json.dumps(trace))
    with open("/dev/full", "wb") as full:
        done = _run("ingest", path, "-o", tmp_path / "a", stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == ["error: stdout: cannot write: no space left on the device"]
    done = _run("ingest", path, "-o", tmp_path / "b")
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().splitlines() == [
        f"warning: {path}: 1 values shaped like credentials (tokens, keys) written as <redacted>"
    ]
