"""Ingest-time cost of the host-activity columns (`kernel_atlas/ingest/host_activity.py`).

    python benchmarks/host_activity_bench.py ../shared/traces/v100_diff_test.json.gz [--repeat 5]
    python benchmarks/host_activity_bench.py ../shared/traces/h100_vit_image_classify_infer.json.gz --build-mb 150

Times the whole ingest of the trace and, separately, the host-activity step (`with_host_activity`
+ `last_step_start`) on columns read and linked once; prints the medians and the share of the
ingest time the step costs as JSON. `--build-mb` first repeats the trace (timestamps and ids
shifted, as `ingest_bench.py` does) into a temporary file of about that size: a trace with Python
stacks and many host waits stresses the frame search.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kernel_atlas.ingest.columns import build_columns
from kernel_atlas.ingest.host_activity import last_step_start, with_host_activity
from kernel_atlas.ingest.link import link
from kernel_atlas.ingest.pipeline import ingest_trace, trace_stem
from kernel_atlas.ingest.table import assemble


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--build-mb", type=float, help="repeat the trace to about this many MB first")
    args = parser.parse_args()
    if args.build_mb:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from ingest_bench import build_large_trace

        folder = tempfile.TemporaryDirectory()
        built = Path(folder.name) / "large.json"
        build_large_trace(args.trace, built, args.build_mb)
        args.trace = built

    ingest_s = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ingest_trace(args.trace)
        ingest_s.append(time.perf_counter() - t0)

    cols = build_columns(args.trace)[1]
    linked = link(cols)
    step_s = []
    for _ in range(args.repeat):
        frame = assemble(trace_stem(args.trace), 0, cols, linked)
        t0 = time.perf_counter()
        with_host_activity(frame, cols, linked)
        last_step_start(cols)
        step_s.append(time.perf_counter() - t0)
    waits = int(frame["wait_frame"].notna().sum())
    result = {
        "trace": args.trace.name,
        "file_mb": args.trace.stat().st_size / 1e6,
        "gpu_activities": len(frame),
        "host_ranges": len(cols.host),
        "host_waits_attributed": waits,
        "ingest_median_s": statistics.median(ingest_s),
        "host_activity_median_s": statistics.median(step_s),
        "share_of_ingest_pct": 100 * statistics.median(step_s) / statistics.median(ingest_s),
        "repeat": args.repeat,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
