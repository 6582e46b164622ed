"""Input dialects: .json/.gz/.zst, displayTimeUnit, several ranks at once."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
import zstandard
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.pipeline import ingest_paths, ingest_trace
from tests.support.traces import EXAMPLE, trace_path

runner = CliRunner()


@pytest.fixture(scope="module")
def example_doc() -> dict:
    return json.loads(gzip.decompress(EXAMPLE.read_bytes()))


def test_plain_gzip_and_zstd_give_the_same_table(tmp_path: Path) -> None:
    raw = gzip.decompress(EXAMPLE.read_bytes())
    plain = tmp_path / "t.json"
    plain.write_bytes(raw)
    zst = tmp_path / "t.json.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(raw))
    frames = [ingest_trace(p).frame.drop(columns="trace") for p in (EXAMPLE, plain, zst)]
    for other in frames[1:]:
        pd.testing.assert_frame_equal(frames[0], other)


def test_zstd_with_a_skippable_frame_first_is_read(tmp_path: Path) -> None:
    """A skippable frame (RFC 8878: magic 0x184D2A50–5F) may open a .zst that `zstd -d` reads;
    its first bytes are not zstd's frame magic, and it was refused as "not JSON"."""
    raw = gzip.decompress(EXAMPLE.read_bytes())
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"notes"
    zst = tmp_path / "t.json.zst"
    zst.write_bytes(skippable + zstandard.ZstdCompressor().compress(raw))
    frames = [ingest_trace(p).frame.drop(columns="trace") for p in (EXAMPLE, zst)]
    pd.testing.assert_frame_equal(frames[0], frames[1])


def test_a_zstd_with_a_skippable_frame_is_sized_as_compressed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode workers are sized by the text a file will give: a compressed file's size is
    scaled up (its text is several times larger) — a zstd opening with a skippable frame too, as
    the reader opens it. With 4 CPUs and a threshold of 2,000 bytes, both zstd files of 1,000
    random bytes (about as large compressed, ten times that as guessed text) get 4 workers and
    the same bytes uncompressed get 1 (the skippable one got 1: sized as its ~1 KB of plain bytes)."""
    import random

    from kernel_atlas.ingest import workers

    payload = random.Random(0).randbytes(1000)
    frame = zstandard.ZstdCompressor().compress(payload)
    plain, zst, skipped = tmp_path / "t.json", tmp_path / "t.json.zst", tmp_path / "s.json.zst"
    plain.write_bytes(payload)
    zst.write_bytes(frame)
    skipped.write_bytes((0x184D2A50).to_bytes(4, "little") + (0).to_bytes(4, "little") + frame)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 4)
    monkeypatch.setattr(workers, "PARALLEL_MIN_BYTES", 2000)
    assert skipped.stat().st_size < 2000 <= workers._COMPRESSION_GUESS * len(frame)
    assert [workers.workers_for(p) for p in (plain, zst, skipped)] == [1, 4, 4]


@pytest.mark.parametrize("kept", [0.1, 0.5])
def test_a_zstd_cut_inside_its_first_block_is_said_to_be_truncated(tmp_path: Path, kept: float) -> None:
    """zstandard's reader gives no bytes for a frame cut inside its first block (no error): the
    trace read as "file is empty". A 1 KB document is one block: cut anywhere, it is said to be
    truncated; cut later in a long trace, the JSON's own end says so."""
    compressed = zstandard.ZstdCompressor().compress(b'{"traceEvents": [' + b'{"ph": "M"},' * 80 + b"{}]}")
    zst = tmp_path / "cut.json.zst"
    zst.write_bytes(compressed[: int(len(compressed) * kept)])
    result = runner.invoke(app, ["ingest", str(zst), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "zstd stream is damaged or truncated (it ends inside a frame)" in result.output
    empty = tmp_path / "empty.json.zst"
    empty.write_bytes(zstandard.ZstdCompressor().compress(b""))
    assert "file is empty" in runner.invoke(app, ["ingest", str(empty), "-o", str(tmp_path / "o2")]).output


def test_display_time_unit_ns_does_not_rescale(tmp_path: Path) -> None:
    """`ts`/`dur` are µs whatever `displayTimeUnit` says: Kineto writes "ns" when its µs values
    carry nanosecond fractions. A shared trace marked "ns" must give the same times as its µs
    values, read here with plain json."""
    doc = json.loads(gzip.decompress(trace_path("h100_bert_small_infer").read_bytes()))
    doc["displayTimeUnit"] = "ns"
    path = tmp_path / "ns.json"
    path.write_text(json.dumps(doc))
    result = ingest_trace(path)
    frame = result.frame
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    first = min(kernels, key=lambda e: e["ts"])
    row = frame[(frame["kind"] == "kernel") & (frame["correlation"] == first["args"]["correlation"])]
    assert row["dur_us"].tolist() == [first["dur"]] and row["ts_us"].tolist() == [first["ts"]]
    assert frame.loc[frame["kind"] == "kernel", "dur_us"].sum() == pytest.approx(sum(e["dur"] for e in kernels))
    assert result.facts["kernel_time_us"] == pytest.approx(sum(e["dur"] for e in kernels))


def test_display_time_unit_ns_keeps_microsecond_values(tmp_path: Path, example_doc: dict) -> None:
    # In the Trace Event Format ts and dur are always µs; displayTimeUnit is a display hint
    doc = json.loads(json.dumps(example_doc))
    doc["displayTimeUnit"] = "ns"
    path = tmp_path / "ns.json"
    path.write_text(json.dumps(doc))
    ns = ingest_trace(path).frame
    us = ingest_trace(EXAMPLE).frame
    assert ns["dur_us"].tolist() == us["dur_us"].tolist()
    assert ns["ts_us"].tolist() == us["ts_us"].tolist()
    assert (ns["launcher"].astype(str) == us["launcher"].astype(str)).all()


def test_several_ranks_in_parallel(tmp_path: Path, example_doc: dict) -> None:
    paths = []
    for rank in range(3):
        doc = json.loads(json.dumps(example_doc))
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 3}
        path = tmp_path / f"rank-{rank}.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
    result = ingest_paths(paths, jobs=2)
    assert sorted(result.frame["rank"].unique()) == [0, 1, 2]
    assert len(result.frame) == 3 * 61
    assert [t["rank"] for t in result.facts["traces"]] == [0, 1, 2]
    out = tmp_path / "out"
    cli = runner.invoke(app, ["ingest", *map(str, paths), "-j", "2", "-o", str(out)])
    assert cli.exit_code == 0, cli.output
    table = pd.read_parquet(out / "kernels.parquet")
    assert table.groupby("rank").size().to_dict() == {0: 61, 1: 61, 2: 61}
    summary = json.loads((out / "summary.json").read_text())
    assert (
        len(summary["traces"]) == 3
        and summary["distinct_kernels"] == len(json.loads((out / "catalog.json").read_text())) == 13
    )


def test_rank_from_file_name_when_distributed_info_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "worker_rank7.json.gz"
    path.write_bytes(EXAMPLE.read_bytes())
    assert set(ingest_trace(path).frame["rank"]) == {7}
