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
