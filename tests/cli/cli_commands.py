"""Every `rollout` command by the name a person types after `rollout` (a group's: "fleet plan")."""

from __future__ import annotations

from typing import Any

import typer

from rollout_cli.main import app


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        found.update(_commands(cmd, f"{prefix}{name} ") if hasattr(cmd, "commands") else {f"{prefix}{name}": cmd})
    return found


COMMANDS: dict[str, Any] = _commands(typer.main.get_command(app))
