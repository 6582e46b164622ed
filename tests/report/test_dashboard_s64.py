"""The notebook dashboards on hand-built traces (campaign AH): the module filter, the cards of a
filtered part, a run without GPU activity, errors in one line, the comparability of compare.ipynb,
CPU replays and the replayed roofline points, the ranks of the module treemap. Every expected
value is worked out from the trace by hand."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.report import dashboard as dash
from kernel_atlas.report.notebooks import NOTEBOOKS, execute

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9, "numSms": 132}
V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 17179869184, "computeMajor": 7, "numSms": 80}
GEMM = "ampere_sgemm_32x32_sliced1x4_tn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()"
MM = ("aten::mm", [[64, 64], [64, 64]])


def _trace(path: Path, kernels: list[dict[str, Any]], gpu: dict[str, Any] | None = H100, rank: int | None = None):
    """A Kineto trace: per kernel (name, ts, dur, modules outer → inner, op) its `nn.Module`
    frames, the CPU op (64×64 float operands), the launch and the kernel on device 0, stream 7."""
    events: list[dict[str, Any]] = []
    python_id = 0
    for i, k in enumerate(kernels):
        cpu_ts, ids = k["ts"] - 50, {"correlation": 100 + i, "External id": 1000 + i}
        parent = None
        for depth, module in enumerate(k.get("modules", [])):
            python_id += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": f"nn.Module: {module}",
                    "pid": 1,
                    "tid": 1,
                    "ts": cpu_ts - 10 + depth,
                    "dur": 30 - 2 * depth,
                    "args": {"Python id": python_id, "Python parent id": parent, "Python thread": 0},
                }
            )
            parent = python_id
        op, dims = k.get("op", MM)
        args = {"External id": ids["External id"], "Input Dims": dims, "Input type": ["float"] * len(dims)}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": cpu_ts, "dur": 8, "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": cpu_ts + 1}
            | {"dur": 5, "args": ids},
        ]
        if gpu is not None:
            kernel_args = {**ids, "device": 0, "stream": 7}
            events.append(
                {"ph": "X", "cat": "kernel", "name": k["name"], "pid": 0, "tid": 7, "ts": k["ts"], "dur": k["dur"]}
                | {"args": kernel_args}
            )
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [gpu] if gpu else []}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    path.write_text(json.dumps(doc))
    return path


def _text(snippet: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", snippet))).strip()


def _cards(snippet: str) -> dict[str, str]:
    """The cards of `summary_cards`: label → value."""
    found = re.findall(
        r"<div style='font-size:11px;color:#666'>(.*?)</div><div style='font-size:16px'>(.*?)</div>", snippet
    )
    return {html.unescape(k): html.unescape(v) for k, v in found}


# --- 2: the module filter ------------------------------------------------------------------------


def test_the_module_filter_keeps_the_module_not_its_siblings_of_a_longer_name(tmp_path: Path) -> None:
    # Net_0 › Linear_1 10 µs, Net_0 › Linear_10 100 µs, Net_0 › Linear_2 1 µs: `Net_0.Linear_1` is
    # one kernel of 10 µs (Linear_10 only shares its first characters)
    trace = _trace(
        tmp_path / "modules.json",
        [
            {"name": "gemm_kernel_0", "ts": 10_000, "dur": 10.0, "modules": ["Net_0", "Linear_1"]},
            {"name": "gemm_kernel_1", "ts": 11_000, "dur": 100.0, "modules": ["Net_0", "Linear_10"]},
            {"name": "gemm_kernel_2", "ts": 12_000, "dur": 1.0, "modules": ["Net_0", "Linear_2"]},
        ],
    )
    run = dash.load_run(trace)
    assert dash.choices(run.kernels)["module"] == ["Net_0.Linear_1", "Net_0.Linear_10", "Net_0.Linear_2"]
    one = dash.filter_kernels(run.kernels, module="Net_0.Linear_1")
    assert (len(one), float(one["dur_us"].sum())) == (1, 10.0)
    ten = dash.filter_kernels(run.kernels, module="Net_0.Linear_10")
    assert (len(ten), float(ten["dur_us"].sum())) == (1, 100.0)
    everything = dash.filter_kernels(run.kernels, module="Net_0")
    assert (len(everything), float(everything["dur_us"].sum())) == (3, 111.0)


def test_the_module_filter_keeps_the_sub_modules() -> None:
    kernels = pd.DataFrame(
        {
            "module": ["A.B", "A.B.C", "A.B.C.D", "A.BC", "A.B_1", None],
            "dur_us": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
        }
    )
    kept = dash.filter_kernels(kernels, module="A.B")
    assert kept["module"].tolist() == ["A.B", "A.B.C", "A.B.C.D"] and float(kept["dur_us"].sum()) == 7.0


# --- 3: the cards of a filtered part -------------------------------------------------------------


def test_the_cards_of_a_filtered_part_call_no_other_kernel_idle(tmp_path: Path) -> None:
    # one stream: gemm 10 µs at t=0, add 80 µs at t=10, gemm 10 µs at t=90 — span 100 µs, busy
    # 100 µs, idle 0 µs; the gemm part is 20 µs of the 100 µs of GPU time (20.0 %)
    trace = _trace(
        tmp_path / "idle.json",
        [
            {"name": GEMM, "ts": 10_000, "dur": 10.0},
            {"name": ADD, "ts": 10_010, "dur": 80.0, "op": ("aten::add", [[64, 64], [64, 64], []])},
            {"name": GEMM, "ts": 10_090, "dur": 10.0},
        ],
    )
    run = dash.load_run(trace)
    whole = _cards(dash.summary_cards(run, run.kernels))
    assert whole["GPU time"] == "100.0 µs" and whole["busy / span"] == "100.0 µs / 100.0 µs (100.0%)"
    assert whole["idle"] == "0.0 µs"
    unfiltered = _cards(dash.summary_cards(run, dash.filter_kernels(run.kernels)))  # every filter "all"
    assert unfiltered == whole
    gemm = _cards(dash.summary_cards(run, dash.filter_kernels(run.kernels, category="gemm")))
    assert "idle" not in gemm and "80.0 µs" not in " ".join(gemm.values())  # the add kernel is no idle time
    assert gemm["GPU activities (selected)"] == "2 of 3"
    assert gemm["GPU time (selected)"] == "20.0 µs of 100.0 µs (20.0%)"
    assert gemm["run busy / span"] == "100.0 µs / 100.0 µs (100.0%)"
    assert gemm["run idle"] == "0.0 µs"
    assert gemm["top category (selected)"] == "gemm 100.0%"


# --- 4 and 6: a run without GPU activity, errors in one line ---------------------------------------


def _cpu_only(tmp_path: Path) -> Path:
    return _trace(tmp_path / "cpu.json", [{"name": GEMM, "ts": 10_000, "dur": 10.0}], gpu=None)


def test_a_run_without_gpu_activity_is_one_statement(tmp_path: Path) -> None:
    run = dash.load_run(_cpu_only(tmp_path))
    assert run.kernels.empty
    with pytest.raises(dash.NotebookError) as raised:
        dash.gpu_activities(run)
    assert raised.value._render_traceback_() == [f"error: {run.out_dir}: no GPU activities to report on"]
    # `atlas dashboard --html`: the one line, no page of cards of 0 µs and a slider maximum of NaN
    with pytest.raises(AtlasError, match=r"cpu\.atlas: no GPU activities to report on$"):
        execute("dashboard", {"ATLAS_OUT": str(run.out_dir)})


def _run_as_nbconvert(name: str, monkeypatch: pytest.MonkeyPatch, **env: str):
    """The notebook as `ATLAS_OUT=… jupyter nbconvert --execute` runs it (nbclient, the
    environment inherited by the kernel): the notebook, stopped at its first error."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    with pytest.raises(CellExecutionError):
        client.execute()
    return notebook


