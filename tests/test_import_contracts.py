"""Import contracts of every package, checked on the AST of every module (kopf's .importlinter
idea, without the extra tool). Imports run one way: CLI (the composition root) -> flows -> rollout.

| package                  | may not import                                                        |
|--------------------------|-----------------------------------------------------------------------|
| ``rollout`` (the core)   | prefect, flows, rollout_cli, kubesim, the agent; ``kubernetes`` outside ``rollout/gateway`` |
| ``flows``                | rollout_cli, kubernetes (only through the gateway), the agent, kubesim |
| ``kubesim``              | anything of ours: it stands alone                                     |
| ``kubelet_rollout_agent``| prefect, flows, rollout_cli, kubesim                                  |
| ``rollout_cli``          | (the composition root, the demo's home: anything)                     |
| ``bench/`` (scripts)     | kubesim (but its workload model), the agent, the CLI's commands, private names (see below) |

Inside the core (``CORE_LAYERS``): values and rules at the ground; the ports above them; the run
loop and the use cases on both, reaching the cluster only through the ports; the gateway
implementing the ports, knowing nothing of its callers. No module of the core is over 500 lines.

Nothing of the product imports ``bench/``: it is not shipped. The pure decision modules of the
core also read no clock, do no logging and no retries.

``bench/`` measures the product as a user runs it: ``kubesim up``, the node agents and
``rollout start`` are child processes, so their CPU is never the measuring process's and the
numbers are the ones a user gets. In process it only prepares inputs and reads results: the
``kubernetes`` client, the core's and the flows' public names (the reaction benchmark runs the
flow as a deployment's worker does), never a module or name starting with ``_``. What it imports
of ours must still exist (a refactor that moves a name breaks the benchmark before anyone runs it).
One exception, and no timing rides on it: the judge's error rates (bench/judge_quality.py) need
thousands of simulated canaries, so that benchmark steps kubesim's workload model in process
(``KUBESIM_MODEL``: one node's workload and metrics without a cluster, and the harm catalogue).

Each checker is first run on small synthetic modules that break a rule, so a checker that
silently finds nothing fails too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLLOUT = ROOT / "rollout"
PACKAGES = ("rollout", "flows", "kubesim", "rollout_cli", "kubelet_rollout_agent")
SCRIPTS = ("bench",)  # folders of scripts, not packages: checked, never shipped
OURS = {"rollout", "flows", "kubesim", "rollout_cli", "kubelet_rollout_agent"}
PURE = ("model", "policy", "planner", "machine", "journal", "errors", "names", "report", "publish",
        "outcome", "timefmt", "inputs/flow_depth", "analysis", "verdict", "fleet", "agent_clock", "drift")
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


def imported_names(tree: ast.AST) -> set[str]:
    """Every dotted name an import binds: ``import a.b`` -> ``a.b``, ``from a import b`` -> ``a.b``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
    return names


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
    return sorted(p for pkg in (*PACKAGES, *SCRIPTS) if (ROOT / pkg).is_dir()
                  for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def forbidden_for(where: str) -> set[str]:
    """What a module at ``where`` (a path relative to the repo) may not import."""
    if where.startswith("bench/"):
        return {"kubesim", "kubelet_rollout_agent"}  # started as processes, like rollout start
    return _product_forbidden(where) | {"bench"}


def _product_forbidden(where: str) -> set[str]:
    package = where.split("/")[0]
    if package == "rollout":
        out = {"prefect", "flows", "rollout_cli", "kubesim", "kubelet_rollout_agent"}
        return out if where.startswith("rollout/gateway") else out | {"kubernetes"}
    if package == "flows":
        return {"rollout_cli", "kubernetes", "kubelet_rollout_agent", "kubesim"}
    if package == "kubesim":
        return OURS - {"kubesim"}
    if package == "kubelet_rollout_agent":
        return {"prefect", "flows", "rollout_cli", "kubesim"}
    return set()


KUBESIM_MODEL = ("kubesim.standalone", "kubesim.harms")  # what bench/ may step in process


def violations(path: Path, tree: ast.AST) -> list[str]:
    where = path.relative_to(ROOT).as_posix()
    roots = imported_roots(tree)
    if where.startswith("bench/") and "kubesim" in roots and all(
            name.startswith(KUBESIM_MODEL) for name in imported_names(tree) if name.split(".")[0] == "kubesim"):
        roots -= {"kubesim"}
    bad = sorted(roots & forbidden_for(where))
    found = [f"{where} imports {name}" for name in bad]
    if where.startswith("bench/"):
        found += [f"{where} {problem}" for problem in bench_violations(tree)]
    return found


def bench_violations(tree: ast.AST) -> list[str]:
    """In process, bench/ reads results through public names and runs no command of the CLI."""
    found = []
    for name in sorted(imported_names(tree)):
        if any(part.startswith("_") and not part.endswith("__") for part in name.split(".")):
            found.append(f"imports the private {name}")
        elif name.split(".")[0] == "rollout_cli" and _is_command_line(name):
            found.append(f"runs the CLI in process: {name}")
    return found


def _is_command_line(name: str) -> bool:
    """A module of the command line: one that imports typer, or ``__main__``."""
    module = _module_file(name)
    if module is None:
        return False
    return module.name == "__main__.py" or "typer" in imported_roots(ast.parse(module.read_text(encoding="utf-8")))


def _module_file(name: str) -> Path | None:
    """The file of ``name``'s longest prefix that is a module (``a.b.c`` -> ``a/b.py`` for a name c in it)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


# The layers inside the core, each a folder (the ground, values and rules, is the core's root: its
# modules and its rule packages). Values and rules are what a rollout is and decides (pure but for
# the lock's look at /proc); the ports state what the core needs of a cluster; the run loop and the
# use cases stand on both and reach the cluster only through the ports; a run composes the loop
# and the use cases; the adapters implement the ports and know nothing of who calls them. A module
# of the core in no layer fails.
CORE_LAYERS: dict[str, tuple[str, ...]] = {
    "values and rules": ("names", "timefmt", "errors", "outcome", "model", "policy", "kubeletconfig", "catalog",
                         "inputs", "flags", "planner", "journal", "machine", "report", "publish", "lock", "analysis",
                         "verdict", "fleet", "agent_clock", "identity", "drift", "drain"),
    "ports": ("ports",),
    "the run loop": ("loop",),
    "use cases": ("usecases",),
    # a run as a command starts it: the request, the lock, the preparation, the loop, its view and report
    "a run": ("run",),
    # the adapters implementing the ports: the cluster's (the gateway) and Prometheus'
    "adapters": ("gateway", "prometheus"),
}
CORE_MAY_IMPORT: dict[str, set[str]] = {
    "values and rules": {"values and rules"},
    "ports": {"values and rules", "ports"},
    "the run loop": {"values and rules", "ports", "the run loop"},
    "use cases": {"values and rules", "ports", "use cases"},
    "a run": {"values and rules", "ports", "the run loop", "use cases", "a run"},
    "adapters": {"values and rules", "ports", "adapters"},
}
LAYER_OF = {unit: layer for layer, units in CORE_LAYERS.items() for unit in units}


def core_unit(where: str) -> str:
    """``rollout/machine/batches.py`` -> ``machine``; ``rollout/loop/engine.py`` -> ``loop``."""
    first = where.split("/")[1]
    return first.removesuffix(".py")


def core_units_imported(tree: ast.AST) -> set[str]:
    """The core's modules and packages an absolute import names (``rollout.machine.step`` -> machine)."""
    units = set()
    for name in imported_names(tree):
        parts = name.split(".")
        if parts[0] == "rollout" and len(parts) > 1:
            units.add(parts[1])
    return units


def layer_violations(where: str, tree: ast.AST) -> list[str]:
    unit = core_unit(where)
    if unit == "__init__":
        return []
    layer = LAYER_OF.get(unit)
    if layer is None:
        return [f"{where}: {unit} is in no layer of the core (tests/test_import_contracts.py CORE_LAYERS)"]
    found = []
    for target in sorted(core_units_imported(tree) - {unit}):
        target_layer = LAYER_OF.get(target)
        if target_layer is not None and target_layer not in CORE_MAY_IMPORT[layer]:
            found.append(f"{where} ({layer}) imports rollout.{target} ({target_layer})")
    return found


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        pytest.param("rollout/planner.py", "from rollout.loop.engine import Engine\n", 1, id="a rule imports the run loop"),
        pytest.param("rollout/machine/batches.py", "from rollout.ports import Cluster\n", 1,
                     id="the decisions know no ports"),
        pytest.param("rollout/loop/engine.py", "from rollout.gateway import KubeGateway\n", 1,
                     id="the run loop reaches the gateway only through the ports"),
        pytest.param("rollout/usecases/prepare.py", "def f():\n    from rollout.gateway import open_gateway\n", 1,
                     id="a use case opening the gateway is caught, even inside a function"),
        pytest.param("rollout/usecases/status.py", "from rollout.loop.engine import Engine\n", 1,
                     id="the use cases do not run the loop"),
        pytest.param("rollout/loop/engine.py", "from rollout.usecases.prepare import prepare\n", 1,
                     id="the loop does not call the use cases"),
        pytest.param("rollout/gateway/_nodes.py", "from rollout.machine import step\n", 0,
                     id="the gateway may read the values and rules"),
        pytest.param("rollout/gateway/_nodes.py", "from rollout.usecases.status import rollout_status\n", 1,
                     id="the gateway knows nothing of its callers"),
        pytest.param("rollout/ports.py", "from rollout.loop.engine import Engine\n", 1, id="the ports stand below the run"),
        pytest.param("rollout/newthing.py", "import json\n", 1, id="a new module of the core must find a layer"),
        pytest.param("rollout/loop/engine.py", "from rollout.machine import step\nfrom rollout.ports import Cluster\n", 0,
                     id="the loop stands on the rules and the ports"),
    ],
)
def test_layer_checker_catches_synthetic_violations(where: str, source: str, expected: int) -> None:
    assert len(layer_violations(where, ast.parse(source))) == expected


