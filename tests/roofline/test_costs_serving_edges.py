"""Serving ops at their edges, each number derived by hand from the call written here: RoPE with
equal q and k heads, an HND KV cache, a sliding window, norms writing through their arguments,
the fused MoE's intermediates, `_scaled_mm`'s recorded out_dtype, an empty GEMM, and a
collective over one rank."""

from __future__ import annotations

import pandas as pd
import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.analysis import roofline_groups
from kernel_atlas.roofline.costs import Call, NoCost, cost_of, window_pairs

BF16, FP32, FP8, I64 = '"c10::BFloat16"', '"float"', '"c10::Float8_e4m3fn"', '"long int"'
SCALAR, NONE = '"Scalar"', '""'


def _call(launcher: str, op: str, dims: str, types: list[str], concrete: str | None = None, step: str = "") -> Call:
    return Call(launcher, op, parse_call(dims, "[" + ",".join(types) + "]", None, concrete), "", None, step)


def test_rope_with_equal_query_and_key_heads_rotates_both() -> None:
    # apply_rope_pos_ids_cos_sin_cache(q [2048,32,128], k [2048,32,128], q_rope, k_rope, cache [131072,128] fp32,
    # pos_ids [2048]): q and k 8,388,608 elements each
    dims = "[[2048,32,128],[2048,32,128],[2048,32,128],[2048,32,128],[131072,128],[2048],[]]"
    types = [BF16] * 4 + [FP32, I64, SCALAR]
    cost = cost_of(_call("sgl_kernel::apply_rope_pos_ids_cos_sin_cache", "rotary_embedding", dims, types))
    assert cost.flops == 3 * 2 * 8_388_608 == 50_331_648  # the old dedup by shape dropped k: 25,165,824
    # q and k read and written (2 · 33,554,432 B) + a 512-byte cache row per token
    assert cost.bytes == 2 * 2 * 16_777_216 + 2048 * 512 == 68_157_440
    # GQA as the seed catalog records it: q [1024,6,128], k [1024,1,128], then their outputs
    dims = "[[1024,6,128],[1024,1,128],[1024,6,128],[1024,1,128],[8192,128],[1024],[],[]]"
    gqa = cost_of(_call("sgl_kernel::apply_rope_pos_ids_cos_sin_cache", "rotary_embedding", dims, [*types, SCALAR]))
    assert gqa.flops == 3 * 1024 * 7 * 128 == 2_752_512
    assert gqa.bytes == 2 * 1024 * 7 * 128 * 2 + 1024 * 512 == 4_194_304


def test_paged_attention_takes_kv_heads_from_the_key_not_an_hnd_cache() -> None:
    # vllm::unified_attention_with_output(q [32,32,128], key [32,8,128], value [32,8,128], out [32,32,128],
    # kv_cache [20000,2,8,16,128] HND: axis −2 is the page size 16); decode of 32 tokens over Σsk = 131,072
    step = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk131072sqsq32sqsk131072)"
    dims = "[[32,32,128],[32,8,128],[32,8,128],[32,32,128],[20000,2,8,16,128]]"
    cost = cost_of(_call("vllm::unified_attention_with_output", "attention", dims, [BF16] * 5, step=step))
    assert cost.flops == 4 * 32 * 128 * 131_072
    # Q+O 2·32·32·128·2 + K+V 2·131072·8·128·2 (16 heads were read from the cache's axis −2)
    assert cost.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 131_072 * 8 * 128 * 2 == 537_395_200
    assert "H_kv from key" in cost.formula
    # without a key the cache's axis −2 is the only source, and the formula says what it assumed
    no_key = cost_of(
        _call(
            "vllm::unified_attention_with_output",
            "attention",
            "[[32,32,128],[20000,2,16,8,128]]",
            [BF16] * 2,
            step=step,
        )
    )
    assert no_key.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 131_072 * 8 * 128 * 2
    assert "NHD layout assumed" in no_key.formula


