"""Installing the guard is idempotent; uninstalling returns the node to base; import contracts.

The agent stands apart from the orchestrator: it may use the pure core (``rollout.model``,
``rollout.kubeletconfig``) and the gateway's retry/rate-limit values, never ``flows``,
``prefect`` or ``kubesim``; its decision modules read no clock and do no I/O.
"""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from agent_fakes import FakeHost, dropin_text
from kubelet_rollout_agent import names
from kubelet_rollout_agent.install import (
    GUARD_SOURCE,
    Layout,
    guard_program,
    install_guard,
    uninstall,
    unit_dropin_text,
)

PACKAGE = Path(__file__).resolve().parents[2] / "kubelet_rollout_agent"
PURE = ("decide", "state", "merge", "readback", "stage", "names")
FORBIDDEN = {"flows", "prefect", "kubesim"}


def _reloads(host: FakeHost) -> int:
    return host.commands.count(("daemon-reload",))


def test_install_is_idempotent_and_reloads_only_on_change(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    assert install_guard(host, Layout()) is True  # type: ignore[arg-type]
    assert install_guard(host, Layout()) is False  # type: ignore[arg-type]
    assert _reloads(host) == 1
    guard = host.path(names.GUARD_PROGRAM)
    assert guard.read_bytes() == guard_program(Layout()) and (guard.stat().st_mode & 0o777) == 0o755
    assert guard.read_bytes().startswith(b"#!/usr/bin/python3\n")
    assert guard.read_bytes().split(b"\n", 1)[1] == GUARD_SOURCE.read_bytes().split(b"\n", 1)[1]
    install_guard(host, Layout(state_dir="/var/lib/elsewhere"))  # type: ignore[arg-type]
    assert _reloads(host) == 2


def test_the_unit_dropin_runs_the_guard_before_each_start_and_never_blocks_it() -> None:
    text = unit_dropin_text(Layout())
    line = next(l for l in text.splitlines() if l.startswith("ExecStartPre="))
    assert line.startswith("ExecStartPre=-")  # '-': a failing guard must not fail the kubelet
    argv = shlex.split(line.removeprefix("ExecStartPre=-"))
    assert argv[0] == names.GUARD_PROGRAM  # absolute, run through its #! line
    assert argv[argv.index("--state-dir") + 1] == names.DEFAULT_STATE_DIR


def test_uninstall_returns_the_node_to_its_base_config_in_one_step(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    layout = Layout()
    install_guard(host, layout)  # type: ignore[arg-type]
    host.path(layout.dropin).write_text(dropin_text(maxPods=50))
    host.path(layout.state(names.STATE_FILE)).write_text("{}")
    host.start()
    assert host.running is not None and host.running["maxPods"] == 50
    done = uninstall(host, layout)  # type: ignore[arg-type]
    assert not host.path(names.GUARD_UNIT_DROPIN).exists() and not host.path(names.GUARD_PROGRAM).exists()
    assert not host.path(layout.dropin).exists() and not host.path(layout.state(names.STATE_FILE)).exists()
    assert host.running is not None and host.running["maxPods"] == 110
    assert "systemctl restart kubelet" in done and "systemctl daemon-reload" in done
    assert uninstall(host, layout) == []  # type: ignore[arg-type]


def _modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def _roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return found | {n.module.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}


@pytest.mark.parametrize("module", _modules(), ids=lambda p: p.name)
def test_the_agent_never_imports_the_orchestrator_shell(module: Path) -> None:
    assert not _roots(module) & FORBIDDEN


def _rollout_imports(path: Path) -> set[str]:
    """Modules of ``rollout`` a file uses (``from rollout import names`` -> ``rollout.names``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "rollout":
            found |= {f"rollout.{alias.name}" for alias in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("rollout."):
            found.add(n.module)
    return found


@pytest.mark.parametrize("module", _modules(), ids=lambda p: p.name)
def test_the_agent_uses_only_the_pure_core_and_the_gateway_values(module: Path) -> None:
    allowed = ("rollout.model", "rollout.names", "rollout.kubeletconfig", "rollout.errors", "rollout.gateway",
               "rollout.agent_clock")  # the advertisement of the agent's timers, read by the orchestrator
    assert all(m.startswith(allowed) for m in _rollout_imports(module)), _rollout_imports(module)


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_read_no_clock_and_do_no_io(name: str) -> None:
    roots = _roots(PACKAGE / f"{name}.py")
    assert not roots & {"kubernetes", "subprocess", "urllib", "socket", "logging", "time", "os"}, roots
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert not calls & {"now", "utcnow", "today", "read_text", "write_text", "read_bytes", "open"}, calls


def test_the_checker_catches_a_clock_read(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom datetime import datetime\nx = datetime.now()\n")
    assert "time" in _roots(bad)
