"""Every test: the figures the report, diff and fleet pages draw are checked against plotly's
schema as they are made (`report.plot.CHECKED`; the tool itself builds them unchecked)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Every process the tests start runs tests/support/startup/sitecustomize.py (see there: a 2.7 s
# import that no test needs, left out); this one leaves it out the same way.
_SITE = str(Path(__file__).resolve().parent / "support" / "startup")
_OTHERS = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _SITE]
os.environ["PYTHONPATH"] = os.pathsep.join([_SITE, *_OTHERS])  # once: a worker inherits it from the runner
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _checked_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_atlas.report import plot

    monkeypatch.setattr(plot, "CHECKED", True)
