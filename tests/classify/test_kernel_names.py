"""The names corpus: ≥ 99 % of real kernel names (tests/data/kernel_names.csv, labelled
independently of the classifier, see kernel_names_SOURCES.md) get their expected category and,
where the corpus gives one, op_mapping. Every miss is listed."""

from __future__ import annotations

import csv
from pathlib import Path

from kernel_atlas.classify.classifier import default_classifier

CORPUS = Path(__file__).resolve().parents[1] / "data" / "kernel_names.csv"


def corpus_misses() -> tuple[int, list[str]]:
    classifier = default_classifier()
    with CORPUS.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    misses = []
    for row in rows:
        label = classifier.classify(row["name"], row["launcher"] or None, row["stack"] or None)
        wrong_op = row["op_mapping"] and label.op_mapping != row["op_mapping"]
        if label.category != row["category"] or wrong_op:
            expected = f"{row['category']}/{row['op_mapping'] or '*'}"
            misses.append(
                f"{row['name'][:110]!r}: expected {expected}, got {label.category}/{label.op_mapping} ({label.rule})"
            )
    return len(rows), misses


def test_names_corpus_is_classified_right() -> None:
    total, misses = corpus_misses()
    assert total >= 600
    assert len(misses) <= 0.01 * total, "\n".join(misses)
