"""The kernels table assembled from linked columns (its schema: `store/schema.py`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from kernel_atlas.classify.taxonomy import OTHER_CATEGORY, UNKNOWN_OP
from kernel_atlas.ingest.columns import TraceColumns
from kernel_atlas.ingest.link import LinkedColumns
from kernel_atlas.store.schema import KERNEL_COLUMNS

_CATEGORICAL = [name for name, kind in KERNEL_COLUMNS.items() if pa.types.is_dictionary(kind)]


def _nullable_int(values: np.ndarray) -> pd.arrays.IntegerArray:
    """-1 (our "missing") → <NA>."""
    return pd.arrays.IntegerArray(values.astype(np.int64), mask=values < 0)


def _optional_int(values: np.ndarray | None, n: int) -> pd.arrays.IntegerArray:
    """A column some readers fill (None: all <NA>)."""
    return _nullable_int(np.full(n, -1, dtype=np.int64) if values is None else values)


def _optional_float(values: np.ndarray | None, n: int) -> np.ndarray:
    """A float column some readers fill (None: all NaN)."""
    return np.full(n, np.nan) if values is None else values


def _constant(value: str | None, n: int) -> pd.Categorical:
    if value is None or n == 0:
        return pd.Categorical([value] * n)
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=pd.Index([value]))


def assemble(trace_name: str, rank: int, cols: TraceColumns, linked: LinkedColumns) -> pd.DataFrame:
    """One row per GPU activity, in trace order; labels are left for `classify`."""
    gpu = cols.gpu
    n = len(gpu)
    frame = pd.DataFrame(
        {
            "trace": _constant(trace_name, n),
            "rank": np.full(n, rank, dtype=np.int32),
            "name": gpu.name,
            "kind": gpu.kind,
            "ts_us": gpu.ts,
            "dur_us": gpu.dur,
            "device": _nullable_int(gpu.device),  # narrowed to its column by `sanity.usable_rows`
            "stream": _nullable_int(gpu.stream),
            "step": _nullable_int(linked.step),
            "correlation": _nullable_int(gpu.correlation),
            "external_id": _nullable_int(gpu.external_id),
            "launch": linked.launch,
            "launch_ts_us": linked.launch_ts,
            "graph_launch": linked.graph_launch,
            "launcher": linked.launcher,
            "cpu_op": linked.cpu_op,
            "link": linked.link,
            "call_stack": linked.call_stack,
            "module": linked.module,
            "input_dims": linked.input_dims,
            "input_types": linked.input_types,
            "input_strides": linked.input_strides,
            "concrete_inputs": linked.concrete_inputs,
            "grid": gpu.grid,
            "block": gpu.block,
            "bytes": _nullable_int(gpu.bytes),
            "collective": gpu.collective,
            "msg_in_nelems": _nullable_int(gpu.in_nelems),
            "msg_out_nelems": _nullable_int(gpu.out_nelems),
            "group_size": _nullable_int(np.where(gpu.group_size > 0, gpu.group_size, -1)),  # 0: no group
            "msg_dtype": gpu.msg_dtype,
            "process_group": gpu.process_group,
            "process_group_desc": gpu.process_group_desc,
            "process_group_ranks": gpu.process_group_ranks,
            "collective_seq": _nullable_int(gpu.seq),
            "cpu_op_id": _nullable_int(linked.cpu_op_id),
            "capture_correlation": _nullable_int(linked.capture_correlation),
            "shapes_inferred": linked.shapes_inferred,
            "op_mapping": _constant(UNKNOWN_OP, n),
            "category": _constant(OTHER_CATEGORY, n),
            "label_rule": _constant(None, n),
            "label_evidence": _constant(None, n),
            "label_confidence": np.zeros(n, dtype=np.float32),
            "step_annotation": linked.step_annotation if linked.step_annotation is not None else _constant(None, n),
            "enclosed_shapes": linked.enclosed_shapes if linked.enclosed_shapes is not None else _constant(None, n),
            "sequence_number": _optional_int(linked.sequence_number, n),
            "autograd_partner": linked.autograd_partner if linked.autograd_partner is not None else _constant(None, n),
            "registers_per_thread": _optional_int(gpu.registers, n).astype("Int32"),
            "shared_mem_bytes": _optional_int(gpu.shared_memory, n),
            "recorded_blocks_per_sm": _optional_float(gpu.blocks_per_sm, n),
            "recorded_occupancy_pct": _optional_float(gpu.occupancy, n),
            "graph_id": _optional_int(gpu.graph_id, n),
            "graph_node_id": _optional_int(gpu.graph_node_id, n),
        },
        copy=False,  # a column each: one consolidated block per dtype copied every numeric column once more
    )
    return as_categoricals(frame)


def as_categoricals(frame: pd.DataFrame) -> pd.DataFrame:
    for name in _CATEGORICAL:
        if name in frame and not isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name] = frame[name].astype("category")
    return frame
