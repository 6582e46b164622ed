"""Issue 27's second hostile-input campaign: each class that ended in "internal error", lost a
usable trace or broke a promise, built by hand from the example trace (so the test runs without
the shared traces) and checked end to end through `atlas ingest` and `atlas report`."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.ingest.events import step_number
from tests.conftest import EXAMPLE
from tests.hostile import cli


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return json.loads(gzip.decompress(EXAMPLE.read_bytes()))


def _write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _ingest_and_report(trace: Path, out: Path) -> tuple[pd.DataFrame, str]:
    """Ingest then report; both must end in exit 0 with only warnings on stderr."""
    from kernel_atlas.ingest.outputs import load_kernels

    ingest = cli("ingest", trace, "-o", out, "-q")
    assert ingest.code == 0, ingest.output
    assert all(line.startswith("warning: ") for line in ingest.lines()), ingest.stderr
    report = cli("report", out)
    assert report.code == 0, report.output
    assert not report.lines(), report.stderr
    return load_kernels(out), ingest.stderr


# --- wide dictionaries -----------------------------------------------------------------------------


def test_three_hundred_collective_names_and_dtypes_fit_their_columns(tmp_path: Path, example) -> None:
    """300 distinct `Collective name`s and `dtype`s overflowed an int8 dictionary index
    (ArrowInvalid: Integer value 128 not in range) and lost the whole trace."""
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for i in range(300):
        kernel = copy.deepcopy(kernels[i % len(kernels)])
        kernel["ts"] += 0.001 * (i + 1)
        kernel["args"].update({"correlation": 10**7 + i, "Collective name": f"coll_{i}", "dtype": f"dt{i}"})
        doc["traceEvents"].append(kernel)
    frame, _ = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert len(frame) == 61 + 300  # the example's 60 kernels + 1 memcpy, and the 300 added
    assert frame["collective"].nunique() == 300 and frame["msg_dtype"].nunique() == 300
    assert set(frame["collective"].dropna()) == {f"coll_{i}" for i in range(300)}


# --- odd digits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("ProfilerStep#12", 12),
        ("ProfilerStep#0", 0),
        ("ProfilerStep#\u00b2", None),  # a superscript two: str.isdigit() says yes, int() refuses
        ("ProfilerStep#\u0663", None),  # an Arabic-Indic three: int() reads 3, but it is no step number
        ("ProfilerStep#" + "9" * 30, None),  # beyond int64
        ("ProfilerStep#9007199254740993", None),  # 2^53 + 1: not exact in float64
        ("ProfilerStep#-1", None),
        ("ProfilerStep#", None),
        ("ProfilerStep", None),
    ],
)
def test_step_numbers_are_plain_digits_in_range(name: str, number: int | None) -> None:
    assert step_number(name) == number


@pytest.mark.parametrize("tail", ["\u00b2", "9" * 30, "\u0663"])
def test_an_odd_step_number_costs_only_the_step(tmp_path: Path, example, tail: str) -> None:
    """`ProfilerStep#²` / a step beyond int64, on the CPU annotation and the GPU one: the trace is
    ingested, its kernels keep everything, only the step is unknown."""
    doc = copy.deepcopy(example)
    for event in doc["traceEvents"]:
        if str(event.get("name", "")).startswith("ProfilerStep#"):
            event["name"] = "ProfilerStep#" + tail
    frame, _ = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert len(frame) == 61 and frame["step"].isna().all()
    assert frame["launcher"].notna().sum() > 0


def test_mangled_names_with_odd_digits_are_kept_as_written(tmp_path: Path, example) -> None:
    doc = copy.deepcopy(example)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    odd = ["_ZN2at6native18elementwise_kernelILi\u00b2ELi4EZNS0_vv", "_Z" + "9" * 30 + "foo", "_ZN\u0663\u0663abc"]
    for kernel, name in zip(kernels, odd, strict=False):
        kernel["name"] = name
    frame, _ = _ingest_and_report(_write(tmp_path, doc), tmp_path / "out")
    assert set(odd) <= set(frame["name"].astype(str))
