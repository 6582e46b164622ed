"""Efficiency of a trace without CPU ops or annotations (campaign BU 1): the window is the span of
the launches stretched to the last GPU activity launched in it (docs/efficiency.md), else, with no
launch either, the GPU activities' own span. Values by hand from the hand-built traces: it had
been `{steps: [], devices: [], window_us: null}`, silently (mi210_gpu_only: no efficiency at all)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.traces import trace_path

MI210 = {
    "id": 0, "name": "AMD Instinct MI210", "totalGlobalMem": 68702699520, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 64,
    "sharedMemPerBlock": 65536, "numSms": 104, "maxSharedMemoryPerMultiProcessor": 65536,
}  # fmt: skip


def _trace(tmp_path: Path, launches: bool) -> Path:
    """Three hipLaunchKernel calls at 1000, 1100, 1200 (5 µs), each of a kernel 10 µs later of 50 µs,
    grid [208] block [256] on an MI210 (104 CUs); no CPU op, no annotation."""
    events: list[dict] = []
    for i, t0 in enumerate([1000.0, 1100.0, 1200.0]):
        geometry = {"grid": [208, 1, 1], "block": [256, 1, 1]}
        if launches:
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 100, "tid": 100, "ts": t0,
                 "dur": 5.0, "args": {"correlation": i + 1, "kernel": f"k{i}", **geometry, "shared memory": 0}}
            )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 1, "tid": 0, "ts": t0 + 10, "dur": 50.0,
             "args": {"device": 1, "stream": 0, "correlation": i + 1, "kind": "Dispatch Kernel", **geometry}}
        )  # fmt: skip
    path = tmp_path / "gpu_only.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [MI210], "traceEvents": events}))
    return path


def test_launches_without_cpu_ops_give_a_window(tmp_path: Path) -> None:
    eff = ingest_trace(_trace(tmp_path, launches=True)).facts["efficiency"]
    # the first launch starts at 1000; the last kernel launched ends at 1210 + 50 = 1260
    assert eff["window_us"] == [1000.0, 1260.0]
    [row] = eff["steps"]
    assert row["step"] is None and row["total_us"] == 260.0
    assert row["kernel_us"] == 150.0 and row["runtime_us"] == 15.0 and row["other_us"] == 95.0
    assert row["kernel_us_launched"] == 150.0
    [device] = eff["devices"]
    assert device["device"] == 1
    # 3 × 50 µs busy of 260 µs
    assert device["gpu_utilization_pct"] == pytest.approx(100 * 150 / 260)
    # 208 blocks on 104 CUs = 2 per CU ≥ 1 while each kernel runs: the SM efficiency is the busy share
    assert device["sm_efficiency_pct"] == pytest.approx(100 * 150 / 260)
    # 256 threads = 4 waves of 64; 32 waves a CU → 8 blocks fit, 2 are there: 2 · 256 / 2048
    assert device["achieved_occupancy_pct"] == pytest.approx(25.0)


def test_no_launches_either_the_gpu_span(tmp_path: Path) -> None:
    eff = ingest_trace(_trace(tmp_path, launches=False)).facts["efficiency"]
    # nothing on the host: the kernels' span, 1010 → 1260; none launched in it (no launch recorded)
    assert eff["window_us"] == [1010.0, 1260.0]
    [row] = eff["steps"]
    assert row["total_us"] == 250.0 and row["kernel_us"] == 150.0 and row["kernel_us_launched"] == 0.0
    [device] = eff["devices"]
    assert device["gpu_utilization_pct"] == pytest.approx(60.0)
    assert device["sm_efficiency_pct"] == pytest.approx(60.0)
    assert device["achieved_occupancy_pct"] == pytest.approx(25.0)


def test_mi210_gpu_only_has_efficiency() -> None:
    path = trace_path("mi210_gpu_only")
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    # by hand from the events: no CPU op or annotation; the window runs from the first launch of a
    # kernel to the last kernel's end, the busy time is the union of the kernels
    assert not [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "Operator")]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    corr = {e["args"]["correlation"] for e in kernels}
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in corr]
    lo, hi = min(e["ts"] for e in launches), max(e["ts"] + e["dur"] for e in kernels)
    busy, reach = 0.0, -1.0
    for start, end in sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels):
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    assert busy == pytest.approx(5343.37, abs=0.01)  # the campaign's hand figure
    eff = ingest_trace(path).facts["efficiency"]
    assert eff["window_us"] == pytest.approx([lo, hi])
    [device] = eff["devices"]
    assert device["gpu_utilization_pct"] == pytest.approx(100 * busy / (hi - lo), abs=1e-6)
    assert device["sm_efficiency_pct"] is not None and device["achieved_occupancy_pct"] is not None
