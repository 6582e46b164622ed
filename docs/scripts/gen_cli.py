"""Write docs/cli.md, the command-line reference, from the typer app itself.

    python docs/scripts/gen_cli.py          # rewrite docs/cli.md
    python docs/scripts/gen_cli.py --check  # exit 1 when docs/cli.md is out of step

tests/project/test_docs.py runs the check, so a new command or option cannot go undocumented."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import typer.main

from kernel_atlas.cli import app

OUT = Path(__file__).resolve().parents[1] / "cli.md"


def _cell(text: object) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _default(param) -> str:  # a click parameter (typer vendors click)
    if param.required:
        return "required"
    value = param.default
    if value is None or value == () or callable(value):
        return ""
    if isinstance(value, bool) and getattr(param, "is_flag", False) and not param.secondary_opts:
        return ""
    return f"`{_cell(value)}`"


def _names(param) -> str:
    if param.param_type_name == "argument":
        return f"`{param.name.upper()}`" + (" …" if param.nargs == -1 else "")
    names = [*param.opts, *param.secondary_opts]
    return ", ".join(f"`{n}`" for n in names)


def _command(name: str, command) -> list[str]:
    help_text = inspect.cleandoc(command.help or "")
    lines = [f"## `atlas {name}`", "", _cell(help_text), ""]
    params = [p for p in command.params if p.name != "help"]
    ctx = command.make_context(name, [], resilient_parsing=True)
    if params:
        lines += ["| argument / option | type | default | meaning |", "|---|---|---|---|"]
        for param in params:
            kind = "flag" if getattr(param, "is_flag", False) else _cell(param.display_type(ctx).strip("<>"))
            help_cell = _cell(getattr(param, "help", "") or "")
            lines.append(f"| {_names(param)} | {kind} | {_default(param)} | {help_cell} |")
        lines.append("")
    return lines


def render() -> str:
    group = typer.main.get_command(app)
    lines = [
        "# Command-line reference",
        "",
        "Generated from the `atlas` command itself by `python docs/scripts/gen_cli.py` (a test keeps it in",
        "step). Every command also has `--help`.",
        "",
        _cell(inspect.cleandoc(group.help or "")),
        "",
    ]
    for name, command in group.commands.items():
        lines += _command(name, command)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text() != text:
            sys.stderr.write(f"{OUT} is out of step with the CLI: run python docs/scripts/gen_cli.py\n")
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
