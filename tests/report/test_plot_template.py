"""The pages' figures carry plotly's default template as a graph object would (`plot._template`),
read from plotly's own JSON file while nobody has touched it, without importing plotly's graph
objects."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("plotly")


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_default_template_is_plotlys_own_without_its_graph_objects() -> None:
    out = _run(
        """
        import sys
        from kernel_atlas.report.plot import _template
        drawn = _template()
        print("graph objects imported:", "plotly.graph_objs.layout._template" in sys.modules)
        import plotly.io as pio
        print("equal:", drawn == pio.templates["plotly"].to_plotly_json())
        print("colorway:", drawn["layout"]["colorway"][0])
        """
    )
    assert out.splitlines() == ["graph objects imported: False", "equal: True", "colorway: #636efa"]


def test_a_template_the_user_chose_or_changed_is_the_one_drawn() -> None:
    out = _run(
        """
        import plotly.io as pio
        from kernel_atlas.report import plot
        pio.templates.default = "plotly_dark"
        print(plot._template()["layout"]["paper_bgcolor"])
        plot._template.cache_clear()
        pio.templates.default = "plotly"
        pio.templates["plotly"].layout.font.size = 31
        print(plot._template()["layout"]["font"]["size"])
        plot._template.cache_clear()
        pio.templates.default = "plotly+presentation"
        print(plot._template()["layout"]["font"]["size"])
        """
    )
    assert out.splitlines() == ["rgb(17,17,17)", "31", "18"]
