"""Issue 27's second hostile-input campaign: each class that ended in "internal error", lost a
usable trace or broke a promise, built by hand from the example trace (so the test runs without
the shared traces) and checked end to end through `atlas ingest` and `atlas report`."""

from __future__ import annotations

import copy
import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.events import step_number
from tests.support.hostile import assert_one_line_error, cli
from tests.support.traces import EXAMPLE


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return json.loads(gzip.decompress(EXAMPLE.read_bytes()))


def _write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _ingest_and_report(trace: Path, out: Path) -> tuple[pd.DataFrame, str]:
    """Ingest then report; both must end in exit 0 with only warnings on stderr."""
    from kernel_atlas.store.outputs import load_kernels

    ingest = cli("ingest", trace, "-o", out, "-q")
    assert ingest.code == 0, ingest.output
    assert all(line.startswith("warning: ") for line in ingest.lines()), ingest.stderr
    report = cli("report", out)
    assert report.code == 0, report.output
    assert not report.lines(), report.stderr
    return load_kernels(out), ingest.stderr


# --- wide dictionaries -----------------------------------------------------------------------------


def test_three_hundred_collective_names_and_dtypes_fit_their_columns(tmp_path: Path, example) -> None:
    """300 distinct `Collective name`s and `dtype`s overflowed an int8 dictionary index
    (ArrowInvalid: Integer value 128 not in range) and lost the whole trace."""
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for i in range(300):
        kernel = copy.deepcopy(kernels[i % len(kernels)])
        kernel["ts"] += 0.001 * (i + 1)
        kernel["args"].update({"correlation": 10**7 + i, "Collective name": f"coll_{i}", "dtype": f"dt{i}"})
        doc["traceEvents"].append(kernel)
    frame, _ = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert len(frame) == 61 + 300  # the example's 60 kernels + 1 memcpy, and the 300 added
    assert frame["collective"].nunique() == 300 and frame["msg_dtype"].nunique() == 300
    assert set(frame["collective"].dropna()) == {f"coll_{i}" for i in range(300)}


def test_a_later_rank_with_more_distinct_values_keeps_the_dataset_readable(tmp_path: Path, example) -> None:
    """Rank 0 with a few collective names, rank 1 with 300: every rank file has the same index
    type, so pandas and pyarrow.dataset read the whole kernels.parquet (a reader casts every file
    to the first one's schema: an int8 index there failed on rank 1, "Integer value 128 not in
    range")."""
    import duckdb
    import pyarrow.dataset as ds

    wide = copy.deepcopy(example)
    kernels = [e for e in wide["traceEvents"] if e.get("cat") == "kernel"]
    for i in range(300):
        kernel = copy.deepcopy(kernels[i % len(kernels)])
        kernel["ts"] += 0.001 * (i + 1)
        kernel["args"].update({"correlation": 10**7 + i, "Collective name": f"coll_{i}"})
        wide["traceEvents"].append(kernel)
    (tmp_path / "ranks").mkdir()
    _write(tmp_path / "ranks", example, "run_rank0.json")
    _write(tmp_path / "ranks", wide, "run_rank1.json")
    assert cli("ingest", tmp_path / "ranks", "-o", tmp_path / "out", "-q").code == 0
    frame = pd.read_parquet(tmp_path / "out" / "kernels.parquet")
    assert sorted(frame["rank"].unique()) == [0, 1] and len(frame) == 2 * 61 + 300
    assert frame["collective"].nunique() == 300
    assert ds.dataset(tmp_path / "out" / "kernels.parquet", partitioning="hive").to_table().num_rows == 422
    [(distinct,)] = duckdb.sql(
        f"SELECT count(DISTINCT collective) FROM read_parquet('{tmp_path}/out/kernels.parquet/*/*.parquet')"
    ).fetchall()
    assert distinct == 300


# --- odd digits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("ProfilerStep#12", 12),
        ("ProfilerStep#0", 0),
        ("ProfilerStep#\u00b2", None),  # a superscript two: str.isdigit() says yes, int() refuses
        ("ProfilerStep#\u0663", None),  # an Arabic-Indic three: int() reads 3, but it is no step number
        ("ProfilerStep#" + "9" * 30, None),  # beyond int64
        ("ProfilerStep#9007199254740993", None),  # 2^53 + 1: not exact in float64
        ("ProfilerStep#-1", None),
        ("ProfilerStep#", None),
        ("ProfilerStep", None),
    ],
)
def test_step_numbers_are_plain_digits_in_range(name: str, number: int | None) -> None:
    assert step_number(name) == number


@pytest.mark.parametrize("tail", ["\u00b2", "9" * 30, "\u0663"])
def test_an_odd_step_number_costs_only_the_step(tmp_path: Path, example, tail: str) -> None:
    """`ProfilerStep#²` / a step beyond int64, on the CPU annotation and the GPU one: the trace is
    ingested, its kernels keep everything, only the step is unknown."""
    doc = copy.deepcopy(example)
    for event in doc["traceEvents"]:
        if str(event.get("name", "")).startswith("ProfilerStep#"):
            event["name"] = "ProfilerStep#" + tail
    frame, _ = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert len(frame) == 61 and frame["step"].isna().all()
    assert frame["launcher"].notna().sum() > 0


def test_mangled_names_with_odd_digits_are_kept_as_written(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    odd = ["_ZN2at6native18elementwise_kernelILi\u00b2ELi4EZNS0_vv", "_Z" + "9" * 30 + "foo", "_ZN\u0663\u0663abc"]
    for kernel, name in zip(kernels, odd, strict=False):
        kernel["name"] = name
    frame, _ = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert set(odd) <= set(frame["name"].astype(str))


# --- long strings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        b'"abc"',
        b'""',
        b'"a\\"b"',  # an escaped quote inside
        b'"a\\\\"',  # an escaped backslash, then the closing quote
        b'"' + b"\\\\" * 5000 + b'"',  # 10,000 backslashes: pairs across the 4 KiB window edges
        b'"' + b"x" * 4094 + b'\\"' + b"y" * 9000 + b'"',  # an escape split by the first window's edge
        b'"' + b"z" * 3_000_000 + b'"',  # longer than the first windows together
    ],
)
def test_a_member_string_ends_at_its_closing_quote(tmp_path: Path, text: bytes) -> None:
    from kernel_atlas.ingest.reader import _Source, _Walker

    path = tmp_path / "s.json"
    path.write_bytes(text + b' , "next"')
    source = _Source(path)
    try:
        assert _Walker(source).string_end(0) == len(text)
    finally:
        source.close()


def _peak(args: list[object]) -> tuple[int, str, int, float]:
    """`atlas ARGS` under a fresh parent: (exit code, stderr, peak RSS in MB of the largest
    process, children included, seconds)."""
    import subprocess
    import sys

    from tests.support.hostile import ATLAS

    script = (
        "import resource, subprocess, sys, time\n"
        "start = time.monotonic()\n"
        f"done = subprocess.run({[*ATLAS, *map(str, args)]!r}, capture_output=True, text=True)\n"
        "sys.stderr.write(done.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, time.monotonic() - start)\n"
        "sys.exit(done.returncode)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    peak, seconds = done.stdout.split()
    return done.returncode, done.stderr, int(peak), float(seconds)


def test_long_strings_are_cut_within_bounded_memory_and_time(tmp_path: Path, example) -> None:
    """A 25 MB metadata string and a 5 MB kernel name, zstd-compressed to a few KB: the metadata
    peaked at 3.1 GB (a regex over the string), the name took 16-60 s (every rule's regex over
    it). Now the name is cut to MAX_TEXT characters, counted in one warning, the rest intact."""
    import zstandard

    from kernel_atlas.ingest.events import CUT_MARK, MAX_TEXT
    from kernel_atlas.store.outputs import load_kernels

    doc = copy.deepcopy(example)
    doc["traceName"] = "x" * 25_000_000
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["name"] = "k" * 5_000_000
    trace = tmp_path / "long.json.zst"
    trace.write_bytes(zstandard.ZstdCompressor().compress(json.dumps(doc).encode()))
    assert trace.stat().st_size < 200_000
    code, err, peak_mb, seconds = _peak(["ingest", trace, "-o", tmp_path / "out", "-q"])
    assert code == 0, err
    assert err.strip() == f"warning: {trace}: 1 string longer than 16,384 characters was cut (names) or ignored"
    assert peak_mb < 600, peak_mb  # 3.1 GB before
    assert seconds < 60, seconds
    frame = load_kernels(tmp_path / "out")
    assert len(frame) == 61
    cut = [name for name in frame["name"].astype(str) if name.startswith("kkk")]
    assert cut == ["k" * (MAX_TEXT - len(CUT_MARK)) + CUT_MARK]
    assert cli("report", tmp_path / "out").code == 0


def test_long_metadata_texts_are_cut_before_anything_prints_them(tmp_path: Path, example) -> None:
    """A 30 MB GPU name took `atlas ingest` 408 s (the terminal table wrapping it) and wrote a
    30 MB summary.json; a 5 MB distributedInfo backend went to summary.json whole. Metadata
    texts are cut to 256 characters, each kind counted in one warning."""
    doc = copy.deepcopy(example)
    doc["deviceProperties"][0]["name"] = "NVIDIA H100 " + "g" * 3_000_000
    doc["distributedInfo"] = {"backend": "nccl" + "b" * 3_000_000, "rank": 0, "world_size": 1}
    code, err, _peak_mb, seconds = _peak(["ingest", _write(tmp_path, doc), "-o", tmp_path / "out"])
    assert code == 0, err
    assert seconds < 30, seconds  # minutes before
    assert "deviceProperties: 1 text(s) longer than 256 characters cut to it" in err
    assert "distributedInfo: 1 text(s) longer than 256 characters cut to it" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["traces"][0]["gpus"][0]["name"] == "NVIDIA H100 " + "g" * 243 + "…"
    assert summary["traces"][0]["distributed"]["backend"] == "nccl" + "b" * 251 + "…"
    assert (tmp_path / "out" / "summary.json").stat().st_size < 100_000


def test_long_recorded_inputs_are_not_recorded(tmp_path: Path, example) -> None:
    """Input Dims longer than MAX_TEXT characters cannot be cut (the cut is not JSON): that op's
    shapes are not recorded, counted; its other fields stay."""
    doc = copy.deepcopy(example)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["args"].get("Input Dims")]
    ops[0]["args"]["Input Dims"] = [[1] * 20_000]  # "[[1, 1, …]]": ~60,000 characters
    frame, err = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert "1 string longer than 16,384 characters was cut (names) or ignored" in err
    assert len(frame) == 61
    assert frame["input_dims"].astype(str).str.len().max() < 16384


