"""One verdict on a config: would ``rollout start`` take it, and what does it warn about.

Why one function: ``validate``, ``diff``, ``plan``, ``publish`` and ``start`` each used to judge a
config their own way, so one file could be ``valid`` for one, refused by another and published by
a third. :func:`judge` is the only judgement: 1.23 validation, the DKC danger rule
(``dkc_refusals`` with the policy's ``allowFields`` and ``disruption``) and, on nodes run by the
agent, the drop-in merged the kubelet's way. It judges against what it is given: the running
config of some nodes (what the rollout itself reads), or nothing (offline: a whole config
compared with the kubelet defaults, as Dynamic Kubelet Config would take it), and says which in
:attr:`Verdict.against`.

A drop-in (every node taking part runs the agent) keeps every field it omits from the node's own
config, so the warnings about omitted fields of a whole config do not apply to it.

Each node judged also gets what the change costs it (``rollout.kubeletconfig.disruption``: a
restart, a drain, a state reset or a reboot, and about how long), for ``validate`` and ``plan``
to show; a change that needs a drain is refused unless the policy has a ``disruption:`` section.
With one, the verdict is valid, and ``start`` drains each node before its write
(``rollout.machine.drains``).

Pure: the callers read the nodes (``rollout.usecases.prepare.review_against_nodes``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rollout.errors import ConfigError
from rollout.kubeletconfig import dkc_refusals, review_changes, validate_config
from rollout.kubeletconfig.disruption import Disruption, disruption_of, node_disruption
from rollout.kubeletconfig.dkc import DEFAULTS_BASELINE
from rollout.kubeletconfig.dropin import Override, advertised_after, merged_over_running, overrides, overriding_files
from rollout.kubeletconfig.runtime import WHOLE_CONFIG_RULES
from rollout.kubeletconfig.versions import ADVICE as VERSION_ADVICE
from rollout.kubeletconfig.versions import UNKNOWN_TO, later_field_warnings, unknown_to_kubelets
from rollout.model import NodeObservation
from rollout.names import ANN_AGENT
from rollout.policy import DEFAULT_POLICY, RolloutPolicy

INVALID = "invalid KubeletConfiguration"
# what every command says when dkc_refusals is not empty
DKC_REFUSED = ("the config changes fields Dynamic Kubelet Config cannot change safely "
               "(allow them by name in the policy's allowFields)")
DRAIN_REFUSED = ("the config changes fields that need the nodes drained before their kubelets restart, which the "
                 "policy does not let the rollout do (its `disruption:` section)")
DRAIN_ADVICE = ("add `disruption: {drain: auto}` to the policy (README, \"Disruption\"; allowFields does not let "
                "these through), or leave those fields as the nodes have them, and run again")
RESET_REFUSED = ("the config needs a state reset (a kubelet checkpoint deleted between stopping and starting the "
                 "kubelet), which only kubelet-rollout-agent does, on nodes that take their config through Dynamic "
                 "Kubelet Config")
RESET_ADVICE = ("install the agent on those nodes (deployments/kubernetes/agent-daemonset.yaml), or leave them out "
                "(nodes.excludeNames / excludeSelector)")
MERGED_REFUSED = ("the drop-in would not run as written on some nodes (invalid merged as their kubelets "
                  "merge it, or overridden by a drop-in read after it)")
OFFLINE = ("offline, as a whole config for Dynamic Kubelet Config compared with the kubelet defaults "
           "(--kubeconfig judges it against the cluster's nodes)")


@dataclass(frozen=True)
class Sample:
    """One node the verdict is judged against: what it is, and the config it runs (configz)."""

    node: NodeObservation
    running: Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """What ``rollout start`` would say of a config under ``policy``."""

    policy: str
    default_policy: bool  # no policy was named: the default one judged it
    against: str  # what it was compared with, for people
    problems: tuple[str, ...] = ()  # not a valid KubeletConfiguration
    refusals: tuple[str, ...] = ()  # DKC-dangerous changes the policy does not allow (drain_refusals too)
    drain_refusals: tuple[str, ...] = ()  # of those, the changes that need a drain the policy does not allow
    merged_problems: tuple[str, ...] = ()  # a drop-in refused on some node
    reset_refusals: tuple[str, ...] = ()  # a state reset needed on nodes without the agent
    warnings: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()
    diff: tuple[str, ...] = ()
    # the fields (top-level names) the config changes on some node judged; None: no node was read
    changed_fields: tuple[str, ...] | None = None
    dropin: bool = False  # judged as a drop-in: every node taking part runs the agent
    # what the change costs each node judged (offline: DEFAULTS_BASELINE), whatever the verdict
    disruption: Mapping[str, Disruption] = field(default_factory=dict)
    document: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def valid(self) -> bool:
        return not (self.problems or self.refusals or self.merged_problems or self.reset_refusals)

    @property
    def reasons(self) -> tuple[str, ...]:
        """The lines under the headline: what refuses it."""
        return self.problems or self.merged_problems or self.refusals or self.reset_refusals

    @property
    def headline(self) -> str:
        """Why it is refused, in one line ("" when it is not)."""
        if self.problems:
            return INVALID
        if self.merged_problems:
            return MERGED_REFUSED
        if self.reset_refusals and not self.refusals:
            return RESET_REFUSED
        if self.refusals and self.drain_refusals:
            return DRAIN_REFUSED if len(self.drain_refusals) == len(self.refusals) else f"{DKC_REFUSED}; {DRAIN_REFUSED}"
        if self.refusals:
            return DKC_REFUSED
        return ""

    @property
    def drains(self) -> bool:
        """Some node judged would be drained before its kubelet restarts."""
        return any(d.drains for d in self.disruption.values())

    @property
    def state_files(self) -> tuple[str, ...]:
        """The checkpoint files a drained node's state reset deletes (none: a drain alone)."""
        return tuple(dict.fromkeys(f for d in self.disruption.values() if d.drains for f in d.state_files))

    @property
    def drain_fields(self) -> tuple[str, ...]:
        """The changed fields that make a node drained."""
        return tuple(dict.fromkeys(f for d in self.disruption.values() if d.drains for f in d.fields))

    def drained(self) -> list[str]:
        """``node: drain + state reset (...), about 1m10s for cpuManagerPolicy`` for each node drained."""
        return [f"{node}: {d.words()} for {', '.join(d.fields)}" for node, d in self.disruption.items() if d.drains]

    @property
    def policy_said(self) -> str:
        """``policy canary, the default`` or ``policy cautious``."""
        return f"policy {self.policy}" + (", the default" if self.default_policy else "")

    def error(self, *, source: str = "config", suffix: str = "") -> ConfigError:
        """The one error a refused config raises, wherever it is judged."""
        problems = self.reasons
        # allowFields lets no drain change through: the policy needs its disruption section
        advice = (VERSION_ADVICE if any(UNKNOWN_TO in p for p in self.problems) else
                  "" if self.problems or self.merged_problems else DRAIN_ADVICE if self.drain_refusals else
                  RESET_ADVICE if self.reset_refusals and not self.refusals else "")
        return ConfigError(f"{self.headline}{suffix}; judged under {self.policy_said}, {self.against}", source=source,
                           problems=problems, advice=advice)

    def as_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "policy": self.policy, "default_policy": self.default_policy,
                "against": self.against, "dropin": self.dropin, "problems": list(self.problems),
                "refusals": list(self.refusals), "drain_refusals": list(self.drain_refusals),
                "merged_problems": list(self.merged_problems), "reset_refusals": list(self.reset_refusals),
                "warnings": list(self.warnings),
                "disruption": {node: d.as_json() for node, d in self.disruption.items()}}


