"""Per-rank tables folded in batches (core.groups.BatchFold, analysis/ranks.sum_fold): the same rows as folding them one
rank at a time — summed columns added up, the others' first value kept, keys in order of first
appearance — whatever the batch size."""

from __future__ import annotations

import pandas as pd
import pytest

from kernel_atlas.analysis import ranks


@pytest.mark.parametrize("every", [1, 2, 64])
def test_batches_fold_to_the_same_rows(every: int) -> None:
    fold = ranks.sum_fold(["key"], ["count", "total_us"])
    fold.every = every
    parts = [("a", 1, 0.5, "r0"), ("a", 2, 1.0, "r1"), ("b", 3, 2.0, "r2"), ("a", 4, 0.25, "r3"), ("b", 5, 4.0, "r4")]
    for key, count, total, note in parts:
        fold.add(pd.DataFrame({"key": [key], "count": [count], "total_us": [total], "note": [note]}))
    fold.add(None)  # a rank without such a table
    table = fold.result()
    assert table["key"].tolist() == ["a", "b"]
    assert table["count"].tolist() == [7, 8]
    assert table["total_us"].tolist() == [1.75, 6.0]
    assert table["note"].tolist() == ["r0", "r2"]  # the first rank's value
    assert ranks.sum_fold(["key"], ["count"]).result() is None


@pytest.mark.parametrize("every", [1, 3, 64])
def test_the_views_of_many_ranks_fold_to_the_same_sums(every: int) -> None:
    """Module and step times of several ranks add up whatever the batch; one rank's come back as
    they were."""
    from kernel_atlas.analysis.views import KernelViews, ViewsFold

    def views(modules: dict[str, float], steps: list[tuple[int | None, str, float]]) -> KernelViews:
        module_table = pd.DataFrame({"module": list(modules), "dur_us": list(modules.values())})
        step_table = pd.DataFrame(steps, columns=["step", "category", "dur_us"]).astype({"step": "Int64"})
        return KernelViews(module_table, step_table, None)

    one = ViewsFold()
    alone = views({"m": 1.0}, [(1, "gemm", 1.0)])
    one.add(0, alone)
    assert one.result().modules is alone.modules and one.result().steps is alone.steps

    fold = ViewsFold()
    fold._modules.every = fold._steps.every = every
    fold.add(0, views({"b": 1.0, "a": 2.0}, [(1, "gemm", 1.0), (None, "comm", 4.0)]))
    fold.add(1, views({"a": 0.5}, [(1, "gemm", 2.0), (2, "gemm", 8.0)]))
    fold.add(2, views({"c": 3.0, "b": 0.25}, [(None, "comm", 16.0)]))
    result = fold.result()
    assert result.ranks == 3
    assert result.modules.to_dict("list") == {"module": ["a", "b", "c"], "dur_us": [2.5, 1.25, 3.0]}
    steps = result.steps
    assert steps["step"].tolist()[:2] == [1, 2] and steps["step"].isna().tolist() == [False, False, True]
    assert steps["category"].tolist() == ["gemm", "gemm", "comm"] and steps["dur_us"].tolist() == [3.0, 8.0, 20.0]
