"""Why the GPU waits, and the module / step / timeline views, on a run of several ranks.

The fleet is three real single-GPU traces given ranks by their file names (BERT on an H100 as
rank 0, ViT on an H100 as rank 1, a compiled Llama block on an MI300X as rank 2). Each rank is
also reported alone; the fleet's per-rank rows must equal those, its totals their sums, its
settings the run's (not summed). Independent checks: per-device idle rows against the idle time
that `atlas ingest` wrote into summary.json (span − busy, another computation), and launch counts,
module and step times against direct DuckDB queries of the kernels dataset.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernel_atlas.analysis.waits_fold import combine_waits_facts
from kernel_atlas.cli import app
from kernel_atlas.report.build import build_report
from kernel_atlas.report.units import fmt_us
from kernel_atlas.report.waits_view import print_waits
from kernel_atlas.store.outputs import kernels_sql
from tests.support.traces import trace_path

runner = CliRunner()
RANKS = {0: "h100_bert_small_infer", 1: "h100_vit_image_classify_infer", 2: "mi300x_torch_compile_llama_block"}
KERNEL_WAIT_US = 25.0  # not the default: a summed setting would read 75


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fleet-waits")
    (root / "ranks").mkdir()
    for rank, stem in RANKS.items():
        shutil.copy(trace_path(stem), root / "ranks" / f"{stem}_rank{rank}.json.gz")
    out = {"fleet": root / "fleet"}
    args = ["--kernel-wait-us", str(KERNEL_WAIT_US)]
    assert runner.invoke(app, ["ingest", str(root / "ranks"), "-o", str(out["fleet"]), "-q"]).exit_code == 0
    result = runner.invoke(app, ["report", str(out["fleet"]), *args])
    assert result.exit_code == 0, result.output
    for rank, stem in RANKS.items():
        single = root / f"single{rank}"
        trace = root / "ranks" / f"{stem}_rank{rank}.json.gz"
        assert runner.invoke(app, ["ingest", str(trace), "-o", str(single), "-q"]).exit_code == 0
        assert runner.invoke(app, ["report", str(single), *args]).exit_code == 0
        out[f"single{rank}"] = single
    return out


def _facts(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _rank_rows(table: pd.DataFrame, rank: int) -> pd.DataFrame:
    return table[table["rank"] == rank].reset_index(drop=True)


@pytest.mark.parametrize("name", ["idle", "idle_hta", "idle_causes", "graph_candidates"])
def test_per_rank_rows_equal_the_single_rank_reports(run: dict[str, Path], name: str) -> None:
    fleet = pd.read_parquet(run["fleet"] / f"{name}.parquet")
    everyone = name.startswith("idle") and name != "idle_causes"
    assert sorted(fleet["rank"].unique()) == ([0, 1, 2] if everyone else [0, 1])  # rank 2: no host waits
    for rank in RANKS:
        single = pd.read_parquet(run[f"single{rank}"] / f"{name}.parquet")
        assert set(single["rank"]) <= {rank}
        mine = _rank_rows(fleet, rank)
        if name == "graph_candidates":  # the fleet's are ranked by saving across ranks
            mine = mine.sort_values("saving_us", ascending=False, kind="stable").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, single.reset_index(drop=True), check_dtype=False)


def test_per_device_idle_rows_sum_to_the_idle_time_of_summary_json(run: dict[str, Path]) -> None:
    idle = pd.read_parquet(run["fleet"] / "idle.parquet")
    summary = json.loads((run["fleet"] / "summary.json").read_text())
    devices = [d for t in summary["traces"] for d in t["devices"]]
    assert [(d["rank"], d["device"]) for d in devices] == [(0, 0), (1, 0), (2, 2)]
    for d in devices:
        rows = idle[(idle["rank"] == d["rank"]) & (idle["device"] == d["device"]) & idle["stream"].isna()]
        assert sorted(rows["category"]) == ["host_wait", "kernel_wait", "other"]
        assert rows["idle_us"].sum() == pytest.approx(d["idle_us"], abs=1e-3)
    # BERT's host waits on stream 7 include the four derived by hand in test_idle.py
    bert = idle[(idle["rank"] == 0) & (idle["stream"] == 7) & (idle["category"] == "host_wait")]
    assert float(bert["idle_us"].iloc[0]) >= 37.728 + 16.288 + 102.016 + 153.855


def test_fleet_facts_combine_the_ranks_without_summing_settings(run: dict[str, Path]) -> None:
    fleet = _facts(run["fleet"])
    singles = [_facts(run[f"single{rank}"]) for rank in RANKS]
    idle = fleet["idle"]
    assert idle["kernel_wait_us"] == KERNEL_WAIT_US and idle["basis"] == "exact"
    assert idle["devices"] == [d for s in singles for d in s["idle"]["devices"]]
    assert idle["hta"]["streams"] == [x for s in singles for x in s["idle"]["hta"]["streams"]]
    assert idle["hta"]["convention"] == singles[0]["idle"]["hta"]["convention"]
    launches = fleet["launches"]
    eager = [s["launches"]["eager_activities"] for s in singles]
    assert launches["eager_activities"] == sum(eager) > 0
    assert launches["graph_replayed"] == sum(s["launches"]["graph_replayed"] for s in singles)
    assert launches["launch_cpu_us"] == pytest.approx(sum(s["launches"]["launch_cpu_us"] for s in singles))
    bound = sum(s["launches"]["launch_bound_pct"] * n / 100 for s, n in zip(singles, eager, strict=True))
    assert launches["launch_bound_pct"] == pytest.approx(100 * bound / sum(eager))
    assert launches["launch_p50_us"] is None and launches["delay_p50_us"] is None and "median" in launches["note"]
    assert launches["per_rank"] == [
        {"rank": rank, "launch_p50_us": s["launches"]["launch_p50_us"], "delay_p50_us": s["launches"]["delay_p50_us"]}
        for rank, s in zip(RANKS, singles, strict=True)
    ]
    graphs = fleet["graph_candidates"]
    assert graphs["short_kernel_us"] == 20.0
    assert graphs["count"] == sum(s["graph_candidates"]["count"] for s in singles) > 0
    assert graphs["saving_us"] == pytest.approx(sum(s["graph_candidates"]["saving_us"] for s in singles))
    assert fleet["ranks"] == 3 and all(s["ranks"] == 1 for s in singles)


def test_fleet_hta_numbers_equal_htas(run: dict[str, Path]) -> None:
    """HTA 0.5.0 on the traces alone (benchmarks/results/hta-idle-compare.json): BERT stream 7
    host wait 3653 µs, ViT stream 7 host wait 6471 µs and 20 µs of other gaps (kernel wait at
    HTA's 30 µs threshold; host waits do not depend on it)."""
    hta = pd.read_parquet(run["fleet"] / "idle_hta.parquet")
    hta = hta[hta["stream"] == 7].set_index(["rank", "category"])["idle_us"]
    assert hta[(0, "host_wait")] == 3653.0
    assert hta[(1, "host_wait")] == 6471.0
    assert hta[(1, "kernel_wait")] + hta[(1, "other")] == 20.0


def test_fleet_launch_line_gives_the_ranks_medians(run: dict[str, Path]) -> None:
    per_rank = _facts(run["fleet"])["launches"]["per_rank"]
    launch = [r["launch_p50_us"] for r in per_rank]
    console = Console(width=300, record=True)
    print_waits(console, build_report(run["fleet"], kernel_wait_us=KERNEL_WAIT_US).waits)
    text = console.export_text()
    assert "launch call p50 –" not in text and "launch-to-start p50 –" not in text
    assert f"launch call p50 {fmt_us(min(launch))}–{fmt_us(max(launch))} across ranks" in text
    assert "(per-rank medians: report.json launches.per_rank)" in text


def test_fleet_launch_stats_add_up(run: dict[str, Path]) -> None:
    fleet = pd.read_parquet(run["fleet"] / "launch_stats.parquet").set_index(["level", "key"])
    singles = pd.concat([pd.read_parquet(run[f"single{rank}"] / "launch_stats.parquet") for rank in RANKS])
    singles["bound"] = singles["launch_bound_pct"] * singles["count"] / 100
    sums = singles.groupby(["level", "key"]).agg(
        count=("count", "sum"),
        launch_us=("launch_us", "sum"),
        gpu_us=("gpu_us", "sum"),
        delay_max_us=("delay_max_us", "max"),
        bound=("bound", "sum"),
    )
    assert sorted(fleet.index) == sorted(sums.index)
    sums = sums.loc[fleet.index]
    assert fleet["count"].tolist() == sums["count"].tolist()
    assert fleet["launch_us"].to_numpy() == pytest.approx(sums["launch_us"].to_numpy())
    assert fleet["launch_mean_us"].to_numpy() == pytest.approx((sums["launch_us"] / sums["count"]).to_numpy())
    assert fleet["gpu_mean_us"].to_numpy() == pytest.approx((sums["gpu_us"] / sums["count"]).to_numpy())
    assert fleet["delay_max_us"].to_numpy() == pytest.approx(sums["delay_max_us"].to_numpy())
    assert fleet["launch_bound_pct"].to_numpy() == pytest.approx((100 * sums["bound"] / sums["count"]).to_numpy())
    assert fleet["delay_p50_us"].isna().all()
    # every eagerly launched activity of the dataset, counted once per level (DuckDB, not launches.py)
    [(eager,)] = duckdb.sql(
        f"SELECT count(*) FROM {kernels_sql(run['fleet'])} WHERE launch_ts_us IS NOT NULL "
        "AND launch_dur_us IS NOT NULL AND NOT coalesce(graph_launch, false)"
    ).fetchall()
    assert fleet.loc["kernel", "count"].sum() == fleet.loc["op", "count"].sum() == eager
    assert _facts(run["fleet"])["launches"]["eager_activities"] == eager


def test_module_step_and_timeline_views_of_the_fleet(run: dict[str, Path]) -> None:
    report = build_report(run["fleet"], kernel_wait_us=KERNEL_WAIT_US)
    views = report.views
    source = kernels_sql(run["fleet"])
    modules = dict(
        duckdb.sql(f"SELECT coalesce(module, '(no module)'), sum(dur_us) FROM {source} GROUP BY 1").fetchall()
    )
    assert dict(zip(views.modules["module"], views.modules["dur_us"], strict=True)) == pytest.approx(modules)
    steps = duckdb.sql(f"SELECT step, category, sum(dur_us) FROM {source} GROUP BY 1, 2").fetchall()
    mine = {(None if pd.isna(s) else int(s), c): t for s, c, t in views.steps.itertuples(index=False)}
    assert mine == pytest.approx({(s, c): t for s, c, t in steps})
    # the timeline shows one rank: no straggler here, so the rank with the most GPU time
    per_rank = duckdb.sql(f"SELECT rank, sum(dur_us), count(*) FROM {source} GROUP BY 1 ORDER BY 2 DESC").fetchall()
    busiest, _, activities = per_rank[0]
    assert views.ranks == 3 and views.timeline.rank == busiest and views.timeline.total == activities
    assert views.timeline_note == f"rank {busiest} of 3: the most GPU time"
    html = report.files["html"].read_text()
    for figure in ("modules", "steps", "timeline"):
        assert f'id="{figure}"' in html
    assert f"rank {busiest} of 3: the most GPU time" in html and "3 ranks summed" in html


@pytest.mark.parametrize(("batch_activities", "reads"), [(50_000, [[0, 1, 2]]), (0, [[0], [1], [2]])])
def test_the_report_reads_each_rank_once(
    run: dict[str, Path], monkeypatch: pytest.MonkeyPatch, batch_activities: int, reads: list[list[int]]
) -> None:
    """Small ranks are read and analysed together (the three ranks hold 6,921 GPU activities);
    a rank larger than a batch, alone."""
    import kernel_atlas.analysis.ranks as ranks

    requested: list[list[int] | None] = []
    real = ranks.load_kernels

    def recording(out_dir: str | Path, ranks: list[int] | None = None) -> pd.DataFrame:
        requested.append(ranks)
        return real(out_dir, ranks)

    monkeypatch.setattr(ranks, "load_kernels", recording)
    monkeypatch.setattr(ranks, "BATCH_ACTIVITIES", batch_activities)
    report = build_report(run["fleet"], jobs=1)  # in this process, where the calls are seen
    assert requested == reads
    assert report.waits is not None and sorted(report.waits.breakdown["rank"].unique()) == [0, 1, 2]


def _report_files(out: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    tables = {path.name: pd.read_parquet(path) for path in sorted(out.glob("*.parquet")) if path.is_file()}
    return _facts(out), {**tables, "timeshare.csv": pd.read_csv(out / "timeshare.csv")}


def test_ranks_analysed_together_report_what_ranks_analysed_alone(
    run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file of the report — report.json, each table, the time shares — is the same (floats
    within 1e-12: sums in another order) whether
    the three ranks are analysed as one batch or one at a time (BATCH_RANKS = 1)."""
    import kernel_atlas.analysis.ranks as ranks

    together, alone = tmp_path / "together", tmp_path / "alone"
    for out in (together, alone):
        shutil.copytree(run["fleet"], out)
    build_report(together, kernel_wait_us=KERNEL_WAIT_US, jobs=1)
    monkeypatch.setattr(ranks, "BATCH_RANKS", 1)
    build_report(alone, kernel_wait_us=KERNEL_WAIT_US, jobs=1)
    (facts_a, tables_a), (facts_b, tables_b) = _report_files(together), _report_files(alone)
    assert facts_a.pop("run_id") == facts_b.pop("run_id")
    assert _close(facts_a, facts_b)
    assert tables_a.keys() == tables_b.keys() and {"idle.parquet", "roofline.parquet"} <= tables_a.keys()
    for name, table in tables_a.items():  # texts compared as texts (a dictionary column or not)
        pd.testing.assert_frame_equal(
            _texts(table), _texts(tables_b[name]), check_exact=False, rtol=1e-12, check_dtype=False, obj=name
        )


def _texts(table: pd.DataFrame) -> pd.DataFrame:
    return table.astype({c: object for c in table.columns if table[c].dtype in ("category", "str", "string")})


def _close(a: object, b: object) -> bool:
    """Equal JSON values, floats within 1e-12 relative or 1e-9 absolute (µs: sums of the same
    numbers in another order, and differences of such sums, such as the uncosted time)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-9)
    return a == b


@pytest.mark.parametrize("dataset", ["kernels.parquet", "host_events.parquet", "memory_events.parquet"])
def test_every_dataset_of_the_fleet_opens_in_pandas(run: dict[str, Path], dataset: str) -> None:
    """Rank 1's memory events name 177 module paths, rank 0's 75: with each file's index as narrow
    as its own values, pandas cast rank 1's to rank 0's int8 and failed ("Integer value 128 not
    in range")."""
    frame = pd.read_parquet(run["fleet"] / dataset)
    [(rows,)] = duckdb.sql(f"SELECT count(*) FROM read_parquet('{run['fleet'] / dataset}/*/*.parquet')").fetchall()
    assert len(frame) == rows > 0 and sorted(frame["rank"].unique())[:2] == [0, 1]


def test_waits_facts_of_two_ranks_by_hand() -> None:
    def facts(rank: int, eager: int, bound_pct: float, note: str | None) -> dict:
        idle = {"kernel_wait_us": 30.0, "basis": "exact", "devices": [{"rank": rank, "device": 0}]}
        if note:
            idle["note"] = note
        return {
            "idle": idle,
            "launches": {
                "eager_activities": eager,
                "graph_replayed": 2,
                "launch_cpu_us": 100.0,
                "launch_p50_us": 4.0,
                "delay_p50_us": 7.0 + rank,
                "launch_bound_pct": bound_pct,
            },
            "graph_candidates": {"short_kernel_us": 20.0, "count": 1, "stretches": 1, "saving_us": 5.5},
        }

    combined = combine_waits_facts([(0, facts(0, 10, 50.0, "re-run")), (3, facts(3, 30, 10.0, None))])
    assert combined["idle"]["kernel_wait_us"] == 30.0 and combined["idle"]["basis"] == "exact"
    assert combined["idle"]["devices"] == [{"rank": 0, "device": 0}, {"rank": 3, "device": 0}]
    assert combined["idle"]["note"] == "re-run (ranks 0)"
    launches = combined["launches"]
    assert launches["eager_activities"] == 40 and launches["graph_replayed"] == 4 and launches["launch_cpu_us"] == 200.0
    assert launches["launch_bound_pct"] == pytest.approx(100 * (5 + 3) / 40)  # 20 %, not (50 + 10) / 2
    assert launches["delay_p50_us"] is None and [r["delay_p50_us"] for r in launches["per_rank"]] == [7.0, 10.0]
    assert combined["graph_candidates"] == {
        "short_kernel_us": 20.0,
        "count": 2,
        "stretches": 2,
        "saving_us": 11.0,
        "waits_us": 11.0,  # facts without their waits: the saving was all of them
    }
    one = facts(0, 10, 50.0, None)
    assert combine_waits_facts([(0, one)]) == one
    # ranks of ROCm traces: their graphs are HIP graphs, and their uncapped waits are summed
    # (a fleet had said "CUDA graphs", its waits lost); ranks that differ are CUDA/HIP
    rocm = [facts(r, 10, 50.0, None) for r in (0, 1)]
    for part, waits in zip(rocm, (9.0, 7.0), strict=True):
        part["graph_candidates"] |= {"graph": "HIP", "waits_us": waits}
    hip = combine_waits_facts([(0, rocm[0]), (1, rocm[1])])["graph_candidates"]
    assert hip["graph"] == "HIP" and hip["waits_us"] == 16.0 and hip["saving_us"] == 11.0
    rocm[1]["graph_candidates"]["graph"] = "CUDA"
    assert combine_waits_facts([(0, rocm[0]), (1, rocm[1])])["graph_candidates"]["graph"] == "CUDA/HIP"


def _two_rank_trace(rank: int, gemm_us: float) -> dict:
    """Ten steps of a GEMM then an all-reduce over ranks 0 and 1, every all-reduce ending at
    1000·i + 200 µs: the rank whose GEMM is longer arrives later and the other waits."""
    events: list[dict] = [{"ph": "X", "cat": "cpu_op", "name": "step", "pid": 11, "tid": 11, "ts": 0, "dur": 10_000}]
    for i in range(10):
        base, gemm, comm = 1000 * i, 2 * i + 1, 2 * i + 2
        start = base + 30 + gemm_us
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11, "ts": base + 10,
             "dur": 5, "args": {"correlation": gemm}},
            {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": base + 30, "dur": gemm_us,
             "args": {"correlation": gemm, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11, "ts": base + 20,
             "dur": 5, "args": {"correlation": comm}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
             "ts": start, "dur": base + 200 - start,
             "args": {"correlation": comm, "device": 0, "stream": 7, "Collective name": "allreduce",
                      "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 2, "dtype": "Float",
                      "Process Group Name": "0", "Process Group Ranks": [0, 1], "Seq": i + 1}},
        ]  # fmt: skip
    return {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}


def _two_rank_run(tmp_path: Path) -> Path:
    """The two-rank job ingested: rank 0's GEMM 100 µs, rank 1's 150 µs."""
    paths = []
    for rank, gemm_us in ((0, 100.0), (1, 150.0)):
        paths.append(tmp_path / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(_two_rank_trace(rank, gemm_us)))
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["ingest", *map(str, paths), "-o", str(out), "-q"]).exit_code == 0
    return out


