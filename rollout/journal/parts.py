"""The journal's parts: everything that grows with the plan (nodes, batches, skipped nodes), in
ConfigMaps that each stay far below the API server's 1 MiB.

A part holds a run of consecutive *positions*: position ``p < N`` is the ``p``-th node of the plan
order (its name, zone and record, and, when it is the first node of a batch, that batch's plan and
state), position ``N + i`` the ``i``-th node the plan left out (its name and why). Part ``"p<first>"``
holds positions ``first`` up to the next part's first.

The bound is kept by construction: a part whose data would exceed :data:`PART_LIMIT` bytes is
split before it is written, into parts of at most :data:`PART_TARGET` bytes (counted from an upper
bound of each position's share, so the split parts are never larger). One position costs at most a
few KiB (a 253-character name, a record, a config source, a 400-character reason, a batch's state),
so a split always succeeds. A new journal is packed ahead of its growth: each position counted as
if already assigned and acknowledged, so a normal rollout never splits a part at all.

A large batch's first position is a part of its own (:func:`_solo_positions`): its state changes
as the batch starts, soaks and ends, and the save that records a batch's end (what a person and
the next batch wait for) then writes a few hundred bytes instead of re-encoding and sending
thousands of other nodes' records beside it. Any layout of consecutive runs reads back the same,
so journals packed either way are read by either release.

Inside a part, values that repeat (config sources, zones, reasons) are stored once; times are
milliseconds after the journal's creation; a record's fields that a node does not have yet are
left off its end. No I/O: a memo keeps each part's last encoding (see :func:`_encode`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rollout.journal.fields import (
    Interner,
    at_after,
    data_bytes,
    dumps,
    ms,
    ms_after,
    ms_opt,
    source_from_json,
)
from rollout.journal.records import NodeRecord, node_intents
from rollout.journal.state import (
    AnalysisRecord,
    AnalysisVerdict,
    ApprovalOutcome,
    ApprovalRecord,
    BatchState,
    BatchStatus,
    Journal,
)
from rollout.model import ConfigRef, NodePhase
from rollout.planner import Batch, Skipped

PART_FORMAT = "kubelet-rollout-journal-part/v2"
PART_LIMIT = 768 * 1024  # a part is never written larger: split first
PART_TARGET = 384 * 1024  # what a new or split part is packed to
# what a position's record grows by once its node is assigned and acknowledged (see the module doc)
ASSIGNED_RESERVE = 64
PART_OVERHEAD = 512  # the part's keys, format and fixed JSON around its lists
# a batch of at least this many nodes (and at least 1/SOLO_MAX of the plan: never more than
# SOLO_MAX such parts, however many batches a plan has) keeps its state in a part of its own
SOLO_MIN_NODES = 64
SOLO_MAX = 64

# a record's fields, in order, and their value when unset (trimmed off the end)
# the last four: a drain's cordon, its end, what holds it, the uncordon
_RECORD_DEFAULTS: tuple[Any, ...] = (None, -1, NodePhase.PENDING.value, None, -1, None, -1, None, None,
                                     None, None, -1, None)


def part_key(first: int) -> str:
    return f"p{first}"


def first_of(key: str) -> int:
    if not key.startswith("p") or not key[1:].isdigit():
        raise ValueError(f"not a journal part key: {key!r}")
    return int(key[1:])


@dataclass(frozen=True)
class _Positions:
    """The plan as positions (computed once per encoding)."""

    order: tuple[str, ...]
    skipped: tuple[Skipped, ...]
    batch_at: Mapping[int, Batch]  # first position of a batch -> the batch
    solo: frozenset[int]  # positions packed into a part of their own (see the module doc)

    @classmethod
    def of(cls, journal: Journal) -> _Positions:
        order = journal.plan.nodes
        batch_at, pos = {}, 0
        for batch in journal.plan.batches:
            if batch.nodes:
                batch_at[pos] = batch
            pos += batch.size
        return cls(order, journal.plan.skipped, batch_at, _solo_positions(batch_at, len(order)))

    @property
    def total(self) -> int:
        return len(self.order) + len(self.skipped)


# ------------------------------------------------------------------------------ encoding


def encode_parts(journal: Journal, *, phases: bool = True) -> dict[str, dict[str, str]]:
    """Every part of ``journal`` (key -> ConfigMap data), in the layout it was last stored in
    (``journal.layout``), each part split first if it outgrew :data:`PART_LIMIT`.

    ``phases=False``: a part whose nodes changed only in phase since this process last encoded it
    keeps that encoding, so its phases lag (see :func:`_encode`)."""
    where = _Positions.of(journal)
    firsts = _layout(journal, where)
    out: dict[str, dict[str, str]] = {}
    for first, end in zip(firsts, [*firsts[1:], where.total]):
        data = _encode(journal, where, first, end, phases=phases)
        if data_bytes(data) <= PART_LIMIT:
            out[part_key(first)] = data
            continue
        for piece_first, piece_end in _pack(journal, where, first, end, grown=False):
            out[part_key(piece_first)] = _encode(journal, where, piece_first, piece_end, phases=phases)
    return out


def _layout(journal: Journal, where: _Positions) -> list[int]:
    """Where each part begins: as last stored, or packed afresh for a new journal."""
    stored = sorted(journal.layout)
    if stored and stored[0] == 0 and stored[-1] < where.total and len(set(stored)) == len(stored):
        return stored
    return [first for first, _ in _pack(journal, where, 0, where.total, grown=True)]


def _solo_positions(batch_at: Mapping[int, Batch], nodes: int) -> frozenset[int]:
    """The first positions of the batches large enough for their state to have a part of its own."""
    least = max(SOLO_MIN_NODES, -(-nodes // SOLO_MAX))
    return frozenset(pos for pos, batch in batch_at.items() if batch.size >= least)


def _pack(journal: Journal, where: _Positions, first: int, end: int, *, grown: bool) -> list[tuple[int, int]]:
    """Consecutive runs of positions, each costing at most :data:`PART_TARGET` bytes (a solo
    position alone in its run)."""
    runs: list[tuple[int, int]] = []
    start, used = first, PART_OVERHEAD
    for pos in range(first, end):
        cost = _cost(journal, where, pos) + (ASSIGNED_RESERVE if grown else 0)
        alone = pos in where.solo or pos - 1 in where.solo
        if pos > start and (alone or used + cost > PART_TARGET):
            runs.append((start, pos))
            start, used = pos, PART_OVERHEAD
        used += cost
    if end > start:
        runs.append((start, end))
    return runs


def _cost(journal: Journal, where: _Positions, pos: int) -> int:
    """An upper bound of what position ``pos`` adds to its part's data (in bytes, with the
    separators and its own copy of every value it shares with others)."""
    n = len(where.order)
    if pos >= n:
        entry = where.skipped[pos - n]
        return len(dumps([entry.node, 0]).encode()) + len(dumps(entry.reason).encode()) + 4
    name = where.order[pos]
    rec = journal.nodes[name]
    zone = journal.plan.zones.get(name)
    cost = _json_bytes(name) + 12 + (0 if zone is None else _json_bytes(zone) + 8)
    batch = where.batch_at.get(pos)
    if batch is not None:
        cost += len(dumps(_batch(journal, batch)).encode()) + 2
    if _blank(rec):  # a new journal's 20,000 records, packed before its first write
        return cost + 2
    shared = [rec.skipped or None, None if rec.previous is None else rec.previous.to_api(),
              None if rec.revert_to is None else rec.revert_to.to_api()]
    cost += len(dumps(_record(rec, ms(journal.created_at), Interner(), Interner())).encode())
    return cost + sum(len(dumps(value).encode()) + 8 for value in shared if value is not None)


def _json_bytes(text: str) -> int:
    """``len(dumps(text).encode())``, without encoding the common case: plain ASCII (node names,
    zones) is its length and two quotes."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text) + 2
    return len(dumps(text).encode())


