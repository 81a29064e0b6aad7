"""How a rollout/rollback run ends, and how a finished run reads: one :class:`rollout.outcome.Outcome`.

A halted or reverted rollout, a refused config, a lock held by another rollout: these are
outcomes the operator expects to read about, not crashes. Raising them would make Prefect's
engine log "Encountered exception during execution" with a traceback (in the terminal and in the
UI). So the flows *return* the state the outcome's row of ``rollout.outcome.ENDINGS`` names
(``Halted``, ``Reverted``, ``Invalid``, ``Locked``, ``Deferred``...): its message names the nodes
and the reason in words, and its data carries the report for a caller in the same process (a
``flows.run_logs.LoggedEnd``: what Prefect raises for it on a worker, kept out of the log there). A
deployment run, whose data may not be readable elsewhere, is read from the state's type and name
alone (:meth:`RunOutcome.from_flow_run`).

A task that refuses raises as usual (Prefect has no quieter way for a task to fail); its log
lines lose the traceback and the class name (``flows.run_logs``) and the flow that called it ends
with the same message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prefect import State
from prefect.client.schemas.objects import FlowRun, StateType

from flows.run_logs import LoggedEnd, hide_expected_tracebacks
from flows.shell import STOP
from rollout.loop.engine import RunResult
from rollout.errors import RolloutError
from rollout.outcome import Outcome
from rollout.run import Run

F = TypeVar("F", bound=Callable[..., Any])
# What a flow returns to end: the state of its outcome, or its data (Prefect's Completed state)
RunEnd = State[Any] | dict[str, Any]
# nothing done is lost when a run's process dies: the journal is in the cluster (a fleet's in Prefect)
RERUN_HINT = "run the same command again: it resumes from the journal, and nothing done is done twice"


def without_prefix(outcome: Outcome, message: str) -> str:
    """``reverted: reverted: ...`` never: the outcome is said once, by whoever shows it."""
    prefix = f"{outcome}: "
    while message.startswith(prefix):
        message = message[len(prefix):]
    return message


def ended(outcome: Outcome, message: str, *, report: str = "", nodes: Sequence[str] = (),
          **details: Any) -> RunEnd:
    """What a flow returns to end in ``outcome``: the state its row names, carrying the outcome,
    the message, the report, the nodes (failed, or rolled back) and ``details`` as data. A run
    that did all it was asked returns the data itself: Prefect's own Completed state is its row."""
    message = without_prefix(outcome, message)
    data = {"outcome": outcome.value, "message": message, "report": report, "nodes": list(nodes), **details}
    if outcome.ok:
        return data
    state_type = StateType(outcome.state_type)  # a Completed one (Deferred) is no exception to Prefect
    return State(type=state_type, name=outcome.state_name, message=message,
                 data=data if state_type is StateType.COMPLETED else LoggedEnd(data))


def refused(error: RolloutError) -> RunEnd:
    """How a run ends on one of our errors: its message (written for operators), no traceback."""
    return ended(error.outcome, str(error))


def refuses_quietly(fn: F) -> F:
    """Decorate a flow body (under ``@flow``): our errors end it in their outcome's state with
    their message instead of an exception and a traceback; after a stop they end it stopped (the
    stop cut a call short, before the engine took over). A flow run is where a worker's process
    starts running our code, so the log filter of ``flows.run_logs`` is installed here first."""

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        hide_expected_tracebacks()
        try:
            return fn(*args, **kwargs)
        except RolloutError as error:
            if STOP.is_set():
                return ended(Outcome.STOPPED, f"stopped by request ({error}); run the same command again to resume")
            return refused(error)

    return body  # type: ignore[return-value]


