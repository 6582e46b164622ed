"""Write synthetic Chrome traces from seed-format catalog entries (a test helper)."""

from __future__ import annotations

from typing import Any

from kernel_atlas.ingest.frames import STACK_SEPARATOR, is_python_frame


def _dims(param: dict[str, Any]) -> list[Any]:
    dim = param.get("example_dim", [])
    return dim if isinstance(dim, list) else []


def trace_from_catalog(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One launch per entry, nested in its call stack's frames (outermost first in time),
    with the innermost CPU-op frame carrying `Input Dims`/`Input type` from the params."""
    events: list[dict[str, Any]] = []
    pid, tid = 4242, 4242
    for i, entry in enumerate(entries):
        frames = entry["call_stack"].split(STACK_SEPARATOR)
        launch, enclosing = frames[0], frames[1:]
        base = 1_000_000.0 + i * 10_000.0
        depth = len(enclosing)
        innermost_op = next((f for f in enclosing if not is_python_frame(f)), None)
        for level, frame in enumerate(reversed(enclosing)):  # outermost first
            start = base + level
            duration = 2 * (depth - level) + 20.0
            if is_python_frame(frame):
                event = {
                    "ph": "X",
                    "cat": "python_function",
                    "name": frame,
                    "pid": pid,
                    "tid": tid,
                    "ts": start,
                    "dur": duration,
                    "args": {"Python id": i * 1000 + level},
                }
            else:
                args: dict[str, Any] = {"External id": i * 1000 + level + 1}
                if frame == innermost_op and depth - level - 1 == enclosing.index(frame):
                    args["Input Dims"] = [_dims(p) for p in entry["params"]]
                    args["Input type"] = [p.get("example_dtype", "") for p in entry["params"]]
                event = {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": frame,
                    "pid": pid,
                    "tid": tid,
                    "ts": start,
                    "dur": duration,
                    "args": args,
                }
            events.append(event)
        correlation = 100_000 + i
        launch_ts = base + depth + 1
        category = "cuda_driver" if launch.startswith("cu") and not launch.startswith("cuda") else "cuda_runtime"
        events.append(
            {
                "ph": "X",
                "cat": category,
                "name": launch,
                "pid": pid,
                "tid": tid,
                "ts": launch_ts,
                "dur": 2.0,
                "args": {"correlation": correlation},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": entry["kernel_name"],
                "pid": 0,
                "tid": 7,
                "ts": launch_ts + 5,
                "dur": 3.0 + i % 7,
                "args": {"correlation": correlation, "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1]},
            }
        )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "traceEvents": events,
    }
