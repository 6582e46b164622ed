"""Labels a wrong-label campaign (campAD) found wrong, each expected label read from
/work/shared/taxonomy.md — not from the classifier's output — on the kernel names, launchers and
stacks written here (the classes of its FINDINGS.md in brackets)."""

from __future__ import annotations

import json

import pytest

from kernel_atlas.classify.classifier import Classifier, default_classifier
from kernel_atlas.classify.rules import load_rules
from tests.support.traces import SEED

TL = "<built-in function launch>"


def inductor_stack(kernel: str, *callers_: str) -> str:
    """How ingest writes the stack of an Inductor launch: the kernel's own launcher function is
    a frame, named after the kernel (seed entries #8, #29, #151, #154 show this layout)."""
    frames = [
        "cuLaunchKernel",
        TL,
        "triton/backends/nvidia/driver.py(443): __call__",
        "<string>(1): launcher",
        kernel,
        "torch/_inductor/runtime/triton_heuristics.py(1018): run",
        "/tmp/torchinductor_root/ab/cabc.py(88): call",
        "torch/_dynamo/eval_frame.py(738): _fn",
        *callers_,
    ]
    return " <- ".join(frames)


def triton_stack(*callers_: str) -> str:
    return " <- ".join(
        [
            "cuLaunchKernel",
            TL,
            "triton/backends/nvidia/driver.py(443): __call__",
            "triton/runtime/jit.py(563): run",
            *callers_,
        ]
    )


def rules_alone() -> Classifier:
    return Classifier(*load_rules(), [])  # no catalog fact


def label(name: str, launcher: str | None = None, stack: str | None = None) -> str:
    return default_classifier().classify(name, launcher, stack).op_mapping


# --- [1] a context rule reads what called the kernel, not the kernel's own frame --------------


@pytest.mark.parametrize(
    ("name", "callers_", "op"),
    [
        # the reduction row: "top-k … outside MoE routing"; nothing here is MoE routing
        ("triton_per_fused_topk_0", (), "topk"),
        ("triton_per_fused_topk_0", ("sglang/srt/layers/sampler.py(90): forward",), "topk"),
        ("triton_red_fused_topk_3", ("vllm/v1/sample/ops/topk_topp_sampler.py(120): forward_native",), "topk"),
        ("triton_poi_fused_topk_0", (), "fused_elementwise"),
        # MoE routing among the callers is still gating
        ("triton_per_fused_topk_0", ("sglang/srt/layers/moe/topk.py(223): biased_grouped_topk",), "moe_gate"),
    ],
)
def test_inductor_kernels_are_refined_by_their_callers_not_their_own_frame(
    name: str, callers_: tuple[str, ...], op: str
) -> None:
    assert label(name, name, inductor_stack(name, *callers_)) == op


def test_callers_drop_the_kernels_own_frame_and_launcher() -> None:
    from kernel_atlas.classify.classifier import callers

    stack = inductor_stack("triton_per_fused_topk_0", "a.py(1): f")
    launcher, rest = callers("triton_per_fused_topk_0", "triton_per_fused_topk_0", stack)
    assert launcher == ""
    assert "triton_per_fused_topk_0" not in rest and rest.endswith("a.py(1): f")
    assert callers("x_kernel", "aten::mm", "cudaLaunchKernel <- aten::mm") == (
        "aten::mm",
        "cudaLaunchKernel <- aten::mm",
    )


# --- [2] grouped DeepGEMM is gemm: taxonomy.md "DeepGEMM fp8 (normal and grouped)" ------------

EP_MOE = (
    "deep_gemm/jit_kernels/m_grouped_gemm.py(13): m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "sglang/srt/layers/moe/ep_moe/layer.py(1075): forward_deepgemm_contiguous",
    "sglang/srt/layers/moe/ep_moe/layer.py(931): forward",
    "nn.Module: DeepEPMoE_0",
    "nn.Module: DeepseekV2MoE_0",
)


