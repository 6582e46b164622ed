"""Ordered classification rules, loaded from catalogs/rules.toml and catalogs/launchers.toml.

A rule matches on any of: the kernel name (`name`, searched in the decoded base name and the
full name), the launcher (`launcher`), the call stack (`stack`), with optional negative
patterns (`not_name`, `not_launcher`, `not_stack`). All given patterns must hold. The op is
`op`, or `map[key]` where `key` is the lower-cased named group `key` of the name pattern.
Special steps (`use = "catalog_exact" | "launcher_table" | "catalog_family"`) say where
catalog lookups and the ATen launcher table sit in the order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kernel_atlas.classify.taxonomy import load_taxonomy
from kernel_atlas.errors import AtlasError
from kernel_atlas.paths import catalogs_dir, read_toml

SPECIAL_STEPS = ("catalog_exact", "launcher_table", "catalog_family")


@dataclass(frozen=True)
class Rule:
    id: str
    op: str | None = None
    use: str | None = None
    name: re.Pattern[str] | None = None
    launcher: re.Pattern[str] | None = None
    stack: re.Pattern[str] | None = None
    not_name: re.Pattern[str] | None = None
    not_launcher: re.Pattern[str] | None = None
    not_stack: re.Pattern[str] | None = None
    map: dict[str, str] = field(default_factory=dict)
    confidence: float = 0.8
    why: str = ""

    @property
    def evidence(self) -> str:
        used = [k for k in ("name", "launcher", "stack") if getattr(self, k) is not None]
        return "+".join(used) if used else (self.use or "")


@dataclass(frozen=True)
class LauncherTable:
    exact: dict[str, str]
    patterns: tuple[tuple[re.Pattern[str], str], ...]

    def lookup(self, launcher: str) -> tuple[str, str] | None:
        """(op, matched key) for a launcher, exact names first, then patterns in order."""
        op = self.exact.get(launcher)
        if op is not None:
            return op, launcher
        for pattern, op in self.patterns:
            if pattern.search(launcher):
                return op, pattern.pattern
        return None


def _compile(source: Path, rule_id: str, key: str, pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise AtlasError(source, f"rule {rule_id!r}: bad {key} pattern ({exc})") from None


def _check_op(source: Path, rule_id: str, op: str) -> str:
    if not load_taxonomy().is_op(op):
        raise AtlasError(source, f"rule {rule_id!r}: {op!r} is not an op_mapping of catalogs/taxonomy.toml")
    return op


def parse_rules(source: Path) -> tuple[Rule, ...]:
    data = read_toml(source)
    rules = []
    seen: set[str] = set()
    for raw in data.get("rule", []):
        rule_id = raw.get("id")
        if not rule_id or rule_id in seen:
            raise AtlasError(source, f"every rule needs a unique id (got {rule_id!r})")
        seen.add(rule_id)
        use = raw.get("use")
        if use is not None and use not in SPECIAL_STEPS:
            raise AtlasError(source, f"rule {rule_id!r}: unknown use {use!r}")
        op = raw.get("op")
        mapping = {str(k).lower(): _check_op(source, rule_id, v) for k, v in raw.get("map", {}).items()}
        if use is None and op is None and not mapping:
            raise AtlasError(source, f"rule {rule_id!r}: needs `op` or `map`")
        if op is not None:
            _check_op(source, rule_id, op)
        patterns = {
            key: _compile(source, rule_id, key, raw.get(key))
            for key in ("name", "launcher", "stack", "not_name", "not_launcher", "not_stack")
        }
        if use is None and not any(patterns[k] for k in ("name", "launcher", "stack")):
            raise AtlasError(source, f"rule {rule_id!r}: needs a name, launcher or stack pattern")
        if mapping and (patterns["name"] is None or "key" not in patterns["name"].groupindex):
            raise AtlasError(source, f"rule {rule_id!r}: `map` needs a name pattern with a (?P<key>...) group")
        rules.append(
            Rule(
                id=rule_id,
                op=op,
                use=use,
                map=mapping,
                confidence=float(raw.get("confidence", 0.8)),
                why=raw.get("why", ""),
                **patterns,
            )
        )
    return tuple(rules)


def parse_launchers(source: Path) -> LauncherTable:
    data = read_toml(source)
    exact = {}
    for op, names in data.get("ops", {}).items():
        _check_op(source, f"ops.{op}", op)
        for launcher in names:
            exact[launcher] = op
    patterns = []
    for raw in data.get("pattern", []):
        op = _check_op(source, raw.get("launcher", "?"), raw["op"])
        patterns.append((_compile(source, raw["launcher"], "launcher", raw["launcher"]), op))
    return LauncherTable(exact=exact, patterns=tuple(patterns))  # type: ignore[arg-type]


@lru_cache(maxsize=4)
def load_rules(directory: str | None = None) -> tuple[tuple[Rule, ...], LauncherTable]:
    base = Path(directory) if directory else catalogs_dir()
    return parse_rules(base / "rules.toml"), parse_launchers(base / "launchers.toml")
