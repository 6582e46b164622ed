"""Nsight Systems SQLite ingest: fidelity on real exports and speed per kernel against the JSON ingest.

    python benchmarks/nsys_bench.py /tmp/nsys/*.sqlite --part fidelity --out benchmarks/results/nsys-fidelity-2core.json
    python benchmarks/nsys_bench.py /tmp/nsys/*.sqlite --part speed --out benchmarks/results/nsys-speed-2core.json

For each export, checked against the export itself with plain SQL (not through `ingest/nsys.py`):
1. rows: every CUPTI kernel / memcpy / memset row is one row of the kernels table, with the same
   device and the same duration to the nanosecond (multisets of (kind, device, start ns, dur ns));
2. launcher: of the kernels whose runtime launch (same correlation id, same process) lies inside a
   PyTorch `emit_nvtx` range on its thread (`NAME, seq = N, op_id = M`, …), the share whose launcher
   is NAME of the innermost such range;
3. unknown: the share of kernel time whose `op_mapping` is `unknown`;
4. `atlas report` and `atlas diff` (against the next export given) run and exit 0.
Speed: ingest seconds per GPU-activity row (one process, `workers=1`: this process alone) of each
export, of each export repeated `--scale` times end to end (times shifted by the export's span,
correlation ids by their largest), and of the shared JSON traces given with `--json` (default:
a100_diff_control and v100_diff_test of ../shared/traces) and of the first of them repeated to
`--json-mb` MB (`ingest_bench.build_large_trace`), best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.ingest_bench import build_large_trace  # noqa: E402
from kernel_atlas.ingest.pipeline import ingest_trace  # noqa: E402

SHARED = HERE.parent.parent / "shared" / "traces"
DEFAULT_JSON = ("a100_diff_control.json.gz", "v100_diff_test.json.gz")
_SCALED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
)
_TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
}


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def export_rows(db: sqlite3.Connection) -> pd.DataFrame:
    parts = []
    for kind, table in _TABLES.items():
        if table in _tables(db):
            rows = db.execute(f'SELECT deviceId, start, "end" - start FROM {table}').fetchall()
            parts.append(pd.DataFrame(rows, columns=["device", "start", "dur"]).assign(kind=kind))
    return pd.concat(parts, ignore_index=True)


def nvtx_launchers(db: sqlite3.Connection) -> pd.DataFrame:
    """Per kernel launched inside an emit_nvtx range: its device, start (ns) and the innermost range's op name."""
    tables = _tables(db)
    if "NVTX_EVENTS" not in tables or "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return pd.DataFrame(columns=["device", "start", "op"])
    text = "COALESCE(n.text, (SELECT value FROM StringIds WHERE id = n.textId))"
    sql = f"""
        WITH ops AS (
            SELECT n.start, n."end", n.globalTid, {text} AS text FROM NVTX_EVENTS n
            WHERE n.eventType = 59 AND n."end" IS NOT NULL
        ), tagged AS (SELECT * FROM ops WHERE text LIKE '%, op_id = %' OR text LIKE '%, seq = %')
        SELECT k.deviceId, k.start, (
            SELECT t.text FROM tagged t
            WHERE t.globalTid = r.globalTid AND t.start <= r.start AND t."end" >= r."end"
            ORDER BY t.start DESC, t."end" ASC LIMIT 1
        ) AS op
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
        ON r.correlationId = k.correlationId AND r.globalTid / 16777216 = k.globalPid / 16777216
    """
    frame = pd.DataFrame(db.execute(sql).fetchall(), columns=["device", "start", "op"]).dropna()
    frame["op"] = frame["op"].str.split(", ").str[0]
    return frame


