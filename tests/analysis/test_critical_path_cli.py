"""`atlas whatif` and `atlas report --window/--overlay` on the command line: results and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.hostile import assert_one_line_error, cli


@pytest.fixture
def out(two_streams: Path) -> Path:
    return two_streams  # tests/analysis/conftest.py


def test_whatif_prints_and_writes_the_saving(out: Path) -> None:
    # k_one (100 µs, on the path of 125 µs) at 4x: 2 + 3 + 25 + 20 = 50 µs, saving 75 µs
    done = cli("whatif", out, "--speedup", "kernel=k_one:4x", "--json")
    assert done.code == 0, done.output
    result = json.loads(done.stdout)
    assert (result["baseline_us"], result["new_us"], result["saving_us"], result["saving_pct"]) == (
        125.0,
        50.0,
        75.0,
        60.0,
    )
    assert result["changes"] == [{"change": "kernel=k_one:4x", "activities": 1, "gpu_us": 100.0}]
    assert json.loads((out / "whatif.json").read_text())["saving_us"] == 75.0
    text = cli("whatif", out, "--speedup", "kernel=k_one:4x")
    assert text.code == 0 and "saving 75.0 µs" in text.stdout


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_whatif_never_prints_a_credential_typed_in_a_speedup(out: Path, as_json: list[str]) -> None:
    """The changes quote each --speedup as typed: whatif.json had it redacted, the terminal not."""
    token = "ghp_" + "a" * 36
    for spec, secret in ((f"kernel={token}:2x", token), ("op=https://u:pw123@host:2x", "pw123")):
        done = cli("whatif", out, "--speedup", spec, *as_json)
        assert done.code == 0, done.output
        assert secret not in done.output and "<redacted>" in done.stdout
        assert secret not in (out / "whatif.json").read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--speedup", "op=mm"], "expected FIELD=VALUE:Nx"),
        (["--speedup", "kernel=(:2x"], "not a regular expression"),
        (["--speedup", "kernel=k_one:0.5x"], "the factor must be at least 1"),  # a slowdown changed nothing
        (["--speedup", "category=gemm:roofline"], "needs roofline.parquet"),
        ([], "nothing to change"),
        (["--no-launch-gaps", "--rank", "3"], "no rank 3"),
        (["--no-launch-gaps", "--window", "Step"], "NAME#K"),
        (["--no-launch-gaps", "--window", "ProfilerStep#0"], "0 ranges"),
    ],
)
def test_whatif_bad_input_is_one_line(out: Path, args: list[str], needle: str) -> None:
    assert_one_line_error(cli("whatif", out, *args), needle)


def test_report_bad_window_is_one_line_and_writes_nothing(out: Path) -> None:
    assert_one_line_error(cli("report", out, "--window", "ProfilerStep"), "NAME#K")
    assert not (out / "report.json").exists()


def test_whatif_on_a_missing_folder(tmp_path: Path) -> None:
    assert_one_line_error(cli("whatif", tmp_path / "nope", "--no-launch-gaps"), "no such ingest output folder")


def test_report_like_hta_reads_the_path_as_hta(tmp_path: Path) -> None:
    # HIP_SYNC (tests/analysis/test_critical_path.py): 105.3 µs exact, 117 µs as HTA reads it
    from tests.analysis.test_critical_path import HIP_SYNC

    trace = tmp_path / "hip.json"
    trace.write_text(json.dumps({"traceEvents": HIP_SYNC, "deviceProperties": [{"id": 0, "name": "AMD MI300X"}]}))
    folder = tmp_path / "hip.atlas"
    write_outputs(ingest_paths([trace]), folder)
    for flags, convention, total in (([], "exact", 105.3), (["--like-hta"], "hta", 117.0)):
        done = cli("report", folder, *flags)
        assert done.code == 0, done.output
        facts = json.loads((folder / "report.json").read_text())["critical_path"]
        assert (facts["convention"], facts["total_us"]) == (convention, total)
