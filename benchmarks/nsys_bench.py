"""Nsight Systems SQLite ingest: fidelity on real exports and speed per kernel against the JSON ingest.

    python benchmarks/nsys_bench.py /tmp/nsys/*.sqlite --out benchmarks/results/nsys-fixtures-2core.json

For each export, checked against the export itself with plain SQL (not through `ingest/nsys.py`):
1. rows: every CUPTI kernel / memcpy / memset row is one row of the kernels table, with the same
   device and the same duration to the nanosecond (multisets of (kind, device, start ns, dur ns));
2. launcher: of the kernels whose runtime launch (same correlation id, same process) lies inside a
   PyTorch `emit_nvtx` range on its thread (`NAME, seq = N, op_id = M`, …), the share whose launcher
   is NAME of the innermost such range;
3. unknown: the share of kernel time whose `op_mapping` is `unknown`;
4. `atlas report` and `atlas diff` (against the next export given) run and exit 0.
Speed: ingest seconds per kernel row for each export and for the shared JSON traces given with
`--json` (default: the A100 and H100 traces of ../shared/traces), best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import json
import platform
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

from kernel_atlas.ingest.pipeline import ingest_trace  # noqa: E402

SHARED = HERE.parent.parent / "shared" / "traces"
DEFAULT_JSON = ("a100_diff_control.json.gz", "h100_inference.json.gz")
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


def measure(path: Path, other: Path | None, out: Path) -> dict:
    from kernel_atlas.ingest.outputs import load_kernels

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
    diff = subprocess.run(["atlas", "diff", str(folder), str(other)], capture_output=True, text=True) if other else None
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
        "diff_against": other.name if other else None,
        "diff_exit": diff.returncode if diff else None,
        "ranks": sorted(int(r) for r in frame["rank"].unique()),
    }


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--json", nargs="*", type=Path, default=[SHARED / n for n in DEFAULT_JSON])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fidelity = []
        for i, path in enumerate(args.exports):
            other = args.exports[(i + 1) % len(args.exports)] if len(args.exports) > 1 else None
            fidelity.append(measure(path, other, Path(tmp)))
            print(json.dumps(fidelity[-1]), flush=True)
    speed = {"nsys": [per_kernel_speed(p, args.repeat) for p in args.exports]}
    speed["json"] = [per_kernel_speed(p, args.repeat) for p in args.json if p.is_file()]
    for kind, runs in speed.items():
        for run in runs:
            print(kind, json.dumps(run), flush=True)
    result = {"machine": platform.platform(), "fidelity": fidelity, "speed_single_process": speed}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
