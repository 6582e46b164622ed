"""A trace whose kernels compiled code launched inside `CompiledFunction`, with no op of their own
(an older PyTorch's Inductor: `cuLaunchKernel` straight under the region), recorded the region's
`Input Dims`, yet was told it was "recorded without shapes (record_shapes=False)" and to
re-profile with record_shapes=True (campaign BF, class 3). No op recorded those kernels'
arguments whatever record_shapes was: the advice names that reason, and an eager op without
shapes beside them still gets the record_shapes advice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.report.trust_view import trust_lines

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}
# the three Triton kernels the region launches, 20 + 30 + 50 µs
KERNELS = (("triton_poi_fused_add_mul_0", 20), ("triton_red_fused_sum_1", 30), ("triton_poi_fused_relu_2", 50))


def _compiled(tmp_path: Path, eager_shapes: bool | None = None) -> Path:
    """CompiledFunction (its Input Dims [[64, 128], [128]]) launching KERNELS by cuLaunchKernel with
    no op around each launch; `eager_shapes` not None: an eager aten::add kernel (10 µs) after it,
    its op recorded with or without Input Dims."""
    region = {"External id": 1, "Input Dims": [[64, 128], [128]], "Input type": ["float", "float"]}
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 1, "tid": 1, "ts": 1000, "dur": 500}
        | {"args": region}
    ]
    for i, (name, dur) in enumerate(KERNELS):
        launch = {"correlation": 10 + i, "External id": 1}
        events.append(
            {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 1, "ts": 1010 + 10 * i}
            | {"dur": 5, "args": launch}
        )
        args = {**launch, "device": 0, "stream": 7, "grid": [4, 1, 1], "block": [128, 1, 1]}
        events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 2000 + 100 * i, "dur": dur}
            | {"args": args}
        )
    if eager_shapes is not None:
        add: dict[str, Any] = {"External id": 3}
        if eager_shapes:
            add |= {"Input Dims": [[64], [64], []], "Input type": ["float", "float", "Scalar"]}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 3000, "dur": 20, "args": add},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3005, "dur": 5}
            | {"args": {"correlation": 20, "External id": 3}},
            {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 3100}
            | {
                "dur": 10,
                "args": {"device": 0, "stream": 7, "correlation": 20, "grid": [1, 1, 1], "block": [64, 1, 1]},
            },
        ]
    trace = tmp_path / "compiled.json"
    trace.write_text(json.dumps({"deviceProperties": [H100], "traceEvents": events}))
    return trace


def _trust(tmp_path: Path, trace: Path) -> dict[str, Any]:
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace]), out)
    build_report(out, None, tmp_path / "r.html")
    return json.loads((out / "report.json").read_text())["trust"]


def test_compiled_region_kernels_are_not_said_to_lack_record_shapes(tmp_path: Path) -> None:
    trust = _trust(tmp_path, _compiled(tmp_path))
    assert trust["uncosted_time_us"] == 100.0  # 20 + 30 + 50 µs: no kernel has shapes of its own
    assert trust["shapes_recorded"] == "yes"  # was "no": nothing says record_shapes was off
    assert len(trust["advice"]) == 1
    advice = trust["advice"][0]
    assert "compiled region" in advice and "without an op of their own" in advice
    assert "record_shapes=True gives them none" in advice
    assert "record_shapes=False" not in advice and "re-profile with torch.profiler" not in advice
    lines = "\n".join(trust_lines(trust))
    assert "recorded without shapes" not in lines
    assert "to cost more: profile with a PyTorch whose Inductor records each Triton launch" in lines


def test_an_eager_op_without_shapes_still_asks_for_record_shapes(tmp_path: Path) -> None:
    trust = _trust(tmp_path, _compiled(tmp_path, eager_shapes=False))
    assert trust["shapes_recorded"] == "no"  # aten::add's kernel (10 µs) has an op, and it recorded no shapes
    assert "record_shapes=True" in trust["advice"][0] and "record_shapes=False" in trust["advice"][0]
    assert "compiled region" in trust["advice"][1]
    # with its shapes: the add is costed, the region's kernels still are not and need no record_shapes
    trust = _trust(tmp_path / "shaped", _compiled(tmp_path, eager_shapes=True))
    assert trust["shapes_recorded"] == "yes"
    assert trust["uncosted_time_us"] == 100.0
    assert len(trust["advice"]) == 1 and "compiled region" in trust["advice"][0]
