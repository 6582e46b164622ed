"""Costs of catalog entries from their example shapes (`params`), against a device's roofline."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.classifier import default_classifier
from kernel_atlas.classify.taxonomy import COMMUNICATION
from kernel_atlas.core.devices import TRANSFER_BOUNDS, Device
from kernel_atlas.ingest.recorded import TENSOR, from_params
from kernel_atlas.roofline.analysis import template_collective_cost
from kernel_atlas.roofline.costs import Call, Cost, NoCost, cost_of


def entry_call(entry: dict[str, Any]) -> Call:
    """A catalog entry as a call: its example params, its op_mapping, and the rule that
    identifies its kernel family (from the classifier, the one reader of kernel names)."""
    args = from_params(entry.get("params", []))
    rule = (
        default_classifier()
        .classify(entry.get("kernel_name", ""), entry.get("kernel_implementation"), entry.get("call_stack"))
        .rule
    )
    list_dtype = next((a.dtype for a in args if a.kind == TENSOR), None)
    return Call(entry.get("kernel_implementation", ""), entry.get("op_mapping", ""), args, rule, list_dtype)


def _entry_cost(entry: dict[str, Any]) -> Cost:
    """One call's cost at the entry's example shapes: a collective's bus bytes from its tensors
    and the group size its kernel's template names (no trace, so no world size to assume one
    from), any other op's from its op's formula."""
    call = entry_call(entry)
    if entry.get("category") == COMMUNICATION:
        return template_collective_cost(str(entry.get("kernel_name", "")), call)
    return cost_of(call)


def catalog_costs(entries: list[dict[str, Any]], device: Device | None) -> pd.DataFrame:
    """One row per entry: FLOPs and bytes of one call at the example shapes, the formula, and
    the roofline-attainable time on `device` (or the reason there is no cost)."""
    rows = []
    for entry in entries:
        row: dict[str, Any] = {
            "kernel_name": entry.get("kernel_name", ""),
            "kernel_implementation": entry.get("kernel_implementation", ""),
            "op_mapping": entry.get("op_mapping", ""),
            "category": entry.get("category", ""),
        }
        try:
            cost = _entry_cost(entry)
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
    if "flops" in table:
        table["intensity"] = table["flops"] / table["bytes"].where(table["bytes"] > 0)
    else:
        table["flops"] = np.nan
    return table
