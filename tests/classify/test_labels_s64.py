"""Labels two campaigns found wrong — campAJ (torch.compile / Inductor traces, its classes 4–7) and
campAI (AMD/ROCm kernel families, its class 5) — each expected label read from
/work/shared/taxonomy.md, not from the classifier's output, on the kernel names, launchers and
stacks written here (the classes of the FINDINGS.md in brackets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from kernel_atlas.classify.classifier import default_classifier
from kernel_atlas.classify.rules import inductor_kernel_prefix
from kernel_atlas.core.paths import catalogs_dir


def label(name: str, launcher: str | None = None, stack: str | None = None) -> tuple[str, str]:
    found = default_classifier().classify(name, launcher, stack)
    return found.op_mapping, found.category


# --- [AJ 4] `triton_unk_` kernels (Inductor's cooperative reductions) ------------------------
# PyTorch names a kernel `triton_<kind[:3]>_…`; a decorator other than foreach,
# persistent_reduction, pointwise, reduction, split_scan and template is kind "unknown"


def test_inductors_kind_prefixes_are_the_ones_pytorch_writes() -> None:
    from kernel_atlas.ingest import capture

    kinds = set(tomllib.loads((catalogs_dir() / "rules.toml").read_text())["sets"]["inductor_kernels"].split("|"))
    assert {"poi", "red", "per", "tem", "for", "spl", "unk"} <= kinds
    assert "cooperative" not in kinds  # cut to three letters, `cooperative_reduction` would be "coo"
    # ingest/capture.py matches a graph capture's Inductor launches by the CPU op named so
    for op in ("triton_unk_fused_add_mean_mul_pow_rsqrt_4", "triton_spl_fused_cumsum_0"):
        assert capture._INDUCTOR_KERNEL.match(op) and inductor_kernel_prefix().match(op)
    assert not capture._INDUCTOR_KERNEL.match("triton_cooperative_fused_sum_0")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the cooperative twin of `triton_red_fused_add_mean_mul_pow_rsqrt_…`: x * rsqrt(mean(x²) + eps)
        ("triton_unk_fused_add_mean_mul_pow_rsqrt_4", ("rms_norm", "norm")),
        ("triton_unk_fused_sum_5", ("sum", "reduction")),
        ("triton_unk_fused_native_layer_norm_0", ("layer_norm", "norm")),
        ("triton_unk_fused__softmax_2", ("softmax", "reduction")),
        # a fused-op list that names no reduction says nothing more than before
        ("triton_unk_fused_add_mul_3", ("fused_elementwise", "elementwise")),
    ],
)
def test_unknown_kind_inductor_kernels_take_the_op_their_list_names(name: str, expected: tuple[str, str]) -> None:
    assert label(name, name) == expected


# --- [AJ 5] pointwise halves of norms and softmax, and the inference BatchNorm -----------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("triton_poi_fused__native_batch_norm_legit_no_training_0", ("batch_norm", "norm")),
        ("triton_poi_fused__native_batch_norm_legit_no_training_relu_0", ("batch_norm", "norm")),
        ("triton_poi_fused_native_layer_norm_1", ("layer_norm", "norm")),
        ("triton_poi_fused_native_group_norm_0", ("group_norm", "norm")),
        ("triton_poi_fused__softmax_1", ("softmax", "reduction")),
        ("triton_poi_fused__log_softmax_0", ("softmax", "reduction")),
        # unchanged: the activation that a pointwise kernel applies after a GEMM or a convolution
        ("triton_poi_fused_convolution_relu_0", ("relu", "activation")),
        ("triton_poi_fused_addmm_gelu_0", ("gelu", "activation")),
    ],
)
def test_pointwise_kernels_named_after_a_norm_or_softmax_are_it(name: str, expected: tuple[str, str]) -> None:
    assert label(name, name) == expected


# --- [AJ 6] Inductor GEMVs (mm/bmm with M = 1 or N = 1 decomposed into a multiply and a sum) -----


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("triton_red_fused_mm_0", ("matmul", "gemm")),
        ("triton_per_fused_mm_0", ("matmul", "gemm")),
        ("triton_per_fused_bmm_0", ("bmm", "gemm")),
        ("triton_red_fused_addmm_0", ("matmul", "gemm")),
        ("triton_red_fused__to_copy_mm_0", ("matmul", "gemm")),
        ("triton_red_fused__to_copy_mm_mul_0", ("matmul", "gemm")),  # int8 weight-only decode GEMV
        ("triton_red_fused__to_copy_addmm_mul_1", ("matmul", "gemm")),
        # a list naming a GEMM *and* a reduction is a reduction over the GEMM's (bias-added) output
        ("triton_per_fused_addmm_sum_0", ("sum", "reduction")),
    ],
)
def test_inductor_gemvs_are_gemm(name: str, expected: tuple[str, str]) -> None:
    assert label(name, name) == expected


# --- [AJ 7] a compiled MoE block's router GEMM ---------------------------------------------------

CUBLAS = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
COMPILED = "/tmp/torchinductor_root/ab/cabc.py(88): call <- Torch-Compiled Region: 0/0 <- torch/_dynamo/eval_frame.py(619): _fn"


@pytest.mark.parametrize(
    ("name", "launcher", "stack", "op"),
    [
        # eager (unchanged): the router's Linear is its own module; an expert's Linear is the expert MLP's
        (
            CUBLAS,
            "aten::mm",
            "cudaLaunchKernel <- aten::mm <- torch/nn/modules/linear.py(125): forward <- nn.Module: Linear_8"
            " <- modeling_mixtral.py(100): forward <- nn.Module: MixtralSparseMoeBlock_0",
            "matmul",
        ),
        (
            CUBLAS,
            "aten::mm",
            "cudaLaunchKernel <- aten::mm <- nn.Module: Linear_1 <- nn.Module: MixtralBlockSparseTop2MLP_3"
            " <- nn.Module: MixtralSparseMoeBlock_0",
            "fused_moe",
        ),
        # compiled: the block is the innermost module of its router GEMM as of every expert GEMM
        (
            CUBLAS,
            "aten::mm",
            f"cudaLaunchKernel <- aten::mm <- {COMPILED} <- nn.Module: MixtralSparseMoeBlock_1",
            "matmul",
        ),
        (CUBLAS, "aten::mm", f"cudaLaunchKernel <- aten::mm <- {COMPILED} <- nn.Module: DeepseekV3MoE_0", "matmul"),
        (
            "triton_tem_fused_mm_0",
            "triton_tem_fused_mm_0",
            f"cuLaunchKernel <- <built-in function launch> <- {COMPILED} <- nn.Module: Qwen3MoeSparseMoeBlock_2",
            "matmul",
        ),
        (
            CUBLAS,
            "aten::mm",
            "cudaLaunchKernel <- aten::mm <- CompiledFunction <- nn.Module: MixtralSparseMoeBlock_0",
            "matmul",
        ),
        # a compiled module that holds nothing but experts still says so
        (
            CUBLAS,
            "aten::bmm",
            f"cudaLaunchKernel <- aten::bmm <- {COMPILED} <- nn.Module: GptOssExperts_0",
            "fused_moe",
        ),
        # MoE expert code inside the compiled region (vLLM's opaque moe_forward op) still says so
        (CUBLAS, "aten::mm", f"cudaLaunchKernel <- aten::mm <- vllm::moe_forward <- {COMPILED}", "fused_moe"),
    ],
)
def test_a_compiled_moe_block_is_no_evidence_of_an_expert_gemm(name: str, launcher: str, stack: str, op: str) -> None:
    assert label(name, launcher, stack)[0] == op


def test_compiled_moe_router_trace(tmp_path: Path) -> None:
    """campAJ's c8 case: the same router GEMM [512,4096]×[4096,8] eager and compiled."""
    from kernel_atlas.ingest.pipeline import ingest_paths

    def x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
        pid, tid = (0, 7) if cat == "kernel" else (1, 1)
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = []
    for base, ext, corr, frames in (
        (900, 1, 100, [("python_function", "nn.Module: Linear_8"), ("python_function", "linear.py(125): forward")]),
        (2000, 3, 101, [("python_function", "eval_frame.py(619): _fn"), ("cpu_op", "Torch-Compiled Region: 0/0")]),
    ):
        events.append(x("python_function", f"nn.Module: MixtralSparseMoeBlock_{ext // 3}", base, 300))
        events += [x(cat, name, base + 5 * (i + 1), 290 - 10 * i) for i, (cat, name) in enumerate(frames)]
        dims = {"Input Dims": [[512, 4096], [4096, 8]], "Input type": ["c10::BFloat16"] * 2}
        events.append(x("cpu_op", "aten::mm", base + 20, 50, **{"External id": ext}, **dims))
        ids = {"External id": ext, "correlation": corr}
        events.append(x("cuda_runtime", "cudaLaunchKernel", base + 30, 10, **ids))
        events.append(x("kernel", CUBLAS, base + 100, 10, device=0, stream=7, **ids))
    trace = tmp_path / "c8.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    frame = ingest_paths([trace]).frame
    kernels = frame[frame["kind"] == "kernel"].sort_values("ts_us")
    assert kernels["module"].astype(str).tolist() == ["MixtralSparseMoeBlock_0.Linear_8", "MixtralSparseMoeBlock_1"]
    assert kernels["op_mapping"].astype(str).tolist() == ["matmul", "matmul"]
    assert kernels["category"].astype(str).tolist() == ["gemm", "gemm"]


