"""Everything before the first batch: probe, validate, review, publish, then plan or resume.

A rollout touches nothing until all of this passed: the cluster can run it (a zero-write DKC
probe of exactly the nodes the policy selects), the config is valid (1.23 rules) and changes
nothing Dynamic Kubelet Config cannot change safely (reviewed against a sample of the nodes'
running configs), and the rollout name is not already used for another config. Then the config
is published (immutable, content-hash name) and the plan journaled - or, when a journal of that
name exists, the run resumes it.

Which nodes take part is :func:`rollout.planner.candidate_nodes`, for the probe, the review, the
plan, ``diff`` and ``status`` alike. The cluster is passed in, typed with the ports
(``rollout.ports``) each step uses; nothing here imports the Kubernetes client or Prefect.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from rollout.agent_clock import check_agent_clocks
from rollout.errors import ConfigError, FlagError, GatewayError
from rollout.journal import Journal
from rollout.kubeletconfig import export_from_configz
from rollout.kubeletconfig.dropin import takes_precedence
from rollout.model import ClusterFacts, ConfigRef, NodeObservation
from rollout.names import CONFIG_BASE_NAME, CONFIG_KEY, SIMULATOR_MARKER, SYSTEM_NAMESPACE, label_value
from rollout.planner import DrainPlan, candidate_nodes, plan_batches
from rollout.policy import RolloutPolicy
from rollout.ports import ClusterForPrepare, ConfigStore, JournalReader, RunningConfigs
from rollout.publish import build_configmap
from rollout.usecases.status import load_journal
from rollout.verdict import Sample, Verdict, judge

log = logging.getLogger("rollout.usecases.prepare")

REVIEW_SAMPLE = 3


@dataclass(frozen=True)
class Prepared:
    """The config a rollout will roll out, and what the review found."""

    target: ConfigRef
    text: str
    caveats: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    diff: tuple[str, ...] = ()
    created: bool = False
    drain: DrainPlan | None = None  # every node drained before its write (None: none is)
    changed_fields: tuple[str, ...] | None = None  # what the config changes on some node (None: not known)


def rollout_name_for(*, config: str | None, configmap: str | None) -> str:
    """The name a run given none takes: its config's content-hash ConfigMap name. A scheduled
    deployment then rolls out each new config as a new rollout, and the same config resumes."""
    if configmap:
        return configmap.partition("/")[2] or configmap
    if config is None:
        raise ConfigError("give the config text or a published ConfigMap (NAMESPACE/NAME)")
    manifest = build_configmap(SYSTEM_NAMESPACE, base_name=CONFIG_BASE_NAME, config_text=config,
                               rollout_name="unnamed")  # the name does not depend on the label
    return str(manifest["metadata"]["name"])


def prepare(gateway: ClusterForPrepare, *, name: str, policy: RolloutPolicy, observations: Mapping[str, NodeObservation],
            config: str | None, configmap: str | None, validate: bool) -> Prepared:
    """Probe, validate, review and publish; raises before any write when anything is wrong."""
    resuming = load_journal(gateway, name)
    candidates = candidate_nodes(list(observations.values()), policy)
    if resuming is None:  # a resumed rollout's cluster was probed when it started
        check_rehearsal(policy, gateway.probe_cluster(candidates))
        check_agent_clocks(policy, candidates)
    text, target, precedence = _source(gateway, config=config, configmap=configmap)
    verdict = review_against_nodes(gateway, policy, text, observations, takes_precedence=precedence)
    if not verdict.valid and validate:
        raise verdict.error(source=configmap or "config", suffix=": nothing was written to the cluster")
    drain = drain_plan(verdict, source=configmap or "config") if verdict.drains else None
    warnings = list(verdict.warnings)
    warnings += [f"NOT VALIDATED (skip_validation): {p}" for p in
                 (*verdict.problems, *verdict.merged_problems, *verdict.refusals, *verdict.reset_refusals)]
    warnings += [f"NOT DRAINED (skip_validation): {d}" for d in verdict.drained()]
    caveats, diff = verdict.caveats, verdict.diff
    created = False
    if target is None:
        manifest = build_configmap(SYSTEM_NAMESPACE, base_name=CONFIG_BASE_NAME, config_text=text,
                                   rollout_name=label_value(name))
        if resuming is not None and resuming[0].target.name != manifest["metadata"]["name"]:
            raise ConfigError(
                f"rollout {name!r} already exists for {resuming[0].target.name}, a different config; "
                "re-run it with the same config to resume, or pick a new rollout name")
        target = gateway.publish_configmap(manifest)
        created = True
    return Prepared(target=target, text=text, caveats=tuple(caveats), warnings=tuple(warnings),
                    diff=tuple(diff), created=created, drain=drain, changed_fields=verdict.changed_fields)


def drain_plan(verdict: Verdict, *, source: str) -> DrainPlan:
    """The drain a config needs (the disruption catalogue, the policy's ``disruption:``); a state
    reset on nodes without the agent is refused even unvalidated (``Verdict.reset_refusals``): the
    kubelet would refuse to start there."""
    if verdict.reset_refusals:
        raise replace(verdict, problems=(), refusals=(), merged_problems=()).error(
            source=source, suffix=": nothing was written to the cluster")
    return DrainPlan(state_files=verdict.state_files, fields=verdict.drain_fields)


def check_rehearsal(policy: RolloutPolicy, facts: ClusterFacts) -> None:
    """A policy divided for a rehearsal (``RolloutPolicy.rehearsal``) runs on kubesim only, and
    no faster than kubesim's own clock: told by the field of ``/version`` only kubesim serves."""
    if policy.time_scale == 1:
        return
    flag = f"x{policy.time_scale:g}"
    marker = facts.extra.get(SIMULATOR_MARKER)
    if marker is None:
        raise FlagError(f"{flag} is a rehearsal on kubesim, and this cluster (API server {facts.server_version or '?'}) "
                        f"is not kubesim: its /version has no {SIMULATOR_MARKER}; nothing was written",
                        source="--time-scale", advice="drop --time-scale to roll out in real time")
    try:
        simulated = float(marker)
    except ValueError:
        simulated = 1.0
    if policy.time_scale > simulated:
        raise FlagError(f"{flag} is faster than kubesim's own clock (x{simulated:g}): the policy would give its "
                        "kubelets less time than real ones get; nothing was written", source="--time-scale",
                        advice=f"give --time-scale {simulated:g} or less")


def _source(gateway: ConfigStore, *, config: str | None,
            configmap: str | None) -> tuple[str, ConfigRef | None, bool]:
    """The config's text, its published ConfigMap (None: not published yet), and whether that
    ConfigMap takes precedence over the drop-ins read after it (``takes_precedence``)."""
    if not configmap:
        if config is None:
            raise ConfigError("give the config text or a published ConfigMap (NAMESPACE/NAME)")
        return config, None, False
    namespace, _, cm_name = configmap.partition("/")
    if not cm_name:
        namespace, cm_name = SYSTEM_NAMESPACE, namespace
    published = gateway.read_configmap(cm_name, namespace=namespace)
    data = published.get("data") or {}
    key = CONFIG_KEY if CONFIG_KEY in data else next(iter(data), CONFIG_KEY)
    return data.get(key, ""), gateway.resolve(ConfigRef(namespace, cm_name, key)), takes_precedence(published)


def review_against_nodes(gateway: RunningConfigs, policy: RolloutPolicy, text: str,
                         observations: Mapping[str, NodeObservation], *, default_policy: bool = False,
                         takes_precedence: bool = False) -> Verdict:
    """The verdict (``rollout.verdict.judge``) against a few selected nodes' running config.

    Best effort and quick: a kubelet that does not answer is skipped after two quick attempts (the
    rollout itself will judge that node); at most ``2 * REVIEW_SAMPLE`` nodes are asked.
    """
    candidates = candidate_nodes(list(observations.values()), policy)
    quick = gateway.impatient()
    chosen = [o for o in sorted(candidates, key=lambda o: o.name) if o.has_config_status and o.is_ready]
    samples: list[Sample] = []
    for obs in chosen[: 2 * REVIEW_SAMPLE]:
        if len(samples) >= REVIEW_SAMPLE:
            break
        try:
            samples.append(Sample(obs, export_from_configz(quick.configz(obs.name))))
        except (GatewayError, ValueError) as exc:
            log.warning("node %s: cannot read its running config for the DKC review: %s", obs.name, exc)
    if candidates and not samples:
        log.warning("no node answered configz: the DKC danger review compares with the kubelet defaults")
    return judge(text, policy=policy, samples=samples, candidates=candidates, default_policy=default_policy,
                 takes_precedence=takes_precedence)


def plan_or_resume(gateway: JournalReader, *, name: str, policy: RolloutPolicy, prepared: Prepared,
                   observations: Mapping[str, NodeObservation], now: datetime,
                   batch_limit: int | None = None) -> tuple[Journal, str | None, bool]:
    """The journal to run: the cluster's (resumed: True) or a new plan (not saved yet), its batches
    no larger than ``batch_limit`` (a fleet's disruption budget)."""
    loaded = load_journal(gateway, name)
    if loaded is not None:
        journal, rv = loaded
        if not journal.target.same_reference(prepared.target):
            raise ConfigError(f"rollout {name!r} targets {journal.target}, not {prepared.target}; "
                              "use a new rollout name")
        return journal, rv, True
    # without the checks that watch fields the config leaves alone (the verdict's caveats name them)
    policy, _ = policy.for_changes(prepared.changed_fields)
    plan = plan_batches(list(observations.values()), policy, rollout=name, target=prepared.target, now=now,
                        caveats=prepared.caveats, batch_limit=batch_limit, drain=prepared.drain)
    return Journal.start(plan, now=now), None, False
