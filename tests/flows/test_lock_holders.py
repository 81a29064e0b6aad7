"""The rollout lock belongs to one process: `rollout start` processes as people run them.

A second process of the same rollout is refused naming the live holder and frees nothing on its
way out, so a third rollout is refused too; the same rollout started twice at once runs once; a
rollback cannot start under a running rollout; and `rollout status` does not call a rollout
running once no live process holds its lock. Every node is written once (kubesim's audit log).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
from test_run_loop import successful_patches

from flows.approval import answer_gate, pending_gates
from rollout.names import ANN_ROLLOUT

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
EXIT_LOCKED = 4


def _cli(args: list[str], prefect_api: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PREFECT_HOME": str(tmp_path / "prefect-sub")}
    return subprocess.Popen([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def _first_to_end(procs: list[subprocess.Popen[str]], timeout: float = 120) -> subprocess.Popen[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                return proc
        time.sleep(0.1)
    pytest.fail("neither process ended")


def _approve_when_gated(name: str, timeout: float = 120, *, dead: frozenset[str] = frozenset()) -> None:
    """Answer the gate of the live run (``dead``: gates a killed run left, until superseded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gates = [g for g in pending_gates(name) if str(g.flow_run_id) not in dead]
        if gates:
            answer_gate(gates[-1].flow_run_id, approved=True, approver="alice")
            return
        time.sleep(0.3)
    pytest.fail(f"{name} never reached its gate")


def _kill(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _gated(tmp_path: Path, gw: Any) -> tuple[Path, Path, Path]:
    """A config, another config, and a policy that waits at a gate after the canary (holding the lock)."""
    cfg, other, pol = tmp_path / "kubelet.yaml", tmp_path / "other.yaml", tmp_path / "policy.yaml"
    cfg.write_text(sc.config_text(gw, maxPods=83))
    other.write_text(sc.config_text(gw, maxPods=84))
    pol.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=3, approval={"after": [0], "timeout": "5m"}))
    return cfg, other, pol


def test_the_same_rollout_started_twice_at_once_runs_once(tmp_path: Path, prefect_api: str) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg, _, pol = _gated(tmp_path, gw)
        args = ["start", "--config", str(cfg), "--policy", str(pol), "--name", "twice", "--kubeconfig", str(c.kubeconfig)]
        procs = [_cli(args, prefect_api, tmp_path), _cli(args, prefect_api, tmp_path)]
        try:
            refused = _first_to_end(procs)
            code, output = _finish(refused, timeout=30)
            running = procs[1] if refused is procs[0] else procs[0]
            assert code == EXIT_LOCKED, (code, output[-3000:])
            assert "twice: locked: " in output and "held by ''" not in output
            assert f"pid {running.pid}" in output, output  # the live holder, named
            assert running.poll() is None
            _approve_when_gated("twice")
            code, output = _finish(running)
            assert code == 0, output[-3000:]
        finally:
            _kill(*procs)
        journal = sc.journal(gw, "twice")
        assert journal.shown_status == "complete"
        assert successful_patches(c) == {n: 1 for n in journal.plan.nodes}, successful_patches(c)


def test_a_second_process_of_a_running_rollout_frees_nothing(tmp_path: Path, prefect_api: str) -> None:
    """X waits at its gate; X again (another config), a rollback of X and a third rollout Y are
    each refused with exit 4 naming X's live process; X then completes on its own config."""
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg, other, pol = _gated(tmp_path, gw)
        kc = ["--kubeconfig", str(c.kubeconfig)]
        x = _cli(["start", "--config", str(cfg), "--policy", str(pol), "--name", "x", *kc], prefect_api, tmp_path)
        try:
            deadline = time.monotonic() + 120
            while not pending_gates("x"):
                assert x.poll() is None and time.monotonic() < deadline, "x never reached its gate"
                time.sleep(0.3)
            held = gw.read_lock()
            attempts = {
                "x again": ["start", "--config", str(other), "--policy", str(pol), "--name", "x", *kc],
                "rollback of x": ["rollback", "x", "--policy", str(pol), *kc],
                "y": ["start", "--config", str(other), "--policy", str(pol), "--name", "y", *kc],
            }
            for what, args in attempts.items():
                code, output = _finish(_cli(args, prefect_api, tmp_path), timeout=120)
                assert code == EXIT_LOCKED, (what, code, output[-3000:])
                assert f"pid {x.pid}" in output and "held by ''" not in output, (what, output[-3000:])
                now = gw.read_lock()
                assert (now.holder, now.acquired) == (held.holder, held.acquired), what  # X still holds it
            # its lease outlasts the outages it rides out (apiOutageTolerance: 5m by default)
            assert held.duration_s > 300 + 60, held.duration_s
            status = json.loads(subprocess.run(
                [sys.executable, "-m", "rollout_cli", "status", "x", "-o", "json", *kc], cwd=ROOT,
                capture_output=True, text=True, timeout=60).stdout)
            assert status["state"] == "running" and status["lock"]["liveness"] == "live", status["lock"]
            assert status["lock"]["pid"] == x.pid
            _approve_when_gated("x")
            code, output = _finish(x)
            assert code == 0, output[-3000:]
        finally:
            _kill(x)
        journal = sc.journal(gw, "x")
        observed = sc.nodes(gw)
        assert journal.shown_status == "complete"
        assert all(journal.target.same_reference(observed[n].active) for n in journal.plan.nodes)
        assert not any(o.annotations.get(ANN_ROLLOUT) == "y" for o in observed.values())
        assert gw.load_journal("y") is None
        assert successful_patches(c) == {n: 1 for n in journal.plan.nodes}, successful_patches(c)


def test_status_of_a_rollout_whose_process_is_gone_says_it_is_not_running(tmp_path: Path, prefect_api: str) -> None:
    """kill -9 leaves the journal saying running and the lock unreleased: status reads the lock,
    sees the holder's process is gone, and says so; the same command then takes over at once."""
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg, _, pol = _gated(tmp_path, gw)
        kc = ["--kubeconfig", str(c.kubeconfig)]
        args = ["start", "--config", str(cfg), "--policy", str(pol), "--name", "killed", *kc]
        proc = _cli(args, prefect_api, tmp_path)
        try:
            deadline = time.monotonic() + 120
            while not pending_gates("killed"):
                assert proc.poll() is None and time.monotonic() < deadline, "never reached its gate"
                time.sleep(0.3)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            _kill(proc)
        assert sc.journal(gw, "killed").shown_status == "running"  # nobody could mark it stopped
        shown = subprocess.run([sys.executable, "-m", "rollout_cli", "status", "killed", "-o", "json", *kc],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
        status = json.loads(shown.stdout)
        assert status["state"] == "stopped", status
        assert status["lock"]["liveness"] == "gone" and status["lock"]["pid"] == proc.pid, status["lock"]
        assert f"pid {proc.pid}" in status["reason"], status["reason"]
        table = subprocess.run([sys.executable, "-m", "rollout_cli", "status", "killed", *kc], cwd=ROOT,
                               capture_output=True, text=True, timeout=60).stdout
        assert "stopped" in table and "running" not in table.split("\n")[0], table
        dead = frozenset(str(g.flow_run_id) for g in pending_gates("killed"))
        again = _cli(args, prefect_api, tmp_path)
        try:
            _approve_when_gated("killed", dead=dead)
            code, output = _finish(again)
        finally:
            _kill(again)
        assert code == 0, output[-3000:]
        assert successful_patches(c) == {n: 1 for n in sc.journal(gw, "killed").plan.nodes}
