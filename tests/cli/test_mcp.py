"""`atlas mcp`: a real MCP client (the SDK's stdio client) lists the tools and calls them; the
tools refuse writes, file access and paths outside the root, and never pass a credential on.
Numbers are read off the bundled example's JSON by hand: 60 `kernel` events and one
`gpu_memcpy`, 307.197 µs + 2.24 µs = 309.437 µs of GPU time."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.traces import EXAMPLE

mcp = pytest.importorskip("mcp")
GPU_TIME_US = 309.437
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # credential-shaped, split so no scanner trips here


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mcp_root")
    write_outputs(ingest_paths([EXAMPLE]), folder / "bert.atlas")
    (folder / "outside").mkdir()
    return folder


@pytest.fixture(scope="module")
def tools(root: Path):
    from kernel_atlas.mcp_server import Tools

    return Tools(root)


def test_runs_and_summary(tools) -> None:
    runs = tools.runs()["runs"]
    assert [r["run"] for r in runs] == ["bert.atlas"]
    summary = tools.summary("bert.atlas")
    assert summary["gpu_time_us"] == pytest.approx(GPU_TIME_US)
    assert summary["activities"] == {"kernel": 60, "memcpy": 1}
    assert "not reported yet" in summary["report"]


def test_query_counts_kernels_and_refuses_writes_and_files(tools, root: Path) -> None:
    rows = tools.query("bert.atlas", "SELECT kind, count(*) AS n FROM kernels GROUP BY kind ORDER BY kind")["rows"]
    assert rows == [{"kind": "kernel", "n": 60}, {"kind": "memcpy", "n": 1}]
    refused = [
        "CREATE TABLE t AS SELECT 1",
        "COPY (SELECT 1) TO 'x.csv'",
        "SELECT 1; SELECT 2",
        "SET enable_external_access = true",
        "ATTACH 'other.db'",
        f"SELECT * FROM read_text('{root / 'bert.atlas' / 'summary.json'}')",
        "SELECT * FROM read_csv('/etc/passwd')",
    ]
    for sql in refused:
        with pytest.raises(AtlasError):
            tools.query("bert.atlas", sql)
    assert not (root / "bert.atlas" / "x.csv").exists()


def test_row_limits(tools) -> None:
    answer = tools.query("bert.atlas", "SELECT * FROM kernels", limit=5)
    assert len(answer["rows"]) == 5 and answer["truncated"]
    top = tools.top_kernels("bert.atlas", limit=3)["rows"]
    assert len(top) == 3
    assert top[0]["total_us"] == pytest.approx(98.718)  # the cutlass wmma GEMM's 17 calls, summed from the JSON
    assert top[0]["calls"] == 17


def test_summary_lists_are_capped_with_their_totals(tools, monkeypatch) -> None:
    from kernel_atlas import mcp_server

    full = tools.summary("bert.atlas")
    assert len(full["traces"]) == 1 and "traces_total" not in full
    monkeypatch.setattr(mcp_server, "MAX_ROWS", 0)  # every list is then "longer than the cap"
    capped = tools.summary("bert.atlas")
    assert capped["traces"] == [] and capped["traces_total"] == 1
    assert capped["devices"] == [] and capped["devices_total"] == len(full["devices"]) >= 1


def test_paths_outside_the_root_are_refused(tools, root: Path, tmp_path: Path) -> None:
    for run in ("..", "../..", "/etc", str(root / "bert.atlas"), "outside", "bert.atlas/../.."):
        with pytest.raises(AtlasError):
            tools.summary(run)
    os.symlink(tmp_path, root / "escape")
    with pytest.raises(AtlasError, match="outside"):
        tools.summary("escape")


@pytest.mark.parametrize("run", ["a" * 300, "a" * 5000, "bert.atlas/" + "x/.." * 2000])
def test_a_run_name_longer_than_the_system_takes_is_one_line(tools, run: str) -> None:
    """`Path.resolve` and `is_file` raise ENAMETOOLONG: an OSError reached the SDK, which answered
    "Error executing tool" with no reason and printed ~300 lines of traceback on stderr."""
    with pytest.raises(AtlasError, match="not a run folder") as refused:
        tools.top_kernels(run)
    assert len(str(refused.value)) < 400


def test_no_credential_leaves_the_server(tools, root: Path) -> None:
    table = pa.table({"note": [f"token {TOKEN} here", "plain"]})
    pq.write_table(table, root / "bert.atlas" / "planted.parquet")
    text = json.dumps(tools.query("bert.atlas", "SELECT note FROM planted"))
    assert TOKEN not in text and "<redacted>" in text
    # a column alias keys every row: keys are redacted as values are
    aliased = json.dumps(
        tools.query("bert.atlas", f'SELECT 1 AS "{TOKEN}", \'https://u:sekret@h\' AS "https://u:sekret@h"')
    )
    assert TOKEN not in aliased and "sekret" not in aliased, aliased


def test_explain_and_diff(tools) -> None:
    label = tools.explain("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>")
    assert label["op_mapping"] == "add" and label["category"] == "elementwise"
    same = tools.diff("bert.atlas", "bert.atlas", fail_above_pct=5)
    assert same["verdict"]["failed"] is False
    assert same["comparability"]["kernels_matched_share"] == pytest.approx(1.0)
    stepped = tools.diff("bert.atlas", "bert.atlas", per_step=True)["comparability"]  # the example has one step
    assert stepped["per_step"] is True and stepped["a_steps"] == 1 and same["comparability"]["per_step"] is False


def test_a_real_client_over_stdio(root: Path) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", "from kernel_atlas.cli import app; app()", "mcp", "--root", str(root)]
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)

    async def session() -> dict[str, object]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            listed = await client.list_tools()
            summary = await client.call_tool("summary", {"run": "bert.atlas"})
            count = await client.call_tool("query", {"run": "bert.atlas", "sql": "SELECT count(*) AS n FROM kernels"})
            write_attempt = await client.call_tool("query", {"run": "bert.atlas", "sql": "DROP VIEW kernels"})
            return {
                "tools": [t.name for t in listed.tools],
                "read_only": all(t.annotations and t.annotations.read_only_hint for t in listed.tools),
                "summary": json.loads(summary.content[0].text),
                "count": json.loads(count.content[0].text),
                "write": (write_attempt.is_error, write_attempt.content[0].text),
            }

    seen = anyio.run(session)
    assert len(seen["tools"]) >= 5
    assert {"runs", "summary", "top_kernels", "findings", "query", "explain", "diff", "critical_path"} <= set(
        seen["tools"]
    )
    assert seen["read_only"]
    assert seen["summary"]["gpu_time_us"] == pytest.approx(GPU_TIME_US)
    assert seen["count"]["rows"] == [{"n": 61}]
    assert seen["write"][0] and "read-only" in seen["write"][1]


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("findings", {"a": 1}, "findings is not a list"),
        ("findings", [{"kind": "x", "what": "y", "evidence": "z", "saving_us": "1"}], "saving_us is not a number"),
        ("findings", [{"saving_us": 1.0}], "no kind, what, evidence"),
        ("gpu_time_us", "x", "gpu_time_us is not a number"),
        ("critical_path", [1], "critical_path is not an object"),
    ],
)
def test_a_doctored_report_json_is_one_line(tmp_path: Path, key: str, value: object, needle: str) -> None:
    """report.json of the same run with a field of another type: the dashboard ended in the
    notebook's traceback, the MCP tools in an internal error."""
    import shutil

    from kernel_atlas.mcp_server import Tools
    from kernel_atlas.report.build import build_report

    root = tmp_path / "root"
    write_outputs(ingest_paths([EXAMPLE]), root / "run")
    build_report(root / "run")
    report = json.loads((root / "run" / "report.json").read_text())
    report[key] = value
    (root / "run" / "report.json").write_text(json.dumps(report))
    for tool in ("findings", "summary"):
        with pytest.raises(AtlasError, match=needle):
            getattr(Tools(root), tool)("run")
    shutil.rmtree(root)


