"""`python -m kernel_atlas` and `python -m kernel_atlas.cli` are the `atlas` command (campaign AN
noted that `python -m kernel_atlas.cli report …` printed nothing and exited 0: the module had no
main block and the package no __main__)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hostile import ATLAS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["kernel_atlas", "kernel_atlas.cli"])
def test_the_module_runs_the_command(module: str, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.startswith("atlas ")
    missing = tmp_path / "missing.json"
    run = subprocess.run([sys.executable, "-m", module, "ingest", str(missing)], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [f"error: {missing}: no such file"]


@pytest.mark.parametrize("args", [["--help"], ["-V"], ["report", "--help"]])
def test_help_and_version_whose_reader_left_end_quietly(args: list[str]) -> None:
    """`atlas --help | head -1`, `atlas -V | true` (campaign AP 1): the reader gone before the
    text is written ends as `atlas report OUT | head` does — 141 and nothing said (rich's console
    had exited 1 from the help; the version's write raised a traceback)."""
    child = subprocess.Popen(
        [*ATLAS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141
    assert err == ""
