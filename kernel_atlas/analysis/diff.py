"""Comparing two runs (`atlas diff A B`, notebooks/compare.ipynb): GPU time per category, op,
module and kernel in both, and the change.

Kernels are matched by name, except where both runs make the same op call — the same
launching CPU op at the same recorded input shapes — with different kernels (two GPUs, or two
library versions, run different kernels for the same op): those calls are compared as one
group, `A kernels → B kernels`, keyed `op · cpu op · shapes`. The op of such a call is the label
of A's heaviest kernel in it, and its category that kernel's: at the op and category levels
every activity of the group counts there, in both runs — the labels are given per kernel, so one
`aten::copy_` was op `copy_` on one GPU (a copy kernel) and `memcpy` on the other (a DtoD copy),
and the gate failed on an op "new" in B that was the same call. A kernel name row holds the
activities of that name outside such groups — `matched_by` `name (rest)` where some of its
activities are in a group's row, whether one run ran the kernel or both —; its status says
whether each run ran the kernel at all. Every level covers all GPU activities, so each level's
`a_us` and `b_us` sum to the GPU time of run A and run B. The kernels only one run ran, each
with all its time, in groups and out, are `Diff.one_run_kernels` (the terminal's "Appeared in
B" and "Vanished from A"): a name row that is the rest holds only part of it, and a kernel that
ran only inside groups has no name row at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.gate import SIGNATURE_SEPARATOR, Window, call_signatures
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import ingested_from, output_for, run_folder
from kernel_atlas.store.outputs import is_url, lock
from kernel_atlas.store.run import Run

LEVELS = ("category", "op_mapping", "module", "kernel")
NO_MODULE = "(no module)"
COLUMNS = [
    "level",
    "key",
    "a_us",
    "b_us",
    "delta_us",
    "ratio",
    "a_count",
    "b_count",
    "status",
    "matched_by",
    "a_kernels",
    "b_kernels",
]


@dataclass
class Side:
    """One run of a comparison: its GPU time and activity count per distinct (name, op, cpu op,
    shapes, category, module) — the `activities` table, a few thousand rows however many ranks."""

    label: str
    activities: pd.DataFrame
    gpus: list[str]
    warnings: list[str] = field(default_factory=list)  # what ingest said of the run (summary.json)
    window: Window | None = None  # what its times are totals over: ranks and profiler steps

    @property
    def gpu_time_us(self) -> float:
        return float(self.activities["us"].sum())

    @property
    def count(self) -> int:
        """GPU activities of the run."""
        return int(self.activities["count"].sum())


@dataclass
class Diff:
    a: Side
    b: Side
    table: pd.DataFrame  # COLUMNS, per level sorted by delta_us (largest regression first)
    memory: list[dict[str, Any]] = field(default_factory=list)  # `analysis.memory.compare_memory`

    def level(self, level: str) -> pd.DataFrame:
        return self.table[self.table["level"] == level]

    def one_run_kernels(self) -> pd.DataFrame:
        """The kernels only one run ran (`kernels_of_one_run`)."""
        return kernels_of_one_run(self.a.activities, self.b.activities)

    def rows(self) -> list[dict[str, Any]]:
        """The `--json` rows: {level, key, a_us, b_us, delta_us}."""
        keep = self.table[["level", "key", "a_us", "b_us", "delta_us"]]
        return keep.astype({"a_us": float, "b_us": float, "delta_us": float}).to_dict(orient="records")


# What the comparison needs of a kernels table: time and count per distinct combination of these.
_GROUP = ["name", "op_mapping", "cpu_op", "input_dims", "category", "module"]


def _activities(kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU time (`us`) and activity count per distinct (name, op, cpu op, shapes, category,
    module): a few thousand rows however long the trace, with text columns ('' = missing)."""
    grouped = kernels.groupby([kernels[c] for c in _GROUP], dropna=False, observed=True, sort=False)["dur_us"]
    table = grouped.agg(us="sum", count="size").reset_index()
    for column in _GROUP:
        values = table[column].astype(object)
        table[column] = values.where(values.notna(), "").astype(str)
    return table


