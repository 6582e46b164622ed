"""A fleet of tiny ranks: N one-rank traces of a few eagerly launched GEMMs each, for the fixed
cost of a rank in `atlas report` (issue 27: hundreds of tiny ranks).

    python benchmarks/make_tiny_fleet.py /tmp/f1000/traces --ranks 1000 [--kernels 2]
    atlas ingest /tmp/f1000/traces -o /tmp/f1000/out -q
    python benchmarks/report_ab.py /tmp/f1000/out --base /tmp/base --runs 1

Each rank's trace: `distributedInfo` (rank, world size), then per kernel an `aten::mm` with its
shapes, its `cudaLaunchKernel` and the kernel (its duration varies by rank, its start by a seeded
jitter). Deterministic for a given --seed.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def rank_trace(rank: int, ranks: int, kernels: int, jitter: random.Random) -> dict:
    events = []
    t = 1000.0
    for i in range(kernels):
        call = rank * 1000 + i + 1
        shapes = {"Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 20,
             "args": {"External id": call, **shapes}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 5,
             "dur": 5, "args": {"correlation": call, "External id": call}},
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 7,
             "ts": t + 12 + jitter.random(), "dur": 30 + rank % 7,
             "args": {"correlation": call, "External id": call, "device": 0, "stream": 7, "grid": [4, 4, 1],
                      "block": [128, 1, 1]}},
        ]  # fmt: skip
        t += 50
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rank, "world_size": ranks, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
        "traceEvents": events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for rank0.json, rank1.json, …")
    parser.add_argument("--ranks", type=int, default=200)
    parser.add_argument("--kernels", type=int, default=2, help="GEMMs per rank")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jitter = random.Random(args.seed)
    for rank in range(args.ranks):
        (args.out / f"rank{rank}.json").write_text(json.dumps(rank_trace(rank, args.ranks, args.kernels, jitter)))


if __name__ == "__main__":
    main()
