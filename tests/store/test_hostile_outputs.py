"""Interrupted runs and shared output folders (issue 11): nothing lost, nothing mixed, one clear line.

Every case is a folder state a user can reach — an ingest killed half-way, two ingests at once,
a file of another run copied in, a link planted in the folder, a damaged file — and what each
command does with it: work on one consistent run, or refuse in one line (exit code 2)."""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import LOCK_NAME, folder_lock
from kernel_atlas.ingest.fleet import output_for
from kernel_atlas.store import outputs
from kernel_atlas.store.outputs import DERIVED, RUN_KEY, open_output
from tests.support.hostile import ATLAS, assert_one_line_error, atlas, cli
from tests.support.traces import EXAMPLE, has_trace, raw_events, trace_path

A100 = "a100_alexnet_train"  # 21 KB, an A100; the example is an H100


def _ingest(trace: Path, out: Path) -> Path:
    result = cli("ingest", trace, "-o", out, "-q")
    assert result.code == 0, result.output
    return out


def _kernels(stem: str) -> int:
    return sum(1 for e in raw_events(stem) if e.get("ph") == "X" and e.get("cat") == "kernel")


def _kernel_rows(out: Path) -> int:
    return int((outputs.load_kernels(out)["kind"] == "kernel").sum())


def _readers(out: Path) -> list[tuple[str, ...]]:
    """Every command that reads an ingest output."""
    return [
        ("report", str(out)),
        ("dashboard", str(out), "--html", str(out.parent / "dash.html")),
        ("replay", "--from", str(out), "--device", "cpu"),
        ("diff", str(out), str(out), "-o", str(out.parent / "diff.csv")),
    ]


def test_a_reingest_killed_half_way_leaves_a_folder_every_command_refuses(tmp_path: Path) -> None:
    """The issue's case: re-ingesting an A100 trace into an H100 run's folder dies after the first
    rank file. The old summary must not vouch for the new kernels (the report would cost A100 kernels
    with H100 peaks): the folder is refused until an ingest completes."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    assert cli("report", out).code == 0
    a100 = cli("ingest", trace_path(A100), "-o", tmp_path / "a100.atlas", "-q")
    assert a100.code == 0
    new_rows = outputs.load_kernels(tmp_path / "a100.atlas")
    with pytest.raises(KeyboardInterrupt), outputs.new_run(out) as run_id:  # killed after one rank
        outputs.write_rank(new_rows, out, 0, A100, run_id)
        raise KeyboardInterrupt
    assert not (out / "summary.json").exists()
    for name in DERIVED:  # the H100 report's files went with the H100 kernels
        assert not (out / name).exists(), name
    for command in _readers(out):
        assert_one_line_error(cli(*command), str(out), "unfinished ingest output")
    assert cli("ingest", trace_path(A100), "-o", out, "-q").code == 0
    report = cli("report", out)
    assert report.code == 0, report.output
    assert "A100" in report.stdout and "H100" not in report.stdout
    assert len(outputs.load_kernels(out)) == len(new_rows)


def test_files_of_another_run_are_refused(tmp_path: Path) -> None:
    """A rank file or a summary copied from another run: every reader names the file and refuses."""
    h100 = _ingest(EXAMPLE, tmp_path / "h100.atlas")
    a100 = _ingest(trace_path(A100), tmp_path / "a100.atlas")
    stray = next((a100 / "kernels.parquet").rglob("*.parquet"))
    shutil.copy(stray, h100 / "kernels.parquet" / "rank=0" / "other.parquet")
    for command in _readers(h100):
        assert_one_line_error(cli(*command), "other.parquet", "not from the ingest run")
    (h100 / "kernels.parquet" / "rank=0" / "other.parquet").unlink()
    assert cli("report", h100).code == 0
    shutil.copy(a100 / "summary.json", h100 / "summary.json")  # the A100 summary over the H100 kernels
    assert_one_line_error(cli("report", h100), "h100_bert_small_infer.parquet", "not from the ingest run")
    assert_one_line_error(cli("dashboard", h100, "--html", tmp_path / "d.html"), "not from the ingest run")


def test_a_summary_that_is_a_link_is_read_by_no_one(tmp_path: Path) -> None:
    """summary.json as a symbolic link — to the same run's own summary moved out of the folder,
    or to /proc/self/environ — was read through (`atlas mcp` answered from a file outside its
    root; the environment was opened and read): every reader refuses it as not a regular file."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    outside = tmp_path / "elsewhere.json"
    (out / "summary.json").rename(outside)
    (out / "summary.json").symlink_to(outside)
    for command in _readers(out):
        assert_one_line_error(cli(*command), "summary.json", "not a regular file")
    (out / "summary.json").unlink()
    (out / "summary.json").symlink_to("/proc/self/environ")
    with pytest.raises(AtlasError, match="not a regular file"):
        open_output(out)
    (out / "summary.json").unlink()
    outside.rename(out / "summary.json")
    assert cli("report", out).code == 0


