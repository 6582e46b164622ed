"""The reason given for a call that recorded no `Input Dims` at all: that the call recorded no
shapes, for every cost formula, not its formula's refusal of one argument ("input 0 (self) has no
recorded shape or a dtype not in catalogs/dtypes.toml", which sent the reader to the dtype table;
campaign BQ 3). Hand-built traces; the times and reasons are written here by hand from the events
below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.traces import trace_path

GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
SPLIT_K = "void splitKreduce_kernel<32, 16, int, float, float>(cublasSplitKParams<float>)"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)"
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "numSms": 132}
NO_DIMS = "the call recorded no shapes (Input Dims)"


class _Trace:
    """One host thread, one stream; each op at its own 200 µs slot, its kernels 10 µs into it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.slot, self.ext, self.corr = 0, 1, 1000

    def op(self, name: str, args: dict[str, Any] | None = None) -> int:
        self.slot += 1
        ext = self.ext
        self.events.append(_range("cpu_op", name, self.ts, 150, {"External id": ext, **(args or {})}))
        self.ext += 1
        return ext

    @property
    def ts(self) -> float:
        return 1_000_000.0 + 200.0 * self.slot

    def launch(self, ext: int, name: str, dur: float, at: float = 10.0) -> None:
        self.corr += 1
        ids = {"External id": ext, "correlation": self.corr}
        self.events.append(_range("cuda_runtime", "cudaLaunchKernel", self.ts + at - 5, 2, ids))
        args = {**ids, "device": 0, "stream": 7}
        self.events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": self.ts + at, "dur": dur, "args": args}
        )

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": self.events}))
        return path


def _range(cat: str, name: str, ts: float, dur: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur, "args": args}


def _report(tmp_path: Path, trace: _Trace) -> tuple[pd.DataFrame, dict[str, Any], str, str]:
    """roofline table, report.json, report.html and the terminal's trust section."""
    from kernel_atlas.report.build import build_report

    out = tmp_path / "run"
    write_outputs(ingest_paths([trace.write(tmp_path / "t.json")]), out)
    report = build_report(out, None, tmp_path / "r.html")
    terminal = CliRunner().invoke(app, ["report", str(out), "--section", "trust"], env={"COLUMNS": "250"})
    assert terminal.exit_code == 0, terminal.output
    html = (tmp_path / "r.html").read_text()
    return report.analysis.roofline, json.loads((out / "report.json").read_text()), html, terminal.stdout


def _reasons(facts: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(r["op"], r["reason"]): r["time_us"] for r in facts["trust"]["top_uncosted"]}


