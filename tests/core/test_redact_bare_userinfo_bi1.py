"""A `user:password@host` without a scheme is a credential too (campaign BI 2): a trace file named
`run_user:s3cretpass@host.json` — a file name holds no `/`, so never a URL's `://` — carried the
password into the output folder's name, report.html's title, report.json, summary.json,
steps.parquet and the dashboard page. It is redacted as a URL's userinfo is (`<redacted>@host`),
and names that only look alike are kept: C++ names, Python frames, `user@host`, `host:port`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.core.redact import (
    REDACTED,
    credential_count,
    holds_credential,
    json_holds_credential,
    redact_document,
    redact_text,
)
from tests.support.traces import EXAMPLE, SEED, TRACES

PASSWORD = "s3cretpass"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("run_user:s3cretpass@host", f"{REDACTED}@host"),  # the trace's stem
        ("run_user:s3cretpass@host.json", f"{REDACTED}@host.json"),
        ("user:hunter22@localhost:5432/db", f"{REDACTED}@localhost:5432/db"),  # a DSN with a port
        ("bob:s3cr@t@db.internal", f"{REDACTED}@db.internal"),  # an @ in the password
        ("connect user:s3cretpass@host.example.com.", f"connect {REDACTED}@host.example.com."),
        ("'user:s3cretpass@host', 0", f"'{REDACTED}@host', 0"),  # a Concrete Inputs value
        ("user:pa55word@tcp(db:3306)/app", f"{REDACTED}@tcp(db:3306)/app"),  # Go's MySQL DSN
        # a user name that is itself a token goes with the password, as in a URL (a token format
        # tried first had left `:s3cretpass@host` for no pass to take)
        ("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8:s3cretpass@github.com", f"{REDACTED}@github.com"),
        ("run_ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8_user:s3cretpass@host", f"{REDACTED}@host"),
        # the ingest's warning names the file, and is redacted as one text: a `:` after the host
        # ends its subject; a token an earlier pass redacted is part of the user
        ("run_user:s3cretpass@host.json: 11 values shaped like", f"{REDACTED}@host.json: 11 values shaped like"),
        ("run_<redacted>_user:s3cretpass@host.json: 11 values", f"{REDACTED}@host.json: 11 values"),
        ("/data/run_<redacted>_user:s3cretpass@host.json: 1 values", f"/data/{REDACTED}@host.json: 1 values"),
    ],
)
def test_a_bare_userinfo_is_redacted_once_and_for_all(text: str, redacted: str) -> None:
    assert redact_text(text) == redacted
    assert redact_text(redacted) == redacted  # a second pass (a report reads what ingest wrote) keeps it
    # the screens that pass text over without the expression see it too (`@` is a needle)
    assert holds_credential(text)
    assert json_holds_credential(json.dumps({"name": text}))
    assert redact_document({"k": [text]}) == {"k": [redacted]}
    assert credential_count(["aten::mm", text]) == 1


@pytest.mark.parametrize(
    "text",
    [
        "aten::add",  # C++ names
        "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "ns::fn:abcd@x",  # a `::` name: no user begins after a `:`
        "model/block.py(12): forward",  # a Python frame
        "john.doe@example.com",  # an address without a password
        "localhost:8080",  # host:port
        "host:8080/path",
        "a:b@c",  # a password of fewer than 4 characters
        "mailto:john@example.com",  # a scheme, not a user
        "nvcr.io/nvidia/pytorch:24.01-py3@sha256:7b3a9f00",  # an image's tag and digest
        "pytorch:24.01-py3@sha256:7b3a9f00",
        "12:30@node1",  # a time: a user begins with a letter
        "out = mat1 @ mat2",  # the costs catalog's formulas
        "o = softmax(q@k^T)@v",
        f"{REDACTED}@host",
    ],
)
def test_names_that_only_look_alike_are_kept(text: str) -> None:
    assert redact_text(text) == text


def _strings(value: Any, into: set[str]) -> None:
    if isinstance(value, str):
        into.add(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            into.add(key)
            _strings(item, into)
    elif isinstance(value, list):
        for item in value:
            _strings(item, into)


@pytest.mark.skipif(not TRACES.is_dir() or not SEED.is_file(), reason="shared traces not present")
def test_no_string_of_the_shared_traces_or_the_seed_catalog_reads_as_one() -> None:
    """Every string of every shared trace (file names, event names, frames, module names, args,
    metadata; keys too) and of the seed catalog: none holding an `@` is redacted — the only ones
    the new alternative can take (4,819 distinct strings; 5 hold an `@`, the costs formulas'
    `A @ B`)."""
    found: set[str] = set()
    for path in sorted(TRACES.iterdir()):
        found.add(path.name)
        if path.name.endswith(".json.gz"):
            with gzip.open(path) as handle:
                _strings(json.load(handle), found)
    _strings(json.loads(SEED.read_text()), found)
    assert len(found) > 4000
    assert [text for text in found if "@" in text and redact_text(text) != text] == []


def test_a_password_in_the_trace_file_name_reaches_no_output(tmp_path: Path) -> None:
    """The trace named `run_ghp_…_user:s3cretpass@host.json.gz`: its stem is redacted to
    `<redacted>@host`, written `redacted@host` where a file name keeps no `<>` — the output
    folder, its rank files and the title of report.html and the dashboard page; the warning that
    a value of the trace was redacted names it `<redacted>@host.json.gz` (it had kept the
    password behind the token's `<redacted>`)."""
    trace = tmp_path / f"run_{TOKEN}_user:{PASSWORD}@host.json.gz"
    with gzip.open(EXAMPLE) as handle:
        doc = json.load(handle)
    # a credential in the trace too (in a kernel's name): the warning saying so names the file
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["name"] = f"{kernel['name']}_{TOKEN}"
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    runner = CliRunner()
    report = runner.invoke(app, ["report", str(trace)])
    assert report.exit_code == 0, report.output
    out = tmp_path / "redacted@host.atlas"
    assert (out / "kernels.parquet" / "rank=0" / "redacted@host.parquet").is_file()
    page = tmp_path / "dash.html"
    dashboard = runner.invoke(app, ["dashboard", str(out), "--html", str(page)])
    assert dashboard.exit_code == 0, dashboard.output
    assert "<title>Kernel Atlas — redacted@host.atlas</title>" in (out / "report.html").read_text()
    assert "redacted@host" in page.read_text()
    written = [p for p in tmp_path.rglob("*") if p != trace]
    assert [str(p) for p in written if PASSWORD in str(p)] == []
    assert [str(p) for p in written if p.is_file() and PASSWORD.encode() in p.read_bytes()] == []
    assert PASSWORD not in report.output + dashboard.output
    assert TOKEN not in report.output + dashboard.output
    said = json.loads((out / "summary.json").read_text())
    assert f"{REDACTED}@host.json.gz: 1 values shaped like credentials" in json.dumps(said)
