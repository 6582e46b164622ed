"""A CUDA capture names no kernel, so its launches pair with the replayed kernels by order and
count. A capture whose ops ran in another order (campaign BR 1) was attached pair by pair unless
most pairs disagreed across categories: a MulFunctor kernel took aten::mm's launcher and shapes
(costed as a 4.19 MFLOP GEMM), a Mul kernel aten::add's — and the summary said 100 %. Two pairs
that cross (a kernel named after another launch's op, whose own kernel is named after other work)
show the order is off: the pairs placed by it are left out, said, and each replayed activity
left without a launch says why, with advice that does not ask for the capture given (BR 6).

Every expected value is read off the hand-built events below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.analysis.trust import trust_facts
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}]
MI300 = [{"id": 0, "name": "AMD Instinct MI300X", "numSms": 304}]
BF16 = "c10::BFloat16"
GEMM = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)"
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >>(int)"
)
CLAMP = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
    "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)>(int)"
)
RELU_TRITON = "triton_poi_fused_relu_0"
DIMS = {
    "aten::mm": [[64, 128], [128, 256]],
    "aten::add": [[64, 256], [64, 256], []],
    "aten::sub": [[64, 256], [64, 256], []],
    "aten::mul": [[64, 256], [64, 256]],
    "aten::div": [[64, 256], []],
    "aten::relu": [[64, 256]],
    RELU_TRITON: [[64, 256]],
}
KERNEL_OF = {"aten::mm": GEMM, "aten::add": ADD, "aten::mul": MUL, "aten::relu": CLAMP}
MISORDERED = (
    "the captured launches ran in another order than the replayed kernels (a kernel paired by order is "
    "named after another launch's op) and no kernel names pair them"
)
CAPTURE_ADVICE = "profile the graph capture too and pass it with `atlas ingest --capture`"


def _call(name: str, ts: float, corr: int, **args: object) -> dict[str, Any]:
    body = {"correlation": corr, **args}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5, "args": body}


def _pair(
    tmp_path: Path,
    captured: list[str],
    replayed: list[tuple[str, float]],
    rocm: bool = False,
) -> tuple[Path, Path]:
    """A capture of the ops `captured` (one launch each, in that order; on ROCm the launch names
    its kernel), and a replay running the kernels `replayed` (name, µs) under one graph launch."""
    begin, launch, end, graph = ("hip", "hipLaunchKernel", "hip", "hipGraphLaunch") if rocm else (
        "cuda", "cudaLaunchKernel", "cuda", "cudaGraphLaunch"
    )  # fmt: skip
    capture = [_call(f"{begin}StreamBeginCapture", 1000, 1)]
    for i, op in enumerate(captured):
        dims = DIMS[op]
        args = {"External id": 50 + i, "Input Dims": dims, "Input type": [BF16 if d else "Scalar" for d in dims]}
        capture.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": 1020 + 20 * i, "dur": 15})
        capture[-1]["args"] = args
        named = {"kernel": KERNEL_OF[op]} if rocm else {}
        capture.append(_call(launch, 1022 + 20 * i, 2 + i, **{"External id": 50 + i, **named}))
    capture.append(_call(f"{end}StreamEndCapture", 1020 + 20 * len(captured), 90))
    replay = [_call(graph, 110, 900)]
    ts = 140.0
    for name, dur in replayed:
        args = {"correlation": 900, "device": 0, "stream": 7, "grid": [16, 1, 1], "block": [128, 1, 1]}
        replay.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur})
        replay[-1]["args"] = args
        ts += dur + 1
    paths = (tmp_path / "replay.json", tmp_path / "capture.json")
    props = MI300 if rocm else H100
    for path, events in zip(paths, (replay, capture), strict=True):
        path.write_text(json.dumps({"deviceProperties": props, "record_shapes": 1, "traceEvents": events}))
    return paths


def _ingest(paths: tuple[Path, Path]) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    result = ingest_paths([paths[0]], captures=[paths[1]])
    rows = result.frame[result.frame["graph_launch"]].sort_values("ts_us").reset_index(drop=True)
    return rows, result.facts["traces"][0]["graphs"], result.warnings


def test_crossed_pairs_across_categories_attach_nothing(tmp_path: Path) -> None:
    """BR 1 repro A: capture mm, add, mul, mm; replay GEMM, add, GEMM, Mul. Only 2 of 4 pairs
    disagree (no majority): the Mul kernel had aten::mm's [64,128]x[128,256] (a GEMM's 4,194,304
    FLOP for a 16,384-element mul), the 3rd GEMM aten::mul's shapes."""
    rows, graphs, warnings = _ingest(
        _pair(
            tmp_path, ["aten::mm", "aten::add", "aten::mul", "aten::mm"], [(GEMM, 40), (ADD, 10), (GEMM, 40), (MUL, 10)]
        )
    )
    assert rows["launcher"].isna().all() and rows["input_dims"].isna().all()  # the Mul kernel had aten::mm's
    assert (graphs["matched"], graphs["unmatched"], graphs["with_shapes_pct"]) == (0, {MISORDERED: 1}, 0.0)
    assert set(rows["link"]) == {f"replayed from a CUDA/HIP graph that matched no captured graph: {MISORDERED}"}
    assert any(f"0 of 1 graphs matched a captured graph: 1 {MISORDERED}" in w for w in warnings)


