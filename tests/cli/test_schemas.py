"""Every `-o json` has a shipped JSON Schema, and every schema a version (rollout_cli.contract)."""

from __future__ import annotations

from typing import Any

import jsonschema
from cli_commands import COMMANDS

from rollout_cli.contract import COMMAND_SCHEMAS, SCHEMAS, schema, validator, version

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

