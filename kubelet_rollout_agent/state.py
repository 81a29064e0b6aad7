"""The agent's memory, as a frozen value, and the observation it decides from.

Why a value with ``with_*`` transitions (kopf's ``HandlerState``): the agent must survive its
own restarts at any moment, so everything it knows lives in one small JSON file written
atomically *before* each effect (a write-ahead record). A restarted agent reads it, observes the
host again and the pure :func:`kubelet_rollout_agent.decide.decide` picks up where it stopped;
effects are idempotent, so repeating the interrupted one is safe.

Timestamps are timezone-aware UTC; nothing here reads a clock.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from rollout.kubeletconfig.dropin import DropinFile
from rollout.model import ConfigRef

from kubelet_rollout_agent import names

_EMPTY: Mapping[str, str] = MappingProxyType({})


class Phase(str, enum.Enum):
    """Where the node stands with respect to the assigned config."""

    BASE = "base"  # nothing of ours in effect and nothing assigned
    TRIAL = "trial"  # assigned written (restart owed while restarted_at is None), being proven
    STABLE = "stable"  # assigned promoted to last-known-good
    FAILED = "failed"  # assigned refused or rolled back; last-known-good (or base) in effect
    REVERTING = "reverting"  # last-known-good being put back; restart owed
    REMOVING = "removing"  # assignment withdrawn; back to the base config, restart owed


class ResetStep(str, enum.Enum):
    """How far a state reset (annotation ``state-reset``) got on this node."""

    STOPPING = "stopping"  # written before the stop: stop the kubelet, delete the files
    DELETED = "deleted"  # the kubelet is stopped and the files are gone: only its start is owed
    DONE = "done"  # started again after the delete: never delete for this request again
    REFUSED = "refused"  # not done (``why``); the config was applied with a plain restart


@dataclass(frozen=True)
class ResetRecord:
    """The last state reset the agent handled: once per (rollout, desired), never a second delete
    once the kubelet has started after the first (it writes a new checkpoint under the new policy)."""

    rollout: str
    desired: ConfigRef | None  # what it was for: an assignment, or None = the base config
    files: tuple[str, ...] = ()
    step: ResetStep = ResetStep.STOPPING
    at: datetime | None = None  # when the stop was decided (a kubelet started after it was not ours)
    why: str = ""  # REFUSED: the reason

    def handles(self, rollout: str, desired: ConfigRef | None) -> bool:
        return self.rollout == rollout and self.desired == desired


@dataclass(frozen=True)
class AgentState:
    """Everything the agent must remember across its restarts.

    ``dropin_sha`` is the content our drop-in *should* have on disk (None: absent);
    ``lkg_sha`` that of the last-known-good copy in the state dir (None: the base config).
    ``restarted_at`` is None while the phase still owes the kubelet a restart;
    ``restart_requested_at`` is written *before* the agent asks for that restart, so an agent
    killed between asking and recording it can tell from the unit's start time that the
    restart happened, and does not restart the kubelet a second time.
    ``proven_at``: configz showed every field; the config is ``active`` only from ``active_at``,
    once the kubelet stayed up on it through the health wait: healthy since ``up_since`` with no
    restart (``up_restarts`` counted then). A kubelet that lives its first seconds on a config
    and then crashes is never reported active.
    ``set_aside``: files of --config-dir (paths within it) this trial moves into the state dir
    before writing ours (a ConfigMap that takes precedence); a revert puts them back (``restore``).
    ``reset``: the last state reset (kubelet checkpoint files deleted between a stop and a start);
    kept across phases, so the same request is never carried out twice.
    """

    phase: Phase = Phase.BASE
    assigned: ConfigRef | None = None
    active: ConfigRef | None = None
    last_known_good: ConfigRef | None = None
    error: str = ""
    dropin_sha: str | None = None
    lkg_sha: str | None = None
    since: datetime | None = None
    restarted_at: datetime | None = None
    restart_baseline: int = 0
    proven_at: datetime | None = None
    restart_requested_at: datetime | None = None
    up_since: datetime | None = None
    up_restarts: int = 0
    active_at: datetime | None = None
    set_aside: tuple[str, ...] = ()
    restore: tuple[str, ...] = ()
    reset: ResetRecord | None = None

    def with_staged(self, ref: ConfigRef, sha: str, now: datetime, set_aside: tuple[str, ...] = ()) -> AgentState:
        """A validated drop-in is about to be written: a new trial, restart owed."""
        return replace(self, phase=Phase.TRIAL, assigned=ref, error="", dropin_sha=sha, since=now,
                       restarted_at=None, restart_baseline=0, proven_at=None, restart_requested_at=None,
                       up_since=None, up_restarts=0, active_at=None, set_aside=set_aside, restore=())

    def with_refused(self, ref: ConfigRef, message: str, now: datetime) -> AgentState:
        """The assignment cannot be used; what runs now keeps running (DKC: no rollback)."""
        return replace(self, phase=Phase.FAILED, assigned=ref, error=message, since=now)

    def with_rewrite_owed(self) -> AgentState:
        """Our drop-in is not what it should be on disk: write it again, then restart."""
        return replace(self, restarted_at=None, restart_requested_at=None)

    def with_restart_requested(self, now: datetime) -> AgentState:
        """About to ask the service manager for the owed restart (write-ahead)."""
        return replace(self, restart_requested_at=now)

    def with_restarted(self, now: datetime, baseline: int) -> AgentState:
        """The kubelet was restarted; automatic restarts are counted from ``baseline``. A reset
        whose files were deleted is done: the kubelet may now write them under the new policy."""
        reset = self.reset
        if reset is not None and reset.step is ResetStep.DELETED:
            reset = replace(reset, step=ResetStep.DONE)
        return replace(self, restarted_at=now, restart_baseline=baseline, restart_requested_at=None, reset=reset)

    def with_reset_requested(self, request: StateResetRequest, now: datetime) -> AgentState:
        """About to stop the kubelet and delete the request's files (write-ahead)."""
        return replace(self, reset=ResetRecord(request.rollout, request.desired, request.files,
                                               ResetStep.STOPPING, now))

    def with_reset_deleted(self) -> AgentState:
        """The kubelet is stopped and the files are gone: only the start is owed."""
        assert self.reset is not None
        return replace(self, reset=replace(self.reset, step=ResetStep.DELETED), restart_requested_at=None)

    def with_reset_skipped(self, why: str) -> AgentState:
        """A reset begun earlier is not carried on (the kubelet started meanwhile): never delete now."""
        assert self.reset is not None
        return replace(self, reset=replace(self.reset, step=ResetStep.REFUSED, why=why))

    def with_reset_refused(self, rollout: str, desired: ConfigRef | None, files: tuple[str, ...],
                           why: str, now: datetime) -> AgentState:
        """A reset asked for this step is not done; the error says why (the proof clears it)."""
        return replace(self, error=why, reset=ResetRecord(rollout, desired, files, ResetStep.REFUSED, now, why))

    def with_proven(self, now: datetime, restarts: int) -> AgentState:
        """Healthy and configz shows every field: the health wait starts (not active yet)."""
        return replace(self, error="", proven_at=now, up_since=now, up_restarts=restarts)

    def with_up_since(self, at: datetime | None, restarts: int) -> AgentState:
        """The kubelet's current stretch up on the config began ``at`` (None: it is down)."""
        return replace(self, up_since=at, up_restarts=restarts)

    def with_active(self, now: datetime) -> AgentState:
        """Proven, and up through the health wait: the assigned config is active."""
        return replace(self, active=self.assigned, active_at=now)

    def with_promoted(self, now: datetime) -> AgentState:
        """The trial passed: assigned becomes last-known-good."""
        return replace(self, phase=Phase.STABLE, last_known_good=self.assigned,
                       lkg_sha=self.dropin_sha, since=now)

    def with_reverting(self, message: str, now: datetime) -> AgentState:
        """Put last-known-good (or the base) back; restart owed."""
        return replace(self, phase=Phase.REVERTING, error=message, dropin_sha=self.lkg_sha,
                       active=self.last_known_good, since=now, restarted_at=None,
                       proven_at=None, restart_requested_at=None, up_since=None, active_at=None,
                       set_aside=(), restore=self.set_aside or self.restore)

    def with_reverted(self, now: datetime) -> AgentState:
        return replace(self, phase=Phase.FAILED, since=now)

    def with_guard_restore(self, message: str, now: datetime) -> AgentState:
        """The host-side guard already restored last-known-good and restarted the kubelet."""
        return replace(self, phase=Phase.FAILED, error=message, dropin_sha=self.lkg_sha,
                       active=self.last_known_good, since=now, restarted_at=now, proven_at=None,
                       restart_requested_at=None)

    def with_removing(self, now: datetime) -> AgentState:
        """The assignment was withdrawn: back to the base config (DKC resets LKG too)."""
        return AgentState(phase=Phase.REMOVING, since=now, reset=self.reset)

    def with_base(self, now: datetime) -> AgentState:
        return AgentState(phase=Phase.BASE, since=now, reset=self.reset)

    def with_error(self, message: str) -> AgentState:
        return replace(self, error=message)

    def trial_ends(self, trial: timedelta) -> datetime | None:
        return self.restarted_at + trial if self.restarted_at else None


