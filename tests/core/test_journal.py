"""The journal: round trip through its ConfigMaps, every one far below 1 MiB at 20,000 nodes, a
journal of the previous format read, resume after a crash at any point, and the node annotations
written with every assignment."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import FrozenInstanceError, replace
from datetime import datetime, timedelta
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_machine_support import OLD, T0, TARGET, World, make_plan, nodes, policy

from rollout.machine.actions import Action, AssignBatch, AwaitApproval, Complete, Halt, Wait, WaitForWindow
from journal_v1 import to_v1_data

from rollout.errors import ConfigError
from rollout.journal import (
    HEAD_LIMIT,
    MAX_DECISIONS,
    PART_LIMIT,
    ApprovalOutcome,
    BatchStatus,
    Journal,
    NodeRecord,
    RolloutStatus,
    annotations_by_rollout,
    assignment_annotations,
    JournalDocument,
    from_document,
    parse_assignment_annotations,
    to_document,
)
from rollout.journal.fields import data_bytes
from rollout.machine import step
from rollout.model import ConfigRef, NodePhase
from rollout.names import ANN_ASSIGNED_AT, ANN_BATCH, ANN_PREVIOUS_SOURCE, ANN_ROLLOUT, journal_configmap_name
from tests.conftest import examples

S = timedelta(seconds=1)


def busy_journal(n: int = 30) -> Journal:
    """A journal with every kind of record: assignments, phases, approvals, reverts, decisions."""
    plan = make_plan(nodes(n, zones=3), policy(approval={"after": "all"}), rollout="big")
    j = Journal.start(plan, now=T0)
    local = plan.batches[0].nodes[0]
    j = j.with_assigned(
        0, {n: (None if n == local else OLD.unresolved()) for n in plan.batches[0].nodes}, at=T0
    )
    j = j.with_phases({n: NodePhase.ACTIVE for n in plan.batches[0].nodes}, now=T0 + 20 * S)
    j = j.with_batch_status(0, BatchStatus.DONE, at=T0 + 30 * S)
    j = j.with_approval_requested(0, at=T0 + 30 * S, deadline=T0 + timedelta(hours=1))
    j = j.with_approval(0, ApprovalOutcome.APPROVED, at=T0 + 60 * S, by="alice", note="ok")
    j = j.with_written({n: T0 + 2 * S for n in plan.batches[0].nodes})
    j = j.with_assigned(1, {n: OLD for n in plan.batches[1].nodes}, at=T0 + 61 * S)
    j = j.with_written({plan.batches[1].nodes[0]: T0 + timedelta(seconds=61, milliseconds=250)})
    j = j.with_revert_requested({plan.batches[1].nodes[0]: OLD.unresolved()}, at=T0 + 90 * S, reason="bad")
    j = j.with_revert_written({plan.batches[1].nodes[0]: T0 + 91 * S})
    j = j.with_decision("AssignBatch", "starting", at=T0, batch=0)
    j = j.with_decision("Wait", "waiting", at=T0 + S, batch=0)
    return j.with_status(RolloutStatus.HALTED, at=T0 + 100 * S, reason="stop", failed={"x": "why"})


def round_trip(j: Journal) -> Journal:
    document = to_document(j)
    for data in (document.head, *document.parts.values()):
        assert all(isinstance(v, str) for v in data.values()), "ConfigMap data values are strings"
    return from_document(json_copy(document))


def json_copy(document: JournalDocument) -> JournalDocument:
    """The document as it comes back from the API server: JSON, nothing shared."""
    head, parts = json.loads(json.dumps([document.head, document.parts]))
    return JournalDocument(head=head, parts=parts)


def test_round_trip_keeps_everything() -> None:
    j = busy_journal()
    assert round_trip(j) == j


def test_round_trip_of_a_fresh_journal() -> None:
    plan = make_plan(nodes(5), policy())
    j = Journal.start(plan, now=T0)
    assert round_trip(j) == j


def test_a_journal_written_by_the_previous_release_is_read() -> None:
    """A v1 journal (one ConfigMap) is read as it was; its next save writes the current format."""
    j = busy_journal()
    old = from_document(JournalDocument(head=json.loads(json.dumps(to_v1_data(j)))))
    assert old == j
    assert round_trip(old) == j


def test_a_v1_journal_of_the_release_before_acknowledgments_is_read() -> None:
    """Its node records had seven fields and no acknowledgments: read as writes not yet landed."""
    j = busy_journal()
    data = to_v1_data(j)
    nodes_body = json.loads(data["nodes"])
    nodes_body["records"] = [(r + ["", None, None])[:7] for r in nodes_body["records"]]
    old = from_document(JournalDocument(head={**data, "nodes": json.dumps(nodes_body)}))
    assert old.nodes.keys() == j.nodes.keys()
    assert all(r.written_at is None and r.revert_written_at is None for r in old.nodes.values())
    assert {n: r.assigned_at for n, r in old.nodes.items()} == {n: r.assigned_at for n, r in j.nodes.items()}


def test_acknowledgments_are_kept_to_the_millisecond_and_only_the_first_counts() -> None:
    j = busy_journal()
    first = j.plan.batches[1].nodes[0]
    assert j.nodes[first].written_at == T0 + timedelta(seconds=61, milliseconds=250)
    again = j.with_written({first: T0 + timedelta(hours=1)})
    assert again.nodes[first].written_at == j.nodes[first].written_at
    unassigned = j.plan.batches[2].nodes[0]
    assert j.with_written({unassigned: T0}).nodes[unassigned].written_at is None


def test_configmap_name_follows_the_architecture_contract() -> None:
    assert (
        journal_configmap_name("r1")
        == "kubelet-rollout-journal-r1"
        == busy_journal().configmap_name.replace("big", "r1")
    )


def test_an_unknown_body_is_refused() -> None:
    with pytest.raises(ValueError, match="not a rollout journal"):
        from_document(JournalDocument(head={"format": "something-else"}))


def test_a_journal_of_a_newer_release_is_refused_naming_what_to_do() -> None:
    with pytest.raises(ValueError, match="written by a newer release of kubelet-rollout; run that release"):
        from_document(JournalDocument(head={"format": "kubelet-rollout-journal/v3"}))


def test_a_missing_part_is_refused_never_half_read() -> None:
    document = to_document(big_journal(6000))
    assert len(document.parts) > 1
    missing = dict(document.parts)
    missing.pop(sorted(missing, key=lambda k: int(k[1:]))[1])
    with pytest.raises(ValueError, match="is missing"):
        from_document(JournalDocument(head=document.head, parts=missing))


NAME_63 = "ip-10-0-0-0.eu-west-1.compute.internal-"  # + digits, padded: 63 characters


def big_journal(n: int) -> Journal:
    """A planned journal of ``n`` nodes with 63-character names, as a cloud names them."""
    pool = [replace(o, name=o.name.ljust(63, "x")) for o in nodes(n, zones=3, prefix=NAME_63)]
    assert {len(o.name) for o in pool} == {63}
    return Journal.start(make_plan(pool, policy(steps=[1, "1%", "10%", "50%", "100%"], maxUnavailable="100%"),
                                   rollout="big"), now=T0)


def stored(j: Journal) -> tuple[Journal, JournalDocument]:
    """Save as the engine does: the journal keeps the layout its parts were written in."""
    document = to_document(j)
    assert document.largest() < 1024 * 1024
    assert data_bytes(document.head) <= HEAD_LIMIT and all(data_bytes(p) <= PART_LIMIT for p in document.parts.values())
    return replace(j, layout=document.layout), document


def test_20000_nodes_with_63_character_names_never_need_an_object_over_one_mebibyte() -> None:
    """Through assignment of every batch, a revert-all of every batch and 10,000 decisions, the
    largest ConfigMap (bytes, as the API server counts them) stays under 1 MiB, and nothing is lost."""
    j = big_journal(20_000)
    largest = {}
    j, document = stored(j)
    largest["planned"] = document.largest()
    for b in j.plan.batches:
        j = j.with_assigned(b.index, {n: OLD.unresolved() for n in b.nodes}, at=T0 + b.index * S)
        j, document = stored(j)
        j = j.with_written({n: T0 + b.index * S + timedelta(seconds=i / 50) for i, n in enumerate(b.nodes)})
        j = j.with_phases({n: NodePhase.PROMOTED for n in b.nodes}, now=T0 + (b.index + 1) * S)
        j = j.with_batch_status(b.index, BatchStatus.DONE, at=T0 + (b.index + 1) * S)
        j, document = stored(j)
    largest["assigned"] = document.largest()
    later = T0 + timedelta(hours=1)
    failed = {n: "crash-looping: Ready=Unknown for 40s, lease not renewed for 40s; " + "x" * 400 for n in j.plan.nodes}
    j = j.with_revert_requested({n: OLD.unresolved() for n in j.plan.nodes}, at=later, reason="r" * 500)
    j = j.with_status(RolloutStatus.REVERTING, at=later, failed=failed)
    j, document = stored(j)
    j = j.with_revert_written({n: later + timedelta(seconds=i / 50) for i, n in enumerate(j.plan.nodes)})
    j = j.with_phases({n: NodePhase.REVERTED for n in j.plan.nodes}, now=later + timedelta(minutes=10))
    j, document = stored(j)
    largest["reverted"] = document.largest()
    for i in range(10_000):
        j = j.with_decision("RevertNodes", f"decision {i}: " + "because " * 60, at=later + i * S)
    j = j.with_status(RolloutStatus.HALTED, at=later + timedelta(hours=3), reason="halted: " + "y" * 500)
    j, document = stored(j)
    largest["decided"] = document.largest()
    assert max(largest.values()) < 1024 * 1024, largest
    back = from_document(json_copy(document))
    assert back == j and len(back.decisions) == MAX_DECISIONS and back.decisions_dropped > 9_000


def test_the_engines_saves_re_encode_no_part_for_its_nodes_phases_alone_and_the_finished_journal_has_them() -> None:
    """``phases=False`` (a running rollout's saves): a node's phase is an observation, recomputed from
    the nodes on resume, so a part whose nodes changed only in phase keeps the data it was stored
    with; a write (an intent) re-encodes its own part, with every phase in it current; and
    ``phases=True`` (the finished journal) carries every phase."""
    j = big_journal(6000)
    last = j.plan.batches[-1]
    j = j.with_assigned(last.index, {n: OLD.unresolved() for n in last.nodes}, at=T0)
    j = j.with_written({n: T0 + S for n in last.nodes})
    j, assigned = stored(j)
    assert len(assigned.parts) >= 3

    settled = j.with_phases({n: NodePhase.PROMOTED for n in last.nodes}, now=T0 + 60 * S)
    lagging = to_document(settled, phases=False)
    assert lagging.parts == assigned.parts  # nothing to write but the head
    assert from_document(json_copy(lagging)).nodes[last.nodes[0]].phase is NodePhase.ASSIGNED

    node = last.nodes[-1]
    reverting = settled.with_revert_requested({node: OLD.unresolved()}, at=T0 + 61 * S, reason="bad")
    written = to_document(reverting, phases=False)
    (changed,) = [key for key in written.parts if written.parts[key] != assigned.parts[key]]
    back = from_document(json_copy(written))
    assert back.nodes[node] == reverting.nodes[node]  # its part re-encoded: its intent and every phase in it
    current = [n for n in last.nodes if back.nodes[n].phase is NodePhase.PROMOTED]
    assert 0 < len(current) < len(last.nodes) - 1  # ...and no other part's
    assert from_document(json_copy(to_document(reverting))) == replace(reverting, layout=written.layout)


def test_a_save_rewrites_only_the_parts_its_change_touched() -> None:
    """Assigning the canary changes one part of a 20,000-node journal; the others are the same."""
    j, before = stored(big_journal(20_000))
    canary = j.plan.batches[0]
    j, after = stored(j.with_assigned(0, {n: OLD.unresolved() for n in canary.nodes}, at=T0 + S))
    assert after.layout == before.layout and len(after.parts) > 4
    changed = [key for key in after.parts if after.parts[key] != before.parts[key]]
    assert changed == ["p0"]


def test_a_large_batchs_end_rewrites_a_part_of_one_node_not_its_neighbours_records() -> None:
    """The save that records a batch's end is what a person and the next batch wait for: at 20,000
    nodes it writes a part of a few hundred bytes (the batch's state and its first node), not one
    that holds thousands of other nodes' records; a one-node canary shares its part as before."""
    j, planned = stored(big_journal(20_000))
    sizes = [b.size for b in j.plan.batches]
    assert sizes[0] == 1 and max(sizes) >= 10_000
    for b in j.plan.batches:
        j = j.with_assigned(b.index, {n: OLD.unresolved() for n in b.nodes}, at=T0 + S)
    j, before = stored(j)
    assert before.layout == planned.layout
    for b in j.plan.batches:
        ended, after = stored(j.with_batch_status(b.index, BatchStatus.DONE, at=T0 + 2 * S))
        changed = [key for key in after.parts if after.parts[key] != before.parts[key]]
        assert len(changed) == 1, (b.index, changed)
        if b.size >= 1_000:
            assert data_bytes(after.parts[changed[0]]) < 2_048, (b.index, data_bytes(after.parts[changed[0]]))
        assert from_document(json_copy(after)) == ended
    assert len(planned.parts) <= 20_000 // 2_000 + 2 * len(sizes)  # a solo part adds at most two


@given(st.text(max_size=80) | st.text(st.characters(max_codepoint=127), max_size=80))
def test_a_names_cost_in_a_part_is_what_it_encodes_to(text: str) -> None:
    """The packer's shortcut for plain names counts exactly the bytes the encoder writes."""
    from rollout.journal.fields import dumps
    from rollout.journal.parts import _json_bytes

    assert _json_bytes(text) == len(dumps(text).encode())


def test_a_record_is_blank_to_the_packer_only_while_every_field_but_its_batch_is_unset() -> None:
    """The packer's shortcut for blank records (encoded as ``[]`` without encoding them) names each
    field of ``NodeRecord``: one set, whichever (a field added later too), makes it not blank."""
    from dataclasses import fields

    from rollout.journal.parts import _blank

    samples = {"datetime | None": T0, "ConfigRef | None": OLD, "NodePhase": NodePhase.ACTIVE, "str": "down"}
    assert _blank(NodeRecord(batch=3))
    for f in fields(NodeRecord):
        if f.name != "batch":
            assert not _blank(replace(NodeRecord(batch=3), **{f.name: samples[str(f.type)]})), f.name


def test_the_packer_counts_at_least_what_each_position_adds_to_its_part() -> None:
    """The bound the packing keeps (a part never larger than counted) holds for every position:
    a new journal's blank records and its batches' first positions, and the same once assigned."""
    from rollout.journal.parts import _cost, _encode_afresh, _Positions

    fresh = big_journal(2_000)
    assigned = fresh
    for b in fresh.plan.batches:
        assigned = assigned.with_assigned(b.index, {n: OLD.unresolved() for n in b.nodes}, at=T0 + S)
    for j in (fresh, assigned.with_written({n: T0 + 2 * S for n in fresh.plan.nodes})):
        where = _Positions.of(j)
        for pos in [*where.batch_at, *range(0, where.total - 1, 97)]:
            alone = data_bytes(_encode_afresh(j, where, pos + 1, pos + 2))
            added = data_bytes(_encode_afresh(j, where, pos, pos + 2)) - alone
            assert added <= _cost(j, where, pos), (pos, added, _cost(j, where, pos))


def test_a_part_that_outgrows_its_limit_is_split_before_it_is_written() -> None:
    """Nodes skipped with long, different reasons and each on its own previous ConfigMap: the parts
    packed for ordinary records grow past the limit and are split; nothing is lost."""
    j, document = stored(big_journal(6_000))
    j = j.with_skipped({n: f"down when batch 5 started: {n} " + "\u0001" * 380 for n in j.plan.nodes[:3000]},
                       at=T0 + S)
    own = {n: ConfigRef("kube-system", f"kubelet-config-{n}".ljust(240, "y"), "kubelet") for n in j.plan.nodes[3000:]}
    for b in j.plan.batches:
        j = j.with_assigned(b.index, {n: own[n] for n in b.nodes if n in own}, at=T0 + 2 * S)
    j, split = stored(j)
    assert set(document.layout) < set(split.layout), "more parts, the old ones kept where they begin"
    assert from_document(json_copy(split)) == j


def test_a_head_of_escaped_text_is_cut_to_its_limit_keeping_the_latest_decisions() -> None:
    """Reasons of control characters cost six bytes each once escaped: the oldest decisions (then
    failed nodes beyond the first) are left out of the head before it could outgrow its limit."""
    j = busy_journal()
    for i in range(MAX_DECISIONS):
        j = j.with_decision("Halt", f"{i}" + "\u0001" * 399, at=T0 + i * S)
    j = j.with_status(RolloutStatus.HALTED, at=T0, failed={f"n{i}": "\u0002" * 400 for i in range(200)})
    _, document = stored(j)
    back = from_document(json_copy(document))
    assert back.decisions == j.decisions[-len(back.decisions):] and len(back.decisions) < MAX_DECISIONS
    assert back.decisions_dropped == j.decisions_dropped + MAX_DECISIONS - len(back.decisions)


def test_a_policy_too_large_to_journal_is_refused_before_anything_is_written() -> None:
    j = busy_journal()
    huge = policy(nodes={"excludeNames": [f"node-{i:06d}".ljust(200, "x") for i in range(3000)]})
    with pytest.raises(ConfigError, match="too much to keep in the journal"):
        to_document(replace(j, plan=replace(j.plan, policy=huge)))


def test_the_decision_log_is_capped_and_counts_what_it_dropped() -> None:
    j = busy_journal()
    before = len(j.decisions)
    for i in range(MAX_DECISIONS + 10):
        j = j.with_decision("RevertNodes", f"r{i}", at=T0)
    assert len(j.decisions) == MAX_DECISIONS
    assert j.decisions_dropped == before + 10  # busy_journal's own + 310 reverts - 300 kept


def test_waits_are_progress_not_decisions_and_are_not_logged() -> None:
    """The journal is written only when the rollout's state changes, never for a wait."""
    j = busy_journal()
    assert j.with_decision("Wait", "waiting for n1", at=T0) is j
    assert j.with_decision("WaitForWindow", "outside the windows", at=T0) is j


def test_a_repeated_decision_is_logged_once() -> None:
    j = busy_journal().with_decision("Halt", "same", at=T0).with_decision("Halt", "same", at=T0 + S)
    assert [d.reason for d in j.decisions].count("same") == 1


def test_material_state_ignores_node_phases_but_not_assignments() -> None:
    j = busy_journal()
    node = j.plan.batches[2].nodes[0]
    assert j.with_phases({node: NodePhase.ACTIVE}, now=T0 + S).material() == j.material()
    assert j.with_assigned(2, {node: None}, at=T0 + S).material() != j.material()
    assert j.with_skipped({node: "down"}, at=T0 + S).material() != j.material()
    written = j.with_assigned(2, {node: None}, at=T0 + S)
    assert written.with_written({node: T0 + 2 * S}).material() != written.material()
    assert written.with_revert_requested({node: None}, at=T0 + 2 * S, reason="bad").material() != written.material()


def test_material_state_tells_apart_nodes_of_other_names() -> None:
    # compared record by record without copies: a node renamed is a change even if no record has
    # any intent yet (the same count of nodes, each as empty as the other)
    j = busy_journal()
    node = j.plan.batches[2].nodes[0]
    renamed = replace(j, nodes=MappingProxyType({("x" + n if n == node else n): r for n, r in j.nodes.items()}))
    assert renamed.material() != j.material()
    assert j.material() == replace(j, nodes=MappingProxyType(dict(j.nodes))).material()


def test_skipped_stopped_and_rollback_survive_the_configmap() -> None:
    j = Journal.start(busy_journal().plan, now=T0)
    node = j.plan.batches[2].nodes[0]
    j = j.with_skipped({node: "Ready=Unknown"}, at=T0).with_stopped(at=T0 + S)
    back = round_trip(j)
    assert back.nodes[node].skipped == "Ready=Unknown" and back.stopped_at == T0 + S
    assert back.shown_status == "stopped"
    rolled = round_trip(j.with_rollback("local", at=T0, reason="r"))
    assert rolled.status is RolloutStatus.ROLLING_BACK and rolled.rollback_to == "local"
    assert rolled.stopped_at is None


def test_a_second_assignment_never_overwrites_the_previous_source() -> None:
    j = busy_journal()
    node = j.plan.batches[1].nodes[1]
    again = j.with_assigned(1, {node: TARGET.unresolved()}, at=T0 + timedelta(hours=2))
    assert again.nodes[node] == j.nodes[node]


def test_the_first_approval_answer_wins() -> None:
    j = busy_journal().with_approval(0, ApprovalOutcome.REJECTED, at=T0 + timedelta(hours=2), by="bob")
    gate = j.batches[0].approval
    assert gate is not None and gate.outcome is ApprovalOutcome.APPROVED and gate.by == "alice"


def test_journal_is_frozen() -> None:
    j = busy_journal()
    with pytest.raises(FrozenInstanceError):
        j.status = RolloutStatus.RUNNING  # type: ignore[misc]
    with pytest.raises(TypeError):
        j.nodes["x"] = j.nodes[j.plan.nodes[0]]  # type: ignore[index]


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(0, 40),
    ms=st.integers(0, 10**9),
    phases=st.lists(st.sampled_from(list(NodePhase)), min_size=40, max_size=40),
    reason=st.text(max_size=50),
)
def test_property_round_trip(n: int, ms: int, phases: list[NodePhase], reason: str) -> None:
    now = T0 + timedelta(milliseconds=ms)
    plan = make_plan(nodes(n, zones=2), policy())
    j = Journal.start(plan, now=now)
    for b in plan.batches:
        j = j.with_assigned(b.index, {x: OLD.unresolved() for x in b.nodes}, at=now)
    j = j.with_phases(dict(zip(plan.nodes, phases, strict=False)), now=now + S)
    j = j.with_decision("Halt", reason, at=now).with_status(RolloutStatus.HALTED, at=now, reason=reason)
    assert round_trip(j) == j


# --------------------------------------------------------------------------- resume


def drive(
    journal: Journal,
    world: World,
    *,
    now: datetime,
    crash_before_acting: set[int],
    crash_after_acting: set[int],
) -> tuple[Journal, Action]:
    """Like the flow: step, persist (to ConfigMap data), act. A crash reloads from the persisted data."""
    saved = to_document(journal)
    for i in range(400):
        journal, action = step(from_document(saved), world.observations(), now=now)
        saved = to_document(journal)  # write-ahead: persisted before acting
        if isinstance(action, (Complete, Halt)):
            return journal, action
        if i in crash_before_acting:
            now += 40 * S  # the process died before its PATCH; a new one starts a bit later
            continue
        world.apply(action)
        if isinstance(action, AwaitApproval):
            journal = journal.with_approval(action.batch, ApprovalOutcome.APPROVED, at=now)
            saved = to_document(journal)
        if i in crash_after_acting:
            now += 40 * S
            continue
        now = max(action.until, now + S) if isinstance(action, (Wait, WaitForWindow)) else now + 5 * S
        world.tick(now)
    raise AssertionError("no end")


@settings(max_examples=examples(40), deadline=None)
@given(
    before=st.sets(st.integers(0, 30), max_size=6),
    after=st.sets(st.integers(0, 30), max_size=6),
    n=st.integers(1, 25),
)
def test_property_resume_after_crashes_never_assigns_twice_and_forgets_no_node(
    before: set[int], after: set[int], n: int
) -> None:
    pool = nodes(n, zones=3)
    plan = make_plan(pool, policy(approval={"after": [0]}))
    world = World.of(pool)
    journal, final = drive(
        Journal.start(plan, now=T0), world, now=T0, crash_before_acting=before, crash_after_acting=after
    )
    assert isinstance(final, Complete), final
    patches = Counter(node for kind, node in world.patches if kind == "assign")
    assert set(patches) == set(plan.nodes), "every planned node was assigned"
    assert set(patches.values()) == {1}, f"a node was assigned twice: {patches}"
    assert all(r.phase in (NodePhase.ACTIVE, NodePhase.PROMOTED) for r in journal.nodes.values())


def test_resume_continues_in_the_middle_of_a_batch() -> None:
    pool = nodes(12, zones=3)
    plan = make_plan(pool, policy())
    world = World.of(pool)
    j, first = step(Journal.start(plan, now=T0), world.observations(), now=T0)
    assert isinstance(first, AssignBatch)
    world.apply(first)
    world.tick(T0 + 5 * S)
    resumed = round_trip(j)
    j2, second = step(resumed, world.observations(), now=T0 + 10 * S)
    assert isinstance(second, AssignBatch) and second.batch == 1, "the canary is done; batch 1 starts"
    assert not set(second.nodes) & set(first.nodes)


# --------------------------------------------------------------------------- annotations


@pytest.mark.parametrize(
    "previous",
    [
        pytest.param(OLD.unresolved(), id="a previous ConfigMap source round-trips"),
        pytest.param(OLD, id="a resolved previous source keeps uid and resourceVersion"),
        pytest.param(None, id="a previous local config is written as local"),
    ],
)
def test_assignment_annotations_round_trip(previous: ConfigRef | None) -> None:
    anns = assignment_annotations("r1", batch=3, previous=previous, now=T0)
    assert set(anns) == {ANN_ROLLOUT, ANN_BATCH, ANN_PREVIOUS_SOURCE, ANN_ASSIGNED_AT}
    parsed = parse_assignment_annotations(anns)
    assert parsed is not None
    assert (parsed.rollout, parsed.batch, parsed.previous, parsed.assigned_at) == ("r1", 3, previous, T0)
    if previous is None:
        assert anns[ANN_PREVIOUS_SOURCE] == "local"
    assert anns[ANN_ASSIGNED_AT].endswith("Z")


@pytest.mark.parametrize(
    "anns",
    [
        pytest.param({}, id="no annotations means no record"),
        pytest.param({ANN_ROLLOUT: "r1"}, id="an incomplete record is ignored"),
        pytest.param(
            {**assignment_annotations("r1", batch=0, previous=None, now=T0), ANN_BATCH: "x"},
            id="a malformed batch is ignored",
        ),
        pytest.param(
            {**assignment_annotations("r1", batch=0, previous=None, now=T0), ANN_PREVIOUS_SOURCE: "[1]"},
            id="a malformed previous source is ignored",
        ),
    ],
)
def test_unparseable_annotations_give_none(anns: dict[str, str]) -> None:
    assert parse_assignment_annotations(anns) is None


def test_annotations_by_rollout_keeps_only_this_rollout() -> None:
    mine = assignment_annotations("r1", batch=0, previous=OLD.unresolved(), now=T0)
    other = assignment_annotations("r2", batch=0, previous=None, now=T0)
    found = annotations_by_rollout("r1", [("a", mine), ("b", other), ("c", {})])
    assert list(found) == ["a"] and found["a"].previous == OLD.unresolved()


def test_a_lost_journal_is_rebuilt_with_previous_sources_from_annotations() -> None:
    """Journal ConfigMap deleted mid-rollout: a new journal still reverts to the true previous."""
    pool = nodes(4)
    plan = make_plan(pool, policy())
    world = World.of(pool)
    j, first = step(Journal.start(plan, now=T0), world.observations(), now=T0)
    assert isinstance(first, AssignBatch)
    world.apply(first)  # spec now TARGET, annotations say previous = OLD
    fresh = Journal.start(plan, now=T0 + S)
    rebuilt, again = step(fresh, world.observations(), now=T0 + S)
    assert isinstance(again, AssignBatch)
    assert again.nodes == (), "the canary already carries this rollout's assignment: not written again"
    assert again.previous[first.nodes[0]] == OLD.unresolved(), "not the target the spec now shows"
    assert rebuilt.nodes[first.nodes[0]].previous == OLD.unresolved()
