"""Many literals found in one pass (core/texts.trie_pattern)."""

from __future__ import annotations

import re

from kernel_atlas.core.texts import trie_pattern


def test_a_trie_pattern_matches_exactly_its_words_longest_first() -> None:
    words = ["gem", "gemm", "gemv", "nccl", "a.b"]
    whole = re.compile(f"(?:{trie_pattern(words)})$")
    for word in words:
        assert whole.match(word)
    for other in ["ge", "gemmm", "ncc", "axb", ""]:
        assert not whole.match(other)
    at_each = re.compile(f"(?=({trie_pattern(words)}))")
    # at each position the longest word starting there: "gemm" at 0, none at 1, "nccl" at 5
    assert at_each.findall("gemm_nccl") == ["gemm", "nccl"]
    assert re.compile(trie_pattern(["x"])).findall("axbx") == ["x", "x"]


def test_filled_holds_one_text_by_reference() -> None:
    """np.full(n, text, dtype=object) makes n strings; `filled` n references to one."""
    from kernel_atlas.core.texts import filled

    values = filled(1000, "no shapes")
    assert values.dtype == object and len(values) == 1000
    assert set(values.tolist()) == {"no shapes"}
    assert len({id(v) for v in values}) == 1
    assert len(filled(0, "x")) == 0
