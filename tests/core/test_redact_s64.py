"""Credential redaction, campaign AH: a message of ours about a path or name that ends in a key
(`/etc/passwd`, `secret`, `my_api_key`) keeps its own words — the subject and the problem are
redacted apart — while a credential in the subject or the problem is still redacted; a trace
named `passwd: x` gets an output folder and rank file whose names redaction keeps, so the run's
readers accept it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import REDACTED, redact_message, redacted_error
from tests.support.hostile import assert_one_line_error, cli
from tests.support.traces import EXAMPLE

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # credential-shaped, split so no scanner trips here


@pytest.mark.parametrize(
    ("subject", "problem", "said"),
    [
        ("/etc/passwd", "not JSON", "/etc/passwd: not JSON"),
        ("secret", "not a run folder", "secret: not a run folder"),
        ("runs/password", "not a run folder", "runs/password: not a run folder"),
        ("my_api_key", "not a run folder", "my_api_key: not a run folder"),
        # credentials in either part are still redacted
        ("password=hunter2", "not a run folder", f"password={REDACTED}: not a run folder"),
        (f"runs/{TOKEN}", "no such file", f"runs/{REDACTED}: no such file"),
        ("t.json", "args hold password: hunter2", f"t.json: args hold password: {REDACTED}"),
        (None, f"token {TOKEN} seen", f"token {REDACTED} seen"),
    ],
)
def test_a_message_is_redacted_subject_and_problem_apart(subject: str | None, problem: str, said: str) -> None:
    assert redact_message(subject, problem) == said
    assert redacted_error(AtlasError(subject, problem)) == said


def test_the_error_line_of_a_file_named_passwd_keeps_not(tmp_path: Path) -> None:
    """`atlas report /etc/passwd` said `/etc/passwd: <redacted> JSON`: the refusal came back from
    the ingest as one text, redacted whole."""
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for command in (["report", passwd], ["ingest", passwd, "-o", tmp_path / "o.atlas"]):
        line = assert_one_line_error(cli(*command), f"{passwd}: not JSON")
        assert REDACTED not in line, line


def test_a_trace_named_like_a_key_and_value_gets_a_run_its_readers_accept(tmp_path: Path) -> None:
    """`passwd: x.json.gz` was ingested into `passwd: redacted.atlas`, its rank file
    `passwd: redacted.parquet` — and summary.json (written redacted) listed `passwd: <redacted>`:
    the run's own readers refused it."""
    from kernel_atlas.mcp_server import Tools

    trace = tmp_path / "passwd: x.json.gz"
    shutil.copy(EXAMPLE, trace)
    assert cli("ingest", trace, "-q").code == 0
    out = tmp_path / "redacted.atlas"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passwd: x.json.gz", "redacted.atlas"]
    summary = json.loads((out / "summary.json").read_text())
    listed = summary["traces"][0]["kernels_file"]
    assert listed.endswith("/redacted.parquet") and (out / listed).is_file(), listed
    assert cli("report", out).code == 0
    assert Tools(tmp_path).runs()["runs"] == [
        {
            "run": "redacted.atlas",
            "traces": [f"passwd: {REDACTED}"],
            "gpus": ["NVIDIA H100 80GB HBM3"],
            "reported": True,
        }
    ]
