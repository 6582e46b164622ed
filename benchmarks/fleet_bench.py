"""Fleet ingest: the local process pool against Ray on one machine, from 8 to 64 ranks.

    python benchmarks/fleet_bench.py                                   # 8, 16, 32, 64 ranks of ~30 MB
    python benchmarks/fleet_bench.py --ranks 8 16 --size-mb 10 --out benchmarks/results/fleet-small.json
    python benchmarks/fleet_bench.py --ranks 8 16 --report             # also time `atlas report`

1. makes a fleet of the largest rank count with benchmarks/make_fleet.py (the A100 NCCL
   trace repeated to about `--size-mb` MB per rank, two planted stragglers), once;
2. for every rank count and engine runs `atlas ingest` on that many ranks in a fresh Python
   process with `-j` = the machine's CPUs — `local` (the process pool), `ray` (the embedded Ray
   that `--engine ray` starts and stops inside the timed run) and `ray-cluster` (a Ray head
   started before the timed run with `ray start --head`, joined with `--address auto`, as on a
   fleet where Ray is already up) — and measures the wall time, the driver's own peak
   RSS (`ru_maxrss` of the process that runs the command — Ray's workers and the local pool's
   workers are other processes) and, for the local pool, the largest worker's peak RSS;
3. with `--report`, runs `atlas report` on each ingested output (driver peak RSS, wall);
4. prints ranks per minute, RSS and how both change from the smallest to the largest count, and
   writes everything as JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_fleet import SOURCE, FleetSpec, Straggler, make_fleet  # noqa: E402


def run_driver(code: str) -> dict[str, Any]:
    """Run Python code in a fresh process: wall time, its own peak RSS, its children's."""
    code += textwrap.dedent("""
        import resource
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print("RSS_KIB", own, children)
    """)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"driver failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RSS_KIB"))
    own, children = (int(v) / 1024 for v in line.split()[1:])
    return {"wall_s": round(wall, 2), "driver_peak_rss_mb": round(own, 1), "children_peak_rss_mb": round(children, 1)}


def ingest_code(traces: list[Path], out: Path, engine: str, jobs: int) -> str:
    engine_args = ["--engine", "ray", "--address", "auto"] if engine == "ray-cluster" else ["--engine", engine]
    args = ["ingest", *map(str, traces), "-o", str(out), *engine_args, "-j", str(jobs), "-q"]
    return textwrap.dedent(f"""
        from typer.testing import CliRunner
        from kernel_atlas.cli import app
        result = CliRunner().invoke(app, {args!r})
        assert result.exit_code == 0, result.output
    """)


def report_code(out: Path, jobs: int) -> str:
    return textwrap.dedent(f"""
        from kernel_atlas.report.build import build_report
        report = build_report({str(out)!r}, jobs={jobs})
        print(len(report.analysis.facts.get("stragglers", [])), "stragglers")
    """)


def _ray_cli() -> list[str]:
    return [str(Path(sys.executable).with_name("ray"))]


def start_cluster(cpus: int) -> None:
    """A Ray head on this machine, as a fleet would already have one (not timed)."""
    command = [*_ray_cli(), "start", "--head", f"--num-cpus={cpus}", "--include-dashboard=false"]
    command.append("--disable-usage-stats")
    subprocess.run(command, check=True, capture_output=True)


def stop_cluster() -> None:
    subprocess.run([*_ray_cli(), "stop", "--force"], check=False, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--size-mb", type=float, default=30.0, help="uncompressed MB per rank trace")
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["local", "ray", "ray-cluster"],
        choices=["local", "ray", "ray-cluster"],
        help="ray: the embedded Ray `atlas ingest --engine ray` starts and stops (timed); ray-cluster: a "
        "Ray head started before the timed run (`ray start --head`), joined with --address auto",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--report", action="store_true", help="also time `atlas report` on every output")
    parser.add_argument("--work", type=Path, default=HERE / "work" / "fleet")
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the ingest outputs (the fleet is always kept)")
    args = parser.parse_args()

    largest = max(args.ranks)
    fleet = args.work / f"fleet-{largest}x{args.size_mb:g}mb"
    t0 = time.perf_counter()
    if not (fleet / "truth.json").exists():
        spec = FleetSpec(
            ranks=largest,
            size_mb=args.size_mb,
            stragglers=[Straggler(largest // 3, 800.0, 0.3), Straggler(largest - 2, 300.0, 0.3)],
            subgroup_size=8,
        )
        make_fleet(fleet, spec, args.source)
    traces = sorted((fleet / "ranks").glob("rank-*.json.gz"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    events_per_rank = json.loads((fleet / "truth.json").read_text())["events_per_rank"]
    made_s = time.perf_counter() - t0
    print(f"fleet: {len(traces)} ranks, {events_per_rank:,} events per rank ({made_s:.0f} s) in {fleet}")

    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "size_mb_per_rank": args.size_mb,
        "events_per_rank": events_per_rank,
        "trace_bytes_gz": sum(p.stat().st_size for p in traces),
        "jobs": args.jobs,
        "runs": [],
    }
    for n in args.ranks:
        for engine in args.engines:
            out = args.work / f"out-{n}-{engine}"
            shutil.rmtree(out, ignore_errors=True)
            if engine == "ray-cluster":
                start_cluster(args.jobs)
            try:
                run = {"ranks": n, "engine": engine, **run_driver(ingest_code(traces[:n], out, engine, args.jobs))}
            finally:
                if engine == "ray-cluster":
                    stop_cluster()
            run["ranks_per_min"] = round(60.0 * n / run["wall_s"], 1)
            if args.report:
                report = run_driver(report_code(out, args.jobs))
                run["report"] = {"wall_s": report["wall_s"], "driver_peak_rss_mb": report["driver_peak_rss_mb"]}
            results["runs"].append(run)
            print(
                f"{engine:>11} {n:>3} ranks: {run['wall_s']:7.1f} s  {run['ranks_per_min']:6.1f} ranks/min  "
                f"driver peak RSS {run['driver_peak_rss_mb']:6.0f} MB"
                + (f"  workers {run['children_peak_rss_mb']:.0f} MB" if engine == "local" else "")
                + (
                    f"  | report {run['report']['wall_s']:.1f} s, driver {run['report']['driver_peak_rss_mb']:.0f} MB"
                    if args.report
                    else ""
                ),
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    smallest = min(args.ranks)
    summary = {}
    for engine in args.engines:
        runs = {r["ranks"]: r for r in results["runs"] if r["engine"] == engine}
        summary[engine] = {
            "throughput_ratio_largest_over_smallest": round(
                runs[largest]["ranks_per_min"] / runs[smallest]["ranks_per_min"], 2
            ),
            "driver_rss_ratio_largest_over_smallest": round(
                runs[largest]["driver_peak_rss_mb"] / runs[smallest]["driver_peak_rss_mb"], 2
            ),
        }
    for ray_engine in ("ray", "ray-cluster"):
        if "local" not in args.engines or ray_engine not in args.engines:
            continue
        summary[f"{ray_engine}_over_local_throughput"] = {
            n: round(
                next(r for r in results["runs"] if r["ranks"] == n and r["engine"] == ray_engine)["ranks_per_min"]
                / next(r for r in results["runs"] if r["ranks"] == n and r["engine"] == "local")["ranks_per_min"],
                2,
            )
            for n in args.ranks
        }
    results["summary"] = summary
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
