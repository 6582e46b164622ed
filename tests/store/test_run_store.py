"""One writer and one reader of a run: `write_outputs` (what the tests use) writes the run that
`atlas ingest` writes, and `store.run.Run` reads it once for report, diff and the dashboard."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.run import Run
from tests.support.hostile import cli
from tests.support.traces import EXAMPLE

VOLATILE = {"run_id", "kernels_file", "file"}


def _stable(summary: dict) -> dict:
    traces = [{k: v for k, v in t.items() if k not in VOLATILE} for t in summary["traces"]]
    return {**{k: v for k, v in summary.items() if k not in VOLATILE}, "traces": traces}


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    done = cli("ingest", EXAMPLE, "-o", root / "cli.atlas", "-q")
    assert done.code == 0, done.stderr
    write_outputs(ingest_paths([EXAMPLE]), root / "lib.atlas")
    return root / "cli.atlas", root / "lib.atlas"


def test_the_library_writer_is_the_cli_writer(both: tuple[Path, Path]) -> None:
    by_cli, by_lib = (json.loads((out / "summary.json").read_text()) for out in both)
    assert set(by_lib) == set(by_cli)  # devices, by_kind, engine included
    assert {"devices", "by_kind", "engine"} <= set(by_lib) and by_lib["engine"] == "local"
    assert _stable(by_lib) == _stable(by_cli)
    assert [t["kernels_file"] for t in by_lib["traces"]] == [t["kernels_file"] for t in by_cli["traces"]]
    catalogs = [json.loads((out / "catalog.json").read_text()) for out in both]
    assert catalogs[0] == catalogs[1]


def test_run_reads_what_the_trace_says(both: tuple[Path, Path]) -> None:
    doc = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    events = doc["traceEvents"]
    kernels = sum(1 for e in events if e.get("cat") == "kernel")  # counted with plain json
    gpu = doc["deviceProperties"][0]
    run = Run.open(both[1])
    assert run.ranks == [0] and run.label == "lib"
    assert (run.gpu.name, run.gpu.sms) == (gpu["name"], gpu["numSms"])
    assert run.gpu_names == [gpu["name"]]
    one = run.kernels(0)
    assert int((one["kind"] == "kernel").sum()) == kernels
    assert len(run.kernels(1)) == 0  # no such rank: nothing, not everything
    assert run.replay() is None


def test_texts_are_dictionary_encoded_and_numbers_plain(tmp_path: Path) -> None:
    """Both writers of the store (`write_dataset_file` for ingest's tables, `write_table` for the
    report's) give Parquet dictionaries to texts and categoricals only; numbers, mostly distinct,
    are written plain; min/max statistics are kept for numbers only. The values read back
    unchanged."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kernel_atlas.store.outputs import write_dataset_file, write_table

    frame = pd.DataFrame(
        {
            "ts_us": np.arange(5000, dtype=np.float64) * 1.5,
            "name": ["gemm", "relu"] * 2500,
            "category": pd.Categorical(["gemm", "elementwise"] * 2500),
        }
    )
    write_dataset_file(pa.Table.from_pandas(frame, preserve_index=False), tmp_path, "t.parquet/rank=0/a.parquet")
    written = [tmp_path / "t.parquet/rank=0/a.parquet", write_table(frame, tmp_path / "r.parquet", None)]
    for path in written:
        meta = pq.ParquetFile(path).metadata.row_group(0)
        encodings = {meta.column(i).path_in_schema: set(meta.column(i).encodings) for i in range(meta.num_columns)}
        assert not any("DICTIONARY" in e for e in encodings["ts_us"]), encodings
        columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
        assert columns["ts_us"].is_stats_set and columns["ts_us"].statistics.has_min_max  # numbers: a range
        assert (columns["ts_us"].statistics.min, columns["ts_us"].statistics.max) == (0.0, 4999 * 1.5)
        assert not columns["name"].is_stats_set and not columns["category"].is_stats_set  # texts: none
        assert any("DICTIONARY" in e for e in encodings["name"]) and any(
            "DICTIONARY" in e for e in encodings["category"]
        )
        back = pd.read_parquet(path)
        assert back["ts_us"].tolist() == frame["ts_us"].tolist() and back["name"].tolist() == frame["name"].tolist()
        assert back["category"].astype(str).tolist() == frame["category"].astype(str).tolist()
