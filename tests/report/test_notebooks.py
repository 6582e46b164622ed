"""Every notebook runs headless, top to bottom, on the bundled example and on a shared trace."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from tests.support.traces import ingested

pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

from kernel_atlas.report.notebooks import NOTEBOOKS, execute

PLOTLY = "application/vnd.plotly.v1+json"


def _no_missing_sign(notebook) -> None:
    """No table of the notebook shows what the trace does not give as NaN, None or <NA>."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            shown = str(output.get("data", {}).get("text/html", ""))
            for sign in (">NaN<", ">None<", ">&lt;NA&gt;<", ">inf<", ">nan<"):
                assert sign not in shown, (sign, shown[:300])


def _figure_titles(notebook) -> list[str]:
    titles = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", output
            data = output.get("data", {})
            if PLOTLY in data:
                title = data[PLOTLY].get("layout", {}).get("title", {})
                titles.append(title.get("text", "") if isinstance(title, dict) else str(title))
    return titles


@pytest.fixture(scope="module")
def vit_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vit") / "vit.atlas"
    write_outputs(ingested("h100_vit_image_classify_infer"), out)
    return out


def test_notebooks_are_committed_without_outputs() -> None:
    import nbformat

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code"), path
        assert any("parameters" in c.metadata.get("tags", []) for c in notebook.cells), path


