"""Planner: nodes + policy -> ordered batches, the same batches for the same inputs, every time.

Why deterministic: a rollout is re-run after crashes, and a re-plan that shuffled nodes would put a
node into a different batch than the one the journal and its annotations say (system-upgrade-
controller learned this the hard way: an unstable order created more jobs than its concurrency).
So nodes are ordered by ``sha256(rollout, node uid or name)``, never by the API's list order; with
``spreadAcrossZones`` the per-zone hash orders are interleaved round-robin so every batch, the canary
first, draws from the zones in turn.

What the planner guarantees (and the property tests pin):
- every selected node needing the target is in exactly one batch;
- no batch is larger than ``maxUnavailable`` minus the selected nodes that are already unhealthy;
- nodes already running the target, excluded nodes and unhealthy nodes are reported with a reason.

Steps are cumulative shares of the nodes to roll (``[1, "10%", "50%", "100%"]``): a step that
would be larger than the unavailability budget is split into several batches of the same step.
Pure: no I/O, no clock (``now`` only judges lease staleness when given).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from datetime import datetime, timedelta
from itertools import zip_longest
from types import MappingProxyType
from typing import Any

from rollout.errors import PlanError
from rollout.model import ConfigRef, NodeObservation
from rollout.policy import CONTROL_PLANE_LABELS, RolloutPolicy, resolve_amount

DEFAULT_ZONE_LABEL = "topology.kubernetes.io/zone"
# Reference 12.7: spec write -> sync tick -> download -> exit -> babysitter -> bootstrap -> status.
RESTART_BUDGET = timedelta(seconds=40)

# Skip reasons: stable strings, the report and the tests match on them.
SKIP_ON_TARGET = "already active on the target config"
SKIP_EXCLUDED_NAME = "excluded by name (nodes.excludeNames)"
SKIP_EXCLUDED_LABEL = "excluded by label (nodes.excludeSelector)"
SKIP_CONTROL_PLANE = "control-plane node (set nodes.allowControlPlane to include it)"
SKIP_NO_DKC = "no status.config: Dynamic Kubelet Config is off on this kubelet"
SKIP_UNHEALTHY = "not Ready at planning time (counted against maxUnavailable)"


@dataclass(frozen=True)
class Batch:
    """One wave of nodes assigned together. ``step`` is the policy step it came from (0 = canary)."""

    index: int
    step: int
    nodes: tuple[str, ...]

    @property
    def canary(self) -> bool:
        return self.step == 0

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def name(self) -> str:
        """How people number it: from 1, canary marked (``1 (canary)``, ``2``)."""
        return f"{self.index + 1}" + (" (canary)" if self.canary else "")

    @property
    def label(self) -> str:
        """The batch named in a sentence: ``batch 1 (canary)``, ``batch 2``."""
        return f"batch {self.name}"


@dataclass(frozen=True)
class Skipped:
    """A selected node the plan leaves out, and why."""

    node: str
    reason: str


@dataclass(frozen=True)
class PlanEstimate:
    """How long the plan should take. Approval waits and maintenance windows are not included."""

    per_batch: tuple[timedelta, ...] = ()
    approval_gates: int = 0

    @property
    def total(self) -> timedelta:
        return sum(self.per_batch, timedelta(0))


@dataclass(frozen=True)
class Schedule:
    """When a plan's batches can run, from ``now``: each starts at the first moment a maintenance
    window is open once the batch before it is done (an approval gate counted as answered at
    once: how long a person takes is not known). ``starts`` has a moment per batch from the
    first one scheduled; it stops short, and ``ends_at`` is None, when no window ever opens."""

    now: datetime
    starts: tuple[datetime, ...]
    ends_at: datetime | None
    work: timedelta  # the scheduled batches' own time, without the waits

    @property
    def starts_at(self) -> datetime | None:
        """When the first scheduled batch can start (``now`` in an open window)."""
        return self.starts[0] if self.starts else None

    @property
    def total(self) -> timedelta | None:
        """From ``now`` to the end, the waits for maintenance windows included."""
        return self.ends_at - self.now if self.ends_at is not None else None

    @property
    def waiting(self) -> timedelta:
        """How much of :attr:`total` is waiting for a maintenance window to open."""
        return self.total - self.work if self.total is not None else timedelta(0)


@dataclass(frozen=True)
class DrainPlan:
    """The rollout drains every node before writing to it (the policy's ``disruption:`` and the
    disruption catalogue said so when it started), and has the node agent delete ``state_files``
    between stopping and starting the kubelet; ``fields`` are the changes that drive it."""

    state_files: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()

    def as_json(self) -> dict[str, list[str]]:
        return {"stateFiles": list(self.state_files), "fields": list(self.fields)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DrainPlan | None:
        if data is None:
            return None
        return cls(tuple(data.get("stateFiles") or ()), tuple(data.get("fields") or ()))


@dataclass(frozen=True)
class RolloutPlan:
    """The batches of one rollout, fixed at its start and stored in its journal."""

    rollout: str
    target: ConfigRef
    policy: RolloutPolicy
    batches: tuple[Batch, ...]
    skipped: tuple[Skipped, ...] = ()
    unselected: int = 0
    max_unavailable: int = 1
    batch_cap: int = 1
    estimate: PlanEstimate = PlanEstimate()
    caveats: tuple[str, ...] = ()
    zones: Mapping[str, str] = field(default_factory=dict)
    drain: DrainPlan | None = None  # None: no node is drained

    @property
    def policy_name(self) -> str:
        return self.policy.name

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        """Every planned node in plan order (once per plan: it never changes, and a 20,000-node
        journal's every save and status read asked for it)."""
        return tuple(n for b in self.batches for n in b.nodes)

    @property
    def unhealthy(self) -> tuple[str, ...]:
        return tuple(s.node for s in self.skipped if s.reason == SKIP_UNHEALTHY)

    @property
    def estimated_duration(self) -> timedelta:
        return self.estimate.total

    def batch_of(self, node: str) -> int | None:
        for batch in self.batches:
            if node in batch.nodes:
                return batch.index
        return None

    def failure_budget(self, batch: int) -> int:
        """Nodes of this batch that may fail (sync errors, crash loops, timeouts) before it fails."""
        budget = self.policy.failure_budget
        if not budget:
            return 0
        return resolve_amount(budget, self.batches[batch].size, round_up=False)

    def approval_after(self, batch: int) -> bool:
        """Is a human gate due once ``batch`` is done (i.e. before the next one starts)?"""
        if batch >= len(self.batches) - 1:
            return False
        this, nxt = self.batches[batch], self.batches[batch + 1]
        return this.step != nxt.step and self.policy.approval_after_step(this.step)


def node_order_key(rollout: str, node: NodeObservation) -> str:
    """The stable sort key: sha256 of the rollout name and the node's uid (name if no uid)."""
    ident = node.uid or node.name
    return hashlib.sha256(f"{rollout}\x00{ident}".encode()).hexdigest()


def is_control_plane(node: NodeObservation) -> bool:
    return any(label in node.labels for label in CONTROL_PLANE_LABELS)


def is_on_target(node: NodeObservation, target: ConfigRef) -> bool:
    """Already done: spec, assigned and active all name the target and there is no error."""
    return (
        target.same_reference(node.spec_source)
        and target.matches(node.assigned)
        and target.matches(node.active)
        and not node.error
    )


def lease_stale_after(node: NodeObservation, policy: RolloutPolicy) -> timedelta:
    """How long a node's Lease may go unrenewed before the node counts as down: the policy's
    ``leaseStaleAfter``, or the Lease's own duration when that is longer (a kubelet renews at a
    quarter of it). One rule for planning and for judging a node mid-rollout: the planner once
    read a rehearsal's Lease (40 s, renewed every 0.5 s of wall time at x20) as stale after the
    policy's 2 s when a loaded machine delayed a renewal, and left a healthy node out."""
    return max(policy.lease_stale_after, timedelta(seconds=node.lease_duration_s or 0))


def is_unhealthy(node: NodeObservation, *, now: datetime | None, policy: RolloutPolicy) -> bool:
    if node.ready != "True":
        return True
    if now is None or node.lease_renewed is None:
        return False
    return now - node.lease_renewed > lease_stale_after(node, policy)


def exclusion_reason(node: NodeObservation, policy: RolloutPolicy) -> str | None:
    """Why the policy never touches this node (names, labels, control plane); None if it may."""
    sel = policy.nodes
    if node.name in sel.exclude_names:
        return SKIP_EXCLUDED_NAME
    if not sel.exclusion_selector().empty and sel.exclusion_selector().matches(node.labels):
        return SKIP_EXCLUDED_LABEL
    if is_control_plane(node) and not sel.allow_control_plane:
        return SKIP_CONTROL_PLANE
    return None


def candidate_nodes(nodes: Sequence[NodeObservation], policy: RolloutPolicy) -> list[NodeObservation]:
    """The nodes the policy selects and does not exclude: what a cluster probe should check."""
    return [n for n in selected_nodes(nodes, policy) if exclusion_reason(n, policy) is None]


def selected_nodes(nodes: Sequence[NodeObservation], policy: RolloutPolicy) -> list[NodeObservation]:
    """The nodes the policy's selector picks and, when it names nodes (``nodes.names``), that it
    names (exclusions aside: :func:`exclusion_reason`)."""
    selector, names = policy.nodes.label_selector(), frozenset(policy.nodes.names)
    return [n for n in nodes if (not names or n.name in names) and selector.matches(n.labels)]


def _skip_reason(
    node: NodeObservation, policy: RolloutPolicy, target: ConfigRef, now: datetime | None
) -> str | None:
    excluded = exclusion_reason(node, policy)
    if excluded is not None:
        return excluded
    if is_on_target(node, target):
        return SKIP_ON_TARGET
    if not node.has_config_status:
        return SKIP_NO_DKC
    if is_unhealthy(node, now=now, policy=policy):
        return SKIP_UNHEALTHY
    return None


def _hash_order(rollout: str, nodes: Sequence[NodeObservation]) -> list[NodeObservation]:
    return sorted(nodes, key=lambda n: (node_order_key(rollout, n), n.name))


def _zone_spread(rollout: str, nodes: Sequence[NodeObservation], zone_label: str) -> list[NodeObservation]:
    """Round-robin over zones (zones in hash order, nodes in hash order inside each zone)."""
    by_zone: dict[str, list[NodeObservation]] = {}
    for node in nodes:
        by_zone.setdefault(node.labels.get(zone_label, ""), []).append(node)
    zone_keys = sorted(
        by_zone, key=lambda z: hashlib.sha256(f"{rollout}\x00zone\x00{z}".encode()).hexdigest()
    )
    columns = [_hash_order(rollout, by_zone[z]) for z in zone_keys]
    return [n for row in zip_longest(*columns) for n in row if n is not None]


def _step_sizes(policy: RolloutPolicy, total: int) -> list[tuple[int, int]]:
    """(step index, nodes in that step) from the cumulative steps; empty steps dropped."""
    sizes, done = [], 0
    for i, step in enumerate(policy.steps):
        upto = max(done, resolve_amount(step, total, round_up=True))
        if i == len(policy.steps) - 1:
            upto = total
        if upto > done:
            sizes.append((i, upto - done))
        done = upto
    return sizes


def _chunks(size: int, cap: int) -> Iterator[int]:
    while size > 0:
        yield min(size, cap)
        size -= cap


def _make_batches(order: Sequence[str], policy: RolloutPolicy, cap: int) -> tuple[Batch, ...]:
    batches: list[Batch] = []
    pos = 0
    for step, size in _step_sizes(policy, len(order)):
        for chunk in _chunks(size, cap):
            batches.append(Batch(len(batches), step, tuple(order[pos : pos + chunk])))
            pos += chunk
    return tuple(batches)


def estimate_batch(
    size: int, policy: RolloutPolicy, *, assign_rate_per_s: float | None = None
) -> timedelta:
    """Assignment writes + restart budget + (lastKnownGood trial) + soak for one batch, or the
    analysis where it runs longer (its window opens as the batch's nodes are active, and every
    check is measured ``count`` times, a check skipped for its cohort too).

    A batch's writes go out concurrently at the policy's client-side rate (``apiQps``) unless
    ``assign_rate_per_s`` says otherwise. The restart budget is a fixed allowance: the kubelets'
    real restart time is not measured (yet)."""
    rate = assign_rate_per_s or policy.api_qps
    # a rehearsal's kubelets restart and run their trial on the simulator's faster clock
    settled = policy.done.trial / policy.time_scale + policy.done.soak
    analysis = max((c.interval * c.count for c in policy.analysis.checks), default=timedelta(0))
    return timedelta(seconds=size / rate) + RESTART_BUDGET / policy.time_scale + max(settled, analysis)


def _resolve_cap(policy: RolloutPolicy, pool: int, unhealthy: int) -> tuple[int, int]:
    max_unavailable = max(1, resolve_amount(policy.max_unavailable, max(pool, 1), round_up=False))
    cap = max_unavailable - unhealthy
    if cap < 1 and pool > unhealthy:
        raise PlanError(
            f"{unhealthy} selected node(s) are already unhealthy and maxUnavailable is "
            f"{max_unavailable} ({policy.max_unavailable}): no batch could start without exceeding it"
        )
    return max_unavailable, max(cap, 1)


def plan_batches(
    nodes: Sequence[NodeObservation],
    policy: RolloutPolicy,
    *,
    rollout: str,
    target: ConfigRef,
    zone_label: str | None = None,
    now: datetime | None = None,
    caveats: Sequence[str] = (),
    assign_rate_per_s: float | None = None,
    batch_limit: int | None = None,
    drain: DrainPlan | None = None,
) -> RolloutPlan:
    """Order and batch the nodes that need ``target``; see the module docstring for the rules.

    ``zone_label`` overrides ``policy.zoneLabel``; ``now`` (optional) lets a stale Lease count as
    unhealthy; ``caveats`` (from config validation) travel with the plan to every approval gate;
    ``batch_limit`` caps every batch (a fleet's disruption budget: a larger batch could never start).
    """
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise PlanError("the node list names a node twice; observe the cluster again")
    selected = selected_nodes(nodes, policy)
    reasons = {n.name: _skip_reason(n, policy, target, now) for n in selected}
    skipped = tuple(
        Skipped(n.name, r) for n in _hash_order(rollout, selected) if (r := reasons[n.name]) is not None
    )
    eligible = [n for n in selected if reasons[n.name] is None]
    pool = sum(1 for r in reasons.values() if r in (None, SKIP_ON_TARGET, SKIP_UNHEALTHY))
    unhealthy = sum(1 for r in reasons.values() if r == SKIP_UNHEALTHY)
    max_unavailable, cap = _resolve_cap(policy, pool, unhealthy)
    if batch_limit is not None:
        cap = max(1, min(cap, batch_limit))
    label = zone_label or policy.zone_label or DEFAULT_ZONE_LABEL
    ordered = (
        _zone_spread(rollout, eligible, label)
        if policy.spread_across_zones
        else _hash_order(rollout, eligible)
    )
    batches = _make_batches([n.name for n in ordered], policy, cap)
    estimate = PlanEstimate(
        per_batch=tuple(estimate_batch(b.size, policy, assign_rate_per_s=assign_rate_per_s) for b in batches),
    )
    plan = RolloutPlan(
        rollout=rollout,
        target=target,
        policy=policy,
        batches=batches,
        skipped=skipped,
        unselected=len(nodes) - len(selected),
        max_unavailable=max_unavailable,
        batch_cap=cap,
        estimate=estimate,
        caveats=tuple(caveats),
        zones=MappingProxyType({n.name: n.labels.get(label, "") for n in ordered}),
        drain=drain,
    )
    gates = sum(1 for b in batches if plan.approval_after(b.index))
    return replace(plan, estimate=replace(estimate, approval_gates=gates))


def estimate_schedule(plan: RolloutPlan, policy: RolloutPolicy, now: datetime, *, from_batch: int = 0) -> Schedule:
    """When the batches from ``from_batch`` on can run and the rollout end, from ``now`` (the
    moment the first of them may start: now for a preview, the end of the running batch for a
    run), under ``policy``'s maintenance windows. A batch starts only in an open window and,
    once started, is never cut off by its close. Pure: ``now`` is given."""
    per_batch = plan.estimate.per_batch
    moment, work = now, timedelta(0)
    starts: list[datetime] = []
    for batch in plan.batches[from_batch:]:
        opens = policy.next_window(moment)
        if opens is None:
            return Schedule(now=now, starts=tuple(starts), ends_at=None, work=work)
        took = per_batch[batch.index] if batch.index < len(per_batch) else estimate_batch(batch.size, policy)
        starts.append(opens)
        moment, work = opens + took, work + took
    return Schedule(now=now, starts=tuple(starts), ends_at=moment, work=work)
