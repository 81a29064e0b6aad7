"""Starting a rollback: the journal the engine walks back, last batch first.

A rollback is not a second engine: it is the rollout's own journal put in the ``rolling-back``
state (``Journal.with_rollback``), which ``rollout.machine`` walks like any revert. When the
journal is gone (deleted by hand), it is rebuilt from what the nodes carry: every assignment
wrote the rollout name, the batch and the node's previous source into the node's annotations in
the same PATCH, so the batches and what to restore are known without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from rollout.errors import NotFoundError
from rollout.journal import Journal, NodeRecord, annotations_by_rollout
from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.planner import Batch, RolloutPlan
from rollout.policy import RolloutPolicy
from rollout.ports import JournalReader
from rollout.usecases.status import load_journal

ROLLBACK_TARGETS = ("previous", "local")


def start_rollback(gateway: JournalReader, *, name: str, to: str, policy: RolloutPolicy,
                   observations: Mapping[str, NodeObservation], now: datetime) -> tuple[Journal, str | None]:
    """The rollout's journal in the rolling-back state (or rebuilt from node annotations)."""
    if to not in ROLLBACK_TARGETS:
        raise ValueError(f"to must be 'previous' or 'local', not {to!r}")
    where = "each node's previous source" if to == "previous" else "local config"
    reason = f"rolled back to {where} by a rollback run"
    loaded = load_journal(gateway, name)
    if loaded is not None:
        journal, rv = loaded
        patient = _patient(policy, journal.plan.policy)
        journal = replace(journal, plan=replace(journal.plan, policy=patient))
        return journal.with_rollback(to, at=now, reason=reason), rv
    return _from_annotations(name, policy, observations, now=now).with_rollback(to, at=now, reason=reason), None


def _patient(given: RolloutPolicy, original: RolloutPolicy) -> RolloutPolicy:
    """The rollback waits as patiently as the rollout did (its progress deadline and health rules).

    It keeps the rollout's policy name: the journal is the rollout's, and ``list`` and ``status``
    name the policy it ran under; the rollback run's own tag names the one it used."""
    return given.model_copy(update={
        "name": original.name,
        "progress_deadline": max(given.progress_deadline, original.progress_deadline),
        "lease_stale_after": original.lease_stale_after,
        "not_ready_for": original.not_ready_for,
    })


def _from_annotations(name: str, policy: RolloutPolicy, observations: Mapping[str, NodeObservation], *,
                      now: datetime) -> Journal:
    found = annotations_by_rollout(name, [(o.name, o.annotations) for o in observations.values()])
    if not found:
        raise NotFoundError(f"rollout {name!r} has no journal and no node carries its annotations: "
                            "nothing to roll back")
    by_batch: dict[int, list[str]] = {}
    for node, ann in sorted(found.items()):
        by_batch.setdefault(ann.batch, []).append(node)
    batches = tuple(Batch(i, i, tuple(by_batch[b])) for i, b in enumerate(sorted(by_batch)))
    target = _common_target(found, observations)
    plan = RolloutPlan(rollout=name, target=target, policy=policy, batches=batches)
    journal = Journal.start(plan, now=now)
    nodes = {
        n: NodeRecord(batch=b.index, assigned_at=found[n].assigned_at, previous=found[n].previous,
                      phase=NodePhase.ASSIGNED, phase_since=now, written_at=found[n].assigned_at)
        for b in batches for n in b.nodes
    }
    return replace(journal, nodes=MappingProxyType(nodes))


def _common_target(found: Mapping[str, Any], observations: Mapping[str, NodeObservation]) -> ConfigRef:
    sources = [src for n in found if (src := observations[n].spec_source) is not None]
    if not sources:
        return ConfigRef("", "(unknown: journal lost)")
    return max(set(sources), key=sources.count).unresolved()
