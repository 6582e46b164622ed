"""What the report page draws of wide runs (issue 27): the whole-window timeline's step shading
(`html._step_bands`: one band per step, or runs of consecutive steps beyond MAX_STEP_BANDS) and
the roofline table (at most MAX_TABLE_ROWS rows, said on the page)."""

from __future__ import annotations

import pandas as pd

from kernel_atlas.report import html


def _steps(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"step": range(1, n + 1), "start": [10.0 * i for i in range(n)], "end": [10.0 * i + 9 for i in range(n)]}
    )


def test_few_steps_are_one_band_each() -> None:
    bands = html._step_bands(_steps(3))
    assert [(b.label, b.start, b.end, b.shade) for b in bands] == [
        ("step 1", 0.0, 9.0, 1),
        ("step 2", 10.0, 19.0, 0),
        ("step 3", 20.0, 29.0, 1),
    ]


def test_many_steps_are_shaded_in_runs(monkeypatch) -> None:
    monkeypatch.setattr(html, "MAX_STEP_BANDS", 4)
    bands = html._step_bands(_steps(10))  # 10 steps, at most 4 bands: runs of 3
    assert [(b.label, b.start, b.end, b.shade) for b in bands] == [
        ("steps 1–3", 0.0, 29.0, 0),
        ("steps 4–6", 30.0, 59.0, 1),
        ("steps 7–9", 60.0, 89.0, 0),
        ("step 10", 90.0, 99.0, 1),
    ]
    shading = html._step_shading(_steps(10), origin=0.0, scale=1.0)
    assert len(shading["shapes"]) == len(shading["annotations"]) == 4


def test_the_page_table_holds_at_most_max_table_rows(monkeypatch, tmp_path) -> None:
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths
    from kernel_atlas.report.build import build_report
    from tests.support.traces import EXAMPLE

    out = tmp_path / "bert.atlas"
    write_outputs(ingest_paths([EXAMPLE]), out)
    analysis = build_report(out).analysis
    monkeypatch.setattr(html, "MAX_TABLE_ROWS", 3)
    table = html.roofline_table(analysis)
    assert f"The first 3 of {len(analysis.roofline):,} rows" in table
    assert table.count("<tr") - table.count("<tr class='detail") <= 3 + 2  # 3 rows, header rows aside
    monkeypatch.setattr(html, "MAX_TABLE_ROWS", len(analysis.roofline))
    assert "The first" not in html.roofline_table(analysis)
