"""Peer-to-peer copies (campaign AR, class 3): a copy from one GPU to another moves its bytes once
over the GPU-to-GPU link, and is held against that link's bandwidth — not read and written in HBM
and held against HBM bandwidth, as an on-device copy is. Hand-built Kineto trace and Nsight
export; every expected value is worked out here by hand from the events below.

The device is an H100 SXM (deviceProperties / TARGET_INFO_GPU name `NVIDIA H100 80GB HBM3`):
NVLink 4 at 900 GB/s bidirectional, so 450 GB/s one way; HBM3 at 3.35 TB/s; host link PCIe Gen5
x16, 64 GB/s one way (https://www.nvidia.com/en-us/data-center/h100/, H100 SXM column)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "numSms": 132}


def _roofline(tmp_path: Path, trace: Path) -> pd.DataFrame:
    from kernel_atlas.report.build import build_report

    out = tmp_path / "run"
    write_outputs(ingest_paths([trace]), out)
    return build_report(out, None, tmp_path / "r.html").analysis.roofline


def _row(roofline: pd.DataFrame, name: str) -> pd.Series:
    rows = roofline[roofline["name"] == name]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def _copy(ts: float, corr: int, name: str, dur: float, nbytes: int) -> list[dict[str, Any]]:
    """A cudaMemcpyAsync on host thread 100 and its copy on device 0, stream 7 (`ts` + 10 µs)."""
    ids = {"correlation": corr, "External id": corr}
    runtime = {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 100, "tid": 100}
    args = {**ids, "device": 0, "stream": 7, "bytes": nbytes}
    return [
        {**runtime, "ts": ts, "dur": 4, "args": ids},
        {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": ts + 10, "dur": dur, "args": args},
    ]


def _kineto(path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100}
        | {"ts": 1000.0, "dur": 1000, "args": {"External id": 999}},
        *_copy(1100.0, 1, "Memcpy PtoP (Device -> Device)", 10.0, 2_000_000),
        *_copy(1300.0, 2, "Memcpy DtoD (Device -> Device)", 1.0, 1_000_000),
        *_copy(1500.0, 3, "Memcpy HtoD (Pinned -> Device)", 20.0, 640_000),
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": events}))
    return path


def test_a_kineto_peer_copy_moves_its_bytes_once_over_the_gpu_link(tmp_path: Path) -> None:
    roofline = _roofline(tmp_path, _kineto(tmp_path / "peer.json"))
    peer = _row(roofline, "Memcpy PtoP (Device -> Device)")
    # 2,000,000 B once over NVLink in 10 µs: 200 GB/s of 450; 2e6 / 450e9 s = 4.444 µs attainable
    assert peer["role"] == "main" and peer["bytes"] == 2_000_000
    assert peer["formula"] == "2000000 bytes over the GPU-to-GPU link"
    assert peer["achieved_gbps"] == pytest.approx(200.0)
    assert peer["peak_gbps"] == 450.0 and peer["peak_label"] == "peer link bandwidth"
    assert peer["attainable_us"] == pytest.approx(4.444444, rel=1e-6)
    assert peer["sol_pct"] == pytest.approx(44.44444, rel=1e-6)
    assert peer["headroom_us"] == pytest.approx(5.555556, rel=1e-6)  # 10 − 4.444
    assert peer["bound"] == "peer link"

    # an on-device copy still reads and writes HBM: 2 · 1,000,000 B in 1 µs = 2000 GB/s of 3350;
    # 2e6 / 3350e9 s = 0.597 µs, 59.7 % — under 4 µs but over half of it: memory, not latency
    local = _row(roofline, "Memcpy DtoD (Device -> Device)")
    assert local["bytes"] == 2_000_000 and local["formula"] == "1000000 bytes read + written"
    assert local["achieved_gbps"] == pytest.approx(2000.0) and local["peak_gbps"] == 3350.0
    assert local["sol_pct"] == pytest.approx(59.70149, rel=1e-6) and local["bound"] == "memory"

    # a host copy once over PCIe: 640,000 B in 20 µs = 32 GB/s of 64; 10 µs attainable, 50 %
    host = _row(roofline, "Memcpy HtoD (Pinned -> Device)")
    assert host["bytes"] == 640_000 and host["formula"] == "640000 bytes over the host link"
    assert host["achieved_gbps"] == pytest.approx(32.0) and host["peak_gbps"] == 64.0
    assert host["peak_label"] == "host bandwidth"
    assert host["sol_pct"] == pytest.approx(50.0) and host["bound"] == "host link"


def test_a_kineto_peer_copy_without_a_known_device_has_no_peak(tmp_path: Path) -> None:
    # a GPU the catalog does not know: the copy keeps its bytes (once), and no peak, SOL or bound
    trace = _kineto(tmp_path / "peer.json")
    data = json.loads(trace.read_text())
    data["deviceProperties"] = [{**H100, "name": "NVIDIA H800", "numSms": 132}]
    trace.write_text(json.dumps(data))
    peer = _row(_roofline(tmp_path, trace), "Memcpy PtoP (Device -> Device)")
    assert peer["bytes"] == 2_000_000 and peer["achieved_gbps"] == pytest.approx(200.0)
    assert pd.isna(peer["peak_gbps"]) and pd.isna(peer["sol_pct"]) and pd.isna(peer["bound"])


_SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, globalPid, bytes,
    copyKind, srcKind, dstKind, graphNodeId);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId);
CREATE TABLE TARGET_INFO_GPU (id, name, smCount, totalMemory, computeMajor, computeMinor, threadsPerWarp);
"""
_PROC = (0x1000000 + 300) << 24  # pid 300 as nsys keeps it in globalPid


