"""Older Kineto schemas (PyTorch 1.8-1.12): a shared modern trace rewritten into each era's form
ingests to the same tables as the modern form; the real PyTorch 1.9 trace ingests fully.

`to_era` rewrites a modern trace the way each era wrote it (docs/kineto-schemas.md): category
names, `external id` in lower case, Python stacks as one `Call stack` string per op instead of
`python_function` events, GPU `tid` as "stream N", `ProfilerStep#N` as an `Operator`, flows.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.traces import raw_events, trace_path

# the categories each era wrote for today's (libkineto output_json.cpp / ActivityType.cpp history)
_CATS = {
    "pt19": {
        "cpu_op": "Operator",
        "user_annotation": "Operator",
        "cuda_runtime": "Runtime",
        "cuda_driver": "Runtime",
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "gpu_memset": "Memset",
        "gpu_user_annotation": "gpu_user_Annotation",
        "ac2g": "async",
    },
    "pt110": {
        "cuda_runtime": "Runtime",
        "cuda_driver": "Runtime",
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "gpu_memset": "Memset",
        "gpu_user_annotation": "gpu_user_Annotation",
        "ac2g": "async_gpu",
    },
    "pt111": {
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "gpu_memset": "Memset",
        "gpu_user_annotation": "gpu_user_Annotation",
        "ac2g": "async_cpu_to_gpu",
    },
    "pt112": {"ac2g": "async_cpu_to_gpu"},
}
_GPU = {"kernel", "gpu_memcpy", "gpu_memset"}
_STACK_STRINGS = {"pt19", "pt110"}  # `Call stack` strings instead of python_function events
_LOWER_EXTERNAL = {"pt19", "pt110"}  # `external id` on runtime calls and GPU activities
_NO_GPU_EXTERNAL = {"pt111"}  # GPU activities recorded no external id at all


def _python_stacks(events: list[dict[str, Any]]) -> dict[int, str]:
    """Per CPU-op event index, the `python_function` frames enclosing it on its thread,
    innermost first, `;`-joined (what older PyTorch recorded as `Call stack`)."""
    frames: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("cat") == "python_function" and e.get("ph") == "X":
            frames.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    stacks = {}
    for i, e in enumerate(events):
        if e.get("cat") != "cpu_op" or e.get("ph") != "X":
            continue
        start, end = e["ts"], e["ts"] + e.get("dur", 0)
        around = [f for f in frames.get((e["pid"], e["tid"]), []) if f[0] <= start and end <= f[1]]
        if around:  # innermost: the latest start, then the earliest end
            around.sort(key=lambda f: (-f[0], f[1]))
            stacks[i] = ";".join(f[2] for f in around)
    return stacks


def to_era(doc: dict[str, Any], era: str) -> dict[str, Any]:
    """`doc` (a modern Kineto trace) as `era` wrote it."""
    doc = copy.deepcopy(doc)
    events = doc["traceEvents"]
    stacks = _python_stacks(events) if era in _STACK_STRINGS else {}
    out = []
    for i, e in enumerate(events):
        cat = e.get("cat")
        if cat == "python_function" and era in _STACK_STRINGS:
            continue
        args = e.get("args")
        if i in stacks:
            args["Call stack"] = stacks[i]
        if isinstance(args, dict) and cat in (_GPU | {"cuda_runtime", "cuda_driver"}) and "External id" in args:
            ext = args.pop("External id")
            if era in _LOWER_EXTERNAL:
                args["external id"] = ext
            elif not (era in _NO_GPU_EXTERNAL and cat in _GPU):
                args["External id"] = ext
        if cat in _GPU and era in ("pt19", "pt110", "pt111") and isinstance(e.get("tid"), int):
            e["tid"] = f"stream {e['tid']}"
        if isinstance(args, dict) and era in _STACK_STRINGS:
            for key in ("Python id", "Python parent id", "Python module id"):
                args.pop(key, None)
        if cat in _CATS[era]:
            e["cat"] = _CATS[era][cat]
        out.append(e)
    doc["traceEvents"] = out
    return doc


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


_COMPARED = [
    "name",
    "kind",
    "ts_us",
    "dur_us",
    "device",
    "stream",
    "step",
    "correlation",
    "launch",
    "launch_ts_us",
    "launcher",
    "cpu_op",
    "link",
    "call_stack",
    "module",
    "input_dims",
    "input_types",
    "grid",
    "block",
    "bytes",
    "category",
    "op_mapping",
    "launch_dur_us",
]


def _table(path: Path, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    frame = ingest_trace(path, workers=1).frame
    return frame[[*_COMPARED, *extra]].reset_index(drop=True).astype(str)


@pytest.mark.parametrize("stem", ["h100_bert_small_infer", "a100_alexnet_train", "mi250_minitoy_train"])
@pytest.mark.parametrize("era", ["pt19", "pt110", "pt111", "pt112"])
def test_every_era_ingests_to_the_modern_tables(tmp_path: Path, stem: str, era: str) -> None:
    with gzip.open(trace_path(stem)) as handle:
        doc = json.load(handle)
    extra = ("external_id",) if era in _LOWER_EXTERNAL else ()  # pt111 recorded none on GPU activities
    modern = _table(trace_path(stem), extra)
    old = _table(_write(to_era(doc, era), tmp_path / f"{stem}_{era}.json.gz"), extra)
    assert len(modern) > 0
    pd.testing.assert_frame_equal(modern, old)


def test_rewrite_really_uses_the_old_forms(tmp_path: Path) -> None:
    """The rewritten trace holds none of today's names the reader looked for before."""
    with gzip.open(trace_path("h100_bert_small_infer")) as handle:
        doc = to_era(json.load(handle), "pt19")
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert not cats & {"kernel", "cpu_op", "cuda_runtime", "python_function", "user_annotation", "ac2g"}
    assert {"Kernel", "Operator", "Runtime"} <= cats
    assert any("Call stack" in e.get("args", {}) for e in doc["traceEvents"])


