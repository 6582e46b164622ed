"""Ingest speed and memory: `atlas ingest` against the JSON decoder's limit and Holistic Trace
Analysis on one large trace, plain and gzipped, all in one run; then `atlas report` on the output.

    python benchmarks/ingest_bench.py --size-mb 500                 # the recorded benchmark
    python benchmarks/ingest_bench.py --size-mb 100 --skip-hta      # a quick look

1. builds a large valid trace by repeating a real one from ../shared/traces with every
   timestamp shifted by the source span and every id (correlation, External id, Python id,
   flow id) shifted past the source's largest, and a gzipped copy (both kept in --work and
   reused by later runs with the same source and size);
2. runs, each in a fresh process, one after the other:
   - the decode limit: read the file and decode it single-threaded with msgspec into typed
     events keeping `ph, cat, name, pid, tid, ts, dur` and `args` undecoded (msgspec.Raw);
   - `atlas ingest` (parse, link, classify, write Parquet/JSON) on the plain and the gzipped
     trace, with its default decode workers;
   - HTA (`TraceAnalysis` load + `get_gpu_kernel_breakdown`) on both (unless --skip-hta);
   - `atlas report` on the ingest output;
3. measures wall time (process start to exit, imports included) and memory of the whole
   process tree (the tool and any worker processes it starts), sampled every 20 ms from
   /proc/PID/statm: the peak of the summed RSS (counts shared library pages once per process,
   so an upper bound). With --pss, each command runs once more, untimed, for the peak of the
   summed PSS (shared pages split between the processes) from /proc/PID/smaps_rollup: reading
   that file walks the process's page tables under its memory-map lock, which stalls a process
   that is growing its heap — sampled every 20 ms during a timed run it took the single-
   threaded decode limit from 2.45 s to 4.84 s (stop 46; the runs recorded before stop 46
   were timed that way, their decode limit inflated), while statm reads counters and costs
   the measured process nothing (2.44 s);
4. prints every tool's time as a ratio to the decode limit of the same run and its memory as
   a ratio to the uncompressed trace, and writes it all as JSON (--out).

On a loaded machine wall times move a lot from run to run: `--repeat N` runs the whole sequence
N times, interleaved, and reports each tool's median run (by wall time; every run's wall and CPU
time are kept in the JSON).

Speed and memory depend on the trace's mix of events (issue 27): `--mix NAME` repeats a shared
trace of that mix instead of --source (`--mix all`: each in turn, one JSON with a section per
mix) — see MIXES. Besides the sampled tree sums, every run records the exact peak RSS of its
largest single process (`peak_rss_exact_mb`, from the `os.wait4` rusage: the child and every
descendant it waited for), and `report_read_floor` is a fresh Python importing pandas and
pyarrow and reading kernels.parquet — what `atlas report` cannot go below.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from kernel_atlas.core.beside import resident_bytes

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
# Event mixes (share of the trace's events): shared traces repeated to the size asked.
MIXES = {
    "default": "a100_diff_control",  # the recorded benchmark: CPU ops with shapes 0.33, kernels 0.08
    "kernel-dense": "mi210_gpu_only",  # kernels 0.23, no CPU ops
    "cpu-shapes": "cpu_ops_no_distributed_info",  # CPU ops with shapes 0.98
    "python-heavy": "mi300x_sglang_qwen3_8b_decode_capture_bs32",  # python_function 0.88, 1,014 [memory]
    "graph-replay": "a100_cudagraph_rank0",  # 70 cudaGraphLaunch, CPU ops with shapes 0.22
    "memory": "v100_resnet50_train_pt19",  # 12,838 [memory] events of 75,718 (PyTorch 1.9)
}
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


def prepare_traces(source: Path, size_mb: float, work: Path) -> dict[str, Any]:
    """The plain and gzipped traces in their own directories (HTA reads a directory),
    rebuilt only when the source or size changed."""
    plain_dir, gz_dir = work / "trace", work / "trace_gz"
    plain, gz = plain_dir / "rank-0.json", gz_dir / "rank-0.json.gz"
    stamp = work / "trace.json"
    wanted = {"source": str(source), "size_mb": size_mb}
    if stamp.exists() and plain.exists() and gz.exists():
        made = json.loads(stamp.read_text())
        if made.get("wanted") == wanted:
            return made
    for folder in (plain_dir, gz_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    start = time.perf_counter()
    made = build_large_trace(source, plain, size_mb)
    with plain.open("rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    made.update(wanted=wanted, gz_bytes=gz.stat().st_size, build_s=round(time.perf_counter() - start, 1))
    made.update(plain=str(plain), gz=str(gz))
    stamp.write_text(json.dumps(made, indent=1) + "\n")
    return made


def _tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    todo.extend(int(c) for c in handle.read().split())
        except OSError:
            pass
    return found


def _rss_kib(pids: list[int]) -> int:
    """Summed RSS in KiB of these processes, from the kernel's counters (`resident_bytes` reads
    /proc/PID/statm: no page table walk, nothing the measured processes wait for)."""
    return sum(resident_bytes(p) for p in pids) // 1024


def _pss_kib(pids: list[int]) -> int:
    """Summed PSS in KiB of these processes (/proc/PID/smaps_rollup: walks their page tables, so
    it slows them — only in the untimed --pss runs)."""
    pss = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return pss


def run_child(args: list[str], refusable: bool = False, pss: bool = False) -> dict[str, Any]:
    """Run a command; its wall time, the CPU time of its process tree (user + system, the
    figure that other load on the machine disturbs least) and the tree's peak memory. With
    `refusable`, exit code 2 (refused in one line: a trace without GPU activities has nothing to
    report on) is recorded as `refused`, not raised. With `pss`, the tree's PSS is sampled
    instead of its RSS (that sampling slows the command: its times are not to be used)."""
    sample = _pss_kib if pss else _rss_kib
    with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
        start = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out_file, stderr=err_file, text=True)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, sample(_tree(proc.pid)))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    if proc.returncode == 2 and refusable:
        return {"refused": err.strip()[-300:]}
    if proc.returncode != 0:
        raise RuntimeError(f"{args[:3]} failed:\n{out[-2000:]}\n{err[-2000:]}")
    if pss:
        return {"peak_pss_mb": peak / 1024}
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,  # the child and the processes it waited for
        "peak_rss_exact_mb": usage.ru_maxrss / 1024,  # the largest single process (Linux: KiB), exact
        "peak_rss_mb": peak / 1024,
        "stdout": out[-1500:],
    }


def _has_hta(interpreter: str) -> bool:
    if interpreter == sys.executable:
        return importlib.util.find_spec("hta") is not None
    found = subprocess.run([interpreter, "-c", "import hta"], capture_output=True, check=False)
    return found.returncode == 0


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *args]


def atlas(*args: str) -> list[str]:
    return python("import sys\nfrom kernel_atlas.cli import app\nsys.argv[0] = 'atlas'\napp()\n", *args)


DECODE_LIMIT = """
    import sys, time
    import msgspec
    class Event(msgspec.Struct, gc=False):
        ph: str = ""
        cat: str = ""
        name: str = ""
        pid: int | str = 0
        tid: int | str = 0
        ts: float = 0.0
        dur: float = 0.0
        args: msgspec.Raw = msgspec.Raw(b"")
    class Trace(msgspec.Struct, gc=False):
        traceEvents: list[Event] = []
    start = time.perf_counter()
    with open(sys.argv[1], "rb") as handle:
        data = handle.read()
    read = time.perf_counter()
    trace = msgspec.json.decode(data, type=Trace)
    done = time.perf_counter()
    print(f"read {read - start:.3f} s, decode {done - read:.3f} s, {len(trace.traceEvents)} events")
