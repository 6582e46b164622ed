"""`atlas ingest`: trace files → kernels.parquet, catalog.json, summary.json."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from kernel_atlas.classify.classifier import default_classifier, label_frame
from kernel_atlas.errors import AtlasError
from kernel_atlas.ingest.catalog import build_catalog
from kernel_atlas.ingest.columns import build_columns
from kernel_atlas.ingest.link import link
from kernel_atlas.ingest.summary import gpu_time_facts, trace_facts
from kernel_atlas.ingest.table import as_categoricals, assemble, to_arrow
from kernel_atlas.ingest.workers import decode_pool, discard_pool, take_read_ahead, workers_for

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class IngestResult:
    frame: pd.DataFrame
    facts: dict[str, Any]
    warnings: list[str]


def trace_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".zst", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _rank_of(path: Path, distributed: dict[str, Any]) -> int | None:
    rank = distributed.get("rank")
    if isinstance(rank, int):
        return rank
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


Progress = Callable[[str, float], None]  # (stage, fraction of the trace done)


def ingest_trace(
    path: str | Path, rank: int | None = None, on_progress: Progress | None = None, workers: int | None = None
) -> IngestResult:
    """Read, link and label one trace. Raises `AtlasError` on unusable input.

    `workers`: decode processes (default: all CPUs for a large trace, none for a small one)."""
    path = Path(path)
    report = on_progress or (lambda _stage, _fraction: None)
    report("reading", 0.0)
    workers = workers_for(path) if workers is None else max(workers, 1)

    def decoding(fraction: float) -> None:
        report("decoding", 0.05 + 0.75 * fraction)

    try:
        read = take_read_ahead(path, decoding)
        if read is None:
            read = build_columns(path, decode_pool(workers) if workers > 1 else None, workers, on_progress=decoding)
        trace, cols = read
    except BrokenProcessPool:
        discard_pool()
        raise AtlasError(path, "a decode worker process died (out of memory?)") from None
    warnings: list[str] = []
    detected = _rank_of(path, trace.distributed_info)
    rank = detected if detected is not None else (rank if rank is not None else 0)
    event_count = cols.event_count
    report("linking", 0.8)
    linked = link(cols)
    frame = assemble(trace_stem(path), rank, cols, linked)
    del cols
    report("classifying", 0.9)
    frame = label_frame(frame)
    report("done", 1.0)
    if frame.empty:
        warnings.append(f"{path}: no GPU events (kernels, memcpys, memsets) in this trace; tables are empty")
    unlinked = sum(linked.unlinked.values())
    if unlinked:
        detail = ", ".join(f"{n} {why}" for why, n in linked.unlinked.items())
        warnings.append(f"{path}: {unlinked} of {len(frame)} GPU activities have no launcher ({detail})")
    link_facts = {
        "events": event_count,
        "unlinked": linked.unlinked,
        "external_id_mismatches": linked.external_id_mismatch,
    }
    facts = trace_facts(trace, frame, rank, link_facts)
    return IngestResult(frame=frame, facts=facts, warnings=warnings)


def _ingest_for_pool(args: tuple[str, int]) -> IngestResult:
    return ingest_trace(args[0], args[1], workers=1)  # the traces are the parallel work here


def ingest_paths(
    paths: Sequence[str | Path],
    jobs: int = 1,
    on_done: Callable[[Path], None] | None = None,
    on_progress: Progress | None = None,
) -> IngestResult:
    """Ingest several traces (e.g. one per rank) into one table with a `rank` column."""
    if not paths:
        raise AtlasError(None, "no trace files given")
    work = [(str(p), i) for i, p in enumerate(paths)]
    results: list[IngestResult] = []
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
            for item, result in zip(work, pool.map(_ingest_for_pool, work), strict=True):
                results.append(result)
                if on_done:
                    on_done(Path(item[0]))
    else:
        for item in work:
            results.append(ingest_trace(item[0], item[1], on_progress))
            if on_done:
                on_done(Path(item[0]))
    warnings = [w for r in results for w in r.warnings]
    ranks = [r.facts["rank"] for r in results]
    if len(set(ranks)) != len(ranks):
        warnings.append(f"several traces claim the same rank ({sorted(ranks)}); the `trace` column tells them apart")
    if len(results) == 1:
        return IngestResult(results[0].frame, {"traces": [results[0].facts]}, warnings)
    frame = as_categoricals(pd.concat([r.frame for r in results], ignore_index=True))
    facts = {"traces": [r.facts for r in results], **gpu_time_facts(frame)}
    return IngestResult(frame, facts, warnings)


def default_out_dir(first_trace: Path) -> Path:
    return first_trace.with_name(trace_stem(first_trace) + ".atlas")


def write_outputs(result: IngestResult, out_dir: Path) -> dict[str, Path]:
    """kernels.parquet, catalog.json and summary.json in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "kernels": out_dir / "kernels.parquet",
        "catalog": out_dir / "catalog.json",
        "summary": out_dir / "summary.json",
    }
    pq.write_table(to_arrow(result.frame), files["kernels"], compression="zstd")
    catalog = build_catalog(result.frame, known=default_classifier().catalog)
    files["catalog"].write_text(json.dumps(catalog, indent=1) + "\n")
    facts = result.facts if "traces" in result.facts else {"traces": [result.facts]}
    summary = {**facts, "warnings": result.warnings, "distinct_kernels": len(catalog)}
    files["summary"].write_text(json.dumps(summary, indent=1) + "\n")
    return files


def load_kernels(out_dir: str | Path) -> pd.DataFrame:
    """Read back an ingest output's kernels table."""
    path = Path(out_dir) / "kernels.parquet"
    if not path.exists():
        raise AtlasError(out_dir, "no kernels.parquet here: run `atlas ingest` first")
    return pq.read_table(path).to_pandas()
