"""Name rules for kernel families the rules had missed or split wrongly (campaign BS classes 2, 3, 7).

Each expected label is read off what the kernel computes, written by hand:

* Inductor splits an RMSNorm into a reduction of mean(x²) (`triton_per_fused_mean_pow_1`) and a
  pointwise kernel applying x·rsqrt(mean + eps)·w (`triton_poi_fused_add_mean_mul_pow_rsqrt_2`, the
  pair public Inductor output shows). The pointwise half is the norm (norm / rms_norm), as a
  pointwise `native_layer_norm` is layer_norm; the reduction alone, a mean of squares, stays `mean`.
* `baddbmm` is β·C + A[b]@B[b], a batched GEMM: `bmm`, in a GEMM template as in a GEMV reduction.
* SGLang's LoRA B GEMMs are GEMMs; vLLM's segmented_max_reduction is the absmax of a dynamic fp8
  scale; SGLang EAGLE's spec-info and evict-mask kernels are serving bookkeeping; flashinfer's
  PackBits packs a boolean mask into bits (memory, whatever its namespace says).
"""

from __future__ import annotations

import pytest

from kernel_atlas.classify.classifier import default_classifier

# (kernel name, launcher, expected op_mapping, expected category)
CASES = [
    # class 2: the normalising half of a split RMSNorm
    ("triton_poi_fused_add_mean_mul_pow_rsqrt_2", None, "rms_norm", "norm"),
    ("triton_poi_fused__to_copy_add_mean_mul_pow_rsqrt_1", None, "rms_norm", "norm"),
    (
        "triton_poi_fused__to_copy_add_mean_mul_pow_rsqrt_1",
        "triton_poi_fused__to_copy_add_mean_mul_pow_rsqrt_1",
        "rms_norm",
        "norm",
    ),
    ("triton_poi_fused__fused_rms_norm_0", None, "rms_norm", "norm"),
    # ... its statistics alone: a mean of squares, which a loss or an RMS statistic also is
    ("triton_per_fused_mean_pow_1", None, "mean", "reduction"),
    # ... and the unsplit norm, as before
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", None, "rms_norm", "norm"),
    # a layer norm's statistics in a pointwise list are no RMSNorm
    ("triton_poi_fused_native_layer_norm_0", None, "layer_norm", "norm"),
    ("triton_poi_fused_add_mean_mul_pow_rsqrt_sub_var_mean_0", None, "fused_elementwise", "elementwise"),
    # class 3: baddbmm is a batched GEMM wherever Inductor puts it
    ("triton_tem_fused_baddbmm_0", None, "bmm", "gemm"),
    ("triton_tem_fused_baddbmm_1", "triton_tem_fused_baddbmm_1", "bmm", "gemm"),
    ("triton_tem_fused_add_baddbmm_mul_3", None, "bmm", "gemm"),
    ("triton_red_fused_baddbmm_0", None, "bmm", "gemm"),
    ("triton_tem_fused_bmm_2", None, "bmm", "gemm"),
    ("triton_tem_fused_addmm_relu_1", None, "matmul", "gemm"),
    # a pointwise kernel consuming a baddbmm stays pointwise
    ("triton_poi_fused_add_baddbmm_tanh_4", None, "fused_elementwise", "elementwise"),
    # class 7: SGLang LoRA B GEMMs (x @ A, then @ B)
    ("_qkv_lora_b_kernel", None, "matmul", "gemm"),
    ("_gate_up_lora_b_kernel", None, "matmul", "gemm"),
    ("_sgemm_lora_a_kernel", None, "matmul", "gemm"),
    ("_fused_moe_lora_kernel", None, "fused_moe", "moe"),
    # vLLM's absmax for a dynamic fp8 scale, replayed in a CUDA graph (no launcher)
    (
        "void vllm::segmented_max_reduction<c10::BFloat16, c10::Float8_e4m3fn>(float*, c10::BFloat16 const*, long)",
        None,
        "quantize",
        "quantization",
    ),
    (
        "void vllm::segmented_max_reduction_strided<c10::BFloat16, c10::Float8_e4m3fn>"
        "(float*, c10::BFloat16 const*, long, long, long)",
        None,
        "quantize",
        "quantization",
    ),
    # SGLang EAGLE bookkeeping
    ("create_extend_after_decode_spec_info", None, "serving_metadata", "metadata"),
    ("create_extend_spec_info", None, "serving_metadata", "metadata"),
    ("align_evict_mask_to_page_size", None, "serving_metadata", "metadata"),
    # flashinfer's bit packing of a boolean mask: no scale, no cast
    (
        "void flashinfer::quantization::PackBitsKernel<(flashinfer::quantization::BitOrder)1>(bool*, unsigned char*, long)",
        None,
        "copy_",
        "memory",
    ),
    (
        "void flashinfer::quantization::SegmentPackBitsKernel<(flashinfer::quantization::BitOrder)0, int>"
        "(bool*, unsigned char*, int*, int*, unsigned int)",
        None,
        "copy_",
        "memory",
    ),
]


@pytest.mark.parametrize(("name", "launcher", "op", "category"), CASES)
def test_family_gets_its_op(name: str, launcher: str | None, op: str, category: str) -> None:
    label = default_classifier().classify(name, launcher)
    assert (label.op_mapping, label.category) == (op, category), (name, label)
    assert label.rule != "catalog:exact"


def test_split_rms_norm_halves_name_their_rules() -> None:
    """The pointwise half is decided by its own rule, listed before the generic pointwise one."""
    classifier = default_classifier()
    assert classifier.classify("triton_poi_fused_add_mean_mul_pow_rsqrt_2").rule == "rule:inductor-pointwise-rms-norm"
    assert classifier.classify("triton_per_fused_mean_pow_1").rule == "rule:inductor-reduction"


def test_template_baddbmm_matches_the_gemv_rule() -> None:
    """The same op in a template and in a GEMV reduction gets the same op (it had been matmul vs bmm)."""
    classifier = default_classifier()
    template = classifier.classify("triton_tem_fused_baddbmm_0")
    gemv = classifier.classify("triton_red_fused_baddbmm_0")
    assert (template.op_mapping, template.rule) == ("bmm", "rule:inductor-template")
    assert (gemv.op_mapping, gemv.rule) == ("bmm", "rule:inductor-gemv")
