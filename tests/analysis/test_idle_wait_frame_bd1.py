"""The frame a host wait is credited to (`wait_frame`, idle_causes.parquet) where no range encloses
the whole wait: the range of the launching thread that began during it and covers the most of it,
where that is at least half of it — the whole gap then counts under that frame —, else `between
ops` (docs/outputs.md `wait_frame`, docs/waits.md; campaign BD, class 4). Values derived by hand
from the event times written below (µs, relative to B)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.analysis.waits import analyse_waits
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels

B = 1_000_000.0
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85021163520, "computeMajor": 9, "numSms": 132}


def _x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    pid, tid = (0, 7) if cat in ("kernel", "gpu_memcpy", "cuda_sync") else (1, 1)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": B + ts, "dur": dur, "args": args}


def _item_sync_trace(heavy: tuple[float, float]) -> list[dict]:
    """Campaign BD's c11: aten::mm [10, 40] launches a GEMM (at 20) that runs [35, 335] on stream
    7; aten::item [50, 400] > aten::_local_scalar_dense [55, 395] copies 4 bytes to the host
    (cudaMemcpyAsync at 60, the copy [336, 338]) and waits in cudaStreamSynchronize [72, 340]
    (its Stream Sync). Then aten::cpu_heavy over `heavy` (start, duration), and aten::mm [810, 840]
    launches the second GEMM at 820, which runs [835, 935]."""
    gpu = {"device": 0, "stream": 7, "context": 1}
    return [
        _x("cpu_op", "aten::mm", 10, 30, **{"External id": 1}),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 10, **{"External id": 1, "correlation": 1}),
        _x("kernel", "ampere_sgemm_128x64_nn", 35, 300, **{"External id": 1, "correlation": 1, **gpu}),
        _x("cpu_op", "aten::item", 50, 350, **{"External id": 2}),
        _x("cpu_op", "aten::_local_scalar_dense", 55, 340, **{"External id": 3}),
        _x("cuda_runtime", "cudaMemcpyAsync", 60, 10, **{"External id": 3, "correlation": 2}),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 336, 2,
           **{"External id": 3, "correlation": 2, "bytes": 4, **gpu}),
        _x("cuda_runtime", "cudaStreamSynchronize", 72, 268, **{"External id": 3, "correlation": 3}),
        _x("cuda_sync", "Stream Sync", 72, 268, cuda_sync_kind="Stream Sync", correlation=3, **gpu),
        _x("cpu_op", "aten::cpu_heavy", heavy[0], heavy[1], **{"External id": 4}),
        _x("cpu_op", "aten::mm", 810, 30, **{"External id": 5}),
        _x("cuda_runtime", "cudaLaunchKernel", 820, 10, **{"External id": 5, "correlation": 4}),
        _x("kernel", "ampere_sgemm_128x64_nn", 835, 100, **{"External id": 5, "correlation": 4, **gpu}),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("heavy", "frame"),
    [
        # [410, 800] covers 390 µs of the wait [338, 820] (482 µs): more than half (241)
        ((410.0, 390.0), "aten::cpu_heavy"),
        # [600, 800] covers 200 µs of it, the most of any range beginning in it, yet under half
        ((600.0, 200.0), "between ops"),
    ],
)
def test_a_frame_covering_most_of_a_wait_is_credited_with_the_whole_gap(
    tmp_path: Path, heavy: tuple[float, float], frame: str
) -> None:
    """The device is idle from the copy's end (338) to the second GEMM's start (835): a 497 µs
    gap, a host wait (its launch at 820 came after 338). The wait for the frame is [338, 820]; no
    range encloses it (aten::item ends at 400, aten::mm begins at 810). Of the ranges beginning
    in it — aten::cpu_heavy, aten::mm (810 → 820: 10 µs) — aten::cpu_heavy covers the most; the
    whole 497 µs gap is credited to it where it covers at least half of the wait, else to `between
    ops`."""
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": _item_sync_trace(heavy)}))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    kernels = load_kernels(out)
    second = kernels[kernels["ts_us"] == B + 835]
    assert second["wait_frame"].astype(str).tolist() == [frame]
    assert kernels["wait_frame"].notna().sum() == 1  # the only host wait
    causes = analyse_waits(kernels).causes
    assert causes[["frame", "gaps", "idle_us", "pct"]].values.tolist() == [[frame, 1, 497.0, 100.0]]
