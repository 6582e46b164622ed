"""The dataset's files by rank (store/outputs.rank_files): all of them, or only some ranks, each
looked up in its own folder; a folder named otherwise (`rank=02`) is still found by listing."""

from __future__ import annotations

from pathlib import Path

from kernel_atlas.store.outputs import rank_files


def _dataset(root: Path) -> Path:
    for folder, names in {
        "rank=0": ["a.parquet"],
        "rank=1": ["b.parquet", ".b.tmp.parquet"],
        "rank=02": ["c.parquet"],
    }.items():
        (root / "kernels.parquet" / folder).mkdir(parents=True)
        for name in names:
            (root / "kernels.parquet" / folder / name).write_bytes(b"")
    (root / "kernels.parquet" / "notes.txt").write_text("not a rank")
    return root / "kernels.parquet"


def test_some_ranks_are_looked_up_alone_and_odd_names_still_found(tmp_path) -> None:
    kernels = _dataset(tmp_path)
    everything = rank_files(tmp_path)
    assert everything == {
        0: [kernels / "rank=0" / "a.parquet"],
        1: [kernels / "rank=1" / "b.parquet"],
        2: [kernels / "rank=02" / "c.parquet"],
    }
    assert rank_files(tmp_path, [1]) == {1: [kernels / "rank=1" / "b.parquet"]}
    assert rank_files(tmp_path, [2, 0]) == {0: everything[0], 2: everything[2]}  # rank=02: by listing
    assert rank_files(tmp_path, [7]) == {}
    assert rank_files(tmp_path, []) == {}
