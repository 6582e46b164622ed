"""The HTML report's figures and the notebook dashboards against values worked out by hand
(campaign AY): a multi-rank dashboard holds collectives to the report's time after the last rank
and draws the report's rank, the run folder's path is redacted, trace text cannot break the
page's widget state, the page says what needs a network, relative run paths are the caller's and
compare names its run B, rows are told apart in labels and hovers, the roofline hover says
which time it gives, empty figures say why, diff titles are escaped, and short names strip only
real template argument lists."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.views import Timeline
from kernel_atlas.classify.names import display_name
from kernel_atlas.cli import app
from kernel_atlas.report import html
from kernel_atlas.report.build import build_report

pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

from kernel_atlas.report import dashboard as dash
from kernel_atlas.report.notebooks import execute, to_html

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345"


def _two_rank_trace(rank: int, gemm_us: float) -> dict[str, Any]:
    """Ten steps of a GEMM then an all-reduce of 1,048,576 fp32 over ranks 0 and 1, every
    all-reduce ending at 1000·i + 200 µs: the rank whose GEMM is longer arrives later."""
    events: list[dict] = [{"ph": "X", "cat": "cpu_op", "name": "step", "pid": 11, "tid": 11, "ts": 0, "dur": 10_000}]
    for i in range(10):
        base, gemm, comm = 1000 * i, 2 * i + 1, 2 * i + 2
        start = base + 30 + gemm_us
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11, "ts": base + 10,
             "dur": 5, "args": {"correlation": gemm}},
            {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": base + 30, "dur": gemm_us,
             "args": {"correlation": gemm, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11, "ts": base + 20,
             "dur": 5, "args": {"correlation": comm}},
            {"ph": "X", "cat": "kernel", "name": ALLREDUCE, "pid": 0, "tid": 7,
             "ts": start, "dur": base + 200 - start,
             "args": {"correlation": comm, "device": 0, "stream": 7, "Collective name": "allreduce",
                      "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 2, "dtype": "Float",
                      "Process Group Name": "0", "Process Group Ranks": [0, 1], "Seq": i + 1}},
        ]  # fmt: skip
    return {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    """Rank 0's GEMM 100 µs, rank 1's 150 µs: rank 1 is last in all ten all-reduces."""
    paths = []
    for rank, gemm_us in ((0, 100.0), (1, 150.0)):
        paths.append(tmp_path / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(_two_rank_trace(rank, gemm_us)))
    out = tmp_path / "two.atlas"
    assert CliRunner().invoke(app, ["ingest", *map(str, paths), "-o", str(out), "-q"]).exit_code == 0
    return out


# --- 1, 6: a multi-rank dashboard is the report's analysis ------------------------------------------


def test_the_dashboard_of_two_ranks_holds_a_collective_to_its_time_after_the_last_rank(two_ranks: Path) -> None:
    # Rank 0's all-reduce starts 130 µs into each step, rank 1's at 180 µs, both end at 200 µs: of
    # the row's 20 calls (10·70 + 10·20 = 900 µs), rank 0 waits 10·50 = 500 µs for rank 1. Each call
    # moves 4,194,304 B once over the link (2·(2−1)/2); at the H100 SXM's 450 GB/s it can take
    # 4,194,304 / 450e3 = 9.32068 µs, 20 calls 186.41 µs. Over the 400 µs after the last rank:
    # SOL 186.41 / 400 = 46.60 %, headroom 400 − 186.41 = 213.59 µs — the dashboard had held it to
    # all 900 µs (SOL 20.71 %, headroom 713.59 µs: rank 1's lateness as a slow link).
    attainable = 20 * 4_194_304 / 450e3
    for reported in (False, True):  # a cross-rank view made by the dashboard, then the report's own
        if reported:
            build_report(two_ranks, device_key="h100-sxm")
        run = dash.load_run(two_ranks, device="h100-sxm")
        roofline = run.analyse().roofline
        [row] = roofline[roofline["name"] == ALLREDUCE].to_dict("records")
        assert (row["count"], row["op_time_us"], row["peer_wait_us"]) == (20, 900.0, 500.0)
        assert row["headroom_us"] == pytest.approx(400 - attainable)
        assert row["headroom_us"] == pytest.approx(213.5865, abs=1e-3)
        assert row["sol_pct"] == pytest.approx(46.603, abs=1e-3)
        bars = dash.figures(run, run.kernels)["headroom"].data[0]
        drawn = dict(zip([y.split(". ", 1)[1].split(" ")[0] for y in bars.y], bars.x, strict=True))
        assert drawn[ALLREDUCE] == pytest.approx(213.5865, abs=1e-3)
        # 6: both ranks ran 1,700 µs (1,000 + 700 and 1,500 + 200): rank 1 is the report's choice
        # as the top straggler (last in 10 of 10), not rank 0, the first of equal GPU time
        title = dash.figures(run, run.kernels)["timeline"].layout.title.text
        assert title.endswith("(ms, per stream; rank 1 of 2: the top straggler)"), title
        assert run.straggler == 1


def test_the_dashboard_timeline_falls_back_to_the_most_gpu_time_without_a_straggler() -> None:
    # rank 0: 300 µs, rank 1: 10 µs; the straggler, rank 5, has no activity here
    kernels = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1],
            "step": [None, None, None, 4.0],
            "ts_us": [0.0, 200.0, 400.0, 50.0],
            "dur_us": [100.0, 100.0, 100.0, 10.0],
            "stream": [7, 7, 7, 7],
            "category": ["gemm"] * 4,
            "name": ["k0", "k1", "k2", "k3"],
        }
    )
    timeline, note = dash._one_rank_timeline(kernels, 5)
    assert (timeline.rank, note) == (0, "rank 0 of 2: the most GPU time")
    timeline, note = dash._one_rank_timeline(kernels, 1)
    assert (timeline.rank, timeline.step, note) == (1, 4, "rank 1 of 2: the top straggler")


# --- 2, 3, 4, 7: the page of `atlas dashboard --html` -----------------------------------------------

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9, "numSms": 132}
HOSTILE = "</script><!--<script>x"
SIBLING = "void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<{}>>(Params)"


def _one_rank_trace(path: Path, names: list[str]) -> Path:
    """One `aten::mm` (64×64 fp32) per name, each launching that kernel for 10 µs, 100 µs apart."""
    events: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        ids = {"correlation": 100 + i, "External id": 1000 + i}
        ts = 100 * i
        args = {"External id": ids["External id"], "Input Dims": [[64, 64], [64, 64]], "Input type": ["float"] * 2}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": 8, "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1}
            | {"dur": 5, "args": ids},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 50, "dur": 10}
            | {"args": {**ids, "device": 0, "stream": 7}},
        ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "deviceProperties": [H100]}))
    return path


def _widget_state(page: str) -> str:
    """The widget state's element text as an HTML parser reads it: up to the first `</script>`."""
    opening = '<script type="application/vnd.jupyter.widget-state+json">'
    start = page.index(opening) + len(opening)
    return page[start : page.index("</script>", start)]


