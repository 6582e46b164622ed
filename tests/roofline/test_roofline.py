"""Roofline costs derived by hand from shapes in the H100 traces, time shares, devices, report files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.core.devices import get_device, load_devices, match_device
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.report.build import build_report
from kernel_atlas.report.plot import widget
from kernel_atlas.roofline.analysis import bus_factor
from tests.support.browser import Chromium
from tests.support.traces import ingested


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = {}
    for stem in ("h100_bert_small_infer", "h100_vit_image_classify_infer", "a100_nccl_8rank_rank0"):
        folder = tmp_path_factory.mktemp(stem)
        write_outputs(ingested(stem), folder)
        out[stem] = build_report(folder)
    return out


def _row(report, correlation: int) -> pd.Series:
    kernels = report.analysis.kernels
    rows = kernels[kernels["correlation"] == correlation]
    assert len(rows) == 1
    return rows.iloc[0]


def _first(report, launcher: str, dims: str) -> pd.Series:
    kernels = report.analysis.kernels
    rows = kernels[
        (kernels["cpu_op"] == launcher)
        & (kernels["input_dims"] == dims)
        & (kernels["role"] == "main")
        & (kernels["kind"] == "kernel")
    ]
    assert len(rows) >= 1, (launcher, dims)
    return rows.iloc[0]


def test_gemm_costs_by_hand(reports) -> None:
    # bert, aten::addmm(bias[512], x[141,512], W[512,512]): 2·M·N·K = 2·141·512·512
    row = _row(reports["h100_bert_small_infer"], 8404)
    assert row["flops"] == 2 * 141 * 512 * 512 == 73_924_608
    # bias 512·2 + x 141·512·2 + W 512·512·2 + out 141·512·2 (bf16 = 2 bytes)
    assert row["bytes"] == 1024 + 144_384 + 524_288 + 144_384 == 814_080
    # vit, aten::addmm(bias[3072], x[788,768], W[768,3072])
    row = _first(reports["h100_vit_image_classify_infer"], "aten::addmm", "[[3072],[788,768],[768,3072],[],[]]")
    assert row["flops"] == 2 * 788 * 768 * 3072 == 3_718_250_496
    assert row["bytes"] == 6_144 + 1_210_368 + 4_718_592 + 4_841_472


def test_attention_costs_by_hand(reports) -> None:
    # aten::_flash_attention_forward, q/k/v [B=1, S=141, H=8, d=64], is_causal False:
    # QK^T and PV: 2·B·H·Sq·Skv·(d + dv)
    row = _first(
        reports["h100_bert_small_infer"],
        "aten::_flash_attention_forward",
        "[[1,141,8,64],[1,141,8,64],[1,141,8,64],[],[],[],[],[],[],[],[],[],[],[],[]]",
    )
    assert row["flops"] == 2 * 1 * 8 * 141 * 141 * (64 + 64) == 40_716_288
    # q, k, v read, out written (fp32: 577,536), and the logsumexp B·H·Sq fp32 (1·8·141·4 = 4,512)
    assert row["bytes"] == 4 * (141 * 8 * 64 * 2) + 4 * (1 * 8 * 141) == 582_048
    row = _first(
        reports["h100_vit_image_classify_infer"],
        "aten::_flash_attention_forward",
        "[[4,197,12,64],[4,197,12,64],[4,197,12,64],[],[],[],[],[],[],[],[],[],[],[],[]]",
    )
    assert row["flops"] == 2 * 4 * 12 * 197 * 197 * 128 == 476_884_992
    assert row["bytes"] == 4 * (4 * 197 * 12 * 64 * 2) + 4 * (4 * 12 * 197) == 4_879_296  # + logsumexp 37,824


def test_conv_and_elementwise_costs_by_hand(reports) -> None:
    # cudnn_convolution(x[4,3,224,224], w[768,3,16,16], padding [0,0], stride [16,16]) → 14×14 outputs
    row = _first(
        reports["h100_vit_image_classify_infer"],
        "aten::cudnn_convolution",
        "[[4,3,224,224],[768,3,16,16],[],[],[],[],[],[],[]]",
    )
    assert row["flops"] == 2 * 4 * 768 * 14 * 14 * (3 * 16 * 16) == 924_844_032
    assert row["bytes"] == 4 * 3 * 224 * 224 * 2 + 768 * 3 * 16 * 16 * 2 + 4 * 768 * 14 * 14 * 2
    # its layout-transform kernels are helpers of the same call: no double counting
    kernels = reports["h100_vit_image_classify_infer"].analysis.kernels
    same_call = kernels[(kernels["cpu_op_id"] == row["cpu_op_id"]) & (kernels["kind"] == "kernel")]
    assert (same_call["role"] == "main").sum() == 1 and len(same_call) > 1
    assert row["op_time_us"] == pytest.approx(same_call["dur_us"].sum())
    # aten::add([1,141,512], [1,141,512]): one FLOP per output, two inputs read, one output written
    row = _first(reports["h100_bert_small_infer"], "aten::add", "[[1,141,512],[1,141,512],[]]")
    assert row["flops"] == 141 * 512 == 72_192
    assert row["bytes"] == 3 * 141 * 512 * 2 == 433_152


def test_roofline_arithmetic(reports) -> None:
    report = reports["h100_bert_small_infer"]
    device = report.device
    assert device.key == "h100-sxm"
    table = report.roofline if hasattr(report, "roofline") else report.analysis.roofline
    row = table[
        (table["launcher"] == "aten::addmm") & (table["input_dims"] == "[[512],[141,512],[512,512],[],[]]")
    ].iloc[0]
    assert row["peak_tflops"] == 989.4 and row["peak_gbps"] == 3350
    assert row["achieved_tflops"] == pytest.approx(row["flops"] * row["count"] / (row["op_time_us"] * 1e6))
    assert row["achieved_gbps"] == pytest.approx(row["bytes"] * row["count"] / (row["op_time_us"] * 1e3))
    attainable = max(row["flops"] / 989.4e6, row["bytes"] / 3350e3)
    assert row["attainable_us"] == pytest.approx(attainable)
    assert row["sol_pct"] == pytest.approx(100 * attainable * row["count"] / row["op_time_us"])
    assert row["headroom_us"] == pytest.approx(row["op_time_us"] - attainable * row["count"])
    # ranked: the first row is where optimisation pays most
    assert table["headroom_us"].iloc[0] == table["headroom_us"].max()


@pytest.mark.parametrize("stem", ["h100_bert_small_infer", "h100_vit_image_classify_infer", "a100_nccl_8rank_rank0"])
def test_time_shares_add_up_to_the_trace(reports, stem: str) -> None:
    report = reports[stem]
    total = ingested(stem).frame["dur_us"].sum()
    share = report.analysis.timeshare
    for level, rows in share.groupby("level"):
        assert rows["total_us"].sum() == pytest.approx(total), level
        assert rows["pct"].sum() == pytest.approx(100.0), level
    assert report.analysis.roofline["total_us"].sum() == pytest.approx(total)
    csv = pd.read_csv(report.files["timeshare"])
    assert csv.groupby("level")["total_us"].sum().to_dict() == pytest.approx(
        share.groupby("level")["total_us"].sum().to_dict()
    )


def test_collectives_use_bus_bandwidth(reports) -> None:
    report = reports["a100_nccl_8rank_rank0"]
    kernels = report.analysis.kernels
    row = kernels[(kernels["op_mapping"] == "all_reduce") & (kernels["role"] == "main")].iloc[0]
    n = int(row["group_size"])
    assert row["bytes"] == pytest.approx(row["msg_in_nelems"] * 4 * 2 * (n - 1) / n)  # Float = 4 bytes
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == pytest.approx(7 / 8)
    table = report.analysis.roofline
    comm = table[table["op_mapping"] == "all_reduce"]
    assert set(comm["bound"].dropna()) <= {"communication", "latency"}
    assert (comm["peak_gbps"].dropna() == 300).all()  # A100 NVLink per direction
    facts = report.analysis.facts["devices"][0]
    assert 0 <= facts["overlap_us"] <= facts["communication_us"]


def test_device_catalog_reference_values() -> None:
    h100, h200, mi300x, b200 = (get_device(k) for k in ("h100-sxm", "h200", "mi300x", "b200"))
    assert (h100.tensor["bf16"], h100.tensor["fp8"], h100.tensor["tf32"], h100.vector["fp32"]) == (
        989.4,
        1978.9,
        494.7,
        66.9,
    )
    assert (h100.memory_gbps, h100.link_gbps) == (3350, 450)
    assert h200.tensor == h100.tensor and h200.memory_gbps == 4800
    assert (mi300x.tensor["bf16"], mi300x.memory_gbps) == (1307.4, 5300)
    assert (b200.tensor["bf16"], b200.memory_gbps) == (2250, 7700)
    for key in (
        "h100-sxm",
        "h100-pcie",
        "h100-nvl",
        "h200",
        "a100-sxm-80gb",
        "b200",
        "gb200",
        "mi300x",
        "mi325x",
        "l40s",
        "v100",
    ):
        device = load_devices()[key]
        assert device.source.startswith("https://") and device.memory_gbps > 0 and device.link_gbps > 0
    assert match_device("NVIDIA H100 80GB HBM3", 132).key == "h100-sxm"
    assert match_device("NVIDIA A100-PG509-200", 108).key == "a100-sxm-40gb"  # PCI 20B0, 40 GB
    assert match_device("AMD Instinct MI300X", 304).key == "mi300x"
    assert match_device("Tesla V100-SXM2-16GB", 80).key == "v100"
    assert match_device("AMD Radeon Graphics", 104) is None
    # fallbacks are stated: V100 has no bf16 matrix units
    assert "no bf16 tensor peak" in get_device("v100").peak("bf16", "tensor").label


def test_projection_onto_another_gpu(tmp_path: Path) -> None:
    write_outputs(ingested("h100_bert_small_infer"), tmp_path)
    own = build_report(tmp_path)
    projected = build_report(tmp_path, "h200")
    assert projected.device.key == "h200" and projected.analysis.facts["projection"]
    a = own.analysis.roofline.set_index(["name", "launcher", "input_dims", "role"])
    b = projected.analysis.roofline.set_index(["name", "launcher", "input_dims", "role"])
    memory_bound = a[(a["bound"] == "memory")].index
    assert len(memory_bound)
    # more bandwidth → lower attainable time for memory-bound calls, same traced time
    assert (b.loc[memory_bound, "attainable_us"] < a.loc[memory_bound, "attainable_us"]).all()
    assert (b.loc[memory_bound, "op_time_us"] == a.loc[memory_bound, "op_time_us"]).all()


def _figures(html_text: str) -> dict[str, dict]:
    figures = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{', html_text, re.S):
        figures[match.group(1)] = {"data": json.loads(match.group(2)), "layout": json.loads(match.group(3))}
    return figures


def test_report_html_contains_its_figures(reports) -> None:
    report = reports["h100_bert_small_infer"]
    text = report.files["html"].read_text()
    figures = _figures(text)
    assert {"roofline", "timeshare", "top-kernels", "headroom", "modules", "steps", "timeline"} <= set(figures)
    roof = figures["roofline"]
    assert roof["layout"]["xaxis"]["type"] == "log" and roof["layout"]["yaxis"]["type"] == "log"
    names = {t.get("name") for t in roof["data"]}
    assert {"gemm", "attention"} <= names and "ridge point" in names
    treemap = figures["timeshare"]["data"][0]
    assert treemap["type"] == "treemap" and "gemm" in treemap["labels"]
    assert len(text) > 1_000_000  # plotly.js is inlined: the file works offline


def test_whole_window_timeline_shades_and_labels_every_step() -> None:
    """Each profiler step of a whole-window timeline is a grey band (alternating shade) with its
    label, as plotly's `add_vrect` draws it; x in ms from the first activity."""
    import plotly.graph_objects as go

    from kernel_atlas.analysis.views import Timeline
    from kernel_atlas.report.html import timeline_figure

    rows = pd.DataFrame(
        {
            "ts_us": [1000.0, 3000.0, 6000.0],
            "dur_us": [500.0, 500.0, 500.0],
            "stream": [7, 7, 8],
            "category": ["gemm", "gemm", "memory"],
            "name": ["k1", "k2", "k3"],
        }
    )
    steps = pd.DataFrame({"step": [4, 5], "start": [1000.0, 3000.0], "end": [2500.0, 6500.0]})
    layout = widget(timeline_figure(Timeline(rank=0, rows=rows, total=3, steps=steps))).to_plotly_json()["layout"]
    assert [(s["x0"], s["x1"], s["opacity"]) for s in layout["shapes"]] == [(0.0, 1.5, 0.08), (2.0, 5.5, 0.14)]
    assert [(a["text"], a["x"]) for a in layout["annotations"]] == [("step 4", 0.0), ("step 5", 2.0)]
    reference = go.Figure()
    for step, x0, x1 in ((4, 0.0, 1.5), (5, 2.0, 5.5)):
        reference.add_vrect(
            x0=x0,
            x1=x1,
            fillcolor="grey",
            opacity=0.08 + 0.06 * (step % 2),
            line_width=0,
            annotation_text=f"step {step}",
            annotation_position="top left",
        )
    expected = reference.to_plotly_json()["layout"]
    assert layout["shapes"] == expected["shapes"] and layout["annotations"] == expected["annotations"]