def _nsys(path: Path) -> Path:
    """Device 0 of an H100 SXM; times in ns, copyKind / srcKind / dstKind as ENUM_CUDA_MEMCPY_OPER
    and ENUM_CUDA_MEM_KIND number them (10 PtoP, 13 Unified DtoD, 8 DtoD; 2 Device, 4 Managed):

    MEMCPY corr 1 [ 80000,  90000] 2,000,000 B PtoP   Device  -> Device
           corr 2 [100000, 120000] 4,500,000 B Unified DtoD  Managed -> Managed
           corr 3 [130000, 131000] 1,000,000 B DtoD   Device  -> Device
    """
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA)
    db.execute("INSERT INTO StringIds VALUES (1, 'cudaMemcpyAsync_v3020')")
    db.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0, 32)")
    copies = [
        (80000, 90000, 0, 7, 1, _PROC, 2_000_000, 10, 2, 2, None),
        (100000, 120000, 0, 7, 2, _PROC, 4_500_000, 13, 4, 4, None),
        (130000, 131000, 0, 7, 3, _PROC, 1_000_000, 8, 2, 2, None),
    ]
    db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({', '.join('?' * 11)})", copies)
    runtime = [(start - 5000, start - 4000, _PROC + 301, corr, 1) for start, _, _, _, corr, *_ in copies]
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)", runtime)
    db.commit()
    db.close()
    return path


def test_an_nsys_peer_copy_moves_its_bytes_once_over_the_gpu_link(tmp_path: Path) -> None:
    roofline = _roofline(tmp_path, _nsys(tmp_path / "peer.sqlite"))
    peer = _row(roofline, "Memcpy PtoP (Device -> Device)")
    # 2,000,000 B in 10 µs: 200 GB/s of 450, 4.444 µs attainable, 44.4 %
    assert peer["bytes"] == 2_000_000 and peer["formula"] == "2000000 bytes over the GPU-to-GPU link"
    assert peer["achieved_gbps"] == pytest.approx(200.0) and peer["peak_gbps"] == 450.0
    assert peer["sol_pct"] == pytest.approx(44.44444, rel=1e-6) and peer["bound"] == "peer link"
    # a unified-memory migration from one GPU to another: 4,500,000 B in 20 µs = 225 GB/s of 450;
    # 4.5e6 / 450e9 s = 10 µs attainable, 50 %
    migration = _row(roofline, "Memcpy Unified DtoD (Managed -> Managed)")
    assert migration["bytes"] == 4_500_000 and migration["achieved_gbps"] == pytest.approx(225.0)
    assert migration["peak_gbps"] == 450.0 and migration["attainable_us"] == pytest.approx(10.0)
    assert migration["sol_pct"] == pytest.approx(50.0) and migration["bound"] == "peer link"
    # copyKind 8 stays on the device: 2 · 1,000,000 B in 1 µs against 3350 GB/s
    local = _row(roofline, "Memcpy DtoD (Device -> Device)")
    assert local["bytes"] == 2_000_000 and local["peak_gbps"] == 3350.0 and local["bound"] == "memory"
