"""What to fix first: the report's findings, ranked by the time a fix would save.

Each finding is one thing to do, where it is (op, `nn.Module`, host frame), the time it would
save and why, gathered from the analyses of a report:

- `kernel_headroom`: a kernel (all its calls) whose time is above its roofline-attainable time
  (roofline.parquet `headroom_us`); the saving is that headroom. It is the kernel's own time:
  the run ends that much sooner only where the kernel is on the critical path. Its SOL and
  attainable time are the roofline's: of a collective, of its time after the last rank arrived.
  Where its cost is an estimate (roofline.parquet `estimate`: an assumed argument, layout or
  group size), it says how much of its time (`estimated_pct`) and what was assumed. Calls bound
  by `latency` (a short call its roof does not explain) are said as what they are: per-call
  latency that no faster kernel removes, saved only by fewer calls (fused, batched, dropped).
- `launch_bound`: a stretch of short eager kernels separated by waits that a CUDA graph would
  remove (graph_candidates.parquet); the saving is those waits, at most the time the device was
  idle during them (`device_idle_us`: a stream's waits hold nothing up while another stream keeps
  the device busy).
- `host_wait`: GPU idle while the host ran a Python frame (idle_causes.parquet); the saving is
  that idle time until the launch, an upper bound (a host that kept ahead of the GPU). The time
  an activity enqueued long before its start waited after its launch is no host wait (`idle`):
  a kernel launched 38 µs into an idle gap that started 463 ms later had made a 463 ms finding
  of the frame whose copy sat waiting on the GPU. It overlaps `launch_bound` where the two name
  the same waits.
- `exposed_communication`: communication on a device not overlapped with compute (summary's
  per-device communication and overlap), less its time waiting for the last rank to arrive;
  the saving is that exposed time, if it were hidden — where the report has a critical path, at
  most the communication on it (no change saves more than the time it takes off the path: a
  device whose communication is off the path saves nothing).
- `straggler`: a rank that arrives last at its collectives more often than chance; the saving
  is its lead over the second-latest rank, summed over the instances it held up (an upper bound).

Savings are estimates and of different kinds may overlap: they are not additive. A finding is
{what, where, saving_us, kind, evidence} (report.json `findings`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.classify.names import display_name
from kernel_atlas.core.groups import distinct_codes, key_codes
from kernel_atlas.ingest.frames import STACK_SEPARATOR
from kernel_atlas.roofline.analysis import ESTIMATE_WORDS, GROUP_KEYS
from kernel_atlas.store.outputs import is_number

MAX_FINDINGS = 10  # in report.json
PER_KIND = 5  # at most this many findings of one kind
# a saving under this prints as 0.0 µs: a float's remainder (4 short kernels "saving" 0.00195 µs,
# the waits between them 0.0 µs) is no finding
MIN_SAVING_US = 0.05
# the critical path's bucket of communication kernels (`critical_path.BUCKETS`, report.json `breakdown_pct`)
COMMUNICATION_BOUND = "gpu_communication_bound"
MODULE_PREFIX = "nn.Module: "


@dataclass(frozen=True)
class Finding:
    what: str
    where: str
    saving_us: float
    kind: str
    evidence: str
    why: str = ""  # the reason in a few words, for one-line displays
    kernel: str = ""  # the kernel's full name, for kernel findings
    op: str = ""  # and the op it runs under (one kernel may run under several: NCCL's SendRecv)
    # of a kernel finding, the share of its time (%) whose cost is an estimate (roofline.parquet
    # `estimate`); None: no kernel finding, or a roofline that does not say
    estimated_pct: float | None = None
    # of a kernel finding, what bounds its heaviest row (roofline.parquet `bound`): `latency` is
    # no headroom to a roofline, and a one-line display says so instead of "headroom"
    bound: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in asdict(self).items()
            if k != "op" and (k not in ("kernel", "bound") or v) and (k != "estimated_pct" or v is not None)
        }


def _frames(stack: object) -> tuple[str | None, str | None]:
    """The innermost `nn.Module` and the innermost Python frame of a call stack."""
    if not isinstance(stack, str) or not stack:
        return None, None
    module = frame = None
    for part in stack.split(STACK_SEPARATOR):
        if module is None and part.startswith(MODULE_PREFIX):
            module = part[len(MODULE_PREFIX) :]
        elif frame is None and ".py(" in part:
            frame = part.rsplit("/", 1)[-1]
        if module and frame:
            break
    return module, frame


def _given(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _where(*parts: object) -> str:
    return " / ".join(str(p) for p in parts if isinstance(p, str) and p)


def _stream(stream: object) -> str | None:
    """`stream 7`; none where the stream is not known (it read `stream nan`)."""
    return None if stream is None or pd.isna(stream) else f"stream {int(stream)}"  # type: ignore[call-overload]


def _us(us: float) -> str:
    """Evidence quotes µs as they are (report.json is read by programs too): `1,234.5 µs`."""
    return f"{us:,.1f} µs"


NO_MODULE = "no nn.Module"  # the place of calls outside any `nn.Module`, where a kernel's calls have several


@dataclass(frozen=True)
class _Place:
    module: str | None  # the innermost `nn.Module` holding most of a kernel's time
    frame: str | None  # the innermost Python frame of that module's heaviest call stack
    module_us: float  # its time
    total_us: float  # the time of all the kernel's calls
    modules: int  # how many modules its calls ran in (calls outside any count as one more)

    def where(self, op: object) -> str:
        """`op / module / frame`; where the calls ran in several modules, the module holding the
        most time says how much and of how many: `matmul / Linear_10 (20.0 of 30.0 µs; 2 modules)`."""
        if self.modules < 2:
            return _where(op, self.module, self.frame)
        module = f"{self.module or NO_MODULE} ({self.module_us:,.1f} of {_us(self.total_us)}; {self.modules:,} modules)"
        return _where(op, module, self.frame)


def _places(stacks: pd.DataFrame) -> dict[tuple[str, str], _Place]:
    """Per (kernel, op) of `stacks` (columns name, op, call_stack, op_time_us: the time of each
    stack, summed or not), the place holding most of its time: the module whose calls took the
    most (ties: the first seen), and that module's heaviest stack's frame. A kernel's findings
    sum its calls of every shape and module: the first call's module had named the place of all
    of them (a 10 µs call in Linear_1 for 30 µs of which 20 µs ran in Linear_10)."""
    if stacks.empty:
        return {}
    stacks = stacks.assign(call_stack=stacks["call_stack"].astype(object).where(stacks["call_stack"].notna(), ""))
    timed = stacks.groupby(["name", "op", "call_stack"], sort=False)["op_time_us"].sum().reset_index()
    # each distinct stack parsed once (a stack is many frames, repeated by every call of a layer)
    parsed = {stack: _frames(stack) for stack in pd.unique(timed["call_stack"]).tolist()}
    timed["module"] = [parsed[stack][0] or "" for stack in timed["call_stack"]]
    timed["frame"] = [parsed[stack][1] for stack in timed["call_stack"]]
    per_module = timed.groupby(["name", "op", "module"], sort=False)["op_time_us"].sum().reset_index()
    totals = per_module.groupby(["name", "op"], sort=False)["op_time_us"].agg(["sum", "size"])
    # stable: of equal times the first seen wins (the first call's, as before)
    heaviest = per_module.sort_values("op_time_us", ascending=False, kind="stable").drop_duplicates(["name", "op"])
    top_stack = timed.sort_values("op_time_us", ascending=False, kind="stable").drop_duplicates(
        ["name", "op", "module"]
    )
    frames = {(n, o, m): f for n, o, m, f in top_stack[["name", "op", "module", "frame"]].itertuples(index=False)}
    places = {}
    for name, op, module, module_us in heaviest[["name", "op", "module", "op_time_us"]].itertuples(index=False):
        total, modules = totals.loc[(name, op)]
        places[(name, op)] = _Place(
            module or None, frames[(name, op, module)], float(module_us), float(total), int(modules)
        )
    return places


def _texts(column: pd.Series) -> pd.Series:
    """A key column as the roofline writes its keys: texts, a missing value as \"\"."""
    return column.astype(object).where(column.notna(), "").astype(str)


