"""Catalog labels as facts, and the provenance `atlas classify` writes (campaign BS, classes 1, 4,
5 and 6).

Expected values are written by hand from the kernels' names and stacks:

* `triton_per_fused_mul_sum_0` is an Inductor persistent reduction whose fused ops are mul and sum:
  by its name alone `sum` (category `reduction`); inside SGLang's `moe_sum_reduce_torch_compile`
  it is the weighted sum of expert outputs, `moe_reduce` (category `moe`).
* `triton_poi_fused_clamp_sub_0` / `triton_poi_fused_index_lt_where_0` are Inductor pointwise
  kernels: `fused_elementwise` (category `elementwise`) unless compiled from a serving engine's
  bookkeeping (SGLang's `clamp_position`), then `serving_metadata`.
* Every Triton launch of a trace with Python stacks has the launcher `<built-in function launch>`.
* `ampere_sgemm_128x64_tn` is a cuBLAS GEMM (`matmul`, rule `gemm`); `mykernel_x` is a name no rule
  knows (`unknown`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.classify.classifier import Classifier, default_classifier
from kernel_atlas.classify.fill import fill_catalog
from kernel_atlas.classify.rules import load_rules
from kernel_atlas.ingest.pipeline import ingest_trace

LAUNCH = "<built-in function launch>"
MUL_SUM = "triton_per_fused_mul_sum_0"
CLAMP_SUB = "triton_poi_fused_clamp_sub_0"
LT_WHERE = "triton_poi_fused_index_lt_where_0"
SGEMM = "ampere_sgemm_128x64_tn"
# a MoE sum-reduce stack as ingest writes it (innermost frame first), shortened from the seed's #154
MOE_SUM_STACK = " <- ".join(
    [
        "cuLaunchKernel",
        LAUNCH,
        "triton/backends/nvidia/driver.py(522): __call__",
        "<string>(1): launcher",
        MUL_SUM,
        "torch/_inductor/runtime/triton_heuristics.py(888): run",
        "torch/_dynamo/eval_frame.py(829): _fn",
        "sglang/srt/layers/moe/fused_moe_triton/fused_moe.py(1303): moe_sum_reduce_torch_compile",
        "sglang/srt/layers/moe/fused_moe_triton/fused_moe.py(1309): fused_experts_impl",
    ]
)
# the same kernel compiled from a sampler: nothing of MoE or serving bookkeeping on the stack
SAMPLER_STACK = " <- ".join(
    ["cuLaunchKernel", LAUNCH, "<string>(1): launcher", MUL_SUM, "sglang/srt/layers/sampler.py(120): _compiled_sum"]
)


def _trace(kernels: list[tuple[str, str, float]]) -> dict:
    """A Kineto trace: each (kernel, outer Python frame, µs) launched by Inductor's Triton launch
    (`<built-in function launch>` innermost) under that frame."""
    events: list[dict] = []
    for i, (kernel, frame, dur) in enumerate(kernels):
        t, pid = 1000.0 + 200 * i, 10 * i
        frames = [frame, "torch/_inductor/runtime/triton_heuristics.py(888): run", "<string>(1): launcher", LAUNCH]
        for depth, name in enumerate(frames):
            parent = pid + depth if depth else 0
            args = {"Python id": pid + depth + 1, "Python parent id": parent}
            events.append({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1,
                           "ts": t + 2 * depth, "dur": 100.0 - 4 * depth, "args": args})  # fmt: skip
        events.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 10, "dur": 1.0, "args": {"correlation": i + 1}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 20, "dur": dur,
                       "args": {"correlation": i + 1, "device": 0, "stream": 7}})  # fmt: skip
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}


# --- class 1: a label the rules made is no fact ---------------------------------------------------


def test_generic_inductor_kernels_take_their_names_label_not_the_shipped_catalogs(tmp_path: Path) -> None:
    """The shipped catalog holds these three names under `<built-in function launch>`, labelled
    moe_reduce and serving_metadata from their seed stacks by `[[context]]` rules; compiled
    anywhere else they are what their names say (10 µs had read moe, 20 µs metadata, at 1.0)."""
    trace = tmp_path / "generic.json"
    trace.write_text(
        json.dumps(
            _trace(
                [
                    (MUL_SUM, "sglang/srt/layers/sampler.py(120): _compiled_sum", 10.0),
                    (CLAMP_SUB, "transformers/models/t5/modeling_t5.py(400): _relative_position_bucket", 10.0),
                    (LT_WHERE, "mymodel/embed.py(12): forward", 10.0),
                ]
            )
        )
    )
    kernels = ingest_trace(trace).frame
    kernels = kernels[kernels["kind"] == "kernel"].set_index("name")
    assert (kernels["launcher"] == LAUNCH).all()
    assert kernels.loc[MUL_SUM, ["op_mapping", "category"]].tolist() == ["sum", "reduction"]
    assert kernels.loc[CLAMP_SUB, ["op_mapping", "category"]].tolist() == ["fused_elementwise", "elementwise"]
    assert kernels.loc[LT_WHERE, ["op_mapping", "category"]].tolist() == ["fused_elementwise", "elementwise"]
    assert not kernels["label_evidence"].astype(str).str.startswith("catalog").any()
    assert (kernels["label_confidence"] < 1.0).all()


def test_the_context_rule_still_labels_a_kernel_whose_stack_says_so() -> None:
    classifier = default_classifier()
    label = classifier.classify(MUL_SUM, LAUNCH, MOE_SUM_STACK)
    assert (label.op_mapping, label.category, label.evidence) == ("moe_reduce", "moe", "name+stack")
    label = classifier.classify(MUL_SUM, LAUNCH, SAMPLER_STACK)
    assert (label.op_mapping, label.category) == ("sum", "reduction")


def test_only_a_given_label_is_a_fact() -> None:
    """A label with no `label` object, or one whose rule is "given", is a fact under its launcher;
    one `atlas classify` or a trace's catalog.json made (`rule:<id>`, `launcher-table`,
    `catalog:…`) is not."""
    made = {"rule": "rule:inductor-reduction", "evidence": "name+stack", "confidence": 0.8, "detail": "…"}
    for label, fact in (
        (None, True),
        ({"rule": "given", "evidence": "catalog", "confidence": 1.0}, True),
        (made, False),
        ({**made, "rule": "rule:compiled-in-moe-sum-reduce"}, False),
        ({**made, "rule": "launcher-table"}, False),
        ({**made, "rule": "catalog:exact"}, False),
    ):
        entry = {"kernel_name": MUL_SUM, "kernel_implementation": LAUNCH, "op_mapping": "moe_reduce"}
        if label is not None:
            entry["label"] = label
        classifier = Classifier(*load_rules(), [entry])
        got = classifier.classify(MUL_SUM, LAUNCH, SAMPLER_STACK)
        if fact:
            assert (got.op_mapping, got.evidence, got.confidence) == ("moe_reduce", "catalog>name", 1.0), label
            assert "catalog entry #0" in got.detail
        else:
            assert (got.op_mapping, got.evidence) == ("sum", "name"), label


# --- class 4: disagreeing entries of one kernel and launcher ---------------------------------------


def test_disagreeing_entries_of_one_kernel_and_launcher_are_no_fact() -> None:
    entries = [
        {"kernel_name": "mykernel_x", "kernel_implementation": LAUNCH, "op_mapping": "sum"},
        {"kernel_name": "mykernel_x", "kernel_implementation": LAUNCH, "op_mapping": "mean"},
        {"kernel_name": "mykernel_x", "kernel_implementation": LAUNCH, "op_mapping": " tbd "},
    ]
    filled = fill_catalog(entries)
    assert [e["op_mapping"] for e in filled] == ["sum", "mean", "unknown"]  # the rules decide: nothing
    assert (filled[2]["label"]["rule"], filled[2]["label"]["confidence"]) == ("none", 0.0)
    label = Classifier(*load_rules(), entries).classify("mykernel_x", LAUNCH)
    assert (label.op_mapping, label.confidence) == ("unknown", 0.0)


def test_an_exact_match_cites_the_entry_of_that_launcher() -> None:
    """Entry #0 labels the sgemm matmul under aten::mm; #1 layer_norm under my_op: a TBD entry
    under my_op takes #1's label and cites #1 (it had cited #0, the name's first entry)."""
    entries = [
        {"kernel_name": SGEMM, "kernel_implementation": "aten::mm", "op_mapping": "matmul"},
        {"kernel_name": SGEMM, "kernel_implementation": "my_op", "op_mapping": "layer_norm"},
        {"kernel_name": SGEMM, "kernel_implementation": "my_op", "op_mapping": "TBD"},
    ]
    label = fill_catalog(entries)[2]["label"]
    assert (label["rule"], label["evidence"], label["confidence"]) == ("catalog:exact", "catalog>name", 1.0)
    assert "catalog entry #1" in label["detail"] and "#0" not in label["detail"]