def _names_by_signature(signature: np.ndarray, names: np.ndarray) -> dict[str, frozenset[str]]:
    pairs = pd.DataFrame({"sig": signature, "name": names}).drop_duplicates()
    pairs = pairs[pairs["sig"] != ""]
    return {sig: frozenset(group) for sig, group in pairs.groupby("sig")["name"]}


def _heaviest(table: pd.DataFrame, signature: np.ndarray, mask: np.ndarray) -> pd.DataFrame:
    """Per signature of the rows in `mask`: the op and category of its heaviest kernel (ties:
    the first label in order), indexed by signature."""
    rows = table.loc[mask, ["name", "op_mapping", "category", "us"]].assign(sig=signature[mask])
    per_name = rows.groupby(["sig", "name", "op_mapping", "category"], sort=True)["us"].sum().reset_index()
    per_name = per_name.sort_values(["sig", "us"], ascending=[True, False], kind="stable")
    return per_name.drop_duplicates("sig").set_index("sig")[["op_mapping", "category"]]


@dataclass
class Matching:
    """How the kernels of two `_activities` tables are compared (`match_kernels`)."""

    key_a: np.ndarray  # the kernel-level key of each row of A: its name, or `op · cpu op · shapes`
    key_b: np.ndarray
    how: dict[str, str]  # per key: `name` (both runs ran it), `name (rest)` or `op+shapes`
    a: pd.DataFrame  # A's rows, op and category of regrouped calls those of the group (`_heaviest`)
    b: pd.DataFrame


def match_kernels(a: pd.DataFrame, b: pd.DataFrame) -> Matching:
    """For the rows of two `_activities` tables: the key each kernel is compared under, how each
    key that both runs have was matched, and the rows relabelled for the op and category levels.

    An op call at recorded shapes that both runs make, with other kernel names in A than in B,
    is compared as one group keyed `op · cpu op · shapes` (op: A's heaviest kernel's); every
    other kernel by its name."""
    name_a, name_b = a["name"].to_numpy(), b["name"].to_numpy()
    sig_a, sig_b = call_signatures(a), call_signatures(b)
    names_a, names_b = _names_by_signature(sig_a, name_a), _names_by_signature(sig_b, name_b)
    regrouped = {sig for sig in names_a.keys() & names_b.keys() if names_a[sig] != names_b[sig]}
    by_sig_a = pd.Series(sig_a).isin(regrouped).to_numpy(bool)
    by_sig_b = pd.Series(sig_b).isin(regrouped).to_numpy(bool)
    labels = _heaviest(a, sig_a, by_sig_a)  # every regrouped signature has rows in A
    group_key = {sig: f"{op}{SIGNATURE_SEPARATOR}{sig}" for sig, op in labels["op_mapping"].items()}

    def relabelled(table: pd.DataFrame, sig: np.ndarray, by_sig: np.ndarray) -> pd.DataFrame:
        if not by_sig.any():
            return table
        table = table.copy()
        for column in ("op_mapping", "category"):
            values = table[column].to_numpy(object)
            values[by_sig] = labels[column].reindex(sig[by_sig]).to_numpy(object)
            table[column] = values.astype(str)
        return table

    key_a = np.where(by_sig_a, pd.Series(sig_a).map(group_key).to_numpy(object), name_a)
    key_b = np.where(by_sig_b, pd.Series(sig_b).map(group_key).to_numpy(object), name_b)
    # a name some of whose activities went into a group: its name row holds the rest — said
    # also where one run only ran the kernel (B's sgemm in a group and at a shape A never ran
    # read "appeared" with the rest, 50 of its 180 µs, unmarked)
    split = set(name_a[by_sig_a]) | set(name_b[by_sig_b])
    ran_a, ran_b = set(name_a), set(name_b)
    how = {
        str(k): "name (rest)" if k in split else "name"
        for k in (set(key_a[~by_sig_a]) | set(key_b[~by_sig_b]))
        if k in split or (k in ran_a and k in ran_b)
    }
    how.update({group_key[sig]: "op+shapes" for sig in regrouped})
    return Matching(key_a, key_b, how, relabelled(a, sig_a, by_sig_a), relabelled(b, sig_b, by_sig_b))