def _call_stacks(rows: pd.DataFrame, kernels: pd.DataFrame | None, names: set[str]) -> pd.DataFrame:
    """The time of each (kernel, op, call stack) of the kernels `names` in the roofline `rows`:
    of their calls (`kernels`, the analysed kernel rows), where those are at hand with their
    stacks, else of the rows — a row keeps its first call's stack, so the calls of one shape in
    two modules are one place there."""
    if "call_stack" not in rows:  # a roofline without stacks: no place but the op
        rows = rows.assign(call_stack=None)
    frame = rows[_texts(rows["name"]).isin(list(names)).to_numpy()]
    if kernels is not None and (
        {*GROUP_KEYS, "call_stack", "op_time_us"} <= set(kernels.columns) and set(GROUP_KEYS) <= set(rows.columns)
    ):
        calls = kernels[[*GROUP_KEYS, "call_stack", "op_time_us"]]  # only these: rows of ~80 columns copied 0.7 s
        calls = calls[calls["name"].isin(list(names)).to_numpy()]
        # summed per distinct (row keys, stack) on codes: a group-by on the object columns of
        # 10^6 calls took 0.65 s
        code = distinct_codes([key_codes(calls[key]) for key in [*GROUP_KEYS, "call_stack"]], len(calls))
        _, first = np.unique(code, return_index=True)
        times = np.bincount(code, weights=calls["op_time_us"].fillna(0.0).to_numpy(float), minlength=len(first))
        calls = calls.iloc[first][[*GROUP_KEYS, "call_stack"]].assign(op_time_us=times[code[first]])
        # only the calls of the rows with headroom: the place's time is of the finding's time
        keys = pd.DataFrame({key: _texts(calls[key]) for key in GROUP_KEYS})
        kept = pd.DataFrame({key: _texts(rows[key]) for key in GROUP_KEYS}).drop_duplicates()
        inside = keys.merge(kept.assign(_kept=True), how="left", on=GROUP_KEYS)["_kept"].notna().to_numpy()
        frame = calls[inside]
    return pd.DataFrame(
        {
            "name": _texts(frame["name"]).to_numpy(),
            "op": _texts(frame["op_mapping"]).to_numpy(),
            "call_stack": frame["call_stack"].astype(object).to_numpy(),
            "op_time_us": frame["op_time_us"].astype(float).fillna(0.0).to_numpy(),
        }
    )


