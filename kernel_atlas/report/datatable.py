"""A sortable, filterable HTML table with expandable rows, self-contained (no library, no network).

The rows travel as JSON (display text and sort value per cell, optional detail text per row);
a small script draws them. Click a header to sort (numbers largest first, click again to
reverse); type in the filter box to keep rows containing every word (`column:word` looks in one
column, e.g. `bound:memory`); click a row with ▸ to show its details (the call stack). At most
`PAGE` rows are drawn at a time; the count of matching rows is shown.
"""

from __future__ import annotations

import html
import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PAGE = 500


@dataclass(frozen=True)
class TableColumn:
    key: str  # used in `key:word` filters
    label: str
    numeric: bool = False
    title: str = ""  # header tooltip
    wrap: bool = True  # False: short words kept on one line (op names, status)


# what JSON text inside a <script> must not hold as it is: `<!--<script>` in a kernel name put the
# HTML parser in a state where the element's own `</script>` no longer closes it (the rest of the
# page swallowed); as \u escapes JSON.parse reads the same text
_SCRIPT_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))


def script_json(text: str) -> str:
    """JSON text safe inside an HTML <script> element: `<`, `>` and `&` written as \\u escapes
    (one `str.replace` each: a scan in C, where `str.translate` looked every character up in a
    mapping — 0.1 s of a 500 MB trace's page; no escape holds another's character)."""
    for unsafe, escape in _SCRIPT_UNSAFE:
        text = text.replace(unsafe, escape)
    return text


def _sort_value(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, numbers.Real):  # NaN and ±inf (a zero-length kernel's rate) sort as empty
        return float(value) if math.isfinite(float(value)) else None
    return str(value)


STYLE = """
.atlas-table-wrap{margin:8px 0 32px 0}
.atlas-table-wrap input{width:28em;padding:4px 6px;margin-right:8px}
.atlas-table-wrap .count{color:#666;font-size:12px}
table.atlas-table{border-collapse:collapse;font-size:12px;margin-top:6px}
table.atlas-table th{position:sticky;top:0;background:#f3f3f3;cursor:pointer;text-align:left;
  padding:4px 6px;border-bottom:1px solid #bbb;white-space:nowrap;user-select:none}
table.atlas-table th[aria-sort=descending]::after{content:" ▼"}
table.atlas-table th[aria-sort=ascending]::after{content:" ▲"}
table.atlas-table td{padding:3px 6px;border-bottom:1px solid #eee;vertical-align:top;max-width:30em;
  overflow-wrap:anywhere}
table.atlas-table td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
table.atlas-table td.nowrap{white-space:nowrap}
table.atlas-table tr.has-detail td:first-child::before{content:"▸ ";color:#888}
table.atlas-table tr.has-detail.open td:first-child::before{content:"▾ "}
table.atlas-table tr.has-detail{cursor:pointer}
table.atlas-table tr.detail td{background:#fafafa;font-family:monospace;white-space:pre-wrap;font-size:11px}
"""

