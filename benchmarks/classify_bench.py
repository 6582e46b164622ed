"""Classification speed and attribution: `label_frame` on the shared traces and on a large table,
the names corpus, and kernel time in the right category per trace.

    python benchmarks/classify_bench.py                       # this checkout
    python benchmarks/classify_bench.py --out benchmarks/results/classify-2core.json
    PYTHONPATH=/path/to/other/checkout python benchmarks/classify_bench.py --no-labels   # compare

Each trace is ingested once (not timed); then `label_frame` runs on its kernels table with a
fresh classifier and cleared name caches (cold: every distinct (name, launcher, stack) is
classified once) and again (warm caches). The large table repeats a100_diff_control's kernels
`--repeat` times (18 ≈ the 510 MB trace of ingest_bench.py): distinct keys stay the same, rows
grow. With the test data files present it also reports the names corpus accuracy and, per
trace, the share of kernel time whose category matches tests/data/trace_kernels.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import time
from pathlib import Path

import pandas as pd

from kernel_atlas.classify import names
from kernel_atlas.classify.classifier import Classifier, label_frame, load_catalog
from kernel_atlas.classify.rules import load_rules
from kernel_atlas.core.paths import catalogs_dir
from kernel_atlas.ingest.pipeline import ingest_trace

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
DATA = HERE.parent / "tests" / "data"


def fresh_classifier() -> Classifier:
    for cached in (names.base_name, names.family_key, names.name_texts):
        cached.cache_clear()
    rules, launchers = load_rules()
    return Classifier(rules, launchers, load_catalog(catalogs_dir() / "kernels.json"))


def timed_labels(frame: pd.DataFrame) -> tuple[float, float]:
    start = time.perf_counter()
    label_frame(frame.copy(), fresh_classifier())
    cold = time.perf_counter() - start
    classifier = fresh_classifier()
    label_frame(frame.copy(), classifier)
    start = time.perf_counter()
    label_frame(frame.copy(), classifier)
    return cold, time.perf_counter() - start


def attribution(stem: str, frame: pd.DataFrame) -> dict[str, float] | None:
    labels = DATA / "trace_kernels.csv"
    if not labels.exists():
        return None
    expected = pd.read_csv(labels, keep_default_na=False)
    expected = expected[(expected["trace"] == stem) & (expected["category"] != "?")]
    kernels = frame[frame["kind"] == "kernel"]
    got = kernels.groupby(kernels["name"].astype(str), observed=True)["category"].agg(lambda c: set(map(str, c)))
    times = kernels.groupby(kernels["name"].astype(str), observed=True)["dur_us"].sum()
    pairs = zip(expected["kernel"], expected["category"], strict=True)
    right = sum(times.get(k, 0.0) for k, c in pairs if got.get(k) == {c})
    judged = sum(times.get(k, 0.0) for k in expected["kernel"])
    unknown = float(kernels.loc[kernels["op_mapping"] == "unknown", "dur_us"].sum())
    total = float(kernels["dur_us"].sum())
    return {
        "right_pct": round(100 * right / judged, 3) if judged else 100.0,
        "judged_pct": round(100 * judged / total, 3) if total else 0.0,
        "unknown_pct": round(100 * unknown / total, 3) if total else 0.0,
    }


def corpus() -> dict[str, object] | None:
    path = DATA / "kernel_names.csv"
    if not path.exists():
        return None
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    classifier = fresh_classifier()
    start = time.perf_counter()
    labels = [classifier.classify(r["name"], r["launcher"] or None, r["stack"] or None) for r in rows]
    seconds = time.perf_counter() - start
    misses = [
        r["name"]
        for r, label in zip(rows, labels, strict=True)
        if label.category != r["category"] or (r["op_mapping"] and label.op_mapping != r["op_mapping"])
    ]
    return {
        "names": len(rows),
        "right_pct": round(100 * (1 - len(misses) / len(rows)), 2),
        "misses": misses,
        "us_per_name": round(1e6 * seconds / len(rows), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=18, help="copies of a100_diff_control's table")
    parser.add_argument("--no-labels", action="store_true", help="skip accuracy (an older checkout's data)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result: dict[str, object] = {"machine": f"{platform.node()} {platform.processor()}", "traces": {}}
    big = None
    for path in sorted(SHARED.glob("*.json.gz")):
        stem = path.name.removesuffix(".json.gz")
        frame = ingest_trace(path).frame
        if frame.empty:  # a trace without GPU activity
            continue
        keys = frame[["name", "launcher", "call_stack"]].astype(str).drop_duplicates()
        cold, warm = timed_labels(frame)
        entry: dict[str, object] = {
            "rows": len(frame),
            "distinct_keys": len(keys),
            "cold_s": round(cold, 3),
            "warm_s": round(warm, 3),
        }
        if not args.no_labels:
            entry["attribution"] = attribution(stem, frame)
        result["traces"][stem] = entry  # type: ignore[index]
        print(stem, entry)
        if stem == "a100_diff_control":
            big = pd.concat([frame] * args.repeat, ignore_index=True)
    if big is not None:
        cold, warm = timed_labels(big)
        result["large"] = {"rows": len(big), "copies": args.repeat, "cold_s": round(cold, 3), "warm_s": round(warm, 3)}
        print("large", result["large"])
    if not args.no_labels:
        result["corpus"] = corpus()
        print("corpus", {k: v for k, v in (result["corpus"] or {}).items() if k != "misses"})
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