@dataclass
class RunOutcome:
    """How a rollout/rollback run ended, for the CLI and tests (``rollout.outcome`` says what each
    outcome means; the last five of ``RolloutError.outcome`` end a run refused before or outside
    the rollout itself)."""

    outcome: Outcome
    message: str
    report: str = ""
    flow_run_id: str = ""
    flow_run_name: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # the engine's end, when the run ran in this process: its last journal and view of the nodes
    final: RunResult | None = None
    hint: str = ""  # what to do about a refusal (the error's advice)

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    @classmethod
    def from_state(cls, state: State[Any], *, flow_run: FlowRun | None = None) -> RunOutcome:
        run_id = str(getattr(state.state_details, "flow_run_id", "") or "")
        name = flow_run.name if flow_run is not None else ""
        if state.is_cancelled():
            return cls(Outcome.STOPPED, state.message or "stopped", flow_run_id=run_id, flow_run_name=name)
        data = _readable_result(state)
        if isinstance(data, LoggedEnd):
            data = data.data
        if isinstance(data, dict) and "outcome" in data:
            return cls(outcome=Outcome.read(data["outcome"], otherwise=outcome_of_state(state)),
                       message=str(data.get("message", state.message or "")),
                       report=str(data.get("report", "")), flow_run_id=run_id, flow_run_name=name,
                       details={k: v for k, v in data.items() if k not in ("outcome", "message", "report")})
        outcome = outcome_of_state(state)
        if outcome is Outcome.CRASHED:  # killed (SIGKILL, out of memory, its machine gone): Prefect's words kept
            return cls(outcome, f"its process died before the run ended ({state.message or 'no message'})",
                       flow_run_id=run_id, flow_run_name=name, hint=RERUN_HINT)
        return cls(outcome, state.message or "", flow_run_id=run_id, flow_run_name=name)

    @classmethod
    def of_run(cls, run: Run, state: State[Any] | None = None) -> RunOutcome:
        """A run of this process (``rollout.run.Run``), ended: its outcome, message and report come
        from the run itself; ``state``, the end of the flow run that showed it (if one did), says
        which flow run that was. A run whose flow run ended it early (an error of Prefect's)
        reads as that flow run's state says."""
        run_id = str(getattr(state.state_details, "flow_run_id", "") or "") if state is not None else ""
        try:
            end = run.ending()
        except RolloutError as error:  # refused: the lock, the cluster, the config against the nodes
            outcome = Outcome.STOPPED if STOP.is_set() else error.outcome
            advice = getattr(error, "advice", "")
            return cls(outcome, str(error), flow_run_id=run_id, hint=advice if advice not in str(error) else "")
        if state is not None and end.outcome is Outcome.STOPPED and not STOP.is_set():
            return cls.from_state(state)  # nobody asked it to stop: its flow run ended it (an error of Prefect's)
        return cls(end.outcome, without_prefix(end.outcome, end.message), report=run.report(), flow_run_id=run_id,
                   details={"nodes": list(end.nodes)}, final=run.result())

    @classmethod
    def from_flow_run(cls, flow_run: FlowRun) -> RunOutcome:
        """A run that executed elsewhere (a deployment): its result may not be readable here; the
        state's type and name still say how it ended."""
        if flow_run.state is None:
            return cls(Outcome.CRASHED, "the flow run has no state", flow_run_id=str(flow_run.id),
                       flow_run_name=flow_run.name, hint=RERUN_HINT)
        return cls.from_state(flow_run.state, flow_run=flow_run)


def _readable_result(state: State[Any]) -> Any:
    try:
        return state.result(raise_on_failure=False)
    except Exception as error:  # noqa: BLE001 - a result stored elsewhere is simply not readable here
        return error


def outcome_of_state(state: State[Any]) -> Outcome:
    """The outcome a final state stands for, from its type and name alone."""
    return Outcome.of_state(state.type.value, state.name)


def flow_run_outcome(run_id: str) -> tuple[str, RunOutcome | None]:
    """The flow run ``run_id``'s name and, once it has ended, its outcome (None while it is
    scheduled, pending, running or paused): what `rollout status --watch --run` follows."""
    from uuid import UUID

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(run_id))
    if run.state is None or not run.state.is_final():
        return run.name, None
    return run.name, RunOutcome.from_flow_run(run)
