"""kube-controller-manager controllers (other than node lifecycle) whose effects clients can see.

Only the root-CA publisher for now: every namespace of a real 1.23 cluster holds a ConfigMap
``kube-root-ca.crt`` with the cluster CA, so a client listing ConfigMaps in ``kube-system`` (or
anywhere) never sees *only* its own objects - kubesim should not let it assume otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubesim.apiserver import ApiError
from kubesim.apiserver.client import local_client

log = logging.getLogger("kubesim.controllers")
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
CONTROLLER_USER = "system:kube-controller-manager"


async def publish_root_ca(server: Any, ca_pem: bytes, retry: float = 1.0) -> None:
    """Ensure ``kube-root-ca.crt`` in every namespace, now and whenever one is created."""
    client = local_client(server, user=CONTROLLER_USER)
    while True:
        try:
            async for event in client.watch("/api/v1/namespaces", {}):
                if event["type"] == "ADDED":
                    await _ensure(client, event["object"]["metadata"]["name"], ca_pem)
        except ApiError as exc:  # injected API faults (include_control_plane); retry like an informer
            log.debug("root CA publisher: %s; retrying", exc)
        await asyncio.sleep(retry)


async def _ensure(client: Any, namespace: str, ca_pem: bytes) -> None:
    body = {"metadata": {"name": ROOT_CA_CONFIGMAP}, "data": {"ca.crt": ca_pem.decode()}}
    try:
        await client.create(f"/api/v1/namespaces/{namespace}/configmaps", body)
    except ApiError as exc:
        if exc.code not in (404, 409):  # 409: already there; 404: namespace deleted meanwhile
            raise
