"""`kubelet-config-rollout`: a staged canary rollout of a kubelet config through Dynamic Kubelet Config.

The flow is a thin shell over the core: validate -> lock -> publish -> plan, then a loop of
observe -> ``rollout.machine.step`` (observe + decide + record) -> persist the journal -> act.
Every decision (when a batch is done, what a failure triggers, when to ask for approval, when a
maintenance window blocks) is made by ``rollout.machine``; the flow only carries actions out
and makes them visible (artifacts, Prefect events, Kubernetes Events on the nodes).

Tasks are domain-sized: ``prepare-config``, ``plan-rollout``, ``assign-batch-N``,
``converge-batch-N`` (watch + decide until the batch has a verdict), ``revert-nodes`` and
``converge-revert``, ``write-report``. The journal lives in the cluster
(``kube-system/kubelet-rollout-journal-<name>`` + node annotations), so re-running the flow with
the same rollout name resumes where it stopped, whoever ran it before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext

from flows import events
from flows.approval import wait_for_approval
from flows.common import load_policy_ref, open_gateway, utcnow
from flows.outcome import RolloutFailed
from flows.report import BatchResult, final_report, rows_markdown, table_artifact_rows
from flows.status import load_journal, node_rows
from rollout.errors import ConfigError, ConflictError, GatewayError
from rollout.gateway import EVENT_ASSIGNED, EVENT_FAILED, EVENT_HALTED, EVENT_REVERTED, LockKeeper
from rollout.journal import ApprovalOutcome, BatchStatus, Journal
from rollout.kubeletconfig import export_from_configz, review_changes, validate_config
from rollout.machine import (
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    Halt,
    RevertNodes,
    Wait,
    WaitForWindow,
    step,
)
from rollout.model import ConfigRef, NodeObservation
from rollout.planner import CONTROL_PLANE_LABELS, plan_batches
from rollout.policy import RolloutPolicy
from rollout.publish import build_configmap

CONFIG_BASE_NAME = "kubelet-config"
LOCK_SECONDS = 60.0
MAX_WAIT_SLICE_S = 30.0
REVIEW_SAMPLE = 3


# ------------------------------------------------------------------------------ the run's state


@dataclass
class PreparedConfig:
    target: ConfigRef
    text: str
    caveats: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    diff: tuple[str, ...] = ()
    created: bool = False


@dataclass
class RolloutRun:
    """What one flow run holds: the gateway, the journal as last saved, the nodes as last seen."""

    name: str
    gateway: Any
    policy: RolloutPolicy
    journal: Journal | None = None
    journal_rv: str | None = None
    saved: dict[str, str] | None = None
    observations: dict[str, NodeObservation] = field(default_factory=dict)
    node_rv: str = ""
    prepared: PreparedConfig | None = None
    progress_id: Any = None
    last_reason: str = ""
    batch_status: tuple[str, ...] = ()
    results: dict[int, BatchResult] = field(default_factory=dict)
    started: datetime = field(default_factory=utcnow)

    # -- cluster state -------------------------------------------------------------------

    def observe_all(self) -> None:
        nodes, rv = self.gateway.list_nodes()
        self.observations = {n.name: n for n in nodes}
        self.node_rv = rv

    def save(self) -> None:
        """Persist the journal if it changed (write-ahead: before acting on a decision)."""
        assert self.journal is not None
        data = self.journal.to_configmap_data()
        if data == self.saved:
            return
        try:
            self.journal_rv = self.gateway.save_journal(self.name, data, resource_version=self.journal_rv)
        except ConflictError as exc:
            raise ConflictError(
                f"the journal of rollout {self.name!r} was changed by another process "
                "(is the same rollout running twice?); stopping before acting"
            ) from exc
        self.saved = data

    def step(self) -> Action:
        assert self.journal is not None
        self.journal, action = step(self.journal, self.observations, now=utcnow())
        self.save()
        self._log_reason(action)
        self._batch_transitions()
        self._update_progress()
        return action

    # -- visibility ----------------------------------------------------------------------

    def _log_reason(self, action: Action) -> None:
        line = f"{action.kind}: {action.reason}"
        if line != self.last_reason:
            get_run_logger().info(line)
            self.last_reason = line

    def _batch_transitions(self) -> None:
        """Emit batch events and write the batch table when a batch reaches a verdict."""
        assert self.journal is not None
        now_status = tuple(b.status.value for b in self.journal.batches)
        before = self.batch_status or tuple("pending" for _ in now_status)
        for i, (old, new) in enumerate(zip(before, now_status)):
            if old == new or new not in (BatchStatus.DONE.value, BatchStatus.FAILED.value):
                continue
            self.batch_result(i, "succeeded" if new == BatchStatus.DONE.value else "failed", publish=True)
        self.batch_status = now_status

    def batch_result(self, index: int, outcome: str, *, publish: bool = False, reason: str = "") -> BatchResult:
        assert self.journal is not None
        batch = self.journal.plan.batches[index]
        label = batch.name
        rows = [row for row, _ in node_rows(self.journal, self.observations, utcnow(), list(batch.nodes))]
        result = BatchResult(index=index, label=label, nodes=list(batch.nodes), outcome=outcome,
                             reason=reason or (self.journal.failure_reason if outcome == "failed" else ""),
                             rows=rows)
        self.results[index] = result
        if publish:
            create_table_artifact(
                table=table_artifact_rows(rows),
                key=artifact_key(self.name, f"batch-{index + 1}"),
                description=f"Rollout `{self.name}`, batch {label}: **{outcome}**",
            )
            event = events.BATCH_SUCCEEDED if outcome == "succeeded" else events.BATCH_FAILED
            events.emit_rollout_event(event, self.name, {
                "batch": index + 1, "nodes": list(batch.nodes), "outcome": outcome,
                "reason": result.reason, "target": str(self.journal.target),
            })
        return result

    def _update_progress(self) -> None:
        assert self.journal is not None
        planned = list(self.journal.plan.nodes)
        if not planned:
            fraction = 100.0
        else:
            done = sum(1 for n in planned if self.journal.nodes[n].phase.value in ("active", "promoted"))
            fraction = round(100.0 * done / len(planned), 1)
        try:
            if self.progress_id is None:
                self.progress_id = create_progress_artifact(
                    progress=fraction, key=artifact_key(self.name, "progress"),
                    description=f"Nodes of rollout `{self.name}` on the target config",
                )
            else:
                update_progress_artifact(self.progress_id, progress=fraction)
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("progress artifact: %s", exc)

    # -- waiting -------------------------------------------------------------------------

    def wait_until(self, until: datetime, *, stop_on_change: bool = True) -> None:
        """Follow the node watch until ``until`` or a change that matters to a decision."""
        assert self.journal is not None
        relevant = set(self.journal.plan.nodes)
        while True:
            remaining = (until - utcnow()).total_seconds()
            if remaining <= 0:
                return
            watch = self.gateway.watch_nodes(resource_version=self.node_rv or None,
                                             timeout_s=min(remaining, MAX_WAIT_SLICE_S),
                                             lease_refresh_s=5.0)
            changed = False
            try:
                for event in watch:
                    node = event.node
                    old = self.observations.get(node.name)
                    if event.type == "DELETED":
                        self.observations.pop(node.name, None)
                    else:
                        self.observations[node.name] = node
                    if node.name in relevant and _projection(old) != _projection(
                            None if event.type == "DELETED" else node):
                        changed = True
                        if stop_on_change:
                            break
            finally:
                watch.close()
                self.node_rv = watch.resource_version or self.node_rv
            if changed and stop_on_change:
                return


def _projection(obs: NodeObservation | None) -> tuple[Any, ...]:
    """The fields a decision depends on (heartbeat-only updates do not wake the loop)."""
    if obs is None:
        return (None,)
    return (obs.spec_source, obs.assigned, obs.active, obs.last_known_good, obs.error, obs.ready,
            obs.has_config_status, obs.annotations.get("kubelet-rollout.io/rollout"))


def artifact_key(rollout: str, suffix: str) -> str:
    clean = "".join(c if c.isalnum() else "-" for c in rollout.lower()).strip("-") or "rollout"
    return f"{clean}-{suffix}"[:100]


# ------------------------------------------------------------------------------------ tasks


@task(name="prepare-config", cache_policy=NO_CACHE)
def prepare_config(run: RolloutRun, *, config: str | None, configmap: str | None, validate: bool,
                   kubeconfig: str | None) -> PreparedConfig:
    """Probe DKC (zero writes), validate the config (1.23 rules + DKC danger review against the
    nodes) and publish it."""
    log = get_run_logger()
    gw = run.gateway
    _probe_dkc(run)
    if configmap:
        namespace, _, cm_name = configmap.partition("/")
        if not cm_name:
            namespace, cm_name = "kube-system", namespace
        obj = gw.read_configmap(cm_name, namespace=namespace)
        data = obj.get("data") or {}
        key = "kubelet" if "kubelet" in data else next(iter(data), "kubelet")
        text = data.get(key, "")
        target = gw.resolve(ConfigRef(namespace, cm_name, key))
        created = False
    else:
        assert config is not None
        text = config
        target = None
        created = False
    warnings: list[str] = []
    caveats: list[str] = []
    diff: list[str] = []
    result = validate_config(text)
    if not result.ok:
        if validate:
            raise ConfigError("invalid KubeletConfiguration: nothing was written to the cluster",
                              source=configmap or "config", problems=[str(p) for p in result.errors])
        warnings += [f"NOT VALIDATED (skip_validation): {p}" for p in result.errors]
    warnings += [str(p) for p in result.warnings]
    if result.config is not None:
        caveats, diff, refusals = _review_against_nodes(run, result.config.document)
        if refusals and validate:
            raise ConfigError("the config changes fields Dynamic Kubelet Config cannot change safely "
                              "(allow them by name in the policy's allowFields)", problems=refusals)
    if target is None:
        manifest = build_configmap("kube-system", base_name=CONFIG_BASE_NAME, config_text=text,
                                   rollout_name=_label_value(run.name))
        loaded = load_journal(gw, run.name)
        if loaded is not None and loaded[0].target.name != manifest["metadata"]["name"]:
            raise ConfigError(
                f"rollout {run.name!r} already exists for {loaded[0].target.name}, a different config; "
                "re-run it with the same config to resume, or pick a new rollout name")
        target = gw.publish_configmap(manifest)
        created = True
        events.emit_config_published(namespace=target.namespace, name=target.name, rollout=run.name,
                                     policy=run.policy.name, kubeconfig=kubeconfig or "", origin="flow")
    for w in warnings:
        log.warning("config: %s", w)
    log.info("target config: %s", target)
    return PreparedConfig(target=target, text=text, caveats=tuple(caveats), warnings=tuple(warnings),
                          diff=tuple(diff), created=created)


def _probe_dkc(run: RolloutRun) -> None:
    """Refuse a cluster where DKC cannot work (zero writes): before anything is published."""
    if load_journal(run.gateway, run.name) is not None:
        return  # resuming: this cluster was probed when the rollout started
    selector = run.policy.nodes.label_selector()
    candidates = [o for o in run.observations.values() if selector.matches(o.labels)
                  and (run.policy.nodes.allow_control_plane
                       or not any(lbl in o.labels for lbl in CONTROL_PLANE_LABELS))]
    run.gateway.probe_cluster(candidates)


def _review_against_nodes(run: RolloutRun, document: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """DKC danger review of the change against a few target nodes' running config (configz).

    Best effort and quick: a node whose kubelet does not answer is skipped after two attempts
    (the rollout itself will judge that node), at most ``2 * REVIEW_SAMPLE`` nodes are asked.
    """
    from rollout.gateway import KubeGateway, default_retrying

    log = get_run_logger()
    quick = KubeGateway(run.gateway.api_client, retrying=default_retrying(attempts=2, cap_s=1.0),
                        rate_limiter=run.gateway.rate_limiter, namespace=run.gateway.namespace)
    selector = run.policy.nodes.label_selector()
    candidates = [o for o in sorted(run.observations.values(), key=lambda o: o.name)
                  if selector.matches(o.labels) and o.has_config_status and o.is_ready
                  and not any(lbl in o.labels for lbl in CONTROL_PLANE_LABELS)][:2 * REVIEW_SAMPLE]
    caveats: set[str] = set()
    diff: dict[str, None] = {}
    refusals: set[str] = set()
    reviewed = 0
    for obs in candidates:
        if reviewed >= REVIEW_SAMPLE:
            break
        try:
            active = export_from_configz(quick.configz(obs.name))
        except (GatewayError, ValueError) as exc:
            log.warning("node %s: cannot read its running config for the DKC review: %s", obs.name, exc)
            continue
        reviewed += 1
        review = review_changes(document, active, allowed_fields=set(run.policy.allow_fields))
        caveats.update(str(c) for c in review.caveats)
        refusals.update(str(r) for r in review.refusals)
        for change in review.changes:
            diff[f"{change.path}: {change.old!r} -> {change.new!r}"] = None
    if not reviewed:
        log.warning("no node answered configz: the DKC danger review was skipped")
    return sorted(caveats), list(diff), sorted(refusals)


def _label_value(name: str) -> str:
    clean = "".join(c if (c.isalnum() or c in "-_.") else "-" for c in name)[:63].strip("-_.")
    return clean or "rollout"


@task(name="plan-rollout", cache_policy=NO_CACHE)
def plan_rollout(run: RolloutRun, prepared: PreparedConfig) -> Journal:
    """Resume from the cluster journal, or plan and journal a new rollout."""
    log = get_run_logger()
    loaded = load_journal(run.gateway, run.name)
    if loaded is not None:
        journal, rv = loaded
        if not journal.target.same_reference(prepared.target):
            raise ConfigError(f"rollout {run.name!r} targets {journal.target}, not {prepared.target}; "
                              "use a new rollout name")
        run.journal, run.journal_rv, run.saved = journal, rv, journal.to_configmap_data()
        run.batch_status = tuple(b.status.value for b in journal.batches)  # no repeat events on resume
        done = sum(1 for b in journal.batches if b.status is BatchStatus.DONE)
        log.info("resuming rollout %s from its journal: %s, %d/%d batch(es) done, %d node(s) assigned",
                 run.name, journal.status.value, done, len(journal.batches), len(journal.assigned_nodes()))
        return journal
    plan = plan_batches(list(run.observations.values()), run.policy, rollout=run.name,
                        target=prepared.target, now=utcnow(), caveats=prepared.caveats)
    run.journal = Journal.start(plan, now=utcnow())
    run.save()
    for b in plan.batches:
        log.info("%s: %s", b.label, ", ".join(b.nodes))
    for s in plan.skipped:
        log.info("skipped %s: %s", s.node, s.reason)
    log.info("plan: %d batch(es), %d node(s), estimated %s", len(plan.batches), len(plan.nodes),
             plan.estimated_duration)
    return run.journal


@task(name="assign-batch", task_run_name="assign-batch-{batch_no}", cache_policy=NO_CACHE)
def assign_batch(run: RolloutRun, action: AssignBatch, batch_no: int) -> list[str]:
    """Point the batch's nodes at the target (one PATCH each, annotations in the same request)."""
    for node in action.nodes:
        obs = run.gateway.assign(node, action.target, annotations=action.annotations[node])
        run.observations[node] = _merge_spec(run.observations.get(node), obs)
        run.gateway.record_node_event(
            node, EVENT_ASSIGNED,
            f"rollout {run.name}: batch {batch_no}: assigned {action.target.namespace}/{action.target.name}")
    return list(action.nodes)


