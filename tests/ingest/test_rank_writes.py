"""A rank's tables written at once: its host (and memory) events on a thread while its kernels'
file is written (`fleet.ingest_task`), and what is left when either write fails; a small rank's
written in turn. The example's 848 host and memory events are written on a thread here by
lowering the threshold (`WRITE_BESIDE_MIN_ROWS`) below them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import kernel_atlas.core.beside as beside
import kernel_atlas.ingest.fleet as fleet
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import ingest_fleet
from tests.support.traces import EXAMPLE

KERNELS_FILE = "kernels.parquet/rank=0/h100_bert_small_infer.parquet"
HOST_FILE = "host_events.parquet/rank=0/h100_bert_small_infer.parquet"
MEMORY_FILE = "memory_events.parquet/rank=0/h100_bert_small_infer.parquet"


@pytest.fixture
def on_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "WRITE_BESIDE_MIN_ROWS", 848)


def _files(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet") if p.is_file())


@pytest.mark.usefixtures("on_a_thread")
def test_the_host_events_and_the_kernels_are_written_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each write waits at a barrier for the other to have begun: written one after the other (as
    before), the first waits alone and the barrier breaks after its timeout."""
    meet = threading.Barrier(2, timeout=20)
    host_write, kernels_write = fleet.write_host_events, fleet.write_rank

    def host(*args: Any, **kwargs: Any) -> str | None:
        meet.wait()
        return host_write(*args, **kwargs)

    def kernels(*args: Any, **kwargs: Any) -> str:
        meet.wait()
        return kernels_write(*args, **kwargs)

    monkeypatch.setattr(fleet, "write_host_events", host)
    monkeypatch.setattr(fleet, "write_rank", kernels)
    result = ingest_fleet([str(EXAMPLE)], tmp_path / "out")
    assert result.failed == []
    assert _files(tmp_path / "out") == [HOST_FILE, KERNELS_FILE, MEMORY_FILE]
    assert result.facts["traces"][0]["kernels_file"] == KERNELS_FILE


@pytest.mark.usefixtures("on_a_thread")
def test_a_failed_host_write_leaves_no_kernels_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels' file is written first here (the host write waits for it): the rank fails with
    the host write's own line, and the kernels' file it had written is taken back (a rank file the
    summary does not list is refused by every reader). The memory events, written before the host
    events, stay, as when the tables were written in turn: no reader lists a failed rank's."""
    written = threading.Event()
    kernels_write = fleet.write_rank
    out = tmp_path / "out"

    def kernels(*args: Any, **kwargs: Any) -> str:
        relative = kernels_write(*args, **kwargs)
        assert (out / relative).is_file()
        written.set()
        return relative

    def host(_frame: pd.DataFrame, where: str, *_args: Any) -> str:
        assert written.wait(20)
        raise AtlasError(f"{where}/{HOST_FILE}", "no space left on the device")

    monkeypatch.setattr(fleet, "write_rank", kernels)
    monkeypatch.setattr(fleet, "write_host_events", host)
    result = ingest_fleet([str(EXAMPLE)], out)
    assert [f.reason for f in result.failed] == [f"{out}/{HOST_FILE}: no space left on the device"]
    assert _files(out) == [MEMORY_FILE]
    assert not (out / "summary.json").exists()


