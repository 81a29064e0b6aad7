"""Node phase: what one observation of one node means for the rollout, with the reason why.

This is where the DKC reference (sections 7, 8 and 12) is turned into a verdict, so nothing else
has to know the kubelet's status semantics:

- success compares ``status.config.assigned``/``active`` with the target by uid *and*
  resourceVersion, never by name (a re-created ConfigMap with the same name is not the target);
- ``failed to load config`` / ``failed to validate config`` (and a base ``internal failure``) with
  the target resolved mean the kubelet rolled itself back: the *config* is bad, so the machine
  halts at once, whatever the failure budget;
- ``failed to sync: ...`` means the new config never took (often a transient 403 right after the
  assignment); it counts against the failure budget once it outlives ``syncErrorGrace``;
- NotReady/Unknown or a stale Lease after the assignment, with no error string, is a crash loop:
  DKC does not roll back from that (section 6.8), only we can;
- no verdict within ``progressDeadline`` of the assignment is a timeout.

Precedence when several signals show at once: bad config > crash loop > sync error > timeout >
progress. Status text is not a stable API (12.11): emptiness is tested first, prefixes second.
Pure: ``now`` is an argument.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.planner import matches_target
from rollout.policy import DoneUntil, RolloutPolicy

LOAD_ERROR = "failed to load config"
VALIDATE_ERROR = "failed to validate config"
INTERNAL_ERROR = "internal failure"
SYNC_ERROR_PREFIX = "failed to sync:"

BAD_CONFIG_PHASES = frozenset({NodePhase.FAILED_TO_LOAD, NodePhase.FAILED_TO_VALIDATE})
BUDGET_PHASES = frozenset({NodePhase.SYNC_ERROR, NodePhase.CRASH_LOOPING, NodePhase.TIMED_OUT})
SETTLED_PHASES = frozenset({NodePhase.ACTIVE, NodePhase.PROMOTED})


class ErrorKind(str, enum.Enum):
    NONE = "none"
    LOAD = "load"
    VALIDATE = "validate"
    INTERNAL = "internal"
    SYNC = "sync"
    OTHER = "other"


def classify_error(error: str) -> ErrorKind:
    """Triage a ``status.config.error`` string by prefix (reference section 8)."""
    text = error.strip()
    if not text:
        return ErrorKind.NONE
    for prefix, kind in (
        (SYNC_ERROR_PREFIX, ErrorKind.SYNC),
        (LOAD_ERROR, ErrorKind.LOAD),
        (VALIDATE_ERROR, ErrorKind.VALIDATE),
        (INTERNAL_ERROR, ErrorKind.INTERNAL),
    ):
        if text.startswith(prefix):
            return kind
    return ErrorKind.OTHER


@dataclass(frozen=True)
class Revert:
    """We re-pointed the node at ``to`` (None = local config) at ``requested_at``."""

    to: ConfigRef | None
    requested_at: datetime


@dataclass(frozen=True)
class PhaseVerdict:
    """A node's phase and the human-readable reason it was given."""

    phase: NodePhase
    reason: str

    @property
    def bad_config(self) -> bool:
        """The kubelet refused the config itself: halt at once, regardless of budget."""
        return self.phase in BAD_CONFIG_PHASES

    @property
    def counts_against_budget(self) -> bool:
        return self.phase in BUDGET_PHASES

    @property
    def failed(self) -> bool:
        return self.bad_config or self.counts_against_budget

    @property
    def settled(self) -> bool:
        return self.phase in SETTLED_PHASES


@dataclass(frozen=True)
class Down:
    """Evidence that a node is down: since when, and what shows it."""

    since: datetime
    reason: str


def node_down(
    obs: NodeObservation, *, now: datetime, policy: RolloutPolicy, watched_since: datetime | None = None
) -> Down | None:
    """Is the node down, on evidence that is current at ``now``? (None: it is not, or not yet.)

    - Ready False/Unknown counts once it has lasted ``notReadyFor`` (one flapping status write is
      not an outage) while we were watching: it began at the condition's ``lastTransitionTime``,
      but a view that just reconnected may not yet hold the write that ended it.
    - A Lease counts as stale only for time we were actually watching it: ``watched_since`` is
      when the orchestrator's lease watch last became live (after a start, an API outage), so an
      orchestrator that was not looking never makes a node look dead. The outage began when the
      lease *became* stale (last renewal + the threshold), not at the last renewal.
    """
    settles = not_ready_settles_at(obs, policy=policy, watched_since=watched_since, now=now)
    if settles is not None:
        since = obs.ready_transition or now
        return Down(since, f"Ready={obs.ready} since {_clock(since)}") if now >= settles else None
    if obs.lease_renewed is None:
        return None
    threshold = max(policy.lease_stale_after, timedelta(seconds=obs.lease_duration_s or 0))
    if now - _watched_from(obs.lease_renewed, watched_since) <= threshold:
        return None
    age = int((now - obs.lease_renewed).total_seconds())
    return Down(obs.lease_renewed + threshold, f"Lease not renewed for {age}s")


