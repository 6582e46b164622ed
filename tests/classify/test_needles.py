"""Which name rules a text can match (classify/needles.py): the same rules a search of each
rule's needles finds, and the classifier's labels unchanged by the shortcut."""

from __future__ import annotations

import re

from kernel_atlas.classify.classifier import default_classifier
from kernel_atlas.classify.needles import NeedleIndex, bits
from kernel_atlas.classify.rules import Rule, RulePattern


def _rule(rule_id: str, literals: tuple[str, ...] | None) -> Rule:
    pattern = RulePattern("x", re.IGNORECASE, {}, literals)
    needles = re.compile("|".join(map(re.escape, literals))) if literals else None
    return Rule(id=rule_id, op="gemm", name=pattern, needles=needles)


def test_the_index_finds_every_rule_whose_needle_occurs() -> None:
    rules = [_rule("a", ("gemm",)), _rule("b", ("gem", "nccl")), _rule("c", None), _rule("d", ("mm_",))]
    index = NeedleIndex(rules)
    assert bits(index.rules_in("xgemmy")) == [0, 1, 2]  # "gemm" holds "gem": both rules
    assert bits(index.rules_in("nccl_gemm_kernel")) == [0, 1, 2, 3]  # "mm_" overlaps "gemm"
    assert bits(index.rules_in("abc")) == [2]  # a rule without needles is always tried
    assert bits(index.rules_in("")) == [2]
    assert bits(0b10110) == [1, 2, 4]


def test_the_shipped_rules_index_agrees_with_each_rules_own_search() -> None:
    rules = default_classifier().rules.rules
    index = NeedleIndex(rules)
    texts = ["void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128>", "ncclkernel_allreduce_ring_ll_sum_float"]
    texts += ["triton_poi_fused_add_mul_0", "kern_7_xxxx", "_zn5aiter24add_rmsnorm_quant_kernelidf16b", ""]
    for text in texts:
        by_rule = [i for i, r in enumerate(rules) if r.needles is None or r.needles.search(text)]
        assert bits(index.rules_in(text)) == by_rule, text
