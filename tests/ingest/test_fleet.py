"""Many ranks: the partitioned dataset, the local and Ray engines, failures that stay local,
and the cross-rank view (collectives, clock alignment, stragglers) against a fleet whose
stragglers were planted by benchmarks/make_fleet.py (its truth.json is the expected answer)."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from benchmarks.make_fleet import Delay, FleetSpec, Straggler, make_fleet
from kernel_atlas.analysis.collectives import binomial_tail
from kernel_atlas.cli import app
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.ingest.fleet import RankDone, RankFailed, Task, _run_local, _run_ray, expand_sources, ingest_fleet
from kernel_atlas.store.outputs import kernels_sql, load_kernels, output_ranks
from tests.support.traces import raw_events, trace_path

runner = CliRunner()

# Two stragglers planted at 40 % of the 25 global all-reduces each, and one rank late once.
SPEC = FleetSpec(
    ranks=8,
    steps=1,
    repeat=5,
    stragglers=[Straggler(5, 1000.0, 0.4), Straggler(2, 400.0, 0.4)],
    delays=[Delay(7, 2, 300.0)],
    subgroup_size=4,
    ranks_per_host=4,
    seq="cpu",
    lean=True,
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    trace_path("a100_nccl_8rank_rank0")
    root = tmp_path_factory.mktemp("fleet")
    return root, make_fleet(root, SPEC)


@pytest.fixture(scope="module")
def fleet_out(fleet: tuple[Path, dict]) -> Path:
    root, _ = fleet
    out = root / "out"
    result = runner.invoke(app, ["ingest", str(root / "ranks"), "-o", str(out), "-j", "2", "-q"])
    assert result.exit_code == 0, result.output
    report = runner.invoke(app, ["report", str(out), "-j", "2"])
    assert report.exit_code == 0, report.output
    (out / "report.out").write_text(report.output)
    return out


@pytest.fixture(scope="module")
def ray_started() -> Iterator[None]:
    """One embedded Ray for the module's Ray tests (starting one takes 10–20 s here): `_run_ray`
    joins a Ray already running and leaves it running; starting its own for a run is tested
    from the command line, in tests/cli/test_hostile_input.py."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2, object_store_memory=256 << 20, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
    )
    yield
    ray.shutdown()


def _planted(truth: dict) -> dict[int, dict]:
    return {s["rank"]: s for s in truth["stragglers"]}


# --- the generator ---------------------------------------------------------------------------


def test_make_fleet_rewrites_rank_and_group_fields(fleet: tuple[Path, dict]) -> None:
    root, truth = fleet
    doc = json.loads(gzip.decompress((root / "ranks" / "rank-5.json.gz").read_bytes()))
    assert doc["distributedInfo"]["rank"] == 5 and doc["distributedInfo"]["world_size"] == 8
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e["args"]]
    allreduce = next(e for e in kernels if e["args"]["Collective name"] == "allreduce")
    broadcast = next(e for e in kernels if e["args"]["Collective name"] == "broadcast")
    assert (
        allreduce["args"]["Process Group Ranks"] == "[0, 1, 2, 3, 4, 5, 6, 7]" and allreduce["args"]["Group size"] == 8
    )
    assert broadcast["args"]["Process Group Name"] == "2" and broadcast["args"]["Process Group Ranks"] == "[4, 5, 6, 7]"
    assert "Seq" not in allreduce["args"]  # seq="cpu": only record_param_comms has it
    comms = [e for e in doc["traceEvents"] if e.get("name") == "record_param_comms" and "Seq" in e["args"]]
    assert len(comms) == len(kernels) == 35  # 25 all-reduces + 10 broadcasts
    # 5 copies of one step: 5 all-reduces and 2 broadcasts each; 2 subgroups per broadcast
    assert len(truth["instances"]) == 25 + 2 * 10


# --- ingest: fields, layout, engines, failures ----------------------------------------------


def test_real_trace_keeps_process_group_fields() -> None:
    from tests.support.traces import ingested

    frame = ingested("a100_nccl_8rank_rank0").frame
    nccl = frame[frame["collective"].notna()]
    expected = [
        e for e in raw_events("a100_nccl_8rank_rank0") if e.get("cat") == "kernel" and "Collective name" in e["args"]
    ]
    assert len(nccl) == len(expected) == 21
    assert set(nccl["process_group"].astype(str)) == {"0"}
    assert set(nccl["process_group_desc"].astype(str)) == {"default_pg"}
    assert set(nccl["process_group_ranks"].astype(str)) == {"[0, 1]"}
    assert nccl["collective_seq"].isna().all()  # this PyTorch recorded no Seq
    assert frame.loc[frame["collective"].isna(), "process_group"].isna().all()


