"""Cost of the GPU memory analysis on a synthetic trace with millions of `[memory]` events.

    python benchmarks/memory_bench.py                       # 2,000,000 memory events
    python benchmarks/memory_bench.py --events 5000000 --out benchmarks/results/memory-5m-2core.json

Writes a trace (in a temporary folder) of `--events` allocator events on one GPU and a host thread,
nested in ProfilerStep / nn.Module / CPU op ranges (one op per 10 events; blocks freed a few ops
later, addresses reused), with totals that are the running sum of the events. Then, each timed
apart, on columns read once: reading and decoding the whole trace (`build_columns`), linking the
host ranges (`link`, which computes the nesting the attribution reuses), the attribution of every
event (`ingest.memory.memory_events`), pairing (`analysis.memory.pair_allocations`) and the
per-device summary (`memory_summary`). Prints wall and CPU seconds of each stage (`*_s`, `*_cpu_s`:
on a shared machine the CPU time of these single-threaded stages is the steadier number; decoding
runs in worker processes, so only its wall time is meaningful) as JSON, and checks the peak against
the largest total written.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kernel_atlas.analysis.memory import memory_summary, pair_allocations
from kernel_atlas.ingest.columns import build_columns
from kernel_atlas.ingest.link import HostNesting, link
from kernel_atlas.ingest.memory import memory_events

EVENTS_PER_OP = 10
OPS_PER_STEP = 1000
LIFETIME_OPS = 3  # a block lives this many ops
BASELINE = 1 << 30


def write_trace(path: Path, events: int) -> int:
    """The synthetic trace; returns its largest `Total Allocated`."""
    ops = events // EVENTS_PER_OP
    half = EVENTS_PER_OP // 2
    total, largest, live = BASELINE, BASELINE, []
    with path.open("w") as out:
        out.write('{"traceEvents": [\n')
        for op in range(ops):
            start = op * 100.0
            if op % OPS_PER_STEP == 0:
                step = op // OPS_PER_STEP
                out.write(
                    f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{step}","pid":1,"tid":1,'
                    f'"ts":{start},"dur":{OPS_PER_STEP * 100.0 - 1}}},\n'
                )
                out.write(
                    f'{{"ph":"X","cat":"python_function","name":"nn.Module: Block_{step % 8}","pid":1,"tid":1,'
                    f'"ts":{start + 0.5},"dur":{OPS_PER_STEP * 100.0 - 2}}},\n'
                )
            out.write(
                f'{{"ph":"X","cat":"cpu_op","name":"aten::op{op % 50}","pid":1,"tid":1,"ts":{start + 1},"dur":98}},\n'
            )
            ts = start + 2
            frees = live.pop(0) if len(live) >= LIFETIME_OPS else []
            allocs = []
            for k in range(half):
                size = 512 * (1 + (op * 7 + k) % 4096)
                addr = 0x7F0000000000 + ((op % (LIFETIME_OPS + 1)) * half + k) * (1 << 24)
                total += size
                largest = max(largest, total)
                allocs.append((addr, size))
                out.write(_memory(ts, addr, size, total))
                ts += 1
            for addr, size in frees or [(0x6F0000000000 + op * 64 + k, 256) for k in range(half)]:
                total -= size  # before the first ops have aged: frees of blocks from before the window
                out.write(_memory(ts, addr, -size, total))
                ts += 1
            live.append(allocs)
        out.write(
            '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":0,"dur":1,"args":{"device":0,"stream":7}}\n'
        )
        out.write("]}\n")
    return largest


def _memory(ts: float, addr: int, nbytes: int, total: int) -> str:
    return (
        f'{{"ph":"i","cat":"cpu_instant_event","s":"t","name":"[memory]","pid":1,"tid":1,"ts":{ts},'
        f'"args":{{"Addr":{addr},"Bytes":{nbytes},"Total Allocated":{total},"Total Reserved":{total + (64 << 20)},'
        f'"Device Type":1,"Device Id":0}}}},\n'
    )


@contextmanager
def _timed(times: dict[str, float], stage: str) -> Iterator[None]:
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    times[f"{stage}_s"] = time.perf_counter() - wall
    times[f"{stage}_cpu_s"] = time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "memory.json"
        largest = write_trace(path, args.events)
        times: dict[str, float] = {"trace_mb": round(path.stat().st_size / 1e6, 1)}
        with _timed(times, "decode"):
            _, cols = build_columns(path)
    with _timed(times, "link"):
        linked = link(cols)
    with _timed(times, "attribute"):
        nest = HostNesting.of(cols.host, (linked.host_parent, linked.host_crossed))
        events = memory_events(cols.memory, cols.host, nest)
    with _timed(times, "pair"):
        allocations = pair_allocations(events)
    with _timed(times, "summary"):
        (entry,) = memory_summary(events, allocations)
    times = {k: round(v, 3) for k, v in times.items()}
    result = {
        "memory_events": len(events),
        "host_ranges": len(cols.host),
        "allocations": len(allocations),
        "peak_ok": entry["peak_allocated_bytes"] == largest,
        "unexplained_bytes": entry["unexplained_bytes"],
        "memory_analysis_s": round(times["attribute_s"] + times["pair_s"] + times["summary_s"], 3),
        "memory_analysis_cpu_s": round(times["attribute_cpu_s"] + times["pair_cpu_s"] + times["summary_cpu_s"], 3),
        **times,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
