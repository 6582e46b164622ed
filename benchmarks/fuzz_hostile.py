"""A long hostile-input campaign: tests/cli/test_fuzz.py's property with a large budget, by hand.

    python benchmarks/fuzz_hostile.py [--examples 2000] [--seed 11] [--out benchmarks/results/fuzz-hostile.json]
                                      [--keep DIR]

Real traces (the small shared ones and the bundled example) are mutated by hypothesis
(`tests/support/fuzz.py`: one hostile value in an event's args or the metadata, an event's own fields,
bytes of the plain, gzip or zstd file) and run through `atlas ingest` then `atlas report` in a
worker process whose address space is capped (`resource.setrlimit`), each case with a time
bound. Every outcome is checked against the contract (exit 0 with a correct result, or exit 2
with one line naming the file). The JSON records the outcomes by mutation kind, the slowest
cases and every breach, with its mutated trace saved under --keep for a reproduction.
Exit code 1 if any case breached the contract. Takes ~0.4 s a case on 2 loaded cores.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # `tests` is importable from the repository root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", default=None, help="write the record as JSON here")
    parser.add_argument("--keep", default="fuzz-breaches", help="folder for the traces of breaching cases")
    args = parser.parse_args()

    from hypothesis import HealthCheck, given, seed, settings

    from tests.support import fuzz

    work = Path(tempfile.mkdtemp(prefix="atlas-fuzz-"))
    runner = fuzz.Runner(work)
    outcomes: Counter[str] = Counter()
    breaches: list[dict] = []
    slowest: list[tuple[float, str]] = []
    started = time.perf_counter()

    @seed(args.seed)
    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        phases=["generate"],  # a breach is recorded and kept, not shrunk
        suppress_health_check=list(HealthCheck),
    )
    @given(case=fuzz.cases())
    def campaign(case: fuzz.Case) -> None:
        outcome, trace, out = runner.run(case)
        problems = fuzz.check(case, outcome, trace, out)
        result = "breach" if problems else ("exit 0" if outcome.ingest == 0 else f"exit {outcome.ingest}")
        outcomes[f"{case.kind}: {result}"] += 1
        slowest.append((outcome.seconds, repr(case)))
        slowest.sort(reverse=True)
        del slowest[5:]
        if problems:
            keep = Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            saved = keep / f"breach-{len(breaches)}{case.suffix}"
            shutil.copy(trace, saved)
            breaches.append({"case": repr(case), "problems": problems, "saved": str(saved)})
            print(f"BREACH {case!r}: {problems}", flush=True)

    try:
        campaign()
    finally:
        runner.close()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    record = {
        "command": " ".join(sys.argv),
        "examples": args.examples,
        "seed": args.seed,
        "traces": [p.name for p in fuzz.trace_paths()],
        "seconds": round(elapsed, 1),
        "outcomes": dict(sorted(outcomes.items())),
        "breaches": breaches,
        "slowest_cases": [{"seconds": round(s, 2), "case": c} for s, c in slowest],
        "limits": {"address_space_bytes": fuzz.MEMORY_LIMIT, "seconds_per_case": fuzz.TIME_LIMIT_S},
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
    }
    print(json.dumps({k: record[k] for k in ("seconds", "outcomes")}, indent=1))
    print(f"{len(breaches)} breaches")
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
