"""`rollout pause/resume/abort/promote/list` on a running rollout (Argo Rollouts parity), through the
CLI as a person uses it from a second terminal while the rollout runs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
from typer.testing import CliRunner

from rollout_cli.main import app

pytestmark = pytest.mark.usefixtures("prefect_api")
runner = CliRunner()


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def _start(name: str, text: str, policy: str, kubeconfig: str) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(outcome=sc.run(
        name=name, config=text, policy=policy, kubeconfig=kubeconfig, approval_poll_seconds=1)), daemon=True)
    thread.start()
    return thread, result


def _until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_pause_holds_the_next_batch_resume_continues_and_list_shows_it(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=4) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        thread, result = _start("held", sc.config_text(gw, maxPods=81),
                                sc.policy(steps=[1, "50%", "100%"], maxUnavailable=4), kc)
        _until(lambda: gw.load_journal("held") is not None)
        _cli("pause", "held", "--by", "alice", "--kubeconfig", kc)
        _until(lambda: sc.journal(gw, "held").shown_status == "paused")
        listed = json.loads(_cli("list", "--kubeconfig", kc, "-o", "json").stdout)
        assert [(r["name"], r["state"]) for r in listed] == [("held", "paused")]  # status's word and key
        time.sleep(6)  # the canary's soak is 3 s: a running rollout would have started batch 2 by now
        j = sc.journal(gw, "held")
        assert not j.assigned_nodes(batch=1), "a batch started while paused"
        assert j.batches[0].status.value == "done"
        # before: "promote requested", exit 0, and the next batch's soak skipped after the resume
        refused = runner.invoke(app, ["promote", "held", "--by", "bob", "--kubeconfig", kc])
        assert refused.exit_code == 2 and "rollout resume held" in refused.output, refused.output
        _cli("resume", "held", "--by", "carol", "--kubeconfig", kc)
        thread.join(timeout=120)
        assert result["outcome"].outcome == "completed", result["outcome"].message
        j = sc.journal(gw, "held")
        assert not j.soak_waived  # no soak was skipped
        # each request and its effect is a decision, in the report as in status
        report = result["outcome"].report
        assert "pause by alice" in report and "resume by carol" in report, report


def test_abort_reverts_per_policy(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        before = {n: o.active for n, o in sc.nodes(gw).items()}
        thread, result = _start("aborted", sc.config_text(gw, maxPods=82),
                                sc.policy(done={"soak": "30s"}, failureAction="revert-all"), kc)
        _until(lambda: gw.load_journal("aborted") is not None and sc.journal(gw, "aborted").assigned_nodes())
        _cli("abort", "aborted", "--by", "alice", "--kubeconfig", kc)
        thread.join(timeout=120)
        outcome = result["outcome"]
        assert outcome.outcome == "reverted" and "aborted by alice" in outcome.message, outcome.message
        # Known race (open): a kubelet that had checkpointed the new config but not yet reported it
        # looks reverted at once, then boots on the new config and resets to its previous source a
        # sync period later; the nodes end where they were, after the run says "reverted".
        assigned = sc.journal(gw, "aborted").assigned_nodes()
        _until(lambda: all(sc.nodes(gw)[n].active == before[n] for n in assigned), timeout=30)


def test_promote_passes_a_gate_and_ends_a_soak(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        policy = sc.policy(steps=[1, "50%", "100%"], maxUnavailable=3, done={"soak": "1h"},
                           approval={"after": [0], "timeout": "10m"})
        thread, result = _start("promoted", sc.config_text(gw, maxPods=83), policy, kc)
        _until(lambda: gw.load_journal("promoted") is not None and sc.journal(gw, "promoted").assigned_nodes())
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:  # the soaks are 1h: only promote ends them
            runner.invoke(app, ["promote", "promoted", "--by", "alice", "--kubeconfig", kc])
            time.sleep(2.5)
        thread.join(timeout=5)
        assert result["outcome"].outcome == "completed", result["outcome"].message
        gate = sc.journal(gw, "promoted").batches[0].approval
        assert gate is not None and gate.by == "alice"


def test_pause_and_abort_at_an_approval_gate_apply_within_seconds(tmp_path: Path) -> None:
    """Before: while a gate waited, the run sat inside Prefect's pause and read no request: `rollout
    pause` and `rollout abort` said "its process has not recorded it within 8s" and nothing happened
    until someone answered the gate. Now the loop goes on deciding at a gate: each request is
    recorded within seconds, and the abort ends the gate and applies the failure action."""
    with sc.cluster(tmp_path, general=3) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        policy = sc.policy(steps=[1, "100%"], maxUnavailable=3, failureAction="revert-all",
                           approval={"after": [0], "timeout": "10m"})
        thread, result = _start("gate-abort", sc.config_text(gw, maxPods=84), policy, kc)

        def gate_waits() -> bool:
            j = gw.load_journal("gate-abort") and sc.journal(gw, "gate-abort")
            return bool(j) and j.batches[0].approval is not None and j.batches[0].approval.outcome is None

        _until(gate_waits, timeout=120)
        paused = json.loads(_cli("pause", "gate-abort", "--by", "bob", "--kubeconfig", kc, "-o", "json").stdout)
        assert paused["applied"], paused
        asked = time.monotonic()
        aborted = json.loads(_cli("abort", "gate-abort", "--by", "alice", "--kubeconfig", kc, "-o", "json").stdout)
        assert aborted["applied"], aborted
        thread.join(timeout=60)
        assert not thread.is_alive(), "the run still waits at its gate after the abort"
        assert time.monotonic() - asked < 30
        outcome = result["outcome"]
        assert outcome.outcome == "reverted" and "aborted by alice" in outcome.message, outcome.message
        assert sc.journal(gw, "gate-abort").batches[0].approval.outcome is None  # nobody answered it
