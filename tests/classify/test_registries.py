"""One source of truth: costs and replay are found by the kernel's label, every key they name
exists, a key is registered once, and a corrected label changes cost and replay together."""

from __future__ import annotations

import json
import os

import pytest

from kernel_atlas.classify.rules import rule_ids
from kernel_atlas.classify.taxonomy import load_taxonomy
from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline import costs
from kernel_atlas.roofline.costs import Call, NoCost, cost_of


def _replay_registry() -> dict:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from kernel_atlas.replay import kernels

    kernels.load()
    return kernels.REGISTRY


def test_every_key_a_registry_names_exists() -> None:
    from kernel_atlas.replay.runner import NOT_REPLAYABLE

    taxonomy = load_taxonomy()
    keys = [*costs.REGISTRY, *_replay_registry(), *NOT_REPLAYABLE]
    assert {kind for kind, _ in keys} <= {"rule", "launcher", "op", "category"}
    for kind, key in keys:
        if kind == "rule":
            assert key in rule_ids(), f"{key!r} is not a rule id of catalogs/rules.toml"
        elif kind == "op":
            assert taxonomy.is_op(key), key
        elif kind == "category":
            assert key in taxonomy.categories, key
        else:
            # a torch library's op: ATen's, a serving engine's own (vLLM's `_C`/`_rocm_C`, sgl-kernel) or
            # an attention library's (flash-attn ≥ 2.6 registers `flash_attn::`)
            libraries = (
                "aten::",
                "sglang::",
                "vllm::",
                "_C::",
                "_moe_C::",
                "_rocm_C::",
                "sgl_kernel::",
                "flash_attn::",
            )
            assert key.startswith(libraries), key


def test_a_second_registration_is_refused() -> None:
    with pytest.raises(ValueError, match="already has a cost formula"):
        costs.register(ops=("add",))(lambda call: None)
    with pytest.raises(ValueError, match="already has a cost formula"):
        costs.register(rules=("deepgemm",))(lambda call: None)
    _replay_registry()
    from kernel_atlas.replay.kernels import register

    with pytest.raises(ValueError, match="already has a replay builder"):
        register(rules=("triton-fused-moe",))(lambda target, device, scale: None)


def test_a_corrected_label_changes_cost_and_replay_together() -> None:
    """The same recorded DeepGEMM call, labelled as the normal and as the grouped family: cost
    and replay both follow the label, no other list decides."""
    _replay_registry()
    from kernel_atlas.replay.runner import Target, replay_one

    dims = "[[24,256],[24,2],[256,256],[2,2],[24,256]]"
    types = '["c10::Float8_e4m3fn","float","c10::Float8_e4m3fn","float","c10::BFloat16"]'
    args = parse_call(dims, types)
    normal = cost_of(Call("<built-in function launch>", "matmul", args, "rule:deepgemm"))
    assert normal.flops == 2 * 24 * 256 * 256  # A [24, 256] · B [256, 256]
    with pytest.raises(NoCost, match="grouped DeepGEMM"):
        cost_of(Call("<built-in function launch>", "matmul", args, "rule:deepgemm-grouped"))

    def target(rule: str) -> Target:
        return Target(
            "k", "<built-in function launch>", "matmul", "gemm", dims, types, None, None, None, 1, "catalog", rule
        )

    grouped = replay_one(target("rule:deepgemm-grouped"), "cpu")
    assert grouped.check == "skipped" and "grouped DeepGEMM" in grouped.reason
    replayed = replay_one(target("rule:deepgemm"), "cpu")
    assert replayed.implementation.startswith("stand-in for DeepGEMM") and replayed.flops == normal.flops


def test_the_recorded_call_model_types_every_argument() -> None:
    args = parse_call(
        "[[[1,559,32],[1,559,32]],[],[4,6],[],[]]",
        '["TensorList","Scalar","c10::BFloat16","ScalarList",""]',
        "[[[17888,32,1],[17888,32,1]],[],[1,4],[],[]]",
        '["","-1","","[2, 3]",""]',
    )
    assert [a.kind for a in args] == ["tensor_list", "scalar", "tensor", "list", "none"]
    assert args[0].dims == ((1, 559, 32), (1, 559, 32)) and args[0].numel == 2 * 559 * 32
    assert args[0].strides == ((17888, 32, 1), (17888, 32, 1))
    assert args[1].value == -1 and args[3].ints() == [2, 3]
    assert args[2].is_tensor and args[2].nbytes == 4 * 6 * 2 and args[2].strides == (1, 4)


