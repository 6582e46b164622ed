"""Tests on text columns evaluated once per distinct text, not once per row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def name_mask(values: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """`test(text)` per row of a string or categorical column, evaluated once per distinct text."""
    cat = values.astype("category") if not isinstance(values.dtype, pd.CategoricalDtype) else values
    codes = cat.cat.codes.to_numpy()
    hit = np.array([bool(test(str(c))) for c in cat.cat.categories], dtype=bool)
    return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(hit) else False, False)
