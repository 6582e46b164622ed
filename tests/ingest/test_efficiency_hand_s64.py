"""Campaign AK's classes on the step split and efficiency, by hand on small traces written here:
a kernel linked by External id to an `nccl:*` user annotation is communication (as the
TensorBoard plugin counts it); the two communication rules side by side; a trace without steps
spans the CPU ops (the plugin's window), not the annotations; a step without kernels has 0 SM
efficiency and occupancy; 0/0 shares are null; the steps the tail rule leaves out are said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_atlas.analysis.idle import idle_breakdown
from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.ingest.summary import gpu_time_facts
from kernel_atlas.report.efficiency_view import efficiency_facts, efficiency_lines, report_lines

V100 = {
    "id": 0,
    "name": "Tesla V100-SXM2-16GB",
    "computeMajor": 7,
    "computeMinor": 0,
    "numSms": 80,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerMultiprocessor": 98304,
}
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


class Trace:
    """Host ranges on one thread and GPU activities on device 0, each launched by a 5 µs call."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.ext = 0

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> int:
        self.ext += 1
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": dur,
                "args": {"External id": self.ext},
            }
        )
        return self.ext

    def gpu(
        self,
        launch: float,
        ts: float,
        dur: float,
        ext: int,
        stream: int = 7,
        name: str = "K gemm",
        kind: str = "kernel",
    ) -> None:
        corr = len(self.events) + 100
        call = "cudaLaunchKernel" if kind == "kernel" else "cudaMemcpyAsync"
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": call,
                "pid": 1,
                "tid": 1,
                "ts": launch,
                "dur": 5,
                "args": {"correlation": corr, "External id": ext},
            }
        )
        args: dict[str, Any] = {"device": 0, "stream": stream, "correlation": corr, "External id": ext}
        if kind == "kernel":  # 80 blocks of 256 threads on 80 SMs: 1 block per SM, occupancy 12.5 %
            args.update({"grid": [80, 1, 1], "block": [256, 1, 1], "registers per thread": 32, "shared memory": 0})
            args.update({"blocks per SM": 1.0, "est. achieved occupancy %": 50})
        else:
            args["bytes"] = 1 << 20
            name = "Memcpy HtoD (Pageable -> Device)"
        cat = "kernel" if kind == "kernel" else "gpu_memcpy"
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}
        )

    def ingest(self, path: Path) -> Any:
        path.write_text(json.dumps({"deviceProperties": [V100], "traceEvents": self.events}))
        return ingest_trace(path, workers=1)


SPLIT = ("kernel_us", "memcpy_us", "communication_us", "runtime_us", "cpu_exec_us", "other_us")


def _comm_trace(cat: str) -> Trace:
    """One step [1000, 1200]; `nccl:all_reduce` (`cat`) over [1010, 1020] launches an NCCL kernel
    at 1012 onto stream 20 over [1030, 1130]; `aten::mm` over [1020, 1030] launches kernels over
    [1040, 1070] and [1100, 1150] and a copy over [1075, 1095] (campaign AK's c_comm)."""
    t = Trace()
    t.host("ProfilerStep#1", 1000, 200, "user_annotation")
    t.gpu(1012, 1030, 100, t.host("nccl:all_reduce", 1010, 10, cat), stream=20, name=NCCL)
    mm = t.host("aten::mm", 1020, 10)
    t.gpu(1022, 1040, 30, mm)
    t.gpu(1025, 1100, 50, mm)
    t.gpu(1027, 1075, 20, mm, stream=9, kind="memcpy")
    return t


def test_a_kernel_named_by_an_nccl_annotation_is_communication(tmp_path: Path) -> None:
    # kernel: [1040, 1070] ∪ [1100, 1150] = 80; memcpy [1075, 1095] = 20; communication: the NCCL
    # kernel [1030, 1130] less kernels and copy (10 + 5 + 5) and the annotation [1010, 1020] (10);
    # runtime: the launches [1012, 1017] ∪ [1022, 1032] less the annotation and the NCCL kernel =
    # [1022, 1030] = 8; cpu_exec: aten::mm [1020, 1030] less them = 2; other: 200 − 190 = 60
    expected = {"kernel_us": 80.0, "memcpy_us": 20.0, "communication_us": 30.0}
    expected |= {"runtime_us": 8.0, "cpu_exec_us": 2.0, "other_us": 60.0}
    ops = {}
    for cat in ("user_annotation", "cpu_op"):  # the same numbers as a CPU op gives (the plugin's)
        result = _comm_trace(cat).ingest(tmp_path / f"{cat}.json")
        step = result.facts["efficiency"]["steps"][0]
        assert {k: step[k] for k in SPLIT} == expected, cat
        ops[cat] = result.frame.loc[result.frame["name"] == NCCL, "cpu_op"].iloc[0]
    # the annotation is no kernel's op (linking reads the External ids of CPU ops only)
    assert pd.isna(ops["user_annotation"]) and ops["cpu_op"] == "nccl:all_reduce"


