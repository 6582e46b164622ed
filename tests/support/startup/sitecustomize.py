"""Run at the start of every Python process the tests start (tests/conftest.py puts this folder
first on PYTHONPATH): `atlas` commands, notebook kernels, Ray's workers.

jsonschema's optional IRI format checker, rfc3987-syntax (which jupyter-events pulls in with
`jsonschema[format-nongpl]`), builds a Lark grammar when imported: 2.7 s in every process that
imports jsonschema — nbformat's validator (the dashboards' kernels, through plotly's renderers),
Ray's runtime_env (each Ray worker), the MCP SDK. That was an eighth of the CPU time of the
command-line and report tests. No test validates an IRI: the checker is left out of them (the
import fails as if the package were absent, which jsonschema expects). Any other sitecustomize
this one shadows runs after it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

_here = os.path.dirname(os.path.abspath(__file__))


def _elsewhere() -> list[str]:
    """sys.path without this folder (an entry whose place cannot be told — the current folder,
    removed — is left out: a test starts commands in a folder that no longer exists)."""
    others = []
    for entry in sys.path:
        try:
            if os.path.abspath(entry or os.curdir) != _here:
                others.append(entry)
        except OSError:
            continue
    return others


try:
    _spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _elsewhere())
except OSError:
    _spec = None
if _spec is not None and _spec.loader is not None:
    _shadowed = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shadowed)
