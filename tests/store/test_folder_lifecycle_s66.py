"""Campaign AW: how output folders live and die when commands fail, are killed or race.

Each test sets up by hand the moment a race or a kill lands in (a folder as a killed ingest
leaves it, a reader holding the lock, a report killed after it removed report.json), so that
what the tester met 1 time in 20 happens every time here."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import LOCK_NAME, folder_lock
from kernel_atlas.ingest.fleet import output_for
from kernel_atlas.store import outputs
from tests.support.hostile import ATLAS, assert_one_line_error, atlas, cli
from tests.support.traces import EXAMPLE

EXAMPLE_FILE = "h100_bert_small_infer.json.gz"


def _ingest(trace: Path, out: Path) -> Path:
    result = cli("ingest", trace, "-o", out, "-q")
    assert result.code == 0, result.output
    return out


def _traces_listed(out: Path) -> list[str]:
    summary = outputs.safe_files.read_json(out / "summary.json")
    return [t["file"] for t in summary["traces"]]


# --- class 1: an ingest that ended before its first rank file -------------------------------------


def _as_a_killed_ingest_leaves(out: Path) -> None:
    """What an ingest killed (SIGKILL) while it wrote its first rank file leaves in a folder it
    had cleared: its lock, `kernels.parquet/rank=0/` empty and the host events' temporary file."""
    for name in os.listdir(out):
        if name != LOCK_NAME:
            outputs.safe_files.remove(out / name)
    (out / "kernels.parquet" / "rank=0").mkdir(parents=True)
    (out / "host_events.parquet" / "rank=0").mkdir(parents=True)
    (out / "host_events.parquet" / "rank=0" / ".h100_bert_small_infer.parquet.0123456789ab.tmp").write_bytes(b"PAR1")


def test_a_killed_ingests_leftovers_read_as_unfinished_and_the_next_ingest_clears_them(tmp_path: Path) -> None:
    """The next ingest refused the folder for ever: `holds kernels.parquet, host_events.parquet,
    which no Kernel Atlas run wrote`. Kernel Atlas wrote them: readers call it an unfinished
    ingest, and the next ingest clears it."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    assert cli("report", out).code == 0
    _as_a_killed_ingest_leaves(out)
    assert_one_line_error(cli("report", out), "run.atlas", "unfinished ingest output")
    assert_one_line_error(cli("diff", out, out), "unfinished ingest output")
    _ingest(EXAMPLE, out)
    assert _traces_listed(out) == [EXAMPLE_FILE]
    assert os.listdir(out / "host_events.parquet" / "rank=0") == ["h100_bert_small_infer.parquet"]
    assert cli("report", out).code == 0


def test_an_unfinished_dataset_holding_a_file_of_the_users_is_still_refused(tmp_path: Path) -> None:
    """Only folders holding nothing but a writer's temporary files are taken for an ingest's own."""
    out = tmp_path / "mine"
    (out / "kernels.parquet" / "rank=0").mkdir(parents=True)
    (out / "kernels.parquet" / "rank=0" / "notes.txt").write_text("precious")
    assert_one_line_error(
        cli("ingest", EXAMPLE, "-o", out, "-q"), "holds kernels.parquet, which no Kernel Atlas run wrote"
    )
    assert (out / "kernels.parquet" / "rank=0" / "notes.txt").read_text() == "precious"


def _file_size_limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))  # `ulimit -f 8`: Python ignores SIGXFSZ


def test_an_ingest_that_fails_writing_leaves_no_folder_the_next_one_refuses(tmp_path: Path) -> None:
    """`ulimit -f 8; atlas ingest T -o run.atlas` (EFBIG on its first rank file) left
    `kernels.parquet/rank=0/` and `host_events.parquet/rank=0/` empty, and the same ingest
    without the limit was refused. Into an existing run folder the leftovers read as an
    unfinished ingest; a folder the ingest made goes with it."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    env = {**os.environ, "COLUMNS": "100"}
    for folder in (out, tmp_path / "new.atlas"):
        limited = subprocess.run(
            [*ATLAS, "ingest", "-q", str(EXAMPLE), "-o", str(folder)],
            capture_output=True,
            text=True,
            env=env,
            preexec_fn=_file_size_limit,
            timeout=300,
        )
        assert limited.returncode == 2 and "cannot write: File too large" in limited.stderr, limited.stderr
    assert not (tmp_path / "new.atlas").exists()
    assert_one_line_error(cli("report", out), "unfinished ingest output")
    _ingest(EXAMPLE, out)
    _ingest(EXAMPLE, tmp_path / "new.atlas")
    assert _traces_listed(out) == _traces_listed(tmp_path / "new.atlas") == [EXAMPLE_FILE]


