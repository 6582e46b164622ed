"""`atlas report` of two versions of the code on the same ingest output, run in turn (A B A B …),
each a fresh process: wall time, CPU time and the peak RSS of its largest process (the `wait4`
rusage), the median of each, and the ratio A/B pair by pair — a comparison that holds while the
machine's speed drifts.

    git archive BASE kernel_atlas catalogs | tar -x -C /tmp/base    # the code before a change
    python benchmarks/report_ab.py OUT --base /tmp/base --runs 4 --out benchmarks/results/FILE.json

A is this checkout's code, B the code under --base (put first on PYTHONPATH). Each run writes the
report files into OUT, as `atlas report OUT` does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CODE = "import sys\nfrom kernel_atlas.cli import app\nsys.argv[0] = 'atlas'\napp()\n"


def run_once(out: Path, pythonpath: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "COLUMNS": "100"}
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CODE, "report", str(out.resolve())],
        env=env,
        cwd=pythonpath,  # `python -c` puts the working folder first on sys.path: the version's own
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"atlas report {out} with {pythonpath} failed: {child.stderr.read().decode()[-2000:]}")
    child.stderr.close()
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="an `atlas ingest` output folder")
    parser.add_argument("--base", type=Path, required=True, help="folder holding the other version's kernel_atlas")
    parser.add_argument("--runs", type=int, default=4, help="runs of each, after one warm-up of each")
    parser.add_argument("--out", dest="result", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    versions = {"A": HERE.parent, "B": args.base.resolve()}
    for path in versions.values():
        run_once(args.out, path)  # warm-up: the page cache, bytecode
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for _ in range(args.runs):
        for name, path in versions.items():
            runs[name].append(run_once(args.out, path))
    result: dict[str, Any] = {"output": str(args.out), "runs": runs, "median": {}, "ratio_median": {}}
    for name in runs:
        result["median"][name] = {k: statistics.median(r[k] for r in runs[name]) for k in runs[name][0]}
    pairs = list(zip(runs["A"], runs["B"], strict=True))
    for key in runs["A"][0]:
        result["ratio_median"][key] = statistics.median(a[key] / b[key] for a, b in pairs)
    for name in runs:
        m = result["median"][name]
        print(f"{name}: wall {m['wall_s']:.2f} s, cpu {m['cpu_s']:.2f} s, largest process {m['peak_rss_mb']:.0f} MB")
    r = result["ratio_median"]
    print(f"A/B (median of pairs): wall {r['wall_s']:.3f}, cpu {r['cpu_s']:.3f}, peak RSS {r['peak_rss_mb']:.3f}")
    if args.result:
        args.result.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
