"""Traces of different GPUs ingested into one run: the report says whose peaks it used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.hostile import cli
from tests.support.traces import trace_path


def test_report_names_the_gpus_costed_against_another_gpus_peaks(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for stem in ("a100_triton_compile_tiny", "h100_bert_small_infer"):  # A100-PG509-200 (40GB SXM4), H100 80GB HBM3
        shutil.copy(trace_path(stem), traces)
    assert cli("ingest", traces, "-o", tmp_path / "run", "-q").code == 0
    result = cli("report", tmp_path / "run")
    assert result.code == 0
    printed = " ".join(result.stdout.split())
    assert "device NVIDIA A100 SXM4 40GB" in printed
    assert "some traces ran on another GPU (NVIDIA H100 80GB HBM3)" in printed
    assert json.loads((tmp_path / "run" / "report.json").read_text())["other_gpus"] == ["NVIDIA H100 80GB HBM3"]

    # one trace: nothing to say
    assert cli("ingest", trace_path("h100_bert_small_infer"), "-o", tmp_path / "one", "-q").code == 0
    result = cli("report", tmp_path / "one")
    assert result.code == 0 and "another GPU" not in result.stdout
    assert json.loads((tmp_path / "one" / "report.json").read_text())["other_gpus"] == []


def test_one_trace_given_under_several_spellings_is_ingested_once(tmp_path: Path, monkeypatch) -> None:
    from kernel_atlas.ingest.fleet import expand_sources

    folder = tmp_path / "traces"
    folder.mkdir()
    trace = folder / "h100_bert_small_infer.json.gz"
    shutil.copy(trace_path("h100_bert_small_infer"), trace)
    (folder / "link.json.gz").symlink_to(trace)
    monkeypatch.chdir(tmp_path)
    spellings = ["traces/h100_bert_small_infer.json.gz", str(trace), "traces/../traces/h100_bert_small_infer.json.gz"]
    assert expand_sources([*spellings, "traces", "traces/link.json.gz"]) == ["traces/h100_bert_small_infer.json.gz"]
    assert cli("ingest", *spellings, "-o", tmp_path / "run", "-q").code == 0
    assert sorted(p.name for p in (tmp_path / "run" / "kernels.parquet").iterdir()) == ["rank=0"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["traces"]) == 1 and summary["traces"][0]["kernels"] == 60  # the trace's 60 kernels, once
