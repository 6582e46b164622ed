"""What ingest says matches what it counted (campaign AP 9).

* `shapes_inferred.not_inferred` and the terminal line count the kernels launched before the
  profiling window that were left without shapes — not a kernel whose launch was lost inside
  the window, nor one of a trace that records no launches at all ("launched before the window:
  …; 2 left without" counted a kernel issued inside it). `kernels` still counts every kernel that
  borrowed, whatever kept its launch out of the trace (the trust line reads it so).
* A file that is valid JSON but no object or list (`"hello"`, `123`) is said to be JSON, not
  "not JSON".
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.infer import LINK_INFERRED, WHY_NO_SOURCE, inferred_summary_line
from kernel_atlas.ingest.link import UNLINKED_LAUNCH_LOST, UNLINKED_NO_LAUNCH, UNLINKED_NO_LAUNCHES
from kernel_atlas.ingest.pipeline import ingest_trace


def _x(name: str, cat: str, ts: float, dur: float, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _kernel(name: str, ts: float, dur: float, correlation: int, grid: list[int]) -> dict[str, Any]:
    return _x(name, "kernel", ts, dur, 0, 7, device=0, stream=7, correlation=correlation, grid=grid, block=[256, 1, 1])


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _window_trace(tmp_path: Path) -> Path:
    """The first recorded launch is correlation 1001 (the GEMM's). `early` (999) was launched
    before the window; `lost` (1500) and `lost_gemm` (1600) inside it, their launches not
    recorded. Neither `early` nor `lost` has a linked twin; `lost_gemm` is the GEMM's twin (same
    name, grid and block) and borrows its op and shapes."""
    return _write(
        tmp_path / "t.json",
        [
            _x("aten::mm", "cpu_op", 100, 50, 1, 1, **{"External id": 7, "Input Dims": [[64, 128], [128, 256]]}),
            _x("cudaLaunchKernel", "cuda_runtime", 110, 5, 1, 1, correlation=1001, **{"External id": 7}),
            _kernel("volta_sgemm_128x64_nn", 200, 20, 1001, [4, 2, 1]),
            _kernel("early_kernel", 150, 8, 999, [1, 1, 1]),
            _kernel("lost_kernel", 700, 12, 1500, [1, 1, 1]),
            _kernel("volta_sgemm_128x64_nn", 800, 30, 1600, [4, 2, 1]),
        ],
    )


def test_only_kernels_launched_before_the_window_are_counted_left_without(tmp_path: Path) -> None:
    result = ingest_trace(_window_trace(tmp_path))
    links = dict(zip(result.frame["ts_us"].astype(float), result.frame["link"].astype(str), strict=True))
    assert links[150.0] == UNLINKED_NO_LAUNCH and links[700.0] == UNLINKED_LAUNCH_LOST
    assert links[800.0] == LINK_INFERRED
    inferred = result.facts["shapes_inferred"]
    # borrowed: lost_gemm (30 µs) of 70 µs of kernels; left without: early alone (lost was inside)
    assert inferred["kernels"] == 1 and inferred["time_us"] == 30.0
    assert inferred["pct_of_kernel_time"] == pytest.approx(100 * 30 / 70)
    assert inferred["not_inferred"] == {WHY_NO_SOURCE: 1}
    assert inferred_summary_line(inferred) == (
        "launch not in the trace: shapes inferred for 1 kernel (42.9% of kernel time, same kernel, grid and block "
        "linked with one signature); 1 launched before the window left without (ambiguous or never linked)"
    )


def test_a_trace_without_launches_has_none_launched_before_the_window(tmp_path: Path) -> None:
    """GPU activities alone (no runtime events): none is known to precede the window, and no
    line says 'launched before the window … 2 left without'."""
    path = _write(tmp_path / "g.json", [_kernel("k1", 10, 5, 1, [1, 1, 1]), _kernel("k2", 20, 5, 2, [2, 1, 1])])
    result = ingest_trace(path)
    assert set(result.frame["link"].astype(str)) == {UNLINKED_NO_LAUNCHES}
    assert result.facts["shapes_inferred"]["not_inferred"] == {}
    assert result.facts["shapes_inferred"]["kernels"] == 0
    assert inferred_summary_line(result.facts["shapes_inferred"]) is None


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b'"hello"', "a string"),
        (b"123", "a number"),
        (b" 1e999\n", "a number"),
        (b"null\n", "`null`"),
        (b"true", "`true`"),
    ],
)
@pytest.mark.parametrize("packed", [False, True])
def test_json_that_is_no_trace_is_called_json(tmp_path: Path, content: bytes, what: str, packed: bool) -> None:
    path = tmp_path / ("s.json.gz" if packed else "s.json")
    path.write_bytes(gzip.compress(content) if packed else content)
    with pytest.raises(AtlasError) as caught:
        ingest_trace(path)
    assert caught.value.problem == f"not a Chrome/Kineto trace: the file is JSON, but {what}, not an object or a list"


@pytest.mark.parametrize("content", [b"hello world", b'"hello" "x"', b"123abc", b"NaN", b'"never closed'])
def test_text_that_is_no_json_is_still_not_json(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    with pytest.raises(AtlasError) as caught:
        ingest_trace(path)
    assert caught.value.problem == "not JSON: a Chrome/Kineto trace starts with '{' or '['"