# the roofline's bound of a short call its roof does not explain (roofline.analysis `LATENCY_US`)
LATENCY = "latency"
_ASSUMED = re.compile(ESTIMATE_WORDS)


def _assumption(formula: object) -> str | None:
    """What an estimated cost assumed, in the formula's own words: the innermost clause (between
    brackets, `;` and `,`) naming it — `NHD layout assumed` of paged attention's "(H_kv from the KV
    cache's axis −2, NHD layout assumed; …)", `dim not recorded: 0 assumed` of an index_select.
    None where the formula does not say (shapes borrowed from another launch: its link does)."""
    if not isinstance(formula, str):
        return None
    for clause in re.split(r"[();]", formula):
        for part in clause.split(", "):
            if _ASSUMED.search(part):
                return part.strip()
    return None


def _estimated_clause(pct: float, assumed: object) -> tuple[str, str]:
    """The words of a kernel finding whose cost is an estimate for `pct` % of its time: for its
    `why` and its `evidence` (empty where none of it is)."""
    if not pct > 0:
        return "", ""
    share = "estimated cost" if pct >= 99.95 else f"cost estimated for {max(pct, 1.0):.0f} % of its time"
    said = f": {assumed}" if isinstance(assumed, str) and assumed else ""
    return f", {share}", (
        f"; its cost is an estimate for {pct:.1f} % of its time (roofline.parquet `estimate`{said}): "
        "its SOL and saving are only as good as what was assumed"
    )


