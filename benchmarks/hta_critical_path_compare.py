"""Critical path: Kernel Atlas against Holistic Trace Analysis on the same traces and windows.

    python3 -m venv .venv-hta && .venv-hta/bin/pip install HolisticTraceAnalysis 'pandas<2.3'
    python benchmarks/hta_critical_path_compare.py --hta-python .venv-hta/bin/python \\
        TRACE[@ANNOTATION#K] ... --out benchmarks/results/hta-critical-path-compare.json
    # without HTA: its values as recorded by an earlier run
    python benchmarks/hta_critical_path_compare.py TRACE[@ANNOTATION#K] ... --recorded FILE

HTA 0.5.0's `critical_path_analysis(rank=0, annotation, instance_id)` (HTA needs pandas < 2.3
for it) runs in a child process of the HTA venv; Kernel Atlas ingests the trace and solves the
same window (`atlas report --window ANNOTATION#K`; no `@…`: the whole trace, HTA's
annotation ""), in its exact convention and in HTA's (`build_graph(convention="hta")`:
timestamps rounded to the µs as HTA's parser does, only CUDA-named calls blocking, no sync edge
without cuda_sync events). Compared: the path length (sum of the path's edge weights, µs) and the share of
each of HTA's bound buckets. Prints one JSON object per trace with both tools' values, the
relative length difference and the largest bucket difference (percentage points), against HTA
with its defaults (`hta`, against Kernel Atlas's `atlas_like_hta`) and with
`HTA_DISABLE_NS_ROUNDING=1` (`hta_ns`, against the exact `atlas`: HTA otherwise rounds every
ns-resolution timestamp to the µs, start up and end down); `--out` writes them all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import textwrap
from pathlib import Path

from kernel_atlas.analysis.critical_path import BUCKETS, CONVENTIONS, build_graph
from kernel_atlas.analysis.critical_segments import breakdown_pct, segments
from kernel_atlas.analysis.longest_path import longest_path
from kernel_atlas.analysis.waits import last_step_starts
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.host_events import load_host_events
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.store.outputs import load_kernels

HTA_CHILD = textwrap.dedent(
    """
    import json, logging, os, shutil, sys, tempfile
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    path, annotation, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    folder = tempfile.mkdtemp()
    shutil.copy(path, os.path.join(folder, os.path.basename(path)))
    analysis = TraceAnalysis(trace_dir=folder)
    graph, ok = analysis.critical_path_analysis(rank=0, annotation=annotation, instance_id=k if annotation else None)
    edges = graph.get_critical_path_breakdown()
    total = float(edges.duration.sum())
    by = edges.groupby("bound_by").duration.sum()
    print(json.dumps({"ok": bool(ok), "length_us": total, "edges": int(len(edges)),
                      "breakdown_pct": {b: round(100 * float(v) / total, 2) for b, v in by.items() if b}}))
    """
)


def run_hta(python: str, path: Path, annotation: str, k: int, rounding: bool = True) -> dict:
    env = dict(os.environ)
    if not rounding:  # HTA's parser rounds ns timestamps to µs (start up, end down) unless told not to
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    done = subprocess.run(
        [python, "-c", HTA_CHILD, str(path.resolve()), annotation, str(k)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def atlas_values(path: Path, annotation: str, k: int) -> dict[str, dict]:
    """Kernel Atlas's path in each convention (`exact`, the default, and `hta`)."""
    values = {}
    with tempfile.TemporaryDirectory() as out:
        write_outputs(ingest_paths([path]), out)
        kernels = load_kernels(out)
        if len(kernels) == 0:
            raise AtlasError(None, "no GPU activity in the trace")
        rank = int(kernels["rank"].iloc[0])
        host = load_host_events(out, rank)
        cut = last_step_starts(json.loads((Path(out) / "summary.json").read_text())).get(rank)
        window = (annotation, k) if annotation else None
        for convention in CONVENTIONS:
            graph = build_graph(kernels, host, window, convention=convention, last_step_start_us=cut)
            path_ = longest_path(graph)
            segs = segments(graph, path_)
            values[convention] = {
                "length_us": round(path_.length_us, 3),
                "segments": len(segs),
                "breakdown_pct": breakdown_pct(segs),
            }
    return values


def compare(ours: dict, theirs: dict) -> dict:
    length = theirs["length_us"]
    rel = abs(ours["length_us"] - length) / length if length else 0.0
    buckets = {b: round(ours["breakdown_pct"].get(b, 0.0) - theirs["breakdown_pct"].get(b, 0.0), 2) for b in BUCKETS}
    return {
        "length_rel_diff": round(rel, 5),
        "bucket_diff_pts": buckets,
        "max_bucket_diff_pts": max(map(abs, buckets.values())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="TRACE or TRACE@ANNOTATION#K")
    parser.add_argument("--hta-python", default=".venv-hta/bin/python")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--recorded", type=Path, help="HTA's values from this earlier output instead of running HTA")
    args = parser.parse_args()
    recorded = json.loads(args.recorded.read_text()) if args.recorded else {}
    results = {}
    for case in args.cases:
        trace, _, window = case.partition("@")
        annotation, _, k = window.rpartition("#") if window else ("", "", "0")
        path = Path(trace)
        name = f"{path.parent.name}/{path.name}"  # traces of one name in two folders (h100/, mi300/)
        key = f"{name}@{window}" if window else name
        try:
            values = atlas_values(path, annotation, int(k))
        except AtlasError as error:  # a trace Kernel Atlas refuses: said, and the others go on
            results[key] = {"atlas_error": str(error)}
            continue
        entry: dict = {"atlas": values["exact"], "atlas_like_hta": values["hta"]}
        # HTA's default against Kernel Atlas in HTA's convention; HTA without its rounding against
        # the exact convention (both read every timestamp as written)
        for setting, rounding, ours in (("hta", True, values["hta"]), ("hta_ns", False, values["exact"])):
            if args.recorded and f"{setting}_error" in recorded.get(key, {}):  # HTA failed there, as recorded
                entry[f"{setting}_error"] = recorded[key][f"{setting}_error"]
                continue
            try:
                if args.recorded:
                    theirs = recorded[key][setting]
                else:
                    theirs = run_hta(args.hta_python, path, annotation, int(k), rounding)
            except (subprocess.CalledProcessError, KeyError) as error:
                detail = (getattr(error, "stderr", "") or str(error)).strip()
                entry[f"{setting}_error"] = detail.splitlines()[-1] if detail else "failed"
                continue
            entry[setting] = theirs
            entry[f"vs_{setting}"] = compare(ours, theirs)
        results[key] = entry
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