@task(name="revert-nodes", cache_policy=NO_CACHE)
def revert_nodes(run: RolloutRun, action: RevertNodes) -> list[str]:
    """Point nodes back at their previous source (or local config) after a failure."""
    for node, to in sorted(action.nodes.items()):
        obs = run.gateway.assign(node, to, annotations={})
        run.observations[node] = _merge_spec(run.observations.get(node), obs)
        where = f"{to.namespace}/{to.name}" if to else "local config"
        run.gateway.record_node_event(node, EVENT_REVERTED, f"rollout {run.name}: reverted to {where}: {action.reason}",
                                      type="Warning")
    return sorted(action.nodes)


def _merge_spec(old: NodeObservation | None, new: NodeObservation) -> NodeObservation:
    """The PATCH answer has no Lease info; keep what the watch knew about it."""
    if old is None:
        return new
    from dataclasses import replace

    return replace(new, lease_renewed=old.lease_renewed, lease_duration_s=old.lease_duration_s)


@task(name="converge", task_run_name="converge-{what}", cache_policy=NO_CACHE)
def converge(run: RolloutRun, first: Wait, what: str) -> Action:
    """Watch the nodes and re-decide on every relevant change until the decision is not Wait."""
    action: Action = first
    while isinstance(action, Wait):
        run.wait_until(action.until)
        action = run.step()
    return action


