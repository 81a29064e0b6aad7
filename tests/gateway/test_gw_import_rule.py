"""Only the gateway package may import the Kubernetes client (and its transport)."""

from __future__ import annotations

import ast
from pathlib import Path

ROLLOUT = Path(__file__).resolve().parents[2] / "rollout"
CLIENT_MODULES = {"kubernetes", "urllib3"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_rollout_gateway_imports_the_kubernetes_client():
    offenders = sorted(
        str(path.relative_to(ROLLOUT.parent))
        for path in ROLLOUT.rglob("*.py")
        if "gateway" not in path.relative_to(ROLLOUT).parts[:1]
        and imported_roots(path) & CLIENT_MODULES
    )
    assert offenders == []


def test_the_gateway_does_import_it():
    # guards the walker itself: if this fails the rule above checks nothing
    assert "kubernetes" in imported_roots(ROLLOUT / "gateway" / "_gateway.py")