@pytest.mark.parametrize(
    ("name", "launcher"),
    [
        (
            "void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 160u, 128u, 0u, 64u, 64u, 4u, 128u, 128u, 2u, false,"
            " (deep_gemm::GemmType)1>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap,"
            " CUtensorMap)",
            "cuda/bindings/driver.pyx(33813): cuLaunchKernel",
        ),
        (
            "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0, 0u, 7168u, 4096u, 128u,"
            " 128u, 128u, 32u, 5u, 128u, 128u, 2u, false, (deep_gemm::GemmType)1, deep_gemm::EpilogueIdentity>(float*,"
            " int*, unsigned int, unsigned int, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap)",
            "cuda/bindings/driver.pyx(33813): cuLaunchKernelEx",
        ),
        (  # the masked layout
            "void deep_gemm::fp8_gemm_kernel<7168u, 2048u, 128u, 64u, 128u, 0u, 0u, 1u, 6u, 128u, 128u, 1u, false,"
            " (deep_gemm::GemmType)2>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap,"
            " CUtensorMap)",
            "cuda/bindings/driver.pyx(33813): cuLaunchKernel",
        ),
    ],
)
def test_grouped_deepgemm_is_a_gemm_even_inside_a_moe_layer(name: str, launcher: str) -> None:
    stack = " <- ".join(["cuLaunchKernel", launcher, *EP_MOE])
    for got in (default_classifier().classify(name, launcher, stack), default_classifier().classify(name)):
        assert (got.op_mapping, got.rule) == ("matmul", "rule:deepgemm-grouped"), got


def test_the_rules_alone_give_the_seeds_grouped_deepgemm_labels() -> None:
    if not SEED.exists():
        pytest.skip("shared seed catalog not available")
    seed = json.loads(SEED.read_text())
    classifier = rules_alone()
    for index in range(133, 139):  # grouped fp8_gemm_kernel under forward_deepgemm_contiguous: matmul
        entry = seed[index]
        got = classifier.classify(entry["kernel_name"], entry["kernel_implementation"], entry["call_stack"])
        assert got.op_mapping == entry["op_mapping"] == "matmul", (index, got)


# --- [3] a name that mentions deep_gemm names the consumer, not the operation -----------------

VLLM_MOE = (
    "vllm/model_executor/layers/fused_moe/batched_deep_gemm_moe.py(200): silu_mul_fp8_quant_deep_gemm",
    "vllm/model_executor/layers/fused_moe/fused_moe.py(1600): fused_experts_impl",
    "nn.Module: FusedMoE_0",
    "nn.Module: MixtralMoE_0",
)


@pytest.mark.parametrize(
    ("name", "stack", "op"),
    [
        ("_silu_mul_fp8_quant_deep_gemm", triton_stack(*VLLM_MOE), "silu_and_mul"),
        ("_silu_mul_fp8_quant_deep_gemm", None, "silu_and_mul"),
        ("_silu_mul_fp8_quant_deep_gemm_masked", None, "silu_and_mul"),
        ("_per_token_group_quant_fp8_for_deep_gemm", None, "quantize"),
    ],
)
def test_deep_gemm_in_a_name_does_not_make_a_gemm(name: str, stack: str | None, op: str) -> None:
    assert label(name, TL, stack) == op


# --- [4] cuDNN's convolution backward launchers are convolutions -----------------------------


@pytest.mark.parametrize(
    ("name", "launcher"),
    [
        ("volta_sgemm_128x32_nt", "aten::cudnn_convolution_backward_weight"),
        ("volta_sgemm_64x64_nt", "aten::cudnn_convolution_backward_weight"),
        ("volta_sgemm_64x64_nt", "aten::cudnn_convolution_backward_input"),
        ("volta_sgemm_32x128_nt", "aten::cudnn_convolution_backward_input"),
        (
            "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)",
            "aten::cudnn_convolution_backward_input",
        ),
        (
            "cask_cudnn::computeBOffsetsKernel(cask_cudnn::ComputeBOffsetsParams)",
            "aten::cudnn_convolution_backward_input",
        ),
        (
            "void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)",
            "aten::cudnn_convolution_backward_input",
        ),
        # the other spellings of a convolution's backward ATen has had; `_slow_conv2d_backward`
        # (PyTorch ≥ 1.11) through the launcher pattern
        ("void some_vendor::opaque_kernel<3>(int)", "aten::cudnn_convolution_backward"),
        ("void some_vendor::opaque_kernel<3>(int)", "aten::cudnn_convolution_transpose_backward_weight"),
        ("void some_vendor::opaque_kernel<3>(int)", "aten::miopen_convolution_backward_input"),
        ("void some_vendor::opaque_kernel<3>(int)", "aten::miopen_depthwise_convolution_backward_weight"),
        ("void some_vendor::opaque_kernel<3>(int)", "aten::_conv_depthwise2d_backward"),
        ("void some_vendor::opaque_kernel<3>(int)", "aten::slow_conv_dilated2d_backward"),
        ("void some_vendor::opaque_kernel<3>(int)", "aten::_slow_conv2d_backward"),
    ],
)
def test_kernels_of_a_convolution_backward_are_conv(name: str, launcher: str) -> None:
    stack = f"cudaLaunchKernel <- {launcher} <- aten::cudnn_convolution_backward <- CudnnConvolutionBackward"
    assert label(name, launcher, stack) == "conv"


