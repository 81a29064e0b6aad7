"""`pause/resume/abort/promote` answer with what they do, or one refusal (exit 2) with the command
that was meant; `list` says a rollout's state in status's words. In process: a stub cluster
holding one journal, no lock."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_machine_support import T0, make_plan, nodes, policy  # noqa: E402

from rollout.journal import Journal, JournalDocument, RolloutStatus, to_document  # noqa: E402
from rollout_cli import lifecycle  # noqa: E402
from rollout_cli.contract import validator  # noqa: E402
from rollout_cli.main import EXIT_INVALID, app  # noqa: E402

runner = CliRunner()


class Cluster:
    def __init__(self, journal: Journal) -> None:
        self.document = to_document(journal)
        self.posted: list[str] = []

    def load_journal(self, rollout: str) -> tuple[JournalDocument, str] | None:
        return (self.document, "1") if rollout == "r6" else None

    def list_journals(self) -> list[JournalDocument]:
        return [self.document]

    def read_lock(self) -> None:
        return None

    def post_request(self, name: str, action: str, **_: Any) -> None:
        self.posted.append(action)


def _cluster(monkeypatch: pytest.MonkeyPatch, journal: Journal) -> Cluster:
    cluster = Cluster(journal)
    monkeypatch.setattr(lifecycle, "open_cluster", lambda *_: cluster)
    return cluster


def _journal() -> Journal:
    return Journal.start(make_plan(nodes(3), policy(), rollout="r6"), now=T0)


def test_abort_of_an_ended_rollout_says_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: aborting an ended rollout exited 5, as if it did not exist."""
    cluster = _cluster(monkeypatch, _journal().with_status(RolloutStatus.COMPLETE, at=T0))
    result = runner.invoke(app, ["abort", "r6"])
    assert result.exit_code == EXIT_INVALID and "has ended (completed)" in result.output, result.output
    assert "rollout rollback r6" in result.output and not cluster.posted


def test_resume_of_a_stopped_rollout_names_the_command_that_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `resume` of a stopped rollout said "the running rollout applies it" and exited 0."""
    cluster = _cluster(monkeypatch, _journal().with_stopped(at=T0))
    result = runner.invoke(app, ["resume", "r6"])
    assert result.exit_code == EXIT_INVALID and "rollout start --name r6" in result.output, result.output
    assert not cluster.posted


def test_list_says_completed_as_status_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `status` said `completed` under state, `list` `complete` under status."""
    _cluster(monkeypatch, _journal().with_status(RolloutStatus.COMPLETE, at=T0))
    result = runner.invoke(app, ["list", "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    validator("list").validate(rows)
    assert rows[0]["state"] == "completed"


@pytest.mark.parametrize(("action", "batch_running", "effect"), [
    ("pause", False, "batch 2 will not start until `rollout resume r6`"),
    ("pause", True, "batch 2 goes on (still watched and judged); batch 3 will not start until `rollout resume r6`"),
    ("resume", False, "it is not paused: nothing changes"),
    ("abort", True, "the rollout stops and applies its failureAction"),
    ("promote", True, "the soak of batch 2 ends: it is done once its nodes are on the target"),
])
def test_a_request_not_recorded_yet_says_what_it_will_do_in_a_sentence(
        monkeypatch: pytest.MonkeyPatch, action: str, batch_running: bool, effect: str) -> None:
    """Before: "it will batch 2 will not start", "it will stops the rollout", "it will ends the soak"."""
    from rollout.journal import BatchStatus

    journal = _journal().with_batch_status(0, BatchStatus.IN_PROGRESS, at=T0).with_batch_status(
        0, BatchStatus.DONE, at=T0)
    if batch_running:
        journal = journal.with_batch_status(1, BatchStatus.IN_PROGRESS, at=T0)
    cluster = _cluster(monkeypatch, journal)
    monkeypatch.setattr("rollout.usecases.status.run_state", lambda *_: ("running", ""))  # a live run that is slow to read
    monkeypatch.setattr(lifecycle, "APPLIED_WITHIN_S", 0.2)
    result = runner.invoke(app, [action, "r6", "--by", "ann"])
    said = " ".join(result.stdout.split())
    assert result.exit_code == 0 and cluster.posted == [action], result.output
    assert said.startswith(f"rollout r6: {action} requested by ann; its process (running) has not recorded it"), said
    assert f"once it reads it: {effect}" in said, said
    assert "it will" not in said, said