def test_a_deleted_rank_file_is_named(tmp_path: Path) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    next((out / "kernels.parquet").rglob("*.parquet")).unlink()
    assert_one_line_error(
        cli("report", out),
        "h100_bert_small_infer.parquet",
        "listed in summary.json but not among the files of kernels.parquet",
    )


def test_replay_results_of_another_run_are_refused(tmp_path: Path) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    results = pd.DataFrame({"launcher": ["aten::mm"], "input_dims": ["[[1,1],[1,1]]"], "median_us": [1.0]})
    outputs.write_table(results, out / "replay.parquet", "0" * 32)  # made from other kernels
    assert_one_line_error(cli("report", out), "replay.parquet", "another ingest run")
    assert_one_line_error(cli("dashboard", out, "--html", tmp_path / "d.html"), "replay.parquet")
    run_id = open_output(out).run_id
    outputs.write_table(results, out / "replay.parquet", run_id)
    assert cli("report", out).code == 0
    from kernel_atlas.replay.runner import save_replay

    with pytest.raises(Exception, match="ingested again while replaying"):
        save_replay(results, out, "f" * 32)


def test_a_reingest_removes_every_file_made_from_the_previous_kernels(tmp_path: Path) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    report = cli("report", out, "--html", out / "custom.html")
    assert report.code == 0, report.output
    listed = json.loads((out / "report.json").read_text())
    assert listed["run_id"] == open_output(out).run_id and listed["files"]["html"] == "custom.html"
    for name in listed["files"].values():
        assert (out / name).is_file(), name
        if name.endswith(".parquet"):  # tied to the kernels they were made from
            assert pq.read_schema(out / name).metadata[RUN_KEY] == listed["run_id"].encode()
    (out / "replay.parquet").write_bytes(b"stale")
    _ingest(trace_path(A100), out)
    left = sorted(p.name for p in out.iterdir())
    assert left == [".atlas.lock", "catalog.json", "host_events.parquet", "kernels.parquet", "summary.json"], left


def test_a_second_writer_fails_at_once_with_one_line(tmp_path: Path) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    with folder_lock(out):  # another atlas command writing the folder
        line = assert_one_line_error(atlas("ingest", EXAMPLE, "-o", out, "-q"), str(out), "in use by another atlas")
        assert f"pid {os.getpid()}" in line
        assert_one_line_error(atlas("report", out), "in use by another atlas")
        assert_one_line_error(cli("replay", "--from", out, "--device", "cpu"), "being written by another atlas")
    with folder_lock(out, shared=True):  # a reader (dashboard, diff) does not stop another reader
        assert cli("replay", "--from", out, "--device", "cpu", "--json").code == 0
        assert_one_line_error(atlas("ingest", EXAMPLE, "-o", out, "-q"), "in use by another atlas")
    assert cli("report", out).code == 0


def test_two_ingests_at_once_leave_a_readable_dataset(tmp_path: Path) -> None:
    """Two real processes race for one folder: each completes or fails with the one line; what is
    left is one complete run (the issue saw 7 of 12 trials leave an unreadable kernels.parquet)."""
    out = tmp_path / "run.atlas"
    traces = [EXAMPLE, trace_path(A100)]
    for trial in range(3):
        procs = [
            subprocess.Popen([*ATLAS, "ingest", str(t), "-o", str(out), "-q"], stderr=subprocess.PIPE, text=True)
            for t in (traces if trial % 2 else traces[::-1])
        ]
        outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        for code, err in outcomes:
            assert code == 0 or (code == 2 and "in use by another atlas command" in err and err.count("\n") == 1), err
        assert any(code == 0 for code, _ in outcomes)
        report = atlas("report", out)
        assert report.code == 0, report.output
        summary = json.loads((out / "summary.json").read_text())
        stem = summary["traces"][0]["file"].split(".json")[0]
        assert _kernel_rows(out) == _kernels(stem)


