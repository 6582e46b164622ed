"""Output JSON (store/outputs.json_text): the text json.dumps(indent=1) writes, NaN as null,
credentials redacted, the document walked only when its text holds one (core/redact.py)."""

from __future__ import annotations

import json
import math

from kernel_atlas.core.redact import REDACTED, json_holds_credential, redact_document, redact_value
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
    assert not json_holds_credential(json.dumps(document))
    assert not json_holds_credential(json.dumps({"k": "mask_x"}))  # the needle `sk_`, decoded: no credential
    assert redact_document({"k": "mask_x"}) == {"k": "mask_x"}
    assert not json_holds_credential(json.dumps({"k": "é", "u": "0.5 \u00b5s"}))  # escapes, decoded: none


def test_the_text_screen_finds_each_credential_a_walk_would_redact() -> None:
    # (document, whether redact_document changes it): escapes before, inside and after a token,
    # quotes and backslashes around it, a token in a key only, fullwidth and long-s look-alikes
    cases = [
        ({"a": f"é {TOKEN}"}, True),
        ({"a": f'say "{TOKEN}"'}, True),
        ({"a": "x\\", "b": f"\\{TOKEN}"}, True),
        ({"a": 'q\\"', "b": "µs", "c": [f"é{TOKEN}é"]}, True),
        ({TOKEN: "value"}, True),  # a key is redacted too
        ({"a": "\u0000 Bearer abcdefgh12"}, True),
        # look-alikes read as what they show (NFKC folds ſ to s and full-width letters): credentials
        ({"a": "ſk-" + "a" * 20}, True),
        ({"a": "ｇｈｐ_" + "Zz09" * 9}, True),
        ({"a": "ｇｅｍｍ ſort"}, False),
        ({"a": ["µ"] * 50 + ["ok"], "b": "pg://bob:s3cr@tpw@db:5432/app"}, True),
        ([["µs", 'a"b', "\\"], {"n": 1e-5, "t": True}], False),
        (f"é{TOKEN}", True),
    ]
    for document, changes in cases:
        assert (json.dumps(redact_document(document)) != json.dumps(document)) is changes, document
        assert json_holds_credential(json.dumps(document)) is changes, document


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


def test_a_long_list_is_written_a_chunk_at_a_time_with_the_same_bytes(monkeypatch, tmp_path) -> None:
    from kernel_atlas.store import outputs

    monkeypatch.setattr(outputs, "_LIST_CHUNK", 3)
    document = [{"a": [1, {"b": []}]}, "x", None, [], {}, 2.5, "é", {"k": math.nan}, [[f"run {TOKEN}"]]]
    outputs.write_json(tmp_path, "list.json", document)
    expected = json.dumps([*document[:7], {"k": None}, [[f"run {REDACTED}"]]], indent=1) + "\n"
    assert (tmp_path / "list.json").read_text() == expected
    for short in ([], [1, 2, 3]):  # at most a chunk: written whole
        outputs.write_json(tmp_path, "short.json", short)
        assert (tmp_path / "short.json").read_text() == json.dumps(short, indent=1) + "\n"


_PIECES = ["ghp_" + "Zz09" * 9, "hf_" + "A1b2" * 6, "Bearer abcdefgh12", "redis://:pw@h", "mask_x", "token=", "sk-",
           "é", "µs", "ſ", "ｇ", '"', "\\", "\\u00b5", "\n", "\x00", " ", "a", "://", "@"]  # fmt: skip


def _texts():
    from hypothesis import strategies as st

    return st.lists(st.sampled_from(_PIECES) | st.text(max_size=4), max_size=6).map("".join)


def _documents():
    from hypothesis import strategies as st

    leaves = _texts() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.none() | st.booleans()
    return st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts(), inner, max_size=4), max_leaves=12
    )


def test_the_text_screen_agrees_with_the_walk_on_any_document() -> None:
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_documents())
    def check(document) -> None:
        changes = json.dumps(redact_document(document)) != json.dumps(document)
        assert json_holds_credential(json.dumps(document)) is changes
        assert json.loads(json_text(document)) == json.loads(json.dumps(redact_value(document)))

    check()
