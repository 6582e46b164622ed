"""Campaign BL, class 7: the replay table hid the `scale`. A Triton RMSNorm replayed at 1/8 of its
recorded 1024×6144 showed those recorded shapes with nothing beside them (no `scale` column, not
even with --wide; the label saying "scaled by" cut), and with an explicit --scale the line under
the table spoke only of the ATen rows, pointing to "the scale column" that did not exist.

The results are written by hand as `atlas replay` gives them (runner.Result's fields), so the
test needs neither torch nor triton."""

from __future__ import annotations

import io
import re

import pandas as pd
from rich.console import Console

from kernel_atlas.report.terminal import print_replay

RMSNORM_LABEL = (
    "Triton rmsnorm_kernel (eps=1e-06 assumed (not recorded)), Triton interpreter (fp32), run in float32, "
    "recorded bfloat16: bytes and time are of float32, dimensions ≥ 64 scaled by 0.125"
)


def _row(kernel: str, dims: str, scale: float, median_us: float | None, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "kernel": kernel,
        "launcher": "",
        "cpu_op": "",
        "kernels": None,
        "op_mapping": "",
        "category": "",
        "input_dims": dims,
        "input_types": None,
        "input_strides": None,
        "concrete_inputs": None,
        "implementation": "none",
        "timed": "",
        "config": "",
        "scale": scale,
        "device": "cpu",
        "device_name": "",
        "method": "",
        "median_us": median_us,
        "p10_us": median_us,
        "p90_us": median_us,
        "reps": 0 if median_us is None else 3,
        "traced_us": None,
        "ratio": None,
        "flops": None,
        "bytes": None,
        "achieved_tflops": None,
        "achieved_gbps": None,
        "check": "skipped" if median_us is None else "pass",
        "reason": "",
        "count": 1,
    }
    row.update(extra)
    return row


RMSNORM = _row(
    "fused_rmsnorm_kernel",
    "[[1024, 6144], [1024, 6144], [6144]]",
    0.125,
    190_480.0,
    launcher="<built-in function launch>",
    implementation=RMSNORM_LABEL,
    timed="kernel",
    method="cpu-wall-clock",
)
MM = _row(
    "gemm_x",
    "[[16, 32], [32, 8]]",
    1.0,
    4.0,
    launcher="aten::mm",
    cpu_op="aten::mm",
    implementation="aten::mm (aten::mm.default)",
    timed="kernel",
    method="cpu-wall-clock",
)
# refused at the scale it was tried at: it ran at no scale
TOO_LARGE = _row(
    "fused_moe_kernel",
    "[[4096, 7168], [256, 4096, 7168]]",
    0.25,
    None,
    reason="too large for the CPU even at scale 0.25",
)


def _render(results: pd.DataFrame, width: int, wide: bool = False) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    print_replay(console, results, "cpu", wide=wide)
    return console.export_text().splitlines()


def _header(lines: list[str]) -> list[str]:
    return next(line for line in lines if line.startswith("kernel")).split()


def _row_line(lines: list[str], kernel: str) -> str:
    return next(line for line in lines if line.startswith(kernel))


def test_a_scaled_row_shows_its_scale_beside_the_recorded_shapes() -> None:
    results = pd.DataFrame([RMSNORM, MM, TOO_LARGE])
    for width in (80, 100, 160):
        lines = _render(results, width)
        header = _header(lines)
        assert header[:3] == ["kernel", "shapes", "scale"], (width, lines)
        # the recorded shapes (two lines of shapes) and the factor they ran at, on the row's first line
        rms = _row_line(lines, "fused_rms")
        assert re.search(r"1024×6144,\s+0\.125\s", rms), (width, rms)
        # the ATen mm ran its recorded 16×32 · 32×8: 1
        assert re.search(r"16×32, 32×8\s+1\s", _row_line(lines, "gemm_x")), (width, lines)
        # a skipped row ran at no scale (its 0.25 is the scale it was refused at, said in its reason)
        assert re.search(r"\s–\s", _row_line(lines, "fused_moe")), (width, lines)
        assert " 0.25 " not in _row_line(lines, "fused_moe")
        assert not any("scale left out" in line for line in lines)
        assert "3/3" not in "\n".join(lines) and any(line.startswith("2/3 replayed") for line in lines)


def test_wide_shows_the_scale_column_and_the_whole_label() -> None:
    lines = _render(pd.DataFrame([RMSNORM, MM]), 80, wide=True)
    assert _header(lines)[:3] == ["kernel", "shapes", "scale"]
    rms = _row_line(lines, "fused_rms")
    assert re.search(r"\[\[1024, 6144\], \[1024, 6144\], \[6144\]\]\s+0\.125\s+Triton rmsnorm_kernel", rms)
    assert "dimensions ≥ 64 scaled by 0.125" in rms


def test_no_scale_column_where_no_replay_ran_scaled() -> None:
    # the recorded shapes everywhere (a GPU's replay, ATen ops), and a row refused at 0.25
    for results in (pd.DataFrame([MM]), pd.DataFrame([MM, TOO_LARGE])):
        for wide in (False, True):
            assert "scale" not in _header(_render(results, 120, wide=wide))
