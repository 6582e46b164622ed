"""Fill a seed-format catalog: label the TBD/empty entries, keep every existing label."""

from __future__ import annotations

from typing import Any

from kernel_atlas.classify.classifier import BoundedMatching, Classifier, Label, unlabelled
from kernel_atlas.classify.rules import load_rules
from kernel_atlas.classify.taxonomy import Taxonomy, load_taxonomy
from kernel_atlas.core.texts import counted

_NAMED = 10  # the entries a note about labels outside the taxonomy names, the rest counted


def fill_catalog(
    entries: list[dict[str, Any]], classifier: Classifier | None = None, notes: list[str] | None = None
) -> list[dict[str, Any]]:
    """A copy of `entries` where every entry has `op_mapping`, `category`, `operation` and
    `label` (rule, evidence, confidence). Existing labels are facts and are kept as they are;
    one outside catalogs/taxonomy.toml labels no other entry and `notes` gets a line naming it.
    An `op_mapping` that is missing, empty or `TBD` (any case, any padding) is unlabelled.
    The rules match within a time (`BoundedMatching`; `notes` gets a line when some went without)."""
    if classifier is None:
        # The catalog's own labels are the known kernels; the shipped catalog is not consulted,
        # so a label is never justified by an earlier run of this same function.
        rules, launchers = load_rules()
        classifier = Classifier(rules, launchers, entries)
    taxonomy = load_taxonomy()
    matcher = BoundedMatching(classifier)
    filled = []
    outside: list[int] = []  # entries whose given label is no taxonomy op
    for index, entry in enumerate(entries):
        entry = dict(entry)
        if unlabelled(entry.get("op_mapping")):
            label = matcher.classify(
                entry.get("kernel_name", ""), entry.get("kernel_implementation"), entry.get("call_stack")
            )
            entry["op_mapping"] = label.op_mapping
            entry["label"] = _provenance(label)
        else:
            given = taxonomy.is_op(entry["op_mapping"])
            if not given:
                outside.append(index)
            entry.setdefault(
                "label",
                {
                    "rule": "given",
                    "evidence": "catalog",
                    "confidence": 1.0,
                    "detail": "label given by the source catalog"
                    + ("" if given else "; not an op_mapping of catalogs/taxonomy.toml"),
                },
            )
        entry["category"] = taxonomy.category(entry["op_mapping"])
        if unlabelled(entry.get("operation")):
            entry["operation"] = taxonomy.operation_of.get(entry["op_mapping"], "")
        filled.append(entry)
    if outside and notes is not None:
        notes.append(_outside_note(entries, outside, taxonomy))
    if matcher.cut and notes is not None:
        notes.append(matcher.note())
    return filled


def _provenance(label: Label) -> dict[str, Any]:
    """The `label` object of a filled entry: what produced its op. Where a sibling's given label
    (same kernel name and launcher) overruled the rules (`catalog>…`), the catalog produced it:
    the classifier's `rule` names the family the rules recognised (what costs and replay look up
    in a trace), which as this provenance had read `rule:gemm` on a `layer_norm`."""
    rule, detail = label.rule, label.detail
    if label.evidence.startswith("catalog>"):
        rule, detail = "catalog:exact", f"{detail} ({label.rule})"
    return {"rule": rule, "evidence": label.evidence, "confidence": round(label.confidence, 2), "detail": detail}


def _outside_note(entries: list[dict[str, Any]], outside: list[int], taxonomy: Taxonomy) -> str:
    lowered = {op.lower(): op for op in taxonomy.category_of}
    named = []
    for index in outside[:_NAMED]:
        op = entries[index]["op_mapping"]
        near = lowered.get(str(op).strip().lower())
        named.append(f"#{index} {op!r}" + (f" (the taxonomy has {near!r})" if near else ""))
    more = len(outside) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more else "")
    return (
        f"{counted(len(outside), 'entry', 'entries')} labelled outside catalogs/taxonomy.toml ({listed}): "
        "kept as given (category other), not used to label other entries"
    )
