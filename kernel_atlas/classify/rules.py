"""Classification knowledge, loaded from catalogs/rules.toml and catalogs/launchers.toml.

rules.toml holds three ordered lists and one table:

* `[[rule]]` — what a kernel's *name* says it is. Fields: `id`, `name` (a regular expression,
  case-insensitive, searched in the decoded base name, then in the full name; `\\b` is a token
  boundary, see `names.token_pattern`), optional `launcher` / `stack` conditions and `not_name` /
  `not_launcher` / `not_stack` exclusions, `op` or `map` (lower-cased named group `key` of the
  name pattern → op; `op` is the default when the group did not take part), `weak = true` for
  names that only say what *kind* of kernel it is (a generic elementwise wrapper), `final = true`
  for names that are facts no launcher or context changes (Kineto's `Memcpy …`), `scope`
  ("qualified" or "full": the rule identifies a family by its namespace or template
  arguments, so it reads that text even when rules are matched against function names), `precision`
  (a compute precision the family implies, e.g. "tf32"), `confidence` and `why`.
  The first rule that applies is the name's evidence.
* `[[context]]` — refinements by the call stack or the launcher: a label in `refines` (ops or
  categories) becomes `op` when the conditions hold (a GEMM inside MoE experts is `fused_moe`).
* `[[fallback]]` — stack-only guesses for kernels neither the name nor the launcher explains.
* `[resolution]` — who wins when the name and the launcher disagree.
* `[sets]` — named alternations a pattern can use as `{{name}}` (Inductor's data-movement ops).

launchers.toml maps launching CPU ops (and Python frames) to ops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kernel_atlas.classify.names import literal_needles, parse_pattern, token_pattern
from kernel_atlas.classify.taxonomy import load_taxonomy
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import catalogs_dir, read_toml

PATTERN_KEYS = ("name", "launcher", "stack", "not_name", "not_launcher", "not_stack")
# The cases where the name and the launcher disagree; rules.toml's [resolution] says who wins.
CONFLICT_CASES = ("weak-name", "layer-launcher", "same-category", "other-category")
WINNERS = ("name", "launcher")


class RulePattern:
    """A catalog's regular expression, compiled on its first use. The catalog is checked when it
    loads: each pattern is parsed as written, before `token_pattern` turns every `\\b` into the
    long token boundary (which made the text to compile ~5× longer: compiling every pattern took
    ~1 s in each process that loads the rules), and most patterns never meet a name that their
    leading literals let through."""

    __slots__ = ("_compiled", "flags", "groupindex", "literals", "pattern")

    def __init__(self, pattern: str, flags: int, groupindex: dict[str, int], literals: tuple[str, ...] | None):
        self.pattern = pattern
        self.flags = flags
        self.groupindex = groupindex
        self.literals = literals  # `literal_needles` of a name pattern, else None
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return (self._compiled or self.compiled()).search(text)

    def __repr__(self) -> str:
        return f"RulePattern({self.pattern!r})"


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str = "rule"  # "rule" (name evidence), "context" (refinement), "fallback"
    op: str | None = None
    name: RulePattern | None = None
    launcher: RulePattern | None = None
    stack: RulePattern | None = None
    not_name: RulePattern | None = None
    not_launcher: RulePattern | None = None
    not_stack: RulePattern | None = None
    map: dict[str, str] = field(default_factory=dict)
    refines: frozenset[str] = frozenset()
    weak: bool = False
    final: bool = False
    scope: int = 0  # the least specific name text the rule needs: 0 function, 1 qualified, 2 full
    needles: re.Pattern[str] | None = None  # lower-cased literals every name match contains (a shortcut)
    precision: str | None = None
    confidence: float = 0.8
    why: str = ""

    @property
    def evidence(self) -> str:
        used = [k for k in ("name", "launcher", "stack") if getattr(self, k) is not None]
        return "+".join(used)


@dataclass(frozen=True)
class Resolution:
    winner: str  # "name" or "launcher"
    why: str


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]  # name evidence, in order
    context: tuple[Rule, ...]
    fallback: tuple[Rule, ...]
    resolution: dict[str, Resolution]
    sets: dict[str, str] = field(default_factory=dict)  # [sets]: named alternations

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in (*self.rules, *self.context, *self.fallback)}


_PYBIND_METHOD = re.compile(r"^<built-in (?:method|function) (\w+) of .*>$")
_NORMALISED_METHOD = re.compile(r"^(\w+) \(\w+\)$")


def launcher_key(launcher: str) -> str:
    """The op name of a launcher, robust to how Python-bound functions are written:
    `<built-in method rmsnorm of pybind11_builtins.… object at 0x7f…>` and its normalised form
    `rmsnorm (pybind11)` are both `rmsnorm`; every other launcher is itself."""
    match = _PYBIND_METHOD.match(launcher) or _NORMALISED_METHOD.match(launcher)
    return match.group(1) if match else launcher


@dataclass(frozen=True)
class LauncherHit:
    op: str
    key: str  # the table entry or pattern that matched
    layer: bool  # the launcher runs a whole layer of several kinds of kernels (a MoE layer)


@dataclass(frozen=True)
class LauncherTable:
    exact: dict[str, str]
    patterns: tuple[tuple[RulePattern, str], ...]
    layers: dict[str, str] = field(default_factory=dict)
    layer_patterns: tuple[tuple[RulePattern, str], ...] = ()
    collectives: dict[str, str] = field(default_factory=dict)  # recorded collective name (letters) → op

    def lookup(self, launcher: str, patterns: bool = True) -> LauncherHit | None:
        """What a launcher says: exact names first (as written, then its op name), then — unless
        `patterns` is false — patterns in order (searched in the op name); layer launchers after
        the ops."""
        key = launcher_key(launcher)
        for table, layer in ((self.exact, False), (self.layers, True)):
            for text in (launcher, key):
                op = table.get(text)
                if op is not None:
                    return LauncherHit(op, text, layer)
        if not patterns:
            return None
        for patterns_of, layer in ((self.patterns, False), (self.layer_patterns, True)):
            for pattern, op in patterns_of:
                if pattern.search(key):
                    return LauncherHit(op, pattern.pattern, layer)
        return None


_SET = re.compile(r"\{\{(\w+)\}\}")


def _compile(
    source: Path, rule_id: str, key: str, pattern: str | None, sets: dict[str, str] | None = None
) -> RulePattern | None:
    if pattern is None:
        return None

    def expand(match: re.Match[str]) -> str:
        if sets is None or match.group(1) not in sets:
            raise AtlasError(source, f"rule {rule_id!r}: unknown set {{{{{match.group(1)}}}}} in its {key} pattern")
        return f"(?:{sets[match.group(1)]})"

    pattern = _SET.sub(expand, pattern)
    try:  # checked as written: a token boundary in place of `\\b` is itself a valid, zero-width group
        checked = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise AtlasError(source, f"rule {rule_id!r}: bad {key} pattern ({exc})") from None
    if key not in ("name", "not_name"):
        found = RulePattern(pattern, re.IGNORECASE, dict(checked.groupindex), None)
        found._compiled = checked  # nothing to expand: this is the pattern
        return found
    literals = literal_needles(parse_pattern(pattern, re.IGNORECASE)) if key == "name" else None
    return RulePattern(token_pattern(pattern), re.IGNORECASE, dict(checked.groupindex), literals)


def _check_op(source: Path, rule_id: str, op: str) -> str:
    if not load_taxonomy().is_op(op):
        raise AtlasError(source, f"rule {rule_id!r}: {op!r} is not an op_mapping of catalogs/taxonomy.toml")
    return op


SCOPES = ("function", "qualified", "full")


def _needles(pattern: RulePattern | None) -> re.Pattern[str] | None:
    needles = pattern.literals if pattern is not None else None
    return re.compile("|".join(map(re.escape, needles))) if needles else None


def _scope(source: Path, rule_id: str, scope: str) -> int:
    if scope not in SCOPES:
        raise AtlasError(source, f"rule {rule_id!r}: scope must be one of {SCOPES} (got {scope!r})")
    return SCOPES.index(scope)


def _parse_rule(source: Path, raw: dict, kind: str, sets: dict[str, str]) -> Rule:
    rule_id = raw.get("id")
    op = raw.get("op")
    mapping = {str(k).lower(): _check_op(source, rule_id, v) for k, v in raw.get("map", {}).items()}
    if op is None and not mapping:
        raise AtlasError(source, f"rule {rule_id!r}: needs `op` or `map`")
    if op is not None:
        _check_op(source, rule_id, op)
    patterns = {key: _compile(source, rule_id, key, raw.get(key), sets) for key in PATTERN_KEYS}
    if kind == "rule" and patterns["name"] is None:
        raise AtlasError(source, f"rule {rule_id!r}: a [[rule]] needs a name pattern")
    if not any(patterns[k] for k in ("name", "launcher", "stack")):
        raise AtlasError(source, f"rule {rule_id!r}: needs a name, launcher or stack pattern")
    if mapping and (patterns["name"] is None or "key" not in patterns["name"].groupindex):
        raise AtlasError(source, f"rule {rule_id!r}: `map` needs a name pattern with a (?P<key>...) group")
    refines = frozenset(raw.get("refines", ()))
    if kind == "context":
        taxonomy = load_taxonomy()
        unknown = sorted(r for r in refines if not taxonomy.is_op(r) and r not in taxonomy.categories)
        if not refines or unknown:
            raise AtlasError(source, f"rule {rule_id!r}: `refines` must list ops or categories (got {unknown})")
    return Rule(
        id=rule_id,
        kind=kind,
        op=op,
        map=mapping,
        refines=refines,
        weak=bool(raw.get("weak", False)),
        final=bool(raw.get("final", False)),
        scope=_scope(source, rule_id, raw.get("scope", "function")),
        needles=_needles(patterns["name"]),
        precision=raw.get("precision"),
        confidence=float(raw.get("confidence", 0.8)),
        why=raw.get("why", ""),
        **patterns,
    )


def parse_rules(source: Path) -> RuleSet:
    data = read_toml(source)
    sets = {str(k): str(v) for k, v in data.get("sets", {}).items()}
    seen: set[str] = set()
    lists: dict[str, list[Rule]] = {"rule": [], "context": [], "fallback": []}
    for kind, rules in lists.items():
        for raw in data.get(kind, []):
            rule_id = raw.get("id")
            if not rule_id or rule_id in seen:
                raise AtlasError(source, f"every rule needs a unique id (got {rule_id!r})")
            seen.add(rule_id)
            rules.append(_parse_rule(source, raw, kind, sets))
    resolution = {}
    for case in CONFLICT_CASES:
        raw = data.get("resolution", {}).get(case)
        if not isinstance(raw, dict) or raw.get("winner") not in WINNERS:
            raise AtlasError(source, f'[resolution] needs `{case} = {{ winner = "name"|"launcher", why = ... }}`')
        resolution[case] = Resolution(raw["winner"], raw.get("why", ""))
    return RuleSet(tuple(lists["rule"]), tuple(lists["context"]), tuple(lists["fallback"]), resolution, sets)


def parse_launchers(source: Path) -> LauncherTable:
    data = read_toml(source)

    def names(table: str) -> dict[str, str]:
        out = {}
        for op, launchers in data.get(table, {}).items():
            _check_op(source, f"{table}.{op}", op)
            for launcher in launchers:
                out[launcher] = op
        return out

    def patterns(table: str) -> tuple[tuple[RulePattern, str], ...]:
        out = []
        for raw in data.get(table, []):
            op = _check_op(source, raw.get("launcher", "?"), raw["op"])
            out.append((_compile(source, raw["launcher"], "launcher", raw["launcher"]), op))
        return tuple(out)  # type: ignore[return-value]

    return LauncherTable(
        names("ops"), patterns("pattern"), names("layers"), patterns("layer_pattern"), names("collectives")
    )


@lru_cache(maxsize=4)
def load_rules(directory: str | None = None) -> tuple[RuleSet, LauncherTable]:
    base = Path(directory) if directory else catalogs_dir()
    return parse_rules(base / "rules.toml"), parse_launchers(base / "launchers.toml")


@lru_cache(maxsize=4)
def rule_precisions(directory: str | None = None) -> dict[str, str]:
    """Rule id → the compute precision its kernel family implies (rules.toml `precision`), read
    from the file without compiling its patterns: a report needs only this of the rules."""
    data = read_toml((Path(directory) if directory else catalogs_dir()) / "rules.toml")
    return {
        raw["id"]: raw["precision"]
        for kind in ("rule", "context", "fallback")
        for raw in data.get(kind, [])
        if raw.get("id") and raw.get("precision")
    }


def rule_ids() -> frozenset[str]:
    """Every rule id of the shipped rules.toml (registries of costs and replay name them)."""
    return frozenset(load_rules()[0].by_id())


@lru_cache(maxsize=1)
def inductor_kernel_prefix() -> re.Pattern[str]:
    """`triton_<kind>_`, the prefix Inductor gives its Triton kernels, for the kinds that
    rules.toml's `[sets] inductor_kernels` lists (Inductor names a launch's CPU op after it)."""
    sets = read_toml(catalogs_dir() / "rules.toml").get("sets", {})  # only the set: no rule is parsed
    kinds = sets.get("inductor_kernels") if isinstance(sets, dict) else None
    if not isinstance(kinds, str) or not kinds:
        raise AtlasError(catalogs_dir() / "rules.toml", "[sets] needs `inductor_kernels` (Inductor's kernel kinds)")
    return re.compile(rf"^triton_(?:{kinds})_")
