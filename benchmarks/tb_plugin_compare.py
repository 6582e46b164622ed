"""Step split and GPU metrics: Kernel Atlas against the PyTorch Profiler TensorBoard plugin.

    git clone https://github.com/pytorch/kineto && git -C kineto checkout 94979607^   # tb_plugin 0.4.3
    python benchmarks/tb_plugin_compare.py ../shared/traces/v100_resnet50_train_pt19.json.gz \\
        --tb-plugin kineto/tb_plugin --hand-built --out benchmarks/results/tb-plugin-compare.json

For each trace, the plugin's own parser (`torch_tb_profiler.profiler.data.RunProfileData`, run
in a child process with the plugin's folder on its path; nothing of it is copied here) gives the
overview's per-step split (Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec,
Other) and the GPU utilization, est. SM efficiency and est. achieved occupancy per device, over
all steps and over each step (its `GPUMetricsParser` run on each step's bounds, as the overview's
bounds of all steps); `ingest_trace(...).facts["efficiency"]` gives Kernel Atlas's. Also, on
kernels that recorded Kineto's `est. achieved occupancy %`, the occupancy Kernel Atlas estimates
without it (registers, shared memory, block size and the SM limits) against the recorded value.
`--hand-built` adds a trace written here (`hand_built_trace`): two devices of 80 and 108 SMs,
three streams, four steps (one without GPU work), a memcpy under a kernel, a 0 µs kernel, and an
NCCL kernel whose External id names a `nccl:all_reduce` user annotation.
Prints one JSON object and writes it to `--out`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
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
    from torch_tb_profiler.profiler.gpu_metrics_parser import GPUMetricsParser
    from torch_tb_profiler.profiler.overall_parser import OverallParser
    bounds = []  # the steps' (start, end) after the plugin stretched them, as its overview splits them
    aggregate = OverallParser.aggregate
    def keep_bounds(self, steps, role_ranges):
        bounds.extend(steps)
        return aggregate(self, steps, role_ranges)
    OverallParser.aggregate = keep_bounds
    opener = gzip.open if sys.argv[2].endswith(".gz") else open
    with opener(sys.argv[2]) as handle:
        data = RunProfileData.from_json("worker0", "span", json.load(handle))
    data.process()
    data.analyze()
    def metrics(gm):
        return {str(g): {"gpu_utilization_pct": 100 * gm.gpu_utilization[g],
                         "sm_efficiency_pct": None if gm.avg_approximated_sm_efficiency_per_device[g] is None
                         else 100 * gm.avg_approximated_sm_efficiency_per_device[g],
                         "achieved_occupancy_pct": gm.avg_occupancy_per_device[g]} for g in gm.gpu_ids}
    gm = data.gpu_metrics_parser
    per_step = [metrics(GPUMetricsParser.parse_events(data.events, lo, hi, lo, hi)) for lo, hi in bounds]
    print(json.dumps({
        "steps": [{"step": n, "bounds": list(b), "devices": d, **{r.name: c.costs[r] for r in ProfileRole}}
                  for n, c, b, d in zip(data.steps_names, data.steps_costs, bounds, per_step)],
        "devices": metrics(gm),
        "tensor_core_time_pct": None if data.tc_used_ratio is None else 100 * data.tc_used_ratio,
    }))
    """
)
METRIC_NAMES = ("gpu_utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct")
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


def _metrics(theirs: dict, ours: list[dict]) -> tuple[dict, float, list[str]]:
    """Per device of the plugin's, each metric of both tools; the largest difference where both
    give a number, and where one gives none (`device: metric`)."""
    devices, worst, one_sided = {}, 0.0, []
    for device, values in theirs.items():
        mine = next((d for d in ours if str(d["device"]) == device), {})
        devices[device] = {k: {"tb_plugin": v, "atlas": mine.get(k)} for k, v in values.items()}
        for name, pair in devices[device].items():
            if pair["tb_plugin"] is not None and pair["atlas"] is not None:
                worst = max(worst, abs(pair["tb_plugin"] - pair["atlas"]))
            elif pair["tb_plugin"] is not None or pair["atlas"] is not None:
                one_sided.append(f"{device}: {name}")
    return devices, worst, one_sided


