"""One device per lane, filter and page (campaign BI, classes 3–5), on hand-built traces: the
timeline's lanes and the stream filter of one process driving two GPUs that both have a stream
7; the dashboard's findings beside its own peaks after `atlas report --device`; the notes of an
ingest on first use (a read-only traces folder) said, and its fallback folder the caller's.
Every expected value is worked out from the trace by hand."""

from __future__ import annotations

import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernel_atlas.analysis.views import kernel_views
from kernel_atlas.ingest.fleet import output_for
from kernel_atlas.report import dashboard as dash
from kernel_atlas.report.html import timeline_figure
from tests.support.hostile import cli

H100 = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9, "numSms": 132}
GEMM = "ampere_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()"
MM = ("aten::mm", [[64, 128], [128, 256]])
ADD_OP = ("aten::add", [[64, 256], [64, 256]])


def _trace(path: Path, kernels: list[tuple[str, tuple[str, list], float, float, int]]) -> Path:
    """A Kineto trace of one process: per kernel (name, (op, input dims), ts, dur, device) the
    CPU op (float operands), its launch and the kernel on stream 7 of that device; one H100
    described per device."""
    events: list[dict[str, Any]] = []
    for i, (name, (op, dims), ts, dur, device) in enumerate(kernels):
        ids = {"correlation": 100 + i, "External id": 1000 + i}
        args = {"External id": ids["External id"], "Input Dims": dims, "Input type": ["float"] * len(dims)}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": ts - 12, "dur": 8, "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts - 10}
            | {"dur": 2, "args": ids},
            {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur}
            | {"args": {**ids, "device": device, "stream": 7}},
        ]
    devices = sorted({k[4] for k in kernels})
    doc = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": d, **H100} for d in devices]}
    path.write_text(json.dumps(doc))
    return path


# device 0: the gemm 20–50 µs; device 1: a gemm 25–35 µs and the add 60–65 µs; all on stream 7
TWO_GPUS = [(GEMM, MM, 20.0, 30.0, 0), (GEMM, MM, 25.0, 10.0, 1), (ADD, ADD_OP, 60.0, 5.0, 1)]


def _ingest(tmp_path: Path, name: str, kernels: list) -> Path:
    out = tmp_path / f"{name}.atlas"
    result = cli("ingest", _trace(tmp_path / f"{name}.json", kernels), "-o", out, "-q")
    assert result.code == 0, result.output
    return out


def _lanes(figure: Any) -> dict[str, list[tuple[float, float]]]:
    """The timeline's bars per lane, (start, length) in µs from the first activity's start: of
    report.html's figure (a dict) or the dashboard's (plotly's)."""
    if isinstance(figure, dict):
        heading, traces = figure["layout"]["title"]["text"], [(t["base"], t["x"], t["y"]) for t in figure["data"]]
    else:  # plotly's own arrays (its JSON writes them as typed `bdata`)
        heading, traces = figure.layout.title.text, [(t.base, t.x, t.y) for t in figure.data]
    scale = 1e3 if "(ms," in heading else 1.0
    lanes: dict[str, list[tuple[float, float]]] = {}
    for starts, lengths, ys in traces:
        base, width = np.asarray(starts, dtype=float), np.asarray(lengths, dtype=float)
        for lane, b, w in zip(ys, base, width, strict=True):
            lanes.setdefault(str(lane), []).append((round(b * scale, 6), round(w * scale, 6)))
    return {lane: sorted(bars) for lane, bars in lanes.items()}


# --- class 3: lanes and stream filters of one rank's two GPUs ------------------------------------


def test_the_timeline_draws_each_gpus_stream_7_in_its_own_lane(tmp_path: Path) -> None:
    run = dash.load_run(_ingest(tmp_path, "twodev", TWO_GPUS))
    # from the first start (20 µs): device 0's gemm 0–30 µs; device 1's gemm 5–15 µs and add 40–45 µs
    expected = {"device 0 stream 7": [(0.0, 30.0)], "device 1 stream 7": [(5.0, 10.0), (40.0, 5.0)]}
    report_timeline = timeline_figure(kernel_views(run.kernels).timeline)  # report.html's
    assert _lanes(report_timeline) == expected
    assert _lanes(dash.figures(run, run.kernels)["timeline"]) == expected  # the dashboard's
    # one device keeps the plain label
    one = dash.load_run(_ingest(tmp_path, "onedev", [(GEMM, MM, 20.0, 30.0, 0), (ADD, ADD_OP, 60.0, 5.0, 0)]))
    assert _lanes(timeline_figure(kernel_views(one.kernels).timeline)) == {"7": [(0.0, 30.0), (40.0, 5.0)]}


def test_the_stream_filter_keeps_each_gpus_stream_apart(tmp_path: Path) -> None:
    run = dash.load_run(_ingest(tmp_path, "twodev", TWO_GPUS))
    streams = dash.choices(run.kernels)["stream"]
    assert [str(s) for s in streams] == ["device 0 stream 7", "device 1 stream 7"]  # the dropdown's labels
    assert dash.filter_kernels(run.kernels, stream=streams[0])["dur_us"].tolist() == [30.0]
    assert sorted(dash.filter_kernels(run.kernels, stream=streams[1])["dur_us"].tolist()) == [5.0, 10.0]
    assert sorted(dash.filter_kernels(run.kernels, stream=(1, 7))["dur_us"].tolist()) == [5.0, 10.0]
    # a bare number: stream 7 of every device, as before
    assert sorted(dash.filter_kernels(run.kernels, stream=7)["dur_us"].tolist()) == [5.0, 10.0, 30.0]
    one = dash.load_run(_ingest(tmp_path, "onedev", [(GEMM, MM, 20.0, 30.0, 0)]))
    assert dash.choices(one.kernels)["stream"] == [7]  # one device: the plain number