@dataclass(frozen=True)
class DropinReview:
    """A drop-in on one node run by the agent, merged the kubelet's way."""

    merged: dict[str, Any]  # what its kubelet will run
    overrides: list[Override]  # fields of ours a file read after it changes again
    problems: list[str]  # why it is refused there (each names the node, and the file)
    notes: list[str]  # files read after ours that the review could not see


def dropin_review(obs: NodeObservation, running: Mapping[str, Any], document: Mapping[str, Any], *,
                  takes_precedence: bool = False) -> DropinReview:
    """The node's running config with the drop-in applied, then the files its agent advertises
    as read after ours (they win); refused when that is invalid or a later file overrides a
    field of ours (the one rule, ``rollout.kubeletconfig.dropin``, the agent applies too). A
    drop-in that ``takes_precedence`` has the overriding files set aside instead: merged without
    them, and a note names each."""
    after = advertised_after(obs.annotations.get(ANN_AGENT))
    readable = [f for f in after if not f.problem]
    aside = overriding_files(document, readable) if takes_precedence else ()
    readable = [f for f in readable if f.path not in aside]
    merged = merged_over_running(running, document, readable)
    found = overrides(document, readable)
    later = f" (with {', '.join(f.path for f in readable)} read after it)" if readable else ""
    problems = [f"{obs.name}: {o}" for o in found]
    problems += [f"{obs.name}: merged as its kubelet merges it{later}: {p}"
                 for p in validate_config(json.dumps(merged)).errors]
    notes = [f"{obs.name}: " + (f"{f.path}, read after the drop-in: " if f.path else "") +
             f"{f.problem}; only the agent checks it, on the node" for f in after if f.problem]
    # the running config still holds their other fields: only the agent's merge on the node is exact
    notes += [f"{obs.name}: {path} overrides the drop-in, which takes precedence: the agent sets it aside "
              "(every field it sets stops applying)" for path in aside]
    return DropinReview(merged, found, problems, notes)