@pytest.mark.parametrize("path", [p for p in modules() if rel(p).startswith("rollout/")], ids=rel)
def test_core_module_respects_its_layer(path: Path) -> None:
    assert layer_violations(rel(path), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))) == []


MAX_CORE_MODULE_LINES = 500


def test_no_module_of_the_core_is_over_500_lines() -> None:
    """A module of the core holds one job; past this size it holds more (issue 17)."""
    long = {rel(p): n for p in modules() if rel(p).startswith("rollout/")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_CORE_MODULE_LINES}
    assert long == {}


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
            "rollout/machine/phases.py",
            "from flows.rollout import x\n",
            1,
            id="a core module importing flows is caught",
        ),
        pytest.param(
            "rollout/policy.py", "import kubesim.cluster\n", 1, id="a core module importing kubesim is caught"
        ),
        pytest.param(
            "rollout_cli/main.py",
            "import prefect\nimport flows\nimport kubesim\nimport rollout\n",
            0,
            id="the cli may import prefect, flows, kubesim and the core",
        ),
        pytest.param("flows/x.py", "import rollout_cli\n", 1, id="flows importing the cli runs back up"),
        pytest.param("flows/x.py", "import kubesim\n", 1, id="flows may not import kubesim"),
        pytest.param("flows/demo.py", "import kubesim\n", 1, id="not even a demo among the flows"),
        pytest.param("rollout_cli/demo.py", "import kubesim\n", 0, id="the demo (in the cli) may import kubesim"),
        pytest.param("flows/x.py", "import kubernetes\n", 1, id="flows reach the cluster only through the gateway"),
        pytest.param("kubesim/x.py", "from rollout.model import X\n", 1, id="kubesim imports nothing of ours"),
        pytest.param("kubelet_rollout_agent/x.py", "import prefect\n", 1, id="the agent stands apart from flows"),
        pytest.param("rollout/loop/engine.py", "import rollout_cli\n", 1, id="the core importing the cli is caught"),
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
    assert len(violations(ROOT / where, ast.parse(source))) == expected


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        pytest.param("bench/x.py", "import kubesim.cluster\n", 1, id="bench starts kubesim as a process"),
        pytest.param("bench/x.py", "from kubesim.standalone import StandaloneNode\nimport kubesim.cluster\n", 1,
                     id="the workload model does not let the cluster in"),
        pytest.param("bench/x.py", "from kubesim.standalone import StandaloneNode\nfrom kubesim.harms import HARMS\n",
                     0, id="bench steps kubesim's workload model"),
        pytest.param(
            "bench/x.py", "from kubelet_rollout_agent import agent\n", 1, id="bench starts the agents as a process"
        ),
        pytest.param("bench/x.py", "from rollout_cli.main import app\n", 1, id="bench runs no command in process"),
        pytest.param("bench/x.py", "from rollout_cli import main\n", 1, id="the command module imported by name"),
        pytest.param("bench/x.py", "import rollout_cli.__main__\n", 1, id="bench does not run the CLI's entry point"),
        pytest.param(
            "bench/x.py",
            "from rollout.gateway._gateway import KubeGateway\n",
            1,
            id="bench imports no private module",
        ),
        pytest.param("bench/x.py", "from flows.prefect_home import _drain\n", 1, id="bench imports no private name"),
        pytest.param(
            "bench/x.py",
            "def f():\n    import importlib\n    importlib.import_module('kubesim')\n",
            1,
            id="a dynamic import in bench is caught",
        ),
        pytest.param(
            "bench/x.py",
            "from __future__ import annotations\nimport yaml\nfrom kubernetes import client\n"
            "def f():\n    from rollout.gateway import open_gateway\n"
            "    from flows.rollout_flow import kubelet_config_rollout\n"
            "    from rollout_cli.contract import schema\n",
            0,
            id="bench may read results with the client, the core, the flows and the CLI's helpers",
        ),
        pytest.param("rollout/planner.py", "import bench.rollout_scale\n", 1, id="the core never imports bench"),
        pytest.param("rollout_cli/main.py", "import bench\n", 1, id="not even the composition root imports bench"),
        pytest.param("kubesim/x.py", "from bench import kubesim_scale\n", 1, id="kubesim never imports bench"),
    ],
)
def test_bench_checker_catches_synthetic_violations(where: str, source: str, expected: int) -> None:
    assert len(violations(ROOT / where, ast.parse(source))) == expected


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
    """A pure core unit is a module (``rollout/planner.py``, ``rollout/inputs/flow_depth.py``) or a
    package (``rollout/policy/``)."""
    package = ROLLOUT / name
    if package.is_dir():
        return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    return [ROLLOUT / f"{name}.py"]


