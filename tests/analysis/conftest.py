"""Fixtures shared by the analysis tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.analysis.test_critical_path import TWO_STREAMS


@pytest.fixture
def two_streams(tmp_path: Path) -> Path:
    """tests/analysis/test_critical_path.py's TWO_STREAMS ingested (its critical path: 125 µs)."""
    trace = tmp_path / "two.json"
    trace.write_text(json.dumps({"traceEvents": TWO_STREAMS, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    folder = tmp_path / "two.atlas"
    write_outputs(ingest_paths([trace]), folder)
    return folder
