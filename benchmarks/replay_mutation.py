"""Mutation study of replay's checks: every mutant of tests/support/replay_mutants.py, by hand.

    python benchmarks/replay_mutation.py [--out benchmarks/results/replay-mutation-cpu.json]

Each mutant is a deliberate bug in a copy of a replay module (a dropped mask, a wrong argument of
the timed launch, an off-by-one bound, inputs outside an op's domain, a wrong integer output, a
tolerance taken from the wrong dtype). A mutant is caught when the replay's own check says
"fail" where the unmutated code says "pass". Runs on the CPU (Triton interpreter), ~1 minute;
CI runs a subset (tests/replay/test_replay_mutants.py). Exit code 1 if any mutant survives.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # `tests` is importable from the repository root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="write the outcomes as JSON here")
    args = parser.parse_args()

    import torch
    import triton

    from tests.support.replay_mutants import MUTANTS, run_mutant

    rows = []
    started = time.perf_counter()
    for mutant in MUTANTS:
        t0 = time.perf_counter()
        outcome = run_mutant(mutant)
        seconds = time.perf_counter() - t0
        status = "caught" if outcome.caught else "SURVIVED"
        print(f"{status:8} {seconds:5.1f} s  {mutant.name}: {outcome.mutated[0]} ({outcome.mutated[1]})")
        rows.append(
            {
                "mutant": mutant.name,
                "module": mutant.module,
                "caught": outcome.caught,
                "original": list(outcome.original),
                "mutated": list(outcome.mutated),
                "seconds": round(seconds, 2),
            }
        )
    caught = sum(r["caught"] for r in rows)
    print(f"{caught}/{len(rows)} mutants caught in {time.perf_counter() - started:.0f} s")
    if args.out:
        result = {
            "command": "python benchmarks/replay_mutation.py --out " + args.out,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "torch": torch.__version__,
            "triton": triton.__version__,
            "caught": caught,
            "mutants": rows,
        }
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
