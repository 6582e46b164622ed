"""What to fix first says what its numbers stand on (campaign BM 3 and 7, BN 1), checked by hand:

- a kernel finding whose cost is an estimate (roofline.parquet `estimate`: "dim 0 assumed", "NHD
  layout assumed") says how much of its time is estimated and what was assumed — it had read as
  a plain "memory-bound, 68.3 % SOL";
- a `latency`-bound kernel (a 1-byte DtoH copy of 2.24 µs, attainable 0.00002 µs) is said as
  per-call latency that fewer calls save, not as headroom to its roofline;
- the critical path's cap on hiding communication is its communication segments' sum (300.0 µs),
  not its rounded share (3,140 µs × 9.55 % = 299.87 µs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.analysis.findings import communication_findings, headroom_findings, path_communication
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from tests.support.traces import trace_path

INDEX_SELECT = (
    "output [50000, 4096] (204800000 elements, dim 0 (dim not recorded: 0 assumed)): "
    "409600000 read from self and 409600000 written + index 400000 read"
)
PAGED = (
    "bytes = Q+O 2·32·32·128·2 + K+V 2·32785·8·128·2 (H_kv from the KV cache's axis −2, NHD layout "
    "assumed; KV-cache writes on their own op)"
)


def test_a_finding_on_an_estimated_cost_says_so_and_what_was_assumed() -> None:
    # three index_selects of 250 µs, attainable 170.75 µs each (819,600,000 B at 4,800 GB/s):
    # 750 µs, 237.75 µs headroom, 512.25 µs attainable → 68.3 % SOL, all of it on "dim 0 assumed"
    roofline = pd.DataFrame(
        {
            "name": ["indexSelectLargeIndex", "gemm"],
            "op_mapping": ["index_select", "matmul"],
            "op_time_us": [750.0, 100.0],
            "headroom_us": [237.75, 50.0],
            "count": [3, 1],
            "bound": ["memory", "compute"],
            "estimate": [True, False],
            "formula": [INDEX_SELECT, "2·M·N·K"],
        }
    )
    index, gemm = headroom_findings(roofline)
    assert index.why == "memory-bound, 68.3 % SOL, estimated cost"
    assert index.estimated_pct == 100.0 and index.to_json()["estimated_pct"] == 100.0
    assert (
        "its cost is an estimate for 100.0 % of its time (roofline.parquet `estimate`: dim not recorded: "
        "0 assumed)" in index.evidence
    )
    # the GEMM's cost stands on recorded shapes: nothing said, 0 % estimated
    assert gemm.why == "compute-bound, 50.0 % SOL" and "estimate for" not in gemm.evidence
    assert gemm.estimated_pct == 0.0


def test_the_estimated_share_is_weighted_by_time_over_the_findings_rows() -> None:
    # one paged-attention kernel at two shapes: 60 µs on an assumed NHD layout, 40 µs not → 60 %
    roofline = pd.DataFrame(
        {
            "name": ["paged_attention", "paged_attention"],
            "op_mapping": ["attention", "attention"],
            "op_time_us": [60.0, 40.0],
            "headroom_us": [30.0, 30.0],
            "count": [2, 2],
            "bound": ["memory", "memory"],
            "estimate": [True, False],
            "formula": [PAGED, "recorded layout"],
        }
    )
    [finding] = headroom_findings(roofline)
    assert finding.estimated_pct == 60.0
    assert finding.why == "memory-bound, 40.0 % SOL, cost estimated for 60 % of its time"
    assert "an estimate for 60.0 % of its time (roofline.parquet `estimate`: NHD layout assumed)" in finding.evidence
    # a roofline that does not say: no key, nothing said
    [plain] = headroom_findings(roofline.drop(columns=["estimate"]))
    assert plain.estimated_pct is None and "estimated_pct" not in plain.to_json()
    assert plain.why == "memory-bound, 40.0 % SOL"


def test_a_latency_bound_kernel_is_said_as_latency_not_headroom_to_its_roofline() -> None:
    # a 1-byte DtoH copy of 2.24 µs: attainable 1 B / 64 GB/s = 0.0000156 µs, headroom 2.24 µs
    roofline = pd.DataFrame(
        {
            "name": ["Memcpy DtoH (Device -> Pinned)"],
            "op_mapping": ["memcpy"],
            "op_time_us": [2.24],
            "headroom_us": [2.24],
            "count": [1],
            "bound": ["latency"],
            "estimate": [False],
        }
    )
    [copy] = headroom_findings(roofline)
    assert copy.why == "latency-bound: fewer calls, not a faster kernel"
    assert "all of its headroom is in latency-bound calls" in copy.evidence
    assert "only fewer calls (fused, batched or dropped) save it" in copy.evidence
    assert copy.saving_us == 2.24  # the ranking stays by the saving: what dropping the copy saves


def test_a_kernel_with_some_latency_bound_calls_says_how_much_of_its_headroom_they_hold() -> None:
    # add_rmsnorm: 300 µs at a large shape (memory, 100 µs headroom), 72 calls of 4.8 µs (latency,
    # 345.6 µs, 330 µs headroom): the heaviest row's bound leads, 330 µs are latency
    roofline = pd.DataFrame(
        {
            "name": ["add_rmsnorm", "add_rmsnorm"],
            "op_mapping": ["rms_norm", "rms_norm"],
            "op_time_us": [345.6, 300.0],
            "headroom_us": [330.0, 100.0],
            "count": [72, 10],
            "bound": ["latency", "memory"],
        }
    )
    [finding] = headroom_findings(roofline)
    assert finding.saving_us == 430.0
    assert finding.why == "latency-bound: fewer calls, not a faster kernel"
    assert "; 330.0 µs of its headroom is in latency-bound calls" in finding.evidence
    [memory] = headroom_findings(roofline.iloc[::-1].reset_index(drop=True))
    assert memory.why.startswith("memory-bound, ")
    assert "; 330.0 µs of its headroom is in latency-bound calls" in memory.evidence


def test_the_path_cap_on_hiding_communication_is_its_segments_sum() -> None:
    # 4 ranks joined: 3,140 µs path, 5 × 50 µs all-reduces after the last arrival + a 50 µs
    # collective edge = 300.0 µs communication; breakdown_pct rounds it to 9.55 % (299.87 µs)
    path = {
        "rank": None,
        "joint_ranks": 4,
        "total_us": 3140.0,
        "breakdown_pct": {"gpu_communication_bound": 9.55},
        "breakdown_us": {"gpu_communication_bound": 300.0},
    }
    assert path_communication(path) == (300.0, None)
    device = [{"rank": 0, "device": 0, "communication_us": 2040.0, "overlap_us": 0.0}]
    [finding] = communication_findings(device, {0: 1740.0}, path)
    assert finding.saving_us == 300.0  # 2,040 − 1,740 waiting = 300.0 to hide, at most 300.0 on the path
    assert "at most 300.0 µs" not in finding.evidence  # not capped below what it hides
    [capped] = communication_findings(device, {0: 1000.0}, path)
    assert capped.saving_us == 300.0 and "at most 300.0 µs, its communication on the path" in capped.evidence
    # a path without the sum keeps its share of the total
    shared = {k: v for k, v in path.items() if k != "breakdown_us"}
    assert path_communication(shared) == (pytest.approx(299.87), None)


def test_qwen_decode_paged_attention_finding_says_its_layout_is_assumed(tmp_path: Path) -> None:
    out = tmp_path / "q"
    replay, capture = (
        trace_path("mi300x_sglang_qwen3_8b_decode_graph"),
        trace_path("mi300x_sglang_qwen3_8b_decode_capture_bs32"),
    )
    write_outputs(ingest_paths([replay], captures=[capture]), out)
    build_report(out, None, tmp_path / "r.html")
    findings = json.loads((out / "report.json").read_text())["findings"]
    attention = next(f for f in findings if f["kind"] == "kernel_headroom" and "paged_attention" in f["what"])
    # 36 calls, 2,127.9 µs, every one on "NHD layout assumed" (the tester's finding #1, 43.0 % SOL)
    assert attention["estimated_pct"] == 100.0
    assert attention["why"] == "memory-bound, 43.0 % SOL, estimated cost"
    assert "(roofline.parquet `estimate`: NHD layout assumed)" in attention["evidence"]
