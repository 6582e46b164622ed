"""Wide input (issue 27): traces whose events are few but whose distinct values are many —
kernel names, devices, steps, threads, streams — through `atlas ingest` then `atlas report`,
each in a fresh process, with its wall time and the exact peak RSS of the process
(`os.wait4`), against the hostile-input bounds (60 s and 1 GB a command).

    python benchmarks/wide_input.py [--scale 1.0] [--out benchmarks/results/wide-input.json]

The cases (at --scale 1): 200k distinct kernel names; 100k and 5k devices; 50k profiler steps,
each with a launch and a kernel; 200k host threads; 100k overlapping kernels on one stream;
200k overlapping, unnested host ranges on one thread; 100k properly nested Python frames.
Exit code 1 when a command breaks a bound (or fails: exit other than 0, or a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ATLAS = [sys.executable, "-c", "from kernel_atlas.cli import app; app()"]
LIMIT_S, LIMIT_MB = 60.0, 1024.0


def _kernel(i: int, name: str, device: int, stream: int, ts: float, dur: float) -> dict:
    args = {"device": device, "stream": stream, "correlation": i + 1}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": args}


def cases(scale: float) -> dict[str, list[dict]]:
    def n(count: int) -> int:
        return max(1, int(count * scale))

    steps = []
    for i in range(n(50_000)):
        steps.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                      "ts": 1000 + 10 * i, "dur": 9})  # fmt: skip
        steps.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                      "ts": 1001 + 10 * i, "dur": 1, "args": {"correlation": i + 1}})  # fmt: skip
        steps.append(_kernel(i, "k", 0, 7, 1003 + 10 * i, 5))
    count = n(200_000)
    stair = [{"ph": "X", "cat": "user_annotation", "name": "r", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": count}
             for i in range(count)] + [_kernel(0, "k", 0, 7, 5000, 10)]  # fmt: skip
    depth = n(100_000)
    deep = [{"ph": "X", "cat": "python_function", "name": f"f{i % 7}", "pid": 1, "tid": 1, "ts": 1000 + i,
             "dur": 2 * depth - 2 * i + 10} for i in range(depth)]  # fmt: skip
    deep.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": 1000 + depth + 1, "dur": 1, "args": {"correlation": 1}})  # fmt: skip
    deep.append(_kernel(0, "k", 0, 7, 1000 + 3 * depth, 10))
    threads = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": i, "ts": 1000 + i, "dur": 5,
                "args": {"External id": i + 1}} for i in range(n(200_000))]  # fmt: skip
    threads.append(_kernel(0, "k", 0, 7, 1000, 5))
    wide = n(100_000)
    return {
        "kernel names 200k": [_kernel(i, f"kern_{i}_" + "x" * 50, 0, 7, 1000 + 3 * i, 2) for i in range(n(200_000))],
        "devices 100k": [_kernel(i, "k", i, i, 1000 + i, 5) for i in range(n(100_000))],
        "devices 5k": [_kernel(i, "k", i, i, 1000 + i, 5) for i in range(n(5_000))],
        "steps 50k": steps,
        "threads 200k": threads,
        "one stream, overlapping 100k": [_kernel(i, f"k{i % 3}", 0, 7, 1000 + i, wide) for i in range(wide)],
        "unnested host ranges 200k": stair,
        "nested frames 100k": deep,
    }


def _file_name(case: str) -> str:
    return case.replace(" ", "_").replace(",", "") + ".json"


def run(command: list[str], folder: Path) -> dict:
    """One command in its own process: exit code, wall time, the exact peak RSS of the process
    (its own `os.wait4` rusage) and the end of its stderr; killed after 10× the time bound."""
    err_path = folder / "stderr.txt"
    started = time.perf_counter()
    with err_path.open("w") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        timer = threading.Timer(10 * LIMIT_S, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
    wall = time.perf_counter() - started
    exit_code = os.waitstatus_to_exitcode(status)
    process.returncode = exit_code  # reaped here, not by Popen
    return {"exit": exit_code, "wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "stderr": err_path.read_text()[-400:]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--write", default=None, help=argparse.SUPPRESS)  # the traces' writer (a child)
    args = parser.parse_args()
    if args.write:
        sizes = {}
        for name, events in cases(args.scale).items():
            (Path(args.write) / _file_name(name)).write_text(json.dumps({"traceEvents": events}))
            sizes[name] = len(events)
        (Path(args.write) / "cases.json").write_text(json.dumps(sizes))
        return 0
    work = Path(tempfile.mkdtemp(prefix="atlas-wide-"))
    # the traces are written by a process of their own: a child's peak RSS (`wait4`) counts the
    # image it was forked from, which must not hold every case's events
    subprocess.run([sys.executable, __file__, "--write", str(work), "--scale", str(args.scale)], check=True)
    record: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "cases": {}}
    broken = 0
    try:
        for name, size in json.loads((work / "cases.json").read_text()).items():
            trace = work / _file_name(name)
            out = trace.with_suffix(".atlas")
            result = {"events": size, "mb": round(trace.stat().st_size / 2**20, 1)}
            commands = (("ingest", [*ATLAS, "ingest", trace, "-o", out, "-q"]), ("report", [*ATLAS, "report", out]))
            for step, command in commands:
                done = run([str(c) for c in command], work)
                ok = done["exit"] in (0, 2) and "Traceback" not in done["stderr"] and done["wall_s"] <= LIMIT_S
                ok = ok and done["peak_rss_mb"] <= LIMIT_MB
                done["within_bounds"] = ok
                broken += not ok
                result[step] = done
                print(f"{name:30s} {step:6s} exit {done['exit']}  {done['wall_s']:6.1f} s  "
                      f"{done['peak_rss_mb']:8.0f} MB  {'ok' if ok else 'BREACH'}", flush=True)  # fmt: skip
                if done["exit"] != 0:
                    break
            record["cases"][name] = result
            trace.unlink()
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
