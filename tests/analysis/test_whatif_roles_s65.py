"""A kernel's attainable time is its own share of its op call's: the what-if never saves more than
the headroom of what it changed (campaign AT, class 1).

Three `aten::mm` calls at 10, 14 and 18 µs on the host, each launching a GEMM kernel A and a
split-K reduce B (at +0.5 and +1.5 µs), back to back on stream 7 from 15 µs: every launch comes
before the kernels ahead of it could end even at their attainable times, so nothing waits for its
launch and a saving on the stream is a saving end to end:

    call 1: A [15, 35]   (20 µs)  B [35, 45]   (10 µs)   → A is the call's main kernel (longest)
    call 2: A [45, 95]   (50 µs)  B [95, 155]  (60 µs)   → B is main, A a helper
    call 3: A [155, 205] (50 µs)  B [205, 265] (60 µs)   → B is main, A a helper

The roofline (written by hand here, not computed): the row of A as main (call 1) has an
attainable time of 3 µs per call, op time 30 µs, headroom 27 µs; the row of B as main (calls 2
and 3) 11 µs per call, op time 220 µs, headroom 220 − 22 = 198 µs. Each kernel's share of its
call's attainable time, in proportion to its own time in the call:

    call 1: A 3 · 20/30 = 2,  B 3 · 10/30 = 1
    calls 2, 3: A 11 · 50/110 = 5,  B 11 · 60/110 = 6
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.whatif import attainable_per_activity, parse_speedup, what_if, where_optimisation_pays
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.store.outputs import load_kernels

A = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
B = "void cublasLt::splitKreduce_kernel<32, 16, int, float, __half, float, __half, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, __half const*, __half*, float const*, float const*, __half const*, float const*, __half*, void*, long, float*, int*)"
CALLS = ((20.0, 10.0), (50.0, 60.0), (50.0, 60.0))  # (A, B) per call


def _trace() -> dict:
    events, corr, gpu = [], 100, 15.0
    for call, durations in enumerate(CALLS):
        ts = 10 + 4 * call
        mm = {"External id": call + 1, "Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["c10::Half"] * 2}
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": 3,
                       "args": mm})  # fmt: skip
        for k, (name, dur) in enumerate(zip((A, B), durations, strict=True)):
            ids = {"External id": call + 1, "correlation": corr}
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts + 0.5 + k, "dur": 1, "args": ids})  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": gpu, "dur": dur,
                           "args": {**ids, "device": 0, "stream": 7}})  # fmt: skip
            gpu += dur
            corr += 1
    return {"traceEvents": events}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The kernels and host events of the trace, and its roofline written by hand."""
    folder = tmp_path_factory.mktemp("roles")
    trace = folder / "t.json"
    trace.write_text(json.dumps(_trace()))
    out = folder / "out"
    write_outputs(ingest_paths([trace]), out)
    kernels = load_kernels(out)
    assert kernels.sort_values("ts_us")["name"].tolist() == [A, B] * 3
    assert kernels["cpu_op_id"].nunique() == 3
    first = kernels.sort_values("ts_us").iloc[0]  # the keys every row shares (one op and its inputs)
    keys = {k: first[k] for k in ("launcher", "input_dims", "input_types", "op_mapping")}
    roofline = pd.DataFrame(
        [
            {"name": A, **keys, "role": "main", "count": 1, "attainable_us": 3.0, "headroom_us": 27.0, "formulas": 1},
            {"name": B, **keys, "role": "main", "count": 2, "attainable_us": 11.0, "headroom_us": 198.0, "formulas": 1},
            {"name": A, **keys, "role": "helper", "count": 2, "attainable_us": np.nan, "headroom_us": np.nan,
             "formulas": 0},
            {"name": B, **keys, "role": "helper", "count": 1, "attainable_us": np.nan, "headroom_us": np.nan,
             "formulas": 0},
        ]
    )  # fmt: skip
    return kernels, load_host_events(out, 0), roofline


def test_each_kernel_gets_its_share_of_its_calls_attainable_time(run) -> None:
    kernels, _, roofline = run
    ordered = kernels.sort_values("ts_us").reset_index(drop=True)
    # A helper had been given its own name's main row (A: 3 µs in calls 2 and 3), and each kernel of
    # a call the whole call's attainable time (call 1 "at its roofline" took 3 + 3 µs, not 3)
    assert attainable_per_activity(ordered, roofline).tolist() == pytest.approx([2.0, 1.0, 5.0, 6.0, 5.0, 6.0])


def test_a_row_brought_to_its_roofline_saves_at_most_its_headroom(run) -> None:
    """The row of A as main stands for call 1 alone: bringing it to its roofline takes A to 2 µs
    and B to 1 µs, 27 µs saved — its whole headroom, never more (it had been 111 µs: A set to
    3 µs in all three calls, 17 + 47 + 47). The row of B: calls 2 and 3 to 11 µs each, 198 µs."""
    kernels, host, roofline = run
    graph = build_graph(kernels, host, zero_weight_launches=True)
    pays = {row["kernel"]: row for row in where_optimisation_pays(graph, roofline)}
    assert pays[A]["end_to_end_saving_us"] == pytest.approx(27.0)
    assert pays[B]["end_to_end_saving_us"] == pytest.approx(198.0)
    for row in pays.values():
        assert row["end_to_end_saving_us"] <= row["headroom_us"] + 1e-9


def test_whatif_to_the_roofline_saves_each_kernels_share(run) -> None:
    """`kernel=A:roofline` takes A to its share in every call: 20 → 2, 50 → 5, 50 → 5, 108 µs;
    `op=matmul:roofline` every call to its attainable time: 27 + 2 · 99 = 225 µs, the op's whole
    headroom (it had been 209: B of call 1 kept, the others at the row's whole time)."""
    kernels, host, roofline = run
    op = str(roofline["op_mapping"].iloc[0])
    by_kernel = what_if(kernels, host, [parse_speedup("kernel=sm90_xmma:roofline")], roofline=roofline)
    assert by_kernel["gpu_us_saved_locally"] == pytest.approx(108.0)
    assert by_kernel["saving_us"] == pytest.approx(108.0)
    by_op = what_if(kernels, host, [parse_speedup(f"op={op}:roofline")], roofline=roofline)
    assert by_op["gpu_us_saved_locally"] == pytest.approx(225.0)
    assert by_op["saving_us"] == pytest.approx(225.0)


def test_the_reports_weighing_saves_at_most_each_rows_headroom(tmp_path: Path) -> None:
    """The same trace on an H100, through `atlas report`: its roofline (the catalog's peaks) has
    the row of A as main for call 1 and the row of B as main for calls 2 and 3; nothing waits for
    its launch, so each row brought to its roofline saves its whole headroom end to end, never
    more (the report's graph had no `cpu_op_id`: A's row had saved 105.8 µs of 27.8)."""
    doc = _trace()
    doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85021163520,
                                "computeMajor": 9, "computeMinor": 0, "numSms": 132}]  # fmt: skip
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out)
    pays = json.loads((out / "report.json").read_text())["critical_path"]["where_optimisation_pays"]
    assert sorted(row["kernel"] for row in pays) == sorted([A, B])
    for row in pays:
        assert row["end_to_end_saving_us"] == pytest.approx(row["headroom_us"], abs=1e-3)