def compare(trace: Path, tb: dict) -> dict:
    result = ingest_trace(trace, workers=1)
    ours = result.facts["efficiency"]
    steps = []
    worst_kernel = worst_step_points = 0.0
    split_differences = []  # (step, role, plugin, atlas) beyond 0.5 µs (the plugin's bounds are integers)
    null_vs_value = []
    for theirs, mine in zip(tb["steps"], ours["steps"], strict=False):
        row = {"step": theirs["step"]}
        for role, key in ROLE_OF.items():
            row[role] = {"tb_plugin_us": theirs[role], "atlas_us": round(mine[key], 3)}
            if abs(theirs[role] - mine[key]) > 0.5:
                split_differences.append([theirs["step"], role, theirs[role], round(mine[key], 3)])
        kernel_tb = theirs["Kernel"]
        if kernel_tb:
            worst_kernel = max(worst_kernel, abs(mine["kernel_us"] - kernel_tb) / kernel_tb)
        row["devices"], points, one_sided = _metrics(theirs["devices"], mine["devices"])
        worst_step_points = max(worst_step_points, points)
        null_vs_value += [f"step {theirs['step']} device {where}" for where in one_sided]
        steps.append(row)
    devices, worst_points, _ = _metrics(tb["devices"], ours["devices"])
    return {
        "steps_tb_plugin": len(tb["steps"]),
        "steps_atlas": len(ours["steps"]),
        "steps_left_out_atlas": ours.get("steps_left_out", 0),
        "steps": steps,
        "devices": devices,
        "tensor_core_time_pct": {
            "tb_plugin": tb["tensor_core_time_pct"],
            "atlas": [d["tensor_core_time_pct"] for d in ours["devices"]],
        },
        "max_step_kernel_time_deviation_pct": 100 * worst_kernel,
        "split_differences_over_half_us": split_differences,
        "max_metric_deviation_points": worst_points,
        "max_step_metric_deviation_points": worst_step_points,
        # a step's metric one tool gives and the other not (the plugin: none without kernels in the
        # step; Kernel Atlas: 0, as the utilization, docs/efficiency.md)
        "step_metrics_null_vs_value": null_vs_value,
        "communication_atlas": {
            k: ours.get(k) for k in ("communication_us", "communication_kernel_us", "communication_kernel_other_op_us")
        },
        "occupancy_estimate_vs_recorded": occupancy_check(result.frame, device_properties(trace)),
    }


def hand_built_trace(path: Path) -> Path:
    """A small trace of two devices (V100, 80 SMs; A100, 108 SMs, listed in reverse order),
    written to `path`: four steps of unequal length, the third without GPU work; three streams; a
    memcpy under a kernel, a 0 µs kernel, a kernel before the first step; and in step 4 an NCCL
    kernel whose External id names a `nccl:all_reduce` user annotation (communication to both)."""
    v100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "numSms": 80}
    a100 = {"id": 1, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "numSms": 108}
    common = {"maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536, "warpSize": 32}
    props = [
        {**a100, **common, "sharedMemPerMultiprocessor": 167936},
        {**v100, **common, "sharedMemPerMultiprocessor": 98304},
    ]
    events: list[dict] = []
    ids = iter(range(1, 1000))

    def host(name: str, ts: float, dur: float, cat: str = "cpu_op") -> int:
        ext = next(ids)
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": 1, "ts": ts, "dur": dur,
                       "args": {"External id": ext}})  # fmt: skip
        return ext

    def gpu(launch: float, ts: float, dur: float, ext: int, device: int = 0, stream: int = 7,
            grid: int = 80, occ: float = 50.0, kind: str = "kernel", name: str = "gemm_kernel") -> None:  # fmt: skip
        corr = len(events) + 10_000
        launcher = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}[kind]
        events.append({"ph": "X", "cat": "cuda_runtime", "name": launcher, "pid": 100, "tid": 1, "ts": launch,
                       "dur": 5, "args": {"correlation": corr, "External id": ext}})  # fmt: skip
        args = {"device": device, "stream": stream, "correlation": corr, "External id": ext}
        if kind == "kernel":
            sms = 80 if device == 0 else 108
            args.update({"grid": [grid, 1, 1], "block": [256, 1, 1], "registers per thread": 32, "shared memory": 0})
            args.update({"blocks per SM": grid / sms, "est. achieved occupancy %": occ})
        else:
            args["bytes"] = 1 << 20
            name = {"memcpy": "Memcpy HtoD (Pageable -> Device)", "memset": "Memset (Device)"}[kind]
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                       "args": args})  # fmt: skip

    for n, ts, dur in [(1, 1000, 100), (2, 1100, 50), (3, 1150, 30), (4, 1180, 100)]:
        host(f"ProfilerStep#{n}", ts, dur, "user_annotation")
    gpu(990, 1001, 4, host("aten::zero_", 985, 12), name="zero_kernel")  # before step 1, moves its start
    host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1002, 6)
    mm = host("aten::mm", 1008, 42)
    gpu(1010, 1050, 40, mm, grid=40, occ=25)
    gpu(1020, 1070, 40, mm, stream=8)
    gpu(1030, 1060, 10, mm, stream=9, kind="memcpy")  # under the kernel on stream 7
    gpu(1040, 1055, 20, mm, device=1, grid=216, occ=100)
    add = host("aten::add", 1101, 39)
    gpu(1105, 1120, 0, add, grid=8, occ=10)  # 0 µs
    gpu(1115, 1125, 50, add, grid=40, occ=30)
    host("aten::relu", 1155, 10)  # step 3: no GPU work
    mul = host("aten::mul", 1185, 40)
    gpu(1190, 1200, 30, mul, grid=160, occ=60)
    gpu(1195, 1210, 40, mul, device=1, grid=54, occ=40)
    gpu(1200, 1235, 5, mul, kind="memset")
    nccl = host("nccl:all_reduce", 1228, 10, "user_annotation")
    gpu(1230, 1240, 60, nccl, device=1, stream=20, grid=2, occ=3, name="ncclKernel_AllReduce_RING_LL_Sum_float")
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}))
    return path


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
    parser.add_argument("--hand-built", action="store_true", help="also the trace `hand_built_trace` writes")
    args = parser.parse_args()
    traces = list(args.traces)
    with tempfile.TemporaryDirectory() as folder:
        if args.hand_built:
            traces.append(hand_built_trace(Path(folder) / "hand_built_2_devices.json"))
        result = {trace.name: compare(trace, tb_numbers(args.tb_plugin, trace)) for trace in traces}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
