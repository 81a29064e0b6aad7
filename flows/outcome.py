"""How a rollout/rollback run ends when it did not complete: a Failed state, never a traceback.

A halted or reverted rollout, a refused config, a lock held by another rollout: these are
outcomes the operator expects to read about, not crashes. Raising them would make Prefect's
engine log "Encountered exception during execution" with a traceback (in the terminal and in the
UI). So the flows *return* a Failed state instead: its name says what happened (``Halted``,
``Reverted``, ``Invalid``, ``Locked``...), its message names the nodes and the reason in words, and
its data carries the report for a caller in the same process. A deployment run, whose data may
not be readable elsewhere, is classified from the state's name alone.

A task that refuses raises as usual (Prefect has no quieter way for a task to fail); its log
lines lose the traceback and the class name (:class:`ExpectedErrorsWithoutTraceback`) and the
flow that called it ends with the same message.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from prefect.states import Cancelled, Failed, State

from flows.shell import STOP
from rollout.errors import RolloutError

# outcome -> the name of the Failed state a run ends in (shown in the Prefect UI)
STATE_NAMES = {
    "halted": "Halted",
    "reverted": "Reverted",
    "rejected": "Rejected",
    "failed": "Failed",
    "invalid": "Invalid",
    "locked": "Locked",
    "not-found": "NotFound",
    "cluster-error": "ClusterError",
}
OUTCOMES_BY_STATE_NAME = {state: outcome for outcome, state in STATE_NAMES.items()}

F = TypeVar("F", bound=Callable[..., Any])


def without_prefix(outcome: str, message: str) -> str:
    """``reverted: reverted: ...`` never: the outcome is said once, by whoever shows it."""
    prefix = f"{outcome}: "
    while message.startswith(prefix):
        message = message[len(prefix):]
    return message


def ended(outcome: str, message: str, *, report: str = "", nodes: Sequence[str] = ()) -> State[Any]:
    """The Failed state a run ends in for an outcome it expected (halted, reverted, refused...)."""
    message = without_prefix(outcome, message)
    return Failed(name=STATE_NAMES.get(outcome, "Failed"), message=message,
                  data={"outcome": outcome, "message": message, "report": report, "nodes": list(nodes)})


def stopped(message: str) -> State[Any]:
    """The Cancelled state a stopped run (Ctrl-C, SIGTERM) ends in; the CLI exits 130."""
    return Cancelled(message=message, data={"outcome": "stopped", "message": message})


def refused(error: RolloutError) -> State[Any]:
    """The Failed state for one of our errors: its message (written for operators), no traceback."""
    return ended(error.outcome, str(error))


def refuses_quietly(fn: F) -> F:
    """Decorate a flow body (under ``@flow``): our errors end it in a named Failed state with
    their message instead of an exception and a traceback; after a stop they end it stopped (the
    stop cut a call short, before the engine took over)."""

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RolloutError as error:
            if STOP.is_set():
                return stopped(f"stopped by request ({error}); run the same command again to resume")
            return refused(error)

    return body  # type: ignore[return-value]


@dataclass
class RunOutcome:
    """How a rollout/rollback run ended, for the CLI and tests.

    ``outcome`` is one word: completed | rolled-back | deferred | stopped | halted | reverted |
    rejected | failed | invalid | locked | not-found | cluster-error | crashed (the last five:
    refused before or outside the rollout itself, see ``RolloutError.outcome``).
    """

    outcome: str
    message: str
    report: str = ""
    flow_run_id: str = ""
    flow_run_name: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome in ("completed", "rolled-back")

    @classmethod
    def from_state(cls, state: Any, *, flow_run: Any = None) -> "RunOutcome":
        run_id = str(getattr(state.state_details, "flow_run_id", "") or "")
        name = getattr(flow_run, "name", "") if flow_run is not None else ""
        if state.is_cancelled():
            return cls("stopped", state.message or "stopped", flow_run_id=run_id, flow_run_name=name)
        data = _readable_result(state)
        if isinstance(data, dict) and "outcome" in data:
            return cls(outcome=str(data["outcome"]), message=str(data.get("message", state.message or "")),
                       report=str(data.get("report", "")), flow_run_id=run_id, flow_run_name=name,
                       details={k: v for k, v in data.items() if k not in ("outcome", "message", "report")})
        return cls(outcome_of_state(state), state.message or "", flow_run_id=run_id, flow_run_name=name)

    @classmethod
    def from_flow_run(cls, flow_run: Any) -> "RunOutcome":
        """A run that executed elsewhere (a deployment): its result may not be readable here; the
        state's name and message still say how it ended."""
        return cls.from_state(flow_run.state, flow_run=flow_run)


def _readable_result(state: Any) -> Any:
    try:
        return state.result(raise_on_failure=False)
    except Exception as error:  # noqa: BLE001 - a result stored elsewhere is simply not readable here
        return error


def outcome_of_state(state: Any) -> str:
    """The outcome a final state stands for, from its type and name alone."""
    if state.is_cancelled():
        return "stopped"
    if state.is_completed():
        return "deferred" if state.name == "Deferred" else "completed"
    if state.is_crashed():
        return "crashed"
    return OUTCOMES_BY_STATE_NAME.get(state.name or "", "failed")


class ExpectedErrorsWithoutTraceback(logging.Filter):
    """A task that refuses (our error) is logged as its message, without a traceback or a class
    name: the flow that called it ends with the same message (:func:`refuses_quietly`).

    Prefect's task engine logs a task's exception with ``exc_info`` and ends the task in a state
    whose message is "Task run encountered an exception ConfigError: ..."; a task cannot fail
    otherwise without a worse log line, so the record is rewritten on its way to every handler
    (the terminal and the Prefect API alike)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RolloutError):
            record.exc_info, record.exc_text = None, None
            record.msg, record.args = str(error), ()
        elif isinstance(record.msg, str) and "encountered an exception" in record.msg:
            record.msg = _without_error_class(record.getMessage())
            record.args = ()
        return True


def _error_names(cls: type[RolloutError] = RolloutError) -> set[str]:
    names = {cls.__name__}
    for sub in cls.__subclasses__():
        names |= _error_names(sub)
    return names


def _without_error_class(message: str) -> str:
    pattern = r"Task run encountered an exception (?:%s): " % "|".join(sorted(_error_names()))
    return re.sub(pattern, "", message)


logging.getLogger("prefect.task_runs").addFilter(ExpectedErrorsWithoutTraceback())