def test_missing_kernel_fields_come_from_record_param_comms(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(trace_path("a100_nccl_8rank_rank0").read_bytes()))
    comms = {e["args"]["External id"]: e for e in doc["traceEvents"] if e.get("name") == "record_param_comms"}
    stripped = 0
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel" and "Collective name" in event["args"]:
            for key in ("Process Group Name", "Process Group Description", "Process Group Ranks"):
                del event["args"][key]
            comms[event["args"]["External id"]]["args"]["Seq"] = 40 + stripped  # as recent PyTorch writes it
            stripped += 1
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    from kernel_atlas.ingest.pipeline import ingest_trace

    frame = ingest_trace(path).frame
    nccl = frame[frame["collective"].notna()].sort_values("external_id")
    assert set(nccl["process_group"].astype(str)) == {"0"} and set(nccl["process_group_ranks"].astype(str)) == {
        "[0, 1]"
    }
    # every kernel got the Seq of its own launching op (External id order = the order they were set)
    kernels_in_file_order = [
        e["args"]["External id"]
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel" and "Collective name" in e["args"]
    ]
    seq_of = {ext: 40 + i for i, ext in enumerate(kernels_in_file_order)}
    assert nccl["collective_seq"].tolist() == [seq_of[x] for x in nccl["external_id"]]


