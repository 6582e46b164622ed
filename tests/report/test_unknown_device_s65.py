"""An unknown GPU is said in words, never as Python's None and never as another device's GPU
(campaigns AR 2, AN 4): a device the trace does not number (Kineto's pid "CUDA" without a `device`
arg) and one its device table does not describe. Traces written here, values by hand."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kernel_atlas.report.efficiency_view import efficiency_facts, efficiency_lines
from kernel_atlas.report.units import device_time_line
from kernel_atlas.store.run import Run, TracedGpu
from tests.support.hostile import cli

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "numSms": 80}


def _write(path: Path, device: int | None) -> Path:
    """One step [1000, 1200]; a launch at 1020 (2 µs) of a 10 µs kernel at 1030 and one at 1100 of a
    3 µs kernel at 1115, on `device` (None: pid "CUDA", no `device` arg); the table lists a V100 as 0."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 1000, "dur": 200}
    ]
    for corr, (launch, ts, dur) in enumerate([(1020, 1030, 10), (1100, 1115, 3)], start=501):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": launch,
                "dur": 2,
                "args": {"correlation": corr},
            }
        )
        args: dict[str, Any] = {"correlation": corr, "stream": 7, "grid": [8, 1, 1], "block": [128, 1, 1]}
        if device is not None:
            args["device"] = device
        pid = "CUDA" if device is None else device
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": pid, "tid": 7, "ts": ts, "dur": dur, "args": args}
        )
    path.write_text(json.dumps({"deviceProperties": [V100], "traceEvents": events}))
    return path


def test_a_device_line_without_a_number_says_unknown() -> None:
    # span [1030, 1118] = 88 µs, busy 10 + 3 = 13 µs (14.8 %), idle 75 µs
    line = device_time_line({"rank": 0, "device": None, "span_us": 88.0, "busy_us": 13.0, "idle_us": 75.0})
    assert line == "rank 0 device unknown (the trace does not number it): busy 13.0 µs of 88.0 µs (14.8%), idle 75.0 µs"


def test_efficiency_says_what_it_leaves_out() -> None:
    trace = {
        "file": "t.json",
        "rank": 0,
        "gpus": [],
        "undescribed_devices": [2, None],
        "devices": [
            {"rank": 0, "device": 2, "kernel_busy_us": 4.0},
            {"rank": 0, "device": None, "kernel_busy_us": 13.0},
        ],
        "efficiency": {"steps": [], "devices": [{"device": 2}]},
    }
    notes = efficiency_facts({"traces": [trace]})["notes"]
    assert notes == [
        "t.json rank 0: unknown GPU on device 2 (no entry of the trace's device table describes it: no name, SM "
        "count or peaks): no occupancy or SM efficiency is estimated there, and the peaks a report costs its "
        "kernels against, if any, are another GPU's (--device chooses them)",
        "t.json rank 0: 13.0 µs of kernels ran on a device the trace does not number (no `device`): an unknown GPU, "
        "in no device's efficiency (GPU utilization, SM efficiency, occupancy)",
    ]
    assert [line.removeprefix("  note: ") for line in efficiency_lines(trace) if "note" in line] == notes


def test_an_unnumbered_device_through_the_commands(tmp_path: Path) -> None:
    trace = _write(tmp_path / "cuda.json", None)
    ingest = cli("ingest", trace, "-o", tmp_path / "o")
    assert ingest.code == 0, ingest.output
    assert "None" not in ingest.stdout
    assert "device unknown (the trace does not number it): span 88.0 µs, busy 13.0 µs" in " ".join(
        ingest.stdout.split()
    )
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["traces"][0]["gpus"] == [] and summary["traces"][0]["undescribed_devices"] == [None]
    report = cli("report", tmp_path / "o")
    assert report.code == 0, report.output
    text = " ".join(report.stdout.split())
    assert "device None" not in text and "V100" not in text  # no peaks of the table's V100
    assert "rank 0 device unknown (the trace does not number it): busy 13.0 µs of 88.0 µs (14.8%)" in text
    assert "13.0 µs of kernels ran on a device the trace does not number" in text
    facts = json.loads((tmp_path / "o" / "report.json").read_text())
    assert facts["traced_gpu"] is None
    assert facts["efficiency"]["notes"][-1].startswith("cuda.json rank 0: 13.0 µs of kernels ran on a device")


def test_an_unlisted_device_through_the_commands(tmp_path: Path) -> None:
    trace = _write(tmp_path / "one.json", 1)  # the table's V100 is device 0
    assert cli("ingest", trace, "-o", tmp_path / "o").code == 0
    report = cli("report", tmp_path / "o")
    text = " ".join(report.stdout.split())
    assert report.code == 0 and "V100" not in text, report.output  # no name nor peaks of device 0
    assert "the trace names no GPU: pass --device for peaks" in text
    assert "one.json rank 0: unknown GPU on device 1" in text


def test_the_runs_gpu_is_one_that_ran_its_kernels() -> None:
    # rank 0: a CPU-only trace, whose table lists the machine's V100; rank 1: kernels on device 1,
    # which its table does not describe. No trace describes a GPU that ran kernels: the report has
    # none (the old code took rank 0's V100 and costed rank 1 against its 900 GB/s)
    cpu_only = {"file": "a.json", "rank": 0, "gpu_activities": 0, "gpus": [V100]}
    unlisted = {"file": "b.json", "rank": 1, "gpu_activities": 2, "gpus": [], "undescribed_devices": [1]}
    run = Run(SimpleNamespace(summary={"traces": [cpu_only, unlisted]}))
    assert run.gpu == TracedGpu(None, None, None)
    # a described GPU that ran kernels is the run's, whichever trace comes first
    listed = {**unlisted, "gpus": [{"id": 1, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]}
    del listed["undescribed_devices"]
    run = Run(SimpleNamespace(summary={"traces": [cpu_only, listed]}))
    assert run.gpu == TracedGpu("NVIDIA H100 80GB HBM3", 132, None)
    # a run without GPU activities keeps the GPU its trace lists
    assert Run(SimpleNamespace(summary={"traces": [cpu_only]})).gpu == TracedGpu("Tesla V100-SXM2-16GB", 80, None)
