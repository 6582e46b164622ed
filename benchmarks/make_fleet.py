"""A fleet of rank traces with known stragglers, made from one real rank trace.

    python benchmarks/make_fleet.py OUT --ranks 8 --steps 1 --repeat 5 --straggler 5:1000:0.4
    python benchmarks/make_fleet.py OUT --ranks 64 --size-mb 30          # benchmark fleet

Only single-rank real traces are shared. This takes one (default: the A100 NCCL trace of
`../shared/traces`), optionally cuts it to its first `--steps` profiler steps and repeats it
(`--repeat`, or `--size-mb` per rank, timestamps and ids shifted), and writes one trace per
rank whose `distributedInfo` and process-group fields (`Process Group Name`/`Ranks`,
`Group size`, and a `Seq` number on `record_param_comms` and/or the kernels) say which rank
and group it is. Then it simulates when every rank reaches every collective:

* each collective *instance* (one NCCL kernel of the source, in one process group) starts on
  rank r at  s + C_r + late_r  with late_r = uniform jitter (`--jitter-us`) plus what is
  planted: a *straggler* `RANK:DELAY_US:FRACTION` arrives DELAY_US late at that fraction of
  the global collectives (stragglers never share one), a *delay* `RANK:K:US` once, at the
  K-th global collective that has no straggler;
* all ranks of the instance leave together: end = latest arrival + the source's kernel time
  (+ up to `--end-jitter-us`), so the early ranks' kernels last longer (they wait);
* every other event of the rank moves with the rank's cumulative delay C_r; ranks of
  `--ranks-per-host` share a host clock, and each host's clock is off by a random offset.

`--subgroup-size K` puts the broadcasts on groups of K ranks (process groups "1", "2", …) as a
tensor-parallel group would, the all-reduces stay on the global group "0".

The traces go to OUT/ranks/ (`atlas ingest OUT/ranks`). OUT/truth.json records the ground
truth: per instance the process group, sequence number, ranks, arrival times (on a common
clock), skew (latest − earliest arrival) and last rank; the planted stragglers and delays;
each rank's clock offset.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest_bench import repeat_events  # noqa: E402

SOURCE = HERE.parent.parent / "shared" / "traces" / "a100_nccl_8rank_rank0.json.gz"
SEQ_START = 17  # collectives each group ran before the profiling window (so Seq ≠ position)


@dataclass
class Straggler:
    rank: int
    delay_us: float
    fraction: float


@dataclass
class Delay:
    rank: int
    instance: int  # index among the global (all-rank) collectives that have no planted straggler
    delay_us: float


@dataclass
class FleetSpec:
    ranks: int = 8
    steps: int | None = None  # keep the first N profiler steps
    repeat: int = 1
    size_mb: float | None = None  # instead of repeat: about this many MB per rank
    stragglers: list[Straggler] = field(default_factory=list)
    delays: list[Delay] = field(default_factory=list)
    subgroup_size: int | None = None
    ranks_per_host: int = 8
    seq: str = "cpu"  # where `Seq` is written: cpu (record_param_comms), kernel, both, none
    jitter_us: float = 10.0
    end_jitter_us: float = 2.0
    lean: bool = False  # keep only what the cross-rank view needs (small traces for tests)
    seed: int = 0


def _load(source: Path, spec: FleetSpec) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with gzip.open(source) as handle:
        doc = json.load(handle)
    events = doc.pop("traceEvents")
    if spec.lean:
        events = [e for e in events if _kept_when_lean(e)]
    if spec.steps:
        steps = sorted(
            (e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")),
            key=lambda e: e["ts"],
        )[: spec.steps]
        lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
        events = [
            e for e in events if e.get("ph") == "M" or not isinstance(e.get("ts"), (int, float)) or lo <= e["ts"] < hi
        ]
    copies = spec.repeat
    if spec.size_mb:
        one_copy = sum(len(msgspec.json.encode(e)) + 1 for e in events)
        copies = max(1, round(spec.size_mb * 1e6 / one_copy))
    return doc, list(repeat_events(events, copies))


_LEAN_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_runtime", "cuda_driver"}


def _kept_when_lean(e: dict[str, Any]) -> bool:
    """GPU activities, their launches, the collectives' CPU ops and the profiler steps; not the
    other CPU ops, Python frames and flows (so compute kernels lose their launcher and shapes)."""
    name = e.get("name", "")
    return (
        e.get("ph") == "M"
        or e.get("cat") in _LEAN_CATEGORIES
        or name == "record_param_comms"
        or name.startswith("ProfilerStep#")
    )


def _is_collective_kernel(e: dict[str, Any]) -> bool:
    return e.get("cat") == "kernel" and "Collective name" in (e.get("args") or {})


def make_fleet(out_dir: Path, spec: FleetSpec, source: Path = SOURCE) -> dict[str, Any]:
    """Write ranks/rank-<r>.json.gz for every rank and truth.json into `out_dir`; returns the truth."""
    rng = np.random.default_rng(spec.seed)
    doc, events = _load(source, spec)
    n = spec.ranks
    (out_dir / "ranks").mkdir(parents=True, exist_ok=True)

    kernels = sorted((i for i, e in enumerate(events) if _is_collective_kernel(e)), key=lambda i: events[i]["ts"])
    by_external = {
        e["args"].get("External id"): i for i, e in enumerate(events) if e.get("name") == "record_param_comms"
    }
    sub = spec.subgroup_size
    on_subgroup = [bool(sub) and events[k]["args"]["Collective name"] == "broadcast" for k in kernels]
    global_instances = [j for j, s in enumerate(on_subgroup) if not s]

    # --- what is planted ------------------------------------------------------------------
    planted = np.zeros((n, len(kernels)))
    free = list(rng.permutation(global_instances))
    stragglers = []
    for s in spec.stragglers:
        count = round(s.fraction * len(global_instances))
        chosen, free = sorted(int(j) for j in free[:count]), free[count:]
        planted[s.rank, chosen] += s.delay_us
        stragglers.append({"rank": s.rank, "delay_us": s.delay_us, "instances": chosen})
    delays = []
    unplanted = sorted(int(j) for j in free)
    for d in spec.delays:
        j = unplanted[d.instance]
        planted[d.rank, j] += d.delay_us
        delays.append({"rank": d.rank, "instance": j, "delay_us": d.delay_us})

    # --- the simulation (true time) -------------------------------------------------------
    def group_of(rank: int, j: int) -> tuple[str, list[int]]:
        if on_subgroup[j]:
            g = rank // sub
            return str(1 + g), list(range(g * sub, min((g + 1) * sub, n)))
        return "0", list(range(n))

    starts = np.array([events[k]["ts"] for k in kernels])
    ends = starts + np.array([events[k].get("dur", 0.0) for k in kernels])
    shift_after = np.zeros((n, len(kernels) + 1))  # C_r after the first k instances
    k_start = np.zeros((n, len(kernels)))
    k_end = np.zeros((n, len(kernels)))
    seq_of = np.zeros(len(kernels), dtype=np.int64)
    counters: dict[str, int] = {}
    instances = []
    for j in range(len(kernels)):
        kind = "sub" if on_subgroup[j] else "global"
        seq_of[j] = counters.get(kind, SEQ_START)
        counters[kind] = seq_of[j] + 1
        groups = sorted({tuple(group_of(r, j)[1]) for r in range(n)})
        for members in groups:
            members = list(members)
            late = rng.uniform(0.0, spec.jitter_us, len(members)) + planted[members, j]
            arrive = starts[j] + shift_after[members, j] + late
            leave = arrive.max() + (ends[j] - starts[j])
            k_start[members, j] = arrive
            k_end[members, j] = leave + rng.uniform(0.0, spec.end_jitter_us, len(members))
            shift_after[members, j + 1] = leave - ends[j]
            pg = group_of(members[0], j)[0]
            instances.append(
                {
                    "instance": j,
                    "process_group": pg,
                    "seq": int(seq_of[j]),
                    "collective": events[kernels[j]]["args"]["Collective name"],
                    "ranks": members,
                    "arrival_us": [round(float(a), 3) for a in arrive],
                    "skew_us": round(float(arrive.max() - arrive.min()), 3),
                    "last_rank": members[int(np.argmax(arrive))],
                    "late_us": [round(float(a - np.median(arrive)), 3) for a in arrive],
                }
            )
    hosts = (n + spec.ranks_per_host - 1) // spec.ranks_per_host
    host_offset = np.concatenate([[0.0], rng.uniform(-5000.0, 5000.0, hosts - 1)])
    offsets = [float(host_offset[r // spec.ranks_per_host]) for r in range(n)]

    # --- one trace per rank ---------------------------------------------------------------
    ts = np.array([e["ts"] if isinstance(e.get("ts"), (int, float)) else np.nan for e in events])
    segment = np.searchsorted(ends, ts, side="right")  # instances finished before each event
    kernel_pos = {k: j for j, k in enumerate(kernels)}
    comms_pos = {by_external[events[k]["args"].get("External id")]: j for j, k in enumerate(kernels)}
    other_comms = set(by_external.values()) - set(comms_pos)  # `wait` and friends: no kernel, no Seq
    encoder = msgspec.json.Encoder()
    for r in range(n):
        shift = shift_after[r, segment] + offsets[r]
        rank_events = []
        for i, e in enumerate(events):
            e = dict(e)
            if not np.isnan(ts[i]):
                e["ts"] = round(float(ts[i] + shift[i]), 3)
            j = kernel_pos.get(i, comms_pos.get(i))
            if i in other_comms:
                e["args"] = {
                    **e["args"],
                    "Process Group Ranks": "[" + ", ".join(map(str, range(n))) + "]",
                    "Group size": n,
                }
            elif j is not None:
                pg, members = group_of(r, j)
                args = dict(e["args"])
                args["Process Group Name"] = pg
                args["Process Group Description"] = "default_pg" if pg == "0" else f"tp_group_{pg}"
                args["Process Group Ranks"] = "[" + ", ".join(map(str, members)) + "]"
                args["Group size"] = len(members)
                wants_seq = spec.seq == "both" or (spec.seq == "kernel") == (i in kernel_pos)
                if spec.seq != "none" and wants_seq:
                    args["Seq"] = int(seq_of[j])
                e["args"] = args
                if i in kernel_pos:
                    e["ts"] = round(float(k_start[r, j] + offsets[r]), 3)
                    e["dur"] = round(float(k_end[r, j] - k_start[r, j]), 3)
            rank_events.append(e)
        pgs = [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": n,
                "ranks": list(range(n)),
            }
        ]
        if sub:
            pg, members = group_of(r, next(j for j, s in enumerate(on_subgroup) if s))
            pgs.append(
                {
                    "pg_name": pg,
                    "pg_desc": f"tp_group_{pg}",
                    "backend_config": "cuda:nccl",
                    "pg_size": len(members),
                    "ranks": members,
                }
            )
        rank_doc = {
            **doc,
            "distributedInfo": {
                **doc.get("distributedInfo", {}),
                "rank": r,
                "world_size": n,
                "pg_count": len(pgs),
                "pg_config": pgs,
            },
        }
        rank_doc["traceEvents"] = rank_events
        with gzip.open(out_dir / "ranks" / f"rank-{r}.json.gz", "wb", compresslevel=1) as handle:
            handle.write(encoder.encode(rank_doc))
        del rank_events, rank_doc
    truth = {
        "ranks": n,
        "source": source.name,
        "events_per_rank": len(events),
        "instances": instances,
        "stragglers": stragglers,
        "delays": delays,
        "clock_offset_us": offsets,
        "spec": {k: v for k, v in spec.__dict__.items() if k not in ("stragglers", "delays")},
    }
    (out_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def _parse_straggler(text: str) -> Straggler:
    rank, delay, fraction = text.split(":")
    return Straggler(int(rank), float(delay), float(fraction))


def _parse_delay(text: str) -> Delay:
    rank, instance, delay = text.split(":")
    return Delay(int(rank), int(instance), float(delay))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=None, help="keep only the first N profiler steps")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--size-mb", type=float, default=None, help="about this many MB per rank (instead of --repeat)")
    parser.add_argument(
        "--straggler", type=_parse_straggler, action="append", default=[], help="RANK:DELAY_US:FRACTION"
    )
    parser.add_argument("--delay", type=_parse_delay, action="append", default=[], help="RANK:INSTANCE:DELAY_US")
    parser.add_argument("--subgroup-size", type=int, default=None)
    parser.add_argument("--ranks-per-host", type=int, default=8)
    parser.add_argument("--seq", choices=("cpu", "kernel", "both", "none"), default="cpu")
    parser.add_argument("--jitter-us", type=float, default=10.0)
    parser.add_argument("--lean", action="store_true", help="only GPU activities, launches and collective ops")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec = FleetSpec(
        ranks=args.ranks,
        steps=args.steps,
        repeat=args.repeat,
        size_mb=args.size_mb,
        stragglers=args.straggler,
        delays=args.delay,
        subgroup_size=args.subgroup_size,
        ranks_per_host=args.ranks_per_host,
        seq=args.seq,
        jitter_us=args.jitter_us,
        lean=args.lean,
        seed=args.seed,
    )
    truth = make_fleet(args.out, spec, args.source)
    print(
        f"{args.ranks} ranks × {truth['events_per_rank']:,} events, {len(truth['instances'])} collective instances "
        f"→ {args.out / 'ranks'}"
    )


if __name__ == "__main__":
    main()
