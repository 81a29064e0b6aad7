"""No ``Any`` at the gateway seam, checked on the AST of every module outside the gateway.

The core, the flows and the CLI reach the cluster only through the ports of ``rollout/ports.py``;
``mypy --strict`` (tests/test_types.py) then checks every call through them and that
``KubeGateway`` implements them. That proof holds only while the seam is typed, so:

* ``rollout/ports.py`` names ``Any`` nowhere (an API document is a ``JsonObject`` or a TypedDict);
* every parameter that carries the gateway (named ``gateway``, ``cluster`` or ``gw``) in
  ``rollout/`` (the gateway package aside), ``flows/`` and ``rollout_cli/`` is annotated with ports;
* every function that hands out a gateway (returns or yields what ``open_gateway``, a gateway
  constructor or another such function gave it) is annotated with ports.

As in tests/test_import_contracts.py, each checker first shows it catches a synthetic violation.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PORTS = ROOT / "rollout" / "ports.py"
GATEWAY_PACKAGE = "rollout/gateway/"
CALLER_PACKAGES = ("rollout", "flows", "rollout_cli")
GATEWAY_PARAMS = {"gateway", "cluster", "gw"}
NOT_GATEWAYS = {("_answer", "cluster"), ("_answer_here", "cluster")}  # rollout approve/reject: the (kubeconfig, context) pair
# what builds a gateway; functions that hand one of these out join the set (see factories())
GATEWAY_SOURCES = {"open_gateway", "KubeGateway", "from_kubeconfig", "in_cluster"}
Function = ast.FunctionDef | ast.AsyncFunctionDef


def annotation_names(node: ast.expr | None) -> set[str]:
    """The names an annotation uses (``rollout.ports.Gateway`` -> Gateway; quoted ones parsed)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return annotation_names(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Name):
        return {node.id}
    return {name for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)
            for name in annotation_names(child)}


def signature_annotations(fn: Function) -> Iterator[ast.expr | None]:
    args = fn.args
    for arg in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg):
        if arg is not None:
            yield arg.annotation
    yield fn.returns


def any_in_ports(tree: ast.AST) -> list[str]:
    """Every place the ports module names ``Any``: imported, used, or in a quoted annotation."""
    found = [f"line {n.lineno}: imports Any" for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and any(a.name == "Any" for a in n.names)]
    found += [f"line {n.lineno}: Any" for n in ast.walk(tree)
              if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")]
    quoted: list[ast.expr | None] = [n.annotation for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)]
    quoted += [a for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               for a in signature_annotations(n)]
    found += [f"line {a.lineno}: Any in {a.value!r}" for a in quoted
              if isinstance(a, ast.Constant) and "Any" in annotation_names(a)]
    return found


def port_names(tree: ast.AST) -> set[str]:
    """The classes and aliases ``rollout/ports.py`` defines."""
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    aliases = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Name) and t.id != "__all__"}
    return classes | aliases


