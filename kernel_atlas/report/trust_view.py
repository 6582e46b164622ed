"""The trust line (report.json `trust`, from `analysis.trust`) as text for the terminal and the HTML."""

from __future__ import annotations

from typing import Any

from kernel_atlas.classify.names import display_name
from kernel_atlas.report.units import fmt_us


def trust_lines(trust: dict[str, Any] | None, clocks: bool = True) -> list[str]:
    """The trust line and its reasons, as plain text (the terminal and the HTML escape it);
    `clocks`: with what the clocks' disagreement leaves unsure, where they disagree."""
    if not trust:
        return []
    if trust["costed_pct"] is None:  # every GPU activity recorded 0 µs long: no share to give
        lines = ["costed: no share to give: the GPU activities recorded take 0 µs in all"]
    else:
        lines = [
            f"costed: {trust['costed_pct']:.1f} % of GPU time has FLOPs or bytes "
            f"({fmt_us(trust['costed_time_us'])} of {fmt_us(trust['gpu_time_us'])})"
        ]
    if trust["shapes_recorded"] != "yes":
        which = "the trace was" if trust["shapes_recorded"] == "no" else "some traces were"
        lines.append(f"{which} {trust['advice'][0]}")
    for r in trust["top_uncosted"]:
        share = "" if r["pct"] is None else f" ({r['pct']:.1f} %)"
        lines.append(f"  uncosted {fmt_us(r['time_us'])}{share}: {r['op']}: {r['reason']}")
    more = trust.get("more_uncosted")
    if more:  # the rest of the uncosted time: the lines account for all of the GPU time
        share = "" if more["pct"] is None else f" ({more['pct']:.1f} %)"
        groups = f"{more['groups']:,} more group{'s' if more['groups'] != 1 else ''}"
        lines.append(f"  uncosted {fmt_us(more['time_us'])}{share}: {groups} (roofline.parquet `note`)")
    lines += [f"  to cost more: {a}" for a in trust["advice"][1 if trust["shapes_recorded"] != "yes" else 0 :]]
    estimated = trust.get("estimated")
    if estimated:
        share = "" if estimated["pct"] is None else f" ({estimated['pct']:.1f} % of GPU time)"
        lines.append(
            f"  estimated: {fmt_us(estimated['time_us'])}{share} is costed on what the trace did not record "
            "(an assumed argument, dtype, group size or byte count; borrowed shapes): roofline.parquet `estimate`; "
            "each formula says what"
        )
    inferred = trust.get("shapes_inferred")
    if inferred:
        lines.append(
            f"  estimated: {inferred['kernels']:,} kernels ({fmt_us(inferred['time_us'])}, {inferred['pct']:.1f} % of "
            "GPU time) had no launch in the window; their shapes, and so their costs, are borrowed from launches "
            "of the same kernel, grid and block"
        )
    above = trust.get("above_roof")
    if above:
        share = "" if above["pct"] is None else f", {above['pct']:.1f} % of GPU time"
        rows = f"{above['rows']:,} roofline row{'s' if above['rows'] != 1 else ''}"
        lines.append(
            f"  above the roof: {rows} ({fmt_us(above['time_us'])}{share}) ran faster than their cost allows, "
            f"up to SOL {above['max_sol_pct']:.1f} % ({display_name(above['max_name'])[:60]}): the cost counts more "
            "work than the kernel did (an estimate; an attention window the trace does not record) or data came "
            "from cache; their SOL measures no kernel and their headroom is 0"
        )
    failed = trust.get("traces_failed") or []
    if failed:
        named = ", ".join(f["source"] for f in failed[:3]) + (
            f" and {len(failed) - 3:,} more" if len(failed) > 3 else ""
        )
        lines.append(
            f"  not in this report: {named} failed to ingest; its GPU time is in no table (why: summary.json `failed`)"
        )
    if clocks and trust.get("clocks"):
        lines.append(f"  {trust['clocks']}")
    return lines
