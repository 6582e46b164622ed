"""The efficiency that ingest measured (summary.json `efficiency` of each trace,
`ingest/step_split.py`) as report outputs: steps.parquet, report.json `efficiency`, a terminal line
per device and a report.html section. Definitions: docs/efficiency.md."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from kernel_atlas.ingest.capture import WHY_WHOLE
from kernel_atlas.ingest.efficiency import METRICS, TENSOR_CORE_UNKNOWN
from kernel_atlas.ingest.step_split import ROLES
from kernel_atlas.report.units import device_number, fmt_us, unknown_gpu_text

STEP_COLUMNS = (
    ["trace", "rank", "step", "device", "start_us", "end_us", "total_us"]
    + [f"{role}_us" for role in ROLES]
    + ["kernel_us_launched", *METRICS]
)
_LABELS = {
    "gpu_utilization_pct": "GPU utilization",
    "sm_efficiency_pct": "est. SM efficiency",
    "achieved_occupancy_pct": "est. achieved occupancy",
    "tensor_core_time_pct": "tensor cores",
}


def _traces(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in summary.get("traces", []) if isinstance(t.get("efficiency"), dict)]


def steps_table(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per (trace, step, device): the step's split (µs) and the device's metrics in it."""
    rows = []
    for trace in _traces(summary):
        for step in trace["efficiency"]["steps"]:
            split = {k: v for k, v in step.items() if k != "devices"}
            for device in step["devices"] or [{"device": None}]:
                rows.append({"trace": trace["file"], "rank": trace.get("rank", 0), **split, **device})
    frame = pd.DataFrame(rows, columns=STEP_COLUMNS)
    for name in ("rank", "step", "device"):
        frame[name] = frame[name].astype("Int64")
    return frame.astype({name: "float64" for name in STEP_COLUMNS[4:]})


def step_count(efficiency: dict[str, Any]) -> int:
    """How many steps a trace's efficiency covers (`steps` lists the first MAX_STEP_ROWS); 0 for
    a trace without steps, whose one row is the whole trace (`step` null)."""
    total = efficiency.get("steps_total")
    if isinstance(total, int):
        return total
    return sum(1 for step in efficiency["steps"] if isinstance(step, dict) and step.get("step") is not None)


# which kernels each "communication" number counts (report.json `efficiency.communication_rules`)
COMMUNICATION_RULES = (
    "steps.parquet and summary.json efficiency communication_us: the TensorBoard plugin's rule, kernels whose "
    "External id names an nccl:*/gloo:* op and those ops' ranges, after the split's precedence (kernels, copies "
    "first); report.json devices[].communication_us: kernels of category communication, whatever op launched them"
)
# a trace's note where the plugin's rule misses at least this share of its communication kernels' time
MISSED_SHARE = 0.1


def _left_out(eff: dict[str, Any]) -> dict[str, Any]:
    """The trailing profiler steps left out of the window (summary.json), 0 and null when none."""
    count = eff.get("steps_left_out")
    return {
        "steps_left_out": count if isinstance(count, int) else 0,
        "steps_left_out_why": eff.get("steps_left_out_why"),
    }


def between_steps_us(eff: dict[str, Any]) -> float:
    """µs of the window (`window_us`, over which the metrics of all steps are taken: the plugin's)
    that lies in no step row — between a step's end and the next one's later start —, so that the
    rows' `total_us` and the window add up once these are counted; 0 where none, or where the
    trace has no steps or lists only its first ones (`steps_total`)."""
    window, rows = eff.get("window_us"), eff.get("steps")
    if eff.get("steps_total") or not isinstance(window, list) or len(window) != 2 or not isinstance(rows, list):
        return 0.0
    totals = [r.get("total_us") for r in rows if isinstance(r, dict) and r.get("step") is not None]
    if not totals or not all(isinstance(t, (int, float)) for t in totals):
        return 0.0
    gap = float(window[1]) - float(window[0]) - float(sum(totals))
    return gap if gap > 1e-6 * max(1.0, float(window[1]) - float(window[0])) else 0.0


