"""A catalog folder of one's own (`$ATLAS_CATALOGS`) that is damaged: one line naming the file and
its problem, exit 2 — it ended in "internal error: TOMLDecodeError", "internal error: KeyError:
'devices'", or blamed the trace being ingested (stop 49's campaign)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import SHIPPED, read_toml
from tests.support.hostile import ATLAS
from tests.support.traces import EXAMPLE


@pytest.fixture
def own(tmp_path: Path) -> Path:
    """A copy of the shipped catalogs, to damage."""
    folder = tmp_path / "catalogs"
    shutil.copytree(SHIPPED, folder)
    return folder


def test_text_that_is_not_toml_names_the_file(own: Path) -> None:
    (own / "rules.toml").write_text("this is [not toml\n")
    with pytest.raises(AtlasError) as caught:
        read_toml(own / "rules.toml")
    assert caught.value.source == str(own / "rules.toml")
    assert caught.value.problem.startswith("not valid TOML (Expected '=' after a key")


def test_a_table_the_code_needs_is_named_where_it_is_read(own: Path) -> None:
    (own / "devices.toml").write_text("[[x]]\nname = 1\n")
    devices = read_toml(own / "devices.toml")
    assert devices.get("devices") is None  # what the code reads as optional stays optional
    with pytest.raises(AtlasError) as caught:
        devices["devices"]
    assert caught.value.problem.startswith("has no `devices`")
    (own / "costs.toml").write_text("[moe]\n")
    with pytest.raises(AtlasError, match=r"has no `moe\.experts`"):
        read_toml(own / "costs.toml")["moe"]["experts"]


def test_a_value_of_another_kind_than_the_shipped_one_is_refused(own: Path) -> None:
    text = (own / "devices.toml").read_text()
    (own / "devices.toml").write_text(text.replace("sms = 132", 'sms = "many"', 1))
    with pytest.raises(AtlasError) as caught:
        read_toml(own / "devices.toml")
    assert caught.value.problem == "`devices.h100-sxm.sms` is a string, where the shipped catalog has a number"
    # a device of one's own is checked as the shipped devices are
    (own / "devices.toml").write_text(text + '\n[devices.mine]\nname = "Mine"\nsms = "many"\n')
    with pytest.raises(AtlasError) as caught:
        read_toml(own / "devices.toml")
    assert caught.value.problem == "`devices.mine.sms` is a string, where the shipped catalog has a number"
    (own / "devices.toml").write_text(text + '\n[devices.mine]\nname = "Mine"\nsms = 8\n')
    assert read_toml(own / "devices.toml")["devices"]["mine"]["sms"] == 8
    (own / "devices.toml").write_text(text)  # as shipped: read as it is, a number where a number was
    assert read_toml(own / "devices.toml")["devices"]["h100-sxm"]["sms"] == 132


def test_the_shipped_catalogs_read_as_plain_tables() -> None:
    """What the code reads is what the files say; a table pickles as a plain dict."""
    import pickle

    for path in sorted(SHIPPED.glob("*.toml")):
        data = read_toml(path)
        assert isinstance(data, dict) and data
        assert type(pickle.loads(pickle.dumps(data))) is dict


def _atlas(*args: object, catalogs: Path) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}
    env["ATLAS_CATALOGS"] = str(catalogs)
    return subprocess.run([*ATLAS, *map(str, args)], capture_output=True, timeout=180, env=env)


@pytest.mark.parametrize(
    ("file", "text", "said", "commands"),
    [
        ("rules.toml", "this is [not toml\n", "not valid TOML", ("ingest", "report")),
        ("devices.toml", "[[x]]\nname = 1\n", "has no `devices`", ("ingest", "report")),
        ("kernels.json", "{not json", "not valid JSON", ("ingest",)),  # the report reads what ingest wrote
    ],
)
def test_a_damaged_catalog_ends_ingest_and_report_in_one_line(
    own: Path, tmp_path: Path, file: str, text: str, said: str, commands: tuple[str, ...]
) -> None:
    out = tmp_path / "out"
    assert _atlas("ingest", EXAMPLE, "-o", out, "-q", catalogs=SHIPPED).returncode == 0
    (own / file).write_text(text)
    runs = {"ingest": ("ingest", EXAMPLE, "-o", tmp_path / "again", "-q"), "report": ("report", out)}
    for args in (runs[c] for c in commands):
        done = _atlas(*args, catalogs=own)
        err = done.stderr.decode()
        assert done.returncode == 2, err
        assert err.count("\n") == 1 and "internal error" not in err, err
        assert err.startswith(f"error: {own / file}: {said}"), err  # the catalog, not the trace
