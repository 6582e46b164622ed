"""The streaming reader: compressed input in worker processes, the document around the
events, and one-line errors from any slice."""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zstandard

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest import reader
from kernel_atlas.ingest.columns import OpParams, build_columns
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.ingest.workers import decode_pool
from tests.support.traces import EXAMPLE


def _events(n: int) -> list[dict]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5, "args": {}}
        for i in range(n)
    ]


def _columns(path: Path, slice_bytes: int = 200, workers: int = 2):
    executor = decode_pool(workers) if workers > 1 else None
    return build_columns(path, executor, workers, slice_bytes=slice_bytes)


def test_gzip_and_zstd_in_workers_give_the_plain_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = gzip.decompress(EXAMPLE.read_bytes())
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(text))
    zst = tmp_path / "t.json.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(text))
    expected = ingest_trace(plain, workers=1)
    monkeypatch.setattr(reader, "SLICE_BYTES", 20_000)
    for path in (gz, zst):
        got = ingest_trace(path, workers=2)
        pd.testing.assert_frame_equal(expected.frame.drop(columns="trace"), got.frame.drop(columns="trace"))
        assert got.facts["size_bytes"] == len(text)
        assert got.facts["events"] == expected.facts["events"] == 2551


def test_members_after_the_events_are_read(tmp_path: Path) -> None:
    # Kineto writes metadata after traceEvents too; '}, {"' there must not be taken for events
    doc = (
        '{"schemaVersion": 1, "traceEvents": [\n'
        + ",\n".join(json.dumps(e) for e in _events(50))
        + '\n], "deviceProperties": [{"id": 0, "name": "GPU A"}, {"id": 1, "name": "GPU B"}],'
        ' "distributedInfo": {"rank": 3, "world_size": 4}, "cuda_runtime_version": 12040, "traceName": "x"}\n'
    )
    path = tmp_path / "kineto.json"
    path.write_text(doc)
    for slice_bytes in (1, 300, 1 << 20):
        info, cols = _columns(path, slice_bytes)
        assert cols.event_count == info.events == 50
        assert [cols.host.names[k] for k in cols.host.name_code] == [f"op{i}" for i in range(50)]
        assert [d["name"] for d in info.device_properties] == ["GPU A", "GPU B"]
        assert info.distributed_info == {"rank": 3, "world_size": 4}
        assert info.runtime == "cuda"
        assert info.size_bytes == len(doc)


def test_strings_with_brackets_quotes_and_escapes(tmp_path: Path) -> None:
    tricky = ['a}, {"b', 'x"]}', "back\\slash\\", '\\"}, {"', "}]"]
    events = _events(40)
    for i, event in enumerate(events):
        event["name"] = tricky[i % len(tricky)] + str(i)
        event["args"] = {"note": tricky[(i + 1) % len(tricky)], "nested": [{"k": tricky[i % len(tricky)]}]}
    for indent in (None, 2):  # compact, and pretty-printed across lines as Kineto writes it
        path = tmp_path / f"tricky{indent}.json"
        path.write_text(json.dumps({"traceEvents": events, "after": tricky}, indent=indent))
        for slice_bytes, workers in ((1, 1), (64, 2), (500, 2)):
            _, cols = _columns(path, slice_bytes, workers)
            assert [cols.host.names[k] for k in cols.host.name_code] == [e["name"] for e in events]


def test_ids_written_as_strings_take_the_forgiving_path(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"correlation": "7", "External id": 3.0}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 1,
         "args": {"correlation": "7", "device": "0", "stream": 7, "grid": ["4", 1, 1]}},
    ]  # fmt: skip
    path = tmp_path / "strings.json"
    path.write_text(json.dumps(events))
    _, cols = _columns(path, 1 << 20, workers=1)
    assert cols.host.correlation.tolist() == [7] and cols.host.external_id.tolist() == [3]
    assert cols.gpu.correlation.tolist() == [7] and cols.gpu.device.tolist() == [0]
    assert list(cols.gpu.grid) == ["[4, 1, 1]"]


