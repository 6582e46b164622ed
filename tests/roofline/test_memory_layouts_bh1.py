"""Memory ops costed by hand (campaign BH 2, 3, 5, 7b): ATen's advanced indexing costs the elements
its indices select, library ops of unknown argument layout and autograd nodes are not costed by
formulas written for ATen's positions, `_to_copy`/`to` write at their dtype argument's size, and the
embedding formula names the indices it counts. Every number below was worked out by hand from the
recorded `Input Dims`, `Input type` and `Concrete Inputs` and the op's ATen schema, never with the
cost formulas themselves."""

from __future__ import annotations

import json
import re

import pytest

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from tests.support.traces import ingested, raw_events

BF16, FP32, I32, I64, LIST, SCALAR = "c10::BFloat16", "float", "int", "long int", "TensorList", "Scalar"
ESTIMATE = re.compile(r"\bassumed\b|\bestimate\b|\bnot recorded\b")  # docs/outputs.md `estimate`


def _call(launcher: str, op: str, args: list[tuple[object, str, str]]) -> Call:
    """A call from (dims, type, concrete value) per recorded argument, as the profiler writes them."""
    dims, types, concrete = (json.dumps([a[i] for a in args]) for i in range(3))
    return Call(launcher, op, parse_call(dims, types, None, concrete))


# --- 2. aten::index / index_put_ --------------------------------------------------------------


def test_index_reads_and_writes_only_the_selected_elements() -> None:
    # index(self [1000,512] fp32, indices [[64]]): output [64,512] = 32,768 elements; 131,072 B gathered,
    # 131,072 B written, 64 int64 indices 512 B (had been self read whole: 2,048,256 B)
    cost = cost_of(_call("aten::index", "index", [([1000, 512], FP32, ""), ([[64]], LIST, "")]))
    assert cost.bytes == 131_072 + 131_072 + 512 == 262_656
    assert not ESTIMATE.search(cost.formula)
    # two index tensors [64], [64] on both axes: output [64], 256 B each way, indices 2·512
    cost = cost_of(_call("aten::index", "index", [([1000, 512], FP32, ""), ([[64], [64]], LIST, "")]))
    assert cost.bytes == 256 + 256 + 1024 == 1_536


def test_index_put_writes_the_values_where_the_indices_point() -> None:
    # index_put_(self [1000,512] fp32, [[64]], values [64,512], accumulate False): values 131,072 B read,
    # 131,072 B written into self, indices 512 (had been "reads 2179072 + writes 256")
    args = [([1000, 512], FP32, ""), ([[64]], LIST, ""), ([64, 512], FP32, ""), ([], SCALAR, "False")]
    cost = cost_of(_call("aten::index_put_", "index_put_", args))
    assert cost.bytes == 131_072 + 131_072 + 512 == 262_656
    assert not ESTIMATE.search(cost.formula)
    # accumulate True: each element written is read first, +131,072
    args[3] = ([], SCALAR, "True")
    assert cost_of(_call("aten::index_put_", "index_put_", args)).bytes == 262_656 + 131_072


def test_index_with_its_indices_unrecorded_is_not_costed_or_an_estimate() -> None:
    # the seed's index(self [1024,12288] bf16, indices [] ''): PyTorch 2.x records `Tensor?[]` as []; the
    # output's rows are the indices' (had been self read and written whole: 50,331,648 B, SOL 500 %)
    with pytest.raises(NoCost, match="indices are not recorded"):
        cost_of(_call("aten::index", "index", [([1024, 12288], BF16, ""), ([], "", "")]))
    # _index_put_impl_(pool [21124861,12,128], [], values [1024,12,128] bf16, False, False): the values
    # 3,145,728 B read and as many written; the indices unknown: an estimate
    args = [([21124861, 12, 128], BF16, ""), ([], "", ""), ([1024, 12, 128], BF16, "")]
    args += [([], SCALAR, "False"), ([], SCALAR, "False")]
    cost = cost_of(_call("aten::_index_put_impl_", "index_put_", args))
    assert cost.bytes == 3_145_728 + 3_145_728 == 6_291_456
    assert ESTIMATE.search(cost.formula)


