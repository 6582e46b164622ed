"""(Needs the wiring of /tmp/bd1_ranks_wiring.patch.) `atlas report` reads the recorded event
waits of the host events: campaign BD's c8, stream 20 idle 20 µs for the host and 250 µs held by
the recorded wait; K2's delay 5 µs (see test_idle_event_wait_bd1.py for the derivation)."""

from __future__ import annotations

from pathlib import Path

from kernel_atlas.report.build import build_report
from tests.analysis.test_idle_event_wait_bd1 import ADD, _Trace


def test_the_report_splits_a_gap_at_a_recorded_wait(tmp_path: Path) -> None:
    trace = _Trace()
    trace.held(10, 300, 5)
    out, _ = trace.ingest(tmp_path, 400)
    waits = build_report(out).waits
    rows = waits.breakdown[waits.breakdown["stream"] == 20].set_index("category")
    assert rows["idle_us"].to_dict() == {"host_wait": 20.0, "kernel_wait": 0.0, "other": 250.0}
    stats = waits.launches[waits.launches["level"] == "kernel"].set_index("key")
    assert stats.loc[ADD, "delay_max_us"] == 5.0
