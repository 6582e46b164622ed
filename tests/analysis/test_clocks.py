"""Host and GPU clocks that disagree: launch-to-start delays are not shown, and the report says
what else it cannot be sure of. Four launches at 10, 110, 210, 310 µs (2 µs calls); their
kernels really run 100 µs from 35, 135, 235 and 400 on one stream: delays 25, 25, 25, 90."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from tests.support.hand_built import launch_and_kernel

STARTS = (35, 135, 235, 400)


def _report(tmp_path: Path, offset: float) -> tuple[dict, pd.DataFrame]:
    """The report of the trace with every GPU time written `offset` µs early (the GPU's clock behind)."""
    events = []
    for i, start in enumerate(STARTS):
        events += launch_and_kernel(10 + 100 * i, i + 1, i + 1, "k", start - offset, 100)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    report = build_report(out)
    return json.loads((out / "report.json").read_text()), report.waits.launches


def test_clocks_that_agree_show_the_delays(tmp_path: Path) -> None:
    facts, launches = _report(tmp_path, 0.0)
    assert facts["launches"]["delay_p50_us"] == 25.0 and "clocks" not in facts["launches"]
    assert facts["trust"]["clocks"] is None
    assert launches.loc[launches["level"] == "kernel", "delay_max_us"].tolist() == [90.0]


def test_a_gpu_clock_behind_hides_the_delays(tmp_path: Path) -> None:
    # 40 µs behind: delays −15, −15, −15, 50 — three of four kernels start before their launch
    facts, launches = _report(tmp_path, 40.0)
    assert facts["launches"]["delay_p50_us"] is None
    (clock,) = facts["launches"]["clocks"]
    assert (clock["gpu_clock"], clock["activities"], clock["of"], clock["by_us"]) == ("behind", 3, 4, 15.0)
    assert (
        "3 of 4 launched GPU activities start before their launch call (by up to 15.0 µs)" in facts["trust"]["clocks"]
    )
    assert launches[["delay_mean_us", "delay_p50_us", "delay_max_us"]].isna().all().all()


def test_a_start_long_after_its_launch_is_no_clock_claim(tmp_path: Path) -> None:
    """Every GPU time written 1 s late: the first kernel, on an idle stream, starts 1,000,025 µs
    after its launch, the others look queued behind it. An event wait or work the trace does not
    record delays a start as much (vLLM's profiler started while a step still ran on the GPU: one
    start 7.8 ms late), so nothing is claimed: the delays are shown."""
    facts, _ = _report(tmp_path, -1_000_000.0)
    assert "clocks" not in facts["launches"] and facts["trust"]["clocks"] is None
    assert facts["launches"]["delay_p50_us"] == pytest.approx(1_000_025.0)  # delays 1,000,025 ×3 and 1,000,090


def test_one_early_start_is_no_clock_claim(tmp_path: Path) -> None:
    """Four launches at 10, 110, 210, 310 µs onto an idle stream; the kernels start 25 µs after the
    first three and 3 µs before the last: one activity of four starts early, an outlier — not the
    majority of idle-stream launches a GPU clock behind would make early. Delays 25, 25, 25, −3."""
    events = []
    for i, start in enumerate((35, 135, 235, 307)):
        events += launch_and_kernel(10 + 100 * i, i + 1, i + 1, "k", start, 50)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    facts = json.loads((out / "report.json").read_text())
    assert "clocks" not in facts["launches"] and facts["trust"]["clocks"] is None
    assert facts["launches"]["delay_p50_us"] == 25.0


def test_ranks_analysed_together_keep_their_own_clocks(tmp_path: Path) -> None:
    """Two small ranks analysed as one batch: rank 1's GPU clock runs 40 µs behind, rank 0's
    agrees. Each rank's facts say so of it alone — rank 0 keeps its 25 µs median delay — and the
    trust line names rank 1 (the folded facts of several ranks had lost the checks)."""
    from tests.support.hostile import cli

    for rank, offset in ((0, 0.0), (1, 40.0)):
        events = []
        for i, start in enumerate(STARTS):
            events += launch_and_kernel(10 + 100 * i, i + 1, i + 1, "k", start - offset, 100)
        doc = {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert cli("ingest", tmp_path / "rank0.json", tmp_path / "rank1.json", "-o", out, "-q").code == 0
    assert cli("report", out).code == 0
    facts = json.loads((out / "report.json").read_text())
    per_rank = {r["rank"]: r for r in facts["launches"]["per_rank"]}
    assert facts["trust"]["clocks"].startswith("the host and GPU clocks disagree (rank 1: 3 of 4 launched")
    assert per_rank[0]["delay_p50_us"] == 25.0 and "clocks" not in per_rank[0]
    assert per_rank[1]["delay_p50_us"] is None
    assert [(c["gpu_clock"], c["activities"], c["by_us"]) for c in per_rank[1]["clocks"]] == [("behind", 3, 15.0)]


def test_several_idle_stream_starts_all_late_are_a_clock_ahead(tmp_path: Path) -> None:
    """Launches 2 s apart onto an idle stream, each kernel written 1 s late (start 1,000,025 µs
    after its call): three of three idle-stream starts at least 1 ms late — what a GPU clock ahead
    gives, not one unrecorded wait — claimed, and the delays hidden (stop 65: one such start alone
    is no claim, above)."""
    events = []
    for i in range(3):
        call = 10 + 2_000_000 * i
        events += launch_and_kernel(call, i + 1, i + 1, "k", call + 1_000_025, 100)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    facts = json.loads((out / "report.json").read_text())
    (clock,) = facts["launches"]["clocks"]
    assert (clock["gpu_clock"], clock["activities"], clock["by_us"]) == ("ahead", 3, pytest.approx(1_000_025.0))
    assert (
        "every one of 3 GPU activities launched onto an idle stream starts 1,000,025.0 µs" in facts["trust"]["clocks"]
    )