def _level_keys(table: pd.DataFrame, level: str) -> np.ndarray:
    missing = NO_MODULE if level == "module" else "(none)"
    values = table[level].to_numpy()
    return np.where(values != "", values, missing)


def _names(table: pd.DataFrame, keys: np.ndarray, wanted: set[str]) -> dict[str, str]:
    """The kernel names behind each key in `wanted`, heaviest first, joined by ' | '."""
    mask = np.array([k in wanted for k in keys], dtype=bool)
    if not mask.any():
        return {}
    frame = table.loc[mask, ["name", "us"]].assign(key=keys[mask])
    heaviest = frame.groupby(["key", "name"])["us"].sum().reset_index().sort_values("us", ascending=False)
    return heaviest.groupby("key", sort=False)["name"].agg(" | ".join).to_dict()


def _compare(keys_a: np.ndarray, a: pd.DataFrame, keys_b: np.ndarray, b: pd.DataFrame) -> pd.DataFrame:
    ta = a[["us", "count"]].groupby(keys_a).sum().rename(columns={"us": "a_us", "count": "a_count"})
    tb = b[["us", "count"]].groupby(keys_b).sum().rename(columns={"us": "b_us", "count": "b_count"})
    table = ta.join(tb, how="outer").fillna(0.0)
    table["delta_us"] = table["b_us"] - table["a_us"]
    table["ratio"] = table["b_us"] / table["a_us"].where(table["a_us"] > 0)
    table["status"] = np.select([table["a_count"] == 0, table["b_count"] == 0], ["appeared", "vanished"], "both")
    for column in ("a_count", "b_count"):
        table[column] = table[column].astype(np.int64)
    return table.rename_axis("key").reset_index()


