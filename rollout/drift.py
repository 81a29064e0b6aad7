"""Drift: does every node still run the config its last completed rollout proved?

A rollout proves a config on a node once (the kubelet's ``status.config``, or the agent's
read-back through configz) and then nobody looks again. A node re-imaged from an old template, a
drop-in edited by hand, another tool's drop-in read after ours, a ``spec.configSource`` pointed
elsewhere by hand: the fleet drifts away from what was proved, silently. The drift watch looks
again, per node:

1. **What was proved** (:func:`proofs`): of the journals in the cluster (those the nodes name:
   ``rollout.usecases.drift.reachable_journals``), the most recent
   *complete* rollout whose plan included the node and left it on the target (assigned and not
   reverted, or found already on it when the rollout planned); its target ConfigMap's
   KubeletConfiguration is the proved config. A rolled-back, halted or reverted rollout proves
   nothing. A node no completed rollout reached is **unmanaged**: reported, never drift.
2. **What runs** (configz, the only proof of what a kubelet runs), compared field by field with
   the proved document, only the fields it sets, by the read-back's own comparison
   (``rollout.kubeletconfig.readback``: the one the agent proves a drop-in with, so ``1m`` is
   ``1m0s`` and ``1024Mi`` is ``1Gi``). On a node run by the agent, a drifted field that a drop-in
   read after ours sets is named with that file (from the agent's advertisement).
3. On a Dynamic Kubelet Config node, ``spec.configSource`` must still name the proved ConfigMap.

Each node is **in-sync**, **drifted** (the fields, expected and running), **unmanaged** or
**unreachable** (configz could not be read: why). :func:`fix_plan` chooses what
``rollout drift --fix`` rolls out again. Pure: the reads are ``rollout.usecases.drift``'s.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.errors import FlagError
from rollout.journal import Journal, RolloutStatus
from rollout.kubeletconfig.dropin import advertised_after, overrides
from rollout.kubeletconfig.readback import differences
from rollout.model import ConfigRef, NodeObservation
from rollout.names import ANN_AGENT
from rollout.planner import SKIP_ON_TARGET
from rollout.timefmt import rfc3339_seconds

CONFIG_SOURCE_FIELD = "spec.configSource"  # the field a DKC node's assignment drifts in
EVENT_MESSAGE_MAX = 1000  # an Event's message: the API server keeps 1 KiB of it readable


class DriftState(str, enum.Enum):
    IN_SYNC = "in-sync"
    DRIFTED = "drifted"
    UNMANAGED = "unmanaged"  # no completed rollout proved a config on it
    UNREACHABLE = "unreachable"  # its running config could not be read


@dataclass(frozen=True)
class Proof:
    """The config a node's last completed rollout proved on it."""

    node: str
    rollout: str
    target: ConfigRef
    finished_at: datetime | None

    @property
    def configmap(self) -> str:
        return f"{self.target.namespace}/{self.target.name}"


@dataclass(frozen=True)
class FieldDrift:
    """One field the proved config sets that the node does not run with that value."""

    field: str  # dotted: ``evictionHard.memory.available``; ``spec.configSource`` on a DKC node
    expected: Any
    running: Any  # None: the running config does not show the field
    overridden_by: str = ""  # a drop-in read after ours that sets it (as the agent advertises them)

    def __str__(self) -> str:
        said = f"{self.field}: expected {json.dumps(self.expected, default=str)}, running " \
               f"{json.dumps(self.running, default=str)}"
        return said + (f" (set by {self.overridden_by}, read after our drop-in)" if self.overridden_by else "")


@dataclass(frozen=True)
class NodeDrift:
    """One node's verdict."""

    node: str
    state: DriftState
    backend: str = ""  # "dkc", "agent" or "" (neither)
    fields: tuple[FieldDrift, ...] = ()
    proof: Proof | None = None
    reason: str = ""  # why unmanaged or unreachable

    def as_json(self) -> dict[str, Any]:
        """One node of `rollout drift -o json` (schemas/drift.json)."""
        proof = self.proof
        return {"node": self.node, "state": self.state.value, "backend": self.backend or None,
                "rollout": proof.rollout if proof else None, "configmap": proof.configmap if proof else None,
                "proved_at": rfc3339_seconds(proof.finished_at) if proof and proof.finished_at else None,
                "fields": [{"field": f.field, "expected": f.expected, "running": f.running,
                            "overridden_by": f.overridden_by or None} for f in self.fields],
                "reason": self.reason or None}


# ---------------------------------------------------------------------------------- proofs


def _proved_nodes(journal: Journal) -> Iterable[str]:
    """The nodes a complete rollout left on its target: assigned and never reverted, and those
    it found already on it when it planned."""
    for name, record in journal.nodes.items():
        if record.assigned and not record.reverting and not record.skipped:
            yield name
    for skipped in journal.plan.skipped:
        if skipped.reason == SKIP_ON_TARGET:
            yield skipped.node


def proofs(journals: Iterable[Journal]) -> dict[str, Proof]:
    """Each node's proof: the most recent complete rollout (by when it finished, then its name)
    that left it on its target. Rolled-back, halted, reverted and running rollouts prove nothing."""
    found: dict[str, Proof] = {}
    complete = [j for j in journals if j.status is RolloutStatus.COMPLETE and not j.rollback_to]
    for journal in sorted(complete, key=lambda j: (j.finished_at or j.created_at, j.rollout)):
        for node in _proved_nodes(journal):
            found[node] = Proof(node, journal.rollout, journal.target, journal.finished_at)
    return found