def _errors(notebook) -> list[tuple[int, list[str]]]:
    return [
        (index, output["traceback"])
        for index, cell in enumerate(notebook.cells)
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def test_notebook_errors_outside_atlas_dashboard_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.atlas"
    notebook = _run_as_nbconvert("dashboard", monkeypatch, ATLAS_OUT=str(missing))
    assert _errors(notebook) == [(2, [f"error: {missing}: no such file"])]
    # a damaged report.json: read by the findings of the cell after the loading one
    run = dash.load_run(_trace(tmp_path / "one.json", [{"name": GEMM, "ts": 10_000, "dur": 10.0}]))
    (run.out_dir / "report.json").write_text('{"broken')
    notebook = _run_as_nbconvert("dashboard", monkeypatch, ATLAS_OUT=str(run.out_dir))
    [(cell, traceback)] = _errors(notebook)
    assert cell == 3 and len(traceback) == 1
    assert traceback[0].startswith(f"error: {run.out_dir / 'report.json'}: not valid JSON")


# --- 5: compare.ipynb states the comparability ----------------------------------------------------


def test_compare_states_the_comparability_of_atlas_diff(tmp_path: Path) -> None:
    # the same op and kernel, 10 µs on an H100 and 20 µs on a V100: different GPUs, all the time
    # in ops and kernels both runs have
    a = _trace(tmp_path / "a.json", [{"name": GEMM, "ts": 10_000, "dur": 10.0}])
    b = _trace(tmp_path / "b.json", [{"name": GEMM, "ts": 10_000, "dur": 20.0}], gpu=V100)
    runs = dash.load_run(a), dash.load_run(b)
    said = _text(dash.comparability_html(dash.compare_runs(*runs)))
    assert (
        "comparability: different GPUs (NVIDIA H100 80GB HBM3 → Tesla V100-SXM2-16GB); 100.0 % of GPU time in ops "
        "both runs have, 100.0 % in kernels both runs have" in said
    )
    assert "A: a on NVIDIA H100 80GB HBM3, GPU time 10.0 µs" in said
    assert "B: b on Tesla V100-SXM2-16GB, GPU time 20.0 µs" in said
    notebook = execute("compare", {"ATLAS_OUT": str(runs[0].out_dir), "ATLAS_OUT_B": str(runs[1].out_dir)})
    shown = _text(str(notebook.cells[2].outputs))
    assert "different GPUs (NVIDIA H100 80GB HBM3 → Tesla V100-SXM2-16GB)" in shown


def _two_ranks(tmp_path: Path) -> tuple[Path, Path]:
    """Rank 0: a gemm of 10 µs in Net_0 and an add of 30 µs outside any module; rank 1 the same at
    twice the time. Ingested as one run of both ranks, and rank 0 alone."""
    from kernel_atlas.ingest.fleet import ingest_fleet

    def kernels(scale: float) -> list[dict[str, Any]]:
        add = ("aten::add", [[64, 64], [64, 64], []])
        return [
            {"name": GEMM, "ts": 10_000, "dur": 10.0 * scale, "modules": ["Net_0"]},
            {"name": ADD, "ts": 11_000, "dur": 30.0 * scale, "op": add},
        ]

    (tmp_path / "ranks").mkdir()
    r0 = _trace(tmp_path / "ranks" / "r0.json", kernels(1.0), rank=0)
    r1 = _trace(tmp_path / "ranks" / "r1.json", kernels(2.0), rank=1)
    both, alone = tmp_path / "both.atlas", tmp_path / "alone.atlas"
    assert not ingest_fleet([str(r0), str(r1)], both).failed
    assert not ingest_fleet([str(r0)], alone).failed
    return alone, both


def test_compare_says_the_runs_hold_other_rank_counts(tmp_path: Path) -> None:
    alone, both = _two_ranks(tmp_path)
    said = _text(dash.comparability_html(dash.compare_runs(dash.load_run(alone), dash.load_run(both))))
    assert "same GPU;" in said and "A 1 rank, B 2 ranks: times are totals over each run's window" in said
    assert "GPU time 40.0 µs" in said and "GPU time 120.0 µs" in said  # 10 + 30; 40 + (20 + 60)


# --- 14b: the module treemap of several ranks ------------------------------------------------------


def test_the_module_treemap_of_two_ranks_says_they_are_summed(tmp_path: Path) -> None:
    # inside Net_0: 10 + 20 µs of 40 + 80 µs = 25 %
    _, both = _two_ranks(tmp_path)
    run = dash.load_run(both)
    title = dash.figures(run, run.kernels)["modules"].layout.title.text
    assert title == "GPU time by nn.Module (25% of GPU time inside a module, 2 ranks summed)"
    rank1 = dash.filter_kernels(run.kernels, rank=1)
    assert dash.figures(run, rank1)["modules"].layout.title.text == (
        "GPU time by nn.Module (25% of GPU time inside a module)"
    )


# --- 7: replays on the CPU, replayed roofline points ------------------------------------------------


def _replay_table(device: str, method: str, median_us: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "kernel": [GEMM],
            "input_dims": ["[[64,64],[64,64]]"],
            "device": [device],
            "method": [method],
            "median_us": [median_us],
            "traced_us": [37.0],
        }
    )


