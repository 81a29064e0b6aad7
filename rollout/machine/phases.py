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
- NotReady/Unknown or a stale Lease after the kubelet took the target (``assigned`` is it), or a
  kubelet reporting itself NotReady after the assignment, with no error string, is a crash loop:
  DKC does not roll back from that (section 6.8), only we can. The kubelet reports ``assigned``
  at StartSync, before the container manager's start-up checks that crash-loop it (section
  11.2), so a crash loop shows it; a node that went silent (Unknown, stale Lease) *before* taking
  the target is unreachable (a partition, a lost host, or a kubelet that died before StartSync):
  counted the same, named for what is seen;
- no verdict within ``progressDeadline`` of the assignment is a timeout;
- a node that no longer exists is gone: not a failure, not a timeout, nothing to put back.

Every clock of a node starts when *its* write was acknowledged (``written_at``), not when the
batch was decided: a write that has not landed has no deadline yet (the machine re-issues it),
and a failure is blamed on the config only if it began after that node's write.

Precedence when several signals show at once: bad config > crash loop > sync error > timeout >
progress. Status text is not a stable API (12.11): emptiness is tested first, prefixes second.
Pure: ``now`` is an argument.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.names import ANN_ROLLOUT
from rollout.planner import lease_stale_after
from rollout.policy import DoneUntil, RolloutPolicy
from rollout.timefmt import human

LOAD_ERROR = "failed to load config"
VALIDATE_ERROR = "failed to validate config"
INTERNAL_ERROR = "internal failure"
SYNC_ERROR_PREFIX = "failed to sync:"

BAD_CONFIG_PHASES = frozenset({NodePhase.FAILED_TO_LOAD, NodePhase.FAILED_TO_VALIDATE})
BUDGET_PHASES = frozenset({NodePhase.SYNC_ERROR, NodePhase.CRASH_LOOPING, NodePhase.UNREACHABLE, NodePhase.TIMED_OUT})
FAILURE_PHASES = BAD_CONFIG_PHASES | BUDGET_PHASES  # a verdict that is a failure (``PhaseVerdict.failed``)
SETTLED_PHASES = frozenset({NodePhase.ACTIVE, NodePhase.PROMOTED})
# a node that is not there, or that failed before our write: nothing for the config to answer for
NOT_OURS_PHASES = frozenset({NodePhase.GONE, NodePhase.UNAVAILABLE})

RENEW_FRACTION = 0.25  # the kubelet renews its Lease every quarter of its duration
DEFAULT_LEASE_DURATION_S = 40.0


class ErrorKind(str, enum.Enum):
    NONE = "none"
    LOAD = "load"
    VALIDATE = "validate"
    INTERNAL = "internal"
    SYNC = "sync"
    OTHER = "other"


_ERROR_PREFIXES = (
    (SYNC_ERROR_PREFIX, ErrorKind.SYNC),
    (LOAD_ERROR, ErrorKind.LOAD),
    (VALIDATE_ERROR, ErrorKind.VALIDATE),
    (INTERNAL_ERROR, ErrorKind.INTERNAL),
)


def classify_error(error: str) -> ErrorKind:
    """Triage a ``status.config.error`` string by prefix (reference section 8)."""
    text = error.strip() if error else ""  # no error: the common case, every node, every decision
    if not text:
        return ErrorKind.NONE
    for prefix, kind in _ERROR_PREFIXES:
        if text.startswith(prefix):
            return kind
    return ErrorKind.OTHER


@dataclass(frozen=True)
class Revert:
    """We decided at ``requested_at`` to re-point the node at ``to`` (None = local config); the
    write was acknowledged at ``written_at`` (None: not landed yet)."""

    to: ConfigRef | None
    requested_at: datetime
    written_at: datetime | None = None


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
        return self.phase in FAILURE_PHASES

    @property
    def settled(self) -> bool:
        return self.phase in SETTLED_PHASES


@dataclass(frozen=True)
class Down:
    """Evidence that a node is down: since when it counts as down, what shows it, and when the
    failure began (``began`` <= ``since``): the last sign of life, for telling a node that failed
    before our write from one our write broke."""

    since: datetime
    reason: str
    began: datetime


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
        if now < settles:
            return None
        since = obs.ready_transition or now
        began = _end_of_its_second(since)
        silent = _lease_silent_from(obs, now)
        return Down(since, f"Ready={obs.ready} since {human(since)}", min(began, silent or began))
    if obs.lease_renewed is None:
        return None
    threshold = lease_stale_after(obs, policy)
    if now - watched_from(obs.lease_renewed, watched_since) <= threshold:
        return None
    age = int((now - obs.lease_renewed).total_seconds())
    since = obs.lease_renewed + threshold
    return Down(since, f"Lease not renewed for {age}s", min(since, _lease_silent_from(obs, now) or since))


