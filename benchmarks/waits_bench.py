"""Speed of "Why the GPU waits" on one large rank: `analyse_waits` (what `atlas report` runs per
rank, both idle conventions included) and its idle breakdown in each convention alone.

    python benchmarks/waits_bench.py                # 18 copies of a100_diff_control (170k activities)
    python benchmarks/waits_bench.py --copies 4 --out benchmarks/results/waits-18x-2core.json

The kernels table of the shared A100 trace is repeated `--copies` times (timestamps shifted, as in
report_views_bench.py); each step runs `--repeat` times in this process and the best wall time is
kept. Peak RSS of the process is reported.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from report_views_bench import SHARED, finish, repeated  # noqa: E402

from kernel_atlas.analysis.idle import idle_breakdown  # noqa: E402
from kernel_atlas.analysis.waits import analyse_waits  # noqa: E402
from kernel_atlas.ingest.pipeline import ingest_trace  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=18)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = ingest_trace(SHARED / "a100_diff_control.json.gz")
    frame = repeated(result.frame, args.copies)
    summary = {"traces": [result.facts]}
    windows = {int(result.facts["rank"]): result.facts.get("last_step_start_us")}
    results: dict = {"copies": args.copies, "activities": len(frame)}
    results["idle_breakdown_exact_s"] = best(lambda: idle_breakdown(frame, 30.0, False, windows), args.repeat)
    results["idle_breakdown_hta_s"] = best(lambda: idle_breakdown(frame, 30.0, True, windows), args.repeat)
    results["analyse_waits_s"] = best(lambda: analyse_waits(frame, summary=summary), args.repeat)
    finish(results, args.out)


if __name__ == "__main__":
    main()
