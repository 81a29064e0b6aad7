"""Every `-o json` has a shipped JSON Schema, and every schema a version (rollout_cli.contract)."""

from __future__ import annotations

from typing import Any

import jsonschema
import typer

from rollout_cli.contract import COMMAND_SCHEMAS, SCHEMAS, schema, validator, version
from rollout_cli.main import app

def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every command by the name a person types after `rollout` (a group's: "fleet plan")."""
    found: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        found.update(_commands(cmd, f"{prefix}{name} ") if hasattr(cmd, "commands") else {f"{prefix}{name}": cmd})
    return found


COMMANDS: dict[str, Any] = _commands(typer.main.get_command(app))
NOT_OURS = {"export"}  # prints a KubeletConfiguration: the kubelet's contract


def test_every_command_with_json_output_has_a_schema() -> None:
    """Before: pause, resume, abort, promote and list had no schema."""
    with_json = {name for name, cmd in COMMANDS.items() if any(p.name == "output" for p in cmd.params)}
    assert with_json - NOT_OURS == set(COMMAND_SCHEMAS), "add the command's schema to COMMAND_SCHEMAS"
    assert set(COMMAND_SCHEMAS.values()) <= set(SCHEMAS)


def test_every_schema_is_valid_and_has_a_version() -> None:
    for name in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(schema(name))
        assert version(name) >= 1, name
        validator(name)  # its references resolve

