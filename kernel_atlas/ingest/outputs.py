"""The ingest output folder: its layout, its writers and its readers.

    OUT/
      kernels.parquet/                 the kernels table, a Hive-partitioned Parquet dataset
        rank=0/<trace-stem>.parquet    one file per trace; `rank` lives in the folder name
        rank=1/<trace-stem>.parquet
      catalog.json                     distinct kernels over all ranks
      summary.json                     per-trace facts and failures; written last

One layout for one rank and for thousands: pandas (`pd.read_parquet(OUT/kernels.parquet)`),
pyarrow.dataset, DuckDB (`kernels_sql`) and Spark read the dataset directly. Each rank's file
is written under a dotted temporary name and renamed when complete, so a reader (and a
partition scan) never sees half a file; `summary.json` is written after every rank is in
place. `OUT` may be an fsspec URL (`s3://…`, `gs://…`, `file://…`) for the writers.
A `kernels.parquet` that is a single file (the layout before partitioning) is still read.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kernel_atlas.errors import AtlasError
from kernel_atlas.ingest.table import KERNEL_COLUMNS, KERNEL_SCHEMA, to_arrow

KERNELS = "kernels.parquet"
CATALOG = "catalog.json"
SUMMARY = "summary.json"
PARTITION = "rank"
LAYOUT = {"kernels": KERNELS, "partitioning": "hive", "partition_by": [PARTITION]}  # recorded in summary.json
_RANK_DIR = re.compile(r"^rank=(-?\d+)$")


def is_url(target: str | Path) -> bool:
    return "://" in str(target)


def filesystem(target: str | Path) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of a path or URL, and the path within it."""
    return fsspec.core.url_to_fs(str(target))


def rank_file(rank: int, stem: str) -> str:
    """Where one trace's rows go, relative to the output folder."""
    return f"{KERNELS}/{PARTITION}={rank}/{stem}.parquet"


def reset_output(out: str | Path) -> None:
    """Remove an earlier run's kernels dataset and summary from `out` (its partitions would
    otherwise mix with the new run's); the folder itself is made by the first write."""
    fs, root = filesystem(out)
    if not fs.exists(root):
        return
    if not fs.isdir(root):
        raise AtlasError(out, "output exists and is not a folder")
    for name in (SUMMARY, KERNELS):
        path = f"{root}/{name}"
        if fs.exists(path):
            fs.rm(path, recursive=True)


def write_rank(frame: pd.DataFrame, out: str | Path, rank: int, stem: str) -> str:
    """Write one trace's rows (all of one rank) into the dataset; returns the relative path."""
    fs, root = filesystem(out)
    relative = rank_file(rank, stem)
    folder, name = f"{root}/{relative}".rsplit("/", 1)
    fs.makedirs(folder, exist_ok=True)
    table = to_arrow(frame)
    table = table.drop_columns([PARTITION]) if PARTITION in table.column_names else table
    partial = f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open(partial, "wb") as handle:
        pq.write_table(table, handle, compression="zstd")
    fs.mv(partial, f"{folder}/{name}")
    return relative


def write_json(out: str | Path, name: str, document: Any) -> str:
    fs, root = filesystem(out)
    path = f"{root}/{name}"
    with fs.open(path, "w") as handle:
        handle.write(json.dumps(document, indent=1) + "\n")
    return path


def kernels_path(out_dir: str | Path) -> Path:
    path = Path(out_dir) / KERNELS
    if not path.exists():
        raise AtlasError(out_dir, f"no {KERNELS} here: run `atlas ingest` first")
    return path


def rank_files(out_dir: str | Path) -> dict[int, list[Path]]:
    """The dataset's files by rank (an empty dict for the single-file layout)."""
    path = kernels_path(out_dir)
    if path.is_file():
        return {}
    files: dict[int, list[Path]] = {}
    for folder in sorted(path.iterdir()):
        match = _RANK_DIR.match(folder.name)
        if match and folder.is_dir():
            found = sorted(f for f in folder.glob("*.parquet") if not f.name.startswith((".", "_")))
            if found:
                files[int(match.group(1))] = found
    return files


def output_ranks(out_dir: str | Path) -> list[int]:
    """Ranks present in an ingest output, without reading the tables."""
    path = kernels_path(out_dir)
    if path.is_file():
        column = pq.read_table(path, columns=[PARTITION]).column(PARTITION)
        return sorted(int(r) for r in pc.unique(column).to_pylist())
    return sorted(rank_files(out_dir))


def _ordered(table: pa.Table) -> pa.Table:
    """Columns in the declared order (`rank` second, as in the table's schema), extras last."""
    known = [name for name in KERNEL_COLUMNS if name in table.column_names]
    return table.select(known + [name for name in table.column_names if name not in KERNEL_COLUMNS])


def load_kernels(out_dir: str | Path, ranks: list[int] | None = None) -> pd.DataFrame:
    """The kernels table of an ingest output as one DataFrame — all ranks, or only `ranks`.

    For one rank or a few; multi-rank analyses go through `kernels_sql` (DuckDB) or one rank
    at a time so that memory does not grow with the number of ranks."""
    path = kernels_path(out_dir)
    if path.is_file():
        table = pq.read_table(path, filters=[(PARTITION, "in", ranks)] if ranks is not None else None)
        return table.to_pandas()
    files = rank_files(out_dir)
    wanted = sorted(files) if ranks is None else [r for r in ranks if r in files]
    parts = []
    for rank in wanted:
        for file in files[rank]:
            table = pq.read_table(file)
            parts.append(table.append_column(PARTITION, pa.array([rank] * table.num_rows, pa.int32())))
    if not parts:
        return KERNEL_SCHEMA.empty_table().to_pandas()
    return _ordered(pa.concat_tables(parts, promote_options="permissive")).to_pandas()


def kernels_sql(out_dir: str | Path) -> str:
    """A DuckDB table expression over the kernels table of an ingest output (either layout)."""
    path = kernels_path(out_dir)
    if path.is_file():
        return f"read_parquet({_quote(path)})"
    pattern = path / f"{PARTITION}=*" / "*.parquet"
    options = "hive_partitioning = true, hive_types = {'rank': INTEGER}, union_by_name = true"
    return f"read_parquet({_quote(pattern)}, {options})"


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def read_summary(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / SUMMARY
    return json.loads(path.read_text()) if path.exists() else {}
