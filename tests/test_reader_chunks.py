"""Chunked event decoding gives exactly the events of a one-piece decode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest import reader
from kernel_atlas.ingest.pipeline import ingest_trace
from tests.conftest import trace_path


def _events(path: Path, chunk: int) -> list:
    trace = reader.read_trace(path)
    return [e for part in trace.event_chunks(chunk) for e in part]


@pytest.mark.parametrize("chunk", [1, 777, 4096, 1 << 20])
def test_chunks_reassemble_the_trace(chunk: int) -> None:
    path = trace_path("h100_bert_small_infer")
    whole = _events(path, 1 << 40)
    assert _events(path, chunk) == whole
    assert len(whole) == 2551


def test_boundary_inside_nested_args_is_skipped(tmp_path: Path) -> None:
    # args holding a list of objects contain '}, {"' that is not an event boundary
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1,
            "args": {"groups": [{"a": i}, {"b": i}, {"c": {"d": [{"e": 1}, {"f": 2}]}}]},
        }
        for i in range(200)
    ]
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"traceEvents": events}))
    for chunk in (1, 50, 333, 10_000):
        got = _events(path, chunk)
        assert [e.name for e in got] == [f"op{i}" for i in range(200)]


def test_small_chunks_change_nothing_downstream(monkeypatch: pytest.MonkeyPatch) -> None:
    path = trace_path("h100_vit_image_classify_infer")
    whole = ingest_trace(path).frame
    monkeypatch.setattr(reader, "CHUNK_BYTES", 5000)
    monkeypatch.setattr(reader.RawTrace.event_chunks, "__defaults__", (5000,))
    chunked = ingest_trace(path).frame
    assert whole.astype(str).equals(chunked.astype(str))
