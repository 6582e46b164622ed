"""Findings first: `atlas report` opens with what to fix first, ranked by estimated saving; the
default report fits 60 lines at 80 columns; `--full` and `--section` print more or less; the HTML
shows no `nan`/`None`. Savings are checked on small tables whose answer is worked out by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from kernel_atlas.analysis.findings import (
    Finding,
    communication_findings,
    end_to_end,
    headroom_findings,
    host_wait_findings,
    launch_findings,
    rank,
)
from kernel_atlas.cli import app
from kernel_atlas.ingest.fleet import write_outputs
from tests.support.browser import Chromium, chromium_binary
from tests.support.traces import EXAMPLE, ingested

runner = CliRunner()
STACK = "cuLaunchKernel <- aten::mm <- nn.Module: Linear_3 <- model/block.py(12): forward <- nn.Module: Block_0"


def test_one_finding_per_kernel_with_its_headroom_summed() -> None:
    roofline = pd.DataFrame(
        {
            # kernel k at two shapes: 50 µs with 30 µs headroom, 40 µs with 20 µs → 90 µs, 50 µs headroom,
            # 40 µs attainable: 44.4 % SOL. j: 10 µs, 1 µs headroom. h: a helper row (no headroom).
            "name": ["k", "k", "j", "h"],
            "op_mapping": ["matmul", "matmul", "add", "matmul"],
            "op_time_us": [50.0, 40.0, 10.0, 5.0],
            "headroom_us": [30.0, 20.0, 1.0, float("nan")],
            "count": [3, 2, 7, 1],
            "bound": ["memory", "compute", "memory", None],
            "call_stack": [STACK, STACK, None, None],
        }
    )
    found = headroom_findings(roofline)
    assert [(f.what, f.saving_us) for f in found] == [("k", 50.0), ("j", 1.0)]
    # where the roofline names a likely cause (occupancy, waves), the finding says it
    caused = headroom_findings(roofline.assign(likely_cause=[None, "low occupancy (est. 12%)", None, None]))
    assert caused[0].why == "memory-bound, 44.4 % SOL, low occupancy (est. 12%)"
    assert caused[0].evidence.endswith("; likely cause: low occupancy (est. 12%)")
    k = found[0]
    assert k.where == "matmul / Linear_3 / block.py(12): forward"
    assert k.why == "memory-bound, 44.4 % SOL"
    assert "90.0 µs in 5 calls, 40.0 µs attainable" in k.evidence


def test_kernel_findings_take_the_critical_paths_end_to_end_saving() -> None:
    k = Finding("k", "matmul", 50.0, "kernel_headroom", "90.0 µs in 5 calls (estimate: its own time)", kernel="k")
    j = Finding("j", "add", 1.0, "kernel_headroom", "…", kernel="j")
    # the what-if brought k's two rows to the roofline one at a time: 10 µs and 5 µs sooner end to end;
    # j was not weighed (smaller headroom), a kernel off the path saves nothing and is no finding
    pays = [
        {"kernel": "k", "end_to_end_saving_us": 10.0},
        {"kernel": "k", "end_to_end_saving_us": 5.0},
        {"kernel": "z", "end_to_end_saving_us": 0.0},
    ]
    (weighed,) = end_to_end([k, j], pays)
    assert weighed.saving_us == 15.0
    assert weighed.evidence == "90.0 µs in 5 calls; end to end by the critical path: 15.0 µs of 50.0 µs headroom"
    zero = Finding("z", "mm", 0.0, "kernel_headroom", "", kernel="z")
    assert rank([zero, weighed]) == [weighed]


def test_the_kernel_that_saves_end_to_end_is_weighed_however_small_its_headroom() -> None:
    """Five kernels beside the path (17.9 µs of headroom each, nothing saved end to end) took the
    five slots of the largest headroom before the critical path weighed them: the one kernel on
    the path (5.6 µs of headroom, 5.606 µs saved by the what-if) was cut, and the report said
    "nothing found that would save time". By hand: one finding, `main`, 5.606 µs."""
    from kernel_atlas.analysis.findings import report_findings

    names = ["main", "side0", "side1", "side2", "side3", "side4"]
    roofline = pd.DataFrame(
        {
            "name": names,
            "op_mapping": ["matmul"] * 6,
            "op_time_us": [2060.0] + [50.0] * 5,
            "headroom_us": [5.6] + [17.9] * 5,
            "count": [1] * 6,
            "bound": ["compute"] * 6,
            "call_stack": [None] * 6,
        }
    )
    pays = [{"kernel": "main", "op": "matmul", "end_to_end_saving_us": 5.606}]
    pays += [{"kernel": f"side{i}", "op": "matmul", "end_to_end_saving_us": 0.0} for i in range(5)]
    facts = {"critical_path": {"where_optimisation_pays": pays, "total_us": 2100.0}}
    found = report_findings(roofline, None, facts)
    assert [(f.kernel, f.saving_us) for f in found] == [("main", 5.606)]


def test_a_kernel_under_several_ops_takes_each_op_s_own_saving() -> None:
    """NCCL's SendRecv kernel runs all_reduce and all_to_all (a100_cudagraph_rank0): each finding
    takes the end-to-end saving of its own op's rows — 79.7 ms and 5.8 + 5.7 = 11.5 ms —, and a
    third under all_gather, which the what-if did not weigh, is no finding. Each was credited
    the kernel's 95.9 ms in all, the all_gather one against 3.4 ms of headroom (stop 57)."""
    send_recv = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    reduce, to_all, gather = (
        Finding("SendRecv", op, headroom, "kernel_headroom", "…", kernel=send_recv, op=op)
        for op, headroom in (("all_reduce", 80_000.0), ("all_to_all", 12_000.0), ("all_gather", 3_406.8))
    )
    pays = [
        {"kernel": send_recv, "op": "all_reduce", "end_to_end_saving_us": 79_673.5},
        {"kernel": send_recv, "op": "all_to_all", "end_to_end_saving_us": 5_792.8},
        {"kernel": send_recv, "op": "all_to_all", "end_to_end_saving_us": 5_701.4},
    ]
    weighed = end_to_end([reduce, to_all, gather], pays)
    assert [(f.where, f.saving_us) for f in weighed] == [("all_reduce", 79_673.5), ("all_to_all", 11_494.2)]
    assert "op" not in weighed[0].to_json()  # report.json's findings keep their keys


