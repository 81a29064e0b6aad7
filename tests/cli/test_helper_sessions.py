"""Every helper process a command starts (a Prefect server, its workers, PostgreSQL, the node
agents of the demo) lives in a session of its own, so a Ctrl-C typed in the terminal reaches the
command and not, from under it, the servers it still talks to; and the command ends them: when
it stops, and when it is killed with ``kill -9``.

Driven through a real terminal (``tests/terminal.py``): Ctrl-C is ``\\x03`` written to the pty,
which the terminal driver turns into SIGINT to the whole foreground process group. A process of
the command's session other than the command itself would be hit by it. Everything started
under the terminal carries a mark in its environment, so what is left afterwards is found
wherever it moved.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402
from terminal import Process, Terminal  # noqa: E402

pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
# what a helper gets to go after its command ended: a server asked to stop, or the watchdog's
# stop (SIGTERM, then SIGKILL 5 s later) after a kill -9
GONE_WITHIN_S = 12.0


def user_env(tmp_path: Path) -> dict[str, str]:
    """A new user's shell: the venv's commands on PATH, no Prefect profile or server, no cluster."""
    from rollout_cli.local.prefect_home import template_db

    home = tmp_path / "prefect-home"
    home.mkdir(exist_ok=True)
    shutil.copyfile(template_db(), home / "prefect.db")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "KUBELET_ROLLOUT_", "PYTEST_")) and k != "KUBECONFIG"}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", PREFECT_HOME=str(home), HOME=str(tmp_path))
    return env


def in_the_terminals_session(term: Terminal) -> list[Process]:
    """The processes a Ctrl-C would reach besides the command: its session's, but for itself."""
    return [p for p in term.processes() if p.sid == term.child.pid and p.pid != term.pid]


def names(processes: list[Process]) -> str:
    return "; ".join(map(str, processes)) or "none"


def start_at_a_gate(tmp_path: Path, c: Any, name: str) -> list[str]:
    cfg, pol = tmp_path / "k.yaml", tmp_path / "gate.yaml"
    cfg.write_text(sc.config_text(sc.gateway(c), maxPods=81))
    pol.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=2, approval={"after": [0], "timeout": "1h"}))
    return ["rollout", "start", "--config", str(cfg), "--policy", str(pol), "--name", name,
            "--kubeconfig", str(c.kubeconfig)]


def wait_for_the_gate(c: Any, name: str, term: Terminal, timeout: float = 180) -> None:
    from rollout.usecases import rollout_status

    gateway = sc.gateway(c)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert term.exit() is None, f"the run ended (exit {term.exit()}):\n{term.transcript()[-3000:]}"
        try:
            if (rollout_status(gateway, name).get("waiting") or {}).get("for") == "approval":
                return
        except Exception:  # noqa: BLE001 - no journal yet
            pass
        time.sleep(0.3)
    raise AssertionError(f"{name} never reached its gate:\n{term.screen()}")


