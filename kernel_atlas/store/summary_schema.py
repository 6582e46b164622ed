"""What the readers of summary.json rely on, as types: `check_summary` holds a summary against
them once, where a run folder is opened (`outputs.open_output`), and refuses in one line what
does not hold — the field named by its path, what it should be in words. Fields the readers do
not read are not checked, nor those they read as hints whatever their value (the events, kinds,
launched and shaped counts: where the critical path is solved, how ranks are batched, what the
report advises); those they rely on are: each trace's file, rank, kernels and memory file, GPUs,
world size and process-group sizes, devices, the last step's start, and the efficiency ingest
measured (its steps and per-device metrics, as `report/efficiency_view.py` turns them into tables;
each step's GPU time by category, the per-step chart's bars).

A doctored summary — a step that is a text, an efficiency without its devices, a last step's
start of 400 digits, a trace without its file — was an internal error in the report
(TypeError, KeyError, OverflowError). Numbers are finite and within what ingest writes: times
within 2^53 µs (`limits.MAX_TIME_US`), sums of durations not below 0 either, integers within
int64, ranks within int32.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import msgspec

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.store.limits import MAX_TIME_US

Time = Annotated[float, msgspec.Meta(ge=-MAX_TIME_US, le=MAX_TIME_US)]
Number = Annotated[float, msgspec.Meta(ge=-1e300, le=1e300)]  # finite (JSON's 1e999 reads as inf)
Duration = Annotated[float, msgspec.Meta(ge=0, le=MAX_TIME_US)]  # a sum of activities' durations: never below 0
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Rank = Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)]  # int32, as ingest writes ranks (column, partition)


class _Gpu(msgspec.Struct):
    name: str | None = None
    numSms: Int64 | None = None  # Kineto's deviceProperties key


class _Distributed(msgspec.Struct, frozen=True):
    world_size: Int64 | None = None
    # process-group name → size (`distributedInfo.pg_config`; a summary of before it has none)
    process_groups: dict[str, Annotated[int, msgspec.Meta(ge=1, le=(1 << 63) - 1)]] | None = None


# what ingest measures per step and device (`ingest/step_split.py`, `ingest/efficiency.py` write
# them; `report/efficiency_view.py` tables them): one list each, the schema built from it
STEP_ROLES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")
DEVICE_METRICS = ("gpu_utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct", "tensor_core_time_pct")

_DeviceMetrics = msgspec.defstruct(
    "_DeviceMetrics", [("device", Int64 | None), *((name, Number | None, None) for name in DEVICE_METRICS)]
)
_Step = msgspec.defstruct(
    "_Step",
    [
        ("devices", list[_DeviceMetrics] | None),
        ("step", Int64 | None, None),
        ("start_us", Time | None, None),
        ("end_us", Time | None, None),
        ("total_us", Time | None, None),
        *((f"{role}_us", Number | None, None) for role in STEP_ROLES),
        ("kernel_us_launched", Number | None, None),
        # category → GPU time launched in the row (`ingest/step_split.py`), the per-step chart's bars
        # (`analysis/views.step_row_times`): a −1e6 was drawn as a −1000 ms bar, a text dropped the
        # row from the chart; null or absent in a summary of before it (the chart is then by number)
        ("gpu_us_by_category", dict[str, Duration] | None, None),
    ],
)


class _Efficiency(msgspec.Struct):
    steps: list[_Step]
    devices: list[_DeviceMetrics]
    window_us: list[Time] | None = None
    steps_total: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)] | None = None  # where `steps` lists the first
    # the trailing profiler steps the plugin's rule left out of the window, and why (in words)
    steps_left_out: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)] | None = None
    steps_left_out_why: str | None = None
    # the split's communication (External-id rule) beside the kernels of category communication
    communication_us: Number | None = None
    communication_kernel_us: Number | None = None
    communication_kernel_other_op_us: Number | None = None


class _Trace(msgspec.Struct):
    file: str
    rank: Rank = 0
    kernels_file: str | None = None
    memory_file: str | None = None
    host_events_file: str | None = None
    gpus: list[_Gpu] = []
    distributed: _Distributed = _Distributed()
    devices: list[dict[str, Any]] = []
    last_step_start_us: Time | None = None
    efficiency: _Efficiency | None = None


class _Summary(msgspec.Struct):
    traces: list[_Trace] = []
    run_id: str = "0"


# msgspec's words for a type, as the refusal says them
_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a text",
    "array": "a list",
    "object": "an object",
    "null": "null",
}
_EXPECTED = re.compile(r"Expected `(?P<type>[a-z]+)[^`]*`(?P<bound> [<>]=? \S+)?(?:, got `(?P<got>[^`]+)`)?")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


def _words(message: str) -> tuple[str, str]:
    """msgspec's `… - at `$.traces[0].rank`` as (where, what it should be, in words)."""
    text, _, at = message.rpartition(" - at `")
    if not text:
        text, at = message, "$`"
    where = at.rstrip("`").removeprefix("$").removeprefix(".") or "the document"
    missing = _MISSING.match(text)
    if missing:
        return where, f"has no {missing['field']}"
    expected = _EXPECTED.match(text)
    if expected:
        if expected["bound"] == " >= 0.0":
            return where, "is negative"
        if expected["bound"]:
            return where, "is out of range" + (" (not a finite number)" if expected["type"] == "float" else "")
        return where, f"is not {_TYPE_WORDS.get(expected['type'], expected['type'])}"
    if text.startswith("Number out of range"):
        return where, "is out of range"
    return where, f"is not as `atlas ingest` writes it ({text[:80]})"


def check_summary(summary: Any, path: Path) -> None:
    """The parts of summary.json the commands read have the types and ranges they expect; the
    first that does not is refused in one line."""
    try:
        msgspec.convert(summary, _Summary)
    except msgspec.ValidationError as error:
        where, what = _words(str(error))
        raise AtlasError(path, f"not a summary of `atlas ingest`: {where} {what} (re-run `atlas ingest`)") from None
    seen: set[str] = set()
    for trace in summary.get("traces", []):  # each a dict with a `file` (converted above)
        for key in ("kernels_file", "host_events_file", "memory_file"):
            name = trace.get(key)
            if isinstance(name, str) and name in seen:  # a trace listed twice had its devices, efficiency
                # and rank counted twice ("2 traces claim rank 0"): the files' set had hidden it
                twice = f"{name} is listed twice"
                raise AtlasError(path, f"not a summary of `atlas ingest`: {twice} (re-run `atlas ingest`)")
            if isinstance(name, str):
                seen.add(name)
    run_id = summary.get("run_id", "0")
    if not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", run_id):
        raise AtlasError(path, "not a summary of `atlas ingest`: run_id is not a run id (re-run `atlas ingest`)")
