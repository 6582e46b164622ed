"""Label kernels: walk the ordered rules, first match wins, and say which rule it was."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.names import family_key, name_texts
from kernel_atlas.classify.rules import LauncherTable, Rule, load_rules
from kernel_atlas.classify.taxonomy import OTHER_CATEGORY, UNKNOWN_OP, load_taxonomy
from kernel_atlas.paths import catalogs_dir

UNLABELLED = ("", "TBD", None)


@dataclass(frozen=True)
class Label:
    op_mapping: str
    category: str
    rule: str  # "rule:<id>", "catalog:exact", "launcher:<op name>", ... or "none"
    evidence: str  # what the rule looked at: name, launcher, stack, catalog
    confidence: float
    detail: str = ""


@dataclass(frozen=True)
class Step:
    """One step of `explain`: a rule, whether it matched, and what it would say."""

    rule: str
    matched: bool
    op_mapping: str | None
    detail: str


UNKNOWN = Label(UNKNOWN_OP, OTHER_CATEGORY, "none", "none", 0.0, "no rule, launcher or catalog entry matched")


def _entry_op(entry: dict[str, Any]) -> str | None:
    op = entry.get("op_mapping")
    return None if op in UNLABELLED or op == UNKNOWN_OP else op


class Classifier:
    def __init__(self, rules: tuple[Rule, ...], launchers: LauncherTable, catalog: list[dict[str, Any]]):
        self.rules = rules
        self.launchers = launchers
        self.taxonomy = load_taxonomy()
        self.catalog = catalog
        self.exact: dict[tuple[str, str], str] = {}
        self.source: dict[str, str] = {}  # kernel name → where the catalog's label came from
        by_name: dict[str, set[str]] = {}
        by_family: dict[str, set[str]] = {}
        for index, entry in enumerate(catalog):
            op = _entry_op(entry)
            if op is None:
                continue
            name = entry["kernel_name"]
            self.exact[(name, entry.get("kernel_implementation") or "")] = op
            origin = (entry.get("label") or {}).get("rule", "given")
            self.source.setdefault(name, f"catalog entry #{index}, labelled by {origin}")
            by_name.setdefault(name, set()).add(op)
            by_family.setdefault(family_key(name), set()).add(op)
        # Name-only and family matches are used only where the catalog is unambiguous.
        self.by_name = {k: next(iter(v)) for k, v in by_name.items() if len(v) == 1}
        self.by_family = {k: next(iter(v)) for k, v in by_family.items() if len(v) == 1}

    def _label(self, op: str, rule: str, evidence: str, confidence: float, detail: str) -> Label:
        return Label(op, self.taxonomy.category(op), rule, evidence, confidence, detail)

    def _try(self, rule: Rule, name: str, launcher: str, stack: str) -> tuple[str | None, str]:
        """(op, detail) when the rule applies, (None, why not) otherwise."""
        if rule.use == "catalog_exact":
            op = self.exact.get((name, launcher))
            if op is not None:
                return op, f"kernel name and launcher equal {self.source[name]}"
            op = self.by_name.get(name)
            if op is None:
                return None, "no catalog entry with this name"
            return op, f"kernel name equals {self.source[name]}"
        if rule.use == "catalog_family":
            op = self.by_family.get(family_key(name))
            if op:
                return op, f"normalised name {family_key(name)!r} equals a catalog entry's"
            return None, "no catalog entry with this normalised name"
        if rule.use == "launcher_table":
            if not launcher:
                return None, "no launcher"
            hit = self.launchers.lookup(launcher)
            if hit is None:
                return None, f"launcher {launcher!r} not in catalogs/launchers.toml"
            return hit[0], f"launcher {launcher!r} matches {hit[1]!r}"
        texts = name_texts(name)
        match = None
        if rule.name is not None:
            match = next((m for m in map(rule.name.search, texts) if m), None)
            if match is None:
                return None, "name does not match"
        if rule.not_name is not None and any(map(rule.not_name.search, texts)):
            return None, "name matches not_name"
        if rule.launcher is not None and not (launcher and rule.launcher.search(launcher)):
            return None, "launcher does not match"
        if rule.not_launcher is not None and launcher and rule.not_launcher.search(launcher):
            return None, "launcher matches not_launcher"
        if rule.stack is not None and not (stack and rule.stack.search(stack)):
            return None, "call stack does not match"
        if rule.not_stack is not None and stack and rule.not_stack.search(stack):
            return None, "call stack matches not_stack"
        if rule.map:
            key = (match.group("key") if match else "").lower()
            op = rule.map.get(key)
            if op is None:
                return None, f"name group {key!r} not in the rule's map"
            return op, f"{rule.evidence} matches; {key!r} maps to {op}"
        return rule.op, f"{rule.evidence} matches" + (f" ({rule.why})" if rule.why else "")

    def classify(self, name: str, launcher: str | None = None, stack: str | None = None) -> Label:
        launcher, stack = launcher or "", stack or ""
        for rule in self.rules:
            op, detail = self._try(rule, name, launcher, stack)
            if op is not None:
                return self._describe(rule, op, detail)
        return UNKNOWN

    def _describe(self, rule: Rule, op: str, detail: str) -> Label:
        if rule.use == "catalog_exact":
            return self._label(op, "catalog:exact", "catalog", 1.0, detail)
        if rule.use == "catalog_family":
            return self._label(op, "catalog:family", "catalog", rule.confidence, detail)
        if rule.use == "launcher_table":
            return self._label(op, "launcher-table", "launcher", rule.confidence, detail)
        return self._label(op, f"rule:{rule.id}", rule.evidence, rule.confidence, detail)

    def explain(self, name: str, launcher: str | None = None, stack: str | None = None) -> list[Step]:
        launcher, stack = launcher or "", stack or ""
        steps = []
        for rule in self.rules:
            op, detail = self._try(rule, name, launcher, stack)
            label = rule.use or f"rule:{rule.id}"
            steps.append(Step(label, op is not None, op, detail))
        return steps


def load_catalog(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise ValueError("a kernel catalog is a JSON list of entries")
    return data


@lru_cache(maxsize=1)
def default_classifier() -> Classifier:
    rules, launchers = load_rules()
    return Classifier(rules, launchers, load_catalog(catalogs_dir() / "kernels.json"))


def label_frame(frame: pd.DataFrame, classifier: Classifier | None = None) -> pd.DataFrame:
    """Fill op_mapping/category/label_* of a kernels table: each distinct
    (name, launcher, call stack) is classified once and the labels are joined back."""
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
    cats = [c.cat.categories for c in columns]
    labels = []
    for row in unique:
        name, launcher, stack = (None if c < 0 else cats[i][c] for i, c in enumerate(row))
        if name is None:
            labels.append(UNKNOWN)
            continue
        labels.append(classifier.classify(name, launcher, stack))
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
    return frame
