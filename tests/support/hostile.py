"""Helpers of the hostile-input and output-safety tests: run `atlas` (in this process or as a
real process) and check the bad-input contract — exit code 2, exactly one line naming the file
and the problem, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app

ATLAS = [sys.executable, "-c", "from kernel_atlas.cli import main; main()"]
_runner = CliRunner()


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def cli(*args: object) -> Outcome:
    """`atlas ARGS` in this process (fast; stdout and stderr apart)."""
    result = _runner.invoke(app, [str(a) for a in args])
    return Outcome(result.exit_code, result.stdout, result.stderr)


def atlas(*args: object, cwd: Path | None = None, timeout: float = 300) -> Outcome:
    """`atlas ARGS` as its own process (what a user runs: locks, signals and file descriptors are real)."""
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("ATLAS_DEBUG", None)
    done = subprocess.run([*ATLAS, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return Outcome(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(outcome: Outcome, *needles: str) -> str:
    """Exit code 2 and one line on stderr holding every needle; returns the line."""
    assert outcome.code == 2, outcome.output
    assert "Traceback" not in outcome.output and "internal error" not in outcome.output, outcome.output
    lines = outcome.lines()
    assert len(lines) == 1, outcome.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
