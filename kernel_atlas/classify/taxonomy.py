"""The label vocabulary, loaded from catalogs/taxonomy.toml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kernel_atlas.core.paths import read_toml

# The names code refers to (catalogs/taxonomy.toml defines them; tests/classify/test_taxonomy_names.py
# checks each is there): the fallback labels, and the family that crosses ranks.
UNKNOWN_OP = "unknown"
OTHER_CATEGORY = "other"
COMMUNICATION = "communication"
SEND_RECV = "send_recv"  # a point-to-point copy: a communication op that is no collective


@dataclass(frozen=True)
class Taxonomy:
    category_of: dict[str, str]  # op_mapping → category
    operation_of: dict[str, str]  # op_mapping → formula in words

    def category(self, op_mapping: str | None) -> str:
        return self.category_of.get(op_mapping or UNKNOWN_OP, OTHER_CATEGORY)

    def is_op(self, op_mapping: str) -> bool:
        return op_mapping in self.category_of

    @property
    def categories(self) -> frozenset[str]:
        return frozenset(self.category_of.values())


@lru_cache(maxsize=1)
def load_taxonomy() -> Taxonomy:
    data = read_toml("taxonomy.toml")
    category_of: dict[str, str] = {}
    operation_of: dict[str, str] = {}
    for category, body in data["categories"].items():
        for op, operation in body["ops"].items():
            category_of[op] = category
            operation_of[op] = operation
    return Taxonomy(category_of=category_of, operation_of=operation_of)