@pytest.mark.usefixtures("on_a_thread")
def test_a_failed_kernels_write_waits_for_the_host_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels' write fails while the host write still runs: the rank fails with the kernels'
    line only once the host write has ended (its file whole, not cut off as the command ends)."""
    release = threading.Event()
    ended = threading.Event()
    host_write = fleet.write_host_events
    out = tmp_path / "out"

    def host(*args: Any, **kwargs: Any) -> str | None:
        assert release.wait(20)
        relative = host_write(*args, **kwargs)
        ended.set()
        return relative

    def kernels(_frame: pd.DataFrame, where: str, *_args: Any) -> str:
        release.set()
        raise AtlasError(f"{where}/{KERNELS_FILE}", "no space left on the device")

    monkeypatch.setattr(fleet, "write_host_events", host)
    monkeypatch.setattr(fleet, "write_rank", kernels)
    result = ingest_fleet([str(EXAMPLE)], out)
    assert ended.is_set()
    assert [f.reason for f in result.failed] == [f"{out}/{KERNELS_FILE}: no space left on the device"]
    assert _files(out) == [HOST_FILE, MEMORY_FILE]  # as when written in turn: no reader lists a failed rank's


@pytest.mark.usefixtures("on_a_thread")
def test_without_a_thread_the_tables_are_written_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no thread can be started (a limit on processes counts threads) the host events are
    written here, first: the same files, the same tables."""
    order: list[str] = []
    host_write, kernels_write = fleet.write_host_events, fleet.write_rank

    def host(*args: Any, **kwargs: Any) -> str | None:
        order.append("host")
        return host_write(*args, **kwargs)

    def kernels(*args: Any, **kwargs: Any) -> str:
        order.append("kernels")
        return kernels_write(*args, **kwargs)

    ingest_fleet([str(EXAMPLE)], tmp_path / "threaded")
    monkeypatch.setattr(beside, "start_thread", lambda _thread: False)
    monkeypatch.setattr(fleet, "write_host_events", host)
    monkeypatch.setattr(fleet, "write_rank", kernels)
    result = ingest_fleet([str(EXAMPLE)], tmp_path / "in_turn")
    assert result.failed == [] and order == ["host", "kernels"]
    # the trace's 479 CPU ops, 110 runtime and 22 driver calls and 1 annotation; 60 kernels and 1
    # memcpy; 236 `[memory]` instants
    for name, rows in ((HOST_FILE, 612), (KERNELS_FILE, 61), (MEMORY_FILE, 236)):
        one, other = (pd.read_parquet(tmp_path / folder / name) for folder in ("threaded", "in_turn"))
        pd.testing.assert_frame_equal(one, other)
        assert len(one) == rows


@pytest.mark.parametrize("threshold", [849, 50_000])
def test_a_small_ranks_tables_are_written_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: int
) -> None:
    """Below the threshold (one event more than the example's 848, or the default) no thread is
    started and the host events are written first, then the kernels: a thread and its turns at
    the GIL cost a small rank more than the write."""
    monkeypatch.setattr(fleet, "WRITE_BESIDE_MIN_ROWS", threshold)
    order: list[tuple[str, str]] = []
    host_write, kernels_write = fleet.write_host_events, fleet.write_rank

    def host(*args: Any, **kwargs: Any) -> str | None:
        order.append(("host", threading.current_thread().name))
        return host_write(*args, **kwargs)

    def kernels(*args: Any, **kwargs: Any) -> str:
        order.append(("kernels", threading.current_thread().name))
        return kernels_write(*args, **kwargs)

    monkeypatch.setattr(fleet, "write_host_events", host)
    monkeypatch.setattr(fleet, "write_rank", kernels)
    result = ingest_fleet([str(EXAMPLE)], tmp_path / "out")
    here = threading.current_thread().name
    assert result.failed == [] and order == [("host", here), ("kernels", here)]
    assert _files(tmp_path / "out") == [HOST_FILE, KERNELS_FILE, MEMORY_FILE]


@pytest.mark.parametrize("where", ["local", "memory://"])
def test_a_written_rank_file_is_taken_back(tmp_path: Path, where: str) -> None:
    """`remove_dataset_file` takes back what `write_dataset_file` wrote, in a folder or an object
    store (fsspec's memory filesystem here), and says nothing where there is nothing to take."""
    import fsspec
    import pyarrow as pa

    from kernel_atlas.store.outputs import remove_dataset_file, write_dataset_file

    out = str(tmp_path / "out") if where == "local" else f"memory://atlas-take-back-{tmp_path.name}"
    if where == "local":
        (tmp_path / "out").mkdir()
    relative = write_dataset_file(pa.table({"x": [1, 2]}), out, "kernels.parquet/rank=0/t.parquet", "run")
    fs, root = fsspec.core.url_to_fs(out)
    assert fs.exists(f"{root}/{relative}")
    remove_dataset_file(out, relative)
    assert not fs.exists(f"{root}/{relative}")
    remove_dataset_file(out, relative)  # gone already: nothing said
