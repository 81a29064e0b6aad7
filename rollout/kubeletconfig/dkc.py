"""DKC-danger review: which changes a rollout may make through Dynamic Kubelet Config.

Why: the 1.23 KubeletConfiguration doc comments mark fields that must not change dynamically
(``reboot``: only with a full node reboot; ``keep_empty``: standalone-only fields;
``not_recommended``: must stay in sync with the cluster). Changing one of those on a live node
is refused unless the policy names the field in its allow-list. ``caveat`` fields may change,
but the stated consequence travels with the plan and is shown at the approval gate. Start-up
checks whose outcome depends on the node (cgroup driver, swap, sysctls) are flagged as warnings on
the change that triggers them.

A change the disruption catalogue (``rollout.kubeletconfig.disruption``) says needs the node
drained first (a drain, or a state reset: a CPU or memory manager policy, the reserved CPUs of the
static policy, a topology policy) is judged by that instead: the kubelet source, not the doc
comment, says what it takes. It is refused unless the policy has a ``disruption:`` section that
lets the rollout drain (``drain: auto`` or ``always``); ``allowFields`` does not let it through,
since the node would only crash-loop or reject its pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rollout.kubeletconfig.catalog import load_catalog
from rollout.kubeletconfig.diff import FieldChange, diff_configs
from rollout.kubeletconfig.disruption import DRAIN_CLASSES, STATE_RESET, FieldCost, change_costs
from rollout.kubeletconfig.problems import Problem, warning

REFUSED_KINDS = frozenset({"reboot", "keep_empty", "not_recommended"})


@dataclass(frozen=True)
class Refusal:
    """A dangerous change the policy does not allow; ``nodes`` names the nodes it would hit
    (empty when compared with the kubelet defaults, or when one node was reviewed alone)."""

    change: FieldChange
    reason: str
    nodes: tuple[str, ...] = ()
    disruption: str = ""  # refused for want of a drain (its class), not for DKC danger

    def __str__(self) -> str:
        where = ""
        if self.nodes:
            shown = ", ".join(self.nodes[:_NODES_SHOWN]) + (", ..." if len(self.nodes) > _NODES_SHOWN else "")
            where = f" on {len(self.nodes)} node(s) [{shown}]"
        change = f"{self.change.old!r} -> {self.change.new!r}"
        return f"{self.change.path} ({self.disruption or self.change.dkc_warning}, {change}){where}: {self.reason}"


_NODES_SHOWN = 5


@dataclass(frozen=True)
class Caveat:
    """An allowed change with a stated consequence, for the plan and the approval gate."""

    change: FieldChange
    consequence: str

    def __str__(self) -> str:
        return f"{self.change.path}: {self.change.old!r} -> {self.change.new!r}: {self.consequence}"


@dataclass(frozen=True)
class DkcReview:
    """The outcome of comparing a new config with one node's (or a group's) active config."""

    changes: tuple[FieldChange, ...]
    refusals: tuple[Refusal, ...] = ()
    allowed: tuple[FieldChange, ...] = ()  # dangerous but allowed: in allowFields, or drained as the policy says
    caveats: tuple[Caveat, ...] = ()
    warnings: tuple[Problem, ...] = ()
    costs: tuple[FieldCost, ...] = ()  # what each change costs the node (disruption catalogue), in order

    @property
    def refused(self) -> bool:
        return bool(self.refusals)


def _is_allowed(change: FieldChange, allowed_fields: set[str]) -> bool:
    return change.field in allowed_fields or change.path in allowed_fields


def _refusal(change: FieldChange) -> Refusal:
    why = {
        "reboot": "must not change without a full node reboot (keep it equal to the node's local config)",
        "keep_empty": "must stay empty under DKC (standalone kubelets only)",
        "not_recommended": "dynamically updating this field is not recommended",
    }[change.dkc_warning]
    detail = f"; {change.dkc_reason}" if change.dkc_reason else ""
    return Refusal(change, f"{why}{detail}; add it to the policy's allowed fields to override")


# what a policy without a `disruption:` section is told to add (README, "Disruption")
DISRUPTION_SECTION = "disruption: {drain: auto}"


def _drain_refusal(change: FieldChange, cost: FieldCost, *, drain: str | None) -> Refusal:
    """A change that needs the node drained first, in a policy that does not let the rollout drain."""
    needs = ("the node drained, and " + (cost.state_file or "its state file") + " deleted, before the kubelet "
             "restarts" if cost.kind == STATE_RESET else "the node drained before the kubelet restarts")
    fix = ("the policy's disruption.drain is never: set it to auto" if drain == "never"
           else f"add `{DISRUPTION_SECTION}` to the policy")
    source = f" ({cost.source.file} {cost.source.function})" if cost.source else ""
    return Refusal(change, f"needs {needs}: {cost.why}{source}; {fix}", disruption=cost.kind)


# the CPU and memory manager state files are the disruption catalogue's (a state reset), not warnings
_NODE_DEPENDENT = {
    "cgroupDriver": "must match the container runtime's cgroup driver, else the kubelet fails at start (crash loop, no DKC fallback)",
    "failSwapOn": "nodes with swap enabled fail at start and crash-loop",
    "protectKernelDefaults": "nodes whose sysctls differ from the kubelet's expectations fail at start",
}


def _strings(value: Any) -> set[str]:
    """The strings of a list; a node's running config (configz) may hold anything there."""
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def change_warnings(changes: Iterable[FieldChange]) -> tuple[Problem, ...]:
    """Warnings for changes whose start-up check depends on the node."""
    found = []
    for change in changes:
        if change.field in _NODE_DEPENDENT and change.new not in (False, None):
            found.append(
                warning(
                    change.path,
                    f"changes {change.old!r} -> {change.new!r}: {_NODE_DEPENDENT[change.field]}",
                    rule="node-dependent-change",
                )
            )
        elif change.path == "enforceNodeAllocatable":
            added = _strings(change.new) - _strings(change.old) - {"pods", "none"}
            if added:
                found.append(
                    warning(
                        change.path,
                        f"adds {', '.join(sorted(added))}: the reserved cgroups must exist on the node, else the kubelet fails at start",
                        rule="node-dependent-change",
                    )
                )
    return tuple(found)


