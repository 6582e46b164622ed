"""Campaign BJ (class 4): a kernel catalog given where a trace is read — a JSON list of entries
naming a `kernel_name`, none with a `ph` — was ingested as an empty trace ("2 events, 0
kernels", exit 0, files written; `atlas diff` left `catalog.atlas/` beside it). Every command
that reads a trace now refuses it in one line, writing nothing; and `atlas whatif` says what is
wrong with its folder (a trace, a missing one) before anything else."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.support.hostile import assert_one_line_error, cli
from tests.support.traces import EXAMPLE

CATALOG = [  # the seed's format (catalogs/kernels.json), two entries
    {"kernel_name": "ampere_sgemm_128x64_tn", "kernel_implementation": "aten::mm", "op_mapping": "TBD",
     "operation": "", "source_code": "", "call_stack": "", "params": []},
    {"kernel_name": "vectorized_elementwise_kernel", "kernel_implementation": "aten::add", "op_mapping": "add",
     "operation": "", "source_code": "", "call_stack": "", "params": []},
]  # fmt: skip
SAYS = "a kernel catalog (a JSON list of entries naming a `kernel_name`), not a trace"


def _catalog(folder: Path, name: str = "catalog.json") -> Path:
    path = folder / name
    text = json.dumps(CATALOG, indent=2).encode()
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return path


def _written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_ingest_refuses_a_catalog_and_writes_nothing(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    line = assert_one_line_error(cli("ingest", catalog, "-o", tmp_path / "cat.atlas"), str(catalog), SAYS)
    assert "atlas classify" in line and "atlas report" in line
    assert_one_line_error(cli("ingest", catalog), SAYS)  # the default output folder too
    assert _written(tmp_path) == ["catalog.json"]


def test_a_compressed_catalog_is_refused_saying_to_decompress_it(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, "catalog.json.gz")
    for args in (("ingest", catalog), ("report", catalog)):  # report: a .gz is a trace, read by ingest
        assert_one_line_error(cli(*args), SAYS, "decompressed")
    assert _written(tmp_path) == ["catalog.json.gz"]


def test_diff_against_a_catalog_is_refused_and_leaves_no_folder(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    assert_one_line_error(cli("diff", EXAMPLE, catalog), str(catalog), SAYS)
    assert _written(tmp_path) == ["catalog.json"]


def test_a_bare_array_trace_is_still_read(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"  # one kernel of 4 µs, `kernel_name` among its args: a trace (it has `ph`)
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 4,
             "args": {"device": 0, "stream": 7, "kernel_name": "k"}}  # fmt: skip
    trace.write_text(json.dumps([event]))
    done = cli("ingest", trace, "-o", tmp_path / "t.atlas", "-q")
    assert done.code == 0, done.output
    assert (tmp_path / "t.atlas" / "summary.json").is_file()


def test_whatif_says_what_its_folder_is_first(tmp_path: Path) -> None:
    trace = tmp_path / "bert.json.gz"
    trace.write_bytes(EXAMPLE.read_bytes())
    speedup = ("--speedup", "category=gemm:2x")
    assert_one_line_error(
        cli("whatif", trace, *speedup), str(trace), "a trace, not an ingest output folder", "atlas ingest"
    )
    missing = tmp_path / "nowhere.atlas"
    for args in ((), speedup):  # without --speedup it had said "nothing to change"
        assert_one_line_error(cli("whatif", missing, *args), str(missing), "no such ingest output folder")
    assert_one_line_error(cli("whatif", _catalog(tmp_path), *speedup), SAYS)
    assert _written(tmp_path) == ["bert.json.gz", "catalog.json"]
