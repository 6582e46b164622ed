"""costs.toml's patterns and argument positions in a catalog folder of one's own: a broken
regular expression or a position that is not a whole number from 1 is one line naming the file,
exit 2 (campaign BB 1–2: a broken pattern had ended in "internal error", exit 1; a position of 1.5
had been read as 1 — the dtype argument, not the size — and 0 had turned its entry off, both
silently)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kernel_atlas.core.paths import SHIPPED
from tests.support.hostile import ATLAS

TEMPLATE_KEY = "'\\bcross_device_reduce_(?:1stage|2stage|half_butterfly)<' = 2"
MESSAGE_KEY = "kernels = '\\bdeep_ep::|\\bep::(?:intranode|internode(?:_ll)?)::'"


@pytest.fixture
def own(tmp_path: Path) -> Path:
    folder = tmp_path / "catalogs"
    shutil.copytree(SHIPPED, folder)
    return folder


def _catalog_report(own: Path, tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    """`atlas report` of the seed catalog (its custom all-reduce reads both tables) under `own`."""
    folder = tmp_path / "seed"
    folder.mkdir()
    shutil.copy(SHIPPED / "kernels.json", folder / "kernels.json")
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_DEBUG"}
    env["ATLAS_CATALOGS"] = str(own)
    args = [*ATLAS, "report", str(folder / "kernels.json"), "--device", "h200"]
    return subprocess.run(args, capture_output=True, timeout=180, env=env)


@pytest.mark.parametrize(
    ("line", "edited", "said"),
    [
        (TEMPLATE_KEY, TEMPLATE_KEY.replace("half_butterfly)<", "half_butterfly<"), "not a regular expression"),
        (TEMPLATE_KEY, TEMPLATE_KEY.replace("= 2", "= 1.5"), "a position is a whole number from 1"),
        (TEMPLATE_KEY, TEMPLATE_KEY.replace("= 2", "= 0"), "a position is a whole number from 1"),
        (MESSAGE_KEY, MESSAGE_KEY.replace("deep_ep::", "deep_ep::("), "not a regular expression"),
    ],
)
def test_a_bad_pattern_or_position_in_costs_toml_is_one_line(
    own: Path, tmp_path: Path, line: str, edited: str, said: str
) -> None:
    text = (own / "costs.toml").read_text()
    assert line in text
    (own / "costs.toml").write_text(text.replace(line, edited))
    done = _catalog_report(own, tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and "internal error" not in err, err
    assert str(own / "costs.toml") in err and said in err, err


def test_the_shipped_tables_still_cost_the_seed_all_reduce(own: Path, tmp_path: Path) -> None:
    done = _catalog_report(own, tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    costs = (tmp_path / "seed" / "kernels.costs.csv").read_text()
    row = next(line for line in costs.splitlines() if "cross_device_reduce_1stage" in line)
    assert ",25088.0," in row, json.dumps(row)
