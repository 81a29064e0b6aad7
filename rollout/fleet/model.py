"""The fleet file: which clusters, in which stages, under which policies, and what a failure does.

Validated once, at the boundary (``rollout.fleet.loading``), with the policy's rigour: unknown
keys are refused with the closest valid name, and the rules that span fields (every cluster in
exactly one stage, the canary stage naming its clusters, a policy for every cluster, gates only
between stages) live in one ``model_validator`` so a fleet that cannot run never starts one
cluster. The stages are resolved to cluster names here (``rollout.fleet.stages``): what ``rollout
fleet plan`` shows is what the fleet flow runs.

YAML uses camelCase keys (``workPool``, ``failureAction``), Python snake_case; both are accepted.
"""

from __future__ import annotations

import enum
import re
from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator, Field, StrictInt, model_validator

from rollout.fleet.stages import resolve_stages
from rollout.identity import ClusterIdentity
from rollout.policy import Approval, CountOrPercent, Duration, LabelSelector, Selector
from rollout.policy.base import PROBLEM_SEP, PolicyModel

# A cluster's rollout in its own cluster is named ``<fleet rollout>-<cluster>``: a label value of
# at most 63 characters, so a cluster's name leaves room for the fleet rollout's.
MAX_CLUSTER_NAME = 40
MAX_CLUSTERS = 1000

_CLUSTER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Prefect refuses these in a work pool's name
_POOL_BANNED = set("/%&<>")


def _check_cluster_name(value: str) -> str:
    if len(value) > MAX_CLUSTER_NAME or not _CLUSTER_NAME.match(value):
        raise ValueError(f"a cluster name is a DNS label of at most {MAX_CLUSTER_NAME} characters "
                         f"(lower-case letters, digits, '-'), got {value!r}")
    return value


def _check_pool_name(value: str) -> str:
    if not value.strip() or _POOL_BANNED & set(value):
        raise ValueError(f"a Prefect work pool name (not empty, none of / % & < >), got {value!r}")
    return value


ClusterName = Annotated[str, AfterValidator(_check_cluster_name)]
WorkPoolName = Annotated[str, AfterValidator(_check_pool_name)]
PolicyRef = Annotated[str, Field(min_length=1)]


class FleetFailureAction(str, enum.Enum):
    HALT = "halt"  # start no more clusters; every cluster keeps what its own run left
    ROLLBACK = "rollback"  # also roll back, through rollback runs, the clusters this fleet rollout completed


class IdentitySpec(PolicyModel):
    """What identifies the cluster (``rollout.identity``): its run refuses any other before a write."""

    server: str | None = None
    ca_sha256: str | None = None
    kube_system_uid: str | None = Field(default=None, alias="kubeSystemUID")

    @model_validator(mode="after")
    def _one_at_least(self) -> IdentitySpec:
        self.identity()  # ValueError naming what is wrong
        return self

    def identity(self) -> ClusterIdentity:
        return ClusterIdentity.expected(self.server, self.ca_sha256, self.kube_system_uid)


class ClusterSpec(PolicyModel):
    """One cluster: its name, what identifies it, the work pool whose workers reach it (and only
    it), its labels."""

    name: ClusterName
    work_pool: WorkPoolName
    identity: IdentitySpec
    labels: dict[str, str] = Field(default_factory=dict)


class PolicyRule(PolicyModel):
    """The policy of the clusters this rule matches (the first matching rule wins)."""

    selector: Selector = ""
    match_labels: dict[str, str] = Field(default_factory=dict)
    policy: PolicyRef

    def matches(self, labels: dict[str, str]) -> bool:
        return LabelSelector.parse(self.selector, match_labels=self.match_labels).matches(labels)


class Stage(PolicyModel):
    """A stage: named clusters, or the clusters a selector matches (``count`` of them), or, with
    neither, every cluster no earlier stage took."""

    name: str = ""
    clusters: tuple[ClusterName, ...] = ()
    selector: Selector = ""
    match_labels: dict[str, str] = Field(default_factory=dict)
    count: CountOrPercent | None = None
    soak: Duration | None = None  # overrides the fleet's soak after this stage
    max_concurrent: CountOrPercent | None = None  # overrides the fleet's limit within this stage

    @property
    def chooses(self) -> bool:
        """Does it choose its clusters (selector, labels, count) rather than name them?"""
        return bool(self.selector or self.match_labels or self.count is not None)


class FleetFile(PolicyModel):
    """The whole fleet file. See ``docs/fleet-example.yaml`` and README (Fleet) for every field."""

    name: str = ""
    description: str = ""
    clusters: tuple[ClusterSpec, ...] = Field(min_length=1, max_length=MAX_CLUSTERS)
    policy: PolicyRef | None = None
    policies: tuple[PolicyRule, ...] = ()
    stages: tuple[Stage, ...] = Field(min_length=1)
    soak: Duration = timedelta(0)
    approval: Approval = Approval()
    failure_budget: Annotated[StrictInt, Field(ge=0)] | CountOrPercent = 0
    failure_action: FleetFailureAction = FleetFailureAction.HALT
    max_concurrent: CountOrPercent = "100%"
    # nodes changing at once across the whole fleet (between their assignment and their batch's
    # end): a count, or a percentage of the fleet's nodes (rollout.fleet.plan.FleetPlan.budget_nodes);
    # each cluster's batches are planned no larger. None: no limit across clusters
    disruption_budget: CountOrPercent | None = None

    @model_validator(mode="after")
    def _cross_field_rules(self) -> FleetFile:
        problems = [*_cluster_problems(self), *_policy_problems(self), *_approval_problems(self)]
        problems += resolve_stages(self.clusters, self.stages)[1]
        if problems:
            raise ValueError(PROBLEM_SEP.join(problems))
        return self

    def stage_clusters(self) -> tuple[tuple[str, ...], ...]:
        """The clusters of each stage, in order (validated: every cluster in exactly one)."""
        return resolve_stages(self.clusters, self.stages)[0]

    def policy_of(self, spec: ClusterSpec) -> str:
        """The policy reference a cluster rolls out under: the fleet's one, or its first matching rule."""
        if not self.policies:
            return self.policy or "canary"
        return next(rule.policy for rule in self.policies if rule.matches(spec.labels))


def _cluster_problems(fleet: FleetFile) -> list[str]:
    seen: dict[str, int] = {}
    problems = []
    for i, cluster in enumerate(fleet.clusters):
        if cluster.name in seen:
            problems.append(f"clusters.{i}.name: cluster {cluster.name!r} is listed twice (also clusters.{seen[cluster.name]})")
        seen.setdefault(cluster.name, i)
    return problems


def _policy_problems(fleet: FleetFile) -> list[str]:
    if fleet.policy is not None and fleet.policies:
        return ["policies: give `policy` (one for every cluster) or `policies` (by label), not both"]
    if not fleet.policies:
        return []
    unmatched = [c.name for c in fleet.clusters if not any(rule.matches(c.labels) for rule in fleet.policies)]
    if unmatched:
        return [f"policies: no rule matches cluster(s) {', '.join(unmatched)}; end with a rule without a selector "
                "for every other cluster"]
    return []


def _approval_problems(fleet: FleetFile) -> list[str]:
    after = fleet.approval.after
    if isinstance(after, str):
        return []
    problems = []
    if len(set(after)) != len(after):
        problems.append("approval.after: lists a stage twice")
    last = len(fleet.stages) - 1
    for stage in after:
        if stage >= last:
            problems.append(f"approval.after: stage {stage} is the last stage or beyond (stages are 0..{last}); "
                            "there is nothing left to approve after it")
    return problems