def wait_for_the_flow_run(term: Terminal, name: str, state: str, timeout: float = 180) -> None:
    """Until the temporary Prefect server under ``term`` shows flow run ``name`` in ``state`` (the
    run begins before its server is up, and attaches its flow run once it is)."""
    import json
    import re
    import urllib.request

    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        assert term.exit() is None, f"the run ended (exit {term.exit()}):\n{term.transcript()[-3000:]}"
        ports = [re.search(r"create_app .*--port (\d+)", p.cmdline) for p in term.processes()]
        port = next(filter(None, ports), None)
        if port:
            request = urllib.request.Request(f"http://127.0.0.1:{port[1]}/api/flow_runs/filter", method="POST",
                                             data=json.dumps({"flow_runs": {"name": {"any_": [name]}}}).encode(),
                                             headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    seen = [run["state_type"] for run in json.loads(answer.read())]
            except OSError:
                seen = []
            if state in seen:
                return
        time.sleep(0.5)
    raise AssertionError(f"flow run {name} never {state} (seen: {seen}):\n{term.screen()}")


def flow_run_states(prefect_home: Path, name: str) -> list[str]:
    """The states of the flow runs named ``name`` in the Prefect database of ``prefect_home``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    from rollout_cli.local.prefect_home import ephemeral_prefect

    with ephemeral_prefect(prefect_home), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        return [run.state.type.value if run.state else "none" for run in runs]


def test_ctrl_c_at_a_gate_reaches_the_run_and_not_its_temporary_prefect_server(tmp_path: Path) -> None:
    """Before: the temporary Prefect server was in the terminal's session; Ctrl-C killed it while
    the run still had to report its end to it, and its flow run was never ended Cancelled."""
    env = user_env(tmp_path)
    with sc.cluster(tmp_path, general=2) as c:
        with Terminal(start_at_a_gate(tmp_path, c, "gate-c"), env=env, cwd=tmp_path) as term:
            wait_for_the_gate(c, "gate-c", term)
            wait_for_the_flow_run(term, "gate-c", "PAUSED")
            exposed = in_the_terminals_session(term)
            sent = term.ctrl_c()
            ended = term.wait_exit(60)
            left = term.leftovers(GONE_WITHIN_S)
            print(f"Ctrl-C: {'exit %d after %.1f s' % (ended.code, ended.ended - sent) if ended else 'running'}")
    assert not exposed, f"in the terminal's session, so hit by its Ctrl-C: {names(exposed)}"
    assert ended is not None and ended.code == 130, term.transcript()[-3000:]
    assert not left, f"left running after Ctrl-C: {names(left)}"
    assert flow_run_states(Path(env["PREFECT_HOME"]), "gate-c") == ["CANCELLED"], term.transcript()[-3000:]


def test_kill_9_of_a_local_run_leaves_nothing_running(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=2) as c:
        with Terminal(start_at_a_gate(tmp_path, c, "gate-k"), env=user_env(tmp_path), cwd=tmp_path) as term:
            wait_for_the_gate(c, "gate-k", term)
            assert any("prefect.server.api.server" in p.cmdline for p in term.processes()), names(term.processes())
            term.kill_9()
            assert term.wait_exit(30) is not None
            left = term.leftovers(GONE_WITHIN_S)
    assert not left, f"left running after kill -9: {names(left)}"


POSTGRES_HOLDER = """
import sys, time
from pathlib import Path
from rollout_cli.local.postgres import LocalPostgres, reachable_workdir
with LocalPostgres(reachable_workdir("pg-")).running() as pg:
    print("postgres ready on", pg.port, flush=True)
    time.sleep(600)
"""


@pytest.mark.skipif(not Path("/usr/lib/postgresql").is_dir() and shutil.which("postgres") is None,
                    reason="PostgreSQL is not installed (make system-deps)")
@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_a_local_postgresql_is_out_of_reach_of_ctrl_c_and_ends_with_its_process(tmp_path: Path, how: str) -> None:
    """Before: kill -9 of the process that started it left PostgreSQL running."""
    with Terminal([sys.executable, "-c", POSTGRES_HOLDER], cwd=tmp_path) as term:
        term.wait_for("postgres ready", 120)
        exposed = in_the_terminals_session(term)
        if how == "ctrl-c":
            term.ctrl_c()
        else:
            term.kill_9()
        assert term.wait_exit(60) is not None
        left = term.leftovers(GONE_WITHIN_S)
    assert not exposed, f"in the terminal's session, so hit by its Ctrl-C: {names(exposed)}"
    assert not left, f"left running after {how}: {names(left)}"


@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_the_fleet_demos_prefect_server_and_workers_end_with_it(tmp_path: Path, how: str) -> None:
    """Before: kill -9 of `rollout demo --fleet` left its Prefect server and its four workers
    running (and the cluster runs they had started)."""
    env = user_env(tmp_path)
    with Terminal(["rollout", "demo", "--fleet", "--workdir", str(tmp_path / "fleetdemo")], env=env,
                  cwd=tmp_path) as term:
        term.wait_for(r"fleet rollout fleet-good", 300, on="transcript")
        workers = [p for p in term.processes() if "worker start" in p.cmdline]
        exposed = in_the_terminals_session(term)
        if how == "ctrl-c":
            term.ctrl_c()
        else:
            term.kill_9()
        ended = term.wait_exit(120)
        left = term.leftovers(GONE_WITHIN_S)
        print(f"{how}: {'exit %d' % ended.code if ended else 'still running'}; {len(left)} left")
    assert len(workers) == 4, names(term.processes())
    assert not exposed, f"in the terminal's session, so hit by its Ctrl-C: {names(exposed)}"
    assert ended is not None, "still running 120 s after " + how
    assert not left, f"left running after {how}: {names(left)}"


@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_the_demos_prefect_server_ends_with_it(tmp_path: Path, how: str) -> None:
    """Before: the demo's Prefect server was in the terminal's session, and kill -9 of the demo
    left it running. Ctrl-C stops the rollout under way as it stops `rollout start` (the demo runs
    each one as it does), and the demo with it: once, in CI, it was still running 120 s later."""
    with Terminal(["rollout", "demo", "--workdir", str(tmp_path / "demo")], env=user_env(tmp_path),
                  cwd=tmp_path) as term:
        term.wait_for(r"rollout demo-good", 300, on="transcript")
        time.sleep(2.0)
        exposed = in_the_terminals_session(term)
        if how == "ctrl-c":
            term.ctrl_c()
        else:
            term.kill_9()
        ended = term.wait_exit(120)
        left = term.leftovers(GONE_WITHIN_S)
        print(f"{how}: {'exit %d' % ended.code if ended else 'still running'}; {len(left)} left")
        shown = term.transcript()[-3000:]
    assert not exposed, f"in the terminal's session, so hit by its Ctrl-C: {names(exposed)}"
    assert ended is not None, f"still running 120 s after {how}: {names(left)}; it showed:\n{shown}"
    assert "rollout demo-crashloop" not in shown, f"the demo went on after {how}:\n{shown}"
    assert not left, f"left running after {how}: {names(left)}"
