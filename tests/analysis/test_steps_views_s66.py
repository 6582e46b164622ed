"""Campaign AX: `diff --per-step` divides by step rows, not by distinct step numbers (class 2),
and the report timeline's step bands are steps.parquet's windows, or say what they are (class 6).
Traces written here; expected values read off them by hand (docs/efficiency.md, "Which step")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kernel_atlas.analysis.views import BANDS_SPANS, BANDS_STEPS, ViewsFold, kernel_views
from kernel_atlas.cli import app
from kernel_atlas.store.outputs import load_kernels

runner = CliRunner()
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"


def _trace(steps: list[tuple[int, float, float]], kernels: list[tuple[float, float, float]]) -> dict[str, Any]:
    """`ProfilerStep#N` ranges (N, start, duration) on thread 1, and 100-series kernels on
    device 0 (launch, start, duration), each launched by a 2 µs call inside a 4 µs `aten::mul`."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for n, ts, dur in steps
    ]
    for c, (launch, ts, dur) in enumerate(kernels, 1):
        ids = {"correlation": c, "External id": c}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": launch - 1, "dur": 4,
             "args": {"External id": c}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch, "dur": 2,
             "args": ids},
            {"ph": "X", "cat": "kernel", "name": MUL, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {**ids, "device": 0, "stream": 7}},
        ]  # fmt: skip
    return {"traceEvents": events}


def _ingest(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / f"{name}.atlas"
    result = runner.invoke(app, ["ingest", str(path), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


# #1 [0, 1000), #2 [1000, 2000), #3 [2000, 3000)
THREE = _trace(
    [(1, 0, 1000), (2, 1000, 1000), (3, 2000, 1000)],
    [(100, 200, 100), (900, 1100, 300), (1100, 1500, 100), (1900, 2100, 200), (2100, 2400, 50), (2200, 2500, 50)],
)


def test_per_step_divides_by_step_rows_when_numbers_repeat(tmp_path: Path) -> None:
    # A: #1 #2 #1 #2 (a profiler restarted), kernels of 100, 200, 300, 400 µs launched one in each:
    # 4 step rows, 1000 µs, so 250 µs a step (had been 1000 / 2 distinct numbers = 500)
    a = _ingest(tmp_path, "a", _trace([(1 + s % 2, 1000 * s, 1000) for s in range(4)],
                                      [(1000 * s + 100, 1000 * s + 200, 100 * (s + 1)) for s in range(4)]))  # fmt: skip
    # B: THREE, 800 µs of kernels in 3 steps
    b = _ingest(tmp_path, "b", THREE)
    md = tmp_path / "d.md"
    result = runner.invoke(app, ["diff", str(a), str(b), "--per-step", "--json", "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    category = [r for r in json.loads(result.stdout) if r["level"] == "category"]
    assert sum(r["a_us"] for r in category) == 250.0
    assert round(sum(r["b_us"] for r in category), 6) == round(800 / 3, 6)
    assert "A 4 steps, B 3 steps" in md.read_text()


def test_the_timeline_bands_are_the_step_windows(tmp_path: Path) -> None:
    # THREE: step 1's last kernel [1100, 1400) stretches it to 1400; step 2 from there to its last
    # kernel's end 2300; step 3 from there to its range's end 3000 (its kernels end at 2550)
    out = _ingest(tmp_path, "three", THREE)
    summary = json.loads((out / "summary.json").read_text())
    kernels = load_kernels(out)
    views = kernel_views(kernels, summary=summary)
    bands = views.timeline.steps
    assert bands.to_dict("list") == {"step": [1, 2, 3], "start": [0.0, 1400.0, 2300.0], "end": [1400.0, 2300.0, 3000.0]}
    assert views.timeline_note == BANDS_STEPS
    # without the summary: the kernels' spans per number — [200, 1400), [1500, 2300), [2400, 2550)
    # —, and the page says that is what they are
    spans = kernel_views(kernels)
    assert spans.timeline.steps[["start", "end"]].to_numpy().tolist() == [[200, 1400], [1500, 2300], [2400, 2550]]
    assert spans.timeline_note == BANDS_SPANS and "not steps.parquet's windows" in BANDS_SPANS
    fold = ViewsFold()
    fold.add(0, views)
    assert fold.result().timeline_note == BANDS_STEPS


def test_the_reports_timeline_draws_the_step_windows(tmp_path: Path) -> None:
    """What `atlas report` draws, not only what `kernel_views` can: the report's views are built
    with the run's summary, so the page's bands are steps.parquet's windows (they had been each
    number's span of activities, which overlap on a100_cudagraph_rank0)."""
    from kernel_atlas.report.build import build_report

    out = _ingest(tmp_path, "three", THREE)
    report = build_report(out)
    bands = report.views.timeline.steps
    assert bands[["start", "end"]].to_numpy().tolist() == [[0, 1400], [1400, 2300], [2300, 3000]]
    assert report.views.timeline_note == BANDS_STEPS
