"""What the flows and the CLI share about Prefect runs: how a finished flow run reads as an outcome.

Use cases (validate, export, diff, plan, publish, status) live in ``rollout.usecases``; policies
resolve in ``rollout.policy``; the gateway is built by ``rollout.gateway``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rollout.lock import this_process
from rollout.policy import RolloutPolicy, load_policy_ref
from rollout.ports import Gateway, Lock
from rollout.usecases import open_gateway

__all__ = ["FAILED_OUTCOMES", "RunOutcome", "load_policy_ref", "locked_session", "open_gateway", "utcnow"]


@contextlib.contextmanager
def locked_session(name: str, policy: RolloutPolicy, *, kubeconfig: str | None, context: str | None,
                   stop: threading.Event) -> Iterator[tuple[Gateway, Lock]]:
    """The gateway and the rollout lock a run holds, both set from the policy: transient API
    errors ridden out for ``apiOutageTolerance`` (``stop`` cuts that short), requests within
    ``apiQps``/``apiBurst``, the lock held by this process for rollout ``name`` (a rollback of it
    too), with a lease that outlasts the outages the run rides out (``rollout.lock``)."""
    from rollout.gateway import LockKeeper

    gateway = open_gateway(kubeconfig, context)
    tolerance = policy.api_outage_tolerance.total_seconds()
    gateway.tolerate_outages(tolerance, stop=stop)
    gateway.limit_rate(policy.api_qps, policy.api_burst)
    with LockKeeper(gateway, this_process(name), outage_tolerance_s=tolerance) as lock:
        yield gateway, lock


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# ------------------------------------------------------------------------------ run outcomes

FAILED_OUTCOMES = ("halted", "reverted", "failed", "rejected")


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
        state's name and message still say how it ended (see ``flows.outcome``)."""
        return cls.from_state(flow_run.state, flow_run=flow_run)


def _readable_result(state: Any) -> Any:
    try:
        return state.result(raise_on_failure=False)
    except Exception as error:  # noqa: BLE001 - a result stored elsewhere is simply not readable here
        return error


def outcome_of_state(state: Any) -> str:
    """The outcome a final state stands for, from its type and name alone."""
    from flows.outcome import OUTCOMES_BY_STATE_NAME

    if state.is_cancelled():
        return "stopped"
    if state.is_completed():
        return "deferred" if state.name == "Deferred" else "completed"
    if state.is_crashed():
        return "crashed"
    return OUTCOMES_BY_STATE_NAME.get(state.name or "", "failed")
