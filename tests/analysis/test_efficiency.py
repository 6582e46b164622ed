"""GPU efficiency from the trace alone (ingest/efficiency.py, ingest/step_split.py): values derived
by hand from small hand-built traces, and the real PyTorch 1.9 trace against the numbers the
TensorBoard plugin's own parser gives for it (benchmarks/results/tb-plugin-compare.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.traces import trace_path

V100 = {
    "id": 0,
    "name": "Tesla V100-SXM2-16GB",
    "computeMajor": 7,
    "computeMinor": 0,
    "numSms": 80,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerMultiprocessor": 98304,
    "warpSize": 32,
}


def _x(cat: str, name: str, ts: float, dur: float, args: dict[str, Any], pid: int = 1, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, ts: float, dur: float, corr: int, grid: int, block: int, **extra: Any) -> list[dict]:
    """An op [ts-6, ts-1] with a launch [ts-5, ts-3] of a kernel at [ts, ts+dur] on stream 7."""
    return [
        _x("cpu_op", "aten::mm", ts - 6, 5, {"External id": corr}),
        _x("cuda_runtime", "cudaLaunchKernel", ts - 5, 2, {"correlation": corr, "External id": corr}),
        _x(
            "kernel",
            name,
            ts,
            dur,
            {"device": 0, "stream": 7, "correlation": corr, "grid": [grid, 1, 1], "block": [block, 1, 1], **extra},
            pid=0,
            tid=7,
        ),
    ]


def _doc() -> dict:
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100, {})]
    # A: 160 blocks of 256 threads, 64 registers, no shared memory
    events += _kernel("volta_sgemm_128x64_nn", 10, 20, 1, 160, 256, **{"registers per thread": 64, "shared memory": 0})
    # B: 400 blocks of 128 threads, 32 registers, 48 KiB shared memory; an h884 (tensor-core) name
    events += _kernel(
        "volta_h884gemm_64x64_nn", 40, 10, 2, 400, 128, **{"registers per thread": 32, "shared memory": 49152}
    )
    # C: Kineto recorded its blocks per SM and occupancy
    recorded = {"registers per thread": 16, "shared memory": 0, "blocks per SM": 0.5, "est. achieved occupancy %": 37}
    events += _kernel("elementwise_kernel", 60, 20, 3, 40, 64, **recorded)
    events.append(_x("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 85, 10, {}))
    return {"deviceProperties": [V100], "traceEvents": events}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("eff") / "small.json"
    path.write_text(json.dumps(_doc()))
    return ingest_trace(path, workers=1)


def test_per_kernel_by_hand(small) -> None:
    """V100 (cc 7.0): 64 warps, 32 blocks, 65,536 registers in 4 sub-partitions, 96 KiB shared per SM.
    A: 8 warps/block → 8 blocks by warps; 64 regs → 2,048 per warp → 8 warps per sub-partition → 32
       warps → 4 blocks: max 4; theoretical 4·8/64 = 50 %; blocks/SM 160/80 = 2, warps/SM 2·256/32 = 16;
       estimate min(4, 2)·256/2048 = 25 %; waves 160/(80·4) = 0.5 → its one wave's slots 50 % used.
    B: 4 warps/block; 48 KiB shared → 98,304/49,152 = 2 blocks (registers allow 16): theoretical
       2·4/64 = 12.5 %; blocks/SM 5; estimate min(2, 5)·128/2048 = 12.5 %; waves 400/160 = 2.5 → 2.5/3.
    C: the recorded 37 %.
    Tensor cores: B by name; A an fp32 SIMT `_sgemm_` by name, no; C, of category gemm (its op is
    aten::mm) but a name that says nothing, under an op that recorded no dtype: unknown (null)."""
    k = small.frame.set_index("correlation")
    assert k.loc[1, ["blocks_per_sm", "warps_per_sm", "max_blocks_per_sm"]].tolist() == [2.0, 16.0, 4.0]
    assert k.loc[1, ["theoretical_occupancy_pct", "est_occupancy_pct", "waves", "wave_efficiency_pct"]].tolist() == [
        50.0,
        25.0,
        0.5,
        50.0,
    ]
    assert k.loc[
        2, ["blocks_per_sm", "max_blocks_per_sm", "theoretical_occupancy_pct", "est_occupancy_pct"]
    ].tolist() == [
        5.0,
        2.0,
        12.5,
        12.5,
    ]
    assert k.loc[2, "waves"] == 2.5 and k.loc[2, "wave_efficiency_pct"] == pytest.approx(100 * 2.5 / 3)
    assert k.loc[3, "est_occupancy_pct"] == 37.0
    assert k["occupancy_source"].astype(str).tolist() == ["estimated", "estimated", "recorded"]
    assert k["tensor_core"].tolist() == [False, True, pd.NA]


def test_device_metrics_and_step_split_by_hand(small) -> None:
    """Step [0, 100] (nothing runs past it). Kernels [10,30], [40,50], [60,80]: busy 50 → 50 %.
    SM efficiency: min(2,1)·20 + min(5,1)·10 + 0.5·20 (C's recorded blocks/SM) = 40 → 40 %.
    Occupancy: (25·20 + 12.5·10 + 37·20) / 50 = 27.3 %. Tensor cores: B's 10 of the 30 µs whose
    answer is known (A, B) = 33.3 %; C's 20 of 50 µs unknown = 40 %.
    Split: kernel 50; runtime 3 launches × 2 = 6; CPU ops 3 × 5 minus the launches inside them = 9;
    data loading 10; other 100 − 75 = 25."""
    eff = small.facts["efficiency"]
    (device,) = eff["devices"]
    assert device["gpu_utilization_pct"] == pytest.approx(50.0)
    assert device["sm_efficiency_pct"] == pytest.approx(40.0)
    assert device["achieved_occupancy_pct"] == pytest.approx(27.3)
    assert device["tensor_core_time_pct"] == pytest.approx(100 * 10 / 30)
    assert device["tensor_core_unknown_pct"] == pytest.approx(40.0)
    (step,) = eff["steps"]
    assert (step["step"], step["start_us"], step["end_us"]) == (1, 0.0, 100.0)
    split = {k: step[f"{k}_us"] for k in ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")}
    assert split == pytest.approx(
        {"kernel": 50, "memcpy": 0, "memset": 0, "runtime": 6, "dataloader": 10, "cpu_exec": 9, "other": 25}
    )
    assert step["kernel_us_launched"] == 50.0


def test_a_step_stretches_to_the_end_of_its_kernels(tmp_path: Path) -> None:
    """The plugin's device steps: a kernel launched in step 1 [0, 100] that runs until 130 makes the
    step end at 130; step 2 [110, 200] then starts at 130 (and holds its own kernel [150, 160])."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100, {}), _x("user_annotation", "ProfilerStep#2", 110, 90, {})]
    events += _kernel("k1", 90, 40, 1, 80, 256)
    events += _kernel("k2", 150, 10, 2, 80, 256)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [V100], "traceEvents": events}))
    steps = ingest_trace(path, workers=1).facts["efficiency"]["steps"]
    assert [(s["step"], s["start_us"], s["end_us"]) for s in steps] == [(1, 0.0, 130.0), (2, 130.0, 200.0)]
    assert [s["kernel_us"] for s in steps] == [40.0, 10.0]