# --- an input folder's own outputs ---------------------------------------------------------------


def test_ingesting_a_folder_twice_never_reads_its_own_outputs(tmp_path: Path) -> None:
    """The second `atlas ingest DIR` read the first's catalog.json and summary.json as traces,
    nested a new output inside the old one and renumbered the real trace's rank."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "t.json.gz").write_bytes(EXAMPLE.read_bytes())
    first = cli("ingest", folder, "-q")
    assert first.code == 0, first.output
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    second = cli("ingest", folder, "-q")
    assert second.code == 0 and not second.lines(), second.output
    after = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert after == before
    assert "t.atlas/kernels.parquet/rank=0/t.parquet" in after
    summary = json.loads((folder / "t.atlas" / "summary.json").read_text())
    assert [t["rank"] for t in summary["traces"]] == [0]


def test_a_trace_beside_a_lone_summary_is_still_read(tmp_path: Path) -> None:
    """Only a real output folder (summary.json and kernels.parquet) is passed over."""
    from kernel_atlas.ingest.fleet import expand_sources, outside_outputs

    folder = tmp_path / "runs"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "summary.json").write_text("{}")
    (folder / "a" / "t.json").write_text("{}")
    assert expand_sources([folder]) == [str(folder / "a" / "summary.json"), str(folder / "a" / "t.json")]
    files = ["r/x.atlas/summary.json", "r/x.atlas/catalog.json", "r/x.atlas/kernels.parquet/rank=0/x.parquet",
             "r/x.atlas.json", "r/t.json"]  # fmt: skip
    assert outside_outputs(files) == ["r/x.atlas.json", "r/t.json"]


def test_a_folder_whose_only_traces_lie_in_an_output_says_so(tmp_path: Path) -> None:
    """A trace kept in the folder an ingest wrote into (`-o .`) is inside an output, so never
    read: the message said the folder "holds no trace files" while it held one."""
    from tests.support.hostile import assert_one_line_error

    folder = tmp_path / "run"
    assert cli("ingest", EXAMPLE, "-o", folder, "-q").code == 0
    (folder / "t.json.gz").write_bytes(EXAMPLE.read_bytes())
    assert_one_line_error(cli("ingest", folder, "-o", tmp_path / "o"), f"error: {folder}: ", "name the trace files")
    bare = tmp_path / "bare"  # an output folder alone: no trace anywhere
    assert cli("ingest", EXAMPLE, "-o", bare, "-q").code == 0
    assert_one_line_error(cli("ingest", bare, "-o", tmp_path / "o2"), f"error: {bare}: ", "holds no trace files")


def test_a_catalog_kept_beside_the_traces_is_left_out_not_failed(tmp_path: Path) -> None:
    """A folder holding one trace and a kernel catalog: the catalog had been ingested as a trace,
    reported as a failed one and the run's exit code made 2. It is left out, said in one note;
    a folder of catalogs alone is one line naming what to do with them; upper-case suffixes are
    still a trace (`T.JSON.GZ`) and a catalog (`atlas report c.JSON` costs it)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "T.JSON.GZ").write_bytes(EXAMPLE.read_bytes())
    entry = {"kernel_name": "k", "op_mapping": "TBD"}
    (folder / "cat.json").write_text(json.dumps([entry]))
    result = cli("ingest", folder, "-o", tmp_path / "o", "-q")
    assert result.code == 0, result.output
    assert result.stderr.strip() == "note: 1 kernel catalog(s) in the input folders left out, not traces: cat.json"
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [Path(t["file"]).name for t in summary["traces"]] == ["T.JSON.GZ"]
    assert summary["failed"] == []
    (folder / "T.JSON.GZ").unlink()
    assert_one_line_error(cli("ingest", folder, "-o", tmp_path / "o2"), "holds kernel catalogs, no trace", "classify")
    upper = tmp_path / "c.JSON"
    upper.write_text(json.dumps([entry]))
    costed = cli("report", upper, "--device", "h200")
    assert costed.code == 0, costed.output
    assert (tmp_path / "c.costs.csv").exists()


# --- credentials -----------------------------------------------------------------------------------

TOKEN = "ghp_" + "Zz09" * 9


def _every_output_byte(out: Path) -> bytes:
    return (
        b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
        + "\n".join(str(p) for p in out.rglob("*")).encode()
    )


def test_a_token_in_the_trace_file_name_reaches_no_output_and_the_run_reads(tmp_path: Path) -> None:
    """The rank file was named `run_ghp_….parquet` while summary.json listed it redacted, so every
    reader refused the folder; the default output folder was named after the token too."""
    trace = tmp_path / f"run_{TOKEN}.json.gz"
    trace.write_bytes(EXAMPLE.read_bytes())
    ingest = cli("ingest", trace)  # not quiet: the summary's header named the trace unredacted
    assert ingest.code == 0, ingest.output
    assert TOKEN not in ingest.output and "run_<redacted>.json.gz  rank 0" in ingest.stdout
    out = tmp_path / "run_redacted.atlas"
    assert (out / "kernels.parquet" / "rank=0" / "run_redacted.parquet").is_file()
    assert TOKEN.encode() not in _every_output_byte(out)
    report = cli("report", out)
    assert report.code == 0, report.output
    assert TOKEN not in report.output


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("redis://:hunter2secret@cache:6379/0", "@cache:6379/0"),  # no user name
        ("https://user:pa/ss+word@example.com/x", "@example.com/x"),  # / and + in the password
        ("postgres://bob:s3cr@t@db:5432/app", "@db:5432/app"),  # an @ in the password
        ("mysql://root:hunter2secret@localhost", "@localhost"),
    ],
)
def test_url_passwords_are_redacted(url: str, kept: str) -> None:
    from kernel_atlas.core.redact import REDACTED, redact_text

    scheme = url.split("://")[0]
    assert redact_text(url) == f"{scheme}://{REDACTED}{kept}"
    listed = json.dumps([url, "0"])  # as Concrete Inputs are written: a JSON list of strings
    assert redact_text(listed) == json.dumps([f"{scheme}://{REDACTED}{kept}", "0"])


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        # a URL whose user name is itself a token: the whole userinfo, in one pass
        ("s3://AKIAZ7HOSTILE48XYQWE:S3cretPw48x@bucket/x", "s3://<redacted>@bucket/x"),
        ("https://ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8:pw@github.com", "https://<redacted>@github.com"),
        # keys spaced, quoted, as JSON, as flags, as HTTP headers; the key is kept
        ("password = S3cretPw48x", "password = <redacted>"),
        ('password="S3cret Pw48x" next', 'password="<redacted>" next'),
        ('{"password": "S3cretPw48x", "n": 1}', '{"password": "<redacted>", "n": 1}'),
        ('{"password": "ab\\"cd"}', '{"password": "<redacted>"}'),  # an escaped quote inside
        ('{"token": "abc"}', '{"token": "<redacted>"}'),
        ("x-api-key: xyz1", "x-api-key: <redacted>"),
        ("AWS_SECRET_ACCESS_KEY=AbC/9+z", "AWS_SECRET_ACCESS_KEY=<redacted>"),
        ("pwd=hunter2 client_secret: abc", "pwd=<redacted> client_secret: <redacted>"),
        ("--password hunter2 --verbose", "--password <redacted> --verbose"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic <redacted>"),
        ("curl -H BEARER%20abcdefghijkl", "curl -H <redacted>"),
        # a token hidden by characters that do not show: where it lies is not known, all of it goes
        ("gemm " + "ghp_\u0000" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "<redacted>"),
        ("\uff47\uff48\uff50_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "<redacted>"),  # full-width ｇｈｐ_
        ("gh\u200bp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 x", "<redacted>"),  # a zero-width space
        # a NUL inside the key, the value itself a control character (found by the property test
        # `test_the_quick_check_passes_every_ascii_credential_to_the_expression`): with every
        # hiding character gone the value went too, and `password: ` is no credential
        ("pa\u0000ssword: \u0008", "<redacted>"),
        # what stays: a count named token, a flag with no value, token counts in kernel names,
        # names with such characters and no credential
        ("gemm\u0000kernel \uff47\uff45\uff4d\uff4d ge\u200bmm", None),
        ("token: 5", "token: 5"),
        ("--password --verbose", "--password --verbose"),
        ("moe_align_block_size max_num_tokens_padded num_tokens_post_pad", None),
    ],
)
def test_credential_shapes_are_redacted_once_and_for_all(text: str, redacted: str | None) -> None:
    """Each shape redacted in one pass, and a second pass changes nothing (a run ingest writes,
    its report reads: every reader refuses a credential-shaped text)."""
    from kernel_atlas.core.redact import redact_text

    expected = text if redacted is None else redacted
    assert redact_text(text) == expected
    assert redact_text(expected) == expected