@pytest.mark.parametrize("which", ["example", "vit"])
def test_dashboard_runs_and_draws_every_figure(which: str, vit_out: Path) -> None:
    env = {} if which == "example" else {"ATLAS_OUT": str(vit_out)}
    notebook = execute("dashboard", env)
    titles = _figure_titles(notebook)
    for expected in ("GPU time: category", "Top", "Roofline", "Headroom", "nn.Module", "Timeline"):
        assert any(expected in t for t in titles), (expected, titles)
    loaded = "".join(o.get("text", "") for o in notebook.cells[2].outputs)
    assert loaded.startswith("vit:" if which == "vit" else "h100_bert_small_infer:"), loaded
    _no_missing_sign(notebook)
    # the filter panel was built, displayed and drew its first figures (kept in the widget state)
    widget_views = [
        o
        for c in notebook.cells
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(widget_views) >= 3
    state = str(notebook.metadata.get("widgets", {}))
    assert "Roofline" in state and "Timeline" in state


def test_dashboard_filters(vit_out: Path) -> None:
    from kernel_atlas.report import dashboard as dash

    run = dash.load_run(vit_out)
    options = dash.choices(run.kernels)
    assert options["category"] and options["step"] and options["module"]
    gemm = dash.filter_kernels(run.kernels, category="gemm", min_us=5.0)
    assert len(gemm) and set(gemm["category"].astype(str)) == {"gemm"} and gemm["dur_us"].min() >= 5.0
    module = options["module"][0]
    inside = dash.filter_kernels(run.kernels, module=module)
    assert len(inside) and inside["module"].astype(str).str.startswith(module).all()
    figures = dash.figures(run, gemm)
    assert set(figures) == {"timeshare", "top-kernels", "roofline", "headroom", "modules", "timeline"}
    assert {t.name for t in figures["roofline"].data} >= {"gemm"}
    details = dash.kernel_details(run.kernels, str(gemm["name"].iloc[0]))
    assert {"launcher", "input_dims", "call_stack", "count"} <= set(details.columns)
    analysis = run.analyse()
    main_gemm = analysis.roofline[(analysis.roofline["role"] == "main") & (analysis.roofline["category"] == "gemm")]
    position = dash.kernel_roofline(analysis, str(main_gemm["name"].iloc[0]))
    assert len(position) >= 1 and position["achieved_tflops"].notna().all()


def test_tables_show_what_the_trace_does_not_give_as_a_dash() -> None:
    """NaN, None, pandas' NA and ±inf read `–`; numbers and texts as they are, texts escaped."""
    import numpy as np
    import pandas as pd

    from kernel_atlas.report import dashboard as dash

    frame = pd.DataFrame(
        {
            "sol_pct": [41.5, np.nan, np.inf],
            "bound": ["memory", None, "<b>x</b>"],
            "count": pd.array([3, None, 1], dtype="Int64"),
            "launcher": pd.Categorical([None, "aten::mm", "aten::mm"]),
        }
    )
    cells = re.findall(r"<td>(.*?)</td>", dash.table_html(frame))
    assert cells == [
        "41.5",
        "memory",
        "3",
        "–",
        "–",
        "–",
        "–",
        "aten::mm",
        "–",
        "&lt;b&gt;x&lt;/b&gt;",
        "1",
        "aten::mm",
    ]
    assert len(re.findall(r"<tr>", dash.table_html(frame, 1))) == 1
    assert "<td>" not in dash.table_html(frame.iloc[0:0])


def test_compare_notebook_on_two_gpus(tmp_path: Path) -> None:
    a, b = tmp_path / "a100.atlas", tmp_path / "v100.atlas"
    write_outputs(ingested("a100_diff_control"), a)
    write_outputs(ingested("v100_diff_test"), b)
    notebook = execute("compare", {"ATLAS_OUT": str(a), "ATLAS_OUT_B": str(b)})
    titles = _figure_titles(notebook)
    assert any("per category" in t and "a100" in t and "v100" in t for t in titles), titles
    assert "biggest regressions" in str(notebook)
    _no_missing_sign(notebook)


def test_replay_notebook_without_replay_results(vit_out: Path) -> None:
    notebook = execute("replay", {"ATLAS_OUT": str(vit_out)})
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert "no replay.parquet" in printed
    assert any("Roofline" in t for t in _figure_titles(notebook))


def test_dashboard_command_writes_static_html(tmp_path: Path, vit_out: Path) -> None:
    """A separate process, so that what the notebook's kernel prints on stderr is seen: the kernel
    runs over local sockets, quietly (no "running over TCP without encryption" warning)."""
    page = tmp_path / "dash.html"
    command = [sys.executable, "-c", "from kernel_atlas.cli import app; app()", "dashboard", str(vit_out)]
    result = subprocess.run([*command, "--html", str(page)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "encryption" not in result.stderr and "WARNING" not in result.stderr, result.stderr
    text = page.read_text()
    assert PLOTLY in text or "plotly" in text.lower()
    assert "Roofline" in text
    assert "What to fix first" in text and "has a cost (FLOPs or bytes)" in text


def test_replay_notebook_with_replay_results(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from kernel_atlas.replay.runner import replay_all, targets_from_output

    out = tmp_path / "bert.atlas"
    write_outputs(ingested("h100_bert_small_infer"), out)
    # every op but the GEMMs (four addmm of 5–290 ms each on the CPU, timed ten times or more:
    # the replay's own tests time them); the notebook draws what was replayed
    targets = [t for t in targets_from_output(out) if t.launcher != "aten::addmm"]
    assert len(targets) >= 10
    replay_all(targets, "cpu").to_parquet(out / "replay.parquet", index=False)
    notebook = execute("replay", {"ATLAS_OUT": str(out)})
    titles = _figure_titles(notebook)
    assert any("Replayed vs traced" in t for t in titles), titles
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert "no replay.parquet" not in printed


def _get(url: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_dashboard_command_serves_the_notebook_in_jupyterlab(vit_out: Path, tmp_path: Path) -> None:
    """`atlas dashboard OUT --no-browser`: JupyterLab starts headless, the URL is printed, the
    notebook is served, and SIGTERM stops server and command."""
    pytest.importorskip("jupyterlab")
    import json
    import os
    import re
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    atlas = Path(sys.executable).with_name("atlas")
    if not atlas.exists():
        pytest.skip("the atlas console script is not installed next to this Python")
    command = [str(atlas), "dashboard", str(vit_out), "--no-browser"]
    log = (tmp_path / "jupyter.log").open("w")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=os.environ)
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://localhost:(\d+)/lab/tree/dashboard\.ipynb\?token=(\w+))", line)
        assert match, (line, (tmp_path / "jupyter.log").read_text())
        url, port, token = match.group(1), int(match.group(2)), match.group(3)
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/api/contents/dashboard.ipynb?token={token}")
                break
            except OSError:
                time.sleep(0.5)
        assert status == 200, (status, proc.poll())
        notebook = json.loads(body)
        assert notebook["type"] == "notebook" and notebook["name"] == "dashboard.ipynb"
        assert any("parameters" in c["metadata"].get("tags", []) for c in notebook["content"]["cells"])
        page_status, page = _get(url)
        assert page_status == 200 and b"JupyterLab" in page
        assert _get(f"http://127.0.0.1:{port}/api/contents/dashboard.ipynb")[0] == 403  # the token is needed
        # JupyterLab saves the notebook it runs, outputs and all: it serves a private copy, and the
        # shipped notebook (its folder holds the others too) is never written
        shipped = (NOTEBOOKS / "dashboard.ipynb").read_bytes()
        _, listing = _get(f"http://127.0.0.1:{port}/api/contents/?token={token}")
        assert [item["name"] for item in json.loads(listing)["content"]] == ["dashboard.ipynb"]
        notebook["content"]["cells"][0]["source"] = "saved by the test"
        saved = json.dumps({"type": "notebook", "format": "json", "content": notebook["content"]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/contents/dashboard.ipynb?token={token}", data=saved, method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        assert (NOTEBOOKS / "dashboard.ipynb").read_bytes() == shipped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) is not None
        with socket.socket() as sock:  # the server is gone with the command
            assert sock.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_the_dashboard_timeline_is_one_named_rank() -> None:
    # rank 0: no profiler steps, three kernels of 100 µs; rank 1: step 4, one kernel of 10 µs. The
    # first step over all ranks (4) had drawn rank 1's one kernel under no rank's name; rank 0
    # has the most GPU time (300 µs against 10): its whole window, named
    import pandas as pd

    from kernel_atlas.report.dashboard import _one_rank_timeline
    from kernel_atlas.report.html import timeline_figure

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
    timeline, note = _one_rank_timeline(kernels)
    assert (timeline.rank, len(timeline.rows), timeline.step, note) == (0, 3, None, "rank 0 of 2: the most GPU time")
    title = timeline_figure(timeline, note)["layout"]["title"]["text"]
    assert "rank 0 of 2: the most GPU time" in title
    one, none = _one_rank_timeline(kernels[kernels["rank"] == 1])
    assert (one.step, len(one.rows), none) == (4, 1, "")


def test_the_dashboard_cards_write_times_as_the_report_does_and_say_what_they_sum() -> None:
    # two ranks' devices, each busy 100 µs of a 1,000 µs span: 200 µs of 2,000 µs summed, said;
    # times as the terminal writes them (`200.0 µs`, not `0.200 ms`)
    from types import SimpleNamespace

    import pandas as pd

    from kernel_atlas.report.dashboard import summary_cards

    kernels = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "device": [0, 0, 0, 0],
            "stream": [7, 7, 7, 7],
            "kind": ["kernel"] * 4,
            "category": ["gemm"] * 4,
            "ts_us": [0.0, 950.0, 0.0, 950.0],
            "dur_us": [50.0, 50.0, 50.0, 50.0],
        }
    )
    cards = summary_cards(SimpleNamespace(summary={"traces": []}, device=None), kernels)
    assert "busy / span (2 devices summed)" in cards and "200.0 µs / 2.00 ms (10.0%)" in cards
    assert "idle (2 devices summed)" in cards and "1.80 ms" in cards
