"""Where the catalogs (data, not code) live, and reading them.

A catalog is the user's to change (`$ATLAS_CATALOGS` names a folder of their own): a damaged one
is said in one line naming the file and its problem — not TOML, a table it lacks (`CatalogTable`),
or a value of another kind than the shipped catalog's at the same place; a number out of range
(`catalog_number`) or a regular expression that does not compile (`catalog_pattern`) where its
reader takes it. A user's regular expressions match within a time (`CatalogMatching`)."""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


# the largest TOML file read: the shipped catalogs are under 60 kB, a devices.toml of 20,000 entries
# 4.3 MB (parsed in ~1 s); one of 950 MB (a 50 MB device name on each entry) took minutes
TOML_BYTES = 16 << 20


def _load(path: Path) -> dict[str, Any]:
    from kernel_atlas.core.safe_files import read_bytes  # its one-line errors: no such file, too large, …

    try:
        return tomllib.loads(read_bytes(path, TOML_BYTES).decode("utf-8"))
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


# the largest a catalog's peak, bandwidth, size, count or FLOPs per element may be: ~10^5 × any
# GPU's (an H100's fp8 tensor peak is ~2·10^3 TFLOP/s, an MI355X's memory 8·10^3 GB/s, 304 CUs);
# a peak of 1e308 overflowed what the report computes from it; and the least a positive one may
# be (5e-324 GB/s divided a byte count to infinity)
CATALOG_NUMBER_MAX = 1e9
CATALOG_NUMBER_MIN = 1e-6


def catalog_number(table: Mapping[str, Any], key: str, *, zero: bool = False, whole: bool = False) -> float:
    """`table[key]`, a catalog's number, where it is finite, from CATALOG_NUMBER_MIN (`zero`: from
    0) to CATALOG_NUMBER_MAX, and whole where `whole`; else one line naming the file and the key
    (TOML's `nan` and `inf` are floats: the kind check of `read_toml` lets them through, and a
    negative or zero peak gave negative or NaN roofline numbers)."""
    value = table[key]
    number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if (
        (number >= 0.0 if zero else number >= CATALOG_NUMBER_MIN)
        and number <= CATALOG_NUMBER_MAX
        and (not whole or number.is_integer())
    ):
        return number
    most = f"{CATALOG_NUMBER_MAX:,.0f}"
    if whole:
        rule = f"a whole number from {0 if zero else 1} to {most}"
    else:
        rule = (
            f"a finite number from 0 to {most}"
            if zero
            else f"a positive finite number (from {CATALOG_NUMBER_MIN:f} to {most})"
        )
    shown = repr(value)[:40] if isinstance(value, int | float | bool) else _kind(value)
    where = f"{getattr(table, 'where', '')}{key}"
    raise AtlasError(getattr(table, "path", catalogs_dir()), f"`{where}` = {shown}: must be {rule}")


def catalog_pattern(pattern: object, path: Path, where: str, flags: int = 0) -> re.Pattern[str]:
    """A catalog's regular expression (`where`: its key), compiled; one that does not compile is
    said in one line naming the file and the key, not an internal error (nor blamed on a trace)."""
    try:
        return re.compile(str(pattern), flags)
    except (re.error, RecursionError, OverflowError) as exc:
        raise AtlasError(path, f"{where}: not a regular expression ({exc})") from None


class CatalogMatching:
    """Matching with the regular expressions of one catalog file: a user's own catalog
    (`$ATLAS_CATALOGS`) may hold one that backtracks catastrophically (`(.*.*)*Q$` on a
    40-character name runs for hours), so its patterns match within USER_PATTERN_SECONDS in all,
    over this process, as the user's patterns of `--kernel` and `--speedup` do (`time_bound`); past
    it, one line naming the file and the key. The shipped catalog's patterns run without a timer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.timed = path.parent.resolve() != SHIPPED.resolve()
        self.spent = 0.0

    @contextmanager
    def matching(self, where: str) -> Iterator[None]:
        if not self.timed:
            yield
            return
        from kernel_atlas.core.texts import USER_PATTERN_SECONDS, TooSlow, interrupted_after

        left = USER_PATTERN_SECONDS - self.spent
        start = time.perf_counter()
        try:
            if left <= 0:
                raise TooSlow
            with interrupted_after(left):
                yield
        except TooSlow:
            raise AtlasError(
                self.path,
                f"{where}: matching took more than {USER_PATTERN_SECONDS:g} s (a pattern that backtracks "
                "catastrophically?)",
            ) from None
        finally:
            self.spent += time.perf_counter() - start
