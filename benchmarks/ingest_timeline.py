"""Where `atlas ingest` spends its time: a timeline of its stages, in one run.

    python benchmarks/ingest_timeline.py TRACE [--out DIR]

Runs `atlas ingest TRACE -o DIR -q` in this process with each stage of `ingest/pipeline.py` and
the writes of `ingest/fleet.py` wrapped: every stage is printed with when it started (seconds since
this script started), how long it took and the CPU time of this process meanwhile (the decode
workers' CPU is not in it: `take_read_ahead` is the wait for them). Stages not listed below are
in the gaps. The pipeline is imported before the workers start here, where `atlas ingest` imports
it while they decode, so the stages after decoding are what this timeline measures best.
Used for issue 27's "profile where the time goes on the slow mix" (docs/performance.md).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

START = time.perf_counter()

PIPELINE_STAGES = (
    *("default_classifier", "take_read_ahead", "link", "complete_collectives", "attach_captures"),
    *("infer_shapes", "assemble", "with_host_activity", "last_step_start", "memory_events", "host_roles"),
    *("host_events_table", "label_frame", "with_kernel_efficiency", "usable_rows", "overview", "trace_facts"),
)
FLEET_STAGES = ("build_catalog", "kernel_time_table", "write_beside", "write_rank")


def _timed(function: Callable[..., Any], name: str, marks: list[tuple[str, float, float, float]]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            marks.append((name, began - START, time.perf_counter() - began, time.process_time() - cpu))

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--out", default=None, help="output folder (default: a temporary one)")
    args = parser.parse_args()

    import kernel_atlas.ingest.fleet as fleet
    import kernel_atlas.ingest.pipeline as pipeline
    from kernel_atlas.cli import app

    marks: list[tuple[str, float, float, float]] = []
    for module, names in ((pipeline, PIPELINE_STAGES), (fleet, FLEET_STAGES)):
        for name in names:
            setattr(module, name, _timed(getattr(module, name), name, marks))
    out = args.out or tempfile.mkdtemp(prefix="atlas-timeline-")
    imported = time.perf_counter() - START
    sys.argv = ["atlas", "ingest", args.trace, "-o", out, "-q"]
    try:
        app()
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    end = time.perf_counter() - START
    print(f"{'imports (pipeline, cli)':26s} at {0:6.3f} s  took {imported:6.3f} s")
    for name, began, took, cpu in sorted(marks, key=lambda mark: mark[1]):
        print(f"{name:26s} at {began:6.3f} s  took {took:6.3f} s  CPU {cpu:6.3f} s")
    print(f"{'end':26s} at {end:6.3f} s")


if __name__ == "__main__":
    main()