def _blank(rec: NodeRecord) -> bool:
    """A record with nothing but its batch (it encodes as ``[]``)."""
    return rec.phase is NodePhase.PENDING and not rec.skipped and rec.assigned_at is None \
        and rec.previous is None and rec.phase_since is None and rec.revert_to is None \
        and rec.revert_requested_at is None and rec.written_at is None and rec.revert_written_at is None \
        and rec.cordoned_at is None and rec.drained_at is None and not rec.drain_blocked and rec.uncordoned_at is None


# the data each part was last encoded to, with what it was encoded from (held, so identity is
# meaningful): a save re-encodes only the parts whose records or batches changed, which keeps a
# 20,000-node save to the few parts a batch touches; and the inputs last found to still encode it
# with phases lagging, so the next save compares their records' intents only if they changed again
_ENCODED: dict[tuple[str, int, int], tuple[tuple[object, ...], dict[str, str], tuple[object, ...]]] = {}
_ENCODED_MAX = 4096


def _encode(journal: Journal, where: _Positions, first: int, end: int, *, phases: bool) -> dict[str, str]:
    """The part's data, as last encoded when its inputs are the same objects (a pure memo), or with
    ``phases=False`` when its nodes changed only in phase: nothing of them that must survive the
    process changed (:func:`node_intents`), and re-encoding a 10,000-node batch's records as it
    ends held up the save that records its end by a third of a second at 20,000 nodes."""
    n = len(where.order)
    inputs = (journal.plan, journal.created_at, journal.soak_waived,
              *(journal.nodes[where.order[pos]] for pos in range(first, min(end, n))),
              *(journal.batches[b.index] for pos, b in where.batch_at.items() if first <= pos < end))
    key = (journal.rollout, first, end)
    held = _ENCODED.get(key)
    if held is not None:
        encoded, data, seen = held
        if not phases and _still_encodes(seen, inputs, phases=True):  # the very inputs seen last
            return data
        if _still_encodes(encoded, inputs, phases=phases):
            # what the data encodes stays held, for a save with phases; these inputs are known now
            _ENCODED[key] = (encoded, data, inputs)
            return data
    data = _encode_afresh(journal, where, first, end)
    if len(_ENCODED) >= _ENCODED_MAX:
        _ENCODED.clear()
    _ENCODED[key] = (inputs, data, inputs)
    return data