def test_an_ingest_refused_the_lock_leaves_the_holders_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race CI met: both ingests see no folder, both make it, the other takes the lock first.
    The one refused must not remove the lock and folder it never held (it had, as "a folder this
    run made holding only its lock", and the holder then failed: "kernels.parquet: cannot create:
    No such file or directory")."""
    out = tmp_path / "run.atlas"
    real_check = outputs.check_output_path
    with contextlib.ExitStack() as other:

        def made_and_taken(path: str | Path) -> None:  # the other ingest wins between mkdir and lock
            real_check(path)
            other.enter_context(folder_lock(path))

        monkeypatch.setattr(outputs, "check_output_path", made_and_taken)
        with pytest.raises(AtlasError, match="in use by another atlas command"), outputs.new_run(out):
            pass
        assert (out / LOCK_NAME).is_file()  # the holder's lock and folder are untouched
    monkeypatch.setattr(outputs, "check_output_path", real_check)
    with pytest.raises(AtlasError), outputs.new_run(tmp_path / "new"):
        raise AtlasError(None, "x")  # every trace failed: the folder this run made and held goes
    assert not (tmp_path / "new").exists()


def test_a_lock_on_a_file_removed_meanwhile_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock file unlinked with its folder between another command's open and its lock holds
    nothing: the command is told in one line, not left writing into a folder that is gone."""
    folder = tmp_path / "run.atlas"
    folder.mkdir()
    real_flock = fcntl.flock

    def removed_first(fd: int, operation: int) -> None:
        (folder / LOCK_NAME).unlink(missing_ok=True)  # the other command's clean-up wins the race
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", removed_first)
    with pytest.raises(AtlasError, match="in use by another atlas command, which removed it"), folder_lock(folder):
        pass


def test_an_ingest_killed_at_any_moment_leaves_a_folder_that_reports_or_refuses(tmp_path: Path) -> None:
    out = tmp_path / "run.atlas"
    trace = trace_path("a100_diff_control")  # 1.4 MB: a few seconds of work to interrupt
    _ingest(EXAMPLE, out)
    for delay in (0.3, 1.5, 4.0):
        proc = subprocess.Popen([*ATLAS, "ingest", str(trace), "-o", str(out), "-q"], stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        report = atlas("report", out)
        if report.code == 0:  # killed before it began, or after it finished: one run, whole
            stem = json.loads((out / "summary.json").read_text())["traces"][0]["file"].split(".json")[0]
            assert stem.split("_")[0].upper() in report.stdout and _kernel_rows(out) == _kernels(stem)
        else:
            assert_one_line_error(report, str(out))
    assert cli("ingest", trace, "-o", out, "-q").code == 0 and atlas("report", out).code == 0


def test_links_planted_in_the_output_folder_are_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    out = tmp_path / "run.atlas"
    out.mkdir()
    planted = ["summary.json", "catalog.json", "report.json", "report.html", "roofline.parquet", "timeshare.csv",
               "idle.parquet", "idle_causes.parquet", "launch_stats.parquet", "graph_candidates.parquet"]  # fmt: skip
    for name in planted:
        (out / name).symlink_to(victim / "precious.txt")
    (out / "kernels.parquet").symlink_to(victim)
    # a folder of links and no run: refused, nothing followed or removed
    assert_one_line_error(cli("ingest", EXAMPLE, "-o", out, "-q"), "which no Kernel Atlas run wrote")
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]
    # links planted among a run's files: the next ingest replaces them, following none
    for name in [*planted, "kernels.parquet"]:
        (out / name).unlink()
    _ingest(EXAMPLE, out)
    for name in planted[1:]:
        outputs.safe_files.remove(out / name)
        (out / name).symlink_to(victim / "precious.txt")
    assert cli("ingest", EXAMPLE, "-o", out, "-q").code == 0
    for name in planted:  # a link where the report writes is planted again after the ingest removed it
        if not (out / name).exists():
            (out / name).symlink_to(victim / "precious.txt")
    assert cli("report", out).code == 0
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]
    assert (victim / "precious.txt").read_text() == "keep me"
    for name in [*planted, "kernels.parquet"]:
        assert not (out / name).is_symlink(), name
    (out / ".atlas.lock").unlink()
    (out / ".atlas.lock").symlink_to(victim / "precious.txt")
    assert_one_line_error(cli("ingest", EXAMPLE, "-o", out, "-q"), ".atlas.lock", "symbolic link")
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.skipif(not Path("/dev/full").exists() or not hasattr(os, "mkfifo"), reason="needs /dev/full and FIFOs")
def test_a_device_or_fifo_named_as_an_output_file_is_written_into_not_replaced(tmp_path: Path) -> None:
    """`atlas dashboard OUT --html /dev/full` renamed its temporary file over the device node
    (as root: /dev/full became a regular file) and said it wrote it. A character device or FIFO
    is written straight into: /dev/null swallows the page, /dev/full fails in one line, a FIFO
    nobody reads fails at once (no wait), one with a reader gets the page."""
    import stat
    import threading

    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    assert cli("report", out, "--html", "/dev/null").code == 0
    assert_one_line_error(cli("report", out, "--html", "/dev/full"), "/dev/full", "no space left on the device")
    for device in ("/dev/null", "/dev/full"):
        assert stat.S_ISCHR(os.stat(device).st_mode), device
    fifo = tmp_path / "page.fifo"
    os.mkfifo(fifo)
    assert_one_line_error(cli("report", out, "--html", fifo), str(fifo), "a FIFO nobody reads")
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    time.sleep(0.2)  # the reader opens the FIFO first
    assert cli("report", out, "--html", fifo).code == 0
    reader.join(timeout=30)
    assert received and b"</html>" in received[0]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: d / "a-file", "output exists and is not a folder"),
        (lambda d: "", "empty path"),
        (lambda d: d / ("x" * 300), "path too long"),
        (lambda d: d / "a-file" / "sub", "cannot create the output folder"),
        (lambda d: Path("/proc/atlas-out"), "cannot create the output folder"),
    ],
    ids=["a-file", "empty", "too-long", "under-a-file", "unwritable"],
)
def test_bad_output_folders_are_one_line(tmp_path: Path, make, needle: str) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    out = make(tmp_path)
    assert_one_line_error(cli("ingest", EXAMPLE, "-o", out), needle)
    assert (tmp_path / "a-file").read_text() == "not a folder"


def test_a_trace_in_a_read_only_folder_is_ingested_into_the_current_one(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    trace = shared / "bert.json.gz"
    shutil.copy(EXAMPLE, trace)
    work = tmp_path / "work"
    work.mkdir()
    shared.chmod(0o555)  # read-only, also for root (the mode says: not here)
    try:
        result = atlas("ingest", trace, "-q", cwd=work)
        assert result.code == 0, result.output
        assert result.lines() == [
            f"note: {shared} is read-only: writing to ./bert.atlas instead (-o sets the output folder)"
        ]
        assert (work / "bert.atlas" / "summary.json").is_file()
        assert sorted(p.name for p in shared.iterdir()) == ["bert.json.gz"]
        report = atlas("report", trace, cwd=work)  # a trace given to report: the same folder
        assert report.code == 0 and "read-only" in report.stderr
        # report has no -o: its note says how to choose the folder instead
        assert "(`atlas ingest TRACE -o OUT` chooses the output folder)" in report.stderr
        work.chmod(0o555)
        assert_one_line_error(atlas("ingest", trace, cwd=work), "read-only", "-o")
        assert_one_line_error(atlas("report", trace, cwd=work), "read-only", "atlas ingest TRACE -o OUT")
    finally:
        shared.chmod(0o755)
        work.chmod(0o755)
    assert output_for(str(EXAMPLE))[1] is None  # a writable folder: next to the trace, no note


def _damage(out: Path, how: str) -> Path:
    """Damage an ingest output one way; returns the file the error must name."""
    rank_file = next((out / "kernels.parquet").rglob("*.parquet"))
    table = pq.read_table(rank_file)
    if how == "corrupt":
        rank_file.write_bytes(b"PAR1" + os.urandom(500) + b"PAR1")
    elif how == "empty":
        rank_file.write_bytes(b"")
    elif how == "foreign":
        pq.write_table(
            pa.table({"x": [1, 2], "y": ["a", "b"]}).replace_schema_metadata(table.schema.metadata), rank_file
        )
    elif how == "missing-column":
        pq.write_table(table.drop_columns(["ts_us"]), rank_file)
    elif how == "device-beyond-int32":  # int64 where the column is int32: numpy's cast raised
        column = pa.array([2**62] * table.num_rows, pa.int64())
        pq.write_table(table.set_column(table.schema.get_field_index("device"), "device", column), rank_file)
    elif how == "stream-beyond-2^53":  # a stream id through a float column overflowed on its way back
        column = pa.array([2**63 - 1] * table.num_rows, pa.int64())
        pq.write_table(table.set_column(table.schema.get_field_index("stream"), "stream", column), rank_file)
    elif how in ("occupancy-beyond-100", "waves-infinite"):  # the report copied them into roofline.parquet
        name, value = ("est_occupancy_pct", 1e6) if how == "occupancy-beyond-100" else ("waves", float("inf"))
        column = pa.array([value] * table.num_rows, pa.float64())
        pq.write_table(table.set_column(table.schema.get_field_index(name), name, column), rank_file)
    elif how == "wrong-type":
        column = table.column("dur_us").cast(pa.string())
        pq.write_table(table.set_column(table.schema.get_field_index("dur_us"), "dur_us", column), rank_file)
    elif how == "single-file-corrupt":
        shutil.rmtree(out / "kernels.parquet")
        (out / "kernels.parquet").write_bytes(b"garbage")
        return out / "kernels.parquet"
    elif how == "junk-in-dataset":
        (out / "kernels.parquet" / "notes.txt").write_text("hello")
        return out / "kernels.parquet" / "notes.txt"
    elif how == "fifo-in-dataset":
        os.mkfifo(rank_file.parent / "pipe.parquet")
        return rank_file.parent / "pipe.parquet"
    else:
        summary = out / "summary.json"
        if how == "summary-not-json":
            summary.write_text('{"traces": [')
        elif how == "summary-empty":
            summary.write_text("")
        elif how == "summary-a-list":
            summary.write_text("[1, 2]")
        elif how == "summary-deep":
            summary.write_text("[" * 100_000 + "]" * 100_000)
        elif how == "summary-rank-beyond-int64":  # an OverflowError in numpy before
            doc = json.loads(summary.read_text())
            doc["traces"][0]["rank"] = 10**30
            summary.write_text(json.dumps(doc))
        elif how == "summary-gpu-name-not-a-string":
            doc = json.loads(summary.read_text())
            doc["traces"][0]["gpus"][0]["name"] = 12345
            summary.write_text(json.dumps(doc))
        elif how == "summary-fifo":
            summary.unlink()
            os.mkfifo(summary)
        return summary
    return rank_file


DAMAGE = ["corrupt", "empty", "foreign", "missing-column", "wrong-type", "single-file-corrupt", "junk-in-dataset",
          "fifo-in-dataset", "summary-not-json", "summary-empty", "summary-a-list", "summary-deep",
          "summary-gpu-name-not-a-string", "summary-fifo", "device-beyond-int32", "summary-rank-beyond-int64",
          "stream-beyond-2^53", "occupancy-beyond-100", "waves-infinite"]  # fmt: skip


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_output_is_one_line_for_every_reader(tmp_path: Path, how: str) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    named = _damage(out, how)
    for command in _readers(out):
        assert_one_line_error(cli(*command), str(named))


def test_a_rank_damaged_past_its_footer_fails_in_a_worker_with_one_line(tmp_path: Path) -> None:
    """`report -j 2`: the rank's schema is fine, its data is not; the error comes back from the
    worker process (it must pickle) as the one line naming the file."""
    from tests.support.traces import TRACES

    traces = [TRACES / f"{stem}.json.gz" for stem in ("a100_nccl_8rank_rank0", "mi250_minitoy_train")]
    for t in traces:
        if not t.exists():
            pytest.skip(f"{t} not available")
    out = tmp_path / "run.atlas"
    assert cli("ingest", *traces, "-o", out, "-q").code == 0
    assert len(outputs.output_ranks(out)) == 2
    victim = sorted((out / "kernels.parquet").rglob("*.parquet"))[-1]
    metadata = pq.ParquetFile(victim).metadata
    column = metadata.row_group(0).column(metadata.schema.names.index("launcher"))  # not read by DuckDB
    start = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(victim.read_bytes())
    data[start : start + column.total_compressed_size] = bytes(column.total_compressed_size)
    victim.write_bytes(bytes(data))
    assert_one_line_error(cli("report", out, "-j", "2"), str(victim), "cannot read")
    assert_one_line_error(cli("report", out, "-j", "1"), str(victim), "cannot read")


def _raise_atlas_error(path: str) -> None:
    raise AtlasError(path, "a problem")


def test_errors_cross_process_boundaries_intact() -> None:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1) as pool, pytest.raises(AtlasError) as caught:
        pool.submit(_raise_atlas_error, "x.json").result()
    assert (caught.value.source, caught.value.problem, str(caught.value)) == (
        "x.json",
        "a problem",
        "x.json: a problem",
    )


def test_outputs_written_before_run_ids_still_report(tmp_path: Path) -> None:
    """An output of an earlier version (no run id anywhere) is read as it is."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    for file in (out / "kernels.parquet").rglob("*.parquet"):
        table = pq.read_table(file)
        pq.write_table(
            table.replace_schema_metadata({k: v for k, v in table.schema.metadata.items() if k != RUN_KEY}), file
        )
    summary = json.loads((out / "summary.json").read_text())
    del summary["run_id"]
    (out / "summary.json").write_text(json.dumps(summary))
    assert cli("report", out).code == 0


def _doctored(out: Path, table: str, column: str, values: list | None, kind: pa.DataType | None = None) -> Path:
    """`column` of the first file of `table` (a folder beside the kernels) replaced, or dropped."""
    path = next((out / table).rglob("*.parquet"))
    data = pq.read_table(path)
    if values is None:
        data = data.drop_columns([column])
    else:
        data = data.set_column(data.schema.get_field_index(column), column, pa.array(values, kind))
    _rewrite(path, data)
    return path


def _ends_first(out: Path) -> list[float]:
    """The host events' ends, the first row's 1 s before its start."""
    events = pq.read_table(next((out / "host_events.parquet").rglob("*.parquet"))).to_pandas()
    ends = events["end_us"].tolist()
    ends[0] = float(events["ts_us"].iloc[0]) - 1e6
    return ends


def _rewrite(path: Path, table: pa.Table) -> None:
    """`table` written over the Parquet file at `path`, keeping that file's metadata (its run id)."""
    pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)


