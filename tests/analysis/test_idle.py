"""Why the GPU waits: idle gaps, their causes, launch statistics and graph candidates.

Hand-derived values come from the raw JSON of the shared traces (kernel start/dur, the launch
call with the same correlation, the host ranges on the launching thread); HTA's values were
recorded with `python benchmarks/hta_idle_compare.py TRACE...` (HolisticTraceAnalysis 0.5.0,
`get_idle_time_breakdown(consecutive_kernel_delay=30)`), see benchmarks/results/hta-idle-compare.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernel_atlas.analysis.idle import CAUSE_COLUMNS, analyse_idle, gaps, idle_breakdown, idle_causes
from kernel_atlas.analysis.launches import CANDIDATE_COLUMNS, LAUNCH_COLUMNS, graph_candidates, launch_stats
from kernel_atlas.analysis.waits import Waits, analyse_waits
from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.report.plot import widget
from kernel_atlas.report.waits_view import convention_differences, idle_figure, print_waits
from tests.support.traces import ingested


def _row(frame: pd.DataFrame, ts_us: float) -> int:
    """Index of the activity starting at `ts_us` (as the raw JSON writes it)."""
    hits = frame.index[(frame["ts_us"] - ts_us).abs() < 1e-3]
    assert len(hits) == 1, (ts_us, len(hits))
    return hits[0]


def _gap(table: pd.DataFrame, frame: pd.DataFrame, ts_us: float) -> tuple[float, str]:
    row = table.loc[_row(frame, ts_us)]
    return float(row["gap_us"]), str(row["category"])


def test_bert_gaps_derived_by_hand() -> None:
    """h100_bert_small_infer, stream 7 (times µs, from the raw JSON):
    kernel 0 indexSelect  ts 1419247333430.849 dur 3.136 → end 433.985; cudaLaunchKernel 417.54 dur 12.25
    kernel 1 indexSelect  ts 471.713 dur 3.264 → end 474.977; launch 465.22 (> 433.985): host wait 37.728
    kernel 3 indexSelect  ts 535.905 dur 3.424 → end 539.329
    kernel 4 add          ts 555.617; launch 550.272 (> 539.329): host wait 16.288, although < 30 µs
    kernel 5              ts 612.993 dur 3.263 → end 616.256
    kernel 6              ts 718.272; launch 709.924 (> 616.256): host wait 102.016
    memcpy 8 DtoH         ts 776.832 dur 2.24 → end 779.072
    kernel 9 cutlass GEMM ts 932.927; cuLaunchKernel 923.777 dur 7.6 (> 779.072): host wait 153.855"""
    frame = ingested("h100_bert_small_infer").frame
    table = gaps(frame, per_stream=True)
    base = 1419247333000.0
    assert _row(frame, base + 430.849) not in table.index  # first activity of the stream: no gap
    assert _gap(table, frame, base + 471.713) == pytest.approx((37.728, "host_wait"), abs=1e-3)
    assert _gap(table, frame, base + 555.617) == pytest.approx((16.288, "host_wait"), abs=1e-3)
    assert _gap(table, frame, base + 718.272) == pytest.approx((102.016, "host_wait"), abs=1e-3)
    assert _gap(table, frame, base + 932.927) == pytest.approx((153.855, "host_wait"), abs=1e-3)
    assert frame.loc[_row(frame, base + 430.849), "launch_dur_us"] == pytest.approx(12.25, abs=1e-3)
    assert frame.loc[_row(frame, base + 932.927), "launch_dur_us"] == pytest.approx(7.6, abs=1e-3)
    # The only stream: the device-level gaps are the same.
    device = gaps(frame, per_stream=False)
    assert _gap(device, frame, base + 555.617) == pytest.approx((16.288, "host_wait"), abs=1e-3)


def test_bert_host_frame_during_a_wait_derived_by_hand() -> None:
    """Wait before kernel 4: [539.329, 550.272] on tid 19392. Ranges containing it, innermost
    last: modeling_bert.py(1001): forward [189.126, 7085.073], nn.Module: BertEmbeddings_0
    [235.767, 662.003], module.py(1743): _call_impl [237.027, 661.393], modeling_bert.py(181):
    forward [240.697, 658.503]; the module frames around it are BertLMHeadModel_0 > BertModel_0
    > BertEmbeddings_0. Wait before kernel 6: [616.256, 709.924]: innermost container is
    modeling_bert.py(1001): forward (BertEmbeddings_0 ended at 662.003)."""
    frame = ingested("h100_bert_small_infer").frame
    base = 1419247333000.0
    k4, k6 = frame.loc[_row(frame, base + 555.617)], frame.loc[_row(frame, base + 718.272)]
    assert k4["wait_frame"] == "transformers/models/bert/modeling_bert.py(181): forward"
    assert k4["wait_module"] == "BertLMHeadModel_0.BertModel_0.BertEmbeddings_0"
    assert k6["wait_frame"] == "transformers/models/bert/modeling_bert.py(1001): forward"
    assert k6["wait_module"] == "BertLMHeadModel_0.BertModel_0"
    assert pd.isna(frame.loc[_row(frame, base + 430.849), "wait_frame"])  # no wait before the first


def test_kernel_wait_and_other_derived_by_hand() -> None:
    """h100_vit: cudnn nchwToNhwc at 1414456661859.938 follows an activity ending at 855.234 and
    was launched at 852.951 (before): a kernel wait of 4.704 µs.
    mi300x_sglang decode (stream 3): the first kernel of a hipGraphLaunch (680019.238) starts at
    4909914680033.304 after an activity ending at 679982.467 — the graph launch came later: host
    wait 50.837; a replayed kernel at 680887.1 follows an end at 680613.41, its graph launch long
    before: other, 273.689 µs."""
    vit = ingested("h100_vit_image_classify_infer").frame
    assert _gap(gaps(vit, True), vit, 1414456661859.938) == pytest.approx((4.704, "kernel_wait"), abs=1e-3)
    assert _gap(gaps(vit, True, kernel_wait_us=4.0), vit, 1414456661859.938)[1] == "other"
    sglang = ingested("mi300x_sglang_qwen3_8b_decode_graph").frame
    table = gaps(sglang, True)
    assert _gap(table, sglang, 4909914680033.304) == pytest.approx((50.837, "host_wait"), abs=1e-3)
    assert _gap(table, sglang, 4909914680887.1) == pytest.approx((273.689, "other"), abs=1e-3)


@pytest.mark.parametrize(
    "stem",
    [
        "h100_bert_small_infer",
        "mi300x_sglang_qwen3_8b_decode_graph",
        "a100_cudagraph_rank0",
        "v100_diff_test",
        "a100_nccl_8rank_rank0",
        "mi210_gpu_only",
    ],
)
def test_categories_sum_to_the_idle_time(stem: str) -> None:
    result = ingested(stem)
    table = idle_breakdown(result.frame)
    for device in result.facts["devices"]:
        rows = table[table["stream"].isna() & (table["device"] == device["device"])]
        assert sorted(rows["category"]) == ["host_wait", "kernel_wait", "other"]
        assert rows["idle_us"].sum() == pytest.approx(device["idle_us"], rel=1e-9, abs=1e-3)
    # per stream: (last end − first start) − time covered, intervals merged by hand
    frame = result.frame
    for (device, stream), group in frame.groupby(["device", "stream"], observed=True):
        intervals = sorted(zip(group["ts_us"], group["ts_us"] + group["dur_us"], strict=True))
        covered, reach_start, reach_end = 0.0, intervals[0][0], intervals[0][1]
        for start, end in intervals[1:]:
            if start > reach_end:
                covered += reach_end - reach_start
                reach_start, reach_end = start, end
            else:
                reach_end = max(reach_end, end)
        covered += reach_end - reach_start
        idle = max(e for _, e in intervals) - intervals[0][0] - covered
        rows = table[(table["device"] == device) & (table["stream"] == stream)]
        assert rows["idle_us"].sum() == pytest.approx(idle, rel=1e-9, abs=1e-3), (device, stream)


# HTA 0.5.0 defaults (timestamps rounded, last ProfilerStep dropped) — `atlas report --like-hta`.
HTA_DEFAULTS = {
    "v100_diff_test": {
        "16/host_wait": 422925.0, "16/kernel_wait": 829.0, "16/other": 0.0,
        "7/host_wait": 2960.0, "7/kernel_wait": 42372.0, "7/other": 41756.0,
        "15/host_wait": 348483.0, "15/kernel_wait": 138.0, "15/other": 38936.0,
        "14/host_wait": 520794.0, "14/kernel_wait": 1087.0, "14/other": 14536.0,
    },
    "a100_cudagraph_rank0": {
        "7/kernel_wait": 17159.0, "7/other": 691231.0,
        "25/host_wait": 628598.0, "25/kernel_wait": 85.0, "25/other": 0.0,
        "27/host_wait": 792592.0, "27/kernel_wait": 1000.0, "27/other": 7135.0,
        "285/other": 675305.0, "363/kernel_wait": 75.0, "363/other": 673182.0,
        "84/host_wait": 62901.0, "84/kernel_wait": 12.0, "84/other": 665192.0,
    },
    "h100_vit_image_classify_infer": {"7/host_wait": 6471.0, "7/kernel_wait": 20.0, "7/other": 0.0},
    "mi210_gpu_only": {"0/host_wait": 629.0, "0/kernel_wait": 570.0, "0/other": 0.0},
}  # fmt: skip
# HTA with HTA_DISABLE_NS_ROUNDING=1 on traces whose analysis window keeps every activity
# (fewer than two ProfilerSteps) — the default, exact breakdown.
HTA_EXACT = {
    "mi210_gpu_only": {"0/host_wait": 595.86, "0/kernel_wait": 40.22, "0/other": 0.0},
    "mi300x_sglang_qwen3_8b_decode_graph": {
        "3/host_wait": 398.64, "3/kernel_wait": 9.28, "3/other": 273.69, "2/host_wait": 465581.14, "2/other": 0.0,
    },
    "h100_vit_image_classify_infer": {"7/host_wait": 6321.54, "7/kernel_wait": 12.99, "7/other": 0.0},
}  # fmt: skip


def _per_stream(stem: str, like_hta: bool) -> dict[str, float]:
    result = ingested(stem)
    table = idle_breakdown(result.frame, 30.0, like_hta, {result.facts["rank"]: result.facts["last_step_start_us"]})
    # HTA has no per-device rows: ours are gaps of the union of the streams, never negative
    assert (table.loc[table["stream"].isna(), "idle_us"] >= 0).all()
    table = table[table["stream"].notna()]
    return {f"{int(r.stream)}/{r.category}": r.idle_us for r in table.itertuples()}


@pytest.mark.parametrize(("stem", "like_hta"), [*((s, True) for s in HTA_DEFAULTS), *((s, False) for s in HTA_EXACT)])
def test_same_numbers_as_hta(stem: str, like_hta: bool) -> None:
    expected = (HTA_DEFAULTS if like_hta else HTA_EXACT)[stem]
    ours = _per_stream(stem, like_hta)
    for key, value in expected.items():
        assert ours.get(key, 0.0) == pytest.approx(value, rel=0.03, abs=1.0), key
    if like_hta:  # no category HTA does not have (zero rows aside)
        assert {k for k, v in ours.items() if v} <= set(expected)


def _streams(streams: list[dict]) -> dict[str, float]:
    """report.json's per-stream entries (`idle.hta.streams`) keyed as HTA_DEFAULTS."""
    return {f"{s['stream']}/{c}": s[f"{c}_us"] for s in streams for c in ("host_wait", "kernel_wait", "other")}


