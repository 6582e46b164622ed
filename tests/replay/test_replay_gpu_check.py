"""benchmarks/gpu_replay_check.py, as far as a machine without a GPU can try it: it refuses to
measure (exit 2, nothing written), its CPU dry run goes through every step and writes one JSON
line per result, and its traced-GEMM verdict is computed as stated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_replay_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_without_a_gpu_nothing_is_measured(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    done = _run("--out", str(out))
    assert done.returncode == 2 and "nothing measured, nothing written" in done.stderr
    assert not out.exists()


def test_cpu_dry_run_writes_each_step_as_a_json_line(tmp_path: Path) -> None:
    out = tmp_path / "dry.jsonl"
    # a zero budget: the bundled example is ingested, no replay is started, the summary counts them
    example = str(ROOT / "examples" / "h100_bert_small_infer.json.gz")
    done = _run("--cpu-dry-run", "--no-catalog", "--budget-s", "0", "--trace", example, "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["machine", "gemm_sanity", "summary"]
    assert lines[0]["device"] == "cpu" and "no GPU numbers" in lines[0]["gpu"]
    assert lines[2]["not_started_budget"] == 15  # the bundled example's replay targets


def test_traced_gemm_verdict() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from gpu_replay_check import traced_gemm_accuracy

    settings = {"traced_gemm_min_flops": 1e9, "traced_tolerance": 0.10}
    base = {"category": "gemm", "timed": "kernel", "check": "pass", "flops": 4e9}
    rows = [
        {**base, "ratio": 1.05},
        {**base, "ratio": 0.80},
        {**base, "ratio": 1.08},
        {**base, "ratio": 3.0, "flops": 5e8},  # under 1 GFLOP: not counted
        {**base, "ratio": 3.0, "timed": "stand-in"},  # not the traced kernel: not counted
    ]
    verdict = traced_gemm_accuracy(rows, settings)
    assert verdict["gemms"] == 3 and verdict["median_abs_deviation"] == pytest.approx(0.08)  # |0.05|, |0.2|, |0.08|
    assert verdict["passes"]
    assert not traced_gemm_accuracy([{**base, "ratio": 1.3}], settings)["passes"]