def test_a_query_is_bounded_in_time_and_memory(tools, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's SQL had only a row limit: `range(1e12)` ran until killed, a list of 3·10^8
    numbers reached 16.8 GB."""
    import kernel_atlas.mcp_server as server

    monkeypatch.setattr(server, "QUERY_SECONDS", 1)
    with pytest.raises(AtlasError, match="stopped after 1 s"):
        tools.query("bert.atlas", "SELECT count(*) FROM range(1000000000000)")
    monkeypatch.setattr(server, "QUERY_SECONDS", 120)  # on a loaded machine 1 s could end it before its memory does
    with pytest.raises(AtlasError, match=r"Out of Memory|stopped past 560 MiB"):
        tools.query("bert.atlas", "SELECT list(range) FROM range(300000000)")
    assert tools.query("bert.atlas", "SELECT count(*) AS n FROM kernels")["rows"] == [{"n": 61}]


def test_one_huge_value_is_bounded_too(tools, capfd: pytest.CaptureFixture[str]) -> None:
    """Building one 1.5 GB string neither checks DuckDB's interrupt nor counts against its memory
    limit: it ran 93 s and reached 6 GB, drawing a progress bar on the server's stderr. Its
    process is now killed once it has grown by 560 MiB; a long value that fits comes back cut."""
    start = time.monotonic()
    with pytest.raises(AtlasError, match="stopped past 560 MiB of memory"):
        tools.query("bert.atlas", "SELECT repeat('x', 1500000000) AS x")
    assert time.monotonic() - start < 60
    answer = tools.query("bert.atlas", "SELECT repeat('ab', 300000) AS x")
    text = answer["rows"][0]["x"]
    assert text.startswith("abab") and text.endswith("… (cut: 600,000 characters in all)")
    assert len(text) == 10_000 + len("… (cut: 600,000 characters in all)")
    assert "%" not in capfd.readouterr().err  # no progress bar
    # texts inside a list are cut too; an answer of 20,000 lists of 1,000 characters (~19 MiB of
    # JSON) is refused rather than handed on
    nested = tools.query("bert.atlas", "SELECT [repeat('y', 20000), 'z'] AS l")["rows"][0]["l"]
    assert nested[1] == "z" and nested[0].endswith("… (cut: 20,000 characters in all)")
    with pytest.raises(AtlasError, match="MiB of JSON, more than 16 MiB: ask for fewer rows"):
        tools.query("bert.atlas", "SELECT list(repeat('x', 1000)) AS l FROM range(20000)")
    # a column alias is cut once, the same in `columns` and in each row, a credential in it redacted
    alias = "ghp_" + "A" * 36 + " " + "c" * 12_000
    answer = tools.query("bert.atlas", f'SELECT 1 AS "{alias}"')
    cut = "<redacted> " + "c" * (10_000 - len("<redacted> ")) + "… (cut: 12,041 characters in all)"
    assert answer["columns"] == [cut] and answer["rows"] == [{cut: 1}]


def test_an_agents_odd_arguments_are_one_clear_tool_error(tools) -> None:
    """A lone surrogate in SQL was a TypeError inside DuckDB; a NaN threshold printed numpy's
    warnings: both are refused as the command line refuses them."""
    from mcp.server.mcpserver.exceptions import ToolError

    from kernel_atlas.mcp_server import _guarded

    with pytest.raises(ToolError, match="sql: not valid Unicode text"):
        _guarded(tools.query)(run="bert.atlas", sql="SELECT '\udcff'")
    with pytest.raises(ToolError, match="fail_above_pct: nan: not a finite number"):
        _guarded(tools.diff)(run_a="bert.atlas", run_b="bert.atlas", fail_above_pct=float("nan"))
    # a negative threshold is refused as --fail-above refuses it (-1e308 overflowed with numpy's warning)
    with pytest.raises(ToolError, match="fail_above_pct: -1e\\+308: give a percentage of 0 or more"):
        _guarded(tools.diff)(run_a="bert.atlas", run_b="bert.atlas", fail_above_pct=-1e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a huge one judges nothing, without a warning
        verdict = tools.diff("bert.atlas", "bert.atlas", fail_above_pct=1e308)["verdict"]
    assert verdict["regressions"] == []
    assert _guarded(tools.query)(run="bert.atlas", sql="SELECT 1 AS n")["rows"] == [{"n": 1}]
    # a limit under 1 had been read as 1, findings and critical_path saying nothing was cut
    for tool, args in (
        ("top_kernels", {"run": "bert.atlas"}),
        ("findings", {"run": "bert.atlas"}),
        ("critical_path", {"run": "bert.atlas"}),
        ("query", {"run": "bert.atlas", "sql": "SELECT 1"}),
    ):
        for limit in (0, -5):
            with pytest.raises(ToolError, match=f"limit: {limit}: give a number of rows of 1 or more"):
                _guarded(getattr(tools, tool))(**args, limit=limit)


def test_an_explanation_that_backtracks_is_stopped(tools, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's tool runs in no main thread, where no timer signal can stop a rule that
    backtracks over a name (`gemm_` × 3,200 against `gemm\\w*?tf32`: ~14 s for that rule alone);
    each explanation runs in a process of its own, stopped past EXPLAIN_SECONDS. Here an
    explanation that never ends stands in for the rule."""
    import kernel_atlas.mcp_server as server

    real = server._explanation

    def explanation(kernel: str, launcher: str | None, stack: list[str] | None) -> dict:
        while kernel.startswith("gemm_gemm_"):  # backtracking, for ever
            pass
        return real(kernel, launcher, stack)

    monkeypatch.setattr(server, "_explanation", explanation)
    monkeypatch.setattr(server, "EXPLAIN_SECONDS", 1)
    start = time.monotonic()
    with pytest.raises(AtlasError, match=r"^explain: stopped after 1 s \(the most `explain` may take\)"):
        tools.explain("gemm_" * 3200)
    assert time.monotonic() - start < 10
    assert tools.explain("ampere_sgemm_32x32_nn")["op_mapping"] == "matmul"  # a real name, as before


def test_messages_the_sdk_would_drop_unanswered_are_answered_and_bounded(root: Path) -> None:
    """Over raw stdio: a 30 MB request line (the SDK held a 100 MB one as 2.6 GB) and one nested
    100,000 deep (the SDK dropped it: its client waited for ever) each get a JSON-RPC error answer
    (invalid request, parse error) naming the refusal; the server then answers the next request
    as usual, within 300 MB (the 30 MB line is read in chunks: the server peaks at ~180 MB, as
    without it)."""
    import subprocess

    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    deep = "[" * 100_000 + "]" * 100_000
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "summary", "arguments": {"run": "'
        + "a" * 30_000_000
        + '"}}}',
        '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "runs", "arguments": {"x": '
        + deep
        + "}}}",
        '{"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"}',  # the SDK took it for a notification
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "runs", "arguments": {}}}),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = [sys.executable, "-c", "from kernel_atlas.cli import app; app()", "mcp", "--root", str(root)]
    process = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert process.stdin is not None and process.stdout is not None
    import threading

    watchdog = threading.Timer(60, process.kill)  # a server that never answers fails the test, not hangs it
    watchdog.start()
    process.stdin.write("\n".join(lines).encode() + b"\n")
    process.stdin.flush()
    answers: dict[int | None, dict] = {}
    while 4 not in answers:  # stdin stays open until the last answer (at its end the server stops)
        line = process.stdout.readline()
        assert line, "the server ended before answering request 4"
        answer = json.loads(line)
        answers[answer["id"]] = answer
    # the server's own peak (a forked process's rusage would count the test's pages it started from)
    status = Path(f"/proc/{process.pid}/status").read_text()
    peak_kib = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    process.stdin.close()
    process.wait()
    watchdog.cancel()
    too_long = f"Invalid Request: a message of {len(lines[2].encode()):,} bytes (over 4,194,304)"
    assert answers[2]["error"] == {"code": -32600, "message": too_long}
    assert answers[3]["error"]["code"] == -32700
    assert answers[3]["error"]["message"].startswith("Parse error: Invalid JSON: recursion limit exceeded")
    assert answers[None]["error"] == {
        "code": -32600,
        "message": "Invalid Request: its id is neither a number nor a text",
    }
    assert json.loads(answers[4]["result"]["content"][0]["text"])["runs"][0]["run"] == "bert.atlas"
    assert peak_kib < 300 * 1024


