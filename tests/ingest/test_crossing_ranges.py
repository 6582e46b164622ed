"""A range that ends a little after the op it overlaps has started (a Python frame, an annotation
or an op crossing the next op's start by more than Kineto's few ns) must not hide that op from the
launches inside it (stop 61's campaign, traces built by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernel_atlas.ingest.nesting import nesting_parents
from kernel_atlas.ingest.pipeline import ingest_paths

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


def _ingest(tmp_path: Path, ranges: list[dict]) -> dict:
    # the ranges given on thread 1, then aten::add [990, 1020) launching at 1005 (correlation 1)
    events = [
        *ranges,
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 990, "dur": 30,
         "args": {"External id": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1005, "dur": 3,
         "args": {"correlation": 1, "External id": 3}},
        {"ph": "X", "cat": "kernel", "name": ADD, "pid": 0, "tid": 7, "ts": 1500, "dur": 10,
         "args": {"correlation": 1, "External id": 3, "device": 0, "stream": 7}},
    ]  # fmt: skip
    path = tmp_path / "crossing.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return ingest_paths([path]).frame.iloc[0].to_dict()


def _range(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


STEP = _range("user_annotation", "ProfilerStep#1", 0, 2000)


@pytest.mark.parametrize(
    "crossing",
    [
        _range("python_function", "model.py(10): region", 100, 890.01),  # ends 10 ns into aten::add
        _range("cpu_op", "aten::empty", 100, 890.5),
        _range("user_annotation", "region", 100, 890.5),
    ],
)
def test_the_op_a_range_crosses_into_still_launches(tmp_path: Path, crossing: dict) -> None:
    row = _ingest(tmp_path, [STEP, crossing])
    assert (row["launcher"], row["cpu_op"], row["link"], row["step"]) == ("aten::add", "aten::add", "correlation", 1)


def test_a_module_frame_crossing_an_annotation_keeps_the_op_innermost(tmp_path: Path) -> None:
    # an annotation [100, 1000) and a module frame [950, 1150) crossing it: the launch is in
    # aten::add [990, 1020), inside the module; it had been launched by `nn.Module: M_0`
    ranges = [
        STEP,
        _range("user_annotation", "my_region", 100, 900),
        _range("python_function", "nn.Module: M_0", 950, 200),
    ]
    row = _ingest(tmp_path, ranges)
    assert (row["launcher"], row["cpu_op"]) == ("aten::add", "aten::add")
    assert row["call_stack"] == "cudaLaunchKernel <- aten::add <- nn.Module: M_0"


def test_an_op_straddling_two_steps_keeps_its_launch(tmp_path: Path) -> None:
    # ProfilerStep#1 [0, 1000), #2 [1000, 2000); aten::add [990, 1020) straddles them, its
    # launch at 1005 is in step 2: linked by correlation (it had fallen back to the External id)
    ranges = [
        _range("user_annotation", "ProfilerStep#1", 0, 1000),
        _range("user_annotation", "ProfilerStep#2", 1000, 1000),
    ]
    row = _ingest(tmp_path, ranges)
    assert (row["launcher"], row["link"], row["step"]) == ("aten::add", "correlation", 2)
    assert row["call_stack"] == "cudaLaunchKernel <- aten::add"


def test_nesting_parents_by_hand() -> None:
    # one thread: A [0, 100), F [10, 50.01) crossing B [50, 60) by 10 ns, C [52, 53) inside B;
    # D [70, 80) after: C's parent is B (the climb had given A), D's is A
    start = np.array([0.0, 10.0, 50.0, 52.0, 70.0])
    end = np.array([100.0, 50.01, 60.0, 53.0, 80.0])
    assert nesting_parents(np.zeros(5, np.int64), start, end).tolist() == [-1, 0, 0, 2, 0]