def _still_encodes(held: tuple[object, ...], inputs: tuple[object, ...], *, phases: bool) -> bool:
    if len(held) != len(inputs):
        return False
    for was, now in zip(held, inputs):
        if was is now:
            continue
        if phases or not (isinstance(was, NodeRecord) and isinstance(now, NodeRecord)):
            return False
        if node_intents(was) != node_intents(now):
            return False
    return True


def _encode_afresh(journal: Journal, where: _Positions, first: int, end: int) -> dict[str, str]:
    n = len(where.order)
    sources, texts, zones = Interner(), Interner(), Interner()
    names, zone_of, records, batches, skipped = [], [], [], [], []
    base_ms = ms(journal.created_at)
    for pos in range(first, min(end, n)):
        name = where.order[pos]
        names.append(name)
        zone_of.append(zones.index(journal.plan.zones.get(name)))
        rec = journal.nodes[name]
        records.append([] if _blank(rec) else _record(rec, base_ms, sources, texts))
        batch = where.batch_at.get(pos)
        if batch is not None:
            batches.append(_batch(journal, batch))
    for pos in range(max(first, n), end):
        entry = where.skipped[pos - n]
        skipped.append([entry.node, texts.index(entry.reason)])
    body = {"first": first, "names": names, "zones": zones.items, "zoneOf": zone_of, "sources": sources.items,
            "texts": texts.items, "records": records, "batches": batches, "skipped": skipped}
    return {"format": PART_FORMAT, "rollout": journal.rollout, "part": dumps(body)}