@pytest.mark.parametrize("text", ["http://host:8080/path", "https://a.b/c?x=1&y=2", "ftp://user@host/x", "a:b@c"])
def test_urls_without_a_password_are_kept(text: str) -> None:
    from kernel_atlas.core.redact import redact_text

    assert redact_text(text) == text


def test_url_passwords_in_concrete_inputs_reach_no_output(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    secrets = ["hunter2secret", "pa/ss+word", "s3cr@t"]
    urls = ["redis://:hunter2secret@cache:6379", "https://user:pa/ss+word@example.com/x", "pg://bob:s3cr@t@db/app"]
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["args"].get("Concrete Inputs")]
    for op, url in zip(ops, urls, strict=False):
        op["args"]["Concrete Inputs"] = [url, *op["args"]["Concrete Inputs"][1:]]
    out = tmp_path / "out"
    _ingest_and_report(_write(tmp_path, doc), out)
    written = _every_output_byte(out)
    for secret in secrets:
        assert secret.encode() not in written, secret


def test_classify_redacts_and_writes_only_json(tmp_path: Path) -> None:
    """`atlas classify` copied `ghp_`/`hf_`/`Bearer` values through and wrote NaN / Infinity."""
    catalog = tmp_path / "c.json"
    hf = "hf_" + "A1b2" * 9
    entries = [
        {"kernel_name": f"ampere_sgemm_128x64_nn_{TOKEN}", "op_mapping": "TBD", "call_stack": f"aten::mm;{hf}",
         "params": [{"example_dim": [4, 4], "example_dtype": "float", "weight": float("nan")}], "note": "Bearer abc.def.ghijkl",
         "time": float("inf")},
    ]  # fmt: skip
    catalog.write_text(json.dumps(entries))  # Python writes NaN and Infinity
    result = cli("classify", catalog)
    assert result.code == 0, result.output

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    filled = json.loads(result.stdout, parse_constant=refuse)
    assert filled[0]["params"][0]["weight"] is None and filled[0]["time"] is None
    for secret in (TOKEN, hf, "abc.def.ghijkl"):
        assert secret not in result.output
    out = tmp_path / "filled.json"
    assert cli("classify", catalog, "-o", out).code == 0
    assert TOKEN not in out.read_text() and "NaN" not in out.read_text()


def test_a_classified_catalog_is_written_a_part_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 125k-entry catalog (155 MB) peaked at 1.08 GB: its JSON was encoded, formatted, decoded
    and joined with a newline whole. Now written in parts of 10,000 entries — byte for byte the
    text written whole (parts of 2 here, a credential and NaN in one of them) — and a catalog
    over CATALOG_LIMIT is refused in one line."""
    from kernel_atlas.classify import classifier
    from kernel_atlas.store.outputs import json_bytes, json_list_parts

    entries = [{"kernel_name": f"k{i}", "op_mapping": "TBD", "w": float("nan") if i == 3 else i} for i in range(7)]
    entries[4]["note"] = f"token {TOKEN}"
    for per_part in (1, 2, 3, 100):
        assert b"".join(json_list_parts(entries, per_part)) == json_bytes(entries) + b"\n"
    assert b"".join(json_list_parts([])) == b"[]\n"
    catalog, out = tmp_path / "c.json", tmp_path / "filled.json"
    catalog.write_text(json.dumps(entries))
    monkeypatch.setattr("kernel_atlas.store.outputs.json_list_parts.__defaults__", (2,))
    assert cli("classify", catalog, "-o", out).code == 0
    whole = cli("classify", catalog)
    assert out.read_text() == whole.stdout
    filled = json.loads(out.read_text())
    assert [e["kernel_name"] for e in filled] == [f"k{i}" for i in range(7)] and filled[3]["w"] is None
    assert TOKEN not in out.read_text() and "<redacted>" in filled[4]["note"]
    monkeypatch.setattr(classifier, "CATALOG_LIMIT", 100)
    assert_one_line_error(cli("classify", catalog), "c.json", "too large for a kernel catalog", "over 0 MiB")


def test_explain_never_prints_a_credential() -> None:
    result = cli("explain", f"ampere_sgemm_128x64_nn_{TOKEN}", "--launcher", "aten::mm", "-s", "hf_" + "A1b2" * 9)
    assert result.code == 0, result.output
    assert TOKEN not in result.output and "A1b2A1b2" not in result.output
    assert "<redacted>" in result.output


# --- URLs ----------------------------------------------------------------------------------------


def test_an_unknown_url_protocol_is_one_line(tmp_path: Path) -> None:
    from tests.support.hostile import assert_one_line_error

    result = cli("ingest", "nosuchproto://bucket/t.json.gz", "-o", tmp_path / "o")
    assert_one_line_error(result, "nosuchproto://bucket/t.json.gz", "unknown URL protocol nosuchproto://")


def test_a_url_whose_package_is_missing_names_the_package(tmp_path: Path) -> None:
    """`s3://` without s3fs, `gs://` without gcsfs, `http://` without aiohttp: one line naming
    what to install (a registered protocol whose module is absent stands for them all)."""
    import fsspec

    from tests.support.hostile import assert_one_line_error

    fsspec.register_implementation("atlasnopkg", "atlas_no_such_module.FS", errtxt="Install atlas-nopkg", clobber=True)
    result = cli("ingest", "atlasnopkg://bucket/t.json.gz", "-o", tmp_path / "o")
    assert_one_line_error(result, "atlasnopkg://bucket/t.json.gz", "need a package", "Install atlas-nopkg")


def test_a_password_in_a_url_is_not_printed_in_the_error(tmp_path: Path) -> None:
    for command in (["ingest", "nosuchproto://ak:hunter2secret@bucket/t.json", "-o", tmp_path / "o"],
                    ["report", "s3://ak:hunter2secret@bucket/t.json"]):  # fmt: skip
        result = cli(*command)
        assert result.code == 2 and "hunter2secret" not in result.output, result.output


# --- doctored output folders ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def ingested_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("doctor") / "base"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    return out


def _doctored(base: Path, tmp_path: Path, change: Any) -> tuple[Path, Path]:
    """A copy of the ingest output with its rank file rewritten by `change(table)` (the run id
    in its metadata kept, as a careful doctor would)."""
    import shutil

    import pyarrow.parquet as pq

    out = tmp_path / "doctored"
    shutil.copytree(base, out)
    file = out / "kernels.parquet" / "rank=0" / f"{EXAMPLE.name.split('.')[0]}.parquet"
    table = pq.read_table(file)
    changed = change(table, out, file)
    if changed is not None:
        pq.write_table(changed.replace_schema_metadata(table.schema.metadata), file)
    return out, file


def _without(column: str) -> Any:
    return lambda table, _out, _file: table.drop([column])


def _with(column: str, first: Any) -> Any:
    """A change setting `column`'s first row to `first` (as plain values)."""
    import pyarrow as pa

    def change(table: Any, _out: Path, _file: Path) -> Any:
        values = table.column(column).to_pylist()
        values[0] = first
        kind = table.schema.field(column).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        return table.set_column(table.column_names.index(column), column, pa.array(values, kind))

    return change


