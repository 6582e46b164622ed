"""The critical path's time per bucket is its segments' sum (campaign BN 1): a joint path of
3,140 µs with 5 × 50 µs of all-reduce after the last arrival and a 50 µs collective edge carries
300.0 µs of communication, which `breakdown_pct` rounds to 9.55 % — 299.87 µs, the cap the
"hide communication" findings had taken."""

from __future__ import annotations

import pandas as pd

from kernel_atlas.analysis.critical_path import BUCKETS
from kernel_atlas.analysis.critical_segments import breakdown_pct, breakdown_us
from kernel_atlas.analysis.findings import path_communication


def test_the_communication_on_the_path_is_its_segments_sum() -> None:
    bounds = ["gpu_compute_bound"] * 6 + ["gpu_communication_bound"] * 6 + ["gpu_kernel_kernel_overhead"] * 6
    bounds += ["gpu_kernel_launch_overhead", "cpu_bound"]
    durations = [460.0] * 6 + [50.0] * 6 + [10.0] * 6 + [18.0, 2.0]  # 2,760 + 300 + 60 + 18 + 2 = 3,140
    segs = pd.DataFrame({"bound": pd.Categorical(bounds, categories=list(BUCKETS)), "dur_us": durations})
    summed = breakdown_us(segs)
    assert summed["gpu_communication_bound"] == 300.0 and summed["gpu_compute_bound"] == 2760.0
    assert summed["data_loading"] == 0.0 and sum(summed.values()) == 3140.0
    pct = breakdown_pct(segs)
    assert pct["gpu_communication_bound"] == 9.55  # 300 / 3,140 = 9.554 %, rounded
    path = {"rank": None, "joint_ranks": 4, "total_us": 3140.0, "breakdown_pct": pct, "breakdown_us": summed}
    assert path_communication(path) == (300.0, None)