def test_amd_without_registers_is_an_upper_bound(tmp_path: Path) -> None:
    """MI300X: wave64, 32 waves and 2,048 work-items per CU; no registers or LDS recorded.
    608 blocks of 256 → 2 per CU; the thread bound allows 8 (4 waves each): estimate at most
    min(8, 2)·256/2048 = 25 %, waves 608/(304·8) = 0.25; theoretical occupancy not possible."""
    props = {"id": 0, "name": "AMD Instinct MI300X", "numSms": 304, "warpSize": 64, "maxThreadsPerMultiprocessor": 2048}
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100, {}),
        *_kernel("Cijk_Alik_Bljk_HHS_MT128", 10, 10, 1, 608, 256),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [props], "traceEvents": events}))
    row = ingest_trace(path, workers=1).frame.iloc[0]
    assert (row["blocks_per_sm"], row["max_blocks_per_sm"], row["est_occupancy_pct"], row["waves"]) == (
        2.0,
        8.0,
        25.0,
        0.25,
    )
    assert row["occupancy_source"] == "upper bound" and pd.isna(row["theoretical_occupancy_pct"])


def test_no_device_properties_no_estimate(tmp_path: Path) -> None:
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100, {}), *_kernel("k", 10, 10, 1, 80, 256)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = ingest_trace(path, workers=1)
    row = result.frame.iloc[0]
    assert pd.isna(row["est_occupancy_pct"]) and pd.isna(row["blocks_per_sm"]) and pd.isna(row["occupancy_source"])
    (device,) = result.facts["efficiency"]["devices"]
    assert device["gpu_utilization_pct"] == pytest.approx(10.0)
    assert device["sm_efficiency_pct"] is None and device["achieved_occupancy_pct"] is None


