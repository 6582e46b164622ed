"""A catalog folder of one's own (`$ATLAS_CATALOGS`) with a broken or backtracking pattern, a text
that is a credential or too long, or a number out of range (campaign BE 3–7): one line naming the
file and the key, exit 2, or a safe text — it had been "internal error" (exit 1, or blamed on the
trace), a hang past 90 s, the credential on stdout and in report.html, and negative or NaN peaks
and FLOPs in roofline.parquet. Expected values are worked out by hand from the edit."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_atlas.core import texts
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import SHIPPED
from kernel_atlas.ingest import steps
from tests.support.hostile import ATLAS
from tests.support.traces import EXAMPLE, REPO

TOKEN = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape: ghp_ and 36 characters


@pytest.fixture
def own(tmp_path: Path) -> Path:
    """A copy of the shipped catalogs, to edit."""
    folder = tmp_path / "catalogs"
    shutil.copytree(SHIPPED, folder)
    return folder


def _edit(own: Path, file: str, old: str, new: str) -> Path:
    path = own / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def _atlas(*args: object, catalogs: Path, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}
    env["ATLAS_CATALOGS"] = str(catalogs)
    start = time.monotonic()
    done = subprocess.run([*ATLAS, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
    return done, time.monotonic() - start


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example trace ingested with the shipped catalogs."""
    out = tmp_path_factory.mktemp("run") / "out"
    done, _ = _atlas("ingest", EXAMPLE, "-o", out, "-q", catalogs=SHIPPED)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def fresh() -> Iterator[None]:
    """costs.toml's step patterns read anew in this process, before and after (read once, cached)."""

    def clear() -> None:
        for cached in (steps._patterns, steps._native, steps.parse_step):
            cached.cache_clear()

    clear()
    yield
    clear()


# class 3: a pattern that does not compile


def test_a_broken_device_match_pattern_is_one_line_naming_devices_toml(own: Path, run: Path, tmp_path: Path) -> None:
    path = _edit(own, "devices.toml", "match = ['H100 80GB HBM3'", "match = ['H100 80GB HBM3('")
    # the unclosed `(` is the pattern's 15th character: position 14 of the user's own text
    said = (
        f"error: {path}: `devices.h100-sxm.match` 'H100 80GB HBM3(': not a regular expression "
        "(missing ), unterminated subpattern at position 14)"
    )
    for args in (("report", run), ("ingest", EXAMPLE, "-o", tmp_path / "again", "-q")):
        done, _ = _atlas(*args, catalogs=own)
        assert _one_line(done) == said  # the catalog, not the trace


def test_a_broken_native_steps_pattern_is_one_line_naming_costs_toml(own: Path, tmp_path: Path) -> None:
    old = "native_steps = ['^execute_context_"
    path = _edit(own, "costs.toml", old, "native_steps = ['(', '^execute_context_")
    done, _ = _atlas("ingest", EXAMPLE, "-o", tmp_path / "out", "-q", catalogs=own)
    said = f"error: {path}: `native_steps[0]` '(': not a regular expression (missing ), unterminated subpattern at position 0)"
    assert _one_line(done) == said