def test_window_pairs_counted_row_by_row() -> None:
    # causal, square S = 8, left window 2: rows see 1, 2, 3, 3, 3, 3, 3, 3 keys = 21, less ½ of 8 diagonals
    assert window_pairs(8, 8, 2, -1, True) == 21 - 4
    # unbounded left: the causal area, ½·8·8
    assert window_pairs(8, 8, -1, -1, True) == 32
    # not causal, left 1, right 1 over Sq = Skv = 5: rows see 2, 3, 3, 3, 2 keys
    assert window_pairs(5, 5, 1, 1, False) == 13
    # decode: one query at the end of 10 keys, left 3: keys 6…9
    assert window_pairs(1, 10, 3, -1, True) == 4 - 0.5


def test_flash_attention_reads_its_sliding_window() -> None:
    # _flash_attention_forward(q [1,4096,32,128], k/v [1,4096,8,128], …, is_causal True, …, window_size_left 1024,
    # window_size_right -1): query i sees min(i, 1024) + 1 keys: Σ = 1025·4096 − 1024·1025/2 = 3,673,600, less
    # ½ per diagonal (2,048) as the causal area is counted
    dims = "[[1,4096,32,128],[1,4096,8,128],[1,4096,8,128],[],[],[],[],[],[],[],[],[],[]]"
    types = [BF16] * 3 + [NONE, NONE, SCALAR, SCALAR, SCALAR, SCALAR, SCALAR, NONE, SCALAR, SCALAR]
    concrete = '["","","","","","4096","4096","0.0","True","False","","1024","-1"]'
    cost = cost_of(_call("aten::_flash_attention_forward", "attention", dims, types, concrete))
    pairs = 3_673_600 - 2_048
    assert cost.flops == 2 * 1 * 32 * pairs * (128 + 128) == 60_154_707_968
    assert "sliding window (left 1024" in cost.formula
    # no window recorded: the causal square, ½·4096²
    unbounded = concrete.replace('"1024","-1"', '"-1","-1"')
    assert cost_of(_call("aten::_flash_attention_forward", "attention", dims, types, unbounded)).flops == (
        2 * 32 * 4096 * 4096 / 2 * 256
    )


def test_rmsnorm_out_argument_is_written_not_read() -> None:
    # sgl_kernel::rmsnorm(out [2048,4096], input [2048,4096], weight [4096], eps): read input + weight, write out
    dims = "[[2048,4096],[2048,4096],[4096],[],[]]"
    cost = cost_of(_call("sgl_kernel::rmsnorm", "rms_norm", dims, [BF16] * 3 + [SCALAR, SCALAR]))
    assert cost.bytes == 16_777_216 + 8_192 + 16_777_216 == 33_562_624
    assert cost.flops == 3 * 2048 * 4096
    vllm = cost_of(_call("_C::rms_norm", "rms_norm", "[[2048,4096],[2048,4096],[4096],[]]", [BF16] * 3 + [SCALAR]))
    assert vllm.bytes == 33_562_624


def test_fused_add_rmsnorm_writes_both_tensors_it_updates() -> None:
    # fused_add_rmsnorm(input, residual, weight, eps): residual += input; input = norm(residual)·weight
    dims = "[[2048,4096],[2048,4096],[4096],[],[]]"
    for launcher in ("sgl_kernel::fused_add_rmsnorm", "_C::fused_add_rms_norm"):
        cost = cost_of(_call(launcher, "rms_norm", dims, [BF16] * 3 + [SCALAR, SCALAR]))
        # read input, residual and weight; write input and residual
        assert cost.bytes == 2 * 16_777_216 + 8_192 + 2 * 16_777_216 == 67_117_056
        assert cost.flops == (3 + 1) * 2048 * 4096  # the norm's 3 per element and the add's 1


