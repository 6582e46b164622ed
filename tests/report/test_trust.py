"""The trust line: costed share of GPU time and the largest reasons for the rest, first in the
terminal report, report.json and the HTML."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from rich.console import Console

from kernel_atlas.analysis.trust import shapes_recorded, trust_facts
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.trust_view import trust_lines
from tests.support.traces import trace_path


def _roofline(rows: list[tuple[str, str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["launcher", "role", "note", "op_time_us"])


def test_reasons_are_grouped_by_op_and_note_and_add_up_to_the_uncosted_time() -> None:
    roofline = _roofline(
        [
            ("aten::mm", "main", "", 60.0),  # costed: 60 of 100 µs
            ("aten::mm", "helper", "cost counted on …", 5.0),  # in the mm call's 60 µs already
            ("aten::cat", "no model", "aten::cat: no tensor shapes recorded", 12.0),
            ("aten::cat", "no model", "aten::cat: no tensor shapes recorded", 8.0),  # another shape: same reason
            ("", "no shapes", "", 15.0),
            ("vllm::moe_forward", "no model", "no cost model for vllm::moe_forward", 5.0),
        ]
    )
    facts = {"gpu_time_us": 100.0, "costed_time_us": 60.0}
    trust = trust_facts(roofline, facts, {"traces": [{"with_launcher": 4, "with_shapes": 3}]})
    assert trust["costed_pct"] == 60.0 and trust["uncosted_time_us"] == 40.0
    assert trust["shapes_recorded"] == "yes" and trust["advice"] == []
    # 12 + 8 µs of aten::cat, its op said once; then 15 µs without a launcher; the 5 µs group is 4th of 3
    assert [(r["op"], r["reason"], r["time_us"], r["pct"]) for r in trust["top_uncosted"]] == [
        ("aten::cat", "no tensor shapes recorded", 20.0, 20.0),
        ("(no launcher)", "no recorded shapes", 15.0, 15.0),
        ("vllm::moe_forward", "no cost model for vllm::moe_forward", 5.0, 5.0),
    ]
    lines = trust_lines(trust)
    assert lines[0] == "costed: 60.0 % of GPU time has FLOPs or bytes (60.0 µs of 100.0 µs)"
    assert lines[1] == "  uncosted 20.0 µs (20.0 %): aten::cat: no tensor shapes recorded"


def test_traces_without_shapes_are_named_with_what_to_reprofile() -> None:
    assert shapes_recorded({"traces": [{"with_launcher": 10, "with_shapes": 0}]}) == "no"
    both = [{"with_launcher": 10, "with_shapes": 0}, {"with_launcher": 10, "with_shapes": 4}]
    assert shapes_recorded({"traces": both}) == "partly"
    assert shapes_recorded({"traces": [{"with_launcher": 0, "with_shapes": 0}]}) == "yes"  # nothing launched
    roofline = _roofline([("aten::addmm", "no model", "aten::addmm: input 0 (self) has no recorded shape", 10.0)])
    trust = trust_facts(roofline, {"gpu_time_us": 10.0, "costed_time_us": 0.0}, {"traces": both[:1]})
    assert "record_shapes=True" in trust["advice"][0]
    assert trust_lines(trust)[1].startswith("the trace was recorded without shapes (record_shapes=False)")


def test_activities_no_op_launched_count_as_recorded_without_shapes() -> None:
    # an Nsight export without NVTX, a Kineto trace of CUDA activity alone: 3 GPU activities, none launched by
    # an op, none with shapes — "yes" before (only traces with launchers were looked at), no advice
    nsys = {"file": "mock.sqlite", "gpu_activities": 3, "with_launcher": 0, "with_shapes": 0}
    kineto = {"file": "gpu_only.json.gz", "gpu_activities": 3, "with_launcher": 0, "with_shapes": 0}
    assert shapes_recorded({"traces": [nsys]}) == "no"
    shaped = {"file": "a.json", "gpu_activities": 5, "with_launcher": 5, "with_shapes": 5}
    assert shapes_recorded({"traces": [kineto, shaped]}) == "partly"
    roofline = _roofline([("", "no shapes", "", 10.0)])
    facts = {"gpu_time_us": 10.0, "costed_time_us": 0.0}
    advice = trust_facts(roofline, facts, {"traces": [nsys]})["advice"]
    assert advice[0].endswith("emit_nvtx(record_shapes=True)")
    advice = trust_facts(roofline, facts, {"traces": [kineto]})["advice"]
    assert "no CPU activity" in advice[0] and "ProfilerActivity.CPU" in advice[0]
    # a trace with no GPU activity has nothing to lack
    assert shapes_recorded({"traces": [{"gpu_activities": 0, "with_launcher": 0, "with_shapes": 0}, shaped]}) == "yes"


def test_the_advice_for_traces_without_shapes_follows_their_format() -> None:
    # an Nsight export has shapes only from PyTorch's NVTX ranges; Kineto's option would not help it
    roofline = _roofline([("aten::mm", "no model", "aten::mm: input 0 (self) has no recorded shape", 10.0)])
    facts = {"gpu_time_us": 10.0, "costed_time_us": 0.0}
    nsys = {"file": "run.nsys-rep", "with_launcher": 10, "with_shapes": 0}
    kineto = {"file": "rank0.json.gz", "with_launcher": 10, "with_shapes": 0}
    advice = trust_facts(roofline, facts, {"traces": [nsys, {**nsys, "file": "run.sqlite"}]})["advice"]
    assert advice[0].endswith("re-profile under torch.autograd.profiler.emit_nvtx(record_shapes=True)")
    # Kineto traces among those without shapes: Kineto's option first
    advice = trust_facts(roofline, facts, {"traces": [nsys, kineto]})["advice"]
    assert advice[0].endswith("re-profile with torch.profiler.profile(record_shapes=True)")


def test_report_leads_with_the_trust_line_in_every_output(tmp_path: Path) -> None:
    from kernel_atlas.report.build import build_report
    from kernel_atlas.report.terminal import print_report

    # HTA's NCCL test trace was recorded with record_shapes=False: 3774 launched activities, none with shapes
    out = tmp_path / "out"
    write_outputs(ingest_paths([trace_path("a100_nccl_8rank_rank0")]), out)
    report = build_report(out, None, tmp_path / "r.html")
    facts = json.loads((out / "report.json").read_text())
    assert next(iter(facts)) == "trust"
    trust = facts["trust"]
    assert trust["shapes_recorded"] == "no"
    assert abs(trust["uncosted_time_us"] - (facts["gpu_time_us"] - facts["costed_time_us"])) < 1e-6
    assert sum(r["time_us"] for r in trust["top_uncosted"]) <= trust["uncosted_time_us"] + 1e-6
    console = Console(record=True, width=300)
    print_report(console, report)
    text = console.export_text().splitlines()
    assert text[0].startswith("costed: ") and "record_shapes=False" in text[1]
    page = (tmp_path / "r.html").read_text()
    assert page.index("costed: ") < page.index("GPU time (all activities")


def test_costs_on_borrowed_shapes_are_said_to_be_estimates() -> None:
    """Kernels with no launch in the window cost with shapes borrowed from the same kernel, grid and
    block (summary.json's `shapes_inferred` per trace): the trust lines say how much of the GPU
    time that is, over every trace; nothing where no shape was borrowed."""
    roofline = _roofline([("aten::mm", "main", "", 150.0)])
    facts = {"gpu_time_us": 200.0, "costed_time_us": 150.0}
    traces = [
        {"with_launcher": 4, "with_shapes": 4, "shapes_inferred": {"kernels": 3, "time_us": 30.0}},
        {"with_launcher": 4, "with_shapes": 4, "shapes_inferred": {"kernels": 2, "time_us": 20.0}},
        {"with_launcher": 4, "with_shapes": 4},  # an older summary.json: no count
    ]
    trust = trust_facts(roofline, facts, {"traces": traces})
    assert trust["shapes_inferred"] == {"kernels": 5, "time_us": 50.0, "pct": 25.0}
    assert trust_lines(trust)[-1] == (
        "  estimated: 5 kernels (50.0 µs, 25.0 % of GPU time) had no launch in the window; their shapes, "
        "and so their costs, are borrowed from launches of the same kernel, grid and block"
    )
    none = [{"with_launcher": 4, "with_shapes": 4, "shapes_inferred": {"kernels": 0, "time_us": 0.0}}]
    trust = trust_facts(roofline, facts, {"traces": none})
    assert trust["shapes_inferred"] is None and not any("estimated" in line for line in trust_lines(trust))
