"""Step split and GPU metrics: Kernel Atlas against the PyTorch Profiler TensorBoard plugin.

    git clone https://github.com/pytorch/kineto && git -C kineto checkout 94979607^   # tb_plugin 0.4.3
    python benchmarks/tb_plugin_compare.py ../shared/traces/v100_resnet50_train_pt19.json.gz \\
        --tb-plugin kineto/tb_plugin --out benchmarks/results/tb-plugin-compare.json

For each trace, the plugin's own parser (`torch_tb_profiler.profiler.data.RunProfileData`, run
in a child process with the plugin's folder on its path; nothing of it is copied here) gives the
overview's per-step split (Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec,
Other) and the GPU utilization, est. SM efficiency and est. achieved occupancy per device;
`ingest_trace(...).facts["efficiency"]` gives Kernel Atlas's. Also, on kernels that recorded
Kineto's `est. achieved occupancy %`, the occupancy Kernel Atlas estimates without it (registers,
shared memory, block size and the SM limits) against the recorded value.
Prints one JSON object and writes it to `--out`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_atlas.ingest.efficiency import kernel_columns
from kernel_atlas.ingest.pipeline import ingest_trace

TB_CHILD = textwrap.dedent(
    """
    import gzip, json, sys, warnings
    warnings.simplefilter("ignore")
    sys.path.insert(0, sys.argv[1])
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import ProfileRole
    opener = gzip.open if sys.argv[2].endswith(".gz") else open
    with opener(sys.argv[2]) as handle:
        data = RunProfileData.from_json("worker0", "span", json.load(handle))
    data.process()
    data.analyze()
    gm = data.gpu_metrics_parser
    print(json.dumps({
        "steps": [{"step": n, **{r.name: c.costs[r] for r in ProfileRole}}
                  for n, c in zip(data.steps_names, data.steps_costs)],
        "devices": {str(g): {"gpu_utilization_pct": 100 * gm.gpu_utilization[g],
                             "sm_efficiency_pct": None if gm.avg_approximated_sm_efficiency_per_device[g] is None
                             else 100 * gm.avg_approximated_sm_efficiency_per_device[g],
                             "achieved_occupancy_pct": gm.avg_occupancy_per_device[g]} for g in gm.gpu_ids},
        "tensor_core_time_pct": None if data.tc_used_ratio is None else 100 * data.tc_used_ratio,
    }))
    """
)
ROLE_OF = {
    "Kernel": "kernel_us",
    "Memcpy": "memcpy_us",
    "Memset": "memset_us",
    "Communication": "communication_us",
    "Runtime": "runtime_us",
    "DataLoader": "dataloader_us",
    "CpuOp": "cpu_exec_us",
    "Other": "other_us",
    "Total": "total_us",
}


def tb_numbers(plugin: Path, trace: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", TB_CHILD, str(plugin), str(trace)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def compare(trace: Path, tb: dict) -> dict:
    result = ingest_trace(trace, workers=1)
    ours = result.facts["efficiency"]
    steps = []
    worst_kernel = 0.0
    for theirs, mine in zip(tb["steps"], ours["steps"], strict=False):
        row = {"step": theirs["step"]}
        for role, key in ROLE_OF.items():
            row[role] = {"tb_plugin_us": theirs[role], "atlas_us": round(mine[key], 3)}
        kernel_tb = theirs["Kernel"]
        if kernel_tb:
            worst_kernel = max(worst_kernel, abs(mine["kernel_us"] - kernel_tb) / kernel_tb)
        steps.append(row)
    devices = {}
    worst_points = 0.0
    for device, theirs in tb["devices"].items():
        mine = next((d for d in ours["devices"] if str(d["device"]) == device), {})
        devices[device] = {k: {"tb_plugin": v, "atlas": mine.get(k)} for k, v in theirs.items()}
        for v in devices[device].values():
            if v["tb_plugin"] is not None and v["atlas"] is not None:
                worst_points = max(worst_points, abs(v["tb_plugin"] - v["atlas"]))
    return {
        "steps_tb_plugin": len(tb["steps"]),
        "steps_atlas": len(ours["steps"]),
        "steps": steps,
        "devices": devices,
        "tensor_core_time_pct": {
            "tb_plugin": tb["tensor_core_time_pct"],
            "atlas": [d["tensor_core_time_pct"] for d in ours["devices"]],
        },
        "max_step_kernel_time_deviation_pct": 100 * worst_kernel,
        "max_metric_deviation_points": worst_points,
        "occupancy_estimate_vs_recorded": occupancy_check(result.frame, device_properties(trace)),
    }


def device_properties(trace: Path) -> list[dict]:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace) as handle:
        doc = json.load(handle)
    return doc.get("deviceProperties", []) if isinstance(doc, dict) else []


def occupancy_check(frame: pd.DataFrame, props: list[dict]) -> dict | None:
    """Kernel Atlas's estimate, made with the recorded value hidden, against Kineto's."""
    recorded = frame["recorded_occupancy_pct"].to_numpy(np.float64, na_value=np.nan)
    if np.isnan(recorded).all():
        return None
    hidden = frame.assign(recorded_occupancy_pct=np.nan)
    estimate = np.asarray(kernel_columns(hidden, props)["est_occupancy_pct"], dtype=np.float64)
    both = ~np.isnan(recorded) & ~np.isnan(estimate)
    diff = np.abs(estimate[both] - recorded[both])  # Kineto rounds its value to a whole percent
    weights = frame["dur_us"].to_numpy()[both]
    return {
        "kernels_compared": int(both.sum()),
        "within_1_point_pct": float(100 * (diff <= 1.0).mean()) if both.any() else None,
        "within_1_point_time_pct": float(100 * weights[diff <= 1.0].sum() / weights.sum()) if both.any() else None,
        "max_abs_diff_points": float(diff.max()) if both.any() else None,
        "worst": pd.DataFrame({"name": frame["name"].to_numpy()[both], "diff": diff})
        .sort_values("diff", ascending=False)
        .head(3)
        .assign(name=lambda f: f["name"].astype(str).str[:80])
        .to_dict("records"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--tb-plugin", type=Path, required=True, help="the tb_plugin folder of pytorch/kineto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {trace.name: compare(trace, tb_numbers(args.tb_plugin, trace)) for trace in args.traces}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
