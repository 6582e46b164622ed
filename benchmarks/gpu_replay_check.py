"""GPU replay check: run unattended on a machine with a CUDA GPU (H100/H200 class), commit what it writes.

    python benchmarks/gpu_replay_check.py [--trace TRACE ...] [--out FILE] [--budget-s 600] [--max-gib 60]

It needs the project installed with torch (a CUDA build) and triton (`pip install -e '.[gpu]'`
also brings flashinfer); it installs nothing itself. Steps, each result written (and flushed) to
the output as soon as it exists, one JSON object per line:

1. `machine`: GPU name, SMs, memory, driver/CUDA, torch/triton/flashinfer versions, git commit;
2. `gemm_sanity`: a bf16 8192³ torch.mm timed by replay's timing routine and by
   triton.testing.do_bench; it passes when it reaches `gemm_min_fraction_of_dense_peak` of the
   GPU's dense bf16 peak in catalogs/devices.toml and agrees with do_bench within
   `do_bench_tolerance` (catalogs/replay.toml [gpu_check]);
3. `replay` (source = trace file): every replay target of each trace — by default the bundled
   example (examples/h100_bert_small_infer.json.gz) and, where ../shared/traces exists, the H100
   traces there;
4. `replay` (source `catalog`): every catalog entry at its recorded shapes;
5. `summary`: counts per check and timed region, and the traced-GEMM target: the median
   |replay/traced − 1| over GEMMs of ≥ 1 GFLOP replayed as the traced kernel.

New targets stop being started once `--budget-s` is spent (the summary says how many were left).
Default output: benchmarks/results/<gpu>-replay.jsonl. Without a GPU it says so, writes nothing
and exits 2: numbers in benchmarks/results/ are only ever measured ones. `--cpu-dry-run` runs
the same steps on the CPU (no GEMM sanity, Triton interpreter, shapes scaled) into
benchmarks/work/ to try the plumbing on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLE = ROOT / "examples" / "h100_bert_small_infer.json.gz"
SHARED = ROOT.parent / "shared" / "traces"


class Log:
    """JSON lines, flushed one by one: a run cut short keeps everything measured so far."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.handle = path.open("w")

    def write(self, kind: str, **fields: Any) -> None:
        self.handle.write(json.dumps({"kind": kind, **fields}, default=_plain) + "\n")
        self.handle.flush()


def _plain(value: Any) -> Any:
    try:
        return value.item()  # numpy scalars
    except AttributeError:
        return str(value)


def default_traces() -> list[Path]:
    traces = [EXAMPLE]
    if SHARED.is_dir():
        traces += sorted(p for p in SHARED.glob("h100_*.json.gz") if p.name != EXAMPLE.name)
    return traces


def machine(torch: Any) -> dict[str, Any]:
    import triton

    props = torch.cuda.get_device_properties(0)
    try:
        import flashinfer

        flashinfer_version = getattr(flashinfer, "__version__", "installed")
    except ImportError:
        flashinfer_version = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / (1 << 30), 1),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flashinfer": flashinfer_version,
        "python": platform.python_version(),
        "commit": commit,
    }