@pytest.mark.parametrize("stem", list(HTA_DEFAULTS))
def test_hta_numbers_without_a_flag(stem: str) -> None:
    """The default (exact) analysis carries HTA's numbers beside its own: in the other table and
    in the facts, equal to HTA 0.5.0's recorded values."""
    result = ingested(stem)
    waits = analyse_waits(result.frame, summary={"traces": [result.facts]})
    assert waits.basis == "exact" and "hta" in waits.facts["idle"]
    alternate = waits.alternate[waits.alternate["stream"].notna()]
    table = {f"{int(r.stream)}/{r.category}": r.idle_us for r in alternate.itertuples()}
    in_facts = _streams(waits.facts["idle"]["hta"]["streams"])
    for key, value in HTA_DEFAULTS[stem].items():
        assert table[key] == pytest.approx(value, abs=1e-6), key
        assert in_facts[key] == pytest.approx(value, abs=1e-6), key
    assert {k for k, v in table.items() if v} <= set(HTA_DEFAULTS[stem])


@pytest.mark.parametrize("stem", list(HTA_EXACT))
def test_exact_numbers_beside_like_hta(stem: str) -> None:
    result = ingested(stem)
    waits = analyse_waits(result.frame, like_hta=True, summary={"traces": [result.facts]})
    assert waits.basis == "hta" and "hta" not in waits.facts["idle"]
    in_facts = _streams(waits.facts["idle"]["exact"]["streams"])
    for key, value in HTA_EXACT[stem].items():
        assert in_facts[key] == pytest.approx(value, rel=0.03, abs=1.0), key