@pytest.mark.parametrize(
    ("how", "needle"),
    [
        ("self-parent", "their own ancestor"),
        ("ring", "their own ancestor"),
        ("parent-outside", "whose parent is no row of the table"),
        ("ts-text", "column ts_us holds string values where float ones belong"),
        ("thread-text", "column thread holds string values where integer ones belong"),
        ("ts-infinite", "with a ts_us that is NaN or beyond 2^53 µs"),
        ("no-kind", "no column kind"),
        ("ends-first", "1 rows that end before they start"),
    ],
)
def test_doctored_host_events_are_one_line(tmp_path: Path, how: str, needle: str) -> None:
    """The critical path's host side was read unchecked: parents forming a cycle kept report and
    whatif walking up the call stack until killed; a text column or an infinite time was an
    internal error or a numpy warning."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    n = pq.read_metadata(next((out / "host_events.parquet").rglob("*.parquet"))).num_rows
    table = "host_events.parquet"
    named = {
        "self-parent": lambda: _doctored(out, table, "parent", list(range(n)), pa.int64()),
        "ring": lambda: _doctored(out, table, "parent", [(i + 1) % n for i in range(n)], pa.int64()),
        "parent-outside": lambda: _doctored(out, table, "parent", [2**62] * n, pa.int64()),
        "ts-text": lambda: _doctored(out, table, "ts_us", ["1.0"] * n),
        "thread-text": lambda: _doctored(out, table, "thread", ["t"] * n),
        "ts-infinite": lambda: _doctored(out, table, "ts_us", [float("inf")] * n),
        "no-kind": lambda: _doctored(out, table, "kind", None),
        # one range ending 1 s before it starts: the critical path of a 3.9 ms trace was 272 s
        "ends-first": lambda: _doctored(out, table, "end_us", _ends_first(out), pa.float64()),
    }[how]()
    run = (lambda *a: atlas(*a, timeout=60)) if "ancestor" in needle else cli  # a cycle hung: killed, not waited on
    for command in (("report", str(out)), ("whatif", str(out), "--speedup", "kernel=.*:2x")):
        result = run(*command)
        assert_one_line_error(result, needle)
        assert str(named) in result.stderr


@pytest.mark.parametrize(
    ("column", "values", "needle"),
    [
        ("ts_us", "x", "column ts_us holds string values where float ones belong"),
        ("bytes", float("nan"), "column bytes holds float values where integer ones belong"),
    ],
)
def test_doctored_memory_events_are_one_line(tmp_path: Path, column: str, values: object, needle: str) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    n = pq.read_metadata(next((out / "memory_events.parquet").rglob("*.parquet"))).num_rows
    named = _doctored(out, "memory_events.parquet", column, [values] * n)
    for command in (("report", str(out)), ("diff", str(out), str(out), "-o", str(tmp_path / "d.csv"))):
        result = cli(*command)
        assert_one_line_error(result, needle)
        assert str(named) in result.stderr


def test_a_doctored_report_json_is_one_line_for_the_dashboard(tmp_path: Path) -> None:
    """The dashboard reads report.json's findings inside its notebook: a doctored one printed the
    notebook's coloured traceback (exit 1)."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    assert cli("report", out).code == 0
    report = json.loads((out / "report.json").read_text())
    report["findings"] = {"a": 1}
    (out / "report.json").write_text(json.dumps(report))
    assert_one_line_error(cli("dashboard", out, "--html", tmp_path / "d.html"), "findings is not a list")