def gemm_sanity(torch: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """bf16 n³ torch.mm by replay's timing routine and by triton's do_bench, against the bar."""
    import triton.testing

    from kernel_atlas.core.devices import match_device
    from kernel_atlas.replay.timing import measure

    n = int(settings["gemm_size"])
    props = torch.cuda.get_device_properties(0)
    device = match_device(props.name, props.multi_processor_count)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    timing = measure(lambda: torch.mm(a, b, out=out), "cuda")
    reference_ms = triton.testing.do_bench(lambda: torch.mm(a, b, out=out), warmup=25, rep=100, return_mode="median")
    flops = 2.0 * n**3
    tflops = flops / (timing.median_us * 1e6)
    reference_tflops = flops / (reference_ms * 1e9)
    peak = device.tensor.get("bf16") if device else None
    bar = settings["gemm_min_fraction_of_dense_peak"] * peak if peak else None
    agrees = abs(timing.median_us / (reference_ms * 1e3) - 1) <= settings["do_bench_tolerance"]
    return {
        "shape": [n, n, n],
        "median_us": timing.median_us,
        "p10_us": timing.p10_us,
        "p90_us": timing.p90_us,
        "method": timing.method,
        "tflops": tflops,
        "do_bench_us": reference_ms * 1e3,
        "do_bench_tflops": reference_tflops,
        "agrees_with_do_bench": agrees,
        "device_key": device.key if device else None,
        "dense_bf16_peak_tflops": peak,
        "bar_tflops": bar,
        "fraction_of_peak": tflops / peak if peak else None,
        "passes": bool(agrees and bar is not None and tflops >= bar),
        "why_no_bar": None if device else f"{props.name} is not in catalogs/devices.toml",
    }


def replay_targets(
    log: Log, source: str, targets: list, deadline: float, max_gib: float, device: str = "cuda"
) -> tuple[list, int]:
    """Replay each target, logging each result as it comes; returns the rows and how many were left."""
    from dataclasses import asdict

    from kernel_atlas.replay.runner import replay_one

    rows = []
    for index, target in enumerate(targets):
        if time.monotonic() > deadline:
            return rows, len(targets) - index
        started = time.monotonic()
        try:
            row = asdict(replay_one(target, device, max_gib=max_gib))
        except Exception as exc:  # keep going: one broken replay must not end an unattended run
            row = {"kernel": target.kernel, "launcher": target.launcher, "check": "error", "reason": repr(exc)[:300]}
        row.update(source=source, category=target.category, seconds=round(time.monotonic() - started, 2))
        log.write("replay", **row)
        rows.append(row)
        median = f"{row['median_us']:.2f} µs" if row.get("median_us") else "-"
        print(f"{row['check']:8} {median:>14} {source}: {target.kernel[:80]}", flush=True)
    return rows, 0


def traced_gemm_accuracy(rows: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """Median |replay/traced − 1| over big GEMMs replayed as the traced kernel itself."""
    gemms = [
        r
        for r in rows
        if r.get("category") == "gemm"
        and r.get("timed") == "kernel"
        and r.get("check") == "pass"
        and r.get("ratio") is not None
        and (r.get("flops") or 0) >= settings["traced_gemm_min_flops"]
    ]
    deviations = [abs(r["ratio"] - 1) for r in gemms]
    median = statistics.median(deviations) if deviations else None
    return {
        "gemms": len(gemms),
        "median_abs_deviation": median,
        "tolerance": settings["traced_tolerance"],
        "passes": median is not None and median <= settings["traced_tolerance"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="append", type=Path, help="trace(s) to replay (default: see above)")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/<gpu>-replay.jsonl")
    parser.add_argument("--max-gib", type=float, default=60.0, help="refuse replays whose inputs exceed this")
    parser.add_argument("--budget-s", type=float, default=600.0, help="stop starting replays after this long")
    parser.add_argument("--no-catalog", action="store_true", help="skip the catalog entries")
    parser.add_argument("--cpu-dry-run", action="store_true", help="the same steps on the CPU, into benchmarks/work/")
    args = parser.parse_args()

    import os

    if args.cpu_dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if not args.cpu_dry_run and not torch.cuda.is_available():
        print("no CUDA/HIP GPU visible to PyTorch here: nothing measured, nothing written", file=sys.stderr)
        return 2
    device = "cpu" if args.cpu_dry_run else "cuda"

    from kernel_atlas.core.paths import catalogs_dir, read_toml
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths
    from kernel_atlas.replay.runner import targets_from_catalog, targets_from_output

    started = time.monotonic()
    deadline = started + args.budget_s
    settings = read_toml("replay.toml")["gpu_check"]
    info = machine(torch) if device == "cuda" else {"gpu": "none (CPU dry run: no GPU numbers)"}
    slug = re.sub(r"[^a-z0-9]+", "-", info["gpu"].lower()).strip("-")
    default_out = HERE / "work" / "cpu-dry-run.jsonl" if args.cpu_dry_run else HERE / "results" / f"{slug}-replay.jsonl"
    log = Log(args.out or default_out)
    log.write("machine", command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), device=device, **info)
    print(f"{info['gpu']}: writing {log.path}", flush=True)

    if device == "cuda":
        sanity = gemm_sanity(torch, settings)
        log.write("gemm_sanity", **sanity)
        verdict = "pass" if sanity["passes"] else "FAIL"
        print(
            f"bf16 {settings['gemm_size']}³ GEMM: {sanity['tflops']:.0f} TFLOP/s "
            f"(do_bench {sanity['do_bench_tflops']:.0f}; bar {sanity['bar_tflops'] or '-'}) → {verdict}",
            flush=True,
        )
    else:
        sanity = {"passes": None}
        log.write("gemm_sanity", skipped="CPU dry run")

    rows, left = [], 0  # the traces first: their GEMMs carry the verdict against traced times
    work = HERE / "work"
    for trace in args.trace or default_traces():
        out_dir = work / f"{trace.name.split('.')[0]}.atlas"
        write_outputs(ingest_paths([trace]), out_dir)
        targets = targets_from_output(out_dir)
        traced, skipped = replay_targets(log, trace.name, targets, deadline, args.max_gib, device)
        rows += traced
        left += skipped
    if not args.no_catalog:
        catalog = targets_from_catalog(catalogs_dir() / "kernels.json")
        replayed, skipped = replay_targets(log, "catalog", catalog, deadline, args.max_gib, device)
        rows += replayed
        left += skipped

    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        key = "catalog" if row["source"] == "catalog" else "traces"
        bucket = counts.setdefault(key, {})
        bucket[row["check"]] = bucket.get(row["check"], 0) + 1
        timed = f"timed:{row.get('timed') or 'none'}"
        bucket[timed] = bucket.get(timed, 0) + 1
    accuracy = traced_gemm_accuracy([r for r in rows if r["source"] != "catalog"], settings)
    log.write(
        "summary",
        seconds=round(time.monotonic() - started, 1),
        counts=counts,
        not_started_budget=left,
        gemm_sanity_passes=sanity["passes"],
        traced_gemms=accuracy,
    )
    print(f"done in {time.monotonic() - started:.0f} s: {counts}; traced GEMMs {accuracy} → {log.path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
