"""The Nsight door (campaign BE, classes 1 and 9a–9c): texts with a NUL byte measured and cut by
their bytes in SQLite, and the `.nsys-rep` export's errors, time bound and non-regular files."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from kernel_atlas.cli import app
from kernel_atlas.ingest import nsys
from kernel_atlas.ingest.columns import CPU_OP
from kernel_atlas.ingest.pipeline import ingest_trace
from tests.ingest.test_nsys_ingest import _edited, _export, _one_line_error, runner

HUGE = 12 * 2**20  # 12 MiB of text after the NUL


def test_a_nul_led_huge_text_is_cut_in_sqlite_and_counted(tmp_path: Path) -> None:
    """SQLite's length() counts a text's characters up to its first NUL: `"void k_nul<float>()\\0"
    + 12 MiB` measured 20 and came to Python whole, uncounted. Measured by its bytes, it is cut in
    SQLite; the NUL stays in the name, as the JSON reader keeps a `\\u0000`."""
    path = _edited(
        _export(tmp_path / "nul.sqlite"),
        ("UPDATE StringIds SET value = ? WHERE id = 1", ("void k_nul<float>()\0" + "A" * HUGE,)),
        ("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'nn.Module: Linear_0'", ("nn.Module: Lin\0" + "Z" * HUGE,)),
        ("UPDATE TARGET_INFO_GPU SET name = ?", ("NVIDIA H100\0" + "g" * HUGE,)),
    )
    # what SQLite hands Python of the 12 MiB text: (16,383 + 4,096 + 1) characters of at most 4
    # bytes each, and one byte more, which tells that it went on
    db = sqlite3.connect(path)
    (raw,) = db.execute(f"SELECT {nsys._cut_sql('value')} FROM StringIds WHERE id = 1").fetchone()
    (gpu_raw,) = db.execute(f"SELECT {nsys._cut_sql('name')} FROM TARGET_INFO_GPU LIMIT 1").fetchone()
    db.close()
    assert len(raw) == 81_921 and len(gpu_raw) == 81_921
    result = ingest_trace(path)
    kernel = result.frame.set_index("correlation").loc[5]
    # "void k_nul<float>()" is 19 characters, the NUL the 20th: 16,383 − 20 A, then the mark
    assert kernel["name"] == "void k_nul<float>()\x00" + "A" * 16_363 + "…"
    # "nn.Module: Lin\0" is 15 characters: 16,383 − 15 Z after "Lin\0"
    assert kernel["module"] == "Lin\x00" + "Z" * 16_368 + "…"
    assert kernel["launcher"] == "aten::addmm"  # the op ranges beside it untouched
    gpu = result.facts["gpus"][0]["name"]
    assert gpu == "NVIDIA H100\x00" + "g" * 243 + "…"  # 12 + 243 + 1 = 256 characters
    assert any("2 strings longer than 16,384 characters were cut" in w for w in result.warnings), result.warnings
    assert any("deviceProperties: 2 text(s) longer than 256 characters cut" in w for w in result.warnings)


def test_a_cut_through_a_character_keeps_whole_characters(tmp_path: Path) -> None:
    """The byte cut can split a character: here a NUL, 81,919 `k` and 10 `é` (2 bytes each); the
    cut, 81,921 bytes, ends 1 byte into the first `é`, which is dropped — not counted as a text
    that is not UTF-8."""
    text = "\0" + "k" * 81_919 + "é" * 10
    path = _edited(_export(tmp_path / "utf8.sqlite"), ("UPDATE StringIds SET value = ? WHERE id = 1", (text,)))
    result = ingest_trace(path)
    assert result.frame.set_index("correlation").loc[5, "name"] == "\x00" + "k" * 16_382 + "…"
    assert not [w for w in result.warnings if "not UTF-8" in w], result.warnings
    assert any("1 string longer than 16,384 characters was cut" in w for w in result.warnings), result.warnings


def test_a_nul_inside_an_op_range_is_read_past(tmp_path: Path) -> None:
    """emit_nvtx texts are split by bytes: on a text, SQLite's substr() stops at a NUL, so the
    `op_id` after one read 0 and a name holding one lost what follows it."""
    path = _edited(
        _export(tmp_path / "nul_ops.sqlite"),
        ("UPDATE NVTX_EVENTS SET text = ? WHERE start = 2000", ("aten::addmm, seq = 2\0, op_id = 11, sizes = [[16]]",)),
        ("UPDATE NVTX_EVENTS SET text = ? WHERE start = 500", ("mark\0ed, seq = 4",)),
    )
    _, cols, _ = nsys.read_nsys(path)
    host = cols.host
    names = np.array(host.names, dtype=object)[host.name_code]
    op = np.flatnonzero(names == "aten::addmm")
    assert len(op) == 1
    assert host.family[op[0]] == CPU_OP and host.external_id[op[0]] == 11 and host.seq_nr[op[0]] == 2
    assert "mark\x00ed" in set(names)  # tagged, not op-like: an annotation, its NUL kept


def _fake_nsys(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nsys"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\0" * 64)
    return report


def test_an_export_that_is_not_sqlite_names_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It had named the temporary export, deleted by then (`/tmp/atlas-nsys-…/run.sqlite`)."""
    report = _fake_nsys(
        tmp_path, 'while [ "$1" != "--output" ]; do shift; done\necho "not a database at all" > "$2"\n', monkeypatch
    )
    result = runner.invoke(app, ["ingest", str(report), "-o", str(tmp_path / "o")])
    _one_line_error(result, "`nsys export` wrote no readable SQLite file")
    assert "run.nsys-rep" in result.output and "atlas-nsys-" not in result.output


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"  # a zombie: ended
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_stuck_export_is_stopped_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nsys export` had no time bound: a stuck one held `atlas ingest` forever. Past its bound it
    and what it started are killed."""
    pids = tmp_path / "pids"
    pids.mkdir()
    report = _fake_nsys(tmp_path, f'echo $$ > "{pids}/nsys"\nsleep 60 &\necho $! > "{pids}/sleep"\nwait\n', monkeypatch)
    monkeypatch.setattr(nsys, "EXPORT_SECONDS", 1.0)
    monkeypatch.setattr(nsys, "EXPORT_SECONDS_PER_MB", 0.0)
    began = time.monotonic()
    result = runner.invoke(app, ["ingest", str(report), "-o", str(tmp_path / "o")])
    assert time.monotonic() - began < 20
    _one_line_error(result, "`nsys export` was still running after 1 s: stopped")
    assert "run.nsys-rep" in result.output
    started = [int((pids / name).read_text()) for name in ("nsys", "sleep")]
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in started)


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_a_sqlite_name_that_is_no_regular_file(tmp_path: Path, kind: str) -> None:
    """A FIFO or a link to /dev/zero named `x.sqlite` was "no such file"; the JSON reader's words."""
    path = tmp_path / "x.sqlite"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    result = runner.invoke(app, ["ingest", str(path), "-o", str(tmp_path / "o")])
    _one_line_error(result, "is not a regular file (a pipe, socket or device)")
