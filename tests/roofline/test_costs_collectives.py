"""Collectives without NCCL's message fields on their kernels (older PyTorch: the tensor is recorded
on the `nccl:*` range inside `record_param_comms`), costed by nccl-tests' bus-bandwidth conventions;
values derived by hand from the shared traces' JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.hand_built import launch_and_kernel
from tests.support.traces import trace_path


def _analysis(tmp_path: Path, stem: str):
    return _analysis_of(tmp_path, trace_path(stem))


def _analysis_of(tmp_path: Path, trace: Path):
    from kernel_atlas.report.build import build_report

    stem = trace.name.split(".")[0]
    out = tmp_path / stem
    write_outputs(ingest_paths([trace]), out)
    return build_report(out, None, tmp_path / f"{stem}.html").analysis


def test_all_to_all_and_all_reduce_take_the_recorded_input(tmp_path: Path) -> None:
    # a100_diff_control: `nccl:all_to_all` (user_annotation) with "Input Dims": [[8, 1024, 8816]],
    # "Input type": ["float"] inside a record_param_comms op without shapes; distributedInfo world_size 8
    roofline = _analysis(tmp_path, "a100_diff_control").roofline
    comms = roofline[(roofline["category"] == "communication") & (roofline["role"] == "main")]
    all_to_all = comms[comms["input_dims"] == "[[8,1024,8816]]"]
    assert len(all_to_all) == 1
    # 8·1024·8816 = 72,220,672 floats · 4 B · (n−1)/n = 7/8 for all_to_all
    assert all_to_all["bytes"].iloc[0] == 72_220_672 * 4 * 7 / 8 == 252_772_352
    # `nccl:all_reduce` "Input Dims": [[45310188]] float: 45,310,188 · 4 B · 2·(n−1)/n = 14/8
    all_reduce = comms[comms["input_dims"] == "[[45310188]]"]
    assert all_reduce["bytes"].iloc[0] == 45_310_188 * 4 * 14 / 8 == 317_171_316
    assert "(message: the recorded input)" in all_reduce["formula"].iloc[0]
    # no communication kernel of the trace is left without a cost
    rest = roofline[(roofline["category"] == "communication") & ~roofline["role"].isin(["main", "helper"])]
    assert rest.empty


def test_rocm_memcpy_without_a_byte_count_takes_its_copy_ops_tensor(tmp_path: Path) -> None:
    # mi250_minitoy_train: "Memcpy HtoD (Host -> Device)" has no "bytes" arg; its launch
    # hipMemcpyWithStream records size "2560" (stop 66: read), and its launcher aten::copy_ records
    # Input Dims [[5,128],[5,128],[]] float: 5·128·4 = 2,560 bytes over the host link either way
    roofline = _analysis(tmp_path, "mi250_minitoy_train").roofline
    copy = roofline[roofline["name"].str.startswith("Memcpy HtoD")]
    assert copy["role"].tolist() == ["main"] and copy["bytes"].tolist() == [2560.0]
    assert copy["formula"].iloc[0] == "2560 bytes over the host link"
    # the launch's size taken away, the copy op's tensor gives the same bytes, said to be an estimate
    with gzip.open(trace_path("mi250_minitoy_train")) as handle:
        doc = json.loads(handle.read())
    for event in doc["traceEvents"]:
        if event.get("name") == "hipMemcpyWithStream":
            event["args"].pop("size", None)
    (tmp_path / "bare").mkdir()
    bare = tmp_path / "bare" / "mi250_bare.json"
    bare.write_text(json.dumps(doc))
    roofline = _analysis_of(tmp_path / "bare", bare).roofline
    copy = roofline[roofline["name"].str.startswith("Memcpy HtoD")]
    assert copy["bytes"].tolist() == [2560.0]
    assert "estimate: no byte count recorded" in copy["formula"].iloc[0]


def test_all_gather_takes_the_gathered_size(tmp_path: Path) -> None:
    # a100_cudagraph_rank0: an all_gather recorded with output [65536, 64] and input [8192, 64] float:
    # the message is the gathered output, 65536·64 floats, not scaled again; the group is
    # 65536/8192 = 8 ranks by its tensors (the trace's world_size is 16): bus factor 7/8
    roofline = _analysis(tmp_path, "a100_cudagraph_rank0").roofline
    gathers = roofline[
        (roofline["launcher"] == "nccl:_all_gather_base") & (roofline["input_dims"] == "[[65536,64],[8192,64],[]]")
    ]
    # the calls launched in the window, and apart (stop 62) those whose shapes were borrowed
    assert len(gathers) == 2 and gathers["note"].str.startswith("inferred: same kernel").sum() == 1
    assert gathers["bytes"].nunique() == 1
    gather = gathers[gathers["note"] == ""]
    assert gather["bytes"].iloc[0] == 65536 * 64 * 4 * 7 / 8 == 14_680_064
    assert "n=8 from the recorded tensors" in gather["formula"].iloc[0]
    # b200-style single input (one rank's part) is scaled by n: 8 ranks · [1, 25136] bf16, factor 7/8
    from kernel_atlas.roofline.analysis import _input_scale

    assert _input_scale("all_gather", 8) == 8.0 and _input_scale("all_reduce", 8) == 1.0


def _comm_call(ts: float, ext: int, c10d: str, nccl: str, dims: list | None, types: list | None) -> list[dict]:
    """A c10d op, its `nccl:*` range and one NCCL kernel; `dims`/`types` recorded on the c10d op
    (None: the trace recorded no shapes for it)."""
    shapes = {} if dims is None else {"Input Dims": dims, "Input type": types}
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    kernel = f"ncclKernel_{nccl.title().replace('_', '')}_RING_LL_Sum_float(ncclWorkElem)"
    return [
        {**op, "name": c10d, "ts": ts, "dur": 100, "args": {"External id": ext, **shapes}},
        {
            **op,
            "cat": "user_annotation",
            "name": f"nccl:{nccl}",
            "ts": ts + 10,
            "dur": 50,
            "args": {"External id": ext},
        },
        *launch_and_kernel(ts + 20, ext, ext, kernel, ts + 30, 40),
    ]


def test_group_size_from_the_tensors_else_the_world_size_and_said_so(tmp_path: Path) -> None:
    # distributedInfo world_size 8, no deviceProperties (the GPU is not named)
    trace = {
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "traceEvents": [
            # all_gather with output [4096] and input [1024] int8: n = 4096/1024 = 4, not the world's 8
            *_comm_call(
                0, 1, "c10d::_allgather_base_", "_all_gather_base", [[4096], [1024], []], ["signed char"] * 2 + [""]
            ),
            # all_reduce of [1000] float: its group is not recorded, the world size 8 stands in
            *_comm_call(200, 2, "c10d::allreduce_", "all_reduce", [[1000]], ["float"]),
            # an all_reduce recorded without shapes: nothing gives its message size
            *_comm_call(400, 3, "c10d::allreduce_", "all_reduce", None, None),
            # an older c10d all_reduce of a bucket recorded as a tensor list: its elements, at the trace's float dtype
            *_comm_call(600, 4, "c10d::allreduce_", "all_reduce", [[[6553600]]], ["TensorList"]),
        ],
    }
    path = tmp_path / "comms.json"
    path.write_text(json.dumps(trace))
    kernels = _analysis_of(tmp_path, path).kernels.sort_values("ts_us")
    gather, reduce, silent, bucket = (kernels.iloc[i] for i in range(4))
    # all_gather: 4096 · 1 B · (n−1)/n = 3/4 → 3,072 bytes
    assert gather["bytes"] == 3072.0 and "n=4 from the recorded tensors" in gather["formula"]
    # all_reduce: 1000 · 4 B · 2·(n−1)/n = 14/8 → 7,000 bytes, the assumed n named
    assert reduce["bytes"] == 7000.0 and "n=8: the trace's world size" in reduce["formula"]
    # uncosted for want of what the trace did not record: counted as "no shapes" (report.json no_shape_time_us)
    assert silent["role"] == "no shapes" and silent["note"].startswith("collective message size not recorded")
    # 6,553,600 elements, the trace's float (the only dtype recorded), · 2·7/8; was "message size not recorded"
    assert bucket["bytes"] == 6_553_600 * 4 * 1.75 and "its dtype assumed" in bucket["formula"]


def test_a_message_of_more_than_2_to_the_48_elements_is_no_size(tmp_path: Path) -> None:
    """NCCL kernels recording `In msg nelems` 2^62 (float, 4 B each) made 92 million TB/s and a
    SOL of 3·10^13 %; a message past 2^48 elements is no size: the call has no cost, said so.
    One of 2^20 elements beside it is costed as recorded: 2^20 · 4 B · 2·(8−1)/8 = 7,340,032 bytes."""
    kernel = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    fields = {"Collective name": "allreduce", "dtype": "Float", "Group size": 8}
    events = []
    for k, nelems in enumerate((2**62, 2**20)):
        call = launch_and_kernel(100 * k, k + 1, k + 1, kernel, 100 * k + 10, 40)
        call[1]["args"] |= {**fields, "In msg nelems": nelems, "Out msg nelems": nelems}
        events += call
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"traceEvents": events}))
    huge, real = (row for _, row in _analysis_of(tmp_path, path).kernels.sort_values("ts_us").iterrows())
    assert huge["role"] == "no model" and huge["note"].startswith("collective message of more than 2^48 elements")
    assert real["role"] == "main" and real["bytes"] == 7340032.0


def test_collectives_of_fp8_and_other_scalar_types_are_costed(tmp_path: Path) -> None:
    """NCCL records the message dtype as c10::ScalarType's name; fp8 (`Float8_e4m3fn`,
    `Float8_e5m2`), `Bool` and `Short` had no size ("message dtype not recorded"). By hand, each
    2^20 elements over 8 ranks: all_reduce fp8 2^20 · 1 B · 2·7/8 = 1,835,008 bytes; all_gather
    fp8 e5m2 2^20 · 1 B · 7/8 = 917,504; all_reduce Short 2^20 · 2 B · 14/8 = 3,670,016; Bool
    2^20 · 1 B · 14/8 = 1,835,008 (UInt32 and ComplexHalf below)."""
    cases = [
        ("ncclDevKernel_AllReduce_Sum_f8e4m3_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce", "Float8_e4m3fn"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allgather", "Float8_e5m2"),
        ("ncclDevKernel_AllReduce_Sum_i16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce", "Short"),
        ("ncclDevKernel_AllReduce_Sum_u8_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce", "Bool"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allgather", "UInt32"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allgather", "ComplexHalf"),
    ]
    events = []
    for k, (kernel, collective, dtype) in enumerate(cases):
        call = launch_and_kernel(100 * k, k + 1, k + 1, kernel, 100 * k + 10, 40)
        fields = {"Collective name": collective, "dtype": dtype, "Group size": 8}
        call[1]["args"] |= {**fields, "In msg nelems": 2**20, "Out msg nelems": 2**20}
        events += call
    path = tmp_path / "fp8.json"
    path.write_text(json.dumps({"traceEvents": events}))
    rows = _analysis_of(tmp_path, path).kernels.sort_values("ts_us")
    assert rows["role"].tolist() == ["main"] * 6
    # UInt32 and ComplexHalf all_gathers: 2^20 · 4 B · 7/8 = 3,670,016 each
    assert rows["bytes"].tolist() == [1_835_008.0, 917_504.0, 3_670_016.0, 1_835_008.0, 3_670_016.0, 3_670_016.0]


def test_rocm_memset_without_a_byte_count_takes_its_fill_ops_tensor(tmp_path: Path) -> None:
    """A ROCm memset has no `bytes` (stop 57's schema campaign): under `aten::zero_` of [1024] float
    it writes 1024·4 = 4,096 bytes; under another op (a workspace) it stays uncosted."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::zero_",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 20,
            "args": {"External id": 1, "Input Dims": [[1024]], "Input type": ["float"]},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipMemsetAsync",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 5,
            "args": {"External id": 1, "correlation": 10},
        },
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": 0,
            "ts": 12,
            "dur": 2,
            "args": {"External id": 1, "correlation": 10, "device": 0, "stream": 0},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mean",
            "pid": 1,
            "tid": 1,
            "ts": 30,
            "dur": 20,
            "args": {
                "External id": 2,
                "Input Dims": [[8, 1024], [], [], []],
                "Input type": ["float", "ScalarList", "Scalar", ""],
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipMemsetAsync",
            "pid": 1,
            "tid": 1,
            "ts": 35,
            "dur": 5,
            "args": {"External id": 2, "correlation": 11},
        },
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": 0,
            "ts": 42,
            "dur": 2,
            "args": {"External id": 2, "correlation": 11, "device": 0, "stream": 0},
        },
    ]
    trace = tmp_path / "memset.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "memset.atlas"
    write_outputs(ingest_paths([trace]), out)
    from kernel_atlas.report.build import build_report

    roofline = build_report(out, "mi300x", tmp_path / "memset.html").analysis.roofline.set_index("launcher")
    assert roofline.loc["aten::zero_", "bytes"] == 4096.0 and roofline.loc["aten::zero_", "role"] == "main"
    assert roofline.loc["aten::zero_", "formula"].endswith(
        "(estimate: no byte count recorded; the launching op's largest tensor)"
    )
    assert pd.isna(roofline.loc["aten::mean", "bytes"])