def _twice(column: str) -> Any:
    import pyarrow as pa

    return lambda table, _out, _file: pa.Table.from_arrays(
        [*table.columns, table.column(column)], names=[*table.column_names, column]
    )


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        *[(_without(c), f"no column {c}") for c in ("launcher", "stream", "device", "module", "input_dims")],
        (_with("dur_us", -5.0), "1 rows with a negative, NaN or huge duration"),
        (_with("dur_us", float("nan")), "1 rows with a negative, NaN or huge duration"),
        (_with("dur_us", float("inf")), "1 rows with a negative, NaN or huge duration"),
        (_with("ts_us", float("-inf")), "1 rows with a start that is NaN or beyond 2^53 µs"),
        (_with("name", None), "1 rows without a name"),
        (_with("category", None), "1 rows without a category"),
        (_with("op_mapping", None), "1 rows without a op_mapping"),
        (_with("input_dims", "[" * 5000 + "]" * 5000), "1 `input_dims` values nested deeper than 16 levels"),
        (_twice("ts_us"), "column ts_us written more than once"),
        (_with("launcher", "aten::mm ghp_" + "b" * 36), "1 texts shaped like credentials"),
    ],
    ids=["no-launcher", "no-stream", "no-device", "no-module", "no-input_dims", "negative-dur", "nan-dur", "inf-dur",
         "inf-ts", "null-name", "null-category", "null-op", "deep-dims", "ts-twice", "token"],
)  # fmt: skip
def test_a_doctored_kernels_file_is_refused_where_the_run_is_opened(
    ingested_example: Path, tmp_path: Path, change: Any, needle: str
) -> None:
    """`report` ended in KeyError, a plotly ValueError, RecursionError or numpy warnings."""
    from tests.support.hostile import assert_one_line_error

    out, file = _doctored(ingested_example, tmp_path, change)
    assert_one_line_error(cli("report", out), str(file), needle)


def test_a_doctored_kernels_file_is_checked_batch_by_batch_with_whole_file_counts(
    ingested_example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values are checked a few rows at a time (memory of a batch, not of the file), yet
    every count is the whole file's: problems planted in different batches add up, a text
    repeated across batches counts once, and a narrow column's range is the file's. Batches of
    7 rows; the file is written in row groups of 5, so batches straddle them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kernel_atlas.core.errors import AtlasError
    from kernel_atlas.store import outputs

    monkeypatch.setattr(outputs, "CHECK_BATCH_ROWS", 7)
    token = "ghp_" + "c" * 36

    def rewrite(table: Any, column: str, rows: dict[int, Any], kind: Any = None) -> Any:
        values = table.column(column).to_pylist()
        for row, value in rows.items():
            values[row] = value
        kind = kind or table.schema.field(column).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        return table.set_column(table.column_names.index(column), column, pa.array(values, kind))

    cases = [
        # rows 0, 9 and 20: three batches of 7
        (lambda t: rewrite(t, "dur_us", {0: -1.0, 9: float("nan"), 20: -3.0}), "3 rows with a negative"),
        (lambda t: rewrite(t, "name", {2: None, 16: None}), "2 rows without a name"),
        # the same token in two batches, another in a third: two distinct texts
        (lambda t: rewrite(t, "launcher", {1: f"x {token}", 15: f"x {token}", 22: "hf_" + "d" * 34}), "2 texts"),
        # device as int64: 5 in one batch, 2^40 in another; the range is the file's
        (lambda t: rewrite(t, "device", {3: 5, 18: 2**40}, pa.int64()), "values beyond int32 (0…1099511627776)"),
    ]
    for change, needle in cases:
        out = tmp_path / f"case{cases.index((change, needle))}"

        def doctor(table: Any, _out: Path, file: Path, change: Any = change) -> None:
            assert table.num_rows > 22
            pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), file, row_group_size=5)

        out, _file = _doctored(ingested_example, out, doctor)
        with pytest.raises(AtlasError) as refused:
            outputs.open_output(out)
        assert needle in str(refused.value), str(refused.value)


def test_an_extra_rank_folder_is_refused(ingested_example: Path, tmp_path: Path) -> None:
    """A copy of rank 0's file as rank=1, not in summary.json: every time was silently doubled."""
    import shutil

    from tests.support.hostile import assert_one_line_error

    def extra(_table: Any, out: Path, file: Path) -> None:
        (out / "kernels.parquet" / "rank=1").mkdir()
        shutil.copy(file, out / "kernels.parquet" / "rank=1" / file.name)

    out, file = _doctored(ingested_example, tmp_path, extra)
    assert_one_line_error(cli("report", out), f"rank=1/{file.name}", "not listed in summary.json")


def test_doctored_pandas_metadata_is_not_trusted(ingested_example: Path, tmp_path: Path) -> None:
    """The pandas metadata a kernels file carries only restores what Arrow gives anyway; a doctored
    one made `to_pandas` a TypeError. It is left unread: the report is the untouched output's."""

    def meta(table: Any, _out: Path, file: Path) -> None:
        import pyarrow.parquet as pq

        doctored = {**table.schema.metadata, b"pandas": b'{"index_columns": ["nope"], "columns": 5}'}
        pq.write_table(table.replace_schema_metadata(doctored), file)

    out, _file = _doctored(ingested_example, tmp_path, meta)
    done = cli("report", out, "--section", "categories")
    assert done.code == 0, done.output
    assert done.output == cli("report", ingested_example, "--section", "categories").output.replace(
        str(ingested_example), str(out)
    )


def test_an_undoctored_output_still_opens(ingested_example: Path) -> None:
    from kernel_atlas.store.outputs import open_output

    assert open_output(ingested_example).run_id


def test_deep_recorded_calls_are_not_recorded_at_ingest(tmp_path: Path, example) -> None:
    """What open_output refuses, ingest never writes: Input Dims nested 40 deep (within the
    decoder's limit) counts as not recorded, in one warning."""
    doc = copy.deepcopy(example)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["args"].get("Input Dims")]
    deep: Any = [1]
    for _ in range(40):
        deep = [deep]
    for op in ops:
        if op["name"] == "aten::addmm":
            op["args"]["Input Dims"] = deep
    frame, err = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert "`input_dims` values nest deeper than 16 levels: not recorded" in err
    assert not frame["input_dims"].astype(str).str.startswith("[" * 17).any()


def test_replay_refuses_an_impossible_recorded_shape() -> None:
    """A negative size becomes a 'none' argument carrying a tensor dtype: not replayable (the
    CPU stand-ins ran on None: AttributeError)."""
    from kernel_atlas.ingest.recorded import Arg
    from kernel_atlas.replay.aten import build_case
    from kernel_atlas.replay.inputs import NotReplayable

    pytest.importorskip("torch")
    recorded = (Arg("none", None, "c10::BFloat16"),) * 3
    with pytest.raises(NotReplayable, match="impossible"):
        build_case("aten::_scaled_dot_product_flash_attention", recorded, "cpu")
    # a query recorded with no type and no dims (a doctored trace) is no tensor: the flash-attention
    # stand-in called `.transpose` on None
    tensor = Arg("tensor", (1, 4, 2, 8), "c10::BFloat16")
    for name in ("aten::_flash_attention_forward", "aten::cudnn_convolution"):
        with pytest.raises(NotReplayable, match=r"first [23] inputs are not all recorded tensors"):
            build_case(name, (Arg("none", None, ""), tensor, tensor), "cpu")


# --- capture grids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "concrete", "grid"),
    [
        ("XBLOCK=256", ["", "", "1000"], "[4, 1, 1]"),  # ceil(1000 / 256)
        ("XBLOCK=0", ["", "", "1000"], None),  # was ZeroDivisionError
        ("XBLOCK=\u00b2", ["", "", "1000"], None),  # was ValueError
        ("XBLOCK=128", ["", "", "1\u00b2"], None),  # the only size is no number
        ("XBLOCK=128", ["", "", "\u0661\u0660\u0660", "256"], "[2, 1, 1]"),  # the Arabic-Indic 100 is not a size
        ("XBLOCK=128", ["", "", "9" * 40], None),  # beyond int64
    ],
)
def test_inductor_grids_from_odd_tiles(kwargs: str, concrete: list[str], grid: str | None) -> None:
    from kernel_atlas.ingest.capture import inductor_grid

    assert inductor_grid("triton_poi_fused_add_0", {"kernel_kwargs": kwargs, "Concrete Inputs": concrete}) == grid


# --- two traces, one rank --------------------------------------------------------------------------


