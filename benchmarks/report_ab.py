"""`atlas report` (or, with --ingest, `atlas ingest`) of two versions of the code on the same
input, run in turn (A B A B …), each a fresh process: wall time, CPU time and the peak RSS of its
largest process (the `wait4` rusage), the median of each, and the ratio A/B pair by pair — a
comparison that holds while the machine's speed drifts.

    git archive BASE kernel_atlas catalogs | tar -x -C /tmp/base    # the code before a change
    python benchmarks/report_ab.py OUT --base /tmp/base --runs 4 --out benchmarks/results/FILE.json
    python benchmarks/report_ab.py TRACE --ingest --base /tmp/base --runs 4

A is this checkout's code, B the code under --base (put first on PYTHONPATH). A report run writes
the report files into OUT, as `atlas report OUT` does; an ingest run writes each version's output
into a temporary folder of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CODE = "import sys\nfrom kernel_atlas.cli import app\nsys.argv[0] = 'atlas'\napp()\n"


def run_once(out: Path, pythonpath: Path, ingest_into: Path | None = None) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "COLUMNS": "100"}
    command = ["report", str(out.resolve())]
    if ingest_into is not None:
        command = ["ingest", str(out.resolve()), "-o", str(ingest_into)]
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CODE, *command],
        env=env,
        cwd=pythonpath,  # `python -c` puts the working folder first on sys.path: the version's own
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"atlas {command[0]} {out} with {pythonpath} failed: {child.stderr.read().decode()[-2000:]}")
    child.stderr.close()
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="an `atlas ingest` output folder (with --ingest: a trace)")
    parser.add_argument("--ingest", action="store_true", help="time `atlas ingest OUT` instead of `atlas report OUT`")
    parser.add_argument("--base", type=Path, required=True, help="folder holding the other version's kernel_atlas")
    parser.add_argument("--runs", type=int, default=4, help="runs of each, after one warm-up of each")
    parser.add_argument("--out", dest="result", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    versions = {"A": HERE.parent, "B": args.base.resolve()}
    scratch = Path(tempfile.mkdtemp(prefix="atlas-ab-"))
    into = {name: scratch / name if args.ingest else None for name in versions}
    try:
        for name, path in versions.items():
            run_once(args.out, path, into[name])  # warm-up: the page cache, bytecode
        runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
        for _ in range(args.runs):
            for name, path in versions.items():
                runs[name].append(run_once(args.out, path, into[name]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    command = "ingest" if args.ingest else "report"
    result: dict[str, Any] = {"command": command, "output": str(args.out), "runs": runs, "median": {}}
    result["ratio_median"] = {}
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