@pytest.mark.parametrize(
    ("how", "needle"),
    [
        ("negative", "rows with a negative attainable_us"),
        ("no-role", "no column role): run `atlas report` again"),
        ("role-numbers", "column role holds integer values where string ones belong"),
    ],
)
def test_a_doctored_roofline_is_one_line_for_whatif(tmp_path: Path, how: str, needle: str) -> None:
    """whatif read roofline.parquet unchecked: a negative attainable time saved 26,000 s of
    197 µs of GPU time, a missing column was a KeyError."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    assert cli("report", out).code == 0
    path = out / "roofline.parquet"
    table = pq.read_table(path)
    if how == "negative":
        column = pa.array([-1e9] * table.num_rows)
        table = table.set_column(table.schema.get_field_index("attainable_us"), "attainable_us", column)
    elif how == "no-role":
        table = table.drop_columns(["role"])
    else:
        table = table.set_column(table.schema.get_field_index("role"), "role", pa.array([1] * table.num_rows))
    pq.write_table(table, path)
    assert_one_line_error(cli("whatif", out, "--speedup", "category=gemm:roofline"), needle, str(path))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("rank", "0", "traces[0].rank is not an integer"), ("kernels_file", 5, "traces[0].kernels_file is not a text")],
)
def test_a_summary_field_of_another_type_is_named_in_words(tmp_path: Path, key: str, value: object, words: str) -> None:
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    summary = json.loads((out / "summary.json").read_text())
    summary["traces"][0][key] = value
    (out / "summary.json").write_text(json.dumps(summary))
    assert_one_line_error(cli("report", out), f"not a summary of `atlas ingest`: {words} (re-run")


# doctored summaries that each reached the report as an internal error (TypeError, KeyError,
# OverflowError): the field, by its path, and what it should be
_DOCTORED_SUMMARIES = [
    (("efficiency",), {}, "traces[0].efficiency has no steps"),
    (("efficiency",), {"steps": 5, "devices": []}, "traces[0].efficiency.steps is not a list"),
    (("efficiency",), {"steps": [], "devices": [5]}, "traces[0].efficiency.devices[0] is not an object"),
    (("efficiency",), {"steps": [{}], "devices": []}, "traces[0].efficiency.steps[0] has no devices"),
    (("efficiency",), {"steps": [{"step": "x", "devices": []}], "devices": []}, "steps[0].step is not an integer"),
    (("efficiency",), {"steps": [], "devices": [{"device": 0, "sm_efficiency_pct": "high"}]}, "is not a number"),
    (("last_step_start_us",), 10**400, "traces[0].last_step_start_us is out of range"),
    (("last_step_start_us",), 2.0**60, "traces[0].last_step_start_us is out of range"),
    (("rank",), 2**31, "traces[0].rank is out of range"),
    (("gpus",), [{"name": "H100", "numSms": 1.5}], "traces[0].gpus[0].numSms is not an integer"),
    (("distributed",), {"world_size": "8"}, "traces[0].distributed.world_size is not an integer"),
    ((), "no file", "traces[0] has no file"),
]


@pytest.mark.parametrize(("key", "value", "words"), _DOCTORED_SUMMARIES)
def test_a_doctored_summary_is_refused_in_one_line_where_the_run_is_opened(
    tmp_path: Path, key: tuple[str, ...], value: object, words: str
) -> None:
    """summary.json is held against the types its readers rely on (`store/summary_schema.py`)
    once, when the run is opened: every reader refuses it in one line naming the field."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    summary = json.loads((out / "summary.json").read_text())
    if key:
        summary["traces"][0][key[0]] = value
    else:
        del summary["traces"][0]["file"]
    (out / "summary.json").write_text(json.dumps(summary))
    for command in _readers(out):
        assert_one_line_error(cli(*command), words)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_that_are_not_json_are_refused(tmp_path: Path, constant: str) -> None:
    """Python's json reads NaN and Infinity; ingest never writes them (nor does JSON have them): a
    summary holding one is not read (it reached report.json's steps as NaN)."""
    out = _ingest(EXAMPLE, tmp_path / "run.atlas")
    text = (out / "summary.json").read_text()
    (out / "summary.json").write_text(text.replace('"last_step_start_us": null', f'"last_step_start_us": {constant}'))
    assert constant in (out / "summary.json").read_text()
    assert_one_line_error(cli("report", out), f"not valid JSON ({constant} is not a JSON value)")