def test_an_index_that_may_be_a_mask_is_an_upper_bound_said_so() -> None:
    # index(self [1000,512] fp32, [[1000]]): [1000] may be a bool mask over axis 0 (a TensorList records no
    # dtype); at most 1000·512 elements gathered and written, 2·2,048,000 + 8,000 B of int64 indices
    cost = cost_of(_call("aten::index", "index", [([1000, 512], FP32, ""), ([[1000]], LIST, "")]))
    assert cost.bytes == 2 * 2_048_000 + 8_000 == 4_104_000
    assert ESTIMATE.search(cost.formula)


def test_an_op_whose_outputs_the_fallback_guesses_is_an_estimate() -> None:
    # bucketize(self [1024] fp32, boundaries [4999] fp32, False, False), labelled `index`: the memory
    # fallback counts its inputs 4,096 + 19,996 read and as much written — it writes 1024 int64 positions
    args = [([1024], FP32, ""), ([4999], FP32, ""), ([], SCALAR, "False"), ([], SCALAR, "False")]
    cost = cost_of(_call("aten::bucketize", "index", args))
    assert cost.bytes == 2 * (4_096 + 19_996)
    assert ESTIMATE.search(cost.formula)
    # a clone copies its one tensor: exact
    clone = cost_of(_call("aten::clone", "copy_", [([1024], FP32, ""), ([], "", "")]))
    assert clone.bytes == 2 * 4_096 and not ESTIMATE.search(clone.formula)


# --- 3. library ops of unknown layout, autograd nodes ------------------------------------------


def test_library_ops_of_unknown_layout_are_not_read_by_aten_formulas() -> None:
    # fbgemm's TBE lookup(placeholder [0] fp32, weights [7487072] fp32, [122] int, [123] int64), its kernel
    # labelled index_select: ATen's rule read the placeholder as self, 123 rows of 0 bytes = 984 B
    tbe = [([0], FP32, ""), ([7487072], FP32, ""), ([122], I32, ""), ([123], I64, "")]
    with pytest.raises(NoCost, match="unknown argument layout"):
        cost_of(_call("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function", "index_select", tbe))
    # permute_pooled_embs_auto_grad([1024,70904] fp32, 4 × int64): 981 "gathered" elements = 15,696 B
    permute = [([1024, 70904], FP32, "")] + [([981], I64, ""), ([980], I64, "")] * 2
    with pytest.raises(NoCost, match="unknown argument layout"):
        cost_of(_call("fbgemm::permute_pooled_embs_auto_grad", "gather", permute))
    # its backward node records the incoming gradient [1024,70904]: 580,845,568 B by the generic rule
    node = "torch::autograd::CppNode<fbgemm_gpu::PermutePooledEmbsFunction<&fbgemm_gpu::permute_pooled_embs_gpu> >"
    with pytest.raises(NoCost, match="autograd node"):
        cost_of(_call(node, "gather", [([1024, 70904], FP32, "")]))
    # formulas written for libraries' layouts (not ATen's positions) still read a library op of theirs:
    # vLLM's reshape_and_cache(key, value [32,8,128] bf16, caches, slots [32] int64, "auto", scales)
    kv = [([32, 8, 128], BF16, ""), ([32, 8, 128], BF16, ""), ([20000, 8, 16, 16, 8], BF16, "")]
    kv += [([20000, 8, 128, 16], BF16, ""), ([32], I64, ""), ([], "str", "auto"), ([], FP32, ""), ([], FP32, "")]
    # K and V 65,536 B each read and written into their caches; 256 B of slots, two 4 B scales
    assert cost_of(_call("_C::reshape_and_cache", "kv_cache_write", kv)).bytes == 4 * 65_536 + 256 + 8


