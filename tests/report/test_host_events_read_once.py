"""A report of one rank reads its host events once: the event waits (`idle.event_wait_ends`) and the
critical path had each read them — the waits their `kind` and `name`, then nine columns where a
wait is recorded, the path the whole table (in the process beside on a large trace: 0.25–0.8 s
more of a 510 MB trace's report, of 1.1 M rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernel_atlas.ingest.host_events as host_events
from kernel_atlas.report.build import build_report

# an add launched on stream 7, and an event wait of stream 7 on stream 9 recorded as the runtime
# call alone (what makes the waits read the host events)
EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 20}
    | {"args": {"External id": 1, "Input Dims": [[1024], [1024]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 1, "tid": 1, "ts": 2, "dur": 2}
    | {"args": {"correlation": 2, "External id": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5, "dur": 5}
    | {"args": {"correlation": 1, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, add_kernel>"}
    | {"pid": 0, "tid": 7, "ts": 12, "dur": 10, "args": {"correlation": 1, "External id": 1, "device": 0, "stream": 7}},
]


def test_one_ranks_host_events_are_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    build_report(trace)  # ingested, then reported once
    reads: list[int] = []
    rank_files = host_events._rank_files

    def counted(out: object, rank: int) -> list[Path]:
        reads.append(rank)
        return rank_files(out, rank)  # type: ignore[arg-type]

    monkeypatch.setattr(host_events, "_rank_files", counted)
    report = build_report(tmp_path / "t.atlas")
    assert reads == [0]
    # both readers had it: the path runs through the host's launch (5 → 10) and the kernel (12 → 22)
    assert report.analysis.facts["critical_path"]["total_us"] == pytest.approx(22.0)
    assert report.files["critical_path"].is_file()


def test_a_damaged_host_events_table_is_refused_before_any_report_file(tmp_path: Path) -> None:
    """Read before the analyses, the table refuses the report before it writes anything: the
    critical path had refused it after roofline.parquet, the wait files and timeshare.csv were written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kernel_atlas.core.errors import AtlasError
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    out = tmp_path / "t.atlas"
    write_outputs(ingest_paths([trace]), out)
    (path,) = (out / "host_events.parquet").rglob("*.parquet")
    table = pq.read_table(path)
    ends = table["end_us"].to_pylist()
    ends[0] = table["ts_us"][0].as_py() - 1e6  # a range ending 1 s before it starts
    doctored = table.set_column(table.schema.get_field_index("end_us"), "end_us", pa.array(ends, pa.float64()))
    pq.write_table(doctored.replace_schema_metadata(pq.read_schema(path).metadata), path)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(AtlasError, match="1 rows that end before they start"):
        build_report(out)
    assert sorted(p.name for p in out.iterdir()) == before
