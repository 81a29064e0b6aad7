"""What each planned node's observation means for the rollout, and when a batch is done.

``node_verdict`` is the one rule the engine and ``rollout status`` both read: a node's phase from
``rollout.machine.phases``, judged from the journal's times (each node's clocks start at its own
acknowledged write), plus the nodes left out of their batch and the ones gone before it. On top
of the verdicts: which failures count against a batch's budget now, and whether a batch is done.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import compress

from rollout.journal import AnalysisVerdict, ApprovalOutcome, Journal, NodeRecord
from rollout.machine.changes import changed_names, changed_positions
from rollout.machine.situation import UNSEEN, BatchProgress, Situation
from rollout.model import NodeObservation, NodePhase
from rollout.machine.phases import (FAILURE_PHASES, NOT_OURS_PHASES, SETTLED_PHASES, PhaseVerdict, Revert, node_phase,
                                    phase_changes_at, watched_from)
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


@dataclass
class _Kept:
    """The last judgement of one rollout (per kind of read): what it was judged on, its verdicts
    and when each can turn (a heap of moments; a moment no longer its node's is skipped)."""

    plan: RolloutPlan
    watched_since: datetime | None
    at: datetime
    judged: dict[str, _Judged]
    nodes: Mapping[str, NodeRecord]  # the journal's records judged (frozen: kept as they are)
    observed: dict[str, NodeObservation]  # a copy: the caller's mapping may change in place
    found: dict[str, PhaseVerdict]  # what was returned (never changed after: the next one is a copy)
    due: list[tuple[datetime, str]]
    # the nodes whose verdict's phase is not their record's: what folding the verdicts moves
    unfolded: set[str]
    failing: set[str]  # the nodes whose verdict is a failure


# Judging every assigned node at every decision held a large batch's last node up (the observation
# lag, bench/README.md). A node is judged again only when its record or its observation is a new object (both are
# frozen: a change is a new object) or the clock reached a moment its verdict can turn at
# (``phase_changes_at``); a pure memo, as ``rollout.journal.parts`` keeps its encodings: the same
# inputs give the same verdicts. Only the nodes that changed are looked at (``changes``), so a
# decision costs what changed since the last one, not the size of the plan. Kept per rollout and
# view, for the last judgement only: the decisions' (their live view) apart from a one-off read's
# in the same process (the progress display each second, judging with no view), which would
# otherwise judge every node again for the next decision.
_KEPT: dict[tuple[str, bool], _Kept] = {}  # (rollout, a one-off read) -> the last judgement
_KEPT_MAX = 64


def verdicts(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> dict[str, PhaseVerdict]:
    """The phase of every planned node that has one (all but those still waiting for their batch),
    in plan order."""
    key = (journal.rollout, watched_since is None)
    kept = _KEPT.get(key)
    observed = dict(observations)
    if kept is not None and kept.plan is journal.plan and kept.watched_since == watched_since and kept.at <= now:
        fresh = _since(kept, journal, observed, now=now)
    else:
        kept, fresh = None, None
    if kept is None or fresh is None:
        kept = _judge_all(journal, observed, now=now, watched_since=watched_since,
                          before=kept.judged if kept is not None else {})
    else:
        kept = _judge_again(kept, *fresh, journal, observed, now=now)
    if len(_KEPT) >= _KEPT_MAX:
        _KEPT.clear()
    _KEPT[key] = kept
    return kept.found


def _since(kept: _Kept, journal: Journal, observed: Mapping[str, NodeObservation], *,
           now: datetime) -> tuple[set[str], list[tuple[datetime, str]]] | None:
    """The nodes to judge again: their record or observation changed, or a moment their verdict
    can turn at came; and the moments still ahead (None: the nodes themselves changed; judge them
    all)."""
    records = changed_names(kept.nodes, journal.nodes)
    seen = changed_names(kept.observed, observed) if records is not None else None
    if records is None or seen is None:
        return None
    planned = journal.nodes
    names = {*records, *(name for name in seen if name in planned)}  # the view holds nodes of no plan too
    due, judged = list(kept.due), kept.judged
    while due and due[0][0] <= now:
        moment, name = heapq.heappop(due)
        held = judged.get(name)
        if held is not None and held.until == moment:
            names.add(name)
    return names, due


def _judge(journal: Journal, rec: NodeRecord, obs: NodeObservation | None,
           held: _Judged | None, *, now: datetime, watched_since: datetime | None) -> _Judged | PhaseVerdict | None:
    """An assigned node's judgement (``held`` again while it still holds); an unassigned node's
    verdict (None: it has none)."""
    if not rec.assigned:
        return node_verdict(journal, rec, obs, now=now, watched_since=watched_since)
    if held is None or held.rec is not rec or held.obs is not obs or (held.until is not None and now >= held.until):
        verdict = node_verdict(journal, rec, obs, now=now, watched_since=watched_since)
        assert verdict is not None  # an assigned node always has one
        until = phase_changes_at(obs, written_at=rec.written_at, now=now, policy=journal.plan.policy,
                                 revert=_revert_of(rec), watched_since=watched_since)
        held = _Judged(rec, obs, verdict, until)
    return held


def _judge_all(journal: Journal, observed: dict[str, NodeObservation], *, now: datetime,
               watched_since: datetime | None, before: Mapping[str, _Judged]) -> _Kept:
    judged: dict[str, _Judged] = {}
    found: dict[str, PhaseVerdict] = {}
    unfolded: set[str] = set()
    failing: set[str] = set()
    for name, rec in journal.nodes.items():
        result = _judge(journal, rec, observed.get(name), before.get(name), now=now, watched_since=watched_since)
        if isinstance(result, _Judged):
            judged[name] = result
            result = result.verdict
        if result is not None:
            found[name] = result
            if result.phase is not rec.phase:
                unfolded.add(name)
            if result.phase in FAILURE_PHASES:
                failing.add(name)
    return _Kept(journal.plan, watched_since, now, judged, journal.nodes, observed, found, _moments(judged),
                 unfolded, failing)


def _moments(judged: Mapping[str, _Judged]) -> list[tuple[datetime, str]]:
    """A heap of the moments each judged node's verdict can turn at."""
    due = [(held.until, name) for name, held in judged.items() if held.until is not None]
    heapq.heapify(due)
    return due


def _judge_again(kept: _Kept, names: set[str], due: list[tuple[datetime, str]], journal: Journal,
                 observed: dict[str, NodeObservation], *, now: datetime) -> _Kept:
    """``kept`` brought up to ``now`` by judging ``names`` again; everything else holds. Copies, not
    ``kept`` changed in place: a memo another thread is reading is never changed under it."""
    judged, unfolded, failing, found = dict(kept.judged), set(kept.unfolded), set(kept.failing), dict(kept.found)
    added = False
    for name in names:
        rec = journal.nodes[name]
        result = _judge(journal, rec, observed.get(name), judged.get(name), now=now,
                        watched_since=kept.watched_since)
        if isinstance(result, _Judged):
            if judged.get(name) is not result and result.until is not None:
                heapq.heappush(due, (result.until, name))
            judged[name] = result
            result = result.verdict
        else:
            judged.pop(name, None)
        if result is None:
            found.pop(name, None)
            unfolded.discard(name)
            failing.discard(name)
            continue
        added = added or name not in found
        found[name] = result
        if result.phase is not rec.phase:
            unfolded.add(name)
        else:
            unfolded.discard(name)
        if result.phase in FAILURE_PHASES:
            failing.add(name)
        else:
            failing.discard(name)
    if added:  # a node judged for the first time goes to its place in the plan
        found = {name: found[name] for name in journal.nodes if name in found}
    if len(due) > 4 * len(judged) + 1024:  # moments superseded by later judgements pile up
        due = _moments(judged)
    return _Kept(kept.plan, kept.watched_since, now, judged, journal.nodes, observed, found, due, unfolded, failing)


def failing_nodes(journal: Journal, found: Mapping[str, PhaseVerdict], *,
                  watched_since: datetime | None) -> tuple[str, ...] | None:
    """The nodes whose verdict in ``found`` is a failure, in plan order, from the memo when
    ``found`` is its last judgement (None: it is not; ``Situation`` finds them itself)."""
    kept = _KEPT.get((journal.rollout, watched_since is None))
    if kept is None or kept.found is not found:
        return None
    return tuple(compress(found, map(kept.failing.__contains__, found))) if kept.failing else ()


def unfolded_phases(journal: Journal, found: Mapping[str, PhaseVerdict], *,
                    watched_since: datetime | None) -> dict[str, NodePhase]:
    """The nodes whose verdict in ``found`` moves their record's phase, and to what: from the memo
    when ``found`` is its last judgement of this journal's records, else from every node."""
    kept = _KEPT.get((journal.rollout, watched_since is None))
    if kept is not None and kept.found is found and kept.nodes is journal.nodes:
        return {name: found[name].phase for name in kept.unfolded}
    before = journal.nodes
    return {n: v.phase for n, v in found.items() if v.phase is not before[n].phase}


def _counts_now(rec: NodeRecord, verdict: PhaseVerdict, *, now: datetime, policy: RolloutPolicy,
                watched_since: datetime | None) -> bool:
    """A budget failure counts at once, except a sync error, which gets ``syncErrorGrace``
    (a 403 right after an assignment is normal) and counts anyway past ``progressDeadline``."""
    if not verdict.counts_against_budget:
        return False
    if verdict.phase is not NodePhase.SYNC_ERROR:
        return True
    since = rec.phase_since if rec.phase is NodePhase.SYNC_ERROR and rec.phase_since else now
    graced, deadline = _sync_error_clocks(rec, since, policy=policy, watched_since=watched_since)
    return (deadline is not None and now > deadline) or now >= graced


def _sync_error_clocks(rec: NodeRecord, since: datetime, *, policy: RolloutPolicy,
                       watched_since: datetime | None) -> tuple[datetime, datetime | None]:
    """When a sync error seen since ``since`` has had its grace, and its node's progress deadline
    (None: its write has not landed), both over time the orchestrator could watch: an API server
    out of reach fails the kubelet's download too, and its error is no evidence against the config."""
    graced = watched_from(since, watched_since) + policy.sync_error_grace
    if rec.written_at is None:
        return graced, None
    return graced, watched_from(rec.written_at, watched_since) + policy.progress_deadline


def budget_failures(s: Situation, batch: int) -> dict[str, str]:
    """The nodes of ``batch`` whose failure counts against its budget now, with why."""
    return {
        n: f"{v.phase.value}: {v.reason}"
        for n in s.failing
        if (rec := s.journal.nodes[n]).batch == batch
        and _counts_now(rec, v := s.verdicts[n], now=s.now, policy=s.policy, watched_since=s.watched_since)
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


# What a node of a batch is, once sorted: its place and flags hold while its record, observation
# and verdict stay the same objects, except a waiting node's (its soak and deadline run with the
# clock), which is sorted again at every walk.
_UNASSIGNED, _TO_ASSIGN, _NOT_OURS, _DONE, _WAITING = range(5)


@dataclass
class _Walk:
    """One batch as last walked: its inputs, per position, and what each node was found to be."""

    plan: RolloutPlan
    waived: bool
    at: datetime
    recs: tuple[NodeRecord, ...]
    seen: tuple[NodeObservation | None, ...]
    judged: tuple[PhaseVerdict | None, ...]
    place: list[int]
    off_spec: list[bool]
    settled: list[bool]
    waiting: list[int]  # the positions of the nodes found waiting


# (rollout, batch, a one-off read) -> the last walk. While a large batch lands every node's change
# wakes a decision, and walking the whole batch would be most of each one; only the nodes that changed, and those still waiting, are sorted again. The positions that changed are
# found in C over the batch's inputs (``changes.changed_positions``).
_WALKS: dict[tuple[str, int, bool], _Walk] = {}


def batch_progress(s: Situation, batch: int) -> BatchProgress:
    """Each node of ``batch`` sorted once. A node is done in a wanted phase for the whole soak (or
    when a person ended its batch's soak: ``rollout promote``)."""
    j, observed, now, policy = s.journal, s.observations, s.now, s.policy
    wanted, soak, waived = wanted_phases(policy), policy.done.soak, batch in j.soak_waived
    target = j.target
    names = s.plan.batches[batch].nodes
    recs = tuple(map(j.nodes.__getitem__, names))
    seen = tuple(map(observed.get, names))
    judged = tuple(map(s.verdicts.get, names))
    key = (j.rollout, batch, s.watched_since is None)
    walk = _WALKS.get(key)
    if walk is not None and walk.plan is j.plan and walk.waived == waived and walk.at <= now:
        again = {*changed_positions(walk.recs, recs), *changed_positions(walk.seen, seen),
                 *changed_positions(walk.judged, judged), *walk.waiting}
        place, off_spec, settled = list(walk.place), list(walk.off_spec), list(walk.settled)
    else:
        again = set(range(len(names)))
        place, off_spec, settled = [_UNASSIGNED] * len(names), [False] * len(names), [False] * len(names)
    waiting: list[str] = []
    waiting_at: list[int] = []
    soaking: set[str] = set()
    off_target = False
    recheck_at, last_deadline = now + policy.recheck_every, None
    for i in sorted(again):
        name, rec, obs = names[i], recs[i], seen[i]
        if not rec.assigned:
            place[i] = _TO_ASSIGN if not rec.skipped and obs is not None else _UNASSIGNED
            off_spec[i] = settled[i] = False
            continue
        off_spec[i] = obs is not None and not target.same_reference(obs.spec_source)
        phase = (judged[i] or UNSEEN).phase
        settled[i] = phase in wanted and phase not in NOT_OURS_PHASES
        if phase in NOT_OURS_PHASES:
            place[i] = _NOT_OURS  # deleted, or down before our write: not the config's to wait for
            continue
        if phase in wanted:
            if waived or now - settled_since(rec, obs, now) >= soak:
                place[i] = _DONE  # and done for good while its inputs stay the same
                continue
            soaking.add(name)
        else:
            off_target = True
        place[i] = _WAITING
        waiting.append(name)
        waiting_at.append(i)
        # inline, the common case: a waiting node's one moment is its progress deadline
        if rec.written_at is not None:
            deadline = rec.written_at + policy.progress_deadline
            if now < deadline < recheck_at:
                recheck_at = deadline
            if name not in soaking and (last_deadline is None or deadline > last_deadline):
                last_deadline = deadline
        if phase in SETTLED_PHASES or phase is NodePhase.SYNC_ERROR:
            recheck_at = min(recheck_at, _later_change(rec, phase, obs, now=now, policy=policy,
                                                        watched_since=s.watched_since))
    if len(_WALKS) >= _KEPT_MAX:
        _WALKS.clear()
    _WALKS[key] = _Walk(j.plan, waived, now, recs, seen, judged, place, off_spec, settled, waiting_at)
    assigned = tuple(compress(names, map(_NOT_OURS.__le__, place)))  # not ours, done or waiting
    return BatchProgress(assigned, tuple(compress(names, off_spec)), tuple(waiting), frozenset(soaking),
                         tuple(compress(names, settled)), off_target, _TO_ASSIGN in place, recheck_at, last_deadline)


def progress(s: Situation, batch: int) -> BatchProgress:
    """``batch_progress``, walked once per decision: folding the facts found it for the running
    batch, and nothing folding changes after that (a batch's soak start, status or gates) is
    read by it. At 20,000 nodes a walk of a landing 10,000-node batch is a fifth of a decision."""
    if s.running is not None and s.running[0] == batch:
        return s.running[1]
    return batch_progress(s, batch)


def _later_change(rec: NodeRecord, phase: NodePhase, obs: NodeObservation | None, *, now: datetime,
                  policy: RolloutPolicy, watched_since: datetime | None) -> datetime:
    """A waiting node's moments besides its deadline: its soak's end once it settled, its sync
    error's grace (``datetime.max``: none still ahead)."""
    times = []
    if phase in SETTLED_PHASES:
        times.append(settled_since(rec, obs, now) + policy.done.soak)
    if phase is NodePhase.SYNC_ERROR and rec.phase_since:
        graced, deadline = _sync_error_clocks(rec, rec.phase_since, policy=policy, watched_since=watched_since)
        times += [t for t in (graced, deadline) if t is not None]
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