def _breakdown(rows: list[tuple[int, int | None, float, float, float]]) -> pd.DataFrame:
    """idle.parquet rows from (rank, stream, host wait, kernel wait, other) µs, device 0."""
    return pd.DataFrame(
        [
            {"rank": rank, "device": 0, "stream": stream, "category": c, "idle_us": us, "count": 1, "pct": 0.0}
            for rank, stream, *times in rows
            for c, us in zip(("host_wait", "kernel_wait", "other"), times, strict=True)
        ]
    ).astype({"device": "Int32", "stream": "Int64"})


def _waits(breakdown: pd.DataFrame, alternate: pd.DataFrame | None = None) -> Waits:
    facts = {
        "idle": {"kernel_wait_us": 30.0, "basis": "exact", "devices": []},
        "launches": {"eager_activities": 0},
        "graph_candidates": {"short_kernel_us": 20.0, "count": 0, "saving_us": 0.0},
    }
    causes, launches, candidates = (pd.DataFrame(columns=c) for c in (CAUSE_COLUMNS, LAUNCH_COLUMNS, CANDIDATE_COLUMNS))
    return Waits(breakdown, causes, launches, candidates, facts, breakdown if alternate is None else alternate)


def test_conventions_differ_by_more_than_three_percent() -> None:
    """Streams summed per device: rank 0 (streams 7 and 8) host wait 100 + 3 = 103 µs against
    HTA's 106 (2.9 %, the same), rank 1 host wait 100 against 103.2 (3.1 %: different), rank 2
    kernel wait 0.5 against 2 µs (HTA's rounding of a sub-µs gap)."""
    ours = _breakdown([(0, 7, 100.0, 0, 0), (0, 8, 3.0, 0, 0), (1, 7, 100.0, 10.0, 0), (2, 7, 0, 0.5, 0)])
    theirs = _breakdown([(0, 7, 102.0, 0, 0), (0, 8, 4.0, 0, 0), (1, 7, 103.2, 10.0, 0), (2, 7, 0, 2.0, 0)])
    table = convention_differences(_waits(ours, theirs))
    assert list(table["rank"]) == [1, 2]  # largest difference first
    assert table.loc[0, "host_wait"] == 100.0 and table.loc[0, "host_wait_other"] == pytest.approx(103.2)
    console = Console(width=200, record=True)
    print_waits(console, _waits(ours, theirs))
    text = " ".join(console.export_text().split())  # the line as words, wherever the terminal breaks it
    assert "HTA's conventions (timestamps rounded to the µs" in text
    assert "rank 1 device 0 host wait 103.2 µs, kernel wait 10.0 µs, other 0.0 µs (exact timestamps: 100.0 µs" in text
    assert "rank 0 device 0 host wait" not in text and "per stream in idle_hta.parquet" in text
    same = Console(width=200, record=True)
    print_waits(same, _waits(ours))
    assert "HTA's conventions (" not in same.export_text()


