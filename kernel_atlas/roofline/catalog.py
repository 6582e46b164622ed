"""Costs of catalog entries from their example shapes (`params`), against a device's roofline."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.classifier import default_classifier, unlabelled
from kernel_atlas.classify.fill import fill_catalog
from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.core.devices import TRANSFER_BOUNDS, Device
from kernel_atlas.ingest.recorded import TENSOR, from_params
from kernel_atlas.roofline.analysis import template_collective_cost
from kernel_atlas.roofline.costs import Call, Cost, NoCost, cost_of


def entry_call(entry: dict[str, Any]) -> Call:
    """A catalog entry as a call: its example params, its op_mapping (as it stands: `catalog_costs`
    passes entries filled by `fill_catalog`), and the rule that identifies its kernel family (from
    the classifier, the one reader of kernel names)."""
    args = from_params(entry.get("params", []))
    rule = (
        default_classifier()
        .classify(entry.get("kernel_name", ""), entry.get("kernel_implementation"), entry.get("call_stack"))
        .rule
    )
    list_dtype = next((a.dtype for a in args if a.kind == TENSOR), None)
    return Call(entry.get("kernel_implementation", ""), entry.get("op_mapping", ""), args, rule, list_dtype)


def _entry_cost(entry: dict[str, Any]) -> Cost:
    """One call's cost at the entry's example shapes (a filled entry: its `category` is its op's):
    a collective's bus bytes from its tensors and the group size its kernel's template names (no
    trace, so no world size to assume one from), any other op's from its op's formula."""
    call = entry_call(entry)
    if entry.get("category") == COMMUNICATION:
        return template_collective_cost(str(entry.get("kernel_name", "")), call)
    return cost_of(call)


def _labelled_by(label: dict[str, Any]) -> str:
    """Where an unlabelled entry's op came from: `fill_catalog`'s provenance, in one cell."""
    return f"classifier: {label.get('rule')} ({label.get('evidence')}, {label.get('confidence')})"


def catalog_costs(entries: list[dict[str, Any]], device: Device | None) -> pd.DataFrame:
    """One row per entry: FLOPs and bytes of one call at the example shapes, the formula, and
    the roofline-attainable time on `device` (or the reason there is no cost).

    Each entry is costed by its op as `atlas classify` fills it (`fill_catalog`, the same rules
    and catalog lookups): a seed entry whose `op_mapping` is TBD or empty, or that has no
    `category`, had been costed by that — "no cost model for sgl_kernel::rmsnorm" on a kernel the
    classifier labels `rms_norm` (27 of the seed's 167, campaign BM 1). A given taxonomy label is
    kept, and its category is its op's. Where some entry's op came from the classifier, the
    `labelled_by` column says so on every row ("catalog" for a given label)."""
    rows = []
    classified = False
    for entry, filled in zip(entries, fill_catalog(entries), strict=True):
        row: dict[str, Any] = {
            "kernel_name": entry.get("kernel_name", ""),
            "kernel_implementation": entry.get("kernel_implementation", ""),
            "op_mapping": filled["op_mapping"],
            "category": filled["category"],
        }
        if unlabelled(entry.get("op_mapping")):
            row["labelled_by"] = _labelled_by(filled["label"])
            classified = True
        try:
            cost = _entry_cost(filled)
        except (NoCost, ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
            rows.append({**row, "note": str(exc) or type(exc).__name__})
            continue
        row.update(
            flops=cost.flops, bytes=cost.bytes, precision=cost.precision, unit=cost.unit, formula=cost.formula, note=""
        )
        transfer = device.transfer_peak(cost.unit) if device is not None else None
        if transfer is not None:  # a collective's bus bytes cross the GPU link (as a trace's rows)
            gbps, label = transfer
            row.update(peak_gbps=gbps, peak_label=label, bound=TRANSFER_BOUNDS[cost.unit])
            row["attainable_us"] = cost.bytes / (gbps * 1e3)
        elif device is not None:
            peak = device.peak(cost.precision, cost.unit)
            compute_us = cost.flops / (peak.tflops * 1e6) if peak.tflops else 0.0
            memory_us = cost.bytes / (device.memory_gbps * 1e3)
            row.update(
                peak_tflops=peak.tflops,
                peak_label=peak.label,
                peak_gbps=device.memory_gbps,
                attainable_us=max(compute_us, memory_us),
                bound="compute" if compute_us > memory_us else "memory",
            )
        rows.append(row)
    table = pd.DataFrame(rows)
    if classified:  # a catalog of given labels (catalogs/kernels.json) keeps the columns it had
        table.insert(3, "labelled_by", table.pop("labelled_by").fillna("catalog"))  # beside op_mapping
    if "flops" in table:
        table["intensity"] = table["flops"] / table["bytes"].where(table["bytes"] > 0)
    else:
        table["flops"] = np.nan
    return table
