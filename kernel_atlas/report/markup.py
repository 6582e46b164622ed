"""User strings in rich markup lines: printed as they are, on one line, whatever they hold.

Terminal lines are rich markup (`[bold]device[/] …`). A path, kernel name, launcher, frame or
module put into such a line unescaped is read as markup: `trace[rank3].json` loses `[rank3]`,
`missing[/x]/t.json` raises a MarkupError. Every user string goes through `esc` on its way into
a markup line; `plain` also keeps it on one line (control characters, newlines included, are
shown as escapes) and printable (lone surrogates, from undecodable file names or hostile JSON,
become `\\udcxx` instead of failing the write).
"""

from __future__ import annotations

import re

from rich.markup import escape
from rich.text import Text

# Characters that change how a line shows rather than what it says: controls, line and paragraph
# separators, and Unicode's format characters — bidi embeddings, overrides and isolates (an
# unterminated U+202E reverses the rest of the line), zero-width ones (two different names that
# print alike), direction marks, the soft hyphen — and the non-characters U+FFFE/U+FFFF.
_FORMAT = "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ufffe\uffff"
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{_FORMAT}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\\x00-\\x09\\x0b-\\x1f\\x7f-\\x9f\\u2028\\u2029{_FORMAT}]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _escape_control(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}")


def plain(value: object, newlines: bool = False) -> str:
    """`value` as text on one line (`newlines`: its line breaks kept) that any terminal encoding
    can print."""
    text = str(value)
    control = _CONTROL_BUT_NEWLINE if newlines else _CONTROL
    if control.search(text):
        text = control.sub(_escape_control, text)
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def esc(value: object) -> str:
    """`value` for a rich markup line: shown literally (see `plain`)."""
    return escape(plain(value))


def literal(value: object, style: str = "") -> Text:
    """`value` as a rich Text (never parsed as markup), on one line."""
    return Text(plain(value), style=style)
