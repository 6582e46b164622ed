"""Which name rules a kernel name can match, found in one pass over the name.

Every name rule carries its needles (`Rule.needles`): lower-cased literals one of which each
match of its pattern contains. Asking each rule in turn whether one of its needles occurs costs
a regular-expression search per rule and name text (~0.1 ms a text for the ~100 rules), which
made a trace with 200k distinct kernel names take a minute to label. Here all the rules'
literals become one trie-shaped pattern: a single scan of the text finds, at every position,
the longest literal starting there; the literals that are its prefixes start there too. The
answer is a bit mask of the rules (bit i: the i-th rule given) whose needles occur, the same
set the per-rule searches find.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kernel_atlas.classify.rules import Rule
from kernel_atlas.core.texts import trie_pattern


class NeedleIndex:
    """The rules of `rules` whose needles occur in a text, as a bit mask (bit i: `rules[i]`).
    A rule without needles is always in it."""

    def __init__(self, rules: Sequence[Rule]):
        self.always = 0
        rules_of: dict[str, int] = {}  # literal → the rules it is a needle of
        for position, rule in enumerate(rules):
            literals = rule.name.literals if rule.name is not None and rule.needles is not None else None
            if not literals:
                self.always |= 1 << position
                continue
            for literal in literals:
                rules_of[literal] = rules_of.get(literal, 0) | 1 << position
        # the scan gives the longest literal starting at a position: every literal that is a
        # prefix of it starts there too
        self._rules_at: dict[str, int] = {}
        for literal in rules_of:
            mask = 0
            for end in range(1, len(literal) + 1):
                mask |= rules_of.get(literal[:end], 0)
            self._rules_at[literal] = mask
        self._scan = re.compile("(?=(" + trie_pattern(sorted(rules_of)) + "))") if rules_of else None

    def rules_in(self, text: str) -> int:
        mask = self.always
        if self._scan is not None and text:
            rules_at = self._rules_at
            for literal in set(self._scan.findall(text)):
                mask |= rules_at[literal]
        return mask


def bits(mask: int) -> list[int]:
    """The positions of the set bits of `mask`, lowest first."""
    positions = []
    while mask:
        low = mask & -mask
        positions.append(low.bit_length() - 1)
        mask ^= low
    return positions
