"""Graph-capture matching speed: a replay with many graph launches against many captured graphs.

    python benchmarks/capture_bench.py                        # 200 launches, 60 captured graphs
    python benchmarks/capture_bench.py --launches 1000 --graphs 120 --out benchmarks/results/capture.json

Builds SYNTHETIC traces from the shared MI300X SGLang pair:
* replay: the decode trace with its hipGraphLaunch (544 kernels) repeated `--launches` times,
  each copy shifted in time and in correlation id;
* capture: the batch-32 capture plus `--graphs - 1` more captures of the same graph standing in
  for other batch sizes — other `Input Dims`, and some GEMM launches name another kernel (other
  tile sizes). Variant v renames 1 + v % 12 GEMM launches: every variant
  passes the counting bound and is rejected only by aligning (2–24 edits). Variants carry no
  Python frames, to keep the file small.
Then runs, each in a fresh process, `atlas ingest REPLAY` and `atlas ingest REPLAY --capture
CAPTURE`, and prints wall time, peak RSS and how many graph launches matched.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
REPLAY = SHARED / "mi300x_sglang_qwen3_8b_decode_graph.json.gz"
CAPTURE = SHARED / "mi300x_sglang_qwen3_8b_decode_capture_bs32.json.gz"
HOST = ("cpu_op", "python_function", "cuda_runtime", "cuda_driver", "user_annotation")


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path) as handle:
        return json.load(handle)


def build_replay(launches: int, target: Path) -> None:
    doc = load(REPLAY)
    events = doc["traceEvents"]
    graph = next(e for e in events if e.get("name") == "hipGraphLaunch")
    corr = graph["args"]["correlation"]
    replayed = [
        e
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") == corr
    ]
    span = max(e["ts"] + e["dur"] for e in replayed) - graph["ts"] + 100.0
    for k in range(1, launches):
        for source in (graph, *replayed):
            copy = json.loads(json.dumps(source))
            copy["ts"] += k * span
            copy["args"]["correlation"] = corr + 10_000_000 * k
            events.append(copy)
    target.write_text(json.dumps(doc))


def build_capture(graphs: int, target: Path) -> None:
    doc = load(CAPTURE)
    events = doc["traceEvents"]
    begin = next(e for e in events if e.get("name") == "hipStreamBeginCapture")
    end = next(e for e in events if e.get("name") == "hipStreamEndCapture")
    inside = [
        e
        for e in events
        if e.get("cat") in HOST
        and e.get("tid") == begin["tid"]
        and begin["ts"] <= e["ts"]
        and e["ts"] + e.get("dur", 0) <= end["ts"] + end["dur"]
    ]
    span = end["ts"] + end["dur"] - begin["ts"] + 1000.0
    lean = [e for e in inside if e.get("cat") != "python_function"]  # keeps the copies small
    gemms = [i for i, e in enumerate(lean) if "LaunchKernel" in e["name"] and e["args"]["kernel"].startswith("Cijk_")]
    for v in range(1, graphs):
        copies = json.loads(json.dumps(lean))
        renamed = set(gemms[:: max(1, len(gemms) // (1 + v % 12))][: 1 + v % 12])  # 1…12 other GEMMs
        for i, e in enumerate(copies):
            e["ts"] += v * span + 1e6
            args = e.get("args", {})
            for key in ("correlation", "External id"):
                if key in args:
                    args[key] += 10_000_000 * v
            if "Input Dims" in args:
                args["Input Dims"] = [
                    [v, *d[1:]] if isinstance(d, list) and d and d[0] == 32 else d for d in args["Input Dims"]
                ]
            if i in renamed:
                args["kernel"] += f"_variant{v}"
        events.extend(copies)
    target.write_text(json.dumps(doc))


def run(args: list[str]) -> dict[str, Any]:
    code = (
        "import sys, time, json\n"
        "from kernel_atlas.ingest.pipeline import ingest_paths\n"
        "t = time.perf_counter()\n"
        "r = ingest_paths([sys.argv[1]], captures=sys.argv[2:])\n"
        "wall = time.perf_counter() - t\n"
        "g = r.facts['traces'][0]['graphs']\n"
        "hwm = next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM'))\n"
        "print(json.dumps({'wall_s': wall, 'peak_rss_mb': hwm / 1024,"
        " 'launches': g['launches'], 'matched': g['matched'], 'with_shapes_pct': g['with_shapes_pct']}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--graphs", type=int, default=60)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        replay, capture = Path(tmp) / "replay.json", Path(tmp) / "capture.json"
        t = time.perf_counter()
        build_replay(options.launches, replay)
        build_capture(options.graphs, capture)
        print(f"built traces in {time.perf_counter() - t:.1f} s")
        sizes = {"replay_mb": replay.stat().st_size / 1e6, "capture_mb": capture.stat().st_size / 1e6}
        plain = run([str(replay)])
        merged = run([str(replay), str(capture)])
    result = {
        "launches": options.launches,
        "captured_graphs": options.graphs,
        **sizes,
        "without_capture": plain,
        "with_capture": merged,
        "machine": f"{platform.machine()}, {platform.processor() or platform.system()}",
        "conditions": "2-core machine shared with other jobs (timings disturbed)",
    }
    print(json.dumps(result, indent=1))
    if options.out:
        options.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