def test_a_rank_file_replaced_after_it_was_read_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank file's schema is read once per process (`outputs._schema`: a report asked for it
    four times); a file doctored at the same path after that — a column dropped — is read again
    and refused, in the same process."""
    out = _ingest(trace_path(A100), tmp_path / "out")
    reads: list[str] = []
    read_schema = pq.read_schema
    monkeypatch.setattr(outputs.pq, "read_schema", lambda path, *a, **k: reads.append(str(path)) or read_schema(path))
    opened = open_output(out)
    outputs.load_kernels(out)
    (rank_file,) = [file for files in opened.files.values() for file in files]
    assert reads == [str(rank_file)]  # checked, values checked, kernels read: one footer read
    table = pq.read_table(rank_file)
    doctored = table.drop_columns(["launcher"]).replace_schema_metadata(table.schema.metadata)
    pq.write_table(doctored, tmp_path / "doctored.parquet")
    os.replace(tmp_path / "doctored.parquet", rank_file)
    with pytest.raises(AtlasError, match="launcher"):
        open_output(out)
    assert reads == [str(rank_file)] * 2


def _fleet(tmp_path: Path, ranks: int) -> tuple[Path, list[Path]]:
    """`ranks` one-rank copies of the A100 trace ingested into one run; its rank files in order."""
    events = raw_events(A100)
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in range(ranks):
        doc = {"distributedInfo": {"rank": rank, "world_size": ranks}, "traceEvents": events}
        (traces / f"t{rank}.json").write_text(json.dumps(doc))
    out = _ingest(traces, tmp_path / "out")
    files = [file for _, files in sorted(open_output(out).files.items()) for file in files]
    assert len(files) == ranks
    return out, files


@pytest.mark.parametrize("first", ["values", "schema"])
def test_rank_files_checked_side_by_side_refuse_the_first_bad_one_in_order(tmp_path: Path, first: str) -> None:
    """A run's rank files are checked on every CPU; of two doctored files (a negative duration,
    a column dropped) the one of the lower rank is named, whichever check it fails."""
    out, files = _fleet(tmp_path, 4)
    bad_values, bad_schema = (files[1], files[2]) if first == "values" else (files[2], files[1])
    negative = pq.read_table(bad_values)
    durations = negative.column("dur_us").to_numpy().copy()
    durations[0] = -5.0
    _rewrite(bad_values, negative.set_column(negative.schema.get_field_index("dur_us"), "dur_us", pa.array(durations)))
    _rewrite(bad_schema, pq.read_table(bad_schema).drop_columns(["launcher"]))
    with pytest.raises(AtlasError) as refused:
        open_output(out)
    assert refused.value.source == str(files[1])
    assert ("negative, NaN or huge duration" if first == "values" else "no column launcher") in refused.value.problem


def test_rank_files_are_checked_at_the_same_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rank files' value checks run at once where two CPUs may be used (each waits for the
    other at a barrier: one at a time, the first would wait in vain)."""
    out, _ = _fleet(tmp_path, 2)
    monkeypatch.setattr(outputs, "usable_cpus", lambda: 2)
    meet = threading.Barrier(2, timeout=20)
    check_values = outputs._check_values

    def together(path: Path) -> None:
        meet.wait()  # BrokenBarrierError after 20 s alone
        check_values(path)

    monkeypatch.setattr(outputs, "_check_values", together)
    open_output(out)