def test_a_made_folder_whose_rank_failed_writing_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "made.atlas"
    table = pa.table({"x": [1]})
    with pytest.raises(AtlasError, match="path too long"), outputs.new_run(out) as run_id:
        outputs.write_dataset_file(table, out, "kernels.parquet/rank=0/" + "y" * 300 + ".parquet", run_id)
    assert not out.exists()


# --- class 2: a file made from the previous kernels -----------------------------------------------


def test_a_reingest_removes_the_steps_of_a_report_killed_after_it_removed_report_json(tmp_path: Path) -> None:
    """`atlas report` removes report.json first and writes steps.parquet; killed in between, no
    report.json listed steps.parquet, and the next ingest — of another trace — kept it."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    assert cli("report", out).code == 0
    assert (out / "steps.parquet").is_file()
    (out / "report.json").unlink()  # where the killed report left the folder
    _ingest(EXAMPLE, out)
    assert not (out / "steps.parquet").exists()


# --- class 5: who holds the lock -----------------------------------------------------------------

_HOLD = """
import sys, time
from kernel_atlas.core.safe_files import folder_lock
with folder_lock(sys.argv[1], shared=True):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads /proc/locks")
def test_a_writer_refused_names_the_process_that_holds_the_lock(tmp_path: Path) -> None:
    """A reader (diff, whatif, dashboard) holds the lock shared and wrote no pid: the writer it
    refused named the pid the last ingest had written into the lock file, long gone."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    (out / LOCK_NAME).write_text("4194999\n")  # the pid a finished writer left (above any pid_max)
    reader = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "held\n"
        with pytest.raises(AtlasError) as refused, folder_lock(out):
            pass
        assert f"in use by another atlas command (pid {reader.pid})" in str(refused.value)
        assert "4194999" not in str(refused.value)
    finally:
        reader.kill()
        reader.wait()
    with folder_lock(out):  # and the writer that takes it leaves no pid behind to be named later
        pass


# --- class 7: the permission bits, for root too ---------------------------------------------------


def test_a_folder_whose_bits_forbid_writing_is_read_only_for_run_folders_too(tmp_path: Path) -> None:
    """Root ignored the bits for run folders (ingest and report rewrote a mode-555 run, ingest
    made a folder in a mode-555 one, diff left a lock file in it) but honoured them for --html."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    (out / LOCK_NAME).unlink()
    ro = tmp_path / "ro"
    ro.mkdir()
    before = sorted(os.listdir(out))
    out.chmod(0o555)
    ro.chmod(0o555)
    try:
        assert_one_line_error(cli("ingest", EXAMPLE, "-o", out, "-q"), "run.atlas", "read-only")
        assert_one_line_error(cli("report", out), "run.atlas", "read-only")
        assert_one_line_error(cli("ingest", EXAMPLE, "-o", ro / "x.atlas", "-q"), "x.atlas", "read-only")
        assert os.listdir(ro) == []
        assert cli("diff", out, out).code == 0  # a reader reads it, and writes no lock file there
        assert sorted(os.listdir(out)) == before
    finally:
        out.chmod(0o755)
        ro.chmod(0o755)


