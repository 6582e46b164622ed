"""Costs of recorded calls from the shared traces, derived by hand from their `Input Dims`."""

from __future__ import annotations

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, cost_of
from tests.support.traces import ingested

BF16 = '"c10::BFloat16"'


def _cost(launcher: str, op: str, rule: str, dims: str, types: list[str]):
    return cost_of(Call(launcher, op, parse_call(dims, "[" + ",".join(types) + "]"), rule))


def test_inductor_views_of_one_buffer_are_not_broadcast_into_a_bigger_output() -> None:
    # mi300x_torch_compile_llama_block: triton_poi_fused__unsafe_view_add_3(in_out [8,4096,2048],
    # in [8,4096,2048], in [32768,2048], xnumel=67108864): [32768,2048] is a view of 8·4096 rows,
    # so the output has 8·4096·2048 = 67,108,864 elements, not 8·32768·2048
    cost = _cost(
        "triton_poi_fused__unsafe_view_add_3",
        "add",
        "rule:inductor-single-op",
        "[[8,4096,2048],[8,4096,2048],[32768,2048],[]]",
        [BF16, BF16, BF16, '"Scalar"'],
    )
    assert cost.flops == 67_108_864
    # Inductor records every argument, outputs among them, and not which one is written: each of the
    # three bf16 tensors moved once (a lower bound where the first is updated in place), an estimate
    assert cost.bytes == 3 * 134_217_728
    assert "assumed" in cost.formula
    # a real broadcast still broadcasts: [4,1,768] + [1,1,768] → 4·768 elements
    cost = _cost("aten::add", "add", "", "[[4,1,768],[1,1,768],[]]", ['"float"', '"float"', '"Scalar"'])
    assert cost.flops == 3072
    assert cost.bytes == (3072 + 768) * 4 + 3072 * 4


def test_inductor_gated_activation_with_gate_and_up_apart() -> None:
    # triton_poi_fused__unsafe_view_mul_silu_2(in_out [8,4096,8192], in [32768,8192], xnumel=268435456):
    # silu(a)·b over 268,435,456 pairs; both read (2 × 536,870,912 bytes), one output written
    cost = _cost(
        "triton_poi_fused__unsafe_view_mul_silu_2",
        "silu_and_mul",
        "rule:inductor-gated-activation",
        "[[8,4096,8192],[32768,8192],[]]",
        [BF16, BF16, '"Scalar"'],
    )
    assert cost.flops == 5 * 268_435_456  # catalogs/costs.toml: silu_and_mul = 5 FLOP per output
    assert cost.bytes == 2 * 536_870_912 + 536_870_912
    # one [T, 2d] input (SGLang's silu_and_mul(out [4,128], input [4,256])): d outputs per row
    cost = _cost("sgl_kernel::silu_and_mul", "silu_and_mul", "", "[[4,128],[4,256]]", [BF16, BF16])
    assert cost.flops == 5 * 512
    assert cost.bytes == 4 * 256 * 2 + 512 * 2


def test_gather_reads_the_gathered_elements_not_the_whole_source() -> None:
    # mi300x_sglang_qwen3_8b_decode: aten::gather(self [151936,4096] bf16, dim, index [32,4096] int64,
    # sparse_grad, out [32,4096]): 131,072 elements read and written, the index read
    cost = _cost(
        "aten::gather",
        "gather",
        "rule:aten-gather",
        "[[151936,4096],[],[32,4096],[],[32,4096]]",
        [BF16, '"Scalar"', '"long int"', '"Scalar"', BF16],
    )
    assert cost.bytes == 131_072 * 8 + 2 * 131_072 * 2 == 1_572_864


def test_kv_cache_write_touches_both_caches_only_where_written() -> None:
    # SGLang store_cache(k [32,1024], v [32,1024], k_cache [835874,1024], v_cache [835874,1024],
    # loc [32] int64, ...): 2·32·1024 bf16 values read and written, 32 int64 slots read
    cost = _cost(
        "sglang/jit_kernel/kvcache.py(50): store_cache",
        "kv_cache_write",
        "rule:kv-cache-write",
        "[[32,1024],[32,1024],[835874,1024],[835874,1024],[32],[],[]]",
        [BF16, BF16, BF16, BF16, '"long int"', '"Scalar"', '"Scalar"'],
    )
    assert cost.bytes == 2 * (2 * 32 * 1024 * 2) + 32 * 8 == 262_400


def test_llama_block_inductor_kernel_costed_end_to_end() -> None:
    from kernel_atlas.core.devices import get_device
    from kernel_atlas.roofline.analysis import analyse

    kernels = analyse(ingested("mi300x_torch_compile_llama_block").frame, get_device("mi300x")).kernels
    row = kernels[kernels["launcher"] == "triton_poi_fused__unsafe_view_add_3"].iloc[0]
    assert row["flops"] == 67_108_864
    assert row["bytes"] == 3 * 134_217_728  # each recorded argument once (see above)
    assert bool(row["estimate"])
