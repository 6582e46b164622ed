"""Ids (correlation, External id, device, stream, autograd's sequence number) as ingest reads them
(campaign AL 4 and 6): a negative id written, or a fractional one, is no id — refused and counted in
the "out of range or of an unexpected type" warning, as one beyond int64 is, never read as "none"
(or cut to an integer) unsaid; a whole float (`100.0`) is that integer, in `args` and in
`pid`/`tid` alike; Kineto's -1 for a `cuda_sync` without a stream stays its "none", uncounted.

The trace, by hand: three `aten::mm` ops on thread (100, 100), each launching one 50 µs kernel
(correlations 1000-1002, External ids 10-12) on device 0, stream 7."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.ingest.pipeline import ingest_trace

WARNING = "out of range or of an unexpected type"


def _trace(
    launch_args: list[dict[str, Any]] | None = None,
    kernel_args: list[dict[str, Any]] | None = None,
    kernel_pid: list[Any] | None = None,
    launch_tid: Any = 100,
    op_args: list[dict[str, Any]] | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for i in range(3):
        start = 1000.0 + 100 * i
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": start,
                       "dur": 20.0, "args": {"External id": 10 + i, **(op_args[i] if op_args else {})}})  # fmt: skip
        launch = {"External id": 10 + i, "correlation": 1000 + i}
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": launch_tid,
                       "ts": start + 5, "dur": 5.0, "args": {**launch, **(launch_args[i] if launch_args else {})}})  # fmt: skip
        kernel = {"External id": 10 + i, "correlation": 1000 + i, "device": 0, "stream": 7}
        events.append({"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": kernel_pid[i] if kernel_pid else 0,
                       "tid": 7, "ts": start + 20, "dur": 50.0,
                       "args": {**kernel, **(kernel_args[i] if kernel_args else {})}})  # fmt: skip
    return {"traceEvents": events + (extra or [])}


def _ingest(tmp_path: Path, doc: dict[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    result = ingest_trace(path)
    frame = result.frame.sort_values("ts_us").reset_index(drop=True)
    return frame, [w for w in result.warnings if WARNING in w]


def test_valid_ids_are_read_as_written_without_a_warning(tmp_path: Path) -> None:
    frame, warnings = _ingest(tmp_path, _trace())
    assert warnings == []
    assert frame["correlation"].tolist() == [1000, 1001, 1002]
    assert frame["device"].tolist() == [0, 0, 0]
    assert frame["link"].astype(str).tolist() == ["correlation"] * 3


def test_negative_correlations_are_counted_and_a_syncs_minus_one_stream_is_not(tmp_path: Path) -> None:
    """Every correlation negated (3 launches, 3 kernels): 6 values refused, each kernel then linked by
    its External id only. A Context Sync writes stream -1 and an unresolved wait -1 (Kineto): none."""
    negated = [{"correlation": -(1000 + i)} for i in range(3)]
    syncs = [
        {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": -1, "ts": 1400.0, "dur": 3.0,
         "args": {"cuda_sync_kind": "Context Sync", "stream": -1, "correlation": 2000, "device": 0}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 7, "ts": 1410.0, "dur": 1.0,
         "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": -1,
                  "wait_on_cuda_event_record_corr_id": -1, "stream": 7, "correlation": 2001, "device": 0}},
    ]  # fmt: skip
    frame, warnings = _ingest(tmp_path, _trace(launch_args=negated, kernel_args=negated, extra=syncs))
    assert len(warnings) == 1
    assert warnings[0].endswith(f"6 values {WARNING} were ignored (correlation 6)")
    assert frame["correlation"].isna().all()
    assert frame["link"].astype(str).tolist() == ["external id"] * 3


def test_negative_devices_are_counted_not_one_silent_null_device(tmp_path: Path) -> None:
    """Kernels on devices -1, -2, -3 (pid the same, as Kineto writes a GPU activity's pid): 3 device
    values refused; with no usable pid either, the device is unknown (null) — and said."""
    kernel_args = [{"device": -(i + 1)} for i in range(3)]
    frame, warnings = _ingest(tmp_path, _trace(kernel_args=kernel_args, kernel_pid=[-1, -2, -3]))
    assert len(warnings) == 1
    assert warnings[0].endswith(f"3 values {WARNING} were ignored (device 3)")
    assert frame["device"].isna().all()


def test_negative_ids_on_the_forgiving_path_are_counted_alike(tmp_path: Path) -> None:
    """A slice with an id written as text ("1000") is decoded key by key: there the negative
    correlation of kernel 2 and External id of kernel 3 count as on the typed path, the text is read."""
    kernel_args = [{"correlation": "1000"}, {"correlation": -1001}, {"External id": -12}]
    frame, warnings = _ingest(tmp_path, _trace(kernel_args=kernel_args))
    assert len(warnings) == 1
    assert warnings[0].endswith(f"2 values {WARNING} were ignored (External id 1, correlation 1)")
    assert frame["correlation"].tolist()[0] == 1000
    assert pd.isna(frame["correlation"][1])
    assert pd.isna(frame["external_id"][2])


def test_a_negative_sequence_number_is_counted(tmp_path: Path) -> None:
    op_args = [{"Sequence number": 5, "Fwd thread id": 0}, {"Sequence number": -7}, {"Fwd thread id": -3}]
    _, warnings = _ingest(tmp_path, _trace(op_args=op_args))
    assert len(warnings) == 1
    assert warnings[0].endswith(f"2 values {WARNING} were ignored (Fwd thread id 1, Sequence number 1)")


def test_whole_floats_are_the_integers_they_hold(tmp_path: Path) -> None:
    """`"tid": 100.0` on the launches (the ops' thread is 100), `"correlation": 1000.0` and
    `"device": 0.0`, `"stream": 7.0` on the kernels: read as 100, 1000…, 0, 7 — no warning, every
    kernel linked to its launch by correlation and to its op."""
    kernel_args = [{"correlation": 1000.0 + i, "device": 0.0, "stream": 7.0} for i in range(3)]
    frame, warnings = _ingest(tmp_path, _trace(kernel_args=kernel_args, launch_tid=100.0))
    assert warnings == []
    assert frame["correlation"].tolist() == [1000, 1001, 1002]
    assert frame["device"].tolist() == [0, 0, 0]
    assert frame["stream"].tolist() == [7, 7, 7]
    assert frame["link"].astype(str).tolist() == ["correlation"] * 3
    assert frame["launcher"].astype(str).tolist() == ["aten::mm"] * 3


def test_fractional_ids_are_refused_and_counted_never_cut(tmp_path: Path) -> None:
    """`"correlation": 1000.5` on launch and kernel (6 values): refused, not cut to 1000 — the kernels
    are linked by External id only. Kernels 2 and 3 hold 1001.2 and 1001.7 on a launch of 1001: neither
    is linked to it by correlation."""
    launch_args = [{"correlation": 1000.5}, {}, {}]
    kernel_args = [{"correlation": 1000.5}, {"correlation": 1001.2}, {"correlation": 1001.7}]
    frame, warnings = _ingest(tmp_path, _trace(launch_args=launch_args, kernel_args=kernel_args))
    assert len(warnings) == 1
    assert warnings[0].endswith(f"4 values {WARNING} were ignored (correlation 4)")
    assert frame["correlation"].isna().all()
    assert frame["link"].astype(str).tolist() == ["external id"] * 3


def test_a_fractional_device_and_stream_are_refused_then_read_from_pid_and_tid(tmp_path: Path) -> None:
    """`"device": 0.5`, `"stream": 7.25` (pid 0, tid 7): 6 values refused and counted; the kernels'
    device and stream are then their pid and tid, as for a GPU activity that writes none."""
    kernel_args = [{"device": 0.5, "stream": 7.25}] * 3
    frame, warnings = _ingest(tmp_path, _trace(kernel_args=kernel_args))
    assert len(warnings) == 1
    assert warnings[0].endswith(f"6 values {WARNING} were ignored (device 3, stream 3)")
    assert frame["device"].tolist() == [0, 0, 0]
    assert frame["stream"].tolist() == [7, 7, 7]
