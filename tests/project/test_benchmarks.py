"""Every script in benchmarks/ starts: `--help` prints its usage and exits 0 (a moved module
or a renamed function breaks a benchmark long before anyone runs it again)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_benchmark_prints_its_usage(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert script.name in result.stdout or "usage" in result.stdout.lower() or "python benchmarks/" in result.stdout


def _own_imports(script: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every import of this project's code in the script, lazy ones included."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in ("kernel_atlas", "tests"):
                found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] in ("kernel_atlas", "tests")]
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_what_a_benchmark_imports_of_the_project_exists(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports inside functions run only when the benchmark does: each is resolved here."""
    monkeypatch.syspath_prepend(str(REPO))
    for module, name in _own_imports(script):
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or ModuleNotFoundError


def test_the_ingest_benchmark_samples_memory_without_slowing_what_it_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timed runs sample RSS from /proc/PID/statm (counters: the measured process never waits
    for them); PSS, whose smaps_rollup walk stalled a growing process (the decode limit took
    4.84 s instead of 2.45 s in stop 46), only in an untimed run that reports nothing else."""
    pytest.importorskip("msgspec")
    if not Path("/proc/self/statm").exists():
        pytest.skip("no /proc here")
    monkeypatch.syspath_prepend(str(REPO))
    bench = importlib.import_module("benchmarks.ingest_bench")
    child = [
        sys.executable,
        "-c",
        "import time; b = bytearray(200 << 20); b[::4096] = b'x' * (50 << 10); time.sleep(0.6)",
    ]
    timed = bench.run_child(child)
    assert timed["peak_rss_mb"] >= 200 and timed["peak_rss_exact_mb"] >= 200
    assert timed["peak_rss_mb"] < 400  # one Python and its 200 MB
    assert "peak_pss_mb" not in timed and timed["wall_s"] >= 0.6
    untimed = bench.run_child(child, pss=True)
    assert set(untimed) == {"peak_pss_mb"} and 200 <= untimed["peak_pss_mb"] < 400
