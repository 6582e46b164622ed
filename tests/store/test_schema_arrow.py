"""`store.schema.to_arrow`: a kernels frame as the declared schema — each kind of missing value
null, each column of its declared type, nothing else carried (no pandas metadata in the files)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from kernel_atlas.store.schema import KERNEL_COLUMNS, KERNEL_SCHEMA, to_arrow


def _frame() -> pd.DataFrame:
    """Two rows; every column missing in the second but `trace`, `rank`, `name`, `kind`, `ts_us`
    and `dur_us`, each column of the dtype ingest gives it (categoricals of int8 codes, nullable
    integers, floats with NaN, object texts with None)."""
    frame = pd.DataFrame(index=range(2))
    for name, kind in KERNEL_COLUMNS.items():
        if pa.types.is_dictionary(kind):
            frame[name] = pd.Categorical([f"{name}-0", None])
        elif pa.types.is_floating(kind):
            frame[name] = [1.5, np.nan]
        elif pa.types.is_boolean(kind):
            frame[name] = [True, False]
        else:
            frame[name] = pd.array([7, None], dtype="Int64")
    frame["trace"] = pd.Categorical(["t", "t"])
    frame["rank"] = np.array([3, 3], dtype=np.int32)
    frame["name"] = pd.Categorical(["gemm", "memcpy HtoD"])
    frame["kind"] = pd.Categorical(["kernel", "memcpy"])
    frame["ts_us"] = [10.0, 20.0]
    frame["dur_us"] = [2.0, 0.5]
    return frame


def test_a_frame_becomes_the_declared_schema_with_nulls_for_what_is_missing() -> None:
    table = to_arrow(_frame())
    assert table.schema.equals(KERNEL_SCHEMA, check_metadata=True) and table.schema.metadata is None
    rows = table.to_pylist()
    assert rows[0]["trace"] == "t" and rows[1]["trace"] == "t"
    assert [r["rank"] for r in rows] == [3, 3]
    assert [r["name"] for r in rows] == ["gemm", "memcpy HtoD"]
    assert [r["ts_us"] for r in rows] == [10.0, 20.0] and [r["dur_us"] for r in rows] == [2.0, 0.5]
    assert rows[0]["launcher"] == "launcher-0" and rows[1]["launcher"] is None  # a missing category
    assert rows[0]["launch_ts_us"] == 1.5 and rows[1]["launch_ts_us"] is None  # NaN
    assert rows[0]["step"] == 7 and rows[1]["step"] is None  # pd.NA
    assert rows[0]["device"] == 7 and table.column("device").type == pa.int32()
    assert rows[0]["graph_launch"] is True and rows[1]["graph_launch"] is False
    # the dictionary columns' indices int32, as every rank file of a dataset must agree
    assert table.column("name").type == pa.dictionary(pa.int32(), pa.string())


def test_an_empty_frame_is_the_empty_table() -> None:
    assert to_arrow(pd.DataFrame()).equals(KERNEL_SCHEMA.empty_table())