@task(name="write-report", cache_policy=NO_CACHE)
def write_report(run: RolloutRun, *, outcome: str, message: str) -> str:
    assert run.journal is not None
    journal = run.journal
    results = []
    for i, b in enumerate(journal.plan.batches):
        if i in run.results:
            results.append(run.results[i])
            continue
        status = journal.batches[i].status
        outcome_i = {"done": "succeeded", "failed": "failed", "in-progress": "in progress"}.get(status.value, "not started")
        results.append(run.batch_result(i, outcome_i))
    for i, r in enumerate(results):
        if journal.nodes and any(journal.nodes[n].reverting for n in r.nodes):
            r.outcome = f"{r.outcome}, reverted"
            r.rows = [row for row, _ in node_rows(journal, run.observations, utcnow(), list(r.nodes))]
    decisions = [f"{d.at.strftime('%H:%M:%S')} {d.kind}: {d.reason}" for d in journal.decisions
                 if d.kind != "Wait"]  # waits are in the run's log; the report keeps the decisions
    report = final_report(rollout=run.name, outcome=outcome, message=message, target=journal.target,
                          policy=journal.policy_name, batches=results, decisions=decisions,
                          started=journal.created_at, finished=journal.finished_at or utcnow())
    create_markdown_artifact(markdown=report, key=artifact_key(run.name, "report"),
                             description=f"Rollout `{run.name}`: {outcome}")
    return report


