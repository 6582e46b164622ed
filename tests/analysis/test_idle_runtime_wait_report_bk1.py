"""(Needs the wiring of host_events_wiring.patch: `host_events_with_stream_waits` also loads the
host events of a trace whose waits are recorded only as runtime calls.) `atlas report` splits
stream 20's gap at the launch of a kernel held by a hipStreamWaitEvent / cudaStreamWaitEvent:
20 µs of host wait and 250 µs held; the add's delay 5 µs (derivation in
test_idle_runtime_wait_bk1.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from tests.analysis.test_idle_runtime_wait_bk1 import ADD, _held, _variant


@pytest.mark.parametrize("kind", ["rocm_runtime", "cuda_runtime", "cuda_sync"])
def test_the_report_splits_a_gap_at_a_wait_recorded_as_runtime_calls(tmp_path: Path, kind: str) -> None:
    device, events = _variant(kind, _held())
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [device], "traceEvents": events}))
    write_outputs(ingest_paths([trace]), tmp_path / "out")
    waits = build_report(tmp_path / "out").waits
    rows = waits.breakdown[waits.breakdown["stream"] == 20].set_index("category")
    assert rows["idle_us"].to_dict() == {"host_wait": 20.0, "kernel_wait": 0.0, "other": 250.0}
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, "delay_max_us"] == 5.0