def test_report_html_opens_in_headless_chromium(reports, tmp_path: Path) -> None:
    """No console errors, every figure drawn; the roofline and waits tables sort, filter and expand."""
    report = reports["h100_bert_small_infer"]
    roof = report.analysis.roofline
    rows = "Array.from(document.querySelectorAll('#roofline-table tbody tr[data-row]')).map(r => +r.dataset.row)"
    with Chromium.start(tmp_path / "profile") as browser:
        browser.open(report.files["html"].as_uri())
        assert not browser.errors, browser.errors
        assert browser.evaluate("document.querySelectorAll('.main-svg').length") >= 7  # plotly drew every figure
        assert browser.evaluate(rows) == list(range(len(roof)))  # ranked by headroom, as roofline.parquet
        header = "document.querySelectorAll('#roofline-table th')"
        time_column = browser.evaluate(f"Array.from({header}).map(th => th.textContent)").index("time")
        browser.evaluate(f"{header}[{time_column}].click()")
        times = roof["total_us"].to_numpy()[browser.evaluate(rows)]
        assert (times[:-1] >= times[1:]).all() and times[0] == roof["total_us"].max()
        assert browser.evaluate(f"{header}[{time_column}].getAttribute('aria-sort')") == "descending"
        browser.evaluate(f"{header}[{time_column}].click()")
        times = roof["total_us"].to_numpy()[browser.evaluate(rows)]
        assert (times[:-1] <= times[1:]).all()
        browser.evaluate(
            "(() => { const box = document.querySelector('#roofline-table input');"
            " box.value = 'bound:memory'; box.dispatchEvent(new Event('input')); })()"
        )
        shown = browser.evaluate(rows)
        assert sorted(shown) == [i for i, bound in enumerate(roof["bound"]) if bound == "memory"]
        browser.evaluate("document.querySelector('#roofline-table tbody tr').click()")
        detail = browser.evaluate("document.querySelector('#roofline-table tr.detail td').textContent")
        first = roof.iloc[shown[0]]
        assert detail.startswith(str(first["name"])) and str(first["call_stack"]).split(" <- ")[1] in detail
        # the tables of "Why the GPU waits" are of the same kind: ranked, sortable, filterable, expandable
        causes, candidates = report.waits.causes, report.waits.candidates
        rows = "Array.from(document.querySelectorAll('#causes-table tbody tr[data-row]')).map(r => +r.dataset.row)"
        idle = causes["idle_us"].to_numpy()[browser.evaluate(rows)]
        assert len(idle) == len(causes) and (idle[:-1] >= idle[1:]).all()
        header = "document.querySelectorAll('#causes-table th')"
        gaps_column = browser.evaluate(f"Array.from({header}).map(th => th.textContent)").index("gaps")
        browser.evaluate(f"{header}[{gaps_column}].click()")
        gaps = causes["gaps"].to_numpy()[browser.evaluate(rows)]
        assert (gaps[:-1] >= gaps[1:]).all() and gaps[0] == causes["gaps"].max()
        browser.evaluate(
            "(() => { const box = document.querySelector('#causes-table input');"
            " box.value = 'module:sdpaselfattention'; box.dispatchEvent(new Event('input')); })()"
        )
        shown = sorted(browser.evaluate(rows))
        assert shown and shown == [i for i, m in enumerate(causes["module"]) if "SdpaSelfAttention" in str(m)]
        browser.evaluate("document.querySelector('#candidates-table tbody tr').click()")
        detail = browser.evaluate("document.querySelector('#candidates-table tr.detail td').textContent")
        top = candidates.iloc[int(candidates["saving_us"].to_numpy().argmax())]
        assert (
            detail.startswith(f"first kernel: {top['first_kernel']}") and top["call_stack"].split(" <- ")[0] in detail
        )
        launches = "document.querySelectorAll('#launches-table tbody tr').length"
        assert browser.evaluate(launches) == int((report.waits.launches["level"] == "op").sum())
        assert not browser.errors, browser.errors