def drop_in_only(nodes: Sequence[NodeObservation]) -> bool:
    """Every node taking part runs the agent: the config is a drop-in, not a whole config."""
    return bool(nodes) and all(o.backend == "agent" for o in nodes)


def judge(text: str, *, policy: RolloutPolicy, samples: Sequence[Sample] | None = None,
          candidates: Sequence[NodeObservation] | None = None, default_policy: bool = False,
          unread: Sequence[str] = (), takes_precedence: bool = False) -> Verdict:
    """The verdict on ``text`` under ``policy``.

    ``candidates``: the nodes taking part (None: offline, no cluster at hand); ``samples``: those
    whose running config was read (empty: none answered, so the kubelet defaults stand in);
    ``unread``: notes on nodes that could not be read; ``takes_precedence``: the config's ConfigMap
    has the agents set aside the drop-ins that override it
    (``rollout.kubeletconfig.dropin.takes_precedence``).
    """
    result = validate_config(text)
    dropin = candidates is not None and drop_in_only(candidates)
    warnings = [str(p) for p in result.warnings if not (dropin and p.rule in WHOLE_CONFIG_RULES)]
    if candidates is None and result.document is not None:
        warnings += later_field_warnings(result.document)
    said = Verdict(policy=policy.name or DEFAULT_POLICY, default_policy=default_policy, dropin=dropin,
                   against=_against(candidates, samples or ()), warnings=tuple(warnings))
    too_new = unknown_to_kubelets(result.document or {}, {n.name: n.kubelet_version for n in candidates or ()})
    if not result.ok or result.config is None or too_new:
        return replace(said, problems=(*(str(p) for p in result.errors), *too_new))
    document = result.config.document
    allowed = set(policy.allow_fields)
    drain = policy.drain_mode
    caveats: dict[str, None] = dict.fromkeys(unread)
    diff: dict[str, None] = {}
    changed: dict[str, None] = {}
    refusals: dict[str, bool] = {}  # refusal -> it is one for want of a drain
    merged_problems: dict[str, None] = {}
    by_dkc: dict[str, Mapping[str, Any]] = {}
    disruption: dict[str, Disruption] = {}
    for sample in samples or ():
        effective: Mapping[str, Any] = document
        if sample.node.backend == "agent":  # a drop-in: the node runs it merged the kubelet's way
            review = dropin_review(sample.node, sample.running, document, takes_precedence=takes_precedence)
            effective = review.merged
            merged_problems.update(dict.fromkeys(review.problems))
            caveats.update(dict.fromkeys(review.notes))
            # each agent node its own merge; DKC nodes share one review below
            refusals.update({str(r): bool(r.disruption) for r in dkc_refusals(
                effective, allow_fields=allowed, running={sample.node.name: sample.running}, drain=drain)})
        else:
            by_dkc[sample.node.name] = sample.running
        changes = review_changes(effective, sample.running, allowed_fields=allowed, drain=drain)
        disruption[sample.node.name] = disruption_of(changes.costs, drain=drain or "auto")
        caveats.update(dict.fromkeys(str(c) for c in changes.caveats))
        for change in changes.changes:
            changed[change.field] = None
            old, new = (json.dumps(value, default=str) for value in (change.old, change.new))
            diff[f"{change.path}: {old} -> {new}"] = None  # values as JSON, never Python reprs
    if by_dkc or not samples:  # no node answered: the kubelet defaults stand in for them
        refusals.update({str(r): bool(r.disruption) for r in dkc_refusals(
            document, allow_fields=allowed, running=by_dkc or None, drain=drain)})
    if not samples:
        disruption[DEFAULTS_BASELINE] = node_disruption({}, document, drain=drain or "auto")
    said = replace(said, refusals=tuple(refusals), drain_refusals=tuple(r for r, drains in refusals.items() if drains),
                   merged_problems=tuple(sorted(merged_problems)), caveats=tuple(sorted(caveats)), diff=tuple(diff),
                   changed_fields=tuple(changed) if samples else None, disruption=disruption, document=document)
    # the checks the policy runs only for changes this config does not make (`when: {changes}`)
    said = replace(said, caveats=(*said.caveats, *policy.for_changes(said.changed_fields)[1]))
    return replace(said, reset_refusals=_resets_without_agent(said, candidates))