def test_the_walk_sees_every_package() -> None:
    names = {rel(p) for p in modules()}
    for name in PURE:
        files = {rel(p) for p in pure_files(name)}
        assert files and files <= names, name
    assert {"flows/rollout_flow.py", "kubesim/cluster.py", "rollout_cli/main.py"} <= names
    assert {"bench/kubesim_scale.py", "bench/rollout_scale.py"} <= names


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_module_respects_import_contracts(path: Path) -> None:
    assert violations(path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))) == []


def pure_modules() -> list[Path]:
    return [p for name in (*PURE, "kubeletconfig") for p in pure_files(name)]


@pytest.mark.parametrize("path", pure_modules(), ids=rel)
def test_pure_core_reads_no_clock_and_does_no_io_plumbing(path: Path) -> None:
    assert pure_violations(ast.parse(path.read_text(encoding="utf-8"))) == []


def bench_imports_of_ours() -> list[str]:
    return sorted(name for p in (ROOT / "bench").glob("*.py")
                  for name in imported_names(ast.parse(p.read_text(encoding="utf-8"))) if name.split(".")[0] in OURS)


def test_what_bench_imports_of_ours_still_exists() -> None:
    """bench/ is run by hand, not by the suite: a name moved elsewhere would break it unseen.
    Resolved in a child process, so importing the flows leaves this one as it was."""
    check = (
        "import importlib, json, sys\n"
        "missing = []\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    module, _, attr = name.rpartition('.')\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        if not hasattr(importlib.import_module(module), attr):\n"
        "            missing.append(name)\n"
        "print(json.dumps(missing))\n"
    )
    names = bench_imports_of_ours()
    assert names, "the walk found no import of ours in bench/"
    result = subprocess.run([sys.executable, "-c", check, json.dumps(names)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == []


def test_no_two_test_modules_share_a_name() -> None:
    """pytest imports a test file under its bare name (the test folders are not packages), so two
    files of one name stop the whole run at collection, which a run of one folder never shows."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