def test_no_device_properties_keeps_the_recorded_occupancy(tmp_path: Path) -> None:
    """Kineto's own `est. achieved occupancy %` needs no device limits (stop 57's schema campaign:
    a trace without `deviceProperties` threw it away); what the limits give stays unknown."""
    recorded = {"est. achieved occupancy %": 6, "blocks per SM": 1.0}
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100, {}), *_kernel("k", 10, 10, 1, 80, 256, **recorded)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = ingest_trace(path, workers=1)
    row = result.frame.iloc[0]
    assert row["est_occupancy_pct"] == 6.0 and str(row["occupancy_source"]) == "recorded"
    assert pd.isna(row["blocks_per_sm"]) and pd.isna(row["theoretical_occupancy_pct"])
    (device,) = result.facts["efficiency"]["devices"]
    # the SM efficiency from Kineto's recorded blocks per SM, as before: 10 µs at min(1.0, 1) of 100 µs
    assert device["achieved_occupancy_pct"] == pytest.approx(6.0) and device["sm_efficiency_pct"] == pytest.approx(10.0)


def test_pt19_matches_the_tensorboard_plugin() -> None:
    """The plugin's parser (tb_plugin 0.4.3) on this trace gives, per step (µs): Kernel 98420,
    98471, 98654, 98580, 98645, 98439; DataLoader 46723 for step 16; GPU utilization 63.607 %,
    est. SM efficiency 62.651 %, est. achieved occupancy 49.136 % (benchmarks/tb_plugin_compare.py)."""
    eff = ingest_trace(trace_path("v100_resnet50_train_pt19"), workers=1).facts["efficiency"]
    assert [s["step"] for s in eff["steps"]] == [16, 17, 18, 19, 20, 21]
    assert [round(s["kernel_us"]) for s in eff["steps"]] == [98420, 98471, 98654, 98580, 98645, 98439]
    assert round(eff["steps"][0]["dataloader_us"]) == 46723 and round(eff["steps"][0]["total_us"]) == 171772
    (device,) = eff["devices"]
    assert device["gpu_utilization_pct"] == pytest.approx(63.607, abs=0.001)
    assert device["sm_efficiency_pct"] == pytest.approx(62.651, abs=0.001)
    assert device["achieved_occupancy_pct"] == pytest.approx(49.136, abs=0.001)


def test_report_writes_steps_and_efficiency(tmp_path: Path, small) -> None:
    trace = tmp_path / "small.json"
    trace.write_text(json.dumps(_doc()))
    out = tmp_path / "out"
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps[["step", "device", "kernel_us", "other_us", "gpu_utilization_pct"]].values.tolist() == [
        [1, 0, 50.0, 25.0, 50.0]
    ]
    report = json.loads((out / "report.json").read_text())
    (device,) = report["efficiency"]["devices"]
    assert device["sm_efficiency_pct"] == pytest.approx(40.0) and report["files"]["steps"] == "steps.parquet"
    assert "GPU efficiency" in (out / "report.html").read_text()


