"""Import contracts of the core, checked on the AST of every module in rollout/ (kopf's
.importlinter idea, without the extra tool).

- Only the gateway (rollout/gateway.py or the rollout/gateway/ package) may import ``kubernetes``:
  the core must not know which client produced an observation.
- Only the composition root (rollout/cli.py or rollout/cli/) may import ``prefect``, ``flows`` or
  ``kubesim``: the core is a library the flows use, never the other way round.
- The pure decision modules also read no clock, do no logging and no retries.

Each checker is first run on a small synthetic module that breaks the rule, so a checker that
silently finds nothing fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROLLOUT = Path(__file__).resolve().parents[2] / "rollout"
PURE = ("model", "policy", "planner", "phases", "machine", "journal", "errors")
CLOCK_CALLS = {"now", "utcnow", "today"}  # datetime.now(), date.today(), ...
TIME_MODULE_CALLS = {"time", "monotonic", "perf_counter", "time_ns"}  # time.time(), ...


def imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                roots.add(arg.value.split(".")[0])
    return roots


def _dynamic_import(call: ast.Call) -> bool:
    """``importlib.import_module("x")`` or ``__import__("x")`` with a literal name."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__") and bool(call.args)


def clock_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            from_time = isinstance(receiver, ast.Name) and receiver.id == "time"
            if node.func.attr in CLOCK_CALLS or (from_time and node.func.attr in TIME_MODULE_CALLS):
                found.append(f"line {node.lineno}: .{node.func.attr}()")
    return found


def modules() -> list[Path]:
    return sorted(p for p in ROLLOUT.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(ROLLOUT.parent).as_posix()


def is_gateway(path: Path) -> bool:
    r = rel(path)
    return r == "rollout/gateway.py" or r.startswith("rollout/gateway/")


def is_cli(path: Path) -> bool:
    r = rel(path)
    return r == "rollout/cli.py" or r.startswith("rollout/cli/")


def violations(path: Path, tree: ast.AST) -> list[str]:
    roots = imported_roots(tree)
    out = []
    if "kubernetes" in roots and not is_gateway(path):
        out.append(f"{rel(path)} imports kubernetes (only the gateway may)")
    for forbidden in ("prefect", "flows", "kubesim"):
        if forbidden in roots and not is_cli(path):
            out.append(f"{rel(path)} imports {forbidden} (only rollout/cli.py may)")
    return out


def pure_violations(tree: ast.AST) -> list[str]:
    roots = imported_roots(tree)
    bad = sorted(roots & {"logging", "time", "tenacity", "socket", "subprocess", "requests", "kubernetes"})
    return [f"imports {m}" for m in bad] + clock_reads(tree)


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        pytest.param(
            "rollout/planner.py",
            "import kubernetes.client\n",
            1,
            id="a core module importing kubernetes is caught",
        ),
        pytest.param(
            "rollout/machine.py",
            "from kubernetes import client\n",
            1,
            id="from-import of kubernetes is caught",
        ),
        pytest.param(
            "rollout/gateway/_x.py", "import kubernetes\n", 0, id="the gateway package may import kubernetes"
        ),
        pytest.param(
            "rollout/gateway.py", "import kubernetes\n", 0, id="a gateway module may import kubernetes"
        ),
        pytest.param(
            "rollout/journal.py", "import prefect\n", 1, id="a core module importing prefect is caught"
        ),
        pytest.param(
            "rollout/phases.py",
            "from flows.rollout import x\n",
            1,
            id="a core module importing flows is caught",
        ),
        pytest.param(
            "rollout/policy.py", "import kubesim.cluster\n", 1, id="a core module importing kubesim is caught"
        ),
        pytest.param(
            "rollout/cli.py",
            "import prefect\nimport flows\nimport kubesim\n",
            0,
            id="the cli may import prefect, flows and kubesim",
        ),
        pytest.param("rollout/gateway.py", "import prefect\n", 1, id="the gateway may not import prefect"),
        pytest.param(
            "rollout/planner.py",
            "import importlib\nk = importlib.import_module('kubernetes.client')\n",
            1,
            id="a dynamic import of kubernetes is caught",
        ),
        pytest.param(
            "rollout/machine.py",
            "def f():\n    import prefect\n",
            1,
            id="an import hidden in a function is caught",
        ),
    ],
)
def test_checker_catches_synthetic_violations(where: str, source: str, expected: int) -> None:
    assert len(violations(ROLLOUT.parent / where, ast.parse(source))) == expected


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(
            "from datetime import datetime\nx = datetime.now()\n", id="datetime.now() is a clock read"
        ),
        pytest.param("import time\n", id="importing time is forbidden in pure modules"),
        pytest.param("x = time.monotonic()\n", id="time.monotonic() is a clock read"),
        pytest.param("from datetime import date\nx = date.today()\n", id="date.today() is a clock read"),
        pytest.param("import logging\n", id="logging is forbidden in pure modules"),
    ],
)
def test_pure_checker_catches_synthetic_violations(source: str) -> None:
    assert pure_violations(ast.parse(source))


def pure_files(name: str) -> list[Path]:
    """A pure core unit is a module (``rollout/planner.py``) or a package (``rollout/policy/``)."""
    package = ROLLOUT / name
    if package.is_dir():
        return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    return [ROLLOUT / f"{name}.py"]


def test_the_walk_sees_the_core_modules() -> None:
    names = {rel(p) for p in modules()}
    for name in PURE:
        files = {rel(p) for p in pure_files(name)}
        assert files and files <= names, name


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_module_respects_import_contracts(path: Path) -> None:
    assert violations(path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))) == []


@pytest.mark.parametrize("name", PURE)
def test_pure_core_reads_no_clock_and_does_no_io_plumbing(name: str) -> None:
    for path in pure_files(name):
        assert pure_violations(ast.parse(path.read_text(encoding="utf-8"))) == [], rel(path)
