"""Catalogs of several traces folded into one (ingest/catalog.merge_catalog): counts and times
add up, the example is the one of the trace where the kernel ran most, and no trace's entries
are changed. A catalog lists at most CATALOG_ENTRIES kernels, the heaviest; the rest are tallied
(a trace of 300k distinct kernel names wrote a 650 MB catalog.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.catalog import LeftOut, merge_catalog, merged_entries

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "h100_bert_small_infer.json.gz"


def _entry(name: str, count: int, total: float, dims: str) -> dict:
    return {"kernel_name": name, "kernel_implementation": "aten::mm", "count": count, "total_us": total, "params": dims}


def test_merged_counts_add_up_and_keep_the_example_of_the_busiest_trace() -> None:
    first = [_entry("gemm", 3, 30.0, "[[2, 2]]"), _entry("relu", 5, 1.25, "[[8]]")]
    second = [_entry("gemm", 4, 10.5, "[[4, 4]]"), _entry("copy", 1, 2.0, "[[1]]")]
    third = [_entry("gemm", 2, 0.1, "[[9, 9]]")]
    traces = [first, second, third]
    before = copy.deepcopy(traces)
    merged: dict = {}
    for entries in traces:
        merge_catalog(merged, entries)
    assert traces == before  # no trace's entries changed
    assert merged_entries(merged) == (
        [
            # 3 + 4 + 2 runs, 30 + 10.5 + 0.1 µs; the second trace ran it most (4): its shapes
            {
                "kernel_name": "gemm",
                "kernel_implementation": "aten::mm",
                "count": 9,
                "total_us": 40.6,
                "params": "[[4, 4]]",
            },
            {
                "kernel_name": "copy",
                "kernel_implementation": "aten::mm",
                "count": 1,
                "total_us": 2.0,
                "params": "[[1]]",
            },
            {
                "kernel_name": "relu",
                "kernel_implementation": "aten::mm",
                "count": 5,
                "total_us": 1.25,
                "params": "[[8]]",
            },
        ],
        LeftOut(),
    )
    assert merged_entries(merged)[0][2] is first[1]  # a kernel of one trace only: its entry, not a copy


def test_merged_entries_past_the_limit_are_tallied() -> None:
    merged: dict = {}
    merge_catalog(merged, [_entry("gemm", 3, 30.0, ""), _entry("relu", 5, 1.25, ""), _entry("copy", 1, 2.0, "")])
    listed, left_out = merged_entries(merged, limit=1)
    assert [e["kernel_name"] for e in listed] == ["gemm"]
    assert left_out == LeftOut(kernels=2, calls=6, total_us=3.25)  # relu 5 calls 1.25 µs, copy 1 call 2 µs


def test_ingest_lists_the_heaviest_kernels_and_tallies_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled example has 13 kernels (name and launcher); its three heaviest (read off its
    JSON): the wmma GEMM under addmm, 17 calls 98.718 µs; the 256x128 GEMM, 1 call 41.28 µs;
    flash attention, 4 calls 37.408 µs. The other 10 ran 61 − 22 = 39 times for
    309.437 − 177.406 = 132.031 µs, 43 % of the GPU time."""
    import kernel_atlas.ingest.fleet as fleet

    monkeypatch.setattr(fleet, "CATALOG_ENTRIES", 3)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["ingest", str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    catalog = json.loads((out / "catalog.json").read_text())
    assert [(e["count"], e["total_us"]) for e in catalog] == [(17, 98.718), (1, 41.28), (4, 37.408)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["distinct_kernels"] == 13
    assert summary["catalog_left_out"] == {"kernels": 10, "calls": 39, "total_us": 132.031}
    assert (
        "catalog.json lists the 3 kernels of most GPU time; 10 more (39 calls, 43 % of GPU time) "
        "are in kernels.parquet only" in summary["warnings"]
    )


def test_of_equal_counts_the_example_is_the_first_traces_whatever_the_order() -> None:
    a, b = [_entry("gemm", 2, 4.0, "[[1, 1]]")], [_entry("gemm", 2, 6.0, "[[2, 2]]")]
    for order in (("a.json", a), ("b.json", b)), (("b.json", b), ("a.json", a)):
        merged: dict = {}
        for source, entries in order:
            merge_catalog(merged, entries, source)
        (entry,), _ = merged_entries(merged)
        assert (entry["count"], entry["total_us"], entry["params"]) == (4, 10.0, "[[1, 1]]")


def test_a_folder_ingested_in_parallel_writes_what_one_at_a_time_writes(tmp_path: Path) -> None:
    """Three ranks of the example: rank 0 with a launcher-less copy of its first kernel and 40
    times its CPU ops (it ends last), rank 2 with a kernel whose `dur` is text (each a warning of
    its own). -j 1 and -j 3 write the same catalog.json and summary.json (but for the run's id
    and the ranks' file names), the warnings in rank order."""
    import gzip

    doc = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in range(3):
        trace = json.loads(json.dumps(doc))
        trace["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 3}
        events = trace["traceEvents"]
        kernel = next(e for e in events if e.get("cat") == "kernel")
        if rank == 0:
            # a kernel whose launch and op are not in the trace (an External id that names no op)
            lost = {**kernel["args"], "correlation": 10**9, "External id": 10**9}
            events.append({**kernel, "ts": kernel["ts"] + 1e6, "args": lost})
            ops = [e for e in events if e.get("cat") == "cpu_op"]
            events += [{**e, "ts": e["ts"] + 1e7 * (k + 1)} for k in range(40) for e in ops]
        if rank == 2:
            events.append({**kernel, "ts": kernel["ts"] + 1e6, "dur": "5"})
        (folder / f"rank{rank}.json").write_text(json.dumps(trace))
    written = {}
    for jobs in ("1", "3"):
        out = tmp_path / f"out{jobs}"
        result = CliRunner().invoke(app, ["ingest", str(folder), "-o", str(out), "-j", jobs, "-q"])
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())
        summary.pop("run_id")
        for trace in summary["traces"]:
            trace.pop("kernels_file"), trace.pop("memory_file", None)
        written[jobs] = (json.loads((out / "catalog.json").read_text()), summary)
    assert written["1"] == written["3"]
    warnings = written["3"][1]["warnings"]
    assert [w.split(":")[0].rsplit("/", 1)[-1] for w in warnings] == ["rank0.json", "rank2.json", "rank2.json"], (
        warnings
    )
