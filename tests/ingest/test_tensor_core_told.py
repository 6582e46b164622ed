"""Campaign BC class 1: whether a kernel runs on tensor cores is unknown (null) where the trace
cannot tell — its name says nothing and its op recorded no dtype (record_shapes off) — and the
shares are over the kernel time whose answer is known, the unknown time said beside them (never
a measured 0 %). Names of current NVIDIA families that are tensor-core by construction (cuBLAS's
`nvjet_*`, FlashAttention-3, CUTLASS 3's `Gmma` mainloops) tell, case aside. Values by hand from
small traces written here (the H100 of campaign BC's c1a/c1b cases)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.efficiency import efficiency_sums, roofline_efficiency
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.report.efficiency_view import efficiency_facts, efficiency_html, report_lines

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85520809984,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerMultiprocessor": 233472,
    "numSms": 132,
}
NVJET = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"
FA3 = (
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
    "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, "
    "cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false>, flash::SingleTileScheduler<true, false, false, 128> "
    "> > >(flash::FlashAttnFwdSm90<...>::Params)"
)
# FlashAttention 2: an attention kernel whose name says nothing of tensor cores
FA2 = (
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, false, false, false, true, true, false, "
    "false>(Flash_fwd_params)"
)
GEMM = "my_gemm_kernel"  # category gemm by name, nothing of tensor cores
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
# CUTLASS 3 on Hopper writes `Gmma` (the catalog lists `gmma`)
CUTLASS3 = (
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedCooperative<4, "
    "cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative> > > >(Params)"
)
# FA3's dQ conversion names a GMMA atom for its layouts and runs no MMA
CONVERT_DQ = (
    "void cutlass::device_kernel<flash::FlashAttnBwdPostprocessConvertdQ<cute::tuple<cute::C<64>, cute::C<192> >, "
    "cutlass::bfloat16_t, float, cutlass::arch::Sm90, 256, cute::TiledMMA<cute::MMA_Atom<"
    "cute::SM90_64x96x16_F32BF16BF16_SS<(cute::GMMA::Major)0, (cute::GMMA::Major)1> > > > >(Params)"
)


def _x(cat: str, name: str, ts: float, dur: float, args: dict[str, Any], pid: int = 1, tid: int = 7) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace(path: Path, kernels: list[tuple[str, str, float]], types: bool) -> Path:
    """Each (op, kernel, µs) an op launching its kernel, the kernels back to back from 5000 µs on
    device 0 (132 blocks of 256 threads); the op's bf16 `Input type` (and dims) only with `types`."""
    events, ts = [], 5000.0
    for corr, (op, name, dur) in enumerate(kernels, start=1):
        shapes = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
        start = 1000.0 + 30 * corr
        events.append(_x("cpu_op", op, start, 15, {"External id": corr, **(shapes if types else {})}, tid=1))
        events.append(_x("cuda_runtime", "cudaLaunchKernel", start + 5, 4, {"External id": corr, "correlation": corr}))
        args = {"External id": corr, "correlation": corr, "device": 0, "stream": 7, "grid": [132, 1, 1]}
        events.append(_x("kernel", name, ts, dur, {**args, "block": [256, 1, 1]}, pid=0))
        ts += dur
    path.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": events}))
    return path


