"""The seed catalog's custom all-reduce costed from its kernel's template arguments (fixer BA): the
catalog has no world size, so `sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>` (input
[1, 7168] bf16) read "no cost model for sgl_kernel::all_reduce" — collectives are costed only
from a trace (`_collective_costs`), never by the per-op formulas the catalog path asks. Expected
values worked out here by hand from the catalog entries (catalogs/kernels.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.core.devices import get_device
from kernel_atlas.roofline.catalog import catalog_costs, entry_call

SEED = "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>("


def _entry(prefix: str) -> dict[str, Any]:
    shipped = json.loads((Path(__file__).resolve().parents[2] / "catalogs" / "kernels.json").read_text())
    (entry,) = (e for e in shipped if e["kernel_name"].startswith(prefix))
    return entry


def test_the_seed_custom_all_reduce_is_costed_from_its_template() -> None:
    from kernel_atlas.roofline.analysis import template_collective_cost

    entry = _entry(SEED)
    cost = template_collective_cost(entry["kernel_name"], entry_call(entry))
    # inp and out [1, 7168] bf16: 7168 · 2 B, all_reduce over the template's 8: · 2·(8−1)/8 = 1.75
    assert cost.bytes == 7168 * 2 * 2 * 7 / 8 == 25_088 and cost.flops == 0
    assert cost.unit == "link"
    assert cost.formula == (
        "bus bytes = 7168·2 B · 1.750 (all_reduce, n=8 from its kernel's template arguments)"
        " (message: the largest tensor recorded on its launch)"
    )


def test_catalog_collectives_without_a_template_size_or_a_message_stay_uncosted() -> None:
    from kernel_atlas.roofline.analysis import template_collective_cost
    from kernel_atlas.roofline.costs import NoCost

    # NCCL's all_reduce of [1024, 7168]: no group size anywhere (no world size outside a trace)
    nccl = _entry("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(")
    with pytest.raises(NoCost, match="group size unknown"):
        template_collective_cost(nccl["kernel_name"], entry_call(nccl))
    # DeepEP's combine<__nv_bfloat16, 8, 768>: n = 8 in its template, but x [1024, 7168] is not what it
    # sends (each rank gets the tokens routed to it)
    deep_ep = _entry("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(")
    with pytest.raises(NoCost, match="the tensors on its launch are not what it sends"):
        template_collective_cost(deep_ep["kernel_name"], entry_call(deep_ep))


def test_the_catalog_costs_the_seed_custom_all_reduce() -> None:
    table = catalog_costs([_entry(SEED)], get_device("h200"))
    assert table["bytes"].tolist() == [25_088]
    # against the H200's NVLink, 450 GB/s one way (catalogs/devices.toml): 25,088 B / 450e3 B/µs
    assert table["bound"].tolist() == ["communication"]
    assert table["attainable_us"].iloc[0] == pytest.approx(25_088 / 450e3)
