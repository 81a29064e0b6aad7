"""The config core is pure: it must never import the Kubernetes client, Prefect or anything that
does I/O on its own (only rollout/gateway may talk to a cluster)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROLLOUT = Path(__file__).resolve().parents[2] / "rollout"
MODULES = sorted((ROLLOUT / "kubeletconfig").glob("*.py")) + [ROLLOUT / "publish.py", ROLLOUT / "inputs.py"]
FORBIDDEN = (
    "kubernetes",
    "prefect",
    "tenacity",
    "requests",
    "aiohttp",
    "kubesim",
    "flows",
    "subprocess",
    "socket",
)


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_config_core_imports_nothing_with_side_effects(path: Path) -> None:
    assert imported_roots(path).isdisjoint(FORBIDDEN), path


def test_guard_sees_imports() -> None:
    assert "yaml" in imported_roots(ROLLOUT / "inputs.py")
    assert "pydantic" in imported_roots(ROLLOUT / "kubeletconfig" / "decode.py")