def test_report_command_and_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    write_outputs(ingested("h100_bert_small_infer"), tmp_path / "bert")
    result = runner.invoke(app, ["report", str(tmp_path / "bert"), "--device", "h200"])
    assert result.exit_code == 0, result.output
    assert "H200" in result.output and "headroom" in result.output
    assert (tmp_path / "bert" / "roofline.parquet").exists()
    roofline = pd.read_parquet(tmp_path / "bert" / "roofline.parquet")
    required = {
        "name",
        "launcher",
        "op_mapping",
        "category",
        "input_dims",
        "count",
        "total_us",
        "flops",
        "bytes",
        "achieved_tflops",
        "achieved_gbps",
        "peak_tflops",
        "peak_gbps",
        "sol_pct",
        "bound",
        "headroom_us",
    }
    assert required <= set(roofline.columns)
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "no kernels.parquet" in result.output
    result = runner.invoke(app, ["report", str(tmp_path / "bert"), "--device", "tpu-v9"])
    assert result.exit_code == 2 and "unknown device" in result.output


def test_catalog_entries_are_costed_from_their_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_atlas.roofline.catalog import catalog_costs

    shipped = json.loads((Path(__file__).resolve().parents[2] / "catalogs" / "kernels.json").read_text())
    table = catalog_costs(shipped, get_device("h200")).set_index("kernel_name", drop=False)
    # fused_moe_kernel: hidden [1024, 6144], w1 [8, 8192, 6144], w2 [8, 6144, 4096], top-2 routing
    moe = table.loc["fused_moe_kernel"]
    assert moe["flops"] == 2 * 1024 * 2 * 8192 * 6144 + 2 * 1024 * 2 * 6144 * 4096 == 309_237_645_312
    # DeepGEMM fp8: lhs [1, 2048], rhs [7168, 2048] → 2·1·7168·2048, fp8 tensor peak
    gemm = table[table["kernel_name"].str.startswith("void deep_gemm::fp8_gemm_kernel<7168u, 2048u, 256u, 112u")].iloc[
        0
    ]
    assert gemm["flops"] == 2 * 1 * 7168 * 2048 and gemm["peak_tflops"] == 1978.9
    # rotary: q [1024, 6, 128] and k [1024, 1, 128] bf16 rotated in place, one fp32 cos/sin row per token
    rope = table[table["op_mapping"] == "rotary_embedding"].iloc[0]
    assert rope["bytes"] == 2 * (1024 * 6 * 128 * 2 + 1024 * 1 * 128 * 2) + 1024 * 128 * 4
    assert (table["flops"].notna()).sum() >= 110
    assert (table.loc[table["flops"].isna(), "note"].str.len() > 0).all()  # every gap says why
    monkeypatch.chdir(tmp_path)
    catalog = tmp_path / "catalog" / "kernels.json"
    catalog.parent.mkdir()
    catalog.write_bytes((Path(__file__).resolve().parents[2] / "catalogs" / "kernels.json").read_bytes())
    result = CliRunner().invoke(app, ["report", str(catalog), "--device", "h200"])
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(catalog.parent / "kernels.costs.csv")) == len(shipped)  # beside the catalog
    # the committed catalogs/kernels.costs.csv is what this documented command writes (it had gone
    # stale: 28 of 167 rows differed, campaign AP 7)
    committed = Path(__file__).resolve().parents[2] / "catalogs" / "kernels.costs.csv"
    assert (catalog.parent / "kernels.costs.csv").read_bytes() == committed.read_bytes()


