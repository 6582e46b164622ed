"""Wide input (issue 27): traces whose events are few but whose distinct values are many —
kernel names, devices, steps, threads, streams — through `atlas ingest` then `atlas report`,
each in a fresh process, with its wall time and the exact peak RSS of the process
(`os.wait4`), against the hostile-input bounds (60 s and 1 GB a command).

    python benchmarks/wide_input.py [--scale 1.0] [--out benchmarks/results/wide-input.json]
    python benchmarks/wide_input.py --fleet-only --scale 5      # only the fleet: 1,000 one-rank traces

The cases (at --scale 1): 200k calls of one GEMM kernel, each with a new shape (dynamic shapes); 50k
distinct nn.Modules and 50k distinct Python frames, each around an op that launches a kernel; 200k
memory events; 20k memory events on 5k devices; 200k distinct kernel names, bare and each launched
by an op with shapes under a Python frame (catalog.json lists 10,000); 100k and 5k devices; 80k
distinct kernel names of 820 characters; 50k profiler steps, each with a launch and a kernel; 200k
host threads; 100k overlapping kernels on one stream; 200k overlapping, unnested host ranges on one
thread; 100k properly nested Python frames; and a folder of 200 one-rank traces, each with a GEMM
and an NCCL all-reduce.
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
    modules, frames = [], []
    for i in range(n(50_000)):
        t = 1000 + 10 * i
        for events, name in ((modules, f"nn.Module: Block_{i}"), (frames, f"model/layer_{i}.py({i}): forward_{i}")):
            events += _launched(i, t, {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1,
                                       "ts": t, "dur": 9, "args": {"Python id": i + 1}})  # fmt: skip
    memory = [{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "s": "t",
               "ts": 1000 + i, "args": {"Addr": 4096 * (i // 2 + 1), "Bytes": 512 if i % 2 == 0 else -512,
                                        "Total Allocated": 512 * (i % 2 == 0), "Device Id": 0, "Device Type": 1}}
              for i in range(n(200_000))] + [_kernel(0, "k", 0, 7, 1000, 5)]  # fmt: skip
    memory_devices = [
        {**event, "args": {**event["args"], "Device Id": i // 4}} for i, event in enumerate(memory[: n(20_000)])
    ]
    launched_names = []  # distinct kernel names, each launched by an op with shapes, under a Python frame
    for i in range(n(200_000)):
        frame = {"ph": "X", "cat": "python_function", "name": f"model/blocks.py({i % 500}): forward", "pid": 1,
                 "tid": 1, "ts": 1000 + 10 * i, "dur": 9, "args": {"Python id": i + 1}}  # fmt: skip
        launched_names += _launched(i, 1000 + 10 * i, frame, kernel=f"triton_poi_fused_add_{i}")
    shapes = []
    for i in range(n(200_000)):  # dynamic shapes: one GEMM kernel, a new M each call
        shapes += _launched(i, 1000 + 10 * i, {"ph": "X", "cat": "user_annotation", "name": "decode", "pid": 1,
                                                "tid": 1, "ts": 1000 + 10 * i, "dur": 9}, m=i + 1)  # fmt: skip
    return {
        "distinct shapes 200k": shapes,
        "modules 50k": modules,
        "python frames 50k": frames,
        "memory events 200k": memory,
        "memory devices 5k": [*memory_devices, _kernel(0, "k", 0, 7, 1000, 5)],
        "kernel names 200k": [_kernel(i, f"kern_{i}_" + "x" * 50, 0, 7, 1000 + 3 * i, 2) for i in range(n(200_000))],
        # names just under the 1,024-character shortening that once alone counted toward the budget
        "wide kernel names 80k": [
            _kernel(i, f"k{i:06d}_" + "x" * 812, 0, 7, 1000 + 3 * i, 2) for i in range(n(80_000))
        ],
        "launched kernel names 200k": launched_names,
        "devices 100k": [_kernel(i, "k", i, i, 1000 + i, 5) for i in range(n(100_000))],
        "devices 5k": [_kernel(i, "k", i, i, 1000 + i, 5) for i in range(n(5_000))],
        "steps 50k": steps,
        "threads 200k": threads,
        "one stream, overlapping 100k": [_kernel(i, f"k{i % 3}", 0, 7, 1000 + i, wide) for i in range(wide)],
        "unnested host ranges 200k": stair,
        "nested frames 100k": deep,
    }


def fleet_cases(scale: float) -> dict[str, list[list[dict]]]:
    """Runs of many small traces (a folder, one trace a rank): each rank's step launches a GEMM
    and an NCCL all-reduce, so that the cross-rank view matches collectives across every rank."""
    ranks = max(2, int(200 * scale))
    traces = []
    for rank in range(ranks):
        t = 1000 + rank % 7
        events = [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": t, "dur": 50}
        ]
        events += _launched(0, t, {"ph": "X", "cat": "python_function", "name": "nn.Module: Block_0", "pid": 1,
                                   "tid": 1, "ts": t, "dur": 9, "args": {"Python id": 1}})  # fmt: skip
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 20,
             "dur": 1, "args": {"correlation": 2}},
            _kernel(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0, 9,
                    t + 30, 10 + rank % 5),
        ]  # fmt: skip
        traces.append(events)
    return {f"ranks {ranks:,}": traces}


def _launched(i: int, t: int, around: dict, m: int = 8, kernel: str = "ampere_sgemm_32x32_nn") -> list[dict]:
    """An event `around` (a module, a frame, a range) holding an (m×8)·(8×8) `aten::mm` that
    launches kernel `i`, named `kernel`."""
    return [
        around,
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 7,
         "args": {"External id": i + 1, "Input Dims": [[m, 8], [8, 8]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 2, "dur": 1,
         "args": {"correlation": i + 1, "External id": i + 1}},
        _kernel(i, kernel, 0, 7, t + 3, 5),
    ]  # fmt: skip


def _file_name(case: str) -> str:
    """A case's trace file (`.json`), or its folder of traces (a fleet case: `ranks …`)."""
    name = case.replace(" ", "_").replace(",", "")
    return name if case.startswith("ranks") else name + ".json"


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
    parser.add_argument("--fleet-only", action="store_true", help="only the folder of one-rank traces (200 × scale)")
    parser.add_argument("--only", default=None, help="only the cases whose name holds this text")
    parser.add_argument("--write", default=None, help=argparse.SUPPRESS)  # the traces' writer (a child)
    args = parser.parse_args()
    if args.write:
        sizes = {}
        for name, events in ({} if args.fleet_only else cases(args.scale)).items():
            if args.only and args.only not in name:
                continue
            (Path(args.write) / _file_name(name)).write_text(json.dumps({"traceEvents": events}))
            sizes[name] = len(events)
        for name, traces in fleet_cases(args.scale).items():
            if args.only and args.only not in name:
                continue
            folder = Path(args.write) / _file_name(name)
            folder.mkdir()
            for rank, events in enumerate(traces):
                info = {"rank": rank, "world_size": len(traces), "backend": "nccl"}
                (folder / f"rank{rank}.json").write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
            sizes[name] = sum(map(len, traces))
        (Path(args.write) / "cases.json").write_text(json.dumps(sizes))
        return 0
    work = Path(tempfile.mkdtemp(prefix="atlas-wide-"))
    # the traces are written by a process of their own: a child's peak RSS (`wait4`) counts the
    # image it was forked from, which must not hold every case's events
    only = ["--fleet-only"] if args.fleet_only else []
    only += ["--only", args.only] if args.only else []
    subprocess.run([sys.executable, __file__, "--write", str(work), "--scale", str(args.scale), *only], check=True)
    record: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "cases": {}}
    broken = 0
    try:
        for name, size in json.loads((work / "cases.json").read_text()).items():
            trace = work / _file_name(name)
            out = trace.with_suffix(".atlas")
            files = sorted(trace.iterdir()) if trace.is_dir() else [trace]
            result = {"events": size, "mb": round(sum(f.stat().st_size for f in files) / 2**20, 1)}
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
            shutil.rmtree(trace) if trace.is_dir() else trace.unlink()
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
