"""The values every reader of the kernels table relies on: `atlas ingest` writes them so and
`open_output` checks them (no heavy imports: the decode workers read it too)."""

from __future__ import annotations

import json
from typing import Any

# Times beyond 2^53 µs (285 years) are not times: float64 loses the microsecond, and sums of such
# durations overflow to inf (numpy RuntimeWarnings, shares of NaN). Unusable, counted.
MAX_TIME_US = float(2**53)
# The finest time a trace records: Kineto writes µs with three decimals, Nsight Systems ns. A
# positive duration below it is no measurement: no rate is worked out from it (a kernel of
# 5e-324 µs had an infinite SOL; of 1e-300 µs, one of 300 digits).
CLOCK_RESOLUTION_US = 0.001


def within_time_bound(ts: Any, dur: Any) -> Any:
    """Whether a range's start, duration and end all lie within MAX_TIME_US (NaN and inf do not):
    for numbers or numpy arrays alike. An end past the bound with start and duration inside it
    made ingest write a run every reader refused."""
    return (abs(ts) < MAX_TIME_US) & (abs(dur) < MAX_TIME_US) & (abs(ts + dur) < MAX_TIME_US)


# What a launching op recorded about its inputs: JSON lists, one entry per input.
RECORDED_CALL = ("input_dims", "input_types", "input_strides", "concrete_inputs")
MAX_DEPTH = 16  # recorded calls nest 2-3 deep (a list of inputs, of sizes, of a tensor list)
# Integer ids that travel through float64 columns (idle per stream, with nulls): exact below 2^53,
# beyond it they come back as other numbers (or overflow int64). No stream id is that large.
FLOAT_EXACT = ("stream",)


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON `text` nests deeper than `limit` (measured without recursion; text that
    is not JSON is not deep). Readers parse recorded calls recursively: 5,000 levels would
    end in RecursionError far from here."""
    if text.count("[") + text.count("{") <= limit:
        return False
    try:
        value = json.loads(text)
    except RecursionError:
        return True
    except ValueError:
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            if depth > limit:
                return True
            stack += [(item, depth + 1) for item in (node.values() if isinstance(node, dict) else node)]
    return False
