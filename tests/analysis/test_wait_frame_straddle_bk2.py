"""The frame a host wait is credited to (`wait_frame`, `wait_module`, idle_causes.parquet) where no
range encloses the whole wait: the range of the launching thread that covers the most of it —
its overlap with the wait, whatever its start —, where that is at least half of it (docs/outputs.md
`wait_frame`, docs/waits.md; campaign BK, class 2). A CPU-heavy op begun while the queued kernel
still ran, ending before the next launch, was put `between ops` because only ranges beginning in
the wait were looked at. Values derived by hand from the event times written below (µs,
relative to B)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.analysis.waits import analyse_waits
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels

B = 1_000_000.0
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85021163520, "computeMajor": 9, "numSms": 132}


def _x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    pid, tid = (0, 7) if cat == "kernel" else (1, 1)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": B + ts, "dur": dur, "args": args}


def _trace(middle: list[dict]) -> list[dict]:
    """aten::add [0, 10] launches K1 (at 2), which runs [8, 20] on stream 7; then the `middle`
    ranges on the same thread; aten::add [303, 310] launches K2 at 305, which runs [312, 317].
    The device is idle from 20 to 312: a 292 µs gap, a host wait (K2's launch at 305 came after
    20); the wait for the frame is [20, 305], 285 µs, half of it 142.5 µs. No range encloses it
    (the first aten::add ends at 10, the second begins at 303)."""
    gpu = {"device": 0, "stream": 7, "context": 1}
    return [
        _x("cpu_op", "aten::add", 0, 10, **{"External id": 1}),
        _x("cuda_runtime", "cudaLaunchKernel", 2, 3, **{"External id": 1, "correlation": 1}),
        _x("kernel", "elementwise_kernel", 8, 12, **{"External id": 1, "correlation": 1, **gpu}),
        *middle,
        _x("cpu_op", "aten::add", 303, 7, **{"External id": 9}),
        _x("cuda_runtime", "cudaLaunchKernel", 305, 3, **{"External id": 9, "correlation": 9}),
        _x("kernel", "elementwise_kernel", 312, 5, **{"External id": 9, "correlation": 9, **gpu}),
    ]  # fmt: skip


def _heavy(ts: float, dur: float) -> dict:
    return _x("cpu_op", "aten::cpu_heavy", ts, dur, **{"External id": 2})


def _module(ts: float, dur: float) -> dict:
    return _x("python_function", "nn.Module: Block_0", ts, dur, **{"Python id": 1, "Python parent id": None})


def _light(ts: float, dur: float) -> dict:
    return _x("cpu_op", "aten::cpu_light", ts, dur, **{"External id": 3})


@pytest.mark.parametrize(
    ("middle", "frame", "module"),
    [
        # [15, 300] began 5 µs before the device went idle: it covers [20, 300], 280 of the 285
        pytest.param([_heavy(15, 285)], "aten::cpu_heavy", None, id="straddling-most"),
        # the control: begun at 25, after the device went idle, it covers [25, 300], 275
        pytest.param([_heavy(25, 275)], "aten::cpu_heavy", None, id="inside-most"),
        # [15, 165] covers [20, 165]: 145 µs, just over half (142.5)
        pytest.param([_heavy(15, 150)], "aten::cpu_heavy", None, id="straddling-half"),
        # [15, 155] covers [20, 155]: 135 µs, under half
        pytest.param([_heavy(15, 140)], "between ops", None, id="straddling-under-half"),
        # [15, 100] covers 80 µs; aten::cpu_light [110, 270], begun in the wait, covers 160: more
        pytest.param([_heavy(15, 85), _light(110, 160)], "aten::cpu_light", None, id="inside-covers-more"),
        # nn.Module: Block_0 [12, 300] holds aten::cpu_heavy [15, 300]: both cover [20, 300],
        # 280 µs; the innermost is named, under its module
        pytest.param([_module(12, 288), _heavy(15, 285)], "aten::cpu_heavy", "Block_0", id="nested-innermost"),
    ],
)
def test_the_range_covering_most_of_a_wait_whatever_its_start_is_credited(
    tmp_path: Path, middle: list[dict], frame: str, module: str | None
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": _trace(middle)}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    kernels = load_kernels(out)
    second = kernels[kernels["ts_us"] == B + 312]
    assert second["wait_frame"].astype(str).tolist() == [frame]
    assert [None if pd.isna(m) else str(m) for m in second["wait_module"]] == [module]
    assert kernels["wait_frame"].notna().sum() == 1  # the only host wait
    causes = analyse_waits(kernels).causes
    assert causes[["frame", "gaps", "idle_us", "pct"]].values.tolist() == [[frame, 1, 292.0, 100.0]]
