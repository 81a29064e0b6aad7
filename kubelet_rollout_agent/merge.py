"""Drop-in documents as the agent reads them; the kubelet's merge rules are the core's.

Why the core's: the kubelet (``mergeKubeletConfigurations`` in cmd/kubelet/app/server.go)
applies each ``*.conf`` file below ``--config-dir`` as an RFC 7386 JSON merge patch over the
JSON of the base config, in lexical order, subdirectories included. That is not a strategic
merge: maps merge key by key, lists are replaced whole, ``null`` deletes a key. The orchestrator's
review applies the same rules, so they live once, in ``rollout.kubeletconfig.dropin``; reading
the directory is ``configdir.py``.

Pure: text in, documents out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from rollout.kubeletconfig.dropin import merge_dropins, merge_patch

__all__ = ["changed_fields", "load_document", "merge_dropins", "merge_patch"]


def load_document(text: str) -> dict[str, Any]:
    """One config file (YAML or JSON) as a mapping; ``ValueError`` when it is not one.

    The kubelet fails its start on an empty or unparsable drop-in, so this raises too.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML/JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError("empty, or not a mapping at the top level")
    return doc


def changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``before`` into ``after`` (RFC 7386's inverse): what a
    main file the agent wrote changes over the node's base config, i.e. what the read-back must
    find in configz. Maps recurse, anything else is taken whole, a removed key is ``None``."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key, _ABSENT)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = changed_fields(old, value)
            if inner:
                out[key] = inner
        elif old is _ABSENT or old != value:
            out[key] = value
    for key in before:
        if key not in after:
            out[key] = None
    return out


_ABSENT = object()
