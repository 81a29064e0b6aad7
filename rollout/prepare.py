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

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.errors import ConfigError, GatewayError
from rollout.journal import Journal
from rollout.kubeletconfig import dkc_refusals, export_from_configz, review_changes, validate_config
from rollout.kubeletconfig.dropin import Override, advertised_after, merged_over_running, overrides
from rollout.kubeletconfig.runtime import WHOLE_CONFIG_RULES
from rollout.model import ConfigRef, NodeObservation
from rollout.names import ANN_AGENT, CONFIG_BASE_NAME, CONFIG_KEY, SYSTEM_NAMESPACE, label_value
from rollout.planner import candidate_nodes, plan_batches
from rollout.policy import RolloutPolicy
from rollout.ports import ClusterForPrepare, ConfigStore, JournalReader, RunningConfigs
from rollout.publish import build_configmap
from rollout.status import load_journal

log = logging.getLogger("rollout.prepare")

REVIEW_SAMPLE = 3
# what start (and validate, with a policy) says when dkc_refusals is not empty
DKC_REFUSED = ("the config changes fields Dynamic Kubelet Config cannot change safely "
               "(allow them by name in the policy's allowFields)")


@dataclass(frozen=True)
class Review:
    """What the review of a config against a sample of the nodes found."""

    caveats: list[str]
    diff: list[str]
    refusals: list[str]  # DKC-dangerous changes the policy does not allow
    # a drop-in that is invalid merged as a node's kubelet merges it, or that a file it reads
    # later overrides (the field would never take effect)
    merged_problems: list[str]


@dataclass(frozen=True)
class Prepared:
    """The config a rollout will roll out, and what the review found."""

    target: ConfigRef
    text: str
    caveats: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    diff: tuple[str, ...] = ()
    created: bool = False


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
    if resuming is None:  # a resumed rollout's cluster was probed when it started
        gateway.probe_cluster(candidate_nodes(list(observations.values()), policy))
    text, target = _source(gateway, config=config, configmap=configmap)
    warnings: list[str] = []
    caveats: Sequence[str] = ()
    diff: Sequence[str] = ()
    result = validate_config(text)
    if not result.ok:
        if validate:
            raise ConfigError("invalid KubeletConfiguration: nothing was written to the cluster",
                              source=configmap or "config", problems=[str(p) for p in result.errors])
        warnings += [f"NOT VALIDATED (skip_validation): {p}" for p in result.errors]
    drop_in_only = _drop_in_only(observations, policy)
    warnings += [str(p) for p in result.warnings if not (drop_in_only and p.rule in WHOLE_CONFIG_RULES)]
    if result.config is not None:
        review = review_against_nodes(gateway, policy, result.config.document, observations)
        caveats, diff = review.caveats, review.diff
        if review.merged_problems and validate:
            raise ConfigError("the drop-in would not run as written on some nodes (invalid merged as their "
                              "kubelets merge it, or overridden by a drop-in read after it): nothing was "
                              "written to the cluster", problems=review.merged_problems)
        if review.refusals and validate:
            raise ConfigError(DKC_REFUSED, problems=review.refusals)
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
                    diff=tuple(diff), created=created)


def _drop_in_only(observations: Mapping[str, NodeObservation], policy: RolloutPolicy) -> bool:
    """Every node taking part runs the agent: the config is a drop-in, not a whole config."""
    candidates = candidate_nodes(list(observations.values()), policy)
    return bool(candidates) and all(o.backend == "agent" for o in candidates)


def _source(gateway: ConfigStore, *, config: str | None, configmap: str | None) -> tuple[str, ConfigRef | None]:
    if not configmap:
        if config is None:
            raise ConfigError("give the config text or a published ConfigMap (NAMESPACE/NAME)")
        return config, None
    namespace, _, cm_name = configmap.partition("/")
    if not cm_name:
        namespace, cm_name = SYSTEM_NAMESPACE, namespace
    data = gateway.read_configmap(cm_name, namespace=namespace).get("data") or {}
    key = CONFIG_KEY if CONFIG_KEY in data else next(iter(data), CONFIG_KEY)
    return data.get(key, ""), gateway.resolve(ConfigRef(namespace, cm_name, key))


