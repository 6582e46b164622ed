"""Graph replays matched against captures of many graphs: `atlas ingest REPLAY --capture CAPTURE`.

    python benchmarks/capture_scale.py --graphs 50000 --replays 1000 --out benchmarks/results/FILE.json
    python benchmarks/capture_scale.py ... --root /tmp/base    # another version's kernel_atlas

Writes SYNTHETIC pairs (a capture trace of one-launch graphs, a replay trace of graph launches of
one kernel each), then times the ingest of each as a whole process (wall, CPU, peak memory of the
largest process, from the operating system's accounting). The cases (issue 27's hostile input):

- `cuda-equal`: CUDA launches name no kernel, so every graph fits every replay equally, with the
  same shapes; each replay has a grid of its own (a sequence of its own).
- `cuda-two-shapes`: the same, the graphs captured at two batch sizes: every replay ambiguous.
- `rocm-named`: ROCm launches name their kernel and grid; the graphs launch `--names` kernels on
  7 grids; replays of 1,000 kernel names (some not captured) on 11 grids.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES = ("cuda-equal", "cuda-two-shapes", "rocm-named")


def _event(cat: str, name: str, ts: float, args: dict[str, Any], pid: int = 1, tid: int = 1) -> dict[str, Any]:
    dur = 10.0 if cat == "cpu_op" else 2.0  # the op holds its launch (2 µs in)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_pair(case: str, graphs: int, replays: int, names: int, folder: Path) -> tuple[Path, Path]:
    events, correlation = [], 100
    for g in range(graphs):
        rows = 64 if case != "cuda-two-shapes" else 64 * (1 + g % 2)
        t0 = 1000.0 + 100 * g
        if case == "rocm-named":
            named = {"kernel": f"kern_{g % names}", "grid": [1 + g % 7, 1, 1], "block": [128, 1, 1]}
            launch = ("hipLaunchKernel", named)
        else:
            launch = ("cudaLaunchKernel", {})
        for cat, name, ts, args in (
            ("cuda_runtime", "cudaStreamBeginCapture", t0, {}),
            ("cpu_op", "aten::mm", t0 + 10, {"Input Dims": [[rows, 128], [128, 64]], "Input type": ["float", "float"]}),
            ("cuda_runtime", launch[0], t0 + 12, launch[1]),
            ("cuda_runtime", "cudaStreamEndCapture", t0 + 50, {}),
        ):
            correlation += 1
            events.append(_event(cat, name, ts, {**args, "correlation": correlation, "External id": correlation}))
    capture = folder / f"{case}-capture.json"
    capture.write_text(json.dumps({"traceEvents": events, "synthetic": "benchmarks/capture_scale.py"}))
    events = []
    for r in range(replays):
        t, correlation = 10.0 + 50 * r, 10_000_000 + r
        if case == "rocm-named":
            name, grid = f"kern_{r % (names + 5)}", [1 + r % 11, 1, 1]
        else:
            name, grid = "gemm_kernel", [1 + r, 1, 1]
        events.append(_event("cuda_runtime", "cudaGraphLaunch", t, {"correlation": correlation}))
        kernel = {"device": 0, "stream": 7, "correlation": correlation, "grid": grid, "block": [128, 1, 1]}
        events.append(_event("kernel", name, t + 10, kernel, pid=0, tid=7))
    replay = folder / f"{case}-replay.json"
    replay.write_text(json.dumps({"traceEvents": events, "synthetic": "benchmarks/capture_scale.py"}))
    return replay, capture


def timed_ingest(root: Path, replay: Path, capture: Path, out: Path, timeout: float) -> dict[str, Any]:
    argv = ["atlas", "ingest", str(replay), "--capture", str(capture), "-o", str(out), "-q"]
    code = f"import sys; sys.argv = {argv!r}\nfrom kernel_atlas.cli import main\nmain()"
    began = time.perf_counter()
    # `python -c` puts the working folder first on sys.path: that version's kernel_atlas
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen([sys.executable, "-c", code], cwd=root, stdout=subprocess.DEVNULL, stderr=stderr)
        while True:  # reaped here with `wait4`: this process's own accounting, not all children's so far
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - began > timeout:
                process.kill()
                os.wait4(process.pid, 0)
                return {"wall_s": None, "timed_out_after_s": timeout}
            time.sleep(0.02)
        wall = time.perf_counter() - began
        stderr.seek(0)
        said = stderr.read().decode(errors="replace")
    returncode = os.waitstatus_to_exitcode(status)
    row: dict[str, Any] = {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "exit": returncode,
    }
    if returncode == 0:
        graphs = json.loads((out / "summary.json").read_text())["traces"][0]["graphs"]
        row.update(launches=graphs["launches"], matched=graphs["matched"], unmatched=graphs["unmatched"])
    else:
        row["stderr"] = said[-400:]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=50_000)
    parser.add_argument("--replays", type=int, default=1_000)
    parser.add_argument("--names", type=int, default=5_000, help="distinct kernel names of rocm-named's graphs")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--root", type=Path, default=here, help="the folder holding the kernel_atlas to run")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per ingest")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "graphs": args.graphs,
        "replays": args.replays,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "cases": {},
    }
    with tempfile.TemporaryDirectory(prefix="atlas-capture-scale-") as tmp:
        for case in args.cases:
            replay, capture = write_pair(case, args.graphs, args.replays, args.names, Path(tmp))
            row = timed_ingest(args.root.resolve(), replay, capture, Path(tmp) / f"{case}.atlas", args.timeout)
            row["capture_mb"] = round(capture.stat().st_size / 1e6, 1)
            results["cases"][case] = row
            print(case, json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