def test_launch_host_and_communication_findings_by_hand() -> None:
    candidates = pd.DataFrame(
        {
            "module": ["M"],
            "frame": ["f.py(1): g"],
            "call_stack": [None],
            "stream": [7],
            "saving_us": [120.0],
            "host_wait_us": [100.0],
            "kernel_wait_us": [20.0],
            "stretches": [2],
            "kernels": [40],
            "gpu_us": [60.0],
            "device_idle_us": [120.0],
        }
    )
    (launch,) = launch_findings(candidates)
    assert (launch.kind, launch.saving_us, launch.where) == ("launch_bound", 120.0, "M / f.py(1): g / stream 7")
    (unknown,) = launch_findings(candidates.assign(stream=[float("nan")]))  # a stream not known: not `stream nan`
    assert unknown.where == "M / f.py(1): g"
    causes = pd.DataFrame({"module": ["M"], "frame": ["a/b/f.py(9): h"], "gaps": [3], "idle_us": [80.0], "pct": [40.0]})
    (host,) = host_wait_findings(causes)
    assert (host.saving_us, host.where, host.why) == (80.0, "M / f.py(9): h", "40.0 % of host-wait idle")
    devices = [
        {"rank": 0, "device": 0, "communication_us": 100.0, "overlap_us": 30.0, "overlap_pct_of_communication": 30.0},
        {"rank": 1, "device": 0, "communication_us": 50.0, "overlap_us": 50.0, "overlap_pct_of_communication": 100.0},
    ]
    (comm,) = communication_findings(devices)  # rank 1 hides all of it: nothing to gain there
    assert (comm.saving_us, comm.where) == (70.0, "rank 0 device 0")
    assert [f.kind for f in rank([host, comm, launch])] == ["launch_bound", "host_wait", "exposed_communication"]


