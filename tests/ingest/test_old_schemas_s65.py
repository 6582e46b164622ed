"""Old PyTorch profiler schemas (campaign AN): the `Input dims` spelling, GPU events that were not
read said as such (never "none in this trace"), `Call stack` strings beside `python_function`
ranges, the step of a row linked by External id, and the runtime told by the trace's calls.

Every expected value below is read off the hand-built trace in the test (docs/kineto-schemas.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.traces import has_trace, ingested


def _x(cat: str | None, name: str, ts: float, dur: float, pid: Any = 100, tid: Any = 100, **args: Any) -> dict:
    event = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
    if cat is not None:
        event["cat"] = cat
    return event


def _ingest(tmp_path: Path, events: list[dict], forgiving: bool = False):
    if forgiving:  # an event of no known phase: the slice is decoded on the forgiving path
        events = [*events, {"ph": "Q", "name": "odd", "pid": 1, "tid": 1, "ts": 0}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return ingest_trace(path, workers=1)


def _pt19_addmm(dims_key: str) -> list[dict]:
    """A PyTorch 1.8/1.9 step: `aten::addmm` (its inputs under `dims_key`) launches one kernel."""
    return [
        _x("Operator", "ProfilerStep#3", 1000, 200, **{"External id": 1}),
        _x(
            "Operator",
            "aten::addmm",
            1015,
            40,
            **{
                "External id": 3,
                dims_key: [[32], [8, 16], [16, 32], [], []],
                "Input type": ["float", "float", "float", "Scalar", "Scalar"],
            },
        ),
        _x("Runtime", "cudaLaunchKernel", 1020, 5, correlation=501, **{"external id": 3}),
        _x("Kernel", "volta_sgemm_32x32_sliced1x4_tn", 1030, 10, 0, "stream 7", device=0, stream=7, correlation=501),
    ]


# --- class 1: `Input dims` -------------------------------------------------------------------


@pytest.mark.parametrize("forgiving", [False, True])
def test_input_dims_in_the_older_spelling_are_the_shapes(tmp_path: Path, forgiving: bool) -> None:
    """PyTorch 1.8's Kineto wrote `Input dims` (the TensorBoard plugin falls back to it): those
    shapes were lost, and the report advised re-profiling with record_shapes=True."""
    frame = _ingest(tmp_path, _pt19_addmm("Input dims"), forgiving).frame
    assert frame["input_dims"].tolist() == ["[[32],[8,16],[16,32],[],[]]"]
    assert frame["input_types"].tolist() == ['["float","float","float","Scalar","Scalar"]']


def test_input_dims_in_todays_spelling_win_over_the_older_one(tmp_path: Path) -> None:
    events = _pt19_addmm("Input Dims")
    events[1]["args"]["Input dims"] = [[1], [2]]
    assert _ingest(tmp_path, events).frame["input_dims"].tolist() == ["[[32],[8,16],[16,32],[],[]]"]


# --- class 2: GPU events not read are said, never "none" ----------------------------------


def test_legacy_autograd_export_is_said_not_called_empty(tmp_path: Path) -> None:
    """`export_chrome_trace` of the legacy autograd profiler: no `cat`, GPU ranges under pid
    "CUDA functions" (tid: the device), linked by `cpu_to_cuda` flows. Two such ranges."""
    flow = {"cat": "cpu_to_cuda", "args": {}}
    events = [
        {"name": "aten::addmm", "ph": "X", "ts": 1015.123, "dur": 40.5, "tid": 1, "pid": "CPU functions", "args": {}},
        {"name": "aten::addmm", "ph": "s", "ts": 1015.123, "tid": 1, "pid": "CPU functions", "id": 0, **flow},
        {"name": "aten::addmm", "ph": "f", "ts": 1030.0, "tid": 0, "pid": "CUDA functions", "id": 0, **flow},
        {"name": "aten::addmm", "ph": "X", "ts": 1030.0, "dur": 10.0, "tid": 0, "pid": "CUDA functions", "args": {}},
        {"name": "aten::add_", "ph": "X", "ts": 1100.0, "dur": 20.0, "tid": 1, "pid": "CPU functions", "args": {}},
        {"name": "aten::add_", "ph": "X", "ts": 1115.0, "dur": 3.0, "tid": 0, "pid": "CUDA functions", "args": {}},
    ]
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(events))  # a bare list, as that exporter wrote it
    result = ingest_trace(path, workers=1)
    assert result.frame.empty
    said = [w for w in result.warnings if "legacy autograd profiler's export" in w]
    assert len(said) == 2
    assert "2 GPU ranges of the legacy autograd profiler's export" in said[0] and "were not read" in said[0]
    assert said[1].endswith("(2 of the legacy autograd profiler's export); tables are empty")
    assert not any("in this trace" in w for w in result.warnings)


def test_kernels_without_a_category_are_counted_not_called_none(tmp_path: Path) -> None:
    events = _pt19_addmm("Input Dims")
    del events[3]["cat"]  # a kernel with device, stream and correlation, but no `cat`
    events.append({**events[3], "ts": 1060})
    result = _ingest(tmp_path, events)
    assert result.frame.empty
    assert any("2 GPU-looking events without a category" in w and "were not read" in w for w in result.warnings)
    assert any(w.endswith("(2 without a category); tables are empty") for w in result.warnings)
    assert not any("in this trace" in w for w in result.warnings)


def test_activities_left_out_for_their_times_are_not_called_none(tmp_path: Path) -> None:
    events = _pt19_addmm("Input Dims")
    events[3]["ts"], events[3]["dur"] = "1030", "10"  # times written as text: left out (hostile-input.md)
    result = _ingest(tmp_path, events)
    assert result.frame.empty
    assert any("1 GPU activity without a usable ts or dur was left out" in w for w in result.warnings)
    assert any(w.endswith("(1 without a usable ts or dur); tables are empty") for w in result.warnings)
    assert not any("in this trace" in w for w in result.warnings)


def test_a_trace_without_gpu_events_is_still_said_to_have_none(tmp_path: Path) -> None:
    result = _ingest(tmp_path, _pt19_addmm("Input Dims")[:3])
    assert any("no GPU events (kernels, memcpys, memsets) in this trace" in w for w in result.warnings)


# --- class 3: `Call stack` beside `python_function` ranges ------------------------------


def _python(name: str, ts: float, dur: float, pid_: int) -> dict:
    return _x("python_function", name, ts, dur, **{"Python id": pid_})


def test_call_stack_frames_that_are_python_ranges_are_not_woven_twice(tmp_path: Path) -> None:
    """PyTorch 1.11 wrote both forms: `aten::linear`'s `Call stack` names the three Python frames
    that are also ranges around it."""
    events = [
        _x("user_annotation", "ProfilerStep#7", 1000, 200),
        _python("train.py(10): <module>", 1001, 150, 1),
        _python("torch/nn/modules/module.py(1102): _call_impl", 1002, 140, 2),
        _python("nn.Module: Linear_0", 1003, 130, 3),
        _python("torch/nn/modules/linear.py(103): forward", 1004, 120, 4),
        _x(
            "cpu_op",
            "aten::linear",
            1010,
            50,
            **{
                "External id": 2,
                "Call stack": "torch/nn/modules/linear.py(103): forward;torch/nn/modules/module.py(1102): _call_impl;"
                "train.py(10): <module>",
            },
        ),
        _x("cpu_op", "aten::addmm", 1015, 40, **{"External id": 3}),
        _x("cuda_runtime", "cudaLaunchKernel", 1020, 5, correlation=501),
        _x("Kernel", "volta_sgemm_32x32_sliced1x4_tn", 1030, 10, 0, "stream 7", device=0, stream=7, correlation=501),
    ]
    frame = _ingest(tmp_path, events).frame
    assert frame["call_stack"].tolist() == [
        "cudaLaunchKernel <- aten::addmm <- aten::linear <- torch/nn/modules/linear.py(103): forward"
        " <- nn.Module: Linear_0 <- torch/nn/modules/module.py(1102): _call_impl <- train.py(10): <module>"
    ]


def test_a_jit_call_stack_lies_inside_the_python_frame_that_ran_the_op(tmp_path: Path) -> None:
    """A TorchScript op records its JIT stack (`Call stack`) beside today's Python ranges: its
    frames go between the op and the Python frame calling into TorchScript, not after `<module>`."""
    events = [
        _x("user_annotation", "ProfilerStep#7", 1000, 200),
        _python("train.py(10): <module>", 1001, 150, 1),
        _python("torch/jit/_script.py(100): __call__", 1002, 140, 2),
        _x(
            "cpu_op",
            "aten::addmm",
            1015,
            40,
            **{
                "External id": 3,
                "Call stack": "code/__torch__/model.py(12): forward;code/__torch__/model.py(30): forward",
            },
        ),
        _x("cuda_runtime", "cudaLaunchKernel", 1020, 5, correlation=501, **{"External id": 3}),
        _x("kernel", "volta_sgemm_32x32_sliced1x4_tn", 1030, 10, 0, 7, device=0, stream=7, correlation=501),
    ]
    frame = _ingest(tmp_path, events).frame
    assert frame["call_stack"].tolist() == [
        "cudaLaunchKernel <- aten::addmm <- code/__torch__/model.py(12): forward <- code/__torch__/model.py(30):"
        " forward <- torch/jit/_script.py(100): __call__ <- train.py(10): <module>"
    ]


# --- class 5: the step of a row linked by External id -------------------------------------


def test_a_row_linked_by_external_id_takes_the_step_its_op_lies_in(tmp_path: Path) -> None:
    """No correlation on runtime calls nor kernels: the kernels link to their ops by `external id`
    3 and 4; both ops (1015-1055, 1100-1120) lie in ProfilerStep#3 (1000-1200) on their thread."""
    events = _pt19_addmm("Input Dims")
    events[2]["args"].pop("correlation")
    events[3]["args"] = {"device": 0, "stream": 7, "external id": 3}
    events += [
        _x("Operator", "aten::add_", 1100, 20, **{"External id": 4}),
        _x("Runtime", "cudaLaunchKernel", 1105, 5, **{"external id": 4}),
        _x("Kernel", "elementwise_kernel", 1115, 3, 0, "stream 7", device=0, stream=7, **{"external id": 4}),
    ]
    frame = _ingest(tmp_path, events).frame.sort_values("ts_us")
    assert frame["launcher"].tolist() == ["aten::addmm", "aten::add_"]
    assert frame["link"].astype(str).tolist() == ["external id", "external id"]
    assert frame["step"].tolist() == [3, 3]