def _latency_clause(latency_us: float, headroom_us: float) -> str:
    """The evidence of a kernel finding whose headroom is, in part or all, of `latency`-bound calls
    (their time is not explained by their roof: a 1-byte copy of 2.24 µs, attainable 0.00002 µs,
    had offered its whole time as headroom to reach the roofline)."""
    if not latency_us > 0:
        return ""
    share = "all of its headroom" if latency_us >= headroom_us - 1e-9 else f"{_us(latency_us)} of its headroom"
    return (
        f"; {share} is in latency-bound calls: per-call latency (launch, DMA setup) that their roof does not "
        "explain and no faster kernel removes — only fewer calls (fused, batched or dropped) save it"
    )


def headroom_findings(
    roofline: pd.DataFrame,
    weighed: set[tuple[str, str]] | None = None,
    kernels: pd.DataFrame | None = None,
) -> list[Finding]:
    """Kernels with the most headroom over the roofline, each kernel once (all its shapes): the
    `PER_KIND` largest, or with `weighed` (the (kernel, op) pairs a critical path's what-if
    weighed) every one of those, to be ranked by what they save end to end — the largest
    headroom may belong to kernels beside the path that save nothing, while the one kernel on it
    that would had been cut before it was weighed. Its place is the module holding most of its
    time (`_places`): of its calls where `kernels` (the analysed kernel rows) has them, else of
    its roofline rows."""
    if roofline.empty or "headroom_us" not in roofline:
        return []
    rows = roofline[roofline["headroom_us"].notna() & (roofline["headroom_us"] > 0)]
    if rows.empty:
        return []
    if "likely_cause" not in rows:  # a roofline without the efficiency columns
        rows = rows.assign(likely_cause=None)
    # a collective's time waiting for the last rank to arrive is the late rank's, not the transfer's:
    # the roofline's SOL and headroom are of the time after it (`peer_wait_us`), and so are these —
    # 223.7 µs attainable of 1,800 µs (12.4 %, as roofline.parquet) had read "2,563.7 µs attainable,
    # 61.9 % SOL", the 2,340 µs of waiting counted as attainable
    waited = rows["peer_wait_us"].fillna(0.0) if "peer_wait_us" in rows else 0.0
    rows = rows.assign(peer_wait_us=waited, working_us=(rows["op_time_us"] - waited).clip(lower=0.0))
    # the time of rows whose cost is an estimate (an assumed argument: "dim 0 assumed") and the
    # headroom of rows bound by latency, summed per finding as its time and headroom are: a finding
    # resting on an assumed layout had read as a plain "memory-bound, 43.0 % SOL"
    known = "estimate" in rows
    estimated = rows["estimate"].astype("boolean").fillna(False).to_numpy(bool) if known else np.zeros(len(rows), bool)
    latency = (rows["bound"] == LATENCY).to_numpy(bool) if "bound" in rows else np.zeros(len(rows), bool)
    formula = rows["formula"] if "formula" in rows else pd.Series(None, index=rows.index, dtype=object)
    rows = rows.assign(
        estimated_us=np.where(estimated, rows["op_time_us"].fillna(0.0).to_numpy(float), 0.0),
        latency_us=np.where(latency, rows["headroom_us"].to_numpy(float), 0.0),
        # what its estimated row of most headroom assumed (the roofline ranks its rows by headroom)
        assumed=formula.astype(object).where(pd.Series(estimated, index=rows.index), None),
    )
    grouped = rows.groupby(["name", "op_mapping"], observed=True, sort=False, dropna=False)
    table = grouped.agg(
        headroom_us=("headroom_us", "sum"),
        op_time_us=("op_time_us", "sum"),
        peer_wait_us=("peer_wait_us", "sum"),
        working_us=("working_us", "sum"),
        estimated_us=("estimated_us", "sum"),
        latency_us=("latency_us", "sum"),
        calls=("count", "sum"),
        bound=("bound", "first"),
        likely_cause=("likely_cause", "first"),  # of its heaviest row with one (occupancy, waves)
        assumed=("assumed", "first"),
    ).reset_index()
    table = table.sort_values(["headroom_us", "name"], ascending=[False, True], kind="stable")
    if weighed is None:
        table = table.head(PER_KIND)
    else:
        ops = _texts(table["op_mapping"])
        keys = pd.Series(list(zip(table["name"].astype(str), ops, strict=True)), index=table.index)
        table = table[keys.isin(weighed)]
    places = _places(_call_stacks(rows, kernels, set(table["name"].astype(str))))
    found = []
    for row in table.itertuples(index=False):
        # headroom: the time after the last arrival above the attainable time of every call
        attainable = row.working_us - row.headroom_us
        sol = 100.0 * attainable / row.working_us if row.working_us else 0.0
        waiting = (
            f" ({_us(row.peer_wait_us)} of it waiting for the last rank to arrive, left out)"
            if row.peer_wait_us > 0
            else ""
        )
        op = "" if pd.isna(row.op_mapping) else str(row.op_mapping)
        place = places.get((str(row.name), op))
        pct = 100.0 * row.estimated_us / row.op_time_us if known and row.op_time_us > 0 else 0.0
        estimated_why, estimated_evidence = _estimated_clause(pct, _assumption(row.assumed))
        if _given(row.likely_cause) and _ASSUMED.search(str(row.likely_cause)):
            estimated_why = ""  # its likely cause says what was assumed already (a group's world size)
        # a latency-bound call's time is no headroom to its roofline: the finding says what saves it
        # (fewer calls); its saving stays the time above the roof, what dropping the calls saves
        bound = (
            f"{row.bound}-bound: fewer calls, not a faster kernel"
            if row.bound == LATENCY
            else f"{row.bound}-bound, {sol:.1f} % SOL"
        )
        found.append(
            Finding(
                what=display_name(str(row.name)),
                kernel=str(row.name),
                op=op,
                where=place.where(row.op_mapping) if place is not None else _where(row.op_mapping),
                saving_us=float(row.headroom_us),
                kind="kernel_headroom",
                why=bound + estimated_why + (f", {row.likely_cause}" if _given(row.likely_cause) else ""),
                evidence=(
                    f"{row.bound}-bound at {sol:.1f} % of the roofline: {_us(row.op_time_us)} in "
                    f"{int(row.calls):,} calls{waiting}, {_us(attainable)} attainable (estimate: its own time)"
                    + _latency_clause(float(row.latency_us), float(row.headroom_us))
                    + estimated_evidence
                    + (f"; likely cause: {row.likely_cause}" if _given(row.likely_cause) else "")
                ),
                estimated_pct=round(pct, 1) if known else None,
                bound=str(row.bound) if _given(row.bound) else "",
            )
        )
    return found


