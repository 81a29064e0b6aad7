"""Builders and a tiny scripted cluster shared by the core tests (this module holds no tests).

``World`` plays the kubelets just enough for the decision function: it applies ``AssignBatch`` /
``RevertNodes`` patches to the node observations and, on ``tick``, moves each assigned node the
way its scripted behaviour says (good, rejects the config, crash-loops, cannot sync, silent).
It is deliberately dumb: the real DKC behaviour is kubesim's job; this only feeds ``decide``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from rollout.machine.actions import (
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    Halt,
    RevertNodes,
    Wait,
    WaitForWindow,
)
from rollout.journal import ApprovalOutcome, Journal
from rollout.machine import step
from rollout.model import ConfigRef, NodeObservation
from rollout.planner import RolloutPlan, plan_batches
from rollout.policy import RolloutPolicy

UTC = timezone.utc
T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # a Monday
OLD = ConfigRef("kube-system", "kubelet-old-aaaa", "kubelet", uid="uid-old", resource_version="100")
TARGET = ConfigRef("kube-system", "kubelet-new-bbbb", "kubelet", uid="uid-new", resource_version="200")
ZONE = "topology.kubernetes.io/zone"
LOAD_ERR = "failed to load config, see Kubelet log for details"
VALIDATE_ERR = "failed to validate config, see Kubelet log for details"
SYNC_ERR = "failed to sync: failed to download config, see Kubelet log for details"


def policy(**fields: Any) -> RolloutPolicy:
    """A policy from YAML-spelled fields; defaults keep tests fast (no soak, 1 canary, 50%, 100%)."""
    base: dict[str, Any] = {
        "name": "test",
        "steps": [1, "50%", "100%"],
        "maxUnavailable": "50%",
        "done": {"until": "active", "soak": "0s"},
        "progressDeadline": "5m",
        "syncErrorGrace": "1m",
        "recheckEvery": "30s",
    }
    base.update(fields)
    return RolloutPolicy.model_validate(base)


def node(name: str, *, zone: str = "z1", **fields: Any) -> NodeObservation:
    """A healthy DKC node running OLD (spec, assigned, active, lastKnownGood)."""
    values: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "labels": {ZONE: zone, "kubernetes.io/hostname": name},
        "has_config_status": True,
        "spec_source": OLD.unresolved(),
        "assigned": OLD,
        "active": OLD,
        "last_known_good": OLD,
        "ready": "True",
        "ready_transition": T0 - timedelta(days=1),
    }
    values.update(fields)
    return NodeObservation(**values)


def nodes(n: int, *, zones: int = 1, prefix: str = "n") -> list[NodeObservation]:
    return [node(f"{prefix}{i:03d}", zone=f"z{i % zones}") for i in range(n)]


# States of one node relative to TARGET (reference section 7, "typical sequences").
def spec_target(obs: NodeObservation) -> NodeObservation:
    return replace(obs, spec_source=TARGET.unresolved())


def restarting(obs: NodeObservation) -> NodeObservation:
    return replace(spec_target(obs), assigned=TARGET)


def active(obs: NodeObservation) -> NodeObservation:
    return replace(spec_target(obs), assigned=TARGET, active=TARGET, error="")


def promoted(obs: NodeObservation) -> NodeObservation:
    return replace(active(obs), last_known_good=TARGET)


def rejected(obs: NodeObservation, error: str = VALIDATE_ERR) -> NodeObservation:
    return replace(spec_target(obs), assigned=TARGET, active=OLD, error=error)


def sync_error(obs: NodeObservation) -> NodeObservation:
    return replace(spec_target(obs), error=SYNC_ERR)


def crash_looping(obs: NodeObservation, *, ready: str = "False", since: datetime = T0) -> NodeObservation:
    """Down since ``since`` (the default, T0, is when the canary is assigned in the tables)."""
    return replace(active(obs), ready=ready, ready_transition=since)


def make_plan(pool: list[NodeObservation], pol: RolloutPolicy, *, rollout: str = "r1") -> RolloutPlan:
    return plan_batches(pool, pol, rollout=rollout, target=TARGET)


Behaviour = str  # "good" | "validate" | "load" | "crash" | "sync" | "silent" | "unrevertable"


@dataclass
class World:
    """Scripted nodes: observations keyed by name, behaviour per node (default "good")."""

    obs: dict[str, NodeObservation]
    behaviour: dict[str, Behaviour] = field(default_factory=dict)
    patches: list[tuple[str, str]] = field(default_factory=list)  # (kind, node) in order
    drop_patches: set[str] = field(default_factory=set)  # nodes whose next PATCH is lost

    @classmethod
    def of(cls, pool: list[NodeObservation], **behaviour: Behaviour) -> World:
        return cls({o.name: o for o in pool}, dict(behaviour))

    def observations(self) -> Mapping[str, NodeObservation]:
        return dict(self.obs)

    def apply(self, action: Action) -> None:
        if isinstance(action, AssignBatch):
            for name in action.nodes:
                self.patches.append(("assign", name))
                if name in self.drop_patches:
                    self.drop_patches.discard(name)
                    continue
                o = self.obs[name]
                anns = {**o.annotations, **action.annotations[name]}
                self.obs[name] = replace(o, spec_source=action.target, annotations=anns)
        elif isinstance(action, RevertNodes):
            for name, to in action.nodes.items():
                self.patches.append(("revert", name))
                self.obs[name] = replace(self.obs[name], spec_source=to.unresolved() if to else None)

    def tick(self, now: datetime) -> None:
        for name, o in list(self.obs.items()):
            self.obs[name] = self._kubelet(o, self.behaviour.get(name, "good"), now)

    def _kubelet(self, o: NodeObservation, how: Behaviour, now: datetime) -> NodeObservation:
        if o.spec_source is not None and TARGET.same_reference(o.spec_source):
            moves: dict[str, Callable[[NodeObservation], NodeObservation]] = {
                "good": active,
                "validate": rejected,
                "load": lambda x: rejected(x, LOAD_ERR),
                "crash": crash_looping,
                "unrevertable": crash_looping,
                "sync": sync_error,
                "silent": lambda x: x,
            }
            return moves[how](o)
        if how == "unrevertable":
            return o
        spec = o.spec_source
        if spec is None:
            return replace(o, assigned=None, active=None, last_known_good=None, error="", ready="True")
        resolved = OLD if OLD.same_reference(spec) else o.assigned
        return replace(o, assigned=resolved, active=resolved, error="", ready="True", ready_transition=now)


Approver = Callable[[AwaitApproval], ApprovalOutcome | None]


def run(
    journal: Journal,
    world: World,
    *,
    now: datetime = T0,
    approve: Approver = lambda _: ApprovalOutcome.APPROVED,
    max_steps: int = 500,
) -> tuple[Journal, list[Action], datetime]:
    """Drive the machine like the engine does until Complete or Halt."""
    actions: list[Action] = []
    for _ in range(max_steps):
        journal, action = step(journal, world.observations(), now=now)
        actions.append(action)
        if isinstance(action, (Complete, Halt)):
            return journal, actions, now
        world.apply(action)
        if isinstance(action, AwaitApproval):
            outcome = approve(action)
            if outcome is None:
                now = action.deadline
                continue
            journal = journal.with_approval(action.batch, outcome, at=now, by="tester")
        elif isinstance(action, (Wait, WaitForWindow)):
            now = max(action.until, now + timedelta(seconds=1))
        else:
            now += timedelta(seconds=5)
        world.tick(now)
    raise AssertionError(f"no end after {max_steps} steps; last: {actions[-1]}")
