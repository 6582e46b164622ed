"""`atlas diff --fail-above PCT`: whether run B regressed against run A, and how comparable the
two runs are.

A regression is a rise of B's GPU time over A's by more than `pct` percent of A's time — for the
whole run, for a category or for an op (`op_mapping`). Rows that are too small to be judged are
not gated: a row is judged only when A's or B's time in it is at least `min_share` of A's GPU
time (1 % by default), so that a 3 µs kernel doubling never fails a build. An op or category
that appears in B above that size counts as a regression (its rise over A's zero is unbounded).

A rise of exactly `pct` is no regression: the rise is compared with `pct` % of A's time within
float rounding (100 µs → 115 µs at `--fail-above 15` had failed: 100 · 1.15 = 114.99999999999999);
likewise a row of exactly `min_share` of A's time is judged (0.07 · 100 µs = 7.000000000000001
had left a 7 µs row out).

Comparability says whether such a verdict means anything: the same GPU on both sides (unknown
where a run records none), the share of GPU time (A and B together) in ops and in kernels that
both runs have (none where neither run has GPU time), and what each run's times are totals over —
its ranks, whole profiler steps and the GPU time outside them: 3 steps against 6 of the same
program doubled every time, and a cut-short 4th step added its time to B's total unsaid. And
whether the runs did the same work: the share of the GPU time of op calls at recorded shapes that
lies in calls at shapes both runs record (the diff's call signatures, `cpu op · input shapes`) —
two runs of one model at batch 32 and 64 share every op and kernel, and had read "100 % in ops
both runs have" at +100 % everywhere; not known where a run records no shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.taxonomy import UNKNOWN_OP

SIGNATURE_SEPARATOR = " · "  # between a call's op and its input shapes (`call_signatures`)

GATED_LEVELS = ("category", "op_mapping")
MIN_SHARE = 0.01
# Under this share of the time at recorded shapes in calls at shapes both runs record, most of the
# work is at shapes one run only ran: another batch size or sequence length, said as such (the
# shapes of data-dependent ops — an embedding lookup's indices — differ between any two runs, so
# a share a little under 100 % says nothing)
SHAPES_LOW = 0.5


@dataclass(frozen=True)
class Regression:
    level: str  # "total", "category" or "op_mapping"
    key: str
    a_us: float
    b_us: float
    appeared: bool = False  # A ran nothing in it ("new"), not: A's activities in it took 0 µs

    @property
    def pct(self) -> float | None:
        """The rise in percent of A's time; None where A had none (appeared, or 0 µs)."""
        return 100.0 * (self.b_us - self.a_us) / self.a_us if self.a_us > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "key": self.key,
            "a_us": self.a_us,
            "b_us": self.b_us,
            "pct": self.pct,
            "appeared": self.appeared,
        }


@dataclass(frozen=True)
class Window:
    """What a run's times are totals over: its ranks and whole profiler steps (None: none
    recorded), and the GPU time outside those steps (in its totals; with per_step, left out)."""

    ranks: int = 1
    steps: int | None = None
    per_step: bool = False  # times divided by each rank's steps, kernels outside every step left out
    outside_steps_us: float = 0.0  # GPU time outside the whole steps: a cut-short last step, warm-up


@dataclass(frozen=True)
class Shapes:
    """GPU time (A and B together) in op calls with recorded shapes, and the part of it in calls
    at shapes both runs record (`call_signatures`: `cpu op · input shapes`)."""

    recorded_us: float
    matched_us: float
    a_records: bool  # whether run A records the shapes of any op call with GPU time
    b_records: bool

    @property
    def share(self) -> float | None:
        """matched / recorded; None where not known — a run records no shapes (`record_shapes`
        off: its time is at no shape, and B's calls at A's shapes had read 0 %)."""
        if not (self.a_records and self.b_records) or self.recorded_us <= 0:
            return None
        return self.matched_us / self.recorded_us