# --- the real PyTorch 1.9 trace (pytorch/kineto tb_plugin sample, ResNet-50 training on a V100) --


@pytest.fixture(scope="module")
def pt19() -> pd.DataFrame:
    return ingest_trace(trace_path("v100_resnet50_train_pt19"), workers=1).frame


def test_pt19_every_gpu_activity_is_ingested(pt19: pd.DataFrame) -> None:
    # counted with plain json: cat Kernel 8772, Memset 312, Memcpy 12 (the shared README agrees)
    cats = pd.Series([e.get("cat") for e in raw_events("v100_resnet50_train_pt19")]).value_counts()
    assert (cats["Kernel"], cats["Memset"], cats["Memcpy"]) == (8772, 312, 12)
    assert pt19["kind"].value_counts().to_dict() == {"kernel": 8772, "memset": 312, "memcpy": 12}
    assert pt19["launcher"].notna().all()  # every activity's cudaLaunchKernel/Memset/Memcpy is in the trace
    assert set(pt19["device"]) == {0} and set(pt19["stream"]) == {7}


def test_pt19_steps_include_the_backward_threads_launches(pt19: pd.DataFrame) -> None:
    # six `Operator` ranges ProfilerStep#16…#21 on the main thread; 9096 activities, 1516 each
    assert pt19["step"].value_counts().sort_index().to_dict() == {s: 1516 for s in range(16, 22)}


def test_pt19_one_kernel_by_hand(pt19: pd.DataFrame) -> None:
    """Kernel correlation 161625 (the 101st `Kernel` event): launched by cudaLaunchKernel at
    ts 1623143093568861 inside `aten::add_` (ts …568835, 41 µs) inside ProfilerStep#16, whose
    `Call stack` starts `…/torchvision/models/resnet.py(138): forward;…/module.py(1051): _call_impl`."""
    row = pt19.loc[pt19["correlation"] == 161625].iloc[0]
    assert (row["ts_us"], row["dur_us"], row["external_id"]) == (1623143093569024, 189, 24626)
    assert (row["launch"], row["launcher"], row["cpu_op"], row["step"]) == (
        "cudaLaunchKernel",
        "aten::add_",
        "aten::add_",
        16,
    )
    assert row["input_dims"] == "[[32,512,28,28],[32,512,28,28],[]]"
    # the op's 8 frames (install prefix removed), innermost first, after the launch and the op
    assert row["call_stack"] == (
        "cudaLaunchKernel <- aten::add_ <- torchvision/models/resnet.py(138): forward"
        " <- torch/nn/modules/module.py(1051): _call_impl <- torch/nn/modules/container.py(139): forward"
        " <- torch/nn/modules/module.py(1051): _call_impl <- torchvision/models/resnet.py(238): _forward_impl"
        " <- torchvision/models/resnet.py(249): forward <- torch/nn/modules/module.py(1051): _call_impl"
        " <- resnet50_profiler_api.py(46): <module>"
    )
    assert pd.isna(row["module"])  # PyTorch 1.9 recorded no nn.Module frames


# --- unknown categories and bare old forms, hand-built -------------------------------------


def _tiny(kernel_cat: str, kernel_args: dict[str, Any], tid: Any = 7) -> dict[str, Any]:
    return {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "Operator",
                "name": "ProfilerStep#3",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": 100,
                "args": {},
            },
            {
                "ph": "X",
                "cat": "Operator",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 10,
                "dur": 20,
                "args": {"External id": 5},
            },
            {
                "ph": "X",
                "cat": "Runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 12,
                "dur": 3,
                "args": {"correlation": 9, "external id": 5},
            },
            {
                "ph": "X",
                "cat": kernel_cat,
                "name": "volta_sgemm_128x64_nn",
                "pid": 0,
                "tid": tid,
                "ts": 40,
                "dur": 8,
                "args": {"correlation": 9, "external id": 5, **kernel_args},
            },
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler (0)",
                "pid": "Traces",
                "tid": "PyTorch Profiler",
                "ts": 0,
                "dur": 100,
                "args": {"Op count": 0},
            },
        ]
    }


def test_stream_from_a_stream_n_tid(tmp_path: Path) -> None:
    """A kernel with no `device`/`stream` args: device from pid 0, stream from tid "stream 7"."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_tiny("Kernel", {}, tid="stream 7")))
    frame = ingest_trace(path, workers=1).frame
    assert frame[["device", "stream", "step", "launcher"]].astype(str).values.tolist() == [["0", "7", "3", "aten::mm"]]


def test_unknown_category_with_gpu_events_is_named_not_no_gpu(tmp_path: Path) -> None:
    doc = _tiny("NPU_Kernel", {"device": 0, "stream": 7})
    doc["traceEvents"].append({**doc["traceEvents"][3], "ts": 60})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    result = ingest_trace(path, workers=1)
    assert result.frame.empty
    named = [w for w in result.warnings if "unknown categories" in w]
    assert len(named) == 1 and "2 GPU-looking events" in named[0] and "'NPU_Kernel' 2" in named[0]
    assert not any("no GPU events (kernels" in w for w in result.warnings)
    assert any("no GPU events of a known category" in w for w in result.warnings)


def test_known_non_gpu_categories_are_not_called_unknown() -> None:
    """a100_alexnet_train holds 41 `cuda_sync` events with device and stream: Kineto's sync markers."""
    from tests.support.traces import ingested

    assert not any("unknown categories" in w for w in ingested("a100_alexnet_train").warnings)
