"""Every option of every command says what it does in --help (a new user reads nothing else)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from orchestrator.cli import app


def _commands(cmd: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, f"{path} {name}")


def test_every_option_has_help() -> None:
    root = typer.main.get_command(app)
    seen = 0
    missing = []
    for path, cmd in _commands(root, "orch"):
        for param in cmd.params:
            if getattr(param, "param_type_name", "") != "option" or param.hidden:
                continue
            seen += 1
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{path} {'/'.join(param.opts)}")
    assert seen > 100  # the walk reached the subcommands
    assert missing == []