def test_many_ranks_are_capped_in_the_figure_and_the_table() -> None:
    """40 ranks; rank r: device host wait r µs, stream 7 r µs, stream 8 0.5 µs. The figure keeps
    the 16 devices and 16 streams with most idle (ranks 24–39) and sums the rest: devices 0 + … +
    23 = 276 µs; streams 276 + 40 × 0.5 = 296 µs."""
    rows = []
    for rank in range(40):
        rows += [(rank, None, float(rank), 0.0, 0.0), (rank, 7, float(rank), 0.0, 0.0), (rank, 8, 0.5, 0.0, 0.0)]
    waits = _waits(_breakdown(rows))
    figure = widget(idle_figure(waits))
    host = next(t for t in figure.data if t.name == "host wait")
    bars = dict(zip(host.y, host.x, strict=True))
    assert len(bars) == 16 + 1 + 16 + 1
    assert bars["24 other devices (all streams)"] == pytest.approx(276.0)
    assert bars["64 other streams"] == pytest.approx(296.0)
    assert "rank 39 device 0 stream 7" in bars and "rank 23 device 0 stream 7" not in bars
    assert "the 16 devices of 40 and the 16 streams of 80" in figure.layout.title.text
    assert figure.layout.height == 40 * 34 + 120
    console = Console(width=120, record=True)
    print_waits(console, waits, top=8)
    text = " ".join(console.export_text().split())
    assert text.count("all streams") == 8 and "rank 39 device 0 stream 7" in text
    assert "… and 32 more devices and 72 more streams with less idle time: idle.parquet" in text
    # 17 devices and 17 streams: an "others" bar of one would hide nothing
    few = widget(idle_figure(_waits(_breakdown([r for r in rows[: 3 * 17] if r[1] != 8]))))
    assert len(set(few.data[0].y)) == 17 + 17 and "<sup>" not in few.layout.title.text