def test_the_dashboard_page_keeps_its_widgets_whole_and_says_what_needs_a_network(tmp_path: Path) -> None:
    # a run in a folder named after a token; a kernel named `</script><!--<script>x`, and two
    # cutlass kernels whose short names are both `cutlass::Kernel<GemmUniversal>`
    folder = tmp_path / f"tok_{TOKEN}"
    folder.mkdir()
    trace = _one_rank_trace(folder / "t.json", [HOSTILE, SIBLING.format("A"), SIBLING.format("B")])
    out = folder / "t.atlas"
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    notebook = execute("dashboard", {"ATLAS_OUT": str(out)})
    page = to_html(notebook, tmp_path / "dash.html", title=f"Kernel Atlas dashboard: tok_{TOKEN}").read_text()
    # the page's title names the run, redacted (it had been nbconvert's default, "Notebook")
    assert "<title>Kernel Atlas dashboard: tok_&lt;redacted&gt;</title>" in page
    # 3: the state is the element's whole text and JSON; `<` in it only as an escape
    state = _widget_state(page)
    assert "<" not in state and ">" not in state
    labels = [
        m["state"]["_options_labels"]
        for m in json.loads(state)["state"].values()
        if m["state"].get("description") == "kernel"
    ]
    # 7: the picker's options, heaviest first (all 10 µs: by name), told apart
    assert sorted(labels[0]) == sorted(
        [HOSTILE, "cutlass::Kernel<GemmUniversal> [1/2]", "cutlass::Kernel<GemmUniversal> [2/2]"]
    )
    # 4: no MathJax from a CDN (nothing is typeset); what does need a network is said on the page
    # (the page had 8: require.js, MathJax 2 and a MathJax 3 before each of the 6 figures)
    sources = re.findall(r'<script[^>]*\bsrc="([^"]+)"', page)
    assert sources == ["https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js"]
    assert "without a network they stay blank" in page
    assert "html-manager@^1" in page  # the installed ipywidgets' manager, not `@*`
    # 2: the run folder's path as the CLI prints it, on the page and in the notebook's output
    assert dash.load_run(out).where == f"{tmp_path}/tok_<redacted>/t.atlas"
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert "tok_<redacted>/t.atlas" in printed and TOKEN not in printed
    assert TOKEN not in page


