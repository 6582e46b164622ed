"""Numbers as people read them: times, throughputs, bandwidths and shapes with their units.

Shared by the terminal output and the HTML report, so that both say "1.23 ms" and
"433 GB/s" the same way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kernel_atlas.analysis.gate import SIGNATURE_SEPARATOR
from kernel_atlas.classify.names import display_name

MISSING = "–"


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def fmt_us(us: Any) -> str:
    """A duration given in µs, in µs, ms or s: `399.1 µs`, `1.23 ms`, `12.345 s`."""
    if _missing(us):
        return MISSING
    us = float(us)
    magnitude = abs(us)
    if magnitude >= 1e6:
        return f"{us / 1e6:.3f} s"
    if magnitude >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def fmt_signed_us(us: Any) -> str:
    """A change of duration with its sign: `+1.20 ms`, `−35.0 µs`, `0.0 µs`."""
    if _missing(us):
        return MISSING
    text = fmt_us(abs(float(us)))
    if float(us) > 0:
        return "+" + text
    if float(us) < 0:
        return "−" + text
    return text


def fmt_number(value: Any, digits: int = 3) -> str:
    """A plain number with about `digits` significant digits: `112`, `46.6`, `0.683`, `0.0021`."""
    if _missing(value):
        return MISSING
    value = float(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(magnitude))
    return f"{value:.{max(decimals, 0)}f}"


def fmt_tflops(tflops: Any) -> str:
    """Achieved or peak FLOP rate given in TFLOP/s: `112 TFLOP/s`, `683 GFLOP/s`."""
    if _missing(tflops):
        return MISSING
    tflops = float(tflops)
    if 0 < abs(tflops) < 1:
        return f"{fmt_number(tflops * 1e3)} GFLOP/s"
    return f"{fmt_number(tflops)} TFLOP/s"


def fmt_gbps(gbps: Any) -> str:
    """Bandwidth given in GB/s: `433 GB/s`, `3.35 TB/s`."""
    if _missing(gbps):
        return MISSING
    gbps = float(gbps)
    if abs(gbps) >= 1e3:
        return f"{fmt_number(gbps / 1e3)} TB/s"
    return f"{fmt_number(gbps)} GB/s"


def fmt_pct(pct: Any, decimals: int = 1) -> str:
    if _missing(pct):
        return MISSING
    return f"{float(pct):.{decimals}f}%"


def _dims_text(value: Any) -> str | None:
    if isinstance(value, list):
        if value and all(isinstance(v, list) for v in value):  # a list of tensors
            inner = [t for t in (_dims_text(v) for v in value) if t]
            return "[" + ", ".join(inner) + "]" if inner else None
        if not value:
            return None  # a scalar or an argument that is not a tensor
        return "×".join(str(v) for v in value)
    return None


def fmt_shapes(input_dims: Any) -> str:
    """Recorded `Input Dims` (JSON text) as tensor shapes: `[[768],[788,768],[768,768],[],[]]`
    → `768, 788×768, 768×768` (arguments without a shape are left out)."""
    if not isinstance(input_dims, str) or not input_dims:
        return ""
    return _short_shapes_text(input_dims) if len(input_dims) <= _CACHED_CHARS else _shapes_text(input_dims)


def _shapes_text(input_dims: str) -> str:
    try:
        dims = json.loads(input_dims)
    except (ValueError, RecursionError):
        return input_dims
    if not isinstance(dims, list):
        return input_dims
    return ", ".join(t for t in (_dims_text(d) for d in dims) if t)


# a table's rows repeat their shapes: each short text is formatted once (at most 4,096 of them
# kept, each under 1,000 characters, so the cache stays within a few MB in a long-lived server)
_CACHED_CHARS = 1000
_short_shapes_text = lru_cache(maxsize=4096)(_shapes_text)


def shared_rank_line(shared: dict[str, Any], named: int = 5) -> str:
    """report.json's `shared_ranks` entry in words, naming its first `named` traces."""
    files = shared["traces"]
    listed = ", ".join(files[:named]) + (f", … {len(files) - named:,} more" if len(files) > named else "")
    return (
        f"{len(files)} traces claim rank {shared['rank']} ({listed}): their activities share one timeline "
        "here (idle time, waits, overlap) that neither trace has — ingest them apart"
    )