def test_kinetos_zero_occupancy_of_a_kernel_that_ran_is_replaced_by_the_estimate(tmp_path: Path) -> None:
    """Kineto records 0 % for a kernel of more than 48 KiB of shared memory (its calculator lacks the
    opt-in limit). D: 80 blocks of 1,024 threads, 32 registers, 64 KiB shared on a V100 (96 KiB per
    SM): one block per SM (98,304 // 65,536), 80/80 = 1 block per SM → min(1, 1)·1,024/2,048 = 50 %,
    estimated. E: 1 block of 32 threads recorded 0: 1/80 · 32/2,048 = 0.02 % — Kineto's 0 is its
    rounding there and stays recorded."""
    zero = {"est. achieved occupancy %": 0, "registers per thread": 32}
    events = _kernel("cutlass_fprop_64k_smem", 10, 20, 1, 80, 1024, **{**zero, "shared memory": 65536})
    events += _kernel("tiny_kernel", 40, 5, 2, 1, 32, **{**zero, "shared memory": 0})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [V100], "traceEvents": events}))
    k = ingest_trace(path, workers=1).frame.set_index("correlation")
    assert (k.loc[1, "est_occupancy_pct"], str(k.loc[1, "occupancy_source"])) == (50.0, "estimated")
    assert (k.loc[2, "est_occupancy_pct"], str(k.loc[2, "occupancy_source"])) == (0.0, "recorded")


def test_wave_efficiency_is_the_share_of_the_waves_slots_used(tmp_path: Path) -> None:
    """V100, 256 threads and 32 registers a block: 8 blocks per SM (64 warps / 8), 640 slots a wave.
    641 blocks: 641/640 = 1.0016 waves in 2 → 50.08 % of their slots used (its last wave holds 1)."""
    events = _kernel("k", 10, 20, 1, 641, 256, **{"registers per thread": 32, "shared memory": 0})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [V100], "traceEvents": events}))
    k = ingest_trace(path, workers=1).frame
    assert k.loc[0, "waves"] == pytest.approx(641 / 640)
    assert k.loc[0, "wave_efficiency_pct"] == pytest.approx(100 * 641 / 640 / 2)


def test_roofline_likely_cause_by_hand() -> None:
    """Group 1: kernels of 10 µs at 20 % occupancy and 30 µs at 40 % → (200 + 1200) / 40 = 35 %;
    waves 0.5 (a wave's slots 50 % used) over all 40 µs; SOL 30 % (< 50): partial wave only (35 ≥ 25).
    Group 2: 10 % occupancy, 2.2 waves (2.2/3 = 73.3 % of 3 waves' slots), SOL 20 %: both causes.
    Group 3: the same as 2 at SOL 80 %: no cause named.
    Tensor cores: group 1's 10 µs of the 40 known = 25 %; groups 2 and 3 unknown only: null."""
    from kernel_atlas.ingest.efficiency import efficiency_sums, roofline_efficiency

    kernels = pd.DataFrame(
        {
            "dur_us": [10.0, 30.0, 5.0],
            "est_occupancy_pct": [20.0, 40.0, 10.0],
            "waves": [0.5, 0.5, 2.2],
            "wave_efficiency_pct": [50.0, 50.0, 100 * 2.2 / 3],
            "tensor_core": pd.array([True, False, pd.NA], dtype="boolean"),
        }
    )
    sums = efficiency_sums(kernels)
    table = pd.DataFrame([sums.iloc[:2].sum(), sums.iloc[2], sums.iloc[2]], index=[0, 1, 2]).assign(
        total_us=[40.0, 5.0, 5.0], sol_pct=[30.0, 20.0, 80.0]
    )
    out = roofline_efficiency(table)
    assert out["est_occupancy_pct"].tolist() == pytest.approx([35.0, 10.0, 10.0])
    assert out["waves"].tolist() == pytest.approx([0.5, 2.2, 2.2])
    assert out["tensor_core_pct"].tolist()[0] == pytest.approx(25.0)
    assert out["tensor_core_pct"].iloc[1:].isna().all()
    assert out["likely_cause"].tolist()[:2] == [
        "grid fills 50% of one wave",
        "low occupancy (est. 10%); 2.20 waves: 73% of their slots used",
    ]
    assert pd.isna(out["likely_cause"].iloc[2])