# ------------------------------------------------------------------------------------- flow


@flow(name="kubelet-config-rollout", log_prints=False)
def kubelet_config_rollout(
    name: str,
    config: str | None = None,
    configmap: str | None = None,
    policy: str = "canary",
    node_selector: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    skip_validation: bool = False,
    approval_poll_seconds: int = 2,
) -> Any:
    """Roll a kubelet config out to the cluster's nodes in canary-first batches.

    Args:
        name: the rollout's name; re-run with the same name to resume it from the cluster journal.
        config: the KubeletConfiguration (YAML or JSON text) to publish and roll out, or
        configmap: an already published ConfigMap, ``NAMESPACE/NAME``.
        policy: a policy name from ``policies/`` (``canary``, ``cautious``, ``fast``), a file
            path, or the policy's YAML text.
        node_selector: label selector overriding the policy's.
        kubeconfig, context: cluster credentials; none = in-cluster service account.
        skip_validation: roll out even a config that fails validation or the DKC review
            (rehearsals on kubesim only; errors are still logged).

    The run ends Completed when every batch is done, Failed (message naming the nodes and the
    reason) when the rollout halted or was reverted. Approval gates pause the run; answer them in
    the UI or with ``rollout approve/reject``.
    """
    log = get_run_logger()
    pol = load_policy_ref(policy)
    if node_selector:
        pol = pol.model_copy(update={"nodes": pol.nodes.model_copy(update={"selector": node_selector})})
    if not configmap and not config:
        raise ConfigError("give the config text (config=...) or a published ConfigMap (configmap=NS/NAME)")
    gateway = open_gateway(kubeconfig, context)
    run = RolloutRun(name=name, gateway=gateway, policy=pol)
    holder = f"kubelet-rollout/{name}"
    with LockKeeper(gateway, holder, rollout=name, duration_s=LOCK_SECONDS) as lock:
        run.observe_all()
        run.prepared = prepare_config(run, config=config, configmap=configmap, validate=not skip_validation,
                                      kubeconfig=kubeconfig)
        plan_rollout(run, run.prepared)
        while True:
            lock.check()
            action = run.step()
            if isinstance(action, Wait):
                what = f"batch-{action.batch + 1}" if action.batch is not None else "revert"
                action = converge(run, action, what)
            if isinstance(action, AssignBatch):
                assign_batch(run, action, action.batch + 1)
            elif isinstance(action, AwaitApproval):
                _approval_gate(run, action, poll=approval_poll_seconds)
            elif isinstance(action, RevertNodes):
                revert_nodes(run, action)
            elif isinstance(action, WaitForWindow):
                deferred = _wait_for_window(run, action, flow_params=dict(
                    name=name, config=config, configmap=configmap, policy=policy, node_selector=node_selector,
                    kubeconfig=kubeconfig, context=context, skip_validation=skip_validation))
                if deferred is not None:
                    return deferred
            elif isinstance(action, Complete):
                return _finish_completed(run, action)
            elif isinstance(action, Halt):
                _finish_halted(run, action)


