"""`rollout start --name NAME` alone resumes a stopped rollout from its journal (the config and
policy it ran with), `rollout retry NAME` runs a halted one again, and an ended or unknown one is
refused with the command that does what was meant. In process: the journal and the run are stubs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_machine_support import T0, make_plan, nodes, policy  # noqa: E402

from rollout.journal import Journal, RolloutStatus  # noqa: E402
from rollout_cli import runs  # noqa: E402
from rollout_cli.main import EXIT_INVALID, EXIT_NOT_FOUND, app  # noqa: E402

runner = CliRunner()


@pytest.fixture()
def ran(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    started: list[dict[str, Any]] = []
    monkeypatch.setattr(runs, "execute", lambda request, **_: started.append(request.flow_parameters()))
    return started


def _journal(monkeypatch: pytest.MonkeyPatch, journal: Journal | None) -> None:
    monkeypatch.setattr(runs, "_load", lambda *_: journal)


def _stopped() -> Journal:
    return Journal.start(make_plan(nodes(3), policy(name="mine"), rollout="r6"), now=T0).with_stopped(at=T0)


def test_start_by_name_alone_resumes_a_stopped_rollout_from_its_journal(
        monkeypatch: pytest.MonkeyPatch, ran: list[dict[str, Any]]) -> None:
    """Before: `start --name r6` alone was refused ("give exactly one of --config or --configmap")."""
    _journal(monkeypatch, _stopped())
    result = runner.invoke(app, ["start", "--name", "r6"])
    assert result.exit_code == 0, result.output
    assert ran[0]["configmap"] == "kube-system/kubelet-new-bbbb" and ran[0]["config"] is None
    assert yaml.safe_load(ran[0]["policy"])["name"] == "mine"  # the policy it ran with, not the default


def test_retry_runs_a_halted_rollout_again(monkeypatch: pytest.MonkeyPatch, ran: list[dict[str, Any]]) -> None:
    halted = _stopped().with_stopped(at=None).with_status(RolloutStatus.HALTED, at=T0, reason="crash-looping")
    _journal(monkeypatch, halted)
    result = runner.invoke(app, ["retry", "r6"])
    assert result.exit_code == 0, result.output
    assert ran[0]["retry"] is True


@pytest.mark.parametrize("journal, said, code", [
    # README's table: 5 when a named rollout does not exist (it was 2)
    (None, "no rollout named 'r6' to resume", EXIT_NOT_FOUND),
    (Journal.start(make_plan(nodes(3), policy(), rollout="r6"), now=T0).with_status(
        RolloutStatus.COMPLETE, at=T0), "has ended (completed)", EXIT_INVALID),
])
def test_nothing_to_resume_is_one_clear_refusal(journal: Journal | None, said: str, code: int,
                                                 monkeypatch: pytest.MonkeyPatch, ran: list[dict[str, Any]]) -> None:
    _journal(monkeypatch, journal)
    result = runner.invoke(app, ["start", "--name", "r6"])
    assert result.exit_code == code and said in result.output and not ran, result.output


def test_rollback_uses_the_rollouts_own_policy(monkeypatch: pytest.MonkeyPatch, ran: list[dict[str, Any]]) -> None:
    """Before: `rollback` defaulted to --policy canary, not the rollout's own."""
    _journal(monkeypatch, _stopped())
    result = runner.invoke(app, ["rollback", "r6"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(ran[0]["policy"])["name"] == "mine"


def test_a_policy_file_keeps_its_name(tmp_path: Path) -> None:
    """Before: a policy file showed as `<inline policy>` in reports, `list` and the Prefect tag."""
    (tmp_path / "weekend.yaml").write_text("steps: [1, '100%']\n")
    assert yaml.safe_load(runs.policy_param(str(tmp_path / "weekend.yaml")))["name"] == "weekend"
