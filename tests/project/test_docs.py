"""The documentation keeps up with the code: README ≤ 200 lines, the site builds with
`mkdocs build --strict`, docs/cli.md is what the CLI says, and every CLI option and every column
of every table atlas writes has an entry on some page under docs/ (a backticked `name`)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _gen_cli():
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "scripts" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _documented() -> frozenset[str]:
    """Every backticked word on every page under docs/ (`--top`, `dur_us`, `OUT/idle.parquet`...)."""
    text = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
    return frozenset(re.findall(r"`([^`\n]+)`", text))


def _undocumented(names: list[str]) -> list[str]:
    spans = _documented()
    words = {w for span in spans for w in re.split(r"[\s,()=\[\]{}|/]+", span)}
    return sorted(n for n in dict.fromkeys(names) if n not in spans and n not in words)


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_the_cli_reference_is_in_step() -> None:
    assert (DOCS / "cli.md").read_text() == _gen_cli().render(), "run python docs/scripts/gen_cli.py"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    mkdocs = shutil.which("mkdocs") or str(Path(sys.executable).with_name("mkdocs"))
    done = subprocess.run(
        [mkdocs, "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "cli" / "index.html").exists()


def test_every_cli_option_has_an_entry() -> None:
    import typer.main

    from kernel_atlas.cli import app

    group = typer.main.get_command(app)
    options = [
        name
        for command in group.commands.values()
        for param in command.params
        if param.param_type_name == "option" and param.name != "help"
        for name in [*param.opts, *param.secondary_opts]
    ]
    assert "--kernel-wait-us" in options and "--capture" in options
    assert _undocumented(options) == []


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """An ingest and a report of the bundled example: every table they write."""
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths
    from kernel_atlas.report.build import build_report

    out = tmp_path_factory.mktemp("docs") / "example.atlas"
    write_outputs(ingest_paths([REPO / "examples" / "h100_bert_small_infer.json.gz"]), out)
    build_report(out)
    return out


def test_every_column_of_every_written_table_has_an_entry(written: Path) -> None:
    from dataclasses import fields

    from kernel_atlas.analysis.collectives import COLLECTIVE_COLUMNS
    from kernel_atlas.analysis.diff import COLUMNS as DIFF_COLUMNS
    from kernel_atlas.replay.runner import Result  # the rows of replay.parquet
    from kernel_atlas.store.schema import KERNEL_COLUMNS

    tables = sorted(written.rglob("*.parquet")) + sorted(written.glob("*.csv"))
    names = {p.name for p in tables}
    assert {"roofline.parquet", "timeshare.csv", "idle.parquet", "launch_stats.parquet"} <= names
    columns = [*KERNEL_COLUMNS, *DIFF_COLUMNS, *COLLECTIVE_COLUMNS, *(f.name for f in fields(Result))]
    for path in tables:
        frame = pd.read_csv(path, nrows=0) if path.suffix == ".csv" else pd.read_parquet(path).head(0)
        columns += [str(c) for c in frame.columns]
    assert _undocumented(columns) == []


def test_a_missing_entry_is_found() -> None:
    assert _undocumented(["dur_us", "--top", "no_such_column_xyz"]) == ["no_such_column_xyz"]