def test_shares_of_full_kernels_stay_at_100_percent() -> None:
    """Two kernels of 0.1 and 0.7 µs, both at 100 % occupancy, in full last waves, on tensor
    cores: the time-weighted means are (100·0.1 + 100·0.7) / 0.8, which floats sum to
    100.00000000000001 — 100 % exactly, as no share passes it. The trust line's share of GPU
    time with a cost likewise (149.042 µs costed of 149.04199999999997: 100 %, 0 µs uncosted)."""
    from kernel_atlas.analysis.trust import trust_facts
    from kernel_atlas.ingest.efficiency import efficiency_sums, roofline_efficiency

    kernels = pd.DataFrame(
        {
            "dur_us": [0.1, 0.7],
            "est_occupancy_pct": [100.0, 100.0],
            "waves": [1.0, 1.0],
            "wave_efficiency_pct": [100.0, 100.0],
            "tensor_core": pd.array([True, True], dtype="boolean"),
        }
    )
    assert (100 * 0.1 + 100 * 0.7) / (0.1 + 0.7) > 100.0  # what the sums gave
    table = pd.DataFrame([efficiency_sums(kernels).sum()]).assign(total_us=[0.1 + 0.7], sol_pct=[90.0])
    out = roofline_efficiency(table)
    assert out[["est_occupancy_pct", "wave_efficiency_pct", "tensor_core_pct"]].iloc[0].tolist() == [
        100.0,
        100.0,
        100.0,
    ]
    roofline = pd.DataFrame(columns=["role", "launcher", "note", "op_time_us"])
    trust = trust_facts(roofline, {"gpu_time_us": 149.04199999999997, "costed_time_us": 149.042}, {})
    assert (trust["costed_pct"], trust["uncosted_time_us"]) == (100.0, 0.0)


def test_a_window_reads_only_the_kernels_that_reach_into_it() -> None:
    """Kernels (rows out of order) A [0,100] bps 1 occupancy 50; B [10,20] bps .5 occ 10;
    C [200,210] bps 2 occ 20; D [205,300] bps .25 occ 40, tensor cores. A starts first but ends
    last among the early ones: a window late in it still sees it.
    [50,60]: A alone 10 µs → 100 % busy, SM level 1 → 100 %, occupancy 50, tensor 0.
    [150,190]: nothing runs → 0 % busy, no SM efficiency, occupancy or tensor share.
    [95,205]: A 5 + C 5 → 10 of 110 µs = 9.0909 %; SM: A 1·5, C min(2,1)·5 → 9.0909 %;
    occupancy (50·5 + 20·5)/10 = 35; tensor 0.
    [190,250]: C 10, D 45, union [200,250] → 50/60 = 83.333 %; SM: C+D ≥ 1 over [205,210] and C
    alone over [200,205] → 10, D .25·40 = 10 → 20/60 = 33.333 %; occupancy (20·10 + 40·45)/55
    = 36.3636; tensor D's 45 of 55 = 81.818 %."""
    from kernel_atlas.ingest.efficiency import DeviceKernels

    frame = pd.DataFrame(
        {
            "ts_us": [200.0, 0.0, 205.0, 10.0],
            "dur_us": [10.0, 100.0, 95.0, 10.0],
            "recorded_blocks_per_sm": [None, None, None, None],
            "blocks_per_sm": [2.0, 1.0, 0.25, 0.5],
            "est_occupancy_pct": [20.0, 50.0, 40.0, 10.0],
            "tensor_core": [False, False, True, False],
        }
    )
    device = DeviceKernels.of(frame)
    late_in_a = device.metrics(50, 60)
    assert late_in_a == pytest.approx(
        {
            "gpu_utilization_pct": 100.0,
            "sm_efficiency_pct": 100.0,
            "achieved_occupancy_pct": 50.0,
            "tensor_core_time_pct": 0.0,
        }
    )
    # no kernel in the window: no SM busy and none occupied (0, not unknown); no kernel time to share
    assert device.metrics(150, 190) == {
        "gpu_utilization_pct": 0.0,
        "sm_efficiency_pct": 0.0,
        "achieved_occupancy_pct": 0.0,
        "tensor_core_time_pct": None,
    }
    assert device.metrics(95, 205) == pytest.approx(
        {
            "gpu_utilization_pct": 100 * 10 / 110,
            "sm_efficiency_pct": 100 * 10 / 110,
            "achieved_occupancy_pct": 35.0,
            "tensor_core_time_pct": 0.0,
        }
    )
    assert device.metrics(190, 250) == pytest.approx(
        {
            "gpu_utilization_pct": 100 * 50 / 60,
            "sm_efficiency_pct": 100 * 20 / 60,
            "achieved_occupancy_pct": 2000 / 55,
            "tensor_core_time_pct": 100 * 45 / 55,
        }
    )


