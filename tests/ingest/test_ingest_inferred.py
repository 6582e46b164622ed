"""Kernels launched before the profiling window borrow the one shape signature their kernel
(name, grid, block) has elsewhere in the trace — and nothing when there are several."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel_atlas.ingest.infer import LINK_INFERRED
from kernel_atlas.ingest.link import UNLINKED_NO_LAUNCH
from tests.support.traces import ingested, raw_events

# (trace, kernel correlation) → what every launched kernel with the same name, grid and block
# ran under, read off the JSON: no runtime event has the kernel's correlation; for the others,
# the innermost cpu_op on the launch's thread containing the launch.
HAND_CHECKED = {
    ("a100_cudagraph_rank0", 815108): ("aten::add", [[2, 128, 128], [2, 128, 128], []]),
    ("a100_cudagraph_rank0", 818751): ("aten::mm", [[64, 4096], [4096, 100]]),  # GEMM of a split-K call
    ("a100_cudagraph_rank0", 818753): ("aten::mm", [[64, 4096], [4096, 100]]),  # its split-K reduce
    ("v100_diff_test", 1930958): ("aten::add_", [[2048], [2048], []]),
}


def _launch_ops(stem: str, kernel: dict[str, Any]) -> list[tuple[str, Any]]:
    """(op name, Input Dims) of every launched kernel with `kernel`'s name, grid and block."""
    events = raw_events(stem)
    runtime = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    assert kernel["args"]["correlation"] not in runtime  # launched before the window
    same = [
        e
        for e in events
        if e.get("cat") == "kernel"
        and e["name"] == kernel["name"]
        and e["args"].get("grid") == kernel["args"]["grid"]
        and e["args"].get("block") == kernel["args"]["block"]
        and e["args"].get("correlation") in runtime
    ]
    ops_by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            ops_by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    found = []
    for other in same:
        launch = runtime[other["args"]["correlation"]]
        around = [
            e
            for e in ops_by_thread[(launch["pid"], launch["tid"])]
            if e["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= e["ts"] + e["dur"]
        ]
        op = max(around, key=lambda e: (e["ts"], -e["dur"]))  # innermost: latest start, then shortest
        found.append((op["name"], op["args"].get("Input Dims")))
    return found


@pytest.mark.parametrize(("stem", "correlation"), list(HAND_CHECKED))
def test_kernel_before_the_window_borrows_the_one_signature(stem: str, correlation: int) -> None:
    op, dims = HAND_CHECKED[(stem, correlation)]
    kernel = next(
        e for e in raw_events(stem) if e.get("cat") == "kernel" and e["args"].get("correlation") == correlation
    )
    launched = _launch_ops(stem, kernel)
    assert launched and set(map(json.dumps, launched)) == {json.dumps([op, dims])}
    frame = ingested(stem).frame
    row = frame[(frame["correlation"] == correlation) & (frame["kind"] == "kernel")].iloc[0]
    assert row["link"] == LINK_INFERRED and bool(row["shapes_inferred"])
    assert row["cpu_op"] == op and json.loads(row["input_dims"]) == dims
    assert row["launcher"] is not None and not pd_isna(row["cpu_op_id"])


def pd_isna(value: Any) -> bool:
    return value is None or value != value


def test_split_k_call_is_formed_again_and_costed_once() -> None:
    frame = ingested("a100_cudagraph_rank0").frame
    gemm, reduce = (frame[frame["correlation"] == c].iloc[0] for c in (818751, 818753))
    assert gemm["cpu_op_id"] == reduce["cpu_op_id"]
    assert (frame["cpu_op_id"] == gemm["cpu_op_id"]).sum() == 2


def test_ambiguous_kernel_borrows_nothing() -> None:
    """`AUnaryFunctor<MulFunctor>` with grid [179072,1,1] runs under aten::mul on [11192,8192]
    and on [8192,11192] (same element count, same grid): its launches before the window stay
    unlinked."""
    stem = "a100_cudagraph_rank0"
    name_part = "AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >"
    kernels = [
        e
        for e in raw_events(stem)
        if e.get("cat") == "kernel" and name_part in e["name"] and e["args"].get("grid") == [179072, 1, 1]
    ]
    frame = ingested(stem).frame
    rows = frame[frame["correlation"].isin([k["args"]["correlation"] for k in kernels]) & (frame["kind"] == "kernel")]
    unlaunched = rows[rows["launch"].isna()]
    assert len(unlaunched) > 0
    assert (unlaunched["link"] == UNLINKED_NO_LAUNCH).all() and not unlaunched["shapes_inferred"].any()
    dims = {
        json.dumps(d)
        for _, d in _launch_ops(
            stem, next(k for k in kernels if k["args"]["correlation"] in set(unlaunched["correlation"]))
        )
    }
    assert {json.dumps([[11192, 8192], [], [11192, 8192]]), json.dumps([[8192, 11192], [], [8192, 11192]])} <= dims


@pytest.mark.parametrize("stem", ["a100_cudagraph_rank0", "v100_diff_test"])
def test_share_of_inferred_time_is_reported(stem: str) -> None:
    result = ingested(stem)
    facts = result.facts["shapes_inferred"]
    kernel_time = sum(e["dur"] for e in raw_events(stem) if e.get("cat") == "kernel")
    inferred = result.frame[result.frame["shapes_inferred"]]
    assert facts["kernels"] == len(inferred) > 0
    assert facts["time_us"] == pytest.approx(inferred["dur_us"].sum())
    assert facts["pct_of_kernel_time"] == pytest.approx(100 * facts["time_us"] / kernel_time)
    left = (result.frame["link"] == UNLINKED_NO_LAUNCH) & (result.frame["kind"] == "kernel")
    assert sum(facts["not_inferred"].values()) == left.sum()