def test_the_replay_notebook_prints_the_run_folder_redacted(tmp_path: Path) -> None:
    # no replay.parquet: it says so twice with the folder's path — a token in it had come through
    folder = tmp_path / f"tok_{TOKEN}"
    folder.mkdir()
    trace = _one_rank_trace(folder / "t.json", ["gemm_kernel"])
    out = folder / "t.atlas"
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    notebook = execute("replay", {"ATLAS_OUT": str(out)})
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert TOKEN not in printed
    where = f"{tmp_path}/tok_<redacted>/t.atlas"
    assert f"no replay.parquet in {where}: run `atlas replay --from {where} --all`" in printed


def test_kernel_picker_labels_are_unique() -> None:
    names = ["void k<1>(int)", "void k<2>(int)", "void j<1>(int)", "void k<3>(int)"]
    assert dash.kernel_options(names) == [
        ("k [1/3]", "void k<1>(int)"),
        ("k [2/3]", "void k<2>(int)"),
        ("j", "void j<1>(int)"),
        ("k [3/3]", "void k<3>(int)"),
    ]


# --- 5: relative run paths and run B --------------------------------------------------------------


def test_a_relative_run_path_in_a_notebook_kernel_is_the_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Jupyter started in tmp_path with ATLAS_OUT=runs/a.atlas; the kernel runs in notebooks/
    (tmp_path / "runs").mkdir()
    out = tmp_path / "runs" / "a.atlas"
    trace = _one_rank_trace(tmp_path / "a.json", ["gemm_kernel"])
    assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    elsewhere = tmp_path / "notebooks"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("ATLAS_OUT_B", "runs/a.atlas")
    assert dash.resolve_source(suffix="_B") == out
    assert dash.load_run(suffix="_B").out_dir == out