def _reported_as_rank_0(tmp_path: Path, doc: dict, names: tuple[str, ...]) -> str:
    """`doc` written once per name, every copy claiming rank 0, ingested and reported: the
    report's terminal text, its lines joined."""
    doc = {**copy.deepcopy(doc), "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}}
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in names:
        _write(folder, doc, name)
    assert cli("ingest", folder, "-o", tmp_path / "out", "-q").code == 0
    report = cli("report", tmp_path / "out")
    assert report.code == 0, report.output
    return " ".join(report.stdout.split())


def test_two_traces_claiming_one_rank_are_said_in_the_report(tmp_path: Path, example) -> None:
    """Both say rank 0: the per-rank analyses see one merged timeline neither trace has — the
    report says so (terminal and report.json), naming the traces."""
    said = _reported_as_rank_0(tmp_path, example, ("a.json", "b.json"))
    assert "2 traces claim rank 0 (a.json, b.json): their activities share one timeline" in said
    facts = json.loads((tmp_path / "out" / "report.json").read_text())
    assert facts["shared_ranks"] == [{"rank": 0, "traces": ["a.json", "b.json"]}]


def test_traces_claiming_one_rank_on_a_gpu_without_peaks_are_said_too(tmp_path: Path, example) -> None:
    """The GPU is not in the catalog (no peaks): the line is still there, naming five traces."""
    doc = {**example, "deviceProperties": [{"id": 0, "name": "Mystery GPU", "numSms": 7}]}
    said = _reported_as_rank_0(tmp_path, doc, ("a.json", "b.json", "c.json", "d.json", "e.json", "f.json", "g.json"))
    assert "is not in catalogs/devices.toml" in said
    assert "7 traces claim rank 0 (a.json, b.json, c.json, d.json, e.json, … 2 more): their activities" in said
    page = (tmp_path / "out" / "report.html").read_text()
    assert "7 traces claim rank 0 (a.json, b.json, c.json, d.json, e.json, … 2 more): their activities" in page


def test_two_traces_of_one_file_name_and_rank_keep_their_calls_apart(tmp_path: Path, example) -> None:
    """`a/t.json` and `b/t.json`, both rank 0: their rank files were told apart (`t.0`, `t.1`)
    but every row said trace `t`, so their op calls' ids met and `replay --from` summed two
    calls' kernels into one traced time. Each trace's rows now carry its file's name, and each
    holds the example's own rows."""
    doc = {**copy.deepcopy(example), "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        _write(tmp_path / folder, doc, "t.json")
    assert cli("ingest", tmp_path / "a" / "t.json", tmp_path / "b" / "t.json", "-o", tmp_path / "out", "-q").code == 0
    from kernel_atlas.store.outputs import load_kernels

    kernels = load_kernels(tmp_path / "out")
    alone = len(load_kernels(_ingested_once(tmp_path, doc)))
    assert sorted(kernels["trace"].unique()) == ["t.0", "t.1"]
    assert kernels.groupby("trace").size().tolist() == [alone, alone]
    calls = kernels.dropna(subset=["cpu_op_id"]).groupby(["trace", "cpu_op_id"])["name"].size()
    single = load_kernels(tmp_path / "one").dropna(subset=["cpu_op_id"]).groupby("cpu_op_id")["name"].size()
    assert calls["t.0"].tolist() == single.tolist() and calls["t.1"].tolist() == single.tolist()


def _ingested_once(tmp_path: Path, doc: dict) -> Path:
    (tmp_path / "single").mkdir()
    _write(tmp_path / "single", doc, "t.json")
    assert cli("ingest", tmp_path / "single" / "t.json", "-o", tmp_path / "one", "-q").code == 0
    return tmp_path / "one"


def test_one_trace_a_rank_says_nothing(ingested_example: Path) -> None:
    report = cli("report", ingested_example)
    assert report.code == 0 and "claim rank" not in report.stdout
    assert json.loads((ingested_example / "report.json").read_text())["shared_ranks"] == []


# --- smaller ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="no /proc/self/mem here")
def test_proc_self_mem_is_a_read_error_not_an_internal_one(tmp_path: Path) -> None:
    from tests.support.hostile import assert_one_line_error

    assert_one_line_error(cli("ingest", "/proc/self/mem", "-o", tmp_path / "o"), "/proc/self/mem", "cannot read file")


def test_a_full_disk_names_the_output_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The message named the input trace, as if it were the trace that could not be written."""
    import errno

    import kernel_atlas.store.outputs as outputs
    from tests.support.hostile import assert_one_line_error

    def full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs.pq, "write_table", full)
    out = tmp_path / "out"
    result = cli("ingest", EXAMPLE, "-o", out, "-j", "1")
    # a table of the rank is named: its kernels' (written while its memory and host events are, said first)
    line = assert_one_line_error(result, f"error: {out}/kernels.parquet/rank=0/", "no space left on the device")
    assert not line.startswith(f"error: {EXAMPLE}")


# --- numbers numpy cannot sum ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cat", "field", "value", "warning"),
    [
        ("kernel", "dur", 1e308, "1 GPU activity without a usable ts or dur was left out"),
        ("kernel", "ts", -1e308, "1 GPU activity without a usable ts or dur was left out"),
        ("cuda_runtime", "dur", 1.5e308, "1 value out of range or of an unexpected type was ignored (dur 1)"),
        ("cpu_op", "dur", 1e308, "1 value out of range or of an unexpected type was ignored (dur 1)"),
        ("python_function", "ts", 1e307, "1 host range without a usable ts was left out"),
    ],
)
def test_times_beyond_2_53_us_are_unusable_not_overflowing(
    tmp_path: Path, example, cat: str, field: str, value: float, warning: str
) -> None:
    """Finite but absurd times (1e308 µs) overflowed numpy sums: RuntimeWarning lines on stderr,
    shares of inf. Each costs its own field (or activity), counted in one warning."""
    doc = copy.deepcopy(example)
    next(e for e in doc["traceEvents"] if e.get("cat") == cat)[field] = value
    frame, err = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")  # no stderr line but warnings
    assert warning in err
    assert len(frame) == (60 if cat == "kernel" else 61)
    assert float(frame["dur_us"].max()) < 1e6


@pytest.mark.parametrize(
    ("cat", "field", "value", "warning"),
    [
        ("kernel", "ts", "10", "1 GPU activity without a usable ts or dur was left out"),
        ("kernel", "dur", "5", "1 value out of range or of an unexpected type was ignored (dur 1)"),
        ("kernel", "name", 3, "1 value out of range or of an unexpected type was ignored (name 1)"),
        ("cuda_runtime", "ts", True, "1 value out of range or of an unexpected type was ignored (ts 1)"),
        ("cpu_op", "tid", [1], "1 value out of range or of an unexpected type was ignored (tid 1)"),
        # null where the format gives a text (found by a later campaign: each lost the whole trace)
        ("kernel", "cat", None, "1 value out of range or of an unexpected type was ignored (cat 1)"),
        ("kernel", "ph", None, "1 value out of range or of an unexpected type was ignored (ph 1)"),
        ("cpu_op", "name", None, "1 value out of range or of an unexpected type was ignored (name 1)"),
    ],
)
def test_an_event_key_of_the_wrong_type_costs_only_that_key(
    tmp_path: Path, example, cat: str, field: str, value: object, warning: str
) -> None:
    """`"ts": "10"` on one event failed the whole trace ("not a Chrome/Kineto trace"); it costs
    that key alone (and a GPU activity without its time, its category or its phase: then it is no
    GPU activity), counted in one warning."""
    doc = copy.deepcopy(example)
    next(e for e in doc["traceEvents"] if e.get("cat") == cat)[field] = value
    frame, err = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert warning in err
    lost = {("kernel", "ts"), ("kernel", "dur"), ("kernel", "cat"), ("kernel", "ph")}
    assert len(frame) == (60 if (cat, field) in lost else 61)


@pytest.mark.parametrize("entry", [None, 5, "x", [1, 2], True])
def test_an_entry_of_trace_events_that_is_no_object_is_skipped_and_counted(tmp_path: Path, example, entry) -> None:
    """`null`, a number, a text or a list among the events failed the whole trace ("Expected
    `object`, got `null` - at `traceEvents[3]`"); it is skipped, said in one warning."""
    doc = copy.deepcopy(example)
    doc["traceEvents"][3:3] = [entry, entry]
    frame, err = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert "2 traceEvents entries that are not JSON objects were skipped" in err
    assert len(frame) == 61


@pytest.mark.parametrize("command", [["dashboard", "{out}", "--html", "{tmp}/d.html"], ["replay", "--from", "{out}"]])
def test_dashboard_and_replay_refuse_a_doctored_output_in_one_line(
    ingested_example: Path, tmp_path: Path, command: list[str]
) -> None:
    """The dashboard's message carried the notebook's coloured traceback; both now refuse where
    the run is opened."""
    from tests.support.hostile import assert_one_line_error

    out, file = _doctored(ingested_example, tmp_path, _with("dur_us", float("nan")))
    args = [part.format(out=out, tmp=tmp_path) for part in command]
    assert_one_line_error(cli(*args), str(file), "NaN or huge duration")


def test_a_credential_the_name_cut_would_end_never_reaches_an_output(tmp_path: Path, example) -> None:
    """Names past MAX_TEXT were cut, then redacted: a URL password before the cut `@host` was
    written whole, a GitHub token's first 19 characters kept. Now redacted before the cut."""
    from kernel_atlas.ingest.events import MAX_TEXT

    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    url = "https://user:SECRETPW77@host.example.com"
    kernels[0]["name"] = "k" * (MAX_TEXT - 1 - len("https://user:SECRETPW77") - 1) + " " + url + " tail"
    kernels[1]["name"] = "k" * (MAX_TEXT - 1 - 23 - 1) + " ghp_" + "Q" * 36 + " tail"  # 19 Qs kept before
    out = tmp_path / "out"
    frame, _ = _ingest_and_report(_write(tmp_path, doc), out)
    cut = sorted(name for name in frame["name"].astype(str).unique() if name.startswith("kkk"))
    # 16,359 k's, a space, then the 23 characters up to the cut (`https://user:SECRETPW77`)
    assert cut == ["k" * 16_359 + " <redacted> tail…", "k" * 16_359 + " https://<redacted>@host…"]
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"SECRETPW77" not in data and b"QQQQQQQQ" not in data, path


def test_gpu_activities_all_of_no_length_ingest_and_report(tmp_path: Path, example) -> None:
    """Every kernel, memcpy and memset of `dur` 0: the ingest summary's shares divided by a GPU
    time of 0 (internal error, exit 1). Shares of nothing are shown as `–`."""
    doc = copy.deepcopy(example)
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            event["dur"] = 0
    trace = _write(tmp_path, doc)
    ingest = cli("ingest", trace, "-o", tmp_path / "out")
    assert ingest.code == 0, ingest.output
    shares = [line.split()[2] for line in ingest.stdout.splitlines() if line.startswith("0.0 µs")]
    assert shares and set(shares) == {"–"}, ingest.stdout
    assert cli("report", tmp_path / "out").code == 0
    # no rate and no SOL of no time (they were inf): every group's are null
    roofline = pd.read_parquet(tmp_path / "out" / "roofline.parquet")
    rates = roofline[["achieved_tflops", "achieved_gbps", "sol_pct"]]
    assert len(roofline) and rates.isna().all().all(), rates


@pytest.mark.parametrize("dur", [5e-324, 1e-300, 0.0004])
def test_gpu_activities_shorter_than_the_clock_have_no_rate(tmp_path: Path, example, dur: float) -> None:
    """A kernel `dur` below a nanosecond (the finest a trace records) is no measurement: the
    roofline had SOL inf (5e-324 µs) or of 300 digits (1e-300 µs) and the terminal printed inf.
    Each group then has no rate and no SOL, shown as `–`; at 1 ns they are numbers again."""
    doc = copy.deepcopy(example)
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            event["dur"] = dur
    assert cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "out").code == 0
    report = cli("report", tmp_path / "out", "--section", "headroom")
    assert report.code == 0, report.output
    assert "inf" not in report.stdout and "nan" not in report.stdout, report.stdout
    roofline = pd.read_parquet(tmp_path / "out" / "roofline.parquet")
    rates = roofline[["achieved_tflops", "achieved_gbps", "sol_pct"]]
    assert len(roofline) and rates.isna().all().all(), rates
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            event["dur"] = 0.001
    assert cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "one_ns").code == 0
    assert cli("report", tmp_path / "one_ns").code == 0
    costed = pd.read_parquet(tmp_path / "one_ns" / "roofline.parquet")["sol_pct"].dropna()
    assert len(costed) and costed.map(math.isfinite).all(), costed


@pytest.mark.parametrize("phase", ["i", "I", "b", "C", "x", None])
def test_ranges_written_in_another_phase_are_counted_not_dropped_unsaid(tmp_path: Path, example, phase) -> None:
    """10 kernels and 3 CPU ops of the example written as instants (`i`: an internal error,
    AttributeError), as `I`, async, counter or lower-case `x` events, or without a `ph`: not read
    (no duration) as before, but now said, per category; the other 51 GPU activities are read."""
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    for event in kernels[:10] + ops[:3]:
        if phase is None:
            del event["ph"]
        else:
            event["ph"] = phase
    result = cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "out")
    assert result.code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "not complete (X)" in line]
    assert len(warned) == 1 and "13 events of categories read as ranges ('kernel' 10, 'cpu_op' 3)" in warned[0]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["traces"][0]["gpu_activities"] == 61 - 10


