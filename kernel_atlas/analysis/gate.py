"""`atlas diff --fail-above PCT`: whether run B regressed against run A, and how comparable the
two runs are.

A regression is a rise of B's GPU time over A's by more than `pct` percent of A's time — for the
whole run, for a category or for an op (`op_mapping`). Rows that are too small to be judged are
not gated: a row is judged only when A's or B's time in it is at least `min_share` of A's GPU
time (1 % by default), so that a 3 µs kernel doubling never fails a build. An op or category
that appears in B above that size counts as a regression (its rise over A's zero is unbounded).

A rise of exactly `pct` is no regression: the rise is compared with `pct` % of A's time within
float rounding (100 µs → 115 µs at `--fail-above 15` had failed: 100 · 1.15 = 114.99999999999999).

Comparability says whether such a verdict means anything: the same GPU on both sides (unknown
where a run records none), the share of GPU time (A and B together) in ops and in kernels that
both runs have, and what each run's times are totals over — its ranks and profiler steps: 3
steps against 6 of the same program doubled every time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

GATED_LEVELS = ("category", "op_mapping")
MIN_SHARE = 0.01


@dataclass(frozen=True)
class Regression:
    level: str  # "total", "category" or "op_mapping"
    key: str
    a_us: float
    b_us: float

    @property
    def pct(self) -> float | None:
        """The rise in percent of A's time; None where A had none (appeared)."""
        return 100.0 * (self.b_us - self.a_us) / self.a_us if self.a_us > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "key": self.key, "a_us": self.a_us, "b_us": self.b_us, "pct": self.pct}


@dataclass(frozen=True)
class Window:
    """What a run's times are totals over: its ranks and profiler steps (None: none recorded)."""

    ranks: int = 1
    steps: int | None = None
    per_step: bool = False  # times divided by each rank's steps, kernels outside every step left out
    outside_steps_us: float = 0.0  # with per_step: the GPU time left out


@dataclass(frozen=True)
class Comparability:
    same_device: bool | None  # None: a run records no GPU
    a_gpus: list[str]
    b_gpus: list[str]
    ops_matched_share: float  # GPU time (A + B) in ops both runs have / all GPU time (A + B)
    kernels_matched_share: float  # the same for kernels (by name, or op+shapes)
    a_window: Window | None = None
    b_window: Window | None = None

    @property
    def same_window(self) -> bool | None:
        """Whether both runs' times are totals over as many ranks and steps (None: not known)."""
        a, b = self.a_window, self.b_window
        if a is None or b is None:
            return None
        steps_known = a.steps is not None and b.steps is not None
        steps_apart = steps_known and a.steps != b.steps and not (a.per_step and b.per_step)
        return a.ranks == b.ranks and not steps_apart

    def to_json(self) -> dict[str, Any]:
        windows = {
            f"{side}_{key}": getattr(window, key) if window is not None else None
            for side, window in (("a", self.a_window), ("b", self.b_window))
            for key in ("ranks", "steps")
        }
        per_step = bool(self.a_window and self.a_window.per_step and self.b_window and self.b_window.per_step)
        return {
            "same_device": self.same_device,
            "a_gpus": self.a_gpus,
            "b_gpus": self.b_gpus,
            "ops_matched_share": self.ops_matched_share,
            "kernels_matched_share": self.kernels_matched_share,
            **windows,
            "per_step": per_step,
            "same_window": self.same_window,
        }


@dataclass(frozen=True)
class Verdict:
    fail_above_pct: float
    min_share: float
    total_a_us: float
    total_b_us: float
    regressions: list[Regression] = field(default_factory=list)
    comparability: Comparability | None = None

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def to_json(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "fail_above_pct": self.fail_above_pct,
            "min_share": self.min_share,
            "total_a_us": self.total_a_us,
            "total_b_us": self.total_b_us,
            "regressions": [r.to_json() for r in self.regressions],
            "comparability": self.comparability.to_json() if self.comparability else None,
        }


def _matched_share(rows: pd.DataFrame) -> float:
    """Share of A + B time in rows that both runs have."""
    total = float(rows["a_us"].sum() + rows["b_us"].sum())
    if total <= 0:
        return 1.0
    both = rows[rows["status"] == "both"]
    return float(both["a_us"].sum() + both["b_us"].sum()) / total


def comparability(
    table: pd.DataFrame,
    a_gpus: list[str],
    b_gpus: list[str],
    a_window: Window | None = None,
    b_window: Window | None = None,
) -> Comparability:
    """How comparable two runs are, from a diff table (analysis of `atlas diff`, COLUMNS)."""
    ops = table[table["level"] == "op_mapping"]
    ops = ops[ops["key"] != "(none)"]  # activities without an op label match nothing by op
    kernels = table[table["level"] == "kernel"]
    return Comparability(
        same_device=sorted(a_gpus) == sorted(b_gpus) if a_gpus and b_gpus else None,
        a_gpus=list(a_gpus),
        b_gpus=list(b_gpus),
        ops_matched_share=_matched_share(ops),
        kernels_matched_share=_matched_share(kernels),
        a_window=a_window,
        b_window=b_window,
    )


def _rises(a_us: np.ndarray | float, b_us: np.ndarray | float, pct: float) -> np.ndarray | bool:
    """Whether B rose over A by more than `pct` % of A, a rise of exactly `pct` % (within float
    rounding) not counted."""
    with np.errstate(over="ignore", invalid="ignore"):  # a huge PCT: nothing rises that far (inf)
        limit = np.multiply(a_us, pct / 100.0)
        rise = np.subtract(b_us, a_us)
        return (rise > limit) & ~np.isclose(rise, limit, rtol=1e-9, atol=0.0)


def regressions(
    table: pd.DataFrame, total_a_us: float, total_b_us: float, pct: float, min_share: float
) -> list[Regression]:
    """Total, categories and ops of B above A by more than `pct` % of A's time, largest rise
    first; rows below `min_share` of A's GPU time on both sides are not judged."""
    found: list[Regression] = []
    if bool(_rises(total_a_us, total_b_us, pct)) and total_b_us > 0:
        found.append(Regression("total", "GPU time", total_a_us, total_b_us))
    floor = min_share * total_a_us
    rows = table[table["level"].isin(GATED_LEVELS)]
    a_us, b_us = rows["a_us"].to_numpy(float), rows["b_us"].to_numpy(float)
    big = np.maximum(a_us, b_us) >= floor
    hit = rows[big & _rises(a_us, b_us, pct) & (b_us > 0)]
    hit = hit.assign(_rise=hit["b_us"] - hit["a_us"]).sort_values(["_rise", "key"], ascending=[False, True])
    found.extend(Regression(str(r.level), str(r.key), float(r.a_us), float(r.b_us)) for r in hit.itertuples())
    return found


def judge(
    table: pd.DataFrame,
    total_a_us: float,
    total_b_us: float,
    a_gpus: list[str],
    b_gpus: list[str],
    pct: float,
    min_share: float = MIN_SHARE,
    a_window: Window | None = None,
    b_window: Window | None = None,
) -> Verdict:
    """The verdict of `atlas diff --fail-above pct` on a diff table."""
    pct = pct + 0.0  # -0 is 0 (said as "more than 0 %")
    return Verdict(
        fail_above_pct=pct,
        min_share=min_share,
        total_a_us=total_a_us,
        total_b_us=total_b_us,
        regressions=regressions(table, total_a_us, total_b_us, pct, min_share),
        comparability=comparability(table, a_gpus, b_gpus, a_window, b_window),
    )