def test_a_rank_last_in_every_instance_of_a_two_rank_job_is_a_straggler(tmp_path: Path) -> None:
    # rank 1's GEMM is 150 µs, rank 0's 100 µs: rank 1 arrives 50 µs after rank 0 in 10 of 10 all-reduces.
    # With two ranks each one's lateness is ±25 µs whoever is last, so a jitter taken from it (3σ of
    # 25 µs) hid every instance. By chance a rank is last with p = ½: 10 of 10 has p = 0.5^10.
    out = _two_rank_run(tmp_path)
    build_report(out)
    report = json.loads((out / "report.json").read_text())
    [straggler] = report["stragglers"]
    assert (straggler["rank"], straggler["collectives"], straggler["of"]) == (1, 10, 10)
    assert straggler["p_value"] == 0.5**10
    assert straggler["wait_caused_us"] == 10 * 50.0
    rows = pd.read_parquet(out / "collectives.parquet")
    assert rows.loc[rows["rank"] == 1, "last"].all() and not rows.loc[rows["rank"] == 0, "last"].any()


def test_a_collectives_roofline_leaves_out_its_wait_for_the_last_rank(tmp_path: Path) -> None:
    # The two-rank job above: rank 0's all-reduce starts at 130 µs into each step and rank 1's at
    # 180 µs, both end at 200 µs — rank 0 spends 50 µs of its 70 waiting for rank 1, ten times.
    # The row's 20 calls took 10·70 + 10·20 = 900 µs, 500 of them waiting; the transfers took 400.
    # Each moves 1,048,576 fp32 = 4,194,304 B; an all-reduce over 2 ranks crosses the link
    # 2·(2−1)/2 = 1 time; at the H100 SXM's 450 GB/s a call can take 4,194,304 / 450e3 = 9.3207 µs.
    # SOL = 20·9.3207 / 400 = 46.60 % (it was 20·9.3207 / 900 = 20.71 %: rank 1's lateness read as a
    # slow link), headroom 400 − 186.41 = 213.59 µs (was 713.59), 20·4,194,304 B / 400 µs = 209.7 GB/s.
    out = _two_rank_run(tmp_path)
    build_report(out, device_key="h100-sxm")
    roofline = pd.read_parquet(out / "roofline.parquet")
    [row] = roofline[roofline["name"] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"].to_dict("records")
    assert (row["count"], row["total_us"], row["peer_wait_us"]) == (20, 900.0, 500.0)
    assert row["bytes"] == 4_194_304
    assert row["sol_pct"] == pytest.approx(100 * 20 * 4_194_304 / 450e3 / 400)
    assert row["sol_pct"] == pytest.approx(46.603, abs=1e-3)
    assert row["headroom_us"] == pytest.approx(400 - 20 * 4_194_304 / 450e3)
    assert row["achieved_gbps"] == pytest.approx(209.7152)
    gemm = roofline[roofline["name"] == "gemm_kernel"]
    assert gemm["peer_wait_us"].isna().all()  # no collective: nothing waited
    shown = CliRunner().invoke(app, ["report", str(out), "--device", "h100-sxm"], env={"COLUMNS": "200"})
    assert "collectives: 500.0 µs of their time waited for the last rank to arrive" in shown.output


def test_launch_delays_of_batches_fold_over_the_delays_measured() -> None:
    # Two batches of ranks: 31 launches of kernel `a` whose ranks' clocks disagree (no delay measured)
    # and 2 measured, 5 and 105 µs: the fleet's mean delay is (5 + 105) / 2 = 55 µs over 2 delays. The
    # batch mean times its count had given (0·31 + 55·2) / 33 = 3.3, and 8.03 with other batchings.
    from kernel_atlas.analysis.waits_fold import _launch_sums, _launch_table, _sum_launches

    def batch(count: int, delays: int, mean: float, largest: float) -> pd.DataFrame:
        return pd.DataFrame(
            {"level": ["kernel"], "key": ["a"], "count": [count], "launch_us": [1.0 * count],
             "launch_mean_us": [1.0], "delay_mean_us": [mean], "delay_p50_us": [mean], "delay_max_us": [largest],
             "delays": [delays], "gpu_us": [5.0 * count], "gpu_mean_us": [5.0], "launch_bound_pct": [0.0]}
        )  # fmt: skip

    nan = float("nan")
    folded = _launch_table(
        _sum_launches([_launch_sums(batch(31, 0, nan, nan)), _launch_sums(batch(2, 2, 55.0, 105.0))])
    )
    [row] = folded.to_dict("records")
    assert (row["count"], row["delays"], row["delay_mean_us"], row["delay_max_us"]) == (33, 2, 55.0, 105.0)
    none = _launch_table(_sum_launches([_launch_sums(batch(31, 0, nan, nan)), _launch_sums(batch(2, 0, nan, nan))]))
    assert none["delay_mean_us"].isna().all()  # no delay measured: empty, not 0
