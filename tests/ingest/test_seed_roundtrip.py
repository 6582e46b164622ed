"""Seed catalog → synthetic trace → `atlas ingest` → the same catalog entries."""

from __future__ import annotations

import json
import re

import pytest

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.frames import STACK_SEPARATOR, is_python_frame
from kernel_atlas.ingest.pipeline import ingest_trace
from tests.support.synth import trace_from_catalog
from tests.support.traces import SEED


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict[tuple[str, str], dict]]:
    if not SEED.exists():
        pytest.skip("shared seed catalog not available")
    seed = json.loads(SEED.read_text())
    folder = tmp_path_factory.mktemp("seed")
    path = folder / "seed_trace.json"
    path.write_text(json.dumps(trace_from_catalog(seed)))
    result = ingest_trace(path)
    files = write_outputs(result, folder / "out")
    catalog = json.loads(files["catalog"].read_text())
    return seed, {(e["kernel_name"], e["kernel_implementation"]): e for e in catalog}


def test_every_seed_entry_comes_back(roundtrip) -> None:
    seed, by_key = roundtrip
    distinct = {(e["kernel_name"], e["kernel_implementation"]) for e in seed}
    assert set(by_key) == distinct


def _without_addresses(stack: str) -> str:
    """The seed's stacks as ingest writes them: `<built-in method f of PyCapsule object at 0x7f…>`
    → `f (PyCapsule)` (a method with no name: `<unnamed> (PyCapsule)`), `<function f at 0x7f…>`
    → `<function f>`."""
    stack = re.sub(
        r"<built-in method (\S*) of (\S+) object at 0x[0-9a-f]+>", lambda m: f"{m[1] or '<unnamed>'} ({m[2]})", stack
    )
    return re.sub(r"(<function \S+) at 0x[0-9a-f]+>", r"\1>", stack)


def test_names_implementations_and_stacks_round_trip(roundtrip) -> None:
    seed, by_key = roundtrip
    for entry in seed:
        got = by_key[(entry["kernel_name"], entry["kernel_implementation"])]
        stacks = {
            _without_addresses(e["call_stack"])
            for e in seed
            if (e["kernel_name"], e["kernel_implementation"]) == (entry["kernel_name"], entry["kernel_implementation"])
        }
        assert got["call_stack"] in stacks
        assert " at 0x" not in got["call_stack"]
    moe = [e for e in by_key.values() if "inplace_fused_experts (PyCapsule)" in e["call_stack"]]
    assert moe and all("sglang::inplace_fused_experts" in e["call_stack"] for e in moe)


def _normalised(params: list[dict]) -> list[tuple]:
    return [
        (
            p.get("role"),
            p["example_dim"] if isinstance(p["example_dim"], list) else [],
            p["example_dtype"],
            p.get("description"),
        )
        for p in params
    ]


def test_params_round_trip_where_the_stack_has_a_cpu_op(roundtrip) -> None:
    seed, by_key = roundtrip
    checked = 0
    for entry in seed:
        frames = entry["call_stack"].split(STACK_SEPARATOR)[1:]
        got = by_key[(entry["kernel_name"], entry["kernel_implementation"])]
        same_key = [
            e
            for e in seed
            if (e["kernel_name"], e["kernel_implementation"]) == (entry["kernel_name"], entry["kernel_implementation"])
        ]
        if len(same_key) > 1:
            continue  # several seed entries share name+launcher; the catalog keeps the most frequent
        if any(not is_python_frame(f) for f in frames):
            assert _normalised(got["params"]) == _normalised(entry["params"]), entry["kernel_name"]
            for param, ref in zip(got["params"], entry["params"], strict=False):
                if "id" in ref:
                    assert param["id"] == ref["id"]
            checked += 1
        else:
            # Only CPU ops record shapes; a launch under Python frames alone has none.
            assert got["params"] == []
    assert checked >= 100


def test_roundtrip_labels_come_from_the_catalog(roundtrip) -> None:
    seed, by_key = roundtrip
    for entry in seed:
        if entry["op_mapping"] not in ("TBD", ""):
            got = by_key[(entry["kernel_name"], entry["kernel_implementation"])]
            assert got["op_mapping"] == entry["op_mapping"]