@pytest.mark.parametrize(
    ("captured", "replayed"),
    [
        # BR 1 repro B: a Mul kernel ← aten::relu and the clamp kernel ← aten::mul (one category)
        (["aten::mm", "aten::add", "aten::relu", "aten::mul"], [GEMM, ADD, MUL, CLAMP]),
        # p4b: the Mul kernel ← aten::add, the Add kernel ← aten::mul
        (["aten::mm", "aten::add", "aten::mul"], [GEMM, MUL, ADD]),
    ],
)
def test_crossed_pairs_of_one_category_attach_nothing(tmp_path: Path, captured: list[str], replayed: list[str]) -> None:
    rows, graphs, _ = _ingest(_pair(tmp_path, captured, [(name, 10) for name in replayed]))
    assert rows["launcher"].isna().all() and rows["input_dims"].isna().all()
    assert (graphs["matched"], graphs["unmatched"], graphs["with_shapes_pct"]) == (0, {MISORDERED: 1}, 0.0)


def test_a_kernel_that_is_its_ops_own_is_no_contradiction(tmp_path: Path) -> None:
    """The classifier also disagrees on right pairs: an add kernel under aten::sub (sub is an add
    of -alpha), a Mul kernel under aten::div by a scalar, clamp under aten::relu. None crosses
    another pair (aten::add's and aten::mul's own kernels agree with them): all six attached."""
    captured = ["aten::mm", "aten::sub", "aten::relu", "aten::add", "aten::div", "aten::mul"]
    rows, graphs, _ = _ingest(_pair(tmp_path, captured, [(k, 10) for k in (GEMM, ADD, CLAMP, ADD, MUL, MUL)]))
    assert rows["launcher"].tolist() == captured
    assert [json.loads(d) for d in rows["input_dims"]] == [DIMS[op] for op in captured]
    assert (graphs["matched"], graphs["misordered"], graphs["with_shapes_pct"]) == (1, 0, 100.0)


def test_only_the_stretch_placed_by_the_wrong_order_is_left_out(tmp_path: Path) -> None:
    """The Inductor launch names its kernel (its op is named after it): mm, add before it are
    placed by one stretch of order, add, mul after it by another, which crosses (Mul ← aten::add,
    Add ← aten::mul). The first stretch and the named pair keep theirs: 40 + 10 + 20 of 80 µs."""
    captured = ["aten::mm", "aten::add", RELU_TRITON, "aten::add", "aten::mul"]
    replayed = [(GEMM, 40), (ADD, 10), (RELU_TRITON, 20), (MUL, 7), (ADD, 3)]
    rows, graphs, warnings = _ingest(_pair(tmp_path, captured, replayed))
    assert rows["launcher"].tolist()[:3] == ["aten::mm", "aten::add", RELU_TRITON]
    assert rows["launcher"].iloc[3:].isna().all() and rows["input_dims"].iloc[3:].isna().all()
    assert (graphs["matched"], graphs["unmatched"], graphs["misordered"]) == (1, {}, 2)
    assert graphs["with_shapes_pct"] == pytest.approx(100.0 * 70 / 80)  # 87.5 %
    left = "replayed from a CUDA/HIP graph: left unpaired in its matched captured graph"
    assert all(str(link).startswith(left) for link in rows["link"].iloc[3:])
    assert any(
        "1 of 1 graphs matched a captured graph, but 2 replayed activities of matched graphs" in w for w in warnings
    )