def test_a_gemm_call_without_input_dims_says_so_beside_shaped_calls(tmp_path: Path) -> None:
    """case_b's class: aten::mm with shapes (costed, 30 µs) and aten::mm with no `Input Dims` nor
    `Input type` (a 20 µs GEMM + its 4 µs split-K reduce: 24 µs uncosted, with its call)."""
    t = _Trace()
    shaped = t.op("aten::mm", {"Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]})
    t.launch(shaped, GEMM, 30)
    bare = t.op("aten::mm")
    t.launch(bare, GEMM, 20)
    t.launch(bare, SPLIT_K, 4, at=40)
    roofline, facts, html, terminal = _report(tmp_path, t)

    trust = facts["trust"]
    assert trust["gpu_time_us"] == 54.0 and trust["costed_time_us"] == 30.0
    assert _reasons(facts) == {("aten::mm", NO_DIMS): 24.0}
    assert trust["shapes_recorded"] == "yes"  # the other call has shapes: no advice line
    main = roofline[(roofline["role"] != "helper") & (roofline["launcher"] == "aten::mm") & roofline["flops"].isna()]
    assert main["note"].tolist() == [f"aten::mm: {NO_DIMS}"] and main["role"].tolist() == ["no shapes"]
    assert f"uncosted 24.0 µs (44.4 %): aten::mm: {NO_DIMS}" in terminal
    assert NO_DIMS in html
    for text in (terminal, html, json.dumps(trust)):
        assert "dtypes.toml" not in text and "input 0 (self)" not in text


def test_every_formula_says_the_call_recorded_no_shapes(tmp_path: Path) -> None:
    """Attention, elementwise, norm and an op without a cost model, none with `Input Dims`: each
    says the call recorded no shapes (the op without a model says that too); a call that recorded
    `Input Dims` with one argument unshaped, or shapes without dtypes (PyTorch 1.8), still names the
    argument."""
    t = _Trace()
    for op, kernel, dur in (
        ("aten::_scaled_dot_product_flash_attention", FLASH, 50),
        ("aten::add", ADD, 40),
        ("aten::native_layer_norm", NORM, 30),
        ("aten::weird_op", "my_custom_kernel", 25),  # no rule, no op formula: no cost model
    ):
        t.launch(t.op(op), kernel, dur)
    t.launch(t.op("aten::mm", {"Input Dims": [[], [128, 256]], "Input type": ["", "float"]}), GEMM, 15)
    t.launch(t.op("aten::mm", {"Input Dims": [[64, 128], [128, 256]]}), GEMM, 12)  # PyTorch 1.8: no Input type
    roofline, facts, _, _ = _report(tmp_path, t)

    notes = dict(zip(roofline["launcher"] + " " + roofline["op_time_us"].astype(str), roofline["note"], strict=True))
    assert (
        notes["aten::_scaled_dot_product_flash_attention 50.0"]
        == f"aten::_scaled_dot_product_flash_attention: {NO_DIMS}"
    )
    assert notes["aten::add 40.0"] == f"aten::add: {NO_DIMS}"
    assert notes["aten::native_layer_norm 30.0"] == f"aten::native_layer_norm: {NO_DIMS}"
    assert notes["aten::weird_op 25.0"] == f"aten::weird_op: {NO_DIMS}, and no cost model for aten::weird_op"
    assert (
        notes["aten::mm 15.0"]
        == "aten::mm: input 0 (self) has no recorded shape or a dtype not in catalogs/dtypes.toml"
    )
    assert notes["aten::mm 12.0"].startswith("aten::mm: input 0 (self) has a recorded shape but no dtype")
    assert facts["trust"]["costed_time_us"] == 0.0 and facts["trust"]["gpu_time_us"] == 172.0
    assert _reasons(facts) == {
        ("aten::_scaled_dot_product_flash_attention", NO_DIMS): 50.0,
        ("aten::add", NO_DIMS): 40.0,
        ("aten::native_layer_norm", NO_DIMS): 30.0,
    }


def test_a_trace_recorded_without_shapes_keeps_its_advice(tmp_path: Path) -> None:
    """record_shapes=False: no op has `Input Dims`; the reasons say so per call and the advice line
    to re-profile with record_shapes=True stays."""
    t = _Trace()
    t.launch(t.op("aten::mm"), GEMM, 20)
    t.launch(t.op("aten::add"), ADD, 10)
    _, facts, html, terminal = _report(tmp_path, t)
    trust = facts["trust"]
    assert trust["shapes_recorded"] == "no"
    assert _reasons(facts) == {("aten::mm", NO_DIMS): 20.0, ("aten::add", NO_DIMS): 10.0}
    assert any("record_shapes=True" in line for line in trust["advice"])
    assert "re-profile with torch.profiler.profile(record_shapes=True)" in terminal
    assert f"uncosted 20.0 µs (66.7 %): aten::mm: {NO_DIMS}" in terminal
    assert "record_shapes=True" in html and NO_DIMS in html


def test_a_shared_trace_without_input_dims_keeps_its_advice(tmp_path: Path) -> None:
    """a100_alexnet_train: 359 ops, none with `Input Dims` (traces README): the uncosted reasons
    are the calls' missing shapes, and the advice to re-profile with record_shapes=True stays."""
    from kernel_atlas.report.build import build_report

    out = tmp_path / "run"
    write_outputs(ingest_paths([trace_path("a100_alexnet_train")]), out)
    build_report(out, None, tmp_path / "r.html")
    trust = json.loads((out / "report.json").read_text())["trust"]
    assert trust["shapes_recorded"] == "no"
    assert trust["advice"][0].startswith("recorded without shapes (record_shapes=False)")
    assert trust["top_uncosted"] and all(r["reason"] == NO_DIMS for r in trust["top_uncosted"])
