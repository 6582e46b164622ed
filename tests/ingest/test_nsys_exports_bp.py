"""Campaign BP classes 1–3 (Nsight exports): cuBLAS/cuDNN `xmma` kernels whose names give a SIMT math
instruction (`_ffma_`, `_hfma2_`, `_dfma_`) run no MMA although "xmma_gemm" is a tensor-core
pattern (nsys-ai's h100_2gpu_1s export: 320 `…_ffma_…` GEMMs read "tensor cores 87.1%", where
none is one); and an Nsight whole-graph replay's row (`<CUDA graph 1 replay>`), whose kernels
are not in the export, is unknown, not a known no."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.report.efficiency_view import efficiency_facts
from tests.ingest.test_nsys_hand_checks_s65 import CALL, TA, A, _export
from tests.ingest.test_tensor_core_told import _device, _trace

FFMA = (
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
    "kernel__5x_cublas"
)
TF32 = "sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel"
HFMA2 = "sm70_xmma_gemm_f16f16_f16f16_f16_nn_n_tilesize64x64x8_stage3_warpsize2x2x1_hfma2_aligna2_execute_kernel"


@pytest.mark.parametrize("types", [False, True])
def test_simt_xmma_kernels_are_no_tensor_core_work(tmp_path: Path, types: bool) -> None:
    """The ffma GEMM (10 µs) and the hfma2 GEMM (10 µs) are known False, the tensor16x8x8 one
    (10 µs) True by name; with dtypes recorded (bf16 here, as `_trace` writes) too: the name wins.
    By hand: 10 of 30 µs on tensor cores, 33.3 %, nothing unknown (it had been 100 %)."""
    kernels = [("aten::mm", FFMA, 10.0), ("aten::mm", HFMA2, 10.0), ("aten::mm", TF32, 10.0)]
    frame, device = _device(_trace(tmp_path / "xmma.json", kernels, types=types))
    assert frame["tensor_core"].tolist() == [False, False, True]
    assert device["tensor_core_time_pct"] == pytest.approx(100 / 3, abs=0.05)
    assert device["tensor_core_unknown_pct"] == 0.0


def test_a_whole_graph_replay_is_unknown_tensor_core(tmp_path: Path) -> None:
    """Device 0: sgemm [6, 16] µs (ampere_sgemm: a known no), add_kernel [28, 29] (elementwise: a
    known no), graph 1's replay [30, 40] (its kernels not in the export: unknown), and the memcpy
    (no kernel). Kernel time 10 + 1 + 10 = 21 µs, of it 10 unknown: 47.6 % unknown, 0 % of the
    11 known µs on tensor cores (it had been 0 % with 0 % unknown)."""
    path = _export(
        tmp_path / "graph.sqlite",
        (CALL, (21000, 22000, TA, 15, 4)),
        ("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (30000, 40000, 0, 8, 15, ?, 1)", (A,)),
    )
    result = ingest_trace(path, workers=1)
    frame = result.frame.set_index("correlation")
    assert frame.loc[15, "name"] == "<CUDA graph 1 replay>"
    assert frame["tensor_core"].isna().to_dict() == {10: False, 11: False, 12: True, 15: True}
    (device,) = efficiency_facts({"traces": [{**result.facts, "file": path.name}]})["devices"]
    assert device["tensor_core_time_pct"] == 0.0
    assert device["tensor_core_unknown_pct"] == pytest.approx(100 * 10 / 21, abs=0.05)


def test_start_end_ranges_ended_on_another_thread_are_said(tmp_path: Path) -> None:
    """Campaign BP 3: an nvtxRangeStart/End range (eventType 60) that ends on another thread
    (`endGlobalTid`) is read as the starting thread's, as nsys draws it, and counted in one
    warning: `user_span` [3500, 4500] ns begun on thread TA + 1 and ended on TA does not become
    the launcher of TA's sgemm (its launch at [4000, 5000] stays aten::addmm's); a type-60 range
    ended on its own thread is not counted."""
    columns = "(start, end, eventType, text, globalTid, textId, domainId, endGlobalTid)"
    path = _export(
        tmp_path / "crossed.sqlite",
        ("ALTER TABLE NVTX_EVENTS ADD COLUMN endGlobalTid", ()),
        (f"INSERT INTO NVTX_EVENTS {columns} VALUES (3500, 4500, 60, 'user_span', ?, NULL, 0, ?)", (TA + 1, TA)),
        (f"INSERT INTO NVTX_EVENTS {columns} VALUES (25500, 25600, 60, 'own_span', ?, NULL, 0, ?)", (TA, TA)),
    )
    result = ingest_trace(path, workers=1)
    frame = result.frame.set_index("correlation")
    assert frame.loc[10, "launcher"] == "aten::addmm"
    said = [w for w in result.warnings if "ended on another" in w]
    assert (
        len(said) == 1 and ": 1 NVTX range started on one thread and ended on another (nvtxRangeStart/End)" in said[0]
    )


@pytest.mark.parametrize("end_tid", ["'TA'", "1e300", "-1", "X'00'", "NULL"])
def test_an_end_thread_that_is_no_thread_id_is_not_counted(tmp_path: Path, end_tid: str) -> None:
    """Campaign BT 6: an `endGlobalTid` that is no thread id (the start thread's id as text, a
    real, a negative number, a blob, null) says nothing of another thread: no warning."""
    value = {"'TA'": f"'{TA}'"}.get(end_tid, end_tid)
    columns = "(start, end, eventType, text, globalTid, textId, domainId, endGlobalTid)"
    path = _export(
        tmp_path / "odd_end.sqlite",
        ("ALTER TABLE NVTX_EVENTS ADD COLUMN endGlobalTid", ()),
        (f"INSERT INTO NVTX_EVENTS {columns} VALUES (3500, 4500, 60, 'span', ?, NULL, 0, {value})", (TA,)),
    )
    result = ingest_trace(path, workers=1)
    assert not [w for w in result.warnings if "ended on another" in w]
