"""The package layers (pyproject.toml's import-linter contract): each imports only those after it,
so `python -m pytest` checks them too."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("importlinter")
    command = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    env_path = {"PYTHONPATH": str(cwd)}
    return subprocess.run([command], cwd=cwd, capture_output=True, text=True, env=env_path, timeout=300)


def test_the_layers_are_kept() -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """The contract can fail: a copy of the package where core imports report is refused."""
    shutil.copytree(REPO / "kernel_atlas", tmp_path / "kernel_atlas", symlinks=True)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    bad = tmp_path / "kernel_atlas" / "core" / "upward.py"
    bad.write_text(
        textwrap.dedent('"""An import from the bottom layer to the top."""\n\nimport kernel_atlas.report.units\n')
    )
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "kernel_atlas.core.upward -> kernel_atlas.report.units" in result.stdout
