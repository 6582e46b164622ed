"""Rows of a table split by key, as index arrays: what `DataFrame.groupby` iterates, without
building a DataFrame per group (~1 ms each: a trace with 5,000 devices spent seconds there)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pandas as pd


def value_groups(values: np.ndarray) -> Iterator[tuple[object, np.ndarray]]:
    """(value, positions in ascending order) per distinct value of `values`, values ascending
    (NaN last, as one group): `np.flatnonzero(values == v)` for each `v` of `np.unique(values)`,
    with one sort instead of a pass over every value per distinct one."""
    if not len(values):
        return
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    same = ordered[1:] == ordered[:-1]
    if ordered.dtype.kind == "f":
        same |= np.isnan(ordered[1:]) & np.isnan(ordered[:-1])
    starts = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[starts[1:], len(order)]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield ordered[start].item() if hasattr(ordered[start], "item") else ordered[start], order[start:end]


def group_numbers(frame: pd.DataFrame, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group number by `keys`, in `groupby(keys, sort=True, dropna=False)` order
    (sorted, missing values last, as one group), and each group's first row (its key values are
    that row's): per-group facts computed for all groups at once, by `np.bincount` and
    `group_sums`, without a DataFrame per group."""
    if frame.empty:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    number = frame.groupby(list(keys), sort=True, dropna=False, observed=True).ngroup().to_numpy(np.int64)
    _, firsts = np.unique(number, return_index=True)
    return number, firsts


def distinct_codes(columns: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """Per row, a code shared by exactly the rows whose values are equal in every one of `columns`
    (NaN equal to NaN, -0.0 to 0.0): 0, 1, … in order of first appearance. Hashed column by column
    (`pd.factorize`), never sorted: a sort of the rows as bytes cost ~0.1 s per 10^6 keys."""
    code = np.zeros(rows, np.int64)
    for values in columns:
        column, distinct = pd.factorize(values, use_na_sentinel=False)
        code = pd.factorize(code * max(len(distinct), 1) + column)[0].astype(np.int64, copy=False)
    return code


def key_codes(column: pd.Series, empty_is_missing: bool = True) -> np.ndarray:
    """A key column's category codes, -1 for a missing value — and for "" too where
    `empty_is_missing` (a text key written "" or null is one key: the roofline's rows, and the
    calls a finding reads by those rows' keys)."""
    values = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    code = values.cat.codes.to_numpy(np.int64)
    if empty_is_missing:
        empty = np.flatnonzero(values.cat.categories == "")
        code = np.where(code == (empty[0] if len(empty) else -2), -1, code)
    return code


def lexical_codes(codes: np.ndarray, texts: Sequence[object]) -> np.ndarray:
    """Per row, the rank of its text in lexical order (`codes` index `texts`; -1, a missing text,
    ranks after every one): an order of the texts themselves, where codes follow the order texts
    were first met in (a categorical's categories as read)."""
    ranks = np.empty(len(texts) + 1, np.int64)
    ranks[np.argsort(np.asarray(texts, dtype=str), kind="stable")] = np.arange(len(texts))
    ranks[-1] = len(texts)
    return ranks[codes]


def group_sums(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """The sum of `values` in each of `groups` groups (0.0 for an empty one), with the bits
    `values[rows].sum()` gives each group's rows in table order: `np.bincount` adds in turn, as
    `sum` does up to 8 terms; a group of 8 or more, which `sum` adds pairwise, is summed by it."""
    sums = np.bincount(group, weights=values, minlength=groups)
    sizes = np.bincount(group, minlength=groups)
    many = np.flatnonzero(sizes >= 8)
    if len(many):
        order = np.argsort(group, kind="stable")
        bounds = np.r_[0, np.cumsum(sizes)]
        for k in many.tolist():
            sums[k] = values[order[bounds[k] : bounds[k + 1]]].sum()
    return sums


class BatchFold:
    """Tables folded as they arrive, `combine`d in batches of `every` (one concat and group-by per
    batch, not per table: the fixed cost of a group-by is most of the fold of a small rank — a run
    of 200 four-kernel ranks spent more in its per-rank folds than in reading the ranks). `combine`
    joins a list of tables into one (the running total first) and must give what combining every
    table at once gives: sums, maxima, a first value kept. With `single_as_is`, a single table
    (one rank's) is the result as it came, not combined."""

    def __init__(
        self, combine: Callable[[list[pd.DataFrame]], pd.DataFrame], every: int = 64, single_as_is: bool = False
    ) -> None:
        self.combine = combine
        self.every = every
        self.single_as_is = single_as_is
        self._total: pd.DataFrame | None = None
        self._pending: list[pd.DataFrame] = []

    def add(self, table: pd.DataFrame | None) -> None:
        if table is not None:
            self._pending.append(table)
        if len(self._pending) >= self.every:
            self._fold()

    def _fold(self) -> None:
        tables = self._pending if self._total is None else [self._total, *self._pending]
        if tables:
            self._total = self.combine(tables)
        self._pending = []

    def result(self) -> pd.DataFrame | None:
        if self.single_as_is and self._total is None and len(self._pending) == 1:
            return self._pending[0]
        self._fold()
        return self._total