def test_both_communication_rules_are_said_and_a_miss_noted(tmp_path: Path) -> None:
    """PyTorch 2.x: the NCCL kernel's External id names `record_param_comms` (a CPU op), not the
    `nccl:all_reduce` annotation around it. One step [1000, 1200]: annotation [1008, 1022],
    record_param_comms [1010, 1020] launching the NCCL kernel [1030, 1130] (100 µs), aten::mm
    [1040, 1046] launching a kernel [1050, 1070]."""
    t = Trace()
    t.host("ProfilerStep#1", 1000, 200, "user_annotation")
    t.host("nccl:all_reduce", 1008, 14, "user_annotation")
    t.gpu(1012, 1030, 100, t.host("record_param_comms", 1010, 10), stream=20, name=NCCL)
    t.gpu(1041, 1050, 20, t.host("aten::mm", 1040, 6))
    result = t.ingest(tmp_path / "pt2.json")
    eff = result.facts["efficiency"]
    # the split: communication is the annotation's [1008, 1022] = 14 µs only (above runtime); the
    # NCCL kernel is kernel time: [1030, 1130] ∪ [1050, 1070] = 100
    assert (eff["steps"][0]["communication_us"], eff["steps"][0]["kernel_us"]) == (14.0, 100.0)
    assert (eff["communication_us"], eff["communication_kernel_us"], eff["communication_kernel_other_op_us"]) == (
        14.0,
        100.0,
        100.0,
    )
    summary = {"traces": [{**result.facts, "file": "pt2.json", "rank": 0}]}
    facts = efficiency_facts(summary)
    assert "kernels of category communication" in facts["communication_rules"]
    assert facts["notes"] == [
        "pt2.json rank 0: the step split counts 14.0 µs of communication (the plugin's rule); 100.0 µs of its "
        "100.0 µs of communication kernels (by category, as report.json devices[].communication_us) were launched "
        "under no nccl:*/gloo:* op and count as kernel_us in the split"
    ]
    assert report_lines(facts, None)[-1] == "note: " + facts["notes"][0]
    # linked to the annotation instead, the rules agree: no note
    agreed = _comm_trace("user_annotation").ingest(tmp_path / "agreed.json").facts
    assert agreed["efficiency"]["communication_kernel_other_op_us"] == 0.0
    assert efficiency_facts({"traces": [{**agreed, "file": "a.json"}]})["notes"] == []


def test_without_steps_the_window_spans_the_cpu_ops_not_the_annotations(tmp_path: Path) -> None:
    """`forward` annotation [900, 1300]; aten::mm [1000, 1100] launches kernels [1050, 1150] and
    [1200, 1250]; a GPU-only kernel [950, 1020] (no launch). The plugin's window: the CPU ops'
    [1000, 1100], started no earlier than the activity outside that ends before the first
    launched one (1020), ended at the last launched kernel's end (1250): [1020, 1250]."""
    t = Trace()
    t.host("forward", 900, 400, "user_annotation")
    mm = t.host("aten::mm", 1000, 100)
    t.gpu(1010, 1050, 100, mm)
    t.gpu(1020, 1200, 50, mm)
    t.events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "K gpu only",
            "pid": 0,
            "tid": 7,
            "ts": 950,
            "dur": 70,
            "args": {"device": 0, "stream": 7, "grid": [80, 1, 1], "block": [256, 1, 1], "blocks per SM": 1.0},
        }
    )
    eff = t.ingest(tmp_path / "nosteps.json").facts["efficiency"]
    assert eff["window_us"] == [1020.0, 1250.0]
    step = eff["steps"][0]
    # kernels [1050, 1150] ∪ [1200, 1250] = 150; launches [1010, 1015], [1020, 1025] = 5 inside;
    # cpu_exec: the op and the annotation over the rest: [1025, 1050] + [1150, 1200] = 75
    assert (step["step"], step["total_us"], step["kernel_us"], step["runtime_us"], step["cpu_exec_us"]) == (
        None,
        230.0,
        150.0,
        5.0,
        75.0,
    )
    assert np.isclose(eff["devices"][0]["gpu_utilization_pct"], 100 * 150 / 230)


