"""Bad input: one line naming the file and the problem, non-zero exit, no traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from tests.support.traces import EXAMPLE, trace_path

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


def _assert_one_line_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert needle in lines[0]


def test_truncated_json(tmp_path: Path) -> None:
    text = gzip.decompress(EXAMPLE.read_bytes())
    bad = tmp_path / "truncated.json"
    bad.write_bytes(text[: len(text) // 2])
    _assert_one_line_error(_run("ingest", str(bad), "-o", str(tmp_path / "o")), "truncated")


def test_truncated_gzip(tmp_path: Path) -> None:
    data = EXAMPLE.read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    _assert_one_line_error(_run("ingest", str(bad), "-o", str(tmp_path / "o")), "cut.json.gz")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "empty"),
        (b"hello world", "not JSON"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": 3}', "not a Chrome/Kineto trace"),
        (b'{"traceEvents": "7"}', "not a Chrome/Kineto trace"),
        # packed in what is not read: named, with what to do
        (
            gzip.compress(gzip.compress(b'{"traceEvents": []}', mtime=0), mtime=0),
            "gzip inside gzip: decompress the outer layer",
        ),
        (b"BZh91AY&SY\x00\x01", "bzip2-compressed (gzip and zstd are read): decompress it first"),
        (b"\xfd7zXZ\x00\x00\x04", "xz-compressed (gzip and zstd are read): decompress it first"),
        (b"PK\x03\x04\x14\x00\x00\x00", "a zip archive: extract the trace first"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, needle: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    result = _run("ingest", str(bad), "-o", str(tmp_path / "o"))
    _assert_one_line_error(result, needle)
    assert "bad.json" in result.output


def test_directory_and_missing_path(tmp_path: Path) -> None:
    _assert_one_line_error(_run("ingest", str(tmp_path), "-o", str(tmp_path / "o")), "directory")
    _assert_one_line_error(_run("ingest", str(tmp_path / "nope.json"), "-o", str(tmp_path / "o")), "no such file")


def test_cpu_only_trace_warns_and_writes_empty_tables(tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = _run("ingest", str(trace_path("cpu_only")), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "no GPU events" in result.output
    assert pq.read_table(out / "kernels.parquet").num_rows == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["traces"][0]["kernels"] == 0


def test_events_missing_fields_and_bare_list(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 10, "dur": 2, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 20},  # no args, no dur: left out (issue 11)
        {"ph": "X", "cat": "kernel", "name": "k3", "ts": 30, "dur": 1},  # no args
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": "p",
            "tid": "t",
            "ts": 5,
            "dur": 1,
            "args": {"correlation": 7},
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": "p", "tid": "t", "ts": 4, "dur": 3},
    ]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(events))
    out = tmp_path / "o"
    result = _run("ingest", str(path), "-o", str(out))
    assert result.exit_code == 0, result.output
    frame = pq.read_table(out / "kernels.parquet").to_pandas()
    assert list(frame["name"]) == ["k1", "k3"]
    assert frame["launcher"].iloc[0] == "aten::mm"
    assert frame["launcher"].isna().iloc[1]
    assert "no correlation id" in result.output
    assert "1 GPU activity without a usable ts or dur was left out" in result.output


@pytest.mark.parametrize("ending", ["", ",", ",\n  ", "\n"])
def test_a_bare_list_without_its_closing_bracket_is_read_to_the_end(tmp_path: Path, ending: str) -> None:
    """The JSON Array Format lets a writer leave the closing `]` out (a trace written while the
    program ran); an event cut short is still a truncated file."""
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": 10 * i, "dur": 2, "args": {}} for i in range(3)]
    text = json.dumps(events)[:-1]
    (tmp_path / "open.json").write_text(text + ending)
    result = _run("ingest", str(tmp_path / "open.json"), "-o", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert list(pq.read_table(tmp_path / "o" / "kernels.parquet").to_pandas()["name"]) == ["k0", "k1", "k2"]
    assert "the events array has no closing ']'" in result.output
    (tmp_path / "cut.json").write_text(text[:-5])
    result = _run("ingest", str(tmp_path / "cut.json"), "-o", str(tmp_path / "o2"))
    assert result.exit_code == 2 and "JSON is truncated" in result.output


def test_credentials_in_metadata_never_reach_outputs(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    doc["metadata"] = {"HF_TOKEN": "hf_SECRETVALUE123", "env": {"AWS_SECRET_ACCESS_KEY": "AKIASECRET999"}}
    doc["distributedInfo"] = {"rank": 0, "world_size": 1, "api_key": "sk-SECRET-KEY-456"}
    doc["deviceProperties"][0]["password"] = "PASSWORD-789"
    path = tmp_path / "with_secrets.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "o"
    result = _run("ingest", str(path), "-o", str(out))
    assert result.exit_code == 0, result.output
    for file in (f for f in out.rglob("*") if f.is_file()):  # kernels.parquet is a folder of files
        data = file.read_bytes()
        for secret in (b"hf_SECRETVALUE123", b"AKIASECRET999", b"sk-SECRET-KEY-456", b"PASSWORD-789"):
            assert secret not in data, (file, secret)
    for secret in ("hf_SECRETVALUE123", "AKIASECRET999", "sk-SECRET-KEY-456", "PASSWORD-789"):
        assert secret not in result.output


def test_gpu_events_without_any_host_events(tmp_path: Path) -> None:
    path = tmp_path / "kernels_only.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "k1",
                        "pid": 0,
                        "tid": 7,
                        "ts": 1,
                        "dur": 2,
                        "args": {"correlation": 5, "device": 0, "stream": 7},
                    },
                ]
            }
        )
    )
    out = tmp_path / "o"
    result = _run("ingest", str(path), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "launch not in the trace" in result.output
    frame = pq.read_table(out / "kernels.parquet").to_pandas()
    assert len(frame) == 1 and frame["launch"].isna().all()
    report = _run("report", str(out))
    assert report.exit_code == 0, report.output
    assert "no cost" in report.output


def test_empty_event_list_and_report_on_it(tmp_path: Path) -> None:
    path = tmp_path / "no_events.json"
    path.write_text('{"traceEvents": []}')
    out = tmp_path / "o"
    assert _run("ingest", str(path), "-o", str(out)).exit_code == 0
    _assert_one_line_error(_run("report", str(out)), "no GPU activities")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ["report", "--kernel-wait-us", "-1", "x"],
            ["'--kernel-wait-us'", "greater than or equal to 0", "atlas report"],
        ),
        (["report", "--bogus", "x"], ["No such option: --bogus", "atlas report --help"]),
        (["nosuch"], ["No such command 'nosuch'", "atlas --help"]),
        (["report"], ["Missing argument 'source'", "atlas report --help"]),
        (["report", "--window"], ["Option '--window' requires an argument", "atlas report --help"]),
        # no port: JupyterLab was started on one of its own and served until killed
        (["dashboard", "x", "--port", "99999"], ["'--port'", "less than or equal to 65535", "atlas dashboard"]),
        (["dashboard", "x", "--port", "0"], ["'--port'", "greater than or equal to 1", "atlas dashboard"]),
    ],
)
def test_usage_errors_are_one_line(args: list[str], needles: list[str]) -> None:
    """An unknown option or command, a value out of range, a missing argument: one line and exit
    2 as other bad input (click's own is a box of five lines)."""
    from tests.support.hostile import assert_one_line_error, atlas

    assert_one_line_error(atlas(*args), *needles)


def test_help_still_exits_zero_and_no_arguments_still_shows_it() -> None:
    from tests.support.hostile import atlas

    shown = atlas("--help")
    assert shown.code == 0 and "ingest" in shown.stdout and not shown.stderr
    bare = atlas()  # the help, and one line naming what is missing (was a blank line)
    assert bare.code == 2 and "ingest" in bare.stdout
    assert bare.stderr.strip().splitlines() == ["error: no command given (see atlas --help)"]