def test_traces_without_concrete_inputs_are_costed() -> None:
    from kernel_atlas.roofline.analysis import analyse

    frame = ingested("a100_diff_control").frame  # records Input Dims but no Concrete Inputs
    assert frame["concrete_inputs"].isna().all()
    analysis = analyse(frame, get_device("a100-sxm-80gb"))
    kernels = analysis.kernels
    gemm = kernels[(kernels["cpu_op"] == "aten::addmm") & (kernels["role"] == "main") & (kernels["kind"] == "kernel")]
    assert len(gemm) > 0
    row = gemm.iloc[0]
    dims = json.loads(row["input_dims"])
    (m, k), (_, n) = dims[1], dims[2]
    assert row["flops"] == 2 * m * n * k
    assert not kernels["note"].astype(str).str.contains("unexpected recorded shapes").any()


def test_tensor_list_ops_are_costed_by_hand(reports) -> None:
    from collections import Counter

    from tests.support.traces import raw_events

    # vit: aten::cat of a TensorList [[4,1,768],[4,196,768]] (Input type says only "TensorList");
    # the trace's tensors are mostly bf16, so its elements are taken as 2-byte values
    types = Counter(
        t for e in raw_events("h100_vit_image_classify_infer") for t in (e.get("args") or {}).get("Input type", [])
    )
    assert (
        max((t for t in types if t in ("c10::BFloat16", "float", "c10::Half")), key=types.__getitem__)
        == "c10::BFloat16"
    )
    row = _first(reports["h100_vit_image_classify_infer"], "aten::cat", "[[[4,1,768],[4,196,768]],[]]")
    assert row["flops"] == 0
    assert row["bytes"] == 2 * (4 * 1 * 768 + 4 * 196 * 768) * 2 == 2_420_736  # read once, written once
    assert "assumed c10::BFloat16" in row["formula"]


