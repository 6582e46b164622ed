"""Plotly figures as plain dicts, as plotly.js reads them: `{"data": [trace, …], "layout": {…}}`.

plotly's graph objects check every value as it is set and copy every array when written: on a
500 MB trace that was ~0.6 s of the report's ~1 s of figures. The pages' figures are made and
written as dicts, unchecked (`figure`, `div`); tests check each against plotly's schema as it is
made (`CHECKED`), so that a misspelt property fails there and not in a reader's browser. A
notebook shows one as a plotly figure (`widget`).
"""

from __future__ import annotations

import html
import json
import pkgutil
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

Figure = dict[str, Any]
# tests set it: every figure is then checked against plotly's schema as it is made (a ValueError
# names a property plotly.js does not know or a value it does not take)
CHECKED = False


def values(column: pd.Series | np.ndarray | list[Any]) -> np.ndarray | list[Any]:
    """A figure's data array: a Series as its values (plotly.js reads arrays, not indexed series)."""
    return column.to_numpy() if isinstance(column, pd.Series) else column


def title(text: str) -> dict[str, str]:
    return {"text": text}


def label(value: object) -> str:
    """Text from a trace for a figure's labels, ticks, legend or hover: plotly.js draws these as
    its subset of HTML (`<a href>`, `<b>`, `<span style>`) and one between `$` as TeX, so they
    are escaped (`&lt;`, `&#36;`) and show as written."""
    return html.escape(str(value), quote=False).replace("$", "&#36;")


def figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> Figure:
    """A figure of `data` (each a trace: `{"type": "bar", …}`) and `layout`."""
    spec = {"data": data, "layout": layout}
    if CHECKED:
        widget(spec, checked=True)
    return spec


def div(fig: Figure, div_id: str, include_plotlyjs: bool = False) -> str:
    """The figure as an HTML `<div>` (with plotly.js inlined before it, `include_plotlyjs`), in
    plotly's default template as a graph object would be (a dict is drawn without one)."""
    import plotly.io as pio  # here: the terminal report does not need plotly

    drawn = {**fig, "layout": {"template": _template(), **fig.get("layout", {})}}
    return pio.to_html(drawn, full_html=False, include_plotlyjs=include_plotlyjs, div_id=div_id, validate=False)


@cache
def _template() -> dict[str, Any]:
    """plotly's default template as a graph object carries it. A built-in template nobody has
    touched yet is read from the JSON file plotly itself would load it from: building it as
    graph objects imports them all (0.06–0.14 s of a report)."""
    import plotly.io as pio

    name = pio.templates.default
    kept = getattr(pio.templates, "_templates", None)  # name → template; a bare object() until loaded
    if isinstance(name, str) and kept is not None and type(kept.get(name)) is object:
        try:
            text = pkgutil.get_data("plotly", f"package_data/templates/{name}.json")
        except OSError:
            text = None
        if text:
            return json.loads(text)
    return pio.templates[name].to_plotly_json()


def widget(fig: Figure, checked: bool = False) -> go.Figure:
    """The figure as plotly's (for a notebook), its values `checked` or taken as they are."""
    import plotly.graph_objects as go

    return go.Figure(fig, _validate=checked)