def _resets_without_agent(verdict: Verdict, candidates: Sequence[NodeObservation] | None) -> tuple[str, ...]:
    """A state reset only the node agent can do, asked of nodes Dynamic Kubelet Config runs: one
    line naming the fields, the files and the nodes (none offline: no node is known)."""
    files = verdict.state_files
    by_dkc = sorted(n.name for n in candidates or () if n.backend != "agent")
    if not (files and by_dkc):
        return ()
    fields = dict.fromkeys(f for d in verdict.disruption.values() if d.drains and d.state_files for f in d.fields)
    more = " ..." if len(by_dkc) > 5 else ""
    return (f"{', '.join(fields)}: the kubelet must start with {', '.join(files)} deleted, which only "
            f"kubelet-rollout-agent does (between stopping and starting the kubelet); {len(by_dkc)} node(s) take their "
            f"config through Dynamic Kubelet Config ({', '.join(by_dkc[:5])}{more})",)


def _against(candidates: Sequence[NodeObservation] | None, samples: Sequence[Sample]) -> str:
    if candidates is None:
        return OFFLINE
    if not candidates:
        return "no node of the cluster takes part"
    agents = sum(1 for o in candidates if o.backend == "agent")
    how = ("all as a drop-in (kubelet-rollout-agent)" if agents == len(candidates) else
           "all through Dynamic Kubelet Config" if not agents else
           f"{agents} as a drop-in (kubelet-rollout-agent), {len(candidates) - agents} through DKC")
    read = (f"the running config of {len(samples)} of them" if samples
            else "the kubelet defaults (no node's running config could be read)")
    return f"against {len(candidates)} node(s) of the cluster ({how}), compared with {read}"
