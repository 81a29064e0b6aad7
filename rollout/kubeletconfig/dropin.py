"""The kubelet's drop-in merge (``--config-dir``), for the orchestrator and the node agent alike.

The kubelet (``mergeKubeletConfigurations`` in cmd/kubelet/app/server.go) applies each ``*.conf``
file below ``--config-dir`` as an RFC 7386 JSON merge patch over the JSON of the base config, in
lexical order: maps merge key by key, lists are replaced whole, ``null`` deletes a key. A drop-in
is only valid together with what it is merged over, so both the orchestrator (reviewing a
drop-in against the nodes' running configs) and the agent (before it writes one) validate the
merge, through these two functions. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (neither is modified; a new value is returned)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_dropins(base: Mapping[str, Any], dropins: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The base config with every drop-in applied in the order given."""
    merged: dict[str, Any] = copy.deepcopy(dict(base))
    for doc in dropins:
        merged = merge_patch(merged, doc)
    return merged