def test_ingest_never_removes_what_no_run_wrote(tmp_path: Path) -> None:
    """`-o` naming a folder of the user's own: ingest cleared it as if it held an earlier run —
    files named like outputs, a whole `kernels.parquet/` folder, and every name another tool's
    report.json listed, the trace being ingested among them. Now it refuses, in one line, and
    removes nothing; a folder whose files clash with none of the outputs is written into."""
    folder = tmp_path / "results"
    (folder / "kernels.parquet").mkdir(parents=True)
    mine = {
        "report.html": "my notes",
        "kernels.parquet/thesis.tex": "precious",
        "report.json": json.dumps({"files": {"a": "trace.json.gz"}}),
    }
    for name, text in mine.items():
        (folder / name).write_text(text)
    shutil.copy(EXAMPLE, folder / "trace.json.gz")
    assert_one_line_error(
        cli("ingest", folder / "trace.json.gz", "-o", folder, "-q"),
        "results: holds kernels.parquet, report.json, report.html, which no Kernel Atlas run wrote",
    )
    assert {name: (folder / name).read_text() for name in mine} == mine
    assert (folder / "trace.json.gz").read_bytes() == EXAMPLE.read_bytes()
    # only the trace and files of other names: written into, nothing removed
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(EXAMPLE, plain / "trace.json.gz")
    (plain / "notes.txt").write_text("kept")
    _ingest(plain / "trace.json.gz", plain)
    assert (plain / "notes.txt").read_text() == "kept" and (plain / "summary.json").is_file()
    # and the run it wrote is cleared as a run by the next ingest, its report's files too
    assert cli("report", plain).code == 0 and (plain / "report.html").is_file()
    _ingest(plain / "trace.json.gz", plain)
    assert not (plain / "report.html").exists() and (plain / "notes.txt").read_text() == "kept"


