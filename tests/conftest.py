"""Every test: the figures the report, diff and fleet pages draw are checked against plotly's
schema as they are made (`report.plot.CHECKED`; the tool itself builds them unchecked)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _checked_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_atlas.report import plot

    monkeypatch.setattr(plot, "CHECKED", True)
