"""The kernels table: its declared schema and its assembly from linked columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from kernel_atlas.ingest.columns import TraceColumns
from kernel_atlas.ingest.link import LinkedColumns

# Every column of kernels.parquet, written down once (README documents each).
KERNEL_COLUMNS: dict[str, pa.DataType] = {
    "trace": pa.dictionary(pa.int32(), pa.string()),
    "rank": pa.int32(),
    "name": pa.dictionary(pa.int32(), pa.string()),
    "kind": pa.dictionary(pa.int8(), pa.string()),
    "ts_us": pa.float64(),
    "dur_us": pa.float64(),
    "device": pa.int32(),
    "stream": pa.int64(),
    "step": pa.int64(),
    "correlation": pa.int64(),
    "external_id": pa.int64(),
    "launch": pa.dictionary(pa.int32(), pa.string()),
    "launch_ts_us": pa.float64(),
    "graph_launch": pa.bool_(),
    "launcher": pa.dictionary(pa.int32(), pa.string()),
    "cpu_op": pa.dictionary(pa.int32(), pa.string()),
    "link": pa.dictionary(pa.int8(), pa.string()),
    "call_stack": pa.dictionary(pa.int32(), pa.string()),
    "module": pa.dictionary(pa.int32(), pa.string()),
    "input_dims": pa.dictionary(pa.int32(), pa.string()),
    "input_types": pa.dictionary(pa.int32(), pa.string()),
    "input_strides": pa.dictionary(pa.int32(), pa.string()),
    "concrete_inputs": pa.dictionary(pa.int32(), pa.string()),
    "grid": pa.dictionary(pa.int32(), pa.string()),
    "block": pa.dictionary(pa.int32(), pa.string()),
    "bytes": pa.int64(),
    "collective": pa.dictionary(pa.int8(), pa.string()),
    "msg_in_nelems": pa.int64(),
    "msg_out_nelems": pa.int64(),
    "group_size": pa.int32(),
    "msg_dtype": pa.dictionary(pa.int8(), pa.string()),
    "process_group": pa.dictionary(pa.int32(), pa.string()),
    "process_group_desc": pa.dictionary(pa.int32(), pa.string()),
    "process_group_ranks": pa.dictionary(pa.int32(), pa.string()),
    "collective_seq": pa.int64(),
    "cpu_op_id": pa.int64(),
    "capture_correlation": pa.int64(),
    "shapes_inferred": pa.bool_(),
    "op_mapping": pa.dictionary(pa.int32(), pa.string()),
    "category": pa.dictionary(pa.int32(), pa.string()),
    "label_rule": pa.dictionary(pa.int32(), pa.string()),
    "label_evidence": pa.dictionary(pa.int8(), pa.string()),
    "label_confidence": pa.float32(),
    # host activity around the launch (`host_activity.py`)
    "launch_dur_us": pa.float64(),
    "launch_thread": pa.int32(),
    "wait_frame": pa.dictionary(pa.int32(), pa.string()),
    "wait_module": pa.dictionary(pa.int32(), pa.string()),
    # the serving engine's per-step annotation enclosing the launch, with its sequence lengths
    "step_annotation": pa.dictionary(pa.int32(), pa.string()),
    # a composite MoE op's enclosed 3-D tensors and top-k (ingest/composite.py), as JSON
    "enclosed_shapes": pa.dictionary(pa.int32(), pa.string()),
}
KERNEL_SCHEMA = pa.schema([pa.field(name, kind) for name, kind in KERNEL_COLUMNS.items()])

_CATEGORICAL = [name for name, kind in KERNEL_COLUMNS.items() if pa.types.is_dictionary(kind)]


def _nullable_int(values: np.ndarray) -> pd.arrays.IntegerArray:
    """-1 (our "missing") → <NA>."""
    return pd.arrays.IntegerArray(values.astype(np.int64), mask=values < 0)


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
            "group_size": _nullable_int(gpu.group_size),  # likewise
            "msg_dtype": gpu.msg_dtype,
            "process_group": gpu.process_group,
            "process_group_desc": gpu.process_group_desc,
            "process_group_ranks": gpu.process_group_ranks,
            "collective_seq": _nullable_int(gpu.seq),
            "cpu_op_id": _nullable_int(linked.cpu_op_id),
            "capture_correlation": _nullable_int(linked.capture_correlation),
            "shapes_inferred": linked.shapes_inferred,
            "op_mapping": _constant("unknown", n),
            "category": _constant("other", n),
            "label_rule": _constant(None, n),
            "label_evidence": _constant(None, n),
            "label_confidence": np.zeros(n, dtype=np.float32),
            "step_annotation": linked.step_annotation if linked.step_annotation is not None else _constant(None, n),
            "enclosed_shapes": linked.enclosed_shapes if linked.enclosed_shapes is not None else _constant(None, n),
        }
    )
    return as_categoricals(frame)


def as_categoricals(frame: pd.DataFrame) -> pd.DataFrame:
    for name in _CATEGORICAL:
        if name in frame and not isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name] = frame[name].astype("category")
    return frame


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    if frame.empty:
        return KERNEL_SCHEMA.empty_table()
    table = pa.Table.from_pandas(frame[list(KERNEL_COLUMNS)], preserve_index=False)
    return table.cast(KERNEL_SCHEMA) if table.schema != KERNEL_SCHEMA else table