UNNUMBERED = "unknown (the trace does not number it)"
_DEVICES_NAMED = 8  # device numbers an unknown-GPU text lists, the rest counted


def device_number(device: Any) -> str:
    """A device as the lines name it: its number, or for activities whose device the trace does
    not record (Kineto's pid "CUDA" without a `device` arg) `UNNUMBERED` — never Python's None."""
    return UNNUMBERED if _missing(device) else str(device)


def unknown_gpu_text(devices: list[Any]) -> str:
    """summary.json `undescribed_devices` in words: `unknown GPU on device 2 (…)`, '' for none."""
    numbered = [str(d) for d in devices if not _missing(d)]
    parts = []
    if numbered:
        more = len(numbered) - _DEVICES_NAMED
        listed = ", ".join(numbered[:_DEVICES_NAMED]) + (f" and {more:,} more" if more > 0 else "")
        parts.append(f"device{'s' if len(numbered) > 1 else ''} {listed}")
    if len(numbered) < len(devices):
        parts.append("a device the trace does not number")
    if not parts:
        return ""
    described = "no entry of the trace's device table describes it: no name, SM count or peaks"
    return f"unknown GPU on {' and '.join(parts)} ({described})"


def device_time_line(device: dict[str, Any]) -> str:
    """One device's time as `report.json` has it: `rank 0 device 0: busy 1.23 ms of 7.56 ms
    (16.2%), idle 6.33 ms; communication 2.00 ms, 40% overlapped with compute`."""
    span, busy = device["span_us"], device["busy_us"]
    line = (
        f"rank {device['rank']} device {device_number(device['device'])}: busy {fmt_us(busy)} of {fmt_us(span)} "
        f"({100 * busy / span if span else 0.0:.1f}%), idle {fmt_us(device['idle_us'])}"
    )
    if device.get("communication_us"):
        line += (
            f"; communication {fmt_us(device['communication_us'])}, "
            f"{device['overlap_pct_of_communication']:.0f}% overlapped with compute"
        )
    return line


def peaks_line(device: Any) -> str:
    """`NVIDIA H100 SXM5 80GB: 3.35 TB/s, bf16 989 TFLOP/s` for a `core.devices.Device`."""
    bf16 = device.tensor.get("bf16")
    return f"{device.name}: {fmt_gbps(device.memory_gbps)}" + (f", bf16 {fmt_tflops(bf16)}" if bf16 else "")


def no_peaks_line(traced_gpu: str | None) -> str:
    """Why a report has no roofline position: the GPU it names has no catalog entry, or it names none."""
    if traced_gpu is None:  # an export that names no GPU (an nsys slice without TARGET_INFO_GPU)
        return "the trace names no GPU: pass --device for peaks"
    if not traced_gpu.strip():  # named "" (vLLM's ROCm graph traces), its properties fitting no one entry
        return "the trace's GPU has no name, and its properties fit no single catalog entry: pass --device for peaks"
    return f"GPU {traced_gpu!r} is not in catalogs/devices.toml: pass --device for peaks"


def projection_note(facts: dict[str, Any]) -> str:
    """`projection: the trace ran on X` where the peaks are another GPU's (`--device`), else ''."""
    return f"projection: the trace ran on {facts.get('traced_gpu')}" if facts.get("projection") else ""


def other_gpus_line(facts: dict[str, Any]) -> str:
    """The run's traces of other GPUs than the one whose peaks cost them, else ''."""
    others = facts.get("other_gpus")
    if not others:
        return ""
    return (
        f"some traces ran on another GPU ({', '.join(map(str, others))}): their kernels are costed "
        "against these peaks all the same — report them apart"
    )


