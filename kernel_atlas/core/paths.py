"""Where the catalogs (data, not code) live, and reading them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def catalogs_dir() -> Path:
    """`$ATLAS_CATALOGS`, else the `catalogs/` folder shipped with the package."""
    override = os.environ.get("ATLAS_CATALOGS")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / "catalogs"


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict (a catalog file by name, or any path)."""
    path = Path(path)
    if not path.is_absolute() and not path.exists():
        path = catalogs_dir() / path
    with path.open("rb") as handle:
        return tomllib.load(handle)
