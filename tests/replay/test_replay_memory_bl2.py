"""`atlas replay` on the CPU (an independent tester's findings, campaign BL 2, 4, 8.1, 8.3, 8.4): a
row's memory verdict does not depend on what ran before it in the command, `--max-gib` bounds
every builder (Triton and library ones too) and says its sizes in a unit that shows them, a run
with no GPU kernels says so, and the rows of kernels launched with no CPU op carry
kernels.parquet's launcher. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported and its kernels defined
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernel_atlas.core.errors import AtlasError  # noqa: E402
from kernel_atlas.replay import runner  # noqa: E402
from kernel_atlas.replay.runner import Target, replay_all, replay_one, targets_from_output  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRITON_LAUNCH = "<built-in function launch>"

# --- 2. the memory verdict does not depend on what ran before ----------------------------------------

# One process per run (the bound is the process's): `order` replays a Triton RMSNorm of
# [16, 64] (importing the Triton interpreter: the process holds more after it) and an aten::add
# of two [4,000,000] float32 vectors (16 MB each; with its output and the float64 reference it
# takes between 250 and 350 MiB more: 250 MiB of allowance skipped it, 350 passed it), while the
# process holds `ballast` MiB besides (a large run's tables took 330–450 MB).
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from kernel_atlas.replay.runner import Target, replay_all

    rms = Target("fused_rmsnorm_kernel", "<built-in function launch>", "", "", "[[16,64],[16,64],[64]]",
                 json.dumps(["c10::BFloat16"] * 3), None, None, 1.0, 1, "trace")
    add = Target("vectorized_elementwise_kernel<AddFunctor<float>>", "aten::add", "", "",
                 "[[4000000],[4000000],[]]", '["float","float","Scalar"]', None, '["","","1"]', 1.0, 1, "trace")
    ballast = np.ones(int(sys.argv[2]) << 20, dtype=np.uint8)  # held, and touched: resident
    targets = {"add": [add], "add,rms": [add, rms], "rms,add": [rms, add]}[sys.argv[1]]
    results = replay_all(targets, "cpu")
    print(json.dumps(dict(zip(results["cpu_op"], results["check"] + ": " + results["reason"]))))
    """
)


