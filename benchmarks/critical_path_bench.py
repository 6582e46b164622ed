"""Critical-path speed and memory on one large rank.

    python benchmarks/critical_path_bench.py --kernels 170000 --out benchmarks/results/critical-path-170k-2core.json

Ingests a shared trace once (default a100_cudagraph_rank0: eager kernels, CUDA-graph replays,
memcpys, 25k CPU ops and 34k runtime calls per copy) and repeats its ingested tables —
kernels and host events — back to back until the rank holds `--kernels` GPU activities: copy k
has every timestamp shifted by k times the source span and every correlation past the source's
largest (what ingesting `benchmarks/ingest_bench.py`'s repeated trace would give, without
decoding gigabytes of JSON on a shared machine). Then times, in this process: building the graph,
the longest path, the segments and breakdown, and one what-if re-solve; and the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_atlas.analysis.critical_path import build_graph
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.whatif import parse_speedup, whatif_weights
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"


def repeated(kernels: pd.DataFrame, host: pd.DataFrame, copies: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    ends = np.concatenate([(kernels["ts_us"] + kernels["dur_us"]).to_numpy(), host["end_us"].to_numpy()])
    starts = np.concatenate([kernels["ts_us"].to_numpy(), host["ts_us"].to_numpy()])
    span = float(np.nanmax(ends) - np.nanmin(starts)) + 1000.0
    corr = int(max(kernels["correlation"].max(), host["correlation"].max())) + 1
    ks, hs = [], []
    for k in range(copies):
        kc = kernels.copy()
        kc["ts_us"] += k * span
        kc["launch_ts_us"] += k * span
        kc["correlation"] = kc["correlation"] + k * corr
        hc = host.copy()
        hc["ts_us"] += k * span
        hc["end_us"] += k * span
        hc["correlation"] = np.where(hc["correlation"] >= 0, hc["correlation"] + k * corr, -1)
        hc["wait_correlation"] = np.where(hc["wait_correlation"] >= 0, hc["wait_correlation"] + k * corr, -1)
        hc["parent"] = np.where(hc["parent"] >= 0, hc["parent"] + k * len(host), -1)
        ks.append(kc)
        hs.append(hc)
    return pd.concat(ks, ignore_index=True), pd.concat(hs, ignore_index=True)


def timed(results: dict, label: str, fn):
    start = time.perf_counter()
    value = fn()
    results[f"{label}_s"] = round(time.perf_counter() - start, 3)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=SHARED / "a100_cudagraph_rank0.json.gz")
    parser.add_argument("--kernels", type=int, default=170_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        write_outputs(ingest_paths([args.trace]), out)
        kernels, host = load_kernels(out), load_host_events(out, 0)
    copies = max(1, -(-args.kernels // len(kernels)))
    kernels, host = repeated(kernels, host, copies)
    results: dict = {"trace": args.trace.name, "copies": copies, "gpu_activities": len(kernels), "host_rows": len(host)}
    graph = timed(results, "graph", lambda: build_graph(kernels, host))
    results["nodes"], results["edges"] = graph.n_nodes, len(graph.src)
    path = timed(results, "longest_path", lambda: longest_path(graph))
    segs = timed(results, "segments", lambda: segments(graph, path))
    results["path_us"], results["segments"] = round(path.length_us, 3), len(segs)
    results["breakdown_pct"] = breakdown_pct(segs)
    weights, _ = whatif_weights(graph, [parse_speedup("category=gemm:2x")], False, None)
    timed(results, "whatif_resolve", lambda: longest_path(graph, weights))
    results["total_s"] = round(results["graph_s"] + results["longest_path_s"] + results["segments_s"], 3)
    results["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