def _raw_session(root: Path, requests: list[dict], last: int) -> dict[int | None, dict]:
    """The answers of a server over raw stdio to `requests` (after initialize), by id, once the
    answer to request `last` came."""
    import subprocess
    import threading

    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        *(json.dumps(r) if isinstance(r, dict) else r for r in requests),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = [sys.executable, "-c", "from kernel_atlas.cli import app; app()", "mcp", "--root", str(root)]
    process = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert process.stdin is not None and process.stdout is not None
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    process.stdin.write("\n".join(lines).encode() + b"\n")
    process.stdin.flush()
    answers: dict[int | None, dict] = {}
    while last not in answers:
        line = process.stdout.readline()
        assert line, f"the server ended before answering request {last}"
        answer = json.loads(line)
        answers[answer.get("id")] = answer
    process.stdin.close()
    process.wait()
    watchdog.cancel()
    return answers


def test_credentials_spelled_with_json_escapes_are_not_echoed(root: Path) -> None:
    """The request line is redacted as the SDK decodes it: a token written `ghp\\u005f…`, a URL
    password behind `\\/` escapes or `\\u0040`, were echoed back decoded (an unknown tool's name,
    an unknown method, a validation error's input value). An argument of the wrong type is
    refused in one line (JSON-RPC invalid params) without its value."""
    escaped = TOKEN.replace("_", "\\u005f")
    url = "https:\\/\\/bob:SECRETPW99\\u0040example.com\\/"
    requests = [
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "' + escaped + '", "arguments": {}}}',
        '{"jsonrpc": "2.0", "id": 3, "method": "' + escaped + '", "params": {}}',
        '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "query", "arguments": '
        '{"run": "bert.atlas", "sql": "SELECT 1", "limit": "' + url + '"}}}',
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "query", "arguments": {"run": 1}}},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "runs", "arguments": {}}},
    ]
    answers = _raw_session(root, requests, 6)
    text = json.dumps(answers)
    assert TOKEN not in text and "SECRETPW99" not in text and "bob:" not in text
    assert answers[2]["result"]["isError"] and "redacted" in answers[2]["result"]["content"][0]["text"]
    assert answers[3]["error"]["code"] == -32601
    assert answers[4]["error"] == {
        "code": -32602,
        "message": "Invalid params: tool query: argument limit: Input should be a valid integer, "
        "unable to parse string as an integer",
    }
    assert answers[5]["error"]["code"] == -32602
    assert answers[5]["error"]["message"].startswith("Invalid params: tool query: argument run: ")
    assert "(and 1 more)" in answers[5]["error"]["message"]  # `sql` is missing too
    assert json.loads(answers[6]["result"]["content"][0]["text"])["runs"][0]["run"] == "bert.atlas"


