"""Per-step attention annotations of serving engines (vLLM, SGLang, ATOM): the sequence-length
aggregates of the batch a step ran, parsed from a `user_annotation` name by the patterns of
catalogs/costs.toml `[[attention_steps]]`. Ingest records, per GPU activity, the step annotation
enclosing its launch (`step_annotation`); attention calls of that step take their lengths from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from kernel_atlas.core.paths import read_toml

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
def _patterns() -> list[tuple[str, re.Pattern[str], list[re.Pattern[str]]]]:
    entries = read_toml("costs.toml")["attention_steps"]
    return [(e["engine"], re.compile(e["match"]), [re.compile(f) for f in e["fields"]]) for e in entries]


@lru_cache(maxsize=4096)
def parse_step(name: str | None) -> StepLengths | None:
    """The aggregates of a step annotation, None for any other name."""
    if not name or "sqsq" not in name:
        return None
    for engine, match, fields in _patterns():
        if not match.search(name):
            continue
        values: dict[str, int] = {}
        for pattern in fields:
            for found in pattern.finditer(name):
                groups = found.groupdict()
                if "key" in groups:
                    values[groups["key"]] = int(groups["value"])
                else:
                    values.update({k: int(v) for k, v in groups.items() if v is not None and k in FIELDS})
        return StepLengths(engine, **values)
    return None


@lru_cache(maxsize=1)
def _native() -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in read_toml("costs.toml")["native_steps"]))


def is_native_step(name: str | None) -> bool:
    """A serving engine's native step annotation: tokens counted, no Σ sq·sk (catalogs/costs.toml)."""
    return bool(name) and parse_step(name) is None and bool(_native().search(name or ""))


def is_step(name: str) -> bool:
    return parse_step(name) is not None
