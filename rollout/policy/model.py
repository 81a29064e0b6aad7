"""The rollout policy model: how fast, how carefully, and what to do when a node says no.

The policy is validated once, at the boundary (``rollout.policy.loading``), and after that the
planner and the decision function trust it. Validation is strict on purpose: unknown keys are
refused, and rules that span fields (steps increasing, the canary no larger than the next batch,
a progress deadline long enough for a last-known-good promotion) live in one
``model_validator`` so a bad policy never reaches a cluster.

YAML uses camelCase keys (``maxUnavailable``), Python uses snake_case; both are accepted.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, model_validator

from rollout.drain import DrainRules
from rollout.policy.amounts import CountOrPercent, is_percent, percent_of
from rollout.policy.analysis import Analysis
from rollout.policy.base import PROBLEM_SEP, FieldPath, PolicyModel
from rollout.policy.durations import Duration, describe_duration, format_duration
from rollout.policy.selectors import LabelSelector, Selector
from rollout.policy.windows import MaintenanceWindows

DEFAULT_POLICY = "canary"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# DKC promotes lastKnownGood 10 min after the kubelet's last restart, reported up to ~22 s later
# (reference 12.4); a deadline shorter than this plus a restart can never be met.
LKG_TRIAL = timedelta(minutes=10, seconds=22)
MIN_LKG_DEADLINE = timedelta(minutes=11)


class FailureAction(str, enum.Enum):
    HALT = "halt"  # stop; leave every node as it is for a human
    REVERT_BATCH = "revert-batch"  # put the failing batch back, keep earlier batches, stop
    REVERT_ALL = "revert-all"  # put every node this rollout touched back, stop


class RevertTarget(str, enum.Enum):
    PREVIOUS = "previous"  # the node's configSource before this rollout (or local if it had none)
    LOCAL = "local"  # remove configSource: every reverted node goes to its local config


class DoneUntil(str, enum.Enum):
    ACTIVE = "active"  # status.config.active == target (uid + resourceVersion), no error
    LAST_KNOWN_GOOD = "lastKnownGood"  # ... and promoted to lastKnownGood (>= 10 min trial)


class UnhealthyNodeAction(str, enum.Enum):
    """What happens to a node of the next batch that is already down when the batch starts."""

    SKIP = "skip"  # not assigned; recorded and reported as skipped
    WAIT = "wait"  # the batch waits until the node is healthy again
    HALT = "halt"  # the rollout halts before the batch


class ApprovalTimeoutAction(str, enum.Enum):
    HALT = "halt"  # nobody approved in time: stop (nodes stay as they are)
    PROCEED = "proceed"  # nobody objected in time: go on
    FAIL = "fail"  # treat as a failure: apply failureAction


class ApprovalRejectAction(str, enum.Enum):
    HALT = "halt"  # a person said no: stop (nodes stay as they are; `rollout rollback` undoes them)
    FAIL = "fail"  # treat as a failure: apply failureAction (e.g. revert the batch)


class DrainMode(str, enum.Enum):
    """When a node is drained before its kubelet restarts (the disruption catalogue's classes)."""

    AUTO = "auto"  # when the change needs it: a drain or a state reset (rollout.kubeletconfig.disruption)
    ALWAYS = "always"  # every node, whatever the change
    NEVER = "never"  # never: a change that needs a drain is refused


class BlockedDrainAction(str, enum.Enum):
    """What a batch does when a PodDisruptionBudget still holds a node's drain at the timeout."""

    WAIT = "wait"  # keep waiting (status names the pod and its budget)
    SKIP = "skip"  # give the node back (uncordoned, unchanged) and go on without it
    HALT = "halt"  # give the batch's nodes back (uncordoned, unchanged) and halt


class DisruptionPolicy(PolicyModel):
    """What the rollout may do to a node beyond restarting its kubelet. A policy without this
    section refuses every change that needs a drain (README, "Disruption"). With it, a batch that
    needs a drain cordons its nodes, evicts their pods through the Eviction API (every
    PodDisruptionBudget respected), writes the config once they are empty, and uncordons each node
    only once its batch is done (``rollout.machine.drains``)."""

    drain: DrainMode = DrainMode.AUTO
    # how long a budget may hold a node's drain back before ``onBlocked``
    timeout: Duration = timedelta(minutes=10)
    on_blocked: BlockedDrainAction = BlockedDrainAction.HALT
    # the evicted pods' grace (DeleteOptions.gracePeriodSeconds); none: each pod's own
    grace_period: Duration | None = None
    # kubectl drain's --ignore-daemonsets is the default: their controller would put them back
    evict_daemon_set_pods: bool = False
    # kubectl drain's --delete-emptydir-data: a pod with an emptyDir loses its data; false holds the drain
    evict_local_storage: bool = False
    # kubectl drain's --force: a pod no controller owns is not re-created anywhere; false holds the drain
    evict_unmanaged_pods: bool = False


class NodeSelection(PolicyModel):
    """Which nodes the rollout may touch. Control-plane nodes are out unless allowed."""

    selector: Selector = ""
    match_labels: dict[str, str] = Field(default_factory=dict)
    # only these nodes, of those the selector picks (empty: every one): `rollout drift --fix`
    # rolls the proved config out to the drifted nodes alone, whatever their labels
    names: tuple[str, ...] = ()
    exclude_names: tuple[str, ...] = ()
    exclude_selector: Selector = ""
    allow_control_plane: bool = False

    def label_selector(self) -> LabelSelector:
        return LabelSelector.parse(self.selector, match_labels=self.match_labels)

    def exclusion_selector(self) -> LabelSelector:
        return LabelSelector.parse(self.exclude_selector)


class DoneCriteria(PolicyModel):
    """When a node (and so a batch) counts as done."""

    until: DoneUntil = DoneUntil.ACTIVE
    require_ready: bool = True
    soak: Duration = timedelta(0)

    @property
    def trial(self) -> timedelta:
        """What a node waits after its restart before its soak: the kubelet's lastKnownGood trial
        where the policy waits for it (on the kubelet's clock: a rehearsal divides it)."""
        return LKG_TRIAL if self.until is DoneUntil.LAST_KNOWN_GOOD else timedelta(0)


class Approval(PolicyModel):
    """Human gates between batches. ``after`` names policy steps (0 = the canary)."""

    after: Literal["none", "all"] | tuple[Annotated[int, Field(ge=0)], ...] = "none"
    timeout: Duration = timedelta(hours=24)
    on_timeout: ApprovalTimeoutAction = ApprovalTimeoutAction.HALT
    on_reject: ApprovalRejectAction = ApprovalRejectAction.HALT

    def required_after_step(self, step: int) -> bool:
        if self.after == "none":
            return False
        if self.after == "all":
            return True
        return step in self.after



# durations a rehearsal divides besides done.soak and approval.timeout (RolloutPolicy.rehearsal)
REHEARSAL_SCALED = ("progress_deadline", "sync_error_grace", "lease_stale_after", "not_ready_for", "recheck_every")


class RolloutPolicy(PolicyModel):
    """The whole policy. See ``policies/canary.yaml`` for every field with a comment."""

    name: str = ""
    description: str = ""
    nodes: NodeSelection = NodeSelection()
    zone_label: str = "topology.kubernetes.io/zone"
    spread_across_zones: bool = True
    steps: tuple[CountOrPercent, ...] = (1, "10%", "50%", "100%")
    max_unavailable: CountOrPercent = 1
    done: DoneCriteria = DoneCriteria()
    progress_deadline: Duration = timedelta(minutes=10)
    sync_error_grace: Duration = timedelta(minutes=1)
    lease_stale_after: Duration = timedelta(seconds=40)
    not_ready_for: Duration = timedelta(seconds=20)
    on_unhealthy_node: UnhealthyNodeAction = UnhealthyNodeAction.SKIP
    api_outage_tolerance: Duration = timedelta(minutes=5)
    # a ceiling: the run's rate follows the server's answers beneath it (rollout.gateway.AdaptiveRate)
    api_qps: Annotated[float, Field(gt=0, le=10_000)] = 500.0
    api_burst: Annotated[StrictInt, Field(ge=1, le=10_000)] = 500
    failure_budget: Annotated[StrictInt, Field(ge=0)] | CountOrPercent = 0
    failure_action: FailureAction = FailureAction.REVERT_BATCH
    revert_target: RevertTarget = RevertTarget.PREVIOUS
    approval: Approval = Approval()
    maintenance_windows: MaintenanceWindows = MaintenanceWindows()
    allow_fields: tuple[FieldPath, ...] = ()
    # none: a change that needs a node drained (a CPU or memory manager policy, ...) is refused
    disruption: DisruptionPolicy | None = None
    recheck_every: Duration = timedelta(seconds=30)
    analysis: Analysis = Analysis()
    # a rehearsal on kubesim (`rollout start --time-scale F`): the durations above were divided by
    # this factor, as kubesim divides the kubelets'; refused against any other cluster. 1: real time
    time_scale: Annotated[float, Field(ge=1, le=10_000)] = 1.0

    @model_validator(mode="after")
    def _cross_field_rules(self) -> RolloutPolicy:
        problems = [*_step_problems(self.steps), *_timing_problems(self)]
        problems += _approval_problems(self.approval, len(self.steps))
        if problems:
            raise ValueError(PROBLEM_SEP.join(problems))
        return self

    @property
    def drain_mode(self) -> str | None:
        """``disruption.drain`` as the DKC rule takes it (``rollout.kubeletconfig.dkc_refusals``);
        None when the policy has no ``disruption:`` section."""
        return self.disruption.drain.value if self.disruption is not None else None

    @property
    def drain_rules(self) -> DrainRules:
        """How a drain treats pods and their grace (the section's defaults without one)."""
        d = self.disruption or DisruptionPolicy()
        grace = None if d.grace_period is None else max(0, round(d.grace_period.total_seconds()))
        return DrainRules(grace_period_s=grace, evict_daemon_set_pods=d.evict_daemon_set_pods,
                          evict_local_storage=d.evict_local_storage, evict_unmanaged_pods=d.evict_unmanaged_pods)

    def in_window(self, now: datetime) -> bool:
        return self.maintenance_windows.in_window(now)

    def next_window(self, now: datetime) -> datetime | None:
        return self.maintenance_windows.next_window(now)

    def approval_after_step(self, step: int) -> bool:
        """Is a human gate due after ``step``? Never after the last step: nothing is left to gate."""
        return step < len(self.steps) - 1 and self.approval.required_after_step(step)

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict in the YAML spelling; ``RolloutPolicy.model_validate`` reads it back."""
        return self.model_dump(mode="json", by_alias=True)

    def for_changes(self, changed: Collection[str] | None) -> tuple[RolloutPolicy, tuple[str, ...]]:
        """This policy for a config that changes the fields ``changed`` (None: not known): its
        analysis without the checks whose ``when.changes`` it leaves alone, and a line for each."""
        analysis, left_out = self.analysis.for_changes(changed)
        return (self if analysis is self.analysis else self.model_copy(update={"analysis": analysis})), left_out

    def rehearsal(self, factor: float) -> RolloutPolicy:
        """This policy for a rehearsal on a clock ``factor`` times faster: every duration that
        a kubelet's clock measures is divided by it (soak, deadlines, graces, the Lease and
        NotReady thresholds, the re-check, the approval timeout, the analysis checks' intervals
        and so their windows). Not divided, on purpose: the maintenance windows (times of the
        wall clock), ``apiOutageTolerance`` and the Prometheus ``outageTolerance`` (kubesim's API
        server and Prometheus are real processes, whose outages last real time);
        tests/core/test_rehearsal_durations.py keeps every duration in one of the two. The node
        agents take their own timers on kubesim's clock (``rollout.agent_clock``).
        ``ValueError`` for a policy already divided by another factor."""
        if factor == self.time_scale:
            return self
        if self.time_scale != 1:
            raise ValueError(f"the policy is already divided for a rehearsal at x{self.time_scale:g}")
        done = self.done.model_copy(update={"soak": self.done.soak / factor})
        approval = self.approval.model_copy(update={"timeout": self.approval.timeout / factor})
        # the workloads the checks measure run on the same clock as the kubelets
        checks = tuple(c.model_copy(update={"interval": c.interval / factor}) for c in self.analysis.checks)
        analysis = self.analysis.model_copy(update={"checks": checks})
        # the pods' grace runs on kubesim's clock, and the budgets' holds with it
        disruption = None if self.disruption is None else self.disruption.model_copy(update={
            "timeout": self.disruption.timeout / factor,
            "grace_period": None if self.disruption.grace_period is None else self.disruption.grace_period / factor})
        scaled = self.model_copy(update={
            "done": done, "approval": approval, "analysis": analysis, "time_scale": factor, "disruption": disruption,
            **{name: getattr(self, name) / factor for name in REHEARSAL_SCALED},
        })
        return RolloutPolicy.model_validate(scaled.dump())  # the cross-field rules, at the new scale


def _step_problems(steps: tuple[int | str, ...]) -> list[str]:
    if len(steps) < 2:
        return ["steps: need a canary step and at least one more, e.g. [1, '100%']"]
    problems = []
    if steps[-1] != "100%" and not (is_percent(steps[-1]) and percent_of(str(steps[-1])) == 100):
        problems.append("steps: the last step must be '100%' so every selected node is covered")
    if is_percent(steps[0]) and percent_of(str(steps[0])) >= 100:
        problems.append("steps: the first step is the canary and cannot be '100%'")
    problems += _increasing_problems(steps)
    first, second = steps[0], steps[1]
    if is_percent(first) == is_percent(second):
        a = percent_of(str(first)) if is_percent(first) else float(first)
        b = percent_of(str(second)) if is_percent(second) else float(second)
        if a > b - a:
            problems.append(f"steps: the canary ({first}) is larger than the next batch ({second} - {first})")
    return problems


def _increasing_problems(steps: tuple[int | str, ...]) -> list[str]:
    problems = []
    last: dict[bool, float] = {}
    for i, step in enumerate(steps):
        pct = is_percent(step)
        value = percent_of(str(step)) if pct else float(step)
        if pct in last and value <= last[pct]:
            problems.append(f"steps.{i}: steps are cumulative and must increase ({step})")
        last[pct] = value
    return problems


def _timing_problems(policy: RolloutPolicy) -> list[str]:
    problems = []
    if policy.progress_deadline <= timedelta(0):
        problems.append("progressDeadline: must be longer than 0s")
    if policy.recheck_every <= timedelta(0):
        problems.append("recheckEvery: must be longer than 0s")
    # a rehearsal's kubelets run their 10-minute trial on the simulator's faster clock
    at_least = MIN_LKG_DEADLINE / policy.time_scale
    if policy.done.until is DoneUntil.LAST_KNOWN_GOOD and policy.progress_deadline < at_least:
        problems.append(
            "progressDeadline: done.until is lastKnownGood, which the kubelet promotes only after a "
            f"10-minute trial reported up to {describe_duration(LKG_TRIAL)} after the restart; "
            f"use at least {format_duration(at_least)}"
        )
    return problems


def _approval_problems(approval: Approval, n_steps: int) -> list[str]:
    if isinstance(approval.after, str):
        return []
    problems = []
    if len(set(approval.after)) != len(approval.after):
        problems.append("approval.after: lists a step twice")
    for step in approval.after:
        if step >= n_steps - 1:
            problems.append(
                f"approval.after: step {step} is the last step or beyond (steps are 0..{n_steps - 1});"
                " there is nothing left to approve after it"
            )
    return problems