# ---------------------------------------------------------------------------------- judging


def unmanaged(obs: NodeObservation) -> NodeDrift:
    return NodeDrift(obs.name, DriftState.UNMANAGED, obs.backend,
                     reason="no completed rollout proved a config on this node")


def unreachable(obs: NodeObservation, proof: Proof | None, why: str) -> NodeDrift:
    return NodeDrift(obs.name, DriftState.UNREACHABLE, obs.backend, proof=proof, reason=why)


def _source_name(ref: ConfigRef | None) -> str:
    return "local (the kubelet's --config)" if ref is None else f"{ref.namespace}/{ref.name}"


def compare(obs: NodeObservation, proof: Proof, document: Mapping[str, Any], configz: Mapping[str, Any]) -> NodeDrift:
    """The node's running config (its configz answer) against the proved ``document``: every
    field the document sets, compared as the read-back compares them; on a DKC node also whether
    ``spec.configSource`` still names the proved ConfigMap."""
    later = {}
    if obs.backend == "agent":
        readable = [f for f in advertised_after(obs.annotations.get(ANN_AGENT)) if not f.problem]
        later = {o.field: o.file for o in overrides(document, readable)}
    found = [FieldDrift(d.path, d.expected, d.running, later.get(d.path, "")) for d in differences(document, configz)]
    if obs.backend == "dkc" and not proof.target.same_reference(obs.spec_source):
        found.insert(0, FieldDrift(CONFIG_SOURCE_FIELD, _source_name(proof.target), _source_name(obs.spec_source)))
    state = DriftState.DRIFTED if found else DriftState.IN_SYNC
    return NodeDrift(obs.name, state, obs.backend, tuple(found), proof)


def event_message(drift: NodeDrift) -> str:
    """The ``KubeletConfigDrift`` Event's message: the proof and each drifted field."""
    proof = drift.proof
    head = (f"running config differs from what rollout {proof.rollout} proved ({proof.configmap}): "
            if proof else "running config differs from the proved one: ")
    text = head + "; ".join(str(f) for f in drift.fields)
    return text if len(text) <= EVENT_MESSAGE_MAX else text[:EVENT_MESSAGE_MAX - 3] + "..."


def counts(results: Sequence[NodeDrift]) -> dict[str, int]:
    """How many nodes are in each state (every state, 0 included)."""
    return {s.value: sum(1 for r in results if r.state is s) for s in DriftState}


# ---------------------------------------------------------------------------------- --fix


@dataclass(frozen=True)
class FixPlan:
    """What `rollout drift --fix` rolls out: the proved config, to the drifted nodes it proved."""

    proof: Proof | None  # the config's proof (its rollout and ConfigMap); None: nothing to fix
    nodes: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (node, why no rollout fixes it here)
    set_aside: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (node, the later drop-ins its agent sets aside)


def fix_plan(results: Sequence[NodeDrift], *, configmap: str | None = None) -> FixPlan:
    """The drifted nodes a rollout of their proved config brings back.

    The fix's config takes precedence (``rollout.usecases.drift.publish_fix_config``): on a node
    where a drop-in read after ours overrides a field, the agent sets that file aside, and
    ``set_aside`` names them. Drifted nodes proved by different configs are refused
    (``FlagError``) unless ``configmap`` (``NAMESPACE/NAME``) names one: then the others are left out.
    """
    fixable = [r for r in results if r.state is DriftState.DRIFTED and r.proof is not None]
    left: list[tuple[str, str]] = []
    by_config: dict[str, list[NodeDrift]] = {}
    for r in fixable:
        assert r.proof is not None
        by_config.setdefault(r.proof.configmap, []).append(r)
    if configmap is not None:
        if configmap not in by_config:
            proved = ", ".join(sorted(by_config)) or "none"
            raise FlagError(f"no drifted node was proved by {configmap} (drifted nodes were proved by: {proved})",
                            source="--configmap")
        left += [(r.node, f"proved by {c}, not {configmap}") for c, rs in sorted(by_config.items()) if c != configmap
                 for r in rs]
        chosen = by_config[configmap]
    elif len(by_config) > 1:
        listed = "; ".join(f"{c} (rollout {rs[0].proof.rollout if rs[0].proof else '?'}): "
                           f"{', '.join(r.node for r in rs)}" for c, rs in sorted(by_config.items()))
        raise FlagError(f"the drifted nodes were proved by {len(by_config)} different configs: {listed}; "
                        "nothing was started", source="--fix",
                        advice="name the config to roll out again with --configmap NAMESPACE/NAME (its nodes only)")
    else:
        chosen = next(iter(by_config.values()), [])
    proof = chosen[0].proof if chosen else None
    aside = tuple((r.node, files) for r in sorted(chosen, key=lambda r: r.node)
                  if (files := tuple(sorted({f.overridden_by for f in r.fields if f.overridden_by}))))
    return FixPlan(proof, tuple(sorted(r.node for r in chosen)), tuple(sorted(left)), aside)


__all__ = ["CONFIG_SOURCE_FIELD", "DriftState", "FieldDrift", "FixPlan", "NodeDrift", "Proof", "compare", "counts",
           "event_message", "fix_plan", "proofs", "unmanaged", "unreachable"]
