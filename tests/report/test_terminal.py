"""Terminal output fits 80 columns on real traces: short names, shapes in their own column, at most
two lines per table row, numbers with units; `--wide` shows everything; `COLUMNS` is respected;
progress bars appear on a terminal only."""

from __future__ import annotations

import io
import re
from collections import defaultdict
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from kernel_atlas.report.fit import Column, fold, print_table
from kernel_atlas.report.progress import progress_bar
from kernel_atlas.report.terminal import print_ingest_summary, print_replay, print_report
from kernel_atlas.report.units import fmt_gbps, fmt_number, fmt_shapes, fmt_signed_us, fmt_tflops, fmt_us
from tests.support.traces import ingested, raw_events, trace_path

STEMS = (
    "h100_vit_image_classify_infer",
    "h100_bert_small_infer",
    "a100_cudagraph_rank0",
    "a100_diff_control",
    "a100_nccl_8rank_rank0",
    "mi300x_sglang_qwen3_8b_decode_graph",
)
ROW_START = re.compile(r"^\s*[\d.,]+ (?:µs|ms|s) ")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = {}
    for stem in STEMS:
        folder = tmp_path_factory.mktemp(stem)
        write_outputs(ingested(stem), folder)
        out[stem] = build_report(folder)
    return out


def _render(print_fn, *args, width: int = 80, **kwargs) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    print_fn(console, *args, **kwargs)
    return console.export_text().splitlines()


def _table_rows(lines: list[str], header: str) -> tuple[int, int]:
    """(rows, lines) of the table whose header line starts with `header` (a pattern; leading spaces ignored)."""
    start = next(i for i, line in enumerate(lines) if re.match(header, line.lstrip())) + 1
    body = []
    for line in lines[start:]:
        if not line.startswith(" ") and not ROW_START.match(line):
            break
        body.append(line)
    return sum(1 for line in body if ROW_START.match(line)), len(body)


def test_units() -> None:
    assert fmt_us(399.08) == "399.1 µs"
    assert fmt_us(45647.3) == "45.65 ms"
    assert fmt_us(12_345_678) == "12.346 s"
    assert fmt_us(float("nan")) == "–"
    assert fmt_signed_us(-35.0) == "−35.0 µs" and fmt_signed_us(1200) == "+1.20 ms"
    assert fmt_tflops(111.79) == "112 TFLOP/s" and fmt_tflops(0.683) == "683 GFLOP/s"
    assert fmt_gbps(433.2) == "433 GB/s" and fmt_gbps(3350) == "3.35 TB/s"
    assert fmt_number(0.0021) == "0.00210" and fmt_number(46.58) == "46.6" and fmt_number(1919.4) == "1,919"
    assert fmt_shapes("[[768],[788,768],[768,768],[],[]]") == "768, 788×768, 768×768"
    assert fmt_shapes("[[[2,3],[2,3]],[]]") == "[2×3, 2×3]"
    assert fmt_shapes(None) == ""


def test_fold_keeps_two_lines_and_both_ends_of_a_name() -> None:
    name = "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8>"
    assert fold(name, 20, 2, middle=True) == "cutlass::Kernel2<cut\n…x64_64x6_tn_align8>"
    assert fold(name, 100, 2) == name
    shapes = fold("4×197×768, 4×197×768, 768, 768", 12, 2).split("\n")
    assert shapes == ["4×197×768,", "4×197×768, …"]


def test_fold_tail_keeps_whole_components_and_the_innermost_end() -> None:
    module = "BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_0"
    assert fold(module, 30, 2, tail=True) == "BertLMHeadModel_0.BertModel_0.\nBertEncoder_0.BertLayer_0"
    assert fold(module, 20, 2, tail=True) == "…BertEncoder_0.\nBertLayer_0"
    assert fold(module, 20, 1, tail=True) == "…BertLayer_0"
    assert fold("BertLMHeadModel_0", 10, 2, tail=True) == "…adModel_0"  # wider than a line: its end
    assert fold(module, 60, 2, tail=True) == module


