"""The names code refers to are the vocabulary's own: every constant of classify/taxonomy.py is a
category or op of catalogs/taxonomy.toml (read here with plain tomllib), and capture's Inductor
prefix comes from rules.toml."""

from __future__ import annotations

import tomllib

from kernel_atlas.classify import taxonomy
from kernel_atlas.classify.rules import inductor_kernel_prefix
from kernel_atlas.core.paths import catalogs_dir


def _vocabulary() -> dict[str, set[str]]:
    data = tomllib.loads((catalogs_dir() / "taxonomy.toml").read_text())
    return {category: set(body["ops"]) for category, body in data["categories"].items()}


def test_every_name_constant_is_in_the_vocabulary() -> None:
    vocabulary = _vocabulary()
    assert taxonomy.OTHER_CATEGORY in vocabulary and taxonomy.COMMUNICATION in vocabulary
    assert taxonomy.UNKNOWN_OP in vocabulary[taxonomy.OTHER_CATEGORY]
    assert taxonomy.SEND_RECV in vocabulary[taxonomy.COMMUNICATION]


def test_capture_takes_inductors_prefixes_from_the_rules() -> None:
    from kernel_atlas.ingest import capture

    sets = tomllib.loads((catalogs_dir() / "rules.toml").read_text())["sets"]
    kinds = sets["inductor_kernels"].split("|")
    assert {"poi", "red", "per", "tem"} <= set(kinds)  # pointwise, reduction, persistent reduction, template
    assert capture._INDUCTOR_KERNEL.pattern == inductor_kernel_prefix().pattern
    assert capture._INDUCTOR_KERNEL.match("triton_poi_fused_add_0")
    assert capture._INDUCTOR_KERNEL.match("triton_red_fused_sum_1")
    assert not capture._INDUCTOR_KERNEL.match("triton_helper_fn")  # a kind Inductor does not write
    assert not capture._INDUCTOR_KERNEL.match("aten::mm")