# --- class 5: the provenance names what produced the op --------------------------------------------


def test_a_context_rule_that_produced_the_op_is_the_provenances_rule() -> None:
    entries = [
        {"kernel_name": MUL_SUM, "kernel_implementation": LAUNCH, "op_mapping": "TBD", "call_stack": MOE_SUM_STACK}
    ]
    label = fill_catalog(entries)[0]["label"]
    assert fill_catalog(entries)[0]["op_mapping"] == "moe_reduce"
    assert (label["rule"], label["evidence"]) == ("rule:compiled-in-moe-sum-reduce", "name+stack")
    assert label["detail"].startswith("rule:inductor-reduction: ")  # the name's family, in the detail


def test_a_launcher_that_won_over_the_name_is_the_provenances_rule() -> None:
    """ATen's int64 add functor launched by aten::sub: the launcher table says sub and wins."""
    add = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<long>, std::array<char*, 3ul> >"
    )
    filled = fill_catalog([{"kernel_name": add, "kernel_implementation": "aten::sub", "op_mapping": "TBD"}])
    label = filled[0]["label"]
    assert (filled[0]["op_mapping"], label["rule"], label["evidence"]) == ("sub", "launcher-table", "launcher>name")
    assert "rule:aten-add-functor said add" in label["detail"]


