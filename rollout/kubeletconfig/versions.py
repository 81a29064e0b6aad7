"""Which kubelets know a config's fields and feature gates: by the minor that brought each.

Why: a kubelet older than a field does not know it. Dynamic Kubelet Config (1.23) refuses the
config as invalid; a drop-in's unknown field is dropped by the kubelet's lenient decoding, so the
node runs without it and the agent rolls it back as not in effect. Either way the node fails the
rollout for a field it never had: the config is refused for such nodes before anything is written.
The minors come from ``rollout/catalog/kubelet-config-since.yaml``.

Feature gates come and go both ways: a kubelet fails to start on a gate it does not know (one
newer than it, or one removed before it: ``DynamicKubeletConfig`` from 1.26) or on a gate locked
to its default set the other way, and a drop-in's gates are no more lenient than a whole file's.
Each node is judged by its kubelet's own gate list (``rollout/catalog/feature-gates-1.N.yaml``);
a node whose minor we have no list for is not judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rollout.kubeletconfig.catalog import BASE_MINOR, gates_by_minor, load_catalog

_VERSION = re.compile(r"^v?1\.(\d+)(?:\.|$)")
UNKNOWN_TO = "; unknown to the kubelets of "  # in each line of unknown_to_kubelets
ADVICE = ("leave those fields and gates out, or those nodes out (nodes.excludeNames / excludeSelector) until "
          "their kubelets know them, and run again")


def kubelet_minor(version: str) -> int | None:
    """``v1.31.2-eks-1234`` -> 31; None when the node reports no recognisable version."""
    match = _VERSION.match(version.strip())
    return int(match.group(1)) if match else None


def later_fields(document: Mapping[str, Any]) -> dict[str, int]:
    """The fields ``document`` sets that 1.23 kubelets do not know, each with its first minor."""
    catalog = load_catalog()
    found: dict[str, int] = {}
    for name, value in document.items():
        spec = catalog.field(name)
        if spec is not None and spec.since > BASE_MINOR and value is not None:
            found[name] = spec.since
    return found


def _set_gates(document: Mapping[str, Any]) -> dict[str, bool]:
    gates = document.get("featureGates")
    return {str(k): v for k, v in gates.items() if isinstance(v, bool)} if isinstance(gates, Mapping) else {}


def gate_refusal(name: str, value: bool, minor: int) -> str | None:
    """Why a kubelet of ``minor`` fails to start with gate ``name`` set to ``value`` (None: it does
    not, or we have no gate list of that minor)."""
    gates = gates_by_minor().get(minor)
    if gates is None:
        return None
    spec = gates.get(name)
    if spec is None:
        return f"a gate {_known_span(name)}"
    if spec.locked and value != spec.default:
        return f"locked to {str(spec.default).lower()} on kubelets 1.{minor}"
    return None


def _known_span(name: str) -> str:
    """``of kubelets 1.28 and later``, ``of kubelets 1.23 to 1.25``: the minors whose list has it."""
    minors = gates_by_minor()
    having = [m for m, gates in minors.items() if name in gates]
    if not having:
        return "no kubelet knows"
    newest = max(minors)
    return f"of kubelets 1.{min(having)}" + (" and later" if max(having) == newest else f" to 1.{max(having)}")


def _lines(problems: Mapping[str, list[tuple[str, str]]], shown: int) -> list[str]:
    lines = []
    for what, nodes in problems.items():
        named = ", ".join(f"{node} ({version})" for node, version in sorted(nodes)[:shown])
        more = f" and {len(nodes) - shown} more" if len(nodes) > shown else ""
        lines.append(f"{what}{UNKNOWN_TO}{named}{more}")
    return lines


def unknown_to_kubelets(document: Mapping[str, Any], versions: Mapping[str, str], *, shown: int = 3) -> list[str]:
    """One line per later field some node's kubelet is too old for, and per feature gate some
    node's kubelet would fail to start on: what, its minors, the nodes (``versions``: node ->
    kubeletVersion; a node reporting none is not judged)."""
    by_minor: dict[int, list[tuple[str, str]]] = {}  # each judged once per minor, not per node
    for node, version in versions.items():
        if (minor := kubelet_minor(version)) is not None:
            by_minor.setdefault(minor, []).append((node, version))
    problems: dict[str, list[tuple[str, str]]] = {}
    for name, since in later_fields(document).items():
        for minor, nodes in by_minor.items():
            if minor < since:
                problems.setdefault(f"{name}: a field of kubelets 1.{since} and later", []).extend(nodes)
    for name, value in _set_gates(document).items():
        for minor, nodes in by_minor.items():
            if (why := gate_refusal(name, value, minor)) is not None:
                problems.setdefault(f"featureGates.{name}: {why}", []).extend(nodes)
    return _lines(problems, shown)


def later_field_warnings(document: Mapping[str, Any]) -> list[str]:
    """Offline (no node at hand): each later field the config sets, and the minor it needs; each
    gate not every kubelet we know of has, and the minors that have it."""
    judged = "(judged against the cluster's kubelets with --kubeconfig; "
    fields = [f"{name}: a field of kubelets 1.{since} and later {judged}an older kubelet does not know it)"
              for name, since in later_fields(document).items()]
    minors = gates_by_minor()
    gates = [f"featureGates.{name}: a gate {_known_span(name)} {judged}a kubelet that does not know it fails to start)"
             for name in _set_gates(document) if any(name not in minor for minor in minors.values())]
    return fields + gates