@pytest.mark.parametrize("stem", STEMS)
def test_report_fits_80_columns(reports, stem: str) -> None:
    report = reports[stem]
    lines = _render(print_report, report, full=True)
    assert max(cell_len(line) for line in lines) <= 80
    roof = report.analysis.roofline
    expected_rows = min(12, int(roof["headroom_us"].notna().sum()))
    rows, body = _table_rows(lines, "headroom")
    assert rows == expected_rows and body <= 2 * rows
    # numbers carry units, kernel names are short, no raw `Input Dims` JSON
    text = "\n".join(lines)
    assert re.search(r"\d (µs|ms|s) ", text) and "void " not in text and "[[" not in text
    assert "busy " in text and re.search(r"busy [\d.]+ (µs|ms|s) of [\d.]+ (µs|ms|s)", text)
    # why the GPU waits: per device and per stream, causes and graph candidates, two lines a row at most
    waits = report.waits
    breakdown = waits.breakdown
    devices = len(breakdown[breakdown["stream"].isna()][["rank", "device"]].drop_duplicates())
    streams = len(breakdown[breakdown["stream"].notna()][["rank", "device", "stream"]].drop_duplicates())
    for header, expected_rows in (
        (r"idle\s+host wait\s+kernel wait\s+other\s+where", min(8, devices) + min(8, streams)),
        (r"idle\s+%\s+gaps", min(8, len(waits.causes))),
        # graph candidates: their waits and the device's idle in them (what a graph saves at most)
        (r"waits\s+idle\s+stretches\s+kernels\s+stream", min(8, len(waits.candidates))),
    ):
        rows, body = _table_rows(lines, header)
        assert rows == expected_rows > 0 and body <= 2 * rows, header
    assert not re.search(r"[┏┃│]", text)  # no boxes: the same look as the other tables


def test_report_wide_shows_full_names_and_every_column(reports) -> None:
    report = reports["h100_vit_image_classify_infer"]
    lines = _render(print_report, report, wide=True, full=True)
    text = "\n".join(lines)
    top = report.analysis.roofline.iloc[0]
    assert str(top["name"]) in text and str(top["input_dims"]) in text
    header = next(line for line in lines if line.startswith("headroom"))
    assert all(h in header for h in ("calls", "bound", "TFLOP/s", "GB/s", "op", "kernel", "shapes"))
    assert "narrow terminal" not in text


def test_waits_at_80_columns_name_the_file_the_function_and_the_innermost_module(reports) -> None:
    lines = _render(print_report, reports["h100_bert_small_infer"], full=True)
    text = "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("Why the GPU waits")) :])
    # the host ran BERT's self-attention forward (modeling_bert.py line 364) during host waits:
    # the file and function are kept, the directories dropped, the module path keeps its innermost end
    assert "modeling_bert.py(364): forward" in text and "transformers/models" not in text
    assert re.search(r"modeling_bert\.py\(364\): forward\s+…BertAttention_0\.\s*$", text, re.M)
    assert re.search(r"^\s+BertSdpaSelfAttention_0\s*$", text, re.M)
    # bert's GPU waits only on the host: every idle µs of the device is a host wait, its share under it
    first = next(line for line in lines if line.rstrip().endswith("rank 0 device 0, all streams"))
    assert re.match(r"\s*([\d.]+ ms)\s+\1\s+0\.0 µs\s+0\.0 µs\s", first)
    assert lines[lines.index(first) + 1].split() == ["(100%)", "(0%)", "(0%)"]


def test_waits_wide_prints_frames_and_modules_in_full(reports) -> None:
    text = "\n".join(_render(print_report, reports["h100_bert_small_infer"], wide=True, full=True))
    frame = "transformers/models/bert/modeling_bert.py(364): forward"
    module = "BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_0.BertAttention_0.BertSdpaSelfAttention_0"
    assert re.search(re.escape(frame) + r"\s+" + re.escape(module), text)
    assert re.search(r"[\d.]+ ms \(100%\)\s+0\.0 µs \(0%\)\s+0\.0 µs \(0%\)\s+rank 0 device 0, all streams", text)


