"""Label kernels from three kinds of evidence and say which one decided.

1. The name: the first `[[rule]]` of catalogs/rules.toml that applies says what the kernel is.
   Rules are ordered so that what a kernel *is* (a GEMM/MMA core, an attention core, a
   collective's device kernel) comes before what it fuses (an epilogue, a fused-op list).
2. The launcher: the CPU op (or Python frame) that launched it, through catalogs/launchers.toml.
3. Context: `[[context]]` rules refine a label by the call stack or the launcher (a GEMM inside
   MoE experts is `fused_moe`).

When the name and the launcher disagree, rules.toml's `[resolution]` decides and the label's
evidence records it (`name>launcher`, `launcher>name`). Kernels neither explains fall back to
the catalog (catalogs/kernels.json), stack-only guesses and normalised catalog names, else
`unknown`. Every distinct (name, launcher, stack) is classified once per table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.names import NAME_TEXTS, family_key, lower_texts, name_texts
from kernel_atlas.classify.needles import NeedleIndex, bits
from kernel_atlas.classify.rules import LauncherTable, Rule, RuleSet, load_rules, rule_precisions
from kernel_atlas.classify.taxonomy import COMMUNICATION, OTHER_CATEGORY, UNKNOWN_OP, load_taxonomy
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import catalogs_dir
from kernel_atlas.core.texts import TooSlow, counted, interrupted_after, strings_in

_HITS_KEPT = 1 << 16  # names whose needle hits are kept (`Classifier._needle_hits`)
LAUNCHER_RULE = "launcher-table"


@dataclass(frozen=True)
class Label:
    op_mapping: str
    category: str
    rule: str  # the kernel's family by name ("rule:<id>"), else launcher-table, catalog:exact/family, none
    evidence: str  # what settled the op: name, launcher, stack, catalog; "a+b" agree/refine, "a>b" a won over b
    confidence: float
    detail: str = ""
    # what produced the op where another than `rule` did: a `[[context]]` rule ("rule:<id>"), the
    # launcher table over the name, the catalog ("catalog:exact"); "" where `rule` did
    produced_by: str = ""


@dataclass(frozen=True)
class Step:
    """One rule tried by `explain`: whether it matched, and what it would say."""

    rule: str
    matched: bool
    op_mapping: str | None
    detail: str
    chosen: bool = False  # the name's evidence (the first match in the most specific text)


@dataclass(frozen=True)
class Opinion:
    """What one piece of evidence says: the op, who said it, and why."""

    source: str  # "rule:<id>" or "launcher-table"
    op: str
    detail: str
    confidence: float
    layer: bool = False  # a launcher that runs a whole layer (several kinds of kernels)


@dataclass(frozen=True)
class Explanation:
    label: Label
    steps: list[Step]  # the name rules, in order
    name: Opinion | None
    launcher: Opinion | None
    conflict: str | None  # None, or a case of rules.toml's [resolution]
    winner: str | None  # "name" or "launcher" when they disagreed
    resolution_why: str
    context: Opinion | None


UNKNOWN = Label(UNKNOWN_OP, OTHER_CATEGORY, "none", "none", 0.0, "no rule, launcher or catalog entry matched")


def unlabelled(op: object) -> bool:
    """Whether a catalog's `op_mapping` says "no label yet": missing, empty or TBD in any case or
    padding (a hand-edited catalog's `tbd`, ` TBD ` had been kept as labels)."""
    return op is None or (isinstance(op, str) and op.strip().upper() in ("", "TBD"))


def _entry_op(entry: dict[str, Any], is_op: Callable[[str], bool]) -> str | None:
    """The entry's label where it is evidence about its kernel: a taxonomy op other than
    `unknown`. A label outside the taxonomy (`Softmax`, a typo) stays on its own entry but labels
    no other: copied into a TBD sibling, it had spread a name no category holds."""
    op = entry.get("op_mapping")
    return None if unlabelled(op) or op == UNKNOWN_OP or not is_op(op) else op


def given_label(entry: dict[str, Any]) -> bool:
    """Whether an entry's label was given by its catalog's source (a seed or user label: no `label`
    object, or one whose `rule` is "given"), not produced by the rules — `atlas classify` writes
    `rule:<id>`, `launcher-table`, `catalog:…`, a trace's catalog.json its `label_rule`. Only a given
    label is a fact about the kernel: a label the rules made says what they made of that entry's
    stack and launcher, and the shipped catalog's `triton_per_fused_mul_sum_0` (`moe_reduce`, from
    a MoE sum-reduce stack) under `<built-in function launch>` — every Triton launch's launcher —
    had labelled any compiled mul+sum `moe_reduce` at confidence 1.0."""
    label = entry.get("label")
    return not isinstance(label, dict) or label.get("rule") in (None, "given")


def _applies(pattern, text: str) -> bool:
    return bool(text) and pattern.search(text) is not None


FRAME_SEPARATOR = " <- "  # a call stack as ingest writes it, innermost frame first


def callers(name: str, launcher: str, stack: str) -> tuple[str, str]:
    """The launcher and call stack as context (`[[context]]`, `[[fallback]]`) reads them: what
    called the kernel, without the kernel's own frames. Inductor launches a kernel from a Python
    function named after it, so its stack holds the kernel's name as a frame
    (`<string>(1): launcher <- triton_per_fused_topk_0 <- …/triton_heuristics.py(…): run`) and its
    CPU op is that name: a stack pattern such as `fused_topk` had matched the kernel itself."""
    own = {name, name_texts(name)[0]}
    if launcher in own:
        launcher = ""
    if stack and any(text and text in stack for text in own):
        frames = stack.split(FRAME_SEPARATOR)
        kept = [frame for frame in frames if frame not in own and frame.rpartition("): ")[2] not in own]
        if len(kept) != len(frames):
            stack = FRAME_SEPARATOR.join(kept)
    return launcher, stack


class Classifier:
    def __init__(self, rules: RuleSet, launchers: LauncherTable, catalog: list[dict[str, Any]]):
        self.rules = rules
        self.launchers = launchers
        self.taxonomy = load_taxonomy()
        self.catalog = catalog
        # the catalog's facts: its given labels (`given_label`), by (name, launcher), by name and
        # by normalised name, each with the first entry that says it (cited in the label's detail)
        exact: dict[tuple[str, str], set[str]] = {}
        by_name: dict[str, set[str]] = {}
        by_family: dict[str, set[str]] = {}
        first: dict[tuple[str, str] | str, int] = {}
        for index, entry in enumerate(catalog):
            op = _entry_op(entry, self.taxonomy.is_op)
            if op is None or not given_label(entry):
                continue
            name = entry["kernel_name"]
            key = (name, entry.get("kernel_implementation") or "")
            exact.setdefault(key, set()).add(op)
            by_name.setdefault(name, set()).add(op)
            by_family.setdefault(family_key(name), set()).add(op)
            first.setdefault(key, index)
            first.setdefault(name, index)
        # Every match is used only where the catalog is unambiguous: two entries of one kernel and
        # launcher labelled sum and mean had given the last one's at confidence 1.0, citing the first.
        self.exact = {k: next(iter(v)) for k, v in exact.items() if len(v) == 1}
        self.by_name = {k: next(iter(v)) for k, v in by_name.items() if len(v) == 1}
        self.by_family = {k: next(iter(v)) for k, v in by_family.items() if len(v) == 1}
        self.source = {k: f"catalog entry #{i} (a given label)" for k, i in first.items()}  # name or (name, launcher)
        # the name rules a name can match, by their needles (`needles.py`), as bit masks
        self._needles = NeedleIndex(rules.rules)
        self._strong = sum(1 << i for i, rule in enumerate(rules.rules) if not rule.weak)
        self._weak = sum(1 << i for i, rule in enumerate(rules.rules) if rule.weak)
        self._of_scope = [
            sum(1 << i for i, rule in enumerate(rules.rules) if rule.scope == scope) for scope in range(len(NAME_TEXTS))
        ]
        self._hits: dict[str, tuple[int, ...]] = {}
        self._by_launcher: dict[str, Opinion | None] = {}  # `_launcher_opinion`, once per launcher

    def _label(self, op: str, rule: str, evidence: str, confidence: float, detail: str, produced_by: str = "") -> Label:
        return Label(op, self.taxonomy.category(op), rule, evidence, confidence, detail, produced_by)

    # --- the three kinds of evidence -----------------------------------------------------------

    def _try(self, rule: Rule, name: str, launcher: str, stack: str, text: int | None = None) -> tuple[str | None, str]:
        """(op, detail) when the rule applies, (None, why not) otherwise. `text` limits the name
        pattern to one of `name_texts` (function, qualified, full name); None searches all."""
        match = None
        where = ""
        if rule.name is not None:
            texts, lowered = name_texts(name), lower_texts(name)
            # a rule with a wider `scope` reads no narrower text, as `_name_opinion` tries it: the
            # name rules `explain` lists had said "function name" where the label's said "qualified"
            for index in range(rule.scope, len(texts)) if text is None else (text,):
                if rule.needles is not None and rule.needles.search(lowered[index]) is None:
                    continue  # none of the literals the pattern starts with: it cannot match
                match = rule.name.search(texts[index])
                if match:
                    where = f" ({NAME_TEXTS[index]})"
                    break
            if match is None:
                return None, "name does not match"
        if rule.not_name is not None and any(map(rule.not_name.search, name_texts(name))):
            return None, "name matches not_name"
        if rule.launcher is not None and not _applies(rule.launcher, launcher):
            return None, "launcher does not match"
        if rule.not_launcher is not None and _applies(rule.not_launcher, launcher):
            return None, "launcher matches not_launcher"
        if rule.stack is not None and not _applies(rule.stack, stack):
            return None, "call stack does not match"
        if rule.not_stack is not None and _applies(rule.not_stack, stack):
            return None, "call stack matches not_stack"
        if rule.map:
            key = (match.group("key") or "").lower() if match else ""
            op = rule.map.get(key, rule.op)
            if op is None:
                return None, f"name group {key!r} not in the rule's map"
            if key in rule.map:
                return op, f"{rule.evidence}{where} matches; {key!r} maps to {op}"
        else:
            op = rule.op
        return op, f"{rule.evidence}{where} matches" + (f" ({rule.why})" if rule.why else "")

    def _name_opinion(self, name: str, launcher: str, stack: str) -> tuple[Rule, Opinion] | None:
        """The first rule that matches the function name, else the qualified name, else the full
        name (the more specific the text, the stronger the evidence); a rule with a wider
        `scope` reads that text from the first pass on; rules marked weak only after all. Only
        the rules whose needles occur in the text they read are tried."""
        hits = self._needle_hits(name)
        rules = self.rules.rules
        for text in range(len(NAME_TEXTS)):
            mask = 0
            for scope, of_scope in enumerate(self._of_scope):
                mask |= hits[max(text, scope)] & of_scope
            for position in bits(mask & self._strong):
                rule = rules[position]
                op, detail = self._try(rule, name, launcher, stack, max(text, rule.scope))
                if op is not None:
                    return rule, Opinion(f"rule:{rule.id}", op, detail, rule.confidence)
        in_any = 0
        for hit in hits:
            in_any |= hit
        for position in bits(self._weak & in_any):
            rule = rules[position]
            op, detail = self._try(rule, name, launcher, stack)
            if op is not None:
                return rule, Opinion(f"rule:{rule.id}", op, detail, rule.confidence)
        return None

    def _needle_hits(self, name: str) -> tuple[int, ...]:
        """Per name text (`name_texts`), the name rules whose needles occur in it (a bit mask)."""
        hits = self._hits.get(name)
        if hits is None:
            if len(self._hits) >= _HITS_KEPT:
                self._hits.clear()
            found: dict[str, int] = {}
            texts = lower_texts(name)
            for text in texts:
                if text not in found:
                    found[text] = self._needles.rules_in(text)
            hits = self._hits[name] = tuple(found[text] for text in texts)
        return hits

    def _launcher_opinion(self, launcher: str) -> Opinion | None:
        if not launcher:
            return None
        if launcher in self._by_launcher:
            return self._by_launcher[launcher]
        if len(self._by_launcher) >= _HITS_KEPT:
            self._by_launcher.clear()
        hit = self.launchers.lookup(launcher)
        opinion = None
        if hit is not None:
            what = "the layer launcher" if hit.layer else "launcher"
            opinion = Opinion(LAUNCHER_RULE, hit.op, f"{what} {launcher!r} matches {hit.key!r}", 0.85, hit.layer)
        self._by_launcher[launcher] = opinion
        return opinion

    def _context(self, op: str, name: str, launcher: str, stack: str) -> tuple[Rule, Opinion] | None:
        category = self.taxonomy.category(op)
        launcher, stack = callers(name, launcher, stack)
        for rule in self.rules.context:
            if op not in rule.refines and category not in rule.refines:
                continue
            refined, detail = self._try(rule, name, launcher, stack)
            if refined is not None and refined != op:
                return rule, Opinion(f"rule:{rule.id}", refined, f"{op} refined: {detail}", rule.confidence)
        return None

    # --- deciding ------------------------------------------------------------------------------

    def _decide(self, name: str, launcher: str | None, stack: str | None, trace: bool) -> Explanation:
        launcher, stack = launcher or "", stack or ""
        named = self._name_opinion(name, launcher, stack)
        rule, by_name = named if named else (None, None)
        steps = []
        if trace:  # what every name rule would say on its own
            for candidate in self.rules.rules:
                op, detail = self._try(candidate, name, launcher, stack)
                steps.append(Step(f"rule:{candidate.id}", op is not None, op, detail, candidate is rule))
        final = rule is not None and rule.final  # e.g. Kineto's own names for GPU copies and sets
        by_launcher = None if final else self._launcher_opinion(launcher)
        conflict = winner = None
        why = ""
        if by_name is not None and by_launcher is not None:
            if by_name.op == by_launcher.op:
                chosen = by_name
                evidence = "name+launcher"
            else:
                same = self.taxonomy.category(by_name.op) == self.taxonomy.category(by_launcher.op)
                if rule.weak:
                    conflict = "weak-name"
                elif same and by_launcher.layer:
                    conflict = "layer-launcher"
                elif same:
                    conflict = "same-category"
                else:
                    conflict = "other-category"
                resolution = self.rules.resolution[conflict]
                winner, why = resolution.winner, resolution.why
                chosen = by_name if winner == "name" else by_launcher
                evidence = "name>launcher" if winner == "name" else "launcher>name"
        elif by_name is not None:
            chosen, evidence = by_name, rule.evidence
        elif by_launcher is not None:
            chosen, evidence = by_launcher, "launcher"
        else:
            label = self._fallback(name, launcher, stack)
            return Explanation(label, steps, None, None, None, None, "", None)
        refined = None if final else self._context(chosen.op, name, launcher, stack)
        op, confidence, detail, producer = chosen.op, chosen.confidence, chosen.detail, chosen.source
        if conflict:
            loser = by_launcher if winner == "name" else by_name
            detail += f"; {loser.source} said {loser.op} ({conflict}: {winner} wins)"
        if refined is not None:
            context_rule, context = refined
            evidence += "+" + "+".join(k for k in ("launcher", "stack") if getattr(context_rule, k) is not None)
            op, confidence, detail = context.op, context.confidence, f"{detail}; {context.source}: {context.detail}"
            producer = context.source
        known = self._known(name, launcher, by_name=False)
        if known is not None and known[0] != op:
            # a kernel the catalog knows exactly keeps the catalog's label (the seed's facts)
            op, confidence, detail, evidence = known[0], 1.0, f"{known[1]}; the rules said {op}", f"catalog>{evidence}"
            producer = "catalog:exact"
        # the rule is the kernel's family as its name says (what costs and replay look up), the
        # evidence says what settled the op, `produced_by` who (a catalog's provenance names it)
        source = by_name.source if by_name is not None else chosen.source
        label = self._label(op, source, evidence, confidence, detail, "" if producer == source else producer)
        return Explanation(label, steps, by_name, by_launcher, conflict, winner, why, refined[1] if refined else None)

    def _known(self, name: str, launcher: str, by_name: bool = True) -> tuple[str, str] | None:
        """(op, why) when the catalog's given labels (`given_label`) of this exact kernel and
        launcher all agree; else (`by_name`, for kernels the rules do not recognise) a name whose
        entries all agree — unless this launcher says another op. A catalog label is a fact about
        the kernel under the launcher it was seen with: it overrules the rules there and nowhere
        else (the int64 add kernel the catalog saw under aten::sub, an NCCL broadcast kernel
        labelled all_gather under record_param_comms, had overruled `aten::add` and
        `nccl:broadcast` at confidence 1.0, and — matched by name alone — every launch of them
        without a launcher: a graph replay, a GPU-only trace)."""
        op = self.exact.get((name, launcher))
        if op is not None:
            return op, f"kernel name and launcher equal {self.source[(name, launcher)]}"
        if not by_name:
            return None
        op = self.by_name.get(name)
        if op is None:
            return None
        said = self._launcher_opinion(launcher)
        if said is not None and said.op != op:
            return None  # the rules weigh the name against this launcher
        return op, f"kernel name equals {self.source[name]}"

    def _fallback(self, name: str, launcher: str, stack: str) -> Label:
        exact = self._catalog_exact(name, launcher)
        if exact is not None:
            return exact
        launcher, stack = callers(name, launcher, stack)
        for rule in self.rules.fallback:
            op, detail = self._try(rule, name, launcher, stack)
            if op is not None:
                return self._label(op, f"rule:{rule.id}", rule.evidence, rule.confidence, detail)
        return self._catalog_family(name) or UNKNOWN

    def _catalog_exact(self, name: str, launcher: str) -> Label | None:
        known = self._known(name, launcher)
        return None if known is None else self._label(known[0], "catalog:exact", "catalog", 1.0, known[1])

    def _catalog_family(self, name: str) -> Label | None:
        op = self.by_family.get(family_key(name))
        if not op:
            return None
        return self._label(
            op, "catalog:family", "catalog", 0.7, f"normalised name {family_key(name)!r} equals a catalog entry's"
        )

    def classify(self, name: str, launcher: str | None = None, stack: str | None = None) -> Label:
        return self._decide(name, launcher, stack, trace=False).label

    def classify_by_lookup(self, name: str, launcher: str | None = None) -> Label:
        """The label exact lookups give — the catalog's kernels, exact launcher names, normalised
        names — without any rule's regular expression: for a name whose rules took too long."""
        launcher = launcher or ""
        exact = self._catalog_exact(name, launcher)
        if exact is not None:
            return exact
        hit = self.launchers.lookup(launcher, patterns=False) if launcher else None
        if hit is not None:
            detail = f"launcher {launcher!r} matches {hit.key!r} (the name rules took too long to match)"
            return self._label(hit.op, LAUNCHER_RULE, "launcher", 0.85, detail)
        return self._catalog_family(name) or Label(
            UNKNOWN_OP, OTHER_CATEGORY, "none", "none", 0.0, "the rules took too long; no exact lookup matched"
        )

    def explain(self, name: str, launcher: str | None = None, stack: str | None = None) -> Explanation:
        return self._decide(name, launcher, stack, trace=True)


_ENTRY_TEXT = ("kernel_name", "kernel_implementation", "op_mapping", "operation", "source_code", "call_stack")


# a catalog is read whole, as Python objects (~4× its text), and written whole: 128 MiB is ~100k
# entries of the seed's size (its 167 entries are 0.3 MB), within the 1 GB any command may take
CATALOG_LIMIT = 128 << 20


def load_catalog(path: str | Path) -> list[dict[str, Any]]:
    """A kernel catalog (the seed's format): a JSON list of entries, checked where it is read
    (`AtlasError` naming the file and the first entry that is not one)."""
    from kernel_atlas.core.safe_files import read_json

    size = Path(path).stat().st_size if Path(path).is_file() else 0
    if size > CATALOG_LIMIT:
        raise AtlasError(path, f"too large for a kernel catalog ({size:,} bytes, over {CATALOG_LIMIT >> 20} MiB)")
    data = read_json(path, CATALOG_LIMIT, nan_ok=True)  # written by Python: NaN and Infinity (classify writes null)
    if not isinstance(data, list):
        raise AtlasError(path, "not a kernel catalog (a kernel catalog is a JSON list of entries)")
    for i, entry in enumerate(data):
        problem = _entry_problem(entry)
        if problem:
            raise AtlasError(path, f"not a kernel catalog: entry {i} {problem}")
    if not _is_unicode(data):  # JSON may write a lone surrogate (\ud800) that no output can hold
        first = next(i for i, entry in enumerate(data) if not _is_unicode(entry))
        raise AtlasError(path, f"not a kernel catalog: entry {first} holds a lone UTF-16 surrogate (no Unicode text)")
    return data


def _is_unicode(value: object) -> bool:
    """Whether every text inside `value` (keys too) is Unicode: no lone surrogate. Walked text by
    text: encoding the whole catalog as JSON held two more copies of it (a 155 MB one peaked
    past 1 GB)."""
    for text in strings_in(value):
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def _entry_problem(entry: object) -> str | None:
    if not isinstance(entry, dict):
        return "is not an object"
    if "ph" in entry and "kernel_name" not in entry:  # a trace written as a bare array of events
        return "is a trace event, not a kernel entry (a trace is read by `atlas ingest`)"
    if entry.get("label") is not None and not isinstance(entry["label"], dict):
        return "has a `label` that is not an object"
    for key in _ENTRY_TEXT:
        if entry.get(key) is not None and not isinstance(entry[key], str):
            return f"has a `{key}` that is not a string"
    if not entry.get("kernel_name"):
        return "has no `kernel_name` (every entry names its kernel)"
    params = entry.get("params", [])
    if not isinstance(params, list) or not all(isinstance(p, dict) for p in params):
        return "has `params` that are not a list of objects"
    for param in params:
        if param.get("example_dtype") is not None and not isinstance(param["example_dtype"], str):
            return "has a param whose `example_dtype` is not a string"
    return None


@lru_cache(maxsize=1)
def default_classifier() -> Classifier:
    rules, launchers = load_rules()
    return Classifier(rules, launchers, load_catalog(catalogs_dir() / "kernels.json"))


def rule_id(label_rule: object) -> str | None:
    """`rule:<id>` → `<id>`; None for labels not made by a rules.toml rule."""
    return label_rule[5:] if isinstance(label_rule, str) and label_rule.startswith("rule:") else None


def rule_precision(label_rule: object) -> str | None:
    """The compute precision a label's kernel family implies ("tf32" for TF32 GEMMs), or None."""
    return rule_precisions().get(rule_id(label_rule) or "")


# The most the rules' regular expressions may take over the distinct kernels of one table, and
# over one long name: real names take ~0.05–1 ms each (200,000 distinct Triton names: 9 s), but a
# rule like `gemm\w*?tf32` backtracks over a 16,000-character `gemm_gemm_…` for 14 s.
RULES_SECONDS = 20.0
LONG_NAME_SECONDS = 1.0
LONG_TEXT = 512  # a name or stack past this many characters is matched under a timer


class BoundedMatching:
    """Classifies kernels one after another within RULES_SECONDS in all: a long name or stack is
    matched under a timer of LONG_NAME_SECONDS (`interrupted_after`); a kernel whose rules ran out
    of time, and every kernel once the time is spent, gets the label of exact lookups alone
    (`classify_by_lookup`), counted in `cut`."""

    def __init__(self, classifier: Classifier) -> None:
        self.classifier = classifier
        self.spent = 0.0
        self.cut = 0

    def classify(self, name: str, launcher: str | None, stack: str | None) -> Label:
        left = RULES_SECONDS - self.spent
        if left <= 0:
            self.cut += 1
            return self.classifier.classify_by_lookup(name, launcher)
        start = time.perf_counter()
        try:
            if len(name) > LONG_TEXT or len(stack or "") > LONG_TEXT or len(launcher or "") > LONG_TEXT:
                with interrupted_after(min(LONG_NAME_SECONDS, left)):
                    return self.classifier.classify(name, launcher, stack)
            return self.classifier.classify(name, launcher, stack)
        except TooSlow:
            self.cut += 1
            return self.classifier.classify_by_lookup(name, launcher)
        finally:
            self.spent += time.perf_counter() - start

    def note(self) -> str:
        return (
            f"{counted(self.cut, 'distinct kernel', 'distinct kernels')} labelled by exact lookups alone (catalog, "
            f"launcher names): matching the rules took too long (over {LONG_NAME_SECONDS:g} s for a name, or "
            f"{RULES_SECONDS:g} s in all)"
        )


def label_frame(
    frame: pd.DataFrame, classifier: Classifier | None = None, notes: list[str] | None = None
) -> pd.DataFrame:
    """Fill op_mapping/category/label_* of a kernels table: each distinct
    (name, launcher, call stack) is classified once and the labels are joined back, the rules
    within a time (`BoundedMatching`; `notes` gets a line when some kernels went without them)."""
    if frame.empty:
        return frame
    classifier = classifier or default_classifier()
    keys = ["name", "launcher", "call_stack"]
    columns = [frame[k].astype("category") for k in keys]
    codes = np.stack([c.cat.codes.to_numpy(np.int64) for c in columns], axis=1)
    # one integer per (name, launcher, stack) row: a 1-D unique is far cheaper than axis=0
    sizes = [len(c.cat.categories) + 1 for c in columns]
    key = ((codes[:, 0] + 1) * sizes[1] + codes[:, 1] + 1) * sizes[2] + codes[:, 2] + 1
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    unique, inverse = codes[first], inverse.reshape(-1)
    cats = [c.cat.categories.tolist() for c in columns]  # Python lists: an Index lookup per value cost ~2 µs
    matcher = BoundedMatching(classifier)
    labels = []
    for row in unique.tolist():
        name, launcher, stack = (None if c < 0 else cats[i][c] for i, c in enumerate(row))
        labels.append(UNKNOWN if name is None else matcher.classify(name, launcher, stack))
    if matcher.cut and notes is not None:
        notes.append(matcher.note())
    for column, attr in (
        ("op_mapping", "op_mapping"),
        ("category", "category"),
        ("label_rule", "rule"),
        ("label_evidence", "evidence"),
    ):
        values = [getattr(label, attr) for label in labels]
        texts = sorted({v for v in values if v is not None})
        position = {text: i for i, text in enumerate(texts)}
        per_label = np.array([-1 if v is None else position[v] for v in values], dtype=np.int64)
        frame[column] = pd.Categorical.from_codes(per_label[inverse], categories=pd.Index(texts))
    frame["label_confidence"] = np.array([label.confidence for label in labels], dtype=np.float32)[inverse]
    _recorded_collectives(frame, classifier.launchers.collectives)
    return frame


RECORDED_COLLECTIVE_CONFIDENCE = 0.98  # the kernel says what it runs, as NCCL names do


def _recorded_collectives(frame: pd.DataFrame, ops: dict[str, str]) -> None:
    """A communication kernel whose `collective` (its `Collective name` arg) names another op
    than its name's label takes the recorded one (catalogs/launchers.toml `[collectives]`);
    its evidence says so (`collective>name`). The rule stays the name's family."""
    if "collective" not in frame or not ops:
        return
    recorded = frame["collective"].astype("category")
    op_of = [ops.get("".join(c for c in str(text).lower() if "a" <= c <= "z")) for text in recorded.cat.categories]
    codes = recorded.cat.codes.to_numpy()
    by_code = np.array([*op_of, None], dtype=object)  # code -1 (not recorded): the last, None
    op = by_code[codes]
    labelled = frame["op_mapping"].to_numpy(dtype=object)
    rows = np.flatnonzero((frame["category"] == COMMUNICATION).to_numpy() & (op != None) & (op != labelled))  # noqa: E711
    if not len(rows):
        return
    for column, values in (
        ("op_mapping", op[rows]),
        ("label_evidence", ["collective>" + str(e) for e in frame["label_evidence"].to_numpy()[rows]]),
    ):
        texts = frame[column].to_numpy(dtype=object, copy=True)
        texts[rows] = values
        frame[column] = pd.Categorical(texts)
    confidence = frame["label_confidence"].to_numpy().copy()
    confidence[rows] = RECORDED_COLLECTIVE_CONFIDENCE
    frame["label_confidence"] = confidence