@pytest.mark.parametrize("cat", ["cpu_op", "kernel"])
def test_a_range_ending_past_the_time_bound_costs_only_its_duration(tmp_path: Path, example, cat: str) -> None:
    """`ts` and `dur` each under 2^53 µs but `ts + dur` beyond: ingest wrote the end, and every
    reader then refused the run it had just written. A CPU op keeps its start (an instant), a
    kernel is left out; both said."""
    doc = copy.deepcopy(example)
    event = next(e for e in doc["traceEvents"] if e.get("cat") == cat)
    event["dur"] = 2**53 - 11  # its ts is ~1.4e12 µs
    result = cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "out")
    assert result.code == 0, result.output
    warned = "1 GPU activity without a usable ts or dur was left out" if cat == "kernel" else "(dur 1)"
    assert warned in result.stderr, result.stderr
    report = cli("report", tmp_path / "out")
    assert report.code == 0, report.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["traces"][0]["gpu_activities"] == (61 - 1 if cat == "kernel" else 61)


def test_an_nsight_range_ending_at_int64s_end_costs_only_its_duration(tmp_path: Path) -> None:
    """An NVTX range ending at int64's largest ns (9.2e15 µs, past 2^53): the same."""
    import shutil
    import sqlite3

    export = tmp_path / "slice.sqlite"
    shutil.copy(EXAMPLE.parent / "h100_2gpu_slice.sqlite", export)
    with sqlite3.connect(export) as db:
        db.execute('UPDATE NVTX_EVENTS SET "end" = 9223372036854775807 WHERE rowid = 1')
    result = cli("ingest", export, "-o", tmp_path / "out")
    assert result.code == 0 and "(dur 1)" in result.stderr, result.output
    assert cli("report", tmp_path / "out").code == 0


@pytest.mark.parametrize("k", ["²", "٣", "9" * 5000])
def test_a_window_instance_that_is_no_plain_number_is_one_line(tmp_path: Path, k: str) -> None:
    """`--window ProfilerStep#²`: str.isdigit says yes, int() no (internal error); 5,000 digits
    are more than int() reads."""
    out = tmp_path / "out"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    for command in (("report", out), ("whatif", out, "--no-launch-gaps")):
        assert_one_line_error(cli(*command, "--window", f"ProfilerStep#{k}"), "expected NAME#K")


def test_kernels_on_no_known_stream_count_in_their_device_only(tmp_path: Path, example) -> None:
    """Every other kernel's stream beyond 2^53 (nulled at ingest): their per-stream idle rows
    read as the device's own (`stream` null), two rows of one key: `report --full` was an
    internal error (unstack), and their stretches a graph candidate of stream `nan`."""
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for event in kernels[::2]:
        event["args"]["stream"] = 2**60
    assert cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "out").code == 0
    report = cli("report", tmp_path / "out", "--full")
    assert report.code == 0, report.output
    assert " nan " not in report.stdout and not re.search(r"(?<![\d.])7\.0(?! µs)", report.stdout)  # stream 7.0
    idle = pd.read_parquet(tmp_path / "out" / "idle.parquet")
    device_rows = idle[idle["stream"].isna()]
    assert not device_rows.duplicated(["rank", "device", "category"]).any()
    candidates = pd.read_parquet(tmp_path / "out" / "graph_candidates.parquet")
    assert candidates["stream"].notna().all()


def test_diff_refuses_one_file_named_for_two_outputs(tmp_path: Path) -> None:
    """`diff A B --markdown F --html F` wrote the page over the summary and exited 0."""
    out = tmp_path / "out"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    target = tmp_path / "d.md"
    for options in (("--markdown", target, "--html", target), ("-o", target, "--html", tmp_path / "x" / ".." / "d.md")):
        assert_one_line_error(cli("diff", out, out, *options), "--html", "is also", "name one file for each")
        assert not target.exists()


def test_a_window_one_rank_lacks_is_refused_naming_the_rank(tmp_path: Path, example) -> None:
    """Two ranks, the second without `ProfilerStep` ranges: `--window ProfilerStep#0` said "the
    trace has 0 ranges named like 'ProfilerStep'" without saying which rank's."""
    traces = tmp_path / "ranks"
    traces.mkdir()
    for rank in (0, 1):
        doc = copy.deepcopy(example)
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        if rank == 1:
            for event in doc["traceEvents"]:
                if str(event.get("name", "")).startswith("ProfilerStep#"):
                    event["name"] = "step"
        (traces / f"r{rank}.json").write_text(json.dumps(doc))
    assert cli("ingest", traces, "-o", tmp_path / "out", "-q").code == 0
    refused = cli("report", tmp_path / "out", "--window", "ProfilerStep#0")
    assert_one_line_error(
        refused,
        "rank 1: --window ProfilerStep#0: K is the instance, counted from 0 in start order, not the number in a "
        "range's name; the trace has 0 ranges named like 'ProfilerStep' (none)",
    )


def test_an_integer_of_thousands_of_digits_costs_only_its_field(tmp_path: Path, example) -> None:
    """Python reads no integer past 4,300 digits: one such number in a kernel's `pid` refused the
    whole trace, one in its `grid` lost all its args (its correlation with them), one as the
    rank refused the trace. Now each is out of range like 2^70: its field ignored and said."""
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["pid"], kernels[1]["args"]["grid"] = "PID_HERE", "GRID_HERE"
    doc["distributedInfo"] = {"rank": "RANK_HERE", "backend": "nccl"}
    big = "9" * 5000
    text = json.dumps(doc).replace('"PID_HERE"', big).replace('"GRID_HERE"', f"[{big}, 1, 1]")
    trace = tmp_path / "big.json"
    trace.write_text(text.replace('"RANK_HERE"', big))
    frame, err = _ingest_and_report(trace, tmp_path / "out")
    assert len(frame) == 61 and frame["correlation"].notna().all() and frame["launcher"].notna().all()
    assert "2 values out of range or of an unexpected type were ignored (grid 1, pid 1)" in err
    assert "distributedInfo.rank 'inf' is not an integer: ignored" in err


