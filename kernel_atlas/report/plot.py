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
from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kernel_atlas.report.fit import ELLIPSIS, trim

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


def apart(texts: Sequence[str], width: int) -> list[str]:
    """Each text on at most about `width` characters, cut in the middle (its start and its end
    kept); texts that would then read alike but are not the same show, between their start and
    end, the part where they first differ — two 500-character kernel names that differ only past
    character 480 had one hover between them."""
    cut = [trim(text, width, middle=True) for text in texts]
    alike: dict[str, list[int]] = {}
    for i, text in enumerate(cut):
        alike.setdefault(text, []).append(i)
    edge = max(width // 5, 1)
    for rows in alike.values():
        distinct = {texts[i] for i in rows}
        if len(distinct) < 2:
            continue
        differ = _shared_start(min(distinct), max(distinct))  # where the first of them tells apart
        for i in rows:
            text = texts[i]
            start = max(differ - edge, edge)
            middle = text[start : start + width - 2 * edge]
            head = text[:edge] + (ELLIPSIS if start > edge else "")
            tail = text[start + len(middle) :]
            cut[i] = head + middle + (ELLIPSIS + text[-edge:] if len(tail) > edge else tail)
    return cut


def _shared_start(a: str, b: str) -> int:
    """How many characters `a` and `b` share at their start (of a sorted set of texts, its
    first and last share no more than all of them do)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def numbered_alike(labels: Sequence[str]) -> list[str]:
    """`labels`, those that occur more than once numbered ` [i/n]` in their order: different
    rows never share a label (the short name of two kernels that differ in their template
    arguments is one)."""
    counts = Counter(labels)
    seen: Counter[str] = Counter()
    out = []
    for text in labels:
        if counts[text] > 1:
            seen[text] += 1
            text = f"{text} [{seen[text]}/{counts[text]}]"
        out.append(text)
    return out


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