def test_step_split_at_epoch_timestamps_is_exact() -> None:
    """At T = 2**42 + 2**-10 µs (an epoch-like timestamp: 2**-10 µs between neighbouring floats)
    a memcpy covers [T, T + 2**-10) and a kernel [T + 2**-10, T + 5); the step is [T, T + 10).
    By hand: kernel 5 - 2**-10 = 4.9990234375 µs, memcpy 0.0009765625 µs, the rest (5 µs) is no
    role. The piece [T, T + 2**-10) is one float wide: its midpoint rounds to T + 2**-10, where
    the kernel starts, so a piece judged by its midpoint went to the kernel (5 µs, memcpy 0).
    A step starting at T + 2**-10 holds none of the memcpy (a midpoint put it inside)."""
    from kernel_atlas.ingest.step_split import ROLES, HostRoles, step_split

    ulp = 2.0**-10
    t = 2.0**42 + ulp
    assert t + ulp / 2 == t + ulp  # the midpoint rounds up: the case that was wrong
    frame = pd.DataFrame(
        {
            "ts_us": [t, t + ulp],
            "dur_us": [ulp, 5.0 - ulp],
            "kind": pd.Categorical(["memcpy", "kernel"]),
            "external_id": pd.array([None, None], dtype="Int64"),
        }
    )
    none = (np.empty(0), np.empty(0))
    roles = HostRoles(none, none, none, none, np.empty((0, 3)), np.empty(0), None)
    split = step_split(frame, roles, np.array([[0.0, t, t + 10.0]]))
    late = step_split(frame, roles, np.array([[0.0, t + ulp, t + 10.0]]))  # the memcpy ends where the step starts
    assert late[0, ROLES.index("memcpy")] == 0.0 and late[0, ROLES.index("kernel")] == 4.9990234375
    assert dict(zip(ROLES, split[0].tolist(), strict=True)) == {
        "kernel": 4.9990234375,
        "memcpy": 0.0009765625,
        "memset": 0.0,
        "communication": 0.0,
        "runtime": 0.0,
        "dataloader": 0.0,
        "cpu_exec": 0.0,
        "other": 5.0,
    }


@pytest.mark.parametrize("block", [[0, 1, 1], [-32, 1, 1], [2**32, 2**32, 1]])
def test_blocks_of_no_threads_or_past_int64_estimate_nothing(tmp_path: Path, block: list[int], recwarn) -> None:
    """A block of 0 threads divided by zero (numpy's RuntimeWarning on stderr), `[-32, 1, 1]`
    read as 32 threads (the sign dropped), and 2^32·2^32 wrapped int64 to 0: the first two say
    nothing of the threads (no estimate), the third is 2^64 threads — more than an SM holds,
    so no block fits (0 blocks, 0 %)."""
    doc = _doc()
    doc["traceEvents"][3]["args"]["block"] = block  # kernel A
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    k = ingest_trace(path, workers=1).frame.set_index("correlation")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    if block[0] > 2**31:
        assert k.loc[1, ["max_blocks_per_sm", "est_occupancy_pct"]].tolist() == [0.0, 0.0]
    else:
        assert k.loc[1, ["max_blocks_per_sm", "est_occupancy_pct"]].isna().all()
    assert k.loc[2, "est_occupancy_pct"] == 12.5  # B as before


