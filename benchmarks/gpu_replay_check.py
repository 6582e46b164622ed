"""GPU replay check: run on a machine with a CUDA GPU, commit the JSON it writes.

    python benchmarks/gpu_replay_check.py [--trace ../shared/traces/h100_bert_small_infer.json.gz]

1. a sanity check of the timing routine: a bf16 8192×8192×8192 GEMM (torch.mm); on an H100/H200
   it should reach roughly 750–800 TFLOP/s — if it does not, the timing is wrong;
2. every replayable entry of catalogs/kernels.json at its catalog shapes;
3. the GEMM and attention calls of an H100 trace at their recorded shapes;

and writes benchmarks/results/<gpu>-replay.json with the GPU name, driver, torch/triton versions
and every result row (median/p10/p90, traced time, check). On a machine without a GPU it says so
and writes nothing: numbers in benchmarks/results/ are only ever measured ones.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"


def gemm_sanity(torch, measure) -> dict:
    """bf16 8192³ torch.mm timed by the replay timing routine."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    timing = measure(lambda: torch.mm(a, b), "cuda")
    tflops = 2 * 8192**3 / (timing.median_us * 1e6)
    print(f"bf16 8192^3 GEMM: {timing.median_us:.1f} µs = {tflops:.0f} TFLOP/s ({timing.method})")
    return {
        "shape": [8192, 8192, 8192],
        "median_us": timing.median_us,
        "p10_us": timing.p10_us,
        "p90_us": timing.p90_us,
        "tflops": tflops,
        "method": timing.method,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(SHARED / "h100_bert_small_infer.json.gz"))
    parser.add_argument("--out", default=None, help="default: benchmarks/results/<gpu>-replay.json")
    parser.add_argument("--max-gib", type=float, default=60.0)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no CUDA/HIP GPU here: nothing measured, nothing written", file=sys.stderr)
        return 2
    import triton

    from kernel_atlas.ingest.pipeline import ingest_paths, write_outputs
    from kernel_atlas.paths import catalogs_dir
    from kernel_atlas.replay.runner import replay_all, select, targets_from_catalog, targets_from_output
    from kernel_atlas.replay.timing import measure

    props = torch.cuda.get_device_properties(0)
    started = time.time()
    sanity = gemm_sanity(torch, measure)

    catalog = replay_all(targets_from_catalog(catalogs_dir() / "kernels.json"), "cuda", max_gib=args.max_gib)
    out_dir = HERE / "work" / "gpu-check.atlas"
    write_outputs(ingest_paths([args.trace]), out_dir)
    trace_targets = select(targets_from_output(out_dir), None, None, None)
    trace_targets = [t for t in trace_targets if t.category in ("gemm", "attention")]
    traced = replay_all(trace_targets, "cuda", max_gib=args.max_gib)

    result = {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "driver": torch.version.cuda or getattr(torch.version, "hip", None),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "seconds": round(time.time() - started, 1),
        "gemm_sanity": sanity,
        "catalog": json.loads(catalog.to_json(orient="records")),
        "trace": {"file": Path(args.trace).name, "rows": json.loads(traced.to_json(orient="records"))},
    }
    name = re.sub(r"[^a-z0-9]+", "-", props.name.lower()).strip("-")
    path = Path(args.out) if args.out else HERE / "results" / f"{name}-replay.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    done = int((catalog["check"] != "skipped").sum())
    print(f"catalog: {done}/{len(catalog)} replayed; trace GEMM/attention: {len(traced)} shapes → {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
