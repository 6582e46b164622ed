"""The critical-path figure counts time from where the path starts (report.json `span.start_us`),
not from its first timed segment (campaign BY): the example trace's path begins with a
`cudaDeviceSynchronize` that weighs nothing, 219.213 µs before its first segment, and every start in
the figure had read 0.219 ms early while the text above it said the path spans 4.27 ms."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.report.critical_html import path_picture
from tests.support.traces import EXAMPLE


def test_the_figure_starts_where_the_path_starts(tmp_path: Path) -> None:
    trace = tmp_path / "ex.json.gz"
    shutil.copy(EXAMPLE, trace)
    result = CliRunner().invoke(app, ["report", str(trace)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = tmp_path / "ex.atlas"
    span = json.loads((out / "report.json").read_text())["critical_path"]["span"]
    # the trace: the path's first point is the end of cudaDeviceSynchronize at …333072.495 µs, its
    # first timed segment aten::slice at …333291.708 µs; it ends at …337338.674 µs
    assert span["start_us"] == 1419247333072.495 and span["end_us"] == 1419247337338.674
    page = (out / "report.html").read_text()
    figure = page[page.index('"critical",') : page.index("Critical path of")]  # Plotly.newPlot("critical", …)
    bases = [float(b) for group in re.findall(r'"base":\[([^\]]*)\]', figure) for b in group.split(",") if b]
    assert round(min(bases), 6) == 0.219213  # ms from the path's start: 333291.708 − 333072.495 µs
    assert round(max(bases), 3) <= 4.266  # nothing past the path's end (4266.179 µs from its start)


def test_a_start_after_the_first_segment_or_none_is_the_first_segment() -> None:
    segs = pd.DataFrame(
        {"rank": [0, 0], "stream": [7, 7], "thread": [None, None], "bound": ["gpu", "gpu"], "name": ["a", "b"]}
        | {"start_us": [100.0, 150.0], "dur_us": [50.0, 10.0], "seq": [0, 1]}
    )
    assert path_picture(segs, 40.0).origin_us == 40.0
    assert path_picture(segs).origin_us == 100.0
    assert path_picture(segs, float("nan")).origin_us == 100.0
    assert path_picture(segs, 120.0).origin_us == 100.0  # never after a drawn segment
