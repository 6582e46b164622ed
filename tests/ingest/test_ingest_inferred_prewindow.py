"""Kernels launched before the profiling window (hand-built traces): on ROCm, which writes a
kernel's grid/block only when its launch is in the trace, by name when every linked kernel of
that name has one grid and block; a kernel linked with several signatures by the kernels that
ran before and after it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest.infer import WHY_NO_GEOMETRY
from kernel_atlas.ingest.pipeline import ingest_trace


def _trace(tmp_path: Path, second_grid: list[int]) -> Path:
    events: list[dict] = []
    for i, grid in enumerate(([64, 1, 1], second_grid)):
        ts = 100.0 + 50 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 20,
                "args": {
                    "External id": 10 + i,
                    "Input Dims": [[64, 32], [32, 16]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 3,
                "args": {"External id": 10 + i, "correlation": 500 + i},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "Cijk_gemm",
                "pid": 2,
                "tid": 0,
                "ts": 1000.0 + 50 * i,
                "dur": 10,
                "args": {"device": 0, "stream": 0, "correlation": 500 + i, "grid": grid, "block": [256, 1, 1]},
            },
        ]
    # launched before the window: its runtime event is absent, and ROCm wrote no grid/block
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "Cijk_gemm",
            "pid": 2,
            "tid": 0,
            "ts": 900.0,
            "dur": 10,
            "args": {"device": 0, "stream": 0, "correlation": 400},
        }
    )
    path = tmp_path / "rocm.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}]}, handle)
    return path


def test_pre_window_kernel_without_geometry_borrows_by_name(tmp_path: Path) -> None:
    result = ingest_trace(_trace(tmp_path, [64, 1, 1]))
    row = result.frame[result.frame["correlation"] == 400].iloc[0]
    assert bool(row["shapes_inferred"]) and row["launcher"] == "aten::mm"
    assert json.loads(row["input_dims"]) == [[64, 32], [32, 16]]


def test_not_when_the_name_runs_with_several_grids(tmp_path: Path) -> None:
    result = ingest_trace(_trace(tmp_path, [128, 1, 1]))
    row = result.frame[result.frame["correlation"] == 400].iloc[0]
    assert not bool(row["shapes_inferred"]) and pd.isna(row["input_dims"])
    assert result.facts["shapes_inferred"]["not_inferred"] == {WHY_NO_GEOMETRY: 1}


def _kernel(name: str, ts: float, corr: int, grid: list[int] | None = None) -> dict:
    args: dict = {"device": 0, "stream": 7, "correlation": corr}
    if grid:
        args |= {"grid": grid, "block": [128, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 5, "args": args}


def _neighbour_trace(tmp_path: Path, before: str, after: str, rocm: bool = False) -> Path:
    # kernel X (grid 4, block 128) is linked twice: aten::mm [64,32]·[32,16] between P1 and N1, and
    # aten::mm [128,32]·[32,16] between P2 and N2; a copy of X launched before the window runs between
    # `before` and `after` (those have no launch in the trace either)
    events: list[dict] = []
    for i, (p, n, m) in enumerate((("P1", "N1", 64), ("P2", "N2", 128))):
        ts = 1000.0 + 100 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 20,
                "args": {"External id": 10 + i, "Input Dims": [[m, 32], [32, 16]], "Input type": ["float", "float"]},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 3,
                "args": {"External id": 10 + i, "correlation": 500 + i},
            },
            _kernel(p, 2000.0 + 100 * i, 900 + 10 * i, [1, 1, 1]),
            _kernel("X", 2010.0 + 100 * i, 500 + i, [4 + 4 * i * rocm, 1, 1]),
            _kernel(n, 2020.0 + 100 * i, 901 + 10 * i, [1, 1, 1]),
        ]
    events += [
        _kernel(before, 100.0, 800, [1, 1, 1]),
        _kernel("X", 110.0, 801, None if rocm else [4, 1, 1]),
        _kernel(after, 120.0, 802, [1, 1, 1]),
    ]
    path = tmp_path / "neighbours.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return path


def test_several_signatures_resolved_by_the_neighbouring_kernels(tmp_path: Path) -> None:
    from kernel_atlas.ingest.infer import LINK_BY_NEIGHBOURS

    frame = ingest_trace(_neighbour_trace(tmp_path, "P2", "N2")).frame
    row = frame[frame["correlation"] == 801].iloc[0]
    assert row["link"] == LINK_BY_NEIGHBOURS and json.loads(row["input_dims"]) == [[128, 32], [32, 16]]
    # between kernels that never ran around X in the window: still ambiguous, nothing borrowed
    frame = ingest_trace(_neighbour_trace(tmp_path, "P1", "N2")).frame
    row = frame[frame["correlation"] == 801].iloc[0]
    assert not bool(row["shapes_inferred"]) and pd.isna(row["input_dims"])


def test_rocm_kernel_of_several_grids_takes_its_neighbours_grid(tmp_path: Path) -> None:
    # as above, but the two linked X run with grids 4 and 8, and the pre-window one has none (ROCm)
    frame = ingest_trace(_neighbour_trace(tmp_path, "P2", "N2", rocm=True)).frame
    row = frame[frame["correlation"] == 801].iloc[0]
    assert bool(row["shapes_inferred"]) and json.loads(row["input_dims"]) == [[128, 32], [32, 16]]


def _comms_trace(tmp_path: Path, sizes: list[int], early_grid: list[int] | None = None) -> Path:
    """A ROCm NCCL stream: in the window, record_param_comms ops launching ncclDevKernel_Generic
    with the messages `sizes` (bf16, 8 ranks) in turn; before it, two kernels of that name whose
    launches (and so grid, block and message) are not in the trace."""
    events: list[dict] = []
    for i, nelems in enumerate(sizes):
        ts, corr = 1000.0 + 100 * i, 700 + i
        params = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems}
        params |= {"Group size": 8, "dtype": "BFloat16"}
        op = {"External id": 50 + i, "Input Dims": [[nelems]], "Input type": ["c10::BFloat16"], **params}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 20},
            {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 5, "dur": 3},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Generic", "pid": 2, "tid": 4, "ts": 5000.0 + 100 * i},
        ]
        events[-3]["args"] = op
        events[-2]["args"] = {"External id": 50 + i, "correlation": corr}
        kernel = {"device": 0, "stream": 4, "correlation": corr, "grid": [56, 1, 1], "block": [256, 1, 1], **params}
        events[-1] |= {"dur": 40, "args": kernel}
    for j, ts in enumerate((4700.0, 4800.0)):  # before the window: no launch, no grid, no message
        args = {"device": 0, "stream": 4, "correlation": 900 + j}
        if early_grid is not None:  # CUDA records the grid even without the launch
            args |= {"grid": early_grid, "block": [256, 1, 1]}
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclDevKernel_Generic",
                "pid": 2,
                "tid": 4,
                "ts": ts,
                "dur": 40,
                "args": args,
            }
        )
    path = tmp_path / "comms.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return path


def test_pre_window_collective_takes_its_place_in_the_streams_repeating_sequence(tmp_path: Path) -> None:
    # in the window: 1000, 64, 1000, 64 elements (period 2, twice); the kernel just before the first
    # (ts 4800) takes the period's last (64), the one before it (ts 4700) the first (1000)
    frame = ingest_trace(_comms_trace(tmp_path, [1000, 64, 1000, 64])).frame
    early = frame[frame["ts_us"] < 5000].sort_values("ts_us")
    assert early["link"].tolist() == ["inferred: same kernel, its stream's repeating sequence"] * 2
    assert early["msg_in_nelems"].tolist() == [1000, 64]
    assert early["collective"].tolist() == ["allreduce", "allreduce"]
    assert early["input_dims"].tolist() == ["[[1000]]", "[[64]]"]


def test_not_placed_when_the_sequence_does_not_repeat_twice(tmp_path: Path) -> None:
    # 1000, 64, 1000: no period seen twice through the whole window (2 needs four kernels)
    frame = ingest_trace(_comms_trace(tmp_path, [1000, 64, 1000])).frame
    early = frame[frame["ts_us"] < 5000]
    assert early["shapes_inferred"].sum() == 0 and early["msg_in_nelems"].isna().all()


def test_not_placed_when_a_recorded_grid_disagrees_with_the_place(tmp_path: Path) -> None:
    # the linked kernels ran with grid [56, 1, 1]; the two before the window recorded [8, 1, 1]:
    # the window's sequence does not continue before it, and neither is placed
    frame = ingest_trace(_comms_trace(tmp_path, [1000, 64, 1000, 64], early_grid=[8, 1, 1])).frame
    early = frame[frame["ts_us"] < 5000]
    assert early["shapes_inferred"].sum() == 0 and early["msg_in_nelems"].isna().all()
    # with the grid they share, both are placed as on ROCm
    frame = ingest_trace(_comms_trace(tmp_path, [1000, 64, 1000, 64], early_grid=[56, 1, 1])).frame
    assert frame[frame["ts_us"] < 5000].sort_values("ts_us")["msg_in_nelems"].tolist() == [1000, 64]


@pytest.mark.parametrize(
    ("sequence", "period"),
    [
        ("abcabc", 3),
        ("abcab", None),  # a period of 3 seen less than twice
        ("aaaa", 1),
        ("abab" + "a", 2),
        ("abcd", None),
        ("", None),
        ("a", None),
        ("abaaba", 3),
    ],
)
def test_the_smallest_repeating_period(sequence: str, period: int | None) -> None:
    from kernel_atlas.ingest.infer import smallest_period

    assert smallest_period(list(sequence)) == period