def test_graph_replays_have_no_launch_of_their_own() -> None:
    """a100_cudagraph_rank0: cudaGraphLaunch correlation 883691 at 1683564902159790 (dur 124)
    replays 20 activities on stream 7; the first starts at 1683564902289479, after an activity
    ending at 1683564902226155 — the graph launch was long before: other, 63324 µs."""
    frame = ingested("a100_cudagraph_rank0").frame
    replay = frame[frame["correlation"] == 883691]
    assert len(replay) == 20 and replay["graph_launch"].all()
    assert (replay["launch_dur_us"] == 124.0).all()
    assert _gap(gaps(frame, True), frame, 1683564902289479) == pytest.approx((63324.0, "other"))
    stats = launch_stats(frame)
    eager = frame["launch_ts_us"].notna() & ~frame["graph_launch"]
    assert stats.loc[stats["level"] == "kernel", "count"].sum() == eager.sum()
    assert stats.loc[stats["level"] == "op", "count"].sum() == eager.sum()
    # a replayed activity is a host wait only when it is the first of its replay on the stream
    waits = gaps(frame, True)
    host = waits[(waits["category"] == "host_wait") & frame.loc[waits.index, "graph_launch"]]
    firsts = frame[frame["graph_launch"]].sort_values("ts_us").groupby(["correlation", "stream"]).head(1).index
    assert set(host.index) <= set(firsts)


