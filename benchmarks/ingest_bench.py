"""Ingest speed and memory: `atlas ingest` against Holistic Trace Analysis on one large trace.

    python benchmarks/ingest_bench.py                      # 500 MB from a100_diff_control, both tools
    python benchmarks/ingest_bench.py --size-mb 100 --skip-hta

1. builds a large valid trace by repeating a real one from ../shared/traces with every
   timestamp shifted by the source span and every id (correlation, External id, Python id,
   flow id) shifted past the source's largest;
2. runs `atlas ingest` (parse, link, classify, write Parquet/JSON) and HTA (`TraceAnalysis`
   load + `get_gpu_kernel_breakdown`) each in a fresh process, measuring wall time and peak
   RSS (getrusage of the child);
3. prints MB/s, peak RSS and the ratios, and writes them as JSON (--out).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
ID_KEYS = ("correlation", "External id", "Python id", "Python parent id", "Ev Idx")


def repeat_events(events: list[dict[str, Any]], copies: int) -> Iterator[dict[str, Any]]:
    """`events` `copies` times in a row: copy k has every timestamp shifted by k times the
    source span, every id shifted past the source's largest and ProfilerStep#N renumbered."""
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    max_id = 0
    for e in events:
        args = e.get("args") or {}
        for key in ID_KEYS:
            if isinstance(args.get(key), int):
                max_id = max(max_id, args[key])
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
    id_step = max_id + 1
    for k in range(copies):
        for e in events:
            if k:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + k * span
                if isinstance(e.get("id"), int):
                    e["id"] = e["id"] + k * id_step
                args = e.get("args")
                if args:
                    args = dict(args)
                    for key in ID_KEYS:
                        if isinstance(args.get(key), int) and args[key] > 0:
                            args[key] += k * id_step
                    e["args"] = args
                if e.get("name", "").startswith("ProfilerStep#"):
                    step = int(e["name"].split("#")[1]) + k * 1000
                    e["name"] = f"ProfilerStep#{step}"
            yield e


def build_large_trace(source: Path, target: Path, size_mb: float) -> dict[str, Any]:
    """Repeat `source` until the output has about `size_mb` MB of uncompressed JSON."""
    with gzip.open(source) as handle:
        doc = json.load(handle)
    events = doc.pop("traceEvents")
    encoder = msgspec.json.Encoder()
    one_copy = sum(len(encoder.encode(e)) + 1 for e in events)
    copies = max(1, round(size_mb * 1e6 / one_copy))
    header = encoder.encode(doc)[:-1]  # without the closing brace
    with target.open("wb") as out:
        out.write(header + b', "traceEvents": [')
        first = True
        for e in repeat_events(events, copies):
            if not first:
                out.write(b",")
            out.write(encoder.encode(e))
            first = False
        out.write(b"]}")
    return {"source": source.name, "copies": copies, "events": copies * len(events), "bytes": target.stat().st_size}


def run_child(code: str) -> dict[str, Any]:
    """Run Python code in a fresh process; its wall time and its own peak RSS."""
    code += "\nimport resource\nprint('MAXRSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"child failed:\n{proc.stdout}\n{proc.stderr}")
    lines = proc.stdout.strip().splitlines()
    peak_kib = int(lines[-1].split()[1])
    return {"wall_s": wall, "peak_rss_mb": peak_kib / 1024, "stdout": "\n".join(lines[:-1])[-2000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=str(SHARED / "a100_diff_control.json.gz"))
    parser.add_argument("--size-mb", type=float, default=500.0)
    parser.add_argument("--work", default=str(HERE / "work"))
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    trace_dir = work / "trace"
    trace_dir.mkdir(exist_ok=True)
    trace = trace_dir / "rank-0.json"
    t0 = time.perf_counter()
    made = build_large_trace(Path(args.source), trace, args.size_mb)
    made["build_s"] = round(time.perf_counter() - t0, 1)
    size_mb = made["bytes"] / 1e6
    print(f"trace: {trace} {size_mb:.0f} MB, {made['events']:,} events ({made['copies']}× {made['source']})")

    atlas_code = textwrap.dedent(f"""
        from kernel_atlas.ingest.pipeline import ingest_paths, write_outputs
        from pathlib import Path
        result = ingest_paths([{str(trace)!r}])
        write_outputs(result, Path({str(work / "atlas-out")!r}))
        print(len(result.frame), "rows")
    """)
    results: dict[str, Any] = {
        "trace": made,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    atlas = run_child(atlas_code)
    atlas["mb_per_s"] = size_mb / atlas["wall_s"]
    atlas["rss_over_size"] = atlas["peak_rss_mb"] / size_mb
    results["atlas"] = atlas
    print(
        f"atlas ingest: {atlas['wall_s']:.1f} s  {atlas['mb_per_s']:.1f} MB/s  peak RSS {atlas['peak_rss_mb']:.0f} MB "
        f"({atlas['rss_over_size']:.2f}× trace)  [{atlas['stdout']}]"
    )
    if not args.skip_hta:
        hta_code = textwrap.dedent(f"""
            from hta.trace_analysis import TraceAnalysis
            analyzer = TraceAnalysis(trace_dir={str(trace_dir)!r})
            kernel_type_df, kernel_df = analyzer.get_gpu_kernel_breakdown(visualize=False)
            print(len(kernel_df), "kernel rows")
        """)
        hta = run_child(hta_code)
        hta["mb_per_s"] = size_mb / hta["wall_s"]
        hta["rss_over_size"] = hta["peak_rss_mb"] / size_mb
        results["hta"] = hta
        results["speedup_vs_hta"] = hta["wall_s"] / atlas["wall_s"]
        results["memory_ratio_vs_hta"] = hta["peak_rss_mb"] / atlas["peak_rss_mb"]
        print(
            f"HTA:          {hta['wall_s']:.1f} s  {hta['mb_per_s']:.1f} MB/s  peak RSS {hta['peak_rss_mb']:.0f} MB "
            f"({hta['rss_over_size']:.2f}× trace)"
        )
        print(
            f"atlas is {results['speedup_vs_hta']:.1f}× faster, "
            f"HTA uses {results['memory_ratio_vs_hta']:.1f}× the memory"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
