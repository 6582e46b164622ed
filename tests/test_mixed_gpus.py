"""Traces of different GPUs ingested into one run: the report says whose peaks it used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import trace_path
from tests.hostile import cli


def test_report_names_the_gpus_costed_against_another_gpus_peaks(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for stem in ("a100_triton_compile_tiny", "h100_bert_small_infer"):  # A100-PG509-200, H100 80GB HBM3
        shutil.copy(trace_path(stem), traces)
    assert cli("ingest", traces, "-o", tmp_path / "run", "-q").code == 0
    result = cli("report", tmp_path / "run")
    assert result.code == 0
    printed = " ".join(result.stdout.split())
    assert "device NVIDIA A100 SXM4 80GB" in printed
    assert "some traces ran on another GPU (NVIDIA H100 80GB HBM3)" in printed
    assert json.loads((tmp_path / "run" / "report.json").read_text())["other_gpus"] == ["NVIDIA H100 80GB HBM3"]

    # one trace: nothing to say
    assert cli("ingest", trace_path("h100_bert_small_infer"), "-o", tmp_path / "one", "-q").code == 0
    result = cli("report", tmp_path / "one")
    assert result.code == 0 and "another GPU" not in result.stdout
    assert json.loads((tmp_path / "one" / "report.json").read_text())["other_gpus"] == []
