"""Write and read the kubeconfig kubesim hands to kubectl and the Python client.

The CA is embedded (``certificate-authority-data``) so the file is self-contained; the admin user
authenticates with a bearer token. Written 0600: it holds a credential.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class KubeconfigInfo:
    server: str
    ca_pem: bytes
    token: str


def render(server: str, ca_pem: bytes, token: str, *, user: str = "admin", namespace: str = "") -> str:
    """``namespace`` becomes the context's default (a ServiceAccount's own, as in-cluster)."""
    context: dict[str, str] = {"cluster": "kubesim", "user": user}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubesim",
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kubesim", "context": context}],
        "current-context": "kubesim",
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write(path: Path, server: str, ca_pem: bytes, token: str, *, user: str = "admin") -> None:
    write_text(path, render(server, ca_pem, token, user=user))


def write_text(path: Path, text: str) -> None:
    """Atomically, mode 0600 (the file holds a credential)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def read(path: Path) -> KubeconfigInfo:
    """The current context's server, CA and token (raises ValueError on anything unusable)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
        context_name = doc["current-context"]
        context = next(c["context"] for c in doc["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
        return KubeconfigInfo(cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), user["token"])
    except (OSError, yaml.YAMLError, KeyError, StopIteration, TypeError) as exc:
        raise ValueError(f"{path}: not a usable kubesim kubeconfig ({exc})") from exc