def _collective_trace(seq: object, ranks: object) -> list[dict]:
    """SYNTHETIC, written by hand: a `record_param_comms` op recording a collective (its `Seq`
    and `Process Group Ranks` as given), the ROCm launch inside it naming its kernel, and the
    NCCL kernel, which records no process group or sequence number of its own."""
    comms = {
        "External id": 5,
        "Collective name": "allreduce",
        "In msg nelems": 1024,
        "Out msg nelems": 1024,
        "Group size": 2,
        "dtype": "Float",
        "Process Group Name": "7",
        "Process Group Description": "tp",
        "Process Group Ranks": ranks,
        "Seq": seq,
    }
    return [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 0, "dur": 100,
         "args": comms},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 9, "External id": 5, "kernel": "ncclDevKernel_AllReduce_Sum_f32"}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "pid": 0, "tid": 7, "ts": 50,
         "dur": 20, "args": {"correlation": 9, "External id": 5, "device": 0, "stream": 7,
                             "Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float"}},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("seq", "ranks"),
    [(41, [0, 1]), (41, "[0, 1]"), ("41", [0, 1])],  # the last one: the forgiving path (Seq as text)
)
def test_collective_and_launch_fields_in_both_decode_paths(tmp_path: Path, seq: object, ranks: object) -> None:
    path = tmp_path / "comms.json"
    path.write_text(json.dumps(_collective_trace(seq, ranks)))
    _, cols = _columns(path, 1 << 20, workers=1)
    host = cols.host
    assert [host.launch_kernels[k] if k >= 0 else None for k in host.launch_kernel] == [
        None,
        "ncclDevKernel_AllReduce_Sum_f32",
    ]
    op = host.param_sets[host.params[0]]
    assert (op.collective, op.in_nelems, op.group_size, op.msg_dtype) == ("allreduce", 1024, 2, "Float")
    assert (op.process_group, op.process_group_desc, op.process_group_ranks, op.seq) == ("7", "tp", "[0, 1]", 41)
    assert host.params[1] == -1 and cols.gpu.seq.tolist() == [-1]
    row = ingest_trace(path, workers=1).frame.iloc[0]  # the kernel takes what it lacks from the op
    assert (row["process_group"], row["process_group_desc"], row["process_group_ranks"]) == ("7", "tp", "[0, 1]")
    assert row["collective_seq"] == 41 and row["group_size"] == 2 and row["msg_in_nelems"] == 1024


_ONE_PARAM = {
    "collective": ("Collective name", "allreduce"),
    "in_nelems": ("In msg nelems", 8),
    "out_nelems": ("Out msg nelems", 8),
    "group_size": ("Group size", 4),
    "msg_dtype": ("dtype", "Float"),
    "process_group": ("Process Group Name", "3"),
    "process_group_desc": ("Process Group Description", "dp"),
    "process_group_ranks": ("Process Group Ranks", "[0, 2]"),
    "seq": ("Seq", 0),
    "kernel_kwargs": ("kernel_kwargs", "XBLOCK=64"),
    "call_stack": ("Call stack", "model.py(12): forward;train.py(3): <module>"),  # older Kineto
}


@pytest.mark.parametrize("field", list(OpParams._fields))
def test_a_cpu_op_recording_any_one_parameter_keeps_it(tmp_path: Path, field: str) -> None:
    key, value = _ONE_PARAM[field]
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {key: value}},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"Input Dims": []}},
    ]  # fmt: skip
    path = tmp_path / "one.json"
    path.write_text(json.dumps(events))
    host = _columns(path, 1 << 20, workers=1)[1].host
    assert host.params.tolist() == [0, -1] and getattr(host.param_sets[0], field) == value


