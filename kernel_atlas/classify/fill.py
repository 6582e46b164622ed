"""Fill a seed-format catalog: label the TBD/empty entries, keep every existing label."""

from __future__ import annotations

from typing import Any

from kernel_atlas.classify.classifier import UNLABELLED, BoundedMatching, Classifier
from kernel_atlas.classify.rules import load_rules
from kernel_atlas.classify.taxonomy import load_taxonomy


def fill_catalog(
    entries: list[dict[str, Any]], classifier: Classifier | None = None, notes: list[str] | None = None
) -> list[dict[str, Any]]:
    """A copy of `entries` where every entry has `op_mapping`, `category`, `operation` and
    `label` (rule, evidence, confidence). Existing labels are facts and are kept as they are.
    The rules match within a time (`BoundedMatching`; `notes` gets a line when some went without)."""
    if classifier is None:
        # The catalog's own labels are the known kernels; the shipped catalog is not consulted,
        # so a label is never justified by an earlier run of this same function.
        rules, launchers = load_rules()
        classifier = Classifier(rules, launchers, entries)
    taxonomy = load_taxonomy()
    matcher = BoundedMatching(classifier)
    filled = []
    for entry in entries:
        entry = dict(entry)
        if entry.get("op_mapping") in UNLABELLED:
            label = matcher.classify(
                entry.get("kernel_name", ""), entry.get("kernel_implementation"), entry.get("call_stack")
            )
            entry["op_mapping"] = label.op_mapping
            entry["label"] = {
                "rule": label.rule,
                "evidence": label.evidence,
                "confidence": round(label.confidence, 2),
                "detail": label.detail,
            }
        else:
            entry.setdefault(
                "label",
                {
                    "rule": "given",
                    "evidence": "catalog",
                    "confidence": 1.0,
                    "detail": "label given by the source catalog",
                },
            )
        entry["category"] = taxonomy.category(entry["op_mapping"])
        if entry.get("operation") in UNLABELLED:
            entry["operation"] = taxonomy.operation_of.get(entry["op_mapping"], "")
        filled.append(entry)
    if matcher.cut and notes is not None:
        notes.append(matcher.note())
    return filled
