"""Option values out of range are refused in one line naming the option, and a speed-up that
matches nothing is said (stop 58's campaign: `--top -5` showed 7 rows, `:1e30x` read "expected
FIELD=VALUE:Nx", `category=GEMM:2x` saved 0 µs unsaid)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel_atlas.analysis.whatif import parse_speedup
from kernel_atlas.cli import app
from kernel_atlas.core.errors import AtlasError
from tests.support.traces import EXAMPLE


@pytest.mark.parametrize("top", ["-5", "0"])
def test_top_must_be_positive(top: str) -> None:
    result = CliRunner().invoke(app, ["ingest", str(EXAMPLE), "--top", top, "-o", "/nonexistent/x"])
    assert result.exit_code == 2 and "--top" in result.output


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("category=gemm:1e30x", "is no plain number"),
        ("category=gemm:-1x", "is no plain number"),
        ("category=gemm:0.5x", "at least 1"),
        ("category=gemm:2000000x", "at most 1,000,000"),
    ],
)
def test_speedup_factors_say_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(AtlasError, match=says):
        parse_speedup(spec)


def test_a_speedup_matching_nothing_is_said(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert CliRunner().invoke(app, ["ingest", str(EXAMPLE), "-o", str(out), "-q"]).exit_code == 0
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    result = CliRunner().invoke(app, ["whatif", str(out), "--speedup", "category=GEMM:2x"])
    assert result.exit_code == 0
    assert "'category=GEMM:2x' matches no GPU activity" in result.output
    fine = CliRunner().invoke(app, ["whatif", str(out), "--speedup", "category=gemm:2x"])
    assert "matches no GPU activity" not in fine.output


def test_utf8_arguments_under_an_ascii_locale_name_the_locale() -> None:
    from kernel_atlas.core.safe_files import check_utf8

    # Python under LC_ALL=C (no UTF-8 mode) holds the UTF-8 bytes of `трасса.json` as lone surrogates
    held = "трасса.json".encode().decode("ascii", "surrogateescape")
    with pytest.raises(AtlasError, match="a UTF-8 name, but the locale's encoding is") as caught:
        check_utf8(held)
    assert caught.value.source == "трасса.json"  # named as the user typed it
    # bytes that are no UTF-8 at all (Latin-1 `é`)
    with pytest.raises(AtlasError, match="not valid UTF-8"):
        check_utf8(b"caf\xe9.json".decode("ascii", "surrogateescape"))


def test_version_and_a_bare_atlas_say_one_line() -> None:
    import subprocess
    import sys

    run = [sys.executable, "-c", "from kernel_atlas.cli import main; main()"]
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("atlas ")
    bare = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and "Usage" in bare.stdout
    assert bare.stderr.strip().splitlines() == ["error: no command given (see atlas --help)"]  # was a blank line


@pytest.mark.parametrize("name", ["../../../tmp/evil", "Dashboard", "/etc/passwd"])
def test_dashboard_runs_only_a_shipped_notebook(name: str) -> None:
    from kernel_atlas.report.notebooks import notebook_path

    with pytest.raises(AtlasError, match="notebooks: compare, dashboard, replay"):
        notebook_path(name)
    assert notebook_path("dashboard").name == "dashboard.ipynb"


def test_a_dash_for_an_output_is_stdout_or_refused(tmp_path: Path, monkeypatch) -> None:
    import json

    monkeypatch.chdir(tmp_path)
    catalog = tmp_path / "c.json"
    catalog.write_text(json.dumps([{"kernel_name": "gemm", "kernel_implementation": "aten::mm", "op_mapping": "TBD"}]))
    result = CliRunner().invoke(app, ["classify", str(catalog), "-o", "-"])
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["op_mapping"] == "matmul"
    for command in (["ingest", str(EXAMPLE), "-o", "-"], ["diff", str(EXAMPLE), str(EXAMPLE), "-o", "-"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and "`-` is no" in result.output
    assert not (tmp_path / "-").exists()
