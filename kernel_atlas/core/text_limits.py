"""How long a text any output holds may be, and how a longer one is cut."""

from __future__ import annotations

from typing import Any

# Texts every output holds at most this many characters of: a name or label past MAX_TEXT is cut
# (real kernel names reach ~5,000), a metadata text (a GPU name ~30, a backend ~4) past META_TEXT;
# the cut ends in CUT_MARK. Ingest cuts what it writes; a reader refuses a run folder holding longer.
MAX_TEXT = 16384
META_TEXT = 256
CUT_MARK = "…"


def cut_to(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the last of them CUT_MARK (`text` is longer than `limit`);
    a credential the cut would end is redacted first (`redact_cut`: once cut, it is no longer
    recognisable as one)."""
    from kernel_atlas.core.redact import redact_cut  # rare: decode workers never import pandas otherwise

    return redact_cut(text, limit - len(CUT_MARK)) + CUT_MARK


def cut_long(text: Any, limit: int = MAX_TEXT) -> Any:
    """A name or label past `limit` characters cut to it (`cut_to`); anything else as it is."""
    return cut_to(text, limit) if isinstance(text, str) and len(text) > limit else text
