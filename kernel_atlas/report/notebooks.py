"""Running the notebook dashboards: headless (nbclient) for tests and static HTML, or served by
JupyterLab (`atlas dashboard OUT`)."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.safe_files import write_text

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def notebook_path(name: str) -> Path:
    """The notebook `name` among the shipped ones (a name, never a path: `../../x` ran a notebook
    from elsewhere)."""
    shipped = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) if NOTEBOOKS.is_dir() else []
    if not shipped:
        raise AtlasError(NOTEBOOKS, "no notebooks here (the notebooks ship with the repository checkout)")
    if name not in shipped:
        raise AtlasError("--notebook", f"no notebook {name!r} (notebooks: {', '.join(shipped)})")
    return NOTEBOOKS / f"{name}.ipynb"


def execute(name: str, env: dict[str, str], timeout: int = 600):  # -> nbformat.NotebookNode
    """Run a notebook top to bottom in a fresh kernel with `env` added to the environment."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as exc:
        raise AtlasError(None, f"notebook support needs the `notebook` extra ({exc.name} missing)") from None
    notebook = nbformat.read(notebook_path(name), as_version=4)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    sockets = tempfile.TemporaryDirectory(prefix="atlas-kernel-")  # private (0700): the kernel's IPC sockets
    kernel = _local_kernel(Path(sockets.name))
    try:
        client = NotebookClient(
            notebook,
            km=kernel,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            store_widget_state=True,
        )
        client.execute()
    except CellExecutionError as exc:
        # bad input met inside the notebook (`dashboard.NotebookError`: an AtlasError the notebook
        # shows in one line): the same one line
        if exc.ename in ("AtlasError", "NotebookError"):
            raise AtlasError(None, str(exc.evalue)) from None
        raise
    finally:
        if kernel.has_kernel:  # the client does not own a kernel it was given: stop it here
            kernel.shutdown_kernel(now=False)
        sockets.cleanup()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook


def _local_kernel(folder: Path):  # -> jupyter_client.KernelManager
    """A kernel that talks over Unix sockets in `folder` (a private temporary folder) rather than
    TCP on localhost: nothing listens on a port, and ipykernel has no reason to warn that its
    traffic is unencrypted."""
    from jupyter_client.manager import KernelManager

    return KernelManager(kernel_name="python3", transport="ipc", ip=str(folder / "kernel"))


# what the page says where it holds Jupyter widgets (the Explore filters, the kernel picker)
WIDGETS_NEED_NETWORK = (
    "The figures, tables and findings of this page work offline (plotly.js is inlined). The "
    "interactive parts — the Explore filters and the one-kernel picker — are Jupyter widgets: the "
    "page loads their manager (require.js from cdnjs.cloudflare.com, @jupyter-widgets/html-manager "
    "from unpkg.com) when it is opened, and without a network they stay blank. Offline, use "
    "`atlas dashboard OUT` (JupyterLab) or the self-contained report.html of `atlas report`."
)

# The page of `atlas dashboard --html`: nbconvert's lab template without MathJax (trace text is
# shown as text, never typeset: nothing on the page needs it, and it was two more CDN scripts),
# with the note above where widgets are drawn
_TEMPLATE = (
    """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block body_header -%}
{{ super() }}
{%- if "widgets" in nb.metadata -%}
<div class="atlas-offline-note" style="margin:8px 0;padding:6px 10px;border:1px solid #ccc;border-radius:6px;
font-size:13px;color:#444">"""
    + html.escape(WIDGETS_NEED_NETWORK)
    + """</div>
{%- endif -%}
{%- endblock body_header -%}
"""
)

# plotly's notebook renderer puts MathJax 3 from a CDN before every figure
_PLOTLY_MATHJAX = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"<>]*"></script>')


