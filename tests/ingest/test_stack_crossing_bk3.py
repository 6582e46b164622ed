"""A range that crosses a Python frame (the last `ProfilerStep#N`, which closes at the profiler's
exit after the frame that ran the loop has returned; an annotation opened in one frame and closed
in another) must not hide that frame from the call stack and module path of a launch the frame
holds (campaign BK, class 3; traces built by hand, expected stacks read off the times below)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_atlas.ingest.nesting import containers_above, nesting_parents_crossed
from kernel_atlas.ingest.pipeline import ingest_trace

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


def _range(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(ts: float, correlation: int, external_id: int) -> list[dict]:
    # aten::add [ts, ts + 30], its cudaLaunchKernel [ts + 5, ts + 10], the kernel on the GPU
    return [
        _range("cpu_op", "aten::add", ts, 30, **{"External id": external_id}),
        _range("cuda_runtime", "cudaLaunchKernel", ts + 5, 5, correlation=correlation, **{"External id": external_id}),
        {"ph": "X", "cat": "kernel", "name": ADD, "pid": 0, "tid": 7, "ts": ts + 100, "dur": 10,
         "args": {"correlation": correlation, "External id": external_id, "device": 0, "stream": 7}},
    ]  # fmt: skip


def _memory(ts: float) -> dict:
    args = {"Addr": 4096, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048, "Device Type": 1}
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {**args, "Device Id": 0}}  # fmt: skip


def _ingest(tmp_path: Path, events: list[dict]):
    path = tmp_path / "crossing.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return ingest_trace(path, workers=1)


def test_a_frame_outlived_by_the_last_step_stays_in_the_stack(tmp_path: Path) -> None:
    # the tester's case: `<module>` [1, 999] ⊃ aten::add [560, 590] ⊃ cudaLaunchKernel [565, 570],
    # and ProfilerStep#2 [500, 1000] outlives `<module>` by 1 µs; model.py(30): step [505, 655] lies
    # in both. The launch is held by add, step, ProfilerStep#2 (no frame) and `<module>` (1 ≤ 565,
    # 570 ≤ 999): before, the stack ended at step.
    events = [
        _range("python_function", "train.py(10): <module>", 1, 998),
        _range("user_annotation", "ProfilerStep#2", 500, 500),
        _range("python_function", "model.py(30): step", 505, 150),
        *_launch(560, correlation=15, external_id=7),
    ]
    row = _ingest(tmp_path, events).frame.iloc[0]
    assert row["call_stack"] == "cudaLaunchKernel <- aten::add <- model.py(30): step <- train.py(10): <module>"
    assert (row["launcher"], row["cpu_op"], row["step"]) == ("aten::add", "aten::add", 2)


def test_with_profile_train_keeps_the_frames_the_last_step_outlives(tmp_path: Path) -> None:
    # `with profile() as prof: train()`: <module> [0, 6000] ⊃ train.py(5): train [10, 5000] ⊃ a
    # loop module nn.Module: Loop_0 [15, 4990]; the last step opens inside profiler.py(700): step
    # [4000, 4010] at 4005 and closes at the profiler's exit, 5500, after train() has returned. The
    # last iteration's nn.Module: Net_0 [4100, 4800] ⊃ nn.Module: Linear_0 [4200, 4400] ⊃ aten::add
    # [4300, 4330] ⊃ the launch [4305, 4310]; a second launch under the step alone: aten::add
    # [5100, 5130] (train has returned).
    events = [
        _range("python_function", "train.py(1): <module>", 0, 6000),
        _range("python_function", "train.py(5): train", 10, 4990),
        _range("python_function", "nn.Module: Loop_0", 15, 4975),
        _range("python_function", "torch/profiler/profiler.py(700): step", 4000, 10),
        _range("user_annotation", "ProfilerStep#4", 4005, 1495),
        _range("python_function", "nn.Module: Net_0", 4100, 700),
        _range("python_function", "nn.Module: Linear_0", 4200, 200),
        *_launch(4300, correlation=1, external_id=1),
        *_launch(5100, correlation=2, external_id=2),
        _memory(4320),  # an allocation inside the first add: its stack is the launch's, less the launch
    ]
    result = _ingest(tmp_path, events)
    first, second = result.frame.sort_values("ts_us").itertuples()
    # the launch at 4305 is held by add, Linear_0, Net_0, ProfilerStep#4 (no frame), Loop_0, train
    # and <module>, innermost first; before, the step (shorter than Loop_0, so taken for Net_0's
    # parent) hid Loop_0 and train: `... <- nn.Module: Net_0 <- train.py(1): <module>`, module
    # "Net_0.Linear_0"
    assert first.call_stack == (
        "cudaLaunchKernel <- aten::add <- nn.Module: Linear_0 <- nn.Module: Net_0 <- nn.Module: Loop_0 "
        "<- train.py(5): train <- train.py(1): <module>"
    )
    assert first.module == "Loop_0.Net_0.Linear_0"
    assert first.step == 4
    # the launch at 5105: after train returned, only <module> holds it (with the step)
    assert second.call_stack == "cudaLaunchKernel <- aten::add <- train.py(1): <module>"
    assert pd.isna(second.module)
    memory = result.memory
    assert memory is not None and len(memory) == 1
    assert memory["call_stack"].iloc[0] == (
        "aten::add <- nn.Module: Linear_0 <- nn.Module: Net_0 <- nn.Module: Loop_0 <- train.py(5): train "
        "<- train.py(1): <module>"
    )
    assert memory["module"].iloc[0] == "Loop_0.Net_0.Linear_0"


def test_an_annotation_crossing_a_frame_keeps_both_in_start_order(tmp_path: Path) -> None:
    # model.py(3): run [0, 1000] and a record_function range `my_region` [500, 1500] opened in it
    # and closed after it returned; aten::add [600, 630] ⊃ the launch [605, 610] lies in both: the
    # frame started first, so it is outside the annotation
    events = [
        _range("python_function", "model.py(3): run", 0, 1000),
        _range("user_annotation", "my_region", 500, 1000),
        *_launch(600, correlation=1, external_id=1),
    ]
    row = _ingest(tmp_path, events).frame.iloc[0]
    assert row["call_stack"] == "cudaLaunchKernel <- aten::add <- my_region <- model.py(3): run"


def test_containers_above_by_hand() -> None:
    # one thread: 0 F [1, 999], 1 S [500, 1000] (crosses F), 2 P [505, 655], 3 A [560, 590],
    # 4 L [565, 570]. Parents: S holds P; nothing holds S whole; the walk from L lists every range
    # holding L: A, P, S, F.
    start = np.array([1.0, 500, 505, 560, 565])
    end = np.array([999.0, 1000, 655, 590, 570])
    parent, crossed = nesting_parents_crossed(np.zeros(5, np.int64), start, end)
    assert parent.tolist() == [-1, -1, 1, 2, 3]
    assert crossed.tolist() == [-1, 0, -1, -1, -1]  # F is open at 500 and no ancestor of S
    walk, node = [], np.array([4])
    while node[0] >= 0:
        node = containers_above(node, np.array([570.0]), parent, crossed, start, end)
        walk.append(int(node[0]))
    assert walk == [3, 2, 1, 0, -1]
    # a range ending at 1000 (S itself) is not held by F: S's next is the root
    assert containers_above(np.array([1]), np.array([1000.0]), parent, crossed, start, end).tolist() == [-1]
