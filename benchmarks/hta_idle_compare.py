"""Idle-time breakdown: Kernel Atlas against Holistic Trace Analysis on the same traces.

    pip install holistictraceanalysis
    python benchmarks/hta_idle_compare.py ../shared/traces/*.json.gz --out benchmarks/results/hta-idle-compare.json

For each trace, per stream and category (host_wait, kernel_wait, other):
* HTA's `get_idle_time_breakdown(consecutive_kernel_delay=30)` with its defaults, against
  `atlas report --like-hta` (HTA's conventions: timestamps rounded, last ProfilerStep dropped);
* HTA with `HTA_DISABLE_NS_ROUNDING=1` and `include_last_profiler_step=True`, against the
  default exact breakdown of `atlas report` — equal wherever HTA's window keeps every activity
  (traces with fewer than two ProfilerSteps).
HTA runs in a child process per setting (its rounding switch is read from the environment).
Prints one JSON object: the values of both tools and the largest relative deviation per setting;
`--out FILE` also writes it (benchmarks/results/hta-idle-compare.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.report.idle import idle_breakdown

HTA_CHILD = textwrap.dedent(
    """
    import json, logging, sys
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    path, last = sys.argv[1], sys.argv[2] == "1"
    analysis = TraceAnalysis(trace_files={0: path}, trace_dir="/", include_last_profiler_step=last)
    table, _ = analysis.get_idle_time_breakdown(ranks=[0], visualize=False, consecutive_kernel_delay=30)
    print(json.dumps({f"{int(r.stream)}/{r.idle_category}": float(r.idle_time) for r in table.itertuples()}))
    """
)


def run_hta(path: Path, rounding: bool) -> dict[str, float]:
    env = dict(os.environ)
    if not rounding:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", HTA_CHILD, str(path.resolve()), "0" if rounding else "1"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def atlas_values(path: Path, like_hta: bool) -> dict[str, float]:
    result = ingest_trace(path)
    windows = {int(result.facts["rank"]): result.facts.get("last_step_start_us")}
    table = idle_breakdown(result.frame, 30.0, like_hta, windows)
    table = table[table["stream"].notna()]
    return {f"{int(r.stream)}/{r.category}": float(r.idle_us) for r in table.itertuples()}


def deviation(ours: dict[str, float], theirs: dict[str, float]) -> float:
    """Largest relative difference over HTA's non-zero values (absolute µs when HTA says 0)."""
    worst = 0.0
    for key, value in theirs.items():
        diff = abs(ours.get(key, 0.0) - value)
        worst = max(worst, diff / value if value else diff)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {}
    for path in args.traces:
        entry: dict[str, object] = {}
        for setting, rounding, like_hta in (("hta_defaults", True, True), ("exact", False, False)):
            try:
                theirs = run_hta(path, rounding)
            except subprocess.CalledProcessError as error:  # HTA fails on some traces (no GPU events...)
                entry[setting] = {"hta_error": error.stderr.strip().splitlines()[-1] if error.stderr else "failed"}
                continue
            ours = atlas_values(path, like_hta)
            entry[setting] = {"hta": theirs, "atlas": ours, "max_relative_deviation": deviation(ours, theirs)}
        results[path.name] = entry
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