def graph_word(runtimes: list[str]) -> str:
    """What a graph of the run's runtime is called: `HIP` where every trace is ROCm's, `CUDA/HIP`
    where the run mixes them, else `CUDA`."""
    known = {r for r in runtimes if r in ("cuda", "rocm")}
    return "HIP" if known == {"rocm"} else "CUDA/HIP" if len(known) > 1 else "CUDA"


def launch_findings(candidates: pd.DataFrame, graph: str = "CUDA") -> list[Finding]:
    """Stretches of short kernels a CUDA graph would run without the waits between them. The waits
    are one stream's: while another stream keeps the device busy they hold nothing up, so the
    saving is at most the time the device was idle during them (graph_candidates'
    `device_idle_us`) — a side stream's 783 µs of waits, on a device idle 16 µs, had ranked first,
    and 450 µs of waits under another stream's 1 ms kernel had been capped only by 2 ms of idle
    elsewhere."""
    if candidates.empty:
        return []
    ranks = candidates["rank"].nunique() if "rank" in candidates else 1  # of several: each names its rank
    found = []
    for row in candidates.itertuples(index=False):
        waits = float(row.saving_us)
        saving = min(waits, float(row.device_idle_us))
        capped = f"; {_us(saving)} of them while the device was idle" if saving < waits else ""
        found.append(
            Finding(
                what=f"{graph}-graph {int(row.kernels):,} short kernels",
                where=_where(
                    row.module,
                    _frames(row.call_stack)[1] or row.frame,
                    _stream(row.stream),
                    f"rank {int(row.rank)}" if ranks > 1 else None,
                ),
                saving_us=saving,
                kind="launch_bound",
                why=f"{int(row.stretches):,} stretch" + ("es" if row.stretches != 1 else ""),
                evidence=(
                    f"{int(row.stretches):,} launch-bound stretches, {_us(row.gpu_us)} of GPU work between "
                    f"{_us(row.host_wait_us + row.kernel_wait_us)} of waits{capped}"
                ),
            )
        )
    found.sort(key=lambda f: -f.saving_us)
    return [f for f in found if f.saving_us >= MIN_SAVING_US][:PER_KIND]


