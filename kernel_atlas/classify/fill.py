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
    """A copy of `entries` where every entry has `op_mapping`, `category` and `label` (rule,
    evidence, confidence), and every newly labelled one an `operation` where it had none (its
    op's generic formula, `_generic_operation`). Existing labels are facts and are kept as they are
    (their `operation` too: a given matmul's empty one had been written "C = A @ B …");
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
            if unlabelled(entry.get("operation")):
                entry["operation"] = _generic_operation(label.op_mapping, taxonomy)
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
        filled.append(entry)
    if outside and notes is not None:
        notes.append(_outside_note(entries, outside, taxonomy))
    if matcher.cut and notes is not None:
        notes.append(matcher.note())
    return filled


def _generic_operation(op: str, taxonomy: Taxonomy) -> str:
    """A newly labelled entry's `operation`: its op's formula (catalogs/taxonomy.toml), said to be
    the op's, not the kernel's — `_tma_align_input_scale_kernel`, `quantize`, re-lays out scales
    and casts nothing, which "q = cast(x / scale) …" alone had said it does."""
    formula = taxonomy.operation_of.get(op, "")
    return f"generic {op}: {formula}" if formula else ""


def _provenance(label: Label) -> dict[str, Any]:
    """The `label` object of a filled entry: what produced its op (`Label.produced_by`), with the
    family the name's rule recognised in the detail. The classifier's `rule` names that family
    (what costs and replay look up in a trace): as this provenance it had read `rule:gemm` on a
    `layer_norm` a sibling's given label (same kernel name and launcher) set (`catalog>…`), and
    `rule:inductor-pointwise` on a `serving_metadata` a `[[context]]` rule made of its stack."""
    rule, detail = label.produced_by or label.rule, label.detail
    if label.evidence.startswith("catalog>"):
        detail = f"{detail} ({label.rule})"
    elif label.produced_by and label.rule not in detail:  # the context's detail follows the name's
        detail = f"{label.rule}: {detail}"
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