def test_launch_statistics_derived_by_hand() -> None:
    """bert: aten::index_select launches three indexSelectLargeIndex kernels —
    launch calls 12.25, 4.8, 3.9 µs; launch → start 430.849−417.54 = 13.309, 471.713−465.22 =
    6.493, 535.905−530.191 = 5.714; GPU 3.136, 3.264, 3.424 µs, each shorter than its launch."""
    stats = launch_stats(ingested("h100_bert_small_infer").frame)
    op = stats[(stats["level"] == "op") & (stats["key"] == "aten::index_select")].iloc[0]
    assert op["count"] == 3
    assert op["launch_us"] == pytest.approx(20.95, abs=1e-3)
    assert op["delay_mean_us"] == pytest.approx((13.309 + 6.493 + 5.714) / 3, abs=1e-3)
    assert op["delay_max_us"] == pytest.approx(13.309, abs=1e-3)
    assert op["gpu_us"] == pytest.approx(3.136 + 3.264 + 3.424, abs=1e-3)
    assert op["launch_bound_pct"] == 100.0


@pytest.mark.parametrize(
    "stem",
    [
        "h100_bert_small_infer",
        "h100_vit_image_classify_infer",
        "mi300x_normalization_layers",
        "mi300x_sglang_qwen3_8b_decode_graph",
    ],
)
def test_causes_name_a_frame_where_python_frames_are_recorded(stem: str) -> None:
    frame = ingested(stem).frame
    analysis = analyse_idle(frame)
    causes = analysis.causes
    host_wait = analysis.breakdown.query("stream.isna() and category == 'host_wait'", engine="python")
    assert causes["idle_us"].sum() == pytest.approx(host_wait["idle_us"].sum(), rel=1e-9)
    named = causes.loc[causes["frame"] != "between ops", "idle_us"].sum()
    assert named >= 0.9 * causes["idle_us"].sum()
    assert causes["idle_us"].is_monotonic_decreasing


def _synthetic() -> pd.DataFrame:
    """One stream. Stretch A: k0 k1 k2 (host wait 5, kernel wait 2) launched from m.py(3): f and
    m.py(4): g under main.py(1): run. k3 follows a 78 µs 'other' gap and k4 is long: no stretch.
    Stretch B (twice): three aten::relu kernels from m.py(9): h, waits 3+3 then 1+4. Then three
    graph-replayed short kernels with host waits: never a candidate."""
    a = "cudaLaunchKernel <- aten::mul <- m.py(3): f <- main.py(1): run"
    a2 = "cudaLaunchKernel <- aten::add <- m.py(3): f <- main.py(1): run"
    a3 = "cudaLaunchKernel <- aten::mul <- m.py(4): g <- main.py(1): run"
    b = "cudaLaunchKernel <- aten::relu <- m.py(9): h <- nn.Module: Net_0 <- main.py(1): run"
    rows = [  # ts, dur, launch, stack, graph
        (0, 5, -10, a, False),
        (10, 5, 8, a2, False),  # prev end 5, launch 8: host wait 5
        (17, 5, 12, a3, False),  # prev end 15, launch 12: kernel wait 2
        (100, 5, 20, a, False),  # prev end 22: other 78
        (106, 50, 101, a, False),  # long
        (160, 2, 158, b, False),  # host wait 4 — joins nothing (k4 is long)
        (165, 2, 150, b, False),  # kernel wait 3
        (170, 2, 169, b, False),  # host wait 3
        (300, 2, 160, b, False),  # launched before 172, gap 128: other — a new stretch
        (303, 2, 290, b, False),  # kernel wait 1
        (309, 2, 306, b, False),  # host wait 4
        (400, 2, 398, "cudaGraphLaunch <- main.py(1): run", True),
        (405, 2, 398, "cudaGraphLaunch <- main.py(1): run", True),
        (410, 2, 398, "cudaGraphLaunch <- main.py(1): run", True),
    ]
    return pd.DataFrame(
        {
            "rank": 0,
            "device": pd.array([0] * len(rows), dtype="Int32"),
            "stream": pd.array([7] * len(rows), dtype="Int64"),
            "name": [f"k{i}" for i in range(len(rows))],
            "kind": "kernel",
            "ts_us": [float(r[0]) for r in rows],
            "dur_us": [float(r[1]) for r in rows],
            "launch_ts_us": [float(r[2]) for r in rows],
            "launch_dur_us": 3.0,
            "graph_launch": [r[4] for r in rows],
            "launcher": "aten::x",
            "call_stack": [r[3] for r in rows],
        }
    )