def host_wait_findings(causes: pd.DataFrame) -> list[Finding]:
    """Python frames the GPU waited on (host waits)."""
    if causes.empty:
        return []
    top = causes.sort_values(["idle_us"], ascending=False, kind="stable").head(PER_KIND)
    ranks = causes["rank"].nunique() if "rank" in causes else 1  # of several: each finding names its rank
    return [
        Finding(
            what="GPU waits on the host",
            where=_where(row.module, str(row.frame).rsplit("/", 1)[-1], f"rank {row.rank}" if ranks > 1 else None),
            saving_us=float(row.idle_us),
            kind="host_wait",
            why=f"{row.pct:.1f} % of host-wait idle",
            evidence=(
                f"GPU idle {_us(row.idle_us)} in {int(row.gaps):,} gaps while the host ran this "
                f"({row.pct:.1f} % of the device's host-wait idle; upper bound)"
            ),
        )
        for row in top.itertuples(index=False)
        if isinstance(row.frame, str) and row.frame and row.idle_us > 0
    ]


def path_communication(critical_path: dict[str, Any] | None) -> tuple[float, set[int] | None] | None:
    """The communication time on the report's critical path (the communication kernels' own edges
    on it, `gpu_communication_bound`) and the ranks the path runs through (None: every rank, a path
    of ranks joined at their collectives); None where the report has no path. What hiding or
    removing a device's communication saves end to end is at most that time — the old path,
    shortened by it, is still a path —, and nothing for a rank the path does not run through (the
    run ends with the path's rank). The time is the segments' sum (`breakdown_us`) where the path
    gives it: its share `breakdown_pct` is rounded to 0.01 %, and 3,140 µs × 9.55 % had capped at
    299.87 µs a path whose communication segments sum to 300.0 µs; a path without it, its share of
    `total_us`."""
    if not isinstance(critical_path, dict):
        return None
    total = critical_path.get("total_us")
    if not is_number(total) or not total > 0:
        return None
    summed = (critical_path.get("breakdown_us") or {}).get(COMMUNICATION_BOUND)
    share = (critical_path.get("breakdown_pct") or {}).get(COMMUNICATION_BOUND)
    if is_number(summed):
        on_path = float(summed)
    elif is_number(share):
        on_path = float(total) * float(share) / 100.0
    else:
        return None
    rank = critical_path.get("rank")
    ranks = {int(rank)} if isinstance(rank, int) and int(critical_path.get("joint_ranks") or 1) <= 1 else None
    return on_path, ranks