def test_a_step_without_kernels_has_zero_sm_efficiency_and_occupancy(tmp_path: Path) -> None:
    """Steps [1000, 1100] (a kernel [1010, 1050]), [1100, 1150] (an op, no GPU work) and
    [1150, 1250] (a kernel [1170, 1200])."""
    t = Trace()
    for n, ts, dur in ((1, 1000, 100), (2, 1100, 50), (3, 1150, 100)):
        t.host(f"ProfilerStep#{n}", ts, dur, "user_annotation")
    t.gpu(1005, 1010, 40, t.host("aten::mm", 1002, 10))
    t.host("aten::relu", 1105, 10)
    t.gpu(1160, 1170, 30, t.host("aten::mm", 1155, 10))
    steps = t.ingest(tmp_path / "idle_step.json").facts["efficiency"]["steps"]
    empty = steps[1]["devices"][0]
    assert (steps[1]["start_us"], steps[1]["end_us"]) == (1100.0, 1150.0)
    # ∫ min(blocks per SM, 1) dt / window = 0 / 50, as the utilization; no kernel time to share
    assert empty == {
        "device": 0,
        "gpu_utilization_pct": 0.0,
        "sm_efficiency_pct": 0.0,
        "achieved_occupancy_pct": 0.0,
        "tensor_core_time_pct": None,
    }
    # step 1: the kernel [1010, 1050] at 1 block per SM = 40 of 100 µs, its recorded 50 %
    assert steps[0]["devices"][0]["sm_efficiency_pct"] == 40.0
    assert steps[0]["devices"][0]["achieved_occupancy_pct"] == 50.0


def test_zero_of_zero_shares_are_null() -> None:
    """Device 0: a kernel on stream 7 [0, 10] and [20, 30] (one 10 µs gap), a copy on stream 8
    [2, 4] (no gap); no communication at all."""
    frame = pd.DataFrame(
        {
            "rank": [0, 0, 0],
            "device": [0.0, 0.0, 0.0],
            "stream": pd.array([7, 7, 8], dtype="Int64"),
            "kind": ["kernel", "kernel", "memcpy"],
            "ts_us": [0.0, 20.0, 2.0],
            "dur_us": [10.0, 10.0, 2.0],
            "launch_ts_us": [-5.0, 5.0, 1.0],
            "category": ["gemm", "gemm", "memcpy"],
        }
    )
    device = gpu_time_facts(frame)["devices"][0]
    assert (device["communication_us"], device["overlap_us"], device["overlap_pct_of_communication"]) == (
        0.0,
        0.0,
        None,
    )
    table = idle_breakdown(frame)
    stream8 = table[table["stream"] == 8]
    assert stream8["idle_us"].tolist() == [0.0, 0.0, 0.0] and stream8["pct"].isna().all()
    # stream 7: the gap [10, 20] launched at 5, before it opened, under 30 µs: a kernel wait, 100 %
    stream7 = table[table["stream"] == 7].set_index("category")
    assert stream7.loc["kernel_wait", ["idle_us", "pct"]].tolist() == [10.0, 100.0]
    assert stream7.loc["host_wait", "pct"] == 0.0


def test_steps_the_tail_rule_leaves_out_are_said(tmp_path: Path) -> None:
    """Steps 1–4 of 100 µs from 1000: steps 1 and 2 launch 2 kernels each, step 3 one (under 80 %
    of 2: cut short), step 4 none — both left out, as the plugin drops them."""
    t = Trace()
    for n in range(1, 5):
        t.host(f"ProfilerStep#{n}", 900 + 100 * n, 100, "user_annotation")
    for base in (1000, 1100):
        mm = t.host("aten::mm", base + 5, 20)
        t.gpu(base + 10, base + 30, 20, mm)
        t.gpu(base + 15, base + 60, 20, mm)
    t.gpu(1210, 1230, 20, t.host("aten::mm", 1205, 20))
    t.host("aten::relu", 1305, 20)
    result = t.ingest(tmp_path / "tail.json")
    eff = result.facts["efficiency"]
    assert [s["step"] for s in eff["steps"]] == [1, 2] and eff["window_us"] == [1000.0, 1200.0]
    assert eff["steps_left_out"] == 2
    why = "step 3 launched 1 GPU activity, under 80 % of step 2's 2; step 4 launched none"
    assert eff["steps_left_out_why"] == why
    line = efficiency_lines({**result.facts, "file": "tail.json"})[0]
    assert line.startswith(f"  device 0 efficiency over 2 steps (2 more profiler steps left out: {why}): ")
    device = efficiency_facts({"traces": [{**result.facts, "file": "tail.json"}]})["devices"][0]
    assert (device["steps"], device["steps_left_out"], device["steps_left_out_why"]) == (2, 2, why)
