"""Costed share of GPU time per trace: report.json `costed_time_us / gpu_time_us` and the largest
reasons for the uncosted rest (roofline.parquet's note per row, summed over op time).

    python benchmarks/costed_share.py [TRACE[=CAPTURE] ...] [--out FILE.json] [--work DIR]

With no traces, every trace of ../shared/traces with GPU activity (the SGLang decode graph with
its capture). Each trace is ingested into a fresh folder under --work and reported; the table
goes to stdout as Markdown, the numbers to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
CAPTURES = {"mi300x_sglang_qwen3_8b_decode_graph.json.gz": "mi300x_sglang_qwen3_8b_decode_capture_bs32.json.gz"}
ATLAS = str(Path(sys.executable).with_name("atlas"))
SKIP = {"cpu_only.json.gz", "cpu_ops_no_distributed_info.json.gz", CAPTURES[next(iter(CAPTURES))]}


def default_traces() -> list[tuple[Path, list[Path]]]:
    traces = sorted(p for p in SHARED.glob("*.json.gz") if p.name not in SKIP)
    return [(p, [SHARED / CAPTURES[p.name]] if p.name in CAPTURES else []) for p in traces]


def measure(trace: Path, captures: list[Path], work: Path, top: int) -> dict:
    out = work / trace.name.split(".")[0]
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    capture_args = [a for c in captures for a in ("--capture", str(c))]
    for command in (["ingest", str(trace), "-o", str(out), *capture_args], ["report", str(out)]):
        done = subprocess.run([ATLAS, *command], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        if done.returncode and (command[0] == "report" or not (out / "kernels.parquet").exists()):
            return {"trace": trace.name, "error": done.stderr.strip().splitlines()[-1:]}
    facts = json.loads((out / "report.json").read_text())
    gpu, costed = facts["gpu_time_us"], facts["costed_time_us"]
    roofline = pd.read_parquet(out / "roofline.parquet")
    # op_time_us: a call's kernels together (a helper row's time is in its main row's)
    rest = roofline[~roofline["role"].isin(["main", "helper"])]
    why = rest["role"] + ": " + rest["note"].fillna("").astype(str).str.slice(0, 100)
    reasons = rest["op_time_us"].groupby(why).sum().sort_values(ascending=False)
    return {
        "trace": trace.name,
        "captures": [c.name for c in captures],
        "gpu_time_us": gpu,
        "costed_time_us": costed,
        "costed_pct": 100.0 * costed / gpu if gpu else None,
        "reasons": [{"why": k, "pct": 100.0 * v / gpu} for k, v in reasons.head(top).items()],
        "seconds": round(time.perf_counter() - start, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", help="TRACE or TRACE=CAPTURE[,CAPTURE]")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/costed_share"))
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    pairs = [
        (Path(t.split("=")[0]), [Path(c) for c in t.split("=")[1].split(",")] if "=" in t else []) for t in args.traces
    ] or default_traces()
    results = [measure(trace, captures, args.work, args.top) for trace, captures in pairs]
    print("| trace | costed | largest uncosted reasons (share of GPU time) |")
    print("|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['trace']} | — | {'; '.join(r['error'])} |")
            continue
        why = "; ".join(f"{x['why']} ({x['pct']:.1f} %)" for x in r["reasons"])
        print(f"| {r['trace']} | {r['costed_pct']:.1f} % | {why} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
