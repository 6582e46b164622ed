"""A capture folder's file that holds no profiler event (host or GPU) is no capture trace: TraceLens writes
`execution_details.json` (a list of {file, batch_size, mode}) beside its capture traces, and every
ingest warned "execution_details.json: no stream capture in this trace" (campaign AT 5)."""

from __future__ import annotations

import json
from pathlib import Path

from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support import graph_synth as synth
from tests.support.traces import trace_path


def test_a_file_of_no_trace_events_in_a_capture_folder_is_left_out_said(tmp_path: Path) -> None:
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    (folder / "bs_32_rank0.json.gz").write_bytes(trace_path(synth.CAPTURE).read_bytes())
    details = [{"file": "bs_32_rank0.json.gz", "batch_size": 32, "mode": "FULL"}]
    (folder / "execution_details.json").write_text(json.dumps(details))
    result = ingest_paths([trace_path(synth.REPLAY)], captures=[folder])
    assert result.facts["traces"][0]["graphs"]["matched_to"] == {"bs_32_rank0.json.gz graph 1 (capture_32_DECODE)": 1}
    assert not [w for w in result.warnings if "execution_details.json: no stream capture" in w]
    assert (
        "capture folders: execution_details.json left out: no profiler events in them (not a trace)" in result.warnings
    )


def test_a_capture_trace_named_on_its_own_without_a_capture_is_still_said(tmp_path: Path) -> None:
    # a file given by name is read as the capture trace it was given as: no capture in it is said
    result = ingest_paths([trace_path(synth.REPLAY)], captures=[trace_path("a100_cudagraph_rank0")])
    assert any("no stream capture in this trace" in w for w in result.warnings)