def communication_findings(
    devices: Iterable[dict[str, Any]],
    waited: dict[int, float] | None = None,
    critical_path: dict[str, Any] | None = None,
) -> list[Finding]:
    """Devices whose communication is not hidden behind compute. `waited`: per rank, the time its
    collectives spent waiting for the last rank to arrive (collectives.parquet `wait_us`): part
    of the exposed time that no overlap can hide — it is the straggler's (`straggler_findings`);
    three ranks waiting on a fourth had each been told to hide 53 ms, 49 ms of it waiting.
    `critical_path`: report.json's, which weighs the exposed time end to end as it weighs the
    kernel findings (`path_communication`): 500 µs of communication beside a host busy for 2 ms
    more had ranked second, while `atlas whatif` saved 0.0 µs removing it, and 185.3 ms had been
    claimed where removing the communication altogether saves 166.8 ms."""
    on_path = path_communication(critical_path)
    found = []
    for device in devices:
        comm = float(device.get("communication_us") or 0.0)
        exposed = comm - float(device.get("overlap_us") or 0.0)
        waiting = min((waited or {}).get(device.get("rank"), 0.0), max(exposed, 0.0))
        exposed -= waiting
        unhidden, weighed = exposed, ""
        if on_path is not None and exposed > 0:
            path_us, ranks = on_path
            if ranks is not None and device.get("rank") not in ranks:
                path_us = 0.0  # the path runs through another rank
            if path_us < exposed:
                weighed = f"; end to end by the critical path: at most {_us(path_us)}, its communication on the path"
                exposed = path_us
        if exposed >= MIN_SAVING_US:
            overlapped = device.get("overlap_pct_of_communication") or 0.0
            found.append(
                Finding(
                    what="hide communication behind compute",
                    where=f"rank {device.get('rank')} device {device.get('device')}",
                    saving_us=exposed,
                    kind="exposed_communication",
                    why=f"{overlapped:.0f} % overlapped",
                    # the time with no compute beside it is the waiting too: 1,700 µs of 1,800 had read
                    # "500 µs … runs with no compute beside it (…; 1,200 µs more waiting …)", against the
                    # page's 1.70 ms of communication exposed
                    evidence=(
                        f"{_us(unhidden + waiting)} of the {_us(comm)} the device had communication running "
                        f"(overlaps counted once) ran with no compute beside it ({overlapped:.0f} % overlapped)"
                        + (
                            f": {_us(unhidden)} to hide, and {_us(waiting)} more waiting for the last rank to "
                            "arrive, which no overlap hides"
                            if waiting > 0
                            else ""
                        )
                        + weighed
                    ),
                )
            )
    found.sort(key=lambda f: -f.saving_us)
    return found[:PER_KIND]


def straggler_findings(stragglers: Iterable[dict[str, Any]]) -> list[Finding]:
    """Ranks that arrive last at their collectives more often than chance (report.json
    `stragglers`): the instances each held up would start sooner by its lead over the
    second-latest rank (`lead_us`, summed) — an upper bound, as another rank would then be last."""
    found = []
    for straggler in stragglers:
        lead = float(straggler.get("lead_us") or 0.0)
        if lead <= 0:
            continue
        found.append(
            Finding(
                what="make this rank arrive with the others",
                where=f"rank {straggler['rank']}",
                saving_us=lead,
                kind="straggler",
                why=f"last in {straggler['collectives']:,} of {straggler['of']:,}",
                evidence=(
                    f"last at {straggler['collectives']:,} of {straggler['of']:,} collectives (chance: "
                    f"{straggler['expected']:g}), {_us(float(straggler['mean_late_us']))} late on average; the others "
                    f"waited {_us(float(straggler['wait_caused_us']))}; its lead over the second-latest rank, "
                    f"summed: {_us(lead)} (upper bound)"
                ),
            )
        )
    return sorted(found, key=lambda f: -f.saving_us)[:PER_KIND]


def rank(findings: Iterable[Finding], limit: int = MAX_FINDINGS) -> list[Finding]:
    """Largest saving first (ties: kind, then where, so the order is stable); what would save
    nothing (a kernel off the critical path) or what prints as nothing (`MIN_SAVING_US`) is no
    finding."""
    kept = [f for f in findings if f.saving_us >= MIN_SAVING_US]
    return sorted(kept, key=lambda f: (-f.saving_us, f.kind, f.where, f.what))[:limit]


def end_to_end(findings: list[Finding], pays: list[dict[str, Any]]) -> list[Finding]:
    """Kernel findings re-weighed by the critical path's what-if (`where_optimisation_pays`: each
    roofline row brought to its attainable time alone, the path solved again): a finding's saving
    becomes the end-to-end saving of its rows — those of its kernel under its op —, summed;
    findings the what-if did not weigh are left out (their headroom is smaller than any it
    weighed). A kernel under several ops (NCCL's SendRecv kernel for all_gather, all_reduce and
    all_to_all) was credited every op's saving in each finding: 95.9 ms three times, against
    3.4 ms of headroom in one."""
    saving: dict[tuple[str, str], float] = {}
    for row in pays:
        key = (str(row["kernel"]), "" if row.get("op") is None else str(row["op"]))
        if "kernel_end_to_end_saving_us" in row:  # its rows together: what fixing the kernel saves
            saving[key] = float(row["kernel_end_to_end_saving_us"])
        else:
            saving[key] = saving.get(key, 0.0) + float(row["end_to_end_saving_us"])
    weighed = []
    for finding in findings:
        key = (finding.kernel, finding.op)
        if key not in saving:
            continue
        evidence = (
            f"{finding.evidence.replace(' (estimate: its own time)', '')}; end to end by the critical path: "
            f"{_us(saving[key])} of {_us(finding.saving_us)} headroom"
        )
        weighed.append(replace(finding, saving_us=saving[key], evidence=evidence))
    return weighed