def _approval_gate(run: RolloutRun, action: AwaitApproval, *, poll: int) -> None:
    assert run.journal is not None
    journal = run.journal
    nxt = journal.plan.batches[action.next_batch]
    done = run.batch_result(action.batch, "succeeded")
    diff = "\n".join(f"    {d}" for d in (run.prepared.diff if run.prepared else ())[:40]) or "    (no field changes read)"
    description = "\n".join([
        f"## Rollout `{run.name}`: approve batch {action.next_batch + 1}?",
        "",
        f"Target: `{journal.target}`  ·  policy `{journal.policy_name}`  ·  answer by {action.deadline.isoformat()}",
        "",
        "### Evidence",
        *[f"* {line}" for line in action.evidence],
        "",
        rows_markdown(done.rows),
        "",
        "### Config diff (against a sample of the nodes' running config)",
        "",
        diff,
        "",
        f"### Next: batch {action.next_batch + 1} ({nxt.size} nodes)",
        ", ".join(nxt.nodes),
        "",
        "Approve: `approved: true`; reject: `approved: false` (halts the rollout).",
    ])
    timeout = max(1, int((action.deadline - utcnow()).total_seconds()))
    get_run_logger().info("waiting for approval before batch %d (timeout %ss): rollout approve %s",
                          action.next_batch + 1, timeout, run.name)
    answer = wait_for_approval(key=f"{artifact_key(run.name, 'batch')}-{action.next_batch + 1}",
                               description=description, timeout_s=timeout, poll_interval_s=poll)
    if answer.timed_out:
        outcome = ApprovalOutcome.TIMED_OUT
    else:
        outcome = ApprovalOutcome.APPROVED if answer.approved else ApprovalOutcome.REJECTED
    get_run_logger().info("approval before batch %d: %s", action.next_batch + 1, answer.summary)
    run.journal = run.journal.with_approval(action.batch, outcome, at=utcnow(),
                                            by="timeout" if answer.timed_out else answer.approver,
                                            note=answer.comment)
    run.save()


