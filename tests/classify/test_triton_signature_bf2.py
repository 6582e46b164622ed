"""Inductor kernels named with the argument signature Triton 2.0/2.1 appended
(`triton_poi_fused_relu_0_0d1d2de`) take the label of the same kernel without it (campaign BF,
class 2). Each expected label is read from /work/shared/taxonomy.md on the fused-op list written
in the name: a pointwise kernel applying one activation is that activation (`relu`, activation),
one adding is `add` (elementwise), a cast is a copy (`copy_`, memory); a pointwise kernel that
fuses several ops is `fused_elementwise`."""

from __future__ import annotations

import pytest

from kernel_atlas.classify.classifier import default_classifier

# name → (op_mapping, category), from taxonomy.md's rows for the op the fused-op list names
CASES = {
    "triton_poi_fused_relu_0": ("relu", "activation"),
    "triton_poi_fused_add_1": ("add", "elementwise"),
    "triton_poi_fused__to_copy_2": ("copy_", "memory"),
    "triton_poi_fused_mul_silu_3": ("silu_and_mul", "activation"),
    "triton_poi_fused_add_mul_4": ("fused_elementwise", "elementwise"),
}
# what Triton 2.0/2.1 appended: each argument's index with `d` (divisible by 16), `e` (by 8)
SIGNATURES = ("0d1d2de", "0d1d2d3", "0d1d2d3d4d5d6d7d8d9d10d11de")


@pytest.mark.parametrize("signature", SIGNATURES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_signature_suffix_keeps_the_label(name: str, signature: str) -> None:
    classifier = default_classifier()
    suffixed = f"{name}_{signature}"
    op, category = CASES[name]
    for launcher in (None, name):  # Inductor names the launch's CPU op after the kernel, unsuffixed
        label = classifier.classify(suffixed, launcher)
        assert (label.op_mapping, label.category) == (op, category), (suffixed, launcher, label)
        plain = classifier.classify(name, launcher)
        assert (plain.op_mapping, plain.category) == (op, category), (name, launcher, plain)
        assert label.rule == plain.rule  # the same family: costs and replay look it up by rule


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("triton_poi_fused_relu_0_0d1d2de", "triton_poi_fused_relu_0"),
        ("triton_red_fused_sum_12_0d1d2d3de", "triton_red_fused_sum_12"),
        # PyTorch 2.0 named every kernel `triton_`: its signature follows no Inductor index
        ("triton__0d1d2de", "triton__0d1d2de"),
        # indices alone are Inductor's index or an FX node's number, no signature
        ("triton_poi_fused_add_1_mul_2_0", "triton_poi_fused_add_1_mul_2_0"),
        # indices out of order are no signature
        ("triton_poi_fused_relu_0_0d2d", "triton_poi_fused_relu_0_0d2d"),
        ("triton_per_fused__softmax_3d4de", "triton_per_fused__softmax_3d4de"),
        ("ampere_sgemm_128x64_nn_0d1d", "ampere_sgemm_128x64_nn_0d1d"),
    ],
)
def test_only_a_signature_after_an_index_is_cut(name: str, expected: str) -> None:
    from kernel_atlas.classify.names import without_triton_signature

    assert without_triton_signature(name) == expected


def test_pytorch_2_0_names_keep_their_label() -> None:
    # `triton__0d1d2de` names no op: the older-Inductor rule (weak, fused_elementwise) keeps it
    label = default_classifier().classify("triton__0d1d2de")
    assert (label.op_mapping, label.category, label.rule) == (
        "fused_elementwise",
        "elementwise",
        "rule:compiled-fused-other",
    )