def _end_of_its_second(at: datetime) -> datetime:
    """The latest moment a whole-second timestamp can stand for: a condition's
    ``lastTransitionTime`` is a ``metav1.Time``, serialised to the second, so a node that went
    NotReady 0.4 s after our write shows a time up to 0.6 s *before* it, and must not read as
    failed before the write. (A Lease's ``renewTime`` is a ``MicroTime``: taken as it is.)"""
    if at.microsecond:
        return at
    return at + timedelta(seconds=1) - timedelta(microseconds=1)


def _lease_silent_from(obs: NodeObservation, now: datetime) -> datetime | None:
    """When the kubelet stopped renewing its Lease: two renewals after the last one were due
    (a kubelet renews every quarter of the Lease's duration, ``nodeLeaseRenewIntervalFraction``);
    None while its renewals are on time. NotReady from the node lifecycle controller comes a grace
    period (40 s) after the kubelet stopped, so this is the earlier, truer start of the failure."""
    if obs.lease_renewed is None:
        return None
    silent_from = obs.lease_renewed + 2 * _renew_interval(obs)
    return silent_from if silent_from <= now else None


def _renew_interval(obs: NodeObservation) -> timedelta:
    return timedelta(seconds=(obs.lease_duration_s or DEFAULT_LEASE_DURATION_S) * RENEW_FRACTION)


def not_ready_settles_at(obs: NodeObservation, *, policy: RolloutPolicy,
                         watched_since: datetime | None, now: datetime) -> datetime | None:
    """When a NotReady node may first be judged down (None: it is not NotReady)."""
    if obs.ready not in ("False", "Unknown"):
        return None
    return watched_from(obs.ready_transition or now, watched_since) + policy.not_ready_for


def watched_from(began: datetime, watched_since: datetime | None) -> datetime:
    """Evidence that began at ``began`` counts from when we were watching (see node_down)."""
    return began if watched_since is None else max(began, watched_since)


def _deadline_passed(written_at: datetime | None, now: datetime, policy: RolloutPolicy) -> bool:
    return written_at is not None and now - written_at > policy.progress_deadline


def _bad_config(obs: NodeObservation, kind: ErrorKind, target: ConfigRef) -> PhaseVerdict | None:
    """Bootstrap errors count only once the kubelet resolved *our* target (else they are stale)."""
    if not target.matches(obs.assigned):
        return None
    fell_back = not target.matches(obs.active)
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
    resolved = target.matches(obs.assigned)
    running = resolved and target.matches(obs.active)
    if running and target.matches(obs.last_known_good):
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
    written_at: datetime | None,
    now: datetime,
    policy: RolloutPolicy,
    revert: Revert | None = None,
    watched_since: datetime | None = None,
) -> PhaseVerdict:
    """The phase of one node in a rollout to ``target`` (or in a revert, when ``revert`` is set).

    ``written_at``: when the node's assignment was acknowledged (None: it has not landed yet, so
    no deadline runs and nothing is blamed on it). ``watched_since``: since when the caller's view
    of the nodes has been continuously live (see :func:`node_down`); None treats the
    observation's own timestamps as the evidence.
    """
    if revert is not None:
        return revert_phase(obs, revert=revert, now=now, policy=policy, watched_since=watched_since)
    if obs is None:
        return PhaseVerdict(NodePhase.GONE, "deleted (or no longer selected): not counted against the rollout")
    if not target.same_reference(obs.spec_source):
        if written_at is not None and ANN_ROLLOUT not in obs.annotations:
            return PhaseVerdict(NodePhase.GONE, "no longer carries the assignment nor our annotations "
                                "(re-created under the same name?): not counted against the rollout")
        where = str(obs.spec_source) if obs.spec_source else "local config"
        return PhaseVerdict(NodePhase.PENDING, f"spec.configSource is {where}, not the target")
    kind = classify_error(obs.error)
    verdict = _bad_config(obs, kind, target)
    if verdict is not None:
        return verdict
    down = node_down(obs, now=now, policy=policy, watched_since=watched_since) if written_at else None
    if down is not None and written_at is not None:
        if down.began < written_at:
            return PhaseVerdict(
                NodePhase.UNAVAILABLE,
                f"{down.reason}: failing since {human(down.began)}, before its assignment landed "
                f"({human(written_at)}): not because of the config",
            )
        if target.matches(obs.assigned) or obs.ready == "False":  # False: the kubelet itself reports
            return PhaseVerdict(NodePhase.CRASH_LOOPING, f"{down.reason} after the assignment, no config error")
        return PhaseVerdict(
            NodePhase.UNREACHABLE,
            f"{down.reason} after the assignment, before the kubelet took the config: "
            "a network partition, a lost host, or a kubelet that dies before it can report",
        )
    if kind is ErrorKind.SYNC or (kind is ErrorKind.OTHER and not target.matches(obs.assigned)):
        return PhaseVerdict(NodePhase.SYNC_ERROR, f"kubelet cannot sync the config: {obs.error!r}")
    return _progress(obs, target=target, policy=policy, late=_deadline_passed(written_at, now, policy))


