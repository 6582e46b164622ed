"""`atlas classify` (campaign BJ, classes 3 and 6): a given label outside the taxonomy is kept
on its entry, flagged, and labels no other entry; `tbd` in any case or padding is unlabelled; a
filled entry's provenance names what produced its op; `explain` names one text for one match.

The expected values are written by hand: `ampere_sgemm_128x64_tn` is a cuBLAS single-precision
GEMM (taxonomy.md: `matmul`, category `gemm`); `my_custom_kernel_v2` is a name no rule, launcher
or other entry explains (`unknown`, category `other`); `Softmax`/`not_a_taxonomy_op` are not in
catalogs/taxonomy.toml (its reduction row spells `softmax`).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kernel_atlas.classify.fill import fill_catalog
from kernel_atlas.cli import app

SGEMM = "ampere_sgemm_128x64_tn"
CUSTOM = "my_custom_kernel_v2"


def test_a_label_outside_the_taxonomy_is_kept_flagged_and_not_copied() -> None:
    entries = [
        {"kernel_name": CUSTOM, "op_mapping": "TBD"},
        {"kernel_name": CUSTOM, "op_mapping": "Softmax"},
        {"kernel_name": SGEMM, "op_mapping": None},
        {"kernel_name": SGEMM, "op_mapping": "not_a_taxonomy_op"},
    ]
    notes: list[str] = []
    filled = fill_catalog(entries, notes=notes)
    # the TBD sibling of `Softmax` is not labelled by it: nothing else explains the name
    assert (filled[0]["op_mapping"], filled[0]["category"], filled[0]["label"]["rule"]) == ("unknown", "other", "none")
    # the sgemm's sibling label does not outrank its name
    assert (filled[2]["op_mapping"], filled[2]["category"]) == ("matmul", "gemm")
    assert (filled[2]["label"]["rule"], filled[2]["label"]["evidence"]) == ("rule:gemm", "name")
    # the given labels are facts: kept byte for byte, flagged in their provenance and in one note
    for index, op in ((1, "Softmax"), (3, "not_a_taxonomy_op")):
        assert filled[index]["op_mapping"] == op
        assert filled[index]["category"] == "other"
        assert filled[index]["label"]["rule"] == "given"
        assert "not an op_mapping of catalogs/taxonomy.toml" in filled[index]["label"]["detail"]
    assert len(notes) == 1
    assert "2 entries labelled outside catalogs/taxonomy.toml" in notes[0]
    assert "#1 'Softmax'" in notes[0] and "'softmax'" in notes[0] and "#3 'not_a_taxonomy_op'" in notes[0]


def test_tbd_in_any_case_or_padding_is_unlabelled() -> None:
    spellings = ["tbd", " TBD ", "Tbd", "  ", "", None]
    entries = [{"kernel_name": SGEMM, "op_mapping": s} for s in spellings] + [{"kernel_name": SGEMM}]
    notes: list[str] = []
    filled = fill_catalog(entries, notes=notes)
    for entry in filled:
        assert (entry["op_mapping"], entry["category"], entry["label"]["rule"]) == ("matmul", "gemm", "rule:gemm")
    assert notes == []  # none of them is a label, so none is outside the taxonomy


def test_a_sibling_label_that_overrules_the_rules_is_credited_to_the_catalog() -> None:
    """The seed's label is a fact about the kernel (same name, same launcher): the TBD sibling
    takes it, and its provenance names the catalog, not the GEMM rule that said otherwise."""
    entries = [
        {"kernel_name": SGEMM, "op_mapping": "TBD"},
        {"kernel_name": SGEMM, "op_mapping": "layer_norm"},
    ]
    filled = fill_catalog(entries)
    assert (filled[0]["op_mapping"], filled[0]["category"]) == ("layer_norm", "norm")
    label = filled[0]["label"]
    assert (label["rule"], label["evidence"], label["confidence"]) == ("catalog:exact", "catalog>name", 1.0)
    assert "catalog entry #1" in label["detail"] and "the rules said matmul (rule:gemm)" in label["detail"]


def test_classify_command_warns_and_exits_zero(tmp_path: Path) -> None:
    src = tmp_path / "c.json"
    src.write_text(
        json.dumps(
            [
                {"kernel_name": CUSTOM, "op_mapping": "TBD"},
                {"kernel_name": CUSTOM, "op_mapping": "Softmax"},
                {"kernel_name": SGEMM, "op_mapping": "tbd"},
            ]
        )
    )
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["classify", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning:" in text and "1 entry labelled outside catalogs/taxonomy.toml" in text
    assert "3 entries, 2 newly labelled, 1 unknown" in text
    assert [e["op_mapping"] for e in json.loads(out.read_text())] == ["unknown", "Softmax", "matmul"]


def test_explain_names_one_text_for_one_match() -> None:
    """`moe-gate` reads the qualified name (rules.toml `scope`): the name's line and the rules
    table both say so; a rule without a scope matches at the function name in both."""
    runner = CliRunner()
    result = runner.invoke(app, ["explain", "fused_moe_router_kernel", "--wide"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.count("name (qualified name) matches") == 2, text
    assert "function name" not in text.replace("the function name, then", "")
    result = runner.invoke(app, ["explain", "write_req_to_token_pool_triton", "--wide"])
    text = " ".join(result.output.split())
    assert text.count("name (function name) matches") == 2, text
