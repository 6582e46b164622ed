"""Campaign BE, class 2: `atlas ingest` never writes a text longer than `events.MAX_TEXT` (16,384
characters: it cuts names, drops longer recorded JSON, cuts metadata far shorter). A run folder
holding a longer one was written by other means — a kernel name of 100 MB sent `atlas report` to
7.5 GB, `diff` to 1.7 GB and the MCP server to 1.26 GB — and is refused in one line where the run
is opened, naming the file and the column, for every table a reader opens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.hostile import assert_one_line_error, cli
from tests.support.traces import EXAMPLE

LONG = 20_000  # characters: past ingest's 16,384


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example trace ingested and reported (roofline.parquet written)."""
    out = tmp_path_factory.mktemp("long_texts") / "base.atlas"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    assert cli("report", out).code == 0
    return out


def _copy(base: Path, tmp_path: Path, name: str = "run.atlas") -> Path:
    out = tmp_path / name
    shutil.copytree(base, out)
    return out


def _set_first(path: Path, column: str, text: str) -> None:
    """`column`'s first row of the Parquet file at `path` set to `text`, its type (dictionary
    encoding included) and the file's metadata (the run id) kept, as a careful doctor would."""
    table = pq.read_table(path)
    kind = table.schema.field(column).type
    values = table.column(column).to_pylist()
    values[0] = text
    plain = kind.value_type if pa.types.is_dictionary(kind) else kind
    array = pa.array(values, plain)
    array = array.dictionary_encode().cast(kind) if pa.types.is_dictionary(kind) else array
    table = table.set_column(table.schema.get_field_index(column), column, array)
    pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)


def _first_file(out: Path, table: str) -> Path:
    return next((out / table).rglob("*.parquet"))


def test_a_kernel_name_longer_than_ingest_writes_is_one_line_for_every_reader(reported: Path, tmp_path: Path) -> None:
    """report, diff, whatif and an MCP tool refuse a 20,000-character name in one line (exit 2),
    naming the file and the column; the 16,384 characters ingest cuts a name to still open."""
    from kernel_atlas.core.errors import AtlasError
    from kernel_atlas.mcp_server import Tools

    kept = _copy(reported, tmp_path, "kept.atlas")
    _set_first(_first_file(kept, "kernels.parquet"), "name", "void k_" + "x" * (16_384 - 7))
    assert cli("report", kept).code == 0

    out = _copy(reported, tmp_path)
    file = _first_file(out, "kernels.parquet")
    _set_first(file, "name", "void huge_" + "H" * (LONG - 10))
    said = f"column name holds a value of {LONG:,} characters, longer than any `atlas ingest` writes (16,384)"
    for command in (
        ("report", out),
        ("diff", reported, out, "-o", tmp_path / "d.csv"),
        ("whatif", out, "--speedup", "kernel=.*:2x"),
    ):
        assert_one_line_error(cli(*command), str(file), said)
    with pytest.raises(AtlasError, match="longer than any `atlas ingest` writes"):
        Tools(tmp_path).summary(run="run.atlas")


@pytest.mark.parametrize(
    ("table", "column"),
    [("kernels.parquet", "launcher"), ("host_events.parquet", "name"), ("memory_events.parquet", "trace")],
)
def test_a_long_text_in_any_table_ingest_writes_is_refused(
    reported: Path, tmp_path: Path, table: str, column: str
) -> None:
    """Any text column, plain or dictionary-encoded, of the kernels, host and memory events."""
    out = _copy(reported, tmp_path)
    path = _first_file(out, table)
    if column not in pq.read_schema(path).names:
        pytest.skip(f"{table} has no column {column}")
    _set_first(path, column, "y" * LONG)
    assert_one_line_error(cli("report", out), str(path), f"column {column} holds a value of {LONG:,} characters")


def test_a_long_text_in_the_roofline_is_refused_by_whatif(reported: Path, tmp_path: Path) -> None:
    out = _copy(reported, tmp_path)
    path = out / "roofline.parquet"
    _set_first(path, "name", "z" * LONG)
    assert_one_line_error(
        cli("whatif", out, "--speedup", "kernel=.*:2x"), str(path), f"column name holds a value of {LONG:,} characters"
    )


def test_a_long_text_in_the_summary_is_refused(reported: Path, tmp_path: Path) -> None:
    """Every MCP call reads summary.json again: a 150 MB text in it made 8 calls take 60 s."""
    out = _copy(reported, tmp_path)
    summary = json.loads((out / "summary.json").read_text())
    summary["traces"][0]["note"] = "n" * LONG
    (out / "summary.json").write_text(json.dumps(summary))
    assert_one_line_error(
        cli("report", out), str(out / "summary.json"), f"a text of {LONG:,} characters, longer than any"
    )