def test_dataset_layout_and_readers(fleet_out: Path) -> None:
    assert sorted(p.name for p in (fleet_out / "kernels.parquet").iterdir()) == [f"rank={r}" for r in range(8)]
    assert (fleet_out / "kernels.parquet" / "rank=3" / "rank-3.parquet").is_file()
    counts = pd.read_parquet(fleet_out / "kernels.parquet").groupby("rank").size()
    assert counts.index.tolist() == list(range(8)) and counts.nunique() == 1
    table = ds.dataset(fleet_out / "kernels.parquet", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == counts.sum()
    by_duckdb = duckdb.sql(
        f"SELECT rank, count(*) FROM {kernels_sql(fleet_out)} GROUP BY rank ORDER BY rank"
    ).fetchall()
    assert by_duckdb == [(r, counts[r]) for r in range(8)]
    one = load_kernels(fleet_out, ranks=[3])
    assert set(one["rank"]) == {3} and len(one) == counts[3] and list(one.columns[:2]) == ["trace", "rank"]
    assert output_ranks(fleet_out) == list(range(8))
    summary = json.loads((fleet_out / "summary.json").read_text())
    assert [t["rank"] for t in summary["traces"]] == list(range(8)) and summary["failed"] == []
    assert summary["layout"] == {"kernels": "kernels.parquet", "partitioning": "hive", "partition_by": ["rank"]}


def test_other_readers_take_the_dataset(fleet_out: Path) -> None:
    from kernel_atlas.replay.runner import targets_from_output
    from kernel_atlas.report.dashboard import load_run

    run = load_run(fleet_out)
    assert sorted(run.kernels["rank"].unique()) == list(range(8)) and run.world_size == 8
    # replay reads the dataset too: the synthetic fleet records no shapes, refused in one line as a
    # run without shapes is (stop 65, campaign AS 5: it had listed targets it could not replay)
    with pytest.raises(AtlasError, match="no input shapes recorded"):
        targets_from_output(fleet_out)


def test_a_bad_rank_does_not_stop_the_others(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    root, _ = fleet
    traces = sorted((root / "ranks").glob("rank-*.json.gz"))[:3]
    bad = tmp_path / "rank-9.json.gz"
    bad.write_bytes(traces[0].read_bytes()[:5000])  # cut mid-stream
    out = tmp_path / "out"
    result = runner.invoke(app, ["ingest", *map(str, traces), str(bad), "-o", str(out), "-j", "2", "-q"])
    assert result.exit_code == 2, result.output
    assert f"{bad}:" in result.output and "1 of 4 traces failed" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [t["rank"] for t in summary["traces"]] == [0, 1, 2]
    assert len(summary["failed"]) == 1 and summary["failed"][0]["source"] == str(bad)
    assert output_ranks(out) == [0, 1, 2]


def test_a_report_of_part_of_a_job_names_the_ranks_it_lacks(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    """Three of the fleet's eight ranks (their traces say world_size 8): the report said "collective
    instances on 3 ranks" and nothing of the five others (stop 57's fleet campaign)."""
    from kernel_atlas.analysis.collectives import ranks_missing

    root, _ = fleet
    traces = sorted((root / "ranks").glob("rank-*.json.gz"))
    out = tmp_path / "part"
    assert (
        runner.invoke(app, ["ingest", *map(str, [traces[0], traces[1], traces[3]]), "-o", str(out), "-q"]).exit_code
        == 0
    )
    report = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "200"})
    assert report.exit_code == 0, report.output
    assert "ranks 2, 4, 5, 6, 7 of the job's 8 not in this run (not given, or failed to ingest)" in report.output
    facts = json.loads((out / "report.json").read_text())
    assert facts["ranks_missing"] == {"world_size": 8, "ranks": [2, 4, 5, 6, 7], "count": 5}
    # one rank profiled alone: nothing to say; traces naming different world sizes: said, no rank
    # counted missing (campaign BN 5: it had been null, silent)
    one = {"traces": [{"distributed": {"world_size": 8}}]}
    assert ranks_missing(one, [0]) is None
    two_jobs = {"traces": [{"distributed": {"world_size": 8}}, {"distributed": {"world_size": 2}}]}
    assert ranks_missing(two_jobs, [0, 1]) == {"world_size": None, "ranks": [], "count": 0, "world_sizes": [2, 8]}


def test_shifting_one_rank_s_clock_moves_its_offset_and_nothing_else(
    fleet: tuple[Path, dict], fleet_out: Path, tmp_path: Path
) -> None:
    """Every timestamp of rank 5 moved by 250 ms: its clock offset moves by exactly that, and no
    skew, wait or lateness changes. From zero offsets the alignment moved the unshifted ranks by
    up to 0.23 µs and a critical-path segment changed rank (stop 57's fleet campaign)."""
    import gzip

    root, _ = fleet
    traces = sorted((root / "ranks").glob("rank-*.json.gz"))
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    for trace in traces:
        document = json.loads(gzip.decompress(trace.read_bytes()))
        if document["distributedInfo"]["rank"] == 5:
            for event in document["traceEvents"]:
                if "ts" in event:
                    event["ts"] += 250_000.0
        (shifted / trace.name).write_bytes(gzip.compress(json.dumps(document).encode()))
    out = tmp_path / "out"
    assert runner.invoke(app, ["ingest", str(shifted), "-o", str(out), "-j", "2", "-q"]).exit_code == 0
    assert runner.invoke(app, ["report", str(out), "-j", "2"]).exit_code == 0
    keys = ["process_group", "seq", "rank"]
    before = pd.read_parquet(fleet_out / "collectives.parquet").sort_values(keys, ignore_index=True)
    after = pd.read_parquet(out / "collectives.parquet").sort_values(keys, ignore_index=True)
    for column in ("skew_us", "wait_us", "late_us"):
        assert (after[column] - before[column]).abs().max() < 1e-6, column
    moved = (after["clock_offset_us"] - before["clock_offset_us"]).groupby(after["rank"]).agg(["min", "max"])
    assert moved.loc[5].tolist() == pytest.approx([250_000.0, 250_000.0], abs=1e-6)
    assert moved.drop(index=5).abs().max().max() < 1e-6


def _crash_on_rank_1(task: Task, on_progress: object = None) -> RankDone | RankFailed:
    if task.index == 1:
        os._exit(3)  # a worker killed mid-trace (as the OOM killer would)
    return RankFailed(task.source, "fine")


def test_a_dying_worker_fails_only_its_own_trace() -> None:
    tasks = [Task(f"t{i}", "unused", i, f"t{i}") for i in range(5)]
    outcomes: list[RankFailed] = []
    _run_local(tasks, 2, outcomes.append, work=_crash_on_rank_1)
    reasons = {o.source: o.reason for o in outcomes}
    assert sorted(reasons) == [f"t{i}" for i in range(5)]
    assert "worker process died" in reasons["t1"]
    assert all(reasons[f"t{i}"] == "fine" for i in (0, 2, 3, 4))


def test_fsspec_urls_in_and_out(fleet: tuple[Path, dict]) -> None:
    import fsspec

    root, _ = fleet
    memory = fsspec.filesystem("memory")
    for r in (0, 1):
        memory.pipe(f"/traces/rank-{r}.json.gz", (root / "ranks" / f"rank-{r}.json.gz").read_bytes())
    sources = expand_sources(["memory://traces/*.json.gz"])
    assert sources == ["memory:///traces/rank-0.json.gz", "memory:///traces/rank-1.json.gz"]
    result = ingest_fleet(sources, "memory://run.atlas")
    assert result.failed == [] and result.done == 2
    assert memory.exists("/run.atlas/kernels.parquet/rank=1/rank-1.parquet")
    summary = json.loads(memory.cat("/run.atlas/summary.json"))
    assert [t["rank"] for t in summary["traces"]] == [0, 1]
    memory.rm("/", recursive=True)


def test_sources_expand_folders_globs_and_report_missing(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    root, _ = fleet
    folder = [Path(p).name for p in expand_sources([root / "ranks"])]
    assert folder == [f"rank-{r}.json.gz" for r in range(8)]
    assert len(expand_sources([str(root / "ranks" / "rank-[01].json.gz")])) == 2
    assert expand_sources([f"file://{root}/ranks/rank-0.json.gz"]) == [str(root / "ranks" / "rank-0.json.gz")]
    result = runner.invoke(app, ["ingest", str(tmp_path / "nothing-*.json"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "matches no file" in result.output


def test_ray_engine_eight_ranks(fleet: tuple[Path, dict], fleet_out: Path, tmp_path: Path, ray_started: None) -> None:
    root, _ = fleet
    out = tmp_path / "ray.atlas"
    result = runner.invoke(app, ["ingest", str(root / "ranks"), "--engine", "ray", "-j", "2", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    local = json.loads((fleet_out / "summary.json").read_text())
    remote = json.loads((out / "summary.json").read_text())
    assert remote["engine"] == "ray" and remote["failed"] == []
    keys = ("rank", "events", "kernels", "gpu_activities", "kernel_time_us", "with_launcher", "kernels_file")
    assert [{k: t[k] for k in keys} for t in remote["traces"]] == [{k: t[k] for k in keys} for t in local["traces"]]
    a = pd.read_parquet(out / "kernels.parquet").sort_values(["rank", "ts_us"]).reset_index(drop=True)
    b = pd.read_parquet(fleet_out / "kernels.parquet").sort_values(["rank", "ts_us"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[["rank", "name", "ts_us", "dur_us"]], b[["rank", "name", "ts_us", "dur_us"]])
    assert json.loads((out / "catalog.json").read_text()) == json.loads((fleet_out / "catalog.json").read_text())


def test_a_dying_ray_worker_fails_only_its_own_trace(ray_started: None) -> None:
    tasks = [Task(f"t{i}", "unused", i, f"t{i}") for i in range(4)]
    outcomes: list[RankFailed] = []
    _run_ray(tasks, 2, None, outcomes.append, work=_crash_on_rank_1)
    reasons = {o.source: o.reason for o in outcomes}
    assert sorted(reasons) == [f"t{i}" for i in range(4)]
    assert "Ray task failed" in reasons["t1"]
    assert all(reasons[f"t{i}"] == "fine" for i in (0, 2, 3))


# --- cross-rank analysis -----------------------------------------------------------------------


def test_binomial_tail_by_hand() -> None:
    # P(X ≥ 2) for n = 3, p = 1/2: (3 + 1) / 8
    assert binomial_tail(2, 3, 0.5) == pytest.approx(0.5)
    # P(X ≥ 3) for n = 3, p = 1/8 = 1/512
    assert binomial_tail(3, 3, 0.125) == pytest.approx(1 / 512)
    assert binomial_tail(0, 5, 0.3) == 1.0 and binomial_tail(6, 5, 0.3) == 0.0


def test_report_finds_exactly_the_planted_stragglers(fleet: tuple[Path, dict], fleet_out: Path) -> None:
    _, truth = fleet
    facts = json.loads((fleet_out / "report.json").read_text())
    found = {s["rank"]: s for s in facts["stragglers"]}
    planted = _planted(truth)
    assert set(found) == set(planted) == {5, 2}  # rank 7, late once, is not a straggler
    for rank, straggler in planted.items():
        assert found[rank]["collectives"] == len(straggler["instances"]) == 10
        assert found[rank]["mean_late_us"] == pytest.approx(straggler["delay_us"], rel=0.10)
    assert [s["rank"] for s in facts["stragglers"]] == [5, 2]  # the one others waited for longest first
    assert (
        facts["collectives"]["instances"] == len(truth["instances"])
        and facts["collectives"]["matched_by"] == "recorded"
    )
    text = (fleet_out / "report.out").read_text()
    assert "Top stragglers" in text and "10 of" in text


def test_collectives_table_matches_the_simulation(fleet: tuple[Path, dict], fleet_out: Path) -> None:
    _, truth = fleet
    table = pd.read_parquet(fleet_out / "collectives.parquet")
    assert len(table) == sum(len(i["ranks"]) for i in truth["instances"])
    planted_instances = {j for s in truth["stragglers"] for j in s["instances"]} | {
        d["instance"] for d in truth["delays"]
    }
    offsets = truth["clock_offset_us"]
    for inst in truth["instances"]:
        rows = table[(table["process_group"] == inst["process_group"]) & (table["seq"] == inst["seq"])].set_index(
            "rank"
        )
        assert sorted(rows.index) == inst["ranks"]
        assert (rows["collective"] == inst["collective"]).all()
        if inst["instance"] in planted_instances:
            assert rows["skew_us"].iloc[0] == pytest.approx(inst["skew_us"], rel=0.10)
            assert rows["last"].sum() == 1 and rows.index[rows["last"]][0] == inst["last_rank"]
        else:
            assert abs(rows["skew_us"].iloc[0] - inst["skew_us"]) < 3.0  # alignment noise: end jitter of 2 µs
        arrival = dict(zip(inst["ranks"], inst["arrival_us"], strict=True))
        latest = max(arrival.values())
        for rank, row in rows.iterrows():
            assert row["wait_us"] == pytest.approx(latest - arrival[rank], abs=3.0)
            assert row["clock_offset_us"] == pytest.approx(offsets[rank] - offsets[0], abs=3.0)
    # bandwidth over the time after the last arrival: message bytes / (end − last start)
    first = table[(table["process_group"] == "0")].iloc[0]
    assert first["msg_bytes"] == 2049000 * 4  # the first all-reduce of the step: 2,049,000 floats
    assert first["busbw_gbps"] == pytest.approx(first["algbw_gbps"] * 2 * 7 / 8)


def test_fleet_time_shares_equal_a_direct_query(fleet_out: Path) -> None:
    shares = pd.read_csv(fleet_out / "timeshare.csv")
    category = shares[shares["level"] == "category"].set_index("key")["total_us"]
    direct = duckdb.sql(f"SELECT category, sum(dur_us) FROM {kernels_sql(fleet_out)} GROUP BY category").fetchall()
    assert category.to_dict() == pytest.approx(dict(direct))
    roof = pd.read_parquet(fleet_out / "roofline.parquet")
    rows = duckdb.sql(f"SELECT count(*) FROM {kernels_sql(fleet_out)}").fetchall()[0][0]
    assert roof["count"].sum() == rows
    html = (fleet_out / "report.html").read_text()
    assert "Collectives across ranks" in html and 'id="lateness"' in html


def test_fleet_report_has_the_waits_of_every_rank(fleet_out: Path) -> None:
    idle = pd.read_parquet(fleet_out / "idle.parquet")
    summary = json.loads((fleet_out / "summary.json").read_text())
    devices = [d for t in summary["traces"] for d in t["devices"]]
    assert sorted({d["rank"] for d in devices}) == sorted(idle["rank"].unique()) == list(range(8))
    for d in devices:  # the union of the streams (compute and NCCL) per device
        rows = idle[(idle["rank"] == d["rank"]) & (idle["device"] == d["device"]) & idle["stream"].isna()]
        assert rows["idle_us"].sum() == pytest.approx(d["idle_us"], abs=1e-3)
    assert idle["stream"].notna().any()
    for name in ("idle_causes", "launch_stats", "graph_candidates"):
        assert (fleet_out / f"{name}.parquet").is_file()
    facts = json.loads((fleet_out / "report.json").read_text())
    assert facts["idle"]["kernel_wait_us"] == 30.0 and len(facts["idle"]["devices"]) == len(devices)
    # the timeline of a fleet is one rank's: here the top straggler's
    html = (fleet_out / "report.html").read_text()
    assert "rank 5 of 8: the top straggler" in html and "Why the GPU waits" in html


def test_positions_match_instances_when_no_seq_is_recorded(tmp_path: Path) -> None:
    trace_path("a100_nccl_8rank_rank0")
    spec = FleetSpec(ranks=4, steps=1, repeat=4, stragglers=[Straggler(3, 600.0, 0.6)], seq="none", lean=True)
    truth = make_fleet(tmp_path, spec)
    out = tmp_path / "out"
    assert runner.invoke(app, ["ingest", str(tmp_path / "ranks"), "-o", str(out), "-j", "2", "-q"]).exit_code == 0
    from kernel_atlas.analysis.collectives import cross_rank_view

    view = cross_rank_view(out, output_ranks(out))
    assert view.facts["collectives"]["matched_by"] == "position"
    assert view.facts["collectives"]["instances"] == len(truth["instances"]) == 28
    [found] = view.facts["stragglers"]
    assert found["rank"] == 3 and found["mean_late_us"] == pytest.approx(600.0, rel=0.10)


def test_single_rank_keeps_todays_report(tmp_path: Path) -> None:
    out = tmp_path / "one"
    assert runner.invoke(app, ["ingest", str(trace_path("a100_nccl_8rank_rank0")), "-o", str(out), "-q"]).exit_code == 0
    result = runner.invoke(app, ["report", str(out), "--full"])
    assert result.exit_code == 0, result.output
    assert "one rank: no cross-rank view" in result.output
    assert not (out / "collectives.parquet").exists()
    assert "stragglers" not in json.loads((out / "report.json").read_text())
    assert "one rank: no cross-rank view" in (out / "report.html").read_text()


def test_a_rank_file_duckdb_cannot_read_is_named(fleet_out: Path, tmp_path: Path) -> None:
    # The cross-rank view reads every rank with DuckDB; a damaged rank file is one AtlasError
    # naming it (it once ended in a NameError: `duckdb` was bound only for type checking).
    import shutil

    from kernel_atlas.analysis.collectives import cross_rank_view
    from kernel_atlas.core.errors import AtlasError

    out = tmp_path / "out"
    shutil.copytree(fleet_out, out)
    damaged = out / "kernels.parquet" / "rank=3" / "rank-3.parquet"
    damaged.write_bytes(b"not a parquet file, " * 8)
    with pytest.raises(AtlasError) as caught:
        cross_rank_view(out, list(range(8)), target=tmp_path / "collectives.parquet")
    assert "rank-3.parquet" in str(caught.value)


def test_identical_warnings_are_folded_with_their_count() -> None:
    from kernel_atlas.ingest.fleet import _folded

    assert _folded(["a.sqlite: x", "b.json: y", "a.sqlite: x", "a.sqlite: x"]) == [
        "a.sqlite: x (3 times)",
        "b.json: y",
    ]
    assert _folded([]) == []


def test_a_warning_said_alike_of_several_traces_is_one_line_naming_three() -> None:
    from kernel_atlas.ingest.fleet import _folded

    sources = ["r/a.json", "r/b.json", "r/c.json", "r/d.json", "r/a.json.gz"]
    warnings = [
        "r/a.json: 1 of 2 GPU activities have no launcher",
        "r/b.json: 1 of 2 GPU activities have no launcher",
        "r/a.json.gz: 3 of 4 GPU activities have no launcher",
        "r/c.json: 1 of 2 GPU activities have no launcher",
        "r/d.json: 1 of 2 GPU activities have no launcher",
        "r/d.json: 1 of 2 GPU activities have no launcher",
        "-o out is a local path",
    ]
    assert _folded(warnings, sources) == [
        "4 traces: 1 of 2 GPU activities have no launcher (r/a.json, r/b.json, r/c.json and 1 more)",
        "r/a.json.gz: 3 of 4 GPU activities have no launcher",  # the longer name, not `r/a.json` + `.gz: …`
        "-o out is a local path",
    ]
    two = ["r/a.json: x", "r/b.json: x"]
    assert _folded(two, sources) == ["2 traces: x (r/a.json, r/b.json)"]
    assert _folded(["r/a.json: x", "r/a.json: x"], sources) == ["r/a.json: x (2 times)"]
