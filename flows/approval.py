"""Approval gates: a typed Prefect pause between batches, answered from the UI or `rollout approve`.

The gate blocks the flow in-process with ``pause_flow_run(wait_for_input=Approval)``; the
description (markdown) carries the evidence an approver needs. Answering is a plain
``resume_flow_run(id, run_input=...)`` against the same Prefect API, which is all the CLI does;
the server validates the answer against the model's schema, so a malformed answer leaves the
gate waiting.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Literal
from uuid import UUID

from prefect import pause_flow_run
from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout
from prefect.input import RunInput
from pydantic import Field, ValidationError

GATE_KEY_PREFIX = "gate-"


class Approval(RunInput):
    """Your answer to this approval gate. Choose a decision and give your name: a form submitted
    untouched is refused and the gate keeps waiting (no default ever decides)."""

    decision: Literal["approve", "reject"] = Field(
        description="approve: start the next batch. reject: stop here (the policy's approval.onReject "
                    "says what then: halt, or fail and apply the failure action).")
    approver: str = Field(min_length=1, description="Who answers: recorded in the rollout's journal and report.")
    comment: str = Field(default="", description="Why: recorded with the answer (optional).")


@dataclass(frozen=True)
class GateAnswer:
    approved: bool
    approver: str = ""
    comment: str = ""
    timed_out: bool = False
    stopped: bool = False  # the run was stopped while the gate waited: nobody answered it

    @property
    def summary(self) -> str:
        if self.timed_out:
            return "approval timed out"
        if self.stopped:
            return "stopped before an answer"
        verb = "approved" if self.approved else "rejected"
        note = f": {self.comment}" if self.comment else ""
        return f"{verb} by {self.approver or 'unknown'}{note}"


def wait_for_approval(*, key: str, description: str, timeout_s: int, poll_interval_s: int = 2,
                      stop: threading.Event | None = None) -> GateAnswer:
    """Pause the current flow run until someone answers the gate ``key`` (or it times out).

    ``stop`` set meanwhile (Ctrl-C, SIGTERM) ends the wait within a poll, the gate unanswered
    (``stopped``): the next run of the rollout asks it again.
    """
    # no initial decision: the form starts empty, so Resume without an answer is refused
    gate = Approval.with_initial_data(description=description)
    with _resumed_on(stop):
        try:
            answer = pause_flow_run(
                wait_for_input=gate,
                timeout=max(int(timeout_s), 1),
                poll_interval=max(1, poll_interval_s),
                key=_unused_pause_key(f"{GATE_KEY_PREFIX}{key}"),
            )
        except FlowPauseTimeout:
            _leave_paused_state()
            return GateAnswer(approved=False, timed_out=True)
        except ValidationError:
            if stop is None or not stop.is_set():
                raise
            return GateAnswer(approved=False, stopped=True)  # resumed by the stop: no answer to read
    return GateAnswer(approved=answer.decision == "approve", approver=answer.approver, comment=answer.comment)


def _unused_pause_key(key: str) -> str:
    """``key``, or ``key-2``, ``key-3``...: the first this flow run has not paused on yet.

    Why: Prefect refuses a pause whose key the flow run already used and hands back that earlier
    pause's answer, so a gate asked twice in one run (again after a stop, or two gates named
    alike) would be answered without anyone being asked.
    """
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return key
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        used = client.read_flow_run(ctx.flow_run.id).empirical_policy.pause_keys or set()
    candidate, n = key, 1
    while candidate in used:
        n += 1
        candidate = f"{key}-{n}"
    return candidate


STOP_POLL_S = 0.2  # how soon a stop is seen while a gate waits


@contextlib.contextmanager
def _resumed_on(stop: threading.Event | None) -> Iterator[None]:
    """While the block runs, a stop sets the paused run Running again: that is what ends Prefect's
    pause loop (at its next poll), with no answer given. Set again every second until the block
    ends, in case the pause was proposed after the first time."""
    ctx = FlowRunContext.get()
    if stop is None or ctx is None or ctx.flow_run is None:
        yield
        return
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    flow_run_id = ctx.flow_run.id
    done = threading.Event()

    def resume_when_stopped() -> None:
        while not done.wait(STOP_POLL_S if not stop.is_set() else 1.0):
            if stop.is_set():
                with contextlib.suppress(Exception), get_client(sync_client=True) as client:
                    client.set_flow_run_state(flow_run_id, Running(message="stopped by request"), force=True)

    watcher = threading.Thread(target=resume_when_stopped, name="gate-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _leave_paused_state() -> None:
    """After a pause timeout the server still shows the run PAUSED: set it Running again so the
    halt/revert that follows runs (and is shown) as part of a running flow."""
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(ctx.flow_run.id, Running(message="approval timed out"), force=True)


# --- the answering side (CLI, tests) -------------------------------------------------------


@dataclass(frozen=True)
class PendingGate:
    flow_run_id: UUID
    flow_run_name: str
    rollout: str
    gate: str
    description: str
    parameters: dict[str, Any]


def pending_gates(rollout: str | None = None) -> list[PendingGate]:
    """Paused rollout/rollback runs waiting for an approval answer, oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    gates: list[PendingGate] = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
            )
        )
        for run in runs:
            name = str(run.parameters.get("name", ""))
            if rollout and name != rollout:
                continue
            details = run.state.state_details if run.state else None
            keyset = details.run_input_keyset if details else None
            if details is None or not keyset:
                continue
            pause_key = details.pause_key or ""
            if not pause_key.startswith(GATE_KEY_PREFIX):
                continue  # not one of our approval gates
            try:
                # our gates always carry a description, written just after the PAUSED state and
                # the input schema: until it is there the gate is not ready to be answered
                description = client.read_flow_run_input(key=keyset["description"], flow_run_id=run.id)
            except Exception:  # noqa: BLE001 - not written yet: list it on the next look
                continue
            if not description:
                continue
            if isinstance(description, str) and description.startswith('"'):
                import json

                description = json.loads(description)
            gates.append(
                PendingGate(
                    flow_run_id=run.id,
                    flow_run_name=run.name,
                    rollout=name,
                    gate=pause_key.removeprefix(GATE_KEY_PREFIX),
                    description=str(description or ""),
                    parameters=dict(run.parameters),
                )
            )
    gates.sort(key=lambda g: g.flow_run_name)
    return gates


def answer_gate(flow_run_id: UUID | str, *, approved: bool, approver: str, comment: str = "") -> None:
    """Resume a paused rollout with an approval answer (what `rollout approve/reject` does)."""
    from prefect import resume_flow_run

    resume_flow_run(
        UUID(str(flow_run_id)),
        run_input={"decision": "approve" if approved else "reject", "approver": approver, "comment": comment},
    )


def supersede_gates(rollout: str) -> int:
    """Cancel the gates a dead run of ``rollout`` left waiting (the live run asks again).

    A run killed at a gate stays Paused on the server; left there, ``rollout approve NAME`` would
    find two gates, and answering the dead one would do nothing. The current run is spared.
    """
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    ctx = FlowRunContext.get()
    current = ctx.flow_run.id if ctx is not None and ctx.flow_run is not None else None
    stale = [g for g in pending_gates(rollout) if g.flow_run_id != current]
    if not stale:
        return 0
    with get_client(sync_client=True) as client:
        for gate in stale:
            client.set_flow_run_state(gate.flow_run_id, Cancelled(
                message=f"superseded: a newer run of rollout {rollout} took over"), force=True)
    return len(stale)