def communication_note(trace: dict[str, Any]) -> str | None:
    """Where the two communication numbers differ by much: the communication kernels the plugin's
    rule (the step split) misses, launched under no `nccl:*`/`gloo:*` op (PyTorch 2.x:
    `record_param_comms`); None where it misses under `MISSED_SHARE` of their time, or the
    summary predates the comparison."""
    eff = trace["efficiency"]
    kernels, missed = eff.get("communication_kernel_us"), eff.get("communication_kernel_other_op_us")
    if (
        not isinstance(kernels, (int, float))
        or not isinstance(missed, (int, float))
        or missed <= MISSED_SHARE * kernels
    ):
        return None
    split = eff.get("communication_us")
    counted = (
        f"the step split counts {fmt_us(split)} of communication (the plugin's rule); " if split is not None else ""
    )
    return (
        f"{trace['file']} rank {trace.get('rank', 0)}: {counted}{fmt_us(missed)} of its {fmt_us(kernels)} of "
        "communication kernels (by category, as report.json devices[].communication_us) were launched under no "
        "nccl:*/gloo:* op and count as kernel_us in the split"
    )


def unknown_device_notes(trace: dict[str, Any]) -> list[str]:
    """What a trace's unknown devices lack, in words (summary.json `undescribed_devices`): a
    device its device table does not describe has no GPU, so no occupancy, SM efficiency or peaks
    of its own; the kernels of a device it does not number are in no device's efficiency at all."""
    unknown = trace.get("undescribed_devices")
    if not isinstance(unknown, list) or not unknown:
        return []
    where = f"{trace.get('file', 'trace')} rank {trace.get('rank', 0)}"
    notes = []
    numbered = [d for d in unknown if d is not None]
    if numbered:
        notes.append(
            f"{where}: {unknown_gpu_text(numbered)}: no occupancy or SM efficiency is estimated there, and "
            "the peaks a report costs its kernels against, if any, are another GPU's (--device chooses them)"
        )
    if len(numbered) < len(unknown):
        devices = trace.get("devices") if isinstance(trace.get("devices"), list) else []
        times = [d.get("kernel_busy_us") for d in devices if isinstance(d, dict) and d.get("device") is None]
        kernel_us = sum(t for t in times if isinstance(t, (int, float)))
        notes.append(
            f"{where}: {fmt_us(kernel_us)} of kernels ran on a device the trace does not number (no `device`): "
            "an unknown GPU, in no device's efficiency (GPU utilization, SM efficiency, occupancy)"
        )
    return notes


