"""Matching graph replays against captures of many graphs: the work grows with what can match,
not with every (replay, graph) pair, and the choice among equal graphs is the one made before.

SYNTHETIC traces written here: a capture trace of many one-launch graphs (CUDA style: launches
name no kernel; or ROCm style: `hipLaunchKernel` names its kernel and grid) and a replay trace
of graph launches, each replaying one kernel. Hostile-input campaign (issue 27): 50,000 such
graphs against 1,000 replays of distinct grids took 214 s and 12.2 GB (every replay ranked all
50,000 equal graphs, then looked at each for the next in order), and 50,000 named ones against
1,000 replays 49 s (every replay aligned with all ~35,000 distinct sequences);
`benchmarks/capture_scale.py` measures both."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_atlas.ingest import capture
from kernel_atlas.ingest.capture import WHY_NO_FIT, read_captures
from kernel_atlas.ingest.pipeline import ingest_trace

GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n"
REPLAY_CORRELATION = 10_000_000


def _capture(path: Path, graphs: list[tuple[str | None, list[int] | None]], first_correlation: int = 100) -> Path:
    """One graph per entry, launching one kernel: (kernel name, grid) on its launch, ROCm style,
    or (None, None): a CUDA launch, which names neither. The launch of graph g (from 0) has
    correlation `first_correlation + 4 g + 3` (begin, the op, the launch, end)."""
    events = []
    correlation = first_correlation
    for g, (name, grid) in enumerate(graphs):
        t0 = 1000.0 + 100 * g
        launch_args = {} if name is None else {"kernel": name, "grid": grid, "block": [128, 1, 1]}
        launch = "cudaLaunchKernel" if name is None else "hipLaunchKernel"
        for cat, event, ts, args in (
            ("cuda_runtime", "cudaStreamBeginCapture", t0, {}),
            ("cpu_op", "aten::mm", t0 + 10, {"Input Dims": [[64, 128], [128, 64]], "Input type": ["float", "float"]}),
            ("cuda_runtime", launch, t0 + 12, launch_args),
            ("cuda_runtime", "cudaStreamEndCapture", t0 + 50, {}),
        ):
            correlation += 1
            args = {**args, "correlation": correlation, "External id": correlation}
            dur = 10.0 if cat == "cpu_op" else 2.0  # the op holds its launch
            events.append(
                {"ph": "X", "cat": cat, "name": event, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}
            )
    path.write_text(json.dumps({"traceEvents": events, "synthetic": "tests/ingest/test_capture_scale.py"}))
    return path


def _replay(path: Path, kernels: list[tuple[str, list[int]]]) -> Path:
    """One graph launch per entry, replaying one kernel of that name and grid."""
    events = []
    for r, (name, grid) in enumerate(kernels):
        t, correlation = 10.0 + 50 * r, REPLAY_CORRELATION + r
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": t, "dur": 5.0}
            | {"args": {"correlation": correlation}}
        )
        kernel_args = {"device": 0, "stream": 7, "correlation": correlation, "grid": grid, "block": [128, 1, 1]}
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": t + 10,
                "dur": 9.0,
                "args": kernel_args,
            }
        )
    path.write_text(json.dumps({"traceEvents": events, "synthetic": "tests/ingest/test_capture_scale.py"}))
    return path


def _matched_graphs(frame: pd.DataFrame, first_correlation: int = 100) -> list[int]:
    """The 1-based number of the captured graph each replay got, in replay order (from the
    capture correlation its kernel was given: graph g's launch is first + 4 (g - 1) + 3)."""
    kernels = frame.sort_values("ts_us")
    return [(int(c) - first_correlation - 3) // 4 + 1 for c in kernels["capture_correlation"]]


def _counted(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """How many times `capture.<name>` is called from now on (a one-element list)."""
    calls = [0]
    original = getattr(capture, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(capture, name, counted)
    return calls


@pytest.fixture
def fits_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many candidate fits the matcher builds (one per captured graph it ranks)."""
    return _counted(monkeypatch, "_Fit")


@pytest.fixture
def alignments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many (replayed sequence, captured sequence) alignments the matcher runs."""
    return _counted(monkeypatch, "_diff")


def test_equal_graphs_are_ranked_once_and_taken_in_order(tmp_path: Path, fits_made: list[int]) -> None:
    # 2,000 identical CUDA graphs (the launch names nothing: each fits every replay equally,
    # with the same shapes); 150 replays of distinct grids, each a sequence of its own
    graphs = [(None, None)] * 2000
    replays = [(GEMM, [1 + r, 1, 1]) for r in range(150)]
    captures, warnings = read_captures([_capture(tmp_path / "capture.json", graphs)])
    assert warnings == []
    result = ingest_trace(_replay(tmp_path / "replay.json", replays), captures=captures)
    facts = result.facts["graphs"]
    assert (facts["launches"], facts["matched"], facts["unmatched"]) == (150, 150, {})
    # equal fits are taken in capture order, each after the last one matched, and give the op
    assert _matched_graphs(result.frame) == list(range(1, 151))
    assert set(result.frame["launcher"]) == {"aten::mm"}
    assert set(result.frame["input_dims"]) == {"[[64,128],[128,64]]"}
    # the graphs are ranked once for the alignment all replays share: 2,000 fits, not 300,000
    assert fits_made[0] == 2000


def test_equal_graphs_wrap_around_and_alternate_between_captures(tmp_path: Path) -> None:
    # two capture files of 3 equal graphs each; 8 replays: the first graph after the last one
    # matched from each file, the lower number first (of equal numbers, the first file's); once
    # both files are used up, back to the first file's first graph — and then its second, the
    # only graph left after a last match
    a = _capture(tmp_path / "a.json", [(None, None)] * 3, first_correlation=100)
    b = _capture(tmp_path / "b.json", [(None, None)] * 3, first_correlation=500)
    captures, _ = read_captures([a, b])
    frame = ingest_trace(_replay(tmp_path / "replay.json", [(GEMM, [1, 1, 1])] * 8), captures=captures).frame
    got = [
        ("a", int(c) - 100) if int(c) < 500 else ("b", int(c) - 500)
        for c in frame.sort_values("ts_us")["capture_correlation"]
    ]
    # the launch of graph g (1-based) is the 4 (g - 1) + 3rd event after the file's first correlation
    order = [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3), ("a", 1), ("a", 2)]
    assert got == [(file, 4 * (g - 1) + 3) for file, g in order]


def test_named_graphs_are_aligned_only_with_replays_sharing_a_kernel(tmp_path: Path, alignments: list[int]) -> None:
    # 2,000 ROCm graphs naming 1,000 kernels: graphs g and g + 1,000 launch `k_g` with the same
    # grid, one captured sequence per kernel name; 100 replays of k_0 … k_99
    graphs = [(f"k_{g % 1000}", [1 + g % 1000 % 3, 1, 1]) for g in range(2000)]
    replays = [(f"k_{r}", [1 + r % 3, 1, 1]) for r in range(100)]
    captures, _ = read_captures([_capture(tmp_path / "capture.json", graphs)])
    result = ingest_trace(_replay(tmp_path / "replay.json", replays), captures=captures)
    facts = result.facts["graphs"]
    assert (facts["launches"], facts["matched"]) == (100, 100)
    # replay r gets graph r + 1 (the first of the two equal graphs launching k_r)
    assert _matched_graphs(result.frame) == [r + 1 for r in range(100)]
    # one alignment per replay: with the one sequence that names its kernel, not all 1,000
    assert alignments[0] == 100


@pytest.mark.parametrize(
    ("replayed", "why"),
    [
        # one replayed kernel that no capture names, against one-launch graphs that name theirs:
        # deleting the captured launch and inserting the replayed one is within the edits
        # tolerated (4), but places nothing — the captured kernels are other ones, named (it had
        # said "the capture records no kernel names": campaign BT 5)
        (1, WHY_NO_FIT),
        # four replayed kernels: 5 edits, past the bound
        (4, WHY_NO_FIT),
    ],
)
def test_a_replay_sharing_no_kernel_name_says_why_without_aligning(
    tmp_path: Path, alignments: list[int], replayed: int, why: str
) -> None:
    graphs = [(f"k_{g}", [1, 1, 1]) for g in range(50)]
    captures, _ = read_captures([_capture(tmp_path / "capture.json", graphs)])
    events = json.loads(_replay(tmp_path / "replay.json", [("other", [1, 1, 1])]).read_text())["traceEvents"]
    kernel = events[1]
    events[2:] = [{**kernel, "ts": kernel["ts"] + 10 * i} for i in range(1, replayed)]
    (tmp_path / "replay.json").write_text(json.dumps({"traceEvents": events}))
    facts = ingest_trace(tmp_path / "replay.json", captures=captures).facts["graphs"]
    assert facts["unmatched"] == {why: 1}
    assert alignments[0] == 0