def _error(path: Path, slice_bytes: int = 300, workers: int = 2) -> str:
    with pytest.raises(AtlasError) as caught:
        _columns(path, slice_bytes, workers)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_errors_name_the_file_and_the_event(tmp_path: Path) -> None:
    events = _events(300)
    text = json.dumps({"traceEvents": events})
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) * 2 // 3])
    assert "truncated" in _error(truncated)
    broken = tmp_path / "broken.json"
    broken.write_text(text.replace('"name": "op150"', '"name": op150'))
    assert "invalid JSON inside traceEvents" in _error(broken)
    packed = tmp_path / "broken.json.gz"  # compressed: slices reach workers in shared memory
    packed.write_bytes(gzip.compress(broken.read_bytes()))
    assert "invalid JSON inside traceEvents" in _error(packed)
    events[250] = 7  # an entry that is not an object costs only itself, counted ("ts": "soon" only that key)
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"traceEvents": events}))
    for path in (odd, tmp_path / "odd.json.gz"):
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(odd.read_bytes()))
        columns = _columns(path, 300, 2)[1]
        assert len(columns.host.family) == 299 and dict(columns.ignored) == {"entries not objects": 1}
    trailing = tmp_path / "trailing.json"
    trailing.write_text(json.dumps({"traceEvents": _events(3)}) + " {}")
    assert "unexpected text after the trace" in _error(trailing)
    twice = tmp_path / "twice.json"
    twice.write_text('{"traceEvents": [], "traceEvents": []}')
    assert "appears twice" in _error(twice)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    assert "not a regular file" in _error(fifo, workers=1)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_the_cli_refuses_a_named_pipe_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    code = "import sys\nfrom kernel_atlas.cli import app\nsys.argv[0] = 'atlas'\napp()"
    args = [sys.executable, "-c", code, "ingest", str(fifo), "-o", str(tmp_path / "o")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "not a regular file" in lines[0]


def test_a_lying_gzip_size_trailer_allocates_nothing(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps({"traceEvents": _events(20)}).encode()))
    data[-4:] = struct.pack("<I", 0xFFFFFFFF)  # claims 4 GiB of text
    path = tmp_path / "liar.json.gz"
    path.write_bytes(bytes(data))
    assert len(data) < 1500
    start = time.perf_counter()
    assert "compressed stream is damaged or truncated" in _error(path, workers=1)
    assert time.perf_counter() - start < 5


def test_display_time_unit_never_rescales_timestamps(tmp_path: Path) -> None:
    # Trace Event Format: ts and dur are µs; displayTimeUnit only tells viewers how to show them
    doc = {"traceEvents": _events(5), "displayTimeUnit": "ns"}
    path = tmp_path / "ns.json"
    path.write_text(json.dumps(doc))
    _, cols = _columns(path, 1 << 20, workers=1)
    np.testing.assert_array_equal(cols.host.ts, [0.0, 10.0, 20.0, 30.0, 40.0])
    np.testing.assert_array_equal(cols.host.end - cols.host.ts, [5.0] * 5)


def test_reading_ahead_one_trace_frees_its_decode_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`atlas ingest` of a single trace decodes it while the pipeline imports; once decoded, the
    decode workers are shut down (their memory is free for linking). With more traces to come
    they stay for the next one."""
    from kernel_atlas.ingest import workers

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": _events(2000)}))
    monkeypatch.setattr(workers, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    monkeypatch.setattr(reader, "SLICE_BYTES", 20_000)
    try:
        workers.start_early([trace])
        assert workers.reading_ahead(trace)
        _, cols = workers.take_read_ahead(trace)
        assert len(cols.host) == 2000 and workers._pool is None and not workers.reading_ahead(trace)
        workers.start_early([trace, trace])
        _, cols = workers.take_read_ahead(trace)
        assert len(cols.host) == 2000 and workers._pool is not None
    finally:
        workers.discard_pool()


def test_a_worker_never_reads_a_file_renamed_over_the_trace(tmp_path: Path) -> None:
    """Decode workers open the trace by name for each slice: a trace replaced meanwhile (written
    beside, renamed over it, as profilers and sync tools do) gave slices of two files and
    numbers of neither, exit 0. A slice is read only from the file the reader opened."""
    from kernel_atlas.ingest.events import CHANGED, SliceError, decode_task, file_identity

    path = tmp_path / "t.json"
    path.write_text('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}')
    with path.open("rb") as handle:
        identity = file_identity(handle.fileno())
    task = ("file", str(path), 0, path.stat().st_size, identity)
    assert not isinstance(decode_task(task), SliceError)
    replacement = tmp_path / "t.new"
    replacement.write_text('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 9}')
    os.replace(replacement, path)  # the same size: only the file's identity tells
    result = decode_task(task)
    assert isinstance(result, SliceError) and result.kind == "read" and result.message == CHANGED
