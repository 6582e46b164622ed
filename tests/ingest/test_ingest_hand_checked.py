"""Kernels whose launcher, shapes and stack were read off the trace JSON by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.store.outputs import load_kernels
from tests.support.hand_built import launch_and_kernel
from tests.support.traces import ingested

# (trace, kernel correlation) → values found by reading the JSON: the runtime event with the
# same correlation, then every cpu_op / python_function on its thread that contains it.
HAND_CHECKED = {
    ("h100_bert_small_infer", 8218): {
        "launch": "cudaLaunchKernel",
        "launcher": "aten::index_select",
        "input_dims": [[30522, 512], [], [141]],
        "stack_head": [
            "cudaLaunchKernel",
            "aten::index_select",
            "aten::embedding",
            "embedding (type)",  # trace: <built-in method embedding of type object at 0x7499b741df60>
            "torch/nn/functional.py(2437): embedding",
            "torch/nn/modules/sparse.py(189): forward",
            "torch/nn/modules/module.py(1743): _call_impl",
            "nn.Module: Embedding_0",
            "transformers/models/bert/modeling_bert.py(181): forward",
        ],
        "depth": 29,  # enclosing ranges incl. ProfilerStep#6, which goes to `step`, not the stack
    },
    ("h100_bert_small_infer", 8404): {
        "launch": "cuLaunchKernel",
        "launcher": "aten::addmm",
        "input_dims": [[512], [141, 512], [512, 512], [], []],
        "stack_head": [
            "cuLaunchKernel",
            "aten::addmm",
            "aten::linear",
            "<built-in function linear>",
            "torch/nn/modules/linear.py(124): forward",
            "torch/nn/modules/module.py(1743): _call_impl",
            "nn.Module: Linear_1",
            "transformers/models/bert/modeling_bert.py(364): forward",
        ],
        "depth": 37,
    },
    ("h100_vit_image_classify_infer", 56581): {
        "launch": "cudaLaunchKernel",
        "launcher": "aten::cudnn_convolution",
        "input_dims": [[4, 3, 224, 224], [768, 3, 16, 16], [], [], [], [], [], [], []],
        "stack_head": [
            "cudaLaunchKernel",
            "aten::cudnn_convolution",
            "aten::_convolution",
            "aten::convolution",
            "aten::conv2d",
            "conv2d (type)",  # trace: <built-in method conv2d of type object at 0x7bcd86e1df60>
            "torch/nn/modules/conv.py(536): _conv_forward",
            "torch/nn/modules/conv.py(553): forward",
        ],
        "depth": 31,
    },
    ("h100_vit_image_classify_infer", 56725): {
        "launch": "cuLaunchKernel",
        "launcher": "aten::addmm",
        "input_dims": [[768], [788, 768], [768, 768], [], []],
        "stack_head": [
            "cuLaunchKernel",
            "aten::addmm",
            "aten::linear",
            "<built-in function linear>",
            "torch/nn/modules/linear.py(124): forward",
            "torch/nn/modules/module.py(1743): _call_impl",
            "nn.Module: Linear_1",
            "transformers/models/vit/modeling_vit.py(252): forward",
        ],
        "depth": 34,
    },
}


@pytest.mark.parametrize(("stem", "correlation"), sorted(HAND_CHECKED))
def test_hand_checked_kernel(stem: str, correlation: int) -> None:
    expected = HAND_CHECKED[(stem, correlation)]
    frame = ingested(stem).frame
    row = frame[frame["correlation"] == correlation]
    assert len(row) == 1
    row = row.iloc[0]
    assert row["launch"] == expected["launch"]
    assert row["launcher"] == expected["launcher"]
    assert row["cpu_op"] == expected["launcher"]
    assert json.loads(row["input_dims"]) == expected["input_dims"]
    frames = row["call_stack"].split(" <- ")
    assert frames[: len(expected["stack_head"])] == expected["stack_head"]
    assert len(frames) == expected["depth"]  # launch call + enclosing ranges − the ProfilerStep range
    assert row["step"] == 6 if stem.startswith("h100_bert") else True


def test_module_path_is_outermost_first() -> None:
    frame = ingested("h100_bert_small_infer").frame
    row = frame[frame["correlation"] == 8404].iloc[0]
    modules = row["module"].split(".")
    assert modules[0] == "BertLMHeadModel_0"
    assert modules[-1] == "Linear_1"
    assert "BertModel_0" in modules


def test_a_launch_in_an_outer_step_after_an_inner_one_ended_is_the_outer_steps(tmp_path: Path) -> None:
    """Steps nested (two profilers, or a hand-made trace): ProfilerStep#1 [1000, 2000] holds
    ProfilerStep#2 [1200, 1600]; kernels launched at 1100, 1300 and 1700 belong to steps 1, 2 and
    1 — the last was in no step. A launch on another thread (no step ranges of its own) is placed
    by time the same way."""
    step = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}
    events = [
        {**step, "name": "ProfilerStep#1", "ts": 1000, "dur": 1000},
        {**step, "name": "ProfilerStep#2", "ts": 1200, "dur": 400},
        *launch_and_kernel(1100, 1, 1, "k1", 1150, 10),
        *launch_and_kernel(1300, 2, 2, "k2", 1350, 10),
        *launch_and_kernel(1700, 3, 3, "k3", 1750, 10),
        *launch_and_kernel(1800, 4, 4, "k4", 1850, 10, tid=2),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    frame = load_kernels(tmp_path / "out").sort_values("ts_us")
    assert frame["step"].tolist() == [1, 2, 1, 1]