"""

HTA = """
    import sys
    from hta.trace_analysis import TraceAnalysis
    analyzer = TraceAnalysis(trace_dir=sys.argv[1])
    kernel_type_df, kernel_df = analyzer.get_gpu_kernel_breakdown(visualize=False)
    print(len(kernel_df), "kernel rows")
"""

READ_FLOOR = """
    import sys, time
    start = time.perf_counter()
    import pandas, pyarrow.parquet
    imported = time.perf_counter()
    frame = pyarrow.parquet.read_table(sys.argv[1]).to_pandas()
    print(f"imports {imported - start:.3f} s, read {time.perf_counter() - imported:.3f} s, {len(frame)} rows")
"""

REPORT_IN_PROCESS = """
    import sys, time
    start = time.perf_counter()
    from kernel_atlas.report.build import build_report
    imported = time.perf_counter()
    build_report(sys.argv[1])
    print(f"imports {imported - start:.3f} s, build_report {time.perf_counter() - imported:.3f} s")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=str(SHARED / "a100_diff_control.json.gz"))
    parser.add_argument("--size-mb", type=float, default=500.0)
    parser.add_argument("--work", default=str(HERE / "work"))
    parser.add_argument("--skip-hta", action="store_true", help="do not run Holistic Trace Analysis")
    parser.add_argument(
        "--hta-python",
        default=None,
        help="the Python that has HTA installed (its own environment: HTA pins its own dependencies); "
        "default: this one",
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--repeat", type=int, default=1, help="run the sequence N times; report each tool's median")
    parser.add_argument(
        "--pss", action="store_true", help="run each command once more, untimed, sampling its PSS (smaps_rollup)"
    )
    parser.add_argument(
        "--mix", choices=[*MIXES, "all"], default=None, nargs="+", help="repeat shared traces of these mixes"
    )
    args = parser.parse_args()
    compile_package()
    if args.mix is None:
        results = run_mix(args, Path(args.source))
    else:
        mixes = list(MIXES) if "all" in args.mix else args.mix
        results = {}
        for mix in mixes:
            print(f"--- mix {mix}: {MIXES[mix]}")
            results[mix] = run_mix(args, SHARED / f"{MIXES[mix]}.json.gz")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


def compile_package() -> None:
    """Bytecode for kernel_atlas, as an installed package has it: where PYTHONDONTWRITEBYTECODE is
    set (this environment sets it) an editable install would otherwise compile every module from
    source in every run, the decode workers too (~0.5 s a process)."""
    import compileall

    import kernel_atlas

    compileall.compile_dir(str(Path(kernel_atlas.__file__).parent), quiet=1)


def run_mix(args: argparse.Namespace, source: Path) -> dict[str, Any]:
    """The whole sequence on `source` repeated to --size-mb; the results document."""
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    made = prepare_traces(source, args.size_mb, work)
    plain, gz = Path(made["plain"]), Path(made["gz"])
    size_mb = made["bytes"] / 1e6
    print(
        f"trace: {size_mb:.0f} MB of JSON ({made['gz_bytes'] / 1e6:.0f} MB gzipped), {made['events']:,} events "
        f"({made['copies']}× {made['source']})"
    )
    results: dict[str, Any] = {
        "trace": {k: v for k, v in made.items() if k not in ("plain", "gz", "wanted")},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_before": os.getloadavg(),
            "bytecode": "compiled before the runs (compile_package)",
        },
        "runs": {},
    }
    runs = results["runs"]
    out_dir = work / f"atlas-out-{source.name.split('.')[0]}"
    sequence = {
        "decode_limit": python(DECODE_LIMIT, str(plain)),
        "atlas_ingest": atlas("ingest", str(plain), "-o", str(out_dir), "-q"),
        "atlas_ingest_gz": atlas("ingest", str(gz), "-o", str(work / f"{out_dir.name}-gz"), "-q"),
    }
    hta_python = args.hta_python or sys.executable
    if not args.skip_hta and not _has_hta(hta_python):
        print(f"HTA is not installed for {hta_python} (pip install holistictraceanalysis): skipping it")
        args.skip_hta = True
    if not args.skip_hta:
        sequence["hta"] = [hta_python, *python(HTA, str(plain.parent))[1:]]
        sequence["hta_gz"] = [hta_python, *python(HTA, str(gz.parent))[1:]]
        results["machine"]["hta_python"] = hta_python
    sequence["atlas_report"] = atlas("report", str(out_dir))
    sequence["report_read_floor"] = python(READ_FLOOR, str(out_dir / "kernels.parquet"))
    sequence["atlas_report_in_process"] = python(REPORT_IN_PROCESS, str(out_dir))
    every: dict[str, list[dict[str, Any]]] = {key: [] for key in sequence}
    for _ in range(max(args.repeat, 1)):
        for key, command in sequence.items():
            refused = key.startswith("atlas_report") and any("refused" in r for r in every["atlas_report"])
            if refused or (key == "report_read_floor" and not (out_dir / "kernels.parquet").exists()):
                continue  # nothing to report on (a trace without GPU activities)
            every[key].append(run_child(command, refusable=key.startswith("atlas_report")))
    for key in [key for key, done in every.items() if not done or any("refused" in run for run in done)]:
        results.setdefault("not_run", {})[key] = (every.pop(key) or [{"refused": "skipped"}])[0].get("refused", "")
    for key, done in every.items():
        runs[key] = dict(sorted(done, key=lambda run: run["wall_s"])[len(done) // 2])  # the median run
        if len(done) > 1:
            runs[key]["every_wall_s"] = [run["wall_s"] for run in done]
            runs[key]["every_cpu_s"] = [run["cpu_s"] for run in done]
    if args.pss:  # one more, untimed run of each command, sampling its PSS
        for key, run in runs.items():
            run.update(run_child(sequence[key], refusable=key.startswith("atlas_report"), pss=True))
    results["repeat"] = max(args.repeat, 1)
    results["sampling"] = "RSS from /proc/PID/statm in the timed runs" + (
        "; PSS from smaps_rollup in one untimed run per command" if args.pss else ""
    )
    results["machine"]["load_average_after"] = os.getloadavg()

    limit = runs["decode_limit"]["wall_s"]
    labels = {
        "decode_limit": "decode limit (msgspec, 1 thread)",
        "atlas_ingest": "atlas ingest, .json",
        "atlas_ingest_gz": "atlas ingest, .json.gz",
        "hta": "HTA, .json",
        "hta_gz": "HTA, .json.gz",
        "atlas_report": "atlas report (CLI)",
        "atlas_report_in_process": "atlas report (build_report)",
        "report_read_floor": "report read floor (pandas+pyarrow)",
    }
    print(
        f"{'':34s} {'wall':>8s} {'× limit':>8s} {'MB/s':>7s} {'CPU':>7s} {'RSS peak':>9s} {'× trace':>8s} "
        f"{'PSS peak':>9s} {'1 process':>9s}"
    )
    pss_column = (lambda run: f"{run['peak_pss_mb']:7.0f}MB") if args.pss else (lambda run: f"{'-':>9s}")
    for key, run in runs.items():
        run["over_decode_limit"] = run["wall_s"] / limit
        run["mb_per_s"] = size_mb / run["wall_s"]
        run["rss_over_trace"] = run["peak_rss_mb"] / size_mb
        if args.pss:
            run["pss_over_trace"] = run["peak_pss_mb"] / size_mb
        print(
            f"{labels[key]:34s} {run['wall_s']:7.2f}s {run['over_decode_limit']:7.2f}× {run['mb_per_s']:7.0f} "
            f"{run['cpu_s']:6.2f}s "
            f"{run['peak_rss_mb']:7.0f}MB {run['rss_over_trace']:7.2f}× {pss_column(run)} "
            f"{run['peak_rss_exact_mb']:7.0f}MB"
        )
    ratios = {
        "ingest_over_decode_limit": runs["atlas_ingest"]["wall_s"] / limit,
        "gz_over_plain_ingest": runs["atlas_ingest_gz"]["wall_s"] / runs["atlas_ingest"]["wall_s"],
        "ingest_rss_over_trace": runs["atlas_ingest"]["rss_over_trace"],
        "ingest_exact_rss_over_trace": runs["atlas_ingest"]["peak_rss_exact_mb"] / size_mb,
    }
    if "atlas_report" in runs and "report_read_floor" in runs:
        ratios["report_over_read_floor"] = runs["atlas_report"]["wall_s"] / runs["report_read_floor"]["wall_s"]
        ratios["report_cpu_over_read_floor_cpu"] = runs["atlas_report"]["cpu_s"] / runs["report_read_floor"]["cpu_s"]
    ratios["ingest_cpu_over_decode_limit_cpu"] = runs["atlas_ingest"]["cpu_s"] / runs["decode_limit"]["cpu_s"]
    if "hta" in runs:
        ratios["hta_over_atlas"] = runs["hta"]["wall_s"] / runs["atlas_ingest"]["wall_s"]
        ratios["hta_gz_over_atlas_gz"] = runs["hta_gz"]["wall_s"] / runs["atlas_ingest_gz"]["wall_s"]
        ratios["hta_rss_over_atlas"] = runs["hta"]["peak_rss_mb"] / runs["atlas_ingest"]["peak_rss_mb"]
    results["ratios"] = ratios
    print("  ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    print("decode limit:", runs["decode_limit"]["stdout"].strip())
    for key, label in (("atlas_report_in_process", "report"), ("report_read_floor", "read floor")):
        print(f"{label}:", runs[key]["stdout"].strip() if key in runs else results["not_run"].get(key))
    return results


if __name__ == "__main__":
    main()
