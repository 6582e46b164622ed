"""Idle-time breakdown: Kernel Atlas against Holistic Trace Analysis on the same traces.

    pip install holistictraceanalysis
    python benchmarks/hta_idle_compare.py ../shared/traces/*.json.gz --out benchmarks/results/hta-idle-compare.json
    # without HTA: its values as recorded by an earlier run
    python benchmarks/hta_idle_compare.py ../shared/traces/*.json.gz --recorded benchmarks/results/hta-idle-compare.json

For each trace, per stream and category (host_wait, kernel_wait, other), `atlas report` computes
both conventions every time (`analyse_waits`): the breakdown of idle.parquet and the other one's
(idle_hta.parquet by default, idle_exact.parquet with --like-hta). Compared:
* `hta_defaults`: HTA's `get_idle_time_breakdown(consecutive_kernel_delay=30)` with its defaults,
  against the HTA-convention numbers of a default `atlas report` (`atlas`, idle_hta.parquet) and
  of `atlas report --like-hta` (`atlas_like_hta`, idle.parquet);
* `exact`: HTA with `HTA_DISABLE_NS_ROUNDING=1` and `include_last_profiler_step=True`, against the
  exact numbers of a default `atlas report` (`atlas`, idle.parquet) and of `--like-hta`
  (`atlas_like_hta`, idle_exact.parquet) — equal wherever HTA's window keeps every activity
  (traces with fewer than two ProfilerSteps).
HTA runs in a child process per setting (its rounding switch is read from the environment), or
its values are read from `--recorded FILE` (this script's earlier output).
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

import pandas as pd

from kernel_atlas.analysis.waits import analyse_waits
from kernel_atlas.ingest.pipeline import ingest_trace

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


def _per_stream(table: pd.DataFrame) -> dict[str, float]:
    table = table[table["stream"].notna()]
    return {f"{int(r.stream)}/{r.category}": float(r.idle_us) for r in table.itertuples()}


def atlas_values(path: Path) -> dict[tuple[str, bool], dict[str, float]]:
    """Per (convention, --like-hta): the per-stream numbers `atlas report` writes, from the
    breakdown (idle.parquet) or the other convention's (idle_hta / idle_exact.parquet)."""
    result = ingest_trace(path)
    summary = {"traces": [result.facts]}
    values = {}
    for like_hta in (False, True):
        waits = analyse_waits(result.frame, 30.0, like_hta=like_hta, summary=summary)
        values[(waits.basis, like_hta)] = _per_stream(waits.breakdown)
        other = "exact" if waits.basis == "hta" else "hta"
        values[(other, like_hta)] = _per_stream(waits.alternate)
    return values


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
    parser.add_argument("--recorded", type=Path, help="HTA's values from this earlier output instead of running HTA")
    args = parser.parse_args()
    recorded = json.loads(args.recorded.read_text()) if args.recorded else None
    results = {}
    for path in args.traces:
        entry: dict[str, object] = {}
        ours = atlas_values(path)
        for setting, rounding, convention in (("hta_defaults", True, "hta"), ("exact", False, "exact")):
            if recorded is not None:
                was = recorded.get(path.name, {}).get(setting, {})
                if "hta" not in was:  # HTA failed on it then, or it was not run
                    entry[setting] = {"hta_error": was.get("hta_error", f"not in {args.recorded}")}
                    continue
                theirs = was["hta"]
            else:
                try:
                    theirs = run_hta(path, rounding)
                except subprocess.CalledProcessError as error:  # HTA fails on some traces (no GPU events...)
                    entry[setting] = {"hta_error": error.stderr.strip().splitlines()[-1] if error.stderr else "failed"}
                    continue
            default, like_hta = ours[(convention, False)], ours[(convention, True)]
            entry[setting] = {
                "hta": theirs,
                "atlas": default,
                "max_relative_deviation": deviation(default, theirs),
                "atlas_like_hta": like_hta,
                "max_relative_deviation_like_hta": deviation(like_hta, theirs),
            }
        results[path.name] = entry
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