def test_ingest_summary_at_80_columns_with_hand_summed_top_kernel(tmp_path: Path) -> None:
    stem = "h100_vit_image_classify_infer"
    sums: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in raw_events(stem):
        if event.get("ph") == "X" and event.get("cat") == "kernel":
            sums[event["name"]] += event["dur"]
            calls[event["name"]] += 1
    top = max(sums, key=sums.__getitem__)  # the cutlass 128x64 GEMM: 48 calls
    result = ingest_paths([trace_path(stem)])
    files = write_outputs(result, tmp_path)
    lines = _render(print_ingest_summary, result, files)
    assert max(cell_len(line) for line in lines) <= 80
    rows, body = _table_rows(lines, "time")
    assert rows == 10 and body <= 20
    first = next(line for line in lines if ROW_START.match(line))
    assert first.split()[:2] == [f"{sums[top]:.1f}", "µs"] and f" {calls[top]} " in first
    assert "cutlass::Kernel2<" in first and "void" not in first


def test_columns_environment_is_respected(reports) -> None:
    out = reports["h100_vit_image_classify_infer"].out_dir
    runner = CliRunner()
    narrow = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    assert max(cell_len(line) for line in narrow.output.splitlines()) <= 80
    assert "narrow terminal" in narrow.output
    roomy = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "200"})
    assert roomy.exit_code == 0, roomy.output
    header = next(line for line in roomy.output.splitlines() if line.startswith("headroom"))
    assert "calls" in header and "op" in header and "narrow terminal" not in roomy.output
    assert max(cell_len(line) for line in roomy.output.splitlines()) <= 200


def test_replay_table_fits_80_columns(reports) -> None:
    pytest.importorskip("torch")
    from kernel_atlas.replay.runner import replay_all, targets_from_output

    targets = targets_from_output(reports["h100_vit_image_classify_infer"].out_dir)[:4]
    results = replay_all(targets, "cpu")
    lines = _render(print_replay, results, "cpu")
    assert max(cell_len(line) for line in lines) <= 80
    header = next(line for line in lines if line.startswith("kernel"))
    assert "shapes" in header and "median" in header and "check" in header
    start = lines.index(header) + 1
    body = lines[start : next(i for i, line in enumerate(lines) if line.startswith(("(", "4/4")))]
    assert len(body) <= 2 * len(results)
    assert sum(1 for line in body if re.search(r"(µs|ms|s)\s", line) and not line.startswith(" ")) == 4
    roomy = _render(print_replay, results, "cpu", width=240)
    header = next(line for line in roomy if line.startswith("kernel"))
    assert "implementation" in header and "timed" in header  # what the median is the time of
    # the op itself, or the CPU's stand-in for cuDNN's convolution
    assert sum(1 for line in roomy if re.search(r" (kernel|stand-in) +\d", line)) == 4


def test_narrow_tables_leave_out_columns_and_say_so() -> None:
    columns = [Column("a"), Column("b", drop=1), Column("name", justify="left", flex=1, min_width=30)]
    rows = [["1.0 µs", "22", "x" * 90]]
    lines = _render(print_table, columns, rows, "t", width=40)
    assert any("b left out" in line for line in lines)
    assert max(cell_len(line) for line in lines) <= 40


