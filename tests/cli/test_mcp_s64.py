"""`atlas mcp`, campaign AH: `runs` survives a damaged run, `top_kernels` keeps a kernel name's
ops apart, `critical_path`'s `limit` cuts every list, `explain` is bounded, refusals keep their
words (redacted apart, paths relative to the root) and the tool descriptions say what the tools
return. Numbers are written by hand from the traces built here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.traces import EXAMPLE

mcp = pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
)
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9, "numSms": 132}


def _one_name_two_ops() -> dict[str, Any]:
    """One kernel name launched by `aten::add` once (30 µs) and by `aten::sub` twice (70 µs
    each); no profiler step."""
    events: list[dict[str, Any]] = []
    for i, (op, ts, dur) in enumerate(
        (("aten::add", 10_000, 30.0), ("aten::sub", 10_100, 70.0), ("aten::sub", 10_200, 70.0))
    ):
        external, correlation = 1000 + i, 100 + i
        dims = {"Input Dims": [[64, 64], [64, 64], []], "Input type": ["float", "float", "float"]}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": ts - 50, "dur": 8,
             "args": {"External id": external, **dims}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts - 49,
             "dur": 5, "args": {"correlation": correlation, "External id": external}},
            {"ph": "X", "cat": "kernel", "name": ELEMENTWISE, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {"correlation": correlation, "External id": external, "device": 0, "stream": 7}},
        ]  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [H100]}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kernel_atlas.report.build import build_report

    folder = tmp_path_factory.mktemp("mcp_s64")
    trace = folder / "traces" / "two_ops.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps(_one_name_two_ops()))
    write_outputs(ingest_paths([trace]), folder / "two_ops.atlas")
    write_outputs(ingest_paths([EXAMPLE]), folder / "bert.atlas")
    build_report(folder / "bert.atlas")
    return folder


@pytest.fixture(scope="module")
def tools(root: Path):
    from kernel_atlas.mcp_server import Tools

    return Tools(root)


def _refusal(tools: Any, name: str, **arguments: Any) -> str:
    """What the agent reads when the tool refuses: the MCP tool error `_guarded` raises."""
    from mcp.server.mcpserver.exceptions import ToolError

    from kernel_atlas.mcp_server import _guarded

    with pytest.raises(ToolError) as refused:
        _guarded(getattr(tools, name))(**arguments)
    return str(refused.value)


# --- 1: one damaged run does not hide the others ---------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ('{"broken', "bad.atlas/report.json: not valid JSON"),
        ("findings", "bad.atlas/report.json: not a report of `atlas report`: findings[0].saving_us is not a number"),
    ],
)
def test_runs_lists_every_run_and_a_damaged_one_with_its_error(
    tmp_path: Path, root: Path, damage: str, problem: str
) -> None:
    from kernel_atlas.mcp_server import Tools

    shutil.copytree(root / "bert.atlas", tmp_path / "good.atlas")
    shutil.copytree(root / "bert.atlas", tmp_path / "bad.atlas")
    report = tmp_path / "bad.atlas" / "report.json"
    if damage == "findings":  # the same run's report, a finding without its saving
        document = json.loads(report.read_text())
        del document["findings"][0]["saving_us"]
        report.write_text(json.dumps(document))
    else:
        report.write_text(damage)
    tools = Tools(tmp_path)
    runs = tools.runs()["runs"]
    assert [r["run"] for r in runs] == ["bad.atlas", "good.atlas"]
    assert set(runs[0]) == {"run", "error"} and runs[0]["error"].startswith(problem), runs[0]
    assert str(tmp_path) not in runs[0]["error"]
    assert runs[1] == {
        "run": "good.atlas",
        "traces": ["h100_bert_small_infer.json.gz"],
        "gpus": ["NVIDIA H100 80GB HBM3"],
        "reported": True,
    }
    assert tools.summary("good.atlas")["activities"] == {"kernel": 60, "memcpy": 1}


# --- 8: a kernel name launched by two ops ------------------------------------------------------------


def test_top_kernels_keeps_a_names_ops_apart(tools) -> None:
    rows = tools.top_kernels("two_ops.atlas")["rows"]
    got = [(r["name"], r["op_mapping"], r["category"], r["calls"], r["total_us"]) for r in rows]
    assert got == [
        (ELEMENTWISE, "sub", "elementwise", 2, pytest.approx(140.0)),
        (ELEMENTWISE, "add", "elementwise", 1, pytest.approx(30.0)),
    ]
    # shares of the 170 µs: 140/170 and 30/170
    assert [r["pct_of_gpu_time"] for r in rows] == [pytest.approx(82.3529, abs=1e-3), pytest.approx(17.6471, abs=1e-3)]


# --- 9: `limit` cuts every list of the critical path ---------------------------------------------------


def _lists(value: Any, where: str = "") -> list[tuple[str, int]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _lists(item, f"{where}.{key}")]
    if isinstance(value, list):
        return [(where, len(value)), *(found for item in value for found in _lists(item, f"{where}[]"))]
    return []


def test_critical_path_limit_cuts_the_nested_lists_too(tools, root: Path) -> None:
    recorded = json.loads((root / "bert.atlas" / "report.json").read_text())["critical_path"]
    # the example's path: 3 categories, 10 ops and 10 frames in `top`, 8 places where optimisation pays
    assert [len(recorded["top"][k]) for k in ("category", "op", "frame")] == [3, 10, 10]
    cut = tools.critical_path("bert.atlas", limit=2)
    assert all(length <= 2 for _, length in _lists(cut)), _lists(cut)
    assert cut["top"]["category"] == recorded["top"]["category"][:2]
    assert cut["top"]["op"] == recorded["top"]["op"][:2]
    assert cut["where_optimisation_pays"] == recorded["where_optimisation_pays"][:2]
    assert cut["truncated"] is True and cut["total_us"] == recorded["total_us"]
    whole = tools.critical_path("bert.atlas", limit=500)
    assert whole["truncated"] is False and whole["top"]["op"] == recorded["top"]["op"]


# --- 10: explain's answer is bounded ------------------------------------------------------------------


def test_explain_of_a_huge_name_is_a_bounded_answer(tools) -> None:
    answer = tools.explain("a" * 300_000)
    assert answer["kernel"] == "a" * 10_000 + "… (cut: 300,000 characters in all)"
    assert len(json.dumps(answer)) < 12_000
    short = tools.explain("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>")
    assert short["kernel"] == "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


# --- 11: refusals keep their words -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "said"),
    [
        ("../../etc/passwd", "../../etc/passwd: outside the server's root"),
        ("secret", "secret: not a run folder (no summary.json): list them with the `runs` tool"),
        ("runs/password", "runs/password: not a run folder (no summary.json): list them with the `runs` tool"),
        ("my_api_key", "my_api_key: not a run folder (no summary.json): list them with the `runs` tool"),
        # the run's name holding a credential: that is still redacted
        ("password=hunter2", "password=<redacted>: not a run folder (no summary.json): list them with the `runs` tool"),
        ("ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "<redacted>: not a run folder"),
    ],
)
def test_a_refusal_keeps_its_words_and_redacts_the_run_name(tools, run: str, said: str) -> None:
    assert _refusal(tools, "summary", run=run).startswith(said)


# --- 12: descriptions, docs and the per_step refusal ---------------------------------------------------


def test_tool_descriptions_say_what_the_tools_return(root: Path) -> None:
    from kernel_atlas.mcp_server import TOOL_NAMES, build_server

    server = build_server(root)
    described = {name: server._tool_manager.get_tool(name).description for name in TOOL_NAMES}
    for name, text in described.items():
        assert "\n" not in text and "  " not in text, (name, text)  # no docstring indentation
        assert not re.search(r"\b[A-Z]+_[A-Z_]+\b", text), (name, text)  # no code constants (MAX_DEPTH)
    runs = described["runs"]
    assert "4 levels" in runs and "GPU time" not in runs and "reported" in runs and "error" in runs
    assert "of that rank" in described["top_kernels"] and "op" in described["top_kernels"]


def test_agents_md_lists_every_argument_of_every_tool() -> None:
    import inspect

    from kernel_atlas.mcp_server import TOOL_NAMES, Tools

    table = {}
    for line in (REPO / "docs" / "agents.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            table[cells[0].strip("`")] = set(re.findall(r"`(\w+)`", cells[1]))
    for name in TOOL_NAMES:
        parameters = set(inspect.signature(getattr(Tools, name)).parameters) - {"self"}
        assert name in table and parameters == table[name], (name, parameters, table.get(name))


def test_the_per_step_refusal_speaks_the_tools_language(tools, root: Path) -> None:
    said = _refusal(tools, "diff", run_a="bert.atlas", run_b="two_ops.atlas", per_step=True)
    # one trace without distributedInfo: "it" (a rank of several: "rank N")
    assert said == "two_ops.atlas: it records no profiler steps: `per_step` needs ProfilerStep ranges"
    assert str(root) not in said and "--per-step" not in said


def test_a_refusal_names_files_under_the_root_relative_to_it(tmp_path: Path, root: Path) -> None:
    from kernel_atlas.mcp_server import Tools

    shutil.copytree(root / "bert.atlas", tmp_path / "run.atlas")
    (tmp_path / "run.atlas" / "report.json").write_text("[")
    said = _refusal(Tools(tmp_path), "findings", run="run.atlas")
    assert said.startswith("run.atlas/report.json: not valid JSON") and str(tmp_path) not in said


def test_a_refusal_is_still_an_atlas_error_in_process(tools) -> None:
    with pytest.raises(AtlasError, match="not a run folder"):
        tools.summary("secret")