def test_foreach_ops_are_costed_by_hand() -> None:
    from kernel_atlas.roofline.analysis import analyse

    # mi250: aten::_foreach_add_(self=[[128,128],[128]], other=[[128,128],[128]]) on fp32 parameters
    kernels = analyse(ingested("mi250_minitoy_train").frame, None).kernels
    row = kernels[(kernels["cpu_op"] == "aten::_foreach_add_") & (kernels["role"] == "main")].iloc[0]
    elements = 128 * 128 + 128
    assert row["flops"] == elements  # one add per element of self
    assert row["bytes"] == (2 * elements + elements) * 4  # both lists read, self written


def test_fp32_gemms_use_tf32_peaks_only_where_the_kernel_family_says_so() -> None:
    from kernel_atlas.roofline.analysis import analyse

    kernels = analyse(ingested("a100_diff_control").frame, get_device("a100-sxm-80gb")).kernels
    main = kernels[(kernels["role"] == "main") & (kernels["kind"] == "kernel") & kernels["cpu_op"].isin(["aten::mm"])]
    precision = main.groupby(main["name"].astype(str))["precision"].agg(set)
    tensor_op = [n for n in precision.index if "cutlass_80_tensorop_s1688gemm" in n]
    simt = [n for n in precision.index if n.startswith("ampere_sgemm")]
    assert tensor_op and simt
    assert all(precision[n] == {"tf32"} for n in tensor_op)  # rules.toml gemm-tf32: precision = "tf32"
    assert all(precision[n] == {"fp32"} for n in simt)  # SIMT fp32 GEMMs


