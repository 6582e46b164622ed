"""Why an activity has no launch (summary.json `unlinked`, the `link` column), by what the trace
shows: CUPTI and roctracer number launches in order, so a correlation id before the first
recorded launch's was issued before the window opened, one after it inside the window (its
record lost); a trace of no launches at all says that. An activity whose launch is missing but
whose External id names its op is linked by it, and says so (stop 57's schema campaign: a ROCm
kernel with correlation 0 was "inferred", one without a correlation "had no correlation id"
while it had its launcher)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.ingest.link import UNLINKED_LAUNCH_LOST, UNLINKED_NO_LAUNCH, UNLINKED_NO_LAUNCHES
from kernel_atlas.ingest.pipeline import ingest_trace

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


def _op(ts: float, external: int) -> dict[str, Any]:
    args = {
        "External id": external,
        "Input Dims": [[64, 256], [64, 256], []],
        "Input type": ["float", "float", "Scalar"],
    }
    return {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": ts, "dur": 20, "args": args}


def _launch(ts: float, corr: int, external: int) -> dict[str, Any]:
    args = {"External id": external, "correlation": corr}
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 5,
        "args": args,
    }


def _kernel(ts: float, grid: int, **ids: int) -> dict[str, Any]:
    args = {"device": 0, "stream": 7, "grid": [grid, 1, 1], "block": [128, 1, 1], **ids}
    return {"ph": "X", "cat": "kernel", "name": ADD, "pid": 0, "tid": 7, "ts": ts, "dur": 5, "args": args}


def _links(tmp_path: Path, events: list[dict[str, Any]]) -> pd.DataFrame:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    frame = ingest_trace(trace).frame.sort_values("ts_us")
    return frame[["link", "launcher", "shapes_inferred"]].astype(object).reset_index(drop=True)


def test_a_missing_launch_is_placed_by_its_correlation(tmp_path: Path) -> None:
    # one recorded launch (correlation 10) between a kernel of correlation 5 and one of 20; their
    # grids differ from the linked kernel's, so nothing is borrowed for them
    events = [
        _kernel(0, 3, correlation=5, **{"External id": 900}),
        _op(100, 1),
        _launch(105, 10, 1),
        _kernel(130, 1, correlation=10, **{"External id": 1}),
        _kernel(200, 2, correlation=20, **{"External id": 901}),
    ]
    links = _links(tmp_path, events)
    assert links["link"].tolist() == [UNLINKED_NO_LAUNCH, "correlation", UNLINKED_LAUNCH_LOST]
    assert UNLINKED_LAUNCH_LOST == "launch not in the trace (issued inside the profiling window, not recorded)"
    # no launch at all in the trace: neither before nor inside a window can be told
    only = _links(tmp_path, [_kernel(0, 1, correlation=5), _kernel(10, 1, correlation=6)])
    assert only["link"].tolist() == [UNLINKED_NO_LAUNCHES] * 2


def test_a_lost_launch_inside_the_window_borrows_shapes_as_one_before_it(tmp_path: Path) -> None:
    events = [_op(100, 1), _launch(105, 10, 1), _kernel(130, 1, correlation=10), _kernel(200, 1, correlation=20)]
    links = _links(tmp_path, events)
    assert links["link"].tolist() == ["correlation", "inferred: same kernel, grid and block"]
    assert links["launcher"].tolist() == ["aten::add", "aten::add"] and links["shapes_inferred"].tolist() == [
        False,
        True,
    ]


def test_an_external_id_that_names_the_op_links_a_launchless_activity(tmp_path: Path) -> None:
    # a second aten::add (External id 2) whose launch is missing: its kernel has correlation 0
    # (roctracer's "none", ROCm/roctracer#100) or none at all; the same kernel, grid and block
    # is linked elsewhere, yet the External id is the stronger evidence
    for ids in ({"correlation": 0, "External id": 2}, {"External id": 2}):
        events = [
            _op(100, 1),
            _launch(105, 10, 1),
            _kernel(130, 1, correlation=10),
            _op(200, 2),
            _kernel(230, 1, **ids),
        ]
        links = _links(tmp_path, events)
        assert links["link"].tolist() == ["correlation", "external id"], ids
        assert links["launcher"].tolist() == ["aten::add", "aten::add"] and not links["shapes_inferred"].any()