def review_against_nodes(gateway: RunningConfigs, policy: RolloutPolicy, document: Mapping[str, Any],
                         observations: Mapping[str, NodeObservation]) -> Review:
    """DKC danger review of the change against a few selected nodes' running config (configz).

    Best effort and quick: a kubelet that does not answer is skipped after two quick attempts (the
    rollout itself will judge that node); at most ``2 * REVIEW_SAMPLE`` nodes are asked.
    """
    quick = gateway.impatient()
    chosen = [o for o in sorted(candidate_nodes(list(observations.values()), policy), key=lambda o: o.name)
              if o.has_config_status and o.is_ready][: 2 * REVIEW_SAMPLE]
    caveats: set[str] = set()
    diff: dict[str, None] = {}
    running: dict[str, Mapping[str, Any]] = {}
    refusals: dict[str, None] = {}
    merged_problems: set[str] = set()
    for obs in chosen:
        if len(running) >= REVIEW_SAMPLE:
            break
        try:
            running[obs.name] = active = export_from_configz(quick.configz(obs.name))
        except (GatewayError, ValueError) as exc:
            log.warning("node %s: cannot read its running config for the DKC review: %s", obs.name, exc)
            continue
        effective = document
        if obs.backend == "agent":  # a drop-in: the node runs it merged the kubelet's way
            dropin = dropin_review(obs, active, document)
            effective = dropin.merged
            merged_problems.update(dropin.problems)
            caveats.update(dropin.notes)
        review = review_changes(effective, active, allowed_fields=set(policy.allow_fields))
        caveats.update(str(c) for c in review.caveats)
        for change in review.changes:
            old, new = (json.dumps(value, default=str) for value in (change.old, change.new))
            diff[f"{change.path}: {old} -> {new}"] = None  # values as JSON, never Python reprs
        if obs.backend == "agent":  # each node its own merge; DKC nodes share one review below
            refusals.update((str(r), None) for r in dkc_refusals(effective, allow_fields=policy.allow_fields,
                                                                 running={obs.name: active}))
    by_dkc = {n: cfg for n, cfg in running.items() if observations[n].backend != "agent"}
    if by_dkc:  # the one refusal rule (validate, plan and diff apply it too)
        refusals.update((str(r), None) for r in dkc_refusals(document, allow_fields=policy.allow_fields,
                                                             running=by_dkc))
    if not running:
        log.warning("no node answered configz: the DKC danger review compares with the kubelet defaults")
        refusals.update((str(r), None) for r in dkc_refusals(document, allow_fields=policy.allow_fields))
    return Review(sorted(caveats), list(diff), list(refusals), sorted(merged_problems))


@dataclass(frozen=True)
class DropinReview:
    """A drop-in on one node run by the agent, merged the kubelet's way."""

    merged: dict[str, Any]  # what its kubelet will run
    overrides: list[Override]  # fields of ours a file read after it changes again
    problems: list[str]  # why it is refused there (each names the node, and the file)
    notes: list[str]  # files read after ours that the review could not see


def dropin_review(obs: NodeObservation, running: Mapping[str, Any], document: Mapping[str, Any]) -> DropinReview:
    """The node's running config with the drop-in applied, then the files its agent advertises
    as read after ours (they win); refused when that is invalid or a later file overrides a
    field of ours (the one rule, ``rollout.kubeletconfig.dropin``, the agent applies too)."""
    after = advertised_after(obs.annotations.get(ANN_AGENT))
    readable = [f for f in after if not f.problem]
    merged = merged_over_running(running, document, readable)
    found = overrides(document, readable)
    later = f" (with {', '.join(f.path for f in readable)} read after it)" if readable else ""
    problems = [f"{obs.name}: {o}" for o in found]
    problems += [f"{obs.name}: merged as its kubelet merges it{later}: {p}"
                 for p in validate_config(json.dumps(merged)).errors]
    notes = [f"{obs.name}: " + (f"{f.path}, read after the drop-in: " if f.path else "") +
             f"{f.problem}; only the agent checks it, on the node" for f in after if f.problem]
    return DropinReview(merged, found, problems, notes)


def plan_or_resume(gateway: JournalReader, *, name: str, policy: RolloutPolicy, prepared: Prepared,
                   observations: Mapping[str, NodeObservation], now: datetime) -> tuple[Journal, str | None, bool]:
    """The journal to run: the cluster's (resumed: True) or a new plan (not saved yet)."""
    loaded = load_journal(gateway, name)
    if loaded is not None:
        journal, rv = loaded
        if not journal.target.same_reference(prepared.target):
            raise ConfigError(f"rollout {name!r} targets {journal.target}, not {prepared.target}; "
                              "use a new rollout name")
        return journal, rv, True
    plan = plan_batches(list(observations.values()), policy, rollout=name, target=prepared.target, now=now,
                        caveats=prepared.caveats)
    return Journal.start(plan, now=now), None, False