def _record(rec: NodeRecord, base_ms: int, sources: Interner, texts: Interner) -> list[Any]:
    """``base_ms``: the journal's creation in epoch milliseconds (once per part, not per field:
    a whole part is re-encoded when its batch's nodes change phase, 10,000 records at a time)."""
    assigned_ms = ms_opt(rec.assigned_at)
    revert_ms = ms_opt(rec.revert_requested_at)
    record = [
        _minus(assigned_ms, base_ms),
        sources.source(rec.previous),
        rec.phase.value,
        _minus(ms_opt(rec.phase_since), base_ms),
        sources.source(rec.revert_to),
        _minus(revert_ms, base_ms),
        texts.index(rec.skipped or None),
        _minus(ms_opt(rec.written_at), assigned_ms),  # acknowledgments: milliseconds after their intent
        _minus(ms_opt(rec.revert_written_at), revert_ms),
        _minus(ms_opt(rec.cordoned_at), base_ms),
        _minus(ms_opt(rec.drained_at), base_ms),
        texts.index(rec.drain_blocked or None),
        _minus(ms_opt(rec.uncordoned_at), base_ms),
    ]
    while record and record[-1] == _RECORD_DEFAULTS[len(record) - 1]:
        record.pop()  # fields a node does not have yet cost nothing
    return record


def _minus(at_ms: int | None, base_ms: int | None) -> int | None:
    """``ms_after`` on milliseconds already taken."""
    return None if at_ms is None or base_ms is None else at_ms - base_ms


def _batch(journal: Journal, batch: Batch) -> list[Any]:
    state = journal.batches[batch.index]
    estimates = journal.plan.estimate.per_batch
    base = journal.created_at
    return [batch.index, batch.step, batch.size,
            estimates[batch.index].total_seconds() if batch.index < len(estimates) else None,
            state.status.value, ms_after(state.started_at, base), ms_after(state.finished_at, base),
            _approval(state.approval, base), int(batch.index in journal.soak_waived),
            *_trimmed([_analysis(state.analysis, base), ms_after(state.soak_started_at, base)])]


def _trimmed(later: list[Any]) -> list[Any]:
    """A batch's later fields cost nothing until it has them."""
    while later and later[-1] is None:
        later.pop()
    return later


def _analysis(a: AnalysisRecord | None, base: datetime) -> list[Any] | None:
    """The verdict only: the measurements are evidence, in their own ConfigMaps."""
    if a is None:
        return None
    return [a.verdict.value, ms_after(a.at, base), a.reason, list(a.nodes)]


def _approval(a: ApprovalRecord | None, base: datetime) -> list[Any] | None:
    if a is None:
        return None
    return [ms_after(a.requested_at, base), ms_after(a.deadline, base), a.outcome.value if a.outcome else None,
            ms_after(a.decided_at, base), a.by, a.note]


# ------------------------------------------------------------------------------ decoding


@dataclass(frozen=True)
class PlanParts:
    """What the parts hold, put back together (``rollout.journal.configmap`` builds the journal)."""

    batches: tuple[Batch, ...]
    states: tuple[BatchState, ...]
    estimates: tuple[timedelta, ...]
    soak_waived: tuple[int, ...]
    zones: Mapping[str, str]
    skipped: tuple[Skipped, ...]
    records: Mapping[str, NodeRecord]
    layout: tuple[int, ...]


def decode_parts(parts: Mapping[str, Mapping[str, str]], *, base: datetime, nodes: int, skipped: int,
                 batches: int, rollout: str) -> PlanParts:
    """The parts of one journal, whole and in order; ValueError when one is missing or foreign."""
    bodies = sorted((_body(key, data, rollout) for key, data in parts.items()), key=lambda b: b["first"])
    expected = 0
    for body in bodies:
        if body["first"] != expected:
            raise ValueError(f"journal part {part_key(expected)} of rollout {rollout!r} is missing")
        expected += len(body["names"]) + len(body["skipped"])
    if expected != nodes + skipped:
        raise ValueError(f"journal parts of rollout {rollout!r} hold {expected} positions, not {nodes + skipped}")
    order = [name for body in bodies for name in body["names"]]
    descriptors = sorted((d for body in bodies for d in body["batches"]), key=lambda d: d[0])
    if [d[0] for d in descriptors] != list(range(batches)):
        raise ValueError(f"journal parts of rollout {rollout!r} do not hold its {batches} batch(es)")
    plan_batches, pos = [], 0
    for index, step, size, *_ in descriptors:
        plan_batches.append(Batch(index, step, tuple(order[pos : pos + size])))
        pos += size
    batch_of = {name: b.index for b in plan_batches for name in b.nodes}
    zones: dict[str, str] = {}
    records: dict[str, NodeRecord] = {}
    for body in bodies:
        sources = [source_from_json(s) for s in body["sources"]]
        for name, zone, raw in zip(body["names"], body["zoneOf"], body["records"], strict=True):
            if zone >= 0:
                zones[name] = body["zones"][zone]
            records[name] = _node_record(raw, batch_of[name], base, sources, body["texts"])
    return PlanParts(
        batches=tuple(plan_batches),
        states=tuple(_batch_state(d, base) for d in descriptors),
        estimates=tuple(timedelta(seconds=d[3]) for d in descriptors if d[3] is not None),
        soak_waived=tuple(d[0] for d in descriptors if d[8]),
        zones=zones,
        skipped=tuple(Skipped(name, body["texts"][text]) for body in bodies for name, text in body["skipped"]),
        records=records,
        layout=tuple(body["first"] for body in bodies),
    )


