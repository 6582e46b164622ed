"""Launchers and call-stack frames carry no memory addresses: the same code has the same name in every run."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.frames import is_python_frame, short_frame
from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.traces import ingested, raw_events, trace_path

PYBIND = "pybind11_builtins.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1"


@pytest.mark.parametrize(
    ("written", "stable"),
    [
        (f"<built-in method rmsnorm of {PYBIND} object at 0x786a5118d930>", "rmsnorm (pybind11)"),
        (f"<built-in method  of {PYBIND} object at 0x7f6486f2de50>", "<unnamed> (pybind11)"),
        (
            "<built-in method inplace_fused_experts of PyCapsule object at 0x7f88b221fcf0>",
            "inplace_fused_experts (PyCapsule)",
        ),
        ("<built-in method layer_norm of type object at 0x7499b741df60>", "layer_norm (type)"),
        ("<built-in method size of Tensor object at 0x74956e48e580>", "size (Tensor)"),
        (
            "<built-in method __exit__ of torch._C.DisableTorchFunctionSubclass object at 0x7f64845225d0>",
            "__exit__ (torch._C.DisableTorchFunctionSubclass)",
        ),
        ("<function Module.forward at 0x7f0011223344>", "<function Module.forward>"),
        ("<built-in function launch>", "<built-in function launch>"),
        ("aten::mm", "aten::mm"),
        ("sgl_kernel::rmsnorm", "sgl_kernel::rmsnorm"),
        (
            "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py(1743): _call_impl",
            "torch/nn/modules/module.py(1743): _call_impl",
        ),
        ("nn.Module: BertLayer_3", "nn.Module: BertLayer_3"),
    ],
)
def test_frame_names_without_addresses(written: str, stable: str) -> None:
    assert short_frame(written) == stable
    assert is_python_frame(stable) == is_python_frame(written)


def _address_frames(stem: str) -> int:
    return sum(1 for e in raw_events(stem) if " object at 0x" in str(e.get("name", "")))


@pytest.mark.parametrize("stem", ["mi300x_normalization_layers", "h100_bert_small_infer"])
def test_ingest_writes_no_addresses(stem: str, tmp_path: Path) -> None:
    assert _address_frames(stem) > 0  # the trace has them
    frame = ingested(stem).frame
    for column in ("launcher", "call_stack", "module", "cpu_op"):
        values = frame[column].dropna().astype(str)
        assert not values.str.contains(" at 0x").any(), column
    files = write_outputs(ingested(stem), tmp_path)
    assert " at 0x" not in files["catalog"].read_text()


def test_bert_layer_norm_stack_has_the_stable_frame() -> None:
    # trace: aten::layer_norm inside `<built-in method layer_norm of type object at 0x7499b741df60>`
    frame = ingested("h100_bert_small_infer").frame
    norms = frame[frame["launcher"] == "aten::native_layer_norm"]
    assert len(norms) == 10
    assert norms["call_stack"].astype(str).str.contains(" <- aten::layer_norm <- layer_norm \\(type\\) <- ").all()


def test_two_runs_with_other_addresses_give_the_same_names(tmp_path: Path) -> None:
    """The same trace with every address changed (as a second run would have them)."""
    with gzip.open(trace_path("mi300x_normalization_layers"), "rt") as handle:
        text = handle.read()
    moved = re.sub(r"at 0x([0-9a-f]+)", lambda m: f"at 0x{int(m[1], 16) + 0x1230:x}", text)
    assert moved != text
    other = tmp_path / "second_run.json"
    other.write_text(moved)
    first, second = ingested("mi300x_normalization_layers").frame, ingest_trace(other).frame
    for column in ("launcher", "call_stack", "op_mapping", "label_rule"):
        assert first[column].astype(str).tolist() == second[column].astype(str).tolist(), column
    json.loads(json.dumps(second["call_stack"].dropna().astype(str).tolist()))