def _device(path: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    result = ingest_trace(path, workers=1)
    (device,) = efficiency_facts({"traces": [{**result.facts, "file": path.name}]})["devices"]
    return result.frame.sort_values("ts_us"), device


def test_nvjet_and_fa3_with_types_are_all_tensor_core(tmp_path: Path) -> None:
    """c1a: aten::mm (bf16) → nvjet GEMM 100 µs, FlashAttnFunc (bf16) → FA3 forward 100 µs: 200 of
    200 µs on tensor cores (by dtype and by name), nothing unknown."""
    kernels = [("aten::mm", NVJET, 100.0), ("FlashAttnFunc", FA3, 100.0)]
    frame, device = _device(_trace(tmp_path / "c1a.json", kernels, types=True))
    assert frame["tensor_core"].tolist() == [True, True]
    assert device["tensor_core_time_pct"] == 100.0
    assert device["tensor_core_unknown_pct"] == 0.0


def test_nvjet_and_fa3_names_tell_without_types(tmp_path: Path) -> None:
    """c1b: the same without `Input type`: the names alone say tensor cores, 200 of 200 µs (it had
    stored both False and printed "tensor cores 0.0%")."""
    kernels = [("aten::mm", NVJET, 100.0), ("FlashAttnFunc", FA3, 100.0)]
    frame, device = _device(_trace(tmp_path / "c1b.json", kernels, types=False))
    assert frame["tensor_core"].tolist() == [True, True]
    assert device["tensor_core_time_pct"] == 100.0
    assert device["tensor_core_unknown_pct"] == 0.0


def test_names_that_say_nothing_without_types_are_unknown(tmp_path: Path) -> None:
    """A gemm kernel (100 µs) and an FA2 attention kernel (100 µs) whose ops recorded no dtype, and
    whose names say nothing: both unknown, the share n/a (not 0 %), all 200 µs unknown — on the
    terminal, in report.json and on the page."""
    kernels = [("aten::mm", GEMM, 100.0), ("FlashAttnFunc", FA2, 100.0)]
    frame, device = _device(_trace(tmp_path / "c1c.json", kernels, types=False))
    assert frame["category"].astype(str).tolist() == ["gemm", "attention"]
    assert frame["tensor_core"].isna().tolist() == [True, True]
    assert device["tensor_core_time_pct"] is None
    assert device["tensor_core_unknown_pct"] == 100.0
    (line,) = report_lines({"devices": [device]}, None)
    assert "tensor cores n/a (the trace cannot tell: no dtypes recorded, or a GPU not in the catalog)" in line
    assert "0.0%" not in line.split("tensor cores")[1]
    assert "<td>n/a (100.0% of kernel time unknown)</td>" in efficiency_html({"devices": [device]})


def test_with_types_the_same_kernels_are_known(tmp_path: Path) -> None:
    """The same two kernels under ops that recorded bf16, on an H100 (bf16 tensor peak): both by
    category and dtype, 200 of 200 µs."""
    kernels = [("aten::mm", GEMM, 100.0), ("FlashAttnFunc", FA2, 100.0)]
    frame, device = _device(_trace(tmp_path / "c1d.json", kernels, types=True))
    assert frame["tensor_core"].tolist() == [True, True]
    assert device["tensor_core_time_pct"] == 100.0


def test_mixed_known_and_unknown_share_over_the_known(tmp_path: Path) -> None:
    """No dtypes: nvjet 100 µs (True by name), a bf16 add 100 µs (elementwise: False, known), FA2
    200 µs (unknown). Known time 200 µs, of it 100 on tensor cores → 50 %; unknown 200 of 400 µs
    → 50 %. The line says both."""
    kernels = [("aten::mm", NVJET, 100.0), ("aten::add", ADD, 100.0), ("FlashAttnFunc", FA2, 200.0)]
    frame, device = _device(_trace(tmp_path / "mixed.json", kernels, types=False))
    assert frame["tensor_core"].tolist() == [True, False, pd.NA]
    assert device["tensor_core_time_pct"] == 50.0
    assert device["tensor_core_unknown_pct"] == 50.0
    (line,) = report_lines({"devices": [device]}, None)
    assert line.endswith(
        "tensor cores 50.0% (of the kernel time it can tell; 50.0% unknown: no dtypes recorded, or a GPU not in the"
        " catalog)"
    )


def test_name_patterns_are_case_blind_and_skip_layout_only_atoms(tmp_path: Path) -> None:
    """No dtypes: CUTLASS 3's `…TmaGmmaWarpSpecialized…` GEMM (`Gmma`, the catalog's `gmma`) is
    tensor-core by name; FA3's dQ conversion, whose template names a GMMA atom for layouts only,
    is a known False; MIOpen's elementwise `SubTensorOpWithScalar1d` is no `tensorop` kernel; an
    fp32 SIMT `volta_sgemm_*` is a known False by name, dtype or none."""
    kernels = [
        ("aten::mm", CUTLASS3, 10.0),
        ("FlashAttnBwd", CONVERT_DQ, 10.0),
        ("aten::sub", "SubTensorOpWithScalar1d", 10.0),
        ("aten::mm", "volta_sgemm_128x64_nn", 10.0),
    ]
    frame, _ = _device(_trace(tmp_path / "names.json", kernels, types=False))
    assert frame["tensor_core"].tolist() == [True, False, False, False]


def test_roofline_share_is_of_the_known_time() -> None:
    """Group 1: 10 µs tensor-core, 30 µs unknown → 10 of the 10 known µs = 100 %; group 2: 5 µs
    unknown only → null (not 0 %); group 3: 5 µs known False → 0 %."""
    kernels = pd.DataFrame(
        {
            "dur_us": [10.0, 30.0, 5.0, 5.0],
            "est_occupancy_pct": [20.0, 20.0, 20.0, 20.0],
            "waves": [1.0, 1.0, 1.0, 1.0],
            "wave_efficiency_pct": [100.0, 100.0, 100.0, 100.0],
            "tensor_core": pd.array([True, pd.NA, pd.NA, False], dtype="boolean"),
        }
    )
    sums = efficiency_sums(kernels)
    table = pd.DataFrame([sums.iloc[:2].sum(), sums.iloc[2], sums.iloc[3]], index=[0, 1, 2]).assign(
        total_us=[40.0, 5.0, 5.0], sol_pct=[90.0, 90.0, 90.0]
    )
    out = roofline_efficiency(table)["tensor_core_pct"]
    assert out.iloc[0] == 100.0 and pd.isna(out.iloc[1]) and out.iloc[2] == 0.0


@pytest.mark.parametrize("types", [False, True])
def test_report_json_and_roofline_say_unknown(tmp_path: Path, types: bool) -> None:
    """`atlas report` of the unknown pair (c1c): report.json's device share null and its unknown
    share 100 %, roofline `tensor_core_pct` null for both rows; with dtypes 100 % and 0 % unknown."""
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths
    from kernel_atlas.report.build import build_report

    trace = _trace(tmp_path / "c1c.json", [("aten::mm", GEMM, 100.0), ("FlashAttnFunc", FA2, 100.0)], types=types)
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    (device,) = json.loads((out / "report.json").read_text())["efficiency"]["devices"]
    assert (device["tensor_core_time_pct"], device["tensor_core_unknown_pct"]) == (
        (100.0, 0.0) if types else (None, 100.0)
    )
    roofline = pd.read_parquet(out / "roofline.parquet")
    shares = roofline["tensor_core_pct"].tolist()
    assert shares == [100.0, 100.0] if types else all(pd.isna(s) for s in shares) and len(shares) == 2
