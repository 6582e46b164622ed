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


def test_an_idle_time_shown_as_none_has_no_shares() -> None:
    from kernel_atlas.report.terminal import brief_waits_lines

    device = {"idle_us": 0.01123046875, "host_wait_us": 0.0, "kernel_wait_us": 0.01123046875, "other_us": 0.0}
    (line,) = brief_waits_lines({"idle": {"devices": [device]}})
    assert line == "GPU idle 0.0 µs: host wait 0.0 µs, kernel wait 0.0 µs, other 0.0 µs"
    device = {"idle_us": 40.0, "host_wait_us": 30.0, "kernel_wait_us": 10.0, "other_us": 0.0}
    (line,) = brief_waits_lines({"idle": {"devices": [device]}})
    assert line == "GPU idle 40.0 µs: host wait 30.0 µs (75%), kernel wait 10.0 µs (25%), other 0.0 µs (0%)"


def test_a_rocm_occupancy_is_said_to_be_an_upper_bound(tmp_path: Path) -> None:
    trace = trace_path("mi300x_torch_compile_llama_block")
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    result = cli("report", tmp_path / "run")
    assert result.code == 0
    printed = " ".join(result.stdout.split())
    assert "est. achieved occupancy" in printed
    assert "(an upper bound: the trace records no registers)" in printed
    (device,) = json.loads((tmp_path / "run" / "report.json").read_text())["efficiency"]["devices"]
    assert device["occupancy_upper_bound"] is True
    # a CUDA trace's occupancy is no upper bound
    assert cli("ingest", trace_path("h100_bert_small_infer"), "-o", tmp_path / "bert", "-q").code == 0
    assert cli("report", tmp_path / "bert").code == 0
    (device,) = json.loads((tmp_path / "bert" / "report.json").read_text())["efficiency"]["devices"]
    assert device["occupancy_upper_bound"] is False
