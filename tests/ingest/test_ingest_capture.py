"""Graph replays get launcher and shapes from a profiled capture; nothing is ever attached to
the wrong kernel. The real pair is the MI300X SGLang decode (replay + its batch-32 capture);
CUDA-style and damaged pairs are SYNTHETIC, derived from it by tests/support/graph_synth.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app
from kernel_atlas.ingest.capture import (
    LINK_GRAPH_CAPTURE,
    WHY_AMBIGUOUS,
    WHY_NO_FIT,
    WHY_UNPLACED,
    inductor_grid,
    read_capture,
)
from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths, ingest_trace
from tests.support import graph_synth as synth
from tests.support.traces import trace_path

runner = CliRunner()

# Replayed kernels (GPU order under the one hipGraphLaunch, correlation 92178) and what the
# capture trace says about the launch at the same position, read off the JSON: the
# hip*LaunchKernel with that correlation names the kernel in `args.kernel`; the cpu_op whose
# `External id` equals the launch's (and which contains it in time) gives name and Input Dims.
HAND_CHECKED = {
    0: {
        "kernel": "void at::native::vectorized_gather_kernel<16, long>",
        "capture_correlation": 66157,
        "external_id": 157709,
        "cpu_op": "aten::gather",
        "input_dims": [[151936, 4096], [], [32, 4096], [], [32, 4096]],
    },
    2: {
        "kernel": "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN",
        "capture_correlation": 66164,
        "external_id": 157725,
        "cpu_op": "aten::mm",
        "input_dims": [[32, 4096], [4096, 6144]],
    },
    7: {
        "kernel": "void rotary_embedding_kernel<c10::BFloat16, true>",
        "capture_correlation": 66173,
        "external_id": 157762,
        "cpu_op": "sgl_kernel::rotary_embedding",
        "input_dims": [[32], [32, 4096], [32, 1024], [], [41216, 128], []],
    },
    543: {
        "kernel": "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda",
        "capture_correlation": 67641,
        "external_id": 161254,
        "cpu_op": "aten::copy_",
        "input_dims": [[32, 151936], [32, 151936], []],
    },
}


@pytest.fixture(scope="module")
def real_pair() -> tuple[pd.DataFrame, dict]:
    result = ingest_paths([trace_path(synth.REPLAY)], captures=[trace_path(synth.CAPTURE)])
    return result.frame, result.facts["traces"][0]


def graph_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["graph_launch"]].sort_values("ts_us").reset_index(drop=True)


def test_hand_checked_kernels_get_their_captured_launch(real_pair: tuple[pd.DataFrame, dict]) -> None:
    frame, _ = real_pair
    capture = synth.load(synth.CAPTURE)["traceEvents"]
    launch_by_corr = {e["args"]["correlation"]: e for e in capture if "LaunchKernel" in e.get("name", "")}
    op_by_ext = {e["args"]["External id"]: e for e in capture if e.get("cat") == "cpu_op"}
    rows = graph_rows(frame)
    assert len(rows) == 544
    for position, expected in HAND_CHECKED.items():
        row = rows.iloc[position]
        launch = launch_by_corr[expected["capture_correlation"]]
        op = op_by_ext[expected["external_id"]]
        # the literal values are what the capture JSON says
        assert launch["args"]["kernel"] == row["name"] and launch["args"]["External id"] == expected["external_id"]
        assert op["name"] == expected["cpu_op"] and op["args"]["Input Dims"] == expected["input_dims"]
        assert op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]
        # and what ingest attached
        assert str(row["name"]).startswith(expected["kernel"])
        assert row["capture_correlation"] == expected["capture_correlation"]
        assert row["cpu_op"] == expected["cpu_op"] and row["launcher"] is not None
        assert json.loads(row["input_dims"]) == expected["input_dims"]
        assert row["link"] == LINK_GRAPH_CAPTURE and bool(row["graph_launch"])
        assert "nn.Module" not in str(row["call_stack"]) or row["module"]


def test_real_pair_covers_all_graph_time_and_says_so(real_pair: tuple[pd.DataFrame, dict]) -> None:
    frame, facts = real_pair
    rows = graph_rows(frame)
    kernels = rows[rows["kind"] == "kernel"]
    covered = kernels[kernels["launcher"].notna() & kernels["input_dims"].notna()]
    assert covered["dur_us"].sum() / kernels["dur_us"].sum() >= 0.95
    graphs = facts["graphs"]
    assert graphs["launches"] == 1 and graphs["matched"] == 1 and graphs["unmatched"] == {}
    assert graphs["with_shapes_pct"] == pytest.approx(100.0)
    assert graphs["kernel_time_us"] == pytest.approx(9656.404)  # sum of the 544 replayed durations
    assert list(graphs["matched_to"]) == [f"{synth.CAPTURE}.json.gz graph 1 (capture_32_DECODE)"]
    # one new op call per captured op call: the GEMM's call holds only the GEMM
    gemm = rows.iloc[2]
    assert (frame["cpu_op_id"] == gemm["cpu_op_id"]).sum() == 1


def test_matched_kernels_are_costed_and_replayable(tmp_path: Path) -> None:
    from kernel_atlas.replay.runner import targets_from_output
    from kernel_atlas.report.build import build_report

    result = ingest_paths([trace_path(synth.REPLAY)], captures=[trace_path(synth.CAPTURE)])
    out = tmp_path / "out"
    write_outputs(result, out)
    report = build_report(out, None, tmp_path / "r.html")
    kernels = report.analysis.kernels
    gemm = kernels[(kernels["capture_correlation"] == 66164)]
    # aten::mm [32,4096]·[4096,6144]: 2·32·4096·6144 FLOP
    assert gemm["flops"].tolist() == [2 * 32 * 4096 * 6144]
    graph = kernels[kernels["graph_launch"] & (kernels["kind"] == "kernel")]
    assert (graph["role"] != "no shapes").all()  # costed, or a cost model's own reason
    assert graph.loc[graph["category"] == "gemm", "flops"].notna().all()
    targets = targets_from_output(out)
    assert any(t.launcher == "aten::mm" and json.loads(t.input_dims) == [[32, 4096], [4096, 6144]] for t in targets)


def test_cli_capture_option(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["ingest", str(trace_path(synth.REPLAY)), "--capture", str(trace_path(synth.CAPTURE)), "-o", str(out)]
    cli = runner.invoke(app, args)
    assert cli.exit_code == 0, cli.output
    output = " ".join(cli.output.split())
    assert "1 of 1 graphs matched" in output and "100.0% of graph-replayed kernel time" in output
    table = pd.read_parquet(out / "kernels.parquet")
    assert (table["link"] == LINK_GRAPH_CAPTURE).sum() == 544
    assert table["capture_correlation"].notna().sum() == 544 and not table["shapes_inferred"].any()


def test_capture_of_another_model_attaches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["ingest", str(trace_path("a100_cudagraph_rank0")), "--capture", str(trace_path(synth.CAPTURE))]
    cli = runner.invoke(app, [*args, "-o", str(out)])
    assert cli.exit_code == 0, cli.output
    assert "0 of 70 graphs matched a captured graph: 70 " + WHY_NO_FIT in " ".join(cli.output.split())
    table = pd.read_parquet(out / "kernels.parquet")
    assert not (table["link"] == LINK_GRAPH_CAPTURE).any() and table["capture_correlation"].isna().all()


def test_capture_directory(tmp_path: Path) -> None:
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    (folder / "bs_32_rank0.json.gz").write_bytes(trace_path(synth.CAPTURE).read_bytes())
    (folder / "notes.txt").write_text("not a trace")
    result = ingest_paths([trace_path(synth.REPLAY)], captures=[folder])
    assert result.facts["traces"][0]["graphs"]["matched_to"] == {"bs_32_rank0.json.gz graph 1 (capture_32_DECODE)": 1}
    cli = runner.invoke(app, ["ingest", str(trace_path(synth.REPLAY)), "--capture", str(tmp_path)])
    assert cli.exit_code == 2 and "no capture traces" in cli.output


def test_missing_capture_file_is_one_line_error(tmp_path: Path) -> None:
    cli = runner.invoke(app, ["ingest", str(trace_path(synth.REPLAY)), "--capture", str(tmp_path / "nope.json")])
    assert cli.exit_code == 2 and "nope.json: no such file" in cli.output


def test_a_trace_without_a_capture_is_reported(tmp_path: Path) -> None:
    result = ingest_paths([trace_path(synth.REPLAY)], captures=[trace_path("a100_cudagraph_rank0")])
    assert any("no stream capture in this trace" in w for w in result.warnings)
    assert result.facts["traces"][0]["graphs"]["matched"] == 0
    assert not (result.frame["link"] == LINK_GRAPH_CAPTURE).any()


def attached_to_its_own_kernel(frame: pd.DataFrame, capture: dict) -> None:
    """Every attached row's captured launch names the row's kernel (in the ROCm capture JSON)."""
    names = {
        e["args"]["correlation"]: e["args"].get("kernel")
        for e in capture["traceEvents"]
        if "LaunchKernel" in e.get("name", "")
    }
    attached = frame[frame["link"] == LINK_GRAPH_CAPTURE]
    assert all(names[int(c)] == str(n) for c, n in zip(attached["capture_correlation"], attached["name"], strict=True))


def test_shuffled_capture_attaches_only_to_the_right_kernels(tmp_path: Path) -> None:
    doc = synth.load(synth.CAPTURE, lean=True)
    launches = synth.captured_launches(doc)
    order = list(range(len(launches)))
    random.Random(9).shuffle(order[100:140])  # a stretch of launches in the wrong order
    shuffled = synth.clone(doc)
    moved = synth.captured_launches(shuffled)
    for event, source in zip(moved[100:140], [launches[i] for i in order[100:140]], strict=True):
        event["args"]["kernel"] = source["args"]["kernel"]
    path = synth.save(shuffled, tmp_path / "shuffled.json")
    frame = ingest_trace(trace_path(synth.REPLAY), captures=read_capture(path)).frame
    attached_to_its_own_kernel(frame, shuffled)


def test_truncated_capture_is_unmatched_and_a_few_drops_are_tolerated(tmp_path: Path) -> None:
    doc = synth.load(synth.CAPTURE, lean=True)
    launches = synth.captured_launches(doc)
    truncated = synth.clone(doc)
    gone = {id(e) for e in synth.captured_launches(truncated)[-100:]}
    truncated["traceEvents"] = [e for e in truncated["traceEvents"] if id(e) not in gone]
    result = ingest_trace(trace_path(synth.REPLAY), captures=read_capture(synth.save(truncated, tmp_path / "t.json")))
    assert result.facts["graphs"]["unmatched"] == {WHY_NO_FIT: 1}
    assert not (result.frame["link"] == LINK_GRAPH_CAPTURE).any()

    dropped = synth.clone(doc)  # the profiler lost three launches of the capture
    lost = {launches[i]["args"]["correlation"] for i in (10, 200, 400)}
    dropped["traceEvents"] = [e for e in dropped["traceEvents"] if e.get("args", {}).get("correlation") not in lost]
    frame = ingest_trace(
        trace_path(synth.REPLAY), captures=read_capture(synth.save(dropped, tmp_path / "d.json"))
    ).frame
    assert (frame["link"] == LINK_GRAPH_CAPTURE).sum() == 541
    attached_to_its_own_kernel(frame, dropped)


# --- SYNTHETIC CUDA-style pairs: the capture names no kernel --------------------------------


@pytest.fixture(scope="module")
def cuda_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("cuda")
    capture = synth.load(synth.CAPTURE, lean=True)
    replay = synth.with_replay_geometry(synth.cuda_style(synth.load(synth.REPLAY)), capture)
    return synth.save(replay, tmp / "replay.json"), synth.save(synth.cuda_style(capture), tmp / "capture.json"), capture


def test_cuda_style_capture_matches_by_order_and_count(cuda_pair: tuple[Path, Path, dict]) -> None:
    replay, capture, rocm_capture = cuda_pair
    graphs = read_capture(capture)
    assert len(graphs) == 1 and all(name is None for name in graphs[0].name)
    frame = ingest_trace(replay, captures=graphs).frame
    rows = graph_rows(frame)
    assert (rows["link"] == LINK_GRAPH_CAPTURE).all()
    for position, expected in HAND_CHECKED.items():
        assert rows.iloc[position]["cpu_op"] == expected["cpu_op"]
        assert json.loads(rows.iloc[position]["input_dims"]) == expected["input_dims"]
    attached_to_its_own_kernel(frame, rocm_capture)


def test_cuda_style_count_difference_is_not_guessed(cuda_pair: tuple[Path, Path, dict], tmp_path: Path) -> None:
    replay_path, capture, _ = cuda_pair
    replay = json.loads(replay_path.read_text())
    lost = synth.replayed_kernels(replay)[300]  # the profiler dropped one replayed kernel
    replay["traceEvents"] = [e for e in replay["traceEvents"] if e is not lost]
    result = ingest_trace(synth.save(replay, tmp_path / "r.json"), captures=read_capture(capture))
    assert result.facts["graphs"]["unmatched"] == {WHY_UNPLACED: 1}
    assert not (result.frame["link"] == LINK_GRAPH_CAPTURE).any()


def test_cuda_style_extra_memset_leaves_kernels_placed(cuda_pair: tuple[Path, Path, dict], tmp_path: Path) -> None:
    replay_path, capture, rocm_capture = cuda_pair
    replay = json.loads(replay_path.read_text())
    first = synth.replayed_kernels(replay)[0]
    memset = {
        "ph": "X",
        "cat": "gpu_memset",
        "name": "Memset (Device)",
        "pid": first["pid"],
        "tid": first["tid"],
        "ts": first["ts"] - 3.0,
        "dur": 1.0,
        "args": {
            "device": 9,
            "stream": first["args"]["stream"],
            "correlation": first["args"]["correlation"],
            "bytes": 64,
        },
    }
    replay["traceEvents"].append(memset)
    frame = ingest_trace(synth.save(replay, tmp_path / "r.json"), captures=read_capture(capture)).frame
    rows = graph_rows(frame)
    assert (rows.loc[rows["kind"] == "kernel", "link"] == LINK_GRAPH_CAPTURE).all()
    assert rows.loc[rows["kind"] == "memset", "link"].tolist() != [LINK_GRAPH_CAPTURE]
    attached_to_its_own_kernel(frame, rocm_capture)


def two_batch_capture(doc: dict, warmups: bool) -> dict:
    """SYNTHETIC: the batch-32 capture plus a batch-16 capture of the same kernels (other Input
    Dims, other grids in its warm-up), optionally each preceded by an eager warm-up run."""
    two = synth.clone(doc)
    extra = synth.copy_capture(doc, shift=1e6, id_offset=10_000_000, dims=synth.batch_16)
    if warmups:
        extra += synth.copy_capture(doc, shift=-2e6, id_offset=20_000_000, eager=True)
        extra += synth.copy_capture(
            doc,
            shift=-1e6,
            id_offset=30_000_000,
            dims=synth.batch_16,
            eager=True,
            geometry=lambda grid: [max(1, grid[0] // 2), *grid[1:]],
        )
    two["traceEvents"] += extra
    return synth.cuda_style(two)


def test_two_batch_sizes_without_names_are_ambiguous(cuda_pair: tuple[Path, Path, dict], tmp_path: Path) -> None:
    replay, _, rocm_capture = cuda_pair
    capture = synth.save(two_batch_capture(rocm_capture, warmups=False), tmp_path / "c.json")
    graphs = read_capture(capture)
    assert [len(g) for g in graphs] == [544, 544]
    result = ingest_trace(replay, captures=graphs)
    assert result.facts["graphs"]["unmatched"] == {WHY_AMBIGUOUS: 1}
    assert not (result.frame["link"] == LINK_GRAPH_CAPTURE).any()


def test_warmup_runs_name_cuda_launches_and_pick_the_batch(cuda_pair: tuple[Path, Path, dict], tmp_path: Path) -> None:
    replay, _, rocm_capture = cuda_pair
    capture = synth.save(two_batch_capture(rocm_capture, warmups=True), tmp_path / "c.json")
    graphs = read_capture(capture)
    # aiter::rmsnorm at the same shapes launches two template variants (the flag that picks one
    # is not a recorded input): its twins disagree, and its 72 launches per graph stay unnamed
    assert [sum(n is not None for n in g.name) for g in graphs] == [544 - 72, 544 - 72]
    result = ingest_trace(replay, captures=graphs)
    assert result.facts["graphs"]["matched_to"] == {"c.json graph 1 (capture_32_DECODE)": 1}
    rows = graph_rows(result.frame)
    assert json.loads(rows.iloc[2]["input_dims"]) == [[32, 4096], [4096, 6144]]
    attached_to_its_own_kernel(result.frame, rocm_capture)


def test_identical_pieces_are_taken_in_capture_order(tmp_path: Path) -> None:
    """SYNTHETIC piecewise case: the capture holds the same graph twice (same shapes), the replay
    launches it twice; the launches take the captured graphs in order."""
    capture = synth.load(synth.CAPTURE, lean=True)
    capture["traceEvents"] += synth.copy_capture(capture, shift=1e6, id_offset=10_000_000)
    replay = synth.load(synth.REPLAY)
    graph = next(e for e in replay["traceEvents"] if e.get("name") == "hipGraphLaunch")
    second = synth.clone(graph)
    second["ts"] += 1e5
    second["args"]["correlation"] += 10_000_000
    kernels = [synth.clone(k) for k in synth.replayed_kernels(replay)]
    for kernel in kernels:
        kernel["ts"] += 1e5
        kernel["args"]["correlation"] += 10_000_000
    replay["traceEvents"] += [second, *kernels]
    result = ingest_trace(
        synth.save(replay, tmp_path / "r.json"), captures=read_capture(synth.save(capture, tmp_path / "c.json"))
    )
    facts = result.facts["graphs"]
    assert facts["matched"] == 2 and set(facts["matched_to"].values()) == {1}
    frame = result.frame
    first_launch = frame[frame["correlation"] == graph["args"]["correlation"]]
    second_launch = frame[frame["correlation"] == graph["args"]["correlation"] + 10_000_000]
    assert first_launch["capture_correlation"].max() < 10_000_000 <= second_launch["capture_correlation"].min()


def test_multi_stream_graph_is_merged_by_name(tmp_path: Path) -> None:
    """SYNTHETIC: every third replayed kernel runs on a second stream, 3 µs earlier than it did."""
    replay = synth.load(synth.REPLAY)
    for i, kernel in enumerate(synth.replayed_kernels(replay)):
        if i % 3 == 0:
            kernel["tid"] = kernel["args"]["stream"] = 7
            kernel["ts"] -= 3.0
    capture = synth.load(synth.CAPTURE, lean=True)
    frame = ingest_trace(
        synth.save(replay, tmp_path / "r.json"), captures=read_capture(trace_path(synth.CAPTURE))
    ).frame
    assert (graph_rows(frame)["link"] == LINK_GRAPH_CAPTURE).all()
    attached_to_its_own_kernel(frame, capture)


def test_inductor_grid_from_recorded_tiles() -> None:
    """The MI300X torch.compile trace: ceil(xnumel / XBLOCK) is each Triton kernel's grid,
    xnumel being the last integer (pointwise) or the one before r0numel (reduction)."""
    events = synth.load("mi300x_torch_compile_llama_block")["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("triton")}
    grids = {
        k["name"]: (inductor_grid(ops[k["args"]["External id"]]["name"], ops[k["args"]["External id"]]["args"]), k)
        for k in events
        if k.get("cat") == "kernel" and k["name"].startswith("triton")
    }
    # 32768 rows / XBLOCK 2; 268435456 / 1024; 67108864 / 512 (sizes and tiles from the JSON)
    assert grids["triton_red_fused_add_mean_mul_pow_rsqrt_0"][0] == "[16384, 1, 1]"
    assert grids["triton_poi_fused__unsafe_view_mul_silu_2"][0] == "[262144, 1, 1]"
    assert grids["triton_poi_fused__unsafe_view_add_3"][0] == "[131072, 1, 1]"
    assert all(json.loads(hint) == kernel["args"]["grid"] for hint, kernel in grids.values())


def _inductor_pair(tmp_path: Path, replay_grid: list[int]) -> tuple[Path, Path]:
    """SYNTHETIC CUDA pair, written by hand: a capture trace with the same compiled graph
    captured at 4096 and at 8192 rows (an Inductor pointwise kernel, then a GEMM), and a replay
    of one of them whose Triton kernel ran with `replay_grid`."""
    events: list[dict] = []
    corr = 100
    for n, t0 in ((4096, 1000.0), (8192, 2000.0)):
        host = [
            ("cuda_runtime", "cudaStreamBeginCapture", t0, 2.0, {}),
            (
                "cpu_op",
                "triton_poi_fused_add_0",
                t0 + 10,
                10.0,
                {
                    "Input Dims": [[n], [n], []],
                    "Input type": ["float", "float", "Scalar"],
                    "Concrete Inputs": ["", "", str(n)],
                    "kernel_kwargs": "XBLOCK=1024",
                    "num_warps": 4,
                },
            ),
            ("cuda_driver", "cuLaunchKernel", t0 + 12, 2.0, {}),
            (
                "cpu_op",
                "aten::mm",
                t0 + 30,
                10.0,
                {"Input Dims": [[n // 128, 128], [128, 64]], "Input type": ["float", "float"]},
            ),
            ("cuda_runtime", "cudaLaunchKernel", t0 + 32, 2.0, {}),
            ("cuda_runtime", "cudaStreamEndCapture", t0 + 50, 2.0, {}),
        ]
        for cat, name, ts, dur, args in host:
            corr += 1
            events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": 1,
                    "tid": 1,
                    "ts": ts,
                    "dur": dur,
                    "args": {**args, "correlation": corr, "External id": corr},
                }
            )
    capture = synth.save({"traceEvents": events, "cuda_runtime_version": 12080}, tmp_path / "capture.json")
    graph = {"args": {"device": 0, "stream": 7, "correlation": 999}, "pid": 0, "tid": 7, "ph": "X"}
    replay_events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 5.0,
            "args": {"correlation": 999},
        },
        {
            **graph,
            "cat": "kernel",
            "name": "triton_poi_fused_add_0",
            "ts": 20.0,
            "dur": 3.0,
            "args": {**graph["args"], "grid": replay_grid, "block": [128, 1, 1]},
        },
        {
            **graph,
            "cat": "kernel",
            "name": "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n",
            "ts": 24.0,
            "dur": 9.0,
            "args": {**graph["args"], "grid": [1, 1, 1], "block": [128, 1, 1]},
        },
    ]
    replay = synth.save({"traceEvents": replay_events, "cuda_runtime_version": 12080}, tmp_path / "replay.json")
    return replay, capture


@pytest.mark.parametrize(("grid", "rows"), [([4, 1, 1], 4096), ([8, 1, 1], 8192), ([5, 1, 1], None)])
def test_inductor_grids_pick_the_batch_size(tmp_path: Path, grid: list[int], rows: int | None) -> None:
    replay, capture = _inductor_pair(tmp_path, grid)
    result = ingest_trace(replay, captures=read_capture(capture))
    frame = result.frame.sort_values("ts_us")
    if rows is None:  # no captured graph implies this grid: two fits, different shapes
        assert result.facts["graphs"]["unmatched"] == {WHY_AMBIGUOUS: 1}
        assert not (frame["link"] == LINK_GRAPH_CAPTURE).any()
        return
    assert (frame["link"] == LINK_GRAPH_CAPTURE).all()
    assert [json.loads(d) for d in frame["input_dims"]] == [[[rows], [rows], []], [[rows // 128, 128], [128, 64]]]
    assert frame["cpu_op"].tolist() == ["triton_poi_fused_add_0", "aten::mm"]


def test_the_alignment_keeps_only_the_diagonals_it_reaches_and_stops_at_4096_edits() -> None:
    """Replayed kinds a a b c and captured a b b c: one deletion and one insertion (2 edits),
    pairs (0,0) (2,1) (3,3) — the way back read from each step's reachable diagonals alone. And
    5,000 kernels against 5,000 others (10,000 edits) are no fit even where 20,000 would be
    tolerated: past MAX_ALIGN_EDITS the alignment's memory (its square) is not spent."""
    from kernel_atlas.ingest.capture import MAX_ALIGN_EDITS, _diff, _Items

    def items(kinds: list[int]) -> _Items:
        return _Items(kind=kinds, name=[-1] * len(kinds), grid=[-1] * len(kinds), block=[-1] * len(kinds))

    assert _diff(items([0, 0, 1, 2]), items([0, 1, 1, 2]), 10) == (2, [(0, 0), (2, 1), (3, 3)])
    assert MAX_ALIGN_EDITS == 4096
    assert _diff(items([0] * 5000), items([1] * 5000), 20000) is None


