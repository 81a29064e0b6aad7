"""Which kubelets know a config's fields: the fields added after 1.23, by the minor that brought them.

Why: a kubelet older than a field does not know it. Dynamic Kubelet Config (1.23) refuses the
config as invalid; a drop-in's unknown field is dropped by the kubelet's lenient decoding, so the
node runs without it and the agent rolls it back as not in effect. Either way the node fails the
rollout for a field it never had: the config is refused for such nodes before anything is written.
The minors come from ``rollout/catalog/kubelet-config-since.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rollout.kubeletconfig.catalog import BASE_MINOR, load_catalog

_VERSION = re.compile(r"^v?1\.(\d+)(?:\.|$)")
UNKNOWN_TO = "; unknown to the kubelets of "  # in each line of unknown_to_kubelets
ADVICE = ("leave those fields out, or those nodes out (nodes.excludeNames / excludeSelector) until their "
          "kubelets are upgraded, and run again")


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


def unknown_to_kubelets(document: Mapping[str, Any], versions: Mapping[str, str], *, shown: int = 3) -> list[str]:
    """One line per later field some node's kubelet is too old for: the field, its minor, the nodes
    (``versions``: node -> kubeletVersion; a node reporting none is not judged)."""
    lines = []
    for name, since in later_fields(document).items():
        older = sorted((node, version) for node, version in versions.items()
                       if (minor := kubelet_minor(version)) is not None and minor < since)
        if older:
            named = ", ".join(f"{node} ({version})" for node, version in older[:shown])
            more = f" and {len(older) - shown} more" if len(older) > shown else ""
            lines.append(f"{name}: a field of kubelets 1.{since} and later{UNKNOWN_TO}{named}{more}")
    return lines


def later_field_warnings(document: Mapping[str, Any]) -> list[str]:
    """Offline (no node at hand): each later field the config sets, and the minor it needs."""
    return [f"{name}: a field of kubelets 1.{since} and later (judged against the cluster's kubelets with "
            "--kubeconfig; an older kubelet does not know it)" for name, since in later_fields(document).items()]