def test_graph_candidates_on_a_synthetic_stream() -> None:
    candidates = graph_candidates(_synthetic())
    assert list(candidates["frame"]) == ["aten::relu", "main.py(1): run"]
    relu, run = candidates.iloc[0], candidates.iloc[1]
    assert (relu["stretches"], relu["kernels"]) == (2, 6)
    assert relu["saving_us"] == pytest.approx(3 + 3 + 1 + 4)
    assert relu["host_wait_us"] == pytest.approx(3 + 4) and relu["kernel_wait_us"] == pytest.approx(3 + 1)
    assert relu["module"] == "Net_0"
    assert relu["call_stack"] == "aten::relu <- m.py(9): h <- nn.Module: Net_0 <- main.py(1): run"
    assert (run["stretches"], run["kernels"], run["saving_us"]) == (1, 3, pytest.approx(7.0))
    assert run["call_stack"] == "main.py(1): run" and pd.isna(run["module"])
    # a shorter "short" excludes the 5 µs kernels of stretch A
    assert list(graph_candidates(_synthetic(), short_kernel_us=4.0)["frame"]) == ["aten::relu"]


def test_report_writes_the_wait_files(tmp_path: Path) -> None:
    write_outputs(ingested("h100_bert_small_infer"), tmp_path)
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--kernel-wait-us", "50", "--full"])
    assert result.exit_code == 0, result.output
    assert "Why the GPU waits" in result.output
    idle = pd.read_parquet(tmp_path / "idle.parquet")
    assert list(idle.columns) == ["rank", "device", "stream", "category", "idle_us", "count", "pct"]
    causes = pd.read_parquet(tmp_path / "idle_causes.parquet")
    assert list(causes.columns[:6]) == ["rank", "device", "frame", "module", "gaps", "idle_us"]
    assert (tmp_path / "launch_stats.parquet").exists() and (tmp_path / "graph_candidates.parquet").exists()
    facts = json.loads((tmp_path / "report.json").read_text())
    device = facts["idle"]["devices"][0]
    assert facts["idle"]["kernel_wait_us"] == 50.0 and facts["idle"]["basis"] == "exact"
    assert device["host_wait_us"] + device["kernel_wait_us"] + device["other_us"] == pytest.approx(device["idle_us"])
    assert device["host_wait_named_pct"] >= 90
    page = (tmp_path / "report.html").read_text()
    assert "Why the GPU waits" in page and re.search(r'Plotly\.newPlot\(\s*"idle"', page)
    assert facts["idle"]["hta"]["streams"][0]["host_wait_us"] == pytest.approx(3653.0)  # HTA 0.5.0
    assert "give, streams summed" not in result.output  # 3598.4 µs against HTA's 3653: 1.5 %
    hta = pd.read_parquet(tmp_path / "idle_hta.parquet")
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--like-hta", "--kernel-wait-us", "50", "--full"])
    assert result.exit_code == 0, result.output
    facts = json.loads((tmp_path / "report.json").read_text())
    assert facts["idle"]["basis"] == "hta"
    assert facts["idle"]["devices"][0]["host_wait_us"] == pytest.approx(3653.0)  # HTA 0.5.0
    assert facts["idle"]["exact"]["streams"][0]["host_wait_us"] == pytest.approx(3598.39, abs=0.01)
    # the other convention's file is what idle.parquet holds in that convention
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "idle.parquet"), hta)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "idle_exact.parquet"), idle)
    assert not (tmp_path / "idle_hta.parquet").exists()  # the previous run's: stale


