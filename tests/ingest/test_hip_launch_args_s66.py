"""Launch arguments recorded only on the runtime launch call (campaign AZ 1). Kineto's roctracer
writer (ROCm 6.2) puts a kernel's `grid`, `block` and `shared memory` on the `hip*Launch*` call and
a copy's byte count on the `hipMemcpy*` call (`size`, as text), the GPU activity carrying neither;
ROCm 7 copies grid and block onto the kernel but keeps the LDS (`shared memory`) on the launch, and
writes a copy's `bytes` on the launch as text. Ingest takes each from the launch the activity's
correlation names where the activity lacks it; a value the activity records itself wins.

Values by hand, on an MI300X of 304 CUs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest.events import _decode_events
from tests.support.hostile import cli

MI300X = {
    "id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4, "numSms": 304,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 131072,
    "warpSize": 64, "sharedMemPerBlock": 65536, "maxSharedMemoryPerMultiProcessor": 65536,
}  # fmt: skip


def _op(name: str, ts: float, ext: int, dims: list, types: list) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 40,
            "args": {"External id": ext, "Input Dims": dims, "Input type": types}}  # fmt: skip


def _call(name: str, ts: float, corr: int, ext: int, cat: str = "cuda_runtime", **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5,
            "args": {"External id": ext, "cid": 1, "correlation": corr, **args}}  # fmt: skip


def _gpu(cat: str, name: str, ts: float, dur: float, corr: int, ext: int, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 0, "ts": ts, "dur": dur,
            "args": {"External id": ext, "device": 0, "stream": 0, "correlation": corr, **args}}  # fmt: skip


GEMM = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_ISA942_WG32_8_1"
ADD = "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<float>>(int)"


def _ingest(tmp_path: Path, events: list[dict], props: dict | None = MI300X) -> tuple[pd.DataFrame, Path]:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [props] if props else []}))
    out = tmp_path / "run"
    assert cli("ingest", trace, "-o", out, "-q").code == 0
    return pd.read_parquet(out / "kernels.parquet").sort_values("ts_us").reset_index(drop=True), out


def test_rocm62_kernels_take_grid_block_and_lds_from_their_launch(tmp_path: Path) -> None:
    bf16 = ["c10::BFloat16", "c10::BFloat16"]
    events = [
        _op("aten::mm", 0, 1, [[4096, 4096], [4096, 4096]], bf16),
        # 65,536 work-items in workgroups of 256 (hipExtModuleLaunchKernel counts work-items): 256 blocks
        _call("hipExtModuleLaunchKernel", 5, 401, 1, kernel="Cijk", stream="0x0", grid=[65536, 1, 1],
              block=[256, 1, 1], **{"shared memory": 0}),
        _gpu("kernel", GEMM, 20, 300, 401, 1, kind="Dispatch Kernel"),
        _op("aten::add", 400, 2, [[256], [256]], ["float", "float"]),
        # a grid of 1 block (hipLaunchKernel counts blocks) of 256 threads, 512 B of LDS
        _call("hipLaunchKernel", 405, 402, 2, kernel="add", stream="0x0", grid=[1, 1, 1], block=[256, 1, 1],
              **{"shared memory": 512}),
        _gpu("kernel", ADD, 420, 10, 402, 2, kind="Dispatch Kernel"),
    ]  # fmt: skip
    kernels, _ = _ingest(tmp_path, events)
    assert kernels["grid"].astype(str).tolist() == ["[65536, 1, 1]", "[1, 1, 1]"]
    assert kernels["block"].astype(str).tolist() == ["[256, 1, 1]", "[256, 1, 1]"]
    assert kernels["shared_mem_bytes"].tolist() == [0, 512]
    # 256 blocks over 304 CUs; 1 block over 304
    assert kernels["blocks_per_sm"].tolist() == pytest.approx([256 / 304, 1 / 304])
    # 256 threads = 4 waves of 64, 32 waves a CU: 8 blocks a CU — 256 / (304 · 8) and 1 / (304 · 8) waves
    assert kernels["waves"].tolist() == pytest.approx([256 / (304 * 8), 1 / (304 * 8)])


def test_the_kernels_own_values_win_and_rocm7_lds_is_read(tmp_path: Path) -> None:
    events = [
        _op("triton_op", 0, 1, [], []),
        # ROCm 7: the kernel records grid and block, the launch also the LDS (and here other dims)
        _call("hipModuleLaunchKernel", 5, 501, 1, kernel="attn_fwd", grid=[99, 1, 1], block=[64, 1, 1],
              **{"shared memory": 16384}),
        _gpu("kernel", "attn_fwd", 20, 50, 501, 1, grid=[8, 1, 1], block=[128, 1, 1]),
        _op("triton_op", 100, 2, [], []),
        # a kernel that records its own shared memory: 1,024 B, not the launch's 16,384
        _call("hipModuleLaunchKernel", 105, 502, 2, kernel="k2", grid=[4, 1, 1], block=[128, 1, 1],
              **{"shared memory": 16384}),
        _gpu("kernel", "k2", 120, 50, 502, 2, grid=[4, 1, 1], block=[128, 1, 1], **{"shared memory": 1024}),
    ]  # fmt: skip
    kernels, _ = _ingest(tmp_path, events)
    assert kernels["grid"].astype(str).tolist() == ["[8, 1, 1]", "[4, 1, 1]"]
    assert kernels["block"].astype(str).tolist() == ["[128, 1, 1]", "[128, 1, 1]"]
    assert kernels["shared_mem_bytes"].tolist() == [16384, 1024]
    assert kernels["blocks_per_sm"].tolist() == pytest.approx([8 / 304, 4 / 304])


def test_copy_sizes_recorded_on_the_launch_are_read_not_estimated(tmp_path: Path) -> None:
    f32 = ["float", "float", "bool"]
    events = [
        # ROCm 6.2: `size` as text on hipMemcpyWithStream, the activity without bytes
        _op("aten::copy_", 0, 1, [[1024, 1024], [1024, 1024], []], f32),
        _call("hipMemcpyWithStream", 5, 601, 1, stream="0x0", src="0x1", dst="0x2", size="4194304", kind="1"),
        _gpu("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 10, 80, 601, 1, kind="HtoD"),
        _op("aten::_local_scalar_dense", 200, 2, [[]], ["float"]),
        _call("hipMemcpyWithStream", 205, 602, 2, stream="0x0", src="0x2", dst="0x1", size="4", kind="2"),
        _gpu("gpu_memcpy", "Memcpy DtoH (Device -> Host)", 210, 4, 602, 2, kind="DtoH"),
        # ROCm 7: `bytes` as text on the launch; the activity's own `bytes` (256) wins over it
        _op("aten::copy_", 300, 3, [[64], [64], []], f32),
        _call("hipMemcpyAsync", 305, 603, 3, bytes="1024", kind="1"),
        _gpu("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 310, 3, 603, 3, kind="HtoD", bytes=256),
        _op("aten::copy_", 400, 4, [[128], [128], []], f32),
        _call("hipMemcpyAsync", 405, 604, 4, bytes="512", kind="1"),
        _gpu("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 410, 3, 604, 4, kind="HtoD"),
    ]  # fmt: skip
    kernels, out = _ingest(tmp_path, events)
    assert kernels["bytes"].tolist() == [4194304, 4, 256, 512]
    assert cli("report", out).code == 0  # writes the roofline table
    roofline = pd.read_parquet(out / "roofline.parquet")
    copy = roofline[roofline["bytes"] == 4194304]
    assert len(copy) == 1
    assert copy["formula"].iloc[0] == "4194304 bytes over the host link"  # not "(estimate: no byte count …)"
    assert not copy["estimate"].iloc[0]
    scalar = roofline[roofline["name"].astype(str).str.startswith("Memcpy DtoH")]
    assert scalar["bytes"].tolist() == [4]  # was uncosted: "no byte count recorded"


def test_a_cuda_launch_that_records_dims_fills_its_kernel_and_link_picks_the_launch(tmp_path: Path) -> None:
    events = [
        _op("aten::add", 0, 1, [[256], [256]], ["float", "float"]),
        _call("cudaLaunchKernel", 5, 701, 1, grid=[2, 1, 1], block=[128, 1, 1]),
        _gpu("kernel", ADD, 20, 10, 701, 1),
        _op("aten::add", 100, 2, [[256], [256]], ["float", "float"]),
        # two calls with one correlation: the kernel's launch is the first (as linking takes it),
        # which records nothing — the second's grid is not its
        _call("cudaLaunchKernel", 105, 702, 2),
        _call("cudaLaunchKernel", 106, 702, 2, grid=[9, 1, 1], block=[32, 1, 1]),
        _gpu("kernel", ADD, 120, 10, 702, 2),
    ]  # fmt: skip
    kernels, _ = _ingest(tmp_path, events, props=None)
    assert kernels["grid"].astype(object).where(kernels["grid"].notna(), None).tolist() == ["[2, 1, 1]", None]
    assert kernels["block"].astype(object).where(kernels["block"].notna(), None).tolist() == ["[128, 1, 1]", None]


def test_a_text_size_keeps_the_typed_decode() -> None:
    """`size` written as text (ROCm 6.2) or as a number decodes on the fast path: no slice holding a
    copy launch falls back to decoding its events one by one."""
    call = _call("hipMemcpyWithStream", 5, 601, 1, size="4194304", kind="1")
    other = _call("hipMemcpyAsync", 6, 602, 1, size=512)
    _, forgiving = _decode_events(json.dumps([call, other]).encode())
    assert forgiving is False


# --- campaign AZ 5: ROCm before 2024 tied a GPU activity to its launch by the `ac2g` flow alone ---


def _flow(ph: str, ts: float, fid: int, pid: int, tid: int) -> dict:
    event = {"ph": ph, "id": fid, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}
    return {**event, "bp": "e"} if ph == "f" else event


def _old_kernel(name: str, ts: float, dur: float, ext: int, stream: int = 0) -> dict:
    # pre-kineto#922 roctracer: no correlation, device or stream args; pid the device, tid the stream
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"External id": ext}}  # fmt: skip


def test_pre_2024_rocm_kernels_are_linked_to_their_launch_by_the_flow(tmp_path: Path) -> None:
    """Campaign AZ's `rocm5_hostwait` (µs from 0): aten::mm [0,40] ⊃ hipExtModuleLaunchKernel [5,15]
    (correlation 901) → the GEMM [30,330], tied by the flow 901 (its end at pid 0, tid 0, ts 30);
    aten::add [400,420] ⊃ hipLaunchKernel [405,413] (902) → the add [410,450], flow 902 ending at
    410. Both kernels take their launch (and the launches' grids); the GPU idles 80 µs between
    330 and 410 while the host had not launched yet (launched at 405, after the GPU went idle):
    host_wait 80 µs (it was "other", the kernels without launch). A third kernel whose flow ends at
    another time (500 ≠ 501) keeps no launch, linked by its External id to its op."""
    events = [
        _op("aten::mm", 0, 1, [[4096, 4096], [4096, 4096]], ["c10::BFloat16"] * 2),
        _call("hipExtModuleLaunchKernel", 5, 901, 1, kernel="Cijk", grid=[65536, 1, 1], block=[256, 1, 1]),
        _flow("s", 5, 901, 1, 1),
        _old_kernel(GEMM, 30, 300, 1),
        _flow("f", 30, 901, 0, 0),
        _op("aten::add", 400, 2, [[4096, 4096], [4096, 4096], []], ["c10::BFloat16"] * 2 + ["Scalar"]),
        _call("hipLaunchKernel", 405, 902, 2, kernel="add", grid=[16384, 1, 1], block=[256, 1, 1]),
        _flow("s", 405, 902, 1, 1),
        _old_kernel(ADD, 410, 40, 2),
        _flow("f", 410, 902, 0, 0),
        _op("aten::add", 480, 3, [[64], [64]], ["float", "float"]),
        _call("hipLaunchKernel", 485, 903, 3, kernel="add"),
        _flow("s", 485, 903, 1, 1),
        _old_kernel(ADD, 501, 5, 3),
        _flow("f", 500, 903, 0, 0),
    ]  # fmt: skip
    kernels, out = _ingest(tmp_path, events)
    assert kernels["correlation"].tolist()[:2] == [901, 902] and pd.isna(kernels["correlation"].iloc[2])
    assert kernels["launch"].astype(object).tolist()[:2] == ["hipExtModuleLaunchKernel", "hipLaunchKernel"]
    assert kernels["launch_ts_us"].tolist()[:2] == pytest.approx([5.0, 405.0])
    assert kernels["link"].astype(str).tolist() == ["correlation", "correlation", "external id"]
    assert kernels["grid"].astype(str).tolist()[:2] == ["[65536, 1, 1]", "[16384, 1, 1]"]
    assert cli("report", out).code == 0  # writes the idle table
    idle = pd.read_parquet(out / "idle.parquet")
    device = idle[idle["stream"].isna()].set_index("category")["idle_us"]
    # idle: 330 → 410 (80, the host launched at 405: host_wait) and 450 → 501 (51: its kernel has no
    # launch, so it is "other")
    assert device["host_wait"] == pytest.approx(80.0) and device["other"] == pytest.approx(51.0)


def test_a_flow_never_overrides_a_recorded_correlation(tmp_path: Path) -> None:
    """A modern activity's own correlation (7) is kept though a flow ending at it says 8; the other
    activity of the slice, without one, takes its flow's (9)."""
    events = [
        _op("aten::add", 0, 1, [[64], [64]], ["float", "float"]),
        _call("hipLaunchKernel", 5, 7, 1, kernel="add"),
        _call("hipLaunchKernel", 6, 8, 1, kernel="add"),
        _gpu("kernel", ADD, 20, 5, 7, 1),
        _flow("f", 20, 8, 0, 0),
        _op("aten::add", 100, 2, [[64], [64]], ["float", "float"]),
        _call("hipLaunchKernel", 105, 9, 2, kernel="add"),
        _old_kernel(ADD, 120, 5, 2),
        _flow("f", 120, 9, 0, 0),
    ]
    kernels, _ = _ingest(tmp_path, events)
    assert kernels["correlation"].tolist() == [7, 9]
    assert kernels["launch_ts_us"].diff().iloc[1] == pytest.approx(105.0 - 5.0)
