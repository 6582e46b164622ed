"""GPU activities and values the kernels table cannot hold as they are, and what happens to them.

A hostile or damaged trace can give a kernel no start or duration (it would land at time 0, a
span of days), a negative duration (busy time that is not there), or numbers wider than their
column (a device id of 2^31 + 5 would wrap to a negative one). Such an activity is left out,
such a value becomes null — each counted in one warning, nothing silently wrong.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from kernel_atlas.core.texts import WAS, counted
from kernel_atlas.store.limits import FLOAT_EXACT, MAX_DEPTH, RECORDED_CALL, too_deep, within_time_bound
from kernel_atlas.store.schema import KERNEL_COLUMNS

_NARROW = {
    name: np.iinfo(kind.to_pandas_dtype())
    for name, kind in KERNEL_COLUMNS.items()
    if pa.types.is_integer(kind) and kind.bit_width < 64
}


def _bits(dtype: object) -> int:
    return np.dtype(getattr(dtype, "numpy_dtype", dtype)).itemsize * 8


def usable_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """`frame` without the activities whose time is unusable (no or non-finite start or
    duration, negative duration), with recorded-call values that are not lists nulled ("not
    recorded") and out-of-range integers nulled, narrowed to their declared width; and the
    warnings saying how many of each."""
    warnings = []
    ts = frame["ts_us"].to_numpy(dtype=np.float64, na_value=np.nan)
    dur = frame["dur_us"].to_numpy(dtype=np.float64, na_value=np.nan)
    no_time = ~within_time_bound(ts, dur)  # NaN too
    negative = ~no_time & (dur < 0)
    for rows, why in ((no_time, "without a usable ts or dur"), (negative, "with a negative duration")):
        n = int(rows.sum())
        if n:
            warnings.append(f"{counted(n, 'GPU activity', 'GPU activities')} {why} {WAS[n != 1]} left out")
    if no_time.any() or negative.any():
        frame = frame[~(no_time | negative)].reset_index(drop=True)
    for name in RECORDED_CALL:
        series = frame.get(name)
        if series is None or not isinstance(series.dtype, pd.CategoricalDtype):
            continue
        kept = [c for c in series.cat.categories if isinstance(c, str) and c.lstrip().startswith("[")]
        shallow = [c for c in kept if not too_deep(c)]
        if len(shallow) < len(kept):
            deep = int(series.isin(set(kept) - set(shallow)).sum())
            warnings.append(f"{deep} `{name}` values nest deeper than {MAX_DEPTH} levels: not recorded")
            kept = shallow
        if len(kept) < len(series.cat.categories):
            lost = int(series.notna().sum())
            frame[name] = series.cat.set_categories(kept)
            lost -= int(frame[name].notna().sum())
            if lost:
                warnings.append(f"{lost} `{name}` values are not lists (as the profiler records them): not recorded")
    for name in FLOAT_EXACT:
        if name not in frame:
            continue
        values = frame[name].astype("Int64")
        outside = (values.abs() >= 2**53).fillna(False).to_numpy(dtype=bool)
        if outside.any():
            warnings.append(f"{int(outside.sum())} `{name}` values beyond 2^53 (no {name} id is) set to null")
            frame[name] = values.mask(outside)
    for name, bounds in _NARROW.items():
        if name not in frame or _bits(frame[name].dtype) <= bounds.bits:
            continue  # as narrow as declared already: nothing can be out of range
        values = frame[name].astype("Int64")
        outside = ((values < bounds.min) | (values > bounds.max)).fillna(False).to_numpy(dtype=bool)
        if outside.any():
            limits = f"{bounds.min}…{bounds.max}"
            warnings.append(f"{int(outside.sum())} `{name}` values out of range ({limits}) set to null")
            values = values.mask(outside)
        frame[name] = values.astype(f"Int{bounds.bits}")
    return frame, warnings