def test_an_ingest_killed_before_its_summary_is_cleared_by_the_next(tmp_path: Path) -> None:
    """No summary.json, but the dataset files carry the run's id: the folder is an unfinished
    run, cleared by the next ingest (not refused as another tool's)."""
    out = _ingest(EXAMPLE, tmp_path / "out")
    (out / "summary.json").unlink()
    (out / "report.html").write_text("stale")
    _ingest(EXAMPLE, out)
    assert (out / "summary.json").is_file() and not (out / "report.html").exists()


def test_host_events_of_another_run_are_refused(tmp_path: Path) -> None:
    """Every file in a rank's host_events folder was read, of whatever run: one of another
    trace put beside the run's own gave a critical path 93 times the trace, exit 0. Host events
    are now held to the run of the rank's kernels, as kernel files are to summary.json's."""
    run, other = _ingest(EXAMPLE, tmp_path / "run"), _ingest(trace_path(A100), tmp_path / "other")
    (stray,) = (other / "host_events.parquet").glob("rank=*/*.parquet")
    shutil.copy(stray, run / "host_events.parquet" / "rank=0" / stray.name)
    for command in (("report", run), ("whatif", run, "--no-launch-gaps")):  # summary.json lists the run's own
        assert_one_line_error(cli(*command), f"{stray.name}: not listed in summary.json (not written by this ingest")
    # a run whose summary.json lists no host events files (written before it did): held by their run id
    summary = json.loads((run / "summary.json").read_text())
    for trace in summary["traces"]:
        trace.pop("host_events_file")
    (run / "summary.json").write_text(json.dumps(summary))
    for command in (("report", run), ("whatif", run, "--no-launch-gaps")):
        assert_one_line_error(cli(*command), f"{stray.name}: not from the ingest run that wrote summary.json")


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_a_killed_ingest_of_several_traces_leaves_no_worker_holding_the_folder(tmp_path: Path) -> None:
    """SIGKILL (the out-of-memory killer, a CI timeout) of an ingest of several traces: its
    per-trace workers lived on, holding the folder's lock, and every later command was refused
    (`in use by another atlas command (pid N)`, a pid long gone). They now end with it."""
    if not has_trace("a100_diff_control"):
        pytest.skip("needs the shared a100_diff_control trace")
    doc = json.loads(gzip.decompress(trace_path("a100_diff_control").read_bytes()))
    traces = tmp_path / "ranks"
    traces.mkdir()
    for rank in range(4):
        doc["distributedInfo"]["rank"] = rank
        (traces / f"rank{rank}.json").write_text(json.dumps(doc))
    out = tmp_path / "out-of-the-killed-ingest"
    proc = subprocess.Popen([*ATLAS, "ingest", str(traces), "-o", str(out), "-q"], stderr=subprocess.DEVNULL)
    time.sleep(2.0)  # the workers are decoding
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _processes_naming(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_naming(str(out))
    assert cli("ingest", traces, "-o", out, "-q").code == 0


@pytest.mark.parametrize("name", ["_run.json.gz", ".run.json.gz"])
def test_a_trace_named_like_a_hidden_file_is_read_back(tmp_path: Path, name: str) -> None:
    """Its rows went to `_run.parquet`, a name every reader passes over (ours, Arrow's, DuckDB's):
    ingest said 61 activities, report "no GPU activities to report on". The file is named
    `trace-_run.parquet`; the rows keep the trace's name."""
    trace = tmp_path / name
    shutil.copy(EXAMPLE, trace)
    out = _ingest(trace, tmp_path / "out")
    frame = pd.read_parquet(out / "kernels.parquet")  # as pandas and Arrow read the dataset
    assert len(frame) == 61 and set(frame["trace"]) == {name.removesuffix(".json.gz")}
    assert cli("report", out).code == 0
    assert json.loads((out / "report.json").read_text())["trust"]["gpu_time_us"] == pytest.approx(309.437)
