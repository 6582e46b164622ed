"""A credential the cut of a long text would end is redacted before the cut (`redact_cut`):
once cut, `https://user:pass` before a cut `@host` or the head of a `ghp_` token no longer
looks like a credential, and was written as it stood."""

from __future__ import annotations

import pytest

from kernel_atlas.core.redact import CUT_TAIL, redact_cut
from kernel_atlas.ingest.events import cut_to

TOKEN = "ghp_" + "Q" * 36


@pytest.mark.parametrize(
    ("text", "keep", "expected"),
    [
        ("abc https://user:PW77@host.org x", 16, "abc https://<red"),  # the cut just after `PW7`
        ("abc https://user:PW77@host.org x", 21, "abc https://<redacted"),
        (f"abc {TOKEN} x", 12, "abc <redacte"),  # `ghp_QQQQ` would have been kept
        ("abc https://host.org:8080/a x", 16, "abc https://host"),  # no `@`: no credential, cut as it is
        ("abc Bearer abcdefgh12 x", 14, "abc <redacted>"),
        ("plain text", 5, "plain"),
    ],
)
def test_the_part_kept_is_redacted_as_the_whole_text_would_be(text: str, keep: int, expected: str) -> None:
    assert redact_cut(text, keep) == expected


def test_a_userinfo_running_past_the_tail_read_is_redacted_from_its_start() -> None:
    """Where the `@` lies beyond the CUT_TAIL characters read past the cut, whether the text is
    a credential is not known: the URL's userinfo running through them is redacted."""
    text = "abc https://user:" + "P" * (2 * CUT_TAIL) + "@host x"
    assert redact_cut(text, 20) == "abc https://<redacte"
    ended = "abc https://host:8080/" + "p" * 10 + " " + "x" * (2 * CUT_TAIL)  # the URL ends before the cut's tail
    assert redact_cut(ended, 30) == "abc https://host:8080/pppppppp"
    # a userinfo holding a quote, as the whole text's redaction takes it (o'neil:it's@host)
    quoted = "abc https://o'neil:it's" + "P" * (2 * CUT_TAIL) + "@host x"
    assert redact_cut(quoted, 20) == "abc https://<redacte"


def test_cut_to_marks_the_redacted_cut() -> None:
    name = "k" * 10 + " https://u:SECRET@h.org"
    assert cut_to(name, 20) == "kkkkkkkkkk https://…"
    assert cut_to(name, 26) == "kkkkkkkkkk https://<redac…"