@dataclass(frozen=True)
class UnitStatus:
    """The kubelet unit as the service manager reports it (``systemctl show``)."""

    active_state: str = ""  # active | activating | inactive | failed | "" (unknown)
    n_restarts: int = 0  # automatic restarts (manual ones are not counted, as in systemd)
    started_at: datetime | None = None


@dataclass(frozen=True)
class GuardRecord:
    """What the host-side guard did while the agent was away (``guard-record.json``)."""

    at: datetime | None
    dropin_sha: str
    starts: int
    restored: str  # "last-known-good" | "base"
    journal_line: str = ""


@dataclass(frozen=True)
class StateResetRequest:
    """The orchestrator's ``state-reset`` annotation: delete ``files`` between stopping and starting
    the kubelet when applying ``desired`` (an assignment; None = back to the base config)."""

    rollout: str
    files: tuple[str, ...]
    desired: ConfigRef | None


@dataclass(frozen=True)
class Observation:
    """One look at the node, the host and the kubelet; gathered by the loop, judged by decide."""

    desired: ConfigRef | None = None
    desired_problem: str = ""  # the annotation exists but cannot be read
    dropin_sha: str | None = None  # ours on disk; None = absent
    dropin: Mapping[str, Any] | None = None  # ours, parsed (for the read-back proof)
    lkg_sha: str | None = None  # the last-known-good copy in the state dir; None = absent
    unit: UnitStatus = UnitStatus()
    healthy: bool = False
    configz: Mapping[str, Any] | None = None
    last_error_line: str = ""  # the kubelet's last error line in the journal, if looked up
    guard_record: GuardRecord | None = None
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    dropins_after: tuple[DropinFile, ...] = ()  # files of --config-dir the kubelet applies after ours
    set_aside_kept: tuple[str, ...] = ()  # of the files a revert puts back, those still set aside
    unschedulable: bool = False  # the Node's spec.unschedulable: cordoned
    state_reset: StateResetRequest | None = None
    state_reset_problem: str = ""  # the state-reset annotation exists but cannot be read


