"""Where the catalogs (data, not code) live."""

from __future__ import annotations

import os
from pathlib import Path


def catalogs_dir() -> Path:
    """`$ATLAS_CATALOGS`, else the `catalogs/` folder shipped with the package."""
    override = os.environ.get("ATLAS_CATALOGS")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent / "catalogs"