def test_fused_experts_count_their_intermediates() -> None:
    # sglang::inplace_fused_experts(x [8192,4096], w1 [64,2816,4096], w2 [64,4096,1408], topk_weights [8192,8])
    dims = "[[8192,4096],[64,2816,4096],[64,4096,1408],[8192,8]]"
    cost = cost_of(_call("sglang::inplace_fused_experts", "fused_moe", dims, [BF16] * 3 + [FP32]))
    x = 8192 * 4096 * 2
    weights = (64 * 2816 * 4096 + 64 * 4096 * 1408) * 2
    touched = 64 * (1 - (1 - 8 / 64) ** 8192) / 64  # every expert, to 1e-475
    intermediates = 8192 * 8 * (2816 + 1408 + 2 * 4096) * 2  # [T·k, 2I] out, [T·k, I] in, [T·k, H] out and back
    assert cost.bytes == pytest.approx(2 * x + touched * weights + intermediates, rel=1e-12)
    assert intermediates == 1_627_389_952


def test_scaled_mm_reads_its_out_dtype() -> None:
    # _scaled_mm(a [2048,7168] fp8, b [7168,4096] fp8, scale_a [2048,1], scale_b [1,4096], bias, scale_result,
    # out_dtype 6 = float32, use_fast_accum)
    dims = "[[2048,7168],[7168,4096],[2048,1],[1,4096],[],[],[],[]]"
    types = [FP8, FP8, FP32, FP32, NONE, NONE, SCALAR, SCALAR]
    fp32 = cost_of(_call("aten::_scaled_mm", "matmul", dims, types, '["","","","","","","6","False"]'))
    inputs = 2048 * 7168 + 7168 * 4096 + 2048 * 4 + 4096 * 4
    assert fp32.bytes == inputs + 2048 * 4096 * 4
    assert "out_dtype code 6" in fp32.formula
    fp8 = cost_of(_call("aten::_scaled_mm", "matmul", dims, types, '["","","","","","","24","False"]'))
    assert fp8.bytes == inputs + 2048 * 4096 * 1
    # not recorded: a 2-byte output, said
    unknown = cost_of(_call("aten::_scaled_mm", "matmul", dims, types, '["","","","","","","","False"]'))
    assert unknown.bytes == inputs + 2048 * 4096 * 2 and "2-byte output assumed" in unknown.formula


def test_an_empty_gemm_reads_nothing() -> None:
    # mm([0,4096], [4096,4096]): no output element, so no operand is read
    cost = cost_of(_call("aten::mm", "matmul", "[[0,4096],[4096,4096]]", [BF16, BF16]))
    assert (cost.flops, cost.bytes) == (0.0, 0.0)
    assert "empty output" in cost.formula
    # K = 0: the [16, 32] output is still written (zeros)
    k_zero = cost_of(_call("aten::mm", "matmul", "[[16,0],[0,32]]", [BF16, BF16]))
    assert (k_zero.flops, k_zero.bytes) == (0.0, 16 * 32 * 2)


def test_a_collective_over_one_rank_is_not_costed_as_link_traffic() -> None:
    from kernel_atlas.roofline.analysis import _collective_costs

    kernels = pd.DataFrame(
        {
            "category": ["communication", "communication"],
            "collective": ["allreduce", "allreduce"],
            "msg_in_nelems": [1_048_576, 1_048_576],
            "msg_out_nelems": [1_048_576, 1_048_576],
            "group_size": [1, 8],
            "msg_dtype": ["BFloat16", "BFloat16"],
            "op_mapping": ["all_reduce", "all_reduce"],
            "role": ["", ""],
            "note": ["", ""],
            "input_dims": [None, None],
            "input_types": [None, None],
            "dur_us": [5.0, 50.0],
            "flops": [float("nan")] * 2,
            "bytes": [float("nan")] * 2,
            "precision": [None, None],
            "unit": [None, None],
            "formula": [None, None],
            "op_time_us": [float("nan")] * 2,
            "launcher": ["c10d::allreduce_", "c10d::allreduce_"],
            "cpu_op_id": [1, 2],
        }
    )
    _collective_costs(kernels, None)
    assert kernels["role"].tolist() == ["no model", "main"]
    assert "group of one rank" in kernels["note"].iat[0]
    # 8 ranks: 2·7/8 of 2 MiB
    assert kernels["bytes"].iat[1] == 1_048_576 * 2 * 2 * 7 / 8


