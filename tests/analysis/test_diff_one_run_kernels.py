"""`atlas diff`: kernels that only one run ran, part of them inside an op+shapes group (campaign
BG class 3), and the comparability wording of runs without profiler steps (class 5). Every
expected number is a sum of `dur` values written in the traces below, worked out in comments.

A (H100):  aten::mm 1024²·1024²  → GEMM_A   100 µs
           aten::mm 64²·64²      → sgemm_64  10 µs
           aten::fill_ [8]       → fill_K     7 µs        A: 117 µs, 3 activities
B (H100):  aten::mm 1024²·1024²  → sgemm_B  130 µs
           aten::mm 256×1024·1024² → sgemm_B 50 µs   (a shape A never ran)
           aten::mm 64²·64²      → sgemm_64  12 µs        B: 192 µs, 3 activities

The mm 1024² call runs GEMM_A in A and sgemm_B in B: one op+shapes group, 100 → 130 µs. sgemm_B
is a kernel only B ran, 2 activities, 130 + 50 = 180 µs; its name row is the rest, 50 µs.
GEMM_A is a kernel only A ran, 1 activity, 100 µs, all of it in the group (no name row).
fill_K only A ran, 7 µs, no group. sgemm_64 both, 10 → 12 µs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel_atlas.analysis.diff import diff_runs
from kernel_atlas.analysis.gate import Window, comparability
from kernel_atlas.report.diff_markdown import comparability_line

H100 = "NVIDIA H100 80GB HBM3"
GEMM_A = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas"
SGEMM_B = "volta_sgemm_128x64_nn"
SGEMM_64 = "ampere_sgemm_64x64_nn"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)"
MM_1024 = ("aten::mm", [[1024, 1024], [1024, 1024]])
MM_256 = ("aten::mm", [[256, 1024], [1024, 1024]])
MM_64 = ("aten::mm", [[64, 64], [64, 64]])
FILL_8 = ("aten::fill_", [[8], []])


def _trace(calls: list[tuple[tuple[str, list[list[int]]], str, float]]) -> dict[str, Any]:
    """Kineto JSON: per call a cpu_op with its Input Dims launching one kernel of `dur` µs."""
    events: list[dict[str, Any]] = []
    t, gpu_t = 1000.0, 500_000.0
    for n, ((op, dims), kernel, dur) in enumerate(calls, start=1):
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 40,
             "args": {"External id": n, "Input Dims": dims}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 5,
             "dur": 5, "args": {"correlation": n, "External id": n}},
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": gpu_t, "dur": dur,
             "args": {"correlation": n, "External id": n, "device": 0, "stream": 7}},
        ]  # fmt: skip
        t, gpu_t = t + 60, gpu_t + dur + 2
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": H100, "totalGlobalMem": 85e9, "numSms": 132}],
    }


def _diff(tmp_path: Path) -> Any:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_trace([(MM_1024, GEMM_A, 100), (MM_64, SGEMM_64, 10), (FILL_8, FILL, 7)])))
    b.write_text(json.dumps(_trace([(MM_1024, SGEMM_B, 130), (MM_256, SGEMM_B, 50), (MM_64, SGEMM_64, 12)])))
    return diff_runs(a, b)


def test_a_kernel_one_run_ran_partly_in_a_group_says_its_row_is_the_rest(tmp_path: Path) -> None:
    diff = _diff(tmp_path)
    kernels = diff.level("kernel")
    rows = {
        ("group" if r.matched_by == "op+shapes" else r.key): (
            r.a_us,
            r.b_us,
            r.a_count,
            r.b_count,
            r.status,
            r.matched_by,
        )
        for r in kernels.itertuples()
    }
    assert rows == {
        "group": (100.0, 130.0, 1, 1, "both", "op+shapes"),
        SGEMM_B: (0.0, 50.0, 0, 1, "appeared", "name (rest)"),  # 50 of its 180 µs: marked as the rest
        SGEMM_64: (10.0, 12.0, 1, 1, "both", "name"),
        FILL: (7.0, 0.0, 1, 0, "vanished", ""),
    }
    # the kernel level still sums to each run's GPU time: 117 and 192 µs, 3 activities each
    assert (kernels["a_us"].sum(), kernels["b_us"].sum()) == (117.0, 192.0)
    assert (kernels["a_count"].sum(), kernels["b_count"].sum()) == (3, 3)


def test_the_kernels_one_run_ran_carry_all_their_time(tmp_path: Path) -> None:
    one_run = _diff(tmp_path).one_run_kernels()
    rows = {r.key: (r.a_us, r.b_us, r.a_count, r.b_count, r.status) for r in one_run.itertuples()}
    assert rows == {
        SGEMM_B: (0.0, 180.0, 0, 2, "appeared"),  # 130 in the group + 50 at 256×1024
        GEMM_A: (100.0, 0.0, 1, 0, "vanished"),  # all of it in the group: no name row of its own
        FILL: (7.0, 0.0, 1, 0, "vanished"),
    }
    # "Appeared in B": 1 kernel, 180 µs; "Vanished from A": 2 kernels, 107 µs
    appeared = one_run[one_run["status"] == "appeared"]
    vanished = one_run[one_run["status"] == "vanished"]
    assert (len(appeared), appeared["delta_us"].abs().sum()) == (1, 180.0)
    assert (len(vanished), vanished["delta_us"].abs().sum()) == (2, 107.0)
    assert list(one_run["key"]) == [SGEMM_B, FILL, GEMM_A]  # largest change first (+180, −7, −100)


def test_runs_without_profiler_steps_are_said_without_a_double_negative(tmp_path: Path) -> None:
    diff = _diff(tmp_path)  # neither trace has a ProfilerStep
    line = comparability_line(comparability(diff.table, diff.a.gpus, diff.b.gpus, diff.a.window, diff.b.window))
    assert "neither run records profiler steps: windows unknown" in line, line
    assert "no profiler steps" not in line, line
    stepped = Window(ranks=1, steps=3)
    line = comparability_line(comparability(diff.table, diff.a.gpus, diff.b.gpus, stepped, diff.b.window))
    assert "; B records no profiler steps: windows unknown" in line, line
