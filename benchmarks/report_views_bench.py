"""Speed and size of what people read: `atlas diff`, the HTML report and the terminal report,
on kernels tables as large as the ingest benchmark's 510 MB trace.

    python benchmarks/report_views_bench.py                # 18 copies of a100_diff_control vs v100_diff_test
    python benchmarks/report_views_bench.py --copies 4 --out benchmarks/results/report-views.json

The kernels tables of the two shared A100/V100 traces are repeated `--copies` times (timestamps
shifted, op-call ids kept distinct), then, in this process:
1. `diff_kernels(A, B)` (the comparison behind `atlas diff` and compare.ipynb);
2. `write_html` of report.html for A (the analysis itself is not timed: `roofline/analysis.py`);
3. `print_report` to an 80-column console.
Wall time of each step, the HTML size and the peak RSS of the process are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from rich.console import Console

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kernel_atlas.analysis.diff import diff_kernels  # noqa: E402
from kernel_atlas.core.devices import match_device  # noqa: E402
from kernel_atlas.ingest.pipeline import ingest_trace  # noqa: E402
from kernel_atlas.report.build import Report  # noqa: E402
from kernel_atlas.report.html import write_html  # noqa: E402
from kernel_atlas.report.terminal import print_report  # noqa: E402
from kernel_atlas.roofline.analysis import analyse  # noqa: E402

SHARED = HERE.parent.parent / "shared" / "traces"


def repeated(frame: pd.DataFrame, copies: int) -> pd.DataFrame:
    span = float(frame["ts_us"].max() - frame["ts_us"].min() + frame["dur_us"].max() + 1000.0)
    op_ids = float(frame["cpu_op_id"].max() + 1) if frame["cpu_op_id"].notna().any() else 0.0
    parts = []
    for k in range(copies):
        part = frame.copy()
        part["ts_us"] = part["ts_us"] + k * span
        part["cpu_op_id"] = part["cpu_op_id"] + k * op_ids
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def timed(label: str, results: dict, fn):
    start = time.perf_counter()
    value = fn()
    results[label] = round(time.perf_counter() - start, 3)
    print(f"{label}: {results[label]:.3f} s", flush=True)
    return value


def finish(results: dict, out: Path | None) -> None:
    """Add the peak RSS of this process and the machine to `results`, print them, write them to `out`."""
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    results["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count()}
    print(json.dumps(results, indent=1))
    if out:
        out.write_text(json.dumps(results, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=18)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    a = repeated(ingest_trace(SHARED / "a100_diff_control.json.gz").frame, args.copies)
    b = repeated(ingest_trace(SHARED / "v100_diff_test.json.gz").frame, args.copies)
    results: dict = {"copies": args.copies, "rows_a": len(a), "rows_b": len(b)}
    diff = timed("diff_kernels_s", results, lambda: diff_kernels(a, b))
    results["diff_rows"] = len(diff)
    device = match_device("NVIDIA A100-PG509-200", None)
    analysis = analyse(a, device)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "report.html"
        timed("write_html_s", results, lambda: write_html(analysis, device, path, "bench"))
        results["html_mb"] = round(path.stat().st_size / 1e6, 2)
        results["roofline_rows"] = len(analysis.roofline)
        report = Report(Path(folder), analysis, device, "NVIDIA A100-PG509-200", {"html": path})
        console = Console(width=80, file=io.StringIO(), color_system=None)
        timed("print_report_s", results, lambda: print_report(console, report))
    finish(results, args.out)


if __name__ == "__main__":
    main()
