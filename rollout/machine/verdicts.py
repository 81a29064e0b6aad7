"""What each planned node's observation means for the rollout, and when a batch is done.

``node_verdict`` is the one rule the engine and ``rollout status`` both read: a node's phase from
``rollout.phases``, judged from the journal's times (each node's clocks start at its own
acknowledged write), plus the nodes left out of their batch and the ones gone before it. On top
of the verdicts: which failures count against a batch's budget now, and whether a batch is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from rollout.journal import AnalysisVerdict, ApprovalOutcome, Journal, NodeRecord
from rollout.machine.situation import BatchProgress, Situation
from rollout.model import NodeObservation, NodePhase
from rollout.phases import NOT_OURS_PHASES, SETTLED_PHASES, PhaseVerdict, Revert, node_phase, phase_changes_at
from rollout.planner import RolloutPlan
from rollout.policy import ApprovalTimeoutAction, DoneUntil, OnInconclusive, RolloutPolicy


def node_verdict(
    journal: Journal,
    rec: NodeRecord,
    obs: NodeObservation | None,
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> PhaseVerdict | None:
    """The phase of one planned node of this rollout (None: not assigned yet, still there)."""
    if rec.assigned:
        return node_phase(
            obs,
            target=journal.target,
            written_at=rec.written_at,
            now=now,
            policy=journal.plan.policy,
            revert=_revert_of(rec),
            watched_since=watched_since,
        )
    if rec.skipped:
        return PhaseVerdict(NodePhase.SKIPPED, rec.skipped)
    if obs is None:
        return PhaseVerdict(NodePhase.GONE, "deleted (or no longer selected) before its assignment")
    return None


def _revert_of(rec: NodeRecord) -> Revert | None:
    if rec.revert_requested_at is None:
        return None
    return Revert(to=rec.revert_to, requested_at=rec.revert_requested_at, written_at=rec.revert_written_at)


@dataclass(frozen=True)
class _Judged:
    """One assigned node's verdict, what it was judged on, and until when it holds."""

    rec: NodeRecord
    obs: NodeObservation | None
    verdict: PhaseVerdict
    until: datetime | None  # None: for as long as the record and the observation stay the same


@dataclass(frozen=True)
class _Kept:
    plan: RolloutPlan
    watched_since: datetime | None
    at: datetime
    judged: dict[str, _Judged]


# Every decision judges every assigned node; at 20,000 nodes that took most of a decision while a
# batch landed, and the last node of a batch waited for it (the observation lag, bench/README.md).
# A node is judged again only when its record or its observation is a new object (both are
# frozen: a change is a new object) or the clock reached a moment its verdict can turn at
# (``phase_changes_at``); a pure memo, as ``rollout.journal.parts`` keeps its encodings: the same
# inputs give the same verdicts. Kept per rollout and view, for the last judgement only: the
# decisions' (their live view) apart from a one-off read's in the same process (the progress
# display each second, judging with no view), which would otherwise judge every node again for
# the next decision.
_KEPT: dict[tuple[str, bool], _Kept] = {}  # (rollout, a one-off read) -> the last judgement
_KEPT_MAX = 64


