"""DKC-danger review: which changes a rollout may make through Dynamic Kubelet Config.

Why: the 1.23 KubeletConfiguration doc comments mark fields that must not change dynamically
(``reboot``: only with a full node reboot; ``keep_empty``: standalone-only fields;
``not_recommended``: must stay in sync with the cluster). Changing one of those on a live node
is refused unless the policy names the field in its allow-list. ``caveat`` fields may change,
but the stated consequence travels with the plan and is shown at the approval gate. Start-up
checks whose outcome depends on the node (cgroup driver, CPU/memory manager state files, swap,
sysctls) are flagged as warnings on the change that triggers them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rollout.kubeletconfig.catalog import load_catalog
from rollout.kubeletconfig.diff import FieldChange, diff_configs
from rollout.kubeletconfig.problems import Problem, warning

REFUSED_KINDS = frozenset({"reboot", "keep_empty", "not_recommended"})


@dataclass(frozen=True)
class Refusal:
    """A dangerous change the policy does not allow; ``nodes`` names the nodes it would hit
    (empty when compared with the kubelet defaults, or when one node was reviewed alone)."""

    change: FieldChange
    reason: str
    nodes: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = ""
        if self.nodes:
            shown = ", ".join(self.nodes[:_NODES_SHOWN]) + (", ..." if len(self.nodes) > _NODES_SHOWN else "")
            where = f" on {len(self.nodes)} node(s) [{shown}]"
        change = f"{self.change.old!r} -> {self.change.new!r}"
        return f"{self.change.path} ({self.change.dkc_warning}, {change}){where}: {self.reason}"


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
    allowed: tuple[FieldChange, ...] = ()  # dangerous but named by the policy allow-list
    caveats: tuple[Caveat, ...] = ()
    warnings: tuple[Problem, ...] = ()

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


_NODE_DEPENDENT = {
    "cgroupDriver": "must match the container runtime's cgroup driver, else the kubelet fails at start (crash loop, no DKC fallback)",
    "cpuManagerPolicy": "a policy different from the node's CPU manager state file makes the kubelet fail at start unless the state file is removed",
    "memoryManagerPolicy": "a policy different from the node's memory manager state file makes the kubelet fail at start",
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
    new: Mapping[str, Any], active: Mapping[str, Any], *, allowed_fields: set[str]
) -> DkcReview:
    """Diff ``new`` against a node's ``active`` config and sort the changes by DKC danger."""
    changes = tuple(diff_configs(new, active))
    refusals: list[FieldChange] = []
    allowed: list[FieldChange] = []
    caveats: list[Caveat] = []
    for change in changes:
        if change.dkc_warning in REFUSED_KINDS:
            (allowed if _is_allowed(change, allowed_fields) else refusals).append(change)
        elif change.dkc_warning == "caveat":
            caveats.append(Caveat(change, change.dkc_reason))
    return DkcReview(
        changes=changes,
        refusals=tuple(_refusal(c) for c in refusals),
        allowed=tuple(allowed),
        caveats=tuple(caveats),
        warnings=change_warnings(changes),
    )


def dangerous_fields() -> dict[str, str]:
    """Field name -> dkc_warning kind for every field a rollout refuses to change by default."""
    return {f.name: f.dkc_warning for f in load_catalog().fields if f.dkc_warning in REFUSED_KINDS}


def review_nodes(
    new: Mapping[str, Any], actives: Mapping[str, Mapping[str, Any]], *, allowed_fields: set[str]
) -> dict[str, DkcReview]:
    """One review per node (node name -> review), since nodes may run different active configs."""
    return {
        name: review_changes(new, active, allowed_fields=allowed_fields) for name, active in actives.items()
    }


DEFAULTS_BASELINE = "the kubelet defaults"


def dkc_refusals(
    document: Mapping[str, Any],
    *,
    allow_fields: Iterable[str],
    running: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[Refusal, ...]:
    """The one rule every command applies: the changes DKC must not make to these nodes.

    ``document`` is the new KubeletConfiguration (as written), ``allow_fields`` the policy's
    ``allowFields``, ``running`` each node's running config (node name -> exported configz).
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
        for refusal in review_changes(document, active, allowed_fields=allowed).refusals:
            key = (refusal.change.path, repr(refusal.change.old), repr(refusal.change.new))
            grouped.setdefault(key, (refusal, []))[1].append(node)
    return tuple(
        _for_nodes(refusal, nodes, offline=not running) for _, (refusal, nodes) in sorted(grouped.items())
    )


def _for_nodes(refusal: Refusal, nodes: list[str], *, offline: bool) -> Refusal:
    if not offline:
        return Refusal(refusal.change, refusal.reason, tuple(nodes))
    why = (
        f"{refusal.reason}; compared with {DEFAULTS_BASELINE} ({refusal.change.old!r}) because no "
        "node's running config was given: if the nodes already run this value, `plan`/`diff` "
        "against the cluster show it"
    )
    return Refusal(refusal.change, why)