@dataclass(frozen=True)
class Comparability:
    same_device: bool | None  # None: a run records no GPU
    a_gpus: list[str]
    b_gpus: list[str]
    ops_matched_share: float | None  # GPU time (A + B) in ops both runs have / all (None: no GPU time)
    kernels_matched_share: float | None  # the same for kernels (by name, or op+shapes)
    a_window: Window | None = None
    b_window: Window | None = None
    shapes: Shapes | None = None  # None: not measured (the caller gave no activities)

    @property
    def shapes_matched_share(self) -> float | None:
        """`Shapes.share`; None where not known or not measured."""
        return self.shapes.share if self.shapes is not None else None

    @property
    def same_window(self) -> bool | None:
        """Whether both runs' times are totals over as many ranks and whole steps, with as much
        GPU time outside those steps (per step: as many ranks); None where not known — a run
        records no profiler steps (3 steps against 6 unmarked iterations were "the same")."""
        a, b = self.a_window, self.b_window
        if a is None or b is None:
            return None
        if a.ranks != b.ranks:
            return False
        if a.per_step and b.per_step:  # one step of each; what lies outside is left out (and said)
            return True
        if a.steps is None or b.steps is None:
            return None
        return a.steps == b.steps and bool(np.isclose(a.outside_steps_us, b.outside_steps_us, rtol=1e-9, atol=0.0))

    def to_json(self) -> dict[str, Any]:
        windows = {
            f"{side}_{key}": getattr(window, key) if window is not None else None
            for side, window in (("a", self.a_window), ("b", self.b_window))
            for key in ("ranks", "steps", "outside_steps_us")
        }
        per_step = bool(self.a_window and self.a_window.per_step and self.b_window and self.b_window.per_step)
        return {
            "same_device": self.same_device,
            "a_gpus": self.a_gpus,
            "b_gpus": self.b_gpus,
            "ops_matched_share": self.ops_matched_share,
            "kernels_matched_share": self.kernels_matched_share,
            "shapes_matched_share": self.shapes_matched_share,
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


def _matched_share(rows: pd.DataFrame) -> float | None:
    """Share of A + B time in rows that both runs have; None where neither has any (0/0)."""
    total = float(rows["a_us"].sum() + rows["b_us"].sum())
    if total <= 0:
        return None
    both = rows[rows["status"] == "both"]
    return float(both["a_us"].sum() + both["b_us"].sum()) / total


def call_signatures(table: pd.DataFrame) -> np.ndarray:
    """`cpu op · input shapes` of the call that launched each activity; '' where no shape was
    recorded, nothing to match on: no input dims, no launching op, or dims without one dimension
    (`[[],[]]` — PyTorch records a TensorList argument as `[]`, so every `aten::cat` call of any
    size had one signature and all of a run's cats were compared as one call). The op label is
    no part of it: it is given per kernel, and differs where the GPUs run different kinds of
    kernels for one call (`copy_` for a copy kernel, `memcpy` for a DtoD copy)."""
    dims = table["input_dims"]
    recorded = dims.str.contains(r"\d", regex=True).to_numpy(bool) & (table["cpu_op"] != "").to_numpy(bool)
    text = (table["cpu_op"] + SIGNATURE_SEPARATOR + dims).to_numpy()
    return np.where(recorded, text, "")


def shapes_matched(a: pd.DataFrame, b: pd.DataFrame) -> Shapes:
    """How much of two runs' GPU time at recorded shapes is in op calls at shapes both runs
    record, from their `_activities` tables (`analysis.diff.Side.activities`): the call
    signatures the diff matches op+shapes groups by, so that both say the same of a call."""
    sig_a, sig_b = call_signatures(a), call_signatures(b)
    both = np.intersect1d(sig_a[sig_a != ""], sig_b[sig_b != ""])
    us_a, us_b = a["us"].to_numpy(float), b["us"].to_numpy(float)
    recorded_a, recorded_b = (sig_a != "") & (us_a > 0), (sig_b != "") & (us_b > 0)
    return Shapes(
        recorded_us=float(us_a[recorded_a].sum() + us_b[recorded_b].sum()),
        matched_us=float(us_a[np.isin(sig_a, both)].sum() + us_b[np.isin(sig_b, both)].sum()),
        a_records=bool(recorded_a.any()),
        b_records=bool(recorded_b.any()),
    )


def comparability(
    table: pd.DataFrame,
    a_gpus: list[str],
    b_gpus: list[str],
    a_window: Window | None = None,
    b_window: Window | None = None,
    activities: tuple[pd.DataFrame, pd.DataFrame] | None = None,
) -> Comparability:
    """How comparable two runs are, from a diff table (analysis of `atlas diff`, COLUMNS) and —
    for the share at shapes both runs record — the runs' activities (`Side.activities`, A and B;
    without them that share is not measured, and not said)."""
    ops = table[table["level"] == "op_mapping"]
    # activities without an op label match nothing by op — unattributed ones are labelled
    # `unknown` (two unrelated custom kernels were "an op both runs have"): their time is in
    # the whole, never in the part both runs have
    ops = ops.assign(status=ops["status"].where(~ops["key"].isin(["(none)", UNKNOWN_OP]), "unlabelled"))
    kernels = table[table["level"] == "kernel"]
    return Comparability(
        same_device=sorted(a_gpus) == sorted(b_gpus) if a_gpus and b_gpus else None,
        a_gpus=list(a_gpus),
        b_gpus=list(b_gpus),
        ops_matched_share=_matched_share(ops),
        kernels_matched_share=_matched_share(kernels),
        a_window=a_window,
        b_window=b_window,
        shapes=shapes_matched(*activities) if activities is not None else None,
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
    first; rows below `min_share` of A's GPU time on both sides are not judged (one of exactly
    `min_share` is, within float rounding)."""
    found: list[Regression] = []
    if bool(_rises(total_a_us, total_b_us, pct)) and total_b_us > 0:
        status = table.loc[table["level"] == "category", "status"]
        nothing_in_a = bool(len(status)) and bool((status == "appeared").all())
        found.append(Regression("total", "GPU time", total_a_us, total_b_us, nothing_in_a))
    floor = min_share * total_a_us
    rows = table[table["level"].isin(GATED_LEVELS)]
    a_us, b_us = rows["a_us"].to_numpy(float), rows["b_us"].to_numpy(float)
    largest = np.maximum(a_us, b_us)
    big = (largest >= floor) | np.isclose(largest, floor, rtol=1e-9, atol=0.0)
    hit = rows[big & _rises(a_us, b_us, pct) & (b_us > 0)]
    hit = hit.assign(_rise=hit["b_us"] - hit["a_us"]).sort_values(["_rise", "key"], ascending=[False, True])
    found.extend(
        Regression(str(r.level), str(r.key), float(r.a_us), float(r.b_us), r.status == "appeared")
        for r in hit.itertuples()
    )
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
    activities: tuple[pd.DataFrame, pd.DataFrame] | None = None,
) -> Verdict:
    """The verdict of `atlas diff --fail-above pct` on a diff table (`activities`: as
    `comparability`). It judges the totals whatever the windows: where they differ
    (`Comparability.same_window`), its line says so (`report.diff_markdown.verdict_line`)."""
    pct = pct + 0.0  # -0 is 0 (said as "more than 0 %")
    return Verdict(
        fail_above_pct=pct,
        min_share=min_share,
        total_a_us=total_a_us,
        total_b_us=total_b_us,
        regressions=regressions(table, total_a_us, total_b_us, pct, min_share),
        comparability=comparability(table, a_gpus, b_gpus, a_window, b_window, activities),
    )