def report_findings(
    roofline: pd.DataFrame,
    waits: Any,
    facts: dict[str, Any],
    waited: dict[int, float] | None = None,
    graph: str = "CUDA",
    kernels: pd.DataFrame | None = None,
) -> list[Finding]:
    """The ranked findings of one report (`waits`: the report's Waits, or None; `waited`: per
    rank, its collectives' time waiting for the last arrival; `graph`: what a graph of the run's
    runtime is called, `graph_word`; `kernels`: the analysed kernel rows, where a kernel's place
    is read from its calls); kernel findings by their end-to-end saving where the report has a
    critical path."""
    pays = (facts.get("critical_path") or {}).get("where_optimisation_pays")
    if pays:
        weighed = {(str(row["kernel"]), "" if row.get("op") is None else str(row["op"])) for row in pays}
        found = end_to_end(headroom_findings(roofline, weighed, kernels), pays)
        found = [f for f in found if f.saving_us >= MIN_SAVING_US]
        found = sorted(found, key=lambda f: (-f.saving_us, f.what))[:PER_KIND]
    else:
        found = headroom_findings(roofline, kernels=kernels)
        if int(facts.get("ranks") or 1) > 1:
            found = per_rank_mean(found, int(facts["ranks"]))
    if waits is not None:
        found += launch_findings(waits.candidates, graph) + host_wait_findings(waits.causes)
    found += communication_findings(facts.get("devices", []), waited, facts.get("critical_path"))
    found += straggler_findings(facts.get("stragglers") or [])
    return rank(within_the_run(found, run_length_us(facts)))


def run_length_us(facts: dict[str, Any]) -> float | None:
    """How long the run took, as far as the report knows: the critical path's length or the
    longest device span, whichever is longer — the path gives no weight to the host's time between
    top-level ops (HTA's convention, docs/critical_path.md), so alone it is no run's length: a
    5 ms data-loader wait had capped a 40 µs finding at "the run's 36 µs". None: neither known."""
    lengths = [(facts.get("critical_path") or {}).get("total_us")]
    lengths += [d.get("span_us") for d in facts.get("devices") or [] if isinstance(d, dict)]
    known = [float(x) for x in lengths if is_number(x) and x > 0]
    return max(known) if known else None


def per_rank_mean(findings: list[Finding], ranks: int) -> list[Finding]:
    """Kernel findings of a run of several ranks not weighed by the critical path: a roofline row
    sums every rank's calls, while the ranks run side by side — a kernel brought to its roofline
    on each of 4 ranks saves about a quarter of the summed headroom end to end (2,218 µs had been
    claimed for 555). The mean over the ranks, said."""
    return [
        replace(
            f,
            saving_us=f.saving_us / ranks,
            evidence=f"{f.evidence}; {_us(f.saving_us)} summed over {ranks:,} ranks, the mean per rank taken",
        )
        if f.kind == "kernel_headroom"
        else f
        for f in findings
    ]


def within_the_run(findings: list[Finding], total_us: object) -> list[Finding]:
    """No finding saves more than the run's end-to-end time (`run_length_us`)."""
    if not is_number(total_us) or not total_us > 0:
        return findings
    return [
        replace(f, saving_us=float(total_us), evidence=f"{f.evidence}; at most the run's {_us(float(total_us))}")
        if f.saving_us > total_us
        else f
        for f in findings
    ]