def _body(key: str, data: Mapping[str, str], rollout: str) -> dict[str, Any]:
    if data.get("format") != PART_FORMAT or data.get("rollout") != rollout:
        raise ValueError(f"journal part {key} is not a part of rollout {rollout!r}'s journal")
    body: dict[str, Any] = json.loads(data["part"])
    if body["first"] != first_of(key):
        raise ValueError(f"journal part {key} holds positions from {body['first']}")
    return body


def _node_record(raw: Sequence[Any], batch: int, base: datetime, sources: Sequence[ConfigRef | None],
                 texts: Sequence[str]) -> NodeRecord:
    (assigned, prev, phase, since, revert_to, revert_at, skipped, written, revert_written, cordoned, drained,
     blocked, uncordoned) = (*raw, *_RECORD_DEFAULTS[len(raw):])
    assigned_at, revert_requested_at = at_after(assigned, base), at_after(revert_at, base)
    return NodeRecord(
        batch=batch,
        assigned_at=assigned_at,
        previous=None if prev < 0 else sources[prev],
        phase=NodePhase(phase),
        phase_since=at_after(since, base),
        revert_to=None if revert_to < 0 else sources[revert_to],
        revert_requested_at=revert_requested_at,
        skipped="" if skipped < 0 else texts[skipped],
        written_at=at_after(written, assigned_at),
        revert_written_at=at_after(revert_written, revert_requested_at),
        cordoned_at=at_after(cordoned, base),
        drained_at=at_after(drained, base),
        drain_blocked="" if blocked < 0 else texts[blocked],
        uncordoned_at=at_after(uncordoned, base),
    )


def _batch_state(descriptor: Sequence[Any], base: datetime) -> BatchState:
    status, started, finished, approval = descriptor[4:8]
    return BatchState(BatchStatus(status), at_after(started, base), at_after(finished, base),
                      _approval_record(approval, base), *_batch_later(descriptor[9:], base))


def _batch_later(later: Sequence[Any], base: datetime) -> tuple[AnalysisRecord | None, datetime | None]:
    """The analysis verdict and when the soak began, where the batch has them."""
    analysis, soak_started = (*later, None, None)[:2]
    return _analysis_record(analysis, base), at_after(soak_started, base)


def _analysis_record(body: Sequence[Any] | None, base: datetime) -> AnalysisRecord | None:
    if body is None:
        return None
    verdict, at, reason, nodes = body
    when = at_after(at, base)
    assert when is not None
    return AnalysisRecord(AnalysisVerdict(verdict), when, reason, tuple(nodes))


def _approval_record(body: Sequence[Any] | None, base: datetime) -> ApprovalRecord | None:
    if body is None:
        return None
    requested, deadline, outcome, decided, by, note = body
    requested_at, deadline_at = at_after(requested, base), at_after(deadline, base)
    assert requested_at is not None and deadline_at is not None
    return ApprovalRecord(requested_at=requested_at, deadline=deadline_at,
                          outcome=ApprovalOutcome(outcome) if outcome else None,
                          decided_at=at_after(decided, base), by=by, note=note)
