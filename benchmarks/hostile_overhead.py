"""What the hostile-input guards cost on good traces: decode time of this checkout against another
revision's, on the same machine, interleaved.

    python benchmarks/hostile_overhead.py [--base REV] [--trace PATH] [--repeat 7] [--rounds 3] [--out FILE]

The trace (default: the shared `a100_diff_control`, 31 MB of JSON) is decompressed once to plain
JSON; each round decodes it `--repeat` times in one process with this checkout's reader and with
REV's (`git archive REV kernel_atlas`, run from a temporary folder), one process after the
other; the best and median times per round are recorded. Decoding runs in one process (no worker
pool), which is where the guards sit: bounded ints in the typed decode, the finite-time checks
per slice, the decoder's counters.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
_TIMER = """
import sys, time
from kernel_atlas.ingest.columns import build_columns
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    build_columns(sys.argv[1], None, 1)
    times.append(time.perf_counter() - start)
times.sort()
print(times[0], times[len(times) // 2])
"""


def _time(tree: Path, trace: Path, repeat: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _TIMER, str(trace), str(repeat)], env=env, cwd=tree,
                          capture_output=True, text=True, check=True)  # fmt: skip
    best, median = map(float, done.stdout.split())
    return best, median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="the revision to compare with")
    parser.add_argument("--trace", default=str(REPO.parent / "shared" / "traces" / "a100_diff_control.json.gz"))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="atlas-overhead-") as work:
        work_dir = Path(work)
        trace = work_dir / "trace.json"
        source = Path(args.trace)
        trace.write_bytes(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
        trace_bytes = trace.stat().st_size
        base = work_dir / "base"
        base.mkdir()
        command = ["git", "archive", args.base, "kernel_atlas"]
        archive = subprocess.run(command, cwd=REPO, capture_output=True, check=True)
        archive_path = work_dir / "base.tar"
        archive_path.write_bytes(archive.stdout)
        with tarfile.open(archive_path) as tar:
            tar.extractall(base, filter="data")
        rounds = []
        for _ in range(args.rounds):
            rounds.append({"base": _time(base, trace, args.repeat), "this": _time(REPO, trace, args.repeat)})
    best_base = min(r["base"][0] for r in rounds)
    best_this = min(r["this"][0] for r in rounds)
    record = {
        "command": " ".join(sys.argv),
        "base": args.base,
        "trace": source.name,
        "trace_bytes": trace_bytes,
        "rounds": [{k: {"best_s": round(v[0], 4), "median_s": round(v[1], 4)} for k, v in r.items()} for r in rounds],
        "best_s": {"base": round(best_base, 4), "this": round(best_this, 4)},
        "overhead_pct": round(100 * (best_this - best_base) / best_base, 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
    }
    print(json.dumps(record, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
