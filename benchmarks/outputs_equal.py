"""Outputs unchanged by a performance change: ingest and report every shared trace into a folder,
then compare two such folders table by table.

    python benchmarks/outputs_equal.py make /tmp/base      # before the change (e.g. on main)
    python benchmarks/outputs_equal.py make /tmp/after     # after it
    python benchmarks/outputs_equal.py compare /tmp/base /tmp/after

`make` runs `atlas ingest TRACE -o DIR/<stem> -q` then `atlas report DIR/<stem>` for every
../shared/traces/*.json.gz (the SGLang decode graph with its capture trace), and one two-rank run
(two traces in one ingest, so the fleet writer and the cross-rank report run too); each command's
stdout is kept in DIR/<stem>.ingest.txt / .report.txt.

`compare` walks both folders and compares every file: Parquet tables (every dataset file, by
relative path) equal as tables — same columns, same types, same values, NaN equal to NaN — after
dropping the run-id columns; JSON equal after dropping every `run_id` key and the keys that hold
a timing of the run itself; CSV and text byte for byte, except for lines naming the run id. HTML
is compared after the run id is blanked out; text after the folder's path is written `<out>`; the
lock file (the writer's process id) is not compared. Exit 1 and a line per difference when any differ.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
CAPTURES = {"mi300x_sglang_qwen3_8b_decode_graph": "mi300x_sglang_qwen3_8b_decode_capture_bs32"}
TWO_RANKS = ("a100_alexnet_train", "a100_nccl_8rank_rank0")
SKIP = {".atlas.lock"}  # the writer's process id
RUN_ID_COLUMNS = {"run_id", "run"}
VOLATILE_KEYS = {"run_id", "elapsed_s", "wall_s", "created", "created_at", "ingested_at", "seconds"}
RUN_ID = re.compile(r"run_[0-9a-zA-Z_-]{6,}|[0-9a-f]{32}|[0-9a-f]{12,16}")


def _atlas(*args: str) -> str:
    code = "import sys\nfrom kernel_atlas.cli import app\nsys.argv[0] = 'atlas'\napp()\n"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=_env())
    if done.returncode not in (0, 2):  # 2: refused in one line (a trace without GPU activities)
        raise SystemExit(f"atlas {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"}


def make(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for trace in sorted(SHARED.glob("*.json.gz")):
        stem = trace.name.split(".")[0]
        out = folder / stem
        extra = ["--capture", str(SHARED / f"{CAPTURES[stem]}.json.gz")] if stem in CAPTURES else []
        print(stem, flush=True)
        (folder / f"{stem}.ingest.txt").write_text(_atlas("ingest", str(trace), "-o", str(out), "-q", *extra))
        (folder / f"{stem}.report.txt").write_text(_atlas("report", str(out)))
    out = folder / "two_ranks"
    print(out.name, flush=True)
    traces = [str(SHARED / f"{stem}.json.gz") for stem in TWO_RANKS]
    (folder / "two_ranks.ingest.txt").write_text(_atlas("ingest", *traces, "-o", str(out), "-q"))
    (folder / "two_ranks.report.txt").write_text(_atlas("report", str(out)))


def _files(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in SKIP}


def _table(path: Path) -> pa.Table:
    table = pq.read_table(path)
    keep = [name for name in table.column_names if name not in RUN_ID_COLUMNS]
    table = table.select(keep)
    return table.replace_schema_metadata(None)


def _tables_equal(a: pa.Table, b: pa.Table) -> str | None:
    if a.schema != b.schema:
        return f"schema differs: {a.schema} != {b.schema}"
    if a.num_rows != b.num_rows:
        return f"{a.num_rows} rows != {b.num_rows}"
    for name in a.column_names:
        x, y = a[name].combine_chunks(), b[name].combine_chunks()
        if pa.types.is_dictionary(x.type):
            x, y = x.cast(x.type.value_type), y.cast(y.type.value_type)
        if x.equals(y):
            continue
        if pa.types.is_floating(x.type):
            import numpy as np

            xs = x.to_numpy(zero_copy_only=False)
            ys = y.to_numpy(zero_copy_only=False)
            if np.array_equal(xs, ys, equal_nan=True):
                continue
        return f"column {name} differs"
    return None


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, str):
        return RUN_ID.sub("<id>", value)
    return value


def _text(path: Path, root: Path) -> str:
    return RUN_ID.sub("<id>", path.read_text(errors="replace").replace(str(root), "<out>"))


def compare(a: Path, b: Path) -> int:
    fa, fb = _files(a), _files(b)
    problems = [f"only in {a}: {name}" for name in sorted(fa.keys() - fb.keys())]
    problems += [f"only in {b}: {name}" for name in sorted(fb.keys() - fa.keys())]
    for name in sorted(fa.keys() & fb.keys()):
        pa_, pb = fa[name], fb[name]
        if name.endswith(".parquet"):
            why = _tables_equal(_table(pa_), _table(pb))
        elif name.endswith(".json"):
            why = None if _strip(json.loads(pa_.read_text())) == _strip(json.loads(pb.read_text())) else "JSON differs"
        elif name.endswith((".csv", ".txt", ".html", ".md")):
            why = None if _text(pa_, a) == _text(pb, b) else "text differs"
        else:
            why = None if pa_.read_bytes() == pb.read_bytes() else "bytes differ"
        if why:
            problems.append(f"{name}: {why}")
    for line in problems:
        print(line)
    print(f"{len(fa.keys() & fb.keys())} files compared, {len(problems)} differences")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("make").add_argument("folder", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("a", type=Path)
    both.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.what == "make":
        make(args.folder)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
