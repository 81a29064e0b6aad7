"""What a run is asked to do, checked once where it is asked.

A :class:`RunRequest` is built once per command (from the CLI's flags) or per flow run (from a
deployment's parameters, which no CLI checked): the rollout's name checked (or taken from the
config), the policy parsed once with the node selector and a rehearsal's time scale applied, a
config file judged offline, the Prometheus the analysis asks named. Everything after takes it as
it is; :meth:`RunRequest.flow_parameters` is how it travels to a flow run (the UI shows them, a
deployment run rebuilds the request from them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollout import flags
from rollout.errors import FlagError, RolloutNotFoundError
from rollout.identity import ClusterIdentity
from rollout.journal import Journal, RolloutStatus
from rollout.policy import DEFAULT_POLICY, RolloutPolicy, load_policy_ref
from rollout.usecases.commands import applied_policy
from rollout.usecases.prepare import rollout_name_for
from rollout.usecases.rollback import ROLLBACK_TARGETS
from rollout.verdict import judge


@dataclass(frozen=True)
class PrometheusAddress:
    """Where the policy's analysis checks ask (None: the environment, then the policy's own)."""

    url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None


@dataclass(frozen=True)
class RunRequest:
    """A rollout run (``rollback_to`` None) or a rollback run, as asked and checked."""

    name: str
    policy: RolloutPolicy  # as the run applies it: the node selector and the time scale in
    policy_source: str  # the policy as a flow parameter: a shipped name, or its YAML (as parsed)
    kubeconfig: str | None = None
    context: str | None = None
    config: str | None = None  # the KubeletConfiguration's text, or
    configmap: str | None = None  # an already published ConfigMap, NAMESPACE/NAME
    node_selector: str | None = None
    time_scale: float | None = None
    retry: bool = False  # a halted rollout's failed batches again (`rollout retry`)
    skip_validation: bool = False
    prometheus: PrometheusAddress = PrometheusAddress()
    rollback_to: str | None = None  # "previous" or "local": a rollback run
    expected_cluster: ClusterIdentity | None = None  # the cluster it is for, checked before any write (a fleet's run)
    disruption_budget: str | None = None  # a fleet's: the Prefect global concurrency limit its batches take nodes from

    @property
    def is_rollback(self) -> bool:
        return self.rollback_to is not None

    @property
    def flow_name(self) -> str:
        return "kubelet-config-rollback" if self.is_rollback else "kubelet-config-rollout"

    def flow_parameters(self) -> dict[str, Any]:
        """The parameters of the flow that shows this run (and of a deployment run that makes it)."""
        cluster = {"kubeconfig": self.kubeconfig, "context": self.context,
                   "cluster_identity": self.expected_cluster.given() if self.expected_cluster else None}
        if self.is_rollback:
            return {"name": self.name, "to": self.rollback_to, "policy": self.policy_source, **cluster}
        return {"name": self.name, "config": self.config, "configmap": self.configmap, "policy": self.policy_source,
                "node_selector": self.node_selector, **cluster, "skip_validation": self.skip_validation,
                "prometheus": self.prometheus.url, "prometheus_token_file": self.prometheus.token_file,
                "prometheus_ca_file": self.prometheus.ca_file, "time_scale": self.time_scale, "retry": self.retry,
                "disruption_budget": self.disruption_budget}


def policy_source(ref: str | None, policy: RolloutPolicy) -> str:
    """The policy as a flow parameter: a shipped name or inline YAML as it is; a file as the YAML of
    what was parsed (a run elsewhere cannot read a file of this machine)."""
    if ref is None:
        return DEFAULT_POLICY
    path = Path(ref)
    if "\n" not in ref and path.suffix in (".yaml", ".yml") and path.is_file():
        return yaml.safe_dump(policy.dump(), sort_keys=False)
    return ref


def rollout_request(*, name: str | None, config: str | None = None, configmap: str | None = None,
                    policy: str | None = None, node_selector: str | None = None, time_scale: float | None = None,
                    kubeconfig: str | None = None, context: str | None = None, retry: bool = False,
                    skip_validation: bool = False, prometheus: PrometheusAddress = PrometheusAddress(),
                    config_source: str = "config", expected_cluster: ClusterIdentity | None = None,
                    disruption_budget: str | None = None, node_names: Sequence[str] = ()) -> RunRequest:
    """A rollout run, checked: its name, the policy (parsed once) and, unless ``skip_validation``,
    the config against the kubelet's rules offline (``config_source`` names it in an error; the
    verdict against the nodes' running config comes with the run). ``node_names``: only these
    nodes take part (the policy's ``nodes.names``; `rollout drift --fix`), and the policy travels
    as its YAML, so a run elsewhere, and a resumed one, keeps them."""
    name = flags.rollout_name(name or rollout_name_for(config=config, configmap=configmap), flag="name")
    if configmap:
        flags.configmap_ref(configmap, flag="configmap")
    base = load_policy_ref(policy)
    source = policy_source(policy, base)
    if node_names:
        for node in node_names:
            flags.node_name(node, flag="nodes.names")
        base = base.model_copy(update={"nodes": base.nodes.model_copy(update={"names": tuple(sorted(node_names))})})
        source = yaml.safe_dump(base.dump(), sort_keys=False)
    applied = applied_policy(base, node_selector, time_scale)
    if config is not None and not skip_validation:
        verdict = judge(config, policy=applied, default_policy=policy is None)
        if verdict.problems:
            raise verdict.error(source=config_source, suffix=": nothing was started")
    return RunRequest(name=name, policy=applied, policy_source=source, kubeconfig=kubeconfig,
                      context=context, config=config, configmap=configmap, node_selector=node_selector,
                      time_scale=time_scale, retry=retry, skip_validation=skip_validation, prometheus=prometheus,
                      expected_cluster=expected_cluster, disruption_budget=disruption_budget)


def resumed_request(journal: Journal | None, *, name: str, policy: str | None = None, retrying: bool = False,
                    time_scale: float | None = None, kubeconfig: str | None = None, context: str | None = None,
                    prometheus: PrometheusAddress = PrometheusAddress()) -> RunRequest:
    """A rollout run on from its journal (``rollout start --name NAME`` alone, ``rollout retry``):
    its config and policy are the journal's (a ``policy`` given wins)."""
    if journal is None:
        raise RolloutNotFoundError(f"no rollout named {name!r} to {'retry' if retrying else 'resume'}",
                                   advice="" if retrying else "give --config FILE or --configmap NAMESPACE/NAME "
                                   "to start one")
    shown = journal.shown_status
    retryable = journal.status is RolloutStatus.HALTED and not journal.rollback_to
    if journal.finished and not (retrying and retryable):
        then = (f"`rollout retry {name}` runs its failed batch again; " if retryable else "") + \
            f"`rollout rollback {name}` undoes it; a new --name starts another rollout"
        raise FlagError(f"rollout {name} has ended ({'completed' if shown == 'complete' else shown}): nothing to "
                        f"{'retry' if retrying else 'resume'}", source="--name", advice=then)
    ran = journal.plan.policy.time_scale
    if time_scale is not None and time_scale != ran:
        raise FlagError(f"rollout {name} runs {'in real time' if ran == 1 else f'as a rehearsal at x{ran:g}'}, and a "
                        "resumed rollout keeps the policy it started with", source="--time-scale",
                        advice="drop --time-scale (it applies when a new rollout starts)")
    if policy is not None:
        base = load_policy_ref(policy)
        applied, source = applied_policy(base, None, None), policy_source(policy, base)
    else:
        applied = journal.plan.policy
        source = yaml.safe_dump(applied.dump(), sort_keys=False)
    return RunRequest(name=name, policy=applied, policy_source=source, kubeconfig=kubeconfig, context=context,
                      configmap=f"{journal.target.namespace}/{journal.target.name}", retry=retrying,
                      prometheus=prometheus)


def rollback_request(journal: Journal | None, *, name: str, to: str = "previous", policy: str | None = None,
                     kubeconfig: str | None = None, context: str | None = None,
                     expected_cluster: ClusterIdentity | None = None) -> RunRequest:
    """A rollback run of rollout ``name``: with the policy ``policy`` names, else the rollout's own
    (its journal's; the default one when its journal is gone)."""
    name = flags.rollout_name(name, flag="name")
    if to not in ROLLBACK_TARGETS:
        raise FlagError(f"--to must be one of {', '.join(ROLLBACK_TARGETS)}, not {to!r}", source="--to")
    if policy is not None or journal is None:
        base = load_policy_ref(policy)
        applied, source = base, policy_source(policy, base)
    else:
        applied = journal.plan.policy
        source = yaml.safe_dump(applied.dump(), sort_keys=False)
    return RunRequest(name=name, policy=applied, policy_source=source, kubeconfig=kubeconfig, context=context,
                      rollback_to=to, expected_cluster=expected_cluster)


__all__ = ["PrometheusAddress", "RunRequest", "applied_policy", "policy_source", "resumed_request",
           "rollback_request", "rollout_request"]