def not_ready_settles_at(obs: NodeObservation, *, policy: RolloutPolicy,
                         watched_since: datetime | None, now: datetime) -> datetime | None:
    """When a NotReady node may first be judged down (None: it is not NotReady)."""
    if obs.ready not in ("False", "Unknown"):
        return None
    return _watched_from(obs.ready_transition or now, watched_since) + policy.not_ready_for


def _watched_from(began: datetime, watched_since: datetime | None) -> datetime:
    """Evidence that began at ``began`` counts from when we were watching (see node_down)."""
    return began if watched_since is None else max(began, watched_since)


def is_unhealthy_after(obs: NodeObservation, *, now: datetime, policy: RolloutPolicy) -> str:
    """Why the node looks down ('' if it does not); see :func:`node_down`."""
    down = node_down(obs, now=now, policy=policy)
    return down.reason if down else ""


def _clock(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _deadline_passed(assigned_at: datetime | None, now: datetime, policy: RolloutPolicy) -> bool:
    return assigned_at is not None and now - assigned_at > policy.progress_deadline


def _bad_config(obs: NodeObservation, kind: ErrorKind, target: ConfigRef) -> PhaseVerdict | None:
    """Bootstrap errors count only once the kubelet resolved *our* target (else they are stale)."""
    if not matches_target(obs.assigned, target):
        return None
    fell_back = not matches_target(obs.active, target)
    if kind is ErrorKind.VALIDATE:
        return PhaseVerdict(NodePhase.FAILED_TO_VALIDATE, f"kubelet rejected the config: {obs.error!r}")
    if kind in (ErrorKind.LOAD, ErrorKind.INTERNAL):
        return PhaseVerdict(NodePhase.FAILED_TO_LOAD, f"kubelet could not load the config: {obs.error!r}")
    if kind is ErrorKind.OTHER and fell_back:
        return PhaseVerdict(
            NodePhase.FAILED_TO_LOAD, f"kubelet reports {obs.error!r} and is not running the target"
        )
    return None


def _progress(obs: NodeObservation, *, target: ConfigRef, policy: RolloutPolicy, late: bool) -> PhaseVerdict:
    resolved = matches_target(obs.assigned, target)
    running = resolved and matches_target(obs.active, target)
    if running and matches_target(obs.last_known_good, target):
        return PhaseVerdict(NodePhase.PROMOTED, "active and promoted to lastKnownGood")
    if running and policy.done.until is DoneUntil.LAST_KNOWN_GOOD and late:
        return PhaseVerdict(
            NodePhase.TIMED_OUT,
            "active but not promoted to lastKnownGood within progressDeadline "
            "(a kubelet restart during the 10-minute trial restarts it)",
        )
    if running and (obs.is_ready or not policy.done.require_ready):
        return PhaseVerdict(NodePhase.ACTIVE, "active on the target (uid and resourceVersion match)")
    if late:
        return PhaseVerdict(NodePhase.TIMED_OUT, _late_reason(obs, resolved=resolved, running=running))
    if running:
        return PhaseVerdict(NodePhase.RESTARTING, "active on the target, waiting for Ready")
    if resolved:
        return PhaseVerdict(NodePhase.RESTARTING, "kubelet resolved the target and is restarting onto it")
    return PhaseVerdict(NodePhase.ASSIGNED, _assigned_reason(obs, target))


def _assigned_reason(obs: NodeObservation, target: ConfigRef) -> str:
    if not obs.has_config_status:
        return "spec points at the target; the node reports no status.config (DKC off?)"
    if obs.assigned is not None and target.same_reference(obs.assigned):
        return (
            f"kubelet resolved resourceVersion {obs.assigned.resource_version}, "
            f"waiting for {target.resource_version} (cache lag)"
        )
    return "spec points at the target; the kubelet has not picked it up yet"


def _late_reason(obs: NodeObservation, *, resolved: bool, running: bool) -> str:
    if running:
        return "active on the target but not Ready within progressDeadline"
    if resolved:
        return "kubelet resolved the target but did not restart onto it within progressDeadline"
    if not obs.has_config_status:
        return "no status.config within progressDeadline: DKC is off on this kubelet or the API strips it"
    return "kubelet did not pick up the assignment within progressDeadline"


def node_phase(
    obs: NodeObservation | None,
    *,
    target: ConfigRef,
    assigned_at: datetime | None,
    now: datetime,
    policy: RolloutPolicy,
    revert: Revert | None = None,
    watched_since: datetime | None = None,
) -> PhaseVerdict:
    """The phase of one node in a rollout to ``target`` (or in a revert, when ``revert`` is set).

    ``watched_since``: since when the caller's view of the nodes has been continuously live (see
    :func:`node_down`); None treats the observation's own timestamps as the evidence.
    """
    if revert is not None:
        return revert_phase(obs, revert=revert, now=now, policy=policy, watched_since=watched_since)
    if obs is None:
        if _deadline_passed(assigned_at, now, policy):
            return PhaseVerdict(NodePhase.TIMED_OUT, "node not observed (deleted?) within progressDeadline")
        return PhaseVerdict(NodePhase.PENDING, "node not observed")
    if not target.same_reference(obs.spec_source):
        where = str(obs.spec_source) if obs.spec_source else "local config"
        return PhaseVerdict(NodePhase.PENDING, f"spec.configSource is {where}, not the target")
    kind = classify_error(obs.error)
    verdict = _bad_config(obs, kind, target)
    if verdict is not None:
        return verdict
    down = node_down(obs, now=now, policy=policy, watched_since=watched_since) if assigned_at else None
    if down is not None and assigned_at is not None:
        if down.since < assigned_at:
            return PhaseVerdict(
                NodePhase.UNAVAILABLE, f"{down.reason}: down before its assignment, not because of the config"
            )
        return PhaseVerdict(NodePhase.CRASH_LOOPING, f"{down.reason} after the assignment, no config error")
    if kind is ErrorKind.SYNC or (kind is ErrorKind.OTHER and not matches_target(obs.assigned, target)):
        return PhaseVerdict(NodePhase.SYNC_ERROR, f"kubelet cannot sync the config: {obs.error!r}")
    return _progress(obs, target=target, policy=policy, late=_deadline_passed(assigned_at, now, policy))


def _reverted(obs: NodeObservation, to: ConfigRef | None) -> bool:
    if to is None:
        # Reset to local: status.config is {}; a stale "failed to sync" override may survive (E14).
        clean = not obs.error or classify_error(obs.error) is ErrorKind.SYNC
        return obs.spec_source is None and obs.assigned is None and obs.active is None and clean
    return (
        to.same_reference(obs.spec_source)
        and to.same_reference(obs.assigned)
        and obs.active == obs.assigned
        and not obs.error
    )


def revert_phase(
    obs: NodeObservation | None,
    *,
    revert: Revert,
    now: datetime,
    policy: RolloutPolicy,
    watched_since: datetime | None = None,
) -> PhaseVerdict:
    """REVERTED as soon as the node's status shows it back on its previous source and Ready.

    TIMED_OUT only on evidence, named in the reason: a live kubelet (Ready) whose
    ``status.config`` still shows the rollout's config ``progressDeadline`` after the revert was
    written must be fixed on the node; a node that is down is reported as down, not as stuck.
    """
    where = str(revert.to) if revert.to else "local config"
    if obs is not None and _reverted(obs, revert.to) and obs.is_ready:
        return PhaseVerdict(NodePhase.REVERTED, f"back on {where}")
    if obs is None:
        if _deadline_passed(revert.requested_at, now, policy):
            return PhaseVerdict(NodePhase.TIMED_OUT, "node not observed (deleted?) since the revert")
        return PhaseVerdict(NodePhase.REVERTING, "node not observed")
    spec_ok = obs.spec_source is None if revert.to is None else revert.to.same_reference(obs.spec_source)
    late = _deadline_passed(revert.requested_at, now, policy)
    if not spec_ok:
        if late:
            where_now = str(obs.spec_source) if obs.spec_source else "local config"
            return PhaseVerdict(NodePhase.TIMED_OUT, f"the revert did not land: spec.configSource is still {where_now}")
        return PhaseVerdict(NodePhase.REVERTING, f"revert to {where} not written yet")
    if not late:
        return PhaseVerdict(NodePhase.REVERTING, f"spec points at {where}; waiting for the kubelet")
    down = node_down(obs, now=now, policy=policy, watched_since=watched_since)
    if down is not None:
        return PhaseVerdict(
            NodePhase.TIMED_OUT,
            f"node is down ({down.reason}); the revert to {where} is written and applies when its kubelet is back",
        )
    if _reverted(obs, revert.to):
        return PhaseVerdict(NodePhase.TIMED_OUT, f"back on {where} but not Ready (Ready={obs.ready or 'absent'})")
    return PhaseVerdict(
        NodePhase.TIMED_OUT,
        f"its kubelet has not acted on the revert to {where} written at {_clock(revert.requested_at)}: "
        f"status.config still says assigned {obs.assigned or 'none'}, active {obs.active or 'none'}"
        + (f", error {obs.error!r}" if obs.error else "")
        + "; fix it on the node (a kubelet that dies before its first sync pass: empty "
        "dynamic-config store/meta/assigned)",
    )
