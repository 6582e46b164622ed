"""The efficiency that ingest measured (summary.json `efficiency` of each trace,
`ingest/step_split.py`) as report outputs: steps.parquet, report.json `efficiency`, a terminal line
per device and a report.html section. Definitions: docs/efficiency.md."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from kernel_atlas.ingest.efficiency import METRICS
from kernel_atlas.ingest.step_split import ROLES

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


def efficiency_facts(summary: dict[str, Any]) -> dict[str, Any]:
    """report.json `efficiency`: per (trace, device) the metrics over all its steps."""
    devices = []
    for trace in _traces(summary):
        eff = trace["efficiency"]
        for device in eff["devices"]:
            devices.append({"trace": trace["file"], "rank": trace.get("rank", 0), "steps": step_count(eff), **device})
    return {"devices": devices, "definitions": "docs/efficiency.md (the TensorBoard plugin's)"}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def device_line(device: dict[str, Any], steps: int) -> str:
    metrics = ", ".join(f"{_LABELS[m]} {_pct(device.get(m))}" for m in METRICS)
    span = f"{steps:,} steps" if steps > 1 else ("1 step" if steps == 1 else "the whole trace (no steps recorded)")
    return f"  device {device['device']} efficiency over {span}: {metrics}"


def efficiency_lines(facts: dict[str, Any]) -> list[str]:
    """The ingest summary's lines of one trace (`terminal.TRACE_LINES`)."""
    eff = facts.get("efficiency")
    if not isinstance(eff, dict):
        return []
    return [device_line(d, step_count(eff)) for d in eff["devices"]]


def report_lines(efficiency: dict[str, Any] | None, shown: int | None) -> list[str]:
    """The terminal report's lines: one per (rank, device), the first `shown` (None: all)."""
    devices = (efficiency or {}).get("devices", [])
    lines = [device_line(d, d["steps"]).replace("  device", f"rank {d['rank']} device", 1) for d in devices[:shown]]
    if shown is not None and len(devices) > shown:
        lines.append(f"… and {len(devices) - shown:,} more devices (report.json efficiency; --wide shows all)")
    return lines


def efficiency_html(efficiency: dict[str, Any]) -> str:
    """The report.html section: the metrics per device."""
    devices = efficiency.get("devices", [])
    if not devices:
        return ""
    head = "".join(f"<th>{html.escape(_LABELS[m])}</th>" for m in METRICS)
    rows = "".join(
        f"<tr><td>{html.escape(str(d['trace']))}</td><td>{d['rank']}</td><td>{d['device']}</td><td>{d['steps']}</td>"
        + "".join(f"<td>{_pct(d.get(m))}</td>" for m in METRICS)
        + "</tr>"
        for d in devices
    )
    note = (
        "Read from the trace alone, with the PyTorch Profiler TensorBoard plugin's definitions over all "
        "profiler steps (docs/efficiency.md); per step in steps.parquet."
    )
    return (
        "<h2 id='efficiency'>GPU efficiency</h2>"
        f"<p>{html.escape(note)}</p><table><tr><th>trace</th><th>rank</th><th>device</th><th>steps</th>{head}</tr>"
        f"{rows}</table>"
    )
