"""The critical path solved in a process beside the report (`CriticalPathJob`): the same files
to the byte as solved in the report's own process, errors handed back as one line, and a lost
process made up for."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import kernel_atlas.analysis.critical_report as critical_report
from kernel_atlas.core.beside import Beside, ChildLost, can_fork
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from kernel_atlas.report.build import build_report
from tests.support.hostile import assert_one_line_error, cli
from tests.support.traces import trace_path

needs_fork = pytest.mark.skipif(not can_fork(), reason="needs fork and a second CPU")


def test_beside_hands_values_both_ways() -> None:
    job = Beside(lambda receive: receive() * 2)
    job.send(21)
    assert job.result() == 42
    assert Beside(lambda receive: 5).result() == 5  # receives nothing


def test_beside_raises_what_the_child_raised() -> None:
    def bad_window(receive: Callable[[], object]) -> None:
        raise AtlasError("trace.json", "--window ProfilerStep#9: the trace has 2 ranges")

    with pytest.raises(AtlasError, match="the trace has 2 ranges") as error:
        Beside(bad_window).result()
    assert error.value.source == "trace.json"
    with pytest.raises(ZeroDivisionError) as error:
        Beside(lambda receive: 1 / 0).result()
    assert any("in the process beside" in note for note in error.value.__notes__)
    with pytest.raises(RuntimeError, match="could not hand back"):
        Beside(lambda receive: lambda: None).result()  # a result that does not pickle
    # waiting for a value never sent: it ends (EOFError) rather than hang
    with pytest.raises(EOFError):
        Beside(lambda receive: receive()).result()


def test_a_lost_child_is_said_and_a_waiting_one_stopped() -> None:
    with pytest.raises(ChildLost, match="exit code 3"):
        Beside(lambda receive: os._exit(3)).result()
    start = time.monotonic()
    with Beside(lambda receive: time.sleep(60)):
        pass  # leaving without the result stops it
    assert time.monotonic() - start < 10


def _report_files(folder: Path, monkeypatch: pytest.MonkeyPatch, min_events: int) -> dict[str, bytes]:
    monkeypatch.setattr(critical_report, "BESIDE_MIN_EVENTS", min_events)
    build_report(folder)
    return {name: (folder / name).read_bytes() for name in ("report.json", "report.html")}


@needs_fork
def test_two_streams_beside_and_here_write_the_same_report(two_streams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = two_streams
    here = _report_files(folder, monkeypatch, 10**12)
    here_path = pd.read_parquet(folder / "critical_path.parquet")
    beside = _report_files(folder, monkeypatch, 0)
    assert beside == here
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "critical_path.parquet"), here_path)
    facts = json.loads(beside["report.json"])["critical_path"]
    assert facts["total_us"] == 125.0  # the path of tests/analysis/test_critical_path.py's TWO_STREAMS


@needs_fork
def test_the_path_is_written_where_it_is_solved(two_streams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside, critical_path.parquet is written by the process that solved the path: its segments
    never cross to the report, which gets the page section and the facts alone."""
    import kernel_atlas.report.build as build

    writers = two_streams / "writers.txt"
    write_table = build.write_table

    def recording(frame: pd.DataFrame, path: Path, run_id: str | None) -> Path:
        if Path(path).name == "critical_path.parquet":
            with writers.open("a") as handle:
                handle.write(f"{os.getpid()}\n")
        return write_table(frame, path, run_id)

    monkeypatch.setattr(build, "write_table", recording)
    _report_files(two_streams, monkeypatch, 0)
    beside = writers.read_text().split()
    _report_files(two_streams, monkeypatch, 10**12)
    here = writers.read_text().split()[len(beside) :]
    assert len(beside) == 1 and beside != [str(os.getpid())]
    assert here == [str(os.getpid())]