def test_a_broken_attention_steps_pattern_names_its_key(
    own: Path, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = "fields = ['\\b(?P<key>[cg]_(?:sq|sk|sqsq|sqsk))=(?P<value>\\d+)']"
    path = _edit(own, "costs.toml", old, "fields = ['\\b(?P<key>[cg]_(?:sq|sk|sqsq|sqsk)=(?P<value>\\d+)']")
    monkeypatch.setenv("ATLAS_CATALOGS", str(own))
    with pytest.raises(AtlasError) as caught:
        steps.parse_step("step[MIXED bs=1 c_sqsq=25]")
    assert caught.value.source == str(path)
    # the second [[attention_steps]] entry (SGLang), its first `fields` pattern
    assert caught.value.problem.startswith("`attention_steps[1].fields[0]` '\\\\b(?P<key>")
    assert "not a regular expression (missing ), unterminated subpattern at position 2)" in caught.value.problem


# class 4: a pattern that backtracks catastrophically


def test_a_backtracking_device_pattern_ends_ingest_in_one_line(own: Path, tmp_path: Path) -> None:
    path = _edit(own, "devices.toml", "match = ['H100 80GB HBM3'", "match = ['(.*.*)*Q$', 'H100 80GB HBM3'")
    done, took = _atlas("ingest", EXAMPLE, "-o", tmp_path / "out", "-q", catalogs=own, timeout=60)
    line = _one_line(done)
    assert line == (
        f"error: {path}: `devices.h100-sxm.match`: matching took more than 10 s "
        "(a pattern that backtracks catastrophically?)"
    )
    assert took < 40  # 10 s of matching, the rest is starting up (it ran past 90 s)


@pytest.mark.parametrize(
    ("old", "new", "where", "call"),
    [
        ("native_steps = ['^execute", "native_steps = ['(.*.*)*Q$', '^execute", "native_steps", "native"),
        (
            "match = '^step\\[(?:EXTEND|DECODE|MIXED)",
            "match = '(.*.*)*Q$|^step\\[(?:EXTEND|DECODE|MIXED)",
            "attention_steps",
            "parse",
        ),
    ],
)
def test_a_backtracking_steps_pattern_is_bounded(
    own: Path, fresh: None, monkeypatch: pytest.MonkeyPatch, old: str, new: str, where: str, call: str
) -> None:
    path = _edit(own, "costs.toml", old, new)
    monkeypatch.setenv("ATLAS_CATALOGS", str(own))
    monkeypatch.setattr(texts, "USER_PATTERN_SECONDS", 0.5)
    name = "x sqsq " + "a" * 40  # `(.*.*)*Q$` on 47 characters backtracks for hours
    start = time.monotonic()
    with pytest.raises(AtlasError) as caught:
        (steps.is_native_step if call == "native" else steps.parse_step)(name)
    assert time.monotonic() - start < 5
    assert caught.value.source == str(path)
    assert (
        caught.value.problem
        == f"`{where}`: matching took more than 0.5 s (a pattern that backtracks catastrophically?)"
    )


# class 5: catalog texts


def test_a_device_name_is_redacted_and_cut_like_a_trace_text(own: Path, run: Path, tmp_path: Path) -> None:
    _edit(own, "devices.toml", 'name = "NVIDIA H100 SXM5 80GB"', f'name = "H100 {TOKEN} {"N" * 100_000}"')
    html = tmp_path / "report.html"
    done, _ = _atlas("report", run, "--html", html, catalogs=own)
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    for said in (done.stdout, done.stderr, page):
        assert TOKEN not in said and "ghp_" not in said
        assert "N" * 240 not in said
    # cut to 256 characters (reader.META_TEXT) as a GPU name of the trace is: 255 kept and "…".
    # The token is redacted first: "H100 <redacted> " is 16 characters, leaving 239 N.
    assert "H100 &lt;redacted&gt; " + "N" * 239 + "…" in page


def test_a_catalog_file_past_16_mib_is_refused_in_one_line(own: Path, run: Path) -> None:
    path = _edit(own, "devices.toml", 'name = "NVIDIA H100 SXM5 80GB"', f'name = "{"N" * 17_000_000}"')
    size = path.stat().st_size
    assert size > 17_000_000
    done, took = _atlas("report", run, catalogs=own, timeout=60)
    assert _one_line(done) == f"error: {path}: too large ({size:,} bytes)"
    assert took < 30


# class 6: numbers out of range

POSITIVE = "must be a positive finite number (from 0.000001 to 1,000,000,000)"


@pytest.mark.parametrize(
    ("file", "old", "new", "said"),
    [
        ("devices.toml", "bf16 = 989.4", "bf16 = -1", f"`devices.h100-sxm.tensor.bf16` = -1: {POSITIVE}"),
        ("devices.toml", "bf16 = 989.4", "bf16 = 0.0", f"`devices.h100-sxm.tensor.bf16` = 0.0: {POSITIVE}"),
        ("devices.toml", "bf16 = 989.4", "bf16 = nan", f"`devices.h100-sxm.tensor.bf16` = nan: {POSITIVE}"),
        ("devices.toml", "bf16 = 989.4", "bf16 = inf", f"`devices.h100-sxm.tensor.bf16` = inf: {POSITIVE}"),
        ("devices.toml", "bf16 = 989.4", "bf16 = 1e308", f"`devices.h100-sxm.tensor.bf16` = 1e+308: {POSITIVE}"),
        ("devices.toml", "fp32 = 66.9", "fp32 = -inf", f"`devices.h100-sxm.vector.fp32` = -inf: {POSITIVE}"),
        ("devices.toml", "memory_gbps = 3350", "memory_gbps = 0", f"`devices.h100-sxm.memory_gbps` = 0: {POSITIVE}"),
        (
            "devices.toml",
            "memory_gbps = 3350",
            "memory_gbps = 5e-324",
            f"`devices.h100-sxm.memory_gbps` = 5e-324: {POSITIVE}",
        ),
        ("devices.toml", "link_gbps = 450", "link_gbps = -450", f"`devices.h100-sxm.link_gbps` = -450: {POSITIVE}"),
        (
            "devices.toml",
            "sms = 132",
            "sms = -132",
            "`devices.h100-sxm.sms` = -132: must be a whole number from 1 to 1,000,000,000",
        ),
        (
            "costs.toml",
            "\nadd = 1\n",
            "\nadd = -1\n",
            "`flops_per_element.add` = -1: must be a finite number from 0 to 1,000,000,000",
        ),
        (
            "costs.toml",
            "\nadd = 1\n",
            "\nadd = nan\n",
            "`flops_per_element.add` = nan: must be a finite number from 0 to 1,000,000,000",
        ),
    ],
)
def test_a_number_out_of_range_is_one_line_naming_file_and_key(
    own: Path, run: Path, file: str, old: str, new: str, said: str
) -> None:
    path = _edit(own, file, old, new)
    done, _ = _atlas("report", run, catalogs=own)
    assert _one_line(done) == f"error: {path}: {said}"


# class 7: a device id past int64


def test_a_device_id_past_int64_gives_no_numpy_warning(tmp_path: Path) -> None:
    trace = tmp_path / "huge_device.sqlite"
    shutil.copy(REPO / "examples" / "h100_2gpu_slice.sqlite", trace)
    with sqlite3.connect(trace) as db:  # Nsight's deviceId is an int64: 2^63 − 1 on every other kernel
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 9223372036854775807 WHERE rowid % 2 = 0")
    db.close()
    done, _ = _atlas("ingest", trace, "-o", tmp_path / "out", catalogs=SHIPPED)
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr and "efficiency.py" not in done.stderr, done.stderr
