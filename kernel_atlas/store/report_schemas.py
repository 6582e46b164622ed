"""The Arrow type of every column of the Parquet tables `atlas report` writes, whatever a run's
data: an empty table, a column of nothing but nulls, a text column that held only NaN, or a
categorical of 200 values would otherwise each take the type pandas gives that data (`null`,
`double`, `dictionary<int8>` or `<int16>`), and reading two runs' tables together (DuckDB's
`read_parquet([...])`, `pd.read_parquet([...])`, a pyarrow dataset) failed or silently lost
rows. `typed` casts a table to its declared types, adds declared columns it lacks as nulls, and
gives every other dictionary int32 indices and every text `string`."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

INT32, INT64, DOUBLE, STRING, BOOL = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()
DICT = pa.dictionary(pa.int32(), pa.string())

# idle time per stream and category, in the exact conventions and HTA's
_IDLE = {
    "rank": INT32,
    "device": INT32,
    "stream": INT64,
    "category": STRING,
    "idle_us": DOUBLE,
    "count": INT64,
    "pct": DOUBLE,
}

TABLE_TYPES: dict[str, dict[str, pa.DataType]] = {
    "critical_path.parquet": {
        "seq": INT64,
        "kind": DICT,
        "bound": DICT,
        "start_us": DOUBLE,
        "dur_us": DOUBLE,
        "name": DICT,
        "op": DICT,
        "kernel": DICT,
        "category": DICT,
        "module": DICT,
        "frame": DICT,
        "rank": INT64,
        "stream": INT64,
        "thread": INT64,
        "event_ts_us": DOUBLE,
    },
    "graph_candidates.parquet": {
        "rank": INT32,
        "device": INT32,
        "stream": INT64,
        "frame": STRING,
        "module": STRING,
        "saving_us": DOUBLE,
        "host_wait_us": DOUBLE,
        "kernel_wait_us": DOUBLE,
        "stretches": INT64,
        "kernels": INT64,
        "kernels_per_stretch": DOUBLE,
        "gpu_us": DOUBLE,
        "first_ts_us": DOUBLE,
        "first_kernel": STRING,
        "call_stack": STRING,
        "device_idle_us": DOUBLE,
    },
    "idle.parquet": _IDLE,
    "idle_causes.parquet": {
        "rank": INT32,
        "device": INT32,
        "frame": STRING,
        "module": STRING,
        "gaps": INT64,
        "idle_us": DOUBLE,
        "pct": DOUBLE,
    },
    "idle_hta.parquet": _IDLE,  # the same breakdown in HTA's conventions
    "launch_stats.parquet": {
        "level": STRING,
        "key": STRING,
        "count": INT64,
        "launch_us": DOUBLE,
        "launch_mean_us": DOUBLE,
        "delay_mean_us": DOUBLE,
        "delay_p50_us": DOUBLE,
        "delay_max_us": DOUBLE,
        "delays": INT64,
        "gpu_us": DOUBLE,
        "gpu_mean_us": DOUBLE,
        "launch_bound_pct": DOUBLE,
    },
    "memory.parquet": {
        "trace": DICT,
        "rank": INT64,
        "device": DICT,
        "addr": INT64,
        "bytes": INT64,
        "alloc_ts_us": DOUBLE,
        "free_ts_us": DOUBLE,
        "op": DICT,
        "module": DICT,
        "call_stack": DICT,
        "step": INT64,
        "alloc_event": INT64,
        "free_event": INT64,
    },
    "roofline.parquet": {
        "name": STRING,
        "launcher": STRING,
        "op_mapping": STRING,
        "category": STRING,
        "input_dims": STRING,
        "input_types": STRING,
        "role": STRING,
        "count": INT64,
        "total_us": DOUBLE,
        "op_time_us": DOUBLE,
        "mean_us": DOUBLE,
        "flops": DOUBLE,
        "bytes": DOUBLE,
        "intensity": DOUBLE,
        "precision": STRING,
        "peak_label": STRING,
        "achieved_tflops": DOUBLE,
        "achieved_gbps": DOUBLE,
        "peak_tflops": DOUBLE,
        "peak_gbps": DOUBLE,
        "attainable_us": DOUBLE,
        "sol_pct": DOUBLE,
        "bound": STRING,
        "headroom_us": DOUBLE,
        "note": STRING,
        "formula": STRING,
        "formulas": INT64,
        "estimate": BOOL,
        "call_stack": DICT,
        "est_occupancy_pct": DOUBLE,
        "waves": DOUBLE,
        "wave_efficiency_pct": DOUBLE,
        "tensor_core_pct": DOUBLE,
        "likely_cause": STRING,
        "peer_wait_us": DOUBLE,
        # joined from replay.parquet by `atlas report` (report/build.py:merge_replay); null without one
        "replay_us": DOUBLE,
        "replay_device": STRING,
        "replay_check": STRING,
        "replay_implementation": STRING,
        "replay_timed": STRING,
        "replay_ratio": DOUBLE,
        "replay_same_device": BOOL,
        "replay_note": STRING,
        "replay_tflops": DOUBLE,
        "replay_gbps": DOUBLE,
    },
    # `atlas replay --all` (replay/runner.py:Result): a CPU replay's `ratio` is null by design, and
    # was written as text where every row's was
    "replay.parquet": {
        "kernel": STRING,
        "launcher": STRING,
        "cpu_op": STRING,
        "kernels": STRING,
        "op_mapping": STRING,
        "category": STRING,
        "input_dims": STRING,
        "input_types": STRING,
        "input_strides": STRING,
        "concrete_inputs": STRING,
        "implementation": STRING,
        "timed": STRING,
        "config": STRING,
        "scale": DOUBLE,
        "device": STRING,
        "device_name": STRING,
        "method": STRING,
        "median_us": DOUBLE,
        "p10_us": DOUBLE,
        "p90_us": DOUBLE,
        "reps": INT64,
        "traced_us": DOUBLE,
        "ratio": DOUBLE,
        "flops": DOUBLE,
        "bytes": DOUBLE,
        "achieved_tflops": DOUBLE,
        "achieved_gbps": DOUBLE,
        "check": STRING,
        "reason": STRING,
        "count": INT64,
    },
    "steps.parquet": {
        "trace": STRING,
        "rank": INT64,
        "step": INT64,
        "device": INT64,
        "start_us": DOUBLE,
        "end_us": DOUBLE,
        "total_us": DOUBLE,
        "kernel_us": DOUBLE,
        "memcpy_us": DOUBLE,
        "memset_us": DOUBLE,
        "communication_us": DOUBLE,
        "runtime_us": DOUBLE,
        "dataloader_us": DOUBLE,
        "cpu_exec_us": DOUBLE,
        "other_us": DOUBLE,
        "kernel_us_launched": DOUBLE,
        "gpu_utilization_pct": DOUBLE,
        "sm_efficiency_pct": DOUBLE,
        "achieved_occupancy_pct": DOUBLE,
        "tensor_core_time_pct": DOUBLE,
    },
}


def typed(table: pa.Table, name: str) -> pa.Table:
    """`table` with the declared types of the report table `name` (`TABLE_TYPES`; its declared
    columns it lacks added as nulls, at the end), every other dictionary column's indices int32
    and every other text `string`. A column declared as text that holds only NaN (pandas' empty
    object column) becomes nulls; any other value that does not fit its type is an error."""
    declared = TABLE_TYPES.get(name, {})
    columns, fields = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        want = declared.get(field.name) or _usual(field.type)
        columns.append(_cast(column, want, field.name, name))
        fields.append(pa.field(field.name, want))
    for column_name, want in declared.items():
        if column_name not in table.column_names:
            columns.append(pa.nulls(len(table), want))
            fields.append(pa.field(column_name, want))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


def _usual(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(kind):
        return DICT
    if pa.types.is_large_string(kind) or pa.types.is_null(kind):
        return STRING  # an undeclared column of nothing but nulls: text, as most are
    return kind


def _cast(column: pa.ChunkedArray, want: pa.DataType, column_name: str, name: str) -> pa.ChunkedArray:
    if column.type == want:
        return column
    is_text = pa.types.is_string(want) or pa.types.is_dictionary(want)
    if is_text and (pa.types.is_floating(column.type) or pa.types.is_null(column.type)):
        if column.null_count != len(column) and not pc.all(pc.is_nan(column)).as_py():
            raise ValueError(f"{name}: column {column_name} holds numbers where text is declared")
        return pa.chunked_array([pa.nulls(len(column), want)]) if len(column) else pa.chunked_array([], want)
    if pa.types.is_dictionary(column.type) and pa.types.is_dictionary(want):
        return pc.cast(column, want)
    if pa.types.is_dictionary(column.type):  # a categorical declared plain
        column = pc.cast(column, column.type.value_type)
    return pc.cast(column, want)