def test_a_layout_transform_in_a_convolution_backward_stays_memory() -> None:
    name = "void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int)"
    assert label(name, "aten::cudnn_convolution_backward_input") == "copy_"


# --- [5] SGLang's expert-parallel scatter-1 aligns, its gather sums ---------------------------

EP_LAYER = (
    "sglang/srt/layers/moe/ep_moe/layer.py(1075): forward_deepgemm_contiguous",
    "sglang/srt/layers/moe/ep_moe/layer.py(931): forward",
    "nn.Module: DeepEPMoE_0",
)


@pytest.mark.parametrize(
    ("name", "frame", "op", "rule"),
    [
        # cumsum of tokens per expert into expert_start_loc, every row's expert into m_indices: no
        # token moves (moe: "aligning tokens per expert and dispatch-layout computation")
        ("_fwd_kernel_ep_scatter_1", "sglang/srt/layers/moe/ep_moe/kernels.py(844): ep_scatter", "moe_align", "sglang-ep-scatter-1"),
        # out[t] = Σ_k topk_weight[t,k] · input[src(t,k)]: taxonomy.toml's moe_reduce formula
        ("_fwd_kernel_ep_gather", "sglang/srt/layers/moe/ep_moe/kernels.py(975): ep_gather", "moe_reduce", "sglang-ep-gather"),
        # scatter-2 copies the tokens into expert order
        ("_fwd_kernel_ep_scatter_2", "sglang/srt/layers/moe/ep_moe/kernels.py(844): ep_scatter", "moe_permute", "sglang-ep-scatter"),
    ],
)  # fmt: skip
def test_sglang_expert_parallel_kernels(name: str, frame: str, op: str, rule: str) -> None:
    for classifier in (default_classifier(), rules_alone()):  # the shipped catalog's fill agrees
        got = classifier.classify(name, TL, triton_stack(frame, *EP_LAYER))
        assert (got.op_mapping, got.rule) == (op, f"rule:{rule}"), got


# --- [6] Inductor kernels of a serving engine's bookkeeping are metadata ----------------------


@pytest.mark.parametrize(
    ("name", "callers_", "op"),
    [
        # position ids (taxonomy.md's metadata row), as clamp_position_kernel is when JIT-compiled
        (
            "triton_poi_fused_clamp_sub_1",
            (
                "sglang/srt/model_executor/forward_batch_info.py(719): clamp_position",
                "Torch-Compiled Region: 0/0",
                "sglang/srt/model_executor/forward_batch_info.py(261): init_new",
            ),
            "serving_metadata",
        ),
        (
            "triton_poi_fused_index_lt_where_2",
            (
                "sglang/srt/managers/tp_worker_overlap_thread.py(44): resolve_future_token_ids",
                "Torch-Compiled Region: 0/0",
            ),
            "serving_metadata",
        ),
        # elsewhere the same kernel is a fused pointwise kernel
        ("triton_poi_fused_clamp_sub_1", ("mymodel/layers.py(10): forward",), "fused_elementwise"),
    ],
)
def test_inductor_kernels_of_serving_bookkeeping(name: str, callers_: tuple[str, ...], op: str) -> None:
    assert label(name, name, inductor_stack(name, *callers_)) == op


# --- [7] an NCCL broadcast is a broadcast outside the seed entry's context --------------------

BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_a_broadcast_kernel_without_a_launcher_is_a_broadcast() -> None:
    # the seed's all_gather is a fact about the kernel under record_param_comms (seed #40), not
    # about its name: without a launcher (a graph replay, a GPU-only trace) the name says broadcast
    assert label(BROADCAST) == "broadcast"
    assert label("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "broadcast"
    # the fact itself holds where it was seen
    assert label(BROADCAST, "record_param_comms") == "all_gather"


# --- [8] ATen's index kernel instantiated for index_put_ --------------------------------------

INDEX_PUT = [
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl"
    "<at::native::OpaqueType<2> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char"
    " const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_put_kernel"
    "_impl<at::native::OpaqueType<2> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*,"
    " char const*, long)#1} const&, bool)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<>::{lambda(int)#1})",
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl"
    "<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char"
    " const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_put_kernel"
    "_impl<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*,"
    " char const*, long)#1} const&)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<>::{lambda(int)#1})",
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_copy_kernel_impl"
    "<at::native::OpaqueType<2> >(at::TensorIterator&, long, long, long)::{lambda(char*, char const*, long)#1}>"
    "(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(int)#1}>(long)",
]


@pytest.mark.parametrize("name", INDEX_PUT)
def test_an_index_put_kernel_without_a_launcher_is_index_put(name: str) -> None:
    assert label(name) == "index_put_"
    assert label(name, "aten::index_put_") == "index_put_"


def test_the_index_kernel_of_a_read_stays_index() -> None:
    read = INDEX_PUT[1].replace("index_put_kernel_impl", "index_kernel_impl")
    assert label(read) == "index"


# --- [9] TransformerEngine's cast-transpose is an fp8 cast with scales ------------------------


@pytest.mark.parametrize(
    ("name", "op"),
    [
        (
            "void transformer_engine::(anonymous namespace)::cast_transpose_kernel<8ul, 8ul, __nv_bfloat16, __nv_fp8_e4m3,"
            " transformer_engine::(anonymous namespace)::CastTransposeParam>(__nv_bfloat16 const*, __nv_fp8_e4m3*,"
            " __nv_fp8_e4m3*, float const*, float*, float*, unsigned long, unsigned long)",
            "quantize",
        ),
        (
            "void transformer_engine::(anonymous namespace)::multi_cast_transpose_kernel<4, true, float, __nv_fp8_e5m2>"
            "(transformer_engine::(anonymous namespace)::MultiCastTransposeArgs)",
            "quantize",
        ),
        (  # a plain transpose (no fp8 anywhere) is a layout transform
            "void transformer_engine::(anonymous namespace)::transpose_kernel<8ul, 8ul, __nv_bfloat16>(__nv_bfloat16 const*,"
            " __nv_bfloat16*, unsigned long, unsigned long)",
            "copy_",
        ),
    ],
)
def test_transformer_engine_cast_transpose(name: str, op: str) -> None:
    assert label(name) == op


# --- [10] top-k and softmax inside MoE routing are gating -------------------------------------

ROUTING = (
    "sglang/srt/layers/moe/topk.py(70): fused_topk_native",
    "sglang/srt/layers/moe/topk.py(298): select_experts",
    "nn.Module: FusedMoE_0",
)
GATHER_TOPK = (
    "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const,"
    " unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float,"
    " unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)"
)
SOFTMAX = (
    "void at::native::(anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 6, false, false>"
    "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)


@pytest.mark.parametrize(("name", "launcher"), [(GATHER_TOPK, "aten::topk"), (SOFTMAX, "aten::_softmax")])
def test_topk_and_softmax_in_moe_routing_are_gating(name: str, launcher: str) -> None:
    stack = " <- ".join(["cudaLaunchKernel", launcher, *ROUTING])
    assert label(name, launcher, stack) == "moe_gate"
    # outside MoE routing they keep their reduction ops
    assert label(name, launcher, f"cudaLaunchKernel <- {launcher} <- sglang/srt/layers/sampler.py(90): forward") in (
        "topk",
        "softmax",
    )


def test_other_aten_ops_in_moe_routing_keep_their_op() -> None:
    # the seed's facts: a div and a sum inside fused_topk are div and sum (seed #60, #148)
    div = (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float,"
        " float, float, at::native::binary_internal::DivFunctor<float> > >(at::TensorIteratorBase&, at::native::"
        "BinaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> > const&)::{lambda(int)#1}>"
        "(int, at::native::gpu_kernel_impl_nocast<>::{lambda(int)#1})"
    )
    stack = " <- ".join(["cudaLaunchKernel", "aten::div", *ROUTING])
    assert rules_alone().classify(div, "aten::div", stack).op_mapping == "div"


# --- [11] Inductor kernels of one data-movement op or one activation and its gradient ---------


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("triton_poi_fused_scatter_0", "scatter"),
        ("triton_poi_fused_scatter_add_new_zeros_2", "scatter"),
        ("triton_poi_fused_relu_threshold_backward_0", "relu"),  # launchers.toml: aten::threshold_backward is relu
        ("triton_poi_fused_threshold_backward_5", "relu"),
        ("triton_poi_fused_gelu_gelu_backward_1", "gelu"),
        ("triton_poi_fused_slice_scatter_0", "copy_"),  # a copy into a slice, not a scatter by index
    ],
)
def test_inductor_single_op_kernels(name: str, op: str) -> None:
    assert label(name, name) == op


# --- [12] a bare norm_kernel is no sum; Gemma's norm is an RMSNorm ----------------------------


@pytest.mark.parametrize(
    ("name", "launcher", "op"),
    [
        ("norm_kernel", None, "unknown"),  # a vector norm or a normalisation: the name does not say
        ("void deep::norm_kernel<float>(float*)", None, "unknown"),
        ("void deep::norm_kernel<float>(float*)", "aten::linalg_vector_norm", "sum"),  # the launcher says
        ("void gemma_norm_kernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16 const*, int)", None, "rms_norm"),
    ],
)
def test_generic_norm_names(name: str, launcher: str | None, op: str) -> None:
    assert label(name, launcher) == op