def kernels_of_one_run(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The kernels (by name) that only one run of two `_activities` tables ran, each with all its
    GPU time and activities — those in op+shapes groups too —, as rows of the comparison table
    (COLUMNS, level `kernel`, status `appeared` or `vanished`, `matched_by` empty), largest change
    first. The table's name row of such a kernel holds only what lies outside the groups
    (`name (rest)`), and one that ran only inside groups has none: their rows summed to too little
    (on the A100/V100 pair, 286.24 of the 308.16 ms only the V100 ran)."""
    table = _compare(a["name"].to_numpy(), a, b["name"].to_numpy(), b)
    table = table[table["status"] != "both"].copy()
    table["level"] = "kernel"
    table["matched_by"] = table["a_kernels"] = table["b_kernels"] = ""
    table = table.sort_values(["delta_us", "key"], ascending=[False, True], kind="stable")
    return table[COLUMNS].reset_index(drop=True)


def diff_kernels(kernels_a: pd.DataFrame, kernels_b: pd.DataFrame) -> pd.DataFrame:
    """The comparison table (COLUMNS) of two kernels tables (`kernels.parquet` of run A and B)."""
    return diff_activities(_activities(kernels_a), _activities(kernels_b))


def _folded(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The `_activities` tables of several ranks as one (time and count summed per combination)."""
    if len(parts) == 1:
        return parts[0]
    grouped = pd.concat(parts, ignore_index=True).groupby(_GROUP, sort=False)
    return grouped[["us", "count"]].sum().reset_index()


def diff_activities(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The comparison table (COLUMNS) of two `_activities` tables."""
    parts = []
    matching = match_kernels(a, b)
    key_a, key_b, how = matching.key_a, matching.key_b, matching.how
    for level in LEVELS:
        if level == "kernel":
            table = _compare(key_a, a, key_b, b)
            keys = table["key"].tolist()
            by_sig = {k for k in keys if how.get(k) == "op+shapes"}
            names_a, names_b = _names(a, key_a, by_sig), _names(b, key_b, by_sig)
            table["matched_by"] = [how.get(k, "") for k in keys]
            table["a_kernels"] = [names_a.get(k, "") for k in keys]
            table["b_kernels"] = [names_b.get(k, "") for k in keys]
            # a name row is the kernel's activities outside op+shapes groups: whether it appeared
            # or vanished is whether a run ran the kernel at all (A's sgemm regrouped with B's
            # other kernel read "appeared in B" beside B's own sgemm calls)
            names = table["matched_by"] != "op+shapes"
            in_a = table["key"].isin(pd.unique(a["name"])).to_numpy(bool)
            in_b = table["key"].isin(pd.unique(b["name"])).to_numpy(bool)
            ran = np.select([in_a & in_b, in_b], ["both", "appeared"], "vanished")
            table["status"] = np.where(names, ran, table["status"])
        else:  # the op and category of a regrouped call: the group's (`match_kernels`)
            table = _compare(_level_keys(matching.a, level), matching.a, _level_keys(matching.b, level), matching.b)
            table["matched_by"] = table["a_kernels"] = table["b_kernels"] = ""
        table["level"] = level
        parts.append(table.sort_values(["delta_us", "key"], ascending=[False, True], kind="stable"))
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def side_of(run: Run, per_step: bool = False) -> Side:
    """A run's side of a comparison, read one rank at a time (memory: one rank's kernels), with
    its window: its ranks, whole steps and the GPU time outside them.

    `per_step`: each rank's GPU time inside its profiler steps divided by its step count — step
    rows, as its efficiency counts them, not distinct numbers: a number may repeat —, summed over
    ranks — one step's time — where a rank recording no steps is refused."""
    if not per_step:  # totals: the time outside the whole steps is said (a cut-short last step's too)
        by_rank = ((rank, run.kernels(rank)) for rank in run.ranks or [None])
        return _totals_side(run.label, run.gpu_names, run.summary, len(run.ranks) or 1, by_rank)
    warnings = _warnings(run.summary)
    window = window_of(run.summary, len(run.ranks) or 1)
    kept_of = _kept_steps(run.summary)
    parts, outside = [], 0.0
    for rank in run.ranks or [None]:
        kept = kept_of(rank)
        if not kept.rows:
            where = f"rank {rank}" if rank is not None and len(run.ranks) > 1 else "it"
            raise AtlasError(run.out_dir, f"{where} records no profiler steps: --per-step needs ProfilerStep ranges")
        kernels = run.kernels(rank)
        inside = kernels["step"].isin(kept.numbers).to_numpy(bool)
        outside += float(kernels.loc[~inside, "dur_us"].sum())
        part = _activities(kernels[inside])
        part["us"] = part["us"] / kept.rows
        parts.append(part)
    window = replace(window, per_step=True, outside_steps_us=outside)
    return Side(run.label, _folded(parts), run.gpu_names, warnings, window)


@dataclass
class WholeSteps:
    """The profiler steps a trace (or a rank's traces) holds whole: their numbers — what the
    kernels' `step` column names — and how many step rows they are (a number may repeat: a
    profiler restarted in one trace makes two steps #1, each a row of its own)."""

    numbers: set[int] = field(default_factory=set)
    rows: int = 0


def _whole_steps(trace: dict[str, Any]) -> WholeSteps | None:
    """The profiler steps a trace holds whole, as its efficiency (summary.json) counts them — a
    last step the profiler cut short left out, a step without GPU work in —, one per step row;
    else (a summary without them, or listing only its first steps: then `steps_total` rows) the
    steps its activities ran in; None where it names none."""
    efficiency = trace.get("efficiency")
    rows = efficiency.get("steps") if isinstance(efficiency, dict) else None
    total = efficiency.get("steps_total") if isinstance(efficiency, dict) else None
    if isinstance(rows, list) and not total:
        numbers = [r["step"] for r in rows if isinstance(r, dict) and isinstance(r.get("step"), int)]
        if numbers:
            return WholeSteps(set(numbers), len(numbers))
    listed = trace.get("steps")
    if not isinstance(listed, list):
        return None
    numbers = {s for s in listed if isinstance(s, int)}
    return WholeSteps(numbers, total if isinstance(total, int) and total > 0 else len(numbers))


def steps_by_rank(summary: dict[str, Any]) -> dict[int, WholeSteps]:
    """The profiler steps each rank's traces hold whole (`_whole_steps`)."""
    steps: dict[int, WholeSteps] = {}
    for trace in summary.get("traces") or []:
        if isinstance(trace, dict) and isinstance(trace.get("rank"), int):
            whole = _whole_steps(trace)
            if whole is not None:
                kept = steps.setdefault(trace["rank"], WholeSteps())
                kept.numbers |= whole.numbers
                kept.rows += whole.rows
    return steps


def window_of(summary: dict[str, Any], ranks: int) -> Window:
    """A run's window: its ranks and the most profiler steps (step rows) any of its traces holds
    whole (`_whole_steps`; None where none recorded one)."""
    traces = [t for t in summary.get("traces") or [] if isinstance(t, dict)]
    counts = [whole.rows for whole in map(_whole_steps, traces) if whole is not None]
    return Window(ranks=ranks, steps=max(counts) if counts and max(counts) > 0 else None)


TABLE_SUFFIXES = (".csv", ".parquet", ".json")


def write_table(table: pd.DataFrame, path: str | Path) -> Path:
    """`atlas diff -o FILE`: the comparison table as FILE's suffix says (TABLE_SUFFIXES) — CSV
    (`write_csv`), Parquet, or JSON (a list of rows, `ratio` null where A has none); whole or not
    at all. (`-o d.parquet` had written CSV text under that name.)"""
    import json

    from kernel_atlas.core import safe_files
    from kernel_atlas.store.outputs import write_csv

    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return write_csv(table, path)
    if suffix == ".parquet":
        with safe_files.atomic_file(path, "wb") as handle:
            table.to_parquet(handle, index=False)
        return Path(path)
    if suffix == ".json":
        rows = table.astype(object).where(table.notna(), None).to_dict(orient="records")
        with safe_files.atomic_file(path, "w") as handle:
            json.dump(rows, handle, indent=1, ensure_ascii=False)
            handle.write("\n")
        return Path(path)
    raise AtlasError(path, f"name a {', '.join(TABLE_SUFFIXES[:-1])} or {TABLE_SUFFIXES[-1]} file")


def side_of_kernels(
    label: str, kernels: pd.DataFrame, gpus: list[str], summary: dict[str, Any] | None = None, ranks: int = 1
) -> Side:
    """The side of a kernels table already in memory (every rank's: the dashboard's runs), as
    `side_of` makes a stored run's totals: with `summary`, its ingest warnings and its window —
    `ranks`, whole steps and the GPU time outside them, by each row's `rank`. Without, no window."""
    if summary is None:
        return Side(label, _activities(kernels), gpus)
    if "rank" in kernels and ranks > 1:
        by_rank = ((int(rank), part) for rank, part in kernels.groupby("rank", sort=True, observed=True))
    else:
        by_rank = iter([(None, kernels)])
    return _totals_side(label, gpus, summary, ranks, by_rank)


def _warnings(summary: dict[str, Any]) -> list[str]:
    said = summary.get("warnings")
    return [str(w) for w in said if isinstance(w, str)] if isinstance(said, list) else []


def _kept_steps(summary: dict[str, Any]) -> Callable[[int | None], WholeSteps]:
    """Per rank (None: the run's only one), the profiler steps its traces hold whole."""
    steps = steps_by_rank(summary)

    def kept_of(rank: int | None) -> WholeSteps:
        if rank is not None:
            return steps.get(rank, WholeSteps())
        return WholeSteps(set().union(*(s.numbers for s in steps.values())), sum(s.rows for s in steps.values()))

    return kept_of


def _totals_side(
    label: str,
    gpus: list[str],
    summary: dict[str, Any],
    ranks: int,
    by_rank: Iterable[tuple[int | None, pd.DataFrame]],
) -> Side:
    """A side of totals from each rank's kernels, taken one at a time: their activities, and the
    time outside the rank's whole steps said in the window (one rule for `atlas diff`, which reads
    the ranks from disk one by one, and the compare notebook, which holds them: its side had left
    that time at 0 — 40 µs of warm-up read "comparable" beside a run without)."""
    window = window_of(summary, ranks)
    kept_of = _kept_steps(summary)
    parts, outside = [], 0.0
    for rank, kernels in by_rank:
        parts.append(_activities(kernels))
        if window.steps is not None:
            kept = kept_of(rank).numbers
            outside += float(kernels.loc[~kernels["step"].isin(kept).to_numpy(bool), "dur_us"].sum())
    window = replace(window, outside_steps_us=outside)
    return Side(label, _folded(parts), gpus, _warnings(summary), window)


def compare(a: Side, b: Side) -> Diff:
    if a.label == b.label:
        a, b = replace(a, label=f"A:{a.label}"), replace(b, label=f"B:{b.label}")
    return Diff(a, b, diff_activities(a.activities, b.activities))


def _side(source: str | Path, per_step: bool, notes: list[str] | None = None) -> Side:
    out_dir = run_folder(source, notes=notes)
    with lock(out_dir, shared=True):  # not while an ingest or a report writes it
        return side_of(Run.open(out_dir), per_step)


def _one_folder_for_two(source_a: str | Path, source_b: str | Path) -> None:
    """Refuse two different sources whose runs would be one folder: two traces of one stem
    (`m.json.gz` and `m.json` both ingest to `m.atlas`), or a trace and the run folder of another
    trace of its stem — the second ingest replaced the first's run, and the diff compared a run
    with itself (its gate passed at +0.0 %)."""

    def folder(source: str | Path) -> Path:
        path = Path(source)
        return path if path.is_dir() else Path(output_for(str(path))[0])

    a, b = Path(source_a), Path(source_b)
    if a.resolve() == b.resolve() or is_url(str(a)) or is_url(str(b)):
        return
    shared = folder(a)
    if shared.resolve() != folder(b).resolve():
        return
    trace, run = (a, b) if b.is_dir() else (b, a)
    if run.is_dir() and ingested_from(run, trace):  # a trace and its own run: one run, compared with itself
        return
    raise AtlasError(
        b,
        f"its run would be {shared}, as {a}'s is: ingest one of them elsewhere (`atlas ingest TRACE -o "
        "OTHER`) and compare the folders",
    )


def diff_runs(
    source_a: str | Path, source_b: str | Path, per_step: bool = False, notes: list[str] | None = None
) -> Diff:
    """Compare two runs, each a trace (ingested on first use, next to it) or an ingest output;
    `per_step`: the time of one profiler step of each (`side_of`). `notes`, where given, receives
    what ingesting a trace here says (`fleet.run_folder`: a read-only folder's fallback folder
    first), for the caller to print as `atlas report TRACE` does — dropped, `atlas diff` had
    written `./a.atlas` for `../ro/a.json` without a word."""
    from kernel_atlas.analysis.memory import compare_memory, run_memory

    _one_folder_for_two(source_a, source_b)
    result = compare(_side(source_a, per_step, notes), _side(source_b, per_step, notes))
    memories = []
    for source in (source_a, source_b):
        out_dir = run_folder(source)  # already ingested by `_side`
        with lock(out_dir, shared=True):
            memories.append(run_memory(out_dir, Run.open(out_dir).summary))
    result.memory = compare_memory(*memories)
    return result
