"""Campaign BL, class 7: the line under `atlas replay`'s table. With an explicit --scale a Triton
row that ran at 1/8 of its recorded shapes got no line (it was printed only for the automatic
scale), and the line about the ATen rows pointed to "the scale column", which the table did not
have. The replays are written by hand (runner.replay_all and check_device replaced) so that the
lines are checked without torch; the last test runs the campaign's case for real where Triton's
interpreter is installed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.report.test_replay_scale_bl4 import MM, RMSNORM
from tests.support.hostile import cli

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported (importorskip below imports it)

# campaign BL's cases/seed_rms_plus_mm.json: seed entry 9 (SGLang's fused RMSNorm) and a small mm
CATALOG = [
    {
        "kernel_name": "fused_rmsnorm_kernel",
        "kernel_implementation": "<built-in function launch>",
        "op_mapping": "TBD",
        "params": [
            {"id": 0, "role": "input", "example_dim": [1024, 6144], "example_dtype": "torch.bfloat16"},
            {"id": 1, "role": "input", "example_dim": [1024, 6144], "example_dtype": "torch.bfloat16"},
            {"id": 2, "role": "input", "example_dim": [6144], "example_dtype": "torch.bfloat16"},
        ],
    },
    {
        "kernel_name": "gemm_x",
        "kernel_implementation": "aten::mm",
        "op_mapping": "matmul",
        "params": [
            {"id": 0, "role": "input", "example_dim": [16, 32], "example_dtype": "c10::BFloat16"},
            {"id": 1, "role": "input", "example_dim": [32, 8], "example_dtype": "c10::BFloat16"},
        ],
    },
]


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "seed_rms_plus_mm.json"
    path.write_text(json.dumps(CATALOG))
    return path


def _replaying(monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, object]]) -> None:
    import kernel_atlas.replay.runner as runner

    monkeypatch.setattr(runner, "check_device", lambda device: device)
    monkeypatch.setattr(runner, "replay_all", lambda targets, device, **options: pd.DataFrame(rows))


def _said(stdout: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(stdout.split())


def test_an_explicit_scale_says_which_rows_ran_scaled(monkeypatch: pytest.MonkeyPatch, catalog: Path) -> None:
    _replaying(monkeypatch, [RMSNORM, MM])
    done = cli("replay", "--catalog", catalog, "--all", "--device", "cpu", "--scale", "0.125")
    assert done.code == 0, done.output
    said = _said(done.stdout)
    assert "1 of 2 replays ran with dimensions ≥ 64 scaled by 0.125 (the scale column), as --scale 0.125 asks" in said
    assert "the shapes column shows the recorded shapes" in said
    assert "chosen automatically" not in said
    # the column the ATen line points to is there
    header = next(line for line in done.stdout.splitlines() if line.startswith("kernel"))
    assert re.match(r"kernel\s+shapes\s+scale\s", header), done.stdout
    assert (
        "--scale 0.125 left 1 of 2 replays at their recorded shapes: ATen ops replay through their schema at the "
        "shapes the trace recorded (the scale column says 1)" in said
    )


def test_the_automatic_scale_says_so(monkeypatch: pytest.MonkeyPatch, catalog: Path) -> None:
    auto = {**RMSNORM, "scale": 0.25, "implementation": RMSNORM["implementation"].replace("0.125", "0.25")}
    _replaying(monkeypatch, [auto, MM])
    done = cli("replay", "--catalog", catalog, "--all", "--device", "cpu")
    assert done.code == 0, done.output
    said = _said(done.stdout)
    assert (
        "1 of 2 replays ran with dimensions ≥ 64 scaled by 0.25 (the scale column), chosen automatically so "
        "that the Triton interpreter finishes on the CPU (--scale sets it; a GPU runs the recorded shapes)" in said
    )
    assert "left 1 of 2 replays at their recorded shapes" not in said  # no --scale was asked of the ATen mm


def test_no_scale_column_named_where_the_table_has_none(monkeypatch: pytest.MonkeyPatch, catalog: Path) -> None:
    # --scale 0.25 for an ATen op alone: it ran its recorded shapes, no row ran scaled, no column
    _replaying(monkeypatch, [MM])
    done = cli("replay", "--catalog", catalog, "--kernel", "gemm_x", "--device", "cpu", "--scale", "0.25")
    assert done.code == 0, done.output
    said = _said(done.stdout)
    assert (
        "--scale 0.25 left 1 of 1 replays at their recorded shapes: ATen ops replay through their schema at the "
        "shapes the trace recorded" in said
    )
    assert "scale column" not in said and "scaled by" not in said
    header = next(line for line in done.stdout.splitlines() if line.startswith("kernel"))
    assert "scale" not in header.split()


def test_the_campaign_case_replayed_at_an_eighth(catalog: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    done = cli("replay", "--catalog", catalog, "--all", "--device", "cpu", "--scale", "0.125")
    assert done.code == 0, done.output
    lines = done.stdout.splitlines()
    assert re.match(r"kernel\s+shapes\s+scale\s", next(line for line in lines if line.startswith("kernel"))), (
        done.stdout
    )
    assert re.search(r"1024×6144,\s+0\.125\s", next(line for line in lines if line.startswith("fused_rms")))
    assert re.search(r"16×32, 32×8\s+1\s", next(line for line in lines if line.startswith("gemm_x")))
    said = _said(done.stdout)
    assert "1 of 2 replays ran with dimensions ≥ 64 scaled by 0.125 (the scale column), as --scale 0.125 asks" in said
    assert "(the scale column says 1)" in said