def phase_changes_at(
    obs: NodeObservation | None,
    *,
    written_at: datetime | None,
    now: datetime,
    policy: RolloutPolicy,
    revert: Revert | None = None,
    watched_since: datetime | None = None,
) -> datetime | None:
    """The first moment at or after ``now`` from which :func:`node_phase` on the same inputs may
    answer differently; before it the verdict holds (None: it holds for good). ``now`` itself when
    the answer moves with the clock (a stale Lease's reason counts its age).

    These are the moments ``node_phase`` compares the clock with, all of them, whichever branch
    the verdict took: the deadline, a NotReady condition settling, a Lease's renewals going
    silent and then stale. A caller that keeps a verdict while the node and its record are
    unchanged re-judges it from then on (``rollout.machine.verdicts``)."""
    if obs is None:
        return None
    started = revert.written_at if revert is not None else written_at
    if started is None:
        return None  # no write landed: no deadline runs and nothing is judged down
    moments = [started + policy.progress_deadline]
    settles = not_ready_settles_at(obs, policy=policy, watched_since=watched_since, now=now)
    if settles is not None and obs.ready_transition is not None:  # without one it never settles
        moments.append(settles)
    if obs.lease_renewed is not None:
        moments.append(obs.lease_renewed + 2 * _renew_interval(obs))
        stale = watched_from(obs.lease_renewed, watched_since) + lease_stale_after(obs, policy)
        if stale < now:
            return now
        moments.append(stale)
    return min((moment for moment in moments if moment >= now), default=None)


def _reverted(obs: NodeObservation, to: ConfigRef | None) -> bool:
    if to is None:
        # Reset to local: status.config is {}; a stale "failed to sync" override may survive (E14).
        clean = not obs.error or classify_error(obs.error) is ErrorKind.SYNC
        return obs.points_at(None) and obs.assigned is None and obs.active is None and clean
    return (
        obs.points_at(to)
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

    A revert that has not landed is REVERTING (the machine writes it again), never timed out:
    its deadline runs from the acknowledged write. TIMED_OUT only on evidence, named in the
    reason: a live kubelet (Ready) whose ``status.config`` still shows the rollout's config
    ``progressDeadline`` after the revert was written must be fixed on the node; a node that is
    down is reported as down, not as stuck. A deleted node is GONE: nothing to put back.
    """
    where = str(revert.to) if revert.to else "local config"
    if obs is None:
        return PhaseVerdict(NodePhase.GONE, "deleted (or no longer selected): nothing to put back")
    if _reverted(obs, revert.to) and obs.is_ready:
        return PhaseVerdict(NodePhase.REVERTED, f"back on {where}")
    if revert.written_at is None:
        return PhaseVerdict(NodePhase.REVERTING, f"revert to {where} not written yet")
    late = _deadline_passed(revert.written_at, now, policy)
    if not obs.points_at(revert.to):
        where_now = str(obs.spec_source) if obs.spec_source else "local config"
        return PhaseVerdict(NodePhase.TIMED_OUT, f"re-pointed at {where_now} by someone else after the revert "
                            f"to {where} was written at {human(revert.written_at)}")
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
        f"its kubelet has not acted on the revert to {where} written at {human(revert.written_at)}: "
        f"status.config still says assigned {obs.assigned or 'none'}, active {obs.active or 'none'}"
        + (f", error {obs.error!r}" if obs.error else "")
        + "; fix it on the node (a kubelet that dies before its first sync pass: empty "
        "dynamic-config store/meta/assigned)",
    )
