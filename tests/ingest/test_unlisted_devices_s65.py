"""A GPU the trace's device table does not describe is an unknown GPU (campaigns AR 2, AN 4): it
takes no other device's name, SM count (so no occupancy) or peaks. Kineto's deviceProperties and
nsys's TARGET_INFO_GPU both reach `summary.trace_facts` and `efficiency.kernel_columns` as the
trace's device properties; the traces are written here, the values worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kernel_atlas.ingest.pipeline import ingest_trace

A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-80GB",
    "computeMajor": 8,
    "computeMinor": 0,
    "numSms": 108,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerMultiprocessor": 167936,
}
MI300X = {
    "id": 0,
    "name": "AMD Instinct MI300X",
    "computeMajor": 9,
    "computeMinor": 4,
    "numSms": 304,
    "maxThreadsPerMultiprocessor": 2048,
    "warpSize": 64,
}
# the fields summary.json keeps of an entry (`summary._DEVICE_FIELDS`), written out
A100_IN_SUMMARY = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-80GB",
    "numSms": 108,
    "computeMajor": 8,
    "computeMinor": 0,
    "warpSize": 32,
}


def _trace(tmp_path: Path, props: list[dict[str, Any]], devices: list[int | None], grid: int) -> Any:
    """One step [1000, 1200] on thread 1; per entry of `devices` a 2 µs launch and a 10 µs kernel
    of `grid` × 256 threads, 32 registers each and no shared memory, on that device (None: pid "CUDA" and no `device` arg, as old Kineto
    wrote when it could not tell)."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000, "dur": 200}
    ]
    for k, device in enumerate(devices):
        corr, at = 10 + k, 1010 + 40 * k
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": at,
                "dur": 2,
                "args": {"correlation": corr},
            }
        )
        args = {
            "correlation": corr,
            "stream": 7,
            "grid": [grid, 1, 1],
            "block": [256, 1, 1],
            "registers per thread": 32,
            "shared memory": 0,
        }
        if device is not None:
            args["device"] = device
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{k}",
                "pid": "CUDA" if device is None else device,
                "tid": 7,
                "ts": at + 10,
                "dur": 10,
                "args": args,
            }
        )
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": props, "traceEvents": events}))
    return ingest_trace(path, workers=1)


def _by_device(frame: Any) -> dict[Any, Any]:
    return {(None if d != d else int(d)): row for d, row in zip(frame["device"], frame.itertuples(), strict=True)}


def test_a_device_the_table_does_not_list_takes_no_other_gpus_identity(tmp_path: Path) -> None:
    # The table lists the A100 as device 0 only; kernels of 216 blocks × 256 threads run on 0 and 1.
    result = _trace(tmp_path, [A100], [0, 1], grid=216)
    rows = _by_device(result.frame)
    # device 0, the A100: 216 blocks / 108 SMs = 2 blocks per SM, 2 × 256 / 32 = 16 warps per SM;
    # an SM holds 8 such blocks (65,536 registers / (32 × 32 per warp) = 64 warps, 8 per block), but
    # the grid gives it 2: 2 × 256 of the SM's 2048 threads = 25 %
    assert rows[0].blocks_per_sm == 2.0 and rows[0].warps_per_sm == 16.0 and rows[0].max_blocks_per_sm == 8.0
    assert rows[0].est_occupancy_pct == 25.0
    # device 1 is no A100 of the table's: no SM count, so nothing per SM and no occupancy
    # (the old code took the table's only row: 2.0 blocks per SM and 25 % here too)
    for column in ("blocks_per_sm", "warps_per_sm", "max_blocks_per_sm", "est_occupancy_pct", "waves"):
        assert math.isnan(getattr(rows[1], column)), column
    # summary.json: the A100 describes device 0; device 1 is said to be unknown
    assert result.facts["gpus"] == [A100_IN_SUMMARY]
    assert result.facts["undescribed_devices"] == [1]


def test_a_trace_whose_only_device_is_unlisted_names_no_gpu(tmp_path: Path) -> None:
    # campaign AR 2 repro A: the table's A100 is device 0, the only kernel runs on device 1
    result = _trace(tmp_path, [A100], [1], grid=216)
    assert result.facts["gpus"] == []  # was [the A100]: its name and peaks for device 1
    assert result.facts["undescribed_devices"] == [1]
    assert math.isnan(result.frame["est_occupancy_pct"].iloc[0])


def test_a_device_the_trace_does_not_number_is_unknown(tmp_path: Path) -> None:
    # campaign AN 4: pid "CUDA", no `device` arg; the table lists an A100
    result = _trace(tmp_path, [A100], [None, None], grid=216)
    assert result.frame["device"].isna().all()
    assert result.facts["gpus"] == []  # was [the A100]: a GPU no activity was said to run on
    assert result.facts["undescribed_devices"] == [None]
    assert result.frame["est_occupancy_pct"].isna().all()
    # span [1020, 1070] (kernels at 1020 and 1060, 10 µs each), busy 20 µs: said of the unknown device
    (device,) = result.facts["devices"]
    assert device["device"] is None and device["span_us"] == 50.0 and device["kernel_busy_us"] == 20.0


def test_listed_devices_and_a_rocm_trace_of_one_gpu_keep_their_gpu(tmp_path: Path) -> None:
    # every device listed: no `undescribed_devices`, the GPU as before
    listed = _trace(tmp_path, [A100, {**A100, "id": 1}], [0, 1], grid=216)
    assert listed.facts["gpus"] == [A100_IN_SUMMARY, {**A100_IN_SUMMARY, "id": 1}]
    assert "undescribed_devices" not in listed.facts
    assert listed.frame["est_occupancy_pct"].tolist() == [25.0, 25.0]
    # the table's only entry without an id: nothing says it is another device, it describes device 3
    no_id = _trace(tmp_path, [{k: v for k, v in A100.items() if k != "id"}], [3], grid=216)
    assert [g["name"] for g in no_id.facts["gpus"]] == ["NVIDIA A100-SXM4-80GB"]
    assert "undescribed_devices" not in no_id.facts and no_id.frame["est_occupancy_pct"].tolist() == [25.0]
    # ROCm numbers a kernel's device by its HSA agent (9: the MI300X traces), deviceProperties by the
    # HIP index: the one AMD GPU listed is the process's only GPU. 608 blocks / 304 CUs = 2 per CU;
    # 2 × 256 of 2048 threads = 25 % (the thread bound: ROCm records no registers)
    rocm = _trace(tmp_path, [MI300X], [9], grid=608)
    assert [g["name"] for g in rocm.facts["gpus"]] == ["AMD Instinct MI300X"]
    assert "undescribed_devices" not in rocm.facts
    assert rocm.frame["blocks_per_sm"].tolist() == [2.0] and rocm.frame["est_occupancy_pct"].tolist() == [25.0]