def test_a_cpu_replay_is_not_drawn_against_the_traced_gpu_time() -> None:
    cpu = dash.replay_figure(_replay_table("cpu", "cpu-wall-clock", 9.18))
    assert [t.name for t in cpu.data] == ["replayed on the CPU"]  # no line replayed = traced
    assert "wall clock, not GPU time" in cpu.layout.title.text and "wall clock" in cpu.layout.yaxis.title.text
    gpu = dash.replay_figure(_replay_table("cuda", "cuda-events (L2 flushed)", 40.0))
    assert [t.name for t in gpu.data] == ["replayed on the GPU", "replayed = traced"]
    assert list(gpu.data[1].x) == [0, 40.0] and "CPU" not in gpu.layout.title.text


def test_the_replay_notebook_draws_the_replayed_roofline_points(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from kernel_atlas.replay.runner import replay_all, targets_from_output

    run = dash.load_run(_trace(tmp_path / "mm.json", [{"name": GEMM, "ts": 10_000, "dur": 10.0}]))
    replay_all(targets_from_output(run.out_dir), "cpu").to_parquet(run.out_dir / "replay.parquet", index=False)
    replayed = pd.read_parquet(run.out_dir / "replay.parquet")
    [median] = replayed["median_us"].tolist()
    figure = dash.replay_roofline(dash.load_run(run.out_dir))
    [points] = [t for t in figure.data if t.name == "replayed"]
    # 64×64 @ 64×64: 2·64³ FLOPs over 3·64·64·4 bytes = 10.67 FLOP/B, at the replay's median
    assert list(points.x) == pytest.approx([2 * 64**3 / (3 * 64 * 64 * 4)])
    assert list(points.y) == pytest.approx([2 * 64**3 / (median * 1e6)])
    assert "replayed points ran on the CPU" in figure.layout.title.text
    notebook = execute("replay", {"ATLAS_OUT": str(run.out_dir)})
    drawn = json.dumps([o.get("data", {}) for c in notebook.cells for o in c.get("outputs", [])])
    assert '"name": "replayed"' in drawn and "no replayed = traced line" in drawn
