"""`atlas report CATALOG` costs an entry by the op `atlas classify` would give it (fixer BM1).

The seed's entries have no `category`, and 47 have `op_mapping: TBD`: the catalog path had costed
each by its own op_mapping and category, so flashinfer's RMSNorm under `sgl_kernel::rmsnorm`
(TBD) and the custom all-reduce (no category) read "no cost model for …" though the classifier
labels them and their costs exist (campaign BM 1: the seed costed 104/167, its filled copy
catalogs/kernels.json 131/167). Expected values worked out by hand from the example shapes and the
H200's datasheet peaks (4,800 GB/s HBM, 450 GB/s NVLink per direction).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel_atlas.core.devices import get_device
from kernel_atlas.roofline.catalog import catalog_costs
from tests.support.traces import SEED

RMSNORM = "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)"
ALL_REDUCE = "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)"


def _param(i: int, role: str, dims: list[int], dtype: str, what: str) -> dict[str, Any]:
    return {"id": i, "role": role, "example_dim": dims, "example_dtype": dtype, "description": what}


def _rmsnorm(op: str | None) -> dict[str, Any]:
    """Seed entry #19 as the seed has it (no category), with `op`."""
    entry = {
        "kernel_name": RMSNORM,
        "kernel_implementation": "sgl_kernel::rmsnorm",
        "params": [
            _param(0, "output", [1024, 4096], "c10::BFloat16", "out"),
            _param(1, "input", [1024, 4096], "c10::BFloat16", "input"),
            _param(2, "input", [4096], "c10::BFloat16", "weight"),
            _param(3, "input", [], "Scalar", "epsilon"),
            _param(4, "input", [], "Scalar", "enable_pdl"),
        ],
    }
    return entry if op is None else {**entry, "op_mapping": op}


def _all_reduce(**extra: str) -> dict[str, Any]:
    """Seed entry #42 (labelled all_reduce, no category)."""
    return {
        "kernel_name": ALL_REDUCE,
        "kernel_implementation": "sgl_kernel::all_reduce",
        "op_mapping": "all_reduce",
        "params": [
            _param(0, "input", [], "Scalar", "fa"),
            _param(1, "input", [1, 7168], "c10::BFloat16", "inp"),
            _param(2, "output", [1, 7168], "c10::BFloat16", "out"),
            _param(3, "input", [], "Scalar", "reg_buffer"),
            _param(4, "input", [], "Scalar", "reg_buffer_sz_bytes"),
        ],
        **extra,
    }


def test_an_unlabelled_entry_is_costed_by_the_classifiers_label() -> None:
    entries = [_rmsnorm("TBD"), _rmsnorm(" tbd "), _rmsnorm(""), _rmsnorm(None), _rmsnorm("rms_norm")]
    table = catalog_costs(entries, get_device("h200"))
    # read input 1024·4096·2 = 8,388,608 + weight 4096·2 = 8,192; write out 8,388,608
    assert table["bytes"].tolist() == [8_388_608 + 8_192 + 8_388_608] * 5 == [16_785_408] * 5
    # 3 FLOPs per element of 1024·4096 = 4,194,304 (the campaign's rms_norm count)
    assert table["flops"].tolist() == [12_582_912] * 5
    # memory-bound: 16,785,408 B / 4,800 GB/s = 3.49696 µs
    assert table["attainable_us"].tolist() == pytest.approx([3.49696] * 5)
    assert table["op_mapping"].tolist() == ["rms_norm"] * 5
    assert table["category"].tolist() == ["norm"] * 5
    assert (table["note"] == "").all()
    # where each label came from: the classifier (its rule, evidence, confidence) or the catalog
    by = table["labelled_by"].tolist()
    assert by[:4] == ["classifier: rule:flashinfer-rms-norm (name+launcher, 0.9)"] * 4
    assert by[4] == "catalog"


def test_a_given_label_without_a_category_is_costed_by_its_ops_category() -> None:
    table = catalog_costs([_all_reduce(), _all_reduce(category="communication")], get_device("h200"))
    # [1, 7168] bf16 = 14,336 B; all_reduce over the template's 8 GPUs moves 2·7/8 of it: 25,088 bus bytes
    assert table["bytes"].tolist() == [25_088, 25_088]
    assert table["flops"].tolist() == [0, 0]
    assert table["category"].tolist() == ["communication", "communication"]
    assert table["bound"].tolist() == ["communication", "communication"]
    # 25,088 B / 450 GB/s = 0.0557511 µs
    assert table["attainable_us"].tolist() == pytest.approx([0.0557511] * 2, rel=1e-5)
    # every label given: no labelled_by column (catalogs/kernels.costs.csv keeps its columns)
    assert "labelled_by" not in table


def test_the_seed_is_costed_as_its_filled_copy() -> None:
    if not SEED.is_file():
        pytest.skip("shared seed catalog not available")
    table = catalog_costs(json.loads(SEED.read_text()), get_device("h200"))
    assert len(table) == 167
    assert table["flops"].notna().sum() == 131  # catalogs/kernels.costs.csv: 131 of 167 (was 104)
    assert (table["labelled_by"] != "catalog").sum() == 48  # the seed's 47 TBD entries and one empty
    # seed #22, flashinfer silu_and_mul: input [8192, 384] bf16 read 6,291,456 B, out [8192, 192]
    # bf16 written 3,145,728 B
    assert table.loc[22, "op_mapping"] == "silu_and_mul" and table.loc[22, "bytes"] == 9_437_184
    # seed #24, per-token-group fp8 quant: x [1024, 1536] bf16 read 3,145,728 B; x_q fp8 1,572,864
    # B and x_s [1024, 12] fp32 49,152 B written
    assert table.loc[24, "op_mapping"] == "quantize" and table.loc[24, "bytes"] == 4_767_744