class _DesiredWire(BaseModel):
    """The orchestrator's ``desired-config`` annotation."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str = Field(min_length=1)
    resource_version: str = Field(alias="resourceVersion", min_length=1)
    key: str = Field(default="kubelet", min_length=1)


def parse_desired(text: str | None) -> tuple[ConfigRef | None, str]:
    """The desired ConfigRef, or a problem naming why the annotation cannot be used."""
    if text is None:
        return None, ""
    try:
        wire = _DesiredWire.model_validate_json(text)
    except ValidationError as exc:
        return None, _unreadable(names.ANN_DESIRED, exc)
    return _ref(wire), ""


def _unreadable(annotation: str, exc: ValidationError) -> str:
    """Why an annotation of ours cannot be used, field by field."""
    detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<value>'}: {e['msg']}" for e in exc.errors(include_url=False))
    return f"annotation {annotation} is unreadable: {detail}"


def _ref(wire: _DesiredWire) -> ConfigRef:
    return ConfigRef(wire.namespace, wire.name, wire.key, wire.uid, wire.resource_version)


class _StateResetWire(BaseModel):
    """The orchestrator's ``state-reset`` annotation; ``desired`` is the desired-config annotation's
    own JSON object (all five fields: its ``key`` alone is the ConfigMap's data key, the same for
    every assignment), or null for a return to the base config."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    rollout: str = Field(min_length=1)
    files: tuple[str, ...]
    desired: _DesiredWire | None


def parse_state_reset(text: str | None) -> tuple[StateResetRequest | None, str]:
    """The state-reset request, or a problem naming why the annotation cannot be used."""
    if text is None:
        return None, ""
    try:
        wire = _StateResetWire.model_validate_json(text)
    except ValidationError as exc:
        return None, _unreadable(names.ANN_STATE_RESET, exc)
    desired = _ref(wire.desired) if wire.desired is not None else None
    return StateResetRequest(wire.rollout, tuple(dict.fromkeys(wire.files)), desired), ""


def ref_json(ref: ConfigRef) -> str:
    """A ConfigRef as the status annotations spell it (the desired annotation's shape)."""
    return json.dumps({"namespace": ref.namespace, "name": ref.name, "uid": ref.uid,
                       "resourceVersion": ref.resource_version, "key": ref.kubelet_config_key},
                      sort_keys=True, separators=(",", ":"))


_STATE = TypeAdapter(AgentState)


def dump_state(state: AgentState) -> bytes:
    return _STATE.dump_json(state, indent=1)


def load_state(data: bytes | None) -> AgentState:
    """The saved state; a fresh one when there is none (first start on this node)."""
    return AgentState() if not data else _STATE.validate_json(data)
