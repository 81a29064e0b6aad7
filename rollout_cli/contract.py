"""The JSON contract of `rollout ... -o json`: one JSON Schema per output, shipped with the package.

Scripts may rely on exactly what these schemas say (and tests/cli/test_json_contract.py checks
real outputs against them). Each carries a ``version`` (:func:`version`) and every command with
``-o json`` has one (:data:`COMMAND_SCHEMAS`; ``status --watch -o json`` prints one ``rollout``
document per line). `start` and `rollback` embed the rollout as `status` shows it
(``run.json`` refers to ``rollout.json``), so every command describes a rollout the same way.
A run handed to a deployment with ``--no-wait`` prints ``submitted.json`` instead (`start`,
`rollback`, `fleet start`): what was submitted, and how to follow it.

Why it ships although no command imports it: it is the installed package's documented way for a
script to read those schemas (README, "Quickstart"), by name rather than by file path inside
site-packages; tests/cli/test_wheel.py reads them through it from an installed wheel.
``validator`` needs ``jsonschema``, which the package does not install (scripts that validate
bring it; the project's dev extra has it).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

SCHEMAS = ("rollout", "run", "plan", "validate", "approve", "publish", "diff", "request", "list", "drift", "fleet-plan",
           "fleet-run", "fleet-status", "fleet-abort", "fleet-identity", "fleet-validate", "submitted")
# the schema of each command's -o json (``export`` prints a KubeletConfiguration: the kubelet's contract)
COMMAND_SCHEMAS = {
    "validate": "validate", "diff": "diff", "plan": "plan", "publish": "publish", "start": "run",
    "retry": "run", "rollback": "run", "status": "rollout", "approve": "approve", "reject": "approve",
    "pause": "request", "resume": "request", "abort": "request", "promote": "request", "list": "list", "drift": "drift",
    "fleet plan": "fleet-plan", "fleet start": "fleet-run", "fleet status": "fleet-status",
    "fleet approve": "approve", "fleet reject": "approve", "fleet abort": "fleet-abort",
    "fleet identify": "fleet-identity", "fleet validate": "fleet-validate",
}


def version(name: str) -> int:
    """The schema's version: it grows with every change a script could notice (a field added or
    gone, a type changed); the output of a version validates against that version's schema."""
    return int(schema(name)["version"])


@cache
def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one output (a name of ``SCHEMAS``). `export` prints a
    KubeletConfiguration, whose contract is the kubelet's own."""
    document: dict[str, Any] = json.loads((files("rollout_cli") / "schemas" / f"{name}.json").read_text())
    return document


def validator(name: str) -> Any:
    """A ``jsonschema`` validator for ``name`` that resolves the schemas' references to each other."""
    import jsonschema
    from referencing import Registry, Resource

    registry = Registry().with_resources(
        (schema(other)["$id"], Resource.from_contents(schema(other))) for other in SCHEMAS)
    return jsonschema.Draft202012Validator(schema(name), registry=registry)