def test_a_group_of_calls_costed_differently_quotes_how_many_formulas_it_averages(tmp_path: Path) -> None:
    """Two device-to-device copies of 4,000 and 8,000 bytes under one `aten::copy_` recorded without
    shapes are one roofline row (name, launcher, shapes): its bytes are the mean call's,
    (2·4,000 + 2·8,000)/2 = 12,000, so its formula cannot be the first call's alone."""

    def copy(ts: float, corr: int, nbytes: int) -> list[dict]:
        return [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::copy_",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 20,
                "args": {"External id": corr},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaMemcpyAsync",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 5,
                "args": {"External id": corr, "correlation": corr},
            },
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy DtoD (Device -> Device)",
                "pid": 0,
                "tid": 7,
                "ts": ts + 12,
                "dur": 2,
                "args": {"External id": corr, "correlation": corr, "device": 0, "stream": 7, "bytes": nbytes},
            },
        ]

    trace = tmp_path / "copies.json"
    trace.write_text(json.dumps({"traceEvents": [*copy(0, 1, 4000), *copy(50, 2, 8000)]}))
    out = tmp_path / "copies.atlas"
    write_outputs(ingest_paths([trace]), out)
    from kernel_atlas.report.build import build_report

    (row,) = build_report(out, "h100-sxm", tmp_path / "c.html").analysis.roofline.to_dict("records")
    assert row["count"] == 2 and row["bytes"] == 12_000.0
    assert row["formula"] == "the mean of 2 formulas; the first: 4000 bytes read + written"