def test_collective_costs_and_their_refusals_row_by_row() -> None:
    frame = ingested("a100_nccl_8rank_rank0").frame.copy()
    rows = frame.index[(frame["op_mapping"] == "all_reduce") & frame["collective"].notna()][:4]
    assert len(rows) == 4
    frame["msg_in_nelems"] = frame["msg_in_nelems"].astype("Int64")
    frame["msg_dtype"] = frame["msg_dtype"].astype(object)
    frame.loc[rows, "msg_in_nelems"] = [1000, None, 1000, 1000]
    frame.loc[rows, "msg_out_nelems"] = [10, None, None, None]
    frame.loc[rows, "msg_dtype"] = ["Half", "Float", "Quaternion", "Float"]
    frame.loc[rows, "group_size"] = [4, 4, 4, None]
    # the 4th row's group known nowhere: not by NCCL's Group size, nor its Process Group Ranks ("[0, 1]" in
    # the trace, which now give n = 2), nor a default group's world
    for column in ("process_group_ranks", "process_group_desc", "process_group"):
        if column in frame:
            frame[column] = frame[column].astype(object)
            frame.loc[rows[3], column] = None
    from kernel_atlas.roofline.analysis import analyse

    kernels = analyse(frame, get_device("a100-sxm-80gb"), world_size=None).kernels.loc[rows]
    # 1000 Half elements (the larger of in 1000 / out 10), all_reduce over 4 ranks: 2·3/4
    assert kernels["role"].tolist() == ["main", "no model", "no model", "no model"]
    assert kernels["bytes"].iloc[0] == pytest.approx(1000 * 2 * 1.5)
    assert kernels["formula"].iloc[0] == "bus bytes = 1000·2 B · 1.500 (all_reduce, n=4)"
    assert kernels["unit"].iloc[0] == "link" and kernels["op_time_us"].iloc[0] == kernels["dur_us"].iloc[0]
    assert kernels["note"].tolist()[1:] == [
        "collective message size not recorded on the kernel",
        "unknown collective dtype 'Quaternion'",
        "group size unknown: not recorded on the collective, and the trace names no world size",
    ]


