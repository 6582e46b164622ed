"""The roofline of a trace does not depend on the order its events are written in (stop 57's
metamorphic campaign: the format promises no order; shuffled traces changed costs and reasons)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

STATISTICS = "void at::native::batch_norm_collect_statistics_kernel<float>(int)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)"
TRANSFORM = "void at::native::batch_norm_transform_input_kernel<float>(int)"


def _roofline(tmp_path: Path, name: str, events: list[dict[str, Any]]) -> pd.DataFrame:
    trace = tmp_path / f"{name}.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / f"{name}.atlas"
    write_outputs(ingest_paths([trace]), out)
    return build_report(out, "mi300x", tmp_path / f"{name}.html").analysis.roofline


def test_a_call_s_cost_is_on_its_first_longest_kernel_whatever_the_file_order(tmp_path: Path) -> None:
    """One aten::native_batch_norm call on [1,128,32,32] float launches its statistics kernel at
    1050 µs and a fill at 1060 µs, both 6.048 µs long, then a 4.045 µs transform. The cost goes on
    the longest kernel; of the two equal ones, the first to start: the statistics kernel's rule,
    2 FLOP × 131,072 elements = 262,144 FLOPs and 131,072·4 bytes in + out = 1,048,576 bytes. With
    the fill written first in the file it went on the fill: 0 FLOPs, 524,288 bytes."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::native_batch_norm", "pid": 1, "tid": 1, "ts": 1000, "dur": 60}
    op["args"] = {"External id": 1, "Input Dims": [[1, 128, 32, 32], [], [], [], [], [], [], []]}
    op["args"]["Input type"] = ["float", "", "", "", "", "Scalar", "Scalar", "Scalar"]
    launches, kernels = [], []
    for i, (name, dur) in enumerate([(STATISTICS, 6.048), (FILL, 6.048), (TRANSFORM, 4.045)]):
        ids = {"External id": 1, "correlation": 10 + i}
        launches.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1})
        launches[-1].update(ts=1000 + 10 * i, dur=5, args=ids)
        kernels.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 0, "ts": 1050 + 10 * i, "dur": dur})
        kernels[-1]["args"] = {**ids, "device": 0, "stream": 0}
    as_written = _roofline(tmp_path, "a", [op, *launches, *kernels])
    swapped = _roofline(tmp_path, "b", [op, *launches, kernels[1], kernels[0], kernels[2]])
    for roofline in (as_written, swapped):
        main = roofline[roofline["role"] == "main"]
        assert main["name"].tolist() == [STATISTICS]
        assert (main["flops"].iloc[0], main["bytes"].iloc[0]) == (262_144.0, 1_048_576.0)
    columns = ["name", "role", "flops", "bytes", "note"]
    assert as_written[columns].sort_values("name").equals(swapped[columns].sort_values("name"))


def test_kernels_without_a_launcher_keep_their_own_reason(tmp_path: Path) -> None:
    """Two kernels of one name without a launcher: one replayed from a CUDA graph (10 µs), one
    launched before the window (its correlation 5 precedes the first recorded launch's, 20 µs).
    Each is its own roofline row with its own reason, in either file order; they were one row
    with the reason of whichever the file wrote first."""
    graph = {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 100, "dur": 5}
    graph["args"] = {"correlation": 10, "External id": 10}

    def kernel(ts: float, dur: float, corr: int) -> dict[str, Any]:
        args = {"correlation": corr, "External id": corr, "device": 0, "stream": 7}
        return {"ph": "X", "cat": "kernel", "name": "gemm_k", "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}

    before, replayed = kernel(0, 20, 5), kernel(120, 10, 10)
    for name, events in (("a", [before, graph, replayed]), ("b", [graph, replayed, before])):
        roofline = _roofline(tmp_path, name, events).set_index("note")
        assert roofline.loc["launch not in the trace (issued before the profiling window opened)", "total_us"] == 20.0
        assert roofline.loc["replayed from a CUDA/HIP graph (no per-kernel launcher)", "total_us"] == 10.0


def test_a_shuffled_trace_gives_the_same_tables_and_report(tmp_path: Path) -> None:
    """The shared a100_diff_control trace and the same events shuffled: every kernel row, every
    roofline row (its representative call stack, dtypes and formula included) and report.json
    equal; the kernel rows in time order."""
    import gzip
    import random

    from tests.support.traces import has_trace, trace_path

    if not has_trace("a100_diff_control"):
        pytest.skip("../shared/traces not present")
    with gzip.open(trace_path("a100_diff_control"), "rt") as handle:
        document = json.load(handle)
    random.Random(1).shuffle(document["traceEvents"])
    shuffled = tmp_path / "shuffled" / "a100_diff_control.json.gz"  # the same name: the `trace` column
    shuffled.parent.mkdir()
    with gzip.open(shuffled, "wt") as handle:
        json.dump(document, handle)
    reports, tables = [], []
    for name, trace in (("as_written", trace_path("a100_diff_control")), ("shuffled", shuffled)):
        out = tmp_path / f"{name}.atlas"
        write_outputs(ingest_paths([trace]), out)
        report = build_report(out)
        facts = json.loads((out / "report.json").read_text())
        facts.pop("run_id")
        reports.append(facts)
        kernels = pd.read_parquet(out / "kernels.parquet").drop(columns=["launch_thread", "cpu_op_id"])
        tables.append((kernels, report.analysis.roofline))
    (kernels_a, roofline_a), (kernels_b, roofline_b) = tables
    assert kernels_a["ts_us"].is_monotonic_increasing
    pd.testing.assert_frame_equal(kernels_a, kernels_b, check_categorical=False)  # categories: in first-seen order
    pd.testing.assert_frame_equal(roofline_a, roofline_b, check_categorical=False)
    assert reports[0] == reports[1]