def _wait_for_window(run: RolloutRun, action: WaitForWindow, *, flow_params: dict[str, Any]) -> dict[str, Any] | None:
    """Outside the maintenance windows. On a deployment: schedule a run of the same deployment
    (same rollout name: it resumes from the journal) at the window and end this one, so no worker
    is held. Locally: sleep until the window (the lock keeps being renewed)."""
    ctx = FlowRunContext.get()
    deployment_id = getattr(ctx.flow_run, "deployment_id", None) if ctx else None
    log = get_run_logger()
    if deployment_id is not None:
        from prefect.deployments import run_deployment

        scheduled = run_deployment(deployment_id, parameters=flow_params, scheduled_time=action.until,
                                   timeout=0, as_subflow=False)
        message = (f"deferred: outside the maintenance windows; flow run {scheduled.name} continues the "
                   f"rollout at {action.until.isoformat()}")
        log.info(message)
        from prefect.states import Completed

        return Completed(message=message, data={  # type: ignore[return-value]
            "outcome": "deferred", "message": message, "report": "", "resumes_at": action.until.isoformat(),
            "continued_by": str(scheduled.id)})
    log.info("outside the maintenance windows; waiting until %s", action.until.isoformat())
    run.wait_until(action.until, stop_on_change=False)
    return None


def _touched(run: RolloutRun) -> list[str]:
    assert run.journal is not None
    return sorted(run.journal.assigned_nodes())


def _finish_completed(run: RolloutRun, action: Complete) -> dict[str, Any]:
    message = f"rollout {run.name} completed: " + "; ".join(action.report.lines()[1:])
    report = write_report(run, outcome="completed", message=message)
    events.emit_rollout_event(events.ROLLOUT_COMPLETED, run.name, {
        "target": str(run.journal.target), "nodes": len(run.journal.plan.nodes),
        "batches": len(run.journal.plan.batches)})
    get_run_logger().info(message)
    return {"outcome": "completed", "message": message, "report": report, "target": str(run.journal.target),
            "batches": [list(b.nodes) for b in run.journal.plan.batches]}


def _finish_halted(run: RolloutRun, action: Halt) -> None:
    assert run.journal is not None
    reverted = bool(run.journal.reverting_nodes())
    outcome = "reverted" if reverted else "halted"
    failed = dict(action.failed) or dict(run.journal.failed_nodes)
    details = "; ".join(f"{n}: {why}" for n, why in sorted(failed.items())[:10])
    reason = action.reason + (f" ({details})" if details and details not in action.reason else "")
    for node in sorted(failed):
        run.gateway.record_node_event(node, EVENT_FAILED, f"rollout {run.name}: {failed[node]}", type="Warning")
    for node in _touched(run):
        if node not in failed:
            run.gateway.record_node_event(node, EVENT_HALTED, f"rollout {run.name} {outcome}: {action.reason}",
                                          type="Warning")
    report = write_report(run, outcome=outcome, message=reason)
    events.emit_rollout_event(events.ROLLOUT_HALTED, run.name, {
        "outcome": outcome, "reason": action.reason, "failed": failed, "target": str(run.journal.target)})
    raise RolloutFailed(outcome, reason, nodes=sorted(failed), report=report)
