"""GPU activities written twice are read once (`ingest/repeats.py`), with a warning; activities
that only share a start are all kept. Values below are written by hand."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.store.outputs import load_kernels
from tests.support.hand_built import launch_and_kernel

runner = CliRunner()


def _trace(path: Path) -> Path:
    events = [
        *launch_and_kernel(10, 1, 1, "gemm_a", 100, 30),
        *launch_and_kernel(20, 2, 2, "gemm_b", 130, 20),
        *launch_and_kernel(30, 3, 3, "gemm_c", 150, 5),
    ]
    kernel_b = dict(events[3])
    events.append(dict(kernel_b))  # gemm_b written twice: one activity
    events.append({**kernel_b, "tid": 8, "args": {**kernel_b["args"], "stream": 8}})  # its start on another stream
    events.append({**kernel_b, "dur": 7})  # its start and stream, another duration: kept (not the same record)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_an_activity_written_twice_counts_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(_trace(tmp_path / "t.json")), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 GPU activity repeated an earlier one exactly" in result.output
    frame = load_kernels(out)
    assert len(frame) == 5  # 6 kernel events, one of them a repeat
    assert frame["dur_us"].sum() == 30 + 20 + 5 + 20 + 7
    assert sorted(frame.loc[frame["name"] == "gemm_b", "stream"].tolist()) == [7, 7, 8]
    # the kept row is linked to its launch as the first copy was
    assert (
        frame.loc[(frame["name"] == "gemm_b") & (frame["dur_us"] == 20), "launch"].tolist() == ["cudaLaunchKernel"] * 2
    )


def test_a_trace_without_repeats_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    events = [*launch_and_kernel(10, 1, 1, "k", 100, 30), *launch_and_kernel(20, 2, 2, "k", 100, 30)]
    events[3]["args"] = {**events[3]["args"], "stream": 9}  # the same start and duration on another stream
    path.write_text(json.dumps({"traceEvents": events}))
    result = runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "repeated" not in result.output
    assert len(load_kernels(tmp_path / "out")) == 2


def test_a_repeated_row_of_an_nsight_export_counts_once(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'gemm_a'), (2, 'gemm_b');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, globalPid,
            demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
            (1000, 4000, 0, 7, 1, 16777516, 1, 1, 1, 1, 1, 128, 1, 1),
            (5000, 6000, 0, 7, 2, 16777516, 2, 2, 1, 1, 1, 128, 1, 1),
            (5000, 6000, 0, 7, 2, 16777516, 2, 2, 1, 1, 1, 128, 1, 1);
        """
    )
    db.commit()
    db.close()
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 GPU activity repeated an earlier one exactly" in result.output
    frame = load_kernels(out)
    assert frame["dur_us"].tolist() == [3.0, 1.0]  # (4000 − 1000) ns and (6000 − 5000) ns
