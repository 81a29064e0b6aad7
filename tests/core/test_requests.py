"""Lifecycle requests (``rollout pause/resume/abort/promote``) are answered with what they will do,
and applied as one journaled decision (rollout.machine.requests). Pure: no cluster, no clock."""

from __future__ import annotations

from datetime import timedelta

from test_machine_support import T0, make_plan, nodes, policy

from rollout.journal import BatchStatus, Journal, RolloutStatus
from rollout.machine.requests import REQUEST_KIND, answer_request, apply_request


def _journal(*, batch_running: bool) -> Journal:
    """Three batches; the first done; the second running (or not started yet)."""
    j = Journal.start(make_plan(nodes(4), policy(done={"until": "active", "soak": "5m"})), now=T0)
    j = j.with_batch_status(0, BatchStatus.IN_PROGRESS, at=T0).with_batch_status(0, BatchStatus.DONE, at=T0)
    if batch_running:
        j = j.with_batch_status(1, BatchStatus.IN_PROGRESS, at=T0)
    return j


def test_promote_while_paused_is_refused_and_skips_no_later_soak() -> None:
    """Before: promote between batches used to waive the soak of the batch started next."""
    paused = apply_request(_journal(batch_running=False), "p1", "pause", by="ann", at=T0)
    said = answer_request(paused, "promote", running=True)
    assert not said.applies and "resume" in said.command
    promoted = apply_request(paused, "p2", "promote", by="ann", at=T0 + timedelta(seconds=1))
    assert promoted.soak_waived == ()
    resumed = apply_request(promoted, "p3", "resume", by="ann", at=T0 + timedelta(seconds=2))
    started = resumed.with_batch_status(1, BatchStatus.IN_PROGRESS, at=T0 + timedelta(seconds=3))
    assert 1 not in started.soak_waived  # the batch started after the promote soaks in full
    requests = [d.reason for d in started.decisions if d.kind == REQUEST_KIND]
    assert len(requests) == 3 and "refused" in requests[1], requests  # each request and its effect


def test_promote_ends_the_running_batch_soak_and_is_journaled() -> None:
    j = apply_request(_journal(batch_running=True), "p1", "promote", by="ann", at=T0)
    assert j.soak_waived == (1,)
    assert [d.kind for d in j.decisions][-1] == REQUEST_KIND


def test_pause_during_a_batch_says_it_applies_at_the_next_batch() -> None:
    said = answer_request(_journal(batch_running=True), "pause", running=True)
    assert said.applies and said.when == "next batch"
    assert answer_request(_journal(batch_running=False), "pause", running=True).when == "now"


def test_resume_of_a_stopped_rollout_is_refused_with_the_command_that_resumes_it() -> None:
    """Before: `rollout resume` of a stopped rollout answered as if something would run it."""
    stopped = _journal(batch_running=True).with_stopped(at=T0)
    said = answer_request(stopped, "resume", running=False)
    assert not said.applies and "stopped" in said.effect
    assert "rollout start --name r1" in said.command and "rollout retry r1" in said.command


def test_a_request_to_an_ended_rollout_says_it_ended() -> None:
    """Before: aborting an ended rollout said it did not exist."""
    ended = _journal(batch_running=False).with_status(RolloutStatus.HALTED, at=T0, reason="x")
    said = answer_request(ended, "abort", running=False)
    assert not said.applies and "has ended" in said.effect and "rollout retry r1" in said.command
