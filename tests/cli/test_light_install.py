"""The analysis side (ingest, classify, report) must not need torch, triton or flashinfer."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.traces import EXAMPLE


def test_analysis_never_imports_gpu_libraries(tmp_path) -> None:
    code = f"""
import sys
from pathlib import Path
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.classify.fill import fill_catalog
import kernel_atlas.cli
out = Path({str(tmp_path / "o")!r})
write_outputs(ingest_paths([{str(EXAMPLE)!r}]), out)
build_report(out)
heavy = sorted(m for m in ("torch", "triton", "flashinfer", "ray") if m in sys.modules)
assert not heavy, heavy
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_catalogs_ship_with_the_package() -> None:
    from kernel_atlas.core.paths import catalogs_dir

    names = {p.name for p in catalogs_dir().iterdir()}
    assert {
        "rules.toml",
        "launchers.toml",
        "taxonomy.toml",
        "kernels.json",
        "devices.toml",
        "dtypes.toml",
        "costs.toml",
    } <= names


def test_the_command_line_sets_numpys_page_advice_before_numpy_loads() -> None:
    """`atlas` turns off numpy's huge-page advice (cli.py says why) by the environment, which numpy
    reads once, when first imported: the command line must get there before anything imports it,
    and keep a value the user set."""
    code = """
import os, sys
import kernel_atlas.cli
assert "numpy" not in sys.modules, "kernel_atlas.cli imports numpy before setting NUMPY_MADVISE_HUGEPAGE"
print(os.environ["NUMPY_MADVISE_HUGEPAGE"])
"""
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    unset = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "0"
    chosen = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "NUMPY_MADVISE_HUGEPAGE": "1"}
    )
    assert chosen.stdout.strip() == "1", chosen.stderr
