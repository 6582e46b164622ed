"""Hostile input (issue 11): every damaged trace gives exit 0 with a correct result, or exit 2 with
one line naming the file and the problem — never a traceback, an "internal error", silently
wrong numbers or a leaked credential. Values are written into each test and checked by hand."""

from __future__ import annotations

import copy
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from kernel_atlas.ingest.sanity import usable_rows
from kernel_atlas.redact import REDACTED, redact_text
from tests.conftest import EXAMPLE, GPU_TRACES, ingested
from tests.hostile import assert_one_line_error, atlas, cli


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return json.loads(gzip.decompress(EXAMPLE.read_bytes()))


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _launching_ops(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The CPU ops called `name` that launch a kernel (same External id)."""
    launched = {e["args"].get("External id") for e in _kernels(doc)}
    return [
        e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == name
        and e["args"].get("External id") in launched
    ]  # fmt: skip


def _write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _ingest(trace: Path, out: Path) -> tuple[Any, pd.DataFrame, dict[str, Any]]:
    result = cli("ingest", trace, "-o", out, "-q")
    assert result.code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    return result, pd.read_parquet(out / "kernels.parquet"), summary


# --- names and paths in the terminal -----------------------------------------------------------


def test_paths_with_brackets_print_as_they_are(tmp_path: Path) -> None:
    trace = tmp_path / "trace[rank3].json.gz"
    trace.write_bytes(EXAMPLE.read_bytes())
    result = cli("ingest", trace, "-o", tmp_path / "out[bold]x")
    assert result.code == 0, result.output
    assert "trace[rank3].json.gz  rank 3" in result.stdout  # the rank comes from the name, and the name shows whole
    assert f"{tmp_path}/out[bold]x/catalog.json" in result.stdout.replace("\n", "")
    missing = cli("ingest", "missing[/x]/t.json")
    assert_one_line_error(missing, "missing[/x]/t.json: ")
    assert_one_line_error(cli("report", "gone[/red]"), "gone[/red]")


def test_kernel_names_with_markup_and_control_characters_print_literally(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    names = ["[bold red]evil[/] kernel", "closing [/x] tag", "two\nlines\x1b[31m"]
    for kernel, name in zip(sorted(_kernels(doc), key=lambda e: -e["dur"]), names, strict=False):
        kernel["name"] = name
    trace = _write(tmp_path, doc)
    ingest = atlas("ingest", trace, "-o", tmp_path / "o", "--wide", "--top", "100")
    assert ingest.code == 0, ingest.output
    assert "[bold red]evil[/] kernel" in ingest.stdout and "closing [/x] tag" in ingest.stdout
    assert "two\\nlines\\x1b[31m" in ingest.stdout and "\x1b" not in ingest.stdout
    for wide in ((), ("--wide",)):
        report = atlas("report", tmp_path / "o", "--top", "100", *wide)
        assert report.code == 0 and "\x1b" not in report.stdout, report.output
    explained = cli("explain", "closing [/x] tag", "--launcher", "aten::[/y]")
    assert explained.code == 0 and "closing [/x] tag" in explained.stdout


def test_progress_descriptions_are_not_markup() -> None:
    from kernel_atlas.report.progress import progress_bar

    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with progress_bar(console, "ingesting [/x]", total=2) as bar:
        bar.advance(detail="trace[/rank]\n.json")
        bar.advance(detail="[bold]b.json")
    assert "[/x]" in console.file.getvalue()  # type: ignore[attr-defined]


# --- parallel work: the same line from every engine ---------------------------------------------


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_one_bad_trace_among_several_is_named_the_same_by_every_engine(tmp_path: Path, engine: str) -> None:
    if engine == "ray":
        pytest.importorskip("ray")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    lines = set()
    for jobs in ("1", "2"):
        result = atlas("ingest", EXAMPLE, bad, "-j", jobs, "--engine", engine, "-o", tmp_path / f"o{jobs}", "-q")
        assert result.code == 2, result.output
        assert "Traceback" not in result.output and "internal error" not in result.output
        errors = [line for line in result.lines() if line.startswith("error:")]
        assert len(errors) == 1 and str(bad) in errors[0] and "truncated" in errors[0], result.output
        lines.add(errors[0])
        assert result.lines()[-1] == f"1 of 2 traces failed; the others are in {tmp_path / f'o{jobs}'}"
    assert len(lines) == 1


# --- credentials ----------------------------------------------------------------------------------

SECRETS = {
    "hf": "hf_" + "Ab1" * 12,
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "github": "ghp_" + "x9" * 18,
    "openai": "sk-proj-" + "Q7" * 12,
    "slack": "xoxb-1234567890-abcdefghij",
    "gitlab": "glpat-" + "z" * 20,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
    "bearer": "Bearer abcdef.ghijkl.mnopqr",
}


def test_credentials_in_trace_values_never_reach_an_output(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    op = _launching_ops(doc, "aten::addmm")[0]
    op["args"]["Concrete Inputs"] = [SECRETS["hf"], f"token {SECRETS['jwt']}", SECRETS["bearer"]]
    doc["deviceProperties"][0]["name"] = f"NVIDIA H100 {SECRETS['github']}"
    doc["distributedInfo"] = {"rank": 0, "world_size": 1, "backend": f"nccl {SECRETS['openai']}"}
    _kernels(doc)[0]["name"] = f"kernel_{SECRETS['aws']}"
    next(e for e in doc["traceEvents"] if e.get("cat") == "python_function")["name"] = f"x.py(1): f {SECRETS['slack']}"
    op["args"]["Input type"] = [SECRETS["gitlab"], "float", "float"]
    trace = _write(tmp_path, doc)
    out = tmp_path / "o"
    printed = [atlas("ingest", trace, "-o", out, "--wide"), atlas("report", out, "--wide")]
    assert all(p.code == 0 for p in printed), printed
    for file in (f for f in out.rglob("*") if f.is_file()):
        data = file.read_bytes()
        for secret in SECRETS.values():
            assert secret.encode() not in data, (file, secret)
    for result in printed:
        for secret in SECRETS.values():
            assert secret not in result.output
    assert "credentials" in printed[0].stderr and REDACTED in (out / "summary.json").read_text()
    frame = pd.read_parquet(out / "kernels.parquet")
    recorded = frame.loc[frame["launcher"] == "aten::addmm", "concrete_inputs"].dropna().unique()
    assert f'["{REDACTED}","token {REDACTED}","{REDACTED}"]' in set(recorded)


@pytest.mark.parametrize("stem", GPU_TRACES)
def test_real_traces_have_nothing_shaped_like_a_credential(stem: str) -> None:
    assert not [w for w in ingested(stem).warnings if "credentials" in w]


def test_credential_formats_and_what_is_kept() -> None:
    for secret in SECRETS.values():
        assert redact_text(f"x={secret};") == f"x={REDACTED};", secret
    assert redact_text("https://user:hunter2@host/x") == f"https://{REDACTED}@host/x"
    assert redact_text("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----") == REDACTED
    for kept in ("void at::native::vectorized_elementwise_kernel<4, AUnaryFunctor>", "mask-kernel", "task-sk-1",
                 "ampere_sgemm_128x64_tn", "hf_small", "xox", "Bearer", "nn.Module: TokenEmbedding_0"):  # fmt: skip
        assert redact_text(kept) == kept


# --- times and numbers the table cannot hold -------------------------------------------------------


def test_negative_durations_are_left_out_of_busy_time(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    kernels = _kernels(doc)
    kernels[3]["dur"] = -50.0
    kept_time = sum(k["dur"] for i, k in enumerate(kernels) if i != 3)
    result, frame, summary = _ingest(_write(tmp_path, doc), tmp_path / "o")
    assert "1 GPU activities with a negative duration were left out" in result.stderr
    assert (frame["dur_us"] >= 0).all() and int((frame["kind"] == "kernel").sum()) == len(kernels) - 1
    assert summary["traces"][0]["kernel_time_us"] == pytest.approx(kept_time)
    assert cli("report", tmp_path / "o").code == 0


def test_out_of_range_narrow_integers_become_null_not_wrapped() -> None:
    frame = pd.DataFrame(
        {
            "ts_us": [1.0, 2.0, 3.0, float("nan"), 5.0],
            "dur_us": [1.0, 1.0, 1.0, 1.0, float("inf")],
            "device": pd.array([0, 2**31 + 5, -(2**31) - 1, 1, 1], dtype="Int64"),
            "group_size": pd.array([8, 2**40, 4, 1, 1], dtype="Int64"),
            "input_dims": pd.Categorical(['[[1,2]]', '{"a":[1,2]}', None, '[[3]]', '[[4]]']),
        }
    )
    kept, warnings = usable_rows(frame)
    assert list(kept["device"].astype(object)) == [0, pd.NA, pd.NA]
    assert str(kept["device"].dtype) == "Int32" and str(kept["group_size"].dtype) == "Int32"
    assert list(kept["group_size"].astype(object)) == [8, pd.NA, 4]
    assert list(kept["input_dims"].astype(object).fillna("-")) == ["[[1,2]]", "-", "-"]
    assert warnings == [
        "2 GPU activities without a usable ts or dur were left out",
        "1 `input_dims` values are not lists (as the profiler records them): not recorded",
        "2 `device` values out of range (-2147483648…2147483647) set to null",
        "1 `group_size` values out of range (-2147483648…2147483647) set to null",
    ]


def test_a_wide_device_id_is_null_with_a_warning(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    _kernels(doc)[0]["args"]["device"] = 2**31 + 5
    result, frame, _ = _ingest(_write(tmp_path, doc), tmp_path / "o")
    assert "1 `device` values out of range" in result.stderr
    assert frame["device"].isna().sum() == 1 and (frame["device"].dropna() == 0).all()


@pytest.mark.parametrize(
    "dims",
    [{"a": [1, 2]}, [[-5, 2], [2, -7], [3, 3]], [[10**30, 2], [2, 10**30], [10**30, 10**30]], [[2**40, 2**40]] * 3],
    ids=["a-dict", "negative", "beyond-int64", "beyond-any-gpu"],
)
def test_impossible_input_dims_count_as_not_recorded(tmp_path: Path, example, dims: Any) -> None:
    doc = copy.deepcopy(example)
    for op in _launching_ops(doc, "aten::addmm"):
        op["args"]["Input Dims"] = dims
    _ingest(_write(tmp_path, doc), tmp_path / "o")
    report = cli("report", tmp_path / "o")
    assert report.code == 0, report.output
    roofline = pq.read_table(tmp_path / "o" / "roofline.parquet").to_pandas()
    addmm = roofline[roofline["launcher"] == "aten::addmm"]
    assert len(addmm) and addmm["flops"].isna().all() and addmm["bytes"].isna().all()
    assert addmm["note"].str.contains("no recorded shape").all()


def test_replay_on_a_missing_gpu_is_one_line() -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert_one_line_error(cli("replay", "--device", "cuda"), "--device cuda", "no CUDA/HIP GPU")
    assert_one_line_error(cli("replay", "--device", "cuda:3"), "--device cuda:3")
    assert_one_line_error(cli("replay", "--device", "tpu"), "--device tpu")
