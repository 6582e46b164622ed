"""'What to fix first: nothing found that would save time' is said only where kernel headroom was
judged (campaign AT 3): on a GPU without peaks — vLLM's MI300X traces name it "" — no kernel is
judged, and the line had read as a verdict on the run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.cli import app

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 20}
    | {"args": {"External id": 1, "Input Dims": [[1024], [1024]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5, "dur": 5}
    | {"args": {"correlation": 1, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, add_kernel>"}
    | {"pid": 0, "tid": 7, "ts": 12, "dur": 10, "args": {"correlation": 1, "External id": 1, "device": 0, "stream": 7}},
]


def test_no_finding_on_a_gpu_without_peaks_says_headroom_was_not_judged(tmp_path: Path) -> None:
    # one kernel launched at 5, started at 12 on an empty stream: no wait, no stretch to graph;
    # no deviceProperties: no peaks, so no kernel's headroom is judged
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    result = CliRunner().invoke(app, ["report", str(trace)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert (
        "What to fix first: nothing found in the waits and launches; kernel headroom not judged: no peaks for "
        "this GPU (--device)" in result.output
    )
    page = (tmp_path / "t.atlas" / "report.html").read_text()
    assert "Nothing found in the waits and launches; kernel headroom not judged" in page
    # with peaks (--device), the same run is judged: the plain words
    result = CliRunner().invoke(
        app, ["report", str(tmp_path / "t.atlas"), "--device", "h100-sxm"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "kernel headroom not judged" not in result.output