def functions(tree: ast.AST) -> Iterator[tuple[str, Function]]:
    """Every function and method, with a dotted name (``Engine.__init__``)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _called(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return ""


def hands_out_gateway(fn: Function, sources: set[str]) -> bool:
    """``fn`` returns or yields a gateway it got from one of ``sources`` (directly, or through a
    name it bound to one, alone or in a tuple)."""
    bound = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _called(n.value) in sources
             for t in n.targets if isinstance(t, ast.Name)}

    def is_gateway(value: ast.AST | None) -> bool:
        if isinstance(value, ast.Tuple):
            return any(is_gateway(e) for e in value.elts)
        return _called(value) in sources if isinstance(value, ast.Call) else (
            isinstance(value, ast.Name) and value.id in bound)

    return any(is_gateway(n.value) for n in ast.walk(fn) if isinstance(n, (ast.Return, ast.Yield)))


def factories(trees: dict[str, ast.AST]) -> dict[str, Function]:
    """Every function that hands out a gateway, found to a fixpoint (a function handing out what
    a factory gave it is a factory too), as ``path:name``."""
    sources, found = set(GATEWAY_SOURCES), {}
    while True:
        more = {f"{where}:{name}": fn for where, tree in trees.items() for name, fn in functions(tree)
                if hands_out_gateway(fn, sources)}
        if more.keys() <= found.keys():
            return found
        found |= more
        sources |= {fn.name for fn in more.values()}


def typed_by_ports(annotation: ast.expr | None, ports: set[str]) -> str:
    """Why ``annotation`` is not a port (or an optional one); "" when it is."""
    names = annotation_names(annotation)
    if not names:
        return "not annotated"
    if "Any" in names:
        return "Any"
    others = names - ports - {"None", "Optional", "Iterator", "Generator", "tuple"}
    if others or not names & ports:
        return f"not a port: {', '.join(sorted(others)) or 'no port named'}"
    return ""


def seam_violations(where: str, tree: ast.AST, ports: set[str], handed_out: set[str]) -> list[str]:
    """The gateway parameters of one module not typed with ports, and the return annotations of
    its functions in ``handed_out`` (``path:name``) not typed with ports."""
    found = []
    for name, fn in functions(tree):
        args = fn.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            if (arg.arg in GATEWAY_PARAMS and (fn.name, arg.arg) not in NOT_GATEWAYS
                    and (why := typed_by_ports(arg.annotation, ports))):
                found.append(f"{where}:{name}({arg.arg}): {why}")
        if f"{where}:{name}" in handed_out and (why := typed_by_ports(fn.returns, ports)):
            found.append(f"{where}:{name} -> {why}")
    return found


def caller_modules() -> dict[str, ast.AST]:
    paths = sorted(p for pkg in CALLER_PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)
    return {rel: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in paths
            if not (rel := p.relative_to(ROOT).as_posix()).startswith(GATEWAY_PACKAGE)}


PORTS_TREE = ast.parse(PORTS.read_text(encoding="utf-8"))
PORT_NAMES = port_names(PORTS_TREE)


# ------------------------------------------------------------------------------ the checkers fail


@pytest.mark.parametrize("source", [
    pytest.param("from typing import Any\n", id="importing Any"),
    pytest.param("class P(Protocol):\n    def f(self) -> dict[str, Any]: ...\n", id="Any in a return"),
    pytest.param("class P(Protocol):\n    def f(self, x: typing.Any) -> None: ...\n", id="typing.Any in a parameter"),
    pytest.param("class P(Protocol):\n    def f(self, x: 'Mapping[str, Any]') -> None: ...\n", id="Any quoted"),
    pytest.param("class T(TypedDict):\n    x: 'Any'\n", id="Any in a field"),
    pytest.param("Doc = Mapping[str, Any]\n", id="Any in an alias"),
])
def test_the_ports_checker_catches_any(source: str) -> None:
    assert any_in_ports(ast.parse(source))


def test_the_ports_checker_lets_a_docstring_say_any() -> None:
    assert any_in_ports(ast.parse('"""No ``Any`` crosses this seam."""\nX = Mapping[str, object]\n')) == []


@pytest.mark.parametrize(("source", "expected"), [
    pytest.param("def f(gateway: Any) -> None: ...\n", 1, id="a gateway as Any"),
    pytest.param("def f(gateway) -> None: ...\n", 1, id="a gateway not annotated"),
    pytest.param("def f(gw: dict[str, object]) -> None: ...\n", 1, id="a gateway typed as no port"),
    pytest.param("def f(gateway: 'JournalReader | Any') -> None: ...\n", 1, id="a port or Any"),
    pytest.param("class E:\n    def __init__(self, *, cluster: object) -> None: ...\n", 1, id="a keyword-only cluster"),
    pytest.param("def open_gateway() -> Any:\n    return KubeGateway.from_kubeconfig()\n", 1,
                 id="a factory returning Any"),
    pytest.param("def _gw() -> object:\n    g = open_gateway()\n    return g\n", 1, id="a factory through a name"),
    pytest.param("def session() -> Iterator[tuple[Any, Lock]]:\n    gateway = open_gateway()\n"
                 "    yield gateway, lock\n", 1, id="a factory yielding a tuple"),
    pytest.param("def f(gateway: JournalReader, cluster: 'Cluster | None' = None) -> None: ...\n", 0,
                 id="ports, optional or quoted, pass"),
    pytest.param("def session() -> Iterator[tuple[Gateway, Lock]]:\n    gateway = open_gateway()\n"
                 "    yield gateway, lock\n", 0, id="a factory typed with ports passes"),
    pytest.param("def status(name: str) -> dict[str, Any]:\n    gateway = open_gateway()\n"
                 "    return {'x': gateway.read_lock()}\n", 0, id="a function that only uses a gateway is no factory"),
])
def test_the_seam_checker_catches_untyped_gateways(source: str, expected: int) -> None:
    tree = ast.parse(source)
    handed_out = set(factories({"x.py": tree}))
    assert len(seam_violations("x.py", tree, PORT_NAMES, handed_out)) == expected


def test_a_factory_of_a_factory_is_found() -> None:
    tree = ast.parse("def opened():\n    return open_gateway()\n\ndef again():\n    return opened()\n")
    assert set(factories({"x.py": tree})) == {"x.py:opened", "x.py:again"}


# ------------------------------------------------------------------------------ the seam holds


def test_the_ports_name_no_any() -> None:
    assert any_in_ports(PORTS_TREE) == []


def test_the_walk_sees_the_seam() -> None:
    """The checks below look where the gateway really goes (a renamed parameter would slip by)."""
    trees = caller_modules()
    params = {f"{where}:{name}" for where, tree in trees.items() for name, fn in functions(tree)
              for arg in (*fn.args.args, *fn.args.kwonlyargs) if arg.arg in GATEWAY_PARAMS}
    assert {"rollout/loop/engine.py:Engine.__init__", "rollout/usecases/prepare.py:prepare", "rollout/usecases/rollback.py:start_rollback",
            "rollout/usecases/status.py:rollout_status", "rollout/usecases/commands.py:preview_plan",
            "flows/cluster.py:held_lock"} <= params
    handed_out = set(factories(trees))
    assert {"rollout_cli/base.py:open_cluster"} <= handed_out
    assert {"Cluster", "Gateway", "Informer", "Lock", "JournalReader"} <= PORT_NAMES


def test_a_run_is_handed_its_gateway_typed_with_a_port() -> None:
    """A run's adapters travel in ``RunTools`` (``flows.cluster.run_tools`` opens them): its gateway
    field is a port, so every call a run makes to the cluster is checked against the ports too."""
    tree = ast.parse((ROOT / "rollout/run/run.py").read_text())
    tools = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "RunTools")
    fields = {f.target.id: f.annotation for f in tools.body
              if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)}
    assert typed_by_ports(fields["gateway"], PORT_NAMES) == ""


def test_every_gateway_at_the_seam_is_typed_with_ports() -> None:
    trees = caller_modules()
    handed_out = set(factories(trees))
    assert [v for where, tree in trees.items() for v in seam_violations(where, tree, PORT_NAMES, handed_out)] == []
