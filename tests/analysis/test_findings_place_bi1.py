"""A kernel-headroom finding sums every call of its kernel under its op (all shapes, all modules):
its place is the module holding most of that time, and where the calls ran in several modules it
says how much of the time that module holds and of how many (campaign BI 1: "matmul / Linear_1 …
30.0 µs in 2 calls" named the module of the first call, 10 µs, where 20 µs ran in Linear_10).
Expected texts are worked out by hand from the traces built here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.analysis.findings import headroom_findings, report_findings

SGEMM = "ampere_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
MM = {"op": "aten::mm", "dims": [[64, 128], [128, 256]], "types": ["float", "float"], "kernel": SGEMM}
ADDOP = {"op": "aten::add", "dims": [[64, 256], [64, 256], []], "types": ["float", "float", "Scalar"], "kernel": ADD}


def _trace(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A one-step Kineto trace: per call, its `nn.Module` frames (dotted path, outermost first),
    the CPU op, its launch and its kernel of `kdur` µs at `kts` on stream 7."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 200}
    ]
    python_id = 1
    for i, call in enumerate(calls):
        corr, ext, ots = 101 + i, 1001 + i, 10 + 20 * i
        for depth, part in enumerate(call["module"].split(".") if call["module"] else []):
            events.append(
                {
                    **{"ph": "X", "cat": "python_function", "name": f"nn.Module: {part}", "pid": 1, "tid": 1},
                    **{"ts": ots - 1 + depth * 0.1, "dur": 10 - depth * 0.2},
                    "args": {"Python id": python_id, "Python parent id": python_id - 1 if depth else 0},
                }
            )
            python_id += 1
        op_args = {"External id": ext, "Input Dims": call["dims"], "Input type": call["types"]}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": call["op"], "pid": 1, "tid": 1, "ts": ots, "dur": 8, "args": op_args},
            {
                **{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1},
                **{"ts": ots + 2, "dur": 4, "args": {"correlation": corr, "External id": ext, "cbid": 211}},
            },
            {
                **{"ph": "X", "cat": "kernel", "name": call["kernel"], "pid": 0, "tid": 7},
                **{"ts": call["kts"], "dur": call["kdur"]},
                "args": {"correlation": corr, "External id": ext, "device": 0, "stream": 7},
            },
        ]
    device = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "numSms": 132}
    return {
        "schemaVersion": 1,
        "deviceProperties": [{**device, "computeMajor": 9, "computeMinor": 0}],
        "traceEvents": events,
    }


def _analysed(tmp_path: Path, calls: list[dict[str, Any]]):  # -> Analysis
    from kernel_atlas.core.devices import get_device
    from kernel_atlas.ingest.pipeline import ingest_trace
    from kernel_atlas.roofline.analysis import analyse

    path = tmp_path / "single.json"
    path.write_text(json.dumps(_trace(calls)))
    return analyse(ingest_trace(path, workers=1).frame, get_device("h100-sxm"))


def test_a_kernel_of_one_shape_in_two_modules_names_the_heavier_one(tmp_path: Path) -> None:
    """campaign BI's single.json: the sgemm 10 µs in Net_0.Linear_1, then 20 µs in Net_0.Linear_10
    (one shape: one roofline row, which keeps its first call's stack); the add 5 µs in
    Net_0.Linear_1.Sub_0, then 7 µs in Net_0 itself."""
    analysis = _analysed(
        tmp_path,
        [
            {**MM, "module": "Net_0.Linear_1", "kts": 20, "kdur": 10},
            {**MM, "module": "Net_0.Linear_10", "kts": 40, "kdur": 20},
            {**ADDOP, "module": "Net_0.Linear_1.Sub_0", "kts": 60, "kdur": 5},
            {**ADDOP, "module": "Net_0", "kts": 80, "kdur": 7},
        ],
    )
    found = headroom_findings(analysis.roofline, kernels=analysis.kernels)
    places = {f.kernel: (f.where, f.evidence.split(": ", 1)[1].split(",")[0]) for f in found}
    # 10 + 20 = 30 µs, of which Linear_10 holds 20; 5 + 7 = 12 µs, of which Net_0 holds 7
    assert places == {
        SGEMM: ("matmul / Linear_10 (20.0 of 30.0 µs; 2 modules)", "30.0 µs in 2 calls"),
        ADD: ("add / Net_0 (7.0 of 12.0 µs; 2 modules)", "12.0 µs in 2 calls"),
    }
    # the report's findings read the calls alike (no critical path here: headroom ranked)
    reported = {f.kernel: f.where for f in report_findings(analysis.roofline, None, {}, kernels=analysis.kernels)}
    assert reported[SGEMM] == "matmul / Linear_10 (20.0 of 30.0 µs; 2 modules)"


def test_a_kernel_in_one_module_reads_as_before(tmp_path: Path) -> None:
    """Both sgemm calls in Net_0.Linear_1 (10 + 20 µs): one place, no count."""
    analysis = _analysed(
        tmp_path,
        [
            {**MM, "module": "Net_0.Linear_1", "kts": 20, "kdur": 10},
            {**MM, "module": "Net_0.Linear_1", "kts": 40, "kdur": 20},
        ],
    )
    (finding,) = headroom_findings(analysis.roofline, kernels=analysis.kernels)
    assert finding.where == "matmul / Linear_1"


def test_calls_outside_any_module_are_one_place(tmp_path: Path) -> None:
    """The add 5 µs in Net_0.Linear_1, 7 µs outside any module: the heavier place is none."""
    analysis = _analysed(
        tmp_path,
        [
            {**ADDOP, "module": "Net_0.Linear_1", "kts": 20, "kdur": 5},
            {**ADDOP, "module": "", "kts": 40, "kdur": 7},
        ],
    )
    (finding,) = headroom_findings(analysis.roofline, kernels=analysis.kernels)
    assert finding.where == "add / no nn.Module (7.0 of 12.0 µs; 2 modules)"


STACK_1 = "cuLaunchKernel <- aten::mm <- nn.Module: Linear_1 <- model/block.py(12): forward <- nn.Module: Block_0"
STACK_10 = "cuLaunchKernel <- aten::mm <- nn.Module: Linear_10 <- model/head.py(40): forward <- nn.Module: Block_0"


def test_roofline_rows_of_two_shapes_in_two_modules() -> None:
    """Without the calls (a report of several ranks keeps no rows), the roofline's rows: the kernel
    at two shapes, 12 µs in Linear_1 (first) and 18 µs in Linear_10 → Linear_10 holds 18 of 30 µs,
    and its stack's frame is head.py's; j in one module reads as before."""
    roofline = pd.DataFrame(
        {
            "name": ["k", "k", "j"],
            "op_mapping": ["matmul", "matmul", "add"],
            "op_time_us": [12.0, 18.0, 4.0],
            "headroom_us": [6.0, 9.0, 1.0],
            "count": [2, 3, 1],
            "bound": ["memory", "memory", "memory"],
            "call_stack": [STACK_1, STACK_10, STACK_1],
        }
    )
    k, j = headroom_findings(roofline)
    assert k.where == "matmul / Linear_10 (18.0 of 30.0 µs; 2 modules) / head.py(40): forward"
    assert "30.0 µs in 5 calls" in k.evidence
    assert j.where == "add / Linear_1 / block.py(12): forward"
