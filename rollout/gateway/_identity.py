"""The identity of the cluster these credentials reach (``rollout.identity``): the server URL and
the CA the connection trusts, from the client's configuration, and the UID of ``kube-system``,
read from the API server (one GET, which the server answers only on a trusted connection)."""

from __future__ import annotations

import hashlib
import re
import ssl
from pathlib import Path

from rollout.identity import ClusterIdentity

from ._client import ClusterClient

_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def ca_fingerprint(pem: str) -> str | None:
    """The SHA-256 fingerprint (hex) of the first certificate of a PEM bundle; None without one."""
    found = _PEM_CERT.search(pem)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(found.group(0))).hexdigest() if found else None


COUNT_PAGE = 500  # nodes a page where the server gives no estimate of the rest


class ClusterIdentityVerbs(ClusterClient):
    """``cluster_identity`` and ``node_count`` (the ``KnowsItsCluster`` port)."""

    def node_count(self) -> int:
        """A list of one node: its ``remainingItemCount`` says how many more there are (an API
        server estimates it for a list without selectors); a server that leaves it out is paged
        through, its items counted."""
        count, token, limit = 0, None, 1
        while True:
            kwargs = {"limit": limit, **({"_continue": token} if token else {})}
            page = self._json("list nodes", self.core.list_node, **kwargs)
            meta = page.get("metadata") or {}
            count += len(page.get("items") or [])
            token = meta.get("continue")
            if not token:
                return count
            remaining = meta.get("remainingItemCount")
            if isinstance(remaining, int):
                return count + remaining
            limit = COUNT_PAGE

    def cluster_identity(self) -> ClusterIdentity:
        configuration = self.api_client.configuration
        ca_file = getattr(configuration, "ssl_ca_cert", None)
        ca = ca_fingerprint(Path(ca_file).read_text(errors="replace")) if ca_file else None
        namespace = self._json("get namespace kube-system", self.core.read_namespace, "kube-system")
        uid = (namespace.get("metadata") or {}).get("uid")
        return ClusterIdentity(server=str(configuration.host).rstrip("/"), ca_sha256=ca,
                               kube_system_uid=str(uid) if uid else None)
