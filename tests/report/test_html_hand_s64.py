"""The HTML report against values worked out by hand (campaign AG): each roof is drawn to its own
peak, the page says whose peaks it used (a projection, traces of other GPUs, a GPU without an
entry), trace text in the critical path's title is shown as written, hover lines keep a Python
frame whole, and estimated costs are told apart from the others."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from kernel_atlas.classify.names import display_name
from kernel_atlas.core.devices import get_device
from kernel_atlas.report.critical_html import PathPicture, critical_path_figure
from kernel_atlas.report.html import roofline_figure
from tests.support.hand_built import launch_and_kernel
from tests.support.hostile import cli

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}


def _row(**changes: object) -> dict[str, object]:
    """A roofline row of a 128×256×512 bf16 GEMM: 2·128·256·512 = 33,554,432 FLOPs over
    (128·512 + 512·256 + 128·256)·2 = 458,752 B (intensity 73.14 FLOP/B) in 10 µs."""
    row: dict[str, object] = {
        "name": "gemm_kernel",
        "launcher": "aten::mm",
        "op_mapping": "matmul",
        "category": "gemm",
        "input_dims": "[[128, 512], [512, 256]]",
        "role": "main",
        "count": 1,
        "op_time_us": 10.0,
        "flops": 33_554_432.0,
        "bytes": 458_752.0,
        "intensity": 33_554_432 / 458_752,
        "achieved_tflops": 33_554_432 / 10e-6 / 1e12,
        "achieved_gbps": 458_752 / 10e-6 / 1e9,
        "sol_pct": 1.4,
        "bound": "memory",
        "headroom_us": 9.86,
        "call_stack": "aten::mm <- <built-in function linear> <- torch/nn/modules/linear.py(124): forward",
        "estimate": False,
        "formula": "2·M·N·K",
        "note": None,
    }
    return {**row, **changes}


def _figure(rows: list[dict[str, object]], facts: dict[str, object] | None = None) -> dict:
    analysis = SimpleNamespace(roofline=pd.DataFrame(rows), facts=facts or {})
    return roofline_figure(analysis, get_device("h100-sxm"))  # type: ignore[arg-type]


def _array(value: object) -> np.ndarray:
    if isinstance(value, dict) and "bdata" in value:  # plotly's typed array in a page
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value, dtype=np.float64)


def test_each_roof_reaches_its_own_peak_however_low_the_points() -> None:
    figure = _figure([_row()])
    roofs = {t["name"]: t for t in figure["data"] if str(t.get("name", "")).startswith("roof ")}
    # H100 SXM5: 3.35 TB/s; bf16 989.4, fp8 1978.9, tf32 494.7 TF/s, fp32 vector 66.9: ridges at
    # 989.4/3.35 = 295.3 and 1978.9/3.35 = 590.7 FLOP/B, far right of the GEMM's 73.14
    expected = {"roof bf16 989.4 TF/s": 989.4, "roof fp8 1978.9 TF/s": 1978.9, "roof tf32 494.7 TF/s": 494.7}
    for name, peak in expected.items():
        y = _array(roofs[name]["y"])
        assert float(y.max()) == peak, name  # the flat part at the legend's value (was 980.1: 4 × 73.14 × 3.35)
        assert float(_array(roofs[name]["x"]).max()) > peak / 3.35
    assert float(_array(roofs["roof fp32 vector 66.9 TF/s"]["y"]).max()) == 66.9


def test_estimated_costs_have_an_open_marker_and_say_what_they_assumed() -> None:
    assumed = "bus bytes = 1024·2 B · 1.750 (all_reduce, n=8: the trace's world size assumed)"
    figure = _figure([_row(), _row(name="other_gemm", estimate=True, formula=assumed, op_time_us=5.0)])
    gemm = next(t for t in figure["data"] if t.get("name") == "gemm")
    assert gemm["marker"]["symbol"] == ["circle", "circle-open"]
    assert "estimate" not in gemm["text"][0]
    assert "<b>estimate</b>: bus bytes = 1024·2 B · 1.750 (all_reduce, n=8: the trace" in gemm["text"][1]
    assert "open markers: 1 estimated costs" in figure["layout"]["title"]["text"]
    assert "open markers" not in _figure([_row()])["layout"]["title"]["text"]


def test_hover_keeps_python_frames_whole() -> None:
    figure = _figure([_row()])
    hover = next(t for t in figure["data"] if t.get("name") == "gemm")["text"][0]
    stack = hover.split("<i>", 1)[1]
    # the frames after the launching op, as the trace writes them (escaped): not cut at their `(`
    assert stack == "&lt;built-in function linear&gt;<br>torch/nn/modules/linear.py(124): forward</i>"


def test_a_name_of_template_arguments_only_is_shown_whole() -> None:
    assert display_name("<lambda>") == "<lambda>"
    assert display_name("(anonymous)") == "(anonymous)"
    assert display_name("void flash_fwd<float, 128>(float*)") == "flash_fwd"
    # a name with no signature and no template: its spaces part no return type (it had read `kernel`)
    assert display_name("a/b/c kernel") == "a/b/c kernel"
    assert display_name(" my fused kernel ") == "my fused kernel"
    assert display_name("void flash_bwd(float*)") == "flash_bwd"


def test_the_critical_path_title_shows_trace_text_as_written() -> None:
    drawn = pd.DataFrame(
        {
            "rank": [0],
            "stream": [7.0],
            "thread": [None],
            "bound": ["gpu"],
            "name": ["k"],
            "start_us": [0.0],
            "dur_us": [215.0],
        }
    )
    facts = {"window": {"name": 'forward <a href="https://evil.example/">click</a>'}, "total_us": 215.0}
    figure = critical_path_figure(PathPicture(drawn, 0.0, 1), facts)
    text = figure["layout"]["title"]["text"]
    assert "<a href" not in text and '&lt;a href="https://evil.example/"&gt;click&lt;/a&gt;' in text


def _trace(path: Path, props: dict[str, object]) -> Path:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 30,
         "args": {"External id": 1, "Input Dims": [[128, 512], [512, 256]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
        *launch_and_kernel(1, 10, 1, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 10, 20),
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [props]}))
    return path


def _summary_of_page(path: Path) -> str:
    text = path.read_text()
    start = text.index("<h1>")
    return text[start : text.index("</ul>", start)]


def test_the_page_says_a_projection_and_no_other_gpu(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.json", H100)
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    result = cli("report", tmp_path / "run", "--device", "h200")
    assert result.code == 0
    printed = " ".join(result.stdout.split())
    assert "(projection: the trace ran on NVIDIA H100 80GB HBM3)" in printed
    assert "another GPU" not in printed  # one trace: nothing else ran elsewhere
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["other_gpus"] == [] and report["projection"] is True
    summary = _summary_of_page(tmp_path / "run" / "report.html")
    assert "peaks of NVIDIA H200 SXM 141GB" in summary
    assert "(projection: the trace ran on NVIDIA H100 80GB HBM3)" in summary


def test_the_page_says_traces_of_another_gpu(tmp_path: Path) -> None:
    a100 = {**H100, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108, "computeMajor": 8}
    traces = tmp_path / "traces"
    traces.mkdir()
    _trace(traces / "rank0.json", H100)
    _trace(traces / "rank1.json", a100)
    assert cli("ingest", traces, "-o", tmp_path / "run", "-q").code == 0
    assert cli("report", tmp_path / "run").code == 0
    summary = _summary_of_page(tmp_path / "run" / "report.html")
    assert "some traces ran on another GPU (NVIDIA A100-SXM4-80GB)" in summary


def test_the_page_says_the_gpu_has_no_peaks(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.json", {**H100, "name": "Tesla V100-DGXS-32GB", "numSms": 80, "computeMajor": 7})
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    result = cli("report", tmp_path / "run")
    assert result.code == 0 and "is not in catalogs/devices.toml" in result.stdout
    summary = _summary_of_page(tmp_path / "run" / "report.html")
    assert re.search(r"GPU &#x27;Tesla V100-DGXS-32GB&#x27; is not in catalogs/devices.toml", summary)
    assert "no roofline, SOL or headroom" in summary


def test_two_kernels_cut_alike_are_told_apart_in_the_hover() -> None:
    from kernel_atlas.report.html import top_kernels_figure

    stem = "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_"
    timeshare = pd.DataFrame(
        {
            "level": ["kernel", "kernel"],
            "key": [stem + "128x64_64x3_tn_align8>(Params)", stem + "64x64_64x4_tn_align8>(Params)"],
            "total_us": [399.136, 6.879],
            "pct": [98.3, 1.7],
        }
    )
    bar = top_kernels_figure(SimpleNamespace(timeshare=timeshare))["data"][0]  # type: ignore[arg-type]
    assert "%{customdata}" in bar["hovertemplate"]
    # bars bottom-up: the second kernel first
    assert bar["customdata"] == [
        "cutlass::Kernel2&lt;cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8&gt;(Params)",
        "cutlass::Kernel2&lt;cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x3_tn_align8&gt;(Params)",
    ]


def test_a_run_without_gpu_time_has_no_share_inside_modules() -> None:
    from kernel_atlas.analysis.views import NO_MODULE
    from kernel_atlas.report.html import module_figure

    empty = module_figure(pd.DataFrame({"module": pd.Series([], dtype=object), "dur_us": pd.Series([], dtype=float)}))
    assert empty["layout"]["title"]["text"] == "GPU time by nn.Module (no GPU time)"
    # 65 µs in modules of 85 µs: 76 %
    some = module_figure(pd.DataFrame({"module": ["Net_0.Linear_1", NO_MODULE], "dur_us": [65.0, 20.0]}), ranks=2)
    assert some["layout"]["title"]["text"] == "GPU time by nn.Module (76% of GPU time inside a module, 2 ranks summed)"
