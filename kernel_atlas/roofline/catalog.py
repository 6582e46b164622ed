"""Costs of catalog entries from their example shapes (`params`), against a device's roofline."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.roofline.costs import Call, NoCost, cost_of
from kernel_atlas.roofline.devices import Device
from kernel_atlas.roofline.shapes import parse_args


def entry_call(entry: dict[str, Any]) -> Call:
    params = entry.get("params", [])
    dims = [p["example_dim"] if isinstance(p.get("example_dim"), list) else [] for p in params]
    types = [p.get("example_dtype") or "" for p in params]
    values = [str(p["example_value"]) if "example_value" in p else "" for p in params]
    return Call(
        entry.get("kernel_implementation", ""),
        entry.get("op_mapping", ""),
        parse_args(json.dumps(dims), json.dumps(types), json.dumps(values)),
        entry.get("kernel_name", ""),
    )


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
            cost = cost_of(entry_call(entry))
        except (NoCost, ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
            rows.append({**row, "note": str(exc) or type(exc).__name__})
            continue
        row.update(
            flops=cost.flops, bytes=cost.bytes, precision=cost.precision, unit=cost.unit, formula=cost.formula, note=""
        )
        if device is not None:
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