# --- [AI 5] AMD kernel families ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the ROCm runtime's blit kernels behind hipMemcpy*/hipMemset*: taxonomy memory memcpy/memset
        ("__amd_rocclr_copyBuffer", ("memcpy", "memory")),
        ("__amd_rocclr_copyBufferAligned", ("memcpy", "memory")),
        ("__amd_rocclr_copyBufferToImage", ("memcpy", "memory")),
        ("__amd_rocclr_fillBufferAligned", ("memset", "memory")),
        ("__amd_rocclr_fillBuffer", ("memset", "memory")),
        # CK smooth-quant: per-token int8 quantisation with a smoothing scale
        (
            "void ck_tile::kentry<64, 1, ck_tile::SmoothquantKernel<ck_tile::SmoothquantPipelineOnePass>>"
            "(ck_tile::SmoothquantHostArgs)",
            ("quantize", "quantization"),
        ),
        # CK's generic reduction: a sum unless its reduce-operation template argument says max
        ("void ck::kernel_reduce_multiblock<>", ("sum", "reduction")),
        (
            "void ck::kernel_reduce_multiblock<ck::GridwiseReduction_mk_to_m_multiblock<ck::half_t, float, ck::half_t,"
            " int, ck::reduce::Max, ck::tensor_operation::element_wise::PassThrough>>(int)",
            ("max", "reduction"),
        ),
        # aiter's asm MLA decode kernel by its plain name, as its mangled form
        ("mla_dec_stage1_bf16_a16w16_subQ16_mqa16", ("attention", "attention")),
        ("_ZN5aiter39mla_dec_stage1_bf16_a16w16_subQ16_mqa16E", ("attention", "attention")),
    ],
)
def test_amd_kernel_families(name: str, expected: tuple[str, str]) -> None:
    assert label(name) == expected


def test_rocm_blit_kernels_are_copies_and_sets_under_any_launcher() -> None:
    """As Kineto's `Memcpy …`/`Memset …` on CUDA: the runtime's own copy, whatever op asked for it."""
    assert label("__amd_rocclr_copyBuffer", "aten::copy_")[0] == "memcpy"
    assert label("__amd_rocclr_fillBufferAligned", "aten::zero_")[0] == "memset"