def test_begin_end_events_are_said_not_read(tmp_path: Path, example) -> None:
    """Kernels and ops written as begin/end pairs vanished without a word (60 kernels became
    none); complete events are what torch.profiler writes and what ingest reads: the pairs are
    counted in one warning, in the fast and the forgiving decode alike."""
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    begin = {**kernels[0], "ph": "B"}
    begin.pop("dur")
    end = {"ph": "E", "pid": begin["pid"], "tid": begin["tid"], "ts": begin["ts"] + kernels[0]["dur"]}
    doc["traceEvents"].remove(kernels[0])
    doc["traceEvents"] += [begin, end]
    ingest = cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "out", "-q")
    assert ingest.code == 0, ingest.output
    assert "2 begin/end (B/E) events were not read: only complete (X) ones are" in ingest.stderr
    doc["traceEvents"][0]["args"] = {"correlation": "7"}  # an id written as text: the forgiving decode
    ingest = cli("ingest", _write(tmp_path, doc), "-o", tmp_path / "out2", "-q")
    assert ingest.code == 0, ingest.output
    assert "2 begin/end (B/E) events were not read: only complete (X) ones are" in ingest.stderr


def test_markup_in_names_stays_inside_the_page_tables(tmp_path: Path, example) -> None:
    """Table rows travel as JSON inside <script type='application/json'>; with only `</` escaped,
    `<!--<script>` in a kernel name put the HTML parser where the element's own </script> no
    longer closed it, and the rest of report.html and diff.html was swallowed into it. The JSON
    now holds no `<`, `>` or `&` at all (\\u escapes, which JSON.parse reads back)."""
    import re

    doc = copy.deepcopy(example)
    name = next(e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    for event in doc["traceEvents"]:
        if event.get("name") == name:
            event["name"] = "<!--<script>" + name
    out = tmp_path / "out"
    _ingest_and_report(_write(tmp_path, doc), out)
    assert cli("diff", out, out, "--html", tmp_path / "diff.html").code == 0
    for page in (out / "report.html", tmp_path / "diff.html"):
        payloads = re.findall(r"<script type='application/json'>(.*?)</script>", page.read_text(), re.S)
        assert payloads
        assert not [p for p in payloads if set(p) & set("<>&")]
        read_back = [json.dumps(json.loads(p), ensure_ascii=False) for p in payloads]  # the rows and their details
        assert any("<!--<script>void at::native::" in text for text in read_back), page


def test_names_whose_bytes_are_not_utf8_are_one_line(tmp_path: Path) -> None:
    """Linux file names are bytes; one not UTF-8 (Python holds it with lone surrogates) was an
    internal error — in Arrow, which opens no such path, or in the JSON that names it."""
    import os
    import shutil

    odd = os.fsdecode(b"t_\xff\xfe")
    trace = tmp_path / f"{odd}.json.gz"
    shutil.copy(EXAMPLE, trace)
    assert_one_line_error(cli("ingest", trace, "-o", tmp_path / "a"), "t_\\udcff\\udcfe.json.gz", "not valid UTF-8")
    assert_one_line_error(cli("ingest", tmp_path, "-o", tmp_path / "b"), "not valid UTF-8")  # found in a folder
    assert_one_line_error(cli("ingest", EXAMPLE, "-o", tmp_path / odd), "not valid UTF-8")
    assert not (tmp_path / odd).exists()
    assert_one_line_error(cli("report", tmp_path / odd), "not valid UTF-8")


def test_paths_the_user_names_print_literally_and_redacted(tmp_path: Path) -> None:
    """`wrote …` lines printed output paths as typed (a token in `--html` on the terminal), and
    rich turned `:fire:` in a name into an emoji (a folder that does not exist)."""
    token = "ghp_" + "a" * 36
    out = tmp_path / "run:fire:.atlas"
    ingest = cli("ingest", EXAMPLE, "-o", out, "-q")
    assert ingest.code == 0 and ingest.stdout.strip() == str(out), ingest.output
    report = cli("report", out, "--html", tmp_path / f"page_{token}.html")
    unwrapped = report.output.replace("\n", "")  # a long path wraps mid-name at 80 columns
    assert report.code == 0 and token not in unwrapped and "page_<redacted>.html" in unwrapped
    assert (tmp_path / f"page_{token}.html").is_file()
    # a token in the run folder's own name: the page's title and a diff's sides show it redacted
    named = tmp_path / f"run_{token}.atlas"
    assert cli("ingest", EXAMPLE, "-o", named, "-q").code == 0
    assert cli("report", named).code == 0
    assert cli("diff", named, out, "--html", tmp_path / "d.html").code == 0
    for page in (named / "report.html", tmp_path / "d.html"):
        text = page.read_text()
        assert token not in text and "run_&lt;redacted&gt;" in text, page
    diff = cli("diff", out, out, "-o", tmp_path / f"d_{token}.csv", "--markdown", tmp_path / f"d_{token}.md")
    assert diff.code == 0 and token not in diff.output.replace("\n", "")


@pytest.mark.parametrize("value", ["inf", "1e309", "-inf"])
def test_numbers_that_are_not_finite_are_one_line(tmp_path: Path, value: str) -> None:
    """`--fail-above inf` judged nothing and printed numpy's RuntimeWarnings."""
    out = tmp_path / "run.atlas"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    done = cli("diff", out, out, "--fail-above", value)
    if value.startswith("-"):  # below the option's minimum: typer's own usage error
        assert done.code == 2
    else:
        assert_one_line_error(done, "--fail-above inf: not a finite number")
    assert "RuntimeWarning" not in done.output


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[{"kernel_name": "ampere_sgemm_128x64_nn", "op_mapping": "matmul", "label": "x"}]', "`label` that is not"),
        ('[{"kernel_name": "a\\ud800b", "op_mapping": "TBD"}]', "holds a lone UTF-16 surrogate"),
        ('{"kernel_name": "k"}', "a kernel catalog is a JSON list"),
    ],
)
def test_hostile_catalogs_are_one_line_for_classify_and_replay(tmp_path: Path, text: str, needle: str) -> None:
    """A label that is no object and a lone surrogate escape were internal errors in `classify`;
    `replay --catalog` read the catalog unchecked."""
    catalog = tmp_path / "c.json"
    catalog.write_text(text)
    assert_one_line_error(cli("classify", catalog, "-o", tmp_path / "out.json"), needle)
    assert_one_line_error(cli("replay", "--catalog", catalog, "--device", "cpu"), needle)


def test_stream_ids_beyond_2_53_cost_their_field(tmp_path: Path, example) -> None:
    """A stream id near int64's end went through the idle table's float column and back
    (OverflowError in report); no stream id is that large: set to null, said, reported."""
    doc = copy.deepcopy(example)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["stream"] = 2**63 - 1
    frame, err = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert "1 `stream` values beyond 2^53 (no stream id is) set to null" in err
    assert int(frame["stream"].isna().sum()) == 1


@pytest.fixture(scope="module")
def ingested_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("alias")
    trace = folder / "t.json.gz"
    trace.write_bytes(EXAMPLE.read_bytes())
    assert cli("ingest", trace, "-o", folder / "out", "-q").code == 0
    return folder


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("report", "{out}", "--html", "{out}/catalog.json"), "is catalog.json of the run folder"),
        (("report", "{out}", "--overlay", "{out}/summary.json"), "is summary.json of the run folder"),
        (("report", "{out}", "--overlay", "{dir}/t.json.gz"), "t.json.gz is a file this command reads"),
        (("diff", "{out}", "{out}", "--markdown", "{out}/catalog.json"), "is catalog.json of the run folder"),
        (("diff", "{out}", "{out}", "-o", "{out}/summary.json"), "is summary.json of the run folder"),
        (("diff", "{out}", "{out}", "--html", "{out}/kernels.parquet/rank=0/t.parquet"), "is kernels.parquet of"),
        (("classify", "{dir}/c.json", "-o", "{dir}/c.json"), "c.json is a file this command reads"),
    ],
)
def test_an_output_named_over_what_the_command_reads_is_refused(
    ingested_copy: Path, args: tuple[str, ...], needle: str
) -> None:
    """Each of these exited 0 (or 2 after the write) with the run folder, the trace or the catalog
    replaced: summary.json then said 0 GPU activities, or was a page of HTML."""
    folder, out = ingested_copy, ingested_copy / "out"
    (folder / "c.json").write_text("[]")
    before = {p: p.read_bytes() for p in [*out.rglob("*"), folder / "t.json.gz", folder / "c.json"] if p.is_file()}
    outcome = cli(*(a.format(out=out, dir=folder) for a in args))
    assert_one_line_error(outcome, needle)
    after = {p: p.read_bytes() for p in before}
    assert [p for p in before if after[p] != before[p]] == []