def test_roofline_rows_keep_calls_of_other_dtypes_apart() -> None:
    rows = {
        "name": ["paged_decode", "paged_decode"],
        "launcher": ["attn", "attn"],
        "input_dims": ["[[32,32,128]]", "[[32,32,128]]"],
        "role": ["main", "main"],
        "input_types": ['["c10::BFloat16"]', '["c10::Float8_e4m3fn"]'],
        "note": ["", ""],
        "op_mapping": ["attention"] * 2,
        "category": ["attention"] * 2,
        "dur_us": [10.0, 6.0],
        "op_time_us": [10.0, 6.0],
        "flops": [1e9, 1e9],
        "bytes": [4e8, 2.7e8],
        "precision": ["bf16", "fp8"],
        "unit": ["tensor", "tensor"],
        "formula": ["f", "g"],
        "call_stack": ["", ""],
    }
    table = roofline_groups(pd.DataFrame(rows))
    assert sorted(table["precision"]) == ["bf16", "fp8"]
    assert sorted(table["bytes"]) == [2.7e8, 4e8]


def test_rotary_without_any_query_says_so() -> None:
    with pytest.raises(NoCost):
        cost_of(_call("sgl_kernel::apply_rope_pos_ids_cos_sin_cache", "rotary_embedding", "[[8192,128]]", [FP32]))


def test_calls_without_recorded_shapes_count_as_no_shapes(tmp_path) -> None:
    # aten::add_ with no Input Dims launches a 7 µs kernel; aten::add_ with shapes but an unknown dtype a 5 µs one:
    # the first is uncosted for want of shapes (report.json no_shape_time_us), the second of a model
    import json

    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths
    from kernel_atlas.report.build import build_report

    def call(ts: float, corr: int, dur: float, args: dict) -> list[dict]:
        return [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 1, "tid": 1, "ts": ts, "dur": 5, "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1,
             "dur": 2, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": f"vectorized_elementwise_kernel_{corr}", "pid": 0, "tid": 7,
             "ts": ts + 10, "dur": dur, "args": {"correlation": corr, "device": 0, "stream": 7}},
        ]  # fmt: skip

    unknown = {"Input Dims": [[4], [4], []], "Input type": ["c10::Quirky", "c10::Quirky", "Scalar"]}
    events = call(0, 1, 7.0, {}) + call(50, 2, 5.0, unknown)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    write_outputs(ingest_paths([trace]), tmp_path / "out")
    build_report(tmp_path / "out")
    facts = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (facts["no_shape_time_us"], facts["no_model_time_us"], facts["costed_time_us"]) == (7.0, 5.0, 0.0)


def test_shapes_without_a_dtype_are_said_as_such() -> None:
    # an Nsight export's NVTX range records `sizes = [[512, 1024]]` and no dtype: not "no shapes recorded"
    with pytest.raises(NoCost, match="input shapes recorded but no dtype"):
        cost_of(Call("aten::relu", "relu", parse_call("[[512,1024]]", None)))
    with pytest.raises(NoCost, match=r"of a dtype not in catalogs/dtypes.toml \(c10::Quirky\)"):
        cost_of(_call("aten::add", "add", "[[4],[4]]", ['"c10::Quirky"'] * 2))
    with pytest.raises(NoCost, match="no input tensor shapes recorded"):
        cost_of(_call("aten::add", "add", "[[],[]]", [NONE, NONE]))
