"""Slice-by-slice decoding (in this process or in worker processes) gives exactly the
columns of a one-piece decode, wherever the slices are cut."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_atlas.ingest import reader
from kernel_atlas.ingest.columns import TraceColumns, build_columns
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.ingest.workers import decode_pool
from tests.support.traces import trace_path


def _columns(path: Path, slice_bytes: int, workers: int = 1) -> TraceColumns:
    executor = decode_pool(workers) if workers > 1 else None
    return build_columns(path, executor, workers, slice_bytes=slice_bytes)[1]


def _assert_same(a: TraceColumns, b: TraceColumns) -> None:
    assert a.event_count == b.event_count
    for table in ("gpu", "host", "gpu_steps"):
        for spec in fields(getattr(a, table)):
            x, y = getattr(getattr(a, table), spec.name), getattr(getattr(b, table), spec.name)
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y, err_msg=f"{table}.{spec.name}")
            elif isinstance(x, pd.Categorical):
                pd.testing.assert_series_equal(pd.Series(x), pd.Series(y), obj=f"{table}.{spec.name}")
            else:
                assert x == y, f"{table}.{spec.name}"


@pytest.mark.parametrize(("slice_bytes", "workers"), [(1, 1), (777, 1), (4096, 2), (1 << 20, 1)])
def test_slices_reassemble_the_trace(slice_bytes: int, workers: int) -> None:
    path = trace_path("h100_bert_small_infer")
    whole = _columns(path, 1 << 40)
    assert whole.event_count == 2551
    assert len(whole.gpu) == 61
    _assert_same(whole, _columns(path, slice_bytes, workers))


@pytest.mark.parametrize("stem", ["a100_nccl_8rank_rank0", "mi300x_torch_compile_llama_block"])
def test_slices_keep_collective_parameters_and_launched_kernel_names(stem: str) -> None:
    # record_param_comms parameters and Inductor tiles (`HostTable.param_sets`), ROCm
    # launches' kernel names (`launch_kernels`) come through slices and workers unchanged
    path = trace_path(stem)
    whole = _columns(path, 1 << 40)
    assert len(whole.host.param_sets) and (whole.host.params >= 0).any()
    if stem.startswith("mi300x"):
        assert len(whole.host.launch_kernels) and (whole.host.launch_kernel >= 0).any()
    _assert_same(whole, _columns(path, 64 << 10, 2))


def _nested_trace(tmp_path: Path) -> Path:
    # args holding lists of objects contain '}, {"' and '}]' that are not event boundaries
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1,
            "args": {"groups": [{"a": i}, {"b": i}, {"c": {"d": [{"e": 1}, {"f": 2}]}}]},
        }
        for i in range(200)
    ]
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"traceEvents": events, "tail": [{"x": 1}, {"y": 2}]}))
    return path


@pytest.mark.parametrize(("slice_bytes", "workers"), [(1, 1), (50, 1), (333, 2), (10_000, 2)])
def test_boundary_inside_nested_args_is_skipped(tmp_path: Path, slice_bytes: int, workers: int) -> None:
    cols = _columns(_nested_trace(tmp_path), slice_bytes, workers)
    assert cols.event_count == 200
    assert [cols.host.names[k] for k in cols.host.name_code] == [f"op{i}" for i in range(200)]
    np.testing.assert_array_equal(cols.host.ts, np.arange(200.0))


def test_small_slices_in_workers_change_nothing_downstream(monkeypatch: pytest.MonkeyPatch) -> None:
    path = trace_path("h100_vit_image_classify_infer")
    whole = ingest_trace(path, workers=1)
    monkeypatch.setattr(reader, "SLICE_BYTES", 5000)
    sliced = ingest_trace(path, workers=2)
    pd.testing.assert_frame_equal(whole.frame, sliced.frame)
    assert whole.facts == sliced.facts


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 5.0,
          "args": {"correlation": 1, "device": 0, "stream": 7}}  # fmt: skip


def test_a_slice_of_many_tiny_events_is_decoded_a_bounded_count_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """`{}` is 3 bytes of text and ~100 bytes of struct on the forgiving path (no `ph` fails the
    typed decode): a 4 MB slice of them took 420 MB. Past MAX_FORGIVING_EVENTS events a slice comes
    back as parts of at most that many, in order: 25 empty objects and a kernel, 10 at a time, are
    parts of 10, 10 and 6 events, the kernel in the last."""
    from kernel_atlas.ingest import events

    monkeypatch.setattr(events, "MAX_FORGIVING_EVENTS", 10)
    framed = ("[" + ",".join(["{}"] * 25 + [json.dumps(KERNEL)]) + "]").encode()
    parts = events.decode_parts(framed)
    assert [p.events for p in parts] == [10, 10, 6]
    assert [len(p.gpu.get("ts", [])) for p in parts] == [0, 0, 1]
    assert parts[2].gpu_strings[parts[2].gpu["name"][0]] == "k"
    # nine braces or fewer a slice: never counted as events, one part
    assert [p.events for p in events.decode_parts(b"[{}, {}, {}]")] == [3]


@pytest.mark.parametrize("filler", ["{}", "null", "[]"])
def test_a_long_stretch_without_event_boundaries_is_cut_in_slices(tmp_path: Path, filler: str) -> None:
    """An array of 60,000 empty objects, nulls or empty lists before a kernel was one slice (the
    rest of the array, any length, at once: 20M `{}` took 2.9 GB). `{}` is now cut like any event;
    where no event boundary turns up within twice the slice size, the exact scan cuts the text:
    no slice is longer than that plus the 64 KiB window its boundary was looked for in."""
    from kernel_atlas.ingest.events import NOT_OBJECTS

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [json.loads(filler)] * 60_000 + [KERNEL]}))
    parts: list = []
    info = reader.read_trace(path, parts.append, slice_bytes=4096)
    assert info.events == (60_001 if filler == "{}" else 1)
    entries = [p.events + p.ignored.get(NOT_OBJECTS, 0) for p in parts]
    assert sum(entries) == 60_001 and len(parts) >= 4
    assert max(entries) * len(filler + ", ") <= 2 * 4096 + (64 << 10) + 256
