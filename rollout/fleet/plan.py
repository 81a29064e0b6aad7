"""A fleet rollout's plan: the stages with their clusters, each cluster's pool and policy, the limits.

Built from a validated fleet file (``rollout.fleet.loading``) with every policy resolved to what a
worker anywhere can load (a shipped policy's name, or a policy file's text), so the plan is all
the fleet flow needs, and the same plan shows in ``rollout fleet plan``.

Each cluster's rollout runs in its own cluster under the name ``<fleet rollout>-<cluster>``
(:func:`cluster_rollout`): its journal, lock and node labels carry that name, and ``rollout
status <fleet rollout>-<cluster>`` works there as for any rollout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from rollout.errors import FleetError
from rollout.fleet.model import FleetFailureAction
from rollout.identity import ClusterIdentity
from rollout.policy import Approval, format_duration, resolve_amount

MAX_ROLLOUT_NAME = 63  # a cluster's rollout name is a label value


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    work_pool: str
    identity: ClusterIdentity  # its runs refuse any other cluster before a write
    labels: Mapping[str, str]
    policy: str  # a shipped policy's name, or a policy's YAML text
    policy_name: str  # as people read it: the shipped name, or the file's stem


@dataclass(frozen=True)
class StagePlan:
    index: int
    name: str
    clusters: tuple[str, ...]
    soak: timedelta
    max_concurrent: int
    approval_after: bool  # a person approves before the next stage starts

    @property
    def label(self) -> str:
        default = "canary" if self.index == 0 else f"stage {self.index}"
        return self.name or default


@dataclass(frozen=True)
class FleetPlan:
    name: str
    stages: tuple[StagePlan, ...]
    clusters: Mapping[str, ClusterPlan]
    failure_budget: int  # clusters that may fail before the failure action applies
    failure_action: FleetFailureAction
    approval: Approval = field(default_factory=Approval)
    # nodes changing at once across the fleet, as the fleet file says it: a count, or a percentage
    # of the fleet's nodes (None: no limit); budget_nodes() says how many nodes that is
    disruption_budget: int | str | None = None

    @property
    def budget_needs_fleet_size(self) -> bool:
        """Is the budget a percentage, which only the clusters' node counts turn into nodes?"""
        return isinstance(self.disruption_budget, str)

    def budget_nodes(self, fleet_nodes: int | None) -> int | None:
        """The disruption budget in nodes (None: no budget). A count is itself; a percentage is of
        ``fleet_nodes`` (every node of every cluster, as their identity probes counted them when the
        fleet began), rounded down as ``maxUnavailable`` is, and at least 1 so the fleet can move."""
        if self.disruption_budget is None or isinstance(self.disruption_budget, int):
            return self.disruption_budget
        if fleet_nodes is None:
            raise FleetError(f"the disruption budget {self.disruption_budget} is a share of the fleet's nodes, "
                             "which were not counted")
        return max(1, resolve_amount(self.disruption_budget, fleet_nodes, round_up=False))

    def stage_of(self, cluster_name: str) -> int:
        return next(stage.index for stage in self.stages if cluster_name in stage.clusters)

    def to_json(self) -> dict[str, Any]:
        """`rollout fleet plan -o json` (schemas/fleet-plan.json)."""
        return {
            "name": self.name,
            "failure_budget": self.failure_budget,
            "failure_action": self.failure_action.value,
            "disruption_budget": self.disruption_budget,
            "approval_timeout": format_duration(self.approval.timeout),
            "stages": [{
                "index": stage.index,
                "name": stage.label,
                "soak": format_duration(stage.soak),
                "max_concurrent": stage.max_concurrent,
                "approval_after": stage.approval_after,
                "clusters": [{"name": c, "work_pool": self.clusters[c].work_pool,
                              "identity": self.clusters[c].identity.given(),
                              "policy": self.clusters[c].policy_name,
                              "labels": dict(self.clusters[c].labels)} for c in stage.clusters],
            } for stage in self.stages],
        }


def stage_limits(stage_clusters: tuple[str, ...], max_concurrent: int | str) -> int:
    """Clusters of one stage running at once: a count, or a percentage of the stage (rounded up)."""
    return max(1, resolve_amount(max_concurrent, len(stage_clusters), round_up=True))


def cluster_rollout(fleet_rollout: str, cluster_name: str) -> str:
    """The rollout's name in one cluster (its journal, lock, labels, flow run name)."""
    return f"{fleet_rollout}-{cluster_name}"


def fleet_rollout_name_problem(fleet_rollout: str) -> str | None:
    """What is wrong with a fleet rollout's name whatever the fleet (None: nothing): letters,
    digits, '-' and '_', starting with a letter or digit, since it makes a label value and a
    Prefect Variable's name (the fleet journal's)."""
    valid = all(c.isascii() and (c.isalnum() or c in "-_") for c in fleet_rollout) and fleet_rollout[:1].isalnum()
    if not valid or len(fleet_rollout) >= MAX_ROLLOUT_NAME:
        return (f"letters, digits, '-' and '_', starting with a letter or digit, shorter than {MAX_ROLLOUT_NAME} "
                "characters (each cluster's rollout is named <name>-<cluster>)")
    return None


def check_rollout_name(fleet_rollout: str, plan: FleetPlan) -> None:
    """A fleet rollout's name leaves every cluster's rollout name a label value."""
    longest = max(plan.clusters, key=len)
    name = cluster_rollout(fleet_rollout, longest)
    if fleet_rollout_name_problem(fleet_rollout) or len(name) > MAX_ROLLOUT_NAME:
        raise FleetError(f"invalid fleet rollout name {fleet_rollout!r}: letters, digits, '-' and '_', starting "
                         f"with a letter or digit; each cluster's rollout is named <name>-<cluster> (e.g. {name!r}), "
                         f"at most {MAX_ROLLOUT_NAME} characters", path="--name")