def measure(path: Path, other: Path, out: Path) -> dict:
    from kernel_atlas.store.outputs import load_kernels

    folder = out / path.stem
    start = time.perf_counter()
    done = subprocess.run(["atlas", "ingest", str(path), "-o", str(folder)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    frame = load_kernels(folder)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        want = export_rows(db)
        launched = nvtx_launchers(db)
    got = pd.DataFrame(
        {
            "device": frame["device"].astype("Int64").to_numpy(),
            "start": np.rint(frame["ts_us"].to_numpy() * 1000).astype(np.int64),
            "dur": np.rint(frame["dur_us"].to_numpy() * 1000).astype(np.int64),
            "kind": frame["kind"].astype(str).to_numpy(),
        }
    )
    key = ["kind", "device", "start", "dur"]
    same = (
        want.sort_values(key)
        .reset_index(drop=True)
        .astype(str)
        .equals(got.sort_values(key).reset_index(drop=True).astype(str))
    )
    kernels = frame[frame["kind"] == "kernel"]
    kernels = kernels.assign(start=np.rint(kernels["ts_us"].to_numpy() * 1000).astype(np.int64))
    joined = launched.merge(kernels[["device", "start", "launcher"]], on=["device", "start"], how="left")
    matched = int((joined["launcher"].astype(object) == joined["op"]).sum())
    kernel_time = float(kernels["dur_us"].sum())
    unknown = float(kernels.loc[kernels["op_mapping"] == "unknown", "dur_us"].sum())
    report = subprocess.run(["atlas", "report", str(folder)], capture_output=True, text=True)
    diff_csv = str(out / f"{path.stem}.diff.csv")
    if not other.name.endswith(".sqlite"):  # a JSON trace: diff ingests it next to itself
        other = Path(shutil.copy(other, out / other.name))
    diff = subprocess.run(["atlas", "diff", str(folder), str(other), "-o", diff_csv], capture_output=True, text=True)
    return {
        "export": path.name,
        "ingest_exit": done.returncode,
        "ingest_s": round(seconds, 3),
        "rows_in": len(want),
        "rows_out": len(frame),
        "rows_identical": bool(same),
        "kernels": len(kernels),
        "in_nvtx_op": len(joined),
        "launcher_is_that_op": matched,
        "launcher_share": round(matched / len(joined), 4) if len(joined) else None,
        "unknown_share_of_kernel_time": round(unknown / kernel_time, 4) if kernel_time else None,
        "report_exit": report.returncode,
        "diff_against": other.name,
        "diff_exit": diff.returncode,
        "ranks": sorted(int(r) for r in frame["rank"].unique()),
    }


def scaled(path: Path, copies: int, folder: Path) -> Path:
    """`path` with its timed tables repeated `copies` times, one after the other."""
    out = folder / f"{path.stem}_x{copies}.sqlite"
    shutil.copyfile(path, out)
    db = sqlite3.connect(out)
    tables = [t for t in _SCALED if t in _tables(db)]
    span = max(db.execute(f'SELECT max("end") - min(start) FROM {t}').fetchone()[0] or 0 for t in tables) + 1
    corr = max(
        db.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0 for t in tables if t != "NVTX_EVENTS"
    )
    for table in tables:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        rows = db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0  # the export's own rows
        for k in range(1, copies):
            shifted = {"start": f"start + {k * span}", "end": f'"end" + {k * span}'}
            if "correlationId" in cols:
                shifted["correlationId"] = f"correlationId + {k * (corr + 1)}"
            select = ", ".join(shifted.get(c, f'"{c}"') for c in cols)
            db.execute(f"INSERT INTO {table} SELECT {select} FROM {table} WHERE rowid <= {rows}")
    db.commit()
    db.close()
    return out


def per_kernel_speed(path: Path, repeat: int) -> dict:
    best = float("inf")
    rows = 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = ingest_trace(path, workers=1)
        best = min(best, time.perf_counter() - start)
        rows = len(result.frame)
    return {
        "file": path.name,
        "rows": rows,
        "best_s": round(best, 3),
        "us_per_row": round(best / max(rows, 1) * 1e6, 2),
    }


def speed(args: argparse.Namespace, tmp: Path) -> dict:
    runs = {"nsys": [per_kernel_speed(p, args.repeat) for p in args.exports]}
    big = [scaled(p, args.scale, tmp) for p in args.exports if p.stat().st_size > 1 << 20]
    runs["nsys_scaled"] = [per_kernel_speed(p, args.repeat) for p in big]
    runs["json"] = [per_kernel_speed(p, args.repeat) for p in args.json if p.is_file()]
    if args.json and args.json[0].is_file() and args.json_mb:
        large = tmp / "large.json"
        build_large_trace(args.json[0], large, args.json_mb)
        runs["json_scaled"] = [per_kernel_speed(large, args.repeat)]
    for kind, kind_runs in runs.items():
        for run in kind_runs:
            print(kind, json.dumps(run), flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--json", nargs="*", type=Path, default=[SHARED / n for n in DEFAULT_JSON])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--json-mb", type=float, default=70.0)
    parser.add_argument("--part", choices=("fidelity", "speed", "all"), default="all")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result: dict = {"machine": platform.platform(), "load_average_before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("fidelity", "all"):
            result["fidelity"] = []
            for i, path in enumerate(args.exports):
                other = args.exports[(i + 1) % len(args.exports)] if len(args.exports) > 1 else args.json[0]
                result["fidelity"].append(measure(path, other, Path(tmp)))
                print(json.dumps(result["fidelity"][-1]), flush=True)
        if args.part in ("speed", "all"):
            result["speed_single_process"] = speed(args, Path(tmp))
    result["load_average_after"] = list(os.getloadavg())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
