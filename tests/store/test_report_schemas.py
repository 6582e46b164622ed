"""Every Parquet table `atlas report` writes has one schema whatever the run's data: a run with
costs and graph candidates and one with neither (mi210_gpu_only: nothing costed, no launch, no
candidate) read together by DuckDB and pandas, as the campaign of stop 58 could not."""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.report.build import build_report
from kernel_atlas.store.report_schemas import DICT, STRING, TABLE_TYPES, typed
from tests.support.traces import ingested

STEMS = ("h100_bert_small_infer", "mi210_gpu_only")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list:
    folders = []
    for stem in STEMS:
        folder = tmp_path_factory.mktemp(stem)
        write_outputs(ingested(stem), folder)
        build_report(folder)
        folders.append(folder)
    return folders


# memory.parquet is written only for traces with memory events, replay.parquet by `atlas replay`
@pytest.mark.parametrize("name", sorted(set(TABLE_TYPES) - {"memory.parquet", "replay.parquet"}))
def test_each_report_table_has_its_declared_schema_in_every_run(runs, name: str) -> None:
    schemas = [pq.read_schema(folder / name) for folder in runs]
    for schema in schemas:
        assert {field.name: field.type for field in schema} == TABLE_TYPES[name]
    # read together: DuckDB's default (by position) and pandas
    files = [str(folder / name) for folder in runs]
    [(rows,)] = duckdb.sql(f"select count(*) from read_parquet({files})").fetchall()
    assert rows == sum(pq.read_metadata(f).num_rows for f in files)
    assert len(pd.read_parquet(files)) == rows


def test_the_run_without_costs_writes_typed_empty_columns(runs) -> None:
    mi210 = runs[1]
    candidates = pq.read_table(mi210 / "graph_candidates.parquet")
    # the graph candidates of a run without launches: none, yet typed (were `null`, or `double` for call_stack)
    assert candidates.schema.field("saving_us").type == pa.float64()
    assert candidates.schema.field("call_stack").type == STRING
    roofline = pq.read_table(mi210 / "roofline.parquet")
    assert roofline.schema.field("bound").type == STRING  # nothing costed: all null, was `null`
    assert roofline.schema.field("call_stack").type == DICT  # int32 indices whatever the count of values


def test_typed_refuses_numbers_where_text_is_declared() -> None:
    table = pa.table({"seq": [1], "kind": [2.5]})
    with pytest.raises(ValueError, match="holds numbers where text is declared"):
        typed(table, "critical_path.parquet")
    # NaN alone (pandas' empty object column) is nulls
    nan = typed(pa.table({"seq": [1], "kind": [float("nan")]}), "critical_path.parquet")
    assert nan.column("kind").null_count == 1 and nan.schema.field("kind").type == DICT
    # an undeclared table: dictionaries get int32 indices, texts `string`, null columns text
    other = pa.table(
        {
            "a": pa.array(["x", "y"]).dictionary_encode(),
            "b": pa.array(["u", "v"], pa.large_string()),
            "c": pa.nulls(2),
        }
    )
    assert [f.type for f in typed(other, "undeclared.parquet").schema] == [DICT, STRING, STRING]