@pytest.fixture(scope="module")
def example_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("findings") / "bert.atlas"
    from kernel_atlas.ingest.pipeline import ingest_paths

    write_outputs(ingest_paths([EXAMPLE]), out)
    return out


def test_the_report_opens_with_findings_and_fits_60_lines(example_out: Path) -> None:
    result = runner.invoke(app, ["report", str(example_out)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) <= 60 and max(cell_len(line) for line in lines) <= 80
    head = "\n".join(lines[:15])
    assert "device NVIDIA H100" in head and "busy" in head and "What to fix first" in head
    findings = json.loads((example_out / "report.json").read_text())["findings"]
    assert len(findings) >= 3 and all(f["saving_us"] > 0 for f in findings)
    assert [f["saving_us"] for f in findings] == sorted((f["saving_us"] for f in findings), reverse=True)
    assert all(set(f) >= {"what", "where", "saving_us", "kind", "evidence"} for f in findings)
    # report.html and the dashboard show each finding's `what` as report.json has it: a phrase
    # such as "CUDA-graph 51 short kernels" had been shortened as a kernel name, to "kernels"
    from kernel_atlas.report.dashboard import findings_html, load_run

    page, dash = (example_out / "report.html").read_text(), findings_html(load_run(example_out))
    phrases = [f["what"] for f in findings if f["kind"] != "kernel_headroom"]
    assert any(w.startswith("CUDA-graph ") and w.endswith(" short kernels") for w in phrases), phrases
    for what in phrases:
        assert f">{what}</td>" in page and f"{what} — " in dash, what
    full = runner.invoke(app, ["report", str(example_out), "--full"], env={"COLUMNS": "80"})
    assert len(full.output.splitlines()) > len(lines)
    only = runner.invoke(app, ["report", str(example_out), "--section", "findings"], env={"COLUMNS": "80"})
    assert only.exit_code == 0 and only.output.startswith("What to fix first")
    assert "GPU time by category" not in only.output
    bad = runner.invoke(app, ["report", str(example_out), "--section", "nope"])
    assert bad.exit_code == 2 and "no section nope" in bad.output


@pytest.mark.parametrize(
    "stem", ["h100_vit_image_classify_infer", "a100_nccl_8rank_rank0", "a100_cudagraph_rank0", "v100_diff_test"]
)
def test_shared_traces_fit_60_lines_at_80_columns(stem: str, tmp_path: Path) -> None:
    out = tmp_path / f"{stem}.atlas"
    write_outputs(ingested(stem), out)
    result = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) <= 60, result.output
    assert any(line.startswith("What to fix first") for line in lines[:15])
    html = (out / "report.html").read_text()
    _no_missing_words(html)


def _no_missing_words(page: str) -> None:
    """No `nan`, `NaN` or `None` in the page's text nor in any table cell it renders."""
    for payload in re.findall(r"<script type='application/json'>(.*?)</script>", page, re.S):
        table = json.loads(payload.replace("<\\/", "</"))
        cells = [str(t) for row in table["rows"] for t in row["t"]]
        assert not [c for c in cells if re.search(r"\b(nan|NaN|None)\b", c)]
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    assert not re.search(r"\b(nan|NaN|None)\b", re.sub(r"<[^>]+>", " ", text))


@pytest.mark.skipif(chromium_binary() is None, reason="no Chromium on this machine")
def test_the_rendered_page_shows_no_nan(example_out: Path, tmp_path: Path) -> None:
    runner.invoke(app, ["report", str(example_out)])
    with Chromium.start(tmp_path / "profile") as browser:
        browser.open((example_out / "report.html").as_uri(), settle_s=1.0)
        text = browser.evaluate("document.body.innerText")
        assert not browser.errors
    assert "What to fix first" in text
    assert not re.search(r"\b(nan|NaN|None)\b", text)
