"""Wide input (issue 27): a trace with thousands of devices, distinct kernel names or steps. Every
per-device, per-name and per-step stage works on whole columns; the numbers here are derived by
hand from the trace written in the test (the time bounds are measured by
benchmarks/wide_input.py, not here)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.hostile import cli

DEVICES = 1_500


def _kernel(i: int, device: int, ts: float, dur: float, name: str = "k") -> dict:
    args = {"device": device, "stream": 7, "correlation": i + 1}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur, "args": args}


def test_every_device_of_a_wide_trace_has_its_own_facts(tmp_path: Path) -> None:
    # device d: two kernels of 5 µs, at 1000 + d and 1010 + d: busy 10 µs, idle 5 µs, one gap
    events = [_kernel(2 * d, d, 1000.0 + d, 5.0) for d in range(DEVICES)]
    events += [_kernel(2 * d + 1, d, 1010.0 + d, 5.0) for d in range(DEVICES)]
    trace = tmp_path / "wide.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "wide.atlas"
    assert cli("ingest", trace, "-o", out, "-q").code == 0
    devices = json.loads((out / "summary.json").read_text())["traces"][0]["devices"]
    assert [d["device"] for d in devices] == list(range(DEVICES))
    assert {(d["span_us"], d["busy_us"], d["idle_us"], tuple(d["streams"])) for d in devices} == {
        (15.0, 10.0, 5.0, (7,))
    }
    assert cli("report", out).code == 0
    idle = json.loads((out / "report.json").read_text())["idle"]["devices"]
    assert [d["device"] for d in idle] == list(range(DEVICES))
    # the 5 µs gap on each device: the launches are not in the trace, so not a host wait
    assert {(d["idle_us"], d["host_wait_us"] + d["kernel_wait_us"] + d["other_us"]) for d in idle} == {(5.0, 5.0)}


def test_distinct_kernel_names_are_each_labelled_and_listed(tmp_path: Path) -> None:
    names = [f"kern_{i}_x" for i in range(3_000)] + ["ncclKernel_AllReduce_RING_LL_Sum_float"]
    events = [_kernel(i, 0, 1000.0 + 10 * i, 2.0, name) for i, name in enumerate(names)]
    trace = tmp_path / "names.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "names.atlas"
    assert cli("ingest", trace, "-o", out, "-q").code == 0
    catalog = json.loads((out / "catalog.json").read_text())
    assert sorted(e["kernel_name"] for e in catalog) == sorted(names)
    labels = {e["kernel_name"]: e["op_mapping"] for e in catalog}
    assert labels["ncclKernel_AllReduce_RING_LL_Sum_float"] == "all_reduce"
    assert {labels[n] for n in names[:-1]} == {"unknown"}
    assert {e["call_stack"] for e in catalog} == {None}  # no launch, no stack: null, not NaN