def test_numbers_are_never_cut_when_the_text_columns_cannot_have_their_width() -> None:
    # three numbers of 8, 8 and 4 cells and their gaps take 24 of 40 cells: the two text columns
    # (min_width 10 each: 24 + 2·2 + 20 = 48) share the 12 left — at 40 columns rich had squeezed
    # every column instead, "94.6 µs" shown as "94.…", "29.7 µs" and "29.3 µs" both as "29.…"
    columns = [
        Column("headroom"),
        Column("time"),
        Column("SOL%"),
        Column("kernel", justify="left", flex=2, middle=True),
        Column("shapes", justify="left", flex=1),
    ]
    rows = [
        ["94.6 µs", "98.7 µs", "4.2", "cutlass::Kernel<x>" * 4, "512, 141×512"],
        ["29.7 µs", "33.1 µs", "10.2", "k", "1"],
    ]
    text = "\n".join(_render(print_table, columns, rows, "t", width=40))
    for number in ("94.6 µs", "98.7 µs", "4.2", "29.7 µs", "33.1 µs", "10.2"):
        assert number in text
    assert max(cell_len(line) for line in text.splitlines()) <= 40
    # on 30 cells only one text column finds its 4: the other is left out, and said
    narrow = "\n".join(_render(print_table, columns, rows, "t", width=30))
    assert "94.6 µs" in narrow and "narrow terminal: shapes left" in narrow


def test_progress_bar_on_a_terminal_only() -> None:
    terminal = Console(file=io.StringIO(), force_terminal=True, width=80)
    with progress_bar(terminal, "replaying on cpu", total=3) as bar:
        assert bar.shown
        for name in ("a", "b", "c"):
            bar.advance(detail=name)
    pipe = Console(file=io.StringIO(), width=80)
    with progress_bar(pipe, "replaying on cpu", total=3) as bar:
        assert not bar.shown
        bar.advance(detail="a")  # a no-op
    assert pipe.file.getvalue() == ""
    assert "replaying on cpu" in terminal.file.getvalue()


def test_replay_all_is_quiet_in_a_pipe(reports) -> None:
    pytest.importorskip("torch")
    out = reports["h100_vit_image_classify_infer"].out_dir
    result = CliRunner().invoke(app, ["replay", "--from", str(out), "--op", "add", "--all-shapes", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "replaying on" not in result.output and "━" not in result.output  # no bar, no leftovers
    assert re.search(r"\d+/\d+ replayed", result.output)


def test_host_frames_and_places_keep_what_tells_them_apart() -> None:
    """Stop 57's cross-output campaign: a kernel's shortening cut the critical path's frame
    `Torch-Compiled Region: 0/0` to `0/0`, and a finding's place `[param|pytorch.model.alex_net|0|0|0]`
    to `alex_net|0|0|0]` with no mark of the cut. A Python frame loses only its folders; a module
    path its outer names; anything else stays as written (the tables fit it, marking cuts)."""
    from kernel_atlas.report.critical_view import _frame
    from kernel_atlas.report.terminal import _short_where

    assert _frame("Torch-Compiled Region: 0/0", wide=False) == "Torch-Compiled Region: 0/0"
    assert _frame("torch/nn/modules/linear.py(114): forward", wide=False) == "linear.py(114): forward"
    assert _frame("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", wide=False).startswith("enumerate(")
    assert _short_where("[param|pytorch.model.alex_net|0|0|0]") == "[param|pytorch.model.alex_net|0|0|0]"
    assert _short_where("aten::mm / a.b.Module_3 / dir/file.py(12): forward") == "aten::mm / Module_3 / file.py(12)"


def test_a_trace_without_steps_is_not_one_step() -> None:
    """The efficiency of a trace without ProfilerStep ranges covers the whole trace (one row,
    `step` null): "over 1 step" said a step the trace does not have."""
    from kernel_atlas.report.efficiency_view import device_line, step_count

    whole = {"steps": [{"step": None, "start_us": 0.0, "end_us": 10.0}], "devices": []}
    assert step_count(whole) == 0 and step_count({"steps": [{"step": 3}], "devices": []}) == 1
    line = device_line({"device": 0, "gpu_utilization_pct": 50.0}, step_count(whole))
    assert line.startswith("  device 0 efficiency over the whole trace (no steps recorded): GPU utilization 50.0%")