def fmt_bytes(n: Any) -> str:
    """A size in bytes with a binary unit: `512 B`, `1.50 KiB`, `96.6 MiB`, `141.39 GiB`."""
    if _missing(n):
        return MISSING
    value, sign = abs(float(n)), "−" if float(n) < 0 else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    if unit == "B":
        return f"{sign}{value:.0f} B"
    return f"{sign}{value:.2f} {unit}" if value < 100 else f"{sign}{value:.1f} {unit}"


def describe_key(row: Any) -> str:
    """A kernel-level key for people: short kernel names; `A name → B name` for kernels matched
    by op and shapes."""
    if row.level != "kernel":
        return str(row.key)
    if row.matched_by == "op+shapes":
        first = [display_name(str(k).split(" | ")[0]) for k in (row.a_kernels, row.b_kernels)]
        op, _, dims = str(row.key).split(SIGNATURE_SEPARATOR, 2)
        return f"{op} {fmt_shapes(dims)}: {first[0]} → {first[1]}"
    return display_name(str(row.key))


@dataclass(frozen=True)
class OneRunKernels:
    """The kernels only one run ran (`Diff.one_run_kernels`: each with all its GPU time, in
    op+shapes groups too) as every view of a diff shows them — terminal, Markdown, page, notebook:
    a kernel row of the diff holds only a kernel's time outside groups, and counted there the
    A100/V100 pair had 61 vanished, not 66 (`one_run_kernels`)."""

    rows: Any  # every one, largest change first (ties in the order `atlas diff` gives them)
    sections: list[tuple[str, str, Any]]  # appeared, vanished: heading, title (how many, how long), rows


ONE_RUN_HEADINGS = (("appeared", "Appeared in B"), ("vanished", "Vanished from A"))


def one_run_kernels(diff: Any) -> OneRunKernels:
    """`OneRunKernels` of a diff (`analysis.diff.Diff`): each section's title says how many and how
    long ("Appeared in B: 3 kernels, 82.0 µs (all their time)")."""
    every = diff.one_run_kernels()
    every = every.reindex(every["delta_us"].abs().sort_values(ascending=False, kind="stable").index)
    sections = []
    for status, heading in ONE_RUN_HEADINGS:
        rows = every[every["status"] == status]
        title = f"{heading}: {len(rows):,} kernels, {fmt_us(rows['delta_us'].abs().sum())} (all their time)"
        sections.append((heading, title, rows))
    return OneRunKernels(every, sections)


def change_pct(a_us: float, b_us: float, in_a: bool | None = None, in_b: bool | None = None) -> str:
    """The change in percent of A; `new` / `gone` where a run has no activity in the row (`in_a`,
    `in_b`: by presence, not time — a row A ran at 0 µs is no "new" one; not given: by time)."""
    if in_a is None:
        in_a = a_us > 0
    if in_b is None:
        in_b = in_a or b_us > 0
    if not in_a:
        return "new" if in_b else "–"
    if not in_b:
        return "gone"
    if a_us > 0:  # the minus sign of every signed number here (`fmt_signed_us`)
        return f"{100.0 * (b_us - a_us) / a_us:+.1f} %".replace("-", "−")
    return "–"  # A ran it in 0 µs: no change to put in percent


def nothing_found(peaks: bool) -> str:
    """What "What to fix first" says of no finding: where the GPU has no peaks, kernel headroom
    was not judged at all — "nothing found that would save time" had read as a verdict on a run
    whose every kernel was left unjudged (vLLM on an MI300X named "" by its trace)."""
    if peaks:
        return "nothing found that would save time"
    return "nothing found in the waits and launches; kernel headroom not judged: no peaks for this GPU (--device)"


def present_us(us: float, count: int) -> str:
    """A run's time in a row of a diff; `–` where the run has no activity there (terminal and Markdown)."""
    return fmt_us(us) if count else "–"
