"""Traces that cost by their shape, not their size: `atlas ingest` then `atlas report` on each,
with this checkout's code and, with --base, another version's, one after the other.

    git archive BASE kernel_atlas catalogs | tar -x -C /tmp/base    # the code before a change
    python benchmarks/hostile_shapes.py --base /tmp/base --out benchmarks/results/FILE.json

The shapes (stop 47's hostile-input campaign found each over issue 27's bounds of 60 s and 1 GB):

- `empty objects`: 20,000,000 `{}` events, gzipped to ~60 KB;
- `launches at one time`: 5,000 `cudaLaunchKernel` ranges of one thread with the same start and
  end (they nest 5,000 deep), each launching a kernel;
- `deep nesting`: 40,000 CPU ops each inside the one before, one kernel launched at the bottom;
- `backtracking names`: 57 kernels named by repeating `gemm_`, `fp8`, … to 16,000 characters (a
  name rule's `\\w*?` span backtracks over them);
- `underscore names`: 60 kernels named `k{i}` then 16,300 underscores and `!`.

Each command runs in a fresh process, killed after --timeout seconds; its wall time, the exit
code and the peak RSS of the whole process tree (sampled every 20 ms from /proc/PID/statm with
`core.beside.resident_bytes`) are recorded.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_atlas.core.beside import resident_bytes

HERE = Path(__file__).resolve().parent
CODE = "import sys\nfrom kernel_atlas.cli import app\nsys.argv[0] = 'atlas'\napp()\n"


def _launch(corr: int, ts: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1.0,
            "args": {"correlation": corr}}  # fmt: skip


def _kernel(corr: int, ts: float, name: str = "ampere_sgemm_32x32_nn") -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 0.5,
            "args": {"correlation": corr, "device": 0, "stream": 7}}  # fmt: skip


def empty_objects(path: Path) -> Path:
    target = path.with_suffix(".json.gz")
    target.write_bytes(gzip.compress(b'{"traceEvents":[' + b"{}," * 19_999_999 + b"{}]}", 9))
    return target


def launches_at_one_time(path: Path) -> Path:
    events = []
    for i in range(5000):
        events += [_launch(i, 1000.0), _kernel(i, 1000.0 + i)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def deep_nesting(path: Path) -> Path:
    n = 40_000
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::op", "pid": 1, "tid": 1, "ts": i * 0.001,
               "dur": 2 * (n - i) * 0.001 + 1, "args": {"External id": i + 1}} for i in range(n)]  # fmt: skip
    events += [_launch(1, n * 0.001 + 0.0001), _kernel(1, n * 0.001 + 5)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def backtracking_names(path: Path) -> Path:
    pieces = ["a", "A", "0", "aA", "_a", "<", ":", "gemm_", "::a", "(a,", "fp8", "x1", "Kernel<", "void ", "_Z",
              "a0A_", " <- ", "cutlass::", "sm90_xmma_gemm_"]  # fmt: skip
    events = []
    for i, piece in enumerate(p for p in pieces for _ in range(3)):
        name = (piece * (16000 // len(piece)))[:16000] + str(i % 3) + "!"
        events += [_launch(i, 10.0 * i), _kernel(i, 10.0 * i + 2, name)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def underscore_names(path: Path) -> Path:
    events = []
    for i in range(60):
        events += [_launch(i, 10.0 * i), _kernel(i, 10.0 * i + 2, f"k{i}" + "_" * 16300 + "!")]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


SHAPES: dict[str, Callable[[Path], Path]] = {
    "empty objects": empty_objects,
    "launches at one time": launches_at_one_time,
    "deep nesting": deep_nesting,
    "backtracking names": backtracking_names,
    "underscore names": underscore_names,
}


def _tree(pid: int) -> list[int]:
    found = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found += [p for child in children.read().split() for p in _tree(int(child))]
    except OSError:
        pass
    return found


def run(args: list[str], code: Path, timeout: float) -> dict[str, Any]:
    """One `atlas` command with the code under `code`: exit code, wall time, peak RSS of its tree."""
    env = {**os.environ, "PYTHONPATH": str(code), "COLUMNS": "100"}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CODE, *args], env=env, cwd=code,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    peak = 0
    while child.poll() is None:
        peak = max(peak, sum(resident_bytes(pid) for pid in _tree(child.pid)))
        if time.perf_counter() - start > timeout:
            child.kill()
            child.wait()
            break
        time.sleep(0.02)
    wall = time.perf_counter() - start
    err = child.stderr.read().decode(errors="replace") if child.stderr else ""
    return {"exit": child.returncode if wall <= timeout else "killed", "wall_s": round(wall, 2),
            "peak_rss_mb": round(peak / 2**20), "stderr": err.strip().splitlines()[-2:]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="folder holding another version's kernel_atlas (run too)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a command is killed")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    versions = {"this": HERE.parent, **({"base": args.base.resolve()} if args.base else {})}
    work = Path(tempfile.mkdtemp(prefix="atlas-shapes-"))
    record: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "shapes": {}}
    for shape, make in SHAPES.items():
        trace = make(work / (shape.replace(" ", "_") + ".json"))
        record["shapes"][shape] = {"bytes": trace.stat().st_size}
        for version, code in versions.items():
            out = work / f"{trace.name}.{version}.atlas"
            ingest = run(["ingest", str(trace), "-o", str(out), "-q"], code, args.timeout)
            report = run(["report", str(out)], code, args.timeout) if ingest["exit"] == 0 else None
            record["shapes"][shape][version] = {"ingest": ingest, "report": report}
            line = f"{shape:22s} {version:5s}"
            for step, done in (("ingest", ingest), ("report", report)):
                if done:
                    line += f"  {step} {done['exit']!s:>6} {done['wall_s']:7.2f} s {done['peak_rss_mb']:6d} MB"
            print(line, flush=True)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
