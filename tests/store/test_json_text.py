"""Output JSON (store/outputs.json_text): the text json.dumps(indent=1) writes, NaN as null,
credentials redacted, the document walked only when it may hold one (core/redact.py)."""

from __future__ import annotations

import json
import math

from kernel_atlas.core.redact import REDACTED, may_hold_credential_json, redact_document, redact_value
from kernel_atlas.store.outputs import json_text

TOKEN = "ghp_" + "Zz09" * 9


def test_json_text_is_json_dumps_indent_1() -> None:
    document = {"a": [1, 2.5, None, True], "b": {}, "c": [], "d": {"é": "ü", "e": [[]]}, "n": 1e16}
    assert json_text(document) == json.dumps(document, indent=1) + "\n"


def test_nan_and_infinity_become_null() -> None:
    text = json_text({"x": math.nan, "y": [math.inf, -math.inf, 1.0]})
    assert json.loads(text) == {"x": None, "y": [None, None, 1.0]}


def test_credentials_are_redacted_wherever_they_sit() -> None:
    document = {"names": ["mask_kernel", f"run {TOKEN}"], "deep": [[{"u": "redis://:hunter2pw@cache:6379/0"}]]}
    loaded = json.loads(json_text(document))
    assert loaded["names"] == ["mask_kernel", f"run {REDACTED}"]
    assert loaded["deep"] == [[{"u": f"redis://{REDACTED}@cache:6379/0"}]]


def test_a_document_without_credentials_is_returned_as_it_is() -> None:
    document = {"names": [f"kern_{i}" for i in range(100)], "stack": "a.py(1): f"}
    assert redact_document(document) is document
    assert not may_hold_credential_json(json.dumps(document))
    assert may_hold_credential_json(json.dumps({"k": "mask_x"}))  # the needle `sk_`: walked, unchanged
    assert redact_document({"k": "mask_x"}) == {"k": "mask_x"}
    assert may_hold_credential_json(json.dumps({"k": "é"}))  # beyond ASCII: always walked


def test_redact_document_agrees_with_redact_value() -> None:
    documents = [
        {"a": ["x", TOKEN, {"b": "Bearer abc.def.ghijkl"}], "c": ("pg://bob:s3cr@tpw@db:5432/app",), "d": 1.5},
        {"k": "mask_kernel", "u": "é hf_" + "A1b2" * 9, "n": ["ſk-" + "a" * 20]},
        [["deep", ["token=abc"]]],
        TOKEN,
        [],
    ]
    for document in documents:
        assert json.dumps(redact_document(document)) == json.dumps(redact_value(document))