def test_atlas_dashboard_compare_names_run_b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.atlas", tmp_path / "b.atlas"
    for out, name in ((a, "gemm_a"), (b, "gemm_b")):
        trace = _one_rank_trace(tmp_path / f"{out.stem}.json", [name])
        assert CliRunner().invoke(app, ["ingest", str(trace), "-o", str(out), "-q"]).exit_code == 0
    monkeypatch.delenv("ATLAS_OUT_B", raising=False)
    monkeypatch.delenv("ATLAS_TRACE_B", raising=False)
    command = [sys.executable, "-c", "from kernel_atlas.cli import app; app()", "dashboard", "a.atlas"]
    # without B: refused in one line (it had compared A with the bundled example, unsaid)
    refused = subprocess.run(
        [*command, "--notebook", "compare", "--html", "c.html"], cwd=tmp_path, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "needs run B: --run-b" in refused.stderr + refused.stdout
    assert not (tmp_path / "c.html").exists()
    wrong = subprocess.run([*command, "--run-b", "b.atlas"], cwd=tmp_path, capture_output=True, text=True)
    assert wrong.returncode == 2 and "only for --notebook compare" in wrong.stderr + wrong.stdout
    # B named relative to the current directory, as A
    done = subprocess.run(
        [*command, "--notebook", "compare", "--run-b", "b.atlas", "--html", "c.html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "c.html").read_text()
    assert f"B: {b}" in page and "GPU time per category: a vs b" in page


# --- 7, 8, 9, 10: figures of report.html and the dashboards -------------------------------------


def test_sibling_kernels_of_one_short_name_are_told_apart_in_the_treemap() -> None:
    five = "void fft2d_r2c_32x32<float, false, 5u, true>(float2*)"
    zero = "void fft2d_r2c_32x32<float, false, 0u, false>(float2*)"
    kernels = pd.DataFrame(
        {"category": ["fft", "fft"], "op_mapping": ["conv", "conv"], "name": [five, zero], "dur_us": [30.0, 20.0]}
    )
    tree = html.timeshare_figure(types.SimpleNamespace(kernels=kernels))["data"][0]
    kernel_tiles = [i for i, parent in enumerate(tree["parents"]) if parent == "fft/conv"]
    # sorted by kernel name: `…0u…` first
    assert [tree["labels"][i] for i in kernel_tiles] == ["fft2d_r2c_32x32 [1/2]", "fft2d_r2c_32x32 [2/2]"]
    assert [tree["values"][i] for i in kernel_tiles] == [20.0, 30.0]
    assert [tree["customdata"][i] for i in kernel_tiles] == [
        "<br>void fft2d_r2c_32x32&lt;float, false, 0u, false&gt;(float2*)",
        "<br>void fft2d_r2c_32x32&lt;float, false, 5u, true&gt;(float2*)",
    ]
    assert "%{customdata}" in tree["hovertemplate"]


def test_headroom_and_top_kernel_hovers_tell_rows_apart() -> None:
    add = "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<double>>(int)"
    rows = pd.DataFrame(
        {
            "name": [add, add, "ncclKernel_SendRecv", "ncclKernel_SendRecv"],
            "launcher": ["aten::add_", "aten::sub_", "nccl:send", "nccl:send"],
            "input_dims": ["[[1], [1], []]", "[[1], [1], []]", "[[447923396]]", "[[447923396]]"],
            "input_types": ["double", "double", "", ""],
            "note": [None, None, None, "inferred: same kernel, grid and block"],
            "role": ["main"] * 4,
            "sol_pct": [1.0, 1.0, 2.0, 2.0],
            "headroom_us": [2108.0, 1093.0, 500.0, 400.0],
        }
    )
    bar = html.headroom_figure(types.SimpleNamespace(roofline=rows))["data"][0]
    hovers = bar["customdata"][::-1]  # drawn bottom-up: the most headroom last
    assert len(set(hovers)) == 4
    assert hovers[0] == (
        "void at::native::unrolled_elementwise_kernel&lt;at::native::CUDAFunctor_add&lt;double&gt;&gt;(int)"
        "<br>shapes [[1], [1], []]<br>dtypes double<br>launched by aten::add_"
    )
    assert "launched by aten::sub_" in hovers[1]
    assert hovers[3].endswith("<br>note: inferred: same kernel, grid and block")
    # the bars themselves: rows alike in kernel and shapes name their launcher (add_ and sub_ had
    # read as one bar twice)
    assert bar["y"][::-1][:2] == [
        "1. at::native::unrolled_elementwise_kernel&lt;CUDAFunct… · aten::add_ [[1], [1], []]",
        "2. at::native::unrolled_elementwise_kernel&lt;CUDAFunct… · aten::sub_ [[1], [1], []]",
    ]
    # two 503-character names that differ only at character 480: their hovers had been one (cut at 400)
    first, second = "a" * 480 + "xyz" + "b" * 20, "a" * 480 + "qrs" + "b" * 20
    timeshare = pd.DataFrame(
        {"level": ["kernel", "kernel"], "key": [first, second], "total_us": [5.0, 4.0], "pct": [55.6, 44.4]}
    )
    top = html.top_kernels_figure(types.SimpleNamespace(timeshare=timeshare))["data"][0]
    assert [("xyz" in h, "qrs" in h) for h in top["customdata"]] == [(False, True), (True, False)]


def _roofline_row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "name": "cudnn::detail::dgrad_engine<float>(int)",
        "launcher": "aten::cudnn_convolution_backward_input",
        "op_mapping": "conv",
        "category": "conv",
        "input_dims": "[[32, 64, 56, 56]]",
        "role": "main",
        "count": 36,
        "total_us": 14_867.0,
        "op_time_us": 15_191.0,
        "flops": 1e12,
        "bytes": 1e9,
        "intensity": 1e3,
        "achieved_tflops": 1e12 / 15_191e-6 / 1e12,
        "achieved_gbps": 1e9 / 15_191e-6 / 1e9,
        "sol_pct": 50.0,
        "bound": "compute",
        "headroom_us": 100.0,
        "call_stack": None,
        "note": None,
    }
    return {**row, **changes}


def test_the_roofline_hover_says_which_time_it_gives() -> None:
    # 36 calls: the kernel's own 14,867 µs (the table's time) and the op calls' 15,191 µs with
    # their helper kernels, which the rates are over; the hover had given 15.19 ms alone
    analysis = types.SimpleNamespace(roofline=pd.DataFrame([_roofline_row()]), facts={})
    [hover] = html.roofline_figure(analysis, None)["data"][0]["text"]
    assert "<br>36 calls, 14.87 ms of this kernel; the op calls 15.19 ms with their helper kernels<br>" in hover
    # 1e12 FLOP and 1e9 B a call over 15,191 µs: 65.8 TFLOP/s and 65.8 GB/s
    assert "<br>65.8 TFLOP/s, 65.8 GB/s over the op calls' time<br>" in hover
    alone = types.SimpleNamespace(roofline=pd.DataFrame([_roofline_row(op_time_us=14_867.0)]), facts={})
    [hover] = html.roofline_figure(alone, None)["data"][0]["text"]
    assert "<br>36 calls, 14.87 ms of this kernel<br>" in hover and "op calls" not in hover


def test_empty_figures_say_why() -> None:
    # no device peaks: costed rows without SOL or headroom
    no_peaks = pd.DataFrame([_roofline_row(sol_pct=float("nan"), headroom_us=float("nan"), bound=None)])
    heading = html.headroom_figure(types.SimpleNamespace(roofline=no_peaks))["layout"]["title"]["text"]
    assert heading.endswith(
        "<sup>no bar: no roofline-attainable time: the GPU's peaks are not known (no SOL or headroom)</sup>"
    )
    # three kernels (200 µs) of a GPU-only trace: no op, so no shapes and no point
    shapeless = pd.DataFrame(
        [
            _roofline_row(role="no shapes", total_us=t, op_time_us=t, flops=0.0, achieved_tflops=None, headroom_us=None)
            for t in (50.0, 50.0, 100.0)
        ]
    )
    heading = html.roofline_figure(types.SimpleNamespace(roofline=shapeless, facts={}), None)["layout"]["title"]["text"]
    assert "<sup>no point drawn: no op call recorded its input shapes (200.0 µs of kernels)" in heading
    heading = html.headroom_figure(types.SimpleNamespace(roofline=shapeless))["layout"]["title"]["text"]
    assert "no bar: no kernel has a cost (FLOPs or bytes) to hold against the roofline" in heading
    # a whole window of a trace without profiler steps is no "all steps"
    rows = pd.DataFrame(
        {
            "ts_us": [0.0, 500.0],
            "dur_us": [100.0, 200.0],
            "stream": [7, 7],
            "category": ["gemm"] * 2,
            "name": ["a", "b"],
        }
    )
    no_steps = Timeline(rank=0, rows=rows, total=2, steps=pd.DataFrame(columns=["step", "start", "end"]))
    heading = html.timeline_figure(no_steps)["layout"]["title"]["text"]
    assert heading == "Timeline of the whole profile — no profiler steps in the trace (ms, per stream)"


def test_diff_titles_escape_run_names() -> None:
    table = pd.DataFrame({"key": ["gemm"], "a_us": [1000.0], "b_us": [2000.0]})
    diff = types.SimpleNamespace(
        a=types.SimpleNamespace(label="a<i>x$y$"),
        b=types.SimpleNamespace(label="b&amp;c"),
        level=lambda level: table,
    )
    heading = html.diff_figure(diff, "category")["layout"]["title"]["text"]
    assert heading == "GPU time per category: a&lt;i&gt;x&#36;y&#36; vs b&amp;amp;c"


# --- 11: short names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        # angle brackets that are text: shown as written (they had read "fakealert", "link", "x")
        ("void fake<script>alert(\"x\")</script>_kernel<float, &, 'q'>(int)",
         "void fake<script>alert(\"x\")</script>_kernel<float, &, 'q'>(int)"),
        ("$\\alpha$ kernel & <b>bold</b> <a href='http://evil.example/'>link</a>",
         "$\\alpha$ kernel & <b>bold</b> <a href='http://evil.example/'>link</a>"),
        (HOSTILE, HOSTILE),
        # a credential redacted at ingest is text, not a template ("kernel_with_")
        ("kernel_with_<redacted>", "kernel_with_<redacted>"),
        # real template argument lists, as before
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()",
         "at::native::vectorized_elementwise_kernel<CUDAFunctor_add>"),
        ("void huge<" + "X" * 6000 + ">(int)", "huge"),
        ("void k<T>::operator()<at::native::TensorAssign>(at::TensorIterator&)", "k::operator"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ],
)  # fmt: skip
def test_display_name_strips_only_template_argument_lists(name: str, shown: str) -> None:
    assert display_name(name) == shown


def test_the_page_figures_draw_the_hostile_names_as_written() -> None:
    # the top-kernels label of `fake<script>…` is its whole (escaped) name, not "fakealert"
    name = "void fake<script>alert(\"x\")</script>_kernel<float, &, 'q'>(int)"
    timeshare = pd.DataFrame({"level": ["kernel"], "key": [name], "total_us": [10.0], "pct": [100.0]})
    [label] = html.top_kernels_figure(types.SimpleNamespace(timeshare=timeshare))["data"][0]["y"]
    # 63 characters cut to 60 for a bar's label: its first 59 (up to the `(` of `(int)`) and `…`
    assert label == "1. void fake&lt;script&gt;alert(\"x\")&lt;/script&gt;_kernel&lt;float, &amp;, 'q'&gt;(…"
