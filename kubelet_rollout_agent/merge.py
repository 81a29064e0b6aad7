"""The kubelet's drop-in merge, so the agent can validate what the kubelet will really run.

Why our own copy: the kubelet (``mergeKubeletConfigurations`` in cmd/kubelet/app/server.go)
applies each ``*.conf`` file below ``--config-dir`` as an RFC 7386 JSON merge patch over the
JSON of the base config, in lexical order, subdirectories included. That is not a strategic
merge: maps merge key by key, lists are replaced whole, ``null`` deletes a key. Validating our
drop-in alone would miss a bad combination with the base or with someone else's slot.

Pure: documents in, documents out; :func:`dropin_files` only lists a directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rollout.kubeletconfig.dropin import merge_dropins, merge_patch

__all__ = ["dropin_files", "load_document", "merge_dropins", "merge_patch"]


def dropin_files(config_dir: Path) -> list[Path]:
    """The files a kubelet reads from ``--config-dir``: ``*.conf`` at any depth, lexical by path.

    Sorting by path components (not by the joined string) is the order of Go's
    ``filepath.WalkDir``: a directory's entries in lexical order, depth first.
    """
    if not config_dir.is_dir():
        return []
    found = [p for p in config_dir.rglob("*.conf") if p.is_file()]
    return sorted(found, key=lambda p: p.relative_to(config_dir).parts)


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