def script_json(text: str) -> str:
    """JSON text for a `<script>` element of the page (nbconvert's `escape_html_script`, which
    escapes only `/`): `<`, `>` and `&` as JSON escapes. A trace's `<!--<script>` in a widget's
    label (a kernel name) put the HTML parser in the script's double-escaped state, where the
    element's `</script>` closes nothing: the widget state then ran to the end of the file, no
    longer JSON, and no widget of the page was drawn. Only JSON goes through it (`json_dumps |
    escape_html_script` in both of the template's uses), where the escapes read as the same text."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def to_html(notebook, path: Path, title: str | None = None) -> Path:  # notebook: nbformat.NotebookNode
    """The executed notebook as one HTML page (`_TEMPLATE`), trace text safe in its scripts,
    under `title` (redacted; the page had nbconvert's default, the notebook's name "Notebook")."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"atlas_dashboard.html.j2": _TEMPLATE})],
        template_file="atlas_dashboard.html.j2",
        filters={"escape_html_script": script_json},
        html_manager_semver_range=_html_manager_range(),
    )
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            shown = output.get("data", {}).get("text/html")
            if isinstance(shown, str) and "mathjax" in shown:
                output["data"]["text/html"] = _PLOTLY_MATHJAX.sub("", shown)
    if title is not None:
        from kernel_atlas.core.redact import redact_text

        notebook.metadata["title"] = redact_text(title)
    body, _ = exporter.from_notebook_node(notebook)
    write_text(path, body)
    return path


def _html_manager_range() -> str:
    """The widget manager's versions that draw the widgets of the installed ipywidgets (the
    page had asked unpkg for whatever was newest, `@*`)."""
    try:
        from importlib.metadata import version

        major = int(version("ipywidgets").split(".", 1)[0])
    except (ImportError, ValueError, LookupError):
        return "*"
    return {8: "^1.0.0", 7: "^0.20.0"}.get(major, "*")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class JupyterLaunch:
    """How to start JupyterLab on one notebook, and where it will be served."""

    command: list[str]
    url: str
    port: int


def jupyter_launch(
    name: str, folder: Path, browser: bool = True, port: int | None = None, ip: str = "127.0.0.1"
) -> JupyterLaunch:
    """The JupyterLab command for a copy of notebooks/`name`.ipynb in `folder` (private to this
    run: JupyterLab saves a notebook as it runs, with its outputs — the trace's kernel names and
    numbers —, and the shipped notebook must stay as it is), served from `folder` on `ip`:`port`
    (a free port by default) with a fresh token; the URL carries the token."""
    path = folder / notebook_path(name).name
    if importlib.util.find_spec("jupyterlab") is None:
        raise AtlasError(None, "JupyterLab is not installed: `pip install -e '.[notebook]'`, or use --html FILE")
    port = port or _free_port()
    token = secrets.token_hex(24)
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.open_browser={browser}",
        "--ServerApp.answer_yes=True",  # Ctrl-C stops it without asking
        f"--ServerApp.root_dir={folder}",
        str(path),
    ]
    path.write_bytes(notebook_path(name).read_bytes())
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(-1, "--ServerApp.allow_root=True")  # containers and CI run as root
    host = "localhost" if ip in ("127.0.0.1", "localhost") else ip
    return JupyterLaunch(command, f"http://{host}:{port}/lab/tree/{path.name}?token={token}", port)


def open_in_jupyter(
    name: str, env: dict[str, str], browser: bool = True, port: int | None = None, announce=print
) -> int:
    """Serve a copy of a notebook in JupyterLab with `env` set (the kernels inherit it) until
    Ctrl-C or SIGTERM; `announce` gets the URL first. The copy, in a private temporary folder,
    goes when JupyterLab stops. Returns JupyterLab's exit code."""
    with tempfile.TemporaryDirectory(prefix="atlas-dashboard-") as folder:  # created 0700
        return _serve(jupyter_launch(name, Path(folder), browser, port), env, announce)


def _serve(launch: JupyterLaunch, env: dict[str, str], announce) -> int:
    process = subprocess.Popen(launch.command, env={**os.environ, **env})
    announce(launch.url)

    def stop(_signum: int, _frame: object) -> None:
        process.terminate()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return process.wait()
    except KeyboardInterrupt:  # JupyterLab got the same Ctrl-C; make sure it goes
        process.terminate()
        return process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if process.poll() is None:
            process.kill()
            process.wait()
