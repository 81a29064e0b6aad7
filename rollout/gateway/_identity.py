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


class ClusterIdentityVerbs(ClusterClient):
    """``cluster_identity`` (the ``KnowsItsCluster`` port)."""

    def cluster_identity(self) -> ClusterIdentity:
        configuration = self.api_client.configuration
        ca_file = getattr(configuration, "ssl_ca_cert", None)
        ca = ca_fingerprint(Path(ca_file).read_text(errors="replace")) if ca_file else None
        namespace = self._json("get namespace kube-system", self.core.read_namespace, "kube-system")
        uid = (namespace.get("metadata") or {}).get("uid")
        return ClusterIdentity(server=str(configuration.host).rstrip("/"), ca_sha256=ca,
                               kube_system_uid=str(uid) if uid else None)
