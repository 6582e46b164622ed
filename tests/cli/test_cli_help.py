"""Every command's --help shows its whole description (nothing eaten as rich markup)."""

from __future__ import annotations

import inspect
import re

import pytest
from typer.testing import CliRunner

from kernel_atlas.cli import app

COMMANDS = {(c.name or c.callback.__name__): c.callback for c in app.registered_commands}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_the_whole_description(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert result.exit_code == 0
    shown = " ".join(result.output.split())
    description = (COMMANDS[name].__doc__ or "").split("\n\n")[0]
    for word in re.findall(r"[\w.\[\]]+", description):
        assert word in shown, (name, word)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_paragraphs_are_rewrapped_to_the_terminal(name: str) -> None:
    """The docstrings' own line breaks reached `--help` (ragged lines of half the width, in the
    command list too); each prose paragraph is one line that rich wraps to the terminal."""
    command = next(c for c in app.registered_commands if (c.name or c.callback.__name__) == name)
    for paragraph in inspect.cleandoc(command.help or command.callback.__doc__ or "").split("\n\n"):
        if not any(line.startswith(("-", "*", " ")) for line in paragraph.splitlines()):
            assert "\n" not in paragraph, (name, paragraph)
