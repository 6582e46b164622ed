"""The needle screen in front of the credential expression (`redact._may_hold_credential`) for
text beyond ASCII: a cut name ends with `…`, and every such text went through the expression
whole (~400 ns a character). 50 dotted `nn.Module` names of 16k characters, in every call stack
of a trace, took its ingest 21 s and its report 36 s."""

from __future__ import annotations

import pytest

from kernel_atlas.core import redact
from kernel_atlas.core.redact import REDACTED, holds_credential, redact_text

TOKEN = "ghp_" + "A1b2C3d4" * 5  # a GitHub token's shape


class _Refusing:
    """Stands in for the expression: any search of it fails the test."""

    def search(self, text: str) -> None:
        raise AssertionError(f"the expression searched a text without needles ({len(text)} characters)")

    sub = search


def test_a_long_cut_name_without_needles_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "nn.Module: " + "a.b.c." * 2730 + "…"  # cut: beyond ASCII
    monkeypatch.setattr(redact, "CREDENTIAL", _Refusing())
    assert redact_text(name) == name
    assert not holds_credential(name)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"a.b.c.{TOKEN}.d…", TOKEN),  # a token in a cut name
        ("pa\u017f\u017fword=hunter22 …", "hunter22"),  # ſ: the key read as `password`
        ("api_\u212aey=abc123def …", "abc123def"),  # the Kelvin sign read as k
        ("\u0130d \u0131 AP\u0130_KEY=abc123def", "abc123def"),  # İ read as i
        ("ｇｈｐ＿" + "Ａ" * 36, "Ａ" * 36),  # full-width: a token once NFKC-folded
        ("gh\u200bp_" + "A1b2C3d4" * 5, "A1b2C3d4" * 5),  # a zero-width space inside the prefix
    ],
)
def test_credentials_beyond_ascii_still_reach_the_expression(text: str, secret: str) -> None:
    assert holds_credential(text)
    redacted = redact_text(text)
    assert secret not in redacted and REDACTED in redacted, redacted