def test_outputs_the_user_may_name_inside_a_run_are_written(ingested_copy: Path) -> None:
    """The report's own default place and a new file of the user's are not the run's files."""
    out = ingested_copy / "out"
    assert cli("report", out, "--html", out / "report.html").code == 0
    assert cli("report", out, "--html", out / "mine.html").code == 0
    assert (out / "mine.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((out / "summary.json").read_text())["run_id"]  # the run's own files as they were


def test_a_summary_holding_a_credential_is_refused_where_the_run_is_opened(ingested_copy: Path, tmp_path: Path) -> None:
    """Ingest writes summary.json redacted; a token planted in it (a trace's file name) reached
    report.html and steps.parquet."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(ingested_copy / "out", out)
    summary = json.loads((out / "summary.json").read_text())
    summary["traces"][0]["file"] = f"run_{TOKEN}.json.gz"
    (out / "summary.json").write_text(json.dumps(summary))
    assert_one_line_error(cli("report", out), "summary.json: holds texts shaped like credentials")


def test_several_failed_traces_are_one_error_line(tmp_path: Path) -> None:
    """Two of four traces failing printed two error lines; now one, naming both, counted."""
    folder = tmp_path / "d"
    folder.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        (folder / name).write_bytes(EXAMPLE.read_bytes())
    (folder / "c.json").write_text('{"traceEvents": [')
    (folder / "e.json").write_text("x")
    outcome = cli("ingest", folder, "-o", tmp_path / "out", "-q")
    line = assert_one_line_error(outcome, "2 of 4 traces failed; the others are in", "whose summary.json lists")
    assert f"{folder / 'c.json'}: invalid JSON" in line and f"{folder / 'e.json'}: " in line
    failed = json.loads((tmp_path / "out" / "summary.json").read_text())["failed"]
    assert [Path(f["source"]).name for f in failed] == ["c.json", "e.json"]


def test_an_error_names_its_file_and_problem_redacted_apart(ingested_copy: Path, tmp_path: Path) -> None:
    """`/etc/passwd: listed in …` was redacted as one text, read as `passwd: <secret>`, and lost
    the word `listed`; the file and the problem are redacted apart."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(ingested_copy / "out", out)
    summary = json.loads((out / "summary.json").read_text())
    summary["traces"][0]["kernels_file"] = "/etc/passwd"
    (out / "summary.json").write_text(json.dumps(summary))
    line = assert_one_line_error(cli("report", out))
    assert (
        line
        == "error: /etc/passwd: listed in summary.json but not among the files of kernels.parquet: run `atlas ingest` again"
    )


# --- sizes no GPU can handle in the time recorded (stop 55) -------------------------------------


def test_sizes_no_gpu_could_move_in_the_time_recorded_are_not_costed(tmp_path: Path, example) -> None:
    """The example's one memcpy (DtoH, 2.24 µs) recorded as 2^62 bytes, and every addmm's
    [512, 512] weight recorded as [2^20, 2^20]: SOL of 10^14 % and 313,211 % were reported for
    such sizes. Neither is costed now: 2^62 B over the host link would take the fastest GPU of
    the catalog (host link ≤ 128 GB/s) ≥ 3.6·10^7 s, far more than 10 × 2.24 µs; each addmm
    (141 × 2^20 times 2^20 × 2^20) is 2 · 141 · 2^40 = 3.1·10^14 FLOP and reads a 2^40-element
    bf16 weight (2.2 TB), ≥ 0.1 s at 20 TB/s against kernels of microseconds. They count as "no
    model", with the reason."""
    doc = copy.deepcopy(example)
    big = 2**20
    for event in doc["traceEvents"]:
        if event.get("cat") == "gpu_memcpy":
            event["args"]["bytes"] = 2**62
        if event.get("cat") == "cpu_op" and event["name"] == "aten::addmm":
            event["args"]["Input Dims"] = [[big], [141, big], [big, big], [], []]
    out = tmp_path / "out"
    _ingest_and_report(_write(tmp_path, doc), out)
    roofline = pd.read_parquet(out / "roofline.parquet")
    impossible = roofline[roofline["note"].astype(str).str.startswith("recorded sizes impossible")]
    assert set(impossible["launcher"]) >= {"aten::addmm"} and "Memcpy DtoH (Device -> Pinned)" in set(
        impossible["name"]
    )
    assert impossible["sol_pct"].isna().all() and impossible["attainable_us"].isna().all()
    assert (roofline["sol_pct"].dropna() < 1000).all()
    trust = json.loads((out / "report.json").read_text())["trust"]
    reasons = {r["op"]: r for r in trust["top_uncosted"] if r["reason"].startswith("recorded sizes impossible")}
    assert reasons["aten::_local_scalar_dense"]["time_us"] == pytest.approx(2.24)  # the memcpy's launcher
    assert "aten::addmm" in reasons


def test_a_window_the_trace_lacks_leaves_the_earlier_report_whole(tmp_path: Path) -> None:
    """`report --window ProfilerStep#5` on the example (one ProfilerStep) is refused in one line —
    before anything is replaced: it had removed the earlier report's report.json and left its
    other files without their manifest."""
    out = tmp_path / "out"
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    assert cli("report", out).code == 0
    before = {name: (out / name).read_bytes() for name in ("report.json", "roofline.parquet", "critical_path.parquet")}
    assert_one_line_error(cli("report", out, "--window", "ProfilerStep#5"), "the trace has 1 range named like")
    assert {name: (out / name).read_bytes() for name in before} == before
    assert cli("report", out, "--window", "ProfilerStep#0").code == 0


def test_distinct_long_names_past_the_budget_are_shortened_and_stay_distinct(
    tmp_path: Path, example, monkeypatch: pytest.MonkeyPatch
) -> None:
    """9,000 distinct op names of 10 KB (a 100 MB trace) took `atlas ingest` 36 s and `atlas
    report` 3.8 GB: every stage pays per character. Once a table's distinct names pass
    NAMES_TEXT characters, each new one longer than SHORT_NAME (256) is shortened to SHORT_NAME
    with a digest of the whole. Here the budget is 3,000: of five distinct 2,000-character kernel
    names, two are kept whole (2,000, then 4,000 > 3,000), three shortened; a name's second kernel
    keeps its first's short form."""
    from kernel_atlas.ingest import columns
    from kernel_atlas.ingest.pipeline import ingest_trace

    monkeypatch.setattr(columns, "NAMES_TEXT", 3_000)
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    names = [f"kernel_{i}_" + "t" * 1_991 for i in range(5)]
    for event, name in zip(kernels, [*names, names[4]], strict=False):
        event["name"] = name
    result = ingest_trace(_write(tmp_path, doc), workers=1)
    got = result.frame["name"].astype(str).tolist()[: len(kernels)]
    long = [name for name in dict.fromkeys(got) if name.startswith("kernel_")]
    assert long[:2] == names[:2]
    assert [len(name) for name in long[2:]] == [256, 256, 256]
    assert [name[:242] for name in long[2:]] == [name[:242] for name in names[2:]]
    assert all(name.endswith("…") and name[242] == "#" for name in long[2:])
    assert got.count(long[4]) == 2  # the fifth name's two kernels: one name
    # the example's own kernel names past 256 characters that come after the budget is passed are
    # shortened too: the warning counts every distinct name cut, in host and GPU tables alike
    every = set(result.frame["name"].astype(str))
    for host in result.host_events.values():
        every |= set(host["name"].astype(str))
    cut = sum(1 for name in every if len(name) == 256 and name.endswith("…") and name[242] == "#")
    assert cut >= 3
    assert any(f"{cut} distinct names longer than 256 characters were shortened to 256" in w for w in result.warnings)


def test_short_names_count_toward_the_names_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names just under the shortening had never counted toward the budget: 80,000 distinct names
    of 820 characters took `atlas report` to 1.57 GB. Every distinct name counts now. Budget 800,
    five kernels (the only GPU texts) named with 300, 300, 300, 300 and 200 characters: the first
    three kept whole (the count 0, 300, 600 when each came: at most 800), 900 after the third — the
    fourth is shortened to 256 (its start, `#`, a digest, `…`), the fifth kept whole (no longer
    than 256)."""
    from kernel_atlas.ingest import columns
    from kernel_atlas.ingest.pipeline import ingest_trace

    monkeypatch.setattr(columns, "NAMES_TEXT", 800)
    names = [f"kernel_{i}_" + "w" * 291 for i in range(4)] + ["kernel_4_" + "v" * 191]
    events: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        host = {"ph": "X", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 2}
        events.append({**host, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {"correlation": i + 1}})
        args = {"correlation": i + 1, "device": 0, "stream": 7}
        events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10 * i + 5, "dur": 3, "args": args}
        )
    result = ingest_trace(_write(tmp_path, {"traceEvents": events}), workers=1)
    got = result.frame.sort_values("ts_us")["name"].astype(str).tolist()
    assert got[:3] == names[:3]
    assert len(got[3]) == 256 and got[3][:242] == names[3][:242] and got[3][242] == "#" and got[3].endswith("…")
    assert got[4] == names[4]
    assert any("1 distinct name longer than 256 characters was shortened to 256" in w for w in result.warnings)