def test_report_shows_hta_numbers_where_they_differ(tmp_path: Path) -> None:
    """mi210_gpu_only: HTA 0.5.0 gives 570 µs of kernel wait where the ns timestamps have 40.3."""
    write_outputs(ingested("mi210_gpu_only"), tmp_path)
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--full"])
    assert result.exit_code == 0, result.output
    assert (
        "HTA's conventions (timestamps rounded to the µs, window ending at the last ProfilerStep) give, streams "
        "summed: rank 0 device 1 host wait 629.0 µs, kernel wait 570.0 µs, other 0.0 µs (exact timestamps: "
        "595.9 µs, 40.3 µs, 0.0 µs); per stream in idle_hta.parquet"
    ) in " ".join(result.output.split())
    hta = pd.read_parquet(tmp_path / "idle_hta.parquet")
    assert list(hta.columns) == list(pd.read_parquet(tmp_path / "idle.parquet").columns)
    stream = hta[hta["stream"] == 0].set_index("category")
    assert stream["idle_us"].to_dict() == {"host_wait": 629.0, "kernel_wait": 570.0, "other": 0.0}
    assert "570.0 µs" in (tmp_path / "report.html").read_text()


def test_outputs_from_before_the_host_activity_columns() -> None:
    frame = ingested("h100_bert_small_infer").frame
    old = frame.drop(columns=["launch_dur_us", "launch_thread", "wait_frame", "wait_module"])
    waits = analyse_waits(old)
    assert "re-run" in waits.facts["idle"]["note"]
    assert waits.launches.empty
    assert waits.causes["frame"].str.contains("re-run").all()
    assert idle_causes(old)["idle_us"].sum() == pytest.approx(waits.facts["idle"]["devices"][0]["host_wait_us"])


def test_breakdown_of_a_hand_made_frame_keeps_keys_without_gaps_and_missing_devices() -> None:
    # rank 0 device 1 stream 7: [0, 10], then [15, 20] launched at 12 (after the stream went
    # idle: 5 µs host wait), then [21, 25] with no launch (1 µs < 30: kernel wait); rank 0 on an
    # unknown device, stream 3: one activity, no gap; rank 1 device 0 stream 2: [0, 1] and
    # [100, 101] launched at 0.5 (before the gap: 99 µs other)
    frame = pd.DataFrame(
        {
            "rank": [0, 0, 0, 0, 1, 1],
            "device": pd.array([1, 1, None, 1, 0, 0], dtype="Int32"),
            "stream": pd.array([7, 7, 3, 7, 2, 2], dtype="Int64"),
            "ts_us": [0.0, 15.0, 0.0, 21.0, 0.0, 100.0],
            "dur_us": [10.0, 5.0, 5.0, 4.0, 1.0, 1.0],
            "launch_ts_us": [float("nan"), 12.0, float("nan"), float("nan"), float("nan"), 0.5],
        }
    )
    table = idle_breakdown(frame, kernel_wait_us=30.0)
    rows = [
        (
            r.rank,
            None if pd.isna(r.device) else r.device,
            None if pd.isna(r.stream) else r.stream,
            r.category,
            r.idle_us,
            r.count,
            r.pct,
        )
        for r in table.itertuples()
    ]
    expected_keys = [(0, None, None), (0, None, 3), (0, 1, None), (0, 1, 7), (1, 0, None), (1, 0, 2)]  # missing first
    assert [row[:3] for row in rows[::3]] == expected_keys
    by_key = {row[:4]: row[4:] for row in rows}
    for stream in (None, 7):  # one stream: the device's union is the stream's
        assert by_key[(0, 1, stream, "host_wait")] == (5.0, 1, 100 * 5 / 6)
        assert by_key[(0, 1, stream, "kernel_wait")] == (1.0, 1, 100 * 1 / 6)
        assert by_key[(0, 1, stream, "other")] == (0.0, 0, 0.0)
        assert by_key[(1, 0, None if stream is None else 2, "other")] == (99.0, 1, 100.0)
    # no idle time at all: each cause's share of it is 0/0, not 0 %
    assert all(
        by_key[(0, None, s, c)][:2] == (0.0, 0) and np.isnan(by_key[(0, None, s, c)][2])
        for s in (None, 3)
        for c in ("host_wait", "kernel_wait", "other")
    )
