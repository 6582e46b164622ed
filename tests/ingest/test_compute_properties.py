"""Campaign BC class 4: a device table under the older `computeProperties` key (kineto's tb_plugin
test input gpu_metrics_input.json), in CUDA's own cudaDeviceProp names, is read as
deviceProperties where the trace has none — not "no entry of the trace's device table describes
it: no name, SM count or peaks". Values by hand from a trace written here."""

from __future__ import annotations

import json
from pathlib import Path

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths

V100_CUDA = {  # as gpu_metrics_input.json writes it
    "id": 0,
    "name": "Tesla V100-DGXS-32GB",
    "totalGlobalMem": 34084028416,
    "major": 7,
    "minor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiProcessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 98304,
    "multiProcessorCount": 80,
    "sharedMemPerBlockOptin": 98304,
}


def _trace(path: Path, **tables: object) -> Path:
    """aten::add launching one kernel of 160 blocks × 256 threads (32 registers, no shared memory)
    on device 0, 10 µs."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1000, "dur": 15,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1005, "dur": 4,
         "args": {"External id": 1, "correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "pid": 0, "tid": 7, "ts": 5000, "dur": 10,
         "args": {"External id": 1, "correlation": 1, "device": 0, "stream": 7, "grid": [160, 1, 1],
                  "block": [256, 1, 1], "registers per thread": 32, "shared memory": 0}},
    ]  # fmt: skip
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **tables}))
    return path


def _summary(trace: Path, out: Path) -> tuple[dict, object]:
    result = ingest_paths([trace])
    write_outputs(result, out)
    (facts,) = json.loads((out / "summary.json").read_text())["traces"]
    return facts, result


def test_compute_properties_name_the_gpu_and_its_sms(tmp_path: Path) -> None:
    """summary.json names the V100 with its 80 SMs (`multiProcessorCount`), compute 7.0 (`major`,
    `minor`); no device is undescribed; the kernel's 160 blocks over 80 SMs are 2 blocks per SM,
    and 256 threads × 2 blocks of the 2,048 threads a V100 SM holds 25 %."""
    facts, result = _summary(_trace(tmp_path / "c4.json", computeProperties=[V100_CUDA]), tmp_path / "out")
    (gpu,) = facts["gpus"]
    assert (gpu["name"], gpu["numSms"], gpu["computeMajor"], gpu["computeMinor"]) == ("Tesla V100-DGXS-32GB", 80, 7, 0)
    assert not facts.get("undescribed_devices")
    kernel = result.frame.iloc[0]
    assert kernel["blocks_per_sm"] == 2.0
    assert kernel["est_occupancy_pct"] == 25.0


def test_device_properties_win_over_compute_properties(tmp_path: Path) -> None:
    """Both tables: deviceProperties is the trace's (an A100 of 108 SMs), computeProperties unread."""
    a100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108, "computeMajor": 8, "computeMinor": 0}
    trace = _trace(tmp_path / "both.json", deviceProperties=[a100], computeProperties=[V100_CUDA])
    facts, _ = _summary(trace, tmp_path / "out")
    (gpu,) = facts["gpus"]
    assert (gpu["name"], gpu["numSms"]) == ("NVIDIA A100-SXM4-80GB", 108)