def test_indentation_is_counted_as_the_sdk_writes_the_answer() -> None:
    """`{"a": [1, 2], "b": {}}` indented by 2: `{` / `  "a": [` / `    1,` / `    2` / `  ],` /
    `  "b": {}` / `}` — level 1 adds 2 × (1 + 2) + 1 (its close), level 2 adds 2 × (1 + 4) +
    (1 + 2): 7 + 13 = 20 bytes (json.dumps(indent=2) is 20 bytes longer than with separators
    (",", ":") but for the spaces after ":" and "," it writes compact)."""
    from kernel_atlas.mcp_server import MAX_NESTING, _indentation

    value = {"a": [1, 2], "b": {}}
    assert _indentation(value) == 20
    compact = json.dumps(value)  # '{"a": [1, 2], "b": {}}': 22 bytes
    assert len(json.dumps(value, indent=2)) == len(compact) + 20 - 2  # the ", " after 1 and "," after ] lose a space
    nested: list = [0]
    for _ in range(MAX_NESTING):
        nested = [nested]
    with pytest.raises(AtlasError, match=f"more than {MAX_NESTING} levels deep"):
        _indentation(nested)


def test_an_answer_that_only_indenting_makes_large_is_refused(tools) -> None:
    """A list of 300,000 zeros inside 25 lists: 0.9 MB of compact JSON, 17.7 MB more once
    indented (its zeros sit at level 29 — the answer, its rows, the row, 25 lists, the list —
    each on a line of its own: 300,000 × (1 + 2 × 29) bytes): past 16 MiB, refused, in the
    query's own process; nested past MAX_NESTING: refused by name; the same list flat is answered."""
    wrapped = "[" * 25 + "list_transform(range(300000), lambda x: 0)" + "]" * 25
    with pytest.raises(AtlasError, match="MiB of JSON, more than 16 MiB"):
        tools.query("bert.atlas", f"SELECT {wrapped} AS r")
    deep = "[" * 40 + "1" + "]" * 40
    with pytest.raises(AtlasError, match="levels deep"):
        tools.query("bert.atlas", f"SELECT {deep} AS r")
    flat = tools.query("bert.atlas", "SELECT list_transform(range(300000), lambda x: 0) AS r")
    assert len(flat["rows"][0]["r"]) == 300_000