def efficiency_facts(summary: dict[str, Any]) -> dict[str, Any]:
    """report.json `efficiency`: per (trace, device) the metrics over all its steps and the steps
    left out; which rule each communication number follows, and where they differ by much a note."""
    devices, notes = [], []
    for trace in _traces(summary):
        eff = trace["efficiency"]
        for device in eff["devices"]:
            devices.append(
                {
                    "trace": trace["file"],
                    "rank": trace.get("rank", 0),
                    "steps": step_count(eff),
                    **_left_out(eff),
                    "between_steps_us": between_steps_us(eff),
                    **device,
                    TENSOR_CORE_UNKNOWN: tensor_core_unknown(device),
                    UNKNOWN_WHY_KEY: unknown_why(trace, device),
                    # Kineto on ROCm records no registers per kernel: occupancy is the thread bound's (and the
                    # LDS's, where a launch records it: docs/efficiency.md)
                    "occupancy_upper_bound": trace.get("runtime") == "rocm",
                }
            )
        note = communication_note(trace)
        if note:
            notes.append(note)
    for trace in summary.get("traces", []):  # with efficiency or without (no step, no kernel in it)
        notes.extend(unknown_device_notes(trace))
    return {
        "devices": devices,
        "definitions": "docs/efficiency.md (the TensorBoard plugin's)",
        "communication_rules": COMMUNICATION_RULES,
        "notes": notes,
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


UPPER_BOUND = " (an upper bound: the trace records no registers)"
# why a kernel's tensor-core answer is unknown: its name says nothing, and its op recorded no dtype
# (record_shapes off) or its GPU is not in catalogs/devices.toml (docs/efficiency.md)
UNKNOWN_WHY = "no dtypes recorded, or a GPU not in the catalog"
# … and in an Nsight export of whole-graph replays (summary.json graphs.unmatched counts them under
# WHY_WHOLE), each replay's row: the kernels it ran are not in the export (`efficiency._tensor_core`)
WHOLE_GRAPH_WHY = (
    "CUDA graphs replayed whole, whose kernels the export does not hold; "
    "no dtypes recorded; or a GPU not in the catalog"
)
UNKNOWN_WHY_KEY = "tensor_core_unknown_why"  # report.json: the reason, where some share is unknown


def unknown_why(trace: dict[str, Any], device: dict[str, Any]) -> str | None:
    """Why some of a device's tensor-core answer is unknown (null where none is): the whole-graph
    replays named among the reasons where the trace has any, which no dtype or catalog would tell."""
    if not (tensor_core_unknown(device) or 0.0) > 0:
        return None
    graphs = trace.get("graphs")
    unmatched = graphs.get("unmatched") if isinstance(graphs, dict) else None
    whole = unmatched.get(WHY_WHOLE) if isinstance(unmatched, dict) else None
    return WHOLE_GRAPH_WHY if isinstance(whole, int) and whole > 0 else UNKNOWN_WHY


def tensor_core_unknown(device: dict[str, Any]) -> float | None:
    """The share (%) of a device's kernel time whose tensor-core answer is unknown: summary.json
    writes it only where some is, so 0 where it is absent beside a share, null where there was no
    kernel time (no share either)."""
    unknown = device.get(TENSOR_CORE_UNKNOWN)
    if isinstance(unknown, (int, float)):
        return float(unknown)
    return 0.0 if device.get("tensor_core_time_pct") is not None else None


def _unknown_words(device: dict[str, Any]) -> str:
    """What the tensor-core share leaves out, in words: '' where nothing is unknown."""
    unknown = tensor_core_unknown(device) or 0.0
    if unknown <= 0:
        return ""
    why = device.get(UNKNOWN_WHY_KEY) or UNKNOWN_WHY
    if device.get("tensor_core_time_pct") is None:
        return f" (the trace cannot tell: {why})"
    return f" (of the kernel time it can tell; {unknown:.1f}% unknown: {why})"


def _metric(device: dict[str, Any], metric: str) -> str:
    """`label value` of one metric; an occupancy that is only the thread bound (ROCm) says so, a
    tensor-core share what it leaves out."""
    text = f"{_LABELS[metric]} {_pct(device.get(metric))}"
    if metric == "tensor_core_time_pct":
        return text + _unknown_words(device)
    bound = _bounded(device, metric) and device.get(metric) is not None
    return text + UPPER_BOUND if bound else text


def _bounded(device: dict[str, Any], metric: str) -> bool:
    """Whether `metric` of `device` is only an upper bound (the occupancy of a ROCm trace)."""
    return metric == "achieved_occupancy_pct" and bool(device.get("occupancy_upper_bound"))


def device_line(
    device: dict[str, Any], steps: int, left_out: int = 0, why: str | None = None, between: float = 0.0
) -> str:
    metrics = ", ".join(_metric(device, m) for m in METRICS)
    span = f"{steps:,} steps" if steps > 1 else ("1 step" if steps == 1 else "the whole trace (no steps recorded)")
    if between > 0:  # the window's µs in no step row: the rows' total_us add up to the window with them
        span += f" and the {fmt_us(between)} between them"
    if left_out:  # the plugin's tail rule: say what it dropped, it does not
        span += f" ({left_out:,} more profiler step{'s' if left_out > 1 else ''} left out: {why or 'cut short'})"
    return f"  device {device_number(device['device'])} efficiency over {span}: {metrics}"


def efficiency_lines(facts: dict[str, Any]) -> list[str]:
    """The ingest summary's lines of one trace (`terminal.TRACE_LINES`)."""
    unknown = [f"  note: {note}" for note in unknown_device_notes(facts)]
    eff = facts.get("efficiency")
    if not isinstance(eff, dict):
        return unknown
    left_out = _left_out(eff)
    between = between_steps_us(eff)
    lines = [
        device_line({**d, UNKNOWN_WHY_KEY: unknown_why(facts, d)}, step_count(eff), *left_out.values(), between)
        for d in eff["devices"]
    ]
    note = communication_note({"file": facts.get("file", "trace"), "rank": facts.get("rank", 0), "efficiency": eff})
    return lines + ([f"  note: {note}"] if note else []) + unknown


def report_lines(efficiency: dict[str, Any] | None, shown: int | None) -> list[str]:
    """The terminal report's lines: one per (rank, device), the first `shown` (None: all), then
    the notes on the communication numbers."""
    devices = (efficiency or {}).get("devices", [])
    lines = [
        device_line(
            d, d["steps"], d.get("steps_left_out") or 0, d.get("steps_left_out_why"), d.get("between_steps_us") or 0.0
        ).replace("  device", f"rank {d['rank']} device", 1)
        for d in devices[:shown]
    ]
    if shown is not None and len(devices) > shown:
        lines.append(f"… and {len(devices) - shown:,} more devices (report.json efficiency; --wide shows all)")
    return lines + [f"note: {note}" for note in (efficiency or {}).get("notes", [])]


def efficiency_html(efficiency: dict[str, Any]) -> str:
    """The report.html section: the metrics per device."""
    devices = efficiency.get("devices", [])
    if not devices and not efficiency.get("notes"):  # a note on an unknown device is said without a table
        return ""
    head = "".join(f"<th>{html.escape(_LABELS[m])}</th>" for m in METRICS)
    rows = "".join(
        f"<tr><td>{html.escape(str(d['trace']))}</td><td>{d['rank']}</td><td>{html.escape(device_number(d['device']))}</td>"
        f"<td>{html.escape(_steps_cell(d))}</td>"
        + "".join(f"<td>{'≤ ' if _bounded(d, m) else ''}{_pct(d.get(m))}{_cell_note(d, m)}</td>" for m in METRICS)
        + "</tr>"
        for d in devices
    )
    note = (
        "Read from the trace alone, with the PyTorch Profiler TensorBoard plugin's definitions over all "
        "profiler steps (docs/efficiency.md); per step in steps.parquet. Communication: "
        + efficiency.get("communication_rules", COMMUNICATION_RULES)
        + "."
    )
    notes = "".join(f"<p><b>{html.escape(n)}</b></p>" for n in efficiency.get("notes", []))
    table = (
        f"<table><tr><th>trace</th><th>rank</th><th>device</th><th>steps</th>{head}</tr>{rows}</table>"
        if devices
        else ""
    )
    return f"<h2 id='efficiency'>GPU efficiency</h2><p>{html.escape(note)}</p>{notes}{table}"


def _cell_note(device: dict[str, Any], metric: str) -> str:
    """After the page's tensor-core share: how much kernel time it leaves out, unknown, and why
    where whole-graph replays are among the reasons (the terminal's words)."""
    unknown = (tensor_core_unknown(device) or 0.0) if metric == "tensor_core_time_pct" else 0.0
    if unknown <= 0:
        return ""
    why = f": {WHOLE_GRAPH_WHY}" if device.get(UNKNOWN_WHY_KEY) == WHOLE_GRAPH_WHY else ""
    return f" ({unknown:.1f}% of kernel time unknown{why})"


def _steps_cell(device: dict[str, Any]) -> str:
    """The steps a device's metrics cover, and those the tail rule left out (with why)."""
    left_out, between = device.get("steps_left_out") or 0, device.get("between_steps_us") or 0.0
    cell = str(device["steps"]) + (f" and the {fmt_us(between)} between them" if between > 0 else "")
    if not left_out:
        return cell
    return f"{cell} ({left_out} more left out: {device.get('steps_left_out_why') or 'cut short'})"
