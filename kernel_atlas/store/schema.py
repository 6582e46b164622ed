"""The kernels table's declared schema: every column of kernels.parquet, and a frame as an Arrow table of it."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

# Every column of kernels.parquet, written down once (docs/outputs.md documents each).
KERNEL_COLUMNS: dict[str, pa.DataType] = {
    "trace": pa.dictionary(pa.int32(), pa.string()),
    "rank": pa.int32(),
    "name": pa.dictionary(pa.int32(), pa.string()),
    "kind": pa.dictionary(pa.int32(), pa.string()),
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
    "link": pa.dictionary(pa.int32(), pa.string()),
    "call_stack": pa.dictionary(pa.int32(), pa.string()),
    "module": pa.dictionary(pa.int32(), pa.string()),
    "input_dims": pa.dictionary(pa.int32(), pa.string()),
    "input_types": pa.dictionary(pa.int32(), pa.string()),
    "input_strides": pa.dictionary(pa.int32(), pa.string()),
    "concrete_inputs": pa.dictionary(pa.int32(), pa.string()),
    "grid": pa.dictionary(pa.int32(), pa.string()),
    "block": pa.dictionary(pa.int32(), pa.string()),
    "bytes": pa.int64(),
    "collective": pa.dictionary(pa.int32(), pa.string()),
    "msg_in_nelems": pa.int64(),
    "msg_out_nelems": pa.int64(),
    "group_size": pa.int32(),
    "msg_dtype": pa.dictionary(pa.int32(), pa.string()),
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
    "label_evidence": pa.dictionary(pa.int32(), pa.string()),
    "label_confidence": pa.float32(),
    # host activity around the launch (`host_activity.py`)
    "launch_dur_us": pa.float64(),
    "launch_thread": pa.int32(),
    "wait_frame": pa.dictionary(pa.int32(), pa.string()),
    "wait_module": pa.dictionary(pa.int32(), pa.string()),
    # the serving engine's per-step annotation enclosing the launch, with its sequence lengths (else its
    # native one, which counts tokens only: ingest/steps.py)
    "step_annotation": pa.dictionary(pa.int32(), pa.string()),
    # a composite MoE op's enclosed 3-D tensors, top-k, allocated buffers and what its kernels name
    # (ingest/composite.py), as JSON
    "enclosed_shapes": pa.dictionary(pa.int32(), pa.string()),
    # autograd's sequence number of the launch's backward node or forward op, and the other one of the
    # pair (its name, sequence number and recorded shapes, as JSON; ingest/autograd.py)
    "sequence_number": pa.int64(),
    "autograd_partner": pa.dictionary(pa.int32(), pa.string()),
    # what the profiler recorded of a kernel's launch (null: not recorded; docs/efficiency.md, docs/nsys.md)
    "registers_per_thread": pa.int32(),
    "shared_mem_bytes": pa.int64(),
    "recorded_blocks_per_sm": pa.float64(),
    "recorded_occupancy_pct": pa.float64(),
    # how well the kernel fills the GPU (`ingest/efficiency.py`)
    "blocks_per_sm": pa.float64(),
    "warps_per_sm": pa.float64(),
    "max_blocks_per_sm": pa.float64(),
    "theoretical_occupancy_pct": pa.float64(),
    "est_occupancy_pct": pa.float64(),
    "occupancy_source": pa.dictionary(pa.int32(), pa.string()),
    "waves": pa.float64(),
    "wave_efficiency_pct": pa.float64(),
    "tensor_core": pa.bool_(),
    # CUDA-graph ids where the profiler records them (Nsight Systems, `nsys.py`)
    "graph_id": pa.int64(),
    "graph_node_id": pa.int64(),
}
KERNEL_SCHEMA = pa.schema([pa.field(name, kind) for name, kind in KERNEL_COLUMNS.items()])


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """The kernels table's columns of `frame` as KERNEL_SCHEMA: column by column, missing values
    (None, NaN, NA) null. `pa.Table.from_pandas` did the same with pandas' metadata besides,
    which the cast to the schema then dropped: 6 → 4 ms a tiny rank, 75 → 43 ms for 170k rows."""
    if frame.empty:
        return KERNEL_SCHEMA.empty_table()
    return pa.Table.from_arrays(
        [_column(frame[name], kind) for name, kind in KERNEL_COLUMNS.items()], schema=KERNEL_SCHEMA
    )


def _column(values: pd.Series, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    array = pa.array(values, from_pandas=True)
    return array if array.type == kind else array.cast(kind)
