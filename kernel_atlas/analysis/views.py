"""The small tables behind the report's kernel-row figures, built one rank at a time.

The `nn.Module` treemap and the per-step chart need only the GPU time per module path and per
(step, category): tables of at most a few thousand rows that add up across ranks, so a fleet's
are the sums of its ranks'. A timeline of a whole fleet means nothing (thousands of ranks on one
axis, on clocks that disagree): a fleet's timeline is one rank's — the top straggler's when the
cross-rank view found one, else the rank with the most GPU time — and says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kernel_atlas.core.groups import BatchFold
from kernel_atlas.store.limits import MAX_TIME_US
from kernel_atlas.store.outputs import is_number

NO_MODULE = "(no module)"
TIMELINE_LIMIT = 4000  # activities drawn on a timeline of the whole window: the longest ones
TIMELINE_COLUMNS = ["ts_us", "dur_us", "stream", "category", "name"]


def text_codes(
    values: pd.Series, text: Callable[[str], str] = str, missing: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, a code of `text(value)` (`missing` where the value is missing; code -1 when that
    is None), and the text of each code: every distinct value is converted once, not every row,
    and values whose texts are equal share a code."""
    column = values if isinstance(values.dtype, pd.CategoricalDtype) else values.astype("category")
    texts = [text(str(v)) for v in column.cat.categories]
    if missing is not None:
        texts.append(missing)
    codes_of_text, unique = pd.factorize(np.array(texts, dtype=object))
    codes = column.cat.codes.to_numpy().astype(np.int64)
    if missing is not None:
        codes = np.where(codes >= 0, codes, len(texts) - 1)
    per_row = np.where(codes >= 0, codes_of_text[codes] if len(texts) else -1, -1)
    return per_row, np.asarray(unique, dtype=object)