def test_a_damaged_table_costs_only_itself(tmp_path: Path) -> None:
    """idle.parquet damaged (a Parquet header and footer with nothing between) and a table whose
    file name holds a quote: every query and `tables` answered `Error executing tool` with no
    reason (and `DESCRIBE "x"; select 1; --"` was pasted unquoted). Now the damaged table is left
    out and named, the others are read."""
    from kernel_atlas.mcp_server import Tools

    write_outputs(ingest_paths([EXAMPLE]), tmp_path / "r")
    (tmp_path / "r" / "idle.parquet").write_bytes(b"PAR1garbagePAR1")
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "r" / 'x"; select 1; --.parquet')
    tools = Tools(tmp_path)
    assert tools.query("r", "SELECT count(*) AS n FROM kernels")["rows"] == [{"n": 61}]
    listed = tools.tables("r")
    assert listed["tables"]['x"; select 1; --'] == ["x"] and "kernels" in listed["tables"]
    assert list(listed["unreadable"]) == ["idle"] and listed["unreadable"]["idle"].startswith("idle.parquet: ")
    with pytest.raises(AtlasError, match=r"idle.*left out, not readable: idle\.parquet: "):
        tools.query("r", "SELECT * FROM idle")


def test_a_call_waits_its_turn_then_is_refused(tools, monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers worked out beside the server run one at a time (four queries at once held 1.2 GB):
    a call that cannot start within BUSY_WAIT_SECONDS is refused in one line."""
    from kernel_atlas import mcp_server

    monkeypatch.setattr(mcp_server, "BUSY_WAIT_SECONDS", 0.2)
    assert mcp_server._TURNS.acquire(timeout=5)  # another call's turn
    try:
        with pytest.raises(AtlasError, match=r"busy: waited 0\.2 s for another call to end"):
            tools.query("bert.atlas", "SELECT 1 AS one")
    finally:
        mcp_server._TURNS.release()
    assert tools.query("bert.atlas", "SELECT 1 AS one")["rows"] == [{"one": 1}]


def test_a_reported_runs_summary_gives_the_reports_gpu_time(tmp_path: Path) -> None:
    # report.json sums the activities in its own order (309.437 µs); DuckDB's sum of the same rows
    # in another order may differ in the last bits (9778.613999999978 against 9778.614 on a shared
    # trace): the summary of a reported run gives the report's number, as the report states it
    from kernel_atlas.mcp_server import Tools
    from kernel_atlas.report.build import build_report
    from tests.support.traces import trace_path

    # mi300x_sglang_qwen3_8b_decode_graph: 9,778.614 µs of GPU activities, summed from its JSON
    write_outputs(ingest_paths([trace_path("mi300x_sglang_qwen3_8b_decode_graph")]), tmp_path / "run")
    build_report(tmp_path / "run")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    summary = Tools(tmp_path).summary("run")
    assert summary["gpu_time_us"] == report["gpu_time_us"] == pytest.approx(9778.614)


def test_the_server_says_its_version(root: Path) -> None:
    """`serverInfo.version` is `atlas -V`'s (campaign AP 9: the server said "")."""
    from kernel_atlas import __version__

    answers = _raw_session(root, [], last=1)
    info = answers[1]["result"]["serverInfo"]
    assert info["name"] == "kernel-atlas" and info["version"] == __version__ != ""