# --- class 4: one device per dashboard page ------------------------------------------------------


def _findings(snippet: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", snippet))


def test_the_dashboard_findings_use_the_pages_peaks_not_a_projected_reports(tmp_path: Path) -> None:
    # two sgemm calls of [64,128]×[128,256] fp32, 10 and 20 µs: 2·64·128·256 = 4,194,304 FLOP
    # (0.0627 µs at the H100's 66.9 TF/s fp32) and (64·128 + 128·256 + 64·256)·4 = 229,376 B
    # (0.0685 µs at 3.35 TB/s) per call: 0.137 µs attainable of 30 µs, 0.46 % → "0.5 %" on an
    # H100 page; on an MI300X (5.3 TB/s: 0.0433 µs a call) 0.29 % → "0.3 %"
    out = _ingest(tmp_path, "single", [(GEMM, MM, 20.0, 10.0, 0), (GEMM, MM, 40.0, 20.0, 0)])
    result = cli("report", out, "--device", "mi300x")
    assert result.code == 0, result.output
    assert json.loads((out / "report.json").read_text())["projection"] is True
    run = dash.load_run(out)
    assert run.device is not None and run.device.key.startswith("h100")
    page = _findings(dash.findings_html(run))
    assert "0.5 %" in page and "0.3 %" not in page, page
    assert "projection on AMD Instinct MI300X" in page, page
    # the page with the report's own device: report.json's findings, the projection's 0.3 %
    projected = _findings(dash.findings_html(dash.load_run(out, device="mi300x")))
    assert "0.3 %" in projected and "0.5 %" not in projected and "projection on" not in projected, projected


# --- class 5: an ingest on first use says what it did, and writes where the caller is ------------


def _read_only_trace(tmp_path: Path) -> tuple[Path, Path]:
    shared, work = tmp_path / "shared", tmp_path / "work"
    shared.mkdir()
    work.mkdir()
    trace = _trace(shared / "ro.json", [(GEMM, MM, 20.0, 10.0, 0)])
    shared.chmod(0o555)  # read-only, for root too (the mode says: not here)
    return trace, work


def test_load_run_of_a_trace_says_the_notes_of_its_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, work = _read_only_trace(tmp_path)
    monkeypatch.chdir(work)
    try:
        run = dash.load_run(trace)
    finally:
        trace.parent.chmod(0o755)
    note = f"{trace.parent} is read-only: writing to ./ro.atlas instead (`atlas ingest TRACE -o OUT` chooses the output folder)"
    assert run.notes == [note]
    assert f"warning: {note}" in capsys.readouterr().err
    assert (work / "ro.atlas" / "summary.json").is_file()


def test_the_dashboard_command_prints_the_notes_of_its_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_atlas.report import notebooks

    trace, work = _read_only_trace(tmp_path)
    monkeypatch.chdir(work)
    # the notebook itself is not what is tested here (tests/report/test_notebooks.py runs it)
    monkeypatch.setattr(notebooks, "execute", lambda name, env: {"env": env})
    titles: list[str] = []
    monkeypatch.setattr(
        notebooks, "to_html", lambda executed, html, title: titles.append(title) or Path(html).write_text("page")
    )
    try:
        result = cli("dashboard", trace, "--html", work / "page.html")
    finally:
        trace.parent.chmod(0o755)
    assert result.code == 0, result.output
    assert f"warning: {trace.parent} is read-only: writing to ./ro.atlas instead" in " ".join(result.stderr.split())
    assert titles == ["Kernel Atlas dashboard: ro.atlas"]  # the page's <title> had been "Notebook"


def test_in_a_notebook_the_fallback_folder_is_the_callers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a notebook's kernel runs in notebooks/ and keeps the shell's folder in $PWD: the output goes
    # there, named by its absolute path (a bare `ro.atlas` is notebooks/ro.atlas to the kernel)
    trace, work = _read_only_trace(tmp_path)
    kernel_folder = tmp_path / "notebooks"
    kernel_folder.mkdir()
    monkeypatch.chdir(kernel_folder)
    monkeypatch.setenv("PWD", str(work))
    running = types.SimpleNamespace(IPKernelApp=types.SimpleNamespace(initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "ipykernel.kernelapp", running)  # a kernel runs this
    try:
        out, note = output_for(str(trace), "-o sets the output folder")
        # ipykernel imported but no kernel running (a process that executed a notebook): the
        # current folder, as the CLI has it — its $PWD may be another's
        monkeypatch.setitem(sys.modules, "ipykernel.kernelapp", types.ModuleType("ipykernel.kernelapp"))
        sys.modules["ipykernel.kernelapp"].IPKernelApp = types.SimpleNamespace(initialized=lambda: False)
        assert output_for(str(trace), "-o sets the output folder")[0] == "ro.atlas"
    finally:
        trace.parent.chmod(0o755)
    assert out == str(work / "ro.atlas")
    assert note == f"{trace.parent} is read-only: writing to {work}/ro.atlas instead (-o sets the output folder)"
    assert not os.listdir(kernel_folder)