def test_captured_graphs_past_the_limit_are_not_read(
    cuda_pair: tuple[Path, Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two capture traces of one graph each, with MAX_CAPTURED_GRAPHS = 1: the first graph is
    read, the second is counted in one warning (50,000 captured graphs took 1.2 GB); the replay
    still matches the graph read."""
    from kernel_atlas.ingest import capture as capture_module

    replay, capture, _ = cuda_pair
    second = tmp_path / "capture2.json"
    second.write_bytes(capture.read_bytes())
    monkeypatch.setattr(capture_module, "MAX_CAPTURED_GRAPHS", 1)
    graphs, warnings = capture_module.read_captures([capture, second])
    assert len(graphs) == 1 and graphs[0].source == capture.name
    assert warnings == ["1 captured graphs past the first 1 were not read (each holds its launches' shapes and "
                        "stacks while replays are matched)"]  # fmt: skip
    assert capture_module.read_capture(capture, 0).left_out == 1
    rows = graph_rows(ingest_trace(replay, captures=graphs).frame)
    assert (rows["link"] == LINK_GRAPH_CAPTURE).all()


# Hand-built captures and replays: a runtime call (a launch, a capture's begin and end, a graph
# launch) on host thread 1, and a replayed kernel on a stream
ROCM = [{"id": 0, "name": "AMD Instinct MI300X", "numSms": 304}]
ROCM_GEMM = "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1_SN"
ROCM_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


def _call(name: str, ts: float, corr: int, **args: object) -> dict:
    body = {"correlation": corr, **args}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 10, "args": body}


def _op(name: str, ts: float, ext: int, **args: object) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 18,
            "args": {"External id": ext, **args}}  # fmt: skip


def _replayed(name: str, ts: float, dur: float, stream: int, **args: object) -> dict:
    body = {"correlation": 900, "device": 0, "stream": stream, **args}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": body}


def _pair(tmp_path: Path, replay: list[dict], capture: list[dict], props: list[dict]) -> tuple[Path, Path]:
    paths = (tmp_path / "replay.json", tmp_path / "capture.json")
    for path, events in zip(paths, (replay, capture), strict=True):
        path.write_text(json.dumps({"deviceProperties": props, "traceEvents": events}))
    return paths


def test_captured_launches_outside_every_op_are_counted_without_a_launcher(tmp_path: Path) -> None:
    """A ROCm capture whose two launches (named by `args.kernel`) sit in no CPU op: their replayed
    kernels match by name but get no launcher. They were counted neither with a launcher nor
    unlinked (0 + 0 of 2); now unlinked, with why, and said."""
    capture = [_call("hipStreamBeginCapture", 1000, 1)]
    capture += [_call("hipLaunchKernel", 1021 + 20 * i, 2 + i, kernel=k) for i, k in enumerate((ROCM_GEMM, ROCM_ADD))]
    capture.append(_call("hipStreamEndCapture", 1100, 9))
    replay = [_call("hipGraphLaunch", 110, 900)]
    replay += [
        _replayed(k, 140 + 11 * i, 10, 3, grid=[1, 1, 1], block=[256, 1, 1])
        for i, k in enumerate((ROCM_GEMM, ROCM_ADD))
    ]
    replayed, captured = _pair(tmp_path, replay, capture, ROCM)
    result = ingest_paths([replayed], captures=[captured])
    (facts,) = result.facts["traces"]
    assert facts["graphs"]["matched"] == 1
    reason = "replayed from a CUDA/HIP graph whose captured launch has no enclosing CPU op"
    assert (facts["gpu_activities"], facts["with_launcher"], facts["unlinked"]) == (2, 0, {reason: 2})
    assert any(f"2 of 2 GPU activities have no launcher (2 {reason})" in w for w in result.warnings)


H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]
GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
ADD_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)"
MUL_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<c10::BFloat16>>(int)"
BF16 = "c10::BFloat16"


def _cuda_pair(tmp_path: Path, captured_ops: list[str]) -> tuple[Path, Path]:
    """A replay whose graph runs a GEMM, an add and a mul (stream 3), and a CUDA capture (its
    launches name no kernel) of three ops in the order given."""
    dims = {"aten::mm": [[32, 4096], [4096, 4096]], "aten::add": [[32, 4096], [32, 4096], []]}
    dims["aten::mul"] = [[32, 4096], [32, 4096]]
    capture = [_call("cudaStreamBeginCapture", 1000, 1)]
    for i, op in enumerate(captured_ops):
        capture.append(_op(op, 1020 + 20 * i, 50 + i, **{"Input Dims": dims[op], "Input type": [BF16] * len(dims[op])}))
        capture.append(_call("cudaLaunchKernel", 1021 + 20 * i, 2 + i))
    capture.append(_call("cudaStreamEndCapture", 1100, 9))
    replay = [_call("cudaGraphLaunch", 110, 900)]
    replay += [
        _replayed(k, 140 + 11 * i, 10, 3, grid=[1, 1, 1], block=[256, 1, 1])
        for i, k in enumerate((GEMM_KERNEL, ADD_KERNEL, MUL_KERNEL))
    ]
    return _pair(tmp_path, replay, capture, H100)


def test_a_cuda_capture_of_other_ops_is_not_attached(tmp_path: Path) -> None:
    """A CUDA capture names no kernel, so one of other ops with as many launches aligned by order
    and count: the GEMM took aten::mul's shapes, the add kernel aten::mm's (costed as a GEMM at
    SOL 101.7 %). Two of its three pairs contradict the kernels' own names: not attached, said."""
    replay, capture = _cuda_pair(tmp_path, ["aten::mul", "aten::mm", "aten::add"])
    result = ingest_paths([replay], captures=[capture])
    graphs = result.facts["traces"][0]["graphs"]
    assert graphs["matched"] == 0
    assert graphs["unmatched"] == {
        "the captured launches' ops name other work than most replayed kernels they pair with": 1
    }
    assert result.frame["input_dims"].isna().all()
    # the capture of the graph's own ops, in its order, is attached
    replay, capture = _cuda_pair(tmp_path, ["aten::mm", "aten::add", "aten::mul"])
    result = ingest_paths([replay], captures=[capture])
    assert result.facts["traces"][0]["graphs"]["matched"] == 1
    assert result.frame.sort_values("ts_us")["launcher"].tolist() == ["aten::mm", "aten::add", "aten::mul"]


def _inductor_trace(path: Path, n: int, capture: bool) -> Path:
    """An Inductor graph at batch `n`: a pointwise kernel over n·4096 elements with XBLOCK 1024
    (grid n·4096/1024) and a reduction per row (grid n) — replayed by one cudaGraphLaunch, or
    captured (CUDA: its launches name no kernel; its ops record the tiles and sizes)."""
    kernels = [
        ("triton_poi_fused_add_mul_0", [[n, 4096], [n, 4096]], "XBLOCK=1024", ["", "", str(n * 4096)], n * 4),
        ("triton_red_fused_sum_1", [[n, 4096], [n]], "XBLOCK=1,R0_BLOCK=1024", ["", "", str(n), "4096"], n),
    ]
    if capture:
        events = [_call("cudaStreamBeginCapture", 1000, 1)]
        for i, (name, dims, tiles, sizes, _) in enumerate(kernels):
            recorded = {"Input Dims": dims, "Input type": [BF16] * 2, "Concrete Inputs": sizes}
            events.append(_op(name, 1020 + 20 * i, 50 + i, kernel_kwargs=tiles, kernel_backend="triton", **recorded))
            events.append(_call("cudaLaunchKernel", 1021 + 20 * i, 2 + i))
        events.append(_call("cudaStreamEndCapture", 1100, 9))
    else:
        events = [_call("cudaGraphLaunch", 110, 900)]
        events += [
            _replayed(name, 140 + 11 * i, 10, 3, grid=[grid, 1, 1], block=[128, 1, 1])
            for i, (name, _, _, _, grid) in enumerate(kernels)
        ]
    path.write_text(json.dumps({"deviceProperties": H100, "traceEvents": events}))
    return path


def test_the_only_capture_offered_is_not_attached_where_its_grids_differ(tmp_path: Path) -> None:
    """Batch 32 replayed (grids 128 and 32), batch 16 captured (its tiles and sizes imply 64 and
    16): the one capture fitted by kernel count and was attached, half the shapes; the grids said
    otherwise, and were heard only between two captures."""
    capture = _inductor_trace(tmp_path / "capture16.json", 16, capture=True)
    result = ingest_paths([_inductor_trace(tmp_path / "replay32.json", 32, capture=False)], captures=[capture])
    graphs = result.facts["traces"][0]["graphs"]
    assert graphs["matched"] == 0
    assert graphs["unmatched"] == {
        "the grids its Inductor launches imply are not the replayed ones (another batch size?)": 1
    }
    result = ingest_paths([_inductor_trace(tmp_path / "replay16.json", 16, capture=False)], captures=[capture])
    assert result.facts["traces"][0]["graphs"]["matched"] == 1
    assert result.frame.sort_values("ts_us")["input_dims"].tolist() == ["[[16,4096],[16,4096]]", "[[16,4096],[16]]"]


def test_launches_either_of_two_streams_could_take_are_not_guessed(tmp_path: Path) -> None:
    """A ROCm graph on two streams whose capture launches one GEMM kernel for two aten::mm of
    different shapes: stream 4 runs one of them, stream 3 the other and then the add. Either
    assignment keeps each stream's order: the GEMMs are left without a captured launch (one
    took the other's shapes), the add — unambiguous — gets its own."""
    ops = [("aten::mm", [[32, 4096], [4096, 4096]], ROCM_GEMM), ("aten::mm", [[32, 4096], [4096, 14336]], ROCM_GEMM)]
    ops.append(("aten::add", [[32, 4096], [32, 4096]], ROCM_ADD))
    capture = [_call("hipStreamBeginCapture", 1000, 1)]
    for i, (op, dims, kernel) in enumerate(ops):
        capture.append(_op(op, 1020 + 20 * i, 50 + i, **{"Input Dims": dims, "Input type": [BF16] * 2}))
        capture.append(_call("hipLaunchKernel", 1021 + 20 * i, 2 + i, kernel=kernel))
    capture.append(_call("hipStreamEndCapture", 1100, 9))
    replay = [_call("hipGraphLaunch", 110, 900)]
    replay += [
        _replayed(k, ts, dur, stream)
        for k, stream, ts, dur in ((ROCM_GEMM, 4, 140, 30), (ROCM_GEMM, 3, 141, 10), (ROCM_ADD, 3, 160, 5))
    ]
    replayed, captured = _pair(tmp_path, replay, capture, ROCM)
    frame = ingest_paths([replayed], captures=[captured]).frame.sort_values("ts_us")
    assert frame["input_dims"].isna().tolist() == [True, True, False]
    assert frame["launcher"].tolist()[2] == "aten::add"
