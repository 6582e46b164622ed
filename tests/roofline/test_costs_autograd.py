"""Convolutions whose call does not record what its cost needs, costed from the other op of its
autograd pair (same `Sequence number`): a hand-built trace, and PyTorch 1.9's ResNet-50 training
trace (../shared/traces), with every number derived by hand from the JSON as written below."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from kernel_atlas.roofline.analysis import analyse
from tests.support.hand_built import launch_and_kernel
from tests.support.traces import ingested

LISTS = ["GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"]


def _op(name: str, tid: int, ts: float, dur: float, ext: int, dims: list, types: list, seq: int, fwd: int) -> dict:
    args = {"External id": ext, "Input Dims": dims, "Input type": types}
    if seq >= 0:
        args |= {"Sequence number": seq, "Fwd thread id": fwd}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(tid: int, ts: float, corr: int, ext: int, kernel: str, kts: float, kdur: float) -> list[dict]:
    return launch_and_kernel(ts, corr, ext, kernel, kts, kdur, tid=tid, geometry={"grid": [8, 1, 1]})


def _trace(tmp_path: Path, *, forward: bool = True, other_thread: bool = False, seq: int = 7) -> pd.DataFrame:
    """A 3×3 convolution, stride 2, padding 1, in fp32: input [2,4,8,8], weight [6,4,3,3], output
    [2,6,4,4] ((8 + 2 − 3)//2 + 1 = 4), PyTorch 1.9 style: no Concrete Inputs. Forward ops on
    thread 1 with sequence number 7 (an `aten::add` before them shares it, as a batch norm's
    counter update does); the backward node on thread 2 with the same number and its two kernels'
    ops inside, which record `[]` for the input and weight size lists."""
    events = []
    if forward:
        events += [
            _op("aten::add", 1, 50, 5, 1, [[], []], ["float", "Scalar"], seq, 0),
            _op("aten::convolution", 1, 90, 70, 2, [[2, 4, 8, 8], [6, 4, 3, 3], []], ["float", "float", ""], seq, 0),
            _op(
                "aten::cudnn_convolution",
                1,
                100,
                50,
                3,
                [[2, 4, 8, 8], [6, 4, 3, 3]] + [[]] * 7,
                ["float"] * 2 + LISTS,
                seq,
                0,
            ),
            *_launch(1, 110, 11, 3, "implicit_convolve_sgemm", 1000, 40.0),
        ]
    if other_thread:  # a second forward thread whose own counter also reached 7
        events.append(_op("aten::mul", 3, 120, 5, 4, [[2, 4, 8, 8], []], ["float", "Scalar"], seq, 0))
    events += [
        _op("CudnnConvolutionBackward", 2, 500, 100, 20, [[2, 6, 4, 4]], ["float"], seq, 1),
        _op("aten::cudnn_convolution_backward_input", 2, 510, 30, 21, [[], [2, 6, 4, 4], [6, 4, 3, 3]] + [[]] * 7, ["GenericList", "float", "float", *LISTS], -1, -1),
        *_launch(2, 515, 12, 21, "dgrad_engine", 1100, 30.0),
        _op("aten::cudnn_convolution_backward_weight", 2, 550, 30, 22, [[], [2, 6, 4, 4], [2, 4, 8, 8]] + [[]] * 7, ["GenericList", "float", "float", *LISTS], -1, -1),
        *_launch(2, 555, 13, 22, "wgrad_splitK", 1200, 20.0),
    ]  # fmt: skip
    path = tmp_path / "conv.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return ingest_trace(path).frame


def test_a_convolution_and_its_gradients_are_costed_through_the_sequence_number(tmp_path: Path) -> None:
    frame = _trace(tmp_path)
    assert frame["sequence_number"].tolist() == [7, 7, 7]
    partners = [json.loads(p) for p in frame["autograd_partner"]]
    # the forward kernel's partner: the backward node; the backward kernels': the innermost forward op
    assert [p["op"] for p in partners] == ["CudnnConvolutionBackward"] + ["aten::cudnn_convolution"] * 2
    assert partners[0]["dims"] == [[2, 6, 4, 4]] and partners[1]["dims"][1] == [6, 4, 3, 3]
    kernels = analyse(frame, None).kernels.set_index("name")
    # MACs = N·K·P·Q·(C·R·S) = 2·6·4·4·(4·3·3) = 192·36 = 6912, the same for all three
    assert kernels["flops"].tolist() == [13_824.0] * 3
    # forward: input 512·4 + weight 216·4 read, output 192·4 written
    assert kernels.loc["implicit_convolve_sgemm", "bytes"] == 2048 + 864 + 768
    # data gradient: grad_output 768 + weight 864 read, grad_input [2,4,8,8] 2048 written
    assert kernels.loc["dgrad_engine", "bytes"] == 768 + 864 + 2048
    # weight gradient: grad_output 768 + input 2048 read, weight gradient 864 written
    assert kernels.loc["wgrad_splitK", "bytes"] == 768 + 2048 + 864
    assert (
        "from the backward node CudnnConvolutionBackward with sequence number 7"
        in (kernels.loc["implicit_convolve_sgemm", "formula"])
    )
    assert (
        "weight [6, 4, 3, 3] from the forward aten::cudnn_convolution with sequence number 7"
        in (kernels.loc["wgrad_splitK", "formula"])
    )


def test_without_the_forward_op_the_gradients_say_what_is_missing(tmp_path: Path) -> None:
    kernels = analyse(_trace(tmp_path, forward=False), None).kernels.set_index("name")
    assert kernels["flops"].isna().all()
    assert "weight's shape is not recorded" in kernels.loc["wgrad_splitK", "note"]
    assert "input's shape" in kernels.loc["dgrad_engine", "note"]


def test_sequence_numbers_anywhere_in_int64_link_the_same_pairs(tmp_path: Path) -> None:
    """A number near the top of int64 (2^63 − 2) pairs the forward op and the backward node as 7
    does (the lookup keys numbers by their place among the trace's, never by arithmetic on them)."""
    frame = _trace(tmp_path, seq=2**63 - 2)
    assert frame["sequence_number"].tolist() == [2**63 - 2] * 3
    partners = [json.loads(p) for p in frame["autograd_partner"]]
    assert [p["op"] for p in partners] == ["CudnnConvolutionBackward"] + ["aten::cudnn_convolution"] * 2
    assert [p["seq"] for p in partners] == [2**63 - 2] * 3
    assert [p["backward"] for p in partners] == [True, False, False]


def test_a_sequence_number_of_two_forward_threads_links_nothing(tmp_path: Path) -> None:
    frame = _trace(tmp_path, other_thread=True)
    assert frame["sequence_number"].tolist() == [7, 7, 7]
    assert frame["autograd_partner"].isna().all()
    kernels = analyse(frame, None).kernels.set_index("name")
    assert "weight's shape is not recorded" in kernels.loc["wgrad_splitK", "note"]
    assert "no backward node with its sequence number" in kernels.loc["implicit_convolve_sgemm", "note"]


@pytest.fixture(scope="module")
def pt19() -> pd.DataFrame:
    return analyse(ingested("v100_resnet50_train_pt19").frame, None).kernels


def test_pt19_resnet50_convolutions_from_the_raw_json(pt19: pd.DataFrame) -> None:
    main = pt19[(pt19["role"] == "main") & (pt19["kind"] == "kernel")]  # a call's memsets have their own bytes
    # CudnnConvolutionBackward (Sequence number 3016, Fwd thread id 1), Input Dims [[32, 2048, 7, 7]];
    # the forward aten::cudnn_convolution with sequence number 3016: [[32, 512, 7, 7], [2048, 512, 1, 1], …]
    # backward_weight (External id 25718): [[], [32, 2048, 7, 7], [32, 512, 7, 7], …]
    weight = main[(main["external_id"] == 25718) & (main["cpu_op"] == "aten::cudnn_convolution_backward_weight")]
    assert len(weight) == 1
    # 2·32·2048·7·7·(512·1·1) = 2·3,211,264·512
    assert weight["flops"].iloc[0] == 3_288_334_336
    # grad_output 3,211,264·4 + input 802,816·4 read, weight gradient 1,048,576·4 written
    assert weight["bytes"].iloc[0] == 12_845_056 + 3_211_264 + 4_194_304
    # backward_input (External id 25714): [[], [32, 2048, 7, 7], [2048, 512, 1, 1], …]
    data = main[(main["external_id"] == 25714) & (main["cpu_op"] == "aten::cudnn_convolution_backward_input")]
    assert data["flops"].iloc[0] == 3_288_334_336
    # grad_output 12,845,056 + weight 4,194,304 read, grad_input [32, 512, 7, 7] 3,211,264 written
    assert data["bytes"].iloc[0] == 12_845_056 + 4_194_304 + 3_211_264
    # the stem's 7×7 stride-2 forward (External id 24190, sequence number 2848): input [32, 3, 224, 224],
    # weight [64, 3, 7, 7], no stride recorded; CudnnConvolutionBackward 2848 received [32, 64, 112, 112]
    stem = main[(main["external_id"] == 24190) & (main["cpu_op"] == "aten::cudnn_convolution")]
    assert stem["flops"].iloc[0] == 2 * 32 * 64 * 112 * 112 * (3 * 7 * 7) == 7_552_892_928
    # input 4,816,896·4 + weight 9,408·4 read, output 25,690,112·4 written
    assert stem["bytes"].iloc[0] == 19_267_584 + 37_632 + 102_760_448


def test_an_uncosted_calls_helper_kernels_count_as_uncosted(tmp_path: Path) -> None:
    """An op without a cost model that launches two kernels (40 µs, then 25 µs: the longer is
    the call's main row, the other its helper), beside a costed-nothing op with one kernel of
    10 µs: the GPU time, 75 µs, is the costed 0 + no-model 65 (40 + 25, the whole call) + no
    shapes 10 (the kernel without an op call); the helper's 25 µs went uncounted before."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mystery_op", "pid": 1, "tid": 1, "ts": 100, "dur": 50,
         "args": {"External id": 1, "Input Dims": [[4, 4]], "Input type": ["float"]}},
        *launch_and_kernel(110, 11, 1, "mystery_kernel_a", 1000, 40.0),
        *launch_and_kernel(120, 12, 1, "mystery_kernel_b", 1050, 25.0),
        *launch_and_kernel(300, 13, 99, "lonely_kernel", 1100, 10.0),
    ]  # fmt: skip
    path = tmp_path / "mystery.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    analysis = analyse(ingest_trace(path).frame, None)
    roles = analysis.kernels.set_index("name")["role"].to_dict()
    assert roles == {"mystery_kernel_a": "no model", "mystery_kernel_b": "helper", "lonely_kernel": "no shapes"}
    facts = analysis.facts
    assert facts["gpu_time_us"] == 75.0
    assert (facts["costed_time_us"], facts["no_model_time_us"], facts["no_shape_time_us"]) == (0.0, 65.0, 10.0)
