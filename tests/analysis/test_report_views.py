"""The report's small per-value tables: texts converted once per distinct value, sums by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.analysis.views import NO_MODULE, module_times, step_times, text_codes


def test_text_codes_convert_each_distinct_value_once() -> None:
    values = pd.Series(["b.x", None, "a.y", "b.z", "a.y"], dtype="category")
    seen: list[str] = []

    def first_letter(text: str) -> str:
        seen.append(text)
        return text[0]

    codes, texts = text_codes(values, first_letter)
    assert sorted(seen) == ["a.y", "b.x", "b.z"]  # per category, not per row
    assert [texts[c] if c >= 0 else None for c in codes] == ["b", None, "a", "b", "a"]
    assert len(set(texts)) == len(texts)  # "b.x" and "b.z" share one code
    codes, texts = text_codes(values, missing="(none)")
    assert list(texts[codes]) == ["b.x", "(none)", "a.y", "b.z", "a.y"]


def test_module_and_step_times_by_hand() -> None:
    kernels = pd.DataFrame(
        {
            "module": pd.Categorical(["enc.layer", None, "dec", "enc.layer", None]),
            "step": [1.0, 1.0, 2.0, np.nan, 2.0],
            "category": pd.Categorical(["gemm", "gemm", "memory", "gemm", None]),
            "dur_us": [1.5, 2.0, 4.0, 0.25, 8.0],
        }
    )
    modules = module_times(kernels)
    assert list(modules["module"]) == [NO_MODULE, "dec", "enc.layer"]  # sorted by name
    assert list(modules["dur_us"]) == [10.0, 4.0, 1.75]
    steps = step_times(kernels)
    rows = [
        (None if pd.isna(s) else int(s), None if pd.isna(c) else c, t)
        for s, c, t in steps[["step", "category", "dur_us"]].itertuples(index=False)
    ]
    assert rows == [(1, "gemm", 3.5), (2, "memory", 4.0), (2, None, 8.0), (None, "gemm", 0.25)]
