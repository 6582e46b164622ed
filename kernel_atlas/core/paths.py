"""Where the catalogs (data, not code) live, and reading them.

A catalog is the user's to change (`$ATLAS_CATALOGS` names a folder of their own): a damaged one
is said in one line naming the file and its problem — not TOML, a table it lacks (`CatalogTable`),
or a value of another kind than the shipped catalog's at the same place."""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

from kernel_atlas.core.errors import AtlasError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHIPPED = Path(__file__).resolve().parents[1] / "catalogs"


def catalogs_dir() -> Path:
    """`$ATLAS_CATALOGS`, else the `catalogs/` folder shipped with the package."""
    override = os.environ.get("ATLAS_CATALOGS")
    if override:
        return Path(override)
    return SHIPPED


class CatalogTable(dict):  # type: ignore[type-arg]
    """A table of a catalog file: a key it lacks is that file's problem, said in one line (code
    reads `table["devices"]` where the catalog must have it)."""

    def __init__(self, values: dict[str, Any], path: Path, where: str):
        super().__init__(values)
        self.path, self.where = path, where

    def __missing__(self, key: str) -> Any:
        raise AtlasError(self.path, f"has no `{self.where}{key}` (see the shipped {SHIPPED / self.path.name})")

    def __reduce__(self) -> Any:  # pickles as a plain table (a worker process needs no more)
        return (dict, (dict(self),))


def _tables(value: Any, path: Path, where: str) -> Any:
    if isinstance(value, dict):
        return CatalogTable({k: _tables(v, path, f"{where}{k}.") for k, v in value.items()}, path, where)
    if isinstance(value, list):
        return [_tables(v, path, where) for v in value]
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return "a date or time"


def _unlike(shipped: Any, given: Any, where: str) -> str | None:
    """Where `given` holds a value of another kind than `shipped` holds at the same place."""
    if _kind(shipped) != _kind(given):
        return f"`{where.rstrip('.') or '(top)'}` is {_kind(given)}, where the shipped catalog has {_kind(shipped)}"
    if isinstance(shipped, dict):
        # a table of like tables (devices by name): an entry of one's own is checked against the
        # first (not at the top, whose tables are sections of different kinds)
        alike = where and shipped and all(isinstance(v, dict) for v in shipped.values())
        like = next(iter(shipped.values())) if alike else None
        for key, value in given.items():
            model = shipped.get(key, like)
            if model is not None:
                problem = _unlike(model, value, f"{where}{key}.")
                if problem:
                    return problem
    elif isinstance(shipped, list) and len({_kind(v) for v in shipped}) == 1:  # an array of one kind
        for i, value in enumerate(given):
            problem = _unlike(shipped[0], value, f"{where.rstrip('.')}[{i}].")
            if problem:
                return problem
    return None


def _load(path: Path) -> dict[str, Any]:
    from kernel_atlas.core.safe_files import read_bytes  # its one-line errors: no such file, cannot read, …

    try:
        return tomllib.loads(read_bytes(path).decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise AtlasError(path, f"not valid TOML ({exc})") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise AtlasError(path, f"not valid TOML ({type(exc).__name__})") from None


@cache
def _shipped(name: str) -> dict[str, Any]:
    """A shipped catalog, read once (a catalog of one's own is checked against it at every read)."""
    return _load(SHIPPED / name)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict (a catalog file by name, or any path). A catalog of one's own is
    checked against the shipped one of its name: a value of another kind is refused."""
    path = Path(path)
    if not path.is_absolute() and not path.exists():
        path = catalogs_dir() / path
    data = _load(path)
    shipped = SHIPPED / path.name
    if path.parent.resolve() != SHIPPED.resolve() and shipped.is_file():
        problem = _unlike(_shipped(path.name), data, "")
        if problem:
            raise AtlasError(path, problem)
    return _tables(data, path, "")
