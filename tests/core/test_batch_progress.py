"""One pass over a running batch (``batch_progress``) says what the rules said node by node.

The soak's start, the done check, the landing check and the wait once each walked the batch on
their own; these properties hold the one pass to those rules, written here one node at a time,
for any records, verdicts, observations, soak, promotion and clock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st
from test_machine_support import OLD, T0, TARGET, make_plan, node, policy

from rollout.journal import BatchStatus, Journal, NodeRecord
from rollout.machine.facts import fold
from rollout.machine.situation import Situation
from rollout.machine.verdicts import batch_progress, progress, settled_since, wanted_phases
from rollout.model import NodePhase
from rollout.machine.phases import NOT_OURS_PHASES, SETTLED_PHASES, PhaseVerdict
from tests.conftest import examples

NAMES = [f"n{i}" for i in range(6)]
BATCH = 1  # the batch after the canary: every node but one


def moment(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


times = st.integers(min_value=0, max_value=1200).map(moment)
maybe_time = st.none() | times
phases = st.sampled_from(list(NodePhase))


@st.composite
def records(draw: st.DrawFn, batch: int) -> NodeRecord:
    assigned_at = draw(maybe_time)
    return NodeRecord(
        batch=batch,
        assigned_at=assigned_at,
        written_at=draw(maybe_time) if assigned_at is not None else None,
        phase=draw(phases),
        phase_since=draw(maybe_time),
        skipped="" if assigned_at is not None else draw(st.sampled_from(["", "down when it started"])),
    )


@st.composite
def situations(draw: st.DrawFn) -> Situation:
    until = draw(st.sampled_from(["active", "lastKnownGood"]))
    pol = policy(steps=[1, "100%"], maxUnavailable="100%", progressDeadline="12m", syncErrorGrace="1m",
                 recheckEvery="30s", done={"until": until, "soak": draw(st.sampled_from(["0s", "2m", "10m"]))})
    plan = make_plan([node(n) for n in NAMES], pol)
    journal = Journal.start(plan, now=T0)
    journal = replace(journal, nodes=MappingProxyType({n: draw(records(r.batch)) for n, r in journal.nodes.items()}),
                      soak_waived=draw(st.sampled_from([(), (BATCH,), (0,)])))
    observed = {}
    for n in NAMES:
        if draw(st.booleans()) or not journal.nodes[n].assigned:
            observed[n] = replace(node(n), spec_source=draw(st.sampled_from([None, OLD, TARGET])),
                                  ready=draw(st.sampled_from(["True", "False"])),
                                  ready_transition=draw(maybe_time))
        if draw(st.integers(0, 9)) == 0:
            observed.pop(n, None)  # deleted
    found = {n: PhaseVerdict(draw(phases), "") for n in NAMES if journal.nodes[n].assigned or draw(st.booleans())}
    return Situation(journal, found, observed, draw(times))


def done(s: Situation, name: str) -> bool:
    """In a wanted phase for the whole soak (or its batch's soak was waived)."""
    verdict = s.verdicts.get(name)
    if verdict is None or verdict.phase not in wanted_phases(s.policy):
        return False
    rec = s.journal.nodes[name]
    if rec.batch in s.journal.soak_waived:
        return True
    return s.now - settled_since(rec, s.observations.get(name), s.now) >= s.policy.done.soak


def next_times(s: Situation, name: str) -> list[datetime]:
    policy, rec, verdict, now = s.policy, s.journal.nodes[name], s.verdicts.get(name), s.now
    times = [rec.written_at + policy.progress_deadline] if rec.written_at else []
    if verdict is not None and verdict.settled:
        times.append(settled_since(rec, s.observations.get(name), now) + policy.done.soak)
    if verdict is not None and verdict.phase is NodePhase.SYNC_ERROR and rec.phase_since:
        times.append(rec.phase_since + policy.sync_error_grace)
    return [t for t in times if t > now]


@settings(max_examples=examples(400), deadline=None)  # each example a whole situation: 400 in ~30 s
@given(s=situations())
def test_one_pass_says_what_each_node_says(s: Situation) -> None:
    j, wanted = s.journal, wanted_phases(s.policy)
    names = s.plan.batches[BATCH].nodes
    assigned = [n for n in names if j.nodes[n].assigned]
    ours = [n for n in assigned if s.phase_of(n) not in NOT_OURS_PHASES]
    waiting = [n for n in ours if not done(s, n)]
    got = batch_progress(s, BATCH)

    assert got.assigned == tuple(assigned)
    assert got.off_spec == tuple(n for n in assigned if n in s.observations
                                 and not j.target.same_reference(s.observations[n].spec_source))
    assert got.waiting == tuple(waiting)
    assert got.soaking == {n for n in waiting if s.phase_of(n) in wanted}
    assert got.settled == tuple(n for n in ours if s.phase_of(n) in wanted)
    assert got.off_target == any(s.phase_of(n) not in wanted for n in ours)
    assert got.to_assign == any(not j.nodes[n].skipped and n in s.observations for n in names if n not in assigned)
    assert got.recheck_at == min([s.now + s.policy.recheck_every, *(t for n in waiting for t in next_times(s, n))])
    deadlines = [j.nodes[n].written_at + s.policy.progress_deadline for n in waiting
                 if s.phase_of(n) not in wanted and j.nodes[n].written_at is not None]
    assert got.last_deadline == (max(deadlines) if deadlines else None)
    assert len(names) == len(NAMES) - 1 and SETTLED_PHASES >= wanted


@settings(max_examples=examples(500), deadline=None)
@given(s=situations())
def test_the_progress_a_decision_reuses_is_a_fresh_walk_of_the_folded_journal(s: Situation) -> None:
    """Folding walks the running batch once; the decision reads that walk (``progress``), which
    must be what walking the folded journal would say: nothing folded after it is read by it."""
    running = s.journal.with_batch_status(0, BatchStatus.DONE, at=T0).with_batch_status(
        BATCH, BatchStatus.IN_PROGRESS, at=T0)
    folded = fold(replace(s, journal=running))
    still_running = folded.journal.batches[BATCH].status is BatchStatus.IN_PROGRESS
    assert (folded.running is not None) == still_running
    if still_running:
        assert progress(folded, BATCH) == batch_progress(replace(folded, running=None), BATCH)