def module_times(kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU time per `nn.Module` path (`module`, `dur_us`); activities outside any module are
    `(no module)`."""
    codes, texts = text_codes(kernels["module"], missing=NO_MODULE)
    # summed per module over the rows in their order, as grouping on the texts would; then by name
    table = kernels["dur_us"].groupby(codes, sort=False).sum()
    names = texts[table.index.to_numpy()]
    order = np.argsort(names.astype(str), kind="stable")
    sums = table.to_numpy(dtype="float64")[order]
    return pd.DataFrame({"module": pd.Index(names[order]).astype(str), "dur_us": sums})


def step_times(kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU time per (profiler step, category): `step` (null outside any step), `category`, `dur_us`."""
    codes, texts = text_codes(kernels["category"])  # categories as codes while grouping: no string per row
    table = pd.DataFrame(
        {
            "step": kernels["step"].astype("Float64").astype("Int64"),
            "category": pd.Categorical.from_codes(codes, categories=pd.Index(texts, dtype=object)),
            "dur_us": kernels["dur_us"].astype("float64"),
        }
    )
    summed = table.groupby(["step", "category"], dropna=False, sort=False, observed=True)["dur_us"].sum().reset_index()
    summed["category"] = summed["category"].astype(object).astype(str)
    return summed.sort_values(["step", "category"], na_position="last", ignore_index=True)


# the bar of the GPU time in no step row of steps.parquet: launched outside every step, in a
# trailing step the tail rule left out, or in a step past the rows summary.json lists
OUTSIDE_STEPS = "outside the steps"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass
class StepRowTimes:
    """GPU time per step row of steps.parquet and category (`step_row_times`)."""

    # `row` (the label's first row's place in its trace's list; null: OUTSIDE_STEPS), `label`, `category`, `dur_us`
    table: pd.DataFrame
    left_out: int = 0  # trailing steps the tail rule left out, over the traces (summary.json `steps_left_out`)
    left_out_why: str | None = None  # why, of the first trace that left some out
    unlisted: int = 0  # steps past the first MAX_STEP_ROWS, which summary.json and steps.parquet do not list
    # why the chart is by step number though summary.json lists the rows' time (`table` then empty):
    # the rows hold time the kernels do not — a doctored or damaged summary.json, not drawn as it is
    by_number_why: str | None = None


def step_row_times(kernels: pd.DataFrame, summary: dict | None) -> StepRowTimes | None:
    """GPU time per step row and category: steps.parquet's rows, each as summary.json lists its
    activities' time by category (`ingest/step_split.py`: the rule of docs/efficiency.md "Which
    step", the one `kernel_us_launched` reads), so that #1 #2 #1 #2 are four bars, not two of two
    steps each (grouping the `step` column, a number, had merged them). A row is labelled by its
    number, and the second row of a number `step 1 (2nd)`. The GPU time of `kernels` in no listed
    row — outside every step, in a step the tail rule left out, in a trace without steps — is
    OUTSIDE_STEPS, so that the bars add up to the GPU time. None without a summary, or of an
    ingest that did not list the time by category (the chart is then by step number). Where the
    rows hold time the kernels cannot — a time that is no number ≥ 0, a category the kernels do
    not have, more of a category than the kernels hold — the chart is by step number too, and
    `by_number_why` says why (the bars had drawn a −1000 ms step, or lost a row without a word)."""
    if summary is None:
        return None
    rows: list[tuple[int, str, str, float]] = []
    left_out, why, unlisted = 0, None, 0
    for trace in summary.get("traces") or []:
        efficiency = trace.get("efficiency") if isinstance(trace, dict) else None
        listed = efficiency.get("steps") if isinstance(efficiency, dict) else None
        if not isinstance(listed, list):
            continue
        seen: dict[int, int] = {}
        for k, row in enumerate(listed):
            times = row.get("gpu_us_by_category") if isinstance(row, dict) else None
            if not isinstance(times, dict):
                return None
            number = row.get("step")
            if not isinstance(number, int) or isinstance(number, bool):  # the one row of a trace without steps
                continue
            seen[number] = seen.get(number, 0) + 1
            label = f"step {number}" + (f" ({ordinal(seen[number])})" if seen[number] > 1 else "")
            bad = next((c for c, t in times.items() if not (is_number(t) and 0 <= t <= MAX_TIME_US)), None)
            if bad is not None:  # NaN fails both bounds
                return _by_number(f"summary.json's {label} has a {bad!s:.40} time that is not a number ≥ 0")
            rows.extend((k, label, str(c), float(t)) for c, t in times.items())
        count = efficiency.get("steps_left_out")
        if is_number(count) and count > 0:
            left_out += int(count)
            text = efficiency.get("steps_left_out_why")
            why = why if why is not None else (text if isinstance(text, str) else None)
        total = efficiency.get("steps_total")
        unlisted += int(total) - len(listed) if is_number(total) and total > len(listed) else 0
    table = pd.DataFrame(rows, columns=["row", "label", "category", "dur_us"])
    # the rest of each category's GPU time is in no listed row (never below 0: a summary of other kernels)
    codes, texts = text_codes(kernels["category"])  # a null category (code -1) is in no bar, as by number
    known = codes >= 0
    totals = np.bincount(codes[known], weights=kernels["dur_us"].to_numpy(np.float64)[known], minlength=len(texts))
    by_category = table.groupby("category")["dur_us"].sum()
    unknown = by_category.index.difference(texts.astype(str))
    if len(unknown):
        return _by_number(f"summary.json's step rows list {unknown[0]:.40}, a category kernels.parquet does not have")
    in_rows = by_category.reindex(texts.astype(str)).fillna(0.0).to_numpy()
    rest = totals - in_rows
    rounding = 1e-9 * np.maximum(totals, 1.0)  # of equal sums added in another order
    over = np.flatnonzero(-rest > rounding)
    if len(over):  # a row's time is some of its kernels': the rows of a category never hold more than they
        c = over[0]
        return _by_number(
            f"summary.json's step rows hold {in_rows[c] / 1e3:.3f} ms of {texts[c]!s:.40}, "
            f"more than kernels.parquet's {totals[c] / 1e3:.3f} ms"
        )
    kept = rest > rounding  # not the rounding of equal sums
    outside = pd.DataFrame(
        {"row": None, "label": OUTSIDE_STEPS, "category": texts[kept].astype(str), "dur_us": rest[kept]}
    )
    table = _sum_step_rows([table.astype({"row": "Int64"}), outside.astype({"row": "Int64"})])
    return StepRowTimes(table, left_out, why, unlisted)


def _by_number(why: str) -> StepRowTimes:
    """Step-row times not drawn, and why: the chart is by step number (`StepRowTimes.by_number_why`)."""
    empty = pd.DataFrame({"row": pd.Series(dtype="Int64"), "label": [], "category": [], "dur_us": []})
    return StepRowTimes(empty.astype({"label": object, "category": object, "dur_us": "float64"}), by_number_why=why)


def _sum_modules(tables: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(tables, ignore_index=True).groupby("module", sort=True)["dur_us"].sum().reset_index()


def _sum_steps(table: pd.DataFrame) -> pd.DataFrame:
    summed = table.groupby(["step", "category"], dropna=False, sort=True)["dur_us"].sum().reset_index()
    summed["step"] = summed["step"].astype("Int64")
    return summed


def _sum_step_rows(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Step-row times of several traces added up by label: `step 6` of every rank is one bar, as
    their numbers had been, and `step 1 (2nd)` too; in the order of each label's first row
    (OUTSIDE_STEPS, `row` null, last)."""
    table = pd.concat(tables, ignore_index=True)
    first = table.groupby("label", sort=False)["row"].min()
    summed = table.groupby(["label", "category"], sort=False)["dur_us"].sum().reset_index()
    summed.insert(0, "row", summed["label"].map(first).astype("Int64"))
    return summed.sort_values(["row", "label", "category"], na_position="last", ignore_index=True)


@dataclass
class Timeline:
    """What a timeline draws: the longest activities of one rank, per stream, and the steps."""

    rank: int | None
    rows: pd.DataFrame  # TIMELINE_COLUMNS of the `limit` longest activities
    total: int  # activities in the window drawn (before the limit)
    steps: pd.DataFrame  # step, start, end: the profiler steps' bands (whole window only; `steps_are`)
    step: int | None = None  # the one step drawn; None: the whole profiled window
    gpu_time_us: float = 0.0
    steps_are: str = ""  # what the bands are, in words, for the page (empty: no bands)


# what the bands of a timeline are, as the page says it (`KernelViews.timeline_note`)
BANDS_STEPS = "steps shaded as steps.parquet's windows"
BANDS_SPANS = (
    "steps shaded from their first GPU activity's start to their last one's end, by step number — not "
    "steps.parquet's windows, and they overlap where a step's work runs on while the next one's starts"
)


def step_windows(summary: dict, rank: int | None = None) -> pd.DataFrame:
    """`step`, `start`, `end` of the step rows of summary.json `efficiency` — steps.parquet's
    windows, in the order of their start — of the traces of `rank` (None: of every trace); a
    trace without steps (its one row has no number) gives none."""
    rows = []
    for trace in summary.get("traces") or []:
        if not isinstance(trace, dict) or (rank is not None and trace.get("rank", 0) != rank):
            continue
        efficiency = trace.get("efficiency")
        for row in efficiency.get("steps") or [] if isinstance(efficiency, dict) else []:
            if isinstance(row, dict) and isinstance(row.get("step"), int) and row.get("start_us") is not None:
                rows.append((row["step"], float(row["start_us"]), float(row["end_us"])))
    return pd.DataFrame(rows, columns=["step", "start", "end"]).sort_values("start", ignore_index=True)


def timeline_of(
    kernels: pd.DataFrame, step: int | None = None, limit: int = TIMELINE_LIMIT, windows: pd.DataFrame | None = None
) -> Timeline:
    """One step of `kernels` (one rank), or the whole window with its steps as bands: `windows`
    (`step_windows`: steps.parquet's, one band per step row) where given, else each step number's
    span of activities (`BANDS_SPANS`, which the page then says)."""
    rows = kernels
    if step is not None:
        rows = rows[(rows["step"] == step).fillna(False).to_numpy()]
    total = len(rows)
    if total > limit:
        rows = rows.nlargest(limit, "dur_us")
    steps, steps_are = pd.DataFrame(columns=["step", "start", "end"]), ""
    if step is None and len(rows) and windows is not None and len(windows):
        steps, steps_are = windows[["step", "start", "end"]].reset_index(drop=True), BANDS_STEPS
    elif step is None and len(rows) and kernels["step"].notna().any():
        spans = kernels.assign(end=kernels["ts_us"] + kernels["dur_us"]).groupby("step")
        steps, steps_are = spans.agg(start=("ts_us", "min"), end=("end", "max")).reset_index(), BANDS_SPANS
    ranks = kernels["rank"].unique() if "rank" in kernels else []
    return Timeline(
        rank=int(ranks[0]) if len(ranks) == 1 else None,
        # the device too where the rows have it: one rank's two GPUs' stream 7 are two lanes
        rows=rows[[*TIMELINE_COLUMNS, *(["device"] if "device" in rows else [])]].reset_index(drop=True),
        total=total,
        steps=steps,
        step=step,
        gpu_time_us=float(kernels["dur_us"].sum()),
        steps_are=steps_are,
    )


@dataclass
class KernelViews:
    """The module, step and timeline views of a report (of one rank or of a fleet)."""

    modules: pd.DataFrame  # module_times
    steps: pd.DataFrame  # step_times: by step number
    timeline: Timeline | None
    ranks: int = 1
    timeline_note: str = ""  # which rank the timeline shows, and why (several ranks)
    # by step row, as steps.parquet (`step_row_times`): what the per-step chart draws; None: by number
    step_rows: StepRowTimes | None = None


def kernel_views(kernels: pd.DataFrame, timeline_rank: int | None = None, summary: dict | None = None) -> KernelViews:
    """The views of the kernel rows of one rank, or of several analysed together: module and step
    times over all of them, the timeline of one (`timeline_rows`), its step bands steps.parquet's
    windows where `summary` (summary.json, or the ranks' part of it) is given."""
    rows, _ = timeline_rows(kernels, timeline_rank)
    windows = None
    if summary is not None and len(rows):
        ranks = rows["rank"].unique() if "rank" in rows else []
        windows = step_windows(summary, int(ranks[0]) if len(ranks) == 1 else None)
    timeline = timeline_of(rows, windows=windows)
    step_rows = step_row_times(kernels, summary)
    return KernelViews(
        module_times(kernels), step_times(kernels), timeline, timeline_note=timeline.steps_are, step_rows=step_rows
    )


def timeline_rows(kernels: pd.DataFrame, timeline_rank: int | None = None) -> tuple[pd.DataFrame, int]:
    """The rows of the one rank a timeline of `kernels` shows — `timeline_rank` when it is among
    them, else the rank with the most GPU time (the first of equals), as `ViewsFold` chooses —
    and how many ranks there are."""
    ranks = kernels["rank"].to_numpy() if "rank" in kernels else np.zeros(0)
    if not len(ranks) or not (ranks[1:] != ranks[:-1]).any():
        return kernels, 1
    present, first = np.unique(ranks, return_index=True)
    in_order = present[np.argsort(first)].tolist()
    if timeline_rank in in_order:
        chosen = timeline_rank
    else:  # each rank's GPU time summed as `timeline_of` sums it: over its own rows
        sums = [float(kernels["dur_us"].iloc[ranks == r].sum()) for r in in_order]
        chosen = in_order[int(np.argmax(sums))]
    return kernels[ranks == chosen], len(in_order)


class ViewsFold:
    """Views of several ranks folded as they arrive: module and step times add up; one rank's
    timeline is kept — `timeline_rank`'s when given (the top straggler), else the one with the
    most GPU time so far (the lowest rank on a tie)."""

    def __init__(self, timeline_rank: int | None = None) -> None:
        self.timeline_rank = timeline_rank
        self._modules = BatchFold(_sum_modules, single_as_is=True)
        self._steps = BatchFold(lambda tables: _sum_steps(pd.concat(tables, ignore_index=True)), single_as_is=True)
        self._step_rows = BatchFold(_sum_step_rows, single_as_is=True)
        self._by_row = True  # every part had its step rows (else the chart is by number)
        self._by_number_why: str | None = None  # of the first part whose rows disagree with its kernels
        self._left_out, self._left_out_why, self._unlisted = 0, None, 0
        self._timeline: Timeline | None = None
        self._ranks = 0

    def add(self, rank: int, views: KernelViews, ranks: int = 1) -> None:
        """The views of `ranks` ranks analysed together (`kernel_views`); `rank`: the one whose
        timeline they carry."""
        self._ranks += ranks
        self._modules.add(views.modules)
        self._steps.add(views.steps)
        rows = views.step_rows
        if rows is not None and rows.by_number_why is not None:  # one part by number: the whole chart
            self._by_number_why = self._by_number_why or rows.by_number_why
            rows = None
        self._by_row = self._by_row and rows is not None
        if rows is not None:
            self._step_rows.add(rows.table)
            self._left_out += rows.left_out
            self._left_out_why = self._left_out_why if self._left_out_why is not None else rows.left_out_why
            self._unlisted += rows.unlisted
        if views.timeline is not None and self._keeps(rank, views.timeline):
            self._timeline = views.timeline

    def _keeps(self, rank: int, timeline: Timeline) -> bool:
        kept = self._timeline
        if kept is None or rank == self.timeline_rank:
            return True
        if self.timeline_rank is not None and kept.rank == self.timeline_rank:
            return False
        return timeline.gpu_time_us > kept.gpu_time_us

    def result(self) -> KernelViews | None:
        modules, steps = self._modules.result(), self._steps.result()
        if modules is None or steps is None:
            return None
        ranks = self._ranks
        note = self._timeline.steps_are if self._timeline is not None else ""
        if ranks > 1 and self._timeline is not None:
            rank = self._timeline.rank
            why = "the top straggler" if rank == self.timeline_rank else "the most GPU time"
            note = f"rank {rank} of {ranks}: {why}" + (f"; {note}" if note else "")
        step_rows, rows = None, self._step_rows.result()
        if self._by_number_why is not None:
            step_rows = _by_number(self._by_number_why)
        elif self._by_row and rows is not None:
            step_rows = StepRowTimes(rows, self._left_out, self._left_out_why, self._unlisted)
        return KernelViews(modules, steps, self._timeline, ranks, note, step_rows)
