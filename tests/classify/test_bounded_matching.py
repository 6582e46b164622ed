"""The rules' regular expressions run within a time: a pathological name costs a bounded time and
is labelled by exact lookups alone, counted in one note."""

from __future__ import annotations

import pandas as pd
import pytest

from kernel_atlas.classify import classifier as cl
from kernel_atlas.classify.names import family_key

# `gemm\w*?tf32` (rule gemm-tf32) backtracks over every `gemm` of this name: ~14 s alone
SLOW = "gemm_" * 3200


def test_a_name_whose_rules_run_too_long_is_labelled_by_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules of a long name never finish here (a stand-in for a backtracking rule): the 0.05 s
    timer stops them, and exact lookups label the kernel."""
    monkeypatch.setattr(cl, "LONG_NAME_SECONDS", 0.05)
    classifier = cl.default_classifier()
    real = classifier.classify

    def rules(name: str, launcher: str | None = None, stack: str | None = None) -> cl.Label:
        while len(name) > 1000:  # backtracking, for ever
            pass
        return real(name, launcher, stack)

    monkeypatch.setattr(classifier, "classify", rules)
    matcher = cl.BoundedMatching(classifier)
    label = matcher.classify(SLOW, "aten::mm", None)
    # aten::mm is in the launcher table exactly: the op it launches is a matmul
    assert (label.op_mapping, label.rule, label.evidence) == ("matmul", "launcher-table", "launcher")
    assert "took too long" in label.detail and matcher.cut == 1 and matcher.spent < 2.0
    # a short name is matched as always, without a timer
    assert matcher.classify("ampere_sgemm_32x32_nn", "aten::mm", None).rule == "rule:gemm"
    assert matcher.cut == 1
    unknown = matcher.classify(SLOW, "my_launcher", None)
    assert unknown.op_mapping == "unknown" and unknown.rule == "none" and matcher.cut == 2


def test_once_the_time_is_spent_every_kernel_is_labelled_by_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl, "RULES_SECONDS", 0.0)
    frame = pd.DataFrame(
        {
            "name": ["ampere_sgemm_32x32_nn", "ampere_sgemm_32x32_nn", "vectorized_elementwise_kernel"],
            "launcher": ["aten::mm", "aten::mm", "nothing_known"],
            "call_stack": [None, None, None],
        }
    )
    notes: list[str] = []
    labelled = cl.label_frame(frame, notes=notes)
    assert labelled["label_rule"].tolist() == ["launcher-table", "launcher-table", "none"]
    assert notes == [
        "2 distinct kernels labelled by exact lookups alone (catalog, launcher names): matching the rules "
        "took too long (over 1 s for a name, or 0 s in all)"
    ]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("triton_poi_fused_add_0", "triton_poi_fused_add_#"),  # a Triton index
        ("x__0123456789abcdef", "x_#"),  # underscores and 12+ hex digits: one `_#`
        ("abc_deadbeef1234", "abc_#"),
        ("x__123", "x__#"),  # one underscore before digits
        ("k_ab12", "k_ab#"),  # 4 hex digits are no hash: only the digits collapse
        ("k" + "_" * 16000 + "!", "k" + "_" * 16000 + "!"),  # the regex backtracked here for 2 s
    ],
)
def test_generated_suffixes_collapse_without_a_regular_expression(name: str, key: str) -> None:
    assert family_key(name) == key