def test_a100_diff_control_leaves_its_fbgemm_kernels_uncosted() -> None:
    from kernel_atlas.roofline.analysis import analyse

    # the TBE forward kernels (15,226 + 182 µs) and permute_pooled_embs (5,976 µs, forward and backward)
    # summed from the raw events: their calls had been costed at 984 B … 580 MB
    ours = ("split_embedding_codegen_forward_", "permute_pooled_embs_kernel")
    raw = sum(
        e["dur"]
        for e in raw_events("a100_diff_control")
        if e.get("cat") == "kernel" and e["name"].startswith(tuple(f"void {n}" for n in ours))
    )
    assert raw == 15_226 + 182 + 5_976
    analysis = analyse(ingested("a100_diff_control").frame, None)
    kernels = analysis.kernels
    rows = kernels[kernels["name"].astype(str).str.startswith(tuple(f"void {n}" for n in ours))]
    assert rows["dur_us"].sum() == raw
    assert set(rows["role"]) == {"no model"}
    assert rows["note"].astype(str).str.contains("unknown argument layout|autograd node").all()
    assert analysis.facts["no_model_time_us"] >= raw


# --- 5. _to_copy / to write at their dtype argument's size -----------------------------------


def _to_copy(dtype: str, code: str) -> list[tuple[object, str, str]]:
    # _to_copy(self [1024,1024], dtype, layout, device, pin_memory, non_blocking False, memory_format)
    unset: tuple[object, str, str] = ([], "", "")
    return [([1024, 1024], dtype, ""), ([], SCALAR, code), unset, unset, unset, ([], SCALAR, "False"), unset]


def test_to_copy_writes_at_its_dtype_argument() -> None:
    # fp32 → bf16 (ScalarType 15): 4,194,304 read + 2,097,152 written, bf16 (had been 8,388,608 at fp32)
    cost = cost_of(_call("aten::_to_copy", "copy_", _to_copy(FP32, "15")))
    assert (cost.bytes, cost.precision) == (4_194_304 + 2_097_152, "bf16")
    # bf16 → fp8 e4m3 (24): 2,097,152 + 1,048,576
    cost = cost_of(_call("aten::_to_copy", "copy_", _to_copy(BF16, "24")))
    assert (cost.bytes, cost.precision) == (3_145_728, "fp8")
    # dtype None beside recorded Concrete Inputs: a copy at self's dtype, not an estimate
    cost = cost_of(_call("aten::_to_copy", "copy_", _to_copy(FP32, "")))
    assert cost.bytes == 2 * 4_194_304 and not ESTIMATE.search(cost.formula)
    # to.dtype(self fp32, 15, False, False, None): 6,291,456
    args = [([1024, 1024], FP32, ""), ([], SCALAR, "15"), ([], SCALAR, "False"), ([], SCALAR, "False"), ([], "", "")]
    assert cost_of(_call("aten::to", "copy_", args)).bytes == 6_291_456
    # to(other) as PyTorch 2 records it: to.device(self, device, dtype 5 (fp16), False, False, None)
    args = [([1024, 1024], FP32, ""), ([], "", ""), ([], SCALAR, "5"), ([], SCALAR, "False"), ([], SCALAR, "False")]
    args.append(([], "", ""))
    cost = cost_of(_call("aten::to", "copy_", args))
    assert (cost.bytes, cost.precision) == (4_194_304 + 2_097_152, "fp16")


# --- 7b. the embedding formula names the indices it counts -----------------------------------


def test_embedding_formula_names_its_indices() -> None:
    # embedding(weight [50000,768] bf16, indices [4,512] int64, -1, False, False): 2048 rows of 1536 B read
    # and written (6,291,456) + 2048 int64 indices 16,384
    args = [([50000, 768], BF16, ""), ([4, 512], I64, ""), ([], SCALAR, "-1"), ([], SCALAR, "False")]
    args.append(([], SCALAR, "False"))
    cost = cost_of(_call("aten::embedding", "index_select", args))
    assert cost.bytes == 6_291_456 + 16_384 == 6_307_840
    assert "16384" in cost.formula
