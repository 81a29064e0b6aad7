"""A person's lifecycle request (``rollout pause/resume/abort/promote``): what it will do, said once.

Why here: the command that asks and the run that applies it must say the same thing, so one
function, :func:`answer_request`, reads the journal and says what a request does now: applied at once, at
the next batch, or refused (the rollout is stopped or has ended, or there is nothing to promote),
with the command that does what was probably meant. The CLI answers with it before it posts the
request; the engine applies the request with :func:`apply_request`, which records the answer as a
decision of the journal (kind ``Request``), so the request and its effect show in ``rollout
status``, in the log and in the report, whoever asked.

``promote`` ends the soak of the batch that is running, never of one that has not started: a
promote while the rollout is paused between batches used to waive the next batch's soak.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rollout.journal import BatchStatus, Journal
from rollout.timefmt import human

ACTIONS = ("pause", "resume", "abort", "promote")
REQUEST_KIND = "Request"  # the kind of the decision a request is recorded as


@dataclass(frozen=True)
class Answer:
    """What a request does to a rollout, in words: ``applies`` False means refused. ``effect`` is
    a clause with its own subject (``batch 2 will not start until ...``, ``the rollout stops
    ...``): it is said after a colon, as it is recorded (``pause by ann at 10:02: ...``) and
    before the run has read it (``once it reads it: ...``)."""

    applies: bool
    when: str  # "now", "next batch", or "" (refused, or nothing changes)
    effect: str
    command: str = ""  # what does what was probably meant, when the request cannot

    def as_json(self) -> dict[str, str | bool]:
        return {"applies": self.applies, "when": self.when, "effect": self.effect, "command": self.command}


def _running_batch(j: Journal) -> int | None:
    current = j.current_batch()
    return current if current is not None and j.batches[current].status is BatchStatus.IN_PROGRESS else None


def _next_label(j: Journal) -> str:
    current = j.current_batch()
    if current is None:
        return "no batch (all are done)"
    start = current + 1 if j.batches[current].status is BatchStatus.IN_PROGRESS else current
    return j.plan.batches[start].label if start < len(j.plan.batches) else "no further batch"


def gate_waiting(j: Journal) -> int | None:
    """The batch whose approval gate waits for an answer (its index), if one does."""
    for index, batch in enumerate(j.batches):
        if batch.approval is not None and batch.approval.outcome is None and j.plan.approval_after(index):
            nxt = index + 1
            if nxt < len(j.batches) and j.batches[nxt].status is BatchStatus.PENDING:
                return index
    return None


def answer_request(j: Journal, action: str, *, running: bool) -> Answer:
    """What ``action`` does to the rollout ``j`` now; ``running``: a live process runs it."""
    name = j.rollout
    if action not in ACTIONS:
        return Answer(False, "", f"{action!r} is not a request (one of {', '.join(ACTIONS)})")
    if j.finished:
        then = f"`rollout retry {name}` runs it again" if j.shown_status in ("halted", "reverted") else \
            f"`rollout rollback {name}` undoes it"
        return Answer(False, "", f"rollout {name} has ended ({_state(j)}): there is nothing to {action}",
                      command=then)
    if not running:
        return _stopped(j, action)
    running_batch = _running_batch(j)
    if action == "pause":
        if j.paused:
            return Answer(True, "", f"it is already paused by {j.paused}; `rollout resume {name}` lifts it")
        if running_batch is not None:
            return Answer(True, "next batch", f"{j.plan.batches[running_batch].label} goes on (still watched and "
                          f"judged); {_next_label(j)} will not start until `rollout resume {name}`")
        return Answer(True, "now", f"{_next_label(j)} will not start until `rollout resume {name}`")
    if action == "resume":
        if not j.paused:
            return Answer(True, "", "it is not paused: nothing changes")
        return Answer(True, "now", f"the pause by {j.paused} is lifted: {_next_label(j)} may start")
    if action == "abort":
        policy = j.plan.policy.failure_action.value
        return Answer(True, "now", f"the rollout stops and applies its failureAction ({policy}) now")
    if running_batch is None:  # promote
        held = f"paused by {j.paused}; " if j.paused else ""
        hint = f"`rollout resume {name}` lets it start" if j.paused else "it soaks once it has started"
        return Answer(False, "", f"nothing soaks now: {held}{_next_label(j)} has not started, and promote ends "
                      "only a running batch's soak", command=hint)
    if running_batch in j.soak_waived:
        return Answer(True, "", f"the soak of {j.plan.batches[running_batch].label} was already ended")
    return Answer(True, "now", f"the soak of {j.plan.batches[running_batch].label} ends: it is done once its "
                  "nodes are on the target")


def _stopped(j: Journal, action: str) -> Answer:
    name = j.rollout
    again = f"`rollout start --name {name}` (or `rollout retry {name}`) runs it again from its journal"
    if action == "abort":
        return Answer(False, "", f"rollout {name} is stopped: no process runs it, so nothing would apply its "
                      "failure action now", command=f"`rollout rollback {name}` undoes what it did; {again}")
    if action == "resume" and not j.paused:
        return Answer(False, "", f"rollout {name} is stopped, not paused: `rollout resume` lifts a pause of a "
                      "running rollout, and no process runs this one", command=again)
    return Answer(False, "", f"rollout {name} is stopped: no process runs it, so nothing would apply a {action} "
                  "now", command=again)


def _state(j: Journal) -> str:
    return {"complete": "completed"}.get(j.shown_status, j.shown_status)


def apply_request(j: Journal, request_id: str, action: str, *, by: str, at: datetime) -> Journal:
    """Apply a request once (by id), recording it and its effect as a decision of the journal."""
    if not request_id or request_id == j.last_request or j.finished:
        return j
    said = answer_request(j, action, running=True)
    who = f"{action} by {by or 'someone'} at {human(at)}"
    if not said.applies:
        recorded = j.with_request(request_id, "", by=by, at=at)  # seen, and refused: nothing changes
        return recorded.with_decision(REQUEST_KIND, f"{who} refused: {said.effect}", at=at)
    return j.with_request(request_id, action, by=by, at=at).with_decision(
        REQUEST_KIND, f"{who}: {said.effect}", at=at, batch=_running_batch(j))
