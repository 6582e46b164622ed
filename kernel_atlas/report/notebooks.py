"""Running the notebook dashboards: headless (nbclient) for tests and static HTML, or in Jupyter."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kernel_atlas.errors import AtlasError

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def notebook_path(name: str) -> Path:
    path = NOTEBOOKS / f"{name}.ipynb"
    if not path.exists():
        raise AtlasError(path, "notebook not found (the notebooks ship with the repository checkout)")
    return path


def execute(name: str, env: dict[str, str], timeout: int = 600):  # -> nbformat.NotebookNode
    """Run a notebook top to bottom in a fresh kernel with `env` added to the environment."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:
        raise AtlasError(None, f"notebook support needs the `notebook` extra ({exc.name} missing)") from None
    notebook = nbformat.read(notebook_path(name), as_version=4)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            store_widget_state=True,
        )
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook


def to_html(notebook, path: Path) -> Path:  # notebook: nbformat.NotebookNode
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(notebook)
    path.write_text(body, encoding="utf-8")
    return path


def open_in_jupyter(name: str, env: dict[str, str]) -> int:
    """Start Jupyter on a notebook with `env` set; returns Jupyter's exit code."""
    jupyter = shutil.which("jupyter")
    if jupyter is None:
        raise AtlasError(None, "Jupyter is not installed: `pip install -e '.[notebook]'`, or use --html FILE")
    for app in ("lab", "notebook"):
        probe = subprocess.run([jupyter, app, "--version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return subprocess.call([jupyter, app, str(notebook_path(name))], env={**os.environ, **env})
    raise AtlasError(None, "neither `jupyter lab` nor `jupyter notebook` is available; use --html FILE")
