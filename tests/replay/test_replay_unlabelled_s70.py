"""A catalog entry labelled `tbd` or ` TBD ` (a hand-edited catalog) is unlabelled for replay as for
`atlas classify`: the kernel is classified, never replayed as an op named "tbd"."""

from __future__ import annotations

import pytest

from kernel_atlas.replay.runner import Target


@pytest.mark.parametrize("given", ["TBD", "tbd", " TBD ", "", None])
def test_a_tbd_label_in_any_spelling_is_classified(given: str | None) -> None:
    target = Target(
        kernel="ampere_sgemm_128x64_tn",
        launcher="aten::mm",
        op_mapping=given,  # type: ignore[arg-type]
        category=given,  # type: ignore[arg-type]
        input_dims="[[64, 128], [128, 256]]",
        input_types='["float", "float"]',
        input_strides=None,
        concrete_inputs=None,
        traced_us=10.0,
        count=1,
        source="catalog",
    )
    # an sgemm under aten::mm is a matmul of the gemm category (catalogs/taxonomy.toml)
    assert (target.op_mapping, target.category) == ("matmul", "gemm")