SCRIPT = r"""
(function () {
  "use strict";
  function matches(row, terms, keys) {
    return terms.every(function (term) {
      var colon = term.indexOf(":");
      if (colon > 0) {
        var col = keys.indexOf(term.slice(0, colon));
        if (col >= 0) return String(row.t[col]).toLowerCase().indexOf(term.slice(colon + 1)) >= 0;
      }
      return row.all.indexOf(term) >= 0;
    });
  }
  function compare(a, b, col, dir) {
    var x = a.v[col], y = b.v[col];
    if (x === null && y === null) return a.i - b.i;
    if (x === null) return 1;  // empty cells last, whatever the direction
    if (y === null) return -1;
    if (x < y) return -dir;
    if (x > y) return dir;
    return a.i - b.i;
  }
  function setup(root) {
    var data = JSON.parse(root.querySelector("script[type='application/json']").textContent);
    var keys = data.columns.map(function (c) { return c.key; });
    data.rows.forEach(function (row, i) { row.i = i; row.all = row.t.join(" ").toLowerCase(); });
    var table = root.querySelector("table"), tbody = table.querySelector("tbody");
    var input = root.querySelector("input"), count = root.querySelector(".count");
    var state = {col: data.sort, dir: -1, terms: []};
    function draw() {
      var shown = data.rows.filter(function (r) { return matches(r, state.terms, keys); });
      if (state.col !== null) shown.sort(function (a, b) { return compare(a, b, state.col, state.dir); });
      var page = shown.slice(0, data.page);
      var parts = [];
      page.forEach(function (row) {
        var cls = row.d !== null ? " class='has-detail'" : "";
        parts.push("<tr data-row='" + row.i + "'" + cls + ">");
        row.t.forEach(function (text, c) {
          var column = data.columns[c];
          var num = column.numeric ? " class='num'" : (column.wrap ? "" : " class='nowrap'");
          parts.push("<td" + num + ">" + escapeHtml(text) + "</td>");
        });
        parts.push("</tr>");
      });
      tbody.innerHTML = parts.join("");
      count.textContent = (shown.length < data.rows.length ? shown.length + " of " : "") + data.rows.length +
        " rows" + (page.length < shown.length ? ", the first " + page.length + " shown: filter to narrow" : "");
      table.querySelectorAll("th").forEach(function (th, c) {
        if (c === state.col) th.setAttribute("aria-sort", state.dir < 0 ? "descending" : "ascending");
        else th.removeAttribute("aria-sort");
      });
    }
    function escapeHtml(text) {
      return String(text).replace(/[&<>"']/g, function (ch) {
        return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[ch];
      });
    }
    table.querySelectorAll("th").forEach(function (th, c) {
      th.addEventListener("click", function () {
        if (state.col === c) state.dir = -state.dir;
        else { state.col = c; state.dir = data.columns[c].numeric ? -1 : 1; }
        draw();
      });
    });
    input.addEventListener("input", function () {
      state.terms = input.value.toLowerCase().split(/\s+/).filter(function (t) { return t.length > 0; });
      draw();
    });
    tbody.addEventListener("click", function (event) {
      var tr = event.target.closest("tr.has-detail");
      if (!tr) return;
      var next = tr.nextElementSibling;
      if (next && next.classList.contains("detail")) { next.remove(); tr.classList.remove("open"); return; }
      var row = data.rows[Number(tr.getAttribute("data-row"))];
      var detail = document.createElement("tr");
      detail.className = "detail";
      var cell = document.createElement("td");
      cell.colSpan = data.columns.length;
      cell.textContent = data.details[row.d];
      detail.appendChild(cell);
      tr.after(detail);
      tr.classList.add("open");
    });
    draw();
  }
  function init() { document.querySelectorAll(".atlas-table-wrap").forEach(setup); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
"""


def data_table(
    table_id: str,
    columns: Sequence[TableColumn],
    cells: Sequence[Sequence[tuple[str, Any]]],
    details: Sequence[str | None] | None = None,
    sort: int | None = None,
    placeholder: str = "filter: words, or column:word",
) -> str:
    """The HTML of one table. `cells[r][c]` is (display text, sort value); `details[r]` is shown
    when row r is expanded (identical details are stored once); `sort`: the column sorted first
    (descending)."""
    texts: list[str] = []
    index: dict[str, int] = {}
    rows = []
    for r, row in enumerate(cells):
        detail = details[r] if details is not None else None
        slot = None
        if detail:
            slot = index.setdefault(detail, len(texts))
            if slot == len(texts):
                texts.append(detail)
        rows.append({"t": [text for text, _ in row], "v": [_sort_value(v) for _, v in row], "d": slot})
    payload = {
        "columns": [{"key": c.key, "numeric": c.numeric, "wrap": c.wrap} for c in columns],
        "rows": rows,
        "details": texts,
        "sort": sort,
        "page": PAGE,
    }
    data = script_json(json.dumps(payload, separators=(",", ":"), allow_nan=False))
    header = "".join(f"<th title='{html.escape(c.title, quote=True)}'>{html.escape(c.label)}</th>" for c in columns)
    return (
        f"<div class='atlas-table-wrap' id='{html.escape(table_id, quote=True)}'>"
        f"<input type='search' placeholder='{html.escape(placeholder, quote=True)}' aria-label='filter rows'>"
        f"<span class='count'></span>"
        f"<table class='atlas-table'><thead><tr>{header}</tr></thead><tbody></tbody></table>"
        f"<script type='application/json'>{data}</script></div>"
    )


def table_assets() -> str:
    """The style and script every page with tables includes once (after the tables)."""
    return f"<style>{STYLE}</style><script>{SCRIPT}</script>"