@needs_fork
def test_a_bad_window_found_beside_is_one_line(two_streams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = two_streams
    monkeypatch.setattr(critical_report, "BESIDE_MIN_EVENTS", 0)
    assert_one_line_error(cli("report", folder, "--window", "ProfilerStep#0"), "0 ranges")


@needs_fork
def test_a_lost_solve_beside_is_made_up_for_here(two_streams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = two_streams
    here = _report_files(folder, monkeypatch, 10**12)
    # the process beside dies (as if killed for memory): the report solves the path itself
    monkeypatch.setattr(critical_report.CriticalPathJob, "_solve_beside", lambda self, receive: os._exit(9))
    assert _report_files(folder, monkeypatch, 0) == here


@needs_fork
@pytest.mark.parametrize("name", ["a100_diff_control", "mi300x_sglang_qwen3_8b_decode_graph"])
def test_shared_traces_beside_and_here_write_the_same_report(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = trace_path(name)
    folder = tmp_path / f"{name}.atlas"
    write_outputs(ingest_paths([trace]), folder)
    here = _report_files(folder, monkeypatch, 10**12)
    beside = _report_files(folder, monkeypatch, 0)
    assert beside == here
    assert json.loads(beside["report.json"])["critical_path"]["where_optimisation_pays"]


@pytest.mark.parametrize("events", ["lots", [1], None, True, -5, 10**30])
def test_a_doctored_event_count_changes_nothing(two_streams: Path, events: object) -> None:
    """summary.json's `events` only chooses where the path is solved: any value gives the report."""
    summary = json.loads((two_streams / "summary.json").read_text())
    summary["traces"][0]["events"] = events
    (two_streams / "summary.json").write_text(json.dumps(summary))
    done = cli("report", two_streams)
    assert done.code == 0, done.output
    assert json.loads((two_streams / "report.json").read_text())["critical_path"]["total_us"] == 125.0


@needs_fork
def test_a_failing_finish_stops_the_process_beside(two_streams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(critical_report, "BESIDE_MIN_EVENTS", 0)

    def finish(result: critical_report.CriticalPathResult) -> None:
        raise OSError(28, "No space left on device")

    job = critical_report.CriticalPathJob(two_streams, [0], None, None, "exact", None, 1, finish)
    process = job._beside._process  # type: ignore[union-attr]
    with pytest.raises(OSError, match="No space left"):
        job.result()  # the roofline never sent: the process beside still waits for it
    process.join(timeout=10)
    assert not process.is_alive()


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_GETPIPE_SZ"), reason="pipe sizes are Linux's")
def test_beside_widens_its_pipes_and_a_large_value_crosses_whole() -> None:
    """Both pipes hold PIPE_BYTES (where the system allows it: its limit for an unprivileged
    process is read from /proc), and a value of many pipefuls crosses intact."""
    import fcntl

    from kernel_atlas.core.beside import PIPE_BYTES

    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    job = Beside(lambda receive: bytes(range(256)) * (3 * PIPE_BYTES // 256) + receive())
    sizes = [fcntl.fcntl(end.fileno(), fcntl.F_GETPIPE_SZ) for end in (job._values, job._results)]
    if limit >= PIPE_BYTES or os.geteuid() == 0:  # else refused: the pipes keep the system's size
        assert sizes == [PIPE_BYTES, PIPE_BYTES]
    job.send(b"end")
    value = job.result()
    assert len(value) == 3 * PIPE_BYTES + 3 and value[-3:] == b"end" and value[255] == 255


@needs_fork
def test_one_ranks_kernels_are_read_once_for_the_report_and_the_path_beside(
    two_streams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single rank's kernel rows are read by the report before the process beside is forked,
    which solves the path from them: that process never reads the kernels table (a read there
    fails the test), and the report's files are those of a solve in the report's own process."""
    folder = two_streams
    here = _report_files(folder, monkeypatch, 10**12)

    def no_second_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the kernels table was read again")

    monkeypatch.setattr(critical_report, "load_kernels", no_second_read)
    assert _report_files(folder, monkeypatch, 0) == here


@needs_fork
@pytest.mark.parametrize("case", ["forked", "roofline late", "no process"])
def test_the_whatif_of_one_rank_is_solved_in_a_process_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Beside the report, the what-if is forked once its graph is ready if the roofline has come
    by then (the process beside walks the path meanwhile), else — or where no process can be
    started — solved by the process beside after the path: the same report.json as solved in
    the report's own process in every case, where optimisation pays included."""
    from kernel_atlas.core.beside import Receiver
    from tests.support.traces import EXAMPLE

    # the roofline has come when the graph is ready (waited for), or not yet (never ready)
    ready = (lambda self: False) if case == "roofline late" else (lambda self: self._connection.poll(None) or True)
    monkeypatch.setattr(Receiver, "ready", ready)
    if case == "no process":  # the report's own process starts the one beside; that one can start none
        report_pid, real_beside = os.getpid(), critical_report.Beside

        def beside(*args: object, **kwargs: object) -> object:
            if os.getpid() != report_pid:
                raise OSError(11, "Resource temporarily unavailable")
            return real_beside(*args, **kwargs)

        monkeypatch.setattr(critical_report, "Beside", beside)
    folder = tmp_path / "bert.atlas"
    assert cli("ingest", EXAMPLE, "-o", folder).code == 0
    solved_in = tmp_path / "solved_in"
    whatif = critical_report.where_optimisation_pays

    def recorded(*args: object) -> object:
        with solved_in.open("a") as handle:
            handle.write(f"{os.getpid()}\n")
        return whatif(*args)

    monkeypatch.setattr(critical_report, "where_optimisation_pays", recorded)
    beside_pid = tmp_path / "beside_pid"
    solve_beside = critical_report.CriticalPathJob._solve_beside

    def beside_recorded(self: critical_report.CriticalPathJob, receive: Callable[[], object]) -> object:
        beside_pid.write_text(str(os.getpid()))
        return solve_beside(self, receive)

    monkeypatch.setattr(critical_report.CriticalPathJob, "_solve_beside", beside_recorded)
    here = _report_files(folder, monkeypatch, 10**12)
    assert solved_in.read_text().split() == [str(os.getpid())]
    solved_in.unlink()
    beside = _report_files(folder, monkeypatch, 0)
    assert beside == here
    assert json.loads(beside["report.json"])["critical_path"]["where_optimisation_pays"]  # something to compare
    (pid,) = solved_in.read_text().split()
    if case == "forked":
        assert int(pid) not in (os.getpid(), int(beside_pid.read_text()))
    else:
        assert int(pid) == int(beside_pid.read_text())


def test_without_a_thread_the_paths_file_is_written_first(two_streams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no thread can be started (a limit on processes counts threads), the path's file and
    picture are made before the what-if, in the same thread: the same report."""
    import kernel_atlas.core.beside as beside

    here = _report_files(two_streams, monkeypatch, 10**12)
    refused: list[str] = []

    def no_thread(thread: object) -> bool:
        refused.append(getattr(thread, "name", ""))
        return False

    monkeypatch.setattr(beside, "start_thread", no_thread)
    assert _report_files(two_streams, monkeypatch, 10**12) == here
    assert "atlas-beside" in refused