def review_changes(
    new: Mapping[str, Any], active: Mapping[str, Any], *, allowed_fields: set[str], drain: str | None = None
) -> DkcReview:
    """Diff ``new`` against a node's ``active`` config and sort the changes by DKC danger, or by
    what they cost the node: ``drain`` is the policy's ``disruption.drain`` (None: the policy has
    no ``disruption:`` section, so a change that needs a drain is refused)."""
    changes = tuple(diff_configs(new, active))
    costs = tuple(change_costs(changes, old=active, new=new))
    refusals: list[Refusal] = []
    allowed: list[FieldChange] = []
    caveats: list[Caveat] = []
    for change, cost in zip(changes, costs):
        if cost.kind in DRAIN_CLASSES:
            if drain in (None, "never"):
                refusals.append(_drain_refusal(change, cost, drain=drain))
            else:
                allowed.append(change)
        elif change.dkc_warning in REFUSED_KINDS:
            if _is_allowed(change, allowed_fields):
                allowed.append(change)
            else:
                refusals.append(_refusal(change))
        elif change.dkc_warning == "caveat":
            caveats.append(Caveat(change, change.dkc_reason))
    return DkcReview(
        changes=changes,
        refusals=tuple(refusals),
        allowed=tuple(allowed),
        caveats=tuple(caveats),
        warnings=change_warnings(changes),
        costs=costs,
    )


def dangerous_fields() -> dict[str, str]:
    """Field name -> dkc_warning kind for every field a rollout refuses to change by default."""
    return {f.name: f.dkc_warning for f in load_catalog().fields if f.dkc_warning in REFUSED_KINDS}


def review_nodes(
    new: Mapping[str, Any], actives: Mapping[str, Mapping[str, Any]], *, allowed_fields: set[str],
    drain: str | None = None,
) -> dict[str, DkcReview]:
    """One review per node (node name -> review), since nodes may run different active configs."""
    return {
        name: review_changes(new, active, allowed_fields=allowed_fields, drain=drain)
        for name, active in actives.items()
    }


DEFAULTS_BASELINE = "the kubelet defaults"


def dkc_refusals(
    document: Mapping[str, Any],
    *,
    allow_fields: Iterable[str],
    running: Mapping[str, Mapping[str, Any]] | None = None,
    drain: str | None = None,
) -> tuple[Refusal, ...]:
    """The one rule every command applies: the changes DKC must not make to these nodes.

    ``document`` is the new KubeletConfiguration (as written), ``allow_fields`` the policy's
    ``allowFields``, ``running`` each node's running config (node name -> exported configz),
    ``drain`` the policy's ``disruption.drain`` (None: no ``disruption:`` section; a change that
    needs the node drained first is then refused, naming the section to add).
    Without running configs (``None`` or empty: offline, or no node answered) the document is
    compared with the kubelet defaults, so a dangerous field set away from its default is
    refused until the policy allows it or the nodes show they already run that value: "valid"
    must never mean "start will refuse it". The same change on several nodes is one refusal
    naming them all. Sorted by field path; empty when nothing is refused.
    """
    allowed = set(allow_fields)
    baselines: Mapping[str, Mapping[str, Any]] = running or {DEFAULTS_BASELINE: {}}
    grouped: dict[tuple[str, str, str], tuple[Refusal, list[str]]] = {}
    for node, active in sorted(baselines.items()):
        for refusal in review_changes(document, active, allowed_fields=allowed, drain=drain).refusals:
            key = (refusal.change.path, repr(refusal.change.old), repr(refusal.change.new))
            grouped.setdefault(key, (refusal, []))[1].append(node)
    return tuple(
        _for_nodes(refusal, nodes, offline=not running) for _, (refusal, nodes) in sorted(grouped.items())
    )


def _for_nodes(refusal: Refusal, nodes: list[str], *, offline: bool) -> Refusal:
    if not offline:
        return Refusal(refusal.change, refusal.reason, tuple(nodes), refusal.disruption)
    why = (
        f"{refusal.reason}; compared with {DEFAULTS_BASELINE} ({refusal.change.old!r}) because no "
        "node's running config was given: if the nodes already run this value, `plan`/`diff` "
        "against the cluster show it"
    )
    return Refusal(refusal.change, why, disruption=refusal.disruption)