def _trust(tmp_path: Path, paths: tuple[Path, Path]) -> dict[str, Any]:
    out = tmp_path / "out"
    write_outputs(ingest_paths([paths[0]], captures=[paths[1]]), out)
    build_report(out, None, tmp_path / "r.html")
    return json.loads((out / "report.json").read_text())["trust"]


def test_the_note_and_advice_after_a_capture_say_what_it_did(tmp_path: Path) -> None:
    """BR 6, r4: a ROCm capture of mm, add, relu (named launches) and a replay of mm, add, Mul,
    relu. The Mul kernel is in no captured launch of the matched graph; it had the note of a
    replay with no capture and the advice to pass one with --capture."""
    paths = _pair(
        tmp_path, ["aten::mm", "aten::add", "aten::relu"], [(GEMM, 40), (ADD, 10), (MUL, 7), (CLAMP, 3)], True
    )
    rows, graphs, _ = _ingest(paths)
    assert graphs["matched"] == 1 and graphs["unpaired"] == 1
    assert rows["launcher"].tolist()[:2] == ["aten::mm", "aten::add"] and rows["launcher"].iloc[3] == "aten::relu"
    assert pd.isna(rows["launcher"].iloc[2])
    assert rows["link"].iloc[2].startswith("replayed from a CUDA/HIP graph: no launch of its matched captured graph")
    trust = _trust(tmp_path, paths)
    assert CAPTURE_ADVICE not in trust["advice"]
    assert any("profile the capture and the replay of the same code path" in a for a in trust["advice"])


def test_an_unmatched_graph_says_why_and_is_not_told_to_pass_a_capture(tmp_path: Path) -> None:
    """BR 6, p3: a CUDA capture of mm, add, relu given for a replay of a GEMM and a clamp: the
    kernel count differs, the graph stays unmatched. Its kernels said what a replay with no
    capture says, and were told to pass one."""
    paths = _pair(tmp_path, ["aten::mm", "aten::add", "aten::relu"], [(GEMM, 4), (CLAMP, 2)])
    rows, graphs, _ = _ingest(paths)
    why = "kernel count differs and the capture records no kernel names to place the difference"
    assert (graphs["matched"], graphs["unmatched"], graphs["unpaired"]) == (0, {why: 1}, 2)
    note = f"replayed from a CUDA/HIP graph that matched no captured graph: {why}"
    assert rows["link"].tolist() == [note, note]
    trust = _trust(tmp_path, paths)
    # its kernels were launched by the graph, not by an op missing from the trace
    assert trust["shapes_recorded"] == "yes"
    assert [(r["reason"], r["time_us"]) for r in trust["top_uncosted"]] == [(note, 6.0)]
    (advice,) = trust["advice"]
    assert advice.startswith("pass the capture of the graphs that were replayed") and "--capture" not in advice


def test_the_advice_to_pass_a_capture_is_kept_where_none_was_given() -> None:
    note = "replayed from a CUDA/HIP graph (no per-kernel launcher)"
    roofline = pd.DataFrame([("", "no shapes", note, 6.0)], columns=["launcher", "role", "note", "op_time_us"])
    trace = {"file": "r.json", "gpu_activities": 2, "with_launcher": 0, "with_shapes": 0, "unlinked": {note: 2}}
    trust = trust_facts(roofline, {"gpu_time_us": 6.0, "costed_time_us": 0.0}, {"traces": [trace]})
    assert (trust["shapes_recorded"], trust["advice"]) == ("yes", [CAPTURE_ADVICE])