def test_a_read_only_run_folder_next_to_the_trace_is_not_the_default_output(tmp_path: Path) -> None:
    traces, work = tmp_path / "traces", tmp_path / "work"
    traces.mkdir()
    work.mkdir()
    shutil.copy(EXAMPLE, traces / "bert.json.gz")
    (traces / "bert.atlas").mkdir(mode=0o555)
    try:
        old = Path.cwd()
        os.chdir(work)
        try:
            assert output_for(str(traces / "bert.json.gz")) == (
                "bert.atlas",
                f"{traces}/bert.atlas is read-only: writing to ./bert.atlas instead (-o sets the output folder)",
            )
        finally:
            os.chdir(old)
    finally:
        (traces / "bert.atlas").chmod(0o755)


# --- class 8: a trace name as long as the system takes ---------------------------------------------

# SHA-256 of the 250-byte stem "x" * 250, its first 16 hex digits (worked out with sha256sum)
X250_DIGEST = "086d4a1c293bde31"


def test_a_trace_of_a_255_byte_name_is_ingested_under_cut_names(tmp_path: Path) -> None:
    """`'x' * 250 + '.json'` is a legal name; its rank file (258 bytes) and default folder (256)
    were not: 'path too long', and the folder blocked. The names are cut, with a digest of the
    whole stem; the rows keep the trace's whole name."""
    trace = tmp_path / ("x" * 250 + ".json")
    shutil.copy(EXAMPLE, trace)
    result = atlas("ingest", trace, "-q", cwd=tmp_path)
    assert result.code == 0, result.output
    folder = tmp_path / ("x" * 232 + "-" + X250_DIGEST + ".atlas")  # 232 + 1 + 16 + 6 = 255 bytes
    rank_file = "kernels.parquet/rank=0/" + "x" * 230 + "-" + X250_DIGEST + ".parquet"  # 230 + 1 + 16 + 8
    assert (folder / rank_file).is_file()
    summary = outputs.safe_files.read_json(folder / "summary.json")
    assert [t["kernels_file"] for t in summary["traces"]] == [rank_file]
    assert set(outputs.load_kernels(folder, columns=["trace"])["trace"]) == {"x" * 250}
    assert cli("report", trace).code == 0  # the trace given again: the same folder, reused


def test_two_long_names_differing_past_the_cut_keep_two_files(tmp_path: Path) -> None:
    first, second = tmp_path / ("x" * 249 + "a.json"), tmp_path / ("x" * 249 + "b.json")
    for trace in (first, second):
        shutil.copy(EXAMPLE, trace)
    out = tmp_path / "together.atlas"
    assert cli("ingest", first, second, "-o", out, "-q").code == 0
    files = sorted(str(p.relative_to(out)) for p in (out / "kernels.parquet").rglob("*.parquet"))
    assert len(files) == 2 and len(set(Path(f).name for f in files)) == 2
    assert all(len(Path(f).name.encode()) == 255 for f in files)


def test_a_name_of_multibyte_characters_gets_a_temporary_name_the_system_takes(tmp_path: Path) -> None:
    """`é` * 120: a 240-byte stem, a 248-byte rank file; its temporary name, cut to 180
    characters, was 266 bytes ('path too long')."""
    trace = tmp_path / ("é" * 120 + ".json.gz")
    shutil.copy(EXAMPLE, trace)
    out = _ingest(trace, tmp_path / "run.atlas")
    assert (out / "kernels.parquet" / "rank=0" / ("é" * 120 + ".parquet")).is_file()


# --- class 9: a lock that is a folder -------------------------------------------------------------


def test_a_lock_that_is_a_folder_is_named_and_readers_do_not_say_write(tmp_path: Path) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    (out / LOCK_NAME).unlink()
    (out / LOCK_NAME).mkdir()
    for command in (("diff", out, out), ("whatif", out, "--no-launch-gaps")):
        line = assert_one_line_error(cli(*command), f"run.atlas/{LOCK_NAME}: is a folder", "remove it")
        assert "write" not in line
    assert_one_line_error(cli("ingest", EXAMPLE, "-o", out, "-q"), f"run.atlas/{LOCK_NAME}: is a folder")