def test_costed_kernels_keep_their_link_note() -> None:
    """A kernel costed from shapes borrowed from the same kernel elsewhere (launched before the
    window) says so in its note; the vectorised costing once cleared it."""
    from kernel_atlas.ingest.infer import LINK_INFERRED
    from kernel_atlas.roofline.analysis import analyse

    kernels = analyse(ingested("v100_diff_test").frame, None).kernels
    costed = kernels[(kernels["link"] == LINK_INFERRED).to_numpy() & (kernels["role"] == "main").to_numpy()]
    assert len(costed) > 0
    assert (costed["note"] == LINK_INFERRED).all()
    assert (
        kernels.loc[(kernels["link"] == "correlation").to_numpy() & (kernels["role"] == "main"), "note"] == ""
    ).all()


def test_one_stream_number_on_two_devices_is_two_streams() -> None:
    # stream 7 on device 0 (30 µs) and on device 1 (70 µs), and a copy of unknown device on stream 9
    # (5 µs): three keys, 105 µs in all — stream 7 had been one row of 100 µs
    from kernel_atlas.roofline.analysis import _timeshare

    kernels = pd.DataFrame(
        {
            "category": ["gemm", "gemm", "memory"],
            "op_mapping": ["matmul", "matmul", "memcpy"],
            "name": ["k", "k", "Memcpy HtoD"],
            "module": [None, None, None],
            "device": [0.0, 1.0, float("nan")],
            "stream": [7, 7, 9],
            "kind": ["kernel", "kernel", "memcpy"],
            "dur_us": [30.0, 70.0, 5.0],
        }
    )
    share = _timeshare(kernels)
    streams = share[share["level"] == "stream"].set_index("key")["total_us"].to_dict()
    assert streams == {"device 1 stream 7": 70.0, "device 0 stream 7": 30.0, "stream 9": 5.0}