# --- class 6: the runtime told by the trace's runtime calls -------------------------------


@pytest.mark.parametrize(
    ("launches", "runtime"),
    [
        (["cudaLaunchKernel", "cudaMemcpyAsync"], "cuda"),
        (["cuLaunchKernel"], "cuda"),
        (["hipLaunchKernel", "hipMemcpyAsync"], "rocm"),
        (["cudaLaunchKernel", "hipLaunchKernel"], "unknown"),  # both: not said
        ([], "unknown"),  # no runtime call at all
    ],
)
def test_runtime_from_the_runtime_calls_where_the_trace_names_none(
    tmp_path: Path, launches: list[str], runtime: str
) -> None:
    events = _pt19_addmm("Input Dims")[:2]
    events += [_x("Runtime", name, 1020 + i, 1, correlation=600 + i) for i, name in enumerate(launches)]
    events.append(_x("Kernel", "k", 1040, 5, 0, "stream 7", device=0, stream=7, correlation=600))
    assert _ingest(tmp_path, events).facts["runtime"] == runtime


def test_a_runtime_version_the_trace_names_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    doc = {"traceEvents": _pt19_addmm("Input Dims"), "hip_runtime_version": 60032830}  # cuda* calls, yet rocm
    path.write_text(json.dumps(doc))
    assert ingest_trace(path, workers=1).facts["runtime"] == "rocm"


@pytest.mark.skipif(not has_trace("v100_resnet50_train_pt19"), reason="shared trace not present")
def test_the_pytorch_19_trace_is_a_cuda_one() -> None:
    """Its 11,923 `Runtime` events are all `cuda*` calls; it writes no `cuda_runtime_version`."""
    assert ingested("v100_resnet50_train_pt19").facts["runtime"] == "cuda"
