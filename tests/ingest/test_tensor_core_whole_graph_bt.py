"""Campaign BT class 4: the tensor-core rule for an Nsight whole-graph replay (its row
`<CUDA graph 1 replay>`: the kernels it ran are not in the export) holds for such rows only —
a graph launch's row of no graph node —, not for a Kineto kernel merely so named, whose op
records bf16 on an H100; and where whole-graph replays are among the reasons some kernel time is
unknown, report.json, the terminal and the page say so (they had said only "no dtypes recorded,
or a GPU not in the catalog"). Values by hand from the traces written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.report.efficiency_view import efficiency_facts, efficiency_html, efficiency_lines, report_lines
from tests.ingest.test_nsys_hand_checks_s65 import CALL, TA, A, _export
from tests.ingest.test_tensor_core_told import GEMM, _device, _trace

WHOLE_WHY = (
    "CUDA graphs replayed whole, whose kernels the export does not hold; no dtypes recorded; "
    "or a GPU not in the catalog"
)
DEFAULT_WHY = "no dtypes recorded, or a GPU not in the catalog"


def test_a_kineto_kernel_named_like_a_graph_replay_is_told_by_its_dtype(tmp_path: Path) -> None:
    """Four kernels each launched by cudaLaunchKernel under an aten::mm that records bf16, on an
    H100: `<CUDA graph 3 replay>` 40 µs, `<CUDA graph replay>` 50 µs, `<CUDA graph -1 replay>`
    50 µs and my_gemm_kernel 40 µs, all of category gemm. None is a graph launch, so all four are
    tensor-core work by category and dtype: 180 of 180 µs, nothing unknown (it had been 140 µs
    unknown, 77.8 %)."""
    kernels = [
        ("aten::mm", "<CUDA graph 3 replay>", 40.0),
        ("aten::mm", "<CUDA graph replay>", 50.0),
        ("aten::mm", "<CUDA graph -1 replay>", 50.0),
        ("aten::mm", GEMM, 40.0),
    ]
    frame, device = _device(_trace(tmp_path / "graphname.json", kernels, types=True))
    assert frame["category"].astype(str).tolist() == ["gemm"] * 4
    assert frame["tensor_core"].tolist() == [True, True, True, True]
    assert device["tensor_core_time_pct"] == 100.0
    assert device["tensor_core_unknown_pct"] == 0.0
    assert device["tensor_core_unknown_why"] is None


def test_whole_graph_replays_are_named_among_the_reasons(tmp_path: Path) -> None:
    """The Nsight export of test_nsys_exports_bp: sgemm 10 µs and add_kernel 1 µs (known no),
    graph 1's whole replay [30, 40] µs (unknown). 10 of 21 µs unknown, 47.6 %; the reason names
    the whole-graph replays in report.json, in the ingest's and the report's terminal lines and
    in the page's cell."""
    path = _export(
        tmp_path / "graph.sqlite",
        (CALL, (21000, 22000, TA, 15, 4)),
        ("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (30000, 40000, 0, 8, 15, ?, 1)", (A,)),
    )
    result = ingest_trace(path, workers=1)
    trace = {**result.facts, "file": path.name}
    facts = efficiency_facts({"traces": [trace]})
    (device,) = facts["devices"]
    assert device["tensor_core_unknown_pct"] == pytest.approx(100 * 10 / 21, abs=0.05)
    assert device["tensor_core_unknown_why"] == WHOLE_WHY
    said = f"tensor cores 0.0% (of the kernel time it can tell; 47.6% unknown: {WHOLE_WHY})"
    assert said in report_lines(facts, None)[0]
    assert said in efficiency_lines(trace)[0]
    assert f"<td>0.0% (47.6% of kernel time unknown: {WHOLE_WHY})</td>" in efficiency_html(facts)


def test_without_whole_graph_replays_the_reason_is_the_dtypes_or_the_gpu(tmp_path: Path) -> None:
    """A Kineto trace whose gemm kernel's op recorded no dtype (100 µs, all unknown): report.json
    gives the reason the terminal says, which names no graph."""
    _, device = _device(_trace(tmp_path / "untyped.json", [("aten::mm", GEMM, 100.0)], types=False))
    assert device["tensor_core_unknown_pct"] == 100.0
    assert device["tensor_core_unknown_why"] == DEFAULT_WHY
    (line,) = report_lines({"devices": [device]}, None)
    assert f"tensor cores n/a (the trace cannot tell: {DEFAULT_WHY})" in line
    assert "<td>n/a (100.0% of kernel time unknown)</td>" in efficiency_html({"devices": [device]})
