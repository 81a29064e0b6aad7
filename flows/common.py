"""What the flows and the CLI share about Prefect runs: how a finished flow run reads as an outcome.

Use cases (validate, export, diff, plan, publish, status) live in ``rollout.usecases``; policies
resolve in ``rollout.policy``; the gateway is built by ``rollout.gateway``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rollout.policy import load_policy_ref
from rollout.usecases import open_gateway

__all__ = ["FAILED_OUTCOMES", "RunOutcome", "load_policy_ref", "open_gateway", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# ------------------------------------------------------------------------------ run outcomes

FAILED_OUTCOMES = ("halted", "reverted", "failed", "rejected")


@dataclass
class RunOutcome:
    """How a rollout/rollback run ended, for the CLI and tests."""

    outcome: str  # completed | halted | reverted | failed | crashed | cancelled
    message: str
    report: str = ""
    flow_run_id: str = ""
    flow_run_name: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # the error class that ended the run before any rollout outcome (ConfigError, LockHeldError...)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("completed", "rolled-back")

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "ok": self.ok,
            "message": self.message,
            "flow_run_id": self.flow_run_id,
            "flow_run_name": self.flow_run_name,
            "report": self.report,
            "error": self.error,
            **self.details,
        }

    @classmethod
    def from_state(cls, state: Any, *, flow_run: Any = None) -> "RunOutcome":
        from flows.outcome import RolloutFailed

        run_id = str(getattr(state.state_details, "flow_run_id", "") or "")
        name = getattr(flow_run, "name", "") if flow_run is not None else ""
        if state.is_cancelled():
            return cls("stopped", state.message or "stopped", flow_run_id=run_id, flow_run_name=name)
        if state.is_completed():
            result = state.result(raise_on_failure=False)
            if isinstance(result, dict):
                return cls(
                    outcome=result.get("outcome", "completed"),
                    message=result.get("message", state.message or ""),
                    report=result.get("report", ""),
                    flow_run_id=run_id,
                    flow_run_name=name,
                    details={k: v for k, v in result.items() if k not in ("outcome", "message", "report")},
                )
            return cls("completed", state.message or "", flow_run_id=run_id, flow_run_name=name)
        exc = None
        try:
            exc = state.result(raise_on_failure=False)
        except Exception as error:  # noqa: BLE001 - a missing result is still an outcome
            exc = error
        if isinstance(exc, RolloutFailed):
            return cls(exc.outcome, exc.message, report=exc.report, flow_run_id=run_id, flow_run_name=name,
                       details={"nodes": list(exc.nodes)})
        kind = state.type.value.lower() if state.type else "failed"
        return cls(kind if kind in ("crashed", "cancelled") else "failed",
                   state.message or str(exc or ""), flow_run_id=run_id, flow_run_name=name,
                   error=type(exc).__name__ if isinstance(exc, BaseException) else _error_from_message(state.message or ""))

    @classmethod
    def from_flow_run(cls, flow_run: Any) -> "RunOutcome":
        """A run that executed elsewhere (a deployment): its result may not be readable here, so
        fall back to the state message (which names nodes and reason)."""
        state = flow_run.state
        try:
            outcome = cls.from_state(state, flow_run=flow_run)
        except Exception:  # noqa: BLE001
            outcome = None
        if outcome is None or (not state.is_completed() and outcome.outcome == "failed") or (
                state.is_completed() and (state.message or "").startswith("deferred:")):
            message = state.message or ""
            if state.is_completed():
                kind = "deferred" if message.startswith("deferred:") else "completed"
            else:
                kind = _outcome_from_message(message)
            outcome = cls(kind, message, flow_run_id=str(flow_run.id), flow_run_name=flow_run.name,
                          error=_error_from_message(message))
        return outcome


def _error_from_message(message: str) -> str:
    """'Flow run encountered an exception: ConfigError: ...' -> 'ConfigError'."""
    import re

    match = re.search(r"exception: (\w+Error):", message)
    return match.group(1) if match else ""


def _outcome_from_message(message: str) -> str:
    """'Flow run encountered an exception: RolloutFailed: halted: ...' -> 'halted'."""
    import re

    match = re.search(r"(?:RolloutFailed: |^)(halted|reverted|failed|rejected):", message)
    return match.group(1) if match else "failed"


