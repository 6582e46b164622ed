"""Per-rank tables folded in batches (analysis/ranks._SumFold): the same rows as folding them one
rank at a time — summed columns added up, the others' first value kept, keys in order of first
appearance — whatever the batch size."""

from __future__ import annotations

import pandas as pd
import pytest

from kernel_atlas.analysis import ranks


@pytest.mark.parametrize("every", [1, 2, 64])
def test_batches_fold_to_the_same_rows(monkeypatch, every: int) -> None:
    monkeypatch.setattr(ranks._SumFold, "FOLD_EVERY", every)
    fold = ranks._SumFold(["key"], ["count", "total_us"])
    parts = [("a", 1, 0.5, "r0"), ("a", 2, 1.0, "r1"), ("b", 3, 2.0, "r2"), ("a", 4, 0.25, "r3"), ("b", 5, 4.0, "r4")]
    for key, count, total, note in parts:
        fold.add(pd.DataFrame({"key": [key], "count": [count], "total_us": [total], "note": [note]}))
    fold.add(None)  # a rank without such a table
    table = fold.result()
    assert table["key"].tolist() == ["a", "b"]
    assert table["count"].tolist() == [7, 8]
    assert table["total_us"].tolist() == [1.75, 6.0]
    assert table["note"].tolist() == ["r0", "r2"]  # the first rank's value
    assert ranks._SumFold(["key"], ["count"]).result() is None