# --- class 6: `operation` only for new labels, said to be the op's generic formula -------------------


def test_operation_text_is_written_only_for_new_labels_and_says_it_is_generic() -> None:
    entries = [
        {"kernel_name": "_w8a8_block_fp8_matmul", "kernel_implementation": "", "op_mapping": "matmul", "operation": ""},
        {"kernel_name": SGEMM, "op_mapping": "TBD", "operation": ""},
        {"kernel_name": SGEMM, "kernel_implementation": "x", "op_mapping": "TBD", "operation": "C = A^T B, fp32"},
    ]
    filled = fill_catalog(entries)
    assert filled[0]["operation"] == ""  # a given label's entry is kept as given
    assert filled[1]["op_mapping"] == "matmul"
    assert filled[1]["operation"].startswith("generic matmul: C = A @ B")
    assert filled[2]["operation"] == "C = A^T B, fp32"  # the source's own text stays


def test_the_seeds_given_labels_stay_facts_under_their_launchers() -> None:
    """The 119 labelled seed entries: each kernel under its own launcher and stack keeps the
    seed's label (#40, a broadcast kernel under record_param_comms, stays all_gather)."""
    from tests.support.traces import SEED

    if not SEED.exists():
        pytest.skip("shared seed catalog not available")
    seed = json.loads(SEED.read_text())
    given = [e for e in seed if e["op_mapping"] not in ("TBD", "")]
    assert len(given) == 119
    classifier = default_classifier()
    wrong = [
        (e["kernel_name"][:60], e["op_mapping"], label.op_mapping)
        for e in given
        if (label := classifier.classify(e["kernel_name"], e["kernel_implementation"], e.get("call_stack"))).op_mapping
        != e["op_mapping"]
    ]
    assert wrong == []
    assert classifier.classify(seed[40]["kernel_name"], "record_param_comms").op_mapping == "all_gather"
