"""ConfigMap naming and manifests for publishing a kubelet config (pure; the gateway sends them).

Why content-hash names: DKC restarts every kubelet pointing at a ConfigMap whenever that
ConfigMap changes, so a referenced ConfigMap must never be edited in place (reference section
12.8). Each config is published once, immutable, under a name derived from its content. We use
exactly the name ``kubectl create configmap BASE --from-file=kubelet=FILE --append-hash`` gives,
so operators can reproduce or pre-create it by hand, and publishing the same content twice
targets the same object (a no-op for the gateway: see ``same_published_content``).

kubectl's hash (k8s.io/kubectl/pkg/util/hash): sha256 over Go's ``json.Marshal`` of
``{"kind": "ConfigMap", "name": <base name>, "data": {...}}`` (plus ``binaryData`` when
non-empty; ``immutable`` only when set, which ``kubectl create`` never does), then the first 10
hex digits with 0->g, 1->h, 3->k, a->m, e->t so no words (or vowels) can form.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from rollout.errors import ConfigError
from rollout.inputs import decode_input
from rollout.names import (
    ANN_CONTENT_SHA256,
    COMPONENT,
    CONFIG_KEY,
    LABEL_BASE_NAME,
    LABEL_CONFIG_HASH,
    LABEL_MANAGED_BY,
    LABEL_ROLLOUT,
)

_ENCODE = str.maketrans({"0": "g", "1": "h", "3": "k", "a": "m", "e": "t"})
# Go's encoding/json escapes these even inside strings (HTML safety, JS line separators).
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def go_json(value: Any) -> str:
    """``value`` encoded byte-for-byte as Go's ``json.Marshal`` would (sorted keys, no spaces)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    for char, escaped in _GO_ESCAPES.items():
        text = text.replace(char, escaped)
    return text


def encode_hash(hex_digest: str) -> str:
    """kubectl's ``encodeHash``: first 10 hex chars with vowel/confusable substitution."""
    if len(hex_digest) < 10:
        raise ValueError("the hex string must contain at least 10 characters")
    return hex_digest[:10].translate(_ENCODE)


def configmap_hash(
    base: str, data: Mapping[str, str], *, binary_data: Mapping[str, str] | None = None
) -> str:
    """The 10-character suffix ``kubectl ... --append-hash`` appends for this name and content."""
    body: dict[str, Any] = {"kind": "ConfigMap", "name": base, "data": dict(data)}
    if binary_data:
        body["binaryData"] = dict(binary_data)  # base64 strings, as []byte marshals in Go
    return encode_hash(hashlib.sha256(go_json(body).encode("utf-8")).hexdigest())


def configmap_name(
    base: str, data: Mapping[str, str], *, binary_data: Mapping[str, str] | None = None
) -> str:
    """``BASE-<hash>``: the name ``kubectl create configmap BASE --from-file=... --append-hash`` gives."""
    _check_name(base)
    return f"{base}-{configmap_hash(base, data, binary_data=binary_data)}"


def _check_name(base: str) -> None:
    if not _DNS_SUBDOMAIN.match(base) or len(base) + 11 > 253:
        raise ValueError(
            f"invalid ConfigMap base name {base!r}: must be a DNS subdomain of at most 242 characters"
        )


def _check_label_value(value: str, *, what: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(
            f"invalid {what} {value!r}: must be a label value (<= 63 chars, alphanumerics, '-', '_', '.')"
        )


def build_configmap(
    namespace: str,
    *,
    base_name: str,
    config_text: str,
    rollout_name: str,
    key: str = CONFIG_KEY,
    extra_labels: Mapping[str, str] | None = None,
    extra_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The immutable ConfigMap manifest carrying ``config_text`` under ``key``.

    ``ConfigError`` when the text cannot be ConfigMap data (over 1 MiB, binary, not UTF-8): the
    API server would refuse it, and the hash below could not even be computed.
    """
    _check_label_value(rollout_name, what="rollout name")
    decode_input(config_text, source=f"ConfigMap {base_name}", error=ConfigError)  # kept as is: the hash is kubectl's
    data = {key: config_text}
    suffix = configmap_hash(base_name, data)
    labels = {
        **(extra_labels or {}),
        LABEL_MANAGED_BY: COMPONENT,
        LABEL_ROLLOUT: rollout_name,
        LABEL_CONFIG_HASH: suffix,
        LABEL_BASE_NAME: base_name[:63].rstrip("-_."),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(base_name, data),
            "namespace": namespace,
            "labels": labels,
            "annotations": {**(extra_annotations or {}),
                            ANN_CONTENT_SHA256: hashlib.sha256(config_text.encode("utf-8")).hexdigest()},
        },
        "data": data,
        "immutable": True,
    }


def same_published_content(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when an existing ConfigMap already publishes ``desired`` (labels may differ).

    The name encodes the content, so a second publish of the same config finds this object;
    it is a no-op only if the payload really is the same and it cannot change under us.
    """
    return (
        dict(existing.get("data") or {}) == dict(desired.get("data") or {})
        and dict(existing.get("binaryData") or {}) == dict(desired.get("binaryData") or {})
        and existing.get("immutable") is True
    )
