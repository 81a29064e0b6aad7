"""A verdict holds until ``phase_changes_at``, so the machine may keep it while nothing changed.

``rollout.machine.verdicts`` judges a node again only when its record or observation is a new
object or the clock reached the moment its verdict can turn at; these properties say that is the
same as judging every node every time, whatever the node shows and whenever the clock moves.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from test_machine_support import (LOAD_ERR, OLD, SYNC_ERR, T0, TARGET, VALIDATE_ERR, World, active, make_plan, node,
                                  nodes, policy)

from rollout.machine.actions import AssignBatch, RevertNodes
from rollout.journal import Journal
from rollout.machine import facts, look, node_verdict, step, verdicts
from rollout.machine.situation import Situation

verdict_memo = importlib.import_module("rollout.machine.verdicts")
batch_progress = verdict_memo.batch_progress
from rollout.model import NodeObservation, NodePhase
from rollout.machine.phases import Revert, node_phase, phase_changes_at
from tests.conftest import examples

P = policy(progressDeadline="5m", notReadyFor="20s", leaseStaleAfter="40s", syncErrorGrace="1m")


def moment(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


seconds = st.integers(min_value=-120, max_value=900).map(float) | st.floats(min_value=-120, max_value=900)
times = seconds.map(moment)
maybe_time = st.none() | times
config = st.sampled_from([None, OLD, TARGET])


@st.composite
def observations(draw: st.DrawFn) -> NodeObservation:
    return replace(
        node("n1"),
        spec_source=draw(st.sampled_from([None, OLD.unresolved(), TARGET.unresolved()])),
        assigned=draw(config),
        active=draw(config),
        last_known_good=draw(config),
        error=draw(st.sampled_from(["", LOAD_ERR, VALIDATE_ERR, SYNC_ERR, "something else"])),
        ready=draw(st.sampled_from(["True", "False", "Unknown", ""])),
        ready_transition=draw(maybe_time),
        lease_renewed=draw(maybe_time),
        lease_duration_s=draw(st.sampled_from([None, 40.0, 60.0])),
        annotations=draw(st.sampled_from([{}, {"kubelet-rollout.io/rollout": "r1"}])),
    )


reverts = st.none() | st.builds(Revert, to=config, requested_at=times, written_at=maybe_time)


@settings(max_examples=examples(1200), deadline=None)
@given(obs=st.none() | observations(), written_at=maybe_time, revert=reverts, watched_since=maybe_time,
       now=times, later=st.floats(min_value=0, max_value=1.0) | st.floats(min_value=0, max_value=2000))
def test_a_verdict_holds_until_the_moment_it_can_change(obs, written_at, revert, watched_since, now, later):
    """``later`` is a fraction of the way to that moment (or any time, when there is none)."""
    def judge(at: datetime):
        return node_phase(obs, target=TARGET, written_at=written_at, now=at, policy=P, revert=revert,
                          watched_since=watched_since)

    changes_at = phase_changes_at(obs, written_at=written_at, now=now, policy=P, revert=revert,
                                  watched_since=watched_since)
    assert changes_at is None or changes_at >= now
    if changes_at is None:
        at = now + timedelta(seconds=later)
    elif later < 1.0:  # strictly before it (a fraction of a timedelta rounds to the microsecond)
        at = max(now, min(now + (changes_at - now) * later, changes_at - timedelta(microseconds=1)))
    else:
        return
    assert judge(at) == judge(now), f"judged at {now}, it changed at {at}, before {changes_at}"


@st.composite
def timelines(draw: st.DrawFn) -> list[tuple[float, int, NodeObservation | None, str]]:
    """Steps of (seconds the clock moves, which node changes, to what, what the journal records)."""
    step = st.tuples(st.sampled_from([0.0, 0.5, 1.0, 5.0, 19.0, 20.0, 21.0, 40.0, 300.0]),
                     st.integers(min_value=0, max_value=3), st.none() | observations(),
                     st.sampled_from(["nothing", "written", "revert requested", "revert written"]))
    return draw(st.lists(step, min_size=1, max_size=25))


def _observe(observed: dict[str, NodeObservation], which: int, obs: NodeObservation | None) -> str:
    """Node ``n<which>`` now shows ``obs`` (None: gone); its name."""
    name = f"n{which}"
    if obs is None:
        observed.pop(name, None)
    else:
        observed[name] = replace(obs, name=name)
    return name


@settings(max_examples=examples(400), deadline=None)
@given(steps=timelines(), watched_since=maybe_time)
def test_kept_verdicts_are_the_verdicts_judged_afresh(steps, watched_since):
    pool = [node(f"n{i}") for i in range(4)]
    journal = Journal.start(make_plan(pool, policy(steps=[1, "100%"], maxUnavailable="100%")), now=T0)
    for batch in journal.plan.batches:
        journal = journal.with_assigned(batch.index, {n: OLD for n in batch.nodes}, at=T0)
    observed: dict[str, NodeObservation] = {n.name: n for n in pool}
    now = T0
    for moved, which, obs, records in steps:
        now += timedelta(seconds=moved)
        name = _observe(observed, which, obs)
        if records == "written":
            journal = journal.with_written({name: now})
        elif records == "revert requested":
            journal = journal.with_revert_requested({name: OLD}, at=now, reason="test")
        elif records == "revert written":
            journal = journal.with_revert_written({name: now})
        kept = verdicts(journal, observed, now=now, watched_since=watched_since)
        afresh = {n: node_verdict(journal, rec, observed.get(n), now=now, watched_since=watched_since)
                  for n, rec in journal.nodes.items()}
        assert kept == afresh


@settings(max_examples=examples(300), deadline=None)
@given(steps=timelines(), watched_since=maybe_time)
def test_the_reports_rows_judge_every_node_as_the_decisions_did(steps, watched_since):
    """``status.node_rows`` of the whole plan, given the decisions' live view, judges through their
    memo: the same verdicts as judging each node afresh (a node not assigned yet: pending); and
    ``names`` (one batch, judged one by one) agrees with it for a one-off read."""
    from rollout.usecases.status import NOT_ASSIGNED, node_rows

    pool = [node(f"n{i}") for i in range(4)]
    health = dict(progressDeadline="5m", notReadyFor="20s", leaseStaleAfter="40s", syncErrorGrace="1m")
    journal = Journal.start(make_plan(pool, policy(steps=[3, "100%"], maxUnavailable="100%", **health)), now=T0)
    first = journal.plan.batches[0]
    assert len(first.nodes) == 3  # and one node not assigned yet
    journal = journal.with_assigned(first.index, {n: OLD for n in first.nodes}, at=T0)
    journal = journal.with_written({n: T0 for n in first.nodes})
    observed: dict[str, NodeObservation] = {n.name: n for n in pool}
    now = T0
    for moved, which, obs, _ in steps:
        now += timedelta(seconds=moved)
        _observe(observed, which, obs)
        verdicts(journal, observed, now=now, watched_since=watched_since)  # a decision
    rows = node_rows(journal, observed, now, watched_since=watched_since)
    afresh = [node_verdict(journal, journal.nodes[n], observed.get(n), now=now, watched_since=watched_since)
              or NOT_ASSIGNED for n in journal.plan.nodes]
    assert [verdict for _, verdict in rows] == afresh
    assert [row.node for row, _ in rows] == list(journal.plan.nodes)
    one_off = node_rows(journal, observed, now)
    assert node_rows(journal, observed, now, list(journal.plan.nodes)) == one_off


def test_a_one_off_read_in_the_same_process_leaves_the_decisions_memo_alone() -> None:
    """The progress display judges with no view each second, beside the decisions' live view: the
    next decision still reuses its verdicts (the same objects) instead of judging every node again."""
    pool = [node(f"n{i}") for i in range(50)]
    journal = Journal.start(make_plan(pool, policy(steps=[1, "100%"], maxUnavailable="100%")), now=T0)
    for batch in journal.plan.batches:
        journal = journal.with_assigned(batch.index, {n: OLD for n in batch.nodes}, at=T0)
    journal = journal.with_written({n.name: T0 for n in pool})
    observed = {n.name: n for n in pool}
    watched = T0 - timedelta(minutes=5)
    decided = verdicts(journal, observed, now=moment(1), watched_since=watched)
    shown = verdicts(journal, observed, now=moment(1.5))
    again = verdicts(journal, observed, now=moment(2), watched_since=watched)
    assert again == decided and all(again[n] is decided[n] for n in decided)
    assert all(verdicts(journal, observed, now=moment(2))[n] is shown[n] for n in shown)


@contextmanager
def memos_aside() -> Iterator[None]:
    """Decide as a fresh process would: no verdict or acknowledgment memo (the ones kept are
    put back after)."""
    memos = (verdict_memo._KEPT, verdict_memo._WALKS, facts._UNACKNOWLEDGED)
    kept = [dict(memo) for memo in memos]
    for memo in memos:
        memo.clear()
    try:
        yield
    finally:
        for memo, before in zip(memos, kept):
            memo.clear()
            memo.update(before)


behaviour = st.sampled_from(["good", "good", "validate", "crash", "sync", "silent"])


@settings(max_examples=examples(200), deadline=None)
@given(kubelets=st.lists(behaviour, min_size=8, max_size=8),
       steps=st.lists(st.tuples(st.sampled_from([0.0, 1.0, 5.0, 20.0, 61.0, 400.0]),  # the clock moves
                                st.booleans(),  # the writes are acknowledged
                                st.integers(min_value=-1, max_value=7),  # a node vanishes (or comes back)
                                st.booleans(),  # the kubelets act
                                st.booleans()),  # they renew their Leases (or a node's goes stale)
                      min_size=1, max_size=30),
       watched_since=maybe_time)
def test_each_decision_from_the_memos_is_the_decision_a_fresh_process_makes(kubelets, steps, watched_since):
    """The memos (verdicts, unacknowledged writes, phases to fold, failing nodes, each batch's walk) look only at
    what changed since the last decision; a decision from them is the one made from nothing: the
    same journal, the same action, the verdicts in plan order, the failing nodes, each batch's progress."""
    pool = [replace(n, lease_renewed=T0, lease_duration_s=40.0) for n in nodes(8)]
    pol = policy(steps=[1, 3, "100%"], maxUnavailable="100%", failureAction="revert-batch",
                 progressDeadline="5m", notReadyFor="20s", leaseStaleAfter="40s", syncErrorGrace="1m",
                 done={"until": "active", "soak": "30s"})
    journal = Journal.start(make_plan(pool, pol), now=T0)
    other = replace(node("other"), spec_source=TARGET.unresolved())  # watched, in no plan: it changes too
    world = World.of([*pool, other], **{n.name: how for n, how in zip(pool, kubelets)})
    gone: dict[str, NodeObservation] = {}
    now = T0
    for moved, acknowledged, vanish, act, renew in steps:
        observed = world.observations()
        decided, action = step(journal, observed, now=now, watched_since=watched_since)
        order = list(verdicts(journal, observed, now=now, watched_since=watched_since))
        seen = look(journal, observed, now=now, watched_since=watched_since)
        walks = [batch_progress(seen, batch.index) for batch in journal.plan.batches]
        failing = seen.failing
        with memos_aside():
            assert step(journal, observed, now=now, watched_since=watched_since) == (decided, action)
            assert order == list(verdicts(journal, observed, now=now, watched_since=watched_since))
            seen = look(journal, observed, now=now, watched_since=watched_since)
            assert walks == [batch_progress(seen, batch.index) for batch in journal.plan.batches]
            assert failing == seen.failing
        assert order == [n for n in journal.nodes if n in order]
        journal = decided
        world.obs.update(gone)  # a write to a node away lands for when it is back (the same for both)
        world.apply(action)
        gone = {name: world.obs.pop(name) for name in gone}
        if acknowledged and isinstance(action, (AssignBatch, RevertNodes)):
            sent = {n: now for n in action.nodes}
            journal = (journal.with_written(sent) if isinstance(action, AssignBatch)
                       else journal.with_revert_written(sent))
        if vanish >= 0:
            name = pool[vanish].name
            if name in world.obs:
                gone[name] = world.obs.pop(name)
            elif name in gone:
                world.obs[name] = gone.pop(name)  # back, at the end of the informer's order
        now += timedelta(seconds=moved)
        if act:
            world.tick(now)
        if renew:
            world.obs.update({n: replace(o, lease_renewed=now) for n, o in world.obs.items()})


def test_a_done_node_whose_verdict_turns_with_the_clock_alone_is_sorted_again() -> None:
    """Nothing of the node changes but the time: its Lease goes stale after it was done, and the
    journal is not folded again (a situation made from the verdicts alone). The batch's walk sorts
    it again (its verdict is a new one), as a walk from nothing does."""
    pool = [replace(n, lease_renewed=T0, lease_duration_s=40.0) for n in nodes(3)]
    pol = policy(steps=[1, "100%"], maxUnavailable="100%", leaseStaleAfter="40s",
                 done={"until": "active", "soak": "0s"})
    journal = Journal.start(make_plan(pool, pol), now=T0)
    last = journal.plan.batches[1]
    journal = journal.with_assigned(1, {n: OLD for n in last.nodes}, at=T0).with_written({n: T0 for n in last.nodes})
    observed = {n.name: active(n) for n in pool}
    journal = look(journal, observed, now=moment(10), watched_since=T0).journal  # phases folded once

    def at(seconds: float) -> Situation:
        found = verdicts(journal, observed, now=moment(seconds), watched_since=T0)
        return Situation(journal, found, observed, moment(seconds), T0)

    assert batch_progress(at(10), 1).waiting == ()  # both done
    stale = at(60)
    walked = batch_progress(stale, 1)
    with memos_aside():
        assert walked == batch_progress(at(60), 1)
    assert walked.waiting == last.nodes and all(stale.phase_of(n) is NodePhase.CRASH_LOOPING for n in last.nodes)
