"""Collectives without NCCL's message fields on their kernels (older PyTorch: the tensor is recorded
on the `nccl:*` range inside `record_param_comms`), costed by nccl-tests' bus-bandwidth conventions;
values derived by hand from the shared traces' JSON."""

from __future__ import annotations

from pathlib import Path

from kernel_atlas.ingest.fleet import write_outputs
from kernel_atlas.ingest.pipeline import ingest_paths
from tests.support.traces import trace_path


def _analysis(tmp_path: Path, stem: str):
    from kernel_atlas.report.build import build_report

    out = tmp_path / stem
    write_outputs(ingest_paths([trace_path(stem)]), out)
    return build_report(out, None, tmp_path / f"{stem}.html").analysis


def test_all_to_all_and_all_reduce_take_the_recorded_input(tmp_path: Path) -> None:
    # a100_diff_control: `nccl:all_to_all` (user_annotation) with "Input Dims": [[8, 1024, 8816]],
    # "Input type": ["float"] inside a record_param_comms op without shapes; distributedInfo world_size 8
    roofline = _analysis(tmp_path, "a100_diff_control").roofline
    comms = roofline[(roofline["category"] == "communication") & (roofline["role"] == "main")]
    all_to_all = comms[comms["input_dims"] == "[[8,1024,8816]]"]
    assert len(all_to_all) == 1
    # 8·1024·8816 = 72,220,672 floats · 4 B · (n−1)/n = 7/8 for all_to_all
    assert all_to_all["bytes"].iloc[0] == 72_220_672 * 4 * 7 / 8 == 252_772_352
    # `nccl:all_reduce` "Input Dims": [[45310188]] float: 45,310,188 · 4 B · 2·(n−1)/n = 14/8
    all_reduce = comms[comms["input_dims"] == "[[45310188]]"]
    assert all_reduce["bytes"].iloc[0] == 45_310_188 * 4 * 14 / 8 == 317_171_316
    assert "(message: the recorded input)" in all_reduce["formula"].iloc[0]
    # no communication kernel of the trace is left without a cost
    rest = roofline[(roofline["category"] == "communication") & ~roofline["role"].isin(["main", "helper"])]
    assert rest.empty


def test_rocm_memcpy_without_a_byte_count_takes_its_copy_ops_tensor(tmp_path: Path) -> None:
    # mi250_minitoy_train: "Memcpy HtoD (Host -> Device)" has no "bytes" arg; its launcher aten::copy_
    # records Input Dims [[5,128],[5,128],[]] float: 5·128·4 = 2,560 bytes over the host link
    roofline = _analysis(tmp_path, "mi250_minitoy_train").roofline
    copy = roofline[roofline["name"].str.startswith("Memcpy HtoD")]
    assert copy["role"].tolist() == ["main"] and copy["bytes"].tolist() == [2560.0]
    assert "estimate: no byte count recorded" in copy["formula"].iloc[0]


def test_all_gather_takes_the_gathered_size(tmp_path: Path) -> None:
    # a100_cudagraph_rank0: an all_gather recorded with output [65536, 64] and input [8192, 64] float
    # (65536 = 16·8192, world_size 16): the message is the gathered output, 65536·64 floats, not scaled again
    roofline = _analysis(tmp_path, "a100_cudagraph_rank0").roofline
    gather = roofline[
        (roofline["launcher"] == "nccl:_all_gather_base") & (roofline["input_dims"] == "[[65536,64],[8192,64],[]]")
    ]
    assert len(gather) == 1
    assert gather["bytes"].iloc[0] == 65536 * 64 * 4 * 15 / 16 == 15_728_640
    # b200-style single input (one rank's part) is scaled by n: 8 ranks · [1, 25136] bf16, factor 7/8
    from kernel_atlas.roofline.analysis import _input_scale

    assert _input_scale("all_gather", 8) == 8.0 and _input_scale("all_reduce", 8) == 1.0
