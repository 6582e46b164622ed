"""Per-step attention annotations of serving engines (vLLM, SGLang, ATOM): the sequence-length
aggregates of the batch a step ran, parsed from a `user_annotation` name by the patterns of
catalogs/costs.toml `[[attention_steps]]`. Ingest records, per GPU activity, the step annotation
enclosing its launch (`step_annotation`); attention calls of that step take their lengths from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from kernel_atlas.core.paths import CatalogMatching, catalog_pattern, read_toml

FIELDS = ("c_sq", "c_sk", "c_sqsq", "c_sqsk", "g_sq", "g_sk", "g_sqsq", "g_sqsk")


@dataclass(frozen=True)
class StepLengths:
    """Σ sq, Σ sk, Σ sq², Σ sq·sk of the context (c_) and generation (g_) requests of one step."""

    engine: str
    c_sq: int = 0
    c_sk: int = 0
    c_sqsq: int = 0
    c_sqsk: int = 0
    g_sq: int = 0
    g_sk: int = 0
    g_sqsq: int = 0
    g_sqsk: int = 0

    @property
    def tokens(self) -> int:
        return self.c_sq + self.g_sq


@lru_cache(maxsize=1)
def _patterns() -> tuple[list[tuple[str, re.Pattern[str], list[re.Pattern[str]]]], CatalogMatching]:
    """`[[attention_steps]]`, compiled (a broken pattern is said in one line naming costs.toml and
    its key, not blamed on the trace being read), and the time they may take in all."""
    data = read_toml("costs.toml")
    path, entries = data.path, data["attention_steps"]

    def compiled(pattern: object, where: str) -> re.Pattern[str]:
        return catalog_pattern(pattern, path, f"`attention_steps[{where}` {str(pattern)[:80]!r}")

    steps = [
        (
            e["engine"],
            compiled(e["match"], f"{i}].match"),
            [compiled(f, f"{i}].fields[{j}]") for j, f in enumerate(e["fields"])],
        )
        for i, e in enumerate(entries)
    ]
    return steps, CatalogMatching(path)


@lru_cache(maxsize=4096)
def parse_step(name: str | None) -> StepLengths | None:
    """The aggregates of a step annotation, None for any other name."""
    if not name or "sqsq" not in name:
        return None
    steps, bound = _patterns()
    with bound.matching("`attention_steps`"):  # a user's pattern may backtrack for hours
        for engine, match, fields in steps:
            if not match.search(name):
                continue
            values: dict[str, int] = {}
            for pattern in fields:
                for found in pattern.finditer(name):
                    groups = found.groupdict()
                    if "key" in groups:
                        if _counts(groups["value"]):
                            values[groups["key"]] = int(groups["value"])
                    else:
                        values.update({k: int(v) for k, v in groups.items() if k in FIELDS and _counts(v)})
            return StepLengths(engine, **values)
    return None


# a step's token or request count of more digits than this is damage, not a count (and past 4,300
# digits `int` refuses it): the field is left unread, as if the annotation did not give it
_COUNT_DIGITS = 18


def _counts(value: str | None) -> bool:
    """Whether a matched field's text is a count to read."""
    return value is not None and len(value) <= _COUNT_DIGITS


@lru_cache(maxsize=1)
def _native() -> tuple[re.Pattern[str], CatalogMatching]:
    """`native_steps` as one pattern (each compiled alone first: the one that is broken is named),
    and the time it may take in all."""
    data = read_toml("costs.toml")
    path, patterns = data.path, data["native_steps"]
    for i, p in enumerate(patterns):
        catalog_pattern(p, path, f"`native_steps[{i}]` {str(p)[:80]!r}")
    return catalog_pattern("|".join(f"(?:{p})" for p in patterns), path, "`native_steps`"), CatalogMatching(path)


def is_native_step(name: str | None) -> bool:
    """A serving engine's native step annotation: tokens counted, no Σ sq·sk (catalogs/costs.toml)."""
    if not name or parse_step(name) is not None:
        return False
    native, bound = _native()
    with bound.matching("`native_steps`"):  # a user's pattern may backtrack for hours
        return bool(native.search(name))


def is_step(name: str) -> bool:
    return parse_step(name) is not None
