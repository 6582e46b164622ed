"""A ROCm run's graph findings speak of HIP graphs (campaign AI 6): the MI210 trace's launch-bound
stretches were "CUDA-graph N short kernels"."""

from __future__ import annotations

import json
from pathlib import Path

from kernel_atlas.analysis.findings import graph_word
from tests.support.hostile import cli
from tests.support.traces import trace_path


def test_graph_word_follows_the_runs_runtimes() -> None:
    assert graph_word(["rocm"]) == "HIP"
    assert graph_word(["rocm", "rocm"]) == "HIP"
    assert graph_word(["cuda"]) == "CUDA"
    assert graph_word(["cuda", "rocm"]) == "CUDA/HIP"
    assert graph_word(["unknown"]) == "CUDA"  # nothing known: the name most readers know
    assert graph_word(["rocm", "unknown"]) == "HIP"


def test_a_rocm_trace_finds_hip_graph_candidates(tmp_path: Path) -> None:
    trace = trace_path("mi210_gpu_only")  # skips where the shared traces are absent
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    assert cli("report", tmp_path / "run").code == 0
    findings = json.loads((tmp_path / "run" / "report.json").read_text())["findings"]
    graphs = [f["what"] for f in findings if f["kind"] == "launch_bound"]
    assert graphs and all(w.startswith("HIP-graph ") for w in graphs), graphs
