"""docs/cli.md shows every command with an example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.main

from seglog.cli.main import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def command_paths(cmd: Any, prefix: str) -> list[str]:
    if not hasattr(cmd, "commands"):
        return [prefix]
    out: list[str] = []
    for name, sub in cmd.commands.items():
        out += command_paths(sub, f"{prefix} {name}")
    return out


def test_every_command_has_an_example() -> None:
    text = DOC.read_text()
    paths = command_paths(typer.main.get_command(app), "seglog")
    assert len(paths) > 20
    assert [p for p in paths if f"{p} " not in text] == []
