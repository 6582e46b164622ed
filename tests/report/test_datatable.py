"""The data tables' JSON inside the page's <script> elements (`datatable.script_json`)."""

from __future__ import annotations

import json

from kernel_atlas.report.datatable import script_json


def test_script_json_escapes_what_would_end_or_bend_the_script_element() -> None:
    text = json.dumps({"name": "<!--<script>a&b</script>", "é": "漢 > 1"}, ensure_ascii=False)
    safe = script_json(text)
    assert safe == ('{"name": "\\u003c!--\\u003cscript\\u003ea\\u0026b\\u003c/script\\u003e", "é": "漢 \\u003e 1"}')
    assert json.loads(safe) == json.loads(text)  # JSON.parse reads the same text back
    assert script_json("\\u003c") == "\\u003c"  # an escape already in a name is left as it is
