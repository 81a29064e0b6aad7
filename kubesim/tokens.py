"""A kubeconfig per ServiceAccount (``kubesim token``, ``Cluster.service_account_kubeconfig``).

Why: the orchestrator runs in-cluster as a ServiceAccount with least-privilege RBAC; rehearsing
that on kubesim needs a credential that *is* that ServiceAccount, so a missing rule shows up as
the same 403 as on a real cluster. Everything goes over HTTPS with the admin kubeconfig: create
the ServiceAccount if needed, then a TokenRequest - the calls ``kubectl create sa`` and
``kubectl create token`` make - so it works for a cluster in this process or another one.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kubesim import kubeconfig as kubeconfig_mod


class TokenError(RuntimeError):
    pass


def _request(
    info: kubeconfig_mod.KubeconfigInfo, method: str, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """One JSON request as the admin: ``(status, body)``; HTTP errors are returned, not raised."""
    context = ssl.create_default_context(cadata=info.ca_pem.decode())
    request = urllib.request.Request(
        info.server + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {info.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, {"message": exc.reason}
    except urllib.error.URLError as exc:
        raise TokenError(f"cannot reach kubesim at {info.server}: {exc.reason}") from None


def ensure_service_account(info: kubeconfig_mod.KubeconfigInfo, namespace: str, name: str) -> None:
    """Create the ServiceAccount unless it exists (409 is fine)."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    status, body = _request(info, "POST", path, {"metadata": {"name": name}})
    if status not in (201, 409):
        raise TokenError(f"cannot create serviceaccount {namespace}/{name}: {body.get('message', status)}")


def request_token(info: kubeconfig_mod.KubeconfigInfo, namespace: str, name: str) -> str:
    """The ServiceAccount's bearer token, through the TokenRequest subresource."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    status, body = _request(info, "POST", path, request)
    if status != 201:
        raise TokenError(f"cannot get a token for serviceaccount {namespace}/{name}: {body.get('message', status)}")
    token: str = body["status"]["token"]
    return token


def service_account_kubeconfig(admin_kubeconfig: Path, namespace: str, name: str) -> str:
    """A kubeconfig (text) that authenticates as ``system:serviceaccount:<namespace>:<name>``,
    creating the ServiceAccount first if it does not exist."""
    info = kubeconfig_mod.read(admin_kubeconfig)
    ensure_service_account(info, namespace, name)
    token = request_token(info, namespace, name)
    return kubeconfig_mod.render(info.server, info.ca_pem, token, user=f"{namespace}-{name}", namespace=namespace)