def verdicts(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> dict[str, PhaseVerdict]:
    """The phase of every planned node that has one (all but those still waiting for their batch)."""
    key = (journal.rollout, watched_since is None)
    kept = _KEPT.get(key)
    usable = kept is not None and kept.plan is journal.plan and kept.watched_since == watched_since \
        and kept.at <= now
    before = kept.judged if kept is not None and usable else {}
    judged: dict[str, _Judged] = {}
    out = {}
    for name, rec in journal.nodes.items():
        obs = observations.get(name)
        if not rec.assigned:
            verdict = node_verdict(journal, rec, obs, now=now, watched_since=watched_since)
            if verdict is not None:
                out[name] = verdict
            continue
        held = before.get(name)
        if held is None or held.rec is not rec or held.obs is not obs or (held.until is not None and now >= held.until):
            verdict = node_verdict(journal, rec, obs, now=now, watched_since=watched_since)
            assert verdict is not None  # an assigned node always has one
            until = phase_changes_at(obs, written_at=rec.written_at, now=now, policy=journal.plan.policy,
                                     revert=_revert_of(rec), watched_since=watched_since)
            held = _Judged(rec, obs, verdict, until)
        judged[name] = held
        out[name] = held.verdict
    if len(_KEPT) >= _KEPT_MAX:
        _KEPT.clear()
    _KEPT[key] = _Kept(journal.plan, watched_since, now, judged)
    return out


def _counts_now(rec: NodeRecord, verdict: PhaseVerdict, *, now: datetime, policy: RolloutPolicy) -> bool:
    """A budget failure counts at once, except a sync error, which gets ``syncErrorGrace``
    (a 403 right after an assignment is normal) and counts anyway past ``progressDeadline``."""
    if not verdict.counts_against_budget:
        return False
    if verdict.phase is not NodePhase.SYNC_ERROR:
        return True
    since = rec.phase_since if rec.phase is NodePhase.SYNC_ERROR and rec.phase_since else now
    late = rec.written_at is not None and now - rec.written_at > policy.progress_deadline
    return late or now - since >= policy.sync_error_grace


def budget_failures(s: Situation, batch: int) -> dict[str, str]:
    """The nodes of ``batch`` whose failure counts against its budget now, with why."""
    return {
        n: f"{v.phase.value}: {v.reason}"
        for n in s.failing
        if (rec := s.journal.nodes[n]).batch == batch
        and _counts_now(rec, v := s.verdicts[n], now=s.now, policy=s.policy)
    }


def settled_since(rec: NodeRecord, obs: NodeObservation | None, now: datetime) -> datetime:
    """When the node's soak began: it settled on the target and, if it says so, became Ready."""
    since = rec.phase_since if rec.phase in SETTLED_PHASES and rec.phase_since else now
    if obs is not None and obs.is_ready and obs.ready_transition is not None:
        since = max(since, obs.ready_transition)
    return since


_PROMOTED = frozenset({NodePhase.PROMOTED})


def wanted_phases(policy: RolloutPolicy) -> frozenset[NodePhase]:
    """The phases that satisfy ``done.until`` (before the soak)."""
    return _PROMOTED if policy.done.until is DoneUntil.LAST_KNOWN_GOOD else SETTLED_PHASES


def analysis_allows_done(j: Journal, batch: int) -> bool:
    """May ``batch`` be done as far as its analysis goes?"""
    if not j.plan.policy.analysis.enabled:
        return True
    record = j.batches[batch].analysis
    if record is None or record.verdict is AnalysisVerdict.FAILED:
        return False
    if record.verdict is AnalysisVerdict.PASSED:
        return True
    on = j.plan.policy.analysis.on_inconclusive
    if on is OnInconclusive.PASS:
        return True
    approval = j.batches[batch].approval
    if on is not OnInconclusive.ASK or approval is None:
        return False
    proceeds = j.plan.policy.approval.on_timeout is ApprovalTimeoutAction.PROCEED
    return approval.outcome is ApprovalOutcome.APPROVED or (approval.outcome is ApprovalOutcome.TIMED_OUT and proceeds)


def batch_progress(s: Situation, batch: int) -> BatchProgress:
    """Each node of ``batch`` sorted once. A node is done in a wanted phase for the whole soak (or
    when a person ended its batch's soak: ``rollout promote``)."""
    j, observed, now, policy = s.journal, s.observations, s.now, s.policy
    wanted, soak, waived = wanted_phases(policy), policy.done.soak, batch in j.soak_waived
    target = j.target
    assigned: list[str] = []
    off_spec: list[str] = []
    waiting: list[str] = []
    settled: list[str] = []
    soaking: set[str] = set()
    off_target = to_assign = False
    recheck_at, last_deadline = now + policy.recheck_every, None
    for name in s.plan.batches[batch].nodes:
        rec = j.nodes[name]
        if not rec.assigned:
            to_assign = to_assign or (not rec.skipped and name in observed)
            continue
        assigned.append(name)
        obs = observed.get(name)
        if obs is not None and not target.same_reference(obs.spec_source):
            off_spec.append(name)
        phase = s.phase_of(name)
        if phase in NOT_OURS_PHASES:
            continue  # deleted, or down before our write: not the config's to wait for
        if phase in wanted:
            settled.append(name)
            if waived or now - settled_since(rec, obs, now) >= soak:
                continue  # done
            soaking.add(name)
        else:
            off_target = True
        waiting.append(name)
        # inline, the common case: a waiting node's one moment is its progress deadline
        if rec.written_at is not None:
            deadline = rec.written_at + policy.progress_deadline
            if now < deadline < recheck_at:
                recheck_at = deadline
            if name not in soaking and (last_deadline is None or deadline > last_deadline):
                last_deadline = deadline
        if phase in SETTLED_PHASES or phase is NodePhase.SYNC_ERROR:
            recheck_at = min(recheck_at, _later_change(rec, phase, obs, now=now, policy=policy))
    return BatchProgress(tuple(assigned), tuple(off_spec), tuple(waiting), frozenset(soaking), tuple(settled),
                         off_target, to_assign, recheck_at, last_deadline)


def progress(s: Situation, batch: int) -> BatchProgress:
    """``batch_progress``, walked once per decision: folding the facts found it for the running
    batch, and nothing folding changes after that (a batch's soak start, status or gates) is
    read by it. At 20,000 nodes a walk of a landing 10,000-node batch is a fifth of a decision."""
    if s.running is not None and s.running[0] == batch:
        return s.running[1]
    return batch_progress(s, batch)


def _later_change(rec: NodeRecord, phase: NodePhase, obs: NodeObservation | None, *, now: datetime,
                  policy: RolloutPolicy) -> datetime:
    """A waiting node's moments besides its deadline: its soak's end once it settled, its sync
    error's grace (``datetime.max``: none still ahead)."""
    times = []
    if phase in SETTLED_PHASES:
        times.append(settled_since(rec, obs, now) + policy.done.soak)
    if phase is NodePhase.SYNC_ERROR and rec.phase_since:
        times.append(rec.phase_since + policy.sync_error_grace)
    return min((t for t in times if t > now), default=datetime.max.replace(tzinfo=now.tzinfo))


def batch_done(s: Situation, batch: int, progress: BatchProgress) -> bool:
    """Every node of ``batch`` done, failed within its budget, or not the config's to wait for;
    and its analysis, if the policy has one, passed (``rollout.machine.analysis``)."""
    if not analysis_allows_done(s.journal, batch):
        return False
    failures = budget_failures(s, batch)
    if len(failures) > s.plan.failure_budget(batch):
        return False
    return not progress.to_assign and all(name in failures for name in progress.waiting)