def test_a_recorded_occupancy_beyond_100_and_a_block_no_sm_holds(tmp_path: Path) -> None:
    """C's recorded occupancy of 10^6 % is no share: its estimate stands instead, min(32, 0.5)·64
    /2048 = 1.5625 %. A with 2^17 bytes of shared memory per block fits no SM (96 KiB): 0
    blocks, so no waves (160/(80·0) was inf, copied into the report's tables)."""
    doc = _doc()
    doc["traceEvents"][-2]["args"]["est. achieved occupancy %"] = 1e6  # kernel C
    doc["traceEvents"][3]["args"]["shared memory"] = 1 << 17  # kernel A
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    k = ingest_trace(path, workers=1).frame.set_index("correlation")
    assert k.loc[3, "est_occupancy_pct"] == 1.5625 and str(k.loc[3, "occupancy_source"]) == "estimated"
    assert (
        k.loc[1, "max_blocks_per_sm"] == 0.0 and pd.isna(k.loc[1, "waves"]) and pd.isna(k.loc[1, "wave_efficiency_pct"])
    )


def test_summary_lists_the_first_steps_of_many(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five ProfilerSteps of one 20 µs kernel each (step k over [100k, 100k + 100]); with
    MAX_STEP_ROWS = 2, summary.json lists steps 0 and 1 (steps_total 5), steps.parquet holds
    those two, the per-device line still counts 5 steps, and a warning says so. 400,000 such
    steps made a 241 MB summary.json and a 1.7 GB ingest."""
    from kernel_atlas.ingest import pipeline, step_split

    monkeypatch.setattr(step_split, "MAX_STEP_ROWS", 2)
    monkeypatch.setattr(pipeline, "MAX_STEP_ROWS", 2)
    events = []
    for k in range(5):
        events.append(_x("user_annotation", f"ProfilerStep#{k}", 100 * k, 100, {}))
        events += _kernel("volta_sgemm_128x64_nn", 100 * k + 10, 20, k + 1, 160, 256)
    trace = tmp_path / "steps.json"
    trace.write_text(json.dumps({"deviceProperties": [V100], "traceEvents": events}))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "5 steps: the split and metrics of the first 2 are listed" in result.output
    efficiency = json.loads((out / "summary.json").read_text())["traces"][0]["efficiency"]
    assert [s["step"] for s in efficiency["steps"]] == [0, 1] and efficiency["steps_total"] == 5
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    assert pd.read_parquet(out / "steps.parquet")["step"].tolist() == [0, 1]
    devices = json.loads((out / "report.json").read_text())["efficiency"]["devices"]
    assert [d["steps"] for d in devices] == [5]


def test_amd_lds_bounds_the_occupancy_where_it_is_recorded(tmp_path: Path) -> None:
    """MI300X as above, 4,864 blocks of 256 (16 per CU, 4 waves each): the thread bound holds 8
    blocks, 100 %. With 16,384 B of LDS a block (recorded on the launch call, campaign AZ 1: taken
    onto its kernel), 65,536 / 16,384 = 4 blocks fit a CU: 4·256/2048 = 50 %, waves 4,864/(304·4) = 4
    (it had stayed at the thread bound's 100 %)."""
    props = {"id": 0, "name": "AMD Instinct MI300X", "numSms": 304, "warpSize": 64, "maxThreadsPerMultiprocessor": 2048}
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100, {}),
        *_kernel("attn_fwd", 10, 10, 1, 4864, 256, **{"shared memory": 16384}),
        *_kernel("attn_fwd", 30, 10, 2, 4864, 256),  # none recorded: the thread bound alone
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [props], "traceEvents": events}))
    rows = ingest_trace(path, workers=1).frame.sort_values("ts_us")
    assert rows["max_blocks_per_sm"].tolist() == [4.0, 8.0]
    assert rows["est_occupancy_pct"].tolist() == [50.0, 100.0]
    assert rows["waves"].tolist() == [4.0, 2.0]