def _verdicts(order: str, ballast_mib: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, order, str(ballast_mib)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _verdict(text: str) -> str:
    """A row's verdict without the room it names: the room is measured (the process's resident
    memory at the first replay, which moves by a MiB or two with what was imported first), the
    verdict is not."""
    return re.sub(r"\(\d+ MiB more than", "(N MiB more than", text)


def test_a_rows_memory_verdict_is_the_same_in_either_order() -> None:
    """The allowance had been 960 MiB less the process's resident memory at each replay (at most
    600 MiB): with 250 MiB of tables held, the add replayed first was skipped "for memory" and
    passed after the RMSNorm. The room is now measured once, at the first replay, with the
    builders (the Triton interpreter) imported and what was freed given back: the add gets the
    same verdict in either order — with nothing more held it passes (the process, torch and the
    interpreter, holds about 500 MiB: 450 MiB of room), with 250 MiB held (about 220 MiB of room:
    the process stays within 960 MiB) it is the same in both orders, whichever it is; the room a
    skip names is measured in each process and may differ by a MiB or two."""
    for ballast in (0, 250):
        first = _verdicts("add,rms", ballast)
        second = _verdicts("rms,add", ballast)
        assert {op: _verdict(v) for op, v in first.items()} == {op: _verdict(v) for op, v in second.items()}, (
            ballast,
            first,
            second,
        )
        if ballast == 0:
            assert first["aten::add"].startswith("pass: "), first
        assert first[TRITON_LAUNCH].startswith("pass: ")


def test_a_cpu_replay_may_take_its_room_over_what_the_process_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data segment may grow by the process's room (`cpu_room`) over what it holds once what
    earlier replays freed is given back; the thread pools start before the limit (OpenMP ended
    the process, `libgomp: Thread creation failed`, when the replay had used it up), and the
    limit is as it was after."""
    import resource

    room = runner.cpu_room()
    calls: list[str] = []
    monkeypatch.setattr(runner, "_start_thread_pools", lambda: calls.append("pools"))
    monkeypatch.setattr(runner, "_release_memory", lambda: calls.append("release"))
    before = resource.getrlimit(resource.RLIMIT_DATA)
    used = runner._data_bytes()
    with runner._bounded_memory("cpu"):
        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        after = runner._data_bytes()
    assert calls == ["pools", "release"]
    assert used is not None and after is not None
    if before[0] == resource.RLIM_INFINITY:  # no limit of the session's own below it
        assert used + room <= soft <= after + room
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def test_a_cpu_replay_past_its_allowance_is_skipped_saying_so() -> None:
    """`aten::zeros` of 268,435,456 float32 values (1 GiB, from its Concrete Inputs: no input
    tensor, so --max-gib sees 0 bytes) is more than the at most 600 MiB a CPU replay may take."""
    target = Target(
        "k", "aten::zeros", "fill", "memory", "[[],[],[],[],[]]", '["GenericList","Scalar","","",""]',
        None, '["[268435456]","6","","",""]', None, 1, "trace",
    )  # fmt: skip
    result = replay_one(target, "cpu")
    assert result.check == "skipped"
    assert runner.cpu_room() <= 600 << 20
    assert result.reason == (
        f"needs more memory than a CPU replay may take ({runner.cpu_room() >> 20} MiB more than the process holds):"
        " replay it on a GPU"
    )


# --- 4 and 8.3. --max-gib bounds every builder, and says sizes that read larger than the limit -------


def test_max_gib_refuses_an_aten_call_with_its_inputs_size_in_bytes() -> None:
    """mm of [16, 8] by [8, 4] float32: 16·8·4 + 8·4·4 = 512 + 128 = 640 bytes; --max-gib 1e-07 is
    1e-07 · 2^30 = 107.37 bytes (it had read "inputs need 0.0 GiB, more than --max-gib 1e-07")."""
    target = Target(
        "k", "aten::mm", "matmul", "gemm", "[[16,8],[8,4]]", '["float","float"]', None, None, None, 1, "trace"
    )
    result = replay_one(target, "cpu", max_gib=1e-7)
    assert result.check == "skipped"
    assert result.reason == "inputs need 640 bytes, more than --max-gib 1e-07 (107 bytes)"


def test_max_gib_refuses_a_triton_builder_too() -> None:
    """A Triton RMSNorm of [16, 64] (SGLang's fused_rmsnorm_kernel): its input alone is
    16·64·4 = 4,096 bytes = 4.00 KiB on the CPU (float32), more than --max-gib 1e-06 =
    1,073.74 bytes = 1.05 KiB. It had been replayed, `pass`, whatever --max-gib said."""
    target = Target(
        "fused_rmsnorm_kernel", TRITON_LAUNCH, "", "", "[[16,64],[16,64],[64]]",
        json.dumps(["c10::BFloat16"] * 3), None, None, 1.0, 1, "trace",
    )  # fmt: skip
    refused = replay_one(target, "cpu", max_gib=1e-6)
    assert refused.check == "skipped" and refused.median_us is None
    found = re.fullmatch(r"its buffers reach ([\d.]+) KiB, more than --max-gib 1e-06 \(1\.05 KiB\)", refused.reason)
    assert found is not None, refused.reason
    assert float(found.group(1)) >= 4.0
    # within the default --max-gib it replays
    replayed = replay_one(target, "cpu")
    assert replayed.check == "pass", replayed.reason


def test_max_gib_counts_what_a_builder_allocates_not_a_recorded_pool() -> None:
    """A recorded tensor a builder does not allocate (a paged-attention call records the whole KV
    pool: 121 GiB in the seed catalog) does not count: the count is of the tensors torch returns
    while the builder runs, as long as they live. Here: 1,000 float32 (4,000 bytes) made and freed
    ten times is 4,000 bytes at once, not 40,000; a view is no new tensor."""
    from kernel_atlas.replay.inputs import NotReplayable, counting_allocations

    counted = counting_allocations(5_000, lambda peak: f"{peak}")
    with counted:
        for _ in range(10):
            x = torch.empty(1000)
            x[:10].view(2, 5)
            del x
    assert counted.peak == 4_000 and counted.live == 0
    with pytest.raises(NotReplayable, match=r"^8000$"), counting_allocations(5_000, lambda peak: f"{peak}"):
        kept = [torch.empty(1000), torch.empty(1000)]
        del kept


# --- 8.1. a run with no GPU kernels -----------------------------------------------------------------


def _row(name: str, dur: float, **fields) -> dict:
    base = {
        "trace": "t", "rank": 0, "kind": "kernel", "name": name, "dur_us": dur, "ts_us": 0.0, "cpu_op": None,
        "cpu_op_id": None, "launcher": None, "op_mapping": "", "category": "", "label_rule": "", "input_dims": None,
        "input_types": None, "input_strides": None, "concrete_inputs": None, "grid": "[1, 1, 1]",
        "block": "[128, 1, 1]", "graph_launch": False, "link": "correlation",
    }  # fmt: skip
    return {**base, **fields}


def _output(tmp_path: Path, rows: list[dict]) -> Path:
    out = tmp_path / "run.atlas"
    out.mkdir()
    frame = pd.DataFrame(rows)
    frame["cpu_op_id"] = frame["cpu_op_id"].astype("Int64")
    frame["graph_launch"] = frame["graph_launch"].astype(bool)
    frame.to_parquet(out / "kernels.parquet")
    return out


def test_a_run_without_gpu_kernels_says_so(tmp_path: Path) -> None:
    # only a memcpy: it had been "no kernel matches the filters" (exit 2) with no filter given
    out = _output(tmp_path, [_row("Memcpy HtoD (Pageable -> Device)", 3.0, kind="memcpy")])
    with pytest.raises(AtlasError, match="no GPU kernels in this run"):
        targets_from_output(out)


# --- 8.4. rows of kernels launched with no CPU op carry kernels.parquet's launcher ---------------------


def test_kernels_launched_with_no_cpu_op_keep_their_launcher(tmp_path: Path) -> None:
    # a Triton kernel launched from Python with no CPU op (Kineto's launcher `<built-in function
    # launch>`), and a graph-replayed kernel (launcher null): they had both read "" in replay.parquet
    out = _output(
        tmp_path,
        [
            _row("triton_poi_fused_0", 12.0, launcher=TRITON_LAUNCH, link="python frame"),
            _row("graph_gather", 7.0, graph_launch=True, link="replayed from a CUDA/HIP graph"),
        ],
    )
    results = replay_all(targets_from_output(out), "cpu").set_index("kernel")
    assert results.loc["triton_poi_fused_0", "launcher"] == TRITON_LAUNCH
    assert pd.isna(results.loc["graph_gather", "launcher"])
    assert results.loc["triton_poi_fused_0", "reason"].startswith(f"launched from {TRITON_LAUNCH}, with no CPU op")
    assert (results["cpu_op"] == "").all() and (results["check"] == "skipped").all()