def test_the_label_decides_a_builders_variant() -> None:
    """What a builder needs beyond shapes comes from the rule that labelled the kernel, not from
    its name: the same recorded call replays as the label says."""
    _replay_registry()
    from kernel_atlas.replay.runner import Target, replay_one

    def replay(kernel: str, dims: str, rule: str):
        op = "rotary_embedding" if "rope" in rule else "attention"
        types = json.dumps(["c10::BFloat16"] * len(json.loads(dims)))
        return replay_one(Target(kernel, "", op, "other", dims, types, None, None, None, 1, "catalog", rule), "cpu")

    rope = "[[16,4,64],[16,2,64],[8192,64],[16]]"
    assert "NeoX halves: rule rope-neox" in replay("k", rope, "rule:rope-neox").implementation
    assert "interleaved pairs: rule rope-interleaved" in replay("k", rope, "rule:rope-interleaved").implementation
    # a paged prefill of 3 requests × 2 queries over 30 pages of 4: causal only when the label says so
    prefill = "[[4096],[4096],[15],[6,4,32],[999,4,2,32],[999,4,2,32],[4],[4],[30],[3],[6,4,32]]"
    causal = replay("k", prefill, "rule:flashinfer-prefill-causal")
    plain = replay("k", prefill, "rule:flashinfer-prefill-noncausal")
    assert causal.check == plain.check == "pass", (causal.reason, plain.reason)
    assert "(paged prefill, causal, page size 4" in causal.implementation
    assert "(paged prefill, page size 4" in plain.implementation
    # the same arrays read as a decode: kv_indptr [4] → 3 requests, kv_indices [4] pages
    assert "(decode" in replay("k", prefill, "rule:flashinfer-decode").implementation


def _family_table() -> list[tuple[str, str, str, str, str]]:
    """One row per rule of catalogs/rules.toml: (rule id, label `op (category)`, cost formula,
    replay builder, replay config) — a kernel family's knowledge in one visible line."""
    import tomllib

    from kernel_atlas.classify.rules import load_rules
    from kernel_atlas.core.paths import catalogs_dir
    from kernel_atlas.replay.runner import NOT_REPLAYABLE

    replay = _replay_registry()
    taxonomy = load_taxonomy()
    triton = tomllib.loads((catalogs_dir() / "replay.toml").read_text())["triton"]
    config_of = {rule: name for name, spec in triton.items() for rule in spec.get("rules", [])}
    rows = []
    for rule in load_rules()[0].by_id().values():
        ops = list(dict.fromkeys(op for op in (rule.op, *rule.map.values()) if op))
        by_category: dict[str, list[str]] = {}
        for op in ops:
            by_category.setdefault(taxonomy.category(op), []).append(op)
        label = "; ".join(f"{', '.join(o)} ({c})" for c, o in by_category.items()) or "(refines only)"
        formulas = [costs.REGISTRY.get(("rule", rule.id))] + [costs.REGISTRY.get(("op", op)) for op in ops]
        cost = ", ".join(dict.fromkeys(f.__name__ for f in formulas if f)) or "—"
        builder = replay.get(("rule", rule.id)) or (replay.get(("op", rule.op)) if rule.op else None)
        refused = NOT_REPLAYABLE.get(("rule", rule.id)) or NOT_REPLAYABLE.get(("category", taxonomy.category(rule.op)))
        shown = "refused" if refused else "ATen schema, if an ATen op launched it"
        if builder:
            shown = f"{builder.__module__.rsplit('.', 1)[-1]}.{builder.__name__}"
        rows.append((rule.id, label, cost, shown, config_of.get(rule.id, "—")))
    return rows


def test_one_table_per_rule_says_label_cost_replay_and_config() -> None:
    import inspect
    import sys

    from kernel_atlas.classify.rules import load_rules, rule_ids

    rows = _family_table()
    width = [max(len(r[i]) for r in rows) for i in range(5)]
    header = ("rule", "label", "cost formula", "replay builder", "replay config")
    for row in (header, *rows):  # `pytest -s` shows the table
        sys.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(row, width, strict=True)) + "\n")
    assert [r[0] for r in rows] == list(dict.fromkeys(r[0] for r in rows))  # one row per rule
    taxonomy = load_taxonomy()
    for rule in load_rules()[0].by_id().values():  # every label a rule gives is in the vocabulary
        assert all(taxonomy.is_op(op) for op in (rule.op, *rule.map.values()) if op), rule.id
    # every replay config names existing rules whose builder's module uses that config
    import tomllib

    from kernel_atlas.core.paths import catalogs_dir

    replay = _replay_registry()
    triton = tomllib.loads((catalogs_dir() / "replay.toml").read_text())["triton"]
    for name, spec in triton.items():
        assert spec.get("rules"), f"[triton.{name}] names no rule"
        for rule in spec["rules"]:
            assert rule in rule_ids(), (name, rule)
            builder = replay[("rule", rule)]
            assert f'candidates("{name}"' in inspect.getsource(inspect.getmodule(builder)), (name, rule)
    # the Triton fused-MoE family, read off rules.toml, roofline/costs/moe.py, replay/kernels/fused_moe.py, replay.toml
    row = {r[0]: r for r in rows}["triton-fused-moe"]
    assert row[1] == "fused_moe (moe)" and row[3].startswith("fused_moe.") and row[4] == "fused_moe_kernel"
    assert row[2] != "—" and costs.REGISTRY[("rule", "triton-fused-moe")].__name__ in row[2]
    assert {r[0]: r for r in rows}["deepgemm"][4] == "w8a8_block_fp8_matmul"  # its stand-in's config
    assert taxonomy.category("fused_moe") == "moe"
